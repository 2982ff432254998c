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
        Shape::kubectl("kc-shard-create", "POST", SHARDS)
            .query("fieldManager=kubectl-create&fieldValidation=Strict")
            .body(JSON, shard0()),
        Shape::kubectl("kc-shard-create-exists", "POST", SHARDS)
            .body(JSON, shard0())
            .given(shard0()),
        Shape::kubectl("kc-shard-create-unknown-warn", "POST", SHARDS)
            .query("fieldValidation=Warn")
            .body(JSON, unknown_field.clone()),
        Shape::kubectl("kc-shard-create-unknown-strict", "POST", SHARDS)
            .query("fieldValidation=Strict")
            .body(JSON, unknown_field),
        Shape::kubectl("kc-shard-create-invalid", "POST", SHARDS).body(JSON, no_target),
        Shape::kubectl("kc-shard-create-dry-run", "POST", SHARDS)
            .query("dryRun=All&fieldManager=kubectl-create")
            .body(JSON, shard0()),
        Shape::kubectl("kc-shard-apply", "PATCH", SHARD)
            .query("fieldManager=kubectl&fieldValidation=Strict&force=false")
            .body(APPLY, labelled.clone()),
        Shape::kubectl("kc-shard-apply-conflict", "PATCH", SHARD)
            .query("fieldManager=kubectl")
            .body(APPLY, retargeted.clone())
            .given(shard0()),
        Shape::kubectl("kc-shard-apply-force", "PATCH", SHARD)
            .query("fieldManager=kubectl&force=true")
            .body(APPLY, retargeted)
            .given(shard0()),
        Shape::kubectl("kc-shard-apply-dry-run", "PATCH", SHARD)
            .query("fieldManager=kubectl&dryRun=All")
            .body(APPLY, labelled)
            .given(shard0()),
        Shape::kubectl("kc-shard-merge-patch", "PATCH", SHARD)
            .query("fieldManager=kubectl-label")
            .body(MERGE, json!({"metadata": {"labels": {"team": "b"}}}))
            .given(shard0()),
        Shape::kubectl("kc-shard-json-patch", "PATCH", SHARD)
            .query("fieldManager=kubectl-patch")
            .body(
                JSON_PATCH,
                json!([{"op": "add", "path": "/metadata/labels",
                                     "value": {"team": "c"}}]),
            )
            .given(shard0()),
        Shape::kubectl("kc-shard-json-patch-test-fails", "PATCH", SHARD)
            .body(
                JSON_PATCH,
                json!([{"op": "test", "path": "/spec/targetRef/name",
                                     "value": "someone-else"}]),
            )
            .given(shard0()),
        Shape::kubectl("kc-shard-strategic-patch", "PATCH", SHARD)
            .body(STRATEGIC, json!({"metadata": {"labels": {"team": "d"}}}))
            .given(shard0()),
        Shape::kubectl("kc-shard-write-once-patch", "PATCH", SHARD)
            .body(MERGE, json!({"spec": {"shardAddressIPv6": "2001:db8::9"}}))
            .given(assigned()),
        Shape::kubectl("kc-shard-status-update", "PUT", &format!("{SHARD}/status"))
            .body(JSON, with_rv(with_status, "{rv}"))
            .given(shard0()),
        Shape::kubectl("kc-shards-table", "GET", SHARDS)
            .query("labelSelector=team%3Da&limit=500")
            .header("Accept", TABLE)
            .given({
                let mut s = assigned();
                s["metadata"]["labels"]["team"] = json!("a");
                s
            }),
        Shape::kubectl("kc-shard-get-table", "GET", SHARD)
            .header("Accept", TABLE)
            .given(shard0()),
        Shape::kubectl("kc-shards-label-selector", "GET", SHARDS)
            .query("labelSelector=team%20in%20(a)")
            .given({
                let mut s = shard0();
                s["metadata"]["labels"] = json!({"team": "a"});
                s
            }),
        Shape::kubectl("kc-shards-label-selector-bad", "GET", SHARDS)
            .query("labelSelector=team%3D%3Da%3Db"),
        Shape::kubectl("kc-shards-field-selector", "GET", SHARDS)
            .query("fieldSelector=metadata.name%3D{name}")
            .given(shard0()),
        Shape::kubectl("kc-shards-field-selector-bad", "GET", SHARDS)
            .query("fieldSelector=spec.targetRef.name%3Dx"),
        Shape::kubectl("kc-shard-delete-uid-mismatch", "DELETE", SHARD)
            .body(
                JSON,
                delete_options(json!({"uid": "00000000-0000-4000-8000-000000000000"})),
            )
            .given(shard0()),
        Shape::kubectl("kc-shard-delete-precondition-ok", "DELETE", SHARD)
            .body(
                JSON,
                delete_options(json!({"uid": "{uid}", "resourceVersion": "{rv}"})),
            )
            .given(shard0()),
        Shape::kubectl("kc-shard-delete-missing", "DELETE", SHARD),
        Shape::kubectl(
            "kc-unknown-resource",
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
        can_i(
            "op-can-i-create-configmaps",
            Operator,
            "create",
            "",
            "configmaps",
            "{ns}",
        ),
        // Namespaces.
        Shape::kubectl("kc-namespace-create", "POST", NAMESPACES).body(
            JSON,
            json!({"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": "{name}"}}),
        ),
        Shape::kubectl("kc-namespace-get-table", "GET", "/api/v1/namespaces/{ns}")
            .header("Accept", TABLE),
        Shape::kubectl(
            "kc-namespace-delete-kube-system",
            "DELETE",
            "/api/v1/namespaces/kube-system",
        ),
        Shape::kubectl("kc-namespace-delete", "DELETE", "/api/v1/namespaces/{name}").given(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "{name}"}}),
        ),
        Shape::kubectl("kc-shards-metadata-only", "GET", SHARDS)
            .query("fieldSelector=metadata.name%3D{name}")
            .header("Accept", METADATA_LIST)
            .given(shard0()),
        Shape::kubectl(
            "kc-core-events-by-object",
            "GET",
            "/api/v1/namespaces/{ns}/events",
        )
        .query("fieldSelector=involvedObject.name%3Dshard-0%2CinvolvedObject.namespace%3D{ns}")
        .given(event()),
        Shape::kubectl(
            "kc-serviceaccount-create",
            "POST",
            "/api/v1/namespaces/{ns}/serviceaccounts",
        )
        .body(
            JSON,
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                               "metadata": {"name": "{name}", "namespace": "{ns}"}}),
        ),
        Shape::kubectl(
            "kc-secret-create-string-data",
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
        Shape::kubectl("kc-configmap-strategic-patch", "PATCH", CONFIGMAP)
            .query("fieldManager=kubectl-edit")
            .body(STRATEGIC, json!({"data": {"b": "2", "a": null}}))
            .given(configmap(json!({"a": "1"}))),
        Shape::kubectl("kc-configmap-apply", "PATCH", CONFIGMAP)
            .query("fieldManager=kubectl&force=true")
            .body(APPLY, configmap(json!({"applied": "yes"}))),
        // Content types: what each write accepts, and what none does.
        Shape::kubectl("kc-configmap-create-yaml", "POST", CONFIGMAPS)
            .body(YAML, configmap(json!({"from": "yaml"}))),
        Shape::kubectl("kc-configmap-create-unsupported", "POST", CONFIGMAPS)
            .body("application/xml", configmap(json!({}))),
        Shape::kubectl("kc-configmap-patch-plain-json", "PATCH", CONFIGMAP)
            .body(JSON, json!({"data": {"b": "2"}}))
            .given(configmap(json!({"a": "1"}))),
        Shape::kubectl("kc-shard-patch-text-plain", "PATCH", SHARD)
            .body("text/plain", json!({"metadata": {"labels": {"team": "e"}}}))
            .given(shard0()),
        Shape::kubectl("kc-configmap-patch-text-plain", "PATCH", CONFIGMAP)
            .body("text/plain", json!({"data": {"b": "2"}}))
            .given(configmap(json!({"a": "1"}))),
        Shape::kubectl("kc-shard-patch-plain-json", "PATCH", SHARD)
            .body(JSON, json!({"metadata": {"labels": {"team": "e"}}}))
            .given(shard0()),
        Shape::kubectl("kc-configmap-merge-patch", "PATCH", CONFIGMAP)
            .query("fieldManager=kubectl-patch")
            .body(MERGE, json!({"data": {"b": "2", "a": null}}))
            .given(configmap(json!({"a": "1"}))),
        Shape::kubectl("kc-configmap-json-patch", "PATCH", CONFIGMAP)
            .body(
                JSON_PATCH,
                json!([{"op": "replace", "path": "/data/a", "value": "9"}]),
            )
            .given(configmap(json!({"a": "1"}))),
        Shape::kubectl("kc-configmap-replace", "PUT", CONFIGMAP)
            .query("fieldManager=kubectl-replace")
            .body(JSON, with_rv(configmap(json!({"v": "1"})), "{rv}"))
            .given(configmap(json!({"v": "0"}))),
        // Deletion, as kubectl and the tool ask for it.
        Shape::kubectl("kc-shard-delete-foreground", "DELETE", SHARD)
            .body(
                JSON,
                json!({"apiVersion": "v1", "kind": "DeleteOptions",
                       "propagationPolicy": "Foreground"}),
            )
            .given(shard0()),
        Shape::kubectl("kc-shard-delete-dry-run", "DELETE", SHARD)
            .query("dryRun=All")
            .given(shard0()),
        Shape::kubectl("kc-shards-delete-collection", "DELETE", SHARDS)
            .query("labelSelector=doomed%3D{name}")
            .given({
                let mut s = shard0();
                s["metadata"]["labels"] = json!({"doomed": "{name}"});
                s
            }),
        // Writes that name the wrong thing.
        Shape::kubectl("kc-shard-create-wrong-namespace", "POST", SHARDS).body(JSON, {
            let mut s = shard0();
            s["metadata"]["namespace"] = json!("elsewhere");
            s
        }),
        Shape::kubectl("kc-shard-create-wrong-kind", "POST", SHARDS).body(JSON, {
            let mut s = shard0();
            s["kind"] = json!("EgressGateway");
            s
        }),
        Shape::kubectl("kc-shard-update-missing", "PUT", SHARD).body(JSON, shard0()),
        Shape::kubectl("kc-shard-update-name-mismatch", "PUT", SHARD)
            .body(JSON, {
                let mut s = with_rv(shard0(), "{rv}");
                s["metadata"]["name"] = json!("someone-else");
                s
            })
            .given(shard0()),
        Shape::kubectl(
            "kc-shard-status-merge-patch",
            "PATCH",
            &format!("{SHARD}/status"),
        )
        .body(
            MERGE,
            json!({"status": {"conditions": [{"type": "Ready", "status": "False",
                    "reason": "Pending", "message": "waiting",
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}),
        )
        .given(shard0()),
        Shape::kubectl(
            "kc-shards-list-missing-namespace",
            "GET",
            "/apis/network.datumapis.com/v1alpha1/namespaces/nowhere-{name}/egressshards",
        ),
        Shape::kubectl(
            "kc-shard-create-missing-namespace",
            "POST",
            "/apis/network.datumapis.com/v1alpha1/namespaces/nowhere-{name}/egressshards",
        )
        .body(JSON, {
            let mut s = shard0();
            s["metadata"]["namespace"] = json!("nowhere-{name}");
            s
        }),
        Shape::kubectl(
            "kc-namespace-get-missing",
            "GET",
            "/api/v1/namespaces/nowhere-{name}",
        ),
        Shape::new("op-shard-get-forbidden", "cli", Operator, "GET", SHARD).given(shard0()),
        Shape::kubectl("kc-configmap-create-unknown-warn", "POST", CONFIGMAPS)
            .query("fieldValidation=Warn")
            .body(JSON, {
                let mut c = configmap(json!({}));
                c["bogus"] = json!(1);
                c
            }),
        // The tables `kubectl get` prints for the built-in kinds the runbook shows
        // (`get pods,lease`), the install creates and the kubectl tests read.
        Shape::kubectl("kc-leases-table", "GET", LEASES)
            .query("fieldSelector=metadata.name%3D{name}&limit=500")
            .header("Accept", TABLE)
            .given(lease("pod-a")),
        Shape::kubectl(
            "kc-rolebindings-table",
            "GET",
            "/apis/rbac.authorization.k8s.io/v1/namespaces/{sys}/rolebindings",
        )
        .query("limit=500")
        .header("Accept", TABLE),
        Shape::kubectl("kc-configmap-get-table", "GET", CONFIGMAP)
            .header("Accept", TABLE)
            .given(configmap(json!({"a": "1", "b": "2"}))),
        Shape::kubectl("kc-secret-get-table", "GET", SECRET)
            .header("Accept", TABLE)
            .given(secret(json!({"kubeconfig": "aGk="}))),
        Shape::kubectl(
            "kc-deployment-get-table",
            "GET",
            &format!("{DEPLOYMENTS}/{{name}}"),
        )
        .header("Accept", TABLE)
        .given(deployment(json!({"app": "a"}), json!("img:1"))),
        Shape::kubectl(
            "kc-service-get-table",
            "GET",
            &format!("{SERVICES}/{{name}}"),
        )
        .header("Accept", TABLE)
        .given(json!({"apiVersion": "v1", "kind": "Service",
                          "metadata": {"name": "{name}", "namespace": "{ns}"},
                          "spec": {"type": "ExternalName", "externalName": "metrics.example"}})),
        Shape::kubectl(
            "kc-networkpolicy-get-table",
            "GET",
            "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies/{name}",
        )
        .header("Accept", TABLE)
        .given(
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                      "metadata": {"name": "{name}", "namespace": "{ns}"},
                      "spec": {"podSelector": {"matchLabels": {"app": "a"}},
                               "policyTypes": ["Ingress"]}}),
        ),
        Shape::kubectl(
            "kc-serviceaccount-get-table",
            "GET",
            "/api/v1/namespaces/{ns}/serviceaccounts/{name}",
        )
        .header("Accept", TABLE)
        .given(json!({"apiVersion": "v1", "kind": "ServiceAccount",
                      "metadata": {"name": "{name}", "namespace": "{ns}"}})),
        Shape::kubectl(
            "kc-role-get-table",
            "GET",
            "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles/{name}",
        )
        .header("Accept", TABLE)
        .given(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                      "metadata": {"name": "{name}", "namespace": "{ns}"},
                      "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                                 "verbs": ["get"]}]}),
        ),
        // The runbook's `kubectl create clusterrolebinding egress-address-metrics-reader`.
        Shape::kubectl(
            "kc-clusterrolebinding-get-table",
            "GET",
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{name}",
        )
        .header("Accept", TABLE)
        .given(json!({"apiVersion": "rbac.authorization.k8s.io/v1",
                      "kind": "ClusterRoleBinding", "metadata": {"name": "{name}"},
                      "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                  "kind": "ClusterRole", "name": "view"},
                      "subjects": [{"kind": "ServiceAccount", "name": "prometheus",
                                    "namespace": "monitoring"},
                                   {"kind": "User", "name": "operator",
                                    "apiGroup": "rbac.authorization.k8s.io"}]})),
        // `kubectl get --sort-by` asks for the whole object in each row.
        Shape::kubectl("kc-shards-table-with-objects", "GET", SHARDS)
            .query("fieldSelector=metadata.name%3D{name}&includeObject=Object")
            .header("Accept", TABLE)
            .given(shard0()),
        // What the install sends that the server refuses, in the apiserver's words.
        Shape::kubectl("kc-secret-create-bad-base64", "POST", SECRETS)
            .body(JSON, secret(json!({"k": "not base64!"}))),
        Shape::kubectl("kc-service-create-invalid", "POST", SERVICES).body(
            JSON,
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": "{name}", "namespace": "{ns}"},
                   "spec": {"type": "Bogus"}}),
        ),
        Shape::kubectl("kc-deployment-create", "POST", DEPLOYMENTS)
            .query("fieldManager=kubectl-client-side-apply")
            .body(JSON, {
                let mut d = deployment(json!({"app": "a"}), json!("ghcr.io/x/controller:v1"));
                d["spec"]["template"]["spec"]["containers"][0]["ports"] =
                    json!([{"name": "metrics", "containerPort": 8443}]);
                d["spec"]["template"]["spec"]["containers"][0]["env"] =
                    json!([{"name": "A", "value": ""}, {"name": "B", "value": "b"}]);
                d
            }),
        Shape::kubectl("kc-deployment-create-invalid", "POST", DEPLOYMENTS)
            .body(JSON, deployment(json!({"app": "b"}), json!(null))),
        Shape::kubectl("kc-deployment-create-empty-spec", "POST", DEPLOYMENTS).body(
            JSON,
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "{name}", "namespace": "{ns}"}, "spec": {}}),
        ),
        // `kubectl --as USER --as-uid UID` (and a client's `Impersonate-Extra-*`), whoami.
        Shape::new("py-impersonate-uid-and-extra", "python", Admin, "POST", SSR)
            .header("Impersonate-User", "operator")
            .header("Impersonate-Uid", "operator-uid")
            .header("Impersonate-Extra-Scopes", "view")
            .body(
                JSON,
                json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
            ),
        // `kubectl delete --cascade=orphan`.
        Shape::kubectl("kc-shard-delete-orphan", "DELETE", SHARD)
            .body(
                JSON,
                json!({"apiVersion": "v1", "kind": "DeleteOptions",
                       "propagationPolicy": "Orphan"}),
            )
            .given(shard0()),
    ]
}
