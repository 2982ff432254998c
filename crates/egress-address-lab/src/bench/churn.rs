//! `bench churn`: latency under churn. A cell already holds N addressed shards; new shards are
//! created over HTTP at a steady rate, and each one's wait from create to addressed is taken from
//! the server's own commits ([`Timeline`]). The controller and the ideal client (a watch plus the
//! two requests, [`ideal::watch`]) each get a world of their own and the same schedule, in one run.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use egress_api::shard::EgressShard;
use kube::Api;
use kube::api::PostParams;

use localplane::testing::PLATFORM_PROJECT;

use super::bed::{self, Bed, ControlPlaneUse, Progress};
use super::host::{LoadAvg, load_range, mib};
use super::report::{self, pass};
use super::shape::{self, Objects, Timeline};
use super::{BENCH_NAMESPACE, Common, command_line, controller_run, ideal};

/// Options of `bench churn`.
#[derive(Args, Debug, Clone)]
pub struct ChurnArgs {
    #[command(flatten)]
    pub common: Common,
    /// Addressed shards the cell holds before the churn starts.
    #[arg(long, default_value_t = 10_000)]
    pub shards: usize,
    /// New shards per second.
    #[arg(long, default_value_t = 50.0)]
    pub rate: f64,
    /// How long new shards keep coming.
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// Reconcile concurrency of the controller, and parallel tasks of the ideal client.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Controller and ideal runs, alternating; each side's waits are pooled over its runs.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Give up on one run after this long.
    #[arg(long, default_value_t = 900)]
    pub run_timeout_seconds: u64,
}

/// Waits of one side, from create to addressed.
#[derive(Debug, Clone, Default)]
pub struct Waits {
    /// Sorted.
    pub waits: Vec<Duration>,
    /// Created shards that were never addressed in time.
    pub unaddressed: usize,
    pub loads: Vec<LoadAvg>,
}

impl Waits {
    /// The `q` quantile (nearest rank).
    pub fn quantile(&self, q: f64) -> Duration {
        if self.waits.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((q * self.waits.len() as f64).ceil() as usize).clamp(1, self.waits.len());
        self.waits[rank - 1]
    }

    pub fn max(&self) -> Duration {
        self.waits.last().copied().unwrap_or_default()
    }
}

/// What `bench churn` measured.
#[derive(Debug, Clone, Default)]
pub struct ChurnReport {
    pub command: String,
    pub objects: Objects,
    pub shards: usize,
    pub rate: f64,
    pub seconds: u64,
    pub concurrency: usize,
    pub controller: Waits,
    pub ideal: Waits,
    /// Controller CPU during the churn, per new shard.
    pub controller_cpu_per_shard: Option<Duration>,
    pub controller_peak_rss: Option<u64>,
    /// Shard and IPAM requests of the controller during the churn, per new shard (the drift
    /// check's reads apart).
    pub controller_requests_per_shard: f64,
    /// Reads of the drift check during the churn (it goes on at its own pace).
    pub controller_drift_reads: u64,
    /// The real control plane during the churn beside the ideal client, and beside the
    /// controller (the last run of each; none on localplane).
    pub ideal_control_plane: Option<ControlPlaneUse>,
    pub controller_control_plane: Option<ControlPlaneUse>,
}

/// The p99 target: at most this many times the ideal client's.
pub const MAX_P99_RATIO: f64 = 1.5;

pub async fn measure(args: &ChurnArgs, bin: &Path) -> anyhow::Result<ChurnReport> {
    if args.rate <= 0.0 || args.seconds == 0 || args.repeat == 0 {
        bail!("--rate, --seconds and --repeat must be positive");
    }
    let timeout = Duration::from_secs(args.run_timeout_seconds);
    let objects = args.common.objects;
    let mut report = ChurnReport {
        command: command_line(),
        objects,
        shards: args.shards,
        rate: args.rate,
        seconds: args.seconds,
        concurrency: args.concurrency,
        ..Default::default()
    };
    let mut cpu = Duration::ZERO;
    let mut requests = 0u64;
    let mut drift_reads = 0u64;
    let cell = args.common.cell;
    for rep in 1..=args.repeat {
        eprintln!("bench churn: run {rep}: the ideal client");
        let bed = Bed::start(cell, args.shards, objects).await?;
        let ideal_cell = bed.ideal_cell_client().await?;
        ideal::run(
            ideal_cell.clone(),
            bed.world.claims(),
            BENCH_NAMESPACE,
            args.concurrency,
        )
        .await?;
        let task = ideal::watch(
            ideal_cell,
            bed.world.claims(),
            BENCH_NAMESPACE,
            args.concurrency,
        )
        .await?;
        let mut progress = bed.progress().await?;
        let cp_before = bed::control_plane_cpu(&bed);
        let (waits, load) = churn(&bed, &mut progress, args, rep, timeout).await?;
        report.ideal_control_plane = bed::control_plane_use(&bed, cp_before);
        task.abort();
        drop(progress);
        bed.shutdown().await;
        merge(&mut report.ideal, waits, load);

        eprintln!("bench churn: run {rep}: the controller");
        let (_, mut bed, mut ctl, _) = controller_run(
            cell,
            bin,
            args.shards,
            args.concurrency,
            rep,
            timeout,
            objects,
            &[],
        )
        .await?;
        // On the real cell the bench's watch is counted when it ends: after the run's counts.
        let mut progress = bed.progress().await?;
        bed.reset_counters().await?;
        let before = ctl.cpu_time();
        let cp_before = bed::control_plane_cpu(&bed);
        let (waits, load) = churn(&bed, &mut progress, args, rep, timeout).await?;
        report.controller_control_plane = bed::control_plane_use(&bed, cp_before);
        ctl.check_alive()?;
        if let (Some(after), Some(before)) = (ctl.cpu_time(), before) {
            cpu += after.saturating_sub(before);
        }
        let is_drift_read =
            |k: &localplane::RequestKey| k.plane == PLATFORM_PROJECT && k.verb == "get";
        // The churn's own shard creates are counted on the cell too; the controller makes none.
        let is_churn_create = |k: &localplane::RequestKey| k.plane == "cell" && k.verb == "create";
        let counts = bed.counts().await?;
        requests += report::count(&counts, |k| {
            report::is_shard_work(k) && !is_drift_read(k) && !is_churn_create(k)
        });
        drift_reads += report::count(&counts, is_drift_read);
        drop(progress);
        report.controller_peak_rss = report.controller_peak_rss.max(ctl.peak_rss());
        ctl.stop(Duration::from_secs(10)).await;
        bed.shutdown().await;
        merge(&mut report.controller, waits, load);
    }
    let created = (report.controller.waits.len() + report.controller.unaddressed).max(1);
    report.controller_cpu_per_shard = Some(cpu / u32::try_from(created).unwrap_or(u32::MAX));
    report.controller_requests_per_shard = requests as f64 / created as f64;
    report.controller_drift_reads = drift_reads;
    Ok(report)
}

fn merge(into: &mut Waits, mut from: Waits, load: Option<LoadAvg>) {
    into.waits.append(&mut from.waits);
    into.waits.sort();
    into.unaddressed += from.unaddressed;
    into.loads.extend(load);
}

/// Creates `rate × seconds` shards over HTTP on a steady schedule, then waits until every shard
/// of the namespace is addressed; the waits of the new ones, and the load average at the end.
/// On localplane a wait runs from the create's commit to the address's, as the store records
/// them; on the real cell from the bench's watch seeing the shard created to it seeing the
/// address (one watch, so its delivery delay is on both ends).
async fn churn(
    bed: &Bed,
    progress: &mut Progress,
    args: &ChurnArgs,
    rep: usize,
    timeout: Duration,
) -> anyhow::Result<(Waits, Option<LoadAvg>)> {
    let timeline = (!bed.is_real()).then(|| Timeline::record(&bed.world, BENCH_NAMESPACE));
    let api: Api<EgressShard> = Api::namespaced(bed.cell_admin(), BENCH_NAMESPACE);
    let total = (args.rate * args.seconds as f64).round() as usize;
    let every = Duration::from_secs_f64(1.0 / args.rate);
    let start = tokio::time::Instant::now();
    let mut creates = tokio::task::JoinSet::new();
    for i in 0..total {
        tokio::time::sleep_until(start + every * u32::try_from(i).unwrap_or(u32::MAX)).await;
        let shard: EgressShard = serde_json::from_value(shape::shard(
            BENCH_NAMESPACE,
            &format!("churn-{rep}-{i}"),
            args.common.objects,
        ))?;
        let api = api.clone();
        // Each create in a task of its own: a slow answer must not hold up the schedule.
        creates.spawn(async move { api.create(&PostParams::default(), &shard).await });
        // The watch's events are taken in as they come, so each is timed when it arrives.
        progress.wait_for(Duration::ZERO, |_, _| false).await;
    }
    while let Some(done) = creates.join_next().await {
        done?.context("creating a shard")?;
    }
    progress.wait_for(timeout, |all, done| all == done).await;
    // The last address is seen at its commit, a moment before its request is counted.
    tokio::time::timeout(timeout, bed.settled())
        .await
        .context("requests still in flight after every shard was addressed")?;
    let load = LoadAvg::now();
    let mut waits = Waits::default();
    let all = match (&timeline, progress) {
        (Some(t), _) => t.waits(),
        (None, Progress::Real(t)) => t.waits(),
        (None, Progress::Local(_)) => vec![],
    };
    for (_, wait) in all {
        match wait {
            Some(d) => waits.waits.push(d),
            None => waits.unaddressed += 1,
        }
    }
    waits.waits.sort();
    Ok((waits, load))
}

impl ChurnReport {
    pub fn markdown(&self) -> String {
        let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1000.0);
        let c = &self.controller;
        let i = &self.ideal;
        let ratio = |q: f64| c.quantile(q).as_secs_f64() / i.quantile(q).as_secs_f64().max(1e-9);
        let mut s = format!(
            "`{}` ({} shards; {} addressed shards held, {} new per second for {} s, concurrency {})\n\n",
            self.command,
            self.objects.as_str(),
            self.shards,
            self.rate,
            self.seconds,
            self.concurrency
        );
        s.push_str("| client | new shards | p50 | p90 | p99 | max | never addressed | load |\n");
        s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|\n");
        for (name, w) in [("controller", c), ("ideal client", i)] {
            s.push_str(&format!(
                "| {name} | {} | {} | {} | {} | {} | {} | {} |\n",
                w.waits.len() + w.unaddressed,
                ms(w.quantile(0.5)),
                ms(w.quantile(0.9)),
                ms(w.quantile(0.99)),
                ms(w.max()),
                w.unaddressed,
                load_range(&w.loads),
            ));
        }
        s.push_str(&format!(
            "\nController over ideal: p50 {:.2}, p99 {:.2} (target p99 ≤ {MAX_P99_RATIO}: {}). Controller during the churn: {} CPU and {:.3} shard/IPAM requests per new shard (besides {} drift reads); peak RSS {}.\n",
            ratio(0.5),
            ratio(0.99),
            pass(ratio(0.99) <= MAX_P99_RATIO && c.unaddressed == 0),
            self.controller_cpu_per_shard
                .map(|d| format!("{:.3} ms", d.as_secs_f64() * 1000.0))
                .unwrap_or_else(|| "n/a".into()),
            self.controller_requests_per_shard,
            self.controller_drift_reads,
            mib(self.controller_peak_rss),
        ));
        if let (Some(c), Some(i)) = (self.controller_control_plane, self.ideal_control_plane) {
            let per = |u: ControlPlaneUse| {
                u.cpu
                    .map(|d| {
                        format!(
                            "{:.3} ms",
                            d.as_secs_f64() * 1000.0 / (self.rate * self.seconds as f64).max(1.0)
                        )
                    })
                    .unwrap_or_else(|| "n/a".into())
            };
            s.push_str(&format!(
                "\nThe real control plane during the churn (the last run): {} CPU per new shard beside the controller, {} beside the ideal client; RSS {} and {} at the end (peak {} and {}).\n",
                per(c),
                per(i),
                mib(c.rss),
                mib(i.rss),
                mib(c.peak_rss),
                mib(i.peak_rss),
            ));
        }
        s
    }
}
