//! localplane judged by the real kube-apiserver: every request shape of the catalogue replayed
//! on both, and every difference either explained (docs/testing.md) or a failure.

use egress_address_lab::conformance::{self, Verdict, scenarios, shapes};

#[tokio::test]
async fn localplane_answers_every_request_shape_as_the_real_apiserver_does() {
    // The real control plane takes free ports as it starts: not while a fleet takes its own.
    let _turn = crate::common::one_fleet_at_a_time().await;
    let report = conformance::run(shapes::catalogue(), scenarios::catalogue())
        .await
        .expect("both servers start and answer");
    let mut table = Vec::new();
    report.write_table(&mut table).expect("a table writes");
    let table = String::from_utf8_lossy(&table);
    let unexplained: Vec<&str> = report.unexplained().iter().map(|r| r.id).collect();
    assert!(
        unexplained.is_empty(),
        "localplane answers otherwise than the real apiserver, unexplained: {unexplained:?}\n{table}"
    );
    assert!(
        report.stale_explanations.is_empty(),
        "explained differences that no longer differ: {:?}\n{table}",
        report.stale_explanations
    );
    assert_eq!(
        report.rows.len(),
        shapes::catalogue().len() + scenarios::catalogue().len()
    );
    assert!(report.rows.len() >= 110, "{} shapes", report.rows.len());
    assert!(report.explained() <= 5, "{table}");
    assert!(
        report
            .rows
            .iter()
            .all(|r| r.verdict != Verdict::Same || r.differences.is_empty()),
        "{table}"
    );
    println!("{table}");
}

#[test]
fn the_command_reports_a_bad_flag_as_a_usage_error() {
    let out = std::process::Command::new(crate::common::LAB)
        .args(["conformance", "--output", "yaml"])
        .output()
        .expect("the binary runs");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}
