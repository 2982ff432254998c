//! What the apiserver does to a custom resource with its structural schema: prune unknown fields,
//! apply defaults, validate the OpenAPI constraints, then evaluate `x-kubernetes-validations`.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use kube::core::cel::{CompiledSchema, ErrorKind, Validator};
use regex::Regex;
use serde_json::{Map, Value};

use crate::error::{FieldError, FieldErrorKind, render_value};
use crate::locks;
use crate::meta;

/// ObjectMeta's maps and lists. They and its scalars ([`meta::OBJECT_META_SCALARS`]) survive
/// pruning; anything else under `metadata` is dropped, as the apiserver's decoder drops it.
const OBJECT_META_COLLECTIONS: &[&str] = &[
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

fn preserves_unknown(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn is_nullable(schema: &Value) -> bool {
    schema
        .get("nullable")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// Drops fields the schema does not declare (and nulls in non-nullable fields), returning the
/// dropped paths so strict field validation can report them.
pub fn prune(schema: &Value, obj: &mut Value) -> Vec<String> {
    let mut dropped = Vec::new();
    if let Some(m) = obj.as_object_mut() {
        if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.retain(|k, _| {
                let keep = meta::OBJECT_META_SCALARS.contains(&k.as_str())
                    || OBJECT_META_COLLECTIONS.contains(&k.as_str());
                if !keep {
                    dropped.push(format!("metadata.{k}"));
                }
                keep
            });
        }
        prune_object(schema, m, "", true, &mut dropped);
    }
    dropped
}

fn prune_object(
    schema: &Value,
    m: &mut Map<String, Value>,
    path: &str,
    root: bool,
    dropped: &mut Vec<String>,
) {
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties");
    let keep_unknown = preserves_unknown(schema)
        || matches!(additional, Some(Value::Bool(true)))
        || matches!(additional, Some(Value::Object(_)));
    let embedded = schema
        .get("x-kubernetes-embedded-resource")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let keys: Vec<String> = m.keys().cloned().collect();
    for k in keys {
        if (root || embedded) && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        let sub = props.and_then(|p| p.get(&k)).or(match additional {
            Some(s @ Value::Object(_)) => Some(s),
            _ => None,
        });
        match sub {
            Some(sub) => {
                let child_path = join(path, &k);
                let v = m.get_mut(&k).expect("key listed above");
                if v.is_null() && !is_nullable(sub) && sub.get("default").is_none() {
                    m.remove(&k);
                    continue;
                }
                prune_value(sub, v, &child_path, dropped);
            }
            None if keep_unknown => {}
            None => {
                m.remove(&k);
                dropped.push(join(path, &k));
            }
        }
    }
}

fn prune_value(schema: &Value, v: &mut Value, path: &str, dropped: &mut Vec<String>) {
    match v {
        Value::Object(m) => prune_object(schema, m, path, false, dropped),
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, it) in items.iter_mut().enumerate() {
                    prune_value(item_schema, it, &format!("{path}[{i}]"), dropped);
                }
            }
        }
        _ => {}
    }
}

/// Fills schema defaults (kube-cel implements the apiserver's defaulting walk).
pub fn apply_defaults(schema: &Value, obj: &Value) -> Value {
    kube::core::cel::apply_defaults(schema, obj)
}

fn regex_cached(pattern: &str) -> Option<Regex> {
    static CACHE: OnceLock<Mutex<HashMap<String, Option<Regex>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut c = locks::lock(cache);
    c.entry(pattern.to_string())
        .or_insert_with(|| Regex::new(pattern).ok())
        .clone()
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_ok(want: &str, v: &Value, int_or_string: bool) -> bool {
    if int_or_string {
        return v.is_string() || v.as_i64().is_some() || v.as_u64().is_some();
    }
    match want {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "number" => v.is_number(),
        "integer" => {
            v.as_i64().is_some()
                || v.as_u64().is_some()
                || v.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => true,
    }
}

/// Checks the OpenAPI constraints of `schema` on `obj` (metadata excluded: it has its own rules).
pub fn validate_structure(schema: &Value, obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    validate_node(schema, obj, "", true, &mut errs);
    errs
}

fn invalid(path: &str, v: &Value, detail: String) -> FieldError {
    FieldError::invalid(path, v, detail)
}

fn validate_node(schema: &Value, v: &Value, path: &str, root: bool, errs: &mut Vec<FieldError>) {
    if v.is_null() && is_nullable(schema) {
        return;
    }
    let int_or_string = schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if let Some(want) = schema.get("type").and_then(Value::as_str)
        && !type_ok(want, v, int_or_string)
    {
        let got = type_name(v);
        errs.push(FieldError {
            kind: FieldErrorKind::TypeInvalid,
            field: path.to_string(),
            value: Some(format!("{got:?}")),
            detail: format!("{path} in body must be of type {want}: {got:?}"),
        });
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(v)
    {
        let list: Vec<String> = allowed.iter().map(render_value).collect();
        errs.push(FieldError {
            kind: FieldErrorKind::NotSupported,
            field: path.to_string(),
            value: Some(render_value(v)),
            detail: format!("supported values: {}", list.join(", ")),
        });
    }
    match v {
        Value::String(s) => {
            let len = s.chars().count() as u64;
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
                && len < min
            {
                errs.push(invalid(
                    path,
                    v,
                    format!("{path} in body should be at least {min} chars long"),
                ));
            }
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
                && len > max
            {
                errs.push(FieldError {
                    kind: FieldErrorKind::TooLong,
                    field: path.to_string(),
                    value: None,
                    detail: format!("may not be more than {max} bytes"),
                });
            }
            if let Some(p) = schema.get("pattern").and_then(Value::as_str)
                && let Some(re) = regex_cached(p)
                && !re.is_match(s)
            {
                errs.push(invalid(
                    path,
                    v,
                    format!("{path} in body should match '{p}'"),
                ));
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(0.0);
            let excl_min = schema
                .get("exclusiveMinimum")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let excl_max = schema
                .get("exclusiveMaximum")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
                if excl_min && x <= min {
                    errs.push(invalid(
                        path,
                        v,
                        format!("{path} in body should be greater than {min}"),
                    ));
                } else if x < min {
                    errs.push(invalid(
                        path,
                        v,
                        format!("{path} in body should be greater than or equal to {min}"),
                    ));
                }
            }
            if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
                if excl_max && x >= max {
                    errs.push(invalid(
                        path,
                        v,
                        format!("{path} in body should be less than {max}"),
                    ));
                } else if x > max {
                    errs.push(invalid(
                        path,
                        v,
                        format!("{path} in body should be less than or equal to {max}"),
                    ));
                }
            }
            if let Some(m) = schema.get("multipleOf").and_then(Value::as_f64)
                && m != 0.0
                && (x / m).fract() != 0.0
            {
                errs.push(invalid(
                    path,
                    v,
                    format!("{path} in body should be a multiple of {m}"),
                ));
            }
        }
        Value::Array(items) => {
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                && (items.len() as u64) < min
            {
                errs.push(invalid(
                    path,
                    v,
                    format!("{path} in body should have at least {min} items"),
                ));
            }
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && (items.len() as u64) > max
            {
                errs.push(FieldError {
                    kind: FieldErrorKind::TooMany,
                    field: path.to_string(),
                    value: Some(items.len().to_string()),
                    detail: format!("must have at most {max} items"),
                });
            }
            let set_like = schema.get("uniqueItems").and_then(Value::as_bool) == Some(true)
                || schema.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("set");
            if set_like {
                for (i, it) in items.iter().enumerate() {
                    if items[..i].contains(it) {
                        errs.push(FieldError {
                            kind: FieldErrorKind::Duplicate,
                            field: format!("{path}[{i}]"),
                            value: Some(render_value(it)),
                            detail: String::new(),
                        });
                    }
                }
            }
            if schema.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map") {
                errs.extend(list_map_duplicates(schema, items, path));
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, it) in items.iter().enumerate() {
                    validate_node(item_schema, it, &format!("{path}[{i}]"), false, errs);
                }
            }
        }
        Value::Object(m) => {
            if let Some(req) = schema.get("required").and_then(Value::as_array) {
                for r in req.iter().filter_map(Value::as_str) {
                    if root && r == "metadata" {
                        continue;
                    }
                    if !m.contains_key(r) {
                        errs.push(FieldError::required(join(path, r), ""));
                    }
                }
            }
            if let Some(min) = schema.get("minProperties").and_then(Value::as_u64)
                && (m.len() as u64) < min
            {
                errs.push(invalid(
                    path,
                    v,
                    format!("{path} in body should have at least {min} properties"),
                ));
            }
            if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64)
                && (m.len() as u64) > max
            {
                errs.push(invalid(
                    path,
                    v,
                    format!("{path} in body should have at most {max} properties"),
                ));
            }
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (k, child) in m {
                if root && matches!(k.as_str(), "metadata" | "apiVersion" | "kind") {
                    continue;
                }
                if let Some(sub) = props.and_then(|p| p.get(k)).or(additional) {
                    validate_node(sub, child, &join(path, k), false, errs);
                }
            }
        }
        _ => {}
    }
}

/// Items of a `x-kubernetes-list-type: map` list whose keys an earlier item already has, as
/// the apiserver refuses them: `Duplicate value` with the keys as a JSON object.
fn list_map_duplicates(schema: &Value, items: &[Value], path: &str) -> Vec<FieldError> {
    let keys: Vec<&str> = schema
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|k| k.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut seen: Vec<Vec<Option<&Value>>> = vec![];
    let mut errs = vec![];
    for (i, it) in items.iter().enumerate() {
        let Some(o) = it.as_object() else {
            continue;
        };
        let key: Vec<Option<&Value>> = keys.iter().map(|k| o.get(*k)).collect();
        if seen.contains(&key) {
            let mut sorted: Vec<(&str, Option<&Value>)> =
                keys.iter().copied().zip(key.iter().copied()).collect();
            sorted.sort_by_key(|(k, _)| *k);
            let shown: Vec<String> = sorted
                .iter()
                .filter_map(|(k, v)| v.map(|v| format!("{k:?}:{}", render_value(v))))
                .collect();
            errs.push(FieldError {
                kind: FieldErrorKind::Duplicate,
                field: format!("{path}[{i}]"),
                value: Some(format!("{{{}}}", shown.join(","))),
                detail: String::new(),
            });
        } else {
            seen.push(key);
        }
    }
    errs
}

thread_local! {
    // Validator holds a CEL context that is Send but not Sync, and building one registers every
    // Kubernetes function, so each worker thread keeps its own.
    static VALIDATOR: Validator = Validator::new();
}

/// Evaluates the compiled `x-kubernetes-validations` rules. `old` enables transition rules.
pub fn validate_cel(
    compiled: &CompiledSchema,
    obj: &Value,
    old: Option<&Value>,
) -> Vec<FieldError> {
    let res = VALIDATOR.with(|v| v.validate_compiled(compiled, obj, old));
    let Err(errors) = res else {
        return vec![];
    };
    errors
        .into_iter()
        .map(|e| {
            let kind = match e.kind {
                ErrorKind::ValidationFailure => {
                    FieldErrorKind::from_rule_reason(e.reason.as_deref())
                }
                _ => FieldErrorKind::Invalid,
            };
            // As kube-apiserver 1.37 words a failed rule: a scalar's own value (a string quoted),
            // and no value at all for an object or a list.
            let value = match (kind, value_at(obj, &e.field_path)) {
                (FieldErrorKind::Invalid, Some(v @ Value::String(_))) => Some(v.to_string()),
                (FieldErrorKind::Invalid, Some(v @ (Value::Number(_) | Value::Bool(_)))) => {
                    Some(v.to_string())
                }
                _ => None,
            };
            FieldError {
                kind,
                field: e.field_path.trim_start_matches('.').to_string(),
                value,
                detail: e.message,
            }
        })
        .collect()
}

/// The value a dotted field path (`spec.items[0].name`) names in an object.
fn value_at<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = obj;
    for seg in path.split('.').filter(|s| !s.is_empty()) {
        let (name, rest) = match seg.find('[') {
            Some(i) => (&seg[..i], &seg[i..]),
            None => (seg, ""),
        };
        if !name.is_empty() {
            cur = cur.get(name)?;
        }
        for idx in rest.split('[').filter(|s| !s.is_empty()) {
            let idx = idx.trim_end_matches(']');
            cur = match idx.parse::<usize>() {
                Ok(i) => cur.get(i)?,
                Err(_) => cur.get(idx.trim_matches(|c| c == '"' || c == '\''))?,
            };
        }
    }
    Some(cur)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string", "minLength": 1},
                        "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
                        "count": {"type": "integer", "minimum": 0},
                        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                    }
                }
            }
        })
    }

    #[test]
    fn prunes_unknown_fields_but_keeps_preserved_ones() {
        let mut o = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n", "bogus": 1},
            "spec": {"name": "n", "extra": 1, "free": {"any": 1}}, "other": 2});
        let dropped = prune(&schema(), &mut o);
        assert_eq!(dropped, vec!["metadata.bogus", "other", "spec.extra"]);
        assert_eq!(o["spec"]["free"]["any"], 1);
    }

    #[test]
    fn structural_errors_read_like_the_apiserver() {
        let o = json!({"spec": {"name": "", "mode": "c", "count": "x", "tags": ["a", "b", "c"]}});
        let errs: Vec<String> = validate_structure(&schema(), &o)
            .iter()
            .map(|e| e.to_string())
            .collect();
        assert!(errs.contains(&r#"spec.name: Invalid value: "": spec.name in body should be at least 1 chars long"#.to_string()), "{errs:?}");
        assert!(
            errs.contains(
                &r#"spec.mode: Unsupported value: "c": supported values: "a", "b""#.to_string()
            ),
            "{errs:?}"
        );
        assert!(errs.contains(&r#"spec.count: Invalid value: "string": spec.count in body must be of type integer: "string""#.to_string()), "{errs:?}");
        assert!(
            errs.contains(&"spec.tags: Too many: 3: must have at most 2 items".to_string()),
            "{errs:?}"
        );
        let missing = validate_structure(&schema(), &json!({"spec": {}}));
        assert_eq!(missing[0].to_string(), "spec.name: Required value");
    }

    #[test]
    fn defaults_fill_missing_fields() {
        let o = apply_defaults(&schema(), &json!({"spec": {"name": "x"}}));
        assert_eq!(o["spec"]["mode"], "a");
    }
}
