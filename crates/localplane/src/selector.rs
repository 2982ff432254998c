//! Label and field selectors, in the syntax `labels.Parse` and `fields.ParseSelector` accept.

use serde_json::Value;

use crate::error::ApiError;

#[derive(Debug, Clone, PartialEq)]
enum LabelReq {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed `labelSelector`; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<LabelReq>);

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn set_values(rest: &str, raw: &str) -> Result<Vec<String>, ApiError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| bad(raw))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

fn bad(raw: &str) -> ApiError {
    ApiError::bad_request(format!("unable to parse requirement: {raw:?}"))
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let p = part.trim();
            if p.is_empty() {
                continue;
            }
            if let Some(k) = p.strip_prefix('!') {
                reqs.push(LabelReq::NotExists(k.trim().to_string()));
            } else if let Some((k, v)) = p.split_once("!=") {
                reqs.push(LabelReq::NotEq(k.trim().into(), v.trim().into()));
            } else if let Some((k, v)) = p.split_once("==") {
                reqs.push(LabelReq::Eq(k.trim().into(), v.trim().into()));
            } else if let Some((k, v)) = p.split_once('=') {
                reqs.push(LabelReq::Eq(k.trim().into(), v.trim().into()));
            } else if let Some(idx) = p.find(" notin ") {
                let (k, rest) = p.split_at(idx);
                reqs.push(LabelReq::NotIn(
                    k.trim().into(),
                    set_values(&rest[" notin ".len()..], p)?,
                ));
            } else if let Some(idx) = p.find(" in ") {
                let (k, rest) = p.split_at(idx);
                reqs.push(LabelReq::In(
                    k.trim().into(),
                    set_values(&rest[" in ".len()..], p)?,
                ));
            } else if p.contains(['(', ')', ' ', '<', '>']) {
                return Err(bad(p));
            } else {
                reqs.push(LabelReq::Exists(p.to_string()));
            }
        }
        Ok(LabelSelector(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        if self.0.is_empty() {
            return true;
        }
        let labels = crate::meta::at(obj, "/metadata/labels").and_then(Value::as_object);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
        })
    }
}

/// The field labels a kind may be selected by: how a label a request names maps to the label
/// the stored object is matched on (`None`: not supported), and that label's value.
#[derive(Clone, Copy)]
pub struct FieldSet {
    pub label: fn(&str) -> Option<&'static str>,
    pub value: fn(&Value, &str) -> String,
}

/// What every kind supports: `metadata.name` and `metadata.namespace`.
pub const METADATA_FIELDS: FieldSet = FieldSet {
    label: |l| match l {
        "metadata.name" => Some("metadata.name"),
        "metadata.namespace" => Some("metadata.namespace"),
        _ => None,
    },
    value: metadata_value,
};

pub fn metadata_value(obj: &Value, label: &str) -> String {
    match label {
        "metadata.name" => crate::meta::str_at(obj, "/metadata/name").to_string(),
        "metadata.namespace" => crate::meta::str_at(obj, "/metadata/namespace").to_string(),
        _ => String::new(),
    }
}

/// A parsed `fieldSelector`: requirements on the field labels the kind supports (others are
/// refused like the apiserver refuses unsupported field labels).
#[derive(Clone)]
pub struct FieldSelector {
    reqs: Vec<(&'static str, bool, String)>,
    value: fn(&Value, &str) -> String,
}

impl Default for FieldSelector {
    fn default() -> Self {
        FieldSelector {
            reqs: vec![],
            value: metadata_value,
        }
    }
}

impl std::fmt::Debug for FieldSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(&self.reqs).finish()
    }
}

impl FieldSelector {
    pub fn parse(s: &str, fields: FieldSet) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for part in s.split(',') {
            let p = part.trim();
            if p.is_empty() {
                continue;
            }
            let (k, eq, v) = if let Some((k, v)) = p.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = p.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = p.split_once('=') {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{p}'"
                )));
            };
            let k = k.trim();
            let label = (fields.label)(k)
                .ok_or_else(|| ApiError::bad_request(format!("field label not supported: {k}")))?;
            reqs.push((label, eq, v.trim().to_string()));
        }
        Ok(FieldSelector {
            reqs,
            value: fields.value,
        })
    }

    /// The exact name the selector pins, which lets a list skip the scan.
    pub fn pinned_name(&self) -> Option<&str> {
        self.reqs
            .iter()
            .find(|(k, eq, _)| *eq && *k == "metadata.name")
            .map(|(_, _, v)| v.as_str())
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.reqs
            .iter()
            .all(|(k, eq, v)| ((self.value)(obj, k) == *v) == *eq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_operators() {
        let o = json!({"metadata": {"labels": {"a": "1", "b": "x"}}});
        for (sel, want) in [
            ("a=1", true),
            ("a==1", true),
            ("a!=1", false),
            ("a in (1,2)", true),
            ("a notin (1, 2)", false),
            ("b notin (y)", true),
            ("c notin (y)", true),
            ("a", true),
            ("!a", false),
            ("!c", true),
            ("a=1,b in (x)", true),
            ("a=1,c", false),
            ("", true),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&o),
                want,
                "{sel}"
            );
        }
    }

    #[test]
    fn field_selectors() {
        let o = json!({"metadata": {"name": "n", "namespace": "ns"}});
        assert!(
            FieldSelector::parse("metadata.name=n,metadata.namespace!=x", METADATA_FIELDS)
                .unwrap()
                .matches(&o)
        );
        assert!(
            !FieldSelector::parse("metadata.name=m", METADATA_FIELDS)
                .unwrap()
                .matches(&o)
        );
        assert_eq!(
            FieldSelector::parse("spec.x=1", METADATA_FIELDS)
                .unwrap_err()
                .0
                .reason,
            "BadRequest"
        );
    }
}
