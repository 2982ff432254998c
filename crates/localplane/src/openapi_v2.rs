//! `/openapi/v2`: the plane's kinds as one Swagger 2.0 document, in JSON or, as client-go asks
//! for it, in the protobuf encoding of gnostic's `openapi.v2.Document`
//! (asked for as `application/com.github.proto-openapi.spec.v2@v1.0+protobuf`, answered as
//! `..spec.v2.v1.0+protobuf`, since Go's media type parser refuses the `@`).
//!
//! kubectl 1.37 reads everything it can from `/openapi/v3`, and comes here only for what v3 does
//! not settle: re-applying a custom resource (which patch type its PATCH accepts) and `explain
//! --output=plaintext-openapiv2`. The document is the v3 documents' schemas and operations,
//! rewritten for Swagger 2.0 (`#/definitions/` references, body and query parameters,
//! `consumes`/`produces`).

use serde_json::{Map, Value, json};

use crate::openapi;
use crate::resources::Registry;

/// The media type the protobuf document is served as.
pub const PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// Rewrites v3 `$ref`s (`#/components/schemas/X`) as v2 ones (`#/definitions/X`), everywhere,
/// and a reference wrapped in a one-entry `allOf` (v3's way to give it a description) as the
/// plain `$ref` with siblings that v2 documents use.
fn v2_refs(v: &mut Value) {
    match v {
        Value::Object(m) => {
            let wrapped = m
                .get("allOf")
                .and_then(Value::as_array)
                .filter(|a| a.len() == 1)
                .and_then(|a| a[0].get("$ref"))
                .cloned();
            if let Some(r) = wrapped {
                m.remove("allOf");
                m.insert("$ref".into(), r);
            }
            if let Some(Value::String(r)) = m.get_mut("$ref")
                && let Some(name) = r.strip_prefix("#/components/schemas/")
            {
                *r = format!("#/definitions/{name}");
            }
            for child in m.values_mut() {
                v2_refs(child);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(v2_refs),
        _ => {}
    }
}

/// A v3 operation as a v2 one: its request body becomes a `body` parameter and `consumes`, its
/// response's content a `schema` and `produces`.
fn v2_operation(op: &Value) -> Value {
    let mut out = Map::new();
    for k in [
        "operationId",
        "x-kubernetes-action",
        "x-kubernetes-group-version-kind",
    ] {
        if let Some(v) = op.get(k) {
            out.insert(k.into(), v.clone());
        }
    }
    let mut params: Vec<Value> = op
        .get("parameters")
        .and_then(Value::as_array)
        .map(|ps| ps.iter().map(v2_parameter).collect())
        .unwrap_or_default();
    if let Some(content) = op
        .pointer("/requestBody/content")
        .and_then(Value::as_object)
    {
        out.insert("consumes".into(), json!(content.keys().collect::<Vec<_>>()));
        if let Some(schema) = content.values().next().and_then(|c| c.get("schema")) {
            params.push(json!({"in": "body", "name": "body", "required": true, "schema": schema}));
        }
    }
    out.insert("parameters".into(), Value::Array(params));
    out.insert("produces".into(), json!(["application/json"]));
    let schema = op
        .pointer("/responses/200/content/application~1json/schema")
        .cloned();
    let mut ok = json!({"description": "OK"});
    if let Some(s) = schema {
        ok["schema"] = s;
    }
    out.insert("responses".into(), json!({"200": ok}));
    Value::Object(out)
}

fn v2_parameter(p: &Value) -> Value {
    let mut out = json!({
        "name": p.get("name").cloned().unwrap_or(json!("")),
        "in": p.get("in").cloned().unwrap_or(json!("query")),
        "type": "string",
        "uniqueItems": true,
    });
    for k in ["description", "required"] {
        if let Some(v) = p.get(k) {
            out[k] = v.clone();
        }
    }
    out
}

/// The Swagger 2.0 document of every kind the plane serves.
pub fn document(reg: &Registry) -> Value {
    let mut definitions = Map::new();
    let mut paths = Map::new();
    for (g, v) in reg.group_versions() {
        let Some(doc) = openapi::group_version(reg, &g, &v) else {
            continue;
        };
        if let Some(schemas) = doc
            .pointer("/components/schemas")
            .and_then(Value::as_object)
        {
            for (name, s) in schemas {
                definitions.insert(name.clone(), s.clone());
            }
        }
        for (path, item) in doc["paths"].as_object().into_iter().flatten() {
            let mut v2 = Map::new();
            for (k, op) in item.as_object().into_iter().flatten() {
                if k == "parameters" {
                    let ps: Vec<Value> = op
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(v2_parameter)
                        .collect();
                    v2.insert(k.clone(), Value::Array(ps));
                } else {
                    v2.insert(k.clone(), v2_operation(op));
                }
            }
            paths.insert(path.clone(), Value::Object(v2));
        }
    }
    let mut doc = json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "v1.37.0"},
        "paths": paths,
        "definitions": definitions,
    });
    v2_refs(&mut doc);
    doc
}

/// A protobuf writer.
#[derive(Default)]
struct Out(Vec<u8>);

impl Out {
    fn varint(&mut self, mut v: u64) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.0.push(b);
                return;
            }
            self.0.push(b | 0x80);
        }
    }

    fn bytes(&mut self, field: u64, b: &[u8]) {
        self.varint((field << 3) | 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    fn string(&mut self, field: u64, s: &str) {
        if !s.is_empty() {
            self.bytes(field, s.as_bytes());
        }
    }

    fn message(&mut self, field: u64, m: Out) {
        self.bytes(field, &m.0);
    }

    fn boolean(&mut self, field: u64, b: bool) {
        if b {
            self.varint(field << 3);
            self.varint(1);
        }
    }

    fn int(&mut self, field: u64, n: i64) {
        self.varint(field << 3);
        self.varint(n as u64);
    }

    fn double(&mut self, field: u64, x: f64) {
        self.varint((field << 3) | 1);
        self.0.extend_from_slice(&x.to_le_bytes());
    }
}

/// `Any { yaml }`: a value as YAML text (JSON is YAML).
fn any(v: &Value) -> Out {
    let mut o = Out::default();
    o.string(2, &v.to_string());
    o
}

/// `repeated NamedAny vendor_extension`: every `x-` key.
fn extensions(o: &mut Out, field: u64, m: &Map<String, Value>) {
    for (k, v) in m.iter().filter(|(k, _)| k.starts_with("x-")) {
        let mut named = Out::default();
        named.string(1, k);
        named.message(2, any(v));
        o.message(field, named);
    }
}

fn strings(o: &mut Out, field: u64, v: Option<&Value>) {
    for s in v.and_then(Value::as_array).into_iter().flatten() {
        o.string(field, s.as_str().unwrap_or(""));
    }
}

fn schema(s: &Value) -> Out {
    let mut o = Out::default();
    let Some(m) = s.as_object() else {
        return o;
    };
    let text = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("");
    o.string(1, text("$ref"));
    o.string(2, text("format"));
    o.string(3, text("title"));
    o.string(4, text("description"));
    if let Some(d) = m.get("default") {
        o.message(5, any(d));
    }
    for (field, key) in [(6, "multipleOf"), (7, "maximum"), (9, "minimum")] {
        if let Some(x) = m.get(key).and_then(Value::as_f64) {
            o.double(field, x);
        }
    }
    for (field, key) in [
        (8, "exclusiveMaximum"),
        (10, "exclusiveMinimum"),
        (16, "uniqueItems"),
    ] {
        o.boolean(field, m.get(key).and_then(Value::as_bool).unwrap_or(false));
    }
    for (field, key) in [
        (11, "maxLength"),
        (12, "minLength"),
        (14, "maxItems"),
        (15, "minItems"),
        (17, "maxProperties"),
        (18, "minProperties"),
    ] {
        if let Some(n) = m.get(key).and_then(Value::as_i64) {
            o.int(field, n);
        }
    }
    o.string(13, text("pattern"));
    strings(&mut o, 19, m.get("required"));
    for e in m
        .get("enum")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        o.message(20, any(e));
    }
    match m.get("additionalProperties") {
        Some(Value::Bool(b)) => {
            let mut item = Out::default();
            item.varint(2 << 3);
            item.varint(u64::from(*b));
            o.message(21, item);
        }
        Some(a @ Value::Object(_)) => {
            let mut item = Out::default();
            item.message(1, schema(a));
            o.message(21, item);
        }
        _ => {}
    }
    if let Some(t) = m.get("type").and_then(Value::as_str) {
        let mut ty = Out::default();
        ty.string(1, t);
        o.message(22, ty);
    }
    if let Some(items) = m.get("items") {
        let mut it = Out::default();
        it.message(1, schema(items));
        o.message(23, it);
    }
    for a in m
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        o.message(24, schema(a));
    }
    if let Some(props) = m.get("properties").and_then(Value::as_object) {
        let mut p = Out::default();
        for (name, sub) in props {
            let mut named = Out::default();
            named.string(1, name);
            named.message(2, schema(sub));
            p.message(1, named);
        }
        o.message(25, p);
    }
    o.boolean(
        27,
        m.get("readOnly").and_then(Value::as_bool).unwrap_or(false),
    );
    extensions(&mut o, 31, m);
    o
}

fn parameter(p: &Value) -> Out {
    let text = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or("");
    let required = p.get("required").and_then(Value::as_bool).unwrap_or(false);
    let mut param = Out::default();
    if text("in") == "body" {
        let mut body = Out::default();
        body.string(1, text("description"));
        body.string(2, text("name"));
        body.string(3, "body");
        body.boolean(4, required);
        body.message(5, schema(p.get("schema").unwrap_or(&Value::Null)));
        param.message(1, body);
    } else {
        // Query and path parameters share their first fields; `type` and `uniqueItems` sit
        // one field later in a query parameter (after `allow_empty_value`).
        let query = text("in") != "path";
        let mut sub = Out::default();
        sub.boolean(1, required);
        sub.string(2, text("in"));
        sub.string(3, text("description"));
        sub.string(4, text("name"));
        sub.string(if query { 6 } else { 5 }, text("type"));
        sub.boolean(if query { 20 } else { 19 }, true);
        let mut non_body = Out::default();
        non_body.message(if query { 3 } else { 4 }, sub);
        param.message(2, non_body);
    }
    let mut item = Out::default();
    item.message(1, param);
    item
}

fn operation(op: &Value) -> Out {
    let mut o = Out::default();
    let m = op.as_object().cloned().unwrap_or_default();
    o.string(
        5,
        m.get("operationId").and_then(Value::as_str).unwrap_or(""),
    );
    strings(&mut o, 6, m.get("produces"));
    strings(&mut o, 7, m.get("consumes"));
    for p in m
        .get("parameters")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        o.message(8, parameter(p));
    }
    let mut responses = Out::default();
    for (code, r) in m
        .get("responses")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let mut response = Out::default();
        response.string(
            1,
            r.get("description").and_then(Value::as_str).unwrap_or(""),
        );
        if let Some(s) = r.get("schema") {
            let mut item = Out::default();
            item.message(1, schema(s));
            response.message(2, item);
        }
        let mut value = Out::default();
        value.message(1, response);
        let mut named = Out::default();
        named.string(1, code);
        named.message(2, value);
        responses.message(1, named);
    }
    o.message(9, responses);
    extensions(&mut o, 13, &m);
    o
}

/// The document in gnostic's protobuf encoding.
pub fn protobuf(doc: &Value) -> Vec<u8> {
    let mut d = Out::default();
    d.string(1, doc["swagger"].as_str().unwrap_or("2.0"));
    let mut info = Out::default();
    info.string(1, doc["info"]["title"].as_str().unwrap_or(""));
    info.string(2, doc["info"]["version"].as_str().unwrap_or(""));
    d.message(2, info);
    let mut paths = Out::default();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        let mut pi = Out::default();
        for (field, verb) in [
            (2, "get"),
            (3, "put"),
            (4, "post"),
            (5, "delete"),
            (8, "patch"),
        ] {
            if let Some(op) = item.get(verb) {
                pi.message(field, operation(op));
            }
        }
        for p in item
            .get("parameters")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            pi.message(9, parameter(p));
        }
        let mut named = Out::default();
        named.string(1, path);
        named.message(2, pi);
        paths.message(2, named);
    }
    d.message(8, paths);
    let mut defs = Out::default();
    for (name, s) in doc["definitions"].as_object().into_iter().flatten() {
        let mut named = Out::default();
        named.string(1, name);
        named.message(2, schema(s));
        defs.message(1, named);
    }
    d.message(9, defs);
    d.0
}
