//! `egress-address chaos`: the real controller under injected faults on both planes, SIGKILLed at
//! random moments, two at once with and without leader election, while shards come and go. When
//! the faults stop and the controllers have settled, the invariants that make an address
//! trustworthy are checked. Seeded: the same seed replays the same schedule of faults, kills and
//! churn (timing on a loaded machine still varies).

mod invariants;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use egress_api::shard::EgressShard;
use kube::Api;
use kube::api::DeleteParams;
use localplane::testing::{World, leases_key};
use localplane::{FaultConfig, FaultRule};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::fleet::{self, ControllerSpec, Fleet, locate_controller};
pub use invariants::ChaosReport;
use invariants::{NAMESPACE, Sample, check, excused, leftover_claims};

/// The lease the controllers elect their leader with, in the cell's `default` namespace.
const LEASE_NAMESPACE: &str = "default";
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

/// The CLI entry point: prints the report as JSON and fails when an invariant broke.
pub async fn main(args: ChaosArgs) -> anyhow::Result<()> {
    let mut args = args;
    args.controller_bin = Some(fleet::controller_for_cli(args.controller_bin.as_deref())?);
    let report = run(&args).await?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    let v = report.violations();
    if !v.is_empty() {
        anyhow::bail!("invariants violated:\n- {}", v.join("\n- "));
    }
    Ok(())
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
    let world = fleet::world().start().await?;
    world.seed_shards(NAMESPACE, "shard", 0..args.shards);
    let mut rng = StdRng::seed_from_u64(args.seed);
    let spec = ControllerSpec {
        concurrency: args.concurrency,
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
        ..ControllerSpec::new(&world, bin, "chaos")
    };
    let mut fleet = Fleet::new(spec);
    // Whether each controller has been seen ready (a ready one stays so until it is killed).
    let mut ready: HashMap<String, bool> = HashMap::new();
    let shards_api: Api<EgressShard> = Api::namespaced(world.cell(), NAMESPACE);

    let mut live: BTreeSet<String> = (0..args.shards).map(|i| format!("shard-{i}")).collect();
    let mut deleted_at: BTreeMap<String, Instant> = BTreeMap::new();
    let mut created = 0usize;
    let mut samples: Vec<Sample> = vec![];
    let mut unexpected_exits = vec![];

    world.lp().faults().set(fault_config(args.seed, false));
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
            fleet.kill_all().await;
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
                fleet.kill_all().await;
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
                .lp()
                .faults()
                .set(fault_config(args.seed ^ now_nanos(start), false));
            spike_until = None;
        } else if spike_until.is_none() && now >= next_spike {
            world
                .lp()
                .faults()
                .set(fault_config(args.seed ^ now_nanos(start), true));
            spike_until = Some(now + Duration::from_millis(rng.random_range(300..1200)));
            next_spike = now + Duration::from_millis(rng.random_range(2000..5000));
        }
        unexpected_exits.extend(fleet.reap());
        samples.push(sample(&world, &fleet, &mut ready, phase_elected).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let injected = world
        .lp()
        .metrics()
        .count(|k| k.code >= 500 || k.code == 409);
    world.lp().faults().clear();

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
        samples.push(sample(&world, &fleet, &mut ready, phase_elected).await);
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
    fleet.kill_all().await;
    if args.keep_logs || !report.violations().is_empty() || !report.unexpected_exits.is_empty() {
        let dir = world.shutdown_keeping_files().await;
        report.log_dir = Some(dir.join("logs").display().to_string());
    } else {
        world.shutdown().await;
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

/// Who could act now: alive, ready, and (under election) holding the lease.
async fn sample(
    world: &World,
    fleet: &Fleet,
    seen_ready: &mut HashMap<String, bool>,
    elected: bool,
) -> Sample {
    let holder = world
        .lp()
        .cell()
        .object(&leases_key(), Some(LEASE_NAMESPACE), LEASE_NAME)
        .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
        .unwrap_or_default();
    let mut acting = BTreeSet::new();
    for c in &fleet.procs {
        let ready = match seen_ready.get(&c.name) {
            Some(true) => true,
            _ => {
                let r = c.is_ready().await;
                seen_ready.insert(c.name.clone(), r);
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
