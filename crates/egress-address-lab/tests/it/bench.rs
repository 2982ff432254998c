//! The benchmark command at a small size: what it counts must be right, whatever the timings.
//! Needs the `egress-address-controller` binary of the same profile (built by
//! `cargo test --workspace`).

use egress_address_lab::bench::churn::{self, ChurnArgs};
use egress_address_lab::bench::outage::{self, Down, OutageArgs};
use egress_address_lab::bench::{BenchArgs, Common, Objects, measure};
use egress_address_lab::cell::CellKind;
use egress_address_lab::fleet::locate_controller;

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
        objects: Objects::Production,
        cell: CellKind::Local,
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
    // A new shard costs one claim create and one shard patch, nothing else.
    let per_verb = |plane: &str, verb: &str| {
        m.worst()
            .by_verb
            .get(&(plane.to_string(), verb.to_string()))
            .copied()
            .unwrap_or(0)
    };
    assert_eq!(per_verb("platform", "create"), 40);
    assert_eq!(per_verb("cell", "patch"), 40);
    assert_eq!(per_verb("cell", "update"), 0, "no shard is PUT");
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
    // The floor beside it: a lister that kept every shard (fewer fails the measurement).
    assert!(
        restart.ideal_lister.is_some_and(|l| !l.is_zero()),
        "the ideal lister ran beside the restart: {:?}",
        restart.ideal_lister
    );
    assert_eq!(
        restart.ideal_lister_runs.len(),
        2,
        "the ideal lister ran before and after the restart"
    );
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

fn common() -> Common {
    Common {
        controller_bin: None,
        objects: Objects::Production,
        output: None,
        cell: CellKind::Local,
    }
}

/// 20 held shards, 10 new ones over a second, and `delete_share` of the churn deletes.
fn tiny_churn(delete_share: f64) -> ChurnArgs {
    ChurnArgs {
        common: common(),
        shards: 20,
        rate: 10.0,
        seconds: 1,
        delete_share,
        concurrency: 2,
        repeat: 1,
        run_timeout_seconds: 120,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_times_every_new_shard_on_both_sides() {
    let _turn = one_fleet_at_a_time().await;
    let args = tiny_churn(0.0);
    let bin = locate_controller(None).expect("the controller binary is built");
    let report = churn::measure(&args, &bin).await.expect("the churn runs");
    eprintln!("{}", report.markdown());
    for (side, waits) in [("controller", &report.controller), ("ideal", &report.ideal)] {
        assert_eq!(waits.waits.len(), 10, "{side}: every new shard was timed");
        assert_eq!(waits.unaddressed, 0, "{side}");
        assert!(waits.quantile(0.5) <= waits.quantile(0.99), "{side}");
        assert_eq!(waits.deleted(), 0, "{side}: nothing deleted by default");
    }
    // Two requests per new shard (claim, update), whatever the drift check adds: it waits a
    // whole interval (an hour) before its first read.
    assert_eq!(report.controller_requests_per_shard, 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_with_deletes_times_every_release_on_both_sides() {
    let _turn = one_fleet_at_a_time().await;
    // As many deletes as creates: 10 of the 20 held shards.
    let args = tiny_churn(0.5);
    let bin = locate_controller(None).expect("the controller binary is built");
    // The run itself fails if a deleted shard's claim is left on either side.
    let report = churn::measure(&args, &bin).await.expect("the churn runs");
    let md = report.markdown();
    eprintln!("{md}\n{}", report.line());
    assert_eq!(report.deletes, 10);
    for (side, waits) in [("controller", &report.controller), ("ideal", &report.ideal)] {
        assert_eq!(waits.waits.len(), 10, "{side}: every new shard was timed");
        assert_eq!(waits.unaddressed, 0, "{side}");
        assert_eq!(waits.releases.len(), 10, "{side}: every release was timed");
        assert_eq!(waits.unreleased, 0, "{side}");
        assert!(
            waits.release_quantile(0.5) <= waits.release_quantile(0.99),
            "{side}"
        );
        assert!(waits.release_max() > std::time::Duration::ZERO, "{side}");
    }
    // The creates' figure stays the creates' alone: the releases are counted apart.
    assert_eq!(report.controller_requests_per_shard, 2.0);
    assert!(report.controller_release_requests_per_deleted >= 1.0);
    assert!(md.contains("| 10 | "), "{md}");
    assert!(report.line().contains("released p50"), "{}", report.line());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_costs_a_probe_per_interval_and_every_shard_is_addressed_after() {
    let _turn = one_fleet_at_a_time().await;
    let args = OutageArgs {
        common: common(),
        pending: 40,
        outage_seconds: 3,
        down: Down::Reset,
        concurrency: 4,
        probe_interval_seconds: 0.5,
        no_ideal: true,
        run_timeout_seconds: 120,
    };
    let bin = locate_controller(None).expect("the controller binary is built");
    let report = outage::measure(&args, &bin).await.expect("the outage runs");
    eprintln!("{}", report.markdown());
    assert_eq!(report.per_second.len(), 3, "one count per second of outage");
    // The breaker opens after 5 failures in a row (up to 4 more were already in flight), then
    // one probe per half second.
    let attempts = report.attempts();
    assert!(attempts >= 5, "the outage was seen: {attempts}");
    assert!(attempts <= 5 + 4 + 3 * 2 + 1, "{:?}", report.per_second);
    assert_eq!(report.addressed, 40);
    assert!(report.converged.is_some());
    assert!(report.first_answer.is_some());
    // Every shard claims once after the outage (plus a handful of retries for the shards whose
    // attempts failed before the breaker opened, all answered 2xx/409 now).
    assert!(
        (40..=40 + 9).contains(&report.recovery_requests),
        "{}",
        report.recovery_requests
    );
}

/// The matrix on the real kube-apiserver and etcd: the cell's requests come from the apiserver's
/// own `apiserver_request_total`, IPAM's from localplane; what it counts must be right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_real_cell_the_bench_counts_from_the_apiservers_own_counters() {
    // The real control plane takes free ports as it starts: not while a fleet takes its own.
    let _turn = one_fleet_at_a_time().await;
    let args = BenchArgs {
        shards: vec![40],
        concurrency: vec![4],
        repeat: 1,
        idle_seconds: 0,
        no_restart: false,
        restart_watch_seconds: 1,
        controller_bin: None,
        run_timeout_seconds: 180,
        output: None,
        objects: Objects::Production,
        cell: CellKind::Real,
    };
    let bin = locate_controller(None).expect("the controller binary is built");
    let report = measure(&args, &bin)
        .await
        .expect("the bench runs on the real cell");
    let md = report.markdown();
    eprintln!("{md}");

    let [m] = report.runs.as_slice() else {
        panic!("one configuration was asked for: {:?}", report.runs);
    };
    assert!(m.on_real_cell(), "the control plane's use was read");
    let per_verb = |plane: &str, verb: &str| {
        m.worst()
            .by_verb
            .get(&(plane.to_string(), verb.to_string()))
            .copied()
            .unwrap_or(0)
    };
    // Every shard addressed (the run ends only then), each with one claim and one patch, as
    // the apiserver counted them.
    assert_eq!(per_verb("cell", "patch"), 40, "{:?}", m.worst().by_verb);
    assert_eq!(per_verb("cell", "update"), 0, "no shard is PUT");
    assert_eq!(
        per_verb("platform", "create"),
        40,
        "{:?}",
        m.worst().by_verb
    );
    assert!(per_verb("cell", "list") >= 1, "the initial list");
    assert_eq!(m.per_new_shard(), 2.0);
    assert_eq!(m.worst().failed, 0, "no refusal or conflict");
    assert_eq!(m.worst().events, 40, "one AddressAssigned event per shard");
    let (ctl_cpu, ideal_cpu) = m.control_plane_cpu_per_shard_ms();
    assert!(ctl_cpu.is_some() && ideal_cpu.is_some());
    assert!(m.control_plane_rss().0.is_some_and(|b| b > 50 << 20));
    let restart = report.restart.as_ref().expect("restart was measured");
    assert_eq!(restart.write_count(), 0, "a restart writes nothing");
    assert!(
        md.contains("2.000 requests per new shard (≤ 2: met)"),
        "{md}"
    );
    assert!(md.contains("the real kube-apiserver"), "{md}");
}
