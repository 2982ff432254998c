//! Request bodies in `application/vnd.kubernetes.protobuf`, which kubectl sends for the
//! built-in kinds it creates from flags (`create namespace`, `role`, `rolebinding`, ...) and
//! client-go sends for every built-in kind. kubectl does not fall back to JSON when a server
//! refuses the media type, so the built-in kinds served here are decoded: the `k8s\0` envelope
//! (`runtime.Unknown`), then the object by its kind's field numbers, into the JSON the same
//! object would have been sent as.

use base64::Engine;
use serde_json::{Map, Value, json};

/// How a field is encoded.
#[derive(Clone, Copy)]
enum T {
    Str,
    Int,
    Bool,
    /// `metav1.Time`: whole seconds.
    Time,
    /// `metav1.MicroTime`: microseconds.
    MicroTime,
    Msg(&'static [F]),
    StrMap,
    BytesMap,
    /// `metav1.FieldsV1`: JSON bytes.
    RawJson,
}

/// One field: number, JSON name, type, repeated, and whether a zero value is kept (a pointer in
/// the Go type, so present-and-zero differs from absent).
#[derive(Clone, Copy)]
struct F(u32, &'static str, T, bool, bool);

const fn f(n: u32, name: &'static str, t: T) -> F {
    F(n, name, t, false, false)
}
const fn rep(n: u32, name: &'static str, t: T) -> F {
    F(n, name, t, true, false)
}
const fn opt(n: u32, name: &'static str, t: T) -> F {
    F(n, name, t, false, true)
}

const OWNER_REFERENCE: &[F] = &[
    f(5, "apiVersion", T::Str),
    f(1, "kind", T::Str),
    f(3, "name", T::Str),
    f(4, "uid", T::Str),
    opt(6, "controller", T::Bool),
    opt(7, "blockOwnerDeletion", T::Bool),
];

const MANAGED_FIELDS_ENTRY: &[F] = &[
    f(1, "manager", T::Str),
    f(2, "operation", T::Str),
    f(3, "apiVersion", T::Str),
    f(4, "time", T::Time),
    f(6, "fieldsType", T::Str),
    f(7, "fieldsV1", T::RawJson),
    f(8, "subresource", T::Str),
];

const OBJECT_META: &[F] = &[
    f(1, "name", T::Str),
    f(2, "generateName", T::Str),
    f(3, "namespace", T::Str),
    f(4, "selfLink", T::Str),
    f(5, "uid", T::Str),
    f(6, "resourceVersion", T::Str),
    f(7, "generation", T::Int),
    f(8, "creationTimestamp", T::Time),
    f(9, "deletionTimestamp", T::Time),
    opt(10, "deletionGracePeriodSeconds", T::Int),
    f(11, "labels", T::StrMap),
    f(12, "annotations", T::StrMap),
    rep(13, "ownerReferences", T::Msg(OWNER_REFERENCE)),
    rep(14, "finalizers", T::Str),
    rep(17, "managedFields", T::Msg(MANAGED_FIELDS_ENTRY)),
];

const LABEL_SELECTOR_REQUIREMENT: &[F] = &[
    f(1, "key", T::Str),
    f(2, "operator", T::Str),
    rep(3, "values", T::Str),
];

const LABEL_SELECTOR: &[F] = &[
    f(1, "matchLabels", T::StrMap),
    rep(2, "matchExpressions", T::Msg(LABEL_SELECTOR_REQUIREMENT)),
];

const OBJECT_REFERENCE: &[F] = &[
    f(1, "kind", T::Str),
    f(2, "namespace", T::Str),
    f(3, "name", T::Str),
    f(4, "uid", T::Str),
    f(5, "apiVersion", T::Str),
    f(6, "resourceVersion", T::Str),
    f(7, "fieldPath", T::Str),
];

const LOCAL_OBJECT_REFERENCE: &[F] = &[f(1, "name", T::Str)];

const NAMESPACE_CONDITION: &[F] = &[
    f(1, "type", T::Str),
    f(2, "status", T::Str),
    f(4, "lastTransitionTime", T::Time),
    f(5, "reason", T::Str),
    f(6, "message", T::Str),
];

const NAMESPACE: &[F] = &[
    f(1, "metadata", T::Msg(OBJECT_META)),
    f(2, "spec", T::Msg(&[rep(1, "finalizers", T::Str)])),
    f(
        3,
        "status",
        T::Msg(&[
            f(1, "phase", T::Str),
            rep(2, "conditions", T::Msg(NAMESPACE_CONDITION)),
        ]),
    ),
];

const POLICY_RULE: &[F] = &[
    rep(1, "verbs", T::Str),
    rep(2, "apiGroups", T::Str),
    rep(3, "resources", T::Str),
    rep(4, "resourceNames", T::Str),
    rep(5, "nonResourceURLs", T::Str),
];

const SUBJECT: &[F] = &[
    f(1, "kind", T::Str),
    f(2, "apiGroup", T::Str),
    f(3, "name", T::Str),
    f(4, "namespace", T::Str),
];

const ROLE_REF: &[F] = &[
    f(1, "apiGroup", T::Str),
    f(2, "kind", T::Str),
    f(3, "name", T::Str),
];

const ROLE: &[F] = &[
    f(1, "metadata", T::Msg(OBJECT_META)),
    rep(2, "rules", T::Msg(POLICY_RULE)),
];

const CLUSTER_ROLE: &[F] = &[
    f(1, "metadata", T::Msg(OBJECT_META)),
    rep(2, "rules", T::Msg(POLICY_RULE)),
    f(
        3,
        "aggregationRule",
        T::Msg(&[rep(1, "clusterRoleSelectors", T::Msg(LABEL_SELECTOR))]),
    ),
];

const BINDING: &[F] = &[
    f(1, "metadata", T::Msg(OBJECT_META)),
    rep(2, "subjects", T::Msg(SUBJECT)),
    f(3, "roleRef", T::Msg(ROLE_REF)),
];

const LEASE: &[F] = &[
    f(1, "metadata", T::Msg(OBJECT_META)),
    f(
        2,
        "spec",
        T::Msg(&[
            opt(1, "holderIdentity", T::Str),
            opt(2, "leaseDurationSeconds", T::Int),
            f(3, "acquireTime", T::MicroTime),
            f(4, "renewTime", T::MicroTime),
            opt(5, "leaseTransitions", T::Int),
            opt(6, "strategy", T::Str),
            opt(7, "preferredHolder", T::Str),
        ]),
    ),
];

const EVENT_SOURCE: &[F] = &[f(1, "component", T::Str), f(2, "host", T::Str)];

const EVENT_SERIES: &[F] = &[
    f(1, "count", T::Int),
    f(2, "lastObservedTime", T::MicroTime),
];

const CORE_EVENT: &[F] = &[
    f(1, "metadata", T::Msg(OBJECT_META)),
    f(2, "involvedObject", T::Msg(OBJECT_REFERENCE)),
    f(3, "reason", T::Str),
    f(4, "message", T::Str),
    f(5, "source", T::Msg(EVENT_SOURCE)),
    f(6, "firstTimestamp", T::Time),
    f(7, "lastTimestamp", T::Time),
    f(8, "count", T::Int),
    f(9, "type", T::Str),
    f(10, "eventTime", T::MicroTime),
    f(11, "series", T::Msg(EVENT_SERIES)),
    f(12, "action", T::Str),
    f(13, "related", T::Msg(OBJECT_REFERENCE)),
    f(14, "reportingComponent", T::Str),
    f(15, "reportingInstance", T::Str),
];

const EVENTS_EVENT: &[F] = &[
    f(1, "metadata", T::Msg(OBJECT_META)),
    f(2, "eventTime", T::MicroTime),
    f(3, "series", T::Msg(EVENT_SERIES)),
    f(4, "reportingController", T::Str),
    f(5, "reportingInstance", T::Str),
    f(6, "action", T::Str),
    f(7, "reason", T::Str),
    f(8, "regarding", T::Msg(OBJECT_REFERENCE)),
    f(9, "related", T::Msg(OBJECT_REFERENCE)),
    f(10, "note", T::Str),
    f(11, "type", T::Str),
    f(12, "deprecatedSource", T::Msg(EVENT_SOURCE)),
    f(13, "deprecatedFirstTimestamp", T::Time),
    f(14, "deprecatedLastTimestamp", T::Time),
    f(15, "deprecatedCount", T::Int),
];

const SERVICE_ACCOUNT: &[F] = &[
    f(1, "metadata", T::Msg(OBJECT_META)),
    rep(2, "secrets", T::Msg(OBJECT_REFERENCE)),
    rep(3, "imagePullSecrets", T::Msg(LOCAL_OBJECT_REFERENCE)),
    opt(4, "automountServiceAccountToken", T::Bool),
];

const CONFIG_MAP: &[F] = &[
    f(1, "metadata", T::Msg(OBJECT_META)),
    f(2, "data", T::StrMap),
    f(3, "binaryData", T::BytesMap),
    opt(4, "immutable", T::Bool),
];

const SECRET: &[F] = &[
    f(1, "metadata", T::Msg(OBJECT_META)),
    f(2, "data", T::BytesMap),
    f(3, "type", T::Str),
    f(4, "stringData", T::StrMap),
    opt(5, "immutable", T::Bool),
];

/// The kinds whose protobuf form is decoded, by group and kind.
fn message(group: &str, kind: &str) -> Option<&'static [F]> {
    Some(match (group, kind) {
        ("", "Namespace") => NAMESPACE,
        ("", "ServiceAccount") => SERVICE_ACCOUNT,
        ("", "ConfigMap") => CONFIG_MAP,
        ("", "Secret") => SECRET,
        ("", "Event") => CORE_EVENT,
        ("events.k8s.io", "Event") => EVENTS_EVENT,
        ("coordination.k8s.io", "Lease") => LEASE,
        ("rbac.authorization.k8s.io", "Role") => ROLE,
        ("rbac.authorization.k8s.io", "ClusterRole") => CLUSTER_ROLE,
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => BINDING,
        _ => return None,
    })
}

/// Whether bodies of this kind can be sent as protobuf.
pub fn decodes(group: &str, kind: &str) -> bool {
    message(group, kind).is_some()
}

/// One field as read off the wire.
enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = self
                .buf
                .split_first()
                .ok_or("unexpected end of data in a varint")?;
            self.buf = rest;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint overflows 64 bits".into())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.buf.len() < n {
            return Err("unexpected end of data".into());
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn next(&mut self) -> Result<Option<(u32, Wire<'a>)>, String> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let num = u32::try_from(key >> 3).map_err(|_| "field number out of range")?;
        let wire = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Wire::Fixed
            }
            2 => {
                let n = usize::try_from(self.varint()?).map_err(|_| "length out of range")?;
                Wire::Bytes(self.take(n)?)
            }
            5 => {
                self.take(4)?;
                Wire::Fixed
            }
            w => return Err(format!("unsupported wire type {w} for field {num}")),
        };
        Ok(Some((num, wire)))
    }
}

fn utf8(b: &[u8]) -> Result<String, String> {
    String::from_utf8(b.to_vec()).map_err(|e| format!("invalid UTF-8: {e}"))
}

fn time(b: &[u8], micro: bool) -> Result<Value, String> {
    let (mut secs, mut nanos) = (0i64, 0i64);
    let mut r = Reader { buf: b };
    while let Some((n, w)) = r.next()? {
        match (n, w) {
            (1, Wire::Varint(v)) => secs = v as i64,
            (2, Wire::Varint(v)) => nanos = i64::from(v as i32),
            _ => {}
        }
    }
    if secs == 0 && nanos == 0 {
        return Ok(Value::Null);
    }
    let ts = jiff::Timestamp::new(secs, if micro { nanos as i32 } else { 0 })
        .map_err(|e| format!("invalid time: {e}"))?;
    let fmt = if micro {
        "%Y-%m-%dT%H:%M:%S%.6fZ"
    } else {
        "%Y-%m-%dT%H:%M:%SZ"
    };
    Ok(json!(ts.strftime(fmt).to_string()))
}

fn map_entry(b: &[u8], bytes: bool) -> Result<(String, Value), String> {
    let (mut k, mut v) = (String::new(), Value::String(String::new()));
    let mut r = Reader { buf: b };
    while let Some((n, w)) = r.next()? {
        match (n, w) {
            (1, Wire::Bytes(b)) => k = utf8(b)?,
            (2, Wire::Bytes(b)) if bytes => {
                v = json!(base64::engine::general_purpose::STANDARD.encode(b));
            }
            (2, Wire::Bytes(b)) => v = json!(utf8(b)?),
            _ => {}
        }
    }
    Ok((k, v))
}

fn field_value(t: T, w: Wire<'_>) -> Result<Value, String> {
    Ok(match (t, w) {
        (T::Str, Wire::Bytes(b)) => json!(utf8(b)?),
        (T::Int, Wire::Varint(v)) => json!(v as i64),
        (T::Bool, Wire::Varint(v)) => json!(v != 0),
        (T::Time, Wire::Bytes(b)) => time(b, false)?,
        (T::MicroTime, Wire::Bytes(b)) => time(b, true)?,
        (T::Msg(fields), Wire::Bytes(b)) => decode_message(fields, b)?,
        (T::RawJson, Wire::Bytes(b)) => {
            // FieldsV1 { bytes Raw = 1 }: the raw JSON.
            let mut r = Reader { buf: b };
            let mut out = json!({});
            while let Some((n, w)) = r.next()? {
                if let (1, Wire::Bytes(raw)) = (n, w) {
                    out = serde_json::from_slice(raw).map_err(|e| format!("fieldsV1: {e}"))?;
                }
            }
            out
        }
        _ => return Err("a field's wire type does not match its type".into()),
    })
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_i64() == Some(0),
        Value::Bool(b) => !b,
        _ => false,
    }
}

fn decode_message(fields: &'static [F], b: &[u8]) -> Result<Value, String> {
    let mut out = Map::new();
    let mut r = Reader { buf: b };
    while let Some((num, w)) = r.next()? {
        // Fields this table does not know are skipped, as a decoder of an older type would.
        let Some(&F(_, name, t, repeated, keep_zero)) = fields.iter().find(|f| f.0 == num) else {
            continue;
        };
        match t {
            T::StrMap | T::BytesMap => {
                let Wire::Bytes(e) = w else {
                    return Err(format!("{name}: a map entry must be length-delimited"));
                };
                let (k, v) = map_entry(e, matches!(t, T::BytesMap))?;
                let m = out.entry(name).or_insert_with(|| json!({}));
                if let Some(m) = m.as_object_mut() {
                    m.insert(k, v);
                }
            }
            _ if repeated => {
                let v = field_value(t, w).map_err(|e| format!("{name}: {e}"))?;
                let a = out.entry(name).or_insert_with(|| json!([]));
                if let Some(a) = a.as_array_mut() {
                    a.push(v);
                }
            }
            _ => {
                let v = field_value(t, w).map_err(|e| format!("{name}: {e}"))?;
                if keep_zero || !is_zero(&v) {
                    out.insert(name.to_string(), v);
                } else {
                    out.remove(name);
                }
            }
        }
    }
    Ok(Value::Object(out))
}

/// Decodes a protobuf body of a built-in kind into its JSON form, with the `apiVersion` and
/// `kind` its envelope names. `Err` says why it cannot be read.
pub fn decode(group: &str, kind: &str, body: &[u8]) -> Result<Value, String> {
    let fields =
        message(group, kind).ok_or_else(|| format!("no protobuf decoding for kind {kind:?}"))?;
    let rest = body.strip_prefix(b"k8s\0").ok_or(
        "provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]",
    )?;
    let (mut api_version, mut type_kind, mut raw) = (String::new(), String::new(), None);
    let mut r = Reader { buf: rest };
    while let Some((n, w)) = r.next()? {
        match (n, w) {
            (1, Wire::Bytes(tm)) => {
                let mut t = Reader { buf: tm };
                while let Some((n, w)) = t.next()? {
                    match (n, w) {
                        (1, Wire::Bytes(b)) => api_version = utf8(b)?,
                        (2, Wire::Bytes(b)) => type_kind = utf8(b)?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(b)) => raw = Some(b),
            (3, Wire::Bytes(enc)) if !enc.is_empty() => {
                return Err(format!(
                    "unsupported content encoding {:?}",
                    String::from_utf8_lossy(enc)
                ));
            }
            _ => {}
        }
    }
    let mut obj = decode_message(fields, raw.unwrap_or_default())?;
    if let Some(o) = obj.as_object_mut() {
        o.insert("apiVersion".into(), json!(api_version));
        o.insert("kind".into(), json!(type_kind));
    }
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kubectl 1.37's body for `kubectl create namespace foo`.
    const NAMESPACE_FOO: &[u8] = &[
        0x6b, 0x38, 0x73, 0x00, 0x0a, 0x0f, 0x0a, 0x02, 0x76, 0x31, 0x12, 0x09, 0x4e, 0x61, 0x6d,
        0x65, 0x73, 0x70, 0x61, 0x63, 0x65, 0x12, 0x1b, 0x0a, 0x13, 0x0a, 0x03, 0x66, 0x6f, 0x6f,
        0x12, 0x00, 0x1a, 0x00, 0x22, 0x00, 0x2a, 0x00, 0x32, 0x00, 0x38, 0x00, 0x42, 0x00, 0x12,
        0x00, 0x1a, 0x02, 0x0a, 0x00, 0x1a, 0x00, 0x22, 0x00,
    ];

    /// kubectl 1.37's body for `kubectl create secret generic s1 --from-literal=a=b --type=mytype`.
    const SECRET_S1: &[u8] = &[
        0x6b, 0x38, 0x73, 0x00, 0x0a, 0x0c, 0x0a, 0x02, 0x76, 0x31, 0x12, 0x06, 0x53, 0x65, 0x63,
        0x72, 0x65, 0x74, 0x12, 0x24, 0x0a, 0x12, 0x0a, 0x02, 0x73, 0x31, 0x12, 0x00, 0x1a, 0x00,
        0x22, 0x00, 0x2a, 0x00, 0x32, 0x00, 0x38, 0x00, 0x42, 0x00, 0x12, 0x06, 0x0a, 0x01, 0x61,
        0x12, 0x01, 0x62, 0x1a, 0x06, 0x6d, 0x79, 0x74, 0x79, 0x70, 0x65, 0x1a, 0x00, 0x22, 0x00,
    ];

    #[test]
    fn kubectls_namespace_decodes_to_its_json_form() {
        let v = decode("", "Namespace", NAMESPACE_FOO).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "foo"}, "spec": {}, "status": {}})
        );
    }

    #[test]
    fn secret_data_is_base64_as_in_json() {
        let v = decode("", "Secret", SECRET_S1).unwrap();
        assert_eq!(v["data"], json!({"a": "Yg=="}));
        assert_eq!(v["type"], "mytype");
        assert_eq!(v["metadata"], json!({"name": "s1"}));
    }

    #[test]
    fn what_cannot_be_read_says_why() {
        assert!(
            decode("", "Namespace", b"{}")
                .unwrap_err()
                .contains("expected prefix")
        );
        assert!(decode("example.com", "Widget", NAMESPACE_FOO).is_err());
        let cut = &NAMESPACE_FOO[..NAMESPACE_FOO.len() - 6];
        assert!(decode("", "Namespace", cut).is_err());
        assert!(decodes("rbac.authorization.k8s.io", "RoleBinding"));
        assert!(!decodes("apps", "Deployment"));
    }

    #[test]
    fn times_and_kept_zeroes() {
        // LeaseSpec { leaseDurationSeconds: 0, renewTime: 1700000000.5 }
        let spec = [
            0x10, 0x00, 0x22, 0x0c, 0x08, 0x80, 0xe2, 0xcf, 0xaa, 0x06, 0x10, 0x80, 0xca, 0xb5,
            0xee, 0x01,
        ];
        let v = decode_message(
            match LEASE[1].2 {
                T::Msg(m) => m,
                _ => unreachable!(),
            },
            &spec,
        )
        .unwrap();
        assert_eq!(
            v["leaseDurationSeconds"], 0,
            "a pointer field keeps its zero"
        );
        assert_eq!(v["renewTime"], "2023-11-14T22:13:20.500000Z");
    }
}
