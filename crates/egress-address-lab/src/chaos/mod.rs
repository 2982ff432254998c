//! `egress-address-lab chaos`: the real controller under the faults production has, in two cells
//! that claim from one IPAM. On both planes: requests failed before they apply, requests applied
//! whose answer is then lost (a 5xx, a reset connection, or nothing until the controller's
//! request timeout: claim creates and deletes above all, shard updates too), claim deletes and
//! shard updates that commit seconds after the client gave up, latency spikes and cut watches.
//! Meanwhile each cell's controllers are SIGKILLed at random, and a leader is SIGSTOPped right
//! after its claim for a freshly made shard landed and left stopped until another has taken its
//! lease, then woken (SIGCONT) with its requests of a leader that is no more. Shards are made
//! under the same names in both cells, deleted, and made again under their names, often while
//! the earlier incarnation's release is still to come or in flight. Half the run elects a leader
//! per cell, the rest (`--unelected-share`, half by default) runs two writers per cell. Under
//! election, two faults end a leader's writes without telling it ([`lapse`]): phases of slow
//! Lease renewals, and a leader stopped for less than its lease; shards are made during both.
//!
//! The invariants ([`invariants`]) are judged at every sample during the run and once more when
//! the faults have stopped and the controllers have settled; every live shard addressed is also
//! judged a bounded time after each lapse fault ends and after the faults stop. Seeded: the same
//! seed replays the same schedule of faults, kills, pauses and churn (timing on a loaded machine
//! still varies).

mod args;
mod cell;
mod faults;
mod invariants;
mod landings;
mod lapse;
mod report;
mod server;

use std::time::{Duration, Instant};

use localplane::testing::PLATFORM_PROJECT;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::cell::CellKind;
use crate::fleet::{self, ControllerSpec, Fleet, locate_controller};
pub use args::{ChaosArgs, ci_options};
use cell::Cell;
pub use cell::CellStats;
pub use faults::{FaultArgs, FaultReport, Outcome};
use invariants::{CellFacts, CellRef, Observer, Planes, RunFacts};
pub use invariants::{Leftovers, Sampled, Verdict};
pub use lapse::LapseArgs;
use lapse::{Election, Promptness};
pub use report::ChaosReport;
pub use server::CellServer;
/// The namespace a chaos cell's shards live in.
pub const SHARD_NAMESPACE: &str = server::NAMESPACE;

/// The controllers' lease, short so that a takeover fits in a bounded run.
const LEASE: Duration = Duration::from_secs(3);
const ELECTION: Election = Election {
    lease: LEASE,
    renew_deadline: Duration::from_secs(2),
    retry_period: Duration::from_millis(500),
};
/// The controllers' sweep of unaddressed shards, by the environment variable that sets it.
const SWEEP_ENV: &str = "EGRESS_ADDRESS_UNADDRESSED_SWEEP_INTERVAL";
const SWEEP_FLAG: &str = "--unaddressed-sweep-interval";

/// The CLI entry point: prints the summary, then the report as JSON, and fails when an
/// invariant broke.
pub async fn main(args: ChaosArgs) -> anyhow::Result<()> {
    let mut args = args;
    args.controller_bin = Some(fleet::controller_for_cli(args.controller_bin.as_deref())?);
    let report = run(&args).await?;
    report.write_summary(&mut std::io::stderr())?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    let v = report.violations();
    if !v.is_empty() {
        anyhow::bail!("invariants violated:\n- {}", v.join("\n- "));
    }
    Ok(())
}

/// A random time until the next of `per_minute` events (uniform around the mean), or never.
fn next_in(rng: &mut StdRng, per_minute: f64) -> Option<Duration> {
    (per_minute > 0.0).then(|| {
        let mean = 60_000.0 / per_minute;
        Duration::from_millis(rng.random_range(mean * 0.5..mean * 1.5) as u64)
    })
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(365 * 24 * 3600)
}

fn planes(cells: &[Cell]) -> Planes<'_> {
    Planes {
        platform: &cells[0].platform,
        cells: cells
            .iter()
            .map(|c| CellRef {
                label: &c.label,
                id: &c.id,
                server: &c.server,
            })
            .collect(),
    }
}

/// Runs the whole scenario and judges the invariants.
pub async fn run(args: &ChaosArgs) -> anyhow::Result<ChaosReport> {
    args.validate()?;
    let bin = locate_controller(args.controller_bin.as_deref())?;
    let sweep_known = fleet::knows_flag(&bin, SWEEP_FLAG)?;
    let mut rng = StdRng::seed_from_u64(args.seed);
    let request_timeout = Duration::from_millis(args.faults.request_timeout_ms()?);
    let commit_delay = Duration::from_millis(args.faults.commit_delay_ms);
    let within = args.lapse.addressed_within();

    // IPAM's world; on localplane also cell a's.
    let ipam = fleet::world().start().await?;
    let platform = ipam
        .lp()
        .project(PLATFORM_PROJECT)
        .expect("the first world serves the platform project");
    let landings = landings::Landings::watch(&platform);
    let base = ControllerSpec::new(&ipam, bin, "chaos-a");
    let mut spec = ControllerSpec {
        concurrency: args.concurrency,
        // Short lease and backoff: a takeover and a retry must fit in a bounded run.
        extra_args: vec![
            format!("--leader-election-lease-duration={}ms", LEASE.as_millis()),
            format!(
                "--leader-election-renew-deadline={}ms",
                ELECTION.renew_deadline.as_millis()
            ),
            format!(
                "--leader-election-retry-period={}ms",
                ELECTION.retry_period.as_millis()
            ),
            "--backoff-base=100ms".into(),
            "--backoff-cap=2s".into(),
            "--recheck-interval=2s".into(),
            format!("--request-timeout={}", args.faults.request_timeout),
        ],
        env: vec![(
            SWEEP_ENV.into(),
            format!("{}ms", args.controller_sweep_interval.as_millis()),
        )],
        ..base
    };
    if let Some(every) = &args.release_orphaned_claims_every {
        spec.extra_args
            .push(format!("--release-orphaned-claims-every={every}"));
    }
    // Every cell after the first has no IPAM of its own: its controllers claim from the first
    // world's platform project, as two cells of one location do. Every cell's logs go to IPAM's
    // world.
    let servers = match args.cell {
        CellKind::Local => {
            let mut servers = vec![CellServer::Local(Box::new(ipam))];
            if args.cells == 2 {
                servers.push(CellServer::Local(Box::new(
                    fleet::world().cell_only().start().await?,
                )));
            }
            servers
        }
        CellKind::Real => {
            let second = async {
                match args.cells {
                    2 => CellServer::real(None).await.map(Some),
                    _ => Ok(None),
                }
            };
            let (first, second) = tokio::join!(CellServer::real(Some(ipam)), second);
            std::iter::once(first?).chain(second?).collect()
        }
    };
    let mut cells = vec![];
    for (server, label) in servers.into_iter().zip(["a", "b"]) {
        let (cell_kubeconfig, env) = server.controller_access();
        let spec = ControllerSpec {
            name: format!("chaos-{label}"),
            cell_kubeconfig,
            env: spec.env.iter().cloned().chain(env).collect(),
            ..spec.clone()
        };
        cells.push(Cell::new(label, server, platform.clone(), Fleet::new(spec)).await?);
    }
    for c in &mut cells {
        for i in 0..args.shards {
            c.create(&format!("shard-{i}")).await?;
        }
        c.stats.shards_at_start = args.shards;
    }

    // Each cell's faults: the run's; while a lapse fault is on or to be judged, none on its
    // leases but the slow renewals. A renewal that fails (or times out under a latency spike)
    // tells the leader, which then looks at every shard again: a lost trigger would go unseen.
    let faults_of = |c: &mut Cell, seed: u64, spike: bool| {
        let spared = c.guarding_lapse();
        let slow = c.renewing_slowly();
        let mut cfg = args.faults.config(seed, spike);
        if spared {
            faults::spare_leases(&mut cfg);
        }
        if slow {
            cfg.rules.push(faults::slow_lease_renewals(
                args.lapse.slow_renewal_latency_ms,
            ));
        }
        c.server.set_faults(cfg);
        c.lease_faults = (spared, slow);
    };
    // Whenever a cell's lapse faults change, at once: the judgement's clock runs from there.
    let sync_faults = |cells: &mut [Cell], seed: u64, spike: bool| {
        for c in cells.iter_mut() {
            if c.lease_faults != (c.guarding_lapse(), c.renewing_slowly()) {
                faults_of(c, seed, spike);
            }
        }
    };
    for c in &mut cells {
        faults_of(c, args.seed, false);
    }
    let start = Instant::now();
    let total = Duration::from_secs(args.seconds.max(2));
    let switch = start + total.mul_f64(1.0 - args.unelected_share);
    let check_every = Duration::from_millis(args.check_interval_ms);
    let mut observer = Observer::new(start);
    let mut prompt = Promptness::new(start, within);
    let mut elected = true;
    let mut created = 0usize;
    let mut next_churn = start;
    let mut next_check = start;
    let mut next_spike = start + Duration::from_millis(rng.random_range(500..3000));
    let mut spike_until: Option<Instant> = None;
    let mut spikes = 0usize;
    for (i, c) in cells.iter_mut().enumerate() {
        c.run_start = start;
        c.addressed_within = within;
        c.next_kill = next_in(&mut rng, args.kills_per_minute)
            .map_or_else(far_future, |d| start + Duration::from_millis(1000) + d / 2);
        // The first pause early, so that one falls in the elected half even of a short run.
        c.next_pause = next_in(&mut rng, args.pauses_per_minute).map_or_else(far_future, |_| {
            start + Duration::from_millis(rng.random_range(2000..4000))
        });
        c.pause_before_lapse = args.pauses_per_minute > 0.0;
        // The first lapse fault once that pause has begun (`pause_before_lapse` holds it back
        // till then), the cells taking the two kinds in turns: each kind strikes under
        // election even in a short run.
        let early = start + Duration::from_millis(rng.random_range(4500..5500));
        let (slow_at, short_at) = if i % 2 == 0 {
            (early, early + Duration::from_secs(1))
        } else {
            (early + Duration::from_secs(1), early)
        };
        c.next_slow_renewals = next_in(&mut rng, args.lapse.slow_renewals_per_minute)
            .map_or_else(far_future, |_| slow_at);
        c.next_short_pause = next_in(&mut rng, args.lapse.short_pauses_per_minute)
            .map_or_else(far_future, |_| short_at);
        c.keep_running(true)?;
    }

    while start.elapsed() < total {
        if elected && Instant::now() >= switch {
            // No election from here: two writers per cell race for real.
            elected = false;
            for c in &mut cells {
                c.restart_all(false).await?;
                faults_of(c, args.seed ^ nanos_since(start), spike_until.is_some());
            }
        }
        let now = Instant::now();
        for c in &mut cells {
            c.resume_due(false).await?;
            if now >= c.next_kill && !c.leader_paused() {
                // A lapse fault about to begin needs the leader as much as one under way.
                let spare_leader = c.guarding_lapse() || (elected && c.lapse_ready(now).await?);
                c.kill(&mut rng, spare_leader).await?;
                c.next_kill = next_in(&mut rng, args.kills_per_minute)
                    .map_or_else(far_future, |d| Instant::now() + d);
            }
            c.keep_running(elected)?;
            c.recreate_due(now).await?;
            if c.slow_renewals_over(now) {
                c.end_slow_renewals();
            }
        }
        sync_faults(
            &mut cells,
            args.seed ^ nanos_since(start),
            spike_until.is_some(),
        );
        for c in &mut cells {
            if now >= c.next_pause {
                if c.guarding_lapse() || (elected && c.lapse_ready(now).await?) {
                    // A takeover queues every shard: it would hide what the lapse lost. A lapse
                    // fault due goes first, or a short run under election might have none.
                    c.next_pause = now + Duration::from_millis(500);
                    continue;
                }
                let length = Duration::from_millis(
                    rng.random_range(args.pause_ms * 4 / 5..=args.pause_ms * 6 / 5),
                );
                if elected && now + length + Duration::from_secs(1) > switch {
                    // The switch to two writers replaces every controller: a leader stopped
                    // across it would never wake. Its turn comes after the switch.
                    c.next_pause = switch + Duration::from_secs(1);
                    continue;
                }
                c.next_pause = if pause_mid_write(c, elected, length, &mut rng).await? {
                    next_in(&mut rng, args.pauses_per_minute)
                        .map_or_else(far_future, |d| Instant::now() + d)
                } else {
                    // Nobody to stop yet (no leader elected): try again shortly.
                    Instant::now() + Duration::from_millis(500)
                };
            }
        }
        if elected {
            for i in 0..cells.len() {
                next_lapse(&mut cells, i, args, switch, &mut created, &mut rng).await?;
                sync_faults(
                    &mut cells,
                    args.seed ^ nanos_since(start),
                    spike_until.is_some(),
                );
            }
        }
        if now >= next_churn {
            churn(&mut cells, args, &mut created, &mut rng).await?;
            let mean = args.churn_interval_ms;
            next_churn =
                Instant::now() + Duration::from_millis(rng.random_range(mean / 3..=mean * 5 / 3));
        }
        if spike_until.is_some_and(|u| now >= u) {
            for c in &mut cells {
                faults_of(c, args.seed ^ nanos_since(start), false);
            }
            spike_until = None;
        } else if spike_until.is_none() && now >= next_spike && args.faults.latency_ms > 0 {
            for c in &mut cells {
                faults_of(c, args.seed ^ nanos_since(start), true);
            }
            spikes += 1;
            spike_until = Some(now + Duration::from_millis(rng.random_range(300..1200)));
            next_spike = now + Duration::from_millis(rng.random_range(2000..5000));
        }
        for c in &mut cells {
            c.sample(elected).await?;
        }
        judge_due(&mut cells, &mut prompt, false).await?;
        sync_faults(
            &mut cells,
            args.seed ^ nanos_since(start),
            spike_until.is_some(),
        );
        if now >= next_check {
            observer.sample(&planes(&cells)).await?;
            next_check = now + check_every;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let fault_seconds = start.elapsed().as_secs_f64();
    for c in &mut cells {
        c.end_slow_renewals();
        c.server.clear_faults();
    }

    // Settle: stopped controllers wake now, late; shards still to be made again are made; at
    // least one controller per cell runs. Nothing is judged final before every delayed commit
    // and every hung request of the run has run out.
    let settle_start = Instant::now();
    let quiet_after = commit_delay.max(request_timeout) + request_timeout + Duration::from_secs(1);
    let settle = Duration::from_secs(args.settle_seconds).max(quiet_after);
    let late_window = Duration::from_millis(args.pause_ms * 6 / 5)
        + commit_delay
        + request_timeout
        + Duration::from_secs(2);
    for c in &mut cells {
        c.resume_due(true).await?;
        c.recreate_due(far_future()).await?;
        c.owe(
            format!("the faults stopped at {fault_seconds:.1} s"),
            Instant::now(),
        );
    }
    loop {
        for c in &mut cells {
            c.keep_running(elected)?;
            c.sample(elected).await?;
        }
        judge_due(&mut cells, &mut prompt, false).await?;
        if Instant::now() >= next_check {
            observer.sample(&planes(&cells)).await?;
            next_check = Instant::now() + check_every;
        }
        let mut addressed = true;
        for c in &cells {
            let (n, done) = c.progress().await?;
            addressed &= n == done && n == c.live.len();
        }
        let owed = observer
            .leftovers(&planes(&cells), &facts(&cells, late_window))
            .await?
            .owed
            .len();
        let quiet = settle_start.elapsed() >= quiet_after;
        if (addressed && owed == 0 && quiet) || settle_start.elapsed() > settle {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let settle_time = settle_start.elapsed();
    // What is still owed is judged now: a settle that ran out outlasted every due time (checked:
    // --addressed-within-seconds is shorter), and one that ended early found every shard addressed.
    judge_due(&mut cells, &mut prompt, true).await?;
    let judged: Vec<_> = cells.iter().enumerate().map(|(i, c)| c.judged(i)).collect();
    prompt.annotate_end(&judged).await?;
    drop(judged);

    let mut report = ChaosReport {
        seed: args.seed,
        fault_seconds,
        settle_time_seconds: settle_time.as_secs_f64(),
        addressed_within_seconds: args.lapse.addressed_within_seconds,
        controller_sweep: if sweep_known {
            format!(
                "{SWEEP_FLAG} {}ms{}",
                args.controller_sweep_interval.as_millis(),
                if args.controller_sweep_interval.is_zero() {
                    " (off)"
                } else {
                    ""
                }
            )
        } else {
            format!("none (the controller has no {SWEEP_FLAG})")
        },
        ..Default::default()
    };
    for c in &mut cells {
        c.finish_stats();
    }
    let findings = observer
        .finish(&planes(&cells), &facts(&cells, late_window))
        .await?;
    report.invariants = findings.sampled;
    report.addressed_in_time = prompt.verdict;
    report.unaddressed = findings.unaddressed;
    report.leftover_claims = findings.leftovers;
    report.faults.latency_spikes = spikes;
    report.faults.latency_ms = args.faults.latency_ms;
    report.faults.watch_cut_after_seconds =
        (args.faults.watch_cut_seconds > 0.0).then_some(args.faults.watch_cut_seconds);
    report.faults.slow_renewal_latency_ms = args.lapse.slow_renewal_latency_ms;
    report.faults.releases_after_recreation = landings.after_recreation(&cells);
    for c in &cells {
        let m = c.server.cell_metrics();
        for (plane, injected) in c.server.injected_faults() {
            let label = if plane == faults::CELL_PLANE {
                format!("cell {}", c.label)
            } else {
                plane
            };
            report.faults.add(label, injected);
        }
        report.faults.shard_watches_by_cell.insert(
            format!("cell {}", c.label),
            m.count(|k| k.verb == "watch" && k.resource.starts_with("egressshards.")),
        );
        report.faults.slow_renewal_phases += c.stats.slow_renewal_phases;
        report.faults.slow_renewals += c.stats.slow_renewals;
        report.faults.short_pauses += c.stats.short_pauses;
        report.faults.short_pauses_within_lease += c.stats.short_pauses_within_lease;
        report.cells.push(c.stats.clone());
    }
    let keep = args.keep_logs
        || !report.violations().is_empty()
        || cells.iter().any(|c| !c.stats.unexpected_exits.is_empty());
    report.cell = format!("{:?}", args.cell).to_lowercase();
    // The first cell holds IPAM's world, and every cell's logs with it.
    for (i, mut c) in cells.into_iter().enumerate() {
        c.fleet.kill_all().await;
        if let Some(dir) = c.server.shutdown(keep && i == 0).await {
            report.log_dir = Some(dir.join("logs").display().to_string());
        }
    }
    Ok(report)
}

fn facts(cells: &[Cell], late_window: Duration) -> RunFacts<'_> {
    RunFacts {
        cells: cells
            .iter()
            .map(|c| CellFacts {
                live: &c.live,
                deleted: &c.deleted,
                samples: &c.samples,
            })
            .collect(),
        late_window,
    }
}

fn nanos_since(start: Instant) -> u64 {
    start.elapsed().as_nanos() as u64
}

/// One churn step: new shards under one name in every cell, or in one cell a delete, or a
/// delete and a create again under the same name.
async fn churn(
    cells: &mut [Cell],
    args: &ChaosArgs,
    created: &mut usize,
    rng: &mut StdRng,
) -> anyhow::Result<()> {
    let roll: f64 = rng.random();
    let i = rng.random_range(0..cells.len());
    let few = cells[i].live.len() < 10;
    if few || roll >= args.recreate_share + args.delete_share {
        return make_new(cells, created).await;
    }
    let c = &mut cells[i];
    let Some(name) = c.pick_live(rng) else {
        return Ok(());
    };
    if roll < args.delete_share {
        c.delete(&name).await?;
        c.stats.deleted += 1;
    } else {
        let delay = if rng.random_bool(0.5) {
            Duration::ZERO
        } else {
            Duration::from_millis(rng.random_range(100..2000))
        };
        c.recreate(&name, delay).await?;
    }
    Ok(())
}

/// Makes a shard under a new name in every cell.
async fn make_new(cells: &mut [Cell], created: &mut usize) -> anyhow::Result<()> {
    let name = format!("late-{created}");
    *created += 1;
    for c in cells.iter_mut() {
        c.create(&name).await?;
        c.stats.created += 1;
    }
    Ok(())
}

/// A fault that ends a leader's writes without telling it.
#[derive(Debug, Clone, Copy)]
enum Lapse {
    SlowRenewals,
    ShortPause,
}

/// Begins cell `i`'s next lapse fault if one is due and the cell is free for it: no fault of
/// the kind on or still to be judged, no controller stopped, a leader to lapse, and time to end
/// it before the switch to two writers. The caller then puts the cell's faults in place.
async fn next_lapse(
    cells: &mut [Cell],
    i: usize,
    args: &ChaosArgs,
    switch: Instant,
    created: &mut usize,
    rng: &mut StdRng,
) -> anyhow::Result<()> {
    let now = Instant::now();
    let c = &mut cells[i];
    if !c.lapse_ready(now).await? {
        return Ok(());
    }
    let kind = if c.next_slow_renewals <= c.next_short_pause {
        Lapse::SlowRenewals
    } else {
        Lapse::ShortPause
    };
    let (length, per_minute) = match kind {
        Lapse::SlowRenewals => (
            Duration::from_secs(args.lapse.slow_renewal_seconds),
            args.lapse.slow_renewals_per_minute,
        ),
        Lapse::ShortPause => (
            Duration::from_millis(args.lapse.short_pause_ms),
            args.lapse.short_pauses_per_minute,
        ),
    };
    let leader = if !c.guarding_lapse() && !c.any_paused() {
        c.leader().await?
    } else {
        None
    };
    let too_late = now + length + Duration::from_secs(1) > switch;
    let c = &mut cells[i];
    let slot = match kind {
        Lapse::SlowRenewals => &mut c.next_slow_renewals,
        Lapse::ShortPause => &mut c.next_short_pause,
    };
    if too_late {
        // It could not end before the switch, which replaces every controller.
        *slot = far_future();
        return Ok(());
    }
    let Some(leader) = leader else {
        // Still due: it begins at the first tick the cell is free, ahead of the other kind
        // if that came due later, and long pauses and leader kills wait for it meanwhile.
        return Ok(());
    };
    *slot = next_in(rng, per_minute).map_or_else(far_future, |d| now + length + d);
    match kind {
        Lapse::SlowRenewals => c.begin_slow_renewals(length),
        Lapse::ShortPause => {
            c.pause(&leader, length, false, true).await?;
            // Made while the leader is stopped: its event waits in the leader's watch until it
            // wakes past its deadline (churn makes more).
            make_new(cells, created).await?;
        }
    }
    Ok(())
}

/// Judges what the cells are owed by now (everything, with `all`).
async fn judge_due(cells: &mut [Cell], prompt: &mut Promptness, all: bool) -> anyhow::Result<()> {
    let now = Instant::now();
    for (i, c) in cells.iter_mut().enumerate() {
        for owed in c.owed_due(now, all) {
            prompt.judge(&c.judged(i), &owed).await?;
        }
    }
    Ok(())
}

/// Stops a cell's leader (any running controller without election) in the middle of its work:
/// a shard is made again under its name, and as soon as the claim for the new incarnation has
/// landed in IPAM (the shard's write is next) the controller is SIGSTOPped for `length`.
/// Whether a controller was stopped.
async fn pause_mid_write(
    cell: &mut Cell,
    elected: bool,
    length: Duration,
    rng: &mut StdRng,
) -> anyhow::Result<bool> {
    let Some(target) = cell.pause_target(elected, rng).await? else {
        return Ok(false);
    };
    let Some(name) = cell.pick_live(rng) else {
        cell.pause(&target, length, false, false).await?;
        return Ok(true);
    };
    cell.recreate(&name, Duration::ZERO).await?;
    let uid = cell.live.get(&name).cloned().unwrap_or_default();
    let landed = cell.claim_lands(&name, &uid, Duration::from_secs(2)).await;
    cell.pause(&target, length, landed, false).await?;
    Ok(true)
}
