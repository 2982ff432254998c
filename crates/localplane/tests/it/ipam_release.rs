//! A claim DELETE as Milo's `AllocatingREST.Delete` carries it out, over real HTTP with kube-rs:
//! two writes (`Releasing`, then the release and the removal), no preconditions read (strict mode
//! reads them), a release step that fails or is held back, and what deletecollection does.

use std::time::Duration;

use egress_api::ipam::{IPAllocation, IPClaim, IPPool};
use futures::{StreamExt, TryStreamExt};
use kube::api::{
    Api, DeleteParams, ListParams, PostParams, Preconditions, WatchEvent, WatchParams,
};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, ResourceExt};
use localplane::ipam::digest::allocation_name;
use localplane::{FaultOutcomes, Running};
use serde_json::{Value, json};

use crate::common::{PLATFORM, api_err, claim, flat, ipam_builder, serve, set_faults};

/// The platform plane (strict or as Milo) with a flat IPv6 class, and a client for it.
async fn ipam(strict: bool) -> (Running, Client) {
    let lp = serve(ipam_builder().ipam_strict_deletes(strict)).await;
    let c = lp.http_client(PLATFORM, "admin").unwrap();
    flat(&c, "2001:db8::/64", json!({"defaultPrefixLength": 128})).await;
    (lp, c)
}

fn claims(c: &Client) -> Api<IPClaim> {
    Api::namespaced(c.clone(), "default")
}

fn allocations(c: &Client) -> Api<IPAllocation> {
    Api::namespaced(c.clone(), "default")
}

fn flat_claim(name: &str) -> IPClaim {
    claim(name, json!({"className": "flat"}))
}

fn phase(c: &IPClaim) -> &str {
    c.status.as_ref().map_or("", |s| s.phase.as_str())
}

fn cidr(c: &IPClaim) -> &str {
    c.status.as_ref().map_or("", |s| s.allocated_cidr.as_str())
}

/// The claim as JSON with what a release may change blanked: its phase and resourceVersion.
fn all_but_phase(c: &IPClaim) -> Value {
    let mut v = serde_json::to_value(c).unwrap();
    v["status"]["phase"] = Value::Null;
    v["metadata"]["resourceVersion"] = Value::Null;
    v
}

async fn allocated_in_pool(c: &Client) -> String {
    let pool = Api::<IPPool>::all(c.clone())
        .get("flat-pool")
        .await
        .unwrap();
    pool.status.and_then(|s| s.capacity).unwrap().allocated
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_delete_is_two_writes_a_watch_sees_releasing_then_deleted() {
    let (lp, c) = ipam(false).await;
    let api = claims(&c);
    let made = api
        .create(&PostParams::default(), &flat_claim("x"))
        .await
        .unwrap();
    let rv = made.resource_version().unwrap();
    let mut events = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();

    let answer = api.delete("x", &DeleteParams::default()).await.unwrap();
    let answered = answer
        .left()
        .expect("200 with the claim, as Milo answers, not a Status");
    assert_eq!(phase(&answered), "Releasing");
    assert_ne!(answered.resource_version(), Some(rv.clone()));

    let WatchEvent::Modified(releasing) = events.try_next().await.unwrap().unwrap() else {
        panic!("the first write is a MODIFIED event");
    };
    assert_eq!(phase(&releasing), "Releasing");
    assert_eq!(
        cidr(&releasing),
        cidr(&made),
        "the address is held until the release"
    );
    assert_eq!(
        all_but_phase(&releasing),
        all_but_phase(&made),
        "nothing but the phase changes"
    );
    assert_eq!(releasing.resource_version(), answered.resource_version());
    let WatchEvent::Deleted(gone) = events.try_next().await.unwrap().unwrap() else {
        panic!("the second write is a DELETED event");
    };
    assert_eq!(gone.name_any(), "x");
    assert!(
        gone.resource_version().unwrap().parse::<u64>().unwrap()
            > releasing
                .resource_version()
                .unwrap()
                .parse::<u64>()
                .unwrap()
    );

    assert!(
        allocations(&c)
            .get_opt(&allocation_name("default", "x"))
            .await
            .unwrap()
            .is_none(),
        "the release freed the allocation"
    );
    let next = api
        .create(&PostParams::default(), &flat_claim("next"))
        .await
        .unwrap();
    assert_eq!(cidr(&next), cidr(&made), "and the address");
    lp.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_held_release_shows_releasing_and_lands_after_the_client_gave_up() {
    let (lp, c) = ipam(false).await;
    let api = claims(&c);
    let made = api
        .create(&PostParams::default(), &flat_claim("x"))
        .await
        .unwrap();
    set_faults(
        &lp,
        json!([{"verb": "delete", "resource": "ipclaims", "releaseDelayMs": 1500}]),
    )
    .await;
    let mut cfg = lp.http_config(PLATFORM, "admin");
    cfg.read_timeout = Some(Duration::from_millis(300));
    let impatient = Client::try_from(cfg).unwrap();
    let e = claims(&impatient)
        .delete("x", &DeleteParams::default())
        .await
        .expect_err("the client gives up before the release");
    assert!(!matches!(e, kube::Error::Api(_)), "{e:?}");

    // Between the writes a GET sees the first; the address and its allocation are still held.
    let between = api.get("x").await.unwrap();
    assert_eq!(phase(&between), "Releasing");
    assert_eq!(cidr(&between), cidr(&made));
    assert!(
        allocations(&c)
            .get_opt(&allocation_name("default", "x"))
            .await
            .unwrap()
            .is_some()
    );

    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(
            api.clone(),
            "x",
            conditions::is_deleted(&made.uid().unwrap()),
        ),
    )
    .await
    .expect("the release lands though nobody waits for it")
    .unwrap();
    assert_eq!(lp.metrics().injected_faults().delayed_releases, 1);
    lp.faults().clear();
    let next = api
        .create(&PostParams::default(), &flat_claim("next"))
        .await
        .unwrap();
    assert_eq!(cidr(&next), cidr(&made), "the address was freed");
    lp.shutdown().await;
}

/// What one localplane does with a DELETE sent while claim `x` is there, naming its uid as the
/// precondition, whose commit lands 3 s later, after `x` was deleted and made again: its answer,
/// what holds the name afterwards, and the uids of both claims.
async fn a_late_delete_with_a_stale_uid(
    strict: bool,
) -> (
    Result<IPClaim, kube::core::Status>,
    Option<IPClaim>,
    String,
    String,
) {
    let (lp, c) = ipam(strict).await;
    let api = claims(&c);
    let pp = PostParams::default();
    let first_uid = api
        .create(&pp, &flat_claim("x"))
        .await
        .unwrap()
        .uid()
        .unwrap();
    set_faults(
        &lp,
        json!([{"verb": "delete", "resource": "ipclaims", "commitDelayMs": 3000}]),
    )
    .await;
    let late = {
        let api = api.clone();
        let dp = DeleteParams::default().preconditions(Preconditions {
            uid: Some(first_uid.clone()),
            resource_version: None,
        });
        tokio::spawn(async move { api.delete("x", &dp).await })
    };
    while lp.metrics().injected_faults().delayed_commits == 0 {
        tokio::task::yield_now().await;
    }
    lp.faults().clear();
    api.delete("x", &DeleteParams::default()).await.unwrap();
    let second_uid = api
        .create(&pp, &flat_claim("x"))
        .await
        .unwrap()
        .uid()
        .unwrap();
    assert_ne!(first_uid, second_uid);
    let answer = match late.await.unwrap() {
        Ok(either) => Ok(either
            .left()
            .expect("a claim DELETE answers with the claim")),
        Err(e) => Err(api_err(e)),
    };
    let after = api.get_opt("x").await.unwrap();
    if after.is_none() {
        assert!(
            allocations(&c)
                .get_opt(&allocation_name("default", "x"))
                .await
                .unwrap()
                .is_none(),
            "the newer claim's address went with it"
        );
    }
    lp.shutdown().await;
    (answer, after, first_uid, second_uid)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_late_delete_removes_the_newer_claim_as_milo_does_and_strict_mode_refuses() {
    // As Milo: the uid precondition is not read, so the late DELETE removes whatever claim holds
    // the name when it lands, the newer one.
    let (answer, after, _, second_uid) = a_late_delete_with_a_stale_uid(false).await;
    let answered = answer.expect("Milo reads no precondition");
    assert_eq!(answered.uid(), Some(second_uid.clone()));
    assert_eq!(phase(&answered), "Releasing");
    assert!(after.is_none(), "the newer claim is gone: {after:?}");

    // Strict mode reads it when the delete lands, and spares the newer claim.
    let (answer, after, first_uid, second_uid) = a_late_delete_with_a_stale_uid(true).await;
    let e = answer.expect_err("the precondition fails when applied");
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        e.message,
        format!(
            "Operation cannot be fulfilled on ipclaims.ipam.miloapis.com \"x\": Precondition failed: \
             UID in precondition: {first_uid}, UID in object meta: {second_uid}"
        )
    );
    let d = e.details.unwrap();
    assert_eq!(
        (d.name.as_str(), d.group.as_str(), d.kind.as_str()),
        ("x", "ipam.miloapis.com", "ipclaims")
    );
    let kept = after.expect("the newer claim stays");
    assert_eq!(kept.uid(), Some(second_uid));
    assert_eq!(phase(&kept), "Bound");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_release_leaves_the_claim_releasing_with_its_address_until_a_later_delete() {
    let (lp, c) = ipam(false).await;
    let api = claims(&c);
    let made = api
        .create(&PostParams::default(), &flat_claim("x"))
        .await
        .unwrap();
    let alloc = allocation_name("default", "x");
    set_faults(
        &lp,
        json!([{"verb": "delete", "resource": "ipclaims", "errorRate": 1, "when": "release"}]),
    )
    .await;
    let mut rvs = vec![made.resource_version().unwrap()];
    for attempt in 0..2 {
        let e = api_err(
            api.delete("x", &DeleteParams::default())
                .await
                .expect_err("the release fails"),
        );
        assert_eq!((e.code, e.reason.as_str()), (500, "InternalError"));
        assert!(
            e.message
                .starts_with("release allocation after 3 attempts: "),
            "{}",
            e.message
        );
        let stuck = api.get("x").await.unwrap();
        assert_eq!(phase(&stuck), "Releasing", "attempt {attempt}");
        assert_eq!(cidr(&stuck), cidr(&made));
        // A DELETE of a claim already Releasing writes it again, as a retry of Milo's does.
        rvs.push(stuck.resource_version().unwrap());
        let held = allocations(&c).get(&alloc).await.unwrap();
        assert_eq!(held.spec.claim_ref.map(|r| r.name), Some("x".to_string()));
        assert_eq!(allocated_in_pool(&c).await, "1", "the pool still counts it");
    }
    assert!(rvs.windows(2).all(|w| w[0] != w[1]), "{rvs:?}");
    assert_eq!(
        lp.metrics().injected_faults().failed_releases,
        FaultOutcomes {
            status: 2,
            ..Default::default()
        }
    );
    let other = api
        .create(&PostParams::default(), &flat_claim("other"))
        .await
        .unwrap();
    assert_ne!(
        cidr(&other),
        cidr(&made),
        "a Releasing claim's address is not handed out"
    );

    lp.faults().clear();
    let done = api.delete("x", &DeleteParams::default()).await.unwrap();
    assert_eq!(phase(&done.left().unwrap()), "Releasing");
    assert!(api.get_opt("x").await.unwrap().is_none());
    assert!(allocations(&c).get_opt(&alloc).await.unwrap().is_none());
    let next = api
        .create(&PostParams::default(), &flat_claim("next"))
        .await
        .unwrap();
    assert_eq!(
        cidr(&next),
        cidr(&made),
        "the later DELETE freed the address"
    );
    lp.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dry_run_delete_changes_nothing() {
    let (lp, c) = ipam(false).await;
    let api = claims(&c);
    let made = api
        .create(&PostParams::default(), &flat_claim("x"))
        .await
        .unwrap();
    let answer = api
        .delete("x", &DeleteParams::default().dry_run())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(
        phase(&answer),
        "Bound",
        "Milo answers a dry run with the claim as it is"
    );
    let now = api.get("x").await.unwrap();
    assert_eq!(now.resource_version(), made.resource_version());
    assert_eq!(phase(&now), "Bound");
    lp.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn deletecollection_releases_every_claim_and_reads_no_precondition() {
    let (lp, c) = ipam(false).await;
    let api = claims(&c);
    for name in ["a", "b"] {
        api.create(&PostParams::default(), &flat_claim(name))
            .await
            .unwrap();
    }
    let dp = DeleteParams::default().preconditions(Preconditions {
        uid: Some("not-a-uid".into()),
        resource_version: None,
    });
    let deleted = api
        .delete_collection(&dp, &ListParams::default())
        .await
        .unwrap()
        .left()
        .expect("the list of claims deleted");
    let phases: Vec<(String, String)> = deleted
        .items
        .iter()
        .map(|c| (c.name_any(), phase(c).to_string()))
        .collect();
    assert_eq!(
        phases,
        [
            ("a".into(), "Releasing".into()),
            ("b".into(), "Releasing".into())
        ]
    );
    assert!(
        api.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert!(
        allocations(&c)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert_eq!(allocated_in_pool(&c).await, "0");
    lp.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_finalizer_does_not_hold_a_claim_as_milos_delete_never_reads_one() {
    let (lp, c) = ipam(false).await;
    let api = claims(&c);
    let mut held = flat_claim("x");
    held.metadata.finalizers = Some(vec!["example.com/keep".into()]);
    let made = api.create(&PostParams::default(), &held).await.unwrap();
    assert_eq!(made.finalizers(), ["example.com/keep"]);
    api.delete("x", &DeleteParams::default()).await.unwrap();
    assert!(
        api.get_opt("x").await.unwrap().is_none(),
        "released and removed"
    );
    assert!(
        allocations(&c)
            .get_opt(&allocation_name("default", "x"))
            .await
            .unwrap()
            .is_none()
    );
    lp.shutdown().await;
}
