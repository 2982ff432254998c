//! `egress-address bench`: the controller against localplane over HTTP, measured the way its
//! users judge it (wall time, requests per shard, memory, idle traffic, restart cost), next to an
//! ideal client doing the minimal request sequence. `chaos` breaks it on purpose.

pub mod chaos;
pub mod harness;
mod ideal;
mod report;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Args;

use harness::{ControllerSpec, World, WorldOptions, is_event, is_lease, is_write};
pub use report::{IdleMeasurement, Measurement, RestartMeasurement};

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
    let bin = harness::controller_for_cli(args.controller_bin.as_deref())?;
    if args.shards.is_empty() || args.concurrency.is_empty() {
        bail!("--shards and --concurrency need at least one value each");
    }
    let timeout = Duration::from_secs(args.run_timeout_seconds);
    let mut runs = vec![];
    let mut idle = None;
    let mut restart = None;
    let last = (args.shards.len() - 1, args.concurrency.len() - 1);
    for (si, &n) in args.shards.iter().enumerate() {
        for (ci, &c) in args.concurrency.iter().enumerate() {
            eprintln!("bench: {n} shards at concurrency {c}");
            let ideal_wall = {
                let w = World::start(&WorldOptions::default()).await?;
                w.seed_shards(BENCH_NAMESPACE, "shard", 0..n);
                w.lp.metrics().reset();
                let wall = ideal::run(&w, BENCH_NAMESPACE, c).await?;
                let ideal_requests = w.lp.metrics().total();
                if ideal_requests != 2 * n as u64 {
                    bail!("the ideal client made {ideal_requests} requests for {n} shards");
                }
                w.lp.shutdown().await;
                wall
            };
            let w = World::start(&WorldOptions::default()).await?;
            w.seed_shards(BENCH_NAMESPACE, "shard", 0..n);
            let spec = ControllerSpec {
                bin: bin.clone(),
                name: format!("bench-{n}-{c}"),
                concurrency: c,
                leader_elect: true,
                cell_kubeconfig: w.cell_kubeconfig.clone(),
                ipam_kubeconfig: w.ipam_kubeconfig.clone(),
                log_dir: w.dir.path().join("logs"),
                extra_args: vec![],
            };
            // Polled every 25 ms while the controller works: a scan of the store each time
            // would take CPU and the store's lock from the server being measured.
            let mut progress = w.lp.cell().tally(
                &harness::shards_key(),
                Some(BENCH_NAMESPACE),
                harness::is_addressed,
            );
            w.lp.metrics().reset();
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
                        harness::log_tail(&ctl.log, 30)
                    );
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            };
            // Let in-flight side traffic (events) land before the counters are read.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let m = Measurement::collect(&w, n, c, wall, ideal_wall, ready, ctl.peak_rss());
            eprintln!("bench: {}", m.summary());
            runs.push(m);
            if (si, ci) == last {
                if args.idle_seconds > 0 {
                    eprintln!("bench: idle for {}s", args.idle_seconds);
                    w.lp.metrics().reset();
                    tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
                    ctl.check_alive()?;
                    idle = Some(IdleMeasurement::collect(&w, n, args.idle_seconds));
                }
                if !args.no_restart {
                    eprintln!("bench: restart with {n} addressed shards");
                    ctl.stop(Duration::from_secs(10)).await;
                    w.lp.metrics().reset();
                    let mut fresh = ControllerSpec {
                        name: format!("bench-{n}-{c}-restarted"),
                        ..spec.clone()
                    }
                    .spawn()?;
                    // The old leader released its lease on SIGTERM, or the new one waits it out:
                    // both are part of what an operator sees.
                    let to_ready = fresh.wait_ready(timeout).await?;
                    tokio::time::sleep(Duration::from_secs(args.restart_watch_seconds)).await;
                    fresh.check_alive()?;
                    restart = Some(RestartMeasurement::collect(
                        &w,
                        n,
                        to_ready,
                        args.restart_watch_seconds,
                        fresh.peak_rss(),
                    ));
                    fresh.stop(Duration::from_secs(10)).await;
                } else {
                    ctl.stop(Duration::from_secs(10)).await;
                }
            } else {
                ctl.stop(Duration::from_secs(10)).await;
            }
            w.lp.shutdown().await;
        }
    }
    let md = report::markdown(&runs, idle.as_ref(), restart.as_ref());
    println!("{md}");
    if let Some(p) = &args.output {
        std::fs::write(p, &md)?;
    }
    Ok(())
}

/// Non-lease, non-event requests: the traffic that addressing shards costs.
pub(crate) fn is_shard_work(k: &localplane::RequestKey) -> bool {
    !is_lease(k) && !is_event(k)
}

/// Writes other than lease renewals.
pub(crate) fn is_object_write(k: &localplane::RequestKey) -> bool {
    is_write(k) && !is_lease(k)
}
