//! `audit` against a live localplane holding one shard in every state it can judge.

mod common;

use std::process::Command;

use egress_address_cli::bench::harness::{
    CLAIM_NAMESPACE, PLATFORM_PROJECT, World, WorldOptions, shards_key,
};
use egress_api::ipam::IPClaim;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const NS: &str = "egress";

fn shard(name: &str, address: &str, holder: Option<(&str, &str)>) -> Value {
    let mut spec = json!({"targetRef": {"kind": "Node", "name": format!("node-{name}")}});
    if !address.is_empty() {
        spec["shardAddressIPv6"] = json!(address);
    }
    if let Some((kind, claim)) = holder {
        spec["shardAddressIPv6ClaimRef"] = json!({"apiGroup": "ipam.miloapis.com", "kind": kind,
            "project": PLATFORM_PROJECT, "namespace": CLAIM_NAMESPACE, "name": claim});
    }
    json!({"apiVersion": "network.datumapis.com/v1alpha1", "kind": "EgressShard",
           "metadata": {"name": name, "namespace": NS}, "spec": spec})
}

async fn claim(world: &World, name: &str) -> String {
    let api: Api<IPClaim> = Api::namespaced(
        world.admin_client(PLATFORM_PROJECT).unwrap(),
        CLAIM_NAMESPACE,
    );
    let c: IPClaim = serde_json::from_value(json!({
        "apiVersion": "ipam.miloapis.com/v1alpha1", "kind": "IPClaim",
        "metadata": {"name": name, "namespace": CLAIM_NAMESPACE},
        "spec": {"className": "datum-egress-shard-address-ipv6", "ipFamily": "IPv6", "prefixLength": 128,
                 "scope": {"location": {"apiGroup": "networking.datumapis.com", "kind": "Location", "name": "dfw"}},
                 "reclaimPolicy": "Delete"}
    }))
    .unwrap();
    let bound = api
        .create(&PostParams::default(), &c)
        .await
        .expect("IPAM binds the claim");
    let cidr = bound.status.unwrap().allocated_cidr;
    cidr.trim_end_matches("/128").to_string()
}

/// Runs the real binary's `audit` with the world's kubeconfigs.
async fn run_audit(world: &World, extra: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_egress-address"));
    // The flags' environment fallbacks must not come from whoever runs the tests.
    for var in [
        "PLATFORM_PROJECT",
        "CLAIM_NAMESPACE",
        "LOCATION",
        "CELL_KUBECONFIG",
    ] {
        cmd.env_remove(var);
    }
    cmd.arg("audit")
        .args(extra)
        .arg("--cell-kubeconfig")
        .arg(&world.cell_kubeconfig);
    cmd.arg("--ipam-kubeconfig").arg(&world.ipam_kubeconfig);
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_reports_every_verdict_and_fails_on_inconsistency() {
    let world = World::start(&WorldOptions::default()).await.unwrap();
    let good = claim(&world, "c-good").await;
    claim(&world, "c-moved").await;
    let cell = world.lp.cell();
    cell.ensure_namespace(NS);
    for s in [
        shard("consistent", &good, Some(("IPClaim", "c-good"))),
        shard("hand-set", "2001:db8:ffff::1", None),
        shard("pending", "", None),
        shard(
            "missing",
            "2001:db8:ffff::2",
            Some(("IPClaim", "c-nowhere")),
        ),
        shard("mismatch", "2001:db8:ffff::3", Some(("IPClaim", "c-moved"))),
        shard("twin-a", "2001:db8:ffff::4", None),
        shard("twin-b", "2001:db8:ffff::4", None),
    ] {
        cell.apply_object(s).unwrap();
    }
    assert_eq!(cell.objects(&shards_key(), Some(NS)).len(), 7);

    let out = run_audit(&world, &["-o", "json"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "inconsistent state must fail the audit:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let findings: Vec<Value> = serde_json::from_str(&stdout).expect("json output");
    let verdict = |name: &str| {
        findings
            .iter()
            .find(|f| f["name"] == name)
            .unwrap_or_else(|| panic!("no finding for {name}"))["verdict"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(verdict("consistent"), "consistent");
    assert_eq!(verdict("hand-set"), "unattributable");
    assert_eq!(verdict("pending"), "pending");
    assert_eq!(verdict("missing"), "claim-missing");
    assert_eq!(verdict("mismatch"), "address-mismatch");
    assert_eq!(verdict("twin-a"), "address-shared");
    assert_eq!(verdict("twin-b"), "address-shared");

    // With only the consistent, pending and hand-set shards left, the audit passes, as a table.
    for name in ["missing", "mismatch", "twin-a", "twin-b"] {
        let api: Api<egress_api::shard::EgressShard> =
            Api::namespaced(world.admin_client("cell").unwrap(), NS);
        api.delete(name, &Default::default()).await.unwrap();
    }
    let out = run_audit(&world, &[]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("SHARD"), "{stdout}");
    assert!(
        stdout.contains("egress/consistent") && stdout.contains(&good),
        "{stdout}"
    );
    world.lp.shutdown().await;
}

/// Creates the claim the controller of `cell` would make for one incarnation of a shard, in
/// `location`; its address.
async fn controller_claim(
    world: &World,
    cell: &str,
    shard_name: &str,
    uid: &str,
    location: &str,
) -> String {
    use egress_address::ipam::spec::{ClaimRequest, desired_claim};
    let api: Api<IPClaim> = Api::namespaced(
        world.admin_client(PLATFORM_PROJECT).unwrap(),
        CLAIM_NAMESPACE,
    );
    let c = desired_claim(&ClaimRequest {
        class_name: "datum-egress-shard-address-ipv6",
        claim_namespace: CLAIM_NAMESPACE,
        location,
        cell,
        shard_namespace: NS,
        shard_name,
        shard_uid: uid,
    });
    let bound = api.create(&PostParams::default(), &c).await.unwrap();
    bound.status.unwrap().allocated_cidr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphaned_claims_are_reported_on_request() {
    let world = World::start(&WorldOptions::default()).await.unwrap();
    let cell = world.lp.cell();
    cell.ensure_namespace(NS);
    let cell_id = common::kube_system_uid(&cell);
    let claim_of = |name: &str| egress_address::ipam::naming::claim_name(&cell_id, NS, name);
    let placeholder = cell.apply_object(shard("kept", "", None)).unwrap();
    let kept_uid = placeholder["metadata"]["uid"].as_str().unwrap().to_string();
    let kept = controller_claim(&world, &cell_id, "kept", &kept_uid, "dfw").await;
    let gone = controller_claim(&world, &cell_id, "gone", "uid-of-a-deleted-shard", "dfw").await;
    // Another location's claim in the same namespace belongs to another cell, and so does a
    // claim another cell of this location marked as its own.
    controller_claim(&world, &cell_id, "elsewhere", "u1", "ord").await;
    controller_claim(&world, "another-cell", "theirs", "u2", "dfw").await;
    cell.apply_object(shard(
        "kept",
        kept.trim_end_matches("/128"),
        Some(("IPClaim", &claim_of("kept"))),
    ))
    .unwrap();

    let plain = run_audit(&world, &["-o", "json"]).await;
    assert!(
        plain.status.success(),
        "without the flag only shards are judged: {}",
        String::from_utf8_lossy(&plain.stdout)
    );

    let scoped = [
        "--orphaned-claims",
        "--platform-project",
        PLATFORM_PROJECT,
        "--location",
        "dfw",
        "-o",
        "json",
    ];
    let out = run_audit(&world, &scoped).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "an orphan fails the audit: {stdout}"
    );
    let findings: Vec<Value> = serde_json::from_str(&stdout).expect("json output");
    let orphans: Vec<&Value> = findings
        .iter()
        .filter(|f| f["verdict"] == "orphaned-claim")
        .collect();
    assert_eq!(orphans.len(), 1, "{stdout}");
    assert_eq!(orphans[0]["name"], "gone");
    assert_eq!(orphans[0]["holder"]["name"], json!(claim_of("gone")));
    assert_eq!(orphans[0]["recordCidr"], json!(gone));
    assert!(
        findings
            .iter()
            .any(|f| f["name"] == "kept" && f["verdict"] == "consistent")
    );

    // The flag without the location it needs is refused before anything is read.
    let out = run_audit(&world, &["--orphaned-claims", "--platform-project", "p"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--location"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    world.lp.shutdown().await;
}
