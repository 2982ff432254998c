//! The controller's shapes: its shard cache, its one write, its identity read, leader election,
//! events.

use serde_json::json;

use super::*;

pub(super) fn controller() -> Vec<Shape> {
    use Who::*;
    let shard0 = || shard(json!({}));
    let mut bad_lease = lease("pod-a");
    bad_lease["spec"]["leaseDurationSeconds"] = json!(0);
    let mut bad_event = event();
    bad_event
        .as_object_mut()
        .map(|e| e.remove("reportingController"));
    let mut with_status = shard0();
    with_status["status"] = json!({"conditions": [{"type": "Ready", "status": "True",
        "reason": "Programmed", "message": "ok", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});

    vec![
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
    ]
}
