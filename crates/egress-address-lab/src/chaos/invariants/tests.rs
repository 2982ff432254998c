//! The invariants' judgements on stores made by hand.

use super::leftovers::witnesses;
use super::*;
use egress_address::ipam::spec::{ClaimRequest, desired_claim};
use egress_api::shard::EgressShard;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use localplane::testing::{ADDRESS_CLASS, LOCATION, answer_claim, shard_object};
use localplane::testing::{PLATFORM_PROJECT, World};
use serde_json::json;

fn at(base: Instant, ms: u64, acting: &[&str]) -> Sample {
    Sample {
        at: base + Duration::from_millis(ms),
        acting: acting.iter().map(|s| s.to_string()).collect(),
    }
}

#[test]
fn a_delete_is_owed_only_when_one_controller_acted_throughout() {
    let t0 = Instant::now();
    let steady: Vec<Sample> = (0..200).map(|i| at(t0, i * 100, &["a"])).collect();
    let deleted = t0 + Duration::from_millis(1050);
    assert_eq!(
        witnesses(&steady, deleted),
        BTreeSet::from(["a".to_string()])
    );

    // The only acting controller was killed (or stopped) two seconds after the delete.
    let killed: Vec<Sample> = (0..200)
        .map(|i| at(t0, i * 100, if i < 30 { &["a"] } else { &[] }))
        .collect();
    assert!(witnesses(&killed, deleted).is_empty());

    // A hand-over from a to b within the window does not count as one controller acting.
    let handover: Vec<Sample> = (0..200)
        .map(|i| at(t0, i * 100, if i < 30 { &["a"] } else { &["b"] }))
        .collect();
    assert!(witnesses(&handover, deleted).is_empty());
}

#[test]
fn only_public_unicast_addresses_pass() {
    let with = |a: &str| {
        let mut s = shard_object(NAMESPACE, "s");
        s["spec"]["shardAddressIPv6"] = json!(a);
        unusable(&s)
    };
    assert_eq!(
        with("2001:db8::7"),
        None,
        "the documentation prefix is allowed"
    );
    assert_eq!(with("2607:ed40:70::1"), None);
    for bad in [
        "fe80::1",
        "ff02::1",
        "2607:ed40:70::",
        "::1",
        "64:ff9b::c000:201",
    ] {
        assert!(with(bad).is_some(), "{bad} passed");
    }
    assert!(with("not-an-address").unwrap().contains("not an IPv6"));
}

/// The annotation a planted claim names the address IPAM is to answer with.
const ANSWER: &str = "chaos.test/answer";

/// Two worlds as a run has them: cell a with the platform project, cell b claiming from it.
/// IPAM answers each planted claim with the address its [`ANSWER`] annotation names.
async fn two_cells() -> (CellServer, CellServer) {
    let a = crate::fleet::world().start().await.unwrap();
    let b = crate::fleet::world().cell_only().start().await.unwrap();
    a.lp().cell().ensure_namespace(NAMESPACE);
    b.lp().cell().ensure_namespace(NAMESPACE);
    a.on_claim_create(|c| {
        if let Some(cidr) = c["metadata"]["annotations"][ANSWER].as_str() {
            let cidr = cidr.to_string();
            answer_claim(c, &cidr);
        }
    });
    (
        CellServer::Local(Box::new(a)),
        CellServer::Local(Box::new(b)),
    )
}

/// The world of a cell made by [`two_cells`].
fn w(cell: &CellServer) -> &World {
    match cell {
        CellServer::Local(world) => world,
        CellServer::Real(_) => unreachable!("the tests' cells are localplane's"),
    }
}

/// The platform project's plane, on cell a's world.
fn platform(a: &CellServer) -> Plane {
    w(a).lp().project(PLATFORM_PROJECT).unwrap()
}

fn planes<'a>(
    platform: &'a Plane,
    a: &'a CellServer,
    b: &'a CellServer,
    ids: &'a [String; 2],
) -> Planes<'a> {
    Planes {
        platform,
        cells: vec![
            CellRef {
                label: "a",
                id: &ids[0],
                server: a,
            },
            CellRef {
                label: "b",
                id: &ids[1],
                server: b,
            },
        ],
    }
}

/// Stores a shard carrying `addr` with a ref to claim `claim`; its uid.
fn addressed(cell: &CellServer, name: &str, addr: &str, claim: &str) -> String {
    let mut s = shard_object(NAMESPACE, name);
    s["spec"]["shardAddressIPv6"] = json!(addr);
    s["spec"]["shardAddressIPv6ClaimRef"] = json!({
        "apiGroup": "ipam.miloapis.com", "kind": "IPClaim", "project": PLATFORM_PROJECT,
        "namespace": CLAIM_NAMESPACE, "name": claim,
    });
    let stored = w(cell).lp().cell().apply_object(s).unwrap();
    uid_of(&stored).to_string()
}

/// Creates claim `name` over HTTP as a controller of `cell` would for shard `shard`
/// (incarnation `uid`), bound to `cidr`.
async fn claim(a: &CellServer, name: &str, cell: &str, shard: &str, uid: &str, cidr: &str) {
    let mut c = desired_claim(&ClaimRequest {
        class_name: ADDRESS_CLASS,
        claim_namespace: CLAIM_NAMESPACE,
        location: LOCATION,
        cell,
        shard_namespace: NAMESPACE,
        shard_name: shard,
        shard_uid: uid,
    });
    c.metadata.name = Some(name.into());
    c.metadata
        .annotations
        .get_or_insert_default()
        .insert(ANSWER.into(), cidr.into());
    w(a).claims()
        .create(&PostParams::default(), &c)
        .await
        .unwrap_or_else(|e| panic!("planting claim {name}: {e}"));
}

async fn delete_claim(a: &CellServer, name: &str) {
    w(a).claims()
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn the_checker_catches_every_planted_violation() {
    let (a, b) = two_cells().await;
    let ids = [w(&a).lp().cell_uid(), w(&b).lp().cell_uid()];
    let p = platform(&a);
    let start = Instant::now();
    let mut obs = Observer::new(start);

    // Healthy: one shard per cell under one name, each with its own claim and address.
    let twin_a = addressed(&a, "twin", "2001:db8::10", "claim-a");
    claim(&a, "claim-a", &ids[0], "twin", &twin_a, "2001:db8::10/128").await;
    let twin_b = addressed(&b, "twin", "2001:db8::11", "claim-b");
    claim(&a, "claim-b", &ids[1], "twin", &twin_b, "2001:db8::11/128").await;
    obs.sample(&planes(&p, &a, &b, &ids)).await.unwrap();
    assert_eq!(obs.results.shared_addresses.checks, 1);
    assert!(obs.seen.is_empty(), "a healthy world: {:?}", obs.results);

    // Planted: cell b's shard of another name on cell a's address (shared across cells),
    // a link-local address, a ref whose claim holds another address, and a claim made for
    // another incarnation.
    let dup = addressed(&b, "dup", "2001:db8::10", "claim-dup");
    claim(&a, "claim-dup", &ids[1], "dup", &dup, "2001:db8::10/128").await;
    let ll = addressed(&a, "ll", "fe80::1", "claim-ll");
    claim(&a, "claim-ll", &ids[0], "ll", &ll, "fe80::1/128").await;
    let off = addressed(&a, "off", "2001:db8::20", "claim-off");
    claim(&a, "claim-off", &ids[0], "off", &off, "2001:db8::21/128").await;
    addressed(&a, "stale", "2001:db8::30", "claim-stale");
    claim(
        &a,
        "claim-stale",
        &ids[0],
        "stale",
        "an-earlier-uid",
        "2001:db8::30/128",
    )
    .await;
    obs.sample(&planes(&p, &a, &b, &ids)).await.unwrap();
    let r = &obs.results;
    assert_eq!(r.shared_addresses.violations.len(), 1, "{r:?}");
    assert!(r.shared_addresses.violations[0].contains("cell b chaos/dup"));
    assert!(r.shared_addresses.violations[0].contains("cell a chaos/twin"));
    assert_eq!(r.unusable_addresses.violations.len(), 1, "{r:?}");
    assert!(r.unusable_addresses.violations[0].contains("link-local"));
    assert_eq!(r.ref_mismatches.violations.len(), 2, "{r:?}");
    assert!(
        r.ref_mismatches
            .violations
            .iter()
            .any(|v| v.contains("holds"))
    );
    assert!(
        r.ref_mismatches
            .violations
            .iter()
            .any(|v| v.contains("another shard, cell or incarnation"))
    );
    assert!(r.deleted_live_claims.violations.is_empty(), "{r:?}");

    // Planted: the claim of cell b's live twin is deleted, and cell a's is replaced under
    // its name (deleted and made again, with a new uid).
    delete_claim(&a, "claim-b").await;
    delete_claim(&a, "claim-a").await;
    claim(&a, "claim-a", &ids[0], "twin", &twin_a, "2001:db8::10/128").await;
    obs.sample(&planes(&p, &a, &b, &ids)).await.unwrap();
    let r = &obs.results;
    assert_eq!(r.deleted_live_claims.violations.len(), 2, "{r:?}");
    assert!(
        r.deleted_live_claims
            .violations
            .iter()
            .any(|v| v.contains("claim-b was deleted while cell b chaos/twin"))
    );
    assert!(
        r.deleted_live_claims
            .violations
            .iter()
            .any(|v| v.contains("claim-a was replaced"))
    );
    // A violation that persists is listed once.
    let before = obs.seen.len();
    obs.sample(&planes(&p, &a, &b, &ids)).await.unwrap();
    assert_eq!(obs.seen.len(), before);
    a.shutdown(false).await;
    b.shutdown(false).await;
}

#[tokio::test]
async fn a_claim_gone_from_under_a_live_shard_is_not_blamed_on_a_shard_that_left() {
    let (a, b) = two_cells().await;
    let ids = [w(&a).lp().cell_uid(), w(&b).lp().cell_uid()];
    let p = platform(&a);
    let mut obs = Observer::new(Instant::now());
    let uid = addressed(&a, "leaving", "2001:db8::40", "claim-leaving");
    claim(
        &a,
        "claim-leaving",
        &ids[0],
        "leaving",
        &uid,
        "2001:db8::40/128",
    )
    .await;
    obs.sample(&planes(&p, &a, &b, &ids)).await.unwrap();
    // The shard goes first, then its claim: a release, not a violation.
    Api::<EgressShard>::namespaced(w(&a).cell(), NAMESPACE)
        .delete("leaving", &DeleteParams::default())
        .await
        .unwrap();
    delete_claim(&a, "claim-leaving").await;
    obs.sample(&planes(&p, &a, &b, &ids)).await.unwrap();
    assert!(obs.seen.is_empty(), "{:?}", obs.results);
    assert_eq!(obs.results.deleted_live_claims.checks, 2);
    a.shutdown(false).await;
    b.shutdown(false).await;
}

#[tokio::test]
async fn the_end_of_a_run_finds_gaps_missing_records_and_owed_releases() {
    let (a, b) = two_cells().await;
    let ids = [w(&a).lp().cell_uid(), w(&b).lp().cell_uid()];
    let p = platform(&a);
    let t0 = Instant::now();
    let mut obs = Observer::new(t0);
    obs.sample(&planes(&p, &a, &b, &ids)).await.unwrap();
    // A shard whose ref names nothing, a bare shard, one the run expected and is gone.
    let lost = addressed(&a, "lost-ref", "2001:db8::50", "no-such-claim");
    let bare = w(&a)
        .lp()
        .cell()
        .apply_object(shard_object(NAMESPACE, "bare"))
        .unwrap();
    // Claims for gone incarnations: one deleted while a controller of cell a acted
    // throughout, one whose delete in cell b no controller saw, and one of cell a that
    // appeared only after its shard was gone.
    claim(&a, "owed", &ids[0], "x", "uid-owed", "2001:db8::60/128").await;
    claim(&a, "unseen", &ids[1], "y", "uid-unseen", "2001:db8::61/128").await;
    let deleted = Deletion {
        at: Instant::now(),
        platform_rv: p.resource_version(),
    };
    obs.sample(&planes(&p, &a, &b, &ids)).await.unwrap();
    claim(&a, "late", &ids[0], "z", "uid-late", "2001:db8::62/128").await;
    obs.sample(&planes(&p, &a, &b, &ids)).await.unwrap();

    let live_a: BTreeMap<String, String> = [
        ("lost-ref".to_string(), lost),
        ("bare".to_string(), uid_of(&bare).to_string()),
        ("vanished".to_string(), "uid-vanished".to_string()),
    ]
    .into();
    let deleted_a: BTreeMap<String, Deletion> = [
        ("uid-owed".to_string(), deleted),
        ("uid-late".to_string(), deleted),
    ]
    .into();
    let deleted_b: BTreeMap<String, Deletion> = [("uid-unseen".to_string(), deleted)].into();
    let acting =
        |names: &[&str]| -> Vec<Sample> { (0..200).map(|i| at(t0, i * 100, names)).collect() };
    // A controller acted throughout in cell a, none in cell b.
    let samples_a = acting(&["ctl-a"]);
    let samples_b = acting(&[]);
    let empty = BTreeMap::new();
    let facts = RunFacts {
        cells: vec![
            CellFacts {
                live: &live_a,
                deleted: &deleted_a,
                samples: &samples_a,
            },
            CellFacts {
                live: &empty,
                deleted: &deleted_b,
                samples: &samples_b,
            },
        ],
        late_window: Duration::from_secs(30),
    };
    let f = obs.finish(&planes(&p, &a, &b, &ids), &facts).await.unwrap();
    assert_eq!(
        f.unaddressed.len(),
        2,
        "bare and vanished: {:?}",
        f.unaddressed
    );
    assert!(
        f.sampled
            .ref_mismatches
            .violations
            .iter()
            .any(|v| v.starts_with("at the end") && v.contains("no-such-claim")),
        "{:?}",
        f.sampled.ref_mismatches
    );
    let names = |v: &[String]| -> Vec<String> {
        v.iter()
            .map(|c| c.split_whitespace().nth(1).unwrap_or("").to_string())
            .collect()
    };
    assert_eq!(names(&f.leftovers.owed), ["owed"], "{f:?}");
    // Where to look: when the shard was deleted, and who should have released its claim.
    assert!(
        f.leftovers.owed[0].contains(" s while ctl-a acted throughout"),
        "{:?}",
        f.leftovers.owed
    );
    assert_eq!(names(&f.leftovers.unseen_delete), ["unseen"], "{f:?}");
    assert_eq!(names(&f.leftovers.created_after_delete), ["late"], "{f:?}");
    a.shutdown(false).await;
    b.shutdown(false).await;
}
