//! Field ownership, as the apiserver's field manager keeps it: `metadata.managedFields` recorded
//! on every create, update, patch and server-side apply, conflicts between managers, and what an
//! applier stops applying removed when nobody else owns it; and the other merge the field
//! markers drive, strategic merge patch.
//!
//! [`path`] and [`set`] are structured-merge-diff's field paths and sets (`FieldsV1`), [`types`]
//! what a kind's schema says about maps and lists (for both merges), [`walk`] the walks over
//! objects (field sets, comparisons, the apply merge, removal), [`managed`] the entries and the
//! update and apply algorithms, [`strategic`] strategic merge patch. This file is what the write
//! path calls.

mod managed;
mod path;
mod set;
mod strategic;
mod types;
mod walk;

use serde_json::{Value, json};

use crate::error::{ApiError, FieldError};
use crate::kinds::{BuiltinKind, event};
use crate::meta;
use crate::resources::ResourceDef;
pub(crate) use managed::Endpoint;
use managed::{ApplyError, Managed, ManagerId, Operation};
use types::Ty;

/// What the apiserver allows as a manager name (`fieldManager`, and `manager` in an entry).
const MANAGER_MAX_LENGTH: usize = 128;
/// The longest `subresource` an entry may name.
const SUBRESOURCE_MAX_LENGTH: usize = 256;

/// The manager a write is recorded under: `fieldManager`, else the client's User-Agent up to
/// its first `/`, printable characters only, at most 128 bytes; `unknown` when that leaves
/// nothing (kube-rs sends no User-Agent, and the real apiserver records its writes so).
pub(crate) fn manager_name(field_manager: Option<&str>, user_agent: &str) -> String {
    if let Some(m) = field_manager.filter(|m| !m.is_empty()) {
        return m.to_string();
    }
    let prefix = user_agent.split('/').next().unwrap_or("");
    let mut out = String::new();
    for c in prefix.chars().filter(|c| !c.is_control()) {
        if out.len() + c.len_utf8() > MANAGER_MAX_LENGTH {
            break;
        }
        out.push(c);
    }
    if out.is_empty() {
        out.push_str("unknown");
    }
    out
}

fn manager_errors(manager: &str, field: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if manager.len() > MANAGER_MAX_LENGTH {
        errs.push(FieldError {
            kind: crate::error::FieldErrorKind::TooLong,
            field: field.to_string(),
            value: None,
            detail: format!("may not be more than {MANAGER_MAX_LENGTH} bytes"),
        });
    }
    for (i, c) in manager.char_indices() {
        if c.is_control() {
            errs.push(FieldError::invalid(
                field,
                &json!(manager),
                format!("invalid character U+{:04X} (at position {i})", c as u32),
            ));
        }
    }
    errs
}

/// What a write's options say about ownership, checked as the apiserver checks
/// `CreateOptions`, `UpdateOptions` and `PatchOptions` (`options` names which).
pub(crate) fn check_options(
    options: &str,
    field_manager: Option<&str>,
    force: Option<&str>,
    apply: bool,
) -> Result<(), ApiError> {
    let mut errs = Vec::new();
    if options == "PatchOptions" {
        if apply && field_manager.is_none_or(str::is_empty) {
            errs.push(FieldError::required(
                "fieldManager",
                "is required for apply patch",
            ));
        }
        if !apply && force.is_some() {
            errs.push(FieldError::forbidden(
                "force",
                "may not be specified for non-apply patch",
            ));
        }
    }
    errs.extend(manager_errors(field_manager.unwrap_or(""), "fieldManager"));
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid("meta.k8s.io", options, "", &errs))
    }
}

fn root_ty<'a>(def: &'a ResourceDef, version: &str) -> Ty<'a> {
    let schema = match def.version(version).and_then(|v| v.schema.as_deref()) {
        Some(s) => Some(s),
        None => types::builtin_schema(&def.group, &def.kind),
    };
    Ty::root(schema)
}

/// A strategic merge patch of an object of a built-in kind (as the request's version presents
/// it), refused as the apiserver refuses a malformed one: a bad directive is a 400, a list of
/// lists a 422 in the generic words `NewGenericServerResponse` gives it, anything else the
/// library reports (a list item without its merge key, an unknown `$patch`) a 500 with no
/// reason, carrying the library's words.
pub(crate) fn strategic_merge(
    def: &ResourceDef,
    version: &str,
    original: Value,
    patch: serde_json::Map<String, Value>,
) -> Result<Value, ApiError> {
    let original = match original {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    };
    strategic::apply(original, patch, root_ty(def, version))
        .map(Value::Object)
        .map_err(|e| match e {
            strategic::PatchError::BadRequest(m) => ApiError::bad_request(m),
            strategic::PatchError::Unprocessable(_) => ApiError::unprocessable_patch(),
            strategic::PatchError::Other(m) => ApiError::new(500, "", m),
        })
}

fn endpoint(def: &ResourceDef, status: bool) -> Endpoint {
    Endpoint {
        has_status: def.has_status(),
        status,
    }
}

/// Who wrote, through which endpoint, in which version.
/// A stored Event as an events.k8s.io/v1 writer sent it, for its field set: the fields the
/// typed object leaves unset (null when presented) are no one's.
fn owned_shape(stored: &Value) -> Value {
    let mut v = event::to_events_v1(stored);
    if let Some(o) = v.as_object_mut() {
        o.retain(|_, field| !field.is_null());
    }
    v
}

pub(crate) struct Writer<'a> {
    pub def: &'a ResourceDef,
    pub version: &'a str,
    pub status: bool,
    pub manager: &'a str,
}

impl Writer<'_> {
    fn api_version(&self) -> String {
        self.def.api_version(self.version)
    }

    fn id(&self, op: Operation) -> ManagerId {
        ManagerId::new(
            self.manager,
            op,
            &self.api_version(),
            endpoint(self.def, self.status).subresource(),
        )
    }

    /// The managedFields a create, update or non-apply patch leaves: `old` is the stored
    /// object (`None` for a create) and `new` the object about to be stored; `sent` is the
    /// `managedFields` the request's object carried. `None`: the object has none.
    pub fn update(
        &self,
        old: Option<&Value>,
        new: &Value,
        sent: Option<&Value>,
    ) -> Result<Option<Value>, ApiError> {
        let live = old.and_then(|o| o.pointer("/metadata/managedFields"));
        // A subresource write cannot set managedFields; otherwise the request's own list
        // replaces the stored one, an empty list (or one empty entry) starts over, and a list
        // that is absent or unreadable keeps what is stored.
        let start = match sent {
            _ if self.status => Managed::decode(live),
            Some(s) if managed::is_reset(s) => Ok(Managed::default()),
            Some(s) => match Managed::decode(Some(s)) {
                Ok(m) if m.encode().is_some() => Ok(m),
                _ => Managed::decode(live),
            },
            None => Managed::decode(live),
        };
        let Ok(start) = start else {
            // The apiserver drops what it cannot read rather than fail the write.
            return Ok(None);
        };
        let zero;
        let before = match old {
            Some(o) => o,
            None => {
                zero = types::zero_object(&self.def.group, &self.def.kind);
                &zero
            }
        };
        // The apiserver records the fields in the version the writer used: an Event written
        // through events.k8s.io/v1 is owned in that shape, not the core one it is stored in.
        let presented;
        let (before, new) = match self.def.builtin {
            Some(BuiltinKind::EventsV1Event) => {
                let old_shape = match old {
                    Some(o) => owned_shape(o),
                    None => before.clone(),
                };
                presented = (old_shape, owned_shape(new));
                (&presented.0, &presented.1)
            }
            _ => (before, new),
        };
        let (id, api_version, now) = (
            self.id(Operation::Update),
            self.api_version(),
            meta::now_rfc3339(),
        );
        let op = managed::Op {
            ty: root_ty(self.def, self.version),
            id: &id,
            api_version: &api_version,
            endpoint: endpoint(self.def, self.status),
            now: &now,
        };
        let out = managed::record_update(start, before, new, &op).encode();
        if let Some(list) = &out {
            self.check_entries(new, list)?;
        }
        Ok(out)
    }

    /// A server-side apply of `config` to `live` (`None`: the object does not exist yet).
    /// Returns the object to store, carrying its new managedFields, and whether the apply
    /// changed anything but them.
    pub fn apply(
        &self,
        live: Option<&Value>,
        config: &Value,
        force: bool,
    ) -> Result<(Value, bool), ApiError> {
        let def = self.def;
        let want_group = if def.group.is_empty() {
            String::new()
        } else {
            def.group.clone()
        };
        let (group, version) = match meta::str_at(config, "/apiVersion").rsplit_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (
                String::new(),
                meta::str_at(config, "/apiVersion").to_string(),
            ),
        };
        let kind = meta::str_at(config, "/kind");
        if group != want_group || version != self.version || kind != def.kind {
            return Err(ApiError::bad_request(format!(
                "invalid object type: {group}/{version}, Kind={kind}"
            )));
        }
        if config
            .pointer("/metadata/managedFields")
            .is_some_and(|m| !m.is_null())
        {
            return Err(ApiError::bad_request("metadata.managedFields must be nil"));
        }
        let start = Managed::decode(live.and_then(|l| l.pointer("/metadata/managedFields")))
            .map_err(|e| {
                ApiError::new(
                    500,
                    "InternalError",
                    format!("failed to decode managed fields: {e}"),
                )
            })?;
        let mut live_obj = live
            .cloned()
            .unwrap_or_else(|| json!({"apiVersion": config["apiVersion"], "kind": kind}));
        meta::meta_mut(&mut live_obj).remove("managedFields");
        let (id, api_version, now) = (
            self.id(Operation::Apply),
            self.api_version(),
            meta::now_rfc3339(),
        );
        let op = managed::Op {
            ty: root_ty(def, self.version),
            id: &id,
            api_version: &api_version,
            endpoint: endpoint(def, self.status),
            now: &now,
        };
        let applied = managed::apply(start, &live_obj, config, &op, force)
        .map_err(|e| match e {
            ApplyError::Typed(errs) => {
                let ns = meta::str_at(config, "/metadata/namespace");
                let name = meta::str_at(config, "/metadata/name");
                ApiError::new(
                    500,
                    "",
                    format!(
                        "failed to create typed patch object ({ns}/{name}; {group}/{version}, Kind={kind}): {}",
                        walk::type_errors_message(&errs)
                    ),
                )
            }
            ApplyError::Conflicts(c) => managed::conflict_error(&c),
        })?;
        let mut object = applied.object;
        match applied.managed.encode() {
            Some(list) => {
                self.check_entries(&object, &list)?;
                meta::meta_mut(&mut object).insert("managedFields".into(), list);
            }
            None => {
                meta::meta_mut(&mut object).remove("managedFields");
            }
        }
        Ok((object, applied.changed))
    }

    /// ObjectMeta validation of the entries about to be stored.
    fn check_entries(&self, obj: &Value, list: &Value) -> Result<(), ApiError> {
        let mut errs = Vec::new();
        for (i, e) in list.as_array().into_iter().flatten().enumerate() {
            let at = format!("metadata.managedFields[{i}]");
            let op = meta::str_at(e, "/operation");
            if op != "Apply" && op != "Update" {
                errs.push(FieldError::invalid(
                    format!("{at}.operation"),
                    &json!(op),
                    "must be `Apply` or `Update`",
                ));
            }
            errs.extend(manager_errors(
                meta::str_at(e, "/manager"),
                &format!("{at}.manager"),
            ));
            let sub = meta::str_at(e, "/subresource");
            if sub.len() > SUBRESOURCE_MAX_LENGTH {
                errs.push(FieldError {
                    kind: crate::error::FieldErrorKind::TooLong,
                    field: format!("{at}.subresource"),
                    value: None,
                    detail: format!("may not be more than {SUBRESOURCE_MAX_LENGTH} bytes"),
                });
            }
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid(
                &self.def.group,
                &self.def.kind,
                meta::str_at(obj, "/metadata/name"),
                &errs,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A strategic merge patch's failures answer with the apiserver's codes and reasons.
    #[test]
    fn strategic_patch_failures_answer_as_the_apiserver_does() {
        let defs = crate::resources::builtins();
        let deployment = defs.iter().find(|d| d.kind == "Deployment").unwrap();
        let live = serde_json::json!({"metadata": {"name": "d", "finalizers": []},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i:1"}]}}}});
        let refuse = |patch: Value| {
            let Value::Object(patch) = patch else {
                unreachable!()
            };
            strategic_merge(deployment, "v1", live.clone(), patch)
                .unwrap_err()
                .0
        };

        let e = refuse(serde_json::json!({"spec": {"$retainKeys": "x"}}));
        assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
        assert_eq!(e.message, "invalid patch format of retainKeys");

        let e = refuse(serde_json::json!({"metadata": {"finalizers": [["a"]]}}));
        assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
        assert_eq!(
            e.message,
            "the server rejected our request due to an error in our request"
        );

        let e = refuse(serde_json::json!({"spec": {"template": {"spec": {
            "containers": [{"image": "i:2"}]}}}}));
        assert_eq!((e.code, e.reason.as_str()), (500, ""));
        assert_eq!(
            e.message,
            "map: map[image:i:2] does not contain declared merge key: name"
        );

        let ok = strategic_merge(
            deployment,
            "v1",
            live.clone(),
            serde_json::json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i:2"}]}}}})
                .as_object()
                .unwrap()
                .clone(),
        )
        .unwrap();
        assert_eq!(
            ok["spec"]["template"]["spec"]["containers"],
            serde_json::json!([{"name": "c", "image": "i:2"}])
        );
    }

    #[test]
    fn the_default_manager_is_the_user_agent_up_to_its_first_slash() {
        assert_eq!(
            manager_name(None, "kubectl/v1.37.1 (linux/amd64) kubernetes/f78e722"),
            "kubectl"
        );
        assert_eq!(manager_name(Some("mine"), "kubectl/v1.37.1"), "mine");
        assert_eq!(manager_name(Some(""), "kube-rs/1.0"), "kube-rs");
        assert_eq!(manager_name(None, ""), "unknown");
        assert_eq!(manager_name(None, &"a".repeat(300)).len(), 128);
    }

    #[test]
    fn options_are_checked_as_the_apiserver_checks_them() {
        let e = check_options("PatchOptions", None, None, true).unwrap_err();
        assert_eq!(
            e.0.message,
            r#"PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch"#
        );
        let e = check_options("PatchOptions", Some("m"), Some("true"), false).unwrap_err();
        assert_eq!(
            e.0.message,
            r#"PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for non-apply patch"#
        );
        let long = "m".repeat(129);
        let e = check_options("CreateOptions", Some(&long), None, false).unwrap_err();
        assert_eq!(
            e.0.message,
            r#"CreateOptions.meta.k8s.io "" is invalid: fieldManager: Too long: may not be more than 128 bytes"#
        );
        assert!(check_options("UpdateOptions", Some("ok"), None, false).is_ok());
    }
}
