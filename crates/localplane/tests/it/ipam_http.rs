//! Milo IPAM on a project control plane, driven with kube-rs over real HTTP at
//! `/apis/resourcemanager.miloapis.com/v1alpha1/projects/<p>/control-plane`.

use std::collections::BTreeSet;

use egress_api::ipam::{IPAllocation, IPClaim, IPClass, IPPool};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind, Status};
use localplane::testing::{causes, has_cause};
use localplane::{Identity, LocalPlane, Running};
use serde_json::{Value, json};

use crate::common::{PLATFORM, api_err, claim, flat, repo_root, start_ipam};

fn client(lp: &Running, plane: &str) -> Client {
    lp.http_client(plane, "admin").unwrap()
}

/// IPAM served ([`start_ipam`]), with the admin's client of the platform project.
async fn platform() -> (Running, Client) {
    let lp = start_ipam().await;
    let c = client(&lp, PLATFORM);
    (lp, c)
}

/// As [`platform`], with the shipped inventory applied under root pool `cidr`.
async fn platform_with_inventory(cidr: &str) -> (Running, Client) {
    let (lp, c) = platform().await;
    for r in apply_inventory(&c, Some(cidr)).await {
        r.unwrap();
    }
    (lp, c)
}

fn inventory_docs(cidr: Option<&str>) -> Vec<Value> {
    let text = std::fs::read_to_string(repo_root().join("config/ipam/egress-shard-ipv6.yaml"))
        .expect("config/ipam/egress-shard-ipv6.yaml");
    let mut docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    docs.retain(Value::is_object);
    if let Some(c) = cidr {
        for d in &mut docs {
            if d["kind"] == "IPPool" {
                d["spec"]["cidr"] = json!(c);
            }
        }
    }
    docs
}

fn dynamic_api(c: &Client, doc: &Value) -> Api<DynamicObject> {
    let (group, version) = doc["apiVersion"].as_str().unwrap().split_once('/').unwrap();
    let kind = doc["kind"].as_str().unwrap();
    let mut ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    if kind == "IPClass" {
        ar.plural = "ipclasses".into();
    }
    Api::all_with(c.clone(), &ar)
}

async fn apply_inventory(c: &Client, cidr: Option<&str>) -> Vec<Result<(), Status>> {
    let mut out = Vec::new();
    for d in inventory_docs(cidr) {
        let obj: DynamicObject = serde_json::from_value(d.clone()).unwrap();
        out.push(
            dynamic_api(c, &d)
                .create(&PostParams::default(), &obj)
                .await
                .map(|_| ())
                .map_err(api_err),
        );
    }
    out
}

fn shard_claim(name: &str, location: &str) -> IPClaim {
    serde_json::from_value(json!({
        "apiVersion": "ipam.miloapis.com/v1alpha1", "kind": "IPClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "className": "datum-egress-shard-address-ipv6", "ipFamily": "IPv6", "prefixLength": 128,
            "target": "Block", "reclaimPolicy": "Delete",
            "scope": {"location": {"apiGroup": "networking.datumapis.com", "kind": "Location", "name": location}},
        },
    }))
    .unwrap()
}

fn cidr(c: &IPClaim) -> String {
    c.status
        .as_ref()
        .map(|s| s.allocated_cidr.clone())
        .unwrap_or_default()
}

/// The expected IPAllocation name: `alloc-` + 8 bytes of SHA-256 over `<ns>/<claim>`.
fn alloc_name(ns: &str, claim: &str) -> String {
    localplane::ipam::digest::allocation_name(ns, claim)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_unedited_inventory_is_refused_and_the_edited_one_accepted() {
    let (_lp, c) = platform().await;
    let results = apply_inventory(&c, None).await;
    let refused = results[0].as_ref().unwrap_err();
    assert_eq!(refused.code, 422);
    assert!(
        refused.message.contains("cidr is required for root pools"),
        "{}",
        refused.message
    );
    assert!(
        Api::<IPPool>::all(c.clone())
            .get_opt("datum-egress-shard-ipv6-root")
            .await
            .unwrap()
            .is_none()
    );

    let (_lp2, c2) = platform_with_inventory("2001:db8::/40").await;
    let root = Api::<IPPool>::all(c2.clone())
        .get("datum-egress-shard-ipv6-root")
        .await
        .unwrap();
    let st = root.status.unwrap();
    assert_eq!(st.phase, "Ready");
    assert_eq!(st.allocated_cidr, "2001:db8::/40");
    let cap = st.capacity.unwrap();
    assert_eq!(cap.total, (1u128 << 88).to_string());
    assert_eq!(cap.allocated, "0");
    assert_eq!(st.utilization_percent, Some(0.0));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_binds_on_create_through_the_cascade() {
    let (_lp, c) = platform_with_inventory("2001:db8::/40").await;
    let claims: Api<IPClaim> = Api::namespaced(c.clone(), "default");
    let mut desired = shard_claim("egress-shard-ipv6.galactic-system.worker-a", "dfw");
    desired.spec.owner_ref = Some(egress_api::ipam::ObjectRef {
        name: "mine".into(),
        ..Default::default()
    });
    let bound = claims
        .create(&PostParams::default(), &desired)
        .await
        .unwrap();
    let st = bound.status.clone().unwrap();
    assert_eq!(st.phase, "Bound");
    // The shipped inventory reserves each location's Subnet-Router anycast address (`::`).
    assert_eq!(st.allocated_cidr, "2001:db8::1/128");
    assert_eq!(st.address, "", "status.address is never written");
    let alloc = alloc_name("default", "egress-shard-ipv6.galactic-system.worker-a");
    assert_eq!(st.bound_allocation_ref.unwrap().name, alloc);
    let pool_name = st.pool_ref.unwrap().name;
    assert!(
        pool_name.starts_with("datum-egress-shard-ipv6-dfw-"),
        "{pool_name}"
    );
    let owner = bound.spec.owner_ref.unwrap();
    assert_eq!(
        (
            owner.api_group.as_str(),
            owner.kind.as_str(),
            owner.name.as_str()
        ),
        ("resourcemanager.miloapis.com", "Project", PLATFORM)
    );

    // The raw body has no status.address key at all.
    let raw: Value = serde_json::to_value(
        claims
            .get(&bound.metadata.name.clone().unwrap())
            .await
            .unwrap(),
    )
    .unwrap();
    assert!(raw["status"].get("address").is_none());

    let pool = Api::<IPPool>::all(c.clone()).get(&pool_name).await.unwrap();
    let labels = pool.metadata.labels.clone().unwrap();
    assert_eq!(
        labels["ipam.miloapis.com/provisioned-by-class"],
        "datum-egress-shard-ipv6"
    );
    assert!(labels.contains_key("ipam.miloapis.com/scope-digest"));
    let ps = pool.status.unwrap();
    assert_eq!(
        (ps.phase.as_str(), ps.allocated_cidr.as_str()),
        ("Ready", "2001:db8::/48")
    );
    assert_eq!(
        pool.spec.parent_pool_ref.unwrap().name,
        "datum-egress-shard-ipv6-root"
    );
    let root = Api::<IPPool>::all(c.clone())
        .get("datum-egress-shard-ipv6-root")
        .await
        .unwrap();
    assert_eq!(
        root.status.unwrap().capacity.unwrap().allocated,
        (1u128 << 80).to_string()
    );

    let a = Api::<IPAllocation>::namespaced(c.clone(), "default")
        .get(&alloc)
        .await
        .unwrap();
    assert_eq!(
        a.spec.claim_ref.unwrap().name,
        "egress-shard-ipv6.galactic-system.worker-a"
    );
    assert_eq!(a.spec.reclaim_policy, "Delete");
    assert_eq!(a.status.unwrap().allocated_cidr, "2001:db8::1/128");

    let next = claims
        .create(&PostParams::default(), &shard_claim("b", "dfw"))
        .await
        .unwrap();
    assert_eq!(cidr(&next), "2001:db8::2/128");
    let elsewhere = claims
        .create(&PostParams::default(), &shard_claim("c", "ord"))
        .await
        .unwrap();
    assert_eq!(cidr(&elsewhere), "2001:db8:1::1/128");
}

#[tokio::test(flavor = "multi_thread")]
async fn sixty_four_parallel_claimers_get_distinct_addresses() {
    let (lp, c) = platform_with_inventory("2001:db8::/40").await;
    let mut tasks = Vec::new();
    for i in 0..64 {
        let c = client(&lp, PLATFORM);
        tasks.push(tokio::spawn(async move {
            let claims: Api<IPClaim> = Api::namespaced(c, "default");
            let loc = if i % 2 == 0 { "dfw" } else { "ord" };
            cidr(
                &claims
                    .create(
                        &PostParams::default(),
                        &shard_claim(&format!("shard-{i}"), loc),
                    )
                    .await
                    .unwrap(),
            )
        }));
    }
    let mut seen = BTreeSet::new();
    for t in tasks {
        let got = t.await.unwrap();
        assert!(got.ends_with("/128"), "{got}");
        assert!(
            !got.ends_with("::/128"),
            "{got} is a block's reserved anycast address"
        );
        assert!(seen.insert(got.clone()), "{got} handed out twice");
    }
    assert_eq!(seen.len(), 64);
    let allocs = Api::<IPAllocation>::namespaced(c.clone(), "default")
        .list(&Default::default())
        .await
        .unwrap();
    assert_eq!(allocs.items.len(), 64);
    // Two locations, one pool each, carved once however the first claims raced.
    let pools = Api::<IPPool>::all(c)
        .list(&Default::default())
        .await
        .unwrap();
    assert_eq!(pools.items.len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn delete_frees_and_retain_keeps_and_refuses_the_name() {
    let (_lp, c) = platform().await;
    flat(&c, "10.0.0.0/24", json!({"defaultPrefixLength": 32})).await;
    let claims: Api<IPClaim> = Api::namespaced(c.clone(), "default");
    let allocs: Api<IPAllocation> = Api::namespaced(c.clone(), "default");
    let pp = PostParams::default();

    // Delete: the allocation goes and the next claim is handed the same block.
    let a = claims
        .create(&pp, &claim("a", json!({"className": "flat"})))
        .await
        .unwrap();
    claims.delete("a", &DeleteParams::default()).await.unwrap();
    assert!(
        allocs
            .get_opt(&alloc_name("default", "a"))
            .await
            .unwrap()
            .is_none()
    );
    let b = claims
        .create(&pp, &claim("b", json!({"className": "flat"})))
        .await
        .unwrap();
    assert_eq!(cidr(&b), cidr(&a));

    // Retain: the allocation stays, unbound, and the name is refused.
    let r = claims
        .create(
            &pp,
            &claim("r", json!({"className": "flat", "reclaimPolicy": "Retain"})),
        )
        .await
        .unwrap();
    let held = alloc_name("default", "r");
    claims.delete("r", &DeleteParams::default()).await.unwrap();
    let kept = allocs.get(&held).await.unwrap();
    assert!(kept.spec.claim_ref.is_none());
    let kept_status = kept.status.unwrap();
    assert_eq!(kept_status.allocated_cidr, cidr(&r));
    let cond = kept_status
        .conditions
        .iter()
        .find(|c| c.type_ == "Bound")
        .unwrap();
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_str()),
        ("False", "Retained")
    );

    let e = api_err(
        claims
            .create(&pp, &claim("r", json!({"className": "flat"})))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(
        e.message
            .starts_with("Operation cannot be fulfilled on ipclaims.ipam.miloapis.com \"r\": "),
        "{}",
        e.message
    );
    let d = e.details.as_ref().unwrap();
    assert_eq!(
        (d.name.as_str(), d.group.as_str(), d.kind.as_str()),
        ("r", "ipam.miloapis.com", "ipclaims")
    );
    assert_eq!(
        causes(&e),
        vec![(
            "AllocationRetained".to_string(),
            held.clone(),
            String::new()
        )]
    );
    assert!(
        claims.get_opt("r").await.unwrap().is_none(),
        "the refused claim is not stored"
    );

    // A bound allocation cannot be deleted; the retained one can, and that frees its address.
    let e = api_err(
        allocs
            .delete(&alloc_name("default", "b"), &DeleteParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 409);
    let other = claims
        .create(&pp, &claim("o", json!({"className": "flat"})))
        .await
        .unwrap();
    assert_ne!(cidr(&other), cidr(&r));
    allocs
        .delete(&held, &DeleteParams::default())
        .await
        .unwrap();
    let reuse = claims
        .create(&pp, &claim("n", json!({"className": "flat"})))
        .await
        .unwrap();
    assert_eq!(cidr(&reuse), cidr(&r));
    claims
        .create(&pp, &claim("r", json!({"className": "flat"})))
        .await
        .unwrap();

    // Allocations are the server's: creating one is refused.
    let mut forged = allocs.get(&alloc_name("default", "n")).await.unwrap();
    forged.metadata.name = Some("alloc-forged".into());
    forged.metadata.resource_version = None;
    forged.metadata.uid = None;
    let e = api_err(allocs.create(&pp, &forged).await.unwrap_err());
    assert_eq!(e.code, 405);
}

#[tokio::test(flavor = "multi_thread")]
async fn refusals_are_in_ipams_wire_shape() {
    let (_lp, c) = platform_with_inventory("2001:db8::/47").await;
    let claims: Api<IPClaim> = Api::namespaced(c.clone(), "default");
    let pp = PostParams::default();

    let e = api_err(
        claims
            .create(
                &pp,
                &claim("x", json!({"className": "nope", "ipFamily": "IPv6"})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
    assert!(has_cause(&e, "ClassNotFound"));

    let mut no_family = shard_claim("x", "dfw");
    no_family.spec.ip_family = String::new();
    let e = api_err(claims.create(&pp, &no_family).await.unwrap_err());
    assert_eq!(e.code, 400);
    assert!(has_cause(&e, "PrefixLengthRejected"), "{e:?}");
    assert!(e.message.contains("exceeds 32 for IPv4"), "{}", e.message);

    let mut no_scope = shard_claim("x", "dfw");
    no_scope.spec.scope.clear();
    let e = api_err(claims.create(&pp, &no_scope).await.unwrap_err());
    assert_eq!(e.code, 400);
    assert_eq!(
        causes(&e)
            .into_iter()
            .map(|(r, _, f)| (r, f))
            .collect::<Vec<_>>(),
        vec![(
            "ScopeRolesMissing".to_string(),
            "spec.scope.location".to_string()
        )]
    );

    let lonely: IPClass =
        serde_json::from_value(json!({"metadata": {"name": "lonely"}, "spec": {"ipFamily": "IPv6", "defaultPrefixLength": 128}}))
            .unwrap();
    Api::<IPClass>::all(c.clone())
        .create(&pp, &lonely)
        .await
        .unwrap();
    let e = api_err(
        claims
            .create(
                &pp,
                &claim("x", json!({"className": "lonely", "ipFamily": "IPv6"})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 400);
    assert!(has_cause(&e, "NoOfferingPool"));

    // The /47 root holds two /48 location pools; a third location exhausts it.
    claims.create(&pp, &shard_claim("a", "dfw")).await.unwrap();
    claims.create(&pp, &shard_claim("b", "ord")).await.unwrap();
    let e = api_err(
        claims
            .create(&pp, &shard_claim("c", "sjc"))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (507, "InsufficientStorage"));
    assert!(has_cause(&e, "Exhausted"));
    assert!(claims.get_opt("c").await.unwrap().is_none());

    // A live duplicate is IPAM's own 409, with the ClaimExists cause, and changes nothing.
    let before = claims.get("a").await.unwrap();
    let e = api_err(
        claims
            .create(&pp, &shard_claim("a", "dfw"))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(has_cause(&e, "ClaimExists"), "{e:?}");
    assert_eq!(claims.get("a").await.unwrap(), before);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_leaf_pool_is_507_naming_the_pool() {
    let (_lp, c) = platform().await;
    flat(&c, "10.0.0.0/31", json!({"defaultPrefixLength": 32})).await;
    let claims: Api<IPClaim> = Api::namespaced(c.clone(), "default");
    let pp = PostParams::default();
    claims
        .create(&pp, &claim("a", json!({"className": "flat"})))
        .await
        .unwrap();
    claims
        .create(&pp, &claim("b", json!({"className": "flat"})))
        .await
        .unwrap();
    let e = api_err(
        claims
            .create(&pp, &claim("c", json!({"className": "flat"})))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 507);
    let d = e.details.as_ref().unwrap();
    assert_eq!(
        (d.name.as_str(), d.group.as_str(), d.kind.as_str()),
        ("flat-pool", "ipam.miloapis.com", "ippools")
    );
    assert!(has_cause(&e, "Exhausted"));
    let pool = Api::<IPPool>::all(c)
        .get("flat-pool")
        .await
        .unwrap()
        .status
        .unwrap();
    let cap = pool.capacity.unwrap();
    assert_eq!(
        (
            cap.total.as_str(),
            cap.allocated.as_str(),
            cap.available.as_str()
        ),
        ("2", "2", "0")
    );
    assert_eq!(pool.utilization_percent, Some(100.0));
}

#[tokio::test(flavor = "multi_thread")]
async fn addresses_are_unique_only_within_the_class_space() {
    let (_lp, c) = platform().await;
    flat(
        &c,
        "10.0.0.0/24",
        json!({"defaultPrefixLength": 32, "uniqueWithin": ["network"]}),
    )
    .await;
    let claims: Api<IPClaim> = Api::namespaced(c.clone(), "default");
    let pp = PostParams::default();
    let net = |n: &str| json!({"network": {"apiGroup": "networking.datumapis.com", "kind": "Network", "name": n}});
    let a = claims
        .create(
            &pp,
            &claim("a", json!({"className": "flat", "scope": net("one")})),
        )
        .await
        .unwrap();
    let b = claims
        .create(
            &pp,
            &claim("b", json!({"className": "flat", "scope": net("two")})),
        )
        .await
        .unwrap();
    let a2 = claims
        .create(
            &pp,
            &claim("a2", json!({"className": "flat", "scope": net("one")})),
        )
        .await
        .unwrap();
    assert_eq!(cidr(&a), cidr(&b));
    assert_ne!(cidr(&a), cidr(&a2));
}

#[tokio::test(flavor = "multi_thread")]
async fn immutable_fields_are_refused() {
    let (_lp, c) = platform_with_inventory("2001:db8::/40").await;
    let pools: Api<IPPool> = Api::all(c.clone());
    let pp = PatchParams::default();
    let e = api_err(
        pools
            .patch(
                "datum-egress-shard-ipv6-root",
                &pp,
                &Patch::Merge(json!({"spec": {"cidr": "2001:db9::/40"}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    assert!(
        causes(&e)
            .iter()
            .any(|(r, _, f)| r == "FieldValueForbidden" && f == "spec.cidr"),
        "{e:?}"
    );
    // Mutable fields still change.
    pools
        .patch(
            "datum-egress-shard-ipv6-root",
            &pp,
            &Patch::Merge(json!({"spec": {"classNames": ["datum-egress-shard-ipv6", "x"]}})),
        )
        .await
        .unwrap();

    let classes: Api<IPClass> = Api::all(c.clone());
    for (field, value) in [
        ("poolPer", json!(["network"])),
        ("uniqueWithin", json!(["network"])),
        ("ipFamily", json!("IPv4")),
    ] {
        let e = api_err(
            classes
                .patch(
                    "datum-egress-shard-ipv6",
                    &pp,
                    &Patch::Merge(json!({"spec": {field: value}})),
                )
                .await
                .unwrap_err(),
        );
        assert_eq!(e.code, 422, "{field}");
        assert!(
            causes(&e)
                .iter()
                .any(|(_, _, f)| f == &format!("spec.{field}")),
            "{field}: {e:?}"
        );
    }
    let e = api_err(
        classes
            .create(
                &PostParams::default(),
                &serde_json::from_value(
                    json!({"metadata": {"name": "nofam"}, "spec": {"defaultPrefixLength": 64}}),
                )
                .unwrap(),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    assert!(
        e.message
            .contains("ipFamily is required: a class hands out one address family"),
        "{}",
        e.message
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_with_no_project_is_refused() {
    // IPAM served on the cell plane too, where requests carry no project.
    let lp = LocalPlane::builder()
        .crds(localplane::ipam::crds())
        .namespace("default")
        .identity(Identity::admin("admin", "admin-token"))
        .build()
        .unwrap();
    localplane::ipam::register(&lp.cell(), PLATFORM);
    let lp = lp.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let c = client(&lp, "cell");
    let e = api_err(
        Api::<IPClaim>::namespaced(c, "default")
            .create(
                &PostParams::default(),
                &claim("x", json!({"ipFamily": "IPv4"})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 400);
    assert!(has_cause(&e, "NoProjectScope"), "{e:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_project_plane_serves_ipam_with_its_own_state() {
    let lp = start_ipam().await;
    let p = client(&lp, PLATFORM);
    let t = client(&lp, "tenant");
    flat(&p, "10.0.0.0/24", json!({"defaultPrefixLength": 32})).await;
    flat(
        &t,
        "10.0.0.0/24",
        json!({"defaultPrefixLength": 32, "visibility": "consumer"}),
    )
    .await;
    let pa = Api::<IPClaim>::namespaced(p, "default")
        .create(
            &PostParams::default(),
            &claim("a", json!({"className": "flat"})),
        )
        .await
        .unwrap();
    let ta = Api::<IPClaim>::namespaced(t, "default")
        .create(
            &PostParams::default(),
            &claim("a", json!({"className": "flat"})),
        )
        .await
        .unwrap();
    assert_eq!(cidr(&pa), "10.0.0.0/32");
    assert_eq!(cidr(&ta), "10.0.0.0/32");
    assert_eq!(ta.spec.owner_ref.unwrap().name, "tenant");
}

#[tokio::test(flavor = "multi_thread")]
async fn claims_are_listed_by_label_selector_and_in_pages() {
    let (_lp, c) = platform_with_inventory("2001:db8::/40").await;
    let claims: Api<IPClaim> = Api::namespaced(c.clone(), "default");
    for (name, cell) in [
        ("a-1", Some("aaa")),
        ("a-2", Some("aaa")),
        ("b-1", Some("bbb")),
        ("old", None),
    ] {
        let mut claim = shard_claim(name, "dfw");
        if let Some(cell) = cell {
            claim.metadata.labels = Some(
                [(
                    "cloud.datumapis.com/egress-cell-tag".to_string(),
                    cell.to_string(),
                )]
                .into(),
            );
        }
        claims.create(&PostParams::default(), &claim).await.unwrap();
    }
    let names = |list: kube::core::ObjectList<IPClaim>| -> Vec<String> {
        list.items
            .into_iter()
            .map(|c| c.metadata.name.unwrap())
            .collect()
    };
    let selected = |selector: &str| kube::api::ListParams::default().labels(selector);
    assert_eq!(
        names(
            claims
                .list(&selected("cloud.datumapis.com/egress-cell-tag=aaa"))
                .await
                .unwrap()
        ),
        ["a-1", "a-2"],
        "the server filters by the label"
    );
    assert_eq!(
        names(
            claims
                .list(&selected("!cloud.datumapis.com/egress-cell-tag"))
                .await
                .unwrap()
        ),
        ["old"]
    );
    let first = claims
        .list(&kube::api::ListParams::default().limit(3))
        .await
        .unwrap();
    let token = first.metadata.continue_.clone().expect("a continue token");
    let rest = claims
        .list(
            &kube::api::ListParams::default()
                .limit(3)
                .continue_token(&token),
        )
        .await
        .unwrap();
    let mut all = names(first);
    all.extend(names(rest));
    assert_eq!(
        all,
        ["a-1", "a-2", "b-1", "old"],
        "pages cover the list once"
    );
}
