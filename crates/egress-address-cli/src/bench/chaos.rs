//! `egress-address chaos`: the real controller under injected faults on both planes, SIGKILLed at
//! random moments, two at once with and without leader election, while shards come and go. When
//! the faults stop and the controllers have settled, the invariants that make an address
//! trustworthy are checked. Seeded: the same seed replays the same schedule of faults, kills and
//! churn (timing on a loaded machine still varies).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv6Addr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use egress_api::shard::EgressShard;
use kube::Api;
use kube::api::DeleteParams;
use localplane::{FaultConfig, FaultRule};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use serde_json::Value;

use super::harness::{
    CLAIM_NAMESPACE, Controller, ControllerSpec, LEASE_NAMESPACE, PLATFORM_PROJECT, World,
    WorldOptions, address_of, allocations_key, claims_key, is_addressed, leases_key,
    locate_controller, shards_key,
};

const NAMESPACE: &str = "chaos";
const ANNOTATION_SHARD_NAMESPACE: &str = "cloud.datumapis.com/egress-shard-namespace";
const ANNOTATION_SHARD_NAME: &str = "cloud.datumapis.com/egress-shard-name";
const LEASE_NAME: &str = "egress-address-controller.cloud.datumapis.com";

/// Options of `egress-address chaos`.
#[derive(Args, Debug, Clone)]
pub struct ChaosArgs {
    /// Seed for faults, kills and churn.
    #[arg(long, default_value_t = 1, env = "CHAOS_SEED")]
    pub seed: u64,
    /// Shards present at the start.
    #[arg(long, default_value_t = 1000, env = "CHAOS_SHARDS")]
    pub shards: usize,
    /// Seconds of faults (half with leader election, half without).
    #[arg(long, default_value_t = 300, env = "CHAOS_SECONDS")]
    pub seconds: u64,
    /// Seconds allowed for settling once the faults stop.
    #[arg(long, default_value_t = 120, env = "CHAOS_SETTLE_SECONDS")]
    pub settle_seconds: u64,
    /// Reconcile concurrency of each controller.
    #[arg(long, default_value_t = 4, env = "CHAOS_CONCURRENCY")]
    pub concurrency: usize,
    /// The egress-address-controller binary (default: next to this executable).
    #[arg(long, env = "CHAOS_CONTROLLER_BIN")]
    pub controller_bin: Option<PathBuf>,
    /// Keep the controllers' logs and print where they are.
    #[arg(long)]
    pub keep_logs: bool,
}

/// Everything the run observed; [`ChaosReport::violations`] is empty when every invariant held.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChaosReport {
    pub seed: u64,
    pub live_shards: usize,
    pub deleted_shards: usize,
    pub created_during_run: usize,
    pub kills: usize,
    pub controller_starts: usize,
    /// Controllers that exited without being killed (their logs say why).
    pub unexpected_exits: Vec<String>,
    pub injected_failures: u64,
    pub unaddressed: Vec<String>,
    pub shared_addresses: Vec<String>,
    pub ref_mismatches: Vec<String>,
    /// 422 answers on egressshards: a write the API server had to refuse as write-once.
    pub write_once_rejections: u64,
    /// Claims left for deleted shards whose delete happened while no controller was running
    /// (ready and, with election on, leading) for long enough to see it.
    pub excused_leftover_claims: Vec<String>,
    pub leftover_claims: Vec<String>,
    pub settle_time_seconds: f64,
    pub log_dir: Option<String>,
}

impl ChaosReport {
    pub fn violations(&self) -> Vec<String> {
        let mut v = vec![];
        let mut list = |what: &str, items: &[String]| {
            if !items.is_empty() {
                v.push(format!("{what} ({}): {}", items.len(), preview(items)));
            }
        };
        list("live shards without an address", &self.unaddressed);
        list(
            "addresses carried by more than one shard",
            &self.shared_addresses,
        );
        list(
            "addresses that differ from the record their ref names",
            &self.ref_mismatches,
        );
        list("claims left for deleted shards", &self.leftover_claims);
        if self.write_once_rejections > 0 {
            v.push(format!(
                "{} write-once rejections (422 on egressshards)",
                self.write_once_rejections
            ));
        }
        v
    }
}

fn preview(items: &[String]) -> String {
    let mut s = items.iter().take(5).cloned().collect::<Vec<_>>().join("; ");
    if items.len() > 5 {
        s.push_str("; ...");
    }
    s
}

/// The CLI entry point: prints the report as JSON and fails when an invariant broke.
pub async fn main(args: ChaosArgs) -> anyhow::Result<()> {
    let mut args = args;
    args.controller_bin = Some(super::harness::controller_for_cli(
        args.controller_bin.as_deref(),
    )?);
    let report = run(&args).await?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    let v = report.violations();
    if !v.is_empty() {
        anyhow::bail!("invariants violated:\n- {}", v.join("\n- "));
    }
    Ok(())
}

/// One sample of who could act: alive, ready, and (under election) holding the lease.
#[derive(Debug, Clone)]
struct Sample {
    at: Instant,
    acting: BTreeSet<String>,
}

struct Fleet {
    spec: ControllerSpec,
    procs: Vec<Controller>,
    starts: usize,
    kills: usize,
    ready: HashMap<String, bool>,
}

impl Fleet {
    fn start(&mut self, leader_elect: bool) -> anyhow::Result<()> {
        self.starts += 1;
        let mut spec = self.spec.clone();
        spec.name = format!("chaos-{}", self.starts);
        spec.leader_elect = leader_elect;
        self.procs.push(spec.spawn()?);
        Ok(())
    }

    async fn kill(&mut self, i: usize) {
        let c = self.procs.remove(i);
        self.ready.remove(&c.name);
        self.kills += 1;
        c.kill().await;
    }

    /// Restarts any process that died on its own (a crash is a finding, but the run goes on
    /// and the invariants decide).
    fn reap(&mut self) -> Vec<String> {
        let mut dead = vec![];
        self.procs.retain_mut(|c| match c.child.try_wait() {
            Ok(Some(_)) | Err(_) => {
                dead.push(c.name.clone());
                false
            }
            Ok(None) => true,
        });
        dead
    }
}

fn fault_config(seed: u64, latency_spike: bool) -> FaultConfig {
    let mut rules = vec![
        FaultRule {
            error_rate: 0.03,
            code: Some(500),
            ..Default::default()
        },
        FaultRule {
            error_rate: 0.02,
            code: Some(503),
            ..Default::default()
        },
        FaultRule {
            verb: Some("update".into()),
            error_rate: 0.05,
            code: Some(409),
            ..Default::default()
        },
    ];
    if latency_spike {
        rules.push(FaultRule {
            latency_ms: 400,
            ..Default::default()
        });
    }
    FaultConfig {
        seed: Some(seed),
        rules,
        watch_cut_after_seconds: Some(3.0),
    }
}

/// Runs the whole scenario and checks the invariants.
pub async fn run(args: &ChaosArgs) -> anyhow::Result<ChaosReport> {
    let bin = locate_controller(args.controller_bin.as_deref())?;
    let world = World::start(&WorldOptions::default()).await?;
    world.seed_shards(NAMESPACE, "shard", 0..args.shards);
    let mut rng = StdRng::seed_from_u64(args.seed);
    let spec = ControllerSpec {
        bin,
        name: String::new(),
        concurrency: args.concurrency,
        leader_elect: true,
        cell_kubeconfig: world.cell_kubeconfig.clone(),
        ipam_kubeconfig: world.ipam_kubeconfig.clone(),
        log_dir: world.dir.path().join("logs"),
        // Short lease and backoff: a takeover and a retry must fit in a bounded run.
        extra_args: vec![
            "--leader-election-lease-duration=3s".into(),
            "--leader-election-renew-deadline=2s".into(),
            "--leader-election-retry-period=500ms".into(),
            "--backoff-base=100ms".into(),
            "--backoff-cap=2s".into(),
            "--recheck-interval=2s".into(),
            "--request-timeout=5s".into(),
        ],
    };
    let mut fleet = Fleet {
        spec,
        procs: vec![],
        starts: 0,
        kills: 0,
        ready: HashMap::new(),
    };
    let admin = world.admin_client("cell")?;
    let shards_api: Api<EgressShard> = Api::namespaced(admin, NAMESPACE);

    let mut live: BTreeSet<String> = (0..args.shards).map(|i| format!("shard-{i}")).collect();
    let mut deleted_at: BTreeMap<String, Instant> = BTreeMap::new();
    let mut created = 0usize;
    let mut samples: Vec<Sample> = vec![];
    let mut unexpected_exits = vec![];

    world.lp.faults().set(fault_config(args.seed, false));
    let total = Duration::from_secs(args.seconds.max(2));
    let start = Instant::now();
    let mut next_kill = start + Duration::from_millis(rng.random_range(1000..4000));
    let mut next_churn = start;
    let mut next_spike = start + Duration::from_millis(rng.random_range(500..3000));
    let mut spike_until: Option<Instant> = None;
    let mut phase_elected = true;
    fleet.start(true)?;
    fleet.start(true)?;
    while start.elapsed() < total {
        let now = Instant::now();
        if phase_elected && start.elapsed() >= total / 2 {
            // Second half: no election, so two writers race for real.
            phase_elected = false;
            while !fleet.procs.is_empty() {
                fleet.kill(0).await;
            }
            fleet.start(false)?;
            fleet.start(false)?;
        }
        if now >= next_kill {
            if !fleet.procs.is_empty() {
                let i = rng.random_range(0..fleet.procs.len());
                fleet.kill(i).await;
            }
            // Sometimes nobody runs for a moment: deletes then go unseen, by design.
            let gap = if rng.random_bool(0.25) {
                while !fleet.procs.is_empty() {
                    fleet.kill(0).await;
                }
                Duration::from_millis(rng.random_range(500..2000))
            } else {
                Duration::from_millis(rng.random_range(0..800))
            };
            tokio::time::sleep(gap).await;
            while fleet.procs.len() < 2 {
                fleet.start(phase_elected)?;
            }
            next_kill = Instant::now() + Duration::from_millis(rng.random_range(1500..6000));
        }
        if now >= next_churn {
            if rng.random_bool(0.5) || live.len() < 10 {
                let name = format!("late-{created}");
                created += 1;
                world.seed_shards(NAMESPACE, "late", created - 1..created);
                live.insert(name);
            } else {
                let i = rng.random_range(0..live.len());
                let name = live.iter().nth(i).cloned().expect("in range");
                delete_shard(&shards_api, &name).await?;
                live.remove(&name);
                deleted_at.insert(name, Instant::now());
            }
            next_churn = Instant::now() + Duration::from_millis(rng.random_range(100..600));
        }
        if spike_until.is_some_and(|u| now >= u) {
            world
                .lp
                .faults()
                .set(fault_config(args.seed ^ now_nanos(start), false));
            spike_until = None;
        } else if spike_until.is_none() && now >= next_spike {
            world
                .lp
                .faults()
                .set(fault_config(args.seed ^ now_nanos(start), true));
            spike_until = Some(now + Duration::from_millis(rng.random_range(300..1200)));
            next_spike = now + Duration::from_millis(rng.random_range(2000..5000));
        }
        unexpected_exits.extend(fleet.reap());
        samples.push(sample(&world, &mut fleet, phase_elected).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let injected = world.lp.metrics().count(|k| k.code >= 500 || k.code == 409);
    world.lp.faults().clear();

    // Settle: the controllers that are running stay; at least one must be.
    if fleet.procs.is_empty() {
        fleet.start(phase_elected)?;
    }
    let settle_start = Instant::now();
    let settle = Duration::from_secs(args.settle_seconds);
    loop {
        unexpected_exits.extend(fleet.reap());
        if fleet.procs.is_empty() {
            fleet.start(phase_elected)?;
        }
        samples.push(sample(&world, &mut fleet, phase_elected).await);
        let (n, done) = world.shard_progress(NAMESPACE);
        let leftovers = leftover_claims(&world, &live);
        let pending_releases = leftovers
            .iter()
            .filter(|c| !excused(&samples, deleted_at.get(*c), phase_elected))
            .count();
        if (n == done && pending_releases == 0) || settle_start.elapsed() > settle {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let settle_time = settle_start.elapsed();

    let mut report = check(&world, &live, &deleted_at, &samples, phase_elected);
    report.seed = args.seed;
    report.created_during_run = created;
    report.kills = fleet.kills;
    report.controller_starts = fleet.starts;
    report.unexpected_exits = unexpected_exits;
    report.injected_failures = injected;
    report.settle_time_seconds = settle_time.as_secs_f64();
    while !fleet.procs.is_empty() {
        fleet.kill(0).await;
    }
    if args.keep_logs || !report.violations().is_empty() || !report.unexpected_exits.is_empty() {
        let World { lp, dir, .. } = world;
        lp.shutdown().await;
        report.log_dir = Some(dir.keep().join("logs").display().to_string());
    } else {
        world.lp.shutdown().await;
    }
    Ok(report)
}

fn now_nanos(start: Instant) -> u64 {
    start.elapsed().as_nanos() as u64
}

/// Deletes through the API (so watches see it), retrying the injected failures.
async fn delete_shard(api: &Api<EgressShard>, name: &str) -> anyhow::Result<()> {
    for _ in 0..50 {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    anyhow::bail!("could not delete shard {name} in 50 attempts")
}

async fn sample(world: &World, fleet: &mut Fleet, elected: bool) -> Sample {
    let holder = world
        .lp
        .cell()
        .object(&leases_key(), Some(LEASE_NAMESPACE), LEASE_NAME)
        .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
        .unwrap_or_default();
    let mut acting = BTreeSet::new();
    for c in &fleet.procs {
        let ready = match fleet.ready.get(&c.name) {
            Some(true) => true,
            _ => {
                let r = c.is_ready().await;
                fleet.ready.insert(c.name.clone(), r);
                r
            }
        };
        let leads = !elected || holder == c.name || holder.starts_with(&format!("{}_", c.name));
        if ready && leads {
            acting.insert(c.name.clone());
        }
    }
    Sample {
        at: Instant::now(),
        acting,
    }
}

/// How long one controller must keep acting after a delete for its release to be owed.
const COVER: Duration = Duration::from_secs(8);

/// Whether a delete at `at` went unseen through no fault of the controller: no single process
/// was acting from the delete through [`COVER`] after it (or to the end of the run).
fn excused(samples: &[Sample], at: Option<&Instant>, _elected: bool) -> bool {
    let Some(at) = at else { return false };
    let window: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.at >= *at && s.at <= *at + COVER)
        .collect();
    let Some(first) = window.first() else {
        return true;
    };
    // The sample just before the delete counts too: the process had to be acting already.
    let before = samples.iter().rev().find(|s| s.at < *at);
    let candidates: BTreeSet<String> = match before {
        Some(b) => first.acting.intersection(&b.acting).cloned().collect(),
        None => first.acting.clone(),
    };
    !candidates
        .iter()
        .any(|p| window.iter().all(|s| s.acting.contains(p)))
}

/// Claims (by shard name) whose shard is no longer live.
fn leftover_claims(world: &World, live: &BTreeSet<String>) -> Vec<String> {
    let Some(p) = world.lp.project(PLATFORM_PROJECT) else {
        return vec![];
    };
    p.objects(&claims_key(), Some(CLAIM_NAMESPACE))
        .iter()
        .filter(|c| c["metadata"]["deletionTimestamp"].is_null())
        .filter_map(|c| {
            let a = &c["metadata"]["annotations"];
            (a[ANNOTATION_SHARD_NAMESPACE].as_str() == Some(NAMESPACE))
                .then(|| a[ANNOTATION_SHARD_NAME].as_str().unwrap_or("").to_string())
        })
        .filter(|n| !live.contains(n))
        .collect()
}

fn check(
    world: &World,
    live: &BTreeSet<String>,
    deleted_at: &BTreeMap<String, Instant>,
    samples: &[Sample],
    elected: bool,
) -> ChaosReport {
    let shards = world.lp.cell().objects(&shards_key(), Some(NAMESPACE));
    let platform = world
        .lp
        .project(PLATFORM_PROJECT)
        .expect("the platform project exists");
    let mut unaddressed = vec![];
    let mut by_address: BTreeMap<Ipv6Addr, Vec<String>> = BTreeMap::new();
    let mut ref_mismatches = vec![];
    let stored: BTreeSet<String> = shards
        .iter()
        .map(|s| s["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect();
    for name in live.difference(&stored) {
        unaddressed.push(format!("{name} (expected live, not stored)"));
    }
    for s in &shards {
        let name = s["metadata"]["name"].as_str().unwrap_or("").to_string();
        if !is_addressed(s) {
            unaddressed.push(name);
            continue;
        }
        let addr_text = s["spec"]["shardAddressIPv6"].as_str().unwrap_or("");
        let Ok(addr) = addr_text.parse::<Ipv6Addr>() else {
            ref_mismatches.push(format!("{name}: {addr_text:?} is not an IPv6 address"));
            continue;
        };
        by_address.entry(addr).or_default().push(name.clone());
        if let Some(problem) = ref_problem(&platform, &name, addr, s) {
            ref_mismatches.push(format!("{name}: {problem}"));
        }
    }
    let shared_addresses = by_address
        .iter()
        .filter(|(_, v)| v.len() > 1)
        .map(|(a, v)| format!("{a}: {}", v.join(", ")))
        .collect();
    let write_once_rejections = world
        .lp
        .metrics()
        .count(|k| k.code == 422 && k.resource.starts_with("egressshards."));
    let mut excused_leftover_claims = vec![];
    let mut leftover = vec![];
    for n in leftover_claims(world, live) {
        if excused(samples, deleted_at.get(&n), elected) {
            excused_leftover_claims.push(n);
        } else {
            leftover.push(n);
        }
    }
    ChaosReport {
        seed: 0,
        live_shards: shards.len(),
        deleted_shards: deleted_at.len(),
        created_during_run: 0,
        kills: 0,
        controller_starts: 0,
        unexpected_exits: vec![],
        injected_failures: 0,
        unaddressed,
        shared_addresses,
        ref_mismatches,
        write_once_rejections,
        excused_leftover_claims,
        leftover_claims: leftover,
        settle_time_seconds: 0.0,
        log_dir: None,
    }
}

/// What is wrong with a shard's ref, if anything: the record it names must exist, hold exactly
/// this address (so nothing was written from an unbound claim), and a claim must name this shard.
fn ref_problem(
    platform: &localplane::Plane,
    name: &str,
    addr: Ipv6Addr,
    s: &Value,
) -> Option<String> {
    let r = &s["spec"]["shardAddressIPv6ClaimRef"];
    if r.is_null() {
        return Some("addressed without a claim ref".into());
    }
    let kind = r["kind"].as_str().unwrap_or("");
    let key = match kind {
        "IPClaim" => claims_key(),
        "IPAllocation" => allocations_key(),
        other => return Some(format!("ref kind {other:?}")),
    };
    if r["project"].as_str() != Some(PLATFORM_PROJECT) {
        return Some(format!("ref project {:?}", r["project"]));
    }
    let ns = r["namespace"].as_str().unwrap_or("");
    let rname = r["name"].as_str().unwrap_or("");
    let Some(record) = platform.object(&key, Some(ns), rname) else {
        return Some(format!("{kind} {ns}/{rname} does not exist"));
    };
    let cidr = record["status"]["allocatedCIDR"].as_str().unwrap_or("");
    match address_of(cidr) {
        Some(a) if a == addr => {}
        _ => return Some(format!("carries {addr} but {kind} {rname} holds {cidr:?}")),
    }
    if kind == "IPClaim" {
        let a = &record["metadata"]["annotations"];
        if a[ANNOTATION_SHARD_NAMESPACE].as_str() != Some(NAMESPACE)
            || a[ANNOTATION_SHARD_NAME].as_str() != Some(name)
        {
            return Some(format!("claim {rname} names another shard: {a}"));
        }
    }
    None
}

/// The bounded options the CI test runs with.
pub fn ci_options(seed: u64) -> ChaosArgs {
    ChaosArgs {
        seed,
        shards: 200,
        seconds: 40,
        settle_seconds: 40,
        concurrency: 4,
        controller_bin: None,
        keep_logs: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::harness::shard_object;
    use serde_json::json;

    fn at(base: Instant, ms: u64, acting: &[&str]) -> Sample {
        Sample {
            at: base + Duration::from_millis(ms),
            acting: acting.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn a_delete_is_owed_only_when_one_controller_acted_throughout() {
        let t0 = Instant::now();
        let steady: Vec<Sample> = (0..200).map(|i| at(t0, i * 100, &["a"])).collect();
        let deleted = t0 + Duration::from_millis(1050);
        assert!(!excused(&steady, Some(&deleted), true));

        // The only acting controller was killed two seconds after the delete.
        let killed: Vec<Sample> = (0..200)
            .map(|i| at(t0, i * 100, if i < 30 { &["a"] } else { &[] }))
            .collect();
        assert!(excused(&killed, Some(&deleted), true));

        // A hand-over from a to b within the window does not count as one controller acting.
        let handover: Vec<Sample> = (0..200)
            .map(|i| at(t0, i * 100, if i < 30 { &["a"] } else { &["b"] }))
            .collect();
        assert!(excused(&handover, Some(&deleted), true));

        // A claim for a shard the run never deleted is never excused.
        assert!(!excused(&killed, None, true));
    }

    #[tokio::test]
    async fn the_checker_catches_shared_addresses_bad_refs_and_gaps() {
        let world = World::start(&WorldOptions::default()).await.unwrap();
        let cell = world.lp.cell();
        cell.ensure_namespace(NAMESPACE);
        let with = |name: &str, addr: &str, claim: &str| {
            let mut s = shard_object(NAMESPACE, name);
            s["spec"]["shardAddressIPv6"] = json!(addr);
            s["spec"]["shardAddressIPv6ClaimRef"] = json!({
                "apiGroup": "ipam.miloapis.com", "kind": "IPClaim", "project": PLATFORM_PROJECT,
                "namespace": CLAIM_NAMESPACE, "name": claim,
            });
            cell.apply_object(s).unwrap();
        };
        with("one", "2001:db8::1", "no-such-claim");
        with("two", "2001:db8::1", "no-such-claim");
        cell.apply_object(shard_object(NAMESPACE, "bare")).unwrap();
        let live: BTreeSet<String> = ["one", "two", "bare", "lost"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let r = check(&world, &live, &BTreeMap::new(), &[], true);
        assert_eq!(r.shared_addresses.len(), 1, "{r:?}");
        assert_eq!(r.ref_mismatches.len(), 2, "{r:?}");
        assert_eq!(r.unaddressed.len(), 2, "bare and lost: {r:?}");
        assert_eq!(r.violations().len(), 3);
    }
}
