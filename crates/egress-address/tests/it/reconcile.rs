//! Every reconcile rule of issue 5, against localplane over HTTP.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::*;
use egress_address::ipam::naming::{
    ANNOTATION_CELL, ANNOTATION_SHARD_NAME, ANNOTATION_SHARD_NAMESPACE, ANNOTATION_SHARD_UID,
};
use egress_api::shard::{AddressClaimRef, LABEL_EGRESS_IPV6};
use kube::api::{Patch, PatchParams, PostParams};
use localplane::testing::shard_object;

fn label(s: &egress_api::shard::EgressShard) -> Option<String> {
    s.metadata.labels.as_ref()?.get(LABEL_EGRESS_IPV6).cloned()
}

#[tokio::test]
async fn a_new_shard_costs_exactly_two_requests() {
    let plane = Plane::start().await;
    let ctl = start_controller(&plane, settings()).await;
    plane.reset_counters();
    plane.create_shard("worker-1").await;
    let shard = addressed(&plane, "worker-1").await;
    settled(&ctl, &shard).await;

    let reqs = plane.work_requests();
    // The test's own create of the shard is one; the controller adds exactly two.
    let ours: Vec<_> = reqs
        .iter()
        .filter(|(k, _)| !(k.verb == "create" && k.resource.starts_with("egressshards")))
        .collect();
    assert_eq!(
        ours.iter().map(|(_, c)| c).sum::<u64>(),
        2,
        "requests: {reqs:#?}"
    );
    assert!(
        ours.iter().any(|(k, _)| k.verb == "create"
            && k.resource.starts_with("ipclaims")
            && k.code == 201)
    );
    assert!(ours.iter().any(|(k, _)| k.verb == "patch"
        && k.resource.starts_with("egressshards")
        && k.code == 200));

    let claim = plane.claim_now(&plane.claim_name("worker-1")).unwrap();
    let cidr = claim.status.unwrap().allocated_cidr;
    assert_eq!(format!("{}/128", shard.spec.shard_address_ipv6), cidr);
    assert_eq!(
        shard.spec.shard_address_ipv6_claim_ref,
        Some(AddressClaimRef {
            api_group: "ipam.miloapis.com".into(),
            kind: "IPClaim".into(),
            project: PLATFORM.into(),
            namespace: CLAIM_NS.into(),
            name: plane.claim_name("worker-1"),
        })
    );
    assert_eq!(label(&shard).as_deref(), Some("true"));
    // The server's field ownership says the controller set the address, and the creator's entry
    // survived the update (the controller's cache keeps no managedFields, and an update without
    // them leaves the server's record as it is).
    let managed = shard.metadata.managed_fields.clone().unwrap_or_default();
    let ours = managed
        .iter()
        .find(|m| m.manager.as_deref() == Some("egress-address-controller"))
        .unwrap_or_else(|| panic!("no entry of the controller in {managed:#?}"));
    assert!(
        serde_json::to_string(&ours.fields_v1)
            .unwrap()
            .contains("f:shardAddressIPv6"),
        "{ours:#?}"
    );
    assert!(
        managed.len() >= 2,
        "the creator's entry was lost: {managed:#?}"
    );
    let annotations = claim.metadata.annotations.unwrap();
    assert_eq!(annotations[ANNOTATION_SHARD_NAMESPACE], SHARD_NS);
    assert_eq!(annotations[ANNOTATION_SHARD_NAME], "worker-1");
    assert_eq!(
        Some(&annotations[ANNOTATION_SHARD_UID]),
        shard.metadata.uid.as_ref()
    );
    assert_eq!(annotations[ANNOTATION_CELL], plane.cell_id());
    assert!(claim.metadata.owner_references.is_none());

    // Events go out from a background publisher, just after the write.
    eventually(10, "an AddressAssigned event", || async {
        let r = plane.event_reasons("worker-1").await;
        r.contains(&"AddressAssigned".to_string()).then_some(r)
    })
    .await;
    assert_eq!(ctl.claim_outcomes("Bound"), 1);
    // One reconcile: the watch event of the controller's own write shows nothing left to do,
    // and queues nothing.
    assert_eq!(
        ctl.sample(
            "controller_runtime_reconcile_total",
            &[("controller", "egressshardaddress"), ("result", "success")]
        ),
        1
    );
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn addressed_shards_and_an_idle_controller_cost_nothing() {
    let (plane, ctl, shard) = with_addressed("worker-1").await;
    settled(&ctl, &shard).await;
    ctl.stop().await.unwrap();

    // A restart relists; an addressed, labelled shard needs no pass at all.
    plane.reset_counters();
    let ctl = start_controller(&plane, settings()).await;
    idle(&ctl).await;
    plane.assert_work_requests(0, "a restart over addressed shards");
    assert_eq!(
        ctl.sum(
            "controller_runtime_reconcile_total",
            ("controller", "egressshardaddress")
        ),
        0,
        "no pass for a shard that needs nothing"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    plane.assert_work_requests(0, "idle");
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn a_hand_set_address_gets_the_label_only() {
    let plane = Plane::start().await;
    let mut shard = new_shard("manual");
    shard.spec.shard_address_ipv6 = "2001:db8::7".into();
    plane
        .shards()
        .create(&PostParams::default(), &shard)
        .await
        .unwrap();
    plane.reset_counters();
    let ctl = start_controller(&plane, settings()).await;
    let got = eventually(10, "the label", || async {
        let s = plane.shard_now("manual")?;
        label(&s).map(|_| s)
    })
    .await;
    settled(&ctl, &got).await;
    assert_eq!(label(&got).as_deref(), Some("true"));
    assert_eq!(got.spec.shard_address_ipv6, "2001:db8::7");
    assert!(
        got.spec.shard_address_ipv6_claim_ref.is_none(),
        "no invented ref"
    );
    assert!(plane.claim_now(&plane.claim_name("manual")).is_none());
    let reqs = plane.work_requests();
    assert_eq!(plane.work_request_total(), 1, "{reqs:#?}");
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn a_deleting_shard_is_left_alone() {
    let plane = Plane::start().await;
    let mut shard = new_shard("draining");
    shard.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    plane
        .shards()
        .create(&PostParams::default(), &shard)
        .await
        .unwrap();
    plane.delete_shard("draining").await;
    let deleting = plane.shard("draining").await;
    assert!(deleting.metadata.deletion_timestamp.is_some());
    plane.reset_counters();
    let ctl = start_controller(&plane, settings()).await;
    idle(&ctl).await;
    plane.assert_work_requests(0, "a start beside a shard being deleted");
    let after = plane.shard("draining").await;
    assert!(after.spec.shard_address_ipv6.is_empty());
    assert!(label(&after).is_none());
    assert!(plane.claim_for("draining").await.is_none());
    ctl.stop().await.unwrap();
}

/// Passes that ask nothing of anyone (here: shards being deleted, which are left alone) never
/// wait, so a burst of them must still step aside for the runtime's other tasks: on the
/// controller's one thread, those answer `/live` and `/ready`.
#[tokio::test]
async fn a_burst_of_passes_that_ask_nothing_lets_other_tasks_run() {
    // More than tokio's budget of a task between yields (128) for each of the four workers.
    const SHARDS: u64 = 600;
    let plane = Plane::start().await;
    // Straight into the cell's store, then deleted in one request: a finalizer holds them.
    for i in 0..SHARDS {
        let mut shard = shard_object(SHARD_NS, &format!("draining-{i}"));
        shard["metadata"]["finalizers"] = serde_json::json!(["example.com/hold"]);
        plane.lp().cell().apply_object(shard).unwrap();
    }
    plane
        .shards()
        .delete_collection(&Default::default(), &Default::default())
        .await
        .unwrap();
    let deleting = plane.shard_now("draining-0").unwrap();
    assert!(deleting.metadata.deletion_timestamp.is_some());
    let ctl = start_unready(settings(), plane.cell(), plane.ipam_for_controller().await);
    let passes = || {
        ctl.sum(
            "controller_runtime_reconcile_total",
            ("controller", "egressshardaddress"),
        )
    };
    // This test's own task runs on the same thread: each time it gets the thread back it
    // notes how far the passes had come.
    let mut seen_midway = 0;
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let done = passes();
            if done >= SHARDS {
                break;
            }
            if done > 0 {
                seen_midway += 1;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("every shard gets its pass");
    assert!(
        seen_midway > 0,
        "the passes ran as one burst: the test's task got the thread {seen_midway} times while they ran"
    );
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn a_deleted_shard_has_its_claim_deleted() {
    let (plane, ctl, _) = with_addressed("gone").await;
    let name = plane.claim_name("gone");
    assert!(plane.claims().get_opt(&name).await.unwrap().is_some());
    plane.delete_shard("gone").await;
    claim_released(&plane, &name, "the claim to be deleted").await;
    ctl.stop().await.unwrap();
}

/// The shard reads, claim reads and claim deletes one deleted shard cost, once it is forgotten.
async fn release_cost(plane: &Plane, ctl: &Ctl, name: &str) -> (u64, u64, u64) {
    let key = egress_address::ShardKey::new(SHARD_NS, name);
    eventually(10, "the deleted shard forgotten", || async {
        (!ctl.handle.remembers(&key)).then_some(())
    })
    .await;
    idle(ctl).await;
    let count = |verb: &'static str, resource: &'static str| {
        plane.requests(move |k| k.verb == verb && k.resource.starts_with(resource))
    };
    (
        count("get", "egressshards"),
        count("get", "ipclaims"),
        count("delete", "ipclaims"),
    )
}

#[tokio::test]
async fn a_gone_shard_is_read_once_and_its_claim_read_once_then_deleted() {
    let (plane, ctl, shard) = with_addressed("read-once").await;
    settled(&ctl, &shard).await;
    plane.reset_counters();
    plane.delete_shard("read-once").await;
    let claim = plane.claim_name("read-once");
    // Read from the store, so that the wait costs no request.
    eventually(10, "the release", || async {
        plane.claim_now(&claim).is_none().then_some(())
    })
    .await;
    assert_eq!(
        release_cost(&plane, &ctl, "read-once").await,
        (1, 1, 1),
        "one confirmation, one claim read, one conditional delete: {:#?}",
        plane.work_requests()
    );

    // A shard whose address was set by hand never had a claim: the same read, nothing deleted.
    let mut manual = new_shard("manual");
    manual.spec.shard_address_ipv6 = "2001:db8::9".into();
    plane
        .shards()
        .create(&PostParams::default(), &manual)
        .await
        .unwrap();
    let labelled = eventually(10, "the label", || async {
        let s = plane.shard_now("manual")?;
        label(&s).map(|_| s)
    })
    .await;
    settled(&ctl, &labelled).await;
    plane.reset_counters();
    plane.delete_shard("manual").await;
    assert_eq!(
        release_cost(&plane, &ctl, "manual").await,
        (1, 1, 0),
        "{:#?}",
        plane.work_requests()
    );
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn a_failed_read_releases_nothing() {
    let (plane, ctl, kept) = with_addressed("kept").await;
    settled(&ctl, &kept).await;
    let name = plane.claim_name("kept");
    plane.set_faults(vec![fault("cell", "get", "egressshards", 500)]);
    plane.delete_shard("kept").await;
    // The live confirmation fails, over and over: the claim must survive all of it.
    eventually(10, "the confirmation retried", || async {
        (plane.requests(|k| {
            k.verb == "get" && k.resource.starts_with("egressshards") && k.code == 500
        }) >= 3)
            .then_some(())
    })
    .await;
    assert!(
        plane.claims().get_opt(&name).await.unwrap().is_some(),
        "released on a failed read"
    );
    assert_eq!(
        plane.requests(|k| k.verb == "delete" && k.resource.starts_with("ipclaims")),
        0
    );
    plane.clear_faults();
    claim_released(&plane, &name, "the claim to be deleted once the read works").await;
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn a_retained_allocation_is_adopted_as_an_ipallocation() {
    let plane = Plane::start().await;
    // The shard is stored before any controller runs, so its incarnation is known: an earlier
    // claim of that incarnation, released under Retain, left its allocation held.
    let made = plane
        .lp()
        .cell()
        .apply_object(shard_object(SHARD_NS, "reborn"))
        .unwrap();
    let uid = made["metadata"]["uid"].as_str().unwrap().to_string();
    let name = plane.claim_name("reborn");
    let held = plane
        .retain_address(&plane.desired_claim("reborn", &uid))
        .await;

    plane.reset_counters();
    let ctl = start_controller(&plane, settings()).await;
    let shard = addressed(&plane, "reborn").await;
    assert_eq!(format!("{}/128", shard.spec.shard_address_ipv6), held);
    let r = shard.spec.shard_address_ipv6_claim_ref.clone().unwrap();
    assert_eq!(r.kind, "IPAllocation");
    assert_ne!(
        r.name, name,
        "the ref names the allocation, not the refused claim"
    );
    assert!(plane.claim_now(&name).is_none(), "no claim is stored");
    settled(&ctl, &shard).await;
    // create (409) + get allocation + patch shard.
    plane.assert_work_requests(3, "an adoption");
    let alloc = plane.allocations().get(&r.name).await.unwrap();
    assert_eq!(alloc.status.unwrap().allocated_cidr, held);
    assert_eq!(ctl.claim_outcomes("Adopted"), 1);
    ctl.stop().await.unwrap();
}

async fn assert_refused(plane: &Plane, shard: &str, event: &str) {
    let reasons = eventually(10, &format!("a {event} event"), || async {
        let r = plane.event_reasons(shard).await;
        r.contains(&event.to_string()).then_some(r)
    })
    .await;
    let s = plane.shard(shard).await;
    assert!(s.spec.shard_address_ipv6.is_empty(), "{reasons:?}");
    assert!(s.spec.shard_address_ipv6_claim_ref.is_none());
    assert!(label(&s).is_none());
    assert_eq!(plane.shard_updates(), 0, "a refusal writes nothing");
}

#[tokio::test]
async fn an_unbound_claim_is_pending_and_writes_nothing() {
    let plane = Plane::start().await;
    answer_claims_with(&plane, "");
    let ctl = start_controller(&plane, settings()).await;
    plane.create_shard("waiting").await;
    assert_refused(&plane, "waiting", "ClaimPending").await;
    assert!(ctl.claim_outcomes("Unbound") >= 1);
    // It is retried: the create meets the existing claim and reads it again.
    eventually(10, "a retry", || async {
        (ctl.claim_outcomes("Unbound") >= 2).then_some(())
    })
    .await;
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn an_unusable_answer_is_refused() {
    let plane = Plane::start().await;
    answer_claims_with(&plane, "198.51.100.7/32");
    let ctl = start_controller(&plane, settings()).await;
    plane.create_shard("odd").await;
    assert_refused(&plane, "odd", "UnusableAnswer").await;
    assert!(ctl.claim_outcomes("Unusable") >= 1);
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn exhaustion_is_refused_with_ipams_reason_and_rechecked() {
    let plane = Plane::start().await;
    plane.set_faults(vec![fault(PLATFORM, "create", "ipclaims", 507)]);
    let ctl = start_controller(&plane, settings()).await;
    plane.create_shard("full").await;
    assert_refused(&plane, "full", "ClaimRefused").await;
    let events = plane.events_for("full").await;
    let note = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("ClaimRefused"))
        .and_then(|e| e.note.clone())
        .unwrap();
    assert!(note.contains("Exhausted"), "{note}");
    assert_eq!(
        events
            .iter()
            .find(|e| e.reason.as_deref() == Some("ClaimRefused"))
            .unwrap()
            .type_
            .as_deref(),
        Some("Warning")
    );
    // Re-checked on the fixed interval, and the repeats do not flood events.
    eventually(10, "a re-check", || async {
        (ctl.claim_outcomes("Exhausted") >= 3).then_some(())
    })
    .await;
    let refused_events = plane
        .events_for("full")
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("ClaimRefused"))
        .count();
    assert_eq!(refused_events, 1, "repeats are aggregated");
    assert_eq!(
        ctl.sample("egress_address_shards", &[("state", "refused")]),
        1
    );
    plane.clear_faults();
    addressed(&plane, "full").await;
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn a_missing_class_is_refused_by_name() {
    let plane = Plane::start().await;
    let mut s = settings();
    s.address_class_ipv6 = "no-such-class".into();
    let ctl = start_controller(&plane, s).await;
    plane.create_shard("classless").await;
    assert_refused(&plane, "classless", "ClaimRefused").await;
    let note = plane
        .event("classless", "ClaimRefused")
        .await
        .and_then(|e| e.note)
        .unwrap();
    assert!(note.contains("ClassNotFound"), "{note}");
    assert!(ctl.claim_outcomes("ClassNotFound") >= 1);
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn a_claim_made_for_another_shard_is_refused() {
    let plane = Plane::start().await;
    // Stored before any controller runs, so the claim can take its incarnation's name.
    let made = plane
        .lp()
        .cell()
        .apply_object(shard_object(SHARD_NS, "twin"))
        .unwrap();
    let uid = made["metadata"]["uid"].as_str().unwrap().to_string();
    let name = plane.claim_name_of("twin", &uid);
    let mut other = plane.desired_claim("twin", &uid);
    other.metadata.annotations = Some(BTreeMap::from([
        (
            ANNOTATION_SHARD_NAMESPACE.to_string(),
            "other-cell".to_string(),
        ),
        (ANNOTATION_SHARD_NAME.to_string(), "twin".to_string()),
    ]));
    plane
        .claims()
        .create(&PostParams::default(), &other)
        .await
        .unwrap();
    let ctl = start_controller(&plane, settings()).await;
    assert_refused(&plane, "twin", "ClaimNameCollision").await;
    // Deleting the shard must not delete the other shard's claim either.
    plane.delete_shard("twin").await;
    let twin = egress_address::ShardKey::new(SHARD_NS, "twin");
    eventually(10, "the deletion handled", || async {
        (!ctl.handle.remembers(&twin)).then_some(())
    })
    .await;
    idle(&ctl).await;
    assert!(plane.claim_now(&name).is_some());
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn an_older_ipam_answering_a_duplicate_with_a_bare_500_is_handled() {
    let plane = Plane::start().await;
    // Our own claim for this shard from an earlier run exists; this IPAM answers its re-create
    // with a 500.
    let created = plane.create_shard("again").await;
    let ours = plane.desired_claim("again", created.metadata.uid.as_deref().unwrap());
    let ours = plane
        .claims()
        .create(&PostParams::default(), &ours)
        .await
        .unwrap();
    plane.set_faults(vec![fault(PLATFORM, "create", "ipclaims", 500)]);
    plane.reset_counters();
    let ctl = start_controller(&plane, settings()).await;
    let shard = addressed(&plane, "again").await;
    assert_eq!(
        format!("{}/128", shard.spec.shard_address_ipv6),
        ours.status.unwrap().allocated_cidr
    );
    assert_eq!(
        shard
            .spec
            .shard_address_ipv6_claim_ref
            .clone()
            .unwrap()
            .kind,
        "IPClaim"
    );
    settled(&ctl, &shard).await;
    // create (500) + get claim + update.
    plane.assert_work_requests(3, "a create answered with a bare 500");
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn a_different_ref_already_on_the_shard_is_refused_by_the_server() {
    let plane = Plane::start().await;
    let mut shard = new_shard("reffed");
    shard.spec.shard_address_ipv6_claim_ref = Some(AddressClaimRef {
        api_group: "ipam.miloapis.com".into(),
        kind: "IPClaim".into(),
        project: "someone-else".into(),
        namespace: "x".into(),
        name: "y".into(),
    });
    plane
        .shards()
        .create(&PostParams::default(), &shard)
        .await
        .unwrap();
    let ctl = start_controller(&plane, settings()).await;
    let reasons = eventually(10, "an AssignRefused event", || async {
        let r = plane.event_reasons("reffed").await;
        r.contains(&"AssignRefused".to_string()).then_some(r)
    })
    .await;
    let after = plane.shard("reffed").await;
    assert!(after.spec.shard_address_ipv6.is_empty(), "{reasons:?}");
    assert_eq!(
        after.spec.shard_address_ipv6_claim_ref.unwrap().project,
        "someone-else"
    );
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn many_shards_in_parallel_get_distinct_addresses() {
    let plane = Plane::start().await;
    let ctl = start_controller(&plane, settings()).await;
    for i in 0..20 {
        plane.create_shard(&format!("w-{i}")).await;
    }
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..20 {
        let s = addressed(&plane, &format!("w-{i}")).await;
        assert!(
            seen.insert(s.spec.shard_address_ipv6.clone()),
            "duplicate address"
        );
    }
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn a_label_edit_on_an_addressed_shard_costs_nothing() {
    let (plane, ctl, w) = with_addressed("w").await;
    settled(&ctl, &w).await;
    plane.reset_counters();
    let patched = plane
        .shards()
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {"network.datumapis.com/egress-pool": "p"}}})),
        )
        .await
        .unwrap();
    settled(&ctl, &patched).await;
    let reqs: Vec<_> = plane
        .work_requests()
        .into_iter()
        .filter(|(k, _)| k.verb != "patch")
        .collect();
    assert!(reqs.is_empty(), "{reqs:#?}");
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn a_long_shard_name_uses_the_hashed_claim_name_end_to_end() {
    let plane = Plane::start().await;
    let ctl = start_controller(&plane, settings()).await;
    // Dotted labels: a long node name is an FQDN.
    let long = format!("node-{}", vec!["a".repeat(58); 4].join("."));
    plane.create_shard(&long).await;
    let shard = addressed(&plane, &long).await;
    let name = plane.claim_name(&long);
    assert_eq!(name.len(), 253);
    assert_eq!(shard.spec.shard_address_ipv6_claim_ref.unwrap().name, name);
    let claim = plane.claim_now(&name).unwrap();
    assert_eq!(
        claim.metadata.annotations.unwrap()[ANNOTATION_SHARD_NAME],
        long
    );
    plane.delete_shard(&long).await;
    eventually(10, "the hashed claim to be released", || async {
        plane.claim_now(&name).is_none().then_some(())
    })
    .await;
    ctl.stop().await.unwrap();
}

/// localplane holds the write's resourceVersion to be a precondition, as the real apiserver
/// does (`real_cell::the_patch_is_conditional_on_a_real_cell`).
#[tokio::test]
async fn the_address_patch_is_conditional_on_the_version_it_read() {
    let plane = Plane::start().await;
    the_patch_is_conditional(&plane.shards(), &plane.shards(), "conditional").await;
}

#[tokio::test]
async fn a_conflicting_update_is_retried_and_reuses_its_own_claim() {
    let plane = Plane::start().await;
    plane.set_faults(vec![fault("cell", "patch", "egressshards", 409)]);
    let ctl = start_controller(&plane, settings()).await;
    plane.create_shard("raced").await;
    eventually(10, "a refused update", || async {
        (plane.requests(|k| k.verb == "patch" && k.code == 409) >= 1).then_some(())
    })
    .await;
    plane.clear_faults();
    let shard = addressed(&plane, "raced").await;
    let name = plane.claim_name("raced");
    let claim = plane.claim_now(&name).unwrap();
    assert_eq!(
        format!("{}/128", shard.spec.shard_address_ipv6),
        claim.status.unwrap().allocated_cidr,
        "the retry used the claim it had already made"
    );
    let claims = plane.lp().project(PLATFORM).unwrap().objects(
        &localplane::ResourceKey::new("ipam.miloapis.com", "ipclaims"),
        Some(CLAIM_NS),
    );
    assert_eq!(claims.len(), 1, "one claim, one address");
    ctl.stop().await.unwrap();
}

/// A cell client that can hold one GET of one shard: once armed, the next such request says it
/// arrived and waits to be let go before it reaches the server.
struct HeldRead {
    armed: std::sync::atomic::AtomicBool,
    arrived: tokio::sync::Notify,
    go: tokio::sync::Notify,
}

impl HeldRead {
    fn client(inner: kube::Client, shard: &str) -> (kube::Client, std::sync::Arc<HeldRead>) {
        let held = std::sync::Arc::new(HeldRead {
            armed: false.into(),
            arrived: tokio::sync::Notify::new(),
            go: tokio::sync::Notify::new(),
        });
        let suffix = format!("/namespaces/{SHARD_NS}/egressshards/{shard}");
        let gate = held.clone();
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let (inner, gate) = (inner.clone(), gate.clone());
            let hold = req.method() == http::Method::GET
                && req.uri().path().ends_with(&suffix)
                && gate.armed.swap(false, std::sync::atomic::Ordering::SeqCst);
            async move {
                if hold {
                    gate.arrived.notify_one();
                    gate.go.notified().await;
                }
                inner.send(req).await
            }
        });
        (kube::Client::new(service, "default"), held)
    }
}

/// A pass that found no shard of the name forgets it; a deletion of the name seen while that
/// pass read the live shard must outlive the forgetting, or its claim is never released (the
/// chaos run on the real cell met this: a second incarnation deleted while the first's release
/// was being retried).
#[tokio::test]
async fn a_deletion_seen_during_a_pass_that_finds_the_name_empty_is_still_released() {
    let plane = Plane::start().await;
    let (cell, held) = HeldRead::client(plane.cell(), "twice");
    let ctl = start_controller_with(settings(), cell, plane.ipam_for_controller().await).await;
    plane.create_shard("twice").await;
    let first = addressed(&plane, "twice").await;
    let first_claim = plane.claim_name_of("twice", first.metadata.uid.as_deref().unwrap());

    // The first incarnation's release keeps failing while a second one is made and addressed.
    plane.set_faults(vec![fault(PLATFORM, "delete", "ipclaims", 500)]);
    plane.delete_shard("twice").await;
    plane.create_shard("twice").await;
    let second = addressed(&plane, "twice").await;
    let second_claim = plane.claim_name_of("twice", second.metadata.uid.as_deref().unwrap());
    assert!(
        plane.claim_now(&first_claim).is_some(),
        "its release failed"
    );

    // A retry of the first's release reads the live shard; meanwhile the second is deleted and
    // the controller's watch shows it, then the read answers that no shard of the name exists.
    held.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    tokio::time::timeout(Duration::from_secs(10), held.arrived.notified())
        .await
        .expect("a retried pass reads the live shard");
    plane.clear_faults();
    plane.delete_shard("twice").await;
    // The watch brings changes in order: once the cache has a later shard, it had the deletion.
    let later = plane.create_shard("later").await;
    settled_at(&ctl, later.metadata.resource_version.as_deref().unwrap()).await;
    held.go.notify_one();

    claim_released(
        &plane,
        &first_claim,
        "the first incarnation's claim released",
    )
    .await;
    claim_released(
        &plane,
        &second_claim,
        "the second incarnation's claim released",
    )
    .await;
    ctl.stop().await.unwrap();
}

/// Waits until the controller's cache has applied `resource_version`.
async fn settled_at(ctl: &Ctl, resource_version: &str) {
    tokio::time::timeout(
        Duration::from_secs(10),
        ctl.handle.wait_seen(resource_version),
    )
    .await
    .expect("the controller's cache reaches the version");
}
