//! `bench outage`: what an IPAM outage costs. A ready controller watches an empty namespace; IPAM
//! stops answering (every request on the platform plane fails), and the pending shards arrive
//! while it is down. Every IPAM attempt is counted per second from localplane's counters; when
//! IPAM answers again, the time until every shard is addressed is the convergence. The ideal
//! client addressing the same number of fresh shards with IPAM up gives the floor that
//! convergence is compared with.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::{Args, ValueEnum};

use localplane::testing::{PLATFORM_PROJECT, is_addressed, shards_key};
use localplane::{FaultOutcome, FaultRule};

use super::host::{LoadAvg, load_range, mib};
use super::report::pass;
use super::shape;
use super::{BENCH_NAMESPACE, Common, command_line, ideal_run};
use crate::cell::CellKind;
use crate::fleet::{self, ControllerSpec};

/// How IPAM is down.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Down {
    /// Connections are reset without an answer.
    Reset,
    /// Every request is answered 503.
    Unavailable,
}

/// Options of `bench outage`.
#[derive(Args, Debug, Clone)]
pub struct OutageArgs {
    #[command(flatten)]
    pub common: Common,
    /// Shards created while IPAM is down.
    #[arg(long, default_value_t = 20_000)]
    pub pending: usize,
    /// How long IPAM stays down.
    #[arg(long, default_value_t = 60)]
    pub outage_seconds: u64,
    /// How IPAM is down.
    #[arg(long, value_enum, default_value_t = Down::Reset)]
    pub down: Down,
    /// The controller's reconcile concurrency.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// The controller's `--ipam-probe-interval`, in seconds (its default is 1).
    #[arg(long, default_value_t = 1.0)]
    pub probe_interval_seconds: f64,
    /// Skip the ideal client's run over the same number of shards.
    #[arg(long)]
    pub no_ideal: bool,
    /// Give up waiting for convergence after this long.
    #[arg(long, default_value_t = 600)]
    pub run_timeout_seconds: u64,
}

/// What `bench outage` measured.
#[derive(Debug, Clone, Default)]
pub struct OutageReport {
    pub command: String,
    pub args_pending: usize,
    pub outage: Duration,
    pub probe_interval: f64,
    pub concurrency: usize,
    pub objects: shape::Objects,
    /// IPAM requests in each second of the outage (the first second is the one the shards
    /// started arriving in).
    pub per_second: Vec<u64>,
    /// When the shards had all been created, from the outage's start.
    pub created_after: Duration,
    /// From IPAM's return to its first answered request.
    pub first_answer: Option<Duration>,
    /// From IPAM's return until every shard was addressed.
    pub converged: Option<Duration>,
    /// Shards addressed when the wait for convergence ended.
    pub addressed: usize,
    /// IPAM requests from IPAM's return until convergence, and per shard.
    pub recovery_requests: u64,
    /// The ideal client's wall over the same number of fresh shards with IPAM up.
    pub ideal_wall: Option<Duration>,
    pub peak_rss: Option<u64>,
    pub loads: Vec<LoadAvg>,
}

pub async fn measure(args: &OutageArgs, bin: &Path) -> anyhow::Result<OutageReport> {
    if args.pending == 0 || args.outage_seconds == 0 || args.probe_interval_seconds <= 0.0 {
        bail!("--pending, --outage-seconds and --probe-interval-seconds must be positive");
    }
    let objects = args.common.objects;
    let mut report = OutageReport {
        command: command_line(),
        args_pending: args.pending,
        outage: Duration::from_secs(args.outage_seconds),
        probe_interval: args.probe_interval_seconds,
        concurrency: args.concurrency,
        objects,
        ..Default::default()
    };
    let timeout = Duration::from_secs(args.run_timeout_seconds);
    if !args.no_ideal {
        eprintln!(
            "bench outage: the ideal client over {} fresh shards",
            args.pending
        );
        report.ideal_wall = Some(
            ideal_run(
                CellKind::Local,
                args.pending,
                args.concurrency,
                objects,
                timeout,
            )
            .await?
            .0,
        );
        report.loads.extend(LoadAvg::now());
    }

    let w = fleet::world().start().await?;
    shape::prepare(&w, objects);
    w.lp().cell().ensure_namespace(BENCH_NAMESPACE);
    let spec = ControllerSpec {
        concurrency: args.concurrency,
        extra_args: vec![format!(
            "--ipam-probe-interval={}ms",
            (args.probe_interval_seconds * 1000.0).round() as u64
        )],
        ..ControllerSpec::new(&w, bin.to_path_buf(), "bench-outage")
    };
    let mut ctl = spec.spawn()?;
    ctl.wait_ready(timeout).await?;

    eprintln!(
        "bench outage: IPAM down for {} s; {} shards arrive",
        args.outage_seconds, args.pending
    );
    w.lp().faults().set(localplane::FaultConfig {
        seed: Some(1),
        rules: vec![FaultRule {
            plane: Some(PLATFORM_PROJECT.into()),
            error_rate: 1.0,
            // A code shapes a Status; a reset sends none.
            code: (args.down == Down::Unavailable).then_some(503),
            outcome: match args.down {
                Down::Reset => FaultOutcome::Reset,
                Down::Unavailable => FaultOutcome::Status,
            },
            ..Default::default()
        }],
        watch_cut_after_seconds: None,
    });
    w.reset_counters();
    let ipam = || w.lp().metrics().count(|k| k.plane == PLATFORM_PROJECT);
    let started = Instant::now();
    let cell = w.lp().cell();
    let (pending, seeded_objects) = (args.pending, objects);
    let seeding = tokio::task::spawn_blocking(move || {
        for i in 0..pending {
            cell.apply_object(shape::shard(
                BENCH_NAMESPACE,
                &format!("pending-{i}"),
                seeded_objects,
            ))
            .expect("a generated shard is valid");
        }
    });
    let mut seeding = Some(seeding);
    let mut last = 0;
    for second in 1..=args.outage_seconds {
        tokio::time::sleep_until((started + Duration::from_secs(second)).into()).await;
        let now = ipam();
        report.per_second.push(now - last);
        last = now;
        if seeding.as_ref().is_some_and(|s| s.is_finished()) {
            seeding.take().expect("checked").await?;
            report.created_after = started.elapsed();
        }
        ctl.check_alive()?;
    }
    if let Some(s) = seeding {
        s.await?;
        report.created_after = started.elapsed();
    }
    report.loads.extend(LoadAvg::now());

    eprintln!("bench outage: IPAM is back");
    w.clear_faults();
    let back = Instant::now();
    let before = ipam();
    let answered = || {
        w.lp()
            .metrics()
            .count(|k| k.plane == PLATFORM_PROJECT && (200..500).contains(&k.code))
    };
    let mut progress = w
        .lp()
        .cell()
        .tally(&shards_key(), Some(BENCH_NAMESPACE), is_addressed);
    loop {
        if report.first_answer.is_none() && answered() > 0 {
            report.first_answer = Some(back.elapsed());
        }
        if back.elapsed() > timeout {
            break;
        }
        ctl.check_alive()?;
        // Wakes at the shard that completes the run; every 10 ms otherwise, for the first answer.
        let converged = |all, done| all == done && all >= args.pending;
        let (all, done) = progress
            .wait_for(Duration::from_millis(10), converged)
            .await;
        report.addressed = done;
        if converged(all, done) {
            report.converged = Some(back.elapsed());
            break;
        }
    }
    report.recovery_requests = ipam() - before;
    report.loads.extend(LoadAvg::now());
    report.peak_rss = ctl.peak_rss();
    ctl.stop(Duration::from_secs(10)).await;
    w.shutdown().await;
    Ok(report)
}

/// At most this many IPAM attempts per pending shard per minute of outage.
pub const MAX_ATTEMPTS_PER_SHARD_MINUTE: f64 = 2.0;
/// Converged within this long after IPAM is back.
pub const MAX_CONVERGENCE: Duration = Duration::from_secs(10);

impl OutageReport {
    pub fn attempts(&self) -> u64 {
        self.per_second.iter().sum()
    }

    /// IPAM attempts per pending shard per minute of outage.
    pub fn per_shard_minute(&self) -> f64 {
        self.attempts() as f64
            / self.args_pending.max(1) as f64
            / (self.outage.as_secs_f64() / 60.0)
    }

    /// The most attempts in one second after the first `skip` seconds (the breaker opening).
    pub fn peak_after(&self, skip: usize) -> u64 {
        self.per_second
            .iter()
            .skip(skip)
            .copied()
            .max()
            .unwrap_or(0)
    }

    pub fn markdown(&self) -> String {
        let secs = |d: Option<Duration>| {
            d.map(|d| format!("{:.2} s", d.as_secs_f64()))
                .unwrap_or_else(|| "not reached".into())
        };
        let allowed_per_second = (1.0 / self.probe_interval).ceil() as u64;
        let peak_after = self.peak_after(2);
        let converged_ok = self.converged.is_some_and(|c| c <= MAX_CONVERGENCE);
        let mut s = format!(
            "`{}` ({} shards, concurrency {}, probe interval {} s; load average {})\n\n",
            self.command,
            self.objects.as_str(),
            self.concurrency,
            self.probe_interval,
            load_range(&self.loads)
        );
        s.push_str("| pending shards | outage | all created after | IPAM attempts during the outage | per pending shard per minute | peak in one second (all) | peak in one second after the first two | first answer after IPAM is back | converged after | ideal client, same shards, IPAM up | IPAM requests while converging (per shard) | peak RSS |\n");
        s.push_str("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        s.push_str(&format!(
            "| {} | {} s | {:.1} s | {} | {:.4} | {} | {} | {} | {} | {} | {} ({:.3}) | {} |\n",
            self.args_pending,
            self.outage.as_secs(),
            self.created_after.as_secs_f64(),
            self.attempts(),
            self.per_shard_minute(),
            self.peak_after(0),
            peak_after,
            secs(self.first_answer),
            secs(self.converged),
            secs(self.ideal_wall),
            self.recovery_requests,
            self.recovery_requests as f64 / self.args_pending.max(1) as f64,
            mib(self.peak_rss),
        ));
        let series: Vec<String> = self.per_second.iter().map(u64::to_string).collect();
        s.push_str(&format!(
            "\nIPAM attempts in each second of the outage: {}.\n\nTargets: {:.4} attempts per pending shard per minute (≤ {MAX_ATTEMPTS_PER_SHARD_MINUTE}: {}); at most {allowed_per_second} per second once the breaker is open, {peak_after} seen ({}); converged {} after IPAM is back (≤ {} s: {}; {} of {} addressed).\n",
            series.join(" "),
            self.per_shard_minute(),
            pass(self.per_shard_minute() <= MAX_ATTEMPTS_PER_SHARD_MINUTE),
            pass(peak_after <= allowed_per_second),
            secs(self.converged),
            MAX_CONVERGENCE.as_secs(),
            pass(converged_ok),
            self.addressed,
            self.args_pending,
        ));
        s
    }
}
