//! `audit` against a live localplane holding one shard in every state it can judge.

use std::process::Command;

use egress_address_lab::fleet;
use egress_api::ipam::IPClaim;
use kube::api::PostParams;
use localplane::testing::{CLAIM_NAMESPACE, PLATFORM_PROJECT, World, shards_key};
use serde_json::{Value, json};

use crate::common::tool;

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
    let api = world.claims();
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

/// Runs the real binary's `audit` with the world's kubeconfigs (the cell's unless `extra` names
/// one).
async fn run_audit(world: &World, extra: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(tool());
    // The flags' environment fallbacks must not come from whoever runs the tests.
    for var in [
        "PLATFORM_PROJECT",
        "CLAIM_NAMESPACE",
        "LOCATION",
        "CELL_KUBECONFIG",
    ] {
        cmd.env_remove(var);
    }
    cmd.arg("audit").args(extra);
    if !extra.contains(&"--cell-kubeconfig") {
        cmd.arg("--cell-kubeconfig").arg(world.cell_kubeconfig());
    }
    cmd.arg("--ipam-kubeconfig").arg(world.ipam_kubeconfig());
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_reports_every_verdict_and_fails_on_inconsistency() {
    let world = fleet::world().start().await.unwrap();
    let good = claim(&world, "c-good").await;
    claim(&world, "c-moved").await;
    let cell = world.lp().cell();
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
        world
            .shards()
            .delete(name, &Default::default())
            .await
            .unwrap();
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
    world.shutdown().await;
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
    let api = world.claims();
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
    let world = fleet::world().start().await.unwrap();
    let cell = world.lp().cell();
    cell.ensure_namespace(NS);
    let cell_id = world.lp().cell_uid();
    let claim_of =
        |name: &str, uid: &str| egress_address::ipam::naming::claim_name(&cell_id, NS, name, uid);
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
        Some(("IPClaim", &claim_of("kept", &kept_uid))),
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
    assert_eq!(
        orphans[0]["holder"]["name"],
        json!(claim_of("gone", "uid-of-a-deleted-shard"))
    );
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
    world.shutdown().await;
}

/// The findings of one run, parsed from the format it was asked for.
fn parsed(out: &std::process::Output, format: &str) -> Vec<Value> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    match format {
        "json" => serde_json::from_str(&stdout).expect("json output"),
        _ => serde_saphyr::from_str(&stdout).expect("yaml output"),
    }
}

fn names(findings: &[Value]) -> Vec<String> {
    let mut v: Vec<String> = findings
        .iter()
        .map(|f| {
            format!(
                "{}/{}",
                f["namespace"].as_str().unwrap(),
                f["name"].as_str().unwrap()
            )
        })
        .collect();
    v.sort();
    v
}

/// A world holding one shard whose address is the one its claim holds; that address.
async fn with_a_consistent_shard() -> (World, String) {
    let world = fleet::world().start().await.unwrap();
    let good = claim(&world, "c-good").await;
    world
        .lp()
        .cell()
        .apply_object(shard("consistent", &good, Some(("IPClaim", "c-good"))))
        .unwrap();
    (world, good)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_speaks_table_json_and_yaml_and_filters_by_namespace() {
    let (world, good) = with_a_consistent_shard().await;
    let cell = world.lp().cell();
    cell.ensure_namespace("elsewhere");
    let mut other = shard("hand-set", "2001:db8:ffff::1", None);
    other["metadata"]["namespace"] = json!("elsewhere");
    cell.apply_object(other).unwrap();

    let json_out = run_audit(&world, &["-o", "json"]).await;
    let yaml_out = run_audit(&world, &["-o", "yaml"]).await;
    for out in [&json_out, &yaml_out] {
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let yaml_text = String::from_utf8_lossy(&yaml_out.stdout);
    assert!(
        yaml_text.starts_with("- ") && !yaml_text.contains('{'),
        "block YAML, not JSON:\n{yaml_text}"
    );
    let (json, yaml) = (parsed(&json_out, "json"), parsed(&yaml_out, "yaml"));
    assert_eq!(json, yaml, "the same findings in both formats");
    assert_eq!(names(&json), ["egress/consistent", "elsewhere/hand-set"]);
    let consistent = json.iter().find(|f| f["name"] == "consistent").unwrap();
    assert_eq!(consistent["verdict"], "consistent");
    assert_eq!(consistent["address"], json!(good));

    // Every namespace is the default; -A says so explicitly; -n keeps one.
    let all = run_audit(&world, &["-A", "-o", "yaml"]).await;
    assert_eq!(names(&parsed(&all, "yaml")), names(&json));
    for flag in ["-n", "--namespace"] {
        let one = run_audit(&world, &[flag, "elsewhere", "-o", "json"]).await;
        assert_eq!(one.status.code(), Some(0));
        assert_eq!(names(&parsed(&one, "json")), ["elsewhere/hand-set"]);
    }

    let table = run_audit(&world, &["-n", "egress"]).await;
    let text = String::from_utf8_lossy(&table.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "a header and one row:\n{text}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(header, ["SHARD", "ADDRESS", "HOLDER", "VERDICT", "DETAIL"]);
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        row[..4],
        [
            "egress/consistent",
            good.as_str(),
            "IPClaim/c-good",
            "consistent"
        ]
    );
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_exits_0_consistent_1_inconsistent_2_unable_to_run() {
    let (world, _) = with_a_consistent_shard().await;
    let cell = world.lp().cell();
    assert_eq!(run_audit(&world, &[]).await.status.code(), Some(0));

    cell.apply_object(shard(
        "lost",
        "2001:db8:ffff::2",
        Some(("IPClaim", "c-gone")),
    ))
    .unwrap();
    let found = run_audit(&world, &[]).await;
    assert_eq!(found.status.code(), Some(1), "a finding is 1");
    assert!(found.stderr.is_empty(), "a finding is not an error");

    // Could not run: a bad flag, a kubeconfig that is not there or not one, a cell that does not
    // answer. Each is 2, with the reason on stderr and nothing on stdout.
    let dir = world.dir();
    let malformed = dir.join("malformed.kubeconfig");
    std::fs::write(&malformed, "clusters: [this is: not a kubeconfig\n").unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let nowhere = dir.join("nowhere.kubeconfig");
    let text = std::fs::read_to_string(world.cell_kubeconfig()).unwrap();
    std::fs::write(
        &nowhere,
        text.replace(&world.lp().base_url(), &format!("http://127.0.0.1:{port}")),
    )
    .unwrap();
    let missing = dir.join("no-such.kubeconfig");
    let cases: [(&str, Vec<String>, &str); 7] = [
        (
            "a bad output format",
            vec!["-o".into(), "xml".into()],
            "xml",
        ),
        (
            "--cell-id for some cells only",
            vec![
                "--cell-kubeconfig".into(),
                world.cell_kubeconfig().display().to_string(),
                "--cell-kubeconfig".into(),
                world.cell_kubeconfig().display().to_string(),
                "--cell-id".into(),
                "a".into(),
            ],
            "--cell-id is given for 1 of 2 cells",
        ),
        (
            "one cell given twice",
            vec![
                "--cell-kubeconfig".into(),
                world.cell_kubeconfig().display().to_string(),
                "--cell-kubeconfig".into(),
                world.kubeconfig("cell", "admin").display().to_string(),
            ],
            "reach one cell",
        ),
        (
            "-n with -A",
            vec!["-n".into(), "egress".into(), "-A".into()],
            "cannot be used with",
        ),
        (
            "a missing cell kubeconfig",
            vec!["--cell-kubeconfig".into(), missing.display().to_string()],
            "no-such.kubeconfig",
        ),
        (
            "a malformed cell kubeconfig",
            vec!["--cell-kubeconfig".into(), malformed.display().to_string()],
            "malformed.kubeconfig",
        ),
        (
            "an unreachable cell (its identity is the first thing read)",
            vec!["--cell-kubeconfig".into(), nowhere.display().to_string()],
            "reading the identity of the cell of",
        ),
    ];
    for (what, args, says) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run_audit(&world, &args).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
        assert!(stderr.contains(says), "{what}: {stderr}");
        assert!(out.stdout.is_empty(), "{what}: no findings are printed");
    }
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_left_releasing_is_shown_and_one_whose_incarnation_cannot_be_told_is_never_released()
 {
    let world = fleet::world().start().await.unwrap();
    world.lp().cell().ensure_namespace(NS);
    let cell_id = world.lp().cell_uid();
    // A gone shard's claim that IPAM could not finish releasing (Milo's second step failed).
    controller_claim(&world, &cell_id, "stuck", "uid-of-a-deleted-shard", "dfw").await;
    let stuck_name =
        egress_address::ipam::naming::claim_name(&cell_id, NS, "stuck", "uid-of-a-deleted-shard");
    world.set_faults(vec![localplane::FaultRule {
        verb: Some("delete".into()),
        resource: Some("ipclaims".into()),
        error_rate: 1.0,
        when: localplane::FaultWhen::Release,
        ..Default::default()
    }]);
    let refused = world
        .claims()
        .delete(&stuck_name, &Default::default())
        .await
        .expect_err("the release step fails");
    assert!(
        refused.to_string().contains("release allocation after"),
        "{refused}"
    );
    world.clear_faults();
    // A claim marked for a shard of this cell under a name its marks do not derive: whose it is
    // cannot be told.
    let mut handmade =
        egress_address::ipam::spec::desired_claim(&egress_address::ipam::spec::ClaimRequest {
            class_name: "datum-egress-shard-address-ipv6",
            claim_namespace: CLAIM_NAMESPACE,
            location: "dfw",
            cell: &cell_id,
            shard_namespace: NS,
            shard_name: "handmade",
            shard_uid: "uid-of-nobody",
        });
    handmade.metadata.name = Some("egress-shard-ipv6.handmade".into());
    world
        .claims()
        .create(&PostParams::default(), &handmade)
        .await
        .unwrap();

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
    assert_eq!(out.status.code(), Some(1));
    let findings = parsed(&out, "json");
    let verdict_of = |name: &str| {
        findings
            .iter()
            .find(|f| f["name"] == name)
            .map(|f| f["verdict"].as_str().unwrap().to_string())
    };
    assert_eq!(
        verdict_of("stuck").as_deref(),
        Some("releasing"),
        "{findings:#?}"
    );
    assert_eq!(
        verdict_of("handmade").as_deref(),
        Some("untold-incarnation"),
        "{findings:#?}"
    );

    // Releasing the orphans retries the stuck one's DELETE, and leaves the untold one, naming it.
    let mut release = scoped.to_vec();
    release.extend(["--release-orphaned-claims", "--yes"]);
    let out = run_audit(&world, &release).await;
    assert_eq!(
        out.status.code(),
        Some(1),
        "the untold claim fails the run: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let findings = parsed(&out, "json");
    let stuck_finding = findings.iter().find(|f| f["name"] == "stuck").unwrap();
    assert_eq!(
        stuck_finding["release"]["action"], "released",
        "{stuck_finding:#}"
    );
    assert!(world.claim_now(&stuck_name).is_none());
    assert!(
        world.claim_now("egress-shard-ipv6.handmade").is_some(),
        "a claim whose incarnation cannot be told was released"
    );
    assert!(findings.iter().any(|f| f["name"] == "handmade"
        && f["verdict"] == "untold-incarnation"
        && f["holder"]["name"] == "egress-shard-ipv6.handmade"));
    world.shutdown().await;
}
