//! Reads: one object, lists with selectors, and `limit`/`continue` pages.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube::core::response::{StatusCause, StatusDetails};
use serde_json::{Value, json};

use super::Plane;
use crate::error::{ApiError, FieldError, FieldErrorKind};
use crate::hooks::ResourceKey;
use crate::resources::ResourceDef;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{ObjKey, key_of};

/// One page of a list, and the resourceVersion it was read at.
pub(crate) struct ListResult {
    pub items: Vec<Arc<Value>>,
    pub rv: u64,
    pub cont: Option<String>,
    /// How many objects come after this page (sent only for a list without selectors).
    pub remaining: Option<u64>,
}

/// What a list asks for, from its query string.
pub(crate) struct ListQuery<'a> {
    pub labels: &'a LabelSelector,
    pub fields: &'a FieldSelector,
    pub limit: Option<usize>,
    pub cont: Option<&'a str>,
    pub resource_version: Option<&'a str>,
    pub resource_version_match: Option<&'a str>,
}

/// A stored object as `def` (if any) presents it.
fn present(def: Option<&ResourceDef>, v: &Value) -> Value {
    match def {
        Some(d) => d.present(&d.preferred().name, v).into_owned(),
        None => v.clone(),
    }
}

/// The resourceVersion a read is served at.
#[derive(Debug, Clone, PartialEq)]
enum ReadAt {
    /// The newest state (no resourceVersion, or `0`: any).
    Latest,
    /// At least this resourceVersion: the newest state, once it is that new.
    NotOlderThan(u64),
    /// Exactly this one, rebuilt from history.
    Exact(u64),
    /// A `continue` page: the snapshot the first page was read at (`None`: the newest state,
    /// as after an expired token), after a key.
    Continue(Option<u64>, ObjKey),
}

/// How long a read waits for a resourceVersion the plane has not reached, before answering
/// "Too large resource version" (the watch cache's wait).
pub(crate) const TOO_LARGE_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// A `continue` token as the apiserver encodes one: base64url of
/// `{"v":"meta.k8s.io/v1","rv":<rv>,"start":"<key>\u0000"}` (rv -1: continue at the newest state).
fn encode_continue(rv: Option<u64>, key: &ObjKey) -> String {
    use base64::Engine;
    let start = if key.0.is_empty() {
        format!("{}\0", key.1)
    } else {
        format!("{}/{}\0", key.0, key.1)
    };
    let rv: i64 = rv.map(|r| r as i64).unwrap_or(-1);
    let token = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": start});
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(token.to_string())
}

fn decode_continue(token: &str, namespaced: bool) -> Result<(Option<u64>, ObjKey), ApiError> {
    use base64::Engine;
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    // Go's base64.RawURLEncoding, which the apiserver decodes with: trailing bits are ignored.
    const RAW_URL: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::URL_SAFE,
        GeneralPurposeConfig::new()
            .with_decode_allow_trailing_bits(true)
            .with_decode_padding_mode(DecodePaddingMode::RequireNone),
    );
    let invalid = |why: &str| {
        let mut m = "invalid continue token: continue key is not valid".to_string();
        if !why.is_empty() {
            m.push_str(": ");
            m.push_str(why);
        }
        ApiError::bad_request(m)
    };
    let raw = RAW_URL
        .decode(token.trim_end_matches('='))
        .map_err(|e| invalid(&go_base64_error(&e)))?;
    let v: Value = serde_json::from_slice(&raw).map_err(|e| invalid(&go_json_error(&raw, &e)))?;
    if v.get("v").and_then(Value::as_str) != Some("meta.k8s.io/v1") {
        return Err(invalid("server does not recognize this encoded key"));
    }
    let rv = v.get("rv").and_then(Value::as_i64).unwrap_or(0);
    if rv == 0 || rv < -1 {
        return Err(invalid(
            "incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        ));
    }
    let start = v.get("start").and_then(Value::as_str).unwrap_or("");
    let start = start.strip_suffix('\0').unwrap_or(start);
    if start.is_empty() {
        return Err(invalid("encoded start key empty (version meta.k8s.io/v1)"));
    }
    let key = match start.split_once('/') {
        Some((ns, name)) if namespaced => (ns.to_string(), name.to_string()),
        _ => (String::new(), start.to_string()),
    };
    Ok(((rv > 0).then_some(rv as u64), key))
}

/// Go's `base64.CorruptInputError` text for what the decoder refused.
fn go_base64_error(e: &base64::DecodeError) -> String {
    let at = match e {
        base64::DecodeError::InvalidByte(at, _) | base64::DecodeError::InvalidLastSymbol(at, _) => {
            *at
        }
        base64::DecodeError::InvalidLength(len) => *len,
        base64::DecodeError::InvalidPadding => 0,
    };
    format!("illegal base64 data at input byte {at}")
}

/// encoding/json's syntax error where Go's decoder words it as Rust's does not: bytes that
/// cannot begin a value, or nothing at all; otherwise serde's own words.
fn go_json_error(raw: &[u8], e: &serde_json::Error) -> String {
    match raw
        .iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
    {
        None => "unexpected end of JSON input".into(),
        Some(b) if !b"{[\"-0123456789tfn".contains(b) => {
            format!(
                "invalid character {} looking for beginning of value",
                go_quote_char(*b)
            )
        }
        Some(_) => e.to_string(),
    }
}

/// encoding/json's `quoteChar`: a byte as Go quotes it in a syntax error (the byte taken as
/// the rune of the same value).
fn go_quote_char(b: u8) -> String {
    match b {
        b'\'' => r"'\''".into(),
        b'"' => "'\"'".into(),
        b'\\' => r"'\\'".into(),
        0x07 => r"'\a'".into(),
        0x08 => r"'\b'".into(),
        0x0c => r"'\f'".into(),
        b'\n' => r"'\n'".into(),
        b'\r' => r"'\r'".into(),
        b'\t' => r"'\t'".into(),
        0x0b => r"'\v'".into(),
        0x00..=0x1f | 0x7f => format!(r"'\x{b:02x}'"),
        // Go's unicode.IsPrint: C1 controls, the no-break space and the soft hyphen are not.
        0x80..=0xa0 | 0xad => format!(r"'\u{:04x}'", b),
        _ => format!("'{}'", char::from(b)),
    }
}

fn parse_rv(s: &str) -> Result<u64, ApiError> {
    s.parse::<u64>()
        .map_err(|_| ApiError::bad_request(invalid_rv_message(s)))
}

/// The apiserver's words for a resourceVersion that is not a number: its field error, with
/// strconv.ParseUint's reason.
pub(crate) fn invalid_rv_message(s: &str) -> String {
    let reason = if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        "value out of range"
    } else {
        "invalid syntax"
    };
    format!(
        "invalid resource version: resourceVersion: Invalid value: {s:?}: strconv.ParseUint: \
         parsing {s:?}: {reason}"
    )
}

/// `ListOptions` as the apiserver validates them, and the resourceVersion they ask for.
fn read_at(q: &ListQuery<'_>, namespaced: bool) -> Result<ReadAt, ApiError> {
    let rv = q.resource_version.filter(|r| !r.is_empty());
    let cont = q.cont.filter(|c| !c.is_empty());
    if let Some(m) = q.resource_version_match.filter(|m| !m.is_empty()) {
        let mut errs = Vec::new();
        if rv.is_none() {
            errs.push(FieldError::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if cont.is_some() {
            errs.push(FieldError::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden when continue is provided",
            ));
        }
        if m != "Exact" && m != "NotOlderThan" {
            errs.push(FieldError {
                kind: FieldErrorKind::NotSupported,
                field: "resourceVersionMatch".into(),
                value: Some(format!("{m:?}")),
                detail: r#"supported values: "Exact", "NotOlderThan", """#.into(),
            });
        }
        if m == "Exact" && rv == Some("0") {
            errs.push(FieldError::forbidden(
                "resourceVersionMatch",
                r#"resourceVersionMatch "exact" is forbidden for resourceVersion "0""#,
            ));
        }
        if !errs.is_empty() {
            return Err(ApiError::invalid("meta.k8s.io", "ListOptions", "", &errs));
        }
    }
    if let Some(c) = cont {
        // The token is read first: a bad one is refused as such whatever else is asked.
        let (at, key) = decode_continue(c, namespaced)?;
        if rv.is_some_and(|r| r != "0") {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        return Ok(ReadAt::Continue(at, key));
    }
    let Some(rv) = rv.filter(|r| *r != "0") else {
        return Ok(ReadAt::Latest);
    };
    let n = parse_rv(rv)?;
    Ok(match q.resource_version_match.filter(|m| !m.is_empty()) {
        Some("Exact") => ReadAt::Exact(n),
        Some(_) => ReadAt::NotOlderThan(n),
        // Without a match, a paged list reads exactly there (the legacy rule), an unpaged one
        // at least there.
        None if q.limit.is_some_and(|l| l > 0) => ReadAt::Exact(n),
        None => ReadAt::NotOlderThan(n),
    })
}

/// The 504 a read at a resourceVersion the plane has not reached gets.
fn too_large(want: u64, current: u64) -> ApiError {
    let mut e = ApiError::new(
        504,
        "Timeout",
        format!("Timeout: Too large resource version: {want}, current: {current}"),
    );
    e.0.details = Some(StatusDetails {
        name: String::new(),
        group: String::new(),
        kind: String::new(),
        uid: String::new(),
        causes: vec![StatusCause {
            reason: "ResourceVersionTooLarge".into(),
            message: "Too large resource version".into(),
            field: String::new(),
        }],
        retry_after_seconds: 1,
    });
    e
}

/// The 410 for a `continue` token older than history: a new token in the Status continues at
/// the newest state, which the message warns is no longer one consistent list.
fn continue_expired(key: &ObjKey) -> ApiError {
    let mut e = ApiError::expired(
        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
    );
    e.0.metadata = Some(ListMeta {
        continue_: Some(encode_continue(None, key)),
        ..Default::default()
    });
    e
}

impl Plane {
    /// Where the objects of the kind served at `res` are stored, and, when that is another
    /// kind's store (events.k8s.io Events live with core ones), the kind whose view they are
    /// read through.
    pub(super) fn view(&self, res: &ResourceKey) -> (ResourceKey, Option<Arc<ResourceDef>>) {
        match self.def(res) {
            Some(def) if def.key() != *res => (def.key(), Some(def)),
            _ => (res.clone(), None),
        }
    }

    /// The stored object, as a GET of the kind served at `res` would return it.
    pub fn object(&self, res: &ResourceKey, namespace: Option<&str>, name: &str) -> Option<Value> {
        let (key, def) = self.view(res);
        let st = self.read();
        let v = st.store.get(&key, namespace.unwrap_or(""), name)?;
        Some(present(def.as_deref(), v))
    }

    /// All stored objects of a kind (in one namespace, or all), as a list of it would return
    /// them.
    pub fn objects(&self, res: &ResourceKey, namespace: Option<&str>) -> Vec<Value> {
        let (key, def) = self.view(res);
        self.read()
            .store
            .range(&key, namespace, None)
            .map(|(_, v)| present(def.as_deref(), v))
            .collect()
    }

    /// How many objects of a kind there are (in one namespace, or all), and how many of them
    /// `pred` accepts. Nothing is copied (but for a kind read through another's view), but it
    /// scans under the read lock; to poll while the plane is busy, use [`Plane::tally`].
    pub fn count_where(
        &self,
        res: &ResourceKey,
        namespace: Option<&str>,
        pred: impl Fn(&Value) -> bool,
    ) -> (usize, usize) {
        let (key, def) = self.view(res);
        self.read()
            .store
            .range(&key, namespace, None)
            .fold((0, 0), |(n, ok), (_, v)| {
                let seen = match &def {
                    Some(d) => pred(&d.present(&d.preferred().name, v)),
                    None => pred(v),
                };
                (n + 1, ok + usize::from(seen))
            })
    }

    pub(crate) fn get(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Arc<Value>, ApiError> {
        self.read()
            .store
            .get(&def.key(), ns.unwrap_or(""), name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&def.group, &def.plural, name))
    }

    /// The resourceVersion a read waits for before it can be answered, if it names one.
    pub(crate) fn wants_rv(resource_version: Option<&str>, cont: Option<&str>) -> Option<u64> {
        if cont.is_some_and(|c| !c.is_empty()) {
            return None;
        }
        resource_version
            .and_then(|r| r.parse::<u64>().ok())
            .filter(|r| *r > 0)
    }

    /// Waits (at most [`TOO_LARGE_WAIT`]) until the plane reaches `rv`, as the watch cache
    /// waits before answering that a resourceVersion is too large.
    pub(crate) async fn wait_for_rv(&self, rv: u64) {
        let mut rx = {
            let st = self.read();
            if st.store.rv() >= rv {
                return;
            }
            st.store.subscribe()
        };
        let deadline = tokio::time::sleep(TOO_LARGE_WAIT);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                _ = &mut deadline => return,
                r = rx.recv() => match r {
                    Ok(e) if e.rv >= rv => return,
                    Ok(_) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        if self.resource_version() >= rv {
                            return;
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    }

    /// GET of one object; a `resourceVersion` asks for at least that version of the plane.
    pub(crate) fn get_at(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        name: &str,
        resource_version: Option<&str>,
    ) -> Result<Arc<Value>, ApiError> {
        if let Some(rv) = resource_version.filter(|r| !r.is_empty() && *r != "0") {
            let want = parse_rv(rv)?;
            let current = self.resource_version();
            if want > current {
                return Err(too_large(want, current));
            }
        }
        self.get(def, ns, name)
    }

    pub(crate) fn list(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        q: &ListQuery<'_>,
    ) -> Result<ListResult, ApiError> {
        let at = read_at(q, def.namespaced)?;
        let st = self.read();
        let key = def.key();
        let current = st.store.rv();
        let (rv, after) = match &at {
            ReadAt::Latest => (current, None),
            ReadAt::NotOlderThan(n) | ReadAt::Exact(n) if *n > current => {
                return Err(too_large(*n, current));
            }
            ReadAt::NotOlderThan(_) => (current, None),
            ReadAt::Exact(n) => (*n, None),
            ReadAt::Continue(Some(n), k) => (*n, Some(k.clone())),
            ReadAt::Continue(None, k) => (current, Some(k.clone())),
        };
        let matches = |v: &Value| q.labels.matches(v) && q.fields.matches(v);
        if let (Some(name), true) = (q.fields.pinned_name(), rv == current && after.is_none()) {
            // A name-pinned list (kubectl wait, get by name -w) is a lookup, not a scan.
            let items: Vec<Arc<Value>> = match ns {
                Some(ns) => st.store.get(&key, ns, name).into_iter().cloned().collect(),
                None => st
                    .store
                    .range(&key, None, None)
                    .filter(|(k, _)| k.1 == name)
                    .map(|(_, v)| v.clone())
                    .collect(),
            };
            let items = items.into_iter().filter(|v| matches(v)).collect();
            return Ok(ListResult {
                items,
                rv,
                cont: None,
                remaining: None,
            });
        }
        let Some(objects) = st.store.range_at(&key, ns, after.as_ref(), rv) else {
            return Err(match &at {
                ReadAt::Continue(_, k) => continue_expired(k),
                _ => ApiError::expired("The resourceVersion for the provided list is too old."),
            });
        };
        let limit = q.limit.filter(|l| *l > 0);
        let mut items: Vec<Arc<Value>> = Vec::new();
        let mut cont_out = None;
        let mut remaining = None;
        for (_, v) in objects.filter(|(_, v)| matches(v)) {
            if limit.is_some_and(|l| items.len() == l) {
                let last = key_of(items.last().expect("limit > 0"));
                cont_out = Some(encode_continue(Some(rv), &last));
                let selected = !q.labels.is_empty() || !q.fields.is_empty();
                if !selected {
                    // Counted without rebuilding a key or an object, at the newest state or
                    // an older one alike (`count_at`).
                    let rest = st.store.count_at(&key, ns, Some(&last), rv).unwrap_or(0);
                    remaining = Some(rest as u64);
                }
                break;
            }
            items.push(v);
        }
        Ok(ListResult {
            items,
            rv,
            cont: cont_out,
            remaining,
        })
    }
}
