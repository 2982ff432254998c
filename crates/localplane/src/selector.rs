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
    Gt(String, i64),
    Lt(String, i64),
}

/// A parsed `labelSelector`; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<LabelReq>);

/// The tokens of `labels.Parse`'s lexer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    Error,
    End,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn keyword(s: &str) -> Option<Tok> {
    Some(match s {
        ")" => Tok::ClosedPar,
        "," => Tok::Comma,
        "!" => Tok::DoesNotExist,
        "==" => Tok::DoubleEquals,
        "=" => Tok::Equals,
        ">" => Tok::GreaterThan,
        "in" => Tok::In,
        "<" => Tok::LessThan,
        "!=" => Tok::NotEquals,
        "notin" => Tok::NotIn,
        "(" => Tok::OpenPar,
        _ => return None,
    })
}

fn special(c: u8) -> bool {
    matches!(c, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

fn space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

/// Splits a selector into tokens as the apiserver's lexer does: runs of operator characters
/// become the longest operator they spell, other runs identifiers or the keywords `in`/`notin`.
fn lex(s: &str) -> Vec<(Tok, String)> {
    let b = s.as_bytes();
    let mut pos = 0;
    let mut out = vec![];
    loop {
        while pos < b.len() && space(b[pos]) {
            pos += 1;
        }
        if pos >= b.len() {
            out.push((Tok::End, String::new()));
            return out;
        }
        if special(b[pos]) {
            let mut buf = String::new();
            let mut last: Option<(Tok, String)> = None;
            while pos < b.len() && special(b[pos]) {
                buf.push(b[pos] as char);
                pos += 1;
                match keyword(&buf) {
                    Some(t) => last = Some((t, buf.clone())),
                    None if last.is_some() => {
                        pos -= 1;
                        break;
                    }
                    None => {}
                }
            }
            out.push(
                last.unwrap_or((Tok::Error, format!("error expected: keyword found '{buf}'"))),
            );
        } else {
            let start = pos;
            while pos < b.len() && !special(b[pos]) && !space(b[pos]) {
                pos += 1;
            }
            let word = &s[start..pos];
            out.push((keyword(word).unwrap_or(Tok::Identifier), word.to_string()));
        }
    }
}

/// Where the parser is reading: in a value, `in` and `notin` are identifiers like any other.
#[derive(Clone, Copy, PartialEq)]
enum Ctx {
    KeyAndOperator,
    Values,
}

struct Parser {
    items: Vec<(Tok, String)>,
    pos: usize,
}

impl Parser {
    fn peek(&self, ctx: Ctx) -> (Tok, String) {
        let (t, l) = self.items[self.pos.min(self.items.len() - 1)].clone();
        (Self::in_ctx(t, ctx), l)
    }

    fn next(&mut self, ctx: Ctx) -> (Tok, String) {
        let item = self.peek(ctx);
        self.pos += 1;
        item
    }

    fn in_ctx(t: Tok, ctx: Ctx) -> Tok {
        match (t, ctx) {
            (Tok::In | Tok::NotIn, Ctx::Values) => Tok::Identifier,
            _ => t,
        }
    }

    fn requirement(&mut self) -> Result<LabelReq, String> {
        let (mut tok, mut key) = self.next(Ctx::Values);
        let mut negated = false;
        if tok == Tok::DoesNotExist {
            negated = true;
            (tok, key) = self.next(Ctx::Values);
        }
        if tok != Tok::Identifier {
            return Err(format!("found '{key}', expected: identifier"));
        }
        let key_errs = crate::meta::qualified_name_errors(&key);
        if !key_errs.is_empty() {
            return Err(format!(
                "<nil>: Invalid value: {key:?}: {}",
                key_errs.join("; ")
            ));
        }
        let (ahead, _) = self.peek(Ctx::Values);
        if negated || ahead == Tok::End || ahead == Tok::Comma {
            return Ok(if negated {
                LabelReq::NotExists(key)
            } else {
                LabelReq::Exists(key)
            });
        }
        let (op, lit) = self.next(Ctx::KeyAndOperator);
        let values = match op {
            Tok::In | Tok::NotIn => self.set_values()?,
            Tok::Equals | Tok::DoubleEquals | Tok::NotEquals | Tok::GreaterThan | Tok::LessThan => {
                vec![self.exact_value()?]
            }
            _ => {
                return Err(format!(
                    "found '{lit}', expected: in, notin, =, ==, !=, gt, lt"
                ));
            }
        };
        let mut errs = vec![];
        if matches!(op, Tok::In | Tok::NotIn) && values.is_empty() {
            errs.push(
                "values: Invalid value: []string{}: for 'in', 'notin' operators, values set can't be empty"
                    .to_string(),
            );
        }
        let number = |v: &str| v.parse::<i64>();
        if matches!(op, Tok::GreaterThan | Tok::LessThan) && number(&values[0]).is_err() {
            errs.push(format!(
                "values[0]: Invalid value: {:?}: for 'Gt', 'Lt' operators, the value must be an integer",
                values[0]
            ));
        }
        for (i, v) in values.iter().enumerate() {
            let bad = crate::meta::label_value_errors(v);
            if !bad.is_empty() {
                errs.push(format!(
                    "values[{i}][{key}]: Invalid value: {v:?}: {}",
                    bad.join("; ")
                ));
            }
        }
        match errs.len() {
            0 => {}
            1 => return Err(errs.remove(0)),
            _ => return Err(format!("[{}]", errs.join(", "))),
        }
        Ok(match op {
            Tok::In => LabelReq::In(key, values),
            Tok::NotIn => LabelReq::NotIn(key, values),
            _ => {
                let one = values.into_iter().next().unwrap_or_default();
                match op {
                    Tok::Equals | Tok::DoubleEquals => LabelReq::Eq(key, one),
                    Tok::NotEquals => LabelReq::NotEq(key, one),
                    Tok::GreaterThan => LabelReq::Gt(key, number(&one).unwrap_or(0)),
                    _ => LabelReq::Lt(key, number(&one).unwrap_or(0)),
                }
            }
        })
    }

    /// `( value, ... )`, where empty values are allowed (`(a,,b)`, `()`).
    fn set_values(&mut self) -> Result<Vec<String>, String> {
        let (tok, lit) = self.next(Ctx::Values);
        if tok != Tok::OpenPar {
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (tok, lit) = self.peek(Ctx::Values);
        let mut set: Vec<String> = vec![];
        let insert = |v: &str, set: &mut Vec<String>| {
            if !set.iter().any(|x| x == v) {
                set.push(v.to_string());
            }
        };
        match tok {
            Tok::ClosedPar => {
                self.next(Ctx::Values);
                return Ok(vec![String::new()]);
            }
            Tok::Identifier | Tok::Comma => {}
            _ => return Err(format!("found '{lit}', expected: ',', ')' or identifier")),
        }
        loop {
            let (t, l) = self.next(Ctx::Values);
            match t {
                Tok::Identifier => {
                    insert(&l, &mut set);
                    let (t2, l2) = self.peek(Ctx::Values);
                    match t2 {
                        Tok::Comma => continue,
                        Tok::ClosedPar => break,
                        _ => return Err(format!("found '{l2}', expected: ',' or ')'")),
                    }
                }
                Tok::Comma => {
                    if set.is_empty() {
                        insert("", &mut set);
                    }
                    let (t2, _) = self.peek(Ctx::Values);
                    if t2 == Tok::ClosedPar {
                        insert("", &mut set);
                        break;
                    }
                    if t2 == Tok::Comma {
                        self.next(Ctx::Values);
                        insert("", &mut set);
                    }
                }
                _ => return Err(format!("found '{l}', expected: ',', or identifier")),
            }
        }
        let (t, _) = self.next(Ctx::Values);
        if t != Tok::ClosedPar {
            return Err(format!("found '{lit}', expected: ')'"));
        }
        set.sort();
        Ok(set)
    }

    /// The one value of `=`, `==`, `!=`, `>`, `<` (empty when nothing follows).
    fn exact_value(&mut self) -> Result<String, String> {
        let (t, _) = self.peek(Ctx::Values);
        if t == Tok::End || t == Tok::Comma {
            return Ok(String::new());
        }
        let (t, l) = self.next(Ctx::Values);
        if t == Tok::Identifier {
            Ok(l)
        } else {
            Err(format!("found '{l}', expected: identifier"))
        }
    }

    fn parse(&mut self) -> Result<Vec<LabelReq>, String> {
        let mut reqs = vec![];
        loop {
            let (t, l) = self.peek(Ctx::Values);
            match t {
                Tok::Identifier | Tok::DoesNotExist => {
                    let r = self
                        .requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    reqs.push(r);
                    let (t, l) = self.next(Ctx::Values);
                    match t {
                        Tok::End => return Ok(reqs),
                        Tok::Comma => {
                            let (t2, l2) = self.peek(Ctx::Values);
                            if t2 != Tok::Identifier && t2 != Tok::DoesNotExist {
                                return Err(format!(
                                    "found '{l2}', expected: identifier after ','"
                                ));
                            }
                        }
                        _ => return Err(format!("found '{l}', expected: ',' or 'end of string'")),
                    }
                }
                Tok::End => return Ok(reqs),
                _ => {
                    return Err(format!(
                        "found '{l}', expected: !, identifier, or 'end of string'"
                    ));
                }
            }
        }
    }
}

impl LabelSelector {
    /// Parses a selector as `labels.Parse` does, refusing one it would refuse with its message
    /// (400, as the apiserver answers a list with a malformed selector).
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut p = Parser {
            items: lex(s),
            pos: 0,
        };
        p.parse().map(LabelSelector).map_err(ApiError::bad_request)
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
        let int = |k: &str| get(k).and_then(|v| v.parse::<i64>().ok());
        self.0.iter().all(|r| match r {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
            LabelReq::Gt(k, n) => int(k).is_some_and(|x| x > *n),
            LabelReq::Lt(k, n) => int(k).is_some_and(|x| x < *n),
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

    /// Whether the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
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
    fn malformed_label_selectors_read_like_labels_parse() {
        let err = |s: &str| LabelSelector::parse(s).unwrap_err().0.message;
        assert_eq!(
            err("a b"),
            "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"
        );
        assert_eq!(err("a=b c"), "found 'c', expected: ',' or 'end of string'");
        assert_eq!(err("a=b,"), "found '', expected: identifier after ','");
        assert_eq!(
            err("a in b"),
            "unable to parse requirement: found 'b' expected: '('"
        );
        assert_eq!(
            err("a=b@c"),
            "unable to parse requirement: values[0][a]: Invalid value: \"b@c\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
        );
        assert!(err("-a").starts_with(
            "unable to parse requirement: <nil>: Invalid value: \"-a\": name part must consist of"
        ));
        assert_eq!(
            err("a>b"),
            "unable to parse requirement: values[0]: Invalid value: \"b\": for 'Gt', 'Lt' operators, the value must be an integer"
        );
        assert_eq!(
            err("=a"),
            "found '=', expected: !, identifier, or 'end of string'"
        );
        let o = json!({"metadata": {"labels": {"n": "5", "in": "notin"}}});
        for (sel, want) in [
            ("n>4", true),
            ("n<5", false),
            ("in=notin", true),
            ("x in (,a)", false),
            ("x notin ()", true),
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
