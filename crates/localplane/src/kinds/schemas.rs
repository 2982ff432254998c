//! The OpenAPI schemas of the built-in kinds, from the Kubernetes API types themselves.
//!
//! Each kind's schema comes in two forms: the one `/openapi/v3` serves (named definitions joined
//! by `$ref`, as the apiserver publishes them) and one with every `$ref` inlined, which the
//! decoder, pruning and validation walk. Inlining notes what the apiserver's Go types would
//! know and a schema does not: the Go type of each struct (for decode errors) and which strings
//! are `metav1.Time` or `metav1.MicroTime` (they parse differently). A type that contains itself
//! (only the CRD kind's `JSONSchemaProps`) is cut off where it recurs and kept as free-form JSON.

use std::sync::{Arc, OnceLock};

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

/// The Go type of a struct node: `v1.LeaseSpec`.
pub const GO_TYPE: &str = "x-localplane-go-type";
/// `micro` or `rfc3339` on a string node holding a `metav1.MicroTime` or `metav1.Time`.
pub const TIME: &str = "x-localplane-time";

const REF_PREFIX: &str = "#/components/schemas/";

/// One built-in kind's schema, served and inlined.
#[derive(Debug)]
pub struct BuiltinSchema {
    /// The definition's name (`io.k8s.api.coordination.v1.Lease`).
    pub name: String,
    /// The kind's schema as served, with `$ref`s into `components`.
    pub served: Value,
    /// The named definitions `served` refers to.
    pub components: Map<String, Value>,
    /// Every `$ref` inlined, with [`GO_TYPE`] and [`TIME`] notes.
    pub inlined: Value,
}

/// `io.k8s.api.coordination.v1.LeaseSpec` -> `v1.LeaseSpec`, as Go prints the type.
fn go_type(name: &str) -> String {
    let mut parts = name.rsplit('.');
    let ty = parts.next().unwrap_or(name);
    match parts.next() {
        Some(pkg) => format!("{pkg}.{ty}"),
        None => ty.to_string(),
    }
}

fn ref_name(v: &Value) -> Option<&str> {
    v.get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix(REF_PREFIX))
}

/// Inlines `$ref`s (alone, or as the one entry of an `allOf`) below `node`.
fn inline(node: &Value, defs: &Map<String, Value>, stack: &mut Vec<String>) -> Value {
    let target = ref_name(node).map(str::to_string).or_else(|| {
        node.get("allOf")
            .and_then(Value::as_array)
            .filter(|a| a.len() == 1)
            .and_then(|a| ref_name(&a[0]).map(str::to_string))
    });
    if let Some(name) = target {
        if stack.contains(&name) {
            return json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
        }
        let Some(def) = defs.get(&name) else {
            return json!({"x-kubernetes-preserve-unknown-fields": true});
        };
        stack.push(name.clone());
        let mut out = inline(def, defs, stack);
        stack.pop();
        if let Some(o) = out.as_object_mut() {
            if name == "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime" {
                o.insert(TIME.into(), json!("micro"));
            } else if name == "io.k8s.apimachinery.pkg.apis.meta.v1.Time" {
                o.insert(TIME.into(), json!("rfc3339"));
            } else if o.get("type") == Some(&json!("object")) {
                o.insert(GO_TYPE.into(), json!(go_type(&name)));
            }
            for k in ["description", "default"] {
                if let Some(v) = node.get(k) {
                    o.insert(k.into(), v.clone());
                }
            }
        }
        return out;
    }
    match node {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let v = match k.as_str() {
                        "properties" => Value::Object(
                            v.as_object()
                                .map(|p| {
                                    p.iter()
                                        .map(|(pk, pv)| (pk.clone(), inline(pv, defs, stack)))
                                        .collect()
                                })
                                .unwrap_or_default(),
                        ),
                        "items" | "additionalProperties" if v.is_object() => inline(v, defs, stack),
                        _ => v.clone(),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Generates a kind's schemas from its Rust API type.
pub fn generate<T: JsonSchema>() -> Arc<BuiltinSchema> {
    let mut generator = SchemaSettings::openapi3().into_generator();
    let root = generator.root_schema_for::<T>();
    let mut served = serde_json::to_value(&root).expect("schemas serialise");
    let o = served
        .as_object_mut()
        .expect("a kind's schema is an object");
    let components = o
        .remove("components")
        .and_then(|c| c.get("schemas").cloned())
        .and_then(|s| s.as_object().cloned())
        .unwrap_or_default();
    o.remove("$schema");
    // The Rust types hold `metadata` as a plain struct, so the generated schema requires it; the
    // Go types mark it `omitempty`, and the apiserver's OpenAPI requires no kind's metadata
    // (kubectl validates against this: a TokenReview has none).
    if let Some(required) = o.get_mut("required").and_then(Value::as_array_mut) {
        required.retain(|r| r != "metadata");
        if required.is_empty() {
            o.remove("required");
        }
    }
    let title = o
        .remove("title")
        .and_then(|t| t.as_str().map(str::to_string))
        .unwrap_or_default();
    let mut stack = vec![title.clone()];
    let mut inlined = inline(&served, &components, &mut stack);
    inlined[GO_TYPE] = json!(go_type(&title));
    Arc::new(BuiltinSchema {
        name: title,
        served,
        components,
        inlined,
    })
}

/// Generates each schema once per process, on first use.
pub struct Lazy(OnceLock<Arc<BuiltinSchema>>, fn() -> Arc<BuiltinSchema>);

impl Lazy {
    pub const fn new(f: fn() -> Arc<BuiltinSchema>) -> Lazy {
        Lazy(OnceLock::new(), f)
    }

    pub fn get(&self) -> Arc<BuiltinSchema> {
        self.0.get_or_init(self.1).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inlined_schemas_know_go_types_and_time_layouts() {
        let s = generate::<k8s_openapi::api::coordination::v1::Lease>();
        let spec = &s.inlined["properties"]["spec"];
        assert_eq!(spec[GO_TYPE], "v1.LeaseSpec");
        assert_eq!(spec["properties"]["renewTime"][TIME], "micro");
        assert_eq!(
            spec["properties"]["leaseDurationSeconds"]["format"],
            "int32"
        );
        assert_eq!(
            s.inlined["properties"]["metadata"]["properties"]["creationTimestamp"][TIME],
            "rfc3339"
        );
        assert!(s.served["properties"]["spec"].to_string().contains("$ref"));
        assert!(
            s.components
                .contains_key("io.k8s.api.coordination.v1.LeaseSpec")
        );
    }

    #[test]
    fn a_type_that_contains_itself_is_cut_where_it_recurs() {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let s = generate::<CustomResourceDefinition>();
        let props = &s.inlined["properties"]["spec"]["properties"]["versions"]["items"]["properties"]
            ["schema"]["properties"]["openAPIV3Schema"];
        assert_eq!(props[GO_TYPE], "v1.JSONSchemaProps");
        assert_eq!(
            props["properties"]["properties"]["additionalProperties"]["x-kubernetes-preserve-unknown-fields"],
            true
        );
    }
}
