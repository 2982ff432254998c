//! The README's first command, end to end: `demo --once` must address every shard.

use std::collections::BTreeSet;
use std::net::Ipv6Addr;
use std::process::Command;

use crate::common::{LAB, one_fleet_at_a_time_blocking};

#[test]
fn demo_once_addresses_every_shard_and_prints_the_table() {
    let _turn = one_fleet_at_a_time_blocking();
    // Piped, as in CI: stdout is not a terminal.
    let out = Command::new(LAB)
        .args(["demo", "--once", "--shards", "6", "--timeout", "60s"])
        .output()
        .expect("the demo starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "demo failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );

    let rows: Vec<&str> = stdout.lines().filter(|l| l.starts_with("shard-")).collect();
    assert_eq!(rows.len(), 6, "one row per shard:\n{stdout}");
    let mut addresses = BTreeSet::new();
    for row in rows {
        let cols: Vec<&str> = row.split_whitespace().collect();
        let address: Ipv6Addr = cols[1]
            .parse()
            .unwrap_or_else(|_| panic!("row without an address: {row}"));
        assert_eq!(
            address.segments()[0..2],
            [0x2001, 0xdb8],
            "inside the documentation prefix: {row}"
        );
        assert!(
            cols[2].starts_with("IPClaim/egress-shard-ipv6.") && cols[2].contains(".egress.shard-"),
            "holder: {row}"
        );
        assert_ne!(
            address.segments()[4..],
            [0, 0, 0, 0],
            "never a subnet-router anycast address: {row}"
        );
        assert!(row.ends_with(" ms"), "time to address: {row}");
        addresses.insert(address);
    }
    assert_eq!(addresses.len(), 6, "no address twice");
    assert!(stdout.contains("SHARD") && stdout.contains("TIME TO ADDRESS"));
    // No progress bar redrawn into a pipe: a CI log gets lines, not carriage returns.
    assert!(
        !stdout.contains('\r'),
        "progress redrawn into a pipe:\n{stdout:?}"
    );
    assert!(stdout.contains("6 of 6 shards addressed"), "{stdout}");
}

#[test]
fn demo_rejects_a_bad_duration() {
    let out = Command::new(LAB)
        .args(["demo", "--once", "--timeout", "soon"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("\"soon\" is not a duration"));
}

#[test]
fn demo_on_the_real_cell_names_the_server_and_addresses_every_shard() {
    let _turn = one_fleet_at_a_time_blocking();
    let out = Command::new(LAB)
        .args([
            "demo",
            "--cell",
            "real",
            "--once",
            "--shards",
            "4",
            "--timeout",
            "60s",
        ])
        .output()
        .expect("the demo starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo --cell real failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("(kube-apiserver v1.37."), "{stdout}");
    assert!(stdout.contains("4 of 4 shards addressed"), "{stdout}");
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.starts_with("shard-") && l.contains("2001:db8:"))
            .count(),
        4,
        "{stdout}"
    );
}
