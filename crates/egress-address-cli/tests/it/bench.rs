//! The benchmark command at a small size: what it counts must be right, whatever the timings.
//! Needs the `egress-address-controller` binary of the same profile (built by
//! `cargo test --workspace`).

use egress_address_cli::bench::{BenchArgs, measure};
use egress_address_cli::fleet::locate_controller;

use crate::common::one_fleet_at_a_time;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bench_counts_requests_events_idle_and_restart() {
    let _turn = one_fleet_at_a_time().await;
    let args = BenchArgs {
        shards: vec![40],
        concurrency: vec![4],
        repeat: 2,
        idle_seconds: 2,
        no_restart: false,
        restart_watch_seconds: 1,
        controller_bin: None,
        run_timeout_seconds: 120,
        output: None,
    };
    let bin = locate_controller(None).expect("the controller binary is built");
    let report = measure(&args, &bin).await.expect("the bench runs");
    let md = report.markdown();
    eprintln!("{md}");

    let [m] = report.runs.as_slice() else {
        panic!("one configuration was asked for: {:?}", report.runs);
    };
    assert_eq!(m.walls().len(), 2, "one controller wall per repeat");
    assert_eq!(m.ideal_walls.len(), 2, "one ideal wall per repeat");
    // A new shard costs one claim create and one shard update, nothing else.
    let per_verb = |plane: &str, verb: &str| {
        m.worst()
            .by_verb
            .get(&(plane.to_string(), verb.to_string()))
            .copied()
            .unwrap_or(0)
    };
    assert_eq!(per_verb("platform", "create"), 40);
    assert_eq!(per_verb("cell", "update"), 40);
    assert_eq!(m.per_new_shard(), 2.0);
    assert!(
        m.worst().startup_requests() >= 2,
        "the initial list and watch count"
    );
    assert!(m.per_shard() > m.per_new_shard());
    assert_eq!(m.worst().events, 40, "one AddressAssigned event per shard");
    assert!(
        m.events_done() >= m.wall(),
        "events are counted until they land"
    );
    assert_eq!(m.worst().failed, 0);
    assert!(m.peak_rss().is_some_and(|b| b > 1 << 20));
    assert!(m.cpu().is_some_and(|c| !c.is_zero()));
    assert!(m.ready().is_some());

    let idle = report.idle.as_ref().expect("idle was measured");
    assert_eq!(
        idle.other.values().sum::<u64>(),
        0,
        "idle: {:?}",
        idle.other
    );
    let restart = report.restart.as_ref().expect("restart was measured");
    assert_eq!(restart.write_count(), 0, "a restart writes nothing");
    assert!(
        restart.reads.values().sum::<u64>() >= 2,
        "a restart lists and watches"
    );

    assert!(
        md.contains("2.000 requests per new shard (≤ 2: met)"),
        "{md}"
    );
    assert!(md.contains("| 40 | 4 |"), "{md}");
}
