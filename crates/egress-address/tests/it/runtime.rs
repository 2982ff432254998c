//! Leader election, drift, shutdown and credential refusals, against localplane over HTTP.

use std::time::Duration;

use crate::common::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{DeleteParams, PostParams};

async fn lost_leadership(ctl: &Ctl, what: &str) {
    eventually(5, what, || async {
        (!ctl.handle.is_leader()).then_some(())
    })
    .await;
}

fn assert_unaddressed(plane: &Plane, name: &str) {
    let shard = plane.shard_now(name).expect("the shard exists");
    assert!(
        shard.spec.shard_address_ipv6.is_empty(),
        "{name} was addressed by a controller that does not lead"
    );
}

fn bogus_client(plane: &Plane, plane_name: &str) -> Client {
    let mut cfg = kube::Config::new(plane.lp().plane_url(plane_name).parse().unwrap());
    cfg.auth_info.token = Some("not-a-token".to_string().into());
    Client::try_from(cfg).unwrap()
}

#[tokio::test]
async fn only_the_leader_writes() {
    let plane = Plane::start().await;
    let a = start_controller(&plane, elected("a")).await;
    let b = start_controller(&plane, elected("b")).await;
    let leader = eventually(10, "a leader", || async { holder(&plane).await }).await;
    assert!(leader == "a" || leader == "b");
    // Both are ready: a standby with a warm cache is ready to take over.
    assert!(a.handle.is_ready() && b.handle.is_ready());
    assert!(
        a.handle.is_leader() != b.handle.is_leader(),
        "exactly one leads"
    );

    for i in 0..5 {
        plane.create_shard(&format!("s-{i}")).await;
    }
    for i in 0..5 {
        addressed(&plane, &format!("s-{i}")).await;
    }
    let (lead, follow) = if a.handle.is_leader() {
        (&a, &b)
    } else {
        (&b, &a)
    };
    assert_eq!(lead.claim_outcomes("Bound"), 5);
    assert_eq!(follow.claim_outcomes("Bound"), 0, "the follower wrote");
    assert!(
        (lead.sample("egress_address_leader", &[]) == 1)
            && follow.sample("egress_address_leader", &[]) != 1
    );
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

#[tokio::test]
async fn a_failed_renewal_stops_writes_at_once() {
    let plane = Plane::start().await;
    let ctl = leading(&plane, "solo").await;
    plane.set_faults(vec![fault("cell", "update", "leases", 500)]);
    lost_leadership(&ctl, "leadership to be dropped").await;
    plane.reset_counters();
    let during = plane.create_shard("during").await;
    // Seen, and left alone: a non-leader queues nothing.
    settled(&ctl, &during).await;
    assert_unaddressed(&plane, "during");
    assert_eq!(
        plane.requests(|k| k.resource.starts_with("ipclaims")),
        0,
        "a non-leader claimed"
    );
    plane.clear_faults();
    addressed(&plane, "during").await;
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn a_lease_taken_by_another_stops_writes_until_it_expires() {
    let plane = Plane::start().await;
    let ctl = leading(&plane, "mine").await;
    // Another instance takes the lease over and keeps renewing it.
    let usurper = tokio::spawn({
        let api = leases(&plane);
        async move {
            loop {
                let mut l = api.get(LEASE).await.unwrap();
                let spec = l.spec.as_mut().unwrap();
                spec.holder_identity = Some("usurper".into());
                spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
                let _ = api.replace(LEASE, &PostParams::default(), &l).await;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    });
    lost_leadership(&ctl, "leadership to be lost").await;
    let held_off = plane.create_shard("held-off").await;
    settled(&ctl, &held_off).await;
    assert_unaddressed(&plane, "held-off");
    usurper.abort();
    // Once the usurper stops renewing, the lease expires and writes resume.
    addressed(&plane, "held-off").await;
    assert_eq!(holder(&plane).await.as_deref(), Some("mine"));
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn shutdown_finishes_the_write_in_flight_and_releases_the_lease() {
    let plane = Plane::start().await;
    let ctl = leading(&plane, "leaving").await;
    let mut slow = fault("cell", "patch", "egressshards", 0);
    slow.error_rate = 0.0;
    slow.commit_delay_ms = 800;
    plane.set_faults(vec![slow]);
    plane.create_shard("in-flight").await;
    // Stop once the server holds the shard update back: the write is then on the wire.
    eventually(5, "the shard update on the wire", || async {
        (plane.lp().metrics().injected_faults().delayed_commits > 0).then_some(())
    })
    .await;
    ctl.stop().await.unwrap();
    let shard = plane.shard_now("in-flight").unwrap();
    assert!(
        !shard.spec.shard_address_ipv6.is_empty(),
        "the in-flight write was cut"
    );
    assert!(shard.spec.shard_address_ipv6_claim_ref.is_some());
    assert_eq!(holder(&plane).await, None, "the lease was not released");
    plane.clear_faults();

    // A successor takes over at once rather than waiting out the lease.
    let next = start_controller(&plane, elected("next")).await;
    tokio::time::timeout(Duration::from_millis(1500), next.handle.wait_leader())
        .await
        .expect("the successor leads without waiting for expiry");
    next.stop().await.unwrap();
}

#[tokio::test]
async fn drift_is_reported_and_never_rewritten() {
    let mut s = settings();
    s.drift_check_interval = Duration::from_millis(400);
    let (plane, ctl, before) = with_addressed_by(s, "drifter").await;
    // Someone deletes the claim behind the controller's back.
    plane
        .claims()
        .delete(&plane.claim_name("drifter"), &DeleteParams::default())
        .await
        .unwrap();
    eventually(10, "an AddressDrift event", || async {
        let r = plane.event_reasons("drifter").await;
        r.contains(&"AddressDrift".to_string()).then_some(())
    })
    .await;
    assert!(ctl.sample("egress_address_drift_total", &[("kind", "missing")]) >= 1);
    let after = plane.shard_now("drifter").unwrap();
    assert_eq!(after.spec, before.spec, "drift never rewrites the shard");
    let e = plane.event("drifter", "AddressDrift").await.unwrap();
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn no_drift_check_before_one_interval() {
    let mut s = settings();
    s.drift_check_interval = Duration::from_secs(3600);
    let (plane, ctl, calm) = with_addressed_by(s, "calm").await;
    settled(&ctl, &calm).await;
    plane.reset_counters();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(plane.work_request_total(), 0);
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn a_refused_cell_credential_is_never_ready() {
    let plane = Plane::start().await;
    let metrics = egress_address::Metrics::unregistered();
    let controller = egress_address::Controller::new(
        settings(),
        bogus_client(&plane, "cell"),
        plane.ipam_for_controller().await,
        metrics,
    )
    .unwrap();
    let handle = controller.handle();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(controller.run(async move {
        let _ = stopped.await;
    }));
    let reasons = eventually(5, "the refusal reported", || async {
        let r = handle.not_ready_because();
        r.iter()
            .any(|r| r == "the cell refuses the controller's credential")
            .then_some(r)
    })
    .await;
    assert!(!handle.is_ready(), "{reasons:?}");
    let _ = stop.send(());
    task.await
        .unwrap()
        .expect("a refused credential keeps the controller up, not ready");
}

#[tokio::test]
async fn a_refused_ipam_credential_writes_nothing_and_turns_not_ready() {
    let plane = Plane::start().await;
    let ctl = start_controller_with(settings(), plane.cell(), bogus_client(&plane, PLATFORM)).await;
    plane.create_shard("locked-out").await;
    eventually(5, "not ready", || async {
        (!ctl.handle.is_ready()).then_some(())
    })
    .await;
    assert!(
        plane
            .shard_now("locked-out")
            .unwrap()
            .spec
            .shard_address_ipv6
            .is_empty()
    );
    assert_eq!(plane.shard_updates(), 0);
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn a_renewal_is_one_write_without_a_read() {
    let plane = Plane::start().await;
    let ctl = start_controller(&plane, elected("renewer")).await;
    tokio::time::timeout(Duration::from_secs(10), ctl.handle.wait_leader())
        .await
        .unwrap();
    let m = plane.lp().metrics();
    let puts = || m.count(|k| k.resource.starts_with("leases") && k.verb == "update");
    // Counted from the first renewal on: taking the lease reads it first, renewing must not.
    eventually(10, "the first renewal", || async {
        (puts() >= 1).then_some(())
    })
    .await;
    plane.reset_counters();
    eventually(10, "three renewals", || async {
        (puts() >= 3).then_some(())
    })
    .await;
    let gets = m.count(|k| k.resource.starts_with("leases") && k.verb == "get");
    assert_eq!(gets, 0, "a renewal read the lease first");
    assert!(ctl.handle.is_leader());
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn readiness_returns_when_ipam_accepts_the_credential_again() {
    let plane = Plane::start().await;
    let ctl = start_controller(&plane, settings()).await;
    plane.set_faults(vec![fault(PLATFORM, "*", "*", 403)]);
    plane.create_shard("forbidden").await;
    eventually(5, "not ready", || async {
        (!ctl.handle.is_ready()).then_some(())
    })
    .await;
    plane.clear_faults();
    addressed(&plane, "forbidden").await;
    eventually(5, "ready again", || async {
        ctl.handle.is_ready().then_some(())
    })
    .await;
    ctl.stop().await.unwrap();
}
