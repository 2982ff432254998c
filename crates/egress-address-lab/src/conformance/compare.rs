//! Two answers to one request, made comparable and compared: pure, no server.
//!
//! What the servers may legitimately disagree on is blanked before comparing: the values each
//! server makes up (uid, resourceVersion, creation and deletion timestamps, the time of a
//! managedFields entry, a list's `continue` token, a Table's `Age` cell) and any UUID inside a
//! message (a precondition failure names the stored uid). Their presence still counts: an
//! object with a uid against one without is a difference. `generation` is compared: both
//! servers count spec changes the same way.

use serde::Serialize;
use serde_json::{Map, Value};

/// What a server answered: the status code, its `Warning` headers in order, the body (JSON as
/// sent; a watch as the array of its events; anything else as `{"text": ...}`), and facts about
/// the made-up values that blanking hides: how each resourceVersion orders against the ones
/// before it (compared as they are, never blanked).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Answer {
    pub code: u16,
    pub warnings: Vec<String>,
    pub body: Value,
    #[serde(skip_serializing_if = "Value::is_null")]
    pub facts: Value,
}

impl Answer {
    /// Reads a body as [`Answer::body`] holds it.
    pub fn body_from(bytes: &[u8], watch: bool) -> Value {
        let text = String::from_utf8_lossy(bytes);
        if text.trim().is_empty() {
            return Value::Null;
        }
        if watch {
            let events: Result<Vec<Value>, _> = text
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(serde_json::from_str)
                .collect();
            if let Ok(events) = events {
                return Value::Array(events);
            }
        }
        serde_json::from_str(&text).unwrap_or_else(|_| serde_json::json!({"text": text}))
    }
}

/// One place where two answers differ: a JSON path and each side's value (absent: `-`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Difference {
    pub path: String,
    pub local: String,
    pub real: String,
    /// Pinned by the shape's explanation ([`super::explained`]).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub explained: bool,
}

const BLANK: &str = "<blank>";
const TOO_OLD: &str = "too old resource version: ";

/// The answer as it is compared: `{code, warnings, body}` with the made-up values blanked.
pub fn normalise(answer: &Answer) -> Value {
    let mut body = answer.body.clone();
    blank(&mut body, None);
    let mut compared = serde_json::json!({
        "code": answer.code,
        "warnings": answer.warnings.iter().map(|w| blank_uuids(w)).collect::<Vec<_>>(),
        "body": body,
    });
    if !answer.facts.is_null() {
        compared["facts"] = answer.facts.clone();
    }
    compared
}

/// Every difference between the two answers after [`normalise`]; empty when they agree.
pub fn differences(local: &Answer, real: &Answer) -> Vec<Difference> {
    let mut out = Vec::new();
    diff("", &normalise(local), &normalise(real), &mut out);
    out
}

fn blank(v: &mut Value, key: Option<&str>) {
    match v {
        Value::Object(map) => {
            if let Some(Value::Object(meta)) = map.get_mut("metadata") {
                blank_metadata(meta);
            }
            blank_table_age(map);
            blank_reviewed_token(map);
            for (k, child) in map.iter_mut() {
                blank(child, Some(k));
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| blank(i, key)),
        Value::String(s) => {
            let blanked = if key == Some("uid") && is_uuid(s) {
                BLANK.to_string()
            } else if s.starts_with(TOO_OLD) {
                // A 410's message names two resourceVersions: made-up values.
                blank_numbers(s)
            } else {
                blank_uuids(s)
            };
            *s = blanked;
        }
        _ => {}
    }
}

fn blank_metadata(meta: &mut Map<String, Value>) {
    for key in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "deletionTimestamp",
        "continue",
    ] {
        if let Some(v) = meta.get_mut(key)
            && !v.is_null()
        {
            *v = Value::String(BLANK.into());
        }
    }
    meta.remove("selfLink");
    if let Some(Value::Array(entries)) = meta.get_mut("managedFields") {
        for entry in entries.iter_mut() {
            if let Some(t) = entry.get_mut("time") {
                *t = Value::String(BLANK.into());
            }
        }
        // The apiserver orders entries by operation, then time in whole seconds, then manager:
        // two writes a few milliseconds apart may fall in one second or in two, so the order
        // is compared without the time.
        entries.sort_by_key(|e| {
            ["operation", "manager", "subresource"].map(|k| e[k].as_str().unwrap_or("").to_string())
        });
    }
}

/// A Table's `Age` column says how long ago each server made the object: the same object is a
/// second older on the slower one.
fn blank_table_age(map: &mut Map<String, Value>) {
    if map.get("kind").and_then(Value::as_str) != Some("Table") {
        return;
    }
    let Some(age) = map
        .get("columnDefinitions")
        .and_then(Value::as_array)
        .and_then(|cols| cols.iter().position(|c| c["name"] == "Age"))
    else {
        return;
    };
    if let Some(Value::Array(rows)) = map.get_mut("rows") {
        for row in rows {
            if let Some(cell) = row.get_mut("cells").and_then(|c| c.get_mut(age)) {
                *cell = Value::String(BLANK.into());
            }
        }
    }
}

/// A TokenReview carries the token it asks about back in its spec: each server issued its own.
fn blank_reviewed_token(map: &mut Map<String, Value>) {
    if map.get("kind").and_then(Value::as_str) != Some("TokenReview") {
        return;
    }
    if let Some(token) = map.get_mut("spec").and_then(|s| s.get_mut("token"))
        && token.as_str().is_some_and(|t| !t.is_empty())
    {
        *token = Value::String(BLANK.into());
    }
}

/// `s` with every run of digits replaced by `<rv>`.
fn blank_numbers(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_number = false;
    for c in s.chars() {
        if c.is_ascii_digit() {
            if !in_number {
                out.push_str("<rv>");
            }
            in_number = true;
        } else {
            out.push(c);
            in_number = false;
        }
    }
    out
}

fn is_uuid(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() == 5
        && parts
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(p, n)| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// `s` with every UUID in it replaced by `<uid>`.
fn blank_uuids(s: &str) -> String {
    const LEN: usize = 36;
    let bytes = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if i + LEN <= s.len()
            && s.is_char_boundary(i)
            && s.is_char_boundary(i + LEN)
            && is_uuid(&s[i..i + LEN])
            && (i == 0 || !bytes[i - 1].is_ascii_hexdigit())
            && bytes.get(i + LEN).is_none_or(|b| !b.is_ascii_hexdigit())
        {
            out.push_str("<uid>");
            i += LEN;
            continue;
        }
        let c = s[i..].chars().next().expect("i is on a char boundary");
        out.push(c);
        i += c.len_utf8();
    }
    out
}

fn show(v: Option<&Value>) -> String {
    match v {
        None => "-".into(),
        Some(Value::String(s)) => format!("{s:?}"),
        Some(v) => v.to_string(),
    }
}

fn diff(path: &str, local: &Value, real: &Value, out: &mut Vec<Difference>) {
    match (local, real) {
        (Value::Object(l), Value::Object(r)) => {
            let mut keys: Vec<&String> = l.keys().chain(r.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let p = format!("{path}.{k}");
                match (l.get(k), r.get(k)) {
                    (Some(a), Some(b)) => diff(&p, a, b, out),
                    (a, b) => out.push(Difference {
                        path: p,
                        local: show(a),
                        real: show(b),
                        explained: false,
                    }),
                }
            }
        }
        (Value::Array(l), Value::Array(r)) => {
            for i in 0..l.len().max(r.len()) {
                let p = format!("{path}[{i}]");
                match (l.get(i), r.get(i)) {
                    (Some(a), Some(b)) => diff(&p, a, b, out),
                    (a, b) => out.push(Difference {
                        path: p,
                        local: show(a),
                        real: show(b),
                        explained: false,
                    }),
                }
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push(Difference {
            path: if path.is_empty() {
                ".".into()
            } else {
                path.into()
            },
            local: show(Some(a)),
            real: show(Some(b)),
            explained: false,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(code: u16, body: Value) -> Answer {
        Answer {
            code,
            warnings: vec![],
            body,
            facts: Value::Null,
        }
    }

    fn shard(uid: &str, rv: &str, created: &str) -> Value {
        json!({
            "apiVersion": "network.datumapis.com/v1alpha1", "kind": "EgressShard",
            "metadata": {"name": "a", "namespace": "ns", "uid": uid, "resourceVersion": rv,
                         "creationTimestamp": created, "generation": 1, "selfLink": "/x",
                         "managedFields": [{"manager": "kubectl", "operation": "Apply",
                                            "time": created}]},
            "spec": {"targetRef": {"kind": "Node", "name": "n"}},
        })
    }

    #[test]
    fn uid_resource_version_and_timestamps_are_ignored() {
        let local = answer(
            201,
            shard(
                "0b5a3c1e-2f4d-4e6a-8b7c-9d0e1f2a3b4c",
                "17",
                "2026-01-01T00:00:00Z",
            ),
        );
        let real = answer(
            201,
            shard(
                "f1e2d3c4-b5a6-4978-8695-a4b3c2d1e0f9",
                "93412",
                "2026-12-04T20:00:01Z",
            ),
        );
        assert_eq!(differences(&local, &real), vec![]);
    }

    #[test]
    fn managed_fields_are_compared_in_an_order_that_ignores_their_time() {
        let entry = |manager: &str| json!({"manager": manager, "operation": "Update", "time": "t"});
        let object = |entries: Vec<Value>| json!({"metadata": {"managedFields": entries}});
        let local = answer(200, object(vec![entry("b"), entry("a")]));
        let real = answer(200, object(vec![entry("a"), entry("b")]));
        assert_eq!(differences(&local, &real), vec![]);
        let other = answer(200, object(vec![entry("a"), entry("c")]));
        assert_eq!(differences(&local, &other).len(), 1);
    }

    #[test]
    fn a_generation_or_a_spec_value_is_a_difference() {
        let uid = "0b5a3c1e-2f4d-4e6a-8b7c-9d0e1f2a3b4c";
        let mut real = shard(uid, "1", "t");
        real["metadata"]["generation"] = json!(2);
        real["spec"]["targetRef"]["name"] = json!("m");
        let d = differences(&answer(200, shard(uid, "1", "t")), &answer(200, real));
        let paths: Vec<&str> = d.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(
            paths,
            [".body.metadata.generation", ".body.spec.targetRef.name"]
        );
        assert_eq!(d[1].local, "\"n\"");
        assert_eq!(d[1].real, "\"m\"");
    }

    fn invalid(message: &str) -> Value {
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 422,
               "reason": "Invalid", "message": "EgressShard \"a\" is invalid",
               "details": {"name": "a", "kind": "EgressShard", "causes": [
                   {"reason": "FieldValueInvalid", "field": "spec.shardAddressIPv6",
                    "message": message}]}})
    }

    #[test]
    fn a_difference_in_a_cause_message_is_found() {
        let d = differences(
            &answer(422, invalid("Invalid value: \"string\": immutable")),
            &answer(
                422,
                invalid("Invalid value: \"string\": shardAddressIPv6 is immutable once assigned"),
            ),
        );
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].path, ".body.details.causes[0].message");
    }

    #[test]
    fn codes_warnings_and_missing_fields_are_differences() {
        let mut local = answer(201, json!({"a": 1}));
        local.warnings = vec!["299 - \"unknown field \\\"spec.x\\\"\"".into()];
        let real = answer(200, json!({"a": 1, "b": 2}));
        let d = differences(&local, &real);
        let paths: Vec<&str> = d.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, [".body.b", ".code", ".warnings[0]"]);
        assert_eq!(d[0].local, "-");
        assert_eq!(d[2].real, "-");
    }

    #[test]
    fn a_uid_inside_a_message_is_blanked_but_its_presence_is_not() {
        let msg = |uid: &str| {
            json!({"message": format!("Precondition failed: UID in precondition: \
                   00000000-0000-0000-0000-000000000000, UID in object meta: {uid}")})
        };
        assert_eq!(
            differences(
                &answer(409, msg("0b5a3c1e-2f4d-4e6a-8b7c-9d0e1f2a3b4c")),
                &answer(409, msg("f1e2d3c4-b5a6-4978-8695-a4b3c2d1e0f9")),
            ),
            vec![]
        );
        let with = answer(201, json!({"metadata": {"uid": "x"}}));
        let without = answer(201, json!({"metadata": {}}));
        assert_eq!(differences(&with, &without).len(), 1);
    }

    #[test]
    fn a_table_age_cell_is_ignored_and_other_cells_are_not() {
        let table = |age: &str, name: &str| {
            json!({"kind": "Table", "columnDefinitions": [{"name": "Name"}, {"name": "Age"}],
                   "rows": [{"cells": [name, age], "object": {"metadata": {"name": name}}}]})
        };
        assert_eq!(
            differences(
                &answer(200, table("0s", "a")),
                &answer(200, table("1s", "a"))
            ),
            vec![]
        );
        assert_eq!(
            differences(
                &answer(200, table("0s", "a")),
                &answer(200, table("0s", "b"))
            )
            .len(),
            2
        );
    }

    #[test]
    fn a_too_old_message_is_compared_without_its_resource_versions() {
        let gone = |m: &str| answer(200, json!([{"type": "ERROR", "object": {"message": m}}]));
        assert_eq!(
            differences(
                &gone("too old resource version: 3 (128)"),
                &gone("too old resource version: 6 (226)")
            ),
            vec![]
        );
        assert_eq!(
            differences(
                &gone("too old resource version: 3 (128)"),
                &gone("too old resource version: 3")
            )
            .len(),
            1
        );
    }

    #[test]
    fn facts_are_compared_and_a_reviewed_token_is_not() {
        let mut local = answer(201, json!({"kind": "TokenReview", "spec": {"token": "a"}}));
        let mut real = answer(201, json!({"kind": "TokenReview", "spec": {"token": "b"}}));
        assert_eq!(differences(&local, &real), vec![]);
        local.facts = json!({"order": "after"});
        real.facts = json!({"order": "same"});
        let d = differences(&local, &real);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].path, ".facts.order");
    }

    #[test]
    fn a_watch_body_is_read_event_by_event() {
        let body = b"{\"type\":\"ADDED\",\"object\":{}}\n{\"type\":\"BOOKMARK\",\"object\":{}}\n";
        assert_eq!(
            Answer::body_from(body, true),
            json!([{"type": "ADDED", "object": {}}, {"type": "BOOKMARK", "object": {}}])
        );
        assert_eq!(
            Answer::body_from(b"404 page not found\n", false),
            json!({"text": "404 page not found\n"})
        );
        assert_eq!(Answer::body_from(b"", false), Value::Null);
    }
}
