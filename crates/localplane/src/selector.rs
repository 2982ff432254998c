//! Label and field selectors, in the syntax `labels.Parse` and `fields.ParseSelector` accept.

use serde_json::Value;

use crate::error::ApiError;

/// One requirement of a label selector.
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

/// The tokens of the selector syntax.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    Ident,
    Bang,
    Eq,
    DoubleEq,
    NotEq,
    Gt,
    Lt,
    In,
    NotIn,
    Open,
    Close,
    Comma,
    End,
    Error,
}

fn special(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '>' | '<')
}

fn symbol(s: &str) -> Option<Tok> {
    Some(match s {
        ")" => Tok::Close,
        "," => Tok::Comma,
        "!" => Tok::Bang,
        "==" => Tok::DoubleEq,
        "=" => Tok::Eq,
        ">" => Tok::Gt,
        "<" => Tok::Lt,
        "in" => Tok::In,
        "!=" => Tok::NotEq,
        "notin" => Tok::NotIn,
        "(" => Tok::Open,
        _ => return None,
    })
}

/// Splits a selector into tokens: runs of special characters become the longest operator they
/// start with, anything else up to whitespace or a special character is an identifier (or the
/// keyword `in`/`notin`).
fn lex(s: &str) -> Vec<(Tok, String)> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while i < chars.len() && matches!(chars[i], ' ' | '\t' | '\r' | '\n') {
            i += 1;
        }
        if i == chars.len() {
            out.push((Tok::End, String::new()));
            return out;
        }
        if special(chars[i]) {
            let mut buf = String::new();
            let mut last: Option<(Tok, String)> = None;
            while i < chars.len() && special(chars[i]) {
                buf.push(chars[i]);
                match symbol(&buf) {
                    Some(t) => last = Some((t, buf.clone())),
                    None if last.is_some() => break,
                    None => {}
                }
                i += 1;
            }
            match last {
                Some(t) => out.push(t),
                None => {
                    out.push((Tok::Error, format!("error expected: keyword found '{buf}'")));
                    out.push((Tok::End, String::new()));
                    return out;
                }
            }
        } else {
            let start = i;
            while i < chars.len()
                && !special(chars[i])
                && !matches!(chars[i], ' ' | '\t' | '\r' | '\n')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let tok = match word.as_str() {
                "in" => Tok::In,
                "notin" => Tok::NotIn,
                _ => Tok::Ident,
            };
            out.push((tok, word));
        }
    }
}

const NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

fn name_ok(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn subdomain_ok(s: &str) -> bool {
    s.split('.').all(|p| {
        let b = p.as_bytes();
        !b.is_empty()
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
    })
}

/// What is wrong with a label key (a qualified name), as the apiserver lists it.
fn key_errors(k: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = k.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                if prefix.len() > 253 {
                    errs.push("prefix part must be no more than 253 characters".to_string());
                }
                if !subdomain_ok(prefix) {
                    errs.push(format!("prefix part {SUBDOMAIN_MSG}"));
                }
            }
            name
        }
        _ => {
            return vec![format!(
                "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '{NAME_FMT}') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )];
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".to_string());
    }
    if !name_ok(name) {
        errs.push(format!("name part {NAME_MSG}"));
    }
    errs
}

fn value_errors(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !v.is_empty() && !name_ok(v) {
        errs.push(VALUE_MSG.to_string());
    }
    errs
}

/// `labels.Parse`, over the tokens: requirements separated by commas.
struct Parser {
    toks: Vec<(Tok, String)>,
    pos: usize,
}

impl Parser {
    /// The next token; where values are expected, `in` and `notin` are plain identifiers.
    fn peek(&self, values: bool) -> (Tok, String) {
        let (t, l) = self.toks[self.pos.min(self.toks.len() - 1)].clone();
        match t {
            Tok::In | Tok::NotIn if values => (Tok::Ident, l),
            _ => (t, l),
        }
    }

    fn next(&mut self, values: bool) -> (Tok, String) {
        let t = self.peek(values);
        self.pos += 1;
        t
    }

    fn parse(&mut self) -> Result<Vec<LabelReq>, String> {
        let mut reqs = Vec::new();
        loop {
            let (t, lit) = self.peek(true);
            match t {
                Tok::Ident | Tok::Bang => {
                    let r = self
                        .requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    reqs.push(r);
                    let (t, lit) = self.next(true);
                    match t {
                        Tok::End => return Ok(reqs),
                        Tok::Comma => {
                            let (t2, l2) = self.peek(true);
                            if t2 != Tok::Ident && t2 != Tok::Bang {
                                return Err(format!(
                                    "found '{l2}', expected: identifier after ','"
                                ));
                            }
                        }
                        _ => {
                            return Err(format!("found '{lit}', expected: ',' or 'end of string'"));
                        }
                    }
                }
                Tok::End => return Ok(reqs),
                _ => {
                    return Err(format!(
                        "found '{lit}', expected: !, identifier, or 'end of string'"
                    ));
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<LabelReq, String> {
        let (mut t, mut key) = self.next(true);
        let negated = t == Tok::Bang;
        if negated {
            (t, key) = self.next(true);
        }
        if t != Tok::Ident {
            return Err(format!("found '{key}', expected: identifier"));
        }
        let errs = key_errors(&key);
        if !errs.is_empty() {
            return Err(format!(
                "<nil>: Invalid value: {key:?}: {}",
                errs.join("; ")
            ));
        }
        // `!key` takes nothing after it (what follows is the next requirement's business), and
        // a bare key is an existence test.
        if negated {
            return Ok(LabelReq::NotExists(key));
        }
        if matches!(self.peek(true).0, Tok::End | Tok::Comma) {
            return Ok(LabelReq::Exists(key));
        }
        let (op, lit) = self.next(false);
        match op {
            Tok::In | Tok::NotIn => {
                let values = self.values()?;
                let mut errs = Vec::new();
                for (i, v) in values.iter().enumerate() {
                    let ve = value_errors(v);
                    if !ve.is_empty() {
                        errs.push(format!(
                            "values[{i}][{v}]: Invalid value: {v:?}: {}",
                            ve.join("; ")
                        ));
                    }
                }
                if !errs.is_empty() {
                    return Err(aggregate(errs));
                }
                Ok(if op == Tok::In {
                    LabelReq::In(key, values)
                } else {
                    LabelReq::NotIn(key, values)
                })
            }
            Tok::Eq | Tok::DoubleEq | Tok::NotEq | Tok::Gt | Tok::Lt => {
                let v = self.exact_value()?;
                let mut errs = Vec::new();
                let number = v.parse::<i64>();
                if matches!(op, Tok::Gt | Tok::Lt) && number.is_err() {
                    errs.push(format!(
                        "values[0]: Invalid value: {v:?}: for 'Gt', 'Lt' operators, the value must be an integer"
                    ));
                }
                let ve = value_errors(&v);
                if !ve.is_empty() {
                    errs.push(format!(
                        "values[0][{v}]: Invalid value: {v:?}: {}",
                        ve.join("; ")
                    ));
                }
                if !errs.is_empty() {
                    return Err(aggregate(errs));
                }
                Ok(match op {
                    Tok::NotEq => LabelReq::NotEq(key, v),
                    Tok::Gt => LabelReq::Gt(key, number.unwrap_or(0)),
                    Tok::Lt => LabelReq::Lt(key, number.unwrap_or(0)),
                    _ => LabelReq::Eq(key, v),
                })
            }
            _ => Err(format!(
                "found '{lit}', expected: in, notin, =, ==, !=, gt, lt"
            )),
        }
    }

    /// `(a, b, ...)`: sorted and without repeats, as a set.
    fn values(&mut self) -> Result<Vec<String>, String> {
        let (t, lit) = self.next(true);
        if t != Tok::Open {
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (t, lit) = self.peek(true);
        let mut set = std::collections::BTreeSet::new();
        match t {
            Tok::Ident | Tok::Comma => {
                self.identifiers(&mut set)?;
                let (t, _) = self.next(true);
                if t != Tok::Close {
                    return Err(format!("found '{lit}', expected: ')'"));
                }
            }
            Tok::Close => {
                self.next(true);
                set.insert(String::new());
            }
            _ => return Err(format!("found '{lit}', expected: ',', ')' or identifier")),
        }
        Ok(set.into_iter().collect())
    }

    fn identifiers(&mut self, set: &mut std::collections::BTreeSet<String>) -> Result<(), String> {
        loop {
            let (t, lit) = self.next(true);
            match t {
                Tok::Ident => {
                    set.insert(lit);
                    let (t2, l2) = self.peek(true);
                    match t2 {
                        Tok::Comma => continue,
                        Tok::Close => return Ok(()),
                        _ => return Err(format!("found '{l2}', expected: ',' or ')'")),
                    }
                }
                Tok::Comma => {
                    if set.is_empty() {
                        set.insert(String::new());
                    }
                    match self.peek(true).0 {
                        Tok::Close => {
                            set.insert(String::new());
                            return Ok(());
                        }
                        Tok::Comma => {
                            self.next(true);
                            set.insert(String::new());
                        }
                        _ => {}
                    }
                }
                _ => return Err(format!("found '{lit}', expected: ',', or identifier")),
            }
        }
    }

    fn exact_value(&mut self) -> Result<String, String> {
        if matches!(self.peek(true).0, Tok::End | Tok::Comma) {
            return Ok(String::new());
        }
        let (t, lit) = self.next(true);
        if t == Tok::Ident {
            Ok(lit)
        } else {
            Err(format!("found '{lit}', expected: identifier"))
        }
    }
}

/// Several field errors as apimachinery's aggregate prints them.
fn aggregate(errs: Vec<String>) -> String {
    if errs.len() == 1 {
        errs.into_iter().next().unwrap_or_default()
    } else {
        format!("[{}]", errs.join(", "))
    }
}

impl LabelSelector {
    /// Parses a selector as `labels.Parse` does, refusing what it refuses with 400 and its words.
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        Parser {
            toks: lex(s),
            pos: 0,
        }
        .parse()
        .map(LabelSelector)
        .map_err(ApiError::bad_request)
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
        let num = |k: &str| get(k).and_then(|v| v.parse::<i64>().ok());
        self.0.iter().all(|r| match r {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
            LabelReq::Gt(k, n) => num(k).is_some_and(|x| x > *n),
            LabelReq::Lt(k, n) => num(k).is_some_and(|x| x < *n),
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
    fn numeric_comparisons_and_keywords_as_values() {
        let o = json!({"metadata": {"labels": {"n": "5", "in": "notin"}}});
        for (sel, want) in [
            ("n>3", true),
            ("n<3", false),
            ("in=notin", true),
            ("in in (notin)", true),
            ("example.com/x!=1", true),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&o),
                want,
                "{sel}"
            );
        }
    }

    #[test]
    fn malformed_selectors_are_refused_in_the_apiservers_words() {
        for (sel, msg) in [
            ("a=b=c", "found '=', expected: ',' or 'end of string'"),
            ("a,", "found '', expected: identifier after ','"),
            (
                ",a",
                "found ',', expected: !, identifier, or 'end of string'",
            ),
            (
                "a b",
                "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt",
            ),
            (
                "a in b",
                "unable to parse requirement: found 'b' expected: '('",
            ),
            (
                "a in (b",
                "unable to parse requirement: found '', expected: ',' or ')'",
            ),
            (
                "a=(b)",
                "unable to parse requirement: found '(', expected: identifier",
            ),
            ("!a=b", "found '=', expected: ',' or 'end of string'"),
            (
                "n>x",
                "unable to parse requirement: values[0]: Invalid value: \"x\": for 'Gt', 'Lt' operators, the value must be an integer",
            ),
            (
                "-a=b",
                "unable to parse requirement: <nil>: Invalid value: \"-a\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
            ),
            (
                "a=b/c",
                "unable to parse requirement: values[0][b/c]: Invalid value: \"b/c\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
            ),
        ] {
            let e = LabelSelector::parse(sel).unwrap_err();
            assert_eq!((e.0.code, e.0.message.as_str()), (400, msg), "{sel}");
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
