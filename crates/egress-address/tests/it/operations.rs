//! What an operator's cell does to the controller every week: rotated credentials, IPAM
//! outages, oversized answers, a server it cannot trust. Each is survived without a restart and
//! said plainly in `/ready`.

use std::time::{Duration, Instant};

use egress_address::connect::kubeconfig::{Transport, following_cell_client};
use egress_address::ipam::following_ipam_client;
use tokio_util::sync::CancellationToken;

use crate::common::*;

const REVOKED: &str = "a-revoked-token";

async fn reason_containing(ctl: &Ctl, text: &str) -> Vec<String> {
    eventually(10, &format!("a not-ready reason with {text:?}"), || async {
        let reasons = ctl.handle.not_ready_because();
        reasons.iter().any(|r| r.contains(text)).then_some(reasons)
    })
    .await
}

/// The admin's cell kubeconfig mounted as a Secret in folder `name`, carrying a revoked token;
/// and the good kubeconfig, to rotate to.
fn revoked_secret(plane: &Plane, name: &str) -> (MountedSecret, String) {
    let good = plane.kubeconfig_text();
    let secret = MountedSecret::new(
        plane.dir().join(name),
        "kubeconfig",
        &good.replace(ADMIN_TOKEN, REVOKED),
    );
    (secret, good)
}

#[tokio::test]
async fn a_rotated_ipam_credential_is_picked_up_without_a_restart() {
    let plane = Plane::start().await;
    let (mut secret, good) = revoked_secret(&plane, "ipam-secret");
    let (ipam, follower) =
        following_ipam_client(&secret.path(), PLATFORM, Transport::default(), None)
            .await
            .unwrap();
    let stop = CancellationToken::new();
    tokio::spawn(
        follower
            .poll_every(Duration::from_millis(100))
            .run(stop.clone()),
    );
    let ctl = start_controller_with(settings(), plane.cell(), ipam).await;
    plane.create_shard("rotated").await;
    reason_containing(&ctl, "IPAM refuses the controller's credential").await;
    assert!(
        plane
            .shard_now("rotated")
            .unwrap()
            .spec
            .shard_address_ipv6
            .is_empty()
    );

    // The kubelet swaps the mounted Secret; the old token stays revoked.
    secret.update(&good);
    addressed(&plane, "rotated").await;
    eventually(10, "ready again", || async {
        ctl.handle.is_ready().then_some(())
    })
    .await;
    stop.cancel();
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn a_rotated_cell_credential_is_picked_up_without_a_restart() {
    let plane = Plane::start().await;
    let (mut secret, good) = revoked_secret(&plane, "cell-secret");
    let (cell, follower) = following_cell_client(Some(&secret.path()), Transport::default(), None)
        .await
        .unwrap();
    let stop = CancellationToken::new();
    tokio::spawn(
        follower
            .unwrap()
            .poll_every(Duration::from_millis(100))
            .run(stop.clone()),
    );
    let ctl = start_unready(settings(), cell, plane.ipam_for_controller().await);
    reason_containing(&ctl, "the cell refuses the controller's credential").await;
    plane.create_shard("rotated").await;
    secret.update(&good);
    addressed(&plane, "rotated").await;
    eventually(10, "ready", || async {
        ctl.handle.is_ready().then_some(())
    })
    .await;
    stop.cancel();
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn an_ipam_outage_costs_a_probe_per_interval_and_ends_within_seconds() {
    let plane = Plane::start().await;
    let mut s = settings();
    s.ipam_probe_interval = Duration::from_millis(200);
    s.concurrency = 4;
    let ctl = start_controller(&plane, s).await;
    plane.set_faults(vec![fault(PLATFORM, "*", "*", 503)]);
    plane.reset_counters();
    let outage = Instant::now();
    for i in 0..100 {
        plane.create_shard(&format!("waiting-{i}")).await;
    }
    let reasons = reason_containing(&ctl, "IPAM does not answer (server-error)").await;
    assert!(!ctl.handle.is_ready(), "{reasons:?}");
    // Let the outage last a while: its length is what is being measured against.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let lasted = outage.elapsed();
    let attempts = plane.requests(|k| k.plane == PLATFORM && k.resource.starts_with("ip"));
    let probes = (lasted.as_millis() / 200) as u64 + 1;
    assert!(
        attempts <= 5 + probes + 2,
        "{attempts} IPAM requests in {lasted:?} for 100 waiting shards (threshold 5, {probes} probes)"
    );
    assert!(
        ctl.sample(
            "egress_address_transport_errors_total",
            &[("plane", "ipam"), ("cause", "server-error")]
        ) >= 5
    );

    plane.clear_faults();
    let back = Instant::now();
    for i in 0..100 {
        addressed(&plane, &format!("waiting-{i}")).await;
    }
    eprintln!(
        "outage of {lasted:?}: {attempts} IPAM requests for 100 waiting shards; all addressed {:?} after IPAM came back",
        back.elapsed()
    );
    eventually(10, "ready again", || async {
        ctl.handle.is_ready().then_some(())
    })
    .await;
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn an_oversized_answer_is_refused_naming_the_limit() {
    let plane = Plane::start().await;
    inflate_claims(&plane, 3 << 20);
    let (ipam, _follower) = following_ipam_client(
        &plane.lp().kubeconfig_path("cell", ADMIN).unwrap(),
        PLATFORM,
        Transport::default(),
        None,
    )
    .await
    .unwrap();
    let ctl = start_controller_with(settings(), plane.cell(), ipam).await;
    plane.create_shard("flooded").await;
    eventually(10, "the answer refused", || async {
        (ctl.sample(
            "egress_address_transport_errors_total",
            &[("plane", "ipam"), ("cause", "too-large")],
        ) >= 1)
            .then_some(())
    })
    .await;
    reason_containing(&ctl, "IPAM does not answer (too-large)").await;
    assert!(
        plane
            .shard_now("flooded")
            .unwrap()
            .spec
            .shard_address_ipv6
            .is_empty()
    );
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn an_untrusted_server_certificate_is_named() {
    let plane = Plane::start_tls().await;
    let stranger = Plane::start_tls().await;
    // The right server, with another CA in the kubeconfig.
    let ca = |text: &str| -> String {
        let doc: serde_json::Value = serde_json::from_str(text).unwrap();
        doc["clusters"][0]["cluster"]["certificate-authority-data"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let good = plane.kubeconfig_text();
    let wrong = good.replace(&ca(&good), &ca(&stranger.kubeconfig_text()));
    assert_ne!(good, wrong);
    let path = plane.dir().join("wrong-ca.kubeconfig");
    std::fs::write(&path, wrong).unwrap();
    let (ipam, _follower) = following_ipam_client(&path, PLATFORM, Transport::default(), None)
        .await
        .unwrap();
    let ctl = start_controller_with(settings(), plane.cell(), ipam).await;
    plane.create_shard("distrustful").await;
    reason_containing(&ctl, "IPAM does not answer (certificate)").await;
    assert!(
        ctl.sample(
            "egress_address_transport_errors_total",
            &[("plane", "ipam"), ("cause", "certificate")]
        ) >= 1
    );
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn an_unreachable_cell_is_named() {
    let plane = Plane::start().await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let text = plane
        .kubeconfig_text()
        .replace(&plane.lp().base_url(), &format!("http://127.0.0.1:{port}"));
    let path = plane.dir().join("nowhere.kubeconfig");
    std::fs::write(&path, text).unwrap();
    let (cell, _) = following_cell_client(Some(&path), Transport::default(), None)
        .await
        .unwrap();
    let ctl = start_unready(settings(), cell, plane.ipam_for_controller().await);
    reason_containing(&ctl, "the cell's API server does not answer (refused)").await;
    ctl.stop().await.unwrap();
}
