//! What a run measured, and the markdown it is reported as.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

use localplane::{RequestCount, RequestKey};

use super::bed::ControlPlaneUse;

use super::host::{LoadAvg, MIB, load_range, mib};
use super::shape::Objects;

pub fn is_lease(k: &RequestKey) -> bool {
    k.resource.starts_with("leases.coordination.k8s.io")
}

pub fn is_event(k: &RequestKey) -> bool {
    k.resource.starts_with("events") || k.resource == "events"
}

pub fn is_write(k: &RequestKey) -> bool {
    matches!(k.verb.as_str(), "create" | "update" | "patch" | "delete")
}

/// Non-lease, non-event requests: the traffic that addressing shards costs.
pub fn is_shard_work(k: &RequestKey) -> bool {
    !is_lease(k) && !is_event(k)
}

/// Writes other than lease renewals.
pub fn is_object_write(k: &RequestKey) -> bool {
    is_write(k) && !is_lease(k)
}

/// The requests of `counts` that `pred` accepts.
pub fn count(counts: &[RequestCount], pred: impl Fn(&RequestKey) -> bool) -> u64 {
    counts
        .iter()
        .filter(|c| pred(&c.key))
        .map(|c| c.count)
        .sum()
}

/// Counters grouped for a report: requests by plane and verb, without the ones a caller
/// excludes (e.g. lease traffic reported on its own).
pub fn requests_by(
    counts: &[RequestCount],
    include: impl Fn(&RequestKey) -> bool,
) -> BTreeMap<(String, String), u64> {
    let mut m = BTreeMap::new();
    for c in counts {
        if std::env::var_os("BENCH_DEBUG").is_some() {
            eprintln!("  {c:?}");
        }
        if include(&c.key) {
            // Non-resource requests are recorded under their path; the read of kube-system's
            // UID (the cell's identity) is one-time startup work like discovery.
            let verb = if c.key.resource.starts_with('/') {
                "discovery".to_string()
            } else if c.key.resource == "namespaces" && c.key.verb == "get" {
                "identity".to_string()
            } else {
                c.key.verb.clone()
            };
            *m.entry((c.key.plane.clone(), verb)).or_default() += c.count;
        }
    }
    m
}

/// One controller run over fresh shards.
#[derive(Debug, Clone)]
pub struct Run {
    pub shards: usize,
    pub concurrency: usize,
    /// From spawning the controller until every shard is addressed.
    pub wall: Duration,
    /// From spawning the controller until the last event landed.
    pub events_done: Duration,
    pub ready: Option<Duration>,
    /// The controller's CPU time (user and system) when the last shard was addressed.
    pub cpu: Option<Duration>,
    /// Shard and IPAM requests by (plane, verb), leases and events excluded.
    pub by_verb: BTreeMap<(String, String), u64>,
    pub events: u64,
    pub leases: u64,
    /// Answers that were not 2xx (conflicts, refusals), shard and IPAM traffic only.
    pub failed: u64,
    pub peak_rss: Option<u64>,
    /// CPU time of the bench process (localplane, serving) while the controller worked.
    pub server_cpu: Option<Duration>,
    /// The real control plane's CPU while the controller worked, and its memory at the end.
    pub control_plane: Option<ControlPlaneUse>,
    /// The load average when the last shard was addressed.
    pub load: Option<LoadAvg>,
}

impl Run {
    #[allow(clippy::too_many_arguments)]
    pub fn collect(
        counts: &[RequestCount],
        shards: usize,
        concurrency: usize,
        wall: Duration,
        events_done: Duration,
        ready: Option<Duration>,
        cpu: Option<Duration>,
        peak_rss: Option<u64>,
    ) -> Run {
        Run {
            shards,
            concurrency,
            wall,
            events_done,
            ready,
            cpu,
            by_verb: requests_by(counts, is_shard_work),
            events: count(counts, is_event),
            leases: count(counts, is_lease),
            failed: count(counts, |k| {
                is_shard_work(k) && !(200..300).contains(&k.code)
            }),
            peak_rss,
            server_cpu: None,
            control_plane: None,
            load: None,
        }
    }

    pub fn shard_requests(&self) -> u64 {
        self.by_verb.values().sum()
    }

    /// Reads of holders on the platform plane: the drift check's (a claim is read only after a
    /// failed create, and such a run shows non-2xx answers).
    pub fn drift_reads(&self) -> u64 {
        self.by_verb
            .get(&("platform".to_string(), "get".to_string()))
            .copied()
            .unwrap_or(0)
    }

    /// The one-time initial sync (the cell's identity, list and watch of shards).
    pub fn startup_requests(&self) -> u64 {
        self.by_verb
            .iter()
            .filter(|((_, v), _)| matches!(v.as_str(), "list" | "watch" | "discovery" | "identity"))
            .map(|(_, n)| n)
            .sum()
    }
}

/// The middle value (the mean of the two middle ones for an even count).
pub fn median(values: &[Duration]) -> Duration {
    let mut v = values.to_vec();
    v.sort();
    match v.len() {
        0 => Duration::ZERO,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2,
    }
}

/// One (shards, concurrency) configuration: its controller runs and the ideal runs beside them.
/// Times are medians over the runs; counts come from the run that made the most requests, memory
/// from the highest.
#[derive(Debug, Clone)]
pub struct Measurement {
    pub runs: Vec<Run>,
    pub ideal_walls: Vec<Duration>,
    /// The real control plane while the ideal client worked (none on localplane).
    pub ideal_control_plane: Vec<ControlPlaneUse>,
}

impl Measurement {
    /// `runs` must not be empty.
    pub fn new(runs: Vec<Run>, ideal_walls: Vec<Duration>) -> Measurement {
        assert!(!runs.is_empty(), "a measurement needs at least one run");
        Measurement {
            runs,
            ideal_walls,
            ideal_control_plane: vec![],
        }
    }

    pub fn shards(&self) -> usize {
        self.runs[0].shards
    }

    pub fn concurrency(&self) -> usize {
        self.runs[0].concurrency
    }

    pub fn walls(&self) -> Vec<Duration> {
        self.runs.iter().map(|r| r.wall).collect()
    }

    pub fn wall(&self) -> Duration {
        median(&self.walls())
    }

    pub fn ideal_wall(&self) -> Duration {
        median(&self.ideal_walls)
    }

    /// The median of a time every run has, or `None` if one lacks it.
    fn median_of(&self, f: impl Fn(&Run) -> Option<Duration>) -> Option<Duration> {
        let v: Option<Vec<Duration>> = self.runs.iter().map(f).collect();
        v.map(|v| median(&v))
    }

    pub fn events_done(&self) -> Duration {
        median(&self.runs.iter().map(|r| r.events_done).collect::<Vec<_>>())
    }

    pub fn ready(&self) -> Option<Duration> {
        self.median_of(|r| r.ready)
    }

    pub fn cpu(&self) -> Option<Duration> {
        self.median_of(|r| r.cpu)
    }

    /// localplane's CPU (the bench process) per shard, median over the runs, in milliseconds.
    pub fn server_cpu_per_shard_ms(&self) -> Option<f64> {
        self.median_of(|r| r.server_cpu)
            .map(|c| c.as_secs_f64() * 1000.0 / self.shards().max(1) as f64)
    }

    /// The real control plane's CPU per shard while the controller worked (median over the
    /// runs), and while the ideal client did, in milliseconds.
    pub fn control_plane_cpu_per_shard_ms(&self) -> (Option<f64>, Option<f64>) {
        let per = |v: Option<Vec<Duration>>| {
            v.filter(|v| !v.is_empty())
                .map(|v| median(&v).as_secs_f64() * 1000.0 / self.shards().max(1) as f64)
        };
        let ctl = self
            .runs
            .iter()
            .map(|r| r.control_plane.and_then(|c| c.cpu))
            .collect();
        let ideal = self.ideal_control_plane.iter().map(|c| c.cpu).collect();
        (per(ctl), per(ideal))
    }

    /// The real control plane's resident memory when the last shard was addressed (the highest
    /// of the controller runs), and the highest it reached in them.
    pub fn control_plane_rss(&self) -> (Option<u64>, Option<u64>) {
        let cps = || self.runs.iter().filter_map(|r| r.control_plane);
        (
            cps().filter_map(|c| c.rss).max(),
            cps().filter_map(|c| c.peak_rss).max(),
        )
    }

    /// Whether the runs had the real control plane as their cell.
    pub fn on_real_cell(&self) -> bool {
        self.runs.iter().any(|r| r.control_plane.is_some())
    }

    /// The 1-minute load averages the runs ended at.
    pub fn loads(&self) -> Vec<LoadAvg> {
        self.runs.iter().filter_map(|r| r.load).collect()
    }

    /// The highest of the runs.
    pub fn peak_rss(&self) -> Option<u64> {
        self.runs.iter().filter_map(|r| r.peak_rss).max()
    }

    /// The run that made the most shard and IPAM requests: its counters are the ones reported.
    pub fn worst(&self) -> &Run {
        self.runs
            .iter()
            .max_by_key(|r| (r.shard_requests(), r.failed, r.events))
            .expect("at least one run")
    }

    /// Every shard and IPAM request, the one-time initial sync included, per shard.
    pub fn per_shard(&self) -> f64 {
        self.worst().shard_requests() as f64 / self.shards().max(1) as f64
    }

    /// What one more new shard costs: every request but the initial sync, which a controller
    /// makes once however many shards are new (the restart measurement shows it alone), and the
    /// drift check's reads, which go on at their own pace (one per addressed shard per
    /// interval, the soak measures them) whether shards are new or not.
    pub fn per_new_shard(&self) -> f64 {
        let w = self.worst();
        (w.shard_requests() - w.startup_requests() - w.drift_reads()) as f64
            / self.shards().max(1) as f64
    }

    /// Drift reads during the run, per shard.
    pub fn drift_per_shard(&self) -> f64 {
        self.worst().drift_reads() as f64 / self.shards().max(1) as f64
    }

    /// Median controller wall over median ideal wall.
    pub fn ratio(&self) -> f64 {
        self.wall().as_secs_f64() / self.ideal_wall().as_secs_f64().max(1e-9)
    }

    /// Controller CPU time per shard, in milliseconds.
    pub fn cpu_per_shard_ms(&self) -> Option<f64> {
        self.cpu()
            .map(|c| c.as_secs_f64() * 1000.0 / self.shards().max(1) as f64)
    }

    pub fn summary(&self) -> String {
        format!(
            "{} shards, concurrency {}: {} (ideal {}, ratio {:.2}), {:.3} requests per new shard, {} events (all sent after {:.2}s), controller CPU {}, peak RSS {}",
            self.shards(),
            self.concurrency(),
            spread(&self.walls()),
            spread(&self.ideal_walls),
            self.ratio(),
            self.per_new_shard(),
            self.worst().events,
            self.events_done().as_secs_f64(),
            cpu_ms(self.cpu_per_shard_ms()),
            mib(self.peak_rss())
        )
    }
}

/// The median and, when there are several, the range: `4.87 s (4.76–5.41)`.
pub fn spread(values: &[Duration]) -> String {
    let m = median(values).as_secs_f64();
    match (values.iter().min(), values.iter().max()) {
        (Some(lo), Some(hi)) if values.len() > 1 => {
            format!("{m:.2} s ({:.2}–{:.2})", lo.as_secs_f64(), hi.as_secs_f64())
        }
        _ => format!("{m:.2} s"),
    }
}

pub fn cpu_ms(v: Option<f64>) -> String {
    v.map(|ms| format!("{ms:.3} ms/shard"))
        .unwrap_or_else(|| "n/a".into())
}

/// Requests with everything addressed.
#[derive(Debug, Clone)]
pub struct IdleMeasurement {
    pub shards: usize,
    pub seconds: u64,
    pub leases: BTreeMap<(String, String), u64>,
    pub watches: u64,
    pub other: BTreeMap<(String, String), u64>,
}

impl IdleMeasurement {
    pub fn collect(counts: &[RequestCount], shards: usize, seconds: u64) -> IdleMeasurement {
        IdleMeasurement {
            shards,
            seconds,
            leases: requests_by(counts, is_lease),
            watches: count(counts, |k| k.verb == "watch" && !is_lease(k)),
            other: requests_by(counts, |k| !is_lease(k) && k.verb != "watch"),
        }
    }

    /// The drift check's reads of IPAM: the only requests an idle controller makes besides its
    /// lease and its watch.
    pub fn drift_reads(&self) -> u64 {
        self.other
            .iter()
            .filter(|((plane, verb), _)| plane != "cell" && verb == "get")
            .map(|(_, n)| n)
            .sum()
    }

    pub fn drift_per_shard_hour(&self) -> f64 {
        self.drift_reads() as f64 * 3600.0
            / (self.shards.max(1) as f64 * self.seconds.max(1) as f64)
    }

    /// At most one read per shard per hour (the default drift interval), paced: no more than the
    /// window's share, rounded up.
    pub fn drift_within_pace(&self) -> bool {
        self.drift_reads() <= self.drift_share()
    }

    /// The window's share of one read per shard per hour, rounded up: a window shorter than an
    /// hour may hold one read more than its exact share.
    pub fn drift_share(&self) -> u64 {
        (self.shards as u64 * self.seconds).div_ceil(3600)
    }
}

/// A fresh controller against an addressed cell.
#[derive(Debug, Clone)]
pub struct RestartMeasurement {
    pub shards: usize,
    pub to_ready: Duration,
    pub watched_seconds: u64,
    pub writes: BTreeMap<(String, String), u64>,
    pub reads: BTreeMap<(String, String), u64>,
    pub lease_requests: u64,
    pub peak_rss: Option<u64>,
    /// The ideal lister's time over the same shards ([`super::lister`]): the mean of its runs.
    pub ideal_lister: Option<Duration>,
    /// Each run of the ideal lister: right before the restart, and right after.
    pub ideal_lister_runs: Vec<Duration>,
}

impl RestartMeasurement {
    pub fn collect(
        counts: &[RequestCount],
        shards: usize,
        to_ready: Duration,
        watched_seconds: u64,
        peak_rss: Option<u64>,
    ) -> RestartMeasurement {
        RestartMeasurement {
            shards,
            to_ready,
            watched_seconds,
            writes: requests_by(counts, is_object_write),
            reads: requests_by(counts, |k| !is_write(k) && !is_lease(k)),
            lease_requests: count(counts, is_lease),
            peak_rss,
            ideal_lister: None,
            ideal_lister_runs: Vec::new(),
        }
    }

    /// The ideal lister's time and the restart's ratio to it, then each of its runs:
    /// `L s (R x; B s before, A s after)`.
    pub fn against_lister(&self) -> String {
        let Some(l) = self.ideal_lister else {
            return "n/a".into();
        };
        let runs = match self.ideal_lister_runs.as_slice() {
            [before, after] => format!(
                "; {:.2} s before, {:.2} s after",
                before.as_secs_f64(),
                after.as_secs_f64()
            ),
            _ => String::new(),
        };
        format!(
            "{:.2} s ({:.2} x{runs})",
            l.as_secs_f64(),
            self.to_ready.as_secs_f64() / l.as_secs_f64().max(1e-9)
        )
    }

    pub fn write_count(&self) -> u64 {
        self.writes.values().sum()
    }
}

pub fn verbs(m: &BTreeMap<(String, String), u64>, per: f64) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|((plane, verb), n)| {
            if per > 0.0 {
                format!("{plane} {verb} {:.3}", *n as f64 / per)
            } else {
                format!("{plane} {verb} {n}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn pass(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

/// Everything one `bench` invocation measured.
#[derive(Debug, Clone, Default)]
pub struct BenchReport {
    pub runs: Vec<Measurement>,
    pub idle: Option<IdleMeasurement>,
    pub restart: Option<RestartMeasurement>,
    pub objects: Objects,
    /// Which server was the cell.
    pub cell: crate::cell::CellKind,
    /// The command that produced the report.
    pub command: String,
}

impl BenchReport {
    pub fn markdown(&self) -> String {
        let mut s = format!(
            "`{}` ({} shards{}; load average {} when each run's last shard was addressed)\n\n",
            self.command,
            self.objects.as_str(),
            match self.cell {
                crate::cell::CellKind::Local => "",
                crate::cell::CellKind::Real => {
                    ", the real kube-apiserver and etcd as the cell, a fresh one per run"
                }
            },
            load_range(
                &self
                    .runs
                    .iter()
                    .flat_map(Measurement::loads)
                    .collect::<Vec<_>>()
            ),
        );
        s.push_str(&markdown(
            &self.runs,
            self.idle.as_ref(),
            self.restart.as_ref(),
        ));
        s
    }
}

/// The requests-per-new-shard target.
pub const MAX_REQUESTS_PER_NEW_SHARD: f64 = 2.0;
/// The controller/ideal wall-time target at concurrency 16 below 10,000 shards.
pub const MAX_RATIO: f64 = 1.25;
/// The controller/ideal wall-time target at concurrency 4 and 16 from 10,000 shards on.
pub const MAX_RATIO_LARGE: f64 = 1.10;
/// The peak RSS target at 10,000 shards.
pub const MAX_RSS_MIB: f64 = 64.0;

/// The ratio target of a configuration, if it has one.
pub fn ratio_target(shards: usize, concurrency: usize) -> Option<f64> {
    match (shards >= 10_000, concurrency) {
        (true, 4 | 16) => Some(MAX_RATIO_LARGE),
        (false, 16) => Some(MAX_RATIO),
        _ => None,
    }
}

pub fn markdown(
    runs: &[Measurement],
    idle: Option<&IdleMeasurement>,
    restart: Option<&RestartMeasurement>,
) -> String {
    let mut s = String::new();
    let real = runs.iter().any(Measurement::on_real_cell);
    let _ = writeln!(
        s,
        "| shards | concurrency | controller wall | ideal wall | ratio | requests per new shard | drift reads per shard | with both | by plane and verb (per shard) | events/shard | events all sent | non-2xx | lease requests | time to /ready | controller CPU | localplane CPU | peak RSS |{} load |",
        if real {
            " control plane CPU (ideal's) | control plane RSS (peak) |"
        } else {
            ""
        }
    );
    let _ = writeln!(
        s,
        "|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|{}---:|",
        if real { "---:|---:|" } else { "" }
    );
    for r in runs {
        let n = r.shards() as f64;
        let w = r.worst();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.2} | {:.3} | {:.3} | {:.3} | {} | {:.3} | {:.2} s | {} | {} | {} | {} | {} | {} |{} {} |",
            r.shards(),
            r.concurrency(),
            spread(&r.walls()),
            spread(&r.ideal_walls),
            r.ratio(),
            r.per_new_shard(),
            r.drift_per_shard(),
            r.per_shard(),
            verbs(&w.by_verb, n),
            w.events as f64 / n,
            r.events_done().as_secs_f64(),
            w.failed,
            w.leases,
            r.ready()
                .map(|d| format!("{:.2} s", d.as_secs_f64()))
                .unwrap_or_else(|| "n/a".into()),
            cpu_ms(r.cpu_per_shard_ms()),
            cpu_ms(r.server_cpu_per_shard_ms()),
            mib(r.peak_rss()),
            if real {
                let (ctl, ideal) = r.control_plane_cpu_per_shard_ms();
                let (rss, peak) = r.control_plane_rss();
                format!(
                    " {} ({}) | {} ({}) |",
                    cpu_ms(ctl),
                    cpu_ms(ideal),
                    mib(rss),
                    mib(peak)
                )
            } else {
                String::new()
            },
            load_range(&r.loads()),
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "Targets:");
    let _ = writeln!(s);
    for r in runs {
        let mut line = format!(
            "- {} shards at concurrency {}: {:.3} requests per new shard (≤ {MAX_REQUESTS_PER_NEW_SHARD}: {})",
            r.shards(),
            r.concurrency(),
            r.per_new_shard(),
            pass(r.per_new_shard() <= MAX_REQUESTS_PER_NEW_SHARD)
        );
        if let Some(target) = ratio_target(r.shards(), r.concurrency()) {
            let _ = write!(
                line,
                "; ratio {:.2} (≤ {target}: {})",
                r.ratio(),
                pass(r.ratio() <= target)
            );
        }
        if r.shards() >= 10_000 {
            let ok = r.peak_rss().is_some_and(|b| b as f64 <= MAX_RSS_MIB * MIB);
            let _ = write!(
                line,
                "; peak RSS {} (≤ {MAX_RSS_MIB} MiB: {})",
                mib(r.peak_rss()),
                pass(ok)
            );
        }
        let _ = writeln!(s, "{line}");
    }
    if let Some(i) = idle {
        let other: u64 = i.other.values().sum();
        let drift = i.drift_reads();
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "Idle, {} addressed shards, {} s: {} shard/IPAM requests besides watches ({}); {} watch (re)opens; lease traffic {} (target: nothing but the drift check's IPAM reads, at most the window's share of one per shard per hour, {} reads; {:.2} per shard per hour: {}).",
            i.shards,
            i.seconds,
            other,
            verbs(&i.other, 0.0),
            i.watches,
            verbs(&i.leases, 0.0),
            i.drift_share(),
            i.drift_per_shard_hour(),
            pass(other == drift && i.drift_within_pace())
        );
    }
    if let Some(r) = restart {
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "Restart, {} addressed shards: /ready after {:.2} s; writes in the first {} s: {} ({}) (target 0: {}); reads: {}; lease requests: {}; peak RSS {}.",
            r.shards,
            r.to_ready.as_secs_f64(),
            r.watched_seconds,
            r.write_count(),
            verbs(&r.writes, 0.0),
            pass(r.write_count() == 0),
            verbs(&r.reads, 0.0),
            r.lease_requests,
            mib(r.peak_rss),
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(v: &[f64]) -> Vec<Duration> {
        v.iter().map(|s| Duration::from_secs_f64(*s)).collect()
    }

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(&secs(&[5.0, 1.0, 3.0])), Duration::from_secs(3));
        assert_eq!(
            median(&secs(&[4.0, 1.0, 3.0, 2.0])),
            Duration::from_millis(2500)
        );
        assert_eq!(median(&[]), Duration::ZERO);
    }

    #[test]
    fn a_spread_shows_the_range_only_for_several_runs() {
        assert_eq!(spread(&secs(&[4.87])), "4.87 s");
        assert_eq!(spread(&secs(&[5.41, 4.76, 4.87])), "4.87 s (4.76–5.41)");
    }

    #[test]
    fn idle_drift_reads_are_judged_against_one_per_shard_per_hour() {
        let idle = |gets: u64, cell_gets: u64| IdleMeasurement {
            shards: 10_000,
            seconds: 30,
            leases: BTreeMap::new(),
            watches: 0,
            other: [
                (("platform".to_string(), "get".to_string()), gets),
                (("cell".to_string(), "get".to_string()), cell_gets),
            ]
            .into(),
        };
        // 10,000 shards an hour is 83.3 in 30 s.
        assert!(idle(84, 0).drift_within_pace());
        assert!(!idle(85, 0).drift_within_pace());
        assert_eq!(
            idle(84, 7).drift_reads(),
            84,
            "cell reads are no drift reads"
        );
        assert!((idle(83, 0).drift_per_shard_hour() - 0.996).abs() < 1e-9);
    }
}
