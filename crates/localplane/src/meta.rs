//! Server-managed metadata: uids, timestamps, names, and the comparisons that decide whether a
//! write bumps `generation`.

use rand::Rng;
use serde_json::{Value, json};

use crate::error::FieldError;

/// ObjectMeta's scalar fields, as the apiserver types them: the leaves of every kind's typed
/// `metadata`, and (with its maps and lists) what pruning keeps there.
pub const OBJECT_META_SCALARS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// RFC 3339 with second precision, as `metav1.Time` serialises.
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// A random (version 4) UUID.
pub fn new_uid() -> String {
    let mut b: [u8; 16] = rand::rng().random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex::encode(b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// The 5-character suffix `generateName` gets (apimachinery's alphabet avoids vowels and
/// look-alike digits).
pub fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut r = rand::rng();
    (0..5)
        .map(|_| ALPHABET[r.random_range(0..ALPHABET.len())] as char)
        .collect()
}

fn is_label(s: &str) -> bool {
    s.len() <= 63 && is_label_shaped(s)
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?` of any length: the apiserver caps a subdomain as a whole (253),
/// not each of its dot-separated parts.
fn is_label_shaped(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

/// `metadata.name` validation: DNS-1123 subdomain, or label for namespaces.
pub fn validate_name(name: &str, label_only: bool) -> Vec<FieldError> {
    let v = json!(name);
    if label_only {
        if is_label(name) {
            return vec![];
        }
        let mut errs = vec![];
        if name.len() > 63 {
            errs.push(FieldError::invalid(
                "metadata.name",
                &v,
                "must be no more than 63 characters",
            ));
        }
        errs.push(FieldError::invalid("metadata.name", &v, LABEL_MSG));
        return errs;
    }
    let ok = name.len() <= 253 && name.split('.').all(is_label_shaped);
    if ok {
        return vec![];
    }
    let mut errs = vec![];
    if name.len() > 253 {
        errs.push(FieldError::invalid(
            "metadata.name",
            &v,
            "must be no more than 253 characters",
        ));
    }
    errs.push(FieldError::invalid("metadata.name", &v, SUBDOMAIN_MSG));
    errs
}

/// `metadata.name` of the RBAC kinds: any path segment (`path.ValidatePathSegmentName`), so
/// the bootstrap roles' `system:` names are valid, as the real apiserver showed.
pub fn validate_path_segment_name(name: &str) -> Vec<FieldError> {
    let v = json!(name);
    let mut errs = vec![];
    if name == "." || name == ".." {
        errs.push(FieldError::invalid(
            "metadata.name",
            &v,
            format!("may not be '{name}'"),
        ));
    }
    for bad in ["/", "%"] {
        if name.contains(bad) {
            errs.push(FieldError::invalid(
                "metadata.name",
                &v,
                format!("may not contain '{bad}'"),
            ));
        }
    }
    errs
}

/// A qualified name (`name` or `prefix/name`), with Go's messages for what is wrong with it.
pub fn qualified_name_errors(v: &str) -> Vec<String> {
    const NAME_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    let parts: Vec<&str> = v.split('/').collect();
    let mut errs = vec![];
    let name = match parts.as_slice() {
        [n] => *n,
        [prefix, n] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else if !validate_name(prefix, false).is_empty() {
                errs.push("prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_string());
            }
            n
        }
        _ => {
            return vec!["a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".to_string()];
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".into());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".into());
    }
    let b = name.as_bytes();
    let shaped = !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'));
    if !shaped {
        errs.push(NAME_MSG.into());
    }
    errs
}

/// Go's `IsValidLabelValue`: empty, or at most 63 characters of `[-A-Za-z0-9_.]` that start and
/// end alphanumerically.
pub fn label_value_errors(v: &str) -> Vec<String> {
    let mut errs = vec![];
    if v.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    let b = v.as_bytes();
    let shaped = b.is_empty()
        || (b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')));
    if !shaped {
        errs.push("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".to_string());
    }
    errs
}

/// A JSON-pointer lookup through object keys only. `Value::pointer` unescapes (and allocates)
/// per segment; this sits on every request's path and our pointers have no escapes.
pub fn at<'a>(obj: &'a Value, ptr: &str) -> Option<&'a Value> {
    ptr.split('/').skip(1).try_fold(obj, |v, seg| v.get(seg))
}

pub fn str_at<'a>(obj: &'a Value, ptr: &str) -> &'a str {
    at(obj, ptr).and_then(Value::as_str).unwrap_or("")
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub fn meta_mut(obj: &mut Value) -> &mut serde_json::Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    obj["metadata"]
        .as_object_mut()
        .expect("metadata was just made an object")
}

/// Whether the parts of an object that `generation` tracks differ: everything but metadata, and
/// also but status when the kind has a status subresource.
pub fn spec_changed(old: &Value, new: &Value, has_status: bool) -> bool {
    let skip = |k: &str| k == "metadata" || (has_status && k == "status");
    let (Some(o), Some(n)) = (old.as_object(), new.as_object()) else {
        return old != new;
    };
    let keys = o.keys().chain(n.keys()).filter(|k| !skip(k));
    for k in keys {
        if o.get(k) != n.get(k) {
            return true;
        }
    }
    false
}

/// Whether two versions of an object are equal apart from `resourceVersion` (an unchanged write
/// is a no-op that keeps the old resourceVersion, as etcd3 storage does).
pub fn same_content(old: &Value, new: &Value) -> bool {
    let (Some(o), Some(n)) = (old.as_object(), new.as_object()) else {
        return old == new;
    };
    if o.len() != n.len() {
        return false;
    }
    for (k, ov) in o {
        let Some(nv) = n.get(k) else {
            return false;
        };
        if k != "metadata" {
            if ov != nv {
                return false;
            }
            continue;
        }
        let (Some(om), Some(nm)) = (ov.as_object(), nv.as_object()) else {
            return ov == nv;
        };
        let skip = |k: &str| k == "resourceVersion" || k == "managedFields";
        let count = |m: &serde_json::Map<String, Value>| m.keys().filter(|k| !skip(k)).count();
        if count(om) != count(nm)
            || om
                .iter()
                .filter(|(k, _)| !skip(k))
                .any(|(k, v)| nm.get(k) != Some(v))
        {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subdomain_names_are_capped_as_a_whole_not_per_part() {
        let long_part = "a".repeat(100);
        assert!(validate_name(&long_part, false).is_empty());
        assert!(validate_name(&format!("{long_part}.b"), false).is_empty());
        assert!(!validate_name(&"a".repeat(254), false).is_empty());
        for bad in ["", "A", "-a", "a-", "a..b", ".a", "a.", "a_b"] {
            assert!(!validate_name(bad, false).is_empty(), "{bad:?}");
        }
    }

    #[test]
    fn namespace_names_are_labels_of_at_most_63() {
        assert!(validate_name(&"a".repeat(63), true).is_empty());
        let errs = validate_name(&"a".repeat(64), true);
        assert!(!errs.is_empty());
        assert!(!validate_name("a.b", true).is_empty());
        assert!(validate_path_segment_name("system:aggregate-to-view").is_empty());
        assert_eq!(validate_path_segment_name("a/b%c").len(), 2);
        assert_eq!(validate_path_segment_name("..").len(), 1);
    }
}
