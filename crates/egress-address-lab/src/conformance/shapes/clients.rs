//! The shapes of the people and clients around the controller: kubectl and the operator on
//! shards, the operator's reads through `view`, namespaces, and ConfigMaps as the kubectl tests
//! and the Python suite use them.

use serde_json::json;

use super::*;

pub(super) fn clients() -> Vec<Shape> {
    use Who::*;
    let shard0 = || shard(json!({}));
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
