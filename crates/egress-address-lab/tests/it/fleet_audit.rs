//! `audit` over two cells claiming from one IPAM, with real processes: controllers SIGKILLed
//! while shards are deleted leave orphans the audit finds (with their cell and shard UID) and
//! releases, a dry run frees nothing, a claim of a cell not given is never an orphan, the
//! controller's own sweep releases its cell's orphans and nothing else, a duplicate written by
//! hand across cells names both shards, and a release racing a shard recreated under its name (or
//! a shard made after the shards were listed) never frees the live shard's claim.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Output};
use std::time::Duration;

use egress_address::ipam::naming::claim_name;
use egress_address::ipam::spec::{ClaimRequest, desired_claim};
use egress_address_lab::fleet::{self, ControllerSpec};
use egress_api::ipam::IPClaim;
use kube::api::PostParams;
use localplane::FaultRule;
use localplane::testing::{
    ADDRESS_CLASS, CLAIM_NAMESPACE, LOCATION, PLATFORM_PROJECT, World, eventually, shard_object,
};
use serde_json::{Value, json};

use crate::common::{one_fleet_at_a_time, tool};

/// Cell A, which serves the platform project's IPAM, and cell B, which claims from it.
async fn two_cells() -> (World, World) {
    let a = fleet::world().start().await.unwrap();
    let b = fleet::world().cell_only().start().await.unwrap();
    (a, b)
}

/// The `audit` command over `cells` (their controllers' kubeconfigs), IPAM reached through
/// `ipam`'s platform project.
fn audit_command(ipam: &World, cells: &[&World], extra: &[&str]) -> Command {
    let mut cmd = Command::new(tool());
    for var in [
        "PLATFORM_PROJECT",
        "CLAIM_NAMESPACE",
        "LOCATION",
        "CELL_KUBECONFIG",
        "CELL_ID",
    ] {
        cmd.env_remove(var);
    }
    cmd.arg("audit");
    for cell in cells {
        cmd.arg("--cell-kubeconfig").arg(cell.cell_kubeconfig());
    }
    cmd.arg("--ipam-kubeconfig")
        .arg(ipam.ipam_kubeconfig())
        .args([
            "--platform-project",
            PLATFORM_PROJECT,
            "--location",
            LOCATION,
        ]);
    if !extra.contains(&"-o") {
        cmd.args(["-o", "json"]);
    }
    cmd.args(extra);
    cmd
}

async fn audit(ipam: &World, cells: &[&World], extra: &[&str]) -> Output {
    let mut cmd = audit_command(ipam, cells, extra);
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

/// The findings printed, after checking the exit code.
fn findings(out: &Output, code: i32) -> Vec<Value> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(code),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).expect("json output")
}

fn with_verdict<'a>(findings: &'a [Value], verdict: &str) -> Vec<&'a Value> {
    findings
        .iter()
        .filter(|f| f["verdict"] == verdict)
        .collect()
}

/// (cell, shard name, shard uid) of each finding.
fn who(findings: &[&Value]) -> BTreeSet<(String, String, String)> {
    findings
        .iter()
        .map(|f| {
            (
                f["cell"].as_str().unwrap().to_string(),
                f["name"].as_str().unwrap().to_string(),
                f["shardUid"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn claim_exists(ipam: &World, name: &str) -> bool {
    ipam.claim_now(name).is_some()
}

/// The claim the controller of `cell` makes for incarnation `uid` of shard `shard`.
fn claim_for(cell: &str, shard: &str, uid: &str) -> IPClaim {
    desired_claim(&ClaimRequest {
        class_name: ADDRESS_CLASS,
        claim_namespace: CLAIM_NAMESPACE,
        location: LOCATION,
        cell,
        shard_namespace: "egress",
        shard_name: shard,
        shard_uid: uid,
    })
}

async fn make_claim(ipam: &World, claim: &IPClaim) -> IPClaim {
    ipam.claims()
        .create(&PostParams::default(), claim)
        .await
        .expect("IPAM binds the claim")
}

fn uid_of(v: &Value) -> String {
    v["metadata"]["uid"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_of_controllers_killed_while_shards_are_deleted_are_found_and_released() {
    let _turn = one_fleet_at_a_time().await;
    let (a, b) = two_cells().await;
    let (id_a, id_b) = (a.lp().cell_uid(), b.lp().cell_uid());
    let ns = a.shard_namespace().to_string();
    let bin = fleet::locate_controller(None).expect("the controller binary is built");
    let spec_a = ControllerSpec {
        leader_elect: false,
        ..ControllerSpec::new(&a, bin, "fleet-a")
    };
    let spec_b = ControllerSpec {
        name: "fleet-b".into(),
        cell_kubeconfig: b.cell_kubeconfig().to_path_buf(),
        ..spec_a.clone()
    };
    let mut controllers = vec![spec_a.spawn().unwrap(), spec_b.spawn().unwrap()];
    for c in &mut controllers {
        c.wait_ready(Duration::from_secs(30)).await.unwrap();
    }
    for cell in [&a, &b] {
        cell.seed_shards(&ns, "w", 0..4);
    }
    for cell in [&a, &b] {
        eventually(30, "every shard of both cells addressed", || async {
            (cell.shard_progress(&ns) == (4, 4)).then_some(())
        })
        .await;
    }
    // Both controllers die; shards are deleted meanwhile; no release follows.
    for c in controllers.drain(..) {
        c.kill().await;
    }
    let mut deleted = BTreeSet::new();
    let mut orphan_claims: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (cell, id) in [(&a, &id_a), (&b, &id_b)] {
        for name in ["w-0", "w-1"] {
            let uid = cell.shard(name).await.metadata.uid.unwrap();
            cell.delete_shard(name).await;
            deleted.insert((id.clone(), name.to_string(), uid.clone()));
            orphan_claims
                .entry(id.clone())
                .or_default()
                .push(claim_name(id, &ns, name, &uid));
        }
    }
    let mut live_claims: Vec<String> = vec![];
    for (cell, id) in [(&a, &id_a), (&b, &id_b)] {
        for n in ["w-2", "w-3"] {
            let uid = cell.shard(n).await.metadata.uid.unwrap();
            live_claims.push(claim_name(id, &ns, n, &uid));
        }
    }

    // The fleet: every orphan, with its cell and its shard's UID; the live shards consistent.
    let all = findings(&audit(&a, &[&a, &b], &["--orphaned-claims"]).await, 1);
    assert_eq!(who(&with_verdict(&all, "orphaned-claim")), deleted);
    assert_eq!(with_verdict(&all, "consistent").len(), 4, "{all:#?}");

    // Cell A alone: B's claims belong to a cell not given, never orphans.
    let only_a = findings(&audit(&a, &[&a], &["--orphaned-claims"]).await, 1);
    let cell_of = |fs: Vec<&Value>| -> BTreeSet<String> {
        fs.iter()
            .map(|f| f["cell"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        cell_of(with_verdict(&only_a, "orphaned-claim")),
        BTreeSet::from([id_a.clone()])
    );
    let not_audited = with_verdict(&only_a, "cell-not-audited");
    assert_eq!(cell_of(not_audited.clone()), BTreeSet::from([id_b.clone()]));
    assert_eq!(
        not_audited.len(),
        4,
        "B's live and orphaned claims alike: {only_a:#?}"
    );

    // A dry run reads, and deletes nothing.
    a.reset_counters();
    let dry = findings(
        &audit(&a, &[&a, &b], &["--release-orphaned-claims"]).await,
        1,
    );
    let orphans = with_verdict(&dry, "orphaned-claim");
    assert_eq!(orphans.len(), 4);
    for f in &orphans {
        assert_eq!(f["release"]["action"], "would-release", "{f:#}");
    }
    assert_eq!(
        a.lp()
            .metrics()
            .count(|k| k.verb == "delete" && k.resource.starts_with("ipclaims")),
        0,
        "a dry run sent a delete"
    );
    for name in orphan_claims.values().flatten() {
        assert!(claim_exists(&a, name), "the dry run released {name}");
    }

    // Cell B's controller, back with the sweep on, releases its own orphans; cell A's stay.
    let sweeper = ControllerSpec {
        name: "fleet-b-sweeping".into(),
        extra_args: vec!["--release-orphaned-claims-every=300ms".into()],
        ..spec_b.clone()
    };
    let mut sweeping = sweeper.spawn().unwrap();
    sweeping.wait_ready(Duration::from_secs(30)).await.unwrap();
    for name in &orphan_claims[&id_b] {
        eventually(30, "cell B's sweep to release its orphan", || async {
            (!claim_exists(&a, name)).then_some(())
        })
        .await;
    }
    for name in &orphan_claims[&id_a] {
        assert!(claim_exists(&a, name), "cell B's sweep released {name}");
    }
    let log = std::fs::read_to_string(&sweeping.log).unwrap();
    assert_eq!(
        log.matches("released the claim of a shard deleted while no controller saw it")
            .count(),
        2,
        "one log line per release:\n{log}"
    );
    sweeping.kill().await;

    // The release, given cell A: A's orphans go.
    let freed = audit(&a, &[&a], &["--release-orphaned-claims", "--yes"]).await;
    let freed_findings = findings(&freed, 0);
    let released: Vec<&Value> = with_verdict(&freed_findings, "orphaned-claim");
    assert_eq!(released.len(), 2);
    for f in &released {
        assert_eq!(f["release"]["action"], "released", "{f:#}");
    }
    assert!(
        String::from_utf8_lossy(&freed.stderr).contains("released 2 orphaned claim(s), left 0"),
        "{}",
        String::from_utf8_lossy(&freed.stderr)
    );
    for name in orphan_claims.values().flatten() {
        assert!(!claim_exists(&a, name), "{name} was not released");
    }
    for name in &live_claims {
        assert!(
            claim_exists(&a, name),
            "a live shard's claim {name} was released"
        );
    }
    let after = findings(&audit(&a, &[&a, &b], &["--orphaned-claims"]).await, 0);
    assert_eq!(with_verdict(&after, "consistent").len(), 4, "{after:#?}");
    b.shutdown().await;
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_written_by_hand_across_cells_names_both_shards() {
    let (a, b) = two_cells().await;
    let id_a = a.lp().cell_uid();
    let ns = a.shard_namespace().to_string();
    // Cell A's w-1 holds its claim; cell B's dup carries w-1's address and ref, written by hand.
    let w1 = a
        .lp()
        .cell()
        .apply_object(shard_object(&ns, "w-1"))
        .unwrap();
    let claim = make_claim(&a, &claim_for(&id_a, "w-1", &uid_of(&w1))).await;
    let address = claim.status.unwrap().allocated_cidr.replace("/128", "");
    let addressed = |name: &str| {
        let mut s = shard_object(&ns, name);
        s["spec"]["shardAddressIPv6"] = json!(address);
        s["spec"]["shardAddressIPv6ClaimRef"] = json!({"apiGroup": "ipam.miloapis.com",
            "kind": "IPClaim", "project": PLATFORM_PROJECT, "namespace": CLAIM_NAMESPACE,
            "name": claim_name(&id_a, &ns, "w-1", &uid_of(&w1))});
        s
    };
    a.lp().cell().apply_object(addressed("w-1")).unwrap();
    b.lp().cell().ensure_namespace(&ns);
    b.lp().cell().apply_object(addressed("dup")).unwrap();

    // Cell B alone: the claim dup names was made for another cell's shard.
    let alone = findings(&audit(&a, &[&b], &[]).await, 1);
    assert_eq!(alone.len(), 1, "{alone:#?}");
    assert_eq!(alone[0]["verdict"], "foreign-claim");
    let detail = alone[0]["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("cell {id_a} shard {ns}/w-1")),
        "{detail}"
    );

    // The fleet: both shards, each naming the other.
    let fleet = findings(&audit(&a, &[&a, &b], &[]).await, 1);
    assert_eq!(fleet.len(), 2, "{fleet:#?}");
    let id_b = b.lp().cell_uid();
    for (me, other, other_cell) in [("w-1", "dup", &id_b), ("dup", "w-1", &id_a)] {
        let f = fleet.iter().find(|f| f["name"] == me).unwrap();
        assert_eq!(f["verdict"], "address-shared", "{f:#}");
        assert_eq!(
            f["sharedWith"],
            json!([{"cell": other_cell, "namespace": ns, "name": other}]),
            "{f:#}"
        );
    }
    let dup = fleet.iter().find(|f| f["name"] == "dup").unwrap();
    assert!(
        dup["detail"]
            .as_str()
            .unwrap()
            .contains("was made for cell"),
        "the copy's own record gives it away: {dup:#}"
    );
    // As a table, each line says its cell.
    let table = audit(&a, &[&a, &b], &["-o", "table"]).await;
    assert_eq!(table.status.code(), Some(1));
    let text = String::from_utf8_lossy(&table.stdout);
    let lines: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        ["CELL", "SHARD", "ADDRESS", "HOLDER", "VERDICT", "DETAIL"],
        "{text}"
    );
    let rows: BTreeSet<(&str, &str, &str)> =
        lines[1..].iter().map(|l| (l[0], l[1], l[4])).collect();
    let (w1, dup) = (format!("{ns}/w-1"), format!("{ns}/dup"));
    assert_eq!(
        rows,
        BTreeSet::from([
            (id_a.as_str(), w1.as_str(), "address-shared"),
            (id_b.as_str(), dup.as_str(), "address-shared"),
        ]),
        "{text}"
    );
    b.shutdown().await;
    a.shutdown().await;
}

/// A fault that holds matching requests for `ms` before serving them.
fn slow(plane: &str, verb: &str, resource: &str, ms: u64) -> FaultRule {
    FaultRule {
        plane: Some(plane.into()),
        verb: Some(verb.into()),
        resource: Some(resource.into()),
        latency_ms: ms,
        ..Default::default()
    }
}

/// Runs `audit` in the background; its output once it exits.
fn spawn_audit(ipam: &World, cells: &[&World], extra: &[&str]) -> tokio::task::JoinHandle<Output> {
    let mut cmd = audit_command(ipam, cells, extra);
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_racing_a_shard_recreated_under_its_name_never_frees_the_new_claim() {
    let (a, b) = two_cells().await;
    let id_b = b.lp().cell_uid();
    let ns = a.shard_namespace().to_string();
    b.lp().cell().ensure_namespace(&ns);
    // Cell B's w-1 was deleted while its controller was down: its claim is an orphan.
    let first = b.create_shard("w-1").await;
    let first_uid = first.metadata.uid.unwrap();
    let orphan = make_claim(&a, &claim_for(&id_b, "w-1", &first_uid)).await;
    b.delete_shard("w-1").await;

    // The release's live read of w-1 is slow; meanwhile w-1 is made again and a writer claims
    // for the new incarnation (taking the name over if the old claim holds it, as a controller
    // whose names carry no incarnation would).
    b.set_faults(vec![slow("cell", "get", "egressshards", 3000)]);
    a.reset_counters();
    let release = spawn_audit(&a, &[&a, &b], &["--release-orphaned-claims", "--yes"]);
    eventually(20, "the release to have listed the claims", || async {
        (a.lp()
            .metrics()
            .count(|k| k.verb == "list" && k.resource.starts_with("ipclaims") && k.code == 200)
            >= 1)
            .then_some(())
    })
    .await;
    let again = b.create_shard("w-1").await;
    let new_claim = claim_for(&id_b, "w-1", again.metadata.uid.as_ref().unwrap());
    let new_name = new_claim.metadata.name.clone().unwrap();
    if a.claim_now(&new_name).is_some() {
        a.claims()
            .delete(&new_name, &Default::default())
            .await
            .unwrap();
    }
    let replacement = make_claim(&a, &new_claim).await;

    // Milo reads no DELETE preconditions: only the name keeps the new claim safe.
    let out = release.await.unwrap();
    b.clear_faults();
    let found = findings(&out, 0);
    let f = with_verdict(&found, "orphaned-claim");
    assert_eq!(f.len(), 1, "{found:#?}");
    assert_eq!(f[0]["release"]["action"], "released", "{:#}", f[0]);
    let kept = a
        .claim_now(&new_name)
        .expect("the release freed the new incarnation's claim");
    assert_eq!(kept.metadata.uid, replacement.metadata.uid);
    assert!(
        a.claim_now(orphan.metadata.name.as_deref().unwrap())
            .is_none(),
        "the orphan was not released"
    );
    b.shutdown().await;
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_of_a_shard_made_after_the_shards_were_listed_is_left() {
    let (a, b) = two_cells().await;
    let id_b = b.lp().cell_uid();
    let ns = a.shard_namespace().to_string();
    b.lp().cell().ensure_namespace(&ns);
    // The claims are listed slowly; a shard and its claim are made after the shards were listed
    // and before the claims are: to the lists, an orphan.
    a.set_faults(vec![slow(PLATFORM_PROJECT, "list", "ipclaims", 3000)]);
    b.reset_counters();
    let release = spawn_audit(&a, &[&a, &b], &["--release-orphaned-claims", "--yes"]);
    eventually(20, "the release to have listed cell B's shards", || async {
        (b.lp()
            .metrics()
            .count(|k| k.verb == "list" && k.resource.starts_with("egressshards") && k.code == 200)
            >= 1)
            .then_some(())
    })
    .await;
    let newborn = b.create_shard("newborn").await;
    let claim = make_claim(
        &a,
        &claim_for(&id_b, "newborn", newborn.metadata.uid.as_ref().unwrap()),
    )
    .await;

    let out = release.await.unwrap();
    a.clear_faults();
    let found = findings(&out, 1);
    let f = with_verdict(&found, "orphaned-claim");
    assert_eq!(f.len(), 1, "the lists saw an orphan: {found:#?}");
    assert_eq!(f[0]["release"]["action"], "left", "{:#}", f[0]);
    assert!(
        f[0]["release"]["reason"]
            .as_str()
            .unwrap()
            .contains("lives"),
        "{:#}",
        f[0]
    );
    assert!(
        claim_exists(&a, claim.metadata.name.as_deref().unwrap()),
        "the live shard's claim was released"
    );
    b.shutdown().await;
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_of_the_go_controller_is_released_only_when_asked() {
    let (a, b) = two_cells().await;
    let ns = a.shard_namespace().to_string();
    // The Go controller's claim of a shard no cell has any more: named without a cell, annotated
    // with the shard's namespace and name only.
    let mut legacy = claim_for("unused", "old", "unused");
    let name = egress_address::ipam::naming::legacy_claim_name(&ns, "old");
    legacy.metadata.name = Some(name.clone());
    legacy.metadata.labels = None;
    legacy
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .retain(|k, _| k.ends_with("shard-namespace") || k.ends_with("shard-name"));
    make_claim(&a, &legacy).await;
    b.lp().cell().ensure_namespace(&ns);

    let kept = findings(
        &audit(&a, &[&a, &b], &["--release-orphaned-claims", "--yes"]).await,
        1,
    );
    assert_eq!(kept.len(), 1, "{kept:#?}");
    assert_eq!(kept[0]["verdict"], "orphaned-legacy-claim");
    assert_eq!(kept[0]["release"]["action"], "left");
    assert!(
        kept[0]["release"]["reason"]
            .as_str()
            .unwrap()
            .contains("--include-legacy-claims"),
        "{:#}",
        kept[0]
    );
    assert!(claim_exists(&a, &name));

    // Asked, but a shard of its name lives in cell B: still held.
    b.create_shard("old").await;
    let asked = [
        "--release-orphaned-claims",
        "--yes",
        "--include-legacy-claims",
    ];
    let named = findings(&audit(&a, &[&a, &b], &asked).await, 0);
    assert_eq!(
        with_verdict(&named, "legacy-claim").len(),
        1,
        "a shard of its name holds it: {named:#?}"
    );
    assert!(claim_exists(&a, &name));

    b.delete_shard("old").await;
    let freed = findings(&audit(&a, &[&a, &b], &asked).await, 0);
    assert_eq!(freed[0]["release"]["action"], "released", "{freed:#?}");
    assert!(!claim_exists(&a, &name));
    b.shutdown().await;
    a.shutdown().await;
}
