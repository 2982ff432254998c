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

    /// Whether the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
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

/// A parsed `fieldSelector` over `metadata.name` and `metadata.namespace` (all custom resources
/// support; other fields are refused like the apiserver refuses unsupported field labels).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    pub fn parse(s: &str) -> Result<Self, ApiError> {
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
            if k != "metadata.name" && k != "metadata.namespace" {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {k}"
                )));
            }
            reqs.push((k.to_string(), eq, v.trim().to_string()));
        }
        Ok(FieldSelector(reqs))
    }

    /// Whether the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The exact name the selector pins, which lets a list skip the scan.
    pub fn pinned_name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, eq, _)| *eq && k == "metadata.name")
            .map(|(_, _, v)| v.as_str())
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(k, eq, v)| {
            let field = match k.as_str() {
                "metadata.name" => crate::meta::str_at(obj, "/metadata/name"),
                _ => crate::meta::str_at(obj, "/metadata/namespace"),
            };
            (field == v) == *eq
        })
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
            FieldSelector::parse("metadata.name=n,metadata.namespace!=x")
                .unwrap()
                .matches(&o)
        );
        assert!(!FieldSelector::parse("metadata.name=m").unwrap().matches(&o));
        assert_eq!(
            FieldSelector::parse("spec.x=1").unwrap_err().0.reason,
            "BadRequest"
        );
    }
}
