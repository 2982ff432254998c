//! `bench soak`: a long run over a cell of addressed shards, at the controller's defaults unless
//! told otherwise. It counts every request per minute (IPAM by verb, the cell's shard traffic,
//! leases and events), samples the controller's resident memory every few seconds, and can keep
//! the cell churning (one shard created and one deleted per tick) to show memory holds still
//! under churn. With no churn it is the honest idle measurement: a whole drift period and more.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::bail;
use clap::Args;
use egress_api::shard::EgressShard;
use kube::Api;
use kube::api::{DeleteParams, PostParams};

use localplane::testing::PLATFORM_PROJECT;

use super::host::{self, LoadAvg, MIB, load_range, mib};
use super::report::{is_event, is_lease, pass};
use super::shape::{self, Objects};
use super::{BENCH_NAMESPACE, Common, command_line, controller_run};
use crate::cell::CellKind;

/// Options of `bench soak`.
#[derive(Args, Debug, Clone)]
pub struct SoakArgs {
    #[command(flatten)]
    pub common: Common,
    /// Shards in the cell, all addressed before the soak starts.
    #[arg(long, default_value_t = 10_000)]
    pub shards: usize,
    /// How long the soak lasts.
    #[arg(long, default_value_t = 3600)]
    pub seconds: u64,
    /// Requests are counted per bucket of this many seconds.
    #[arg(long, default_value_t = 60)]
    pub bucket_seconds: u64,
    /// The controller's resident memory is read this often.
    #[arg(long, default_value_t = 5)]
    pub sample_seconds: u64,
    /// Shards created, and as many deleted, per second during the soak (0: none, the idle run).
    #[arg(long, default_value_t = 0.0)]
    pub churn_per_second: f64,
    /// The controller's `--drift-check-interval`, in seconds (its default is 3600).
    #[arg(long, default_value_t = 3600)]
    pub drift_check_seconds: u64,
    /// The controller's reconcile concurrency.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Give up on addressing the cell after this long.
    #[arg(long, default_value_t = 900)]
    pub run_timeout_seconds: u64,
}

/// Requests counted in one bucket.
#[derive(Debug, Clone, Default)]
pub struct Bucket {
    /// IPAM requests by verb.
    pub ipam: BTreeMap<String, u64>,
    /// Cell requests for shards (not leases, not events), watches included.
    pub cell: u64,
    pub leases: u64,
    pub events: u64,
    pub load: Option<LoadAvg>,
}

impl Bucket {
    pub fn ipam_total(&self) -> u64 {
        self.ipam.values().sum()
    }
}

/// What `bench soak` measured.
#[derive(Debug, Clone, Default)]
pub struct SoakReport {
    pub command: String,
    pub objects: Objects,
    pub shards: usize,
    pub seconds: u64,
    pub bucket_seconds: u64,
    pub churn_per_second: f64,
    pub drift_check_seconds: u64,
    /// Wall time to address the cell before the soak.
    pub addressed_after: Duration,
    pub buckets: Vec<Bucket>,
    /// (seconds into the soak, resident bytes).
    pub rss: Vec<(u64, u64)>,
    pub peak_rss: Option<u64>,
    /// Controller CPU over the soak.
    pub cpu: Option<Duration>,
    pub created: usize,
    pub deleted: usize,
}

pub async fn measure(args: &SoakArgs, bin: &Path) -> anyhow::Result<SoakReport> {
    if args.seconds == 0 || args.bucket_seconds == 0 || args.sample_seconds == 0 {
        bail!("--seconds, --bucket-seconds and --sample-seconds must be positive");
    }
    let objects = args.common.objects;
    let timeout = Duration::from_secs(args.run_timeout_seconds);
    let (run, bed, mut ctl, _) = controller_run(
        CellKind::Local,
        bin,
        args.shards,
        args.concurrency,
        1,
        timeout,
        objects,
        &[format!(
            "--drift-check-interval={}s",
            args.drift_check_seconds
        )],
    )
    .await?;
    let w = &bed.world;
    let mut report = SoakReport {
        command: command_line(),
        objects,
        shards: args.shards,
        seconds: args.seconds,
        bucket_seconds: args.bucket_seconds,
        churn_per_second: args.churn_per_second,
        drift_check_seconds: args.drift_check_seconds,
        addressed_after: run.wall,
        ..Default::default()
    };
    eprintln!(
        "bench soak: {} shards addressed in {:.1} s; counting for {} s",
        args.shards,
        run.wall.as_secs_f64(),
        args.seconds
    );
    let churned = Arc::new(Churned::default());
    let churn = (args.churn_per_second > 0.0).then(|| {
        let api: Api<EgressShard> = Api::namespaced(w.cell(), BENCH_NAMESPACE);
        tokio::spawn(churn(
            api,
            args.churn_per_second,
            args.shards,
            objects,
            churned.clone(),
        ))
    });
    w.reset_counters();
    let cpu_before = ctl.cpu_time();
    let started = tokio::time::Instant::now();
    let mut next_bucket = 1u64;
    let mut counted = Bucket::default();
    let mut tick = 0u64;
    loop {
        tick += 1;
        let at = started + Duration::from_secs(tick * args.sample_seconds);
        tokio::time::sleep_until(at).await;
        let elapsed = tick * args.sample_seconds;
        ctl.check_alive()?;
        if let Some(b) = host::rss(ctl.pid) {
            report.rss.push((elapsed, b));
        }
        while elapsed >= next_bucket * args.bucket_seconds {
            let now = count(w);
            report.buckets.push(minus(&now, &counted));
            counted = now;
            next_bucket += 1;
            eprintln!(
                "bench soak: {} s: {} IPAM requests in the last bucket, RSS {}",
                elapsed,
                report.buckets.last().map_or(0, Bucket::ipam_total),
                mib(report.rss.last().map(|r| r.1)),
            );
        }
        if elapsed >= args.seconds {
            break;
        }
    }
    if let Some(churn) = churn {
        churn.abort();
    }
    report.created = churned.created.load(Ordering::Relaxed);
    report.deleted = churned.deleted.load(Ordering::Relaxed);
    report.cpu = ctl
        .cpu_time()
        .zip(cpu_before)
        .map(|(a, b)| a.saturating_sub(b));
    report.peak_rss = ctl.peak_rss();
    ctl.stop(Duration::from_secs(10)).await;
    bed.shutdown().await;
    Ok(report)
}

/// Every counter so far, bucketed.
fn count(w: &localplane::testing::World) -> Bucket {
    let mut b = Bucket {
        load: LoadAvg::now(),
        ..Default::default()
    };
    for c in w.lp().metrics().snapshot() {
        let k = &c.key;
        if k.plane == PLATFORM_PROJECT {
            *b.ipam.entry(k.verb.clone()).or_default() += c.count;
        } else if is_lease(k) {
            b.leases += c.count;
        } else if is_event(k) {
            b.events += c.count;
        } else {
            b.cell += c.count;
        }
    }
    b
}

fn minus(now: &Bucket, before: &Bucket) -> Bucket {
    Bucket {
        ipam: now
            .ipam
            .iter()
            .map(|(v, n)| (v.clone(), n - before.ipam.get(v).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .collect(),
        cell: now.cell - before.cell,
        leases: now.leases - before.leases,
        events: now.events - before.events,
        load: now.load,
    }
}

/// Shards the churn created and deleted.
#[derive(Default)]
struct Churned {
    created: AtomicUsize,
    deleted: AtomicUsize,
}

/// One shard created and the oldest one deleted per tick, until aborted.
async fn churn(
    api: Api<EgressShard>,
    per_second: f64,
    seeded: usize,
    objects: Objects,
    churned: Arc<Churned>,
) {
    let every = Duration::from_secs_f64(1.0 / per_second);
    let mut ticker = tokio::time::interval(every);
    let (mut created, mut deleted) = (0usize, 0usize);
    loop {
        ticker.tick().await;
        let name = format!("soak-{created}");
        if let Ok(shard) =
            serde_json::from_value::<EgressShard>(shape::shard(BENCH_NAMESPACE, &name, objects))
            && api.create(&PostParams::default(), &shard).await.is_ok()
        {
            created += 1;
            churned.created.store(created, Ordering::Relaxed);
        }
        // The oldest first: the seeded shards, then the soak's own.
        let victim = if deleted < seeded {
            format!("shard-{deleted}")
        } else {
            format!("soak-{}", deleted - seeded)
        };
        if api.delete(&victim, &DeleteParams::default()).await.is_ok() {
            deleted += 1;
            churned.deleted.store(deleted, Ordering::Relaxed);
        }
    }
}

/// At most this many IPAM requests per shard per hour with nothing changing.
pub const MAX_IDLE_IPAM_PER_SHARD_HOUR: f64 = 1.0;

impl SoakReport {
    fn hours(&self) -> f64 {
        (self.buckets.len() as u64 * self.bucket_seconds) as f64 / 3600.0
    }

    fn sum(&self, f: impl Fn(&Bucket) -> u64) -> u64 {
        self.buckets.iter().map(f).sum()
    }

    /// IPAM requests per shard per hour, all verbs, and drift reads (`get`) alone.
    pub fn ipam_per_shard_hour(&self) -> (f64, f64) {
        let per = self.shards.max(1) as f64 * self.hours().max(1e-9);
        (
            self.sum(Bucket::ipam_total) as f64 / per,
            self.sum(|b| b.ipam.get("get").copied().unwrap_or(0)) as f64 / per,
        )
    }

    /// The even share of a bucket: every shard once per drift interval, spread evenly.
    pub fn even_share(&self) -> f64 {
        self.shards as f64 * self.bucket_seconds as f64 / self.drift_check_seconds.max(1) as f64
    }

    pub fn markdown(&self) -> String {
        let (all, gets) = self.ipam_per_shard_hour();
        let per_bucket: Vec<u64> = self.buckets.iter().map(Bucket::ipam_total).collect();
        let mut sorted = per_bucket.clone();
        sorted.sort();
        let median = sorted.get(sorted.len() / 2).copied().unwrap_or(0);
        let (lo, hi) = (
            sorted.first().copied().unwrap_or(0),
            sorted.last().copied().unwrap_or(0),
        );
        // The first bucket holds the drift pacer's start, which waits one gap before its first
        // check; the steady state is the rest.
        let steady_lo = per_bucket.iter().skip(1).copied().min().unwrap_or(0);
        let mut s = format!(
            "`{}` ({} shards; {} shards addressed in {:.1} s, then {} s counted in buckets of {} s; drift check every {} s; churn {}/s; load average {})\n\n",
            self.command,
            self.objects.as_str(),
            self.shards,
            self.addressed_after.as_secs_f64(),
            self.buckets.len() as u64 * self.bucket_seconds,
            self.bucket_seconds,
            self.drift_check_seconds,
            self.churn_per_second,
            load_range(
                &self
                    .buckets
                    .iter()
                    .filter_map(|b| b.load)
                    .collect::<Vec<_>>()
            ),
        );
        let ipam_verbs: BTreeMap<String, u64> = self
            .buckets
            .iter()
            .flat_map(|b| b.ipam.iter())
            .fold(BTreeMap::new(), |mut m, (v, n)| {
                *m.entry(v.clone()).or_default() += n;
                m
            });
        s.push_str(&format!(
            "- IPAM requests: {} in all ({}), {all:.3} per shard per hour; drift reads {gets:.3} per shard per hour.\n",
            self.sum(Bucket::ipam_total),
            ipam_verbs
                .iter()
                .map(|(v, n)| format!("{v} {n}"))
                .collect::<Vec<_>>()
                .join(", "),
        ));
        s.push_str(&format!(
            "- Per bucket of {} s: min {lo}, median {median}, max {hi} (an even share is {:.1}); min after the first bucket {steady_lo}.\n",
            self.bucket_seconds,
            self.even_share(),
        ));
        s.push_str(&format!(
            "- Cell shard requests (watches included): {}; lease requests {}; events {}.\n",
            self.sum(|b| b.cell),
            self.sum(|b| b.leases),
            self.sum(|b| b.events),
        ));
        if self.churn_per_second > 0.0 {
            s.push_str(&format!(
                "- Churn: {} shards created and {} deleted.\n",
                self.created, self.deleted
            ));
        }
        s.push_str(&format!(
            "- Controller CPU over the soak: {}.\n",
            self.cpu
                .map(|c| format!(
                    "{:.1} s ({:.2}% of one core)",
                    c.as_secs_f64(),
                    100.0 * c.as_secs_f64() / (self.hours() * 3600.0).max(1e-9)
                ))
                .unwrap_or_else(|| "n/a".into())
        ));
        let mut rss: Vec<u64> = self.rss.iter().map(|r| r.1).collect();
        rss.sort();
        s.push_str(&format!(
            "- RSS, {} samples every {} s: min {}, median {}, max {}; peak (VmHWM) {}.\n",
            rss.len(),
            self.rss.get(1).map_or(0, |r| r.0) - self.rss.first().map_or(0, |r| r.0),
            mib(rss.first().copied()),
            mib(rss.get(rss.len() / 2).copied()),
            mib(rss.last().copied()),
            mib(self.peak_rss),
        ));
        if self.churn_per_second == 0.0 {
            // The target is set for the default interval (an hour); at another interval it
            // reads as at most one request per shard per interval.
            let per_interval = all * self.drift_check_seconds as f64 / 3600.0;
            s.push_str(&format!(
                "\nTarget: {all:.3} IPAM requests per shard per hour, {per_interval:.3} per shard per drift interval (≤ {MAX_IDLE_IPAM_PER_SHARD_HOUR}: {}); the most in one bucket {hi}, {:.2}× an even share.\n",
                pass(per_interval <= MAX_IDLE_IPAM_PER_SHARD_HOUR && all <= MAX_IDLE_IPAM_PER_SHARD_HOUR.max(3600.0 / self.drift_check_seconds.max(1) as f64)),
                hi as f64 / self.even_share().max(1e-9),
            ));
        }
        s.push_str("\nRSS over time:\n\n| seconds | RSS |\n|---:|---:|\n");
        let points = 12usize;
        let step = (self.rss.len() / points).max(1);
        for (i, (t, b)) in self.rss.iter().enumerate() {
            if i % step == 0 || i + 1 == self.rss.len() {
                s.push_str(&format!("| {t} | {:.1} MiB |\n", *b as f64 / MIB));
            }
        }
        s.push_str("\nIPAM requests per bucket: ");
        s.push_str(
            &per_bucket
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(" "),
        );
        s.push('\n');
        s
    }
}
