//! `egress-address bench`: the controller against localplane over HTTP, measured the way its
//! users judge it (wall time, requests per shard, memory, idle traffic, restart cost), next to an
//! ideal client doing the minimal request sequence. The controller runs as a process
//! ([`crate::fleet`]) in a fresh test world (`localplane::testing`) for every run.

mod ideal;
mod report;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Args;

use localplane::testing::{World, is_addressed, shards_key};

use crate::fleet::{self, Controller, ControllerSpec};
use report::is_event;
pub use report::{BenchReport, IdleMeasurement, Measurement, RestartMeasurement, Run};

const BENCH_NAMESPACE: &str = "bench";

/// Options of `egress-address bench`.
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
}

/// Runs the matrix and prints the markdown report.
pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    let bin = fleet::controller_for_cli(args.controller_bin.as_deref())?;
    let report = measure(&args, &bin).await?;
    let md = report.markdown();
    println!("{md}");
    if let Some(p) = &args.output {
        std::fs::write(p, &md)?;
    }
    Ok(())
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
    let mut report = BenchReport::default();
    let configs: Vec<(usize, usize)> = args
        .shards
        .iter()
        .flat_map(|&n| args.concurrency.iter().map(move |&c| (n, c)))
        .collect();
    for (i, &(n, c)) in configs.iter().enumerate() {
        eprintln!("bench: {n} shards at concurrency {c}");
        let mut runs = vec![];
        let mut ideal_walls = vec![];
        for rep in 1..=args.repeat {
            // Ideal and controller runs alternate, so a slow spell of the machine hits both.
            ideal_walls.push(ideal_run(n, c).await?);
            let (run, w, mut ctl, spec) = controller_run(bin, n, c, rep, timeout).await?;
            eprintln!(
                "bench: run {rep}/{}: controller {:.2} s, ideal {:.2} s",
                args.repeat,
                run.wall.as_secs_f64(),
                ideal_walls.last().map_or(0.0, Duration::as_secs_f64),
            );
            runs.push(run);
            let last = i + 1 == configs.len() && rep == args.repeat;
            if last {
                report.idle = idle_after(args, &w, &mut ctl, n).await?;
            }
            ctl.stop(Duration::from_secs(10)).await;
            if last && !args.no_restart {
                report.restart = Some(restart_after(args, &w, &spec, n, timeout).await?);
            }
            w.shutdown().await;
        }
        let m = Measurement::new(runs, ideal_walls);
        eprintln!("bench: {}", m.summary());
        report.runs.push(m);
    }
    Ok(report)
}

/// The ideal client over N fresh shards in a localplane of its own; its wall time.
async fn ideal_run(n: usize, c: usize) -> anyhow::Result<Duration> {
    let w = fleet::world().start().await?;
    w.seed_shards(BENCH_NAMESPACE, "shard", 0..n);
    w.reset_counters();
    let wall = ideal::run(&w, BENCH_NAMESPACE, c).await?;
    let ideal_requests = w.lp().metrics().total();
    if ideal_requests != 2 * n as u64 {
        bail!("the ideal client made {ideal_requests} requests for {n} shards");
    }
    w.shutdown().await;
    Ok(wall)
}

/// The controller over N fresh shards, until every one is addressed and its events have landed.
/// The world and the controller are handed back still running.
async fn controller_run(
    bin: &Path,
    n: usize,
    c: usize,
    rep: usize,
    timeout: Duration,
) -> anyhow::Result<(Run, World, Controller, ControllerSpec)> {
    let w = fleet::world().start().await?;
    w.seed_shards(BENCH_NAMESPACE, "shard", 0..n);
    let spec = ControllerSpec {
        concurrency: c,
        ..ControllerSpec::new(&w, bin.to_path_buf(), &format!("bench-{n}-{c}-{rep}"))
    };
    // Polled every 25 ms while the controller works: a scan of the store each time would take
    // CPU and the store's lock from the server being measured.
    let mut progress = w
        .lp()
        .cell()
        .tally(&shards_key(), Some(BENCH_NAMESPACE), is_addressed);
    w.reset_counters();
    let mut ctl = spec.spawn()?;
    let started = Instant::now();
    let mut ready = None;
    let wall = loop {
        let (total, done) = progress.counts();
        if total == done {
            break started.elapsed();
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
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    let cpu_at_wall = ctl.cpu_time();
    // Events are sent beside (or after) the addresses: the run is over when no event has
    // landed for a while.
    let mut events = w.lp().metrics().count(is_event);
    let mut events_done = wall;
    let mut quiet_since = Instant::now();
    while quiet_since.elapsed() < EVENTS_QUIET && started.elapsed() < timeout {
        tokio::time::sleep(Duration::from_millis(25)).await;
        let now = w.lp().metrics().count(is_event);
        if now != events {
            events = now;
            events_done = started.elapsed();
            quiet_since = Instant::now();
        }
    }
    let run = Run::collect(
        &w,
        n,
        c,
        wall,
        events_done,
        ready,
        cpu_at_wall,
        ctl.peak_rss(),
    );
    Ok((run, w, ctl, spec))
}

/// How long no event may land before a run's events count as all sent.
const EVENTS_QUIET: Duration = Duration::from_secs(1);

async fn idle_after(
    args: &BenchArgs,
    w: &World,
    ctl: &mut Controller,
    n: usize,
) -> anyhow::Result<Option<IdleMeasurement>> {
    if args.idle_seconds == 0 {
        return Ok(None);
    }
    eprintln!("bench: idle for {}s", args.idle_seconds);
    w.lp().metrics().reset();
    tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
    ctl.check_alive()?;
    Ok(Some(IdleMeasurement::collect(w, n, args.idle_seconds)))
}

async fn restart_after(
    args: &BenchArgs,
    w: &World,
    spec: &ControllerSpec,
    n: usize,
    timeout: Duration,
) -> anyhow::Result<RestartMeasurement> {
    eprintln!("bench: restart with {n} addressed shards");
    w.lp().metrics().reset();
    let mut fresh = ControllerSpec {
        name: format!("{}-restarted", spec.name),
        ..spec.clone()
    }
    .spawn()?;
    // The old leader released its lease on SIGTERM, or the new one waits it out: both are
    // part of what an operator sees.
    let to_ready = fresh.wait_ready(timeout).await?;
    tokio::time::sleep(Duration::from_secs(args.restart_watch_seconds)).await;
    fresh.check_alive()?;
    let m =
        RestartMeasurement::collect(w, n, to_ready, args.restart_watch_seconds, fresh.peak_rss());
    fresh.stop(Duration::from_secs(10)).await;
    Ok(m)
}
