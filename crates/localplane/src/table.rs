//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`: server-side printing, driven by a CRD's
//! additionalPrinterColumns, so `kubectl get` shows the same columns as against a real cluster.

use serde_json::{Value, json};

use crate::resources::{PrinterColumn, ResourceDef};

/// What each row's `object` holds (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

fn columns(def: &ResourceDef, version: &str) -> Vec<PrinterColumn> {
    let col = |name: &str, type_: &str, path: &str| PrinterColumn {
        name: name.into(),
        type_: type_.into(),
        format: String::new(),
        description: String::new(),
        priority: 0,
        json_path: path.into(),
    };
    let custom = def
        .version(version)
        .map(|v| v.printer_columns.clone())
        .unwrap_or_default();
    if !custom.is_empty() {
        return custom;
    }
    match (def.group.as_str(), def.plural.as_str()) {
        ("", "namespaces") => vec![
            col("Status", "string", ".status.phase"),
            col("Age", "date", ".metadata.creationTimestamp"),
        ],
        ("coordination.k8s.io", "leases") => vec![
            col("Holder", "string", ".spec.holderIdentity"),
            col("Age", "date", ".metadata.creationTimestamp"),
        ],
        _ => vec![col("Age", "date", ".metadata.creationTimestamp")],
    }
}

pub fn column_definitions(def: &ResourceDef, version: &str) -> Value {
    let mut defs = vec![json!({
        "name": "Name", "type": "string", "format": "name", "priority": 0,
        "description": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
    })];
    for c in columns(def, version) {
        defs.push(json!({
            "name": c.name, "type": c.type_, "format": c.format,
            "description": c.description, "priority": c.priority,
        }));
    }
    Value::Array(defs)
}

pub fn row(def: &ResourceDef, version: &str, obj: &Value, include: IncludeObject) -> Value {
    let mut cells = vec![json!(crate::meta::str_at(obj, "/metadata/name"))];
    for c in columns(def, version) {
        let v = eval_path(obj, &c.json_path);
        let cell = match (c.type_.as_str(), v) {
            (_, None) => Value::Null,
            ("date", Some(Value::String(s))) => json!(age(s)),
            (_, Some(v)) => v.clone(),
        };
        cells.push(cell);
    }
    let mut r = json!({"cells": cells});
    match include {
        IncludeObject::None => {}
        IncludeObject::Metadata => r["object"] = partial_metadata(obj),
        IncludeObject::Object => r["object"] = obj.clone(),
    }
    r
}

pub fn table(
    def: &ResourceDef,
    version: &str,
    objs: &[&Value],
    include: IncludeObject,
    list_meta: Value,
) -> Value {
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": column_definitions(def, version),
        "rows": objs.iter().map(|o| row(def, version, o, include)).collect::<Vec<_>>(),
    })
}

pub fn partial_metadata(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// The subset of kubectl JSONPath printer columns use: `.a.b`, `.a[0]`, `.a[*].b` (first
/// match) and `.a[?(@.k=="v")].b`.
pub fn eval_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let mut cur = obj;
    let mut rest = path.trim_start_matches('$');
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let field = &r[..end];
            if !field.is_empty() {
                cur = cur.get(field)?;
            }
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let inner = &r[..end];
            rest = &r[end + 1..];
            if let Some(filter) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let (k, v) = filter.split_once("==")?;
                let want = v.trim().trim_matches(|c| c == '"' || c == '\'');
                cur = cur.as_array()?.iter().find(|it| {
                    it.get(k.trim()).is_some_and(|x| match x {
                        Value::String(s) => s == want,
                        other => {
                            *other == serde_json::from_str::<Value>(want).unwrap_or(Value::Null)
                        }
                    })
                })?;
            } else if inner == "*" {
                cur = cur.as_array()?.first()?;
            } else if let Ok(i) = inner.parse::<usize>() {
                cur = cur.as_array()?.get(i)?;
            } else {
                cur = cur.get(inner.trim_matches(|c| c == '"' || c == '\''))?;
            }
        } else {
            return None;
        }
    }
    Some(cur)
}

/// apimachinery's `duration.HumanDuration` of the time since `ts`.
pub fn age(ts: &str) -> String {
    let Ok(t) = ts.parse::<jiff::Timestamp>() else {
        return "<unknown>".into();
    };
    let secs = jiff::Timestamp::now().as_second() - t.as_second();
    human_duration(secs)
}

pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    let s = secs.max(0);
    let (m, h) = (s / 60, s / 3600);
    let with = |a: i64, ua: &str, b: i64, ub: &str| {
        if b == 0 {
            format!("{a}{ua}")
        } else {
            format!("{a}{ua}{b}{ub}")
        }
    };
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        with(m, "m", s % 60, "s")
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        with(h, "h", m % 60, "m")
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        with(h / 24, "d", h % 24, "h")
    } else if h < 24 * 365 * 2 {
        format!("{}d", h / 24)
    } else if h < 24 * 365 * 8 {
        with(h / 24 / 365, "y", (h / 24) % 365, "d")
    } else {
        format!("{}y", h / 24 / 365)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_paths() {
        let o = json!({"spec": {"a": "x"}, "status": {"conditions": [
            {"type": "A", "status": "False"}, {"type": "Ready", "status": "True"}]}});
        assert_eq!(eval_path(&o, ".spec.a"), Some(&json!("x")));
        assert_eq!(
            eval_path(&o, ".status.conditions[?(@.type==\"Ready\")].status"),
            Some(&json!("True"))
        );
        assert_eq!(
            eval_path(&o, ".status.conditions[0].type"),
            Some(&json!("A"))
        );
        assert_eq!(eval_path(&o, ".spec.missing"), None);
    }

    #[test]
    fn human_durations() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(150), "2m30s");
        assert_eq!(human_duration(3600 * 3 + 60), "3h1m");
        assert_eq!(human_duration(86400 * 3), "3d");
    }
}
