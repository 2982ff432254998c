//! kube-rs 5 clients over real HTTP, as a controller drives a cell: each test runs twice, against
//! localplane and against the real kube-apiserver 1.37 with etcd (`realcell`), and asserts what
//! the real server does on both. What only localplane has is tested in `localplane_only.rs`.

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use crate::servers::{Server, Who, on_both};
use egress_api::shard::{EgressShard, EgressShardSpec, EgressShardStatus, TargetRef};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchParams};
use kube::core::{DynamicObject, GroupVersionKind, PartialObjectMeta};
use kube::discovery::ApiResource;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

pub(crate) fn shard(name: &str) -> EgressShard {
    EgressShard::new(
        name,
        EgressShardSpec {
            target_ref: TargetRef {
                kind: "Node".into(),
                name: format!("node-{name}"),
            },
            ..Default::default()
        },
    )
}

/// The admin's EgressShards in namespace `ns`.
async fn admin_shards(server: &Server, ns: &str) -> Api<EgressShard> {
    Api::namespaced(server.client(Who::Admin).await, ns)
}

pub(crate) fn widgets(client: Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("example.localplane.dev", "v1", "Widget");
    Api::namespaced_with(client, ns, &ApiResource::from_gvk(&gvk))
}

pub(crate) fn widget(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "example.localplane.dev/v1", "kind": "Widget",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap()
}

on_both!(create_get_list_and_server_metadata);
async fn create_get_list_and_server_metadata(server: Server) {
    let client = server.client(Who::Admin).await;
    let api: Api<EgressShard> = Api::namespaced(client.clone(), "ns1");

    let a = api
        .create(&PostParams::default(), &shard("a"))
        .await
        .unwrap();
    let b = api
        .create(&PostParams::default(), &shard("b"))
        .await
        .unwrap();
    assert!(a.metadata.uid.is_some());
    assert!(a.metadata.creation_timestamp.is_some());
    assert_eq!(a.metadata.generation, Some(1));
    let (rva, rvb): (u64, u64) = (
        a.resource_version().unwrap().parse().unwrap(),
        b.resource_version().unwrap().parse().unwrap(),
    );
    assert!(rvb > rva, "resourceVersions increase");

    let got = api.get("a").await.unwrap();
    assert_eq!(got.spec, a.spec);

    let err = api_err(
        api.create(&PostParams::default(), &shard("a"))
            .await
            .unwrap_err(),
    );
    assert!(err.is_already_exists(), "{err:?}");
    assert_eq!(err.code, 409);

    let err = api_err(api.get("missing").await.unwrap_err());
    assert!(err.is_not_found());
    assert_eq!(
        err.message,
        r#"egressshards.network.datumapis.com "missing" not found"#
    );
    assert!(api.get_opt("missing").await.unwrap().is_none());

    let list = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 2);
    assert!(list.metadata.resource_version.is_some());

    // Pagination: pages of one, joined by continue tokens.
    let p1 = api.list(&ListParams::default().limit(1)).await.unwrap();
    assert_eq!(p1.items.len(), 1);
    let token = p1.metadata.continue_.clone().expect("a continue token");
    let p2 = api
        .list(&ListParams::default().limit(1).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(p2.items.len(), 1);
    assert_ne!(p1.items[0].name_any(), p2.items[0].name_any());
    assert!(p2.metadata.continue_.as_deref().unwrap_or("").is_empty());

    // Cluster-wide list sees the namespaced objects.
    let all: Api<EgressShard> = Api::all(client.clone());
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        2
    );

    // generateName.
    let mut g = shard("");
    g.metadata.name = None;
    g.metadata.generate_name = Some("gen-".into());
    let g = api.create(&PostParams::default(), &g).await.unwrap();
    assert!(g.name_any().starts_with("gen-") && g.name_any().len() == 9);

    // Name validation.
    let err = api_err(
        api.create(&PostParams::default(), &shard("Bad_Name"))
            .await
            .unwrap_err(),
    );
    assert!(err.is_invalid(), "{err:?}");
    assert!(
        err.message.contains("a lowercase RFC 1123 subdomain"),
        "{}",
        err.message
    );
    server.shutdown().await;
}

on_both!(selectors);
async fn selectors(server: Server) {
    let api = admin_shards(&server, "ns1").await;
    for (n, pool) in [("a", Some("x")), ("b", Some("y")), ("c", None)] {
        let mut s = shard(n);
        if let Some(p) = pool {
            s.labels_mut().insert("pool".into(), p.into());
        }
        api.create(&PostParams::default(), &s).await.unwrap();
    }
    let names = |l: kube::core::ObjectList<EgressShard>| {
        let mut v: Vec<String> = l.items.iter().map(|s| s.name_any()).collect();
        v.sort();
        v.join(",")
    };
    for (sel, want) in [
        ("pool=x", "a"),
        ("pool!=x", "b,c"),
        ("pool in (x,y)", "a,b"),
        ("pool notin (x)", "b,c"),
        ("pool", "a,b"),
        ("!pool", "c"),
    ] {
        let got = names(api.list(&ListParams::default().labels(sel)).await.unwrap());
        assert_eq!(got, want, "{sel}");
    }
    let got = names(
        api.list(&ListParams::default().fields("metadata.name=b"))
            .await
            .unwrap(),
    );
    assert_eq!(got, "b");
    let got = names(
        api.list(&ListParams::default().fields("metadata.namespace=ns1,metadata.name!=b"))
            .await
            .unwrap(),
    );
    assert_eq!(got, "a,c");
    let err = api_err(
        api.list(&ListParams::default().fields("spec.drain=true"))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.reason, "BadRequest");
    server.shutdown().await;
}

on_both!(conflicts_generation_and_status_split);
async fn conflicts_generation_and_status_split(server: Server) {
    let api = admin_shards(&server, "ns1").await;
    let created = api
        .create(&PostParams::default(), &shard("a"))
        .await
        .unwrap();

    // A label change is metadata: no generation bump.
    let mut labelled = created.clone();
    labelled.labels_mut().insert("k".into(), "v".into());
    let labelled = api
        .replace("a", &PostParams::default(), &labelled)
        .await
        .unwrap();
    assert_eq!(labelled.metadata.generation, Some(1));

    // The first object's resourceVersion is stale now.
    let err = api_err(
        api.replace("a", &PostParams::default(), &created)
            .await
            .unwrap_err(),
    );
    assert!(err.is_conflict(), "{err:?}");
    assert_eq!(
        err.message,
        r#"Operation cannot be fulfilled on egressshards.network.datumapis.com "a": the object has been modified; please apply your changes to the latest version and try again"#
    );

    // A resourceVersion in a merge patch is a precondition too.
    let stale = json!({"metadata": {"resourceVersion": created.resource_version()}, "spec": {"drain": true}});
    let err = api_err(
        api.patch("a", &PatchParams::default(), &Patch::Merge(&stale))
            .await
            .unwrap_err(),
    );
    assert!(err.is_conflict());

    // Spec change bumps generation; status in a main-resource write is ignored.
    let mut next = labelled.clone();
    next.spec.drain = Some(true);
    next.status = Some(EgressShardStatus {
        shard_sid: "fc00::1".into(),
        ..Default::default()
    });
    let next = api
        .replace("a", &PostParams::default(), &next)
        .await
        .unwrap();
    assert_eq!(next.metadata.generation, Some(2));
    assert!(
        next.status.is_none(),
        "status is ignored on the main resource"
    );

    // The status subresource changes only status, and not generation.
    let st = json!({"status": {"shardSID": "fc00::1"}, "spec": {"drain": false}});
    let after = api
        .patch_status("a", &PatchParams::default(), &Patch::Merge(&st))
        .await
        .unwrap();
    assert_eq!(after.status.unwrap().shard_sid, "fc00::1");
    assert_eq!(after.spec.drain, Some(true), "spec is ignored on /status");
    assert_eq!(after.metadata.generation, Some(2));

    // An unchanged write keeps the resourceVersion.
    let same = api.get("a").await.unwrap();
    let again = api
        .replace("a", &PostParams::default(), &same)
        .await
        .unwrap();
    assert_eq!(again.resource_version(), same.resource_version());

    // PUT without a resourceVersion is refused for custom resources.
    let mut no_rv = same.clone();
    no_rv.metadata.resource_version = None;
    let err = api_err(
        api.replace("a", &PostParams::default(), &no_rv)
            .await
            .unwrap_err(),
    );
    assert!(err.is_invalid(), "{err:?}");
    server.shutdown().await;
}

on_both!(missing_namespace_is_a_namespaces_404);
async fn missing_namespace_is_a_namespaces_404(server: Server) {
    let api = admin_shards(&server, "nope").await;
    let err = api_err(
        api.create(&PostParams::default(), &shard("a"))
            .await
            .unwrap_err(),
    );
    assert!(err.is_not_found());
    let d = err.details.expect("details");
    assert_eq!(
        (d.kind.as_str(), d.name.as_str(), d.group.as_str()),
        ("namespaces", "nope", "")
    );
    assert_eq!(err.message, r#"namespaces "nope" not found"#);
    server.shutdown().await;
}

on_both!(json_patch_finalizers_and_deletion);
async fn json_patch_finalizers_and_deletion(server: Server) {
    let api = admin_shards(&server, "ns1").await;
    api.create(&PostParams::default(), &shard("a"))
        .await
        .unwrap();

    // The exact patches kube::runtime::finalizer sends.
    let add: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/finalizers", "value": null},
        {"op": "add", "path": "/metadata/finalizers", "value": ["example.com/fin"]}
    ]))
    .unwrap();
    let with_fin = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Json::<()>(add.clone()),
        )
        .await
        .unwrap();
    assert_eq!(with_fin.finalizers(), ["example.com/fin"]);

    // A failed test operation is 422.
    let err = api_err(
        api.patch("a", &PatchParams::default(), &Patch::Json::<()>(add))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));

    // Delete with a finalizer: the object stays, marked.
    let res = api.delete("a", &DeleteParams::default()).await.unwrap();
    let marked = res
        .left()
        .expect("the object is returned while finalizers remain");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert!(
        api.get("a")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );

    // No new finalizers while deleting.
    let more = json!({"metadata": {"finalizers": ["example.com/fin", "other/fin"]}});
    let err = api_err(
        api.patch("a", &PatchParams::default(), &Patch::Merge(&more))
            .await
            .unwrap_err(),
    );
    assert!(err.is_invalid(), "{err:?}");

    // Removing the last finalizer removes the object.
    let remove: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/finalizers/0", "value": "example.com/fin"},
        {"op": "remove", "path": "/metadata/finalizers/0"}
    ]))
    .unwrap();
    api.patch("a", &PatchParams::default(), &Patch::Json::<()>(remove))
        .await
        .unwrap();
    assert!(api.get_opt("a").await.unwrap().is_none());

    // Without finalizers, delete answers a success Status.
    api.create(&PostParams::default(), &shard("b"))
        .await
        .unwrap();
    let res = api.delete("b", &DeleteParams::default()).await.unwrap();
    assert!(res.right().expect("a Status").is_success());
    server.shutdown().await;
}

on_both!(cel_rules_refuse_with_the_apiservers_422);
async fn cel_rules_refuse_with_the_apiservers_422(server: Server) {
    let api = admin_shards(&server, "ns1").await;
    api.create(&PostParams::default(), &shard("x"))
        .await
        .unwrap();
    let set = |v: &str| json!({"spec": {"shardAddressIPv6": v}});
    api.patch(
        "x",
        &PatchParams::default(),
        &Patch::Merge(&set("2001:db8::1")),
    )
    .await
    .unwrap();
    let err = api_err(
        api.patch(
            "x",
            &PatchParams::default(),
            &Patch::Merge(&set("2001:db8::2")),
        )
        .await
        .unwrap_err(),
    );
    assert!(err.is_invalid());
    assert_eq!(
        err.message,
        r#"EgressShard.network.datumapis.com "x" is invalid: spec.shardAddressIPv6: Invalid value: "2001:db8::2": shardAddressIPv6 is immutable once assigned"#
    );
    let d = err.details.unwrap();
    assert_eq!(d.kind, "EgressShard");
    assert_eq!(d.causes[0].reason, "FieldValueInvalid");
    assert_eq!(d.causes[0].field, "spec.shardAddressIPv6");

    // ip() and isIP() run too.
    api.create(&PostParams::default(), &shard("y"))
        .await
        .unwrap();
    let err = api_err(
        api.patch(
            "y",
            &PatchParams::default(),
            &Patch::Merge(&set("10.0.0.1")),
        )
        .await
        .unwrap_err(),
    );
    assert!(
        err.message
            .contains("shardAddressIPv6 must be a valid IPv6 address"),
        "{}",
        err.message
    );

    // Structural schema: a missing required field.
    let bad = json!({"apiVersion": "network.datumapis.com/v1alpha1", "kind": "EgressShard",
        "metadata": {"name": "z"}, "spec": {"targetRef": {"kind": "Node"}}});
    let dynapi: Api<DynamicObject> = Api::namespaced_with(
        server.client(Who::Admin).await,
        "ns1",
        &ApiResource::erase::<EgressShard>(&()),
    );
    let err = api_err(
        dynapi
            .create(
                &PostParams::default(),
                &serde_json::from_value(bad).unwrap(),
            )
            .await
            .unwrap_err(),
    );
    // The CRD's CEL rules are not evaluated on an object missing a required field, and the
    // refusal says so, as the real apiserver's does.
    assert_eq!(
        err.message,
        r#"EgressShard.network.datumapis.com "z" is invalid: [spec.targetRef.name: Required value, <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]"#
    );
    server.shutdown().await;
}

on_both!(defaults_pruning_and_schema_constraints);
async fn defaults_pruning_and_schema_constraints(server: Server) {
    let api = widgets(server.client(Who::Admin).await, "ns1");
    let w = api
        .create(
            &PostParams::default(),
            &widget("w", json!({"size": 3, "bogus": 1})),
        )
        .await
        .unwrap();
    assert_eq!(
        w.data["spec"],
        json!({"size": 3, "max": 10, "color": "red"})
    );

    let err = api_err(
        api.create(&PostParams::default(), &widget("v", json!({"size": 30})))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        err.message,
        r#"Widget.example.localplane.dev "v" is invalid: spec: Invalid value: size must not exceed max"#
    );
    let err = api_err(
        api.create(
            &PostParams::default(),
            &widget("v", json!({"size": 1, "color": "green", "code": "TOOLONG"})),
        )
        .await
        .unwrap_err(),
    );
    assert!(
        err.message
            .contains(r#"spec.color: Unsupported value: "green": supported values: "red", "blue""#),
        "{}",
        err.message
    );
    assert!(
        err.message
            .contains("spec.code in body should match '^[a-z]{3}$'"),
        "{}",
        err.message
    );

    // Strict field validation turns pruning into an error: for a merge patch, the patcher's
    // 422, quoting the patched object.
    let strict = PatchParams {
        field_validation: Some(kube::api::ValidationDirective::Strict),
        ..Default::default()
    };
    let err = api_err(
        api.patch("w", &strict, &Patch::Merge(json!({"spec": {"bogus": 1}})))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"), "{err:?}");
    assert!(
        err.message
            .starts_with(r#" "" is invalid: patch: Invalid value: "{"#),
        "{}",
        err.message
    );
    assert!(
        err.message
            .ends_with(r#"}": strict decoding error: unknown field "spec.bogus""#),
        "{}",
        err.message
    );
    let d = err.details.expect("details");
    assert_eq!((d.kind.as_str(), d.name.as_str()), ("", ""));
    assert_eq!(d.causes[0].field, "patch");
    assert!(
        api.get("w").await.unwrap().data["spec"]
            .get("bogus")
            .is_none(),
        "nothing was written"
    );
    server.shutdown().await;
}

on_both!(builtins_server_side_apply_and_namespaces);
async fn builtins_server_side_apply_and_namespaces(server: Server) {
    let client = server.client(Who::Admin).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "ns1");
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "leader"}, "spec": {"holderIdentity": "a"}});
    let l = leases
        .patch(
            "leader",
            &PatchParams::apply("me").force(),
            &Patch::Apply(&lease),
        )
        .await
        .unwrap();
    assert_eq!(l.spec.unwrap().holder_identity.as_deref(), Some("a"));
    let lease2 = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "leader"}, "spec": {"holderIdentity": "b"}});
    let l = leases
        .patch(
            "leader",
            &PatchParams::apply("me").force(),
            &Patch::Apply(&lease2),
        )
        .await
        .unwrap();
    assert_eq!(l.spec.unwrap().holder_identity.as_deref(), Some("b"));

    // Namespace deletion takes its contents with it.
    let nss: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "tmp"}})).unwrap();
    nss.create(&PostParams::default(), &ns).await.unwrap();
    let in_tmp: Api<EgressShard> = Api::namespaced(client.clone(), "tmp");
    in_tmp
        .create(&PostParams::default(), &shard("a"))
        .await
        .unwrap();
    // The namespace registry answers with the namespace, marked terminating: its contents are
    // the namespace controller's to delete.
    let deleted = nss
        .delete("tmp", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("the namespace, marked terminating");
    assert!(deleted.metadata.deletion_timestamp.is_some());
    assert_eq!(
        deleted.status.and_then(|s| s.phase).as_deref(),
        Some("Terminating")
    );
    // localplane does what the namespace controller does at once; the real control plane runs
    // no kube-controller-manager, so there the namespace stays terminating with what it holds.
    if !server.is_real() {
        assert!(nss.get_opt("tmp").await.unwrap().is_none());
        assert!(
            in_tmp
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .is_empty()
        );
    }

    // Strategic merge patches are refused for custom resources, as the apiserver does.
    let shards: Api<EgressShard> = Api::namespaced(client, "ns1");
    shards
        .create(&PostParams::default(), &shard("a"))
        .await
        .unwrap();
    let err = api_err(
        shards
            .patch(
                "a",
                &PatchParams::default(),
                &Patch::Strategic(json!({"spec": {"drain": true}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (err.code, err.reason.as_str()),
        (415, "UnsupportedMediaType")
    );
    server.shutdown().await;
}

/// The real control plane serves EgressShard watches from etcd, not from its watch cache, so
/// that etcd's compaction reaches them.
const SHARDS_FROM_ETCD: &str = "--watch-cache-sizes=egressshards.network.datumapis.com#0";

on_both!(
    watcher_resumes_and_relists_after_410,
    Server::local(builder().bookmark_interval(Duration::from_millis(200))),
    Server::real_with(&[SHARDS_FROM_ETCD])
);
async fn watcher_resumes_and_relists_after_410(server: Server) {
    let api = admin_shards(&server, "ns1").await;
    api.create(&PostParams::default(), &shard("a"))
        .await
        .unwrap();

    // A short server-side timeout makes the watcher reconnect from its last resourceVersion.
    let cfg = watcher::Config::default().timeout(1);
    let mut events = watcher(api.clone(), cfg).boxed();
    let mut inits = 0;
    let mut saw_b = false;
    let mut saw_c_after_relist = false;
    let mut saw_expired = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while tokio::time::Instant::now() < deadline {
        let ev = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("watcher makes progress")
            .expect("stream continues");
        let ev = match ev {
            Ok(ev) => ev,
            Err(watcher::Error::WatchError(s)) if s.code == 410 => {
                // The watcher reports the expiry, then relists on the next poll.
                saw_expired = true;
                continue;
            }
            Err(e) => panic!("unexpected watcher error: {e:?}"),
        };
        match ev {
            watcher::Event::Init => inits += 1,
            watcher::Event::InitDone if inits == 1 && !saw_b => {
                api.create(&PostParams::default(), &shard("b"))
                    .await
                    .unwrap();
            }
            watcher::Event::Apply(o) if o.name_any() == "b" => {
                saw_b = true;
                // Not polling lets the server end this 1s watch. Two writes, then forgetting
                // history, leave the watcher's resourceVersion too old (etcd keeps the revision
                // it compacts to, so one write would not): its resume must be told 410 and
                // relist.
                tokio::time::sleep(Duration::from_millis(1500)).await;
                for n in ["c", "d"] {
                    api.create(&PostParams::default(), &shard(n)).await.unwrap();
                }
                server.compact_history().await;
            }
            watcher::Event::InitApply(o) if inits >= 2 && o.name_any() == "c" => {
                saw_c_after_relist = true;
            }
            watcher::Event::InitDone if saw_c_after_relist => break,
            _ => {}
        }
    }
    assert!(saw_b, "live events arrive");
    assert!(saw_expired, "the resumed watch was told 410 Expired");
    assert!(inits >= 2, "the watcher relisted after 410");
    assert!(saw_c_after_relist);
    server.shutdown().await;
}

on_both!(
    raw_watch_semantics,
    Server::local(builder()),
    Server::real_with(&[SHARDS_FROM_ETCD])
);
async fn raw_watch_semantics(server: Server) {
    let api = admin_shards(&server, "ns1").await;
    let a = api
        .create(&PostParams::default(), &shard("a"))
        .await
        .unwrap();
    let rv0 = a.resource_version().unwrap();
    for n in ["b", "c", "d"] {
        api.create(&PostParams::default(), &shard(n)).await.unwrap();
    }
    let compacted = server.compact_history().await;
    let watch = |rv: &str| {
        format!(
            "/apis/network.datumapis.com/v1alpha1/namespaces/ns1/egressshards?watch=true&timeoutSeconds=1&resourceVersion={rv}"
        )
    };
    let admin = Some(Who::Admin);
    // Too old: HTTP 200 with a single ERROR event.
    let expired = |code: u16, body: &str| {
        assert_eq!(code, 200);
        let lines: Vec<Value> = body
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 1, "{body}");
        assert_eq!(lines[0]["type"], "ERROR");
        assert_eq!(lines[0]["object"]["code"], 410);
        assert_eq!(lines[0]["object"]["reason"], "Expired");
    };
    let (code, _, body) = server.raw(admin, "GET", &watch(&rv0), &[], "").await;
    expired(code, &body);
    // The revision history was compacted to is kept, and a watch starts after its
    // resourceVersion: from the one just before, it still starts; from any older, 410.
    let (code, _, body) = server
        .raw(admin, "GET", &watch(&(compacted - 1).to_string()), &[], "")
        .await;
    assert_eq!(code, 200);
    assert!(!body.contains(r#""type":"ERROR""#), "{body}");
    let (code, _, body) = server
        .raw(admin, "GET", &watch(&(compacted - 2).to_string()), &[], "")
        .await;
    expired(code, &body);

    // Within history: only later events.
    let list = api.list(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.unwrap();
    // Deleted before the watch opens: a watch from `rv` replays what came after it from history.
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let (_, _, body) = server
        .raw(
            admin,
            "GET",
            &watch(&rv),
            &[(
                "accept",
                "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
            )],
            "",
        )
        .await;
    let events: Vec<Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), 1, "{body}");
    assert_eq!(events[0]["type"], "DELETED", "{body}");
    // Framed as the apiserver frames it, type first: kube decodes such an event without
    // buffering the object.
    assert!(
        body.lines().all(|l| l.starts_with(r#"{"type":""#)),
        "{body}"
    );
    assert_eq!(events[0]["object"]["kind"], "PartialObjectMetadata");
    assert!(events[0]["object"].get("spec").is_none());
    server.shutdown().await;
}

on_both!(metadata_api_lists_and_watches);
async fn metadata_api_lists_and_watches(server: Server) {
    let client = server.client(Who::Admin).await;
    let api: Api<EgressShard> = Api::namespaced(client.clone(), "ns1");
    api.create(&PostParams::default(), &shard("a"))
        .await
        .unwrap();
    let meta: Api<PartialObjectMeta<EgressShard>> = Api::namespaced(client, "ns1");
    let l = meta.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(l.items[0].name_any(), "a");
    let mut w = meta
        .watch_metadata(&WatchParams::default().timeout(2), "0")
        .await
        .unwrap()
        .boxed();
    let first = w.try_next().await.unwrap().unwrap();
    assert!(matches!(first, kube::core::WatchEvent::Added(o) if o.name_any() == "a"));
    server.shutdown().await;
}

#[derive(Debug, thiserror::Error)]
#[error("reconcile failed: {0}")]
struct ReconcileError(#[from] kube::Error);

on_both!(a_controller_reconciles);
async fn a_controller_reconciles(server: Server) {
    let client = server.client(Who::Admin).await;
    let api: Api<EgressShard> = Api::namespaced(client.clone(), "ns1");
    for n in ["a", "b", "c"] {
        api.create(&PostParams::default(), &shard(n)).await.unwrap();
    }
    let ctrl = Controller::new(api.clone(), watcher::Config::default())
        .run(
            |s: Arc<EgressShard>, api: Arc<Api<EgressShard>>| async move {
                if s.status.as_ref().and_then(|st| st.observed_generation) != s.metadata.generation
                {
                    let st = json!({"status": {"observedGeneration": s.metadata.generation}});
                    api.patch_status(&s.name_any(), &PatchParams::default(), &Patch::Merge(&st))
                        .await?;
                }
                Ok::<_, ReconcileError>(Action::await_change())
            },
            |_, _, _| Action::requeue(Duration::from_millis(100)),
            Arc::new(api.clone()),
        )
        .for_each(|_| async {});
    let ctrl = tokio::spawn(ctrl);
    api.create(&PostParams::default(), &shard("d"))
        .await
        .unwrap();
    let done = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let l = api.list(&ListParams::default()).await.unwrap();
            if l.items.len() == 4
                && l.items.iter().all(|s| {
                    s.status.as_ref().and_then(|st| st.observed_generation) == s.metadata.generation
                })
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    ctrl.abort();
    assert!(done.is_ok(), "every shard reconciled");
    server.shutdown().await;
}

on_both!(
    authentication_and_rbac,
    Server::local(builder().rbac(true)),
    Server::real()
);
async fn authentication_and_rbac(server: Server) {
    // A token the server did not issue is refused before authorization.
    let bogus = [("authorization", "Bearer not-a-token-the-server-issued")];
    let (code, _, body) = server
        .raw(None, "GET", "/api/v1/namespaces", &bogus, "")
        .await;
    assert_eq!(code, 401, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["reason"],
        "Unauthorized"
    );
    // No credential at all: the real apiserver authenticates the request as system:anonymous
    // (anonymous authentication is on by default) and RBAC refuses it; localplane has no
    // anonymous user and answers 401. A difference that stays, localplane's assertion
    // localplane-only: it refuses either way.
    let (code, _, body) = server.raw(None, "GET", "/api/v1/namespaces", &[], "").await;
    let status: Value = serde_json::from_str(&body).unwrap();
    if server.is_real() {
        assert_eq!(
            (code, &status["reason"]),
            (403, &json!("Forbidden")),
            "{body}"
        );
        assert_eq!(
            status["message"],
            r#"namespaces is forbidden: User "system:anonymous" cannot list resource "namespaces" in API group "" at the cluster scope"#
        );
    } else {
        assert_eq!(
            (code, &status["reason"]),
            (401, &json!("Unauthorized")),
            "{body}"
        );
    }

    let user_name = server.user_name();
    let user: Api<EgressShard> = Api::namespaced(server.client(Who::User).await, "ns1");
    let err = api_err(user.get("a").await.unwrap_err());
    assert!(err.is_forbidden());
    assert_eq!(
        err.message,
        format!(
            r#"egressshards.network.datumapis.com "a" is forbidden: User "{user_name}" cannot get resource "egressshards" in API group "network.datumapis.com" in the namespace "ns1""#
        )
    );

    // Grant get/list in ns1 only, through objects the plane stores.
    let admin = server.client(Who::Admin).await;
    let role = Role {
        metadata: kube::core::ObjectMeta {
            name: Some("reader".into()),
            ..Default::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["network.datumapis.com".into()]),
            resources: Some(vec!["egressshards".into()]),
            verbs: vec!["get".into(), "list".into()],
            ..Default::default()
        }]),
    };
    Api::<Role>::namespaced(admin.clone(), "ns1")
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let rb = RoleBinding {
        metadata: kube::core::ObjectMeta {
            name: Some("reader".into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: "reader".into(),
        },
        subjects: Some(vec![Subject {
            kind: "User".into(),
            name: user_name.into(),
            ..Default::default()
        }]),
    };
    Api::<RoleBinding>::namespaced(admin.clone(), "ns1")
        .create(&PostParams::default(), &rb)
        .await
        .unwrap();
    // The real apiserver's RBAC authorizer reads bindings from its informer, so a new binding
    // takes effect a moment after its create answers (a busy machine showed the gap).
    let mut listed = user.list(&ListParams::default()).await;
    for _ in 0..50 {
        if listed.is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        listed = user.list(&ListParams::default()).await;
    }
    assert!(listed.is_ok(), "{:?}", listed.err());
    let err = api_err(
        user.create(&PostParams::default(), &shard("a"))
            .await
            .unwrap_err(),
    );
    assert!(err.is_forbidden());
    assert!(
        err.message.contains("cannot create resource"),
        "{}",
        err.message
    );
    let err = api_err(
        user.patch_status("a", &PatchParams::default(), &Patch::Merge(json!({})))
            .await
            .unwrap_err(),
    );
    assert!(
        err.message
            .contains(r#"cannot patch resource "egressshards/status""#),
        "{}",
        err.message
    );
    let elsewhere: Api<EgressShard> = Api::all(server.client(Who::User).await);
    let err = api_err(elsewhere.list(&ListParams::default()).await.unwrap_err());
    assert!(
        err.message.ends_with("at the cluster scope"),
        "{}",
        err.message
    );
    server.shutdown().await;
}

on_both!(discovery_openapi_and_tables);
async fn discovery_openapi_and_tables(server: Server) {
    let srv = &server;
    let get = |p: &str, accept: &'static str| {
        let path = p.to_string();
        async move {
            let (code, _, body) = srv
                .raw(Some(Who::Admin), "GET", &path, &[("accept", accept)], "")
                .await;
            assert_eq!(code, 200, "{path}: {body}");
            serde_json::from_str::<Value>(&body).unwrap()
        }
    };
    let groups = get("/apis", "application/json").await;
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "network.datumapis.com")
    );
    let rl = get("/apis/network.datumapis.com/v1alpha1", "application/json").await;
    let names: Vec<&str> = rl["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["egressshards", "egressshards/status"]);
    // A CRD's OpenAPI document is published once the CRD is established, by a controller of
    // its own: wait for it to be listed.
    let url = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let root = get("/openapi/v3", "application/json").await;
            let group = &root["paths"]["apis/network.datumapis.com/v1alpha1"];
            if let Some(url) = group["serverRelativeURL"].as_str() {
                return url.to_string();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the CRD's OpenAPI document is listed within 60 s");
    let doc = get(&url, "application/json").await;
    assert!(doc["components"]["schemas"]["com.datumapis.network.v1alpha1.EgressShard"].is_object());

    let api = admin_shards(&server, "ns1").await;
    api.create(&PostParams::default(), &shard("a"))
        .await
        .unwrap();
    let t = get(
        "/apis/network.datumapis.com/v1alpha1/namespaces/ns1/egressshards",
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
    )
    .await;
    assert_eq!(t["kind"], "Table");
    let cols: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        cols,
        [
            "Name",
            "TARGET",
            "SHARD-SID",
            "IPV6",
            "IPV4",
            "DRAIN",
            "AGE"
        ]
    );
    assert_eq!(t["rows"][0]["cells"][0], "a");
    assert_eq!(t["rows"][0]["cells"][1], "node-a");
    assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    server.shutdown().await;
}
