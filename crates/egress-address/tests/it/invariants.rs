//! The invariants users rely on, each under the fault that used to break it: never two live shards
//! on one address (in any cell), never an address no egress shard may carry, never a released
//! claim that a live shard still holds.

use std::collections::BTreeMap;

use egress_address::ipam::naming::{
    ANNOTATION_CELL, ANNOTATION_SHARD_NAME, ANNOTATION_SHARD_NAMESPACE, ANNOTATION_SHARD_UID,
    claim_name, legacy_claim_name,
};
use egress_api::ipam::IPClaim;
use egress_api::shard::AddressClaimRef;
use kube::api::PostParams;

use crate::common::*;

fn uid(shard: &egress_api::shard::EgressShard) -> String {
    shard
        .metadata
        .uid
        .clone()
        .expect("a stored shard has a UID")
}

fn annotation(claim: &IPClaim, key: &str) -> Option<String> {
    annotation_of(&claim.metadata, key)
}

#[tokio::test]
async fn two_cells_with_one_shard_name_get_two_addresses_and_keep_them() {
    let a = Plane::start().await;
    let b = Plane::start_cell_only().await;
    assert_ne!(a.cell_id(), b.cell_id());
    let ctl_a = start_controller(&a, settings()).await;
    // Cell b claims from cell a's IPAM, as two cells of one location do.
    let ctl_b = start_controller_with(settings(), b.cell(), a.ipam_for_controller().await).await;
    a.create_shard("twin").await;
    b.create_shard("twin").await;
    let in_a = addressed(&a, "twin").await;
    let in_b = addressed(&b, "twin").await;
    assert_ne!(
        in_a.spec.shard_address_ipv6, in_b.spec.shard_address_ipv6,
        "two live shards on one address"
    );
    let claim_a = a.claim_name("twin");
    let claim_b = claim_name(&b.cell_id(), SHARD_NS, "twin", &uid(&in_b));
    assert_ne!(claim_a, claim_b);
    assert_eq!(
        in_b.spec.shard_address_ipv6_claim_ref.clone().unwrap().name,
        claim_b
    );
    let held_b = a.claim_now(&claim_b).expect("cell b's claim");
    assert_eq!(annotation(&held_b, ANNOTATION_CELL), Some(b.cell_id()));
    assert_eq!(annotation(&held_b, ANNOTATION_SHARD_UID), Some(uid(&in_b)));

    // Deleting cell a's shard releases cell a's claim, and nothing of cell b's.
    a.delete_shard("twin").await;
    claim_released(&a, &claim_a, "cell a's claim released").await;
    assert!(
        a.claim_now(&claim_b).is_some(),
        "cell b's live shard lost its claim"
    );
    ctl_a.stop().await.unwrap();
    ctl_b.stop().await.unwrap();
}

#[tokio::test]
async fn one_address_handed_to_two_claims_is_written_onto_one_shard_only() {
    let plane = Plane::start().await;
    // An IPAM that hands every claim the same address.
    answer_claims_with(&plane, "2607:ed40:100::77/128");
    plane.create_shard("first").await;
    plane.create_shard("second").await;
    let ctl = start_controller(&plane, settings()).await;
    let refused = eventually(10, "an AddressInUse event", || async {
        for name in ["first", "second"] {
            if plane
                .event_reasons(name)
                .await
                .contains(&"AddressInUse".to_string())
            {
                return Some(name);
            }
        }
        None
    })
    .await;
    let kept = if refused == "first" {
        "second"
    } else {
        "first"
    };
    let holder = addressed(&plane, kept).await;
    assert_eq!(holder.spec.shard_address_ipv6, "2607:ed40:100::77");
    let other = plane.shard_now(refused).unwrap();
    assert!(other.spec.shard_address_ipv6.is_empty());
    assert!(other.spec.shard_address_ipv6_claim_ref.is_none());
    assert!(ctl.claim_outcomes("AddressInUse") >= 1);
    assert_eq!(
        ctl.sample("egress_address_shards", &[("state", "refused")]),
        1
    );
    let note = plane
        .event(refused, "AddressInUse")
        .await
        .and_then(|e| e.note)
        .unwrap();
    assert!(note.contains(&format!("{SHARD_NS}/{kept}")), "{note}");
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn addresses_no_shard_may_carry_are_never_written() {
    for (answer, why) in [
        ("fe80::1/128", "link-local"),
        ("ff02::1/128", "multicast"),
        ("2607:ed40:100::/128", "subnet-router anycast"),
        ("64:ff9b::c000:201/128", "NAT64"),
    ] {
        let plane = Plane::start().await;
        answer_claims_with(&plane, answer);
        let ctl = start_controller(&plane, settings()).await;
        plane.create_shard("odd").await;
        let note = eventually(10, "an UnusableAnswer event", || async {
            plane
                .event("odd", "UnusableAnswer")
                .await
                .and_then(|e| e.note)
        })
        .await;
        assert!(note.contains(why), "{answer}: {note}");
        let shard = plane.shard_now("odd").unwrap();
        assert!(shard.spec.shard_address_ipv6.is_empty(), "{answer} written");
        assert_eq!(plane.shard_updates(), 0);
        ctl.stop().await.unwrap();
    }
}

#[tokio::test]
async fn a_failed_read_after_a_taken_name_is_retried_not_refused() {
    let plane = Plane::start().await;
    let shard = plane.create_shard("taken").await;
    // This incarnation's own claim exists (an earlier create whose answer was lost); the create
    // is answered 409 ClaimExists and the read that follows fails.
    let ours = plane
        .claims()
        .create(
            &PostParams::default(),
            &plane.desired_claim("taken", &uid(&shard)),
        )
        .await
        .unwrap();
    plane.set_faults(vec![fault(PLATFORM, "get", "ipclaims", 500)]);
    let ctl = start_controller(&plane, settings()).await;
    eventually(10, "the read retried", || async {
        (ctl.claim_outcomes("ClaimUnreadable") >= 2).then_some(())
    })
    .await;
    assert_eq!(
        ctl.sample("egress_address_shards", &[("state", "refused")]),
        0,
        "taken for a refusal"
    );
    assert!(
        !plane
            .event_reasons("taken")
            .await
            .contains(&"ClaimRefused".to_string())
    );
    plane.clear_faults();
    let addressed = addressed(&plane, "taken").await;
    assert_eq!(
        format!("{}/128", addressed.spec.shard_address_ipv6),
        ours.status.unwrap().allocated_cidr,
        "its own claim is used"
    );
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn a_shard_recreated_under_its_name_gets_its_own_claim() {
    let (plane, ctl, first) = with_addressed("phoenix").await;
    ctl.stop().await.unwrap();
    let earlier_name = plane.claim_name_of("phoenix", &uid(&first));
    // Deleted and created again while no controller ran: the earlier incarnation's claim is
    // still there, under a name of its own.
    plane.delete_shard("phoenix").await;
    let second = plane.create_shard("phoenix").await;
    assert_ne!(uid(&first), uid(&second));
    let earlier = plane.claim_now(&earlier_name).unwrap();

    let ctl = start_controller(&plane, settings()).await;
    let again = addressed(&plane, "phoenix").await;
    assert_eq!(uid(&again), uid(&second));
    let name = plane.claim_name_of("phoenix", &uid(&second));
    assert_ne!(name, earlier_name, "two incarnations derived one name");
    let claim = plane.claim_now(&name).unwrap();
    assert_eq!(
        annotation(&claim, ANNOTATION_SHARD_UID),
        Some(uid(&second)),
        "the new incarnation's claim is its own"
    );
    assert_eq!(
        format!("{}/128", again.spec.shard_address_ipv6),
        claim.status.unwrap().allocated_cidr
    );
    assert_ne!(
        format!("{}/128", again.spec.shard_address_ipv6),
        earlier.status.clone().unwrap().allocated_cidr,
        "a gone incarnation's address came back"
    );
    // The earlier claim is an orphan for the sweep (no controller saw the delete); nothing of the
    // new incarnation's path touched it.
    let kept = plane.claim_now(&earlier_name).unwrap();
    assert_eq!(kept.metadata.uid, earlier.metadata.uid);
    ctl.stop().await.unwrap();
}

/// A claim as the Go controller made it: the old name, the shard's annotations, nothing else.
fn go_controller_claim(plane: &Plane, shard: &str) -> IPClaim {
    let mut claim = plane.desired_claim(shard, "unused");
    claim.metadata.name = Some(legacy_claim_name(SHARD_NS, shard));
    claim.metadata.annotations = Some(BTreeMap::from([
        (ANNOTATION_SHARD_NAMESPACE.to_string(), SHARD_NS.to_string()),
        (ANNOTATION_SHARD_NAME.to_string(), shard.to_string()),
    ]));
    claim
}

#[tokio::test]
async fn shards_addressed_by_the_go_controller_are_kept_and_released() {
    let plane = Plane::start().await;
    let legacy = plane
        .claims()
        .create(&PostParams::default(), &go_controller_claim(&plane, "old"))
        .await
        .unwrap();
    let legacy_name = legacy.metadata.name.clone().unwrap();
    let cidr = legacy.status.unwrap().allocated_cidr;
    let mut old = new_shard("old");
    old.spec.shard_address_ipv6 = cidr.trim_end_matches("/128").to_string();
    old.spec.shard_address_ipv6_claim_ref = Some(AddressClaimRef {
        api_group: "ipam.miloapis.com".into(),
        kind: "IPClaim".into(),
        project: PLATFORM.into(),
        namespace: CLAIM_NS.into(),
        name: legacy_name.clone(),
    });
    old.metadata.labels = Some(BTreeMap::from([(
        "network.datumapis.com/egress-ipv6".to_string(),
        "true".to_string(),
    )]));
    plane
        .shards()
        .create(&PostParams::default(), &old)
        .await
        .unwrap();
    // A Go-era claim for a shard it never addressed: never adopted.
    let stray = plane
        .claims()
        .create(&PostParams::default(), &go_controller_claim(&plane, "new"))
        .await
        .unwrap();
    plane.reset_counters();

    let ctl = start_controller(&plane, settings()).await;
    idle(&ctl).await;
    plane.assert_work_requests(0, "the switch wrote");
    plane.create_shard("new").await;
    let new = addressed(&plane, "new").await;
    let new_ref = new.spec.shard_address_ipv6_claim_ref.unwrap();
    assert_eq!(
        new_ref.name,
        plane.claim_name("new"),
        "an unmarked claim was adopted"
    );
    assert_ne!(
        format!("{}/128", new.spec.shard_address_ipv6),
        stray.status.unwrap().allocated_cidr
    );

    plane.delete_shard("old").await;
    claim_released(&plane, &legacy_name, "the Go controller's claim released").await;
    plane.delete_shard("new").await;
    claim_released(
        &plane,
        &plane.claim_name("new"),
        "the new shard's claim released",
    )
    .await;
    assert!(
        plane
            .claim_now(&legacy_claim_name(SHARD_NS, "new"))
            .is_some(),
        "an unmarked claim no shard recorded was released"
    );
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn a_standby_remembers_only_pending_releases_and_takes_over_without_replaying() {
    let plane = Plane::start().await;
    // A claim under one shard's derived name, made for another shard: nobody may release it.
    let other = plane.create_shard("other").await;
    let mut foreign = plane.desired_claim("other", &uid(&other));
    foreign
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(ANNOTATION_SHARD_NAMESPACE.to_string(), "elsewhere".into());
    plane
        .claims()
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();

    let a = leading(&plane, "a").await;
    let b = start_controller(&plane, elected("b")).await;
    assert!(!b.handle.is_leader());
    for i in 0..20 {
        plane.create_shard(&format!("churn-{i}")).await;
    }
    for i in 0..20 {
        addressed(&plane, &format!("churn-{i}")).await;
    }
    eventually(10, "the collision refused", || async {
        plane
            .event_reasons("other")
            .await
            .contains(&"ClaimNameCollision".to_string())
            .then_some(())
    })
    .await;
    for i in 0..20 {
        plane.delete_shard(&format!("churn-{i}")).await;
    }
    plane.delete_shard("other").await;
    for i in 0..20 {
        claim_released(
            &plane,
            &plane.claim_name(&format!("churn-{i}")),
            "a release",
        )
        .await;
    }
    // The leader's renewals carry what it released; the standby lets go of all of it.
    eventually(10, "the standby to forget released deletions", || async {
        (b.handle.remembered_shards() == 0).then_some(())
    })
    .await;

    plane.reset_counters();
    a.stop().await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(10), b.handle.wait_leader())
        .await
        .expect("the standby takes over");
    idle(&b).await;
    let m = plane.lp().metrics();
    assert_eq!(
        m.count(|k| k.verb == "delete" && k.resource.starts_with("ipclaims")),
        0,
        "the takeover replayed releases: {:#?}",
        m.snapshot()
    );
    assert_eq!(
        m.count(|k| k.verb == "get" && k.resource.starts_with("egressshards")),
        0,
        "the takeover re-read gone shards"
    );
    assert!(
        plane
            .claim_now(&plane.claim_name_of("other", &uid(&other)))
            .is_some(),
        "another shard's claim was released"
    );
    b.stop().await.unwrap();
}

#[tokio::test]
async fn a_leader_started_after_a_delete_releases_the_claim_its_predecessor_owed() {
    use egress_address::runtime::leader::ANNOTATION_RELEASES_PENDING;
    let plane = Plane::start().await;
    let a = leading(&plane, "a").await;
    plane.create_shard("gone").await;
    addressed(&plane, "gone").await;
    // IPAM cannot be read, so the leader cannot release; it hands the release on in the lease.
    plane.set_faults(vec![fault(PLATFORM, "get", "ipclaims", 503)]);
    plane.delete_shard("gone").await;
    eventually(10, "the lease to hand the pending release on", || async {
        let lease = leases(&plane).get(LEASE).await.unwrap();
        let pending = annotation_of(&lease.metadata, ANNOTATION_RELEASES_PENDING)?;
        pending.contains("\"gone\"").then_some(())
    })
    .await;
    a.stop().await.unwrap();
    plane.clear_faults();
    assert!(
        plane.claim_now(&plane.claim_name("gone")).is_some(),
        "nothing released it yet"
    );
    // Started after the delete: its list never shows the shard.
    let b = leading(&plane, "b").await;
    claim_released(&plane, &plane.claim_name("gone"), "the successor's release").await;
    b.stop().await.unwrap();
}

fn annotation_of(meta: &kube::api::ObjectMeta, key: &str) -> Option<String> {
    meta.annotations.as_ref()?.get(key).cloned()
}

#[tokio::test]
async fn a_release_of_an_unseen_incarnation_keeps_the_claim_of_one_born_since() {
    let plane = Plane::start().await;
    let ctl = start_controller(&plane, settings()).await;
    plane.create_shard("phoenix").await;
    addressed(&plane, "phoenix").await;
    // The claim is gone already (an earlier release landed), and claim reads are slow: the
    // release of the deletion reads the claim of the name well after the API server said no
    // shard of the name exists, and so must judge whatever it finds by the incarnation it names.
    plane
        .claims()
        .delete(&plane.claim_name("phoenix"), &Default::default())
        .await
        .unwrap();
    let mut slow_reads = fault(PLATFORM, "get", "ipclaims", 0);
    slow_reads.error_rate = 0.0;
    slow_reads.latency_ms = 600;
    plane.set_faults(vec![slow_reads]);
    plane.reset_counters();
    plane.delete_shard("phoenix").await;
    eventually(
        10,
        "the release's confirmation that no shard of the name exists",
        || async {
            (plane.requests(|k| {
                k.verb == "get" && k.resource.starts_with("egressshards") && k.code == 404
            }) >= 1)
                .then_some(())
        },
    )
    .await;
    // Another writer (a second controller racing this one) gives a new shard of the name its
    // claim while that read is on its way.
    let reborn = plane.create_shard("phoenix").await;
    let made = plane
        .claims()
        .create(
            &PostParams::default(),
            &plane.desired_claim("phoenix", &uid(&reborn)),
        )
        .await
        .expect("the other writer's claim");
    let again = eventually(20, "the new shard addressed", || async {
        let s = plane.shard_now("phoenix")?;
        (s.metadata.uid == reborn.metadata.uid && !s.spec.shard_address_ipv6.is_empty())
            .then_some(s)
    })
    .await;
    settled(&ctl, &again).await;
    let claim = plane
        .claim_now(&plane.claim_name("phoenix"))
        .expect("the live shard's claim was released");
    assert_eq!(
        claim.metadata.uid, made.metadata.uid,
        "the claim made for the live shard was released and replaced"
    );
    plane.clear_faults();
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn a_pass_that_read_an_earlier_incarnation_never_touches_the_live_ones_claim() {
    use egress_address::ipam::Ipam;
    use egress_address::ipam::breaker::Breaker;
    use egress_address::ipam::claim::claim;
    use egress_address::ipam::spec::ClaimRequest;

    let plane = Plane::start().await;
    // The live shard of the name, and the claim another writer made for it.
    let live = plane.create_shard("lazarus").await;
    let made = plane
        .claims()
        .create(
            &PostParams::default(),
            &plane.desired_claim("lazarus", &uid(&live)),
        )
        .await
        .expect("the other writer's claim");
    let mut registry = prometheus_client::registry::Registry::default();
    let ipam = Ipam::new(
        plane.ipam_for_controller().await,
        egress_address::Metrics::register(&mut registry),
        std::time::Duration::from_secs(5),
        Breaker::new(5, std::time::Duration::from_secs(1)),
    );
    let cell = plane.cell_id();
    // This pass decided from an incarnation deleted since (its cache was behind): its claim is
    // its own name's, never the live one's.
    let req = ClaimRequest {
        class_name: CLASS,
        claim_namespace: CLAIM_NS,
        location: LOCATION,
        cell: &cell,
        shard_namespace: SHARD_NS,
        shard_name: "lazarus",
        shard_uid: "6c1d3a7e-0000-4000-8000-000000000001",
    };
    let holding = claim(&ipam, &req).await.expect("the pass's own claim");
    assert_eq!(holding.name, plane.claim_name_of("lazarus", req.shard_uid));
    let kept = plane
        .claim_now(&plane.claim_name_of("lazarus", &uid(&live)))
        .expect("the live shard's claim was touched");
    assert_eq!(kept.metadata.uid, made.metadata.uid);
    assert_ne!(
        format!("{}/128", holding.address),
        made.status.unwrap().allocated_cidr
    );
}

#[tokio::test]
async fn a_claim_whose_answer_was_lost_is_found_and_used_once() {
    let plane = Plane::start().await;
    // Every claim create commits, and the client sees the connection cut.
    plane.set_faults(vec![localplane::FaultRule {
        plane: Some(PLATFORM.into()),
        verb: Some("create".into()),
        resource: Some("ipclaims".into()),
        error_rate: 1.0,
        when: localplane::FaultWhen::AfterApply,
        outcome: localplane::FaultOutcome::Reset,
        ..Default::default()
    }]);
    let ctl = start_controller(&plane, settings()).await;
    let created = plane.create_shard("unanswered").await;
    let shard = addressed(&plane, "unanswered").await;
    let claim = plane.claim_now(&plane.claim_name("unanswered")).unwrap();
    assert_eq!(
        annotation(&claim, ANNOTATION_SHARD_UID),
        Some(uid(&created))
    );
    assert_eq!(
        claim.status.unwrap().allocated_cidr,
        format!("{}/128", shard.spec.shard_address_ipv6)
    );
    assert!(plane.lp().metrics().injected_faults().after_apply.reset >= 1);
    let claims = plane.lp().project(PLATFORM).unwrap().objects(
        &localplane::ResourceKey::new("ipam.miloapis.com", "ipclaims"),
        Some(CLAIM_NS),
    );
    assert_eq!(claims.len(), 1, "one shard, one claim");
    ctl.stop().await.unwrap();
}
