//! The bounded chaos run CI makes: 200 shards, faults on both planes, SIGKILLs, two controllers
//! with and without leader election, shards created and deleted throughout. It asserts the
//! invariants, never timings. Needs the `egress-address-controller` binary of the same profile
//! (built by `cargo test --workspace`, or `cargo build -p egress-address`).

use egress_address_cli::chaos;

use crate::common::one_fleet_at_a_time;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_invariants_hold_under_faults_kills_and_churn() {
    let _turn = one_fleet_at_a_time().await;
    let report = chaos::run(&chaos::ci_options(7))
        .await
        .expect("the chaos run completes");
    eprintln!("{}", serde_json::to_string_pretty(&report).unwrap());

    // The run must actually have been chaotic, or passing proves nothing.
    assert!(report.kills >= 3, "only {} kills", report.kills);
    assert!(report.controller_starts >= 5);
    assert!(report.injected_failures > 0, "no fault was injected");
    assert!(report.deleted_shards > 0 && report.created_during_run > 0);

    assert!(
        report.unaddressed.is_empty(),
        "unaddressed: {:?}",
        report.unaddressed
    );
    assert!(
        report.shared_addresses.is_empty(),
        "one address, several shards: {:?}",
        report.shared_addresses
    );
    assert!(
        report.ref_mismatches.is_empty(),
        "addresses not backed by their record: {:?}",
        report.ref_mismatches
    );
    assert_eq!(
        report.write_once_rejections, 0,
        "a write-once rejection was needed"
    );
    assert!(
        report.leftover_claims.is_empty(),
        "claims left for shards deleted while a controller was acting: {:?}",
        report.leftover_claims
    );
    assert!(report.violations().is_empty(), "{:?}", report.violations());
}
