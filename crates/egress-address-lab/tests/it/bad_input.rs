//! Bad input against the real controller process over HTTP: unusable IPAM answers, names at the
//! limit, refused credentials, unreadable kubeconfigs. Each gets a clear error and leaves every
//! object as it was. (Exhaustion, a missing class, a foreign claim and a different ref already on
//! a shard are covered against the library in `crates/egress-address/tests/it/reconcile.rs`.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use egress_address_lab::fleet::{self, ControllerSpec, locate_controller, log_tail};
use localplane::Identity;
use localplane::testing::{
    CLAIM_NAMESPACE, CONTROLLER, PLATFORM_PROJECT, World, answer_claim, claims_key, events_key,
    eventually, is_addressed, shard_object, shards_key,
};
use serde_json::{Value, json};
use tokio::sync::MutexGuard;

use crate::common::one_fleet_at_a_time;

const NS: &str = "bad-input";

/// A world of its own, and this test's turn to run a controller in it.
async fn world() -> (World, MutexGuard<'static, ()>) {
    let turn = one_fleet_at_a_time().await;
    (fleet::world().start().await.unwrap(), turn)
}

fn spec(world: &World, name: &str) -> ControllerSpec {
    ControllerSpec {
        leader_elect: false,
        extra_args: vec!["--recheck-interval=1s".into(), "--backoff-cap=1s".into()],
        ..ControllerSpec::new(
            world,
            locate_controller(None).expect("the controller binary is built"),
            name,
        )
    }
}

fn shard(world: &World, name: &str) -> Value {
    world
        .lp()
        .cell()
        .object(&shards_key(), Some(NS), name)
        .unwrap_or_else(|| panic!("shard {name} exists"))
}

/// Events on a shard: (reason, note).
fn events(world: &World, name: &str) -> Vec<(String, String)> {
    world
        .lp()
        .cell()
        .objects(&events_key(), Some(NS))
        .iter()
        .filter(|e| e["regarding"]["name"].as_str() == Some(name))
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or("").to_string(),
                e["note"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// Requests for claims, whatever their answer: each re-check of a refused shard makes one.
fn claim_requests(world: &World) -> u64 {
    world
        .lp()
        .metrics()
        .count(|k| k.resource.starts_with("ipclaims."))
}

fn shard_writes(world: &World) -> u64 {
    world.lp().metrics().count(|k| {
        k.resource.starts_with("egressshards.")
            && matches!(k.verb.as_str(), "update" | "patch" | "create" | "delete")
    })
}

/// Plays an IPAM that binds a claim but answers something unusable in `allocatedCIDR`, chosen by
/// the shard the claim is for (after the real IPAM hooks ran).
fn answer_by_shard(world: &World, answers: BTreeMap<String, String>) {
    world.on_claim_create(move |claim| {
        let shard = claim["metadata"]["annotations"]["cloud.datumapis.com/egress-shard-name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if let Some(answer) = answers.get(&shard) {
            answer_claim(claim, answer);
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusable_ipam_answers_are_refused_and_write_nothing() {
    let (world, _turn) = world().await;
    let answers: BTreeMap<String, String> = [
        ("ipv4", "198.51.100.7/32"),
        ("slash64", "2001:db8:1::/64"),
        ("mapped", "::ffff:198.51.100.7/128"),
        ("garbage", "not-an-address"),
        ("empty", ""),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    answer_by_shard(&world, answers.clone());
    world.lp().cell().ensure_namespace(NS);
    let mut before = BTreeMap::new();
    for name in answers
        .keys()
        .chain(std::iter::once(&"control".to_string()))
    {
        let s = world
            .lp()
            .cell()
            .apply_object(shard_object(NS, name))
            .unwrap();
        before.insert(name.clone(), s);
    }
    let mut ctl = spec(&world, "unusable").spawn().unwrap();
    // A shard with a sound answer is addressed: the controller works, so what follows is not
    // vacuous.
    eventually(30, "the control shard addressed", || async {
        is_addressed(&shard(&world, "control")).then_some(())
    })
    .await;
    for (name, answer) in &answers {
        let expected = if answer.is_empty() {
            "ClaimPending"
        } else {
            "UnusableAnswer"
        };
        let (_, note) = eventually(20, &format!("a {expected} event on {name}"), || async {
            events(&world, name)
                .into_iter()
                .find(|(r, _)| r == expected)
        })
        .await;
        if !answer.is_empty() {
            assert!(
                note.contains(answer.as_str()),
                "the event names the answer: {note}"
            );
        }
    }
    // Nothing may change on a refused shard, ever: not on the first answer, nor when IPAM is
    // asked again (a round of re-checks, one request or more for each refused shard).
    let asked = claim_requests(&world);
    eventually(20, "a round of re-checks", || async {
        (claim_requests(&world) >= asked + answers.len() as u64).then_some(())
    })
    .await;
    for name in answers.keys() {
        assert_eq!(
            shard(&world, name),
            before[name],
            "{name} was left as it was"
        );
    }
    assert_eq!(
        shard_writes(&world),
        1,
        "only the control shard was written"
    );
    assert!(
        ctl.is_ready().await,
        "bad answers do not make the controller unready"
    );
    ctl.check_alive().unwrap();
    ctl.stop(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_at_the_limit_get_a_hashed_claim_and_longer_ones_never_exist() {
    let (world, _turn) = world().await;
    world.lp().cell().ensure_namespace(NS);
    let label = "a".repeat(62);
    let long = format!("{label}.{label}.{label}.{label}.b");
    assert_eq!(long.len(), 253);
    let too_long = format!("{long}{}", "c".repeat(47));
    assert_eq!(too_long.len(), 300);
    let err = world
        .lp()
        .cell()
        .apply_object(shard_object(NS, &too_long))
        .expect_err("a 300-character name is refused by the API server");
    assert_eq!(err.code(), 422);
    world
        .lp()
        .cell()
        .apply_object(shard_object(NS, &long))
        .unwrap();
    let mut ctl = spec(&world, "long-names").spawn().unwrap();
    let s = eventually(30, "the long-named shard addressed", || async {
        let s = shard(&world, &long);
        is_addressed(&s).then_some(s)
    })
    .await;
    let claim_name = s["spec"]["shardAddressIPv6ClaimRef"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(claim_name.len() <= 253, "{claim_name}");
    let claim = world
        .lp()
        .project(PLATFORM_PROJECT)
        .unwrap()
        .object(&claims_key(), Some(CLAIM_NAMESPACE), &claim_name)
        .expect("the ref names an existing claim");
    let a = &claim["metadata"]["annotations"];
    assert_eq!(a["cloud.datumapis.com/egress-shard-name"], json!(long));
    assert_eq!(a["cloud.datumapis.com/egress-shard-namespace"], json!(NS));
    // The event's name is cut to fit, so even this shard's assignment is on record.
    let (_, note) = eventually(
        10,
        "an AddressAssigned event on the long-named shard",
        || async {
            events(&world, &long)
                .into_iter()
                .find(|(r, _)| r == "AddressAssigned")
        },
    )
    .await;
    assert!(note.contains(&claim_name), "{note}");
    ctl.check_alive().unwrap();
    ctl.stop(Duration::from_secs(5)).await;
}

/// A copy of `path` (a kubeconfig localplane wrote) carrying another token.
fn with_token(path: &Path, token: &str, out: &Path) -> PathBuf {
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    doc["users"][0]["user"]["token"] = json!(token);
    std::fs::write(out, doc.to_string()).unwrap();
    out.to_path_buf()
}

/// Starts a controller whose credential the server refuses and checks it is loud, unready and
/// harmless.
async fn assert_refused_credential(world: &World, spec: ControllerSpec, plane: &str, code: u16) {
    let cell = world.lp().cell();
    cell.ensure_namespace(NS);
    let before = cell.apply_object(shard_object(NS, "victim")).unwrap();
    let mut ctl = spec.spawn().unwrap();
    // Refused, and refused again as it retries: every chance to do the wrong thing.
    eventually(
        20,
        &format!("three answers {code} from {plane}"),
        || async {
            (world
                .lp()
                .metrics()
                .count(|k| k.plane == plane && k.code == code)
                >= 3)
                .then_some(())
        },
    )
    .await;
    assert!(!ctl.is_ready().await, "ready with a refused credential");
    assert_eq!(
        shard(world, "victim"),
        before,
        "the shard was left as it was"
    );
    assert_eq!(shard_writes(world), 0);
    let claims = world
        .lp()
        .project(PLATFORM_PROJECT)
        .unwrap()
        .objects(&claims_key(), Some(CLAIM_NAMESPACE));
    assert!(claims.is_empty(), "no claim was made: {claims:?}");
    let log = log_tail(&ctl.log, 200).to_lowercase();
    assert!(
        log.contains("credential") || log.contains("unauthorized") || log.contains("forbidden"),
        "the log says the credential was refused:\n{log}"
    );
    if ctl.check_alive().is_ok() {
        ctl.stop(Duration::from_secs(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_cell_token_is_refused_loudly() {
    assert_wrong_token_refused("cell").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ipam_token_is_refused_loudly() {
    assert_wrong_token_refused(PLATFORM_PROJECT).await;
}

/// A controller whose kubeconfig for `plane` carries a token the server does not know.
async fn assert_wrong_token_refused(plane: &str) {
    let (world, _turn) = world().await;
    let mut s = spec(&world, &format!("wrong-{plane}-token"));
    let expired = world.dir().join(format!("{plane}-expired.kubeconfig"));
    if plane == "cell" {
        s.cell_kubeconfig = with_token(world.cell_kubeconfig(), "expired-token", &expired);
    } else {
        s.ipam_kubeconfig = with_token(world.ipam_kubeconfig(), "expired-token", &expired);
    }
    assert_refused_credential(&world, s, plane, 401).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ipam_identity_without_a_grant_is_refused_loudly() {
    let _turn = one_fleet_at_a_time().await;
    let world = fleet::world()
        .identity(Identity::user(
            "ungranted",
            "ungranted-token",
            "system:egress-address@cloud.datumapis.com",
        ))
        .rbac(true)
        .start()
        .await
        .unwrap();
    let mut s = spec(&world, "ungranted");
    s.ipam_kubeconfig = world.kubeconfig(PLATFORM_PROJECT, "ungranted");
    // The cell credential stays an admin one: only IPAM refuses.
    assert_eq!(s.cell_kubeconfig, world.kubeconfig("cell", CONTROLLER));
    assert_refused_credential(&world, s, PLATFORM_PROJECT, 403).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_malformed_kubeconfig_stops_the_process_naming_the_file() {
    let (world, _turn) = world().await;
    let dir = world.dir();
    let missing = dir.join("no-such.kubeconfig");
    let malformed = dir.join("malformed.kubeconfig");
    std::fs::write(&malformed, "clusters: [this is: not a kubeconfig\n").unwrap();
    for (which, path) in [
        ("ipam", &missing),
        ("ipam", &malformed),
        ("cell", &missing),
        ("cell", &malformed),
    ] {
        let mut s = spec(
            &world,
            &format!("kubeconfig-{which}-{}", path.display()).replace('/', "_"),
        );
        match which {
            "ipam" => s.ipam_kubeconfig = path.clone(),
            _ => s.cell_kubeconfig = path.clone(),
        }
        let mut ctl = s.spawn().unwrap();
        let status = tokio::time::timeout(Duration::from_secs(20), ctl.child.wait())
            .await
            .unwrap_or_else(|_| panic!("{which} {}: the process did not stop", path.display()))
            .unwrap();
        assert_eq!(status.code(), Some(1), "{which} {}", path.display());
        let log = log_tail(&ctl.log, 50);
        assert!(
            log.contains(&path.display().to_string()),
            "{which}: the message names {}:\n{log}",
            path.display()
        );
    }
    assert_eq!(world.lp().metrics().total(), 0, "nothing was contacted");
}
