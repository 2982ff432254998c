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
        Shape::controller("ctl-shards-list", "GET", ALL_SHARDS)
            .query("limit=500")
            .given(shard0()),
        Shape::controller("ctl-shards-watch", "GET", SHARDS)
            .query("watch=true&timeoutSeconds=1&fieldSelector=metadata.name%3D{name}")
            .given(shard0()),
        Shape::controller("ctl-shards-watch-initial-events", "GET", SHARDS)
            .query(
                "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan\
                 &allowWatchBookmarks=true&timeoutSeconds=1&fieldSelector=metadata.name%3D{name}",
            )
            .given(shard0()),
        Shape::controller("ctl-shard-get", "GET", SHARD).given(shard0()),
        Shape::controller("ctl-shard-get-missing", "GET", SHARD),
        Shape::controller("ctl-shard-patch", "PATCH", SHARD)
            .query("fieldManager=egress-address-controller")
            .body(MERGE, assign_patch("2001:db8::1", "{rv}"))
            .given(shard0()),
        Shape::controller("ctl-shard-patch-stale", "PATCH", SHARD)
            .query("fieldManager=egress-address-controller")
            .body(MERGE, assign_patch("2001:db8::1", "1"))
            .given(shard0()),
        Shape::controller("ctl-shard-patch-write-once", "PATCH", SHARD)
            .query("fieldManager=egress-address-controller")
            .body(MERGE, assign_patch("2001:db8::2", "{rv}"))
            .given(assigned()),
        Shape::controller("ctl-shard-update-forbidden", "PUT", SHARD)
            .body(JSON, with_rv(assigned(), "{rv}"))
            .given(shard0()),
        Shape::controller(
            "ctl-shard-status-forbidden",
            "PUT",
            &format!("{SHARD}/status"),
        )
        .body(JSON, with_rv(with_status.clone(), "{rv}"))
        .given(shard0()),
        Shape::controller("ctl-shard-delete-forbidden", "DELETE", SHARD).given(shard0()),
        Shape::controller("ctl-kube-system", "GET", "/api/v1/namespaces/kube-system"),
        Shape::controller(
            "ctl-namespace-forbidden",
            "GET",
            "/api/v1/namespaces/default",
        ),
        Shape::controller("ctl-lease-get-missing", "GET", LEASE),
        Shape::controller("ctl-lease-create", "POST", LEASES)
            .query(FIELD_MANAGER)
            .body(JSON, lease("pod-a")),
        Shape::controller("ctl-lease-create-exists", "POST", LEASES)
            .body(JSON, lease("pod-b"))
            .given(lease("pod-a")),
        Shape::controller("ctl-lease-get", "GET", LEASE).given(lease("pod-a")),
        Shape::controller("ctl-lease-update", "PUT", LEASE)
            .query(FIELD_MANAGER)
            .body(JSON, with_rv(lease("pod-b"), "{rv}"))
            .given(lease("pod-a")),
        Shape::controller("ctl-lease-update-stale", "PUT", LEASE)
            .query(FIELD_MANAGER)
            .body(JSON, with_rv(lease("pod-b"), "1"))
            .given(lease("pod-a")),
        Shape::controller("ctl-lease-create-invalid", "POST", LEASES).body(JSON, bad_lease),
        Shape::controller("ctl-lease-update-missing", "PUT", LEASE)
            .query(FIELD_MANAGER)
            .body(JSON, with_rv(lease("pod-b"), "1")),
        Shape::controller("ctl-lease-delete-forbidden", "DELETE", LEASE).given(lease("pod-a")),
        Shape::controller("ctl-event-create", "POST", EVENTS)
            .query(FIELD_MANAGER)
            .body(JSON, event()),
        Shape::controller("ctl-event-series-patch", "PATCH", EVENT)
            .query(FIELD_MANAGER)
            .body(
                MERGE,
                json!({"series": {"count": 2,
                "lastObservedTime": "2026-01-01T00:01:00.000000Z"}}),
            )
            .given(event()),
        Shape::controller("ctl-event-create-invalid", "POST", EVENTS).body(JSON, bad_event),
        Shape::controller("ctl-events-list-forbidden", "GET", EVENTS),
        // The controller's cache reads, by resourceVersion.
        Shape::controller("ctl-shards-list-rv-0", "GET", SHARDS)
            .query("resourceVersion=0&fieldSelector=metadata.name%3D{name}"),
        Shape::controller("ctl-shards-list-not-older-than", "GET", SHARDS)
            .query(
                "resourceVersion={rv}&resourceVersionMatch=NotOlderThan\
                 &fieldSelector=metadata.name%3D{name}",
            )
            .given(shard0()),
        Shape::controller("ctl-shards-list-exact", "GET", SHARDS)
            .query("resourceVersion={rv}&resourceVersionMatch=Exact&fieldSelector=metadata.name%3D{name}")
            .given(shard0()),
        Shape::controller("ctl-shards-list-exact-without-rv", "GET", SHARDS)
            .query("resourceVersionMatch=Exact"),
        Shape::controller("ctl-shards-list-exact-rv-0", "GET", SHARDS)
            .query("resourceVersion=0&resourceVersionMatch=Exact"),
        Shape::controller("ctl-shards-list-match-unknown", "GET", SHARDS)
            .query("resourceVersion=1&resourceVersionMatch=Sometimes"),
        Shape::controller("ctl-shards-list-continue-with-rv", "GET", SHARDS)
            .query("limit=1&continue=abc&resourceVersion=5"),
        Shape::controller("ctl-shards-list-rv-not-a-number", "GET", SHARDS)
            .query("resourceVersion=abc&resourceVersionMatch=NotOlderThan"),
        // What the metrics endpoint asks the cell about each new caller.
        Shape::controller("ctl-token-review-operator", "POST", TOKEN_REVIEWS)
            .body(JSON, token_review(json!({"token": "{operator-token}"}))),
        Shape::controller("ctl-token-review-unknown", "POST", TOKEN_REVIEWS)
            .body(JSON, token_review(json!({"token": "a-token-nobody-issued"}))),
        Shape::controller("ctl-token-review-other-audience", "POST", TOKEN_REVIEWS).body(
            JSON,
            token_review(json!({"token": "{operator-token}",
                                "audiences": ["https://elsewhere.example"]})),
        ),
        Shape::controller("ctl-token-review-empty", "POST", TOKEN_REVIEWS)
            .body(JSON, token_review(json!({}))),
        Shape::new("op-token-review-forbidden", "controller", Operator, "POST", TOKEN_REVIEWS)
            .body(JSON, token_review(json!({"token": "{operator-token}"}))),
        Shape::controller("ctl-sar-metrics-reader", "POST", SARS).body(
            JSON,
            metrics_review(json!({"user": "operator", "groups": ["system:authenticated"]})),
        ),
        Shape::controller("ctl-sar-metrics-stranger", "POST", SARS).body(
            JSON,
            metrics_review(json!({"user": "stranger", "groups": ["system:authenticated"]})),
        ),
        Shape::controller("ctl-sar-metrics-uid-and-extra", "POST", SARS).body(
            JSON,
            metrics_review(json!({
                "user": "system:serviceaccount:monitoring:prometheus", "uid": "0000-1",
                "groups": ["system:serviceaccounts", "system:serviceaccounts:monitoring",
                           "system:authenticated"],
                "extra": {"authentication.kubernetes.io/pod-name": ["prometheus-0"]}})),
        ),
        Shape::controller("ctl-shards-watch-rv-not-a-number", "GET", SHARDS)
            .query("watch=true&resourceVersion=abc&timeoutSeconds=1"),
        can_i_without_attributes(),
        Shape::controller("ctl-sar-both-attributes", "POST", SARS).body(
            JSON,
            metrics_review(json!({"user": "operator", "resourceAttributes": {"verb": "get",
                "resource": "configmaps", "namespace": "{ns}"}})),
        ),
        Shape::controller("ctl-sar-without-attributes", "POST", SARS).body(
            JSON,
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                   "spec": {"user": "operator"}}),
        ),
        Shape::new("ctl-whoami", "cli", Controller, "POST", SSR).body(
            JSON,
            json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
        ),
        can_i(
            "ctl-can-i-patch-shards",
            Controller,
            "patch",
            "network.datumapis.com",
            "egressshards",
            "{ns}",
        ),
        can_i(
            "ctl-can-i-delete-shards",
            Controller,
            "delete",
            "network.datumapis.com",
            "egressshards",
            "{ns}",
        ),
        can_i(
            "ctl-can-i-create-leases",
            Controller,
            "create",
            "coordination.k8s.io",
            "leases",
            "{sys}",
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
