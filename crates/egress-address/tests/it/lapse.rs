//! A leader whose lease renewals are late, or that is paused for less than its lease, still owes
//! every shard the watch delivered meanwhile its address: the renewal that lands is no change of
//! leadership, so an event dropped while the token was past its deadline would never come back.
//! The real controller process, against localplane with latency on Lease updates.

use std::time::Duration;

use localplane::FaultRule;

use crate::binary::{Launch, Proc, http_get, wait_ready};
use crate::common::*;

/// Renewals are overdue whenever an answer takes longer than the renew deadline less the retry
/// period (2 s here) and are still made while it is shorter than the renew deadline (3 s).
const TIMINGS: [&str; 3] = [
    "--leader-election-lease-duration=4s",
    "--leader-election-renew-deadline=3s",
    "--leader-election-retry-period=1s",
];

/// No sweep: these tests judge the watch alone, which must lose nothing by itself.
const NO_SWEEP: (&str, &str) = ("EGRESS_ADDRESS_UNADDRESSED_SWEEP_INTERVAL", "0");

fn start(plane: &Plane, identity: &str) -> Proc {
    Proc::launch(
        plane,
        identity,
        Launch {
            env: &[NO_SWEEP],
            lease_flags: Some(&TIMINGS),
            ..Launch::default()
        },
    )
}

async fn metric(p: &Proc, name: &str) -> Option<u64> {
    let (_, body) = http_get(p.metrics, "/metrics").await?;
    Some(sample(&body, name, &[]))
}

#[tokio::test]
async fn shards_made_while_renewals_are_late_are_all_addressed() {
    let plane = Plane::start().await;
    let p = start(&plane, "slow-renewals");
    wait_ready(&p).await;
    let leader = eventually(10, "the lease", || async {
        holder(&plane)
            .await
            .filter(|h| h.starts_with("slow-renewals"))
    })
    .await;
    // Every renewal answered after 2.5 s: it lands, and the token is past its deadline for 3 s
    // of every 3.5.
    plane.set_faults(vec![FaultRule {
        plane: Some("cell".into()),
        verb: Some("update".into()),
        resource: Some("leases".into()),
        latency_ms: 2500,
        ..Default::default()
    }]);
    let (code, body) = eventually(10, "/ready to say the renewal is overdue", || async {
        let (code, body) = http_get(p.probe, "/ready").await?;
        body.contains("overdue").then_some((code, body))
    })
    .await;
    assert_eq!(
        code, 200,
        "a late renewal is no reason to be unready: {body}"
    );
    assert!(metric(&p, "egress_address_leader_lease_lapses_total").await >= Some(1));
    let names: Vec<String> = (0..16).map(|i| format!("late-{i}")).collect();
    for name in &names {
        plane.create_shard(name).await;
        // A shard at each point of the renewal cycle: most of them land while it is overdue.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    plane.clear_faults();
    for name in &names {
        addressed(&plane, name).await;
    }
    assert_eq!(
        holder(&plane).await,
        Some(leader),
        "the lease was never lost, so nothing but the watch queued these shards"
    );
    let logs = std::fs::read_to_string(&p.log).unwrap();
    assert!(
        logs.contains("the leader lease renewal is past its deadline"),
        "the lapse is logged at warn: {logs}"
    );
}

#[tokio::test]
async fn a_shard_made_while_the_leader_is_paused_is_addressed_when_it_wakes() {
    let plane = Plane::start().await;
    plane.create_shard("before").await;
    let p = start(&plane, "paused");
    wait_ready(&p).await;
    addressed(&plane, "before").await;
    let leader = holder(&plane).await;
    let pid = p.child.id().to_string();
    signal("-STOP", &pid);
    eventually(5, "the controller stopped", || async {
        stopped(&pid).then_some(())
    })
    .await;
    plane.create_shard("during").await;
    // Past the renew deadline (3 s), under the lease (4 s): the leader wakes still holding it.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    signal("-CONT", &pid);
    addressed(&plane, "during").await;
    assert_eq!(holder(&plane).await, leader, "the lease was never lost");
}

fn signal(which: &str, pid: &str) {
    let status = std::process::Command::new("kill")
        .args([which, pid])
        .status()
        .unwrap();
    assert!(status.success(), "kill {which} {pid}");
}

/// Whether the process is stopped by a signal (state `T` in /proc).
fn stopped(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('T'))
        })
        .unwrap_or(false)
}
