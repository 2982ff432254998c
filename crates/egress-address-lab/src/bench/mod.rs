//! `egress-address-lab bench`: the controller against localplane over HTTP, measured the way its
//! users judge it (wall time, requests per shard, memory, idle traffic, restart cost), next to an
//! ideal client doing the minimal request sequence. The controller runs as a process
//! ([`crate::fleet`]) in a fresh test world (`localplane::testing`) for every run.
//!
//! Without a mode, `bench` runs the matrix (shard counts × concurrencies). The modes measure
//! one thing each: `churn` (latency of new shards in a busy cell), `growth` (cost per shard as a
//! cell grows), `outage` (IPAM down while shards wait) and `soak` (a long run: idle cost per
//! shard per hour, RSS over time).

pub mod bed;
pub mod churn;
pub mod growth;
pub mod host;
mod ideal;
mod lister;
pub mod outage;
mod report;
pub mod shape;
pub mod soak;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};

use bed::{Bed, ControlPlaneUse, Progress};

use crate::cell::CellKind;
use crate::fleet::{self, Controller, ControllerSpec};
use host::LoadAvg;
use report::is_event;
pub use report::{BenchReport, IdleMeasurement, Measurement, RestartMeasurement, Run};
pub use shape::Objects;

const BENCH_NAMESPACE: &str = "bench";

/// `egress-address-lab bench [MODE]`.
#[derive(Args, Debug, Clone)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchCli {
    #[command(subcommand)]
    pub mode: Option<Mode>,
    #[command(flatten)]
    pub matrix: BenchArgs,
}

/// What a bench measures besides the matrix.
#[derive(Subcommand, Debug, Clone)]
pub enum Mode {
    /// Shards created at a steady rate into a cell of addressed shards: time from create to
    /// addressed (p50, p99), controller against the ideal client in the same run.
    Churn(churn::ChurnArgs),
    /// The cell grows (1,000 → 10,000 → 50,000 → 100,000 shards by default): wall, CPU and RSS per shard,
    /// time to /ready after a restart, their slopes, and localplane's share of the CPU.
    Growth(growth::GrowthArgs),
    /// IPAM down while shards wait: IPAM attempts per pending shard per minute, the peak rate,
    /// and the time to converge once IPAM answers again.
    Outage(outage::OutageArgs),
    /// A long run over addressed shards at the controller's defaults: IPAM and cell requests per
    /// shard per hour and per minute (the drift check), RSS sampled over time, optional churn.
    Soak(soak::SoakArgs),
    /// The ideal client as a process of its own, as the matrix starts it.
    #[command(hide = true)]
    IdealClient(ideal::ClientArgs),
    /// The ideal lister as a process of its own, as a restart's measurement starts it.
    #[command(hide = true)]
    IdealLister(lister::ListerArgs),
}

/// Options every mode shares.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// The egress-address-controller binary (default: next to this executable).
    #[arg(long, env = "BENCH_CONTROLLER_BIN")]
    pub controller_bin: Option<PathBuf>,
    /// The shards' shape: production (labels, annotations, status, managedFields) or bare.
    #[arg(long, value_enum, default_value_t = Objects::Production, env = "BENCH_OBJECTS")]
    pub objects: Objects,
    /// Also write the markdown report to this file.
    #[arg(long, env = "BENCH_OUTPUT")]
    pub output: Option<PathBuf>,
    /// The cell: localplane, or the real kube-apiserver and etcd (a fresh one per run; IPAM is
    /// localplane's either way). The matrix, churn and growth run on both; outage and soak on
    /// localplane only.
    #[arg(long, value_enum, default_value_t = CellKind::Local, env = "BENCH_CELL")]
    pub cell: CellKind,
}

/// Prints a report and writes it to `--output`.
fn emit(md: &str, output: Option<&Path>) -> anyhow::Result<()> {
    println!("{md}");
    if let Some(p) = output {
        std::fs::write(p, md)?;
    }
    Ok(())
}

/// A mutex's guard, whether or not a holder panicked (the bench's maps stay usable).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The command line of this run, as docs/benchmarks.md quotes it.
fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("egress-address {}", args.join(" "))
}

/// Options of `egress-address-lab bench`.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Shard counts to address, each from scratch.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1000,10000",
        env = "BENCH_SHARDS"
    )]
    pub shards: Vec<usize>,
    /// Reconcile concurrencies to run each shard count at.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,4,16",
        env = "BENCH_CONCURRENCY"
    )]
    pub concurrency: Vec<usize>,
    /// Ideal and controller runs per (shards, concurrency); walls are reported as medians.
    #[arg(long, default_value_t = 3, env = "BENCH_REPEAT")]
    pub repeat: usize,
    /// How long to count requests with everything addressed (0 skips the idle measurement).
    #[arg(long, default_value_t = 60, env = "BENCH_IDLE_SECONDS")]
    pub idle_seconds: u64,
    /// Skip the restart measurement.
    #[arg(long, env = "BENCH_NO_RESTART")]
    pub no_restart: bool,
    /// How long a restarted controller is watched for writes after it is ready.
    #[arg(long, default_value_t = 15, env = "BENCH_RESTART_WATCH_SECONDS")]
    pub restart_watch_seconds: u64,
    /// The egress-address-controller binary (default: next to this executable).
    #[arg(long, env = "BENCH_CONTROLLER_BIN")]
    pub controller_bin: Option<PathBuf>,
    /// Give up on one run after this long.
    #[arg(long, default_value_t = 900, env = "BENCH_RUN_TIMEOUT_SECONDS")]
    pub run_timeout_seconds: u64,
    /// Also write the markdown report to this file.
    #[arg(long, env = "BENCH_OUTPUT")]
    pub output: Option<PathBuf>,
    /// The shards' shape: production (labels, annotations, status, managedFields) or bare.
    #[arg(long, value_enum, default_value_t = Objects::Production, env = "BENCH_OBJECTS")]
    pub objects: Objects,
    /// The cell: localplane, or the real kube-apiserver and etcd (a fresh one per run; IPAM is
    /// localplane's either way).
    #[arg(long, value_enum, default_value_t = CellKind::Local, env = "BENCH_CELL")]
    pub cell: CellKind,
}

/// Runs the matrix or a mode and prints its markdown report.
pub async fn run(cli: BenchCli) -> anyhow::Result<()> {
    match cli.mode {
        None => {
            let args = cli.matrix;
            let bin = fleet::controller_for_cli(args.controller_bin.as_deref())?;
            let report = measure(&args, &bin).await?;
            emit(&report.markdown(), args.output.as_deref())
        }
        Some(Mode::Churn(a)) => {
            let bin = fleet::controller_for_cli(a.common.controller_bin.as_deref())?;
            let r = churn::measure(&a, &bin).await?;
            emit(&r.markdown(), a.common.output.as_deref())
        }
        Some(Mode::Growth(a)) => {
            let bin = fleet::controller_for_cli(a.common.controller_bin.as_deref())?;
            let r = growth::measure(&a, &bin).await?;
            emit(&r.markdown(), a.common.output.as_deref())
        }
        Some(Mode::Outage(a)) => {
            bed::require_local(a.common.cell, "outage")?;
            let bin = fleet::controller_for_cli(a.common.controller_bin.as_deref())?;
            let r = outage::measure(&a, &bin).await?;
            emit(&r.markdown(), a.common.output.as_deref())
        }
        Some(Mode::Soak(a)) => {
            bed::require_local(a.common.cell, "soak")?;
            let bin = fleet::controller_for_cli(a.common.controller_bin.as_deref())?;
            let r = soak::measure(&a, &bin).await?;
            emit(&r.markdown(), a.common.output.as_deref())
        }
        Some(Mode::IdealClient(a)) => ideal::client(&a).await,
        Some(Mode::IdealLister(a)) => lister::lister(&a).await,
    }
}

/// Runs the matrix with the controller binary `bin`: for every (shards, concurrency), `repeat`
/// pairs of an ideal run and a controller run, then idle and restart after the last one.
pub async fn measure(args: &BenchArgs, bin: &Path) -> anyhow::Result<BenchReport> {
    if args.shards.is_empty() || args.concurrency.is_empty() {
        bail!("--shards and --concurrency need at least one value each");
    }
    if args.repeat == 0 {
        bail!("--repeat must be at least 1");
    }
    let timeout = Duration::from_secs(args.run_timeout_seconds);
    let mut report = BenchReport {
        objects: args.objects,
        cell: args.cell,
        command: command_line(),
        ..BenchReport::default()
    };
    let configs: Vec<(usize, usize)> = args
        .shards
        .iter()
        .flat_map(|&n| args.concurrency.iter().map(move |&c| (n, c)))
        .collect();
    for (i, &(n, c)) in configs.iter().enumerate() {
        eprintln!("bench: {n} shards at concurrency {c}");
        let mut runs = vec![];
        let mut ideal_walls = vec![];
        let mut ideal_cps = vec![];
        for rep in 1..=args.repeat {
            // Ideal and controller runs alternate, so a slow spell of the machine hits both.
            let (ideal_wall, ideal_cp) = ideal_run(args.cell, n, c, args.objects, timeout).await?;
            ideal_walls.push(ideal_wall);
            ideal_cps.extend(ideal_cp);
            let (run, mut bed, mut ctl, spec) =
                controller_run(args.cell, bin, n, c, rep, timeout, args.objects, &[]).await?;
            eprintln!(
                "bench: run {rep}/{}: controller {:.2} s, ideal {:.2} s, load {}",
                args.repeat,
                run.wall.as_secs_f64(),
                ideal_walls.last().map_or(0.0, Duration::as_secs_f64),
                run.load.map(|l| l.to_string()).unwrap_or_default(),
            );
            runs.push(run);
            let last = i + 1 == configs.len() && rep == args.repeat;
            if last {
                report.idle = idle_after(args, &mut bed, &mut ctl, n).await?;
            }
            ctl.stop(Duration::from_secs(10)).await;
            if last && !args.no_restart {
                report.restart = Some(
                    restart_after(args.restart_watch_seconds, &mut bed, &spec, n, timeout).await?,
                );
            }
            bed.shutdown().await;
        }
        let mut m = Measurement::new(runs, ideal_walls);
        m.ideal_control_plane = ideal_cps;
        eprintln!("bench: {}", m.summary());
        report.runs.push(m);
    }
    Ok(report)
}

/// The ideal client over N fresh shards on a bed of its own, as a process of its own; its wall
/// time, from its spawn to its last address, as the controller's is taken, and on the real cell
/// what the control plane used meanwhile.
async fn ideal_run(
    kind: CellKind,
    n: usize,
    c: usize,
    objects: Objects,
    timeout: Duration,
) -> anyhow::Result<(Duration, Option<ControlPlaneUse>)> {
    let mut bed = Bed::start(kind, n, objects).await?;
    let mut progress = bed.progress().await?;
    bed.reset_counters().await?;
    let cp_before = bed::control_plane_cpu(&bed);
    let started = Instant::now();
    let mut client = ideal::spawn(
        &bed.ideal_cell_kubeconfig(),
        &bed.ideal_ipam_kubeconfig(),
        BENCH_NAMESPACE,
        c,
    )?;
    let wall = loop {
        let (total, done) = progress
            .wait_for(Duration::from_millis(25), |total, done| total == done)
            .await;
        if total == done {
            break started.elapsed();
        }
        if let Some(status) = client.try_wait()? {
            bail!(
                "the ideal client exited with {status} after addressing {done} of {total} shards"
            );
        }
        if started.elapsed() > timeout {
            bail!("the ideal client addressed {done} of {total} shards in {timeout:?}");
        }
    };
    let control_plane = bed::control_plane_use(&bed, cp_before);
    let status = tokio::time::timeout(timeout, client.wait())
        .await
        .context("the ideal client did not exit after addressing every shard")??;
    if !status.success() {
        bail!("the ideal client exited with {status}");
    }
    bed.settled().await;
    // One list, then two requests per shard. The ideal client never watches: a watch counted
    // is the bench's own progress watch on the real cell, which the apiserver's figures include
    // and which it may close (a consumer too slow for a 50,000-shard burst) and the bench open
    // again.
    let counts = bed.counts().await?;
    let ideal_requests = report::count(&counts, |k| k.verb != "watch");
    if ideal_requests != 2 * n as u64 + 1 {
        bail!("the ideal client made {ideal_requests} requests for {n} shards: {counts:?}");
    }
    drop(progress);
    bed.shutdown().await;
    Ok((wall, control_plane))
}

/// The controller over N fresh shards, until every one is addressed and its events have landed.
/// The bed and the controller are handed back still running.
#[allow(clippy::too_many_arguments)]
async fn controller_run(
    kind: CellKind,
    bin: &Path,
    n: usize,
    c: usize,
    rep: usize,
    timeout: Duration,
    objects: Objects,
    extra_args: &[String],
) -> anyhow::Result<(Run, Bed, Controller, ControllerSpec)> {
    let mut bed = Bed::start(kind, n, objects).await?;
    let spec = ControllerSpec {
        concurrency: c,
        extra_args: extra_args.to_vec(),
        ..bed.controller_spec(bin.to_path_buf(), &format!("bench-{n}-{c}-{rep}"))
    };
    // Progress is followed from before the spawn; on the real cell its watch stays open until
    // the run's requests are counted (the apiserver counts a watch when it ends).
    let mut progress = bed.progress().await?;
    bed.reset_counters().await?;
    let server_cpu_before = host::cpu_time(None);
    let cp_before = bed::control_plane_cpu(&bed);
    let mut ctl = spec.spawn()?;
    let (wall, ready) = until_addressed(&bed, &mut progress, &mut ctl, timeout).await?;
    let cpu_at_wall = ctl.cpu_time();
    let server_cpu = host::cpu_time(None)
        .zip(server_cpu_before)
        .map(|(after, before)| after.saturating_sub(before));
    let control_plane = bed::control_plane_use(&bed, cp_before);
    let load = LoadAvg::now();
    let events_done = until_events_sent(&bed, ctl.started, wall, timeout).await?;
    let counts = bed.counts().await?;
    drop(progress);
    let mut run = Run::collect(
        &counts,
        n,
        c,
        wall,
        events_done,
        ready,
        cpu_at_wall,
        ctl.peak_rss(),
    );
    run.server_cpu = server_cpu;
    run.control_plane = control_plane;
    run.load = load;
    Ok((run, bed, ctl, spec))
}

/// Waits until every shard of the bench namespace is addressed: the time since the controller
/// was spawned, and when it was first seen ready.
async fn until_addressed(
    bed: &Bed,
    progress: &mut Progress,
    ctl: &mut Controller,
    timeout: Duration,
) -> anyhow::Result<(Duration, Option<Duration>)> {
    // Progress comes from the store's change stream (on the real cell, one watch): a scan of
    // the store each time would take CPU and the store's lock from the server being measured.
    let started = ctl.started;
    let mut ready = None;
    loop {
        // Wakes at the shard that completes the run; every 25 ms otherwise, for the checks below.
        let (total, done) = progress
            .wait_for(Duration::from_millis(25), |total, done| total == done)
            .await;
        if total == done {
            let wall = started.elapsed();
            // The last address is seen at its commit, a moment before its request is counted.
            tokio::time::timeout(timeout, bed.settled())
                .await
                .context("requests still in flight after every shard was addressed")?;
            return Ok((wall, ready));
        }
        ctl.check_alive()?;
        if ready.is_none() && ctl.is_ready().await {
            ready = Some(started.elapsed());
        }
        if started.elapsed() > timeout {
            bail!(
                "{done} of {total} shards addressed after {timeout:?}:\n{}",
                fleet::log_tail(&ctl.log, 30)
            );
        }
    }
}

/// Events are sent beside (or after) the addresses: they are all sent when none has landed for
/// a while. When the last one landed, counted from `started`.
async fn until_events_sent(
    bed: &Bed,
    started: Instant,
    wall: Duration,
    timeout: Duration,
) -> anyhow::Result<Duration> {
    // The real cell's counters are read from its /metrics, a page the apiserver renders: not
    // every 25 ms.
    let every = if bed.is_real() {
        Duration::from_millis(250)
    } else {
        Duration::from_millis(25)
    };
    let events_now =
        async || -> anyhow::Result<u64> { Ok(report::count(&bed.counts().await?, is_event)) };
    let mut events = events_now().await?;
    let mut events_done = wall;
    let mut quiet_since = Instant::now();
    while quiet_since.elapsed() < EVENTS_QUIET && started.elapsed() < timeout {
        tokio::time::sleep(every).await;
        let now = events_now().await?;
        if now != events {
            events = now;
            events_done = started.elapsed();
            quiet_since = Instant::now();
        }
    }
    Ok(events_done)
}

/// How long no event may land before a run's events count as all sent.
const EVENTS_QUIET: Duration = Duration::from_secs(1);

async fn idle_after(
    args: &BenchArgs,
    bed: &mut Bed,
    ctl: &mut Controller,
    n: usize,
) -> anyhow::Result<Option<IdleMeasurement>> {
    if args.idle_seconds == 0 {
        return Ok(None);
    }
    eprintln!("bench: idle for {}s", args.idle_seconds);
    bed.reset_counters().await?;
    tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
    ctl.check_alive()?;
    let counts = bed.counts().await?;
    Ok(Some(IdleMeasurement::collect(
        &counts,
        n,
        args.idle_seconds,
    )))
}

/// A fresh controller from `spec` against the addressed cell of `bed` (the old one stopped).
async fn restart_after(
    watch_seconds: u64,
    bed: &mut Bed,
    spec: &ControllerSpec,
    n: usize,
    timeout: Duration,
) -> anyhow::Result<RestartMeasurement> {
    eprintln!("bench: restart with {n} addressed shards");
    // The floor, on both sides of the restart: the same shards from the same server, page by
    // page. Before as well as after, since the first full list after a burst of writes may cost
    // the server more than a later one, which would favour whichever lists second.
    let lister_before = ideal_lister(bed, n, timeout).await?;
    bed.reset_counters().await?;
    let mut fresh = ControllerSpec {
        name: format!("{}-restarted", spec.name),
        ..spec.clone()
    }
    .spawn()?;
    // The old leader released its lease on SIGTERM, or the new one waits it out: both are
    // part of what an operator sees.
    let to_ready = fresh.wait_ready(timeout).await?;
    tokio::time::sleep(Duration::from_secs(watch_seconds)).await;
    fresh.check_alive()?;
    let counts = bed.counts().await?;
    let mut m = RestartMeasurement::collect(&counts, n, to_ready, watch_seconds, fresh.peak_rss());
    fresh.stop(Duration::from_secs(10)).await;
    let lister_after = ideal_lister(bed, n, timeout).await?;
    m.ideal_lister_runs = vec![lister_before, lister_after];
    m.ideal_lister = Some((lister_before + lister_after) / 2);
    Ok(m)
}

/// One run of the ideal lister over the `n` shards of `bed`.
async fn ideal_lister(bed: &Bed, n: usize, timeout: Duration) -> anyhow::Result<Duration> {
    let (wall, kept) = lister::time(&bed.ideal_cell_kubeconfig(), timeout).await?;
    if kept < n {
        bail!("the ideal lister kept {kept} of {n} shards");
    }
    Ok(wall)
}
