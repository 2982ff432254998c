//! Field ownership through kube-rs: managedFields recorded on every write as the apiserver
//! records them, server-side apply (`Patch::Apply`) with its conflicts, `force`, merging by
//! list-map keys and removal of what an applier stops applying, and managedFields sent in a
//! request body.

use egress_api::shard::{EgressShard, EgressShardSpec, TargetRef};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::{DynamicObject, GroupVersionKind};
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::common::*;

fn gizmos(client: Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("example.localplane.dev", "v1", "Gizmo");
    Api::namespaced_with(client, "ns1", &ApiResource::from_gvk(&gvk))
}

fn gizmo(spec: Value) -> Value {
    json!({"apiVersion": "example.localplane.dev/v1", "kind": "Gizmo",
        "metadata": {"name": "g1", "namespace": "ns1"}, "spec": spec})
}

fn apply(manager: &str) -> PatchParams {
    PatchParams::apply(manager)
}

/// The object's managedFields entries, as JSON.
fn managed(obj: &impl serde::Serialize) -> Vec<Value> {
    let v = serde_json::to_value(obj).unwrap();
    v.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn entry(obj: &impl serde::Serialize, manager: &str) -> Option<Value> {
    managed(obj).into_iter().find(|e| e["manager"] == manager)
}

fn shard() -> EgressShard {
    EgressShard::new(
        "s1",
        EgressShardSpec {
            target_ref: TargetRef {
                kind: "Node".into(),
                name: "node-1".into(),
            },
            ..Default::default()
        },
    )
}

/// Returns once the clock has reached a second after `time` (an RFC 3339 managedFields time),
/// so that a write recorded now would carry a different time.
async fn next_second(time: &str) {
    let then: jiff::Timestamp = time.parse().unwrap();
    while jiff::Timestamp::now().as_second() <= then.as_second() {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

fn post(manager: &str) -> PostParams {
    PostParams {
        dry_run: false,
        field_manager: Some(manager.into()),
    }
}

#[tokio::test]
async fn every_write_records_its_manager_and_an_unchanged_write_changes_nothing() {
    let (lp, client) = serve_as_admin(builder()).await;
    let api: Api<EgressShard> = Api::namespaced(client.clone(), "ns1");

    let created = api.create(&post("creator"), &shard()).await.unwrap();
    let e = entry(&created, "creator").expect("the create is recorded");
    assert_eq!(e["operation"], "Update");
    assert_eq!(e["apiVersion"], "network.datumapis.com/v1alpha1");
    assert_eq!(e["fieldsType"], "FieldsV1");
    assert!(e["time"].as_str().is_some_and(|t| t.ends_with('Z')), "{e}");
    assert!(e.get("subresource").is_none());
    // A custom resource's empty object has no spec, so the create owns spec itself.
    assert_eq!(
        e["fieldsV1"],
        json!({"f:spec": {".": {}, "f:targetRef": {".": {}, "f:kind": {}, "f:name": {}}}})
    );

    // A PUT by another manager owns what it changed, and takes it from the creator.
    let mut changed = created.clone();
    changed.spec.drain = Some(true);
    let updated = api.replace("s1", &post("ctl"), &changed).await.unwrap();
    assert_eq!(
        entry(&updated, "ctl").unwrap()["fieldsV1"],
        json!({"f:spec": {"f:drain": {}}})
    );
    assert_eq!(
        entry(&updated, "creator").unwrap()["fieldsV1"],
        e["fieldsV1"],
        "the creator still owns what nobody changed"
    );

    // The same PUT again, in a later second, changes nothing: no new resourceVersion, no new
    // time.
    next_second(entry(&updated, "ctl").unwrap()["time"].as_str().unwrap()).await;
    let again = api.replace("s1", &post("ctl"), &updated).await.unwrap();
    assert_eq!(again.resource_version(), updated.resource_version());
    assert_eq!(managed(&again), managed(&updated));

    // A status write is its own manager, with the subresource named.
    let st = api
        .patch_status(
            "s1",
            &PatchParams {
                field_manager: Some("ctl".into()),
                ..Default::default()
            },
            &Patch::Merge(json!({"status": {"observedGeneration": 2}})),
        )
        .await
        .unwrap();
    let status_entry = managed(&st)
        .into_iter()
        .find(|e| e["manager"] == "ctl" && e["subresource"] == "status")
        .expect("a status entry");
    assert_eq!(
        status_entry["fieldsV1"],
        json!({"f:status": {".": {}, "f:observedGeneration": {}}})
    );
    assert_eq!(managed(&st).len(), 3, "{:#?}", managed(&st));

    // Without fieldManager the manager is the User-Agent up to its first slash.
    let url = format!(
        "{}/apis/network.datumapis.com/v1alpha1/namespaces/ns1/egressshards/s1",
        lp.base_url()
    );
    let (code, _, body) = raw(
        "PATCH",
        &url,
        Some(ADMIN_TOKEN),
        &[
            ("content-type", "application/merge-patch+json"),
            ("user-agent", "ops-tool/2.1 (linux/amd64)"),
        ],
        r#"{"metadata":{"labels":{"team":"a"}}}"#,
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        entry(&v, "ops-tool").unwrap()["fieldsV1"],
        json!({"f:metadata": {"f:labels": {".": {}, "f:team": {}}}})
    );

    // Metadata-only reads carry managedFields, as the apiserver's do.
    let meta = api.get_metadata("s1").await.unwrap();
    assert_eq!(managed(&meta).len(), 4);
    let (code, _, table) = raw(
        "GET",
        &url,
        Some(ADMIN_TOKEN),
        &[("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")],
        "",
    )
    .await;
    assert_eq!(code, 200);
    let table: Value = serde_json::from_str(&table).unwrap();
    assert_eq!(
        table["rows"][0]["object"]["metadata"]["managedFields"]
            .as_array()
            .map(Vec::len),
        Some(4),
        "{table}"
    );
    lp.shutdown().await;
}

#[tokio::test]
async fn server_side_apply_merges_by_key_refuses_conflicts_and_removes_what_is_dropped() {
    let (lp, client) = serve_as_admin(builder()).await;
    let api = gizmos(client);

    let a1 = gizmo(json!({
        "replicas": 1, "image": "img:1",
        "ports": [{"port": 80, "name": "http"}, {"port": 443}],
        "tags": ["x", "y"], "args": ["--a"], "settings": {"s1": "1", "s2": "2"},
    }));
    let g = api
        .patch("g1", &apply("a"), &Patch::Apply(&a1))
        .await
        .unwrap();
    let a = entry(&g, "a").unwrap();
    assert_eq!(a["operation"], "Apply");
    assert_eq!(a["apiVersion"], "example.localplane.dev/v1");
    // The list map is keyed by port and the defaulted protocol.
    assert_eq!(
        a["fieldsV1"]["f:spec"]["f:ports"],
        json!({
            "k:{\"port\":443,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}},
            "k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:name": {}, "f:port": {}},
        })
    );
    assert_eq!(
        a["fieldsV1"]["f:spec"]["f:tags"],
        json!({"v:\"x\"": {}, "v:\"y\"": {}})
    );
    assert_eq!(a["fieldsV1"]["f:spec"]["f:args"], json!({}));
    assert_eq!(g.data["spec"]["ports"][0]["protocol"], "TCP");

    // Another applier changing an owned field is refused with the apiserver's conflict.
    let b1 = gizmo(json!({"replicas": 2}));
    let err = api_err(
        api.patch("g1", &apply("b"), &Patch::Apply(&b1))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        err.message,
        r#"Apply failed with 1 conflict: conflict with "a": .spec.replicas"#
    );
    let cause = &err.details.as_ref().unwrap().causes[0];
    assert_eq!(
        (
            cause.reason.as_str(),
            cause.message.as_str(),
            cause.field.as_str()
        ),
        (
            "FieldManagerConflict",
            r#"conflict with "a""#,
            ".spec.replicas"
        )
    );
    // Applying the value it already has is no conflict: the field is shared.
    let shared = api
        .patch(
            "g1",
            &apply("b"),
            &Patch::Apply(&gizmo(json!({"replicas": 1, "ports": [{"port": 8080}]}))),
        )
        .await
        .unwrap();
    assert!(
        entry(&shared, "b").unwrap()["fieldsV1"]["f:spec"]
            .get("f:replicas")
            .is_some()
    );
    let ports: Vec<i64> = shared.data["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["port"].as_i64().unwrap())
        .collect();
    assert_eq!(ports, [80, 443, 8080], "items merge by key");

    // Forced, b takes replicas from a.
    let forced = api
        .patch(
            "g1",
            &apply("b").force(),
            &Patch::Apply(&gizmo(json!({"replicas": 2, "ports": [{"port": 8080}]}))),
        )
        .await
        .unwrap();
    assert_eq!(forced.data["spec"]["replicas"], 2);
    assert!(
        entry(&forced, "a").unwrap()["fieldsV1"]["f:spec"]
            .get("f:replicas")
            .is_none(),
        "a lost replicas"
    );

    // Two conflicts, listed per manager.
    let err = api_err(
        api.patch(
            "g1",
            &apply("b"),
            &Patch::Apply(&gizmo(json!({"image": "img:2", "settings": {"s1": "9"}}))),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        err.message,
        "Apply failed with 2 conflicts: conflicts with \"a\":\n- .spec.image\n- .spec.settings.s1"
    );

    // An update manager's fields conflict too, named with the version it used.
    api.patch(
        "g1",
        &PatchParams {
            field_manager: Some("editor".into()),
            ..Default::default()
        },
        &Patch::Merge(json!({"spec": {"settings": {"s3": "3"}}})),
    )
    .await
    .unwrap();
    let err = api_err(
        api.patch(
            "g1",
            &apply("b"),
            &Patch::Apply(&gizmo(
                json!({"replicas": 2, "ports": [{"port": 8080}], "settings": {"s3": "x"}}),
            )),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        err.message,
        r#"Apply failed with 1 conflict: conflict with "editor" using example.localplane.dev/v1: .spec.settings.s3"#
    );

    // a stops applying port 443, tag y and setting s2: they go. Port 8080 (b's) and s3 (the
    // editor's) stay, and so does replicas, which a no longer owns.
    let a2 = gizmo(json!({
        "image": "img:1", "ports": [{"port": 80, "name": "http"}],
        "tags": ["x"], "args": ["--a"], "settings": {"s1": "1"},
    }));
    let g = api
        .patch("g1", &apply("a"), &Patch::Apply(&a2))
        .await
        .unwrap();
    let spec = &g.data["spec"];
    let ports: Vec<i64> = spec["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["port"].as_i64().unwrap())
        .collect();
    assert_eq!(ports, [80, 8080]);
    assert_eq!(spec["tags"], json!(["x"]));
    assert_eq!(spec["settings"], json!({"s1": "1", "s3": "3"}));
    assert_eq!(spec["replicas"], 2);

    // An applier that applies none of its old fields gives them all up (an empty `spec: {}`
    // would still claim spec itself).
    let mut nothing = gizmo(json!({}));
    nothing.as_object_mut().unwrap().remove("spec");
    let g = api
        .patch("g1", &apply("b"), &Patch::Apply(&nothing))
        .await
        .unwrap();
    assert!(g.data["spec"].get("replicas").is_none(), "{}", g.data);
    assert!(entry(&g, "b").is_none(), "b owns nothing any more");
    lp.shutdown().await;
}

#[tokio::test]
async fn apply_requests_are_checked_as_the_apiserver_checks_them() {
    let lp = serve(builder()).await;
    let base = format!(
        "{}/apis/example.localplane.dev/v1/namespaces/ns1/gizmos/g1",
        lp.base_url()
    );
    let send = |query: &str, ct: &str, body: &str| {
        let url = format!("{base}{query}");
        let ct = ct.to_string();
        let body = body.to_string();
        async move {
            let (code, _, b) = raw(
                "PATCH",
                &url,
                Some(ADMIN_TOKEN),
                &[("content-type", &ct)],
                &body,
            )
            .await;
            (
                code,
                serde_json::from_str::<Value>(&b).unwrap_or(json!({"raw": b})),
            )
        }
    };
    let yaml = "application/apply-patch+yaml";
    let cfg = gizmo(json!({"replicas": 1})).to_string();

    let (code, s) = send("", yaml, &cfg).await;
    assert_eq!(code, 422, "{s}");
    assert_eq!(
        s["message"],
        r#"PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch"#
    );
    let (code, s) = send(
        "?fieldManager=m&force=true",
        "application/merge-patch+json",
        "{}",
    )
    .await;
    assert_eq!(code, 422, "{s}");
    assert_eq!(
        s["message"],
        r#"PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for non-apply patch"#
    );
    let with_managed = json!({"apiVersion": "example.localplane.dev/v1", "kind": "Gizmo",
        "metadata": {"name": "g1", "managedFields": [{"manager": "x"}]}});
    let (code, s) = send("?fieldManager=m", yaml, &with_managed.to_string()).await;
    assert_eq!(
        (code, s["message"].as_str()),
        (400, Some("metadata.managedFields must be nil"))
    );
    let (code, s) = send(
        "?fieldManager=m",
        yaml,
        r#"{"metadata": {"name": "g1"}, "spec": {"replicas": 1}}"#,
    )
    .await;
    assert_eq!(
        (code, s["message"].as_str()),
        (400, Some("invalid object type: /, Kind="))
    );
    // A field the schema does not declare: the apiserver's typed-patch failure (a 500).
    let (code, s) = send(
        "?fieldManager=m",
        yaml,
        &gizmo(json!({"replicas": 1, "bogus": true})).to_string(),
    )
    .await;
    assert_eq!(code, 500, "{s}");
    assert_eq!(
        s["message"],
        "failed to create typed patch object (ns1/g1; example.localplane.dev/v1, Kind=Gizmo): .spec.bogus: field not declared in schema"
    );
    assert!(s.get("reason").is_none(), "{s}");
    // Nothing above created the object.
    let (code, _) = send("?fieldManager=m", yaml, &cfg).await;
    assert_eq!(code, 201, "an apply that creates answers 201");
    lp.shutdown().await;
}

#[tokio::test]
async fn managed_fields_sent_in_a_body_are_honoured_as_the_apiserver_does() {
    let (lp, client) = serve_as_admin(builder()).await;
    let api = gizmos(client);
    let pp = |m: &str| PostParams {
        dry_run: false,
        field_manager: Some(m.into()),
    };
    let obj: DynamicObject = serde_json::from_value(gizmo(json!({"replicas": 1}))).unwrap();
    let g = api.create(&pp("creator"), &obj).await.unwrap();
    assert_eq!(managed(&g).len(), 1);

    // Left out (or unreadable): what is stored stays.
    let mut no_mf = g.clone();
    no_mf.metadata.managed_fields = None;
    no_mf.data["spec"]["image"] = json!("i");
    let g = api.replace("g1", &pp("editor"), &no_mf).await.unwrap();
    assert_eq!(managed(&g).len(), 2);
    let mut bad = serde_json::to_value(&g).unwrap();
    bad["metadata"]["managedFields"] =
        json!([{"manager": "x", "operation": "Update", "fieldsType": "Bogus"}]);
    bad["spec"]["image"] = json!("j");
    let bad: DynamicObject = serde_json::from_value(bad).unwrap();
    let g = api.replace("g1", &pp("editor"), &bad).await.unwrap();
    assert_eq!(
        managed(&g)
            .iter()
            .map(|e| e["manager"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["creator", "editor"]
    );

    // A readable list replaces what is stored.
    let mut replaced = serde_json::to_value(&g).unwrap();
    replaced["metadata"]["managedFields"] = json!([{"manager": "someone", "operation": "Apply",
        "apiVersion": "example.localplane.dev/v1", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:spec": {"f:replicas": {}}}}]);
    let g = api
        .replace(
            "g1",
            &pp("editor"),
            &serde_json::from_value::<DynamicObject>(replaced).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(managed(&g).len(), 1);
    assert_eq!(managed(&g)[0]["manager"], "someone");

    // One that would store an invalid operation is refused on the object.
    let mut invalid = serde_json::to_value(&g).unwrap();
    invalid["metadata"]["managedFields"][0]["operation"] = json!("Bogus");
    let err = api_err(
        api.replace(
            "g1",
            &pp("editor"),
            &serde_json::from_value::<DynamicObject>(invalid).unwrap(),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    assert_eq!(
        err.message,
        "Gizmo.example.localplane.dev \"g1\" is invalid: metadata.managedFields[0].operation: Invalid value: \"Bogus\": must be `Apply` or `Update`"
    );

    // An empty list starts over: nothing else changed, so nobody owns anything.
    let mut cleared = serde_json::to_value(&g).unwrap();
    cleared["metadata"]["managedFields"] = json!([]);
    let g = api
        .replace(
            "g1",
            &pp("editor"),
            &serde_json::from_value::<DynamicObject>(cleared).unwrap(),
        )
        .await
        .unwrap();
    assert!(managed(&g).is_empty(), "{:?}", managed(&g));
    lp.shutdown().await;
}

#[tokio::test]
async fn status_is_applied_through_its_subresource_and_merged_by_condition_type() {
    let (lp, client) = serve_as_admin(builder()).await;
    let api = gizmos(client);
    api.patch(
        "g1",
        &apply("owner"),
        &Patch::Apply(&gizmo(json!({"replicas": 1}))),
    )
    .await
    .unwrap();
    let cond = |t: &str, s: &str| {
        json!({"apiVersion": "example.localplane.dev/v1", "kind": "Gizmo",
            "metadata": {"name": "g1", "namespace": "ns1"},
            "status": {"conditions": [{"type": t, "status": s}]}})
    };
    api.patch_status(
        "g1",
        &apply("ready-ctl"),
        &Patch::Apply(&cond("Ready", "True")),
    )
    .await
    .unwrap();
    let g = api
        .patch_status(
            "g1",
            &apply("health-ctl"),
            &Patch::Apply(&cond("Healthy", "False")),
        )
        .await
        .unwrap();
    let types: Vec<&str> = g.data["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["Ready", "Healthy"], "merged by type, not replaced");
    let e = entry(&g, "health-ctl").unwrap();
    assert_eq!(e["subresource"], "status");
    assert_eq!(
        e["fieldsV1"],
        json!({"f:status": {"f:conditions": {"k:{\"type\":\"Healthy\"}": {".": {}, "f:status": {}, "f:type": {}}}}})
    );
    // The status applier cannot take the other's condition without force.
    let err = api_err(
        api.patch_status(
            "g1",
            &apply("health-ctl"),
            &Patch::Apply(&cond("Ready", "False")),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        err.message,
        r#"Apply failed with 1 conflict: conflict with "ready-ctl" with subresource "status": .status.conditions[type="Ready"].status"#
    );
    assert_eq!(g.data["spec"]["replicas"], 1);
    lp.shutdown().await;
}

#[tokio::test]
async fn a_list_map_refuses_two_items_with_one_key() {
    let (lp, client) = serve_as_admin(builder()).await;
    let api: Api<EgressShard> = Api::namespaced(client, "ns1");
    api.create(&post("creator"), &shard()).await.unwrap();
    let cond = |status: &str| {
        json!({"type": "Programmed", "status": status, "reason": "R", "message": "m",
            "lastTransitionTime": "2026-01-01T00:00:00Z"})
    };
    let err = api_err(
        api.patch_status(
            "s1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [cond("True"), cond("False")]}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        err.message,
        r#"EgressShard.network.datumapis.com "s1" is invalid: status.conditions[1]: Duplicate value: {"type":"Programmed"}"#
    );
    assert_eq!(err.details.unwrap().causes[0].reason, "FieldValueDuplicate");
    // One item per key is fine.
    api.patch_status(
        "s1",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"conditions": [cond("True")]}})),
    )
    .await
    .unwrap();
    lp.shutdown().await;
}
