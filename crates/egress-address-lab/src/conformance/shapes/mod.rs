//! The catalogue: every distinct request shape the controller, this tool, the kubectl tests and
//! the Python client suite make on a cell, as data.
//!
//! Milo IPAM's endpoints are not here: the real control plane has no Milo to judge them by.
//!
//! Templates: `{ns}` is the run's namespace, `{sys}` the controller's (`egress-address-system`),
//! `{name}` the shape's own object name (its id), `{rv}` and `{uid}` those of the last object
//! its setup created. Every shape works on objects named after itself, so no shape sees
//! another's writes, except the cluster-wide list, which sees them all alike on both servers.

mod clients;
mod controller;

use serde::Serialize;
use serde_json::{Value, json};

/// Who sends a request: the real control plane's identities, and one with a token nobody issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Who {
    /// `admin`, in `system:masters`.
    Admin,
    /// The controller's ServiceAccount, bound by the shipped RBAC (config/rbac).
    Controller,
    /// `operator`, bound to the bootstrap `view` ClusterRole.
    Operator,
    /// A bearer token neither server knows.
    Nobody,
}

impl Who {
    pub fn label(self) -> &'static str {
        match self {
            Who::Admin => "admin",
            Who::Controller => "controller",
            Who::Operator => "operator",
            Who::Nobody => "nobody",
        }
    }
}

pub const JSON: &str = "application/json";
pub const MERGE: &str = "application/merge-patch+json";
pub const STRATEGIC: &str = "application/strategic-merge-patch+json";
pub const APPLY: &str = "application/apply-patch+yaml";
pub const JSON_PATCH: &str = "application/json-patch+json";
pub const YAML: &str = "application/yaml";
pub const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
pub const METADATA_LIST: &str = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io";

/// The controller's namespace as the shipped kustomization names it.
pub const SYSTEM_NAMESPACE: &str = "egress-address-system";

/// One request shape and the objects it needs first.
#[derive(Debug, Clone)]
pub struct Shape {
    pub id: &'static str,
    /// Who makes it: `controller`, `cli`, `kubectl`, `python`.
    pub from: &'static str,
    pub who: Who,
    pub method: &'static str,
    pub path: String,
    pub query: &'static str,
    pub content_type: Option<&'static str>,
    pub headers: Vec<(&'static str, &'static str)>,
    pub body: Option<Value>,
    /// Created by the admin, in order, before the request.
    pub setup: Vec<Value>,
}

impl Shape {
    /// A shape the controller sends as itself.
    fn controller(id: &'static str, method: &'static str, path: &str) -> Shape {
        Shape::new(id, "controller", Who::Controller, method, path)
    }

    /// A shape the kubectl tests send as the admin.
    fn kubectl(id: &'static str, method: &'static str, path: &str) -> Shape {
        Shape::new(id, "kubectl", Who::Admin, method, path)
    }

    fn new(
        id: &'static str,
        from: &'static str,
        who: Who,
        method: &'static str,
        path: &str,
    ) -> Shape {
        Shape {
            id,
            from,
            who,
            method,
            path: path.into(),
            query: "",
            content_type: None,
            headers: vec![],
            body: None,
            setup: vec![],
        }
    }

    fn query(mut self, q: &'static str) -> Shape {
        self.query = q;
        self
    }

    fn body(mut self, content_type: &'static str, body: Value) -> Shape {
        self.content_type = Some(content_type);
        self.body = Some(body);
        self
    }

    fn header(mut self, name: &'static str, value: &'static str) -> Shape {
        self.headers.push((name, value));
        self
    }

    fn given(mut self, object: Value) -> Shape {
        self.setup.push(object);
        self
    }

    /// Whether the answer is a stream of watch events.
    pub fn is_watch(&self) -> bool {
        self.query
            .split('&')
            .any(|p| p == "watch=true" || p == "watch=1")
    }

    /// The path and query as shown in the table.
    pub fn request_line(&self) -> String {
        if self.query.is_empty() {
            self.path.clone()
        } else {
            format!("{}?{}", self.path, self.query)
        }
    }
}

const SHARDS: &str = "/apis/network.datumapis.com/v1alpha1/namespaces/{ns}/egressshards";
const SHARD: &str = "/apis/network.datumapis.com/v1alpha1/namespaces/{ns}/egressshards/{name}";
const ALL_SHARDS: &str = "/apis/network.datumapis.com/v1alpha1/egressshards";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/{sys}/leases";
const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/{sys}/leases/{name}";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/{ns}/events";
const EVENT: &str = "/apis/events.k8s.io/v1/namespaces/{ns}/events/{name}";
const CONFIGMAPS: &str = "/api/v1/namespaces/{ns}/configmaps";
const CONFIGMAP: &str = "/api/v1/namespaces/{ns}/configmaps/{name}";
const NAMESPACES: &str = "/api/v1/namespaces";
const SECRETS: &str = "/api/v1/namespaces/{ns}/secrets";
const SECRET: &str = "/api/v1/namespaces/{ns}/secrets/{name}";
const SERVICES: &str = "/api/v1/namespaces/{ns}/services";
const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/{ns}/deployments";
const SSAR: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
const SSRR: &str = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews";
const SSR: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
const SARS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
/// The controller's writes name it as their field manager.
const FIELD_MANAGER: &str = "fieldManager=egress-address-controller";

/// A shard targeting a node, with more spec fields from `extra`.
pub fn shard(extra: Value) -> Value {
    let mut spec = json!({"targetRef": {"kind": "Node", "name": "node-{name}"}});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    json!({
        "apiVersion": "network.datumapis.com/v1alpha1",
        "kind": "EgressShard",
        "metadata": {"name": "{name}", "namespace": "{ns}"},
        "spec": spec,
    })
}

/// Shard `name` in namespace `ns`, targeting a node: what the scenarios make.
pub fn shard_in(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "network.datumapis.com/v1alpha1",
        "kind": "EgressShard",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"targetRef": {"kind": "Node", "name": format!("node-{name}")}},
    })
}

/// What the controller writes in its one update: address, claim ref and label.
fn assigned() -> Value {
    let mut s = shard(json!({
        "shardAddressIPv6": "2001:db8::1",
        "shardAddressIPv6ClaimRef": {"apiGroup": "ipam.miloapis.com", "kind": "IPClaim",
            "project": "platform", "namespace": "default", "name": "egress-shard-ipv6.{name}"},
    }));
    s["metadata"]["labels"] = json!({"network.datumapis.com/egress-ipv6": "2001-db8--1"});
    s
}

/// The controller's one write: address, ref and label, conditional on `rv`.
fn assign_patch(address: &str, rv: &str) -> Value {
    json!({
        "metadata": {"resourceVersion": rv,
                     "labels": {"network.datumapis.com/egress-ipv6": "true"}},
        "spec": {"shardAddressIPv6": address,
                 "shardAddressIPv6ClaimRef": {"apiGroup": "ipam.miloapis.com", "kind": "IPClaim",
                     "project": "platform", "namespace": "default",
                     "name": "egress-shard-ipv6.{name}"}},
    })
}

fn with_rv(mut object: Value, rv: &str) -> Value {
    object["metadata"]["resourceVersion"] = json!(rv);
    object
}

fn lease(holder: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "{name}", "namespace": "{sys}"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                 "acquireTime": "2026-01-01T00:00:00.000000Z",
                 "renewTime": "2026-01-01T00:00:00.000000Z", "leaseTransitions": 0},
    })
}

fn event() -> Value {
    json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "{name}", "namespace": "{ns}"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "network.datumapis.com/egress-address",
        "reportingInstance": "egress-address-controller-0",
        "action": "AssignAddress", "reason": "AddressAssigned", "type": "Normal",
        "note": "assigned 2001:db8::1",
        "regarding": {"apiVersion": "network.datumapis.com/v1alpha1", "kind": "EgressShard",
                      "namespace": "{ns}", "name": "shard-0",
                      "uid": "8d3e1a52-0c4b-4c1e-9d7a-2f6b5e4a3c21", "resourceVersion": "41"},
    })
}

fn configmap(data: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "{name}", "namespace": "{ns}", "labels": {"team": "a"}},
        "data": data,
    })
}

fn secret(data: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "{name}", "namespace": "{ns}"},
        "data": data,
    })
}

/// A Deployment whose template carries `labels` (its selector is `app: a`) and one container
/// of `image`.
fn deployment(labels: Value, image: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "{name}", "namespace": "{ns}"},
        "spec": {"selector": {"matchLabels": {"app": "a"}},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [{"name": "c", "image": image}]}}},
    })
}

/// `kubectl auth can-i VERB RESOURCE` as `who`: a SelfSubjectAccessReview.
fn can_i(
    id: &'static str,
    who: Who,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: &str,
) -> Shape {
    Shape::new(id, "kubectl", who, "POST", SSAR)
        .body(JSON, access_review(verb, group, resource, namespace))
}

/// A SelfSubjectAccessReview asking about nothing.
fn can_i_without_attributes() -> Shape {
    Shape::new(
        "ctl-can-i-without-attributes",
        "kubectl",
        Who::Controller,
        "POST",
        SSAR,
    )
    .body(
        JSON,
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
               "spec": {}}),
    )
}

fn access_review(verb: &str, group: &str, resource: &str, namespace: &str) -> Value {
    json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": verb, "group": group, "resource": resource,
                                        "namespace": namespace}},
    })
}

/// A TokenReview of `spec`, as the metrics endpoint sends one for a caller's bearer token.
fn token_review(spec: Value) -> Value {
    json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec})
}

/// Whether the subject of `spec` may get `/metrics`, as the metrics endpoint asks.
fn metrics_review(mut spec: Value) -> Value {
    spec["nonResourceAttributes"] = json!({"path": "/metrics", "verb": "get"});
    json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec})
}

fn delete_options(preconditions: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": preconditions})
}

/// Every shape, in the order they run.
pub fn catalogue() -> Vec<Shape> {
    let mut all = controller::controller();
    all.extend(clients::clients());
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_names() {
        let shapes = catalogue();
        let mut ids: Vec<&str> = shapes.iter().map(|s| s.id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), shapes.len(), "a shape id is used twice");
        for id in ids {
            assert!(
                id.len() <= 63
                    && id
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                "{id} is not usable as an object name"
            );
        }
    }

    #[test]
    fn a_watch_is_recognised_by_its_query() {
        let shapes = catalogue();
        let watches: Vec<&str> = shapes
            .iter()
            .filter(|s| s.is_watch())
            .map(|s| s.id)
            .collect();
        assert_eq!(
            watches,
            [
                "ctl-shards-watch",
                "ctl-shards-watch-initial-events",
                "ctl-shards-watch-rv-not-a-number"
            ]
        );
    }
}
