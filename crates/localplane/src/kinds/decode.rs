//! Decoding a built-in object as the apiserver's Go decoder would: a value of the wrong JSON type,
//! a timestamp that does not parse or a `[]byte` that is not base64 fails the request (400,
//! `<Kind> in version "<v>" cannot be handled as a <Kind>: ..`), and `null`s become the field's
//! zero value, which is to say they are dropped.

use base64::Engine;
use serde_json::{Map, Value};

use super::gotime::{self, TimeLayout};
use super::schemas::{GO_TYPE, TIME};

fn json_type(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(_) => "bool".into(),
        Value::Number(_) => "number".into(),
        Value::String(_) => "string".into(),
        Value::Array(_) => "array".into(),
        Value::Object(_) => "object".into(),
    }
}

/// The Go type a schema node decodes into, as Go prints it.
fn go_type(schema: &Value) -> String {
    if let Some(t) = schema.get(GO_TYPE).and_then(Value::as_str) {
        return t.to_string();
    }
    if schema.get(TIME).and_then(Value::as_str) == Some("micro") {
        return "v1.MicroTime".into();
    }
    if schema.get(TIME).is_some() {
        return "v1.Time".into();
    }
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        return "intstr.IntOrString".into();
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("string") if schema.get("format").and_then(Value::as_str) == Some("byte") => {
            "[]uint8".into()
        }
        Some("string") => "string".into(),
        Some("boolean") => "bool".into(),
        Some("number") => "float64".into(),
        Some("integer") => match schema.get("format").and_then(Value::as_str) {
            Some("int32") => "int32".into(),
            _ => "int64".into(),
        },
        Some("array") => format!(
            "[]{}",
            schema
                .get("items")
                .map(go_type)
                .unwrap_or("interface {}".into())
        ),
        Some("object") => match schema.get("additionalProperties") {
            Some(a) if a.is_object() => format!("map[string]{}", go_type(a)),
            _ => "map[string]interface {}".into(),
        },
        _ => "interface {}".into(),
    }
}

/// Where the decoder is: the innermost struct and the field names that lead to the value.
struct Ctx<'a> {
    structure: &'a str,
    path: String,
}

fn type_error(v: &Value, ctx: &Ctx<'_>, schema: &Value, value_desc: Option<String>) -> String {
    let what = value_desc.unwrap_or_else(|| json_type(v));
    if ctx.path.is_empty() {
        format!(
            "json: cannot unmarshal {what} into Go value of type {}",
            go_type(schema)
        )
    } else {
        format!(
            "json: cannot unmarshal {what} into Go struct field {}.{} of type {}",
            ctx.structure,
            ctx.path,
            go_type(schema)
        )
    }
}

fn int_fits(n: &serde_json::Number, int32: bool) -> bool {
    match (n.as_i64(), int32) {
        (Some(i), true) => i32::try_from(i).is_ok(),
        (Some(_), false) => true,
        (None, _) => false,
    }
}

fn walk(schema: &Value, v: &mut Value, ctx: &Ctx<'_>) -> Result<(), String> {
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
        && schema.get("properties").is_none()
    {
        return Ok(());
    }
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        return match v {
            Value::String(_) => Ok(()),
            Value::Number(n) if n.as_i64().is_some() => Ok(()),
            _ => Err(type_error(v, ctx, schema, None)),
        };
    }
    if let Some(layout) = schema.get(TIME).and_then(Value::as_str) {
        let layout = if layout == "micro" {
            TimeLayout::Micro
        } else {
            TimeLayout::Rfc3339
        };
        return match v {
            Value::String(s) => gotime::parse(layout, s),
            _ => Err(format!(
                "json: cannot unmarshal {} into Go value of type string",
                json_type(v)
            )),
        };
    }
    let Some(ty) = schema.get("type").and_then(Value::as_str) else {
        return Ok(());
    };
    match (ty, &mut *v) {
        ("string", Value::String(s)) => {
            if schema.get("format").and_then(Value::as_str) == Some("byte")
                && let Err(e) = base64::engine::general_purpose::STANDARD.decode(s.as_bytes())
            {
                return Err(base64_error(e));
            }
            Ok(())
        }
        ("boolean", Value::Bool(_)) | ("number", Value::Number(_)) => Ok(()),
        ("integer", Value::Number(n)) => {
            let int32 = schema.get("format").and_then(Value::as_str) == Some("int32");
            if int_fits(n, int32) {
                Ok(())
            } else {
                let desc = format!("number {n}");
                Err(type_error(v, ctx, schema, Some(desc)))
            }
        }
        ("array", Value::Array(items)) => {
            if let Some(item_schema) = schema.get("items") {
                for it in items.iter_mut() {
                    if it.is_null() {
                        continue;
                    }
                    walk(item_schema, it, ctx)?;
                }
            }
            Ok(())
        }
        ("object", Value::Object(m)) => walk_object(schema, m, ctx),
        _ => Err(type_error(v, ctx, schema, None)),
    }
}

fn walk_object(schema: &Value, m: &mut Map<String, Value>, ctx: &Ctx<'_>) -> Result<(), String> {
    let structure = schema
        .get(GO_TYPE)
        .and_then(Value::as_str)
        .map(|t| t.rsplit('.').next().unwrap_or(t))
        .unwrap_or(ctx.structure);
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    m.retain(|_, v| !v.is_null());
    for (k, child) in m.iter_mut() {
        let Some(sub) = props.and_then(|p| p.get(k)).or(additional) else {
            continue;
        };
        let path = match (
            props.is_some_and(|p| p.contains_key(k)),
            ctx.path.is_empty(),
        ) {
            (true, true) => k.clone(),
            (true, false) => format!("{}.{k}", ctx.path),
            // A map's keys are not fields: Go names the map field.
            (false, _) => ctx.path.clone(),
        };
        walk(sub, child, &Ctx { structure, path })?;
    }
    Ok(())
}

/// Go's `base64.CorruptInputError`.
fn base64_error(e: base64::DecodeError) -> String {
    let at = match e {
        base64::DecodeError::InvalidByte(i, _) | base64::DecodeError::InvalidLastSymbol(i, _) => i,
        base64::DecodeError::InvalidLength(n) => n,
        base64::DecodeError::InvalidPadding => 0,
    };
    format!("illegal base64 data at input byte {at}")
}

/// Checks `obj` against the kind's inlined schema and drops its `null`s; the error is the
/// decoder's message, which the caller wraps for the request it answers.
pub fn decode(schema: &Value, obj: &mut Value) -> Result<(), String> {
    let Some(m) = obj.as_object_mut() else {
        return Err("json: cannot unmarshal into Go value: not an object".into());
    };
    walk_object(
        schema,
        m,
        &Ctx {
            structure: "",
            path: String::new(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::super::schemas::generate;
    use super::*;
    use serde_json::json;

    fn lease_schema() -> Value {
        generate::<k8s_openapi::api::coordination::v1::Lease>()
            .inlined
            .clone()
    }

    #[test]
    fn wrong_types_read_like_gos_decoder() {
        let s = lease_schema();
        let mut o = json!({"spec": {"leaseDurationSeconds": "ten"}});
        assert_eq!(
            decode(&s, &mut o).unwrap_err(),
            "json: cannot unmarshal string into Go struct field LeaseSpec.spec.leaseDurationSeconds of type int32"
        );
        let mut o = json!({"spec": {"leaseDurationSeconds": 1.5}});
        assert_eq!(
            decode(&s, &mut o).unwrap_err(),
            "json: cannot unmarshal number 1.5 into Go struct field LeaseSpec.spec.leaseDurationSeconds of type int32"
        );
        let mut o = json!({"metadata": {"labels": {"a": 1}}});
        assert_eq!(
            decode(&s, &mut o).unwrap_err(),
            "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type string"
        );
    }

    #[test]
    fn times_parse_with_their_layout_and_nulls_drop() {
        let s = lease_schema();
        let mut o = json!({"spec": {"renewTime": "yesterday", "holderIdentity": null}});
        assert!(
            decode(&s, &mut o)
                .unwrap_err()
                .starts_with(r#"parsing time "yesterday""#)
        );
        let mut o =
            json!({"spec": {"renewTime": "2026-01-01T00:00:00.000000Z", "holderIdentity": null}});
        decode(&s, &mut o).unwrap();
        assert_eq!(
            o,
            json!({"spec": {"renewTime": "2026-01-01T00:00:00.000000Z"}})
        );
    }

    #[test]
    fn bytes_must_be_base64() {
        let s = generate::<k8s_openapi::api::core::v1::Secret>()
            .inlined
            .clone();
        let mut o = json!({"data": {"k": "not base64!"}});
        assert_eq!(
            decode(&s, &mut o).unwrap_err(),
            "illegal base64 data at input byte 3"
        );
        let mut o = json!({"data": {"k": "aGk="}});
        decode(&s, &mut o).unwrap();
    }
}
