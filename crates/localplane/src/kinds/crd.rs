//! CustomResourceDefinitions as objects: checked as the apiextensions apiserver checks what
//! localplane relies on, and given the status its controllers write once the names are accepted
//! and the kind is served (which here happens in the same write).

use serde_json::{Value, json};

use crate::error::{FieldError, FieldErrorKind};

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or("")
}

pub fn validate(crd: &Value) -> Vec<FieldError> {
    let mut errs = vec![];
    let group = s(crd, "/spec/group");
    let plural = s(crd, "/spec/names/plural");
    let name = s(crd, "/metadata/name");
    if group.is_empty() {
        errs.push(FieldError::required("spec.group", ""));
    } else if !group.contains('.') {
        errs.push(FieldError::invalid(
            "spec.group",
            &json!(group),
            "should be a domain with at least one dot",
        ));
    }
    if plural.is_empty() {
        errs.push(FieldError::required("spec.names.plural", ""));
    }
    if s(crd, "/spec/names/kind").is_empty() {
        errs.push(FieldError::required("spec.names.kind", ""));
    }
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        errs.push(FieldError::invalid(
            "metadata.name",
            &json!(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    let scope = s(crd, "/spec/scope");
    if scope != "Namespaced" && scope != "Cluster" {
        errs.push(FieldError {
            kind: FieldErrorKind::NotSupported,
            field: "spec.scope".into(),
            value: Some(format!("{scope:?}")),
            detail: "supported values: \"Cluster\", \"Namespaced\"".into(),
        });
    }
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        errs.push(FieldError::invalid(
            "spec.versions",
            &json!(null),
            "must have exactly one version marked as storage version",
        ));
    } else {
        let storage = versions
            .iter()
            .filter(|v| v.get("storage") == Some(&json!(true)))
            .count();
        if storage != 1 {
            errs.push(FieldError {
                kind: FieldErrorKind::Invalid,
                field: "spec.versions".into(),
                value: Some(format!(
                    "[]apiextensions.CustomResourceDefinitionVersion{{...{} versions}}",
                    versions.len()
                )),
                detail: "must have exactly one version marked as storage version".into(),
            });
        }
        if !versions
            .iter()
            .any(|v| v.get("served") == Some(&json!(true)))
        {
            errs.push(FieldError::invalid(
                "spec.versions",
                &json!("..."),
                "must have at least one served version",
            ));
        }
    }
    errs
}

/// The status the apiextensions controllers give a CRD whose names were accepted and whose kind
/// is served.
pub fn established(crd: &mut Value) {
    let now = crate::meta::now_rfc3339();
    let storage: Vec<Value> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter(|v| v.get("storage") == Some(&json!(true)))
                .filter_map(|v| v.get("name").cloned())
                .collect()
        })
        .unwrap_or_default();
    let condition = |ty: &str, reason: &str, message: &str| json!({"type": ty, "status": "True", "lastTransitionTime": now, "reason": reason, "message": message});
    crd["status"] = json!({
        "acceptedNames": crd.pointer("/spec/names").cloned().unwrap_or_else(|| json!({})),
        "conditions": [
            condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "storedVersions": storage,
    });
}
