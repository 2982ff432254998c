//! The catalogue: every distinct request shape the controller, this tool, the kubectl tests and
//! the Python client suite make on a cell, as data.
//!
//! Milo IPAM's endpoints are not here: the real control plane has no Milo to judge them by.
//!
//! Templates: `{ns}` is the run's namespace, `{sys}` the controller's (`egress-address-system`),
//! `{name}` the shape's own object name (its id), `{rv}` and `{uid}` those of the last object
//! its setup created. Every shape works on objects named after itself, so no shape sees
//! another's writes, except the cluster-wide list, which sees them all alike on both servers.

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
const SSAR: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
const SSRR: &str = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews";
const SSR: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

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
                      "namespace": "{ns}", "name": "shard-0"},
    })
}

fn configmap(data: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "{name}", "namespace": "{ns}", "labels": {"team": "a"}},
        "data": data,
    })
}

fn access_review(verb: &str, group: &str, resource: &str, namespace: &str) -> Value {
    json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": verb, "group": group, "resource": resource,
                                        "namespace": namespace}},
    })
}

fn delete_options(preconditions: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": preconditions})
}

/// Every shape, in the order they run.
pub fn catalogue() -> Vec<Shape> {
    use Who::*;
    let shard0 = || shard(json!({}));
    let mut changed_address = assigned();
    changed_address["spec"]["shardAddressIPv6"] = json!("2001:db8::2");
    let mut bad_lease = lease("pod-a");
    bad_lease["spec"]["leaseDurationSeconds"] = json!(0);
    let mut bad_event = event();
    bad_event
        .as_object_mut()
        .map(|e| e.remove("reportingController"));
    let mut unknown_field = shard0();
    unknown_field["spec"]["bogus"] = json!(true);
    let mut no_target = shard0();
    no_target["spec"] = json!({});
    let mut retargeted = shard0();
    retargeted["spec"]["targetRef"]["name"] = json!("node-other");
    let mut with_status = shard0();
    with_status["status"] = json!({"conditions": [{"type": "Ready", "status": "True",
        "reason": "Programmed", "message": "ok", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
    let mut labelled = shard0();
    labelled["metadata"]["labels"] = json!({"team": "a"});

    vec![
        // The controller: its shard cache, its one write, its identity read, leader election,
        // events.
        Shape::new(
            "ctl-shards-list",
            "controller",
            Controller,
            "GET",
            ALL_SHARDS,
        )
        .query("limit=500")
        .given(shard0()),
        Shape::new("ctl-shards-watch", "controller", Controller, "GET", SHARDS)
            .query("watch=true&timeoutSeconds=1&fieldSelector=metadata.name%3D{name}")
            .given(shard0()),
        Shape::new(
            "ctl-shards-watch-initial-events",
            "controller",
            Controller,
            "GET",
            SHARDS,
        )
        .query(
            "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan\
                 &allowWatchBookmarks=true&timeoutSeconds=1&fieldSelector=metadata.name%3D{name}",
        )
        .given(shard0()),
        Shape::new("ctl-shard-get", "controller", Controller, "GET", SHARD).given(shard0()),
        Shape::new(
            "ctl-shard-get-missing",
            "controller",
            Controller,
            "GET",
            SHARD,
        ),
        Shape::new("ctl-shard-patch", "controller", Controller, "PATCH", SHARD)
            .query("fieldManager=egress-address-controller")
            .body(MERGE, assign_patch("2001:db8::1", "{rv}"))
            .given(shard0()),
        Shape::new(
            "ctl-shard-patch-stale",
            "controller",
            Controller,
            "PATCH",
            SHARD,
        )
        .query("fieldManager=egress-address-controller")
        .body(MERGE, assign_patch("2001:db8::1", "1"))
        .given(shard0()),
        Shape::new(
            "ctl-shard-patch-write-once",
            "controller",
            Controller,
            "PATCH",
            SHARD,
        )
        .query("fieldManager=egress-address-controller")
        .body(MERGE, assign_patch("2001:db8::2", "{rv}"))
        .given(assigned()),
        Shape::new(
            "ctl-shard-update-forbidden",
            "controller",
            Controller,
            "PUT",
            SHARD,
        )
        .body(JSON, with_rv(assigned(), "{rv}"))
        .given(shard0()),
        Shape::new(
            "ctl-shard-status-forbidden",
            "controller",
            Controller,
            "PUT",
            &format!("{SHARD}/status"),
        )
        .body(JSON, with_rv(with_status.clone(), "{rv}"))
        .given(shard0()),
        Shape::new(
            "ctl-shard-delete-forbidden",
            "controller",
            Controller,
            "DELETE",
            SHARD,
        )
        .given(shard0()),
        Shape::new(
            "ctl-kube-system",
            "controller",
            Controller,
            "GET",
            "/api/v1/namespaces/kube-system",
        ),
        Shape::new(
            "ctl-namespace-forbidden",
            "controller",
            Controller,
            "GET",
            "/api/v1/namespaces/default",
        ),
        Shape::new(
            "ctl-lease-get-missing",
            "controller",
            Controller,
            "GET",
            LEASE,
        ),
        Shape::new("ctl-lease-create", "controller", Controller, "POST", LEASES)
            .body(JSON, lease("pod-a")),
        Shape::new(
            "ctl-lease-create-exists",
            "controller",
            Controller,
            "POST",
            LEASES,
        )
        .body(JSON, lease("pod-b"))
        .given(lease("pod-a")),
        Shape::new("ctl-lease-get", "controller", Controller, "GET", LEASE).given(lease("pod-a")),
        Shape::new("ctl-lease-update", "controller", Controller, "PUT", LEASE)
            .body(JSON, with_rv(lease("pod-b"), "{rv}"))
            .given(lease("pod-a")),
        Shape::new(
            "ctl-lease-update-stale",
            "controller",
            Controller,
            "PUT",
            LEASE,
        )
        .body(JSON, with_rv(lease("pod-b"), "1"))
        .given(lease("pod-a")),
        Shape::new(
            "ctl-lease-create-invalid",
            "controller",
            Controller,
            "POST",
            LEASES,
        )
        .body(JSON, bad_lease),
        Shape::new(
            "ctl-lease-delete-forbidden",
            "controller",
            Controller,
            "DELETE",
            LEASE,
        )
        .given(lease("pod-a")),
        Shape::new("ctl-event-create", "controller", Controller, "POST", EVENTS)
            .body(JSON, event()),
        Shape::new(
            "ctl-event-series-patch",
            "controller",
            Controller,
            "PATCH",
            EVENT,
        )
        .body(
            MERGE,
            json!({"series": {"count": 2,
                "lastObservedTime": "2026-01-01T00:01:00.000000Z"}}),
        )
        .given(event()),
        Shape::new(
            "ctl-event-create-invalid",
            "controller",
            Controller,
            "POST",
            EVENTS,
        )
        .body(JSON, bad_event),
        Shape::new(
            "ctl-events-list-forbidden",
            "controller",
            Controller,
            "GET",
            EVENTS,
        ),
        Shape::new("ctl-whoami", "cli", Controller, "POST", SSR).body(
            JSON,
            json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
        ),
        Shape::new(
            "ctl-can-i-patch-shards",
            "kubectl",
            Controller,
            "POST",
            SSAR,
        )
        .body(
            JSON,
            access_review("patch", "network.datumapis.com", "egressshards", "{ns}"),
        ),
        Shape::new(
            "ctl-can-i-delete-shards",
            "kubectl",
            Controller,
            "POST",
            SSAR,
        )
        .body(
            JSON,
            access_review("delete", "network.datumapis.com", "egressshards", "{ns}"),
        ),
        Shape::new(
            "ctl-can-i-create-leases",
            "kubectl",
            Controller,
            "POST",
            SSAR,
        )
        .body(
            JSON,
            access_review("create", "coordination.k8s.io", "leases", "{sys}"),
        ),
        Shape::new(
            "ctl-can-i-get-kube-system",
            "kubectl",
            Controller,
            "POST",
            SSAR,
        )
        .body(
            JSON,
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": {"verb": "get", "resource": "namespaces",
                                                "name": "kube-system"}}}),
        ),
        Shape::new("ctl-can-i-list", "kubectl", Controller, "POST", SSRR).body(
            JSON,
            json!({"apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectRulesReview", "spec": {"namespace": "{sys}"}}),
        ),
        // kubectl and the operator on shards.
        Shape::new("kc-shard-create", "kubectl", Admin, "POST", SHARDS)
            .query("fieldManager=kubectl-create&fieldValidation=Strict")
            .body(JSON, shard0()),
        Shape::new("kc-shard-create-exists", "kubectl", Admin, "POST", SHARDS)
            .body(JSON, shard0())
            .given(shard0()),
        Shape::new(
            "kc-shard-create-unknown-warn",
            "kubectl",
            Admin,
            "POST",
            SHARDS,
        )
        .query("fieldValidation=Warn")
        .body(JSON, unknown_field.clone()),
        Shape::new(
            "kc-shard-create-unknown-strict",
            "kubectl",
            Admin,
            "POST",
            SHARDS,
        )
        .query("fieldValidation=Strict")
        .body(JSON, unknown_field),
        Shape::new("kc-shard-create-invalid", "kubectl", Admin, "POST", SHARDS)
            .body(JSON, no_target),
        Shape::new("kc-shard-create-dry-run", "kubectl", Admin, "POST", SHARDS)
            .query("dryRun=All&fieldManager=kubectl-create")
            .body(JSON, shard0()),
        Shape::new("kc-shard-apply", "kubectl", Admin, "PATCH", SHARD)
            .query("fieldManager=kubectl&fieldValidation=Strict&force=false")
            .body(APPLY, labelled.clone()),
        Shape::new("kc-shard-apply-conflict", "kubectl", Admin, "PATCH", SHARD)
            .query("fieldManager=kubectl")
            .body(APPLY, retargeted.clone())
            .given(shard0()),
        Shape::new("kc-shard-apply-force", "kubectl", Admin, "PATCH", SHARD)
            .query("fieldManager=kubectl&force=true")
            .body(APPLY, retargeted)
            .given(shard0()),
        Shape::new("kc-shard-apply-dry-run", "kubectl", Admin, "PATCH", SHARD)
            .query("fieldManager=kubectl&dryRun=All")
            .body(APPLY, labelled)
            .given(shard0()),
        Shape::new("kc-shard-merge-patch", "kubectl", Admin, "PATCH", SHARD)
            .query("fieldManager=kubectl-label")
            .body(MERGE, json!({"metadata": {"labels": {"team": "b"}}}))
            .given(shard0()),
        Shape::new("kc-shard-json-patch", "kubectl", Admin, "PATCH", SHARD)
            .query("fieldManager=kubectl-patch")
            .body(
                JSON_PATCH,
                json!([{"op": "add", "path": "/metadata/labels",
                                     "value": {"team": "c"}}]),
            )
            .given(shard0()),
        Shape::new(
            "kc-shard-json-patch-test-fails",
            "kubectl",
            Admin,
            "PATCH",
            SHARD,
        )
        .body(
            JSON_PATCH,
            json!([{"op": "test", "path": "/spec/targetRef/name",
                                     "value": "someone-else"}]),
        )
        .given(shard0()),
        Shape::new("kc-shard-strategic-patch", "kubectl", Admin, "PATCH", SHARD)
            .body(STRATEGIC, json!({"metadata": {"labels": {"team": "d"}}}))
            .given(shard0()),
        Shape::new(
            "kc-shard-write-once-patch",
            "kubectl",
            Admin,
            "PATCH",
            SHARD,
        )
        .body(MERGE, json!({"spec": {"shardAddressIPv6": "2001:db8::9"}}))
        .given(assigned()),
        Shape::new(
            "kc-shard-status-update",
            "kubectl",
            Admin,
            "PUT",
            &format!("{SHARD}/status"),
        )
        .body(JSON, with_rv(with_status, "{rv}"))
        .given(shard0()),
        Shape::new("kc-shards-table", "kubectl", Admin, "GET", SHARDS)
            .query("labelSelector=team%3Da&limit=500")
            .header("Accept", TABLE)
            .given({
                let mut s = assigned();
                s["metadata"]["labels"]["team"] = json!("a");
                s
            }),
        Shape::new("kc-shard-get-table", "kubectl", Admin, "GET", SHARD)
            .header("Accept", TABLE)
            .given(shard0()),
        Shape::new("kc-shards-label-selector", "kubectl", Admin, "GET", SHARDS)
            .query("labelSelector=team%20in%20(a)")
            .given({
                let mut s = shard0();
                s["metadata"]["labels"] = json!({"team": "a"});
                s
            }),
        Shape::new(
            "kc-shards-label-selector-bad",
            "kubectl",
            Admin,
            "GET",
            SHARDS,
        )
        .query("labelSelector=team%3D%3Da%3Db"),
        Shape::new("kc-shards-field-selector", "kubectl", Admin, "GET", SHARDS)
            .query("fieldSelector=metadata.name%3D{name}")
            .given(shard0()),
        Shape::new(
            "kc-shards-field-selector-bad",
            "kubectl",
            Admin,
            "GET",
            SHARDS,
        )
        .query("fieldSelector=spec.targetRef.name%3Dx"),
        Shape::new(
            "kc-shard-delete-uid-mismatch",
            "kubectl",
            Admin,
            "DELETE",
            SHARD,
        )
        .body(
            JSON,
            delete_options(json!({"uid": "00000000-0000-4000-8000-000000000000"})),
        )
        .given(shard0()),
        Shape::new(
            "kc-shard-delete-precondition-ok",
            "kubectl",
            Admin,
            "DELETE",
            SHARD,
        )
        .body(
            JSON,
            delete_options(json!({"uid": "{uid}", "resourceVersion": "{rv}"})),
        )
        .given(shard0()),
        Shape::new("kc-shard-delete-missing", "kubectl", Admin, "DELETE", SHARD),
        Shape::new(
            "kc-unknown-resource",
            "kubectl",
            Admin,
            "GET",
            "/apis/network.datumapis.com/v1alpha1/namespaces/{ns}/egressthings",
        ),
        Shape::new("kc-unauthenticated", "kubectl", Nobody, "GET", NAMESPACES),
        // The operator: reads through `view`, nothing else.
        Shape::new(
            "op-shards-list-forbidden",
            "cli",
            Operator,
            "GET",
            ALL_SHARDS,
        ),
        Shape::new("op-configmap-get", "kubectl", Operator, "GET", CONFIGMAP)
            .given(configmap(json!({"a": "1"}))),
        Shape::new(
            "op-configmap-create-forbidden",
            "kubectl",
            Operator,
            "POST",
            CONFIGMAPS,
        )
        .body(JSON, configmap(json!({"a": "1"}))),
        Shape::new(
            "op-can-i-create-configmaps",
            "kubectl",
            Operator,
            "POST",
            SSAR,
        )
        .body(JSON, access_review("create", "", "configmaps", "{ns}")),
        // Namespaces.
        Shape::new("kc-namespace-create", "kubectl", Admin, "POST", NAMESPACES).body(
            JSON,
            json!({"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": "{name}"}}),
        ),
        Shape::new(
            "kc-namespace-get-table",
            "kubectl",
            Admin,
            "GET",
            "/api/v1/namespaces/{ns}",
        )
        .header("Accept", TABLE),
        Shape::new(
            "kc-namespace-delete-kube-system",
            "kubectl",
            Admin,
            "DELETE",
            "/api/v1/namespaces/kube-system",
        ),
        Shape::new(
            "kc-namespace-delete",
            "kubectl",
            Admin,
            "DELETE",
            "/api/v1/namespaces/{name}",
        )
        .given(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "{name}"}})),
        Shape::new("kc-shards-metadata-only", "kubectl", Admin, "GET", SHARDS)
            .query("fieldSelector=metadata.name%3D{name}")
            .header("Accept", METADATA_LIST)
            .given(shard0()),
        Shape::new(
            "kc-core-events-by-object",
            "kubectl",
            Admin,
            "GET",
            "/api/v1/namespaces/{ns}/events",
        )
        .query("fieldSelector=involvedObject.name%3Dshard-0%2CinvolvedObject.namespace%3D{ns}")
        .given(event()),
        Shape::new(
            "kc-serviceaccount-create",
            "kubectl",
            Admin,
            "POST",
            "/api/v1/namespaces/{ns}/serviceaccounts",
        )
        .body(
            JSON,
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                               "metadata": {"name": "{name}", "namespace": "{ns}"}}),
        ),
        Shape::new(
            "kc-secret-create-string-data",
            "kubectl",
            Admin,
            "POST",
            "/api/v1/namespaces/{ns}/secrets",
        )
        .body(
            JSON,
            json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                               "metadata": {"name": "{name}", "namespace": "{ns}"},
                               "stringData": {"token": "not-a-real-token"}}),
        ),
        // ConfigMaps, as the kubectl tests and the Python suite use them.
        Shape::new("py-configmap-create", "python", Admin, "POST", CONFIGMAPS)
            .body(JSON, configmap(json!({"i": "0"}))),
        Shape::new(
            "py-configmap-replace-stale",
            "python",
            Admin,
            "PUT",
            CONFIGMAP,
        )
        .body(JSON, with_rv(configmap(json!({"v": "1"})), "1"))
        .given(configmap(json!({"v": "0"}))),
        Shape::new("py-configmaps-page", "python", Admin, "GET", CONFIGMAPS)
            .query("limit=1&labelSelector=team%3Da")
            .given(configmap(json!({"p": "1"}))),
        Shape::new(
            "py-configmaps-bad-continue",
            "python",
            Admin,
            "GET",
            CONFIGMAPS,
        )
        .query("limit=3&continue=not-a-token"),
        Shape::new(
            "py-configmaps-deletecollection-dry-run",
            "python",
            Admin,
            "DELETE",
            CONFIGMAPS,
        )
        .query("labelSelector=doomed%3Dtrue&dryRun=All")
        .given({
            let mut c = configmap(json!({}));
            c["metadata"]["labels"] = json!({"doomed": "true"});
            c
        }),
        Shape::new(
            "py-impersonate-operator",
            "python",
            Admin,
            "GET",
            CONFIGMAPS,
        )
        .query("labelSelector=none%3Dnone")
        .header("Impersonate-User", "operator"),
        Shape::new(
            "py-impersonate-forbidden",
            "python",
            Operator,
            "GET",
            CONFIGMAPS,
        )
        .header("Impersonate-User", "admin"),
        Shape::new(
            "kc-configmap-strategic-patch",
            "kubectl",
            Admin,
            "PATCH",
            CONFIGMAP,
        )
        .query("fieldManager=kubectl-edit")
        .body(STRATEGIC, json!({"data": {"b": "2", "a": null}}))
        .given(configmap(json!({"a": "1"}))),
        Shape::new("kc-configmap-apply", "kubectl", Admin, "PATCH", CONFIGMAP)
            .query("fieldManager=kubectl&force=true")
            .body(APPLY, configmap(json!({"applied": "yes"}))),
        Shape::new(
            "kc-configmap-create-unknown-warn",
            "kubectl",
            Admin,
            "POST",
            CONFIGMAPS,
        )
        .query("fieldValidation=Warn")
        .body(JSON, {
            let mut c = configmap(json!({}));
            c["bogus"] = json!(1);
            c
        }),
    ]
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
            ["ctl-shards-watch", "ctl-shards-watch-initial-events"]
        );
    }
}
