//! OpenAPI v3 (`/openapi/v3` and one document per group-version), enough for kubectl: `explain`
//! reads the schemas, `apply` reads the PATCH operations to pick a patch type and to learn that
//! the server does field validation.

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::resources::{Registry, ResourceDef};

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";

fn reference(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// The definition name the apiserver uses: the group reversed (`com.datumapis.network`), or
/// `io.k8s.api.<group>` for built-ins.
pub fn schema_name(def: &ResourceDef, version: &str, kind: &str) -> String {
    if let Some(b) = def.builtin
        && kind == def.kind
    {
        return b.schema().name.clone();
    }
    let prefix = if !def.custom {
        let g = if def.group.is_empty() {
            "core"
        } else {
            def.group.split('.').next().unwrap_or("core")
        };
        format!("io.k8s.api.{g}")
    } else {
        def.group.split('.').rev().collect::<Vec<_>>().join(".")
    };
    format!("{prefix}.{version}.{kind}")
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The group-versions a plane documents, each with its document's hash.
pub fn root(reg: &Registry, prefix: &str) -> Value {
    let mut paths = Map::new();
    for (g, v) in reg.group_versions() {
        let doc = group_version(reg, &g, &v).unwrap_or_default();
        let hash = hex::encode_upper(Sha256::digest(doc.to_string().as_bytes()));
        let p = gv_path(&g, &v);
        paths.insert(
            p.clone(),
            json!({"serverRelativeURL": format!("{prefix}/openapi/v3/{p}?hash={hash}")}),
        );
    }
    json!({"paths": paths})
}

fn param(name: &str, location: &str, description: &str) -> Value {
    let mut p = json!({"name": name, "in": location, "description": description, "schema": {"type": "string", "uniqueItems": true}});
    if location == "path" {
        p["required"] = json!(true);
    }
    p
}

fn write_params() -> Vec<Value> {
    vec![
        param(
            "dryRun",
            "query",
            "When present, indicates that modifications should not be persisted.",
        ),
        param(
            "fieldManager",
            "query",
            "fieldManager is a name associated with the actor or entity that is making these changes.",
        ),
        param(
            "fieldValidation",
            "query",
            "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields. Valid values are: Ignore, Warn, Strict.",
        ),
    ]
}

fn content(schema: Value, types: &[&str]) -> Value {
    let mut m = Map::new();
    for t in types {
        m.insert(t.to_string(), json!({"schema": schema.clone()}));
    }
    Value::Object(m)
}

/// The schema of a kind, and (for a built-in) the named definitions it refers to.
fn kind_schema(def: &ResourceDef, version: &str, components: &mut Map<String, Value>) -> Value {
    let gvk = json!([{"group": def.group, "version": version, "kind": def.kind}]);
    let builtin = def.builtin.map(|b| {
        let s = b.schema();
        for (k, v) in &s.components {
            components.insert(k.clone(), v.clone());
        }
        s.served.clone()
    });
    let base = builtin
        .or_else(|| {
            def.version(version)
                .and_then(|v| v.schema.as_deref().cloned())
        })
        .unwrap_or_else(|| {
            json!({"type": "object", "properties": {
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            }})
        });
    let mut s = base;
    if let Some(props) = s.get_mut("properties").and_then(Value::as_object_mut) {
        props.insert("apiVersion".into(), json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"}));
        props.insert("kind".into(), json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"}));
        props.insert("metadata".into(), json!({"allOf": [reference(OBJECT_META)], "default": {}, "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"}));
    }
    s["x-kubernetes-group-version-kind"] = gvk;
    s
}

/// The OpenAPI v3 document of one group-version.
pub fn group_version(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let defs: Vec<_> = reg
        .all()
        .filter(|d| d.group == group && d.version(version).is_some())
        .collect();
    if defs.is_empty() {
        return None;
    }
    let mut schemas = Map::new();
    let mut paths = Map::new();
    schemas.insert(OBJECT_META.into(), object_meta_schema());
    schemas.insert(LIST_META.into(), json!({"type": "object", "description": "ListMeta describes metadata that synthetic resources must have, including lists and various status objects.", "properties": {
        "continue": {"type": "string"}, "remainingItemCount": {"type": "integer", "format": "int64"}, "resourceVersion": {"type": "string"}}}));
    schemas.insert(PATCH.into(), json!({"type": "object", "description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body."}));
    for d in defs {
        let gvk = json!({"group": d.group, "version": version, "kind": d.kind});
        let name = schema_name(d, version, &d.kind);
        let list_name = schema_name(d, version, &d.list_kind);
        let schema = kind_schema(d, version, &mut schemas);
        schemas.insert(name.clone(), schema);
        schemas.insert(list_name.clone(), json!({
            "type": "object", "required": ["items"],
            "description": format!("{} is a list of {}", d.list_kind, d.kind),
            "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "items": {"type": "array", "items": reference(&name)},
                "metadata": {"allOf": [reference(LIST_META)], "default": {}},
            },
            "x-kubernetes-group-version-kind": [{"group": d.group, "version": version, "kind": d.list_kind}],
        }));
        let base = format!("/{}", gv_path(group, version));
        let scope = if d.namespaced {
            "/namespaces/{namespace}"
        } else {
            ""
        };
        let mut ptypes = vec![
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/apply-patch+yaml",
        ];
        if !d.custom {
            ptypes.push("application/strategic-merge-patch+json");
        }
        let mut item_params = vec![param("name", "path", "name of the object")];
        let mut coll_params = vec![];
        if d.namespaced {
            item_params.push(param("namespace", "path", "object name and auth scope"));
            coll_params.push(param("namespace", "path", "object name and auth scope"));
        }
        item_params.extend(write_params());
        coll_params.extend(write_params());
        let ok = |r: &str| json!({"200": {"description": "OK", "content": content(reference(r), &["application/json"])}});
        let op = |action: &str, params: &[Value]| {
            json!({
                "operationId": format!("{action}{}", d.kind),
                "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk,
                "parameters": params,
                "responses": ok(&name),
            })
        };
        let mut item = json!({
            "parameters": item_params,
            "get": op("get", &[]),
            "put": op("put", &write_params()),
            "delete": op("delete", &[]),
            "patch": op("patch", &write_params()),
        });
        item["put"]["requestBody"] =
            json!({"required": true, "content": content(reference(&name), &["application/json"])});
        item["patch"]["requestBody"] =
            json!({"required": true, "content": content(reference(PATCH), &ptypes)});
        // A review is only ever created: it has no object paths and no list.
        if !d.is_review() {
            paths.insert(format!("{base}{scope}/{}/{{name}}", d.plural), item);
        }
        let mut coll = json!({
            "parameters": coll_params,
            "get": op("list", &[]),
            "post": op("post", &write_params()),
        });
        coll["get"]["responses"] = ok(&list_name);
        if d.is_review()
            && let Some(c) = coll.as_object_mut()
        {
            c.remove("get");
        }
        coll["post"]["requestBody"] =
            json!({"required": true, "content": content(reference(&name), &["application/json"])});
        paths.insert(format!("{base}{scope}/{}", d.plural), coll);
        if d.version(version).is_some_and(|v| v.status_subresource) {
            let mut status = json!({
                "parameters": item_params_clone(d.namespaced),
                "get": op("get", &[]),
                "put": op("put", &write_params()),
                "patch": op("patch", &write_params()),
            });
            status["patch"]["requestBody"] =
                json!({"required": true, "content": content(reference(PATCH), &ptypes)});
            paths.insert(
                format!("{base}{scope}/{}/{{name}}/status", d.plural),
                status,
            );
        }
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.37.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

fn item_params_clone(namespaced: bool) -> Vec<Value> {
    let mut p = vec![param("name", "path", "name of the object")];
    if namespaced {
        p.push(param("namespace", "path", "object name and auth scope"));
    }
    p.extend(write_params());
    p
}

fn object_meta_schema() -> Value {
    let s = |d: &str| json!({"type": "string", "description": d});
    let map = |d: &str| json!({"type": "object", "additionalProperties": {"type": "string", "default": ""}, "description": d});
    json!({
        "type": "object",
        "description": "ObjectMeta is metadata that all persisted resources must have, which includes all objects users must create.",
        "properties": {
            "name": s("Name must be unique within a namespace."),
            "generateName": s("GenerateName is an optional prefix, used by the server, to generate a unique name ONLY IF the Name field has not been provided."),
            "namespace": s("Namespace defines the space within which each name must be unique."),
            "uid": s("UID is the unique in time and space value for this object."),
            "resourceVersion": s("An opaque value that represents the internal version of this object."),
            "generation": {"type": "integer", "format": "int64", "description": "A sequence number representing a specific generation of the desired state."},
            "creationTimestamp": {"type": "string", "format": "date-time", "description": "CreationTimestamp is a timestamp representing the server time when this object was created."},
            "deletionTimestamp": {"type": "string", "format": "date-time", "description": "DeletionTimestamp is RFC 3339 date and time at which this resource will be deleted."},
            "deletionGracePeriodSeconds": {"type": "integer", "format": "int64"},
            "labels": map("Map of string keys and values that can be used to organize and categorize (scope and select) objects."),
            "annotations": map("Annotations is an unstructured key value map stored with a resource."),
            "finalizers": {"type": "array", "items": {"type": "string", "default": ""}, "x-kubernetes-list-type": "set", "description": "Must be empty before the object is deleted from the registry."},
            "ownerReferences": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}, "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["uid"]},
            "managedFields": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
        }
    })
}
