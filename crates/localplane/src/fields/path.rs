//! One step of a field path, as structured-merge-diff names it: a struct or map field, a list-map
//! item by its key fields, a set item by its value, or a list position; how each is written as a
//! `FieldsV1` key (`f:`, `k:`, `v:`, `i:`) and in a conflict message (`.f`, `[k="v"]`, `[="v"]`,
//! `[0]`).

use std::cmp::Ordering;

use serde_json::{Map, Value};

/// One step of a path. The order (fields, then keys, then values, then indices) is the order
/// sets are iterated and serialised in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pe {
    Field(String),
    /// A list-map item: its key fields, sorted by name.
    Key(Vec<(String, Value)>),
    /// A set item.
    Value(Value),
    Index(usize),
}

fn rank(v: &Value) -> u8 {
    match v {
        Value::Number(_) => 0,
        Value::String(_) => 1,
        Value::Bool(_) => 2,
        Value::Array(_) => 3,
        Value::Object(_) => 4,
        Value::Null => 5,
    }
}

/// A total order over JSON values: numbers (compared numerically), strings, booleans, lists,
/// maps, null.
pub fn compare_values(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i.cmp(&j),
            _ => {
                let (f, g) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
                f.partial_cmp(&g).unwrap_or(Ordering::Equal)
            }
        },
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => {
            for (i, j) in x.iter().zip(y) {
                let c = compare_values(i, j);
                if c != Ordering::Equal {
                    return c;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Object(x), Value::Object(y)) => {
            // Maps compare as their sorted (key, value) pairs.
            for ((ka, va), (kb, vb)) in x.iter().zip(y.iter()) {
                let c = ka.cmp(kb).then_with(|| compare_values(va, vb));
                if c != Ordering::Equal {
                    return c;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Null, Value::Null) => Ordering::Equal,
        _ => rank(a).cmp(&rank(b)),
    }
}

impl Ord for Pe {
    fn cmp(&self, other: &Self) -> Ordering {
        use Pe::*;
        let tag = |p: &Pe| match p {
            Field(_) => 0,
            Key(_) => 1,
            Value(_) => 2,
            Index(_) => 3,
        };
        match (self, other) {
            (Field(a), Field(b)) => a.cmp(b),
            (Key(a), Key(b)) => {
                for ((na, va), (nb, vb)) in a.iter().zip(b) {
                    let c = na.cmp(nb).then_with(|| compare_values(va, vb));
                    if c != Ordering::Equal {
                        return c;
                    }
                }
                a.len().cmp(&b.len())
            }
            (Value(a), Value(b)) => compare_values(a, b),
            (Index(a), Index(b)) => a.cmp(b),
            _ => tag(self).cmp(&tag(other)),
        }
    }
}

impl PartialOrd for Pe {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

fn json(v: &Value) -> String {
    serde_json::to_string(v).expect("JSON values always serialise")
}

impl Pe {
    pub fn field(name: &str) -> Pe {
        Pe::Field(name.to_string())
    }

    /// The key under which `FieldsV1` stores this step.
    pub fn to_key(&self) -> String {
        match self {
            Pe::Field(f) => format!("f:{f}"),
            Pe::Key(fields) => {
                let m: Map<String, Value> = fields.iter().cloned().collect();
                format!("k:{}", json(&Value::Object(m)))
            }
            Pe::Value(v) => format!("v:{}", json(v)),
            Pe::Index(i) => format!("i:{i}"),
        }
    }

    /// Parses a `FieldsV1` key (`.` is not a step and is handled by the set).
    pub fn from_key(key: &str) -> Result<Pe, String> {
        let (prefix, rest) = key
            .split_once(':')
            .ok_or_else(|| format!("unexpected key {key:?}: no prefix"))?;
        match prefix {
            "f" => Ok(Pe::Field(rest.to_string())),
            "k" => {
                let v: Value =
                    serde_json::from_str(rest).map_err(|e| format!("invalid key {key:?}: {e}"))?;
                let Value::Object(m) = v else {
                    return Err(format!("invalid key {key:?}: not a map"));
                };
                let mut fields: Vec<(String, Value)> = m.into_iter().collect();
                fields.sort_by(|a, b| a.0.cmp(&b.0));
                Ok(Pe::Key(fields))
            }
            "v" => serde_json::from_str(rest)
                .map(Pe::Value)
                .map_err(|e| format!("invalid value {key:?}: {e}")),
            "i" => rest
                .parse()
                .map(Pe::Index)
                .map_err(|e| format!("invalid index {key:?}: {e}")),
            other => Err(format!("unknown prefix {other:?} in key {key:?}")),
        }
    }
}

impl std::fmt::Display for Pe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pe::Field(n) => write!(f, ".{n}"),
            Pe::Key(fields) => {
                let parts: Vec<String> = fields
                    .iter()
                    .map(|(n, v)| format!("{n}={}", json(v)))
                    .collect();
                write!(f, "[{}]", parts.join(","))
            }
            Pe::Value(v) => write!(f, "[={}]", json(v)),
            Pe::Index(i) => write!(f, "[{i}]"),
        }
    }
}

/// A path as a conflict message prints it: `.spec.ports[port=80,protocol="TCP"].name`.
pub fn render(path: &[Pe]) -> String {
    path.iter().map(Pe::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_round_trip_through_fields_v1() {
        for pe in [
            Pe::field("spec"),
            Pe::Key(vec![("name".into(), json!("a"))]),
            Pe::Key(vec![
                ("port".into(), json!(80)),
                ("protocol".into(), json!("TCP")),
            ]),
            Pe::Value(json!("example.com/hold")),
            Pe::Index(3),
        ] {
            assert_eq!(Pe::from_key(&pe.to_key()).unwrap(), pe);
        }
        assert_eq!(
            Pe::Key(vec![
                ("port".into(), json!(80)),
                ("protocol".into(), json!("TCP"))
            ])
            .to_key(),
            r#"k:{"port":80,"protocol":"TCP"}"#
        );
        assert!(Pe::from_key("x:1").is_err());
        assert!(Pe::from_key("nokey").is_err());
    }

    #[test]
    fn paths_print_as_conflict_messages_do() {
        let p = [
            Pe::field("spec"),
            Pe::field("ports"),
            Pe::Key(vec![
                ("port".into(), json!(80)),
                ("protocol".into(), json!("TCP")),
            ]),
            Pe::field("name"),
        ];
        assert_eq!(render(&p), r#".spec.ports[port=80,protocol="TCP"].name"#);
        assert_eq!(
            render(&[
                Pe::field("metadata"),
                Pe::field("finalizers"),
                Pe::Value(json!("a"))
            ]),
            r#".metadata.finalizers[="a"]"#
        );
    }

    #[test]
    fn fields_sort_before_keys_values_and_indices() {
        let mut v = [
            Pe::Index(0),
            Pe::Value(json!("a")),
            Pe::Key(vec![("n".into(), json!("a"))]),
            Pe::field("z"),
            Pe::field("a"),
        ];
        v.sort();
        assert_eq!(v[0], Pe::field("a"));
        assert_eq!(v[1], Pe::field("z"));
        assert!(matches!(v[2], Pe::Key(_)));
        assert!(matches!(v[3], Pe::Value(_)));
        assert!(matches!(v[4], Pe::Index(_)));
        assert_eq!(compare_values(&json!(2), &json!(10)), Ordering::Less);
        assert_eq!(compare_values(&json!(1), &json!("a")), Ordering::Less);
    }
}
