//! The opt-in orphan sweep (`--release-orphaned-claims-every`): the leader releases the claims of
//! shards deleted while no controller ran, labelled or made before claims were labelled, and
//! nothing else: not a live shard's claim, not another cell's, not the Go controller's, not one
//! in another location, not one whose address a shard carries.

use std::time::Duration;

use egress_address::ipam::naming::legacy_claim_name;
use egress_address::ipam::spec::{ClaimRequest, desired_claim};
use egress_api::ipam::IPClaim;
use kube::api::PostParams;
use serde_json::json;

use crate::common::*;

const RELEASED: &str = "egress_address_orphaned_claims_released_total";

fn sweeping(mut s: egress_address::Settings) -> egress_address::Settings {
    s.release_orphaned_claims_every = Duration::from_millis(200);
    s
}

/// The claim the controller of `cell` makes for incarnation `uid` of shard `shard`, in
/// `location`.
fn claim_of(cell: &str, shard: &str, uid: &str, location: &str) -> IPClaim {
    desired_claim(&ClaimRequest {
        class_name: CLASS,
        claim_namespace: CLAIM_NS,
        location,
        cell,
        shard_namespace: SHARD_NS,
        shard_name: shard,
        shard_uid: uid,
    })
}

/// Creates `claim` over HTTP; its address.
async fn make(plane: &Plane, claim: &IPClaim) -> String {
    let made = plane
        .claims()
        .create(&PostParams::default(), claim)
        .await
        .expect("IPAM binds the claim");
    made.status.unwrap().allocated_cidr
}

async fn exists(plane: &Plane, name: &str) -> bool {
    plane.claims().get_opt(name).await.unwrap().is_some()
}

#[tokio::test]
async fn the_sweep_releases_this_cells_orphans_and_nothing_else() {
    let plane = Plane::start().await;
    let cell = plane.cell_id();
    // Orphans: a claim made by this version (labelled), and one made before claims were
    // labelled, each for an incarnation no shard is.
    make(
        &plane,
        &claim_of(&cell, "gone-new", "uid-gone-new", LOCATION),
    )
    .await;
    let mut older = claim_of(&cell, "gone-old", "uid-gone-old", LOCATION);
    older.metadata.labels = None;
    make(&plane, &older).await;
    // Never released from here.
    let theirs = claim_of("another-cell", "theirs", "uid-theirs", LOCATION);
    make(&plane, &theirs).await;
    let far = claim_of(&cell, "far", "uid-far", "ord");
    make(&plane, &far).await;
    let mut legacy = claim_of(&cell, "legacy", "uid-legacy", LOCATION);
    legacy.metadata.name = Some(legacy_claim_name(SHARD_NS, "legacy"));
    legacy.metadata.labels = None;
    legacy
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .retain(|k, _| k.ends_with("shard-namespace") || k.ends_with("shard-name"));
    make(&plane, &legacy).await;
    let copied = claim_of(&cell, "gone-copied", "uid-gone-copied", LOCATION);
    let cidr = make(&plane, &copied).await;
    // Its address written by hand onto a live shard: freeing the claim would hand it out twice.
    let mut by_hand = localplane::testing::shard_object(SHARD_NS, "copy");
    by_hand["spec"]["shardAddressIPv6"] = json!(cidr.trim_end_matches("/128"));
    plane.lp().cell().apply_object(by_hand).unwrap();

    let ctl = start_controller(&plane, sweeping(settings())).await;
    plane.create_shard("live").await;
    addressed(&plane, "live").await;
    for name in ["gone-new", "gone-old"] {
        claim_released(
            &plane,
            &plane.claim_name(name),
            &format!("the orphaned claim of {name} to be released"),
        )
        .await;
    }
    // A later orphan is found by a later pass (by the label).
    make(
        &plane,
        &claim_of(&cell, "gone-later", "uid-gone-later", LOCATION),
    )
    .await;
    claim_released(
        &plane,
        &plane.claim_name("gone-later"),
        "the later orphan to be released",
    )
    .await;
    assert_eq!(ctl.sample(RELEASED, &[]), 3);
    for (what, name) in [
        ("the live shard's claim", plane.claim_name("live")),
        (
            "another cell's claim",
            theirs.metadata.name.clone().unwrap(),
        ),
        (
            "a claim in another location",
            far.metadata.name.clone().unwrap(),
        ),
        (
            "the Go controller's claim",
            legacy.metadata.name.clone().unwrap(),
        ),
        (
            "a claim whose address a shard carries",
            copied.metadata.name.clone().unwrap(),
        ),
    ] {
        assert!(exists(&plane, &name).await, "{what} {name} was released");
    }
    assert_eq!(
        ctl.sample("egress_address_orphan_sweep_failures_total", &[]),
        0
    );
    ctl.stop().await.unwrap();
}

fn lists(ctl: &Ctl) -> u64 {
    ctl.sample(
        "egress_address_ipam_requests_total",
        &[("verb", "list"), ("resource", "ipclaims"), ("code", "200")],
    )
}

#[tokio::test]
async fn only_the_leader_sweeps() {
    let plane = Plane::start().await;
    let cell = plane.cell_id();
    make(&plane, &claim_of(&cell, "gone", "uid-gone", LOCATION)).await;
    let leader = start_controller(&plane, sweeping(elected("sweeper-1"))).await;
    tokio::time::timeout(Duration::from_secs(10), leader.handle.wait_leader())
        .await
        .expect("the first controller leads");
    let standby = start_controller(&plane, sweeping(elected("sweeper-2"))).await;
    claim_released(
        &plane,
        &plane.claim_name("gone"),
        "the orphan to be released",
    )
    .await;
    eventually(10, "the leader's third pass", || async {
        (lists(&leader) >= 3).then_some(())
    })
    .await;
    assert!(!standby.handle.is_leader());
    assert_eq!(
        lists(&standby),
        0,
        "while the leader made three passes, the standby listed claims"
    );
    assert_eq!(leader.sample(RELEASED, &[]), 1);
    standby.stop().await.unwrap();
    leader.stop().await.unwrap();
}

#[tokio::test]
async fn a_refused_list_is_counted_and_the_next_pass_starts_over() {
    let plane = Plane::start().await;
    let cell = plane.cell_id();
    make(&plane, &claim_of(&cell, "gone", "uid-gone", LOCATION)).await;
    // As Milo answers a controller whose grant lacks the overlay.
    plane.set_faults(vec![fault(PLATFORM, "list", "ipclaims", 403)]);
    let ctl = start_controller(&plane, sweeping(settings())).await;
    eventually(10, "a refused pass to be counted", || async {
        (ctl.sample("egress_address_orphan_sweep_failures_total", &[]) >= 1).then_some(())
    })
    .await;
    assert!(exists(&plane, &plane.claim_name("gone")).await);
    plane.clear_faults();
    claim_released(
        &plane,
        &plane.claim_name("gone"),
        "the orphan to be released once the list is allowed",
    )
    .await;
    ctl.stop().await.unwrap();
}
