//! What a run measured, and the markdown it is reported as.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

use super::harness::{World, is_event, is_lease, is_write, requests_by};
use super::{is_object_write, is_shard_work};

const MIB: f64 = 1024.0 * 1024.0;

/// One (shards, concurrency) run.
#[derive(Debug, Clone)]
pub struct Measurement {
    pub shards: usize,
    pub concurrency: usize,
    pub wall: Duration,
    pub ideal_wall: Duration,
    pub ready: Option<Duration>,
    /// Shard and IPAM requests by (plane, verb), leases and events excluded.
    pub by_verb: BTreeMap<(String, String), u64>,
    pub events: u64,
    pub leases: u64,
    /// Answers that were not 2xx (conflicts, refusals), shard and IPAM traffic only.
    pub failed: u64,
    pub peak_rss: Option<u64>,
}

impl Measurement {
    pub fn collect(
        w: &World,
        shards: usize,
        concurrency: usize,
        wall: Duration,
        ideal_wall: Duration,
        ready: Option<Duration>,
        peak_rss: Option<u64>,
    ) -> Measurement {
        let m = w.lp.metrics();
        Measurement {
            shards,
            concurrency,
            wall,
            ideal_wall,
            ready,
            by_verb: requests_by(&w.lp, is_shard_work),
            events: m.count(is_event),
            leases: m.count(is_lease),
            failed: m.count(|k| is_shard_work(k) && !(200..300).contains(&k.code)),
            peak_rss,
        }
    }

    pub fn shard_requests(&self) -> u64 {
        self.by_verb.values().sum()
    }

    pub fn per_shard(&self) -> f64 {
        self.shard_requests() as f64 / self.shards.max(1) as f64
    }

    /// The one-time initial sync (list and watch of shards), spread over every shard above.
    pub fn startup_requests(&self) -> u64 {
        self.by_verb
            .iter()
            .filter(|((_, v), _)| v == "list" || v == "watch" || v == "discovery")
            .map(|(_, n)| n)
            .sum()
    }

    /// Requests spent on shards themselves (creates, reads, updates), without the initial sync.
    pub fn per_shard_work(&self) -> f64 {
        (self.shard_requests() - self.startup_requests()) as f64 / self.shards.max(1) as f64
    }

    pub fn ratio(&self) -> f64 {
        self.wall.as_secs_f64() / self.ideal_wall.as_secs_f64().max(1e-9)
    }

    pub fn summary(&self) -> String {
        format!(
            "{} shards, concurrency {}: {:.2}s (ideal {:.2}s, ratio {:.2}), {:.2} requests/shard, {} events, peak RSS {}",
            self.shards,
            self.concurrency,
            self.wall.as_secs_f64(),
            self.ideal_wall.as_secs_f64(),
            self.ratio(),
            self.per_shard(),
            self.events,
            mib(self.peak_rss)
        )
    }
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
    pub fn collect(w: &World, shards: usize, seconds: u64) -> IdleMeasurement {
        IdleMeasurement {
            shards,
            seconds,
            leases: requests_by(&w.lp, is_lease),
            watches: w.lp.metrics().count(|k| k.verb == "watch" && !is_lease(k)),
            other: requests_by(&w.lp, |k| !is_lease(k) && k.verb != "watch"),
        }
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
}

impl RestartMeasurement {
    pub fn collect(
        w: &World,
        shards: usize,
        to_ready: Duration,
        watched_seconds: u64,
        peak_rss: Option<u64>,
    ) -> RestartMeasurement {
        RestartMeasurement {
            shards,
            to_ready,
            watched_seconds,
            writes: requests_by(&w.lp, is_object_write),
            reads: requests_by(&w.lp, |k| !is_write(k) && !is_lease(k)),
            lease_requests: w.lp.metrics().count(is_lease),
            peak_rss,
        }
    }

    pub fn write_count(&self) -> u64 {
        self.writes.values().sum()
    }
}

fn mib(b: Option<u64>) -> String {
    b.map(|b| format!("{:.1} MiB", b as f64 / MIB))
        .unwrap_or_else(|| "n/a".into())
}

fn verbs(m: &BTreeMap<(String, String), u64>, per: f64) -> String {
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

fn pass(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

pub fn markdown(
    runs: &[Measurement],
    idle: Option<&IdleMeasurement>,
    restart: Option<&RestartMeasurement>,
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| shards | concurrency | controller wall | ideal wall | ratio | requests/shard | of which per-shard work | by plane and verb (per shard) | events/shard | non-2xx | lease requests | time to /ready | peak RSS |"
    );
    let _ = writeln!(
        s,
        "|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|"
    );
    for r in runs {
        let n = r.shards as f64;
        let _ = writeln!(
            s,
            "| {} | {} | {:.2} s | {:.2} s | {:.2} | {:.3} | {:.3} | {} | {:.3} | {} | {} | {} | {} |",
            r.shards,
            r.concurrency,
            r.wall.as_secs_f64(),
            r.ideal_wall.as_secs_f64(),
            r.ratio(),
            r.per_shard(),
            r.per_shard_work(),
            verbs(&r.by_verb, n),
            r.events as f64 / n,
            r.failed,
            r.leases,
            r.ready
                .map(|d| format!("{:.2} s", d.as_secs_f64()))
                .unwrap_or_else(|| "n/a".into()),
            mib(r.peak_rss),
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "Targets:");
    let _ = writeln!(s);
    for r in runs {
        let mut line = format!(
            "- {} shards at concurrency {}: {:.3} requests/shard (≤ 2.0: {})",
            r.shards,
            r.concurrency,
            r.per_shard(),
            pass(r.per_shard() <= 2.0)
        );
        if r.concurrency == 16 {
            let _ = write!(
                line,
                "; ratio {:.2} (≤ 1.25: {})",
                r.ratio(),
                pass(r.ratio() <= 1.25)
            );
        }
        if r.shards >= 10_000 {
            let ok = r.peak_rss.is_some_and(|b| b as f64 <= 64.0 * MIB);
            let _ = write!(
                line,
                "; peak RSS {} (≤ 64 MiB: {})",
                mib(r.peak_rss),
                pass(ok)
            );
        }
        let _ = writeln!(s, "{line}");
    }
    if let Some(i) = idle {
        let other: u64 = i.other.values().sum();
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "Idle, {} addressed shards, {} s: {} shard/IPAM requests besides watches ({}); {} watch (re)opens; lease traffic {} (target 0 beyond open watches: {}).",
            i.shards,
            i.seconds,
            other,
            verbs(&i.other, 0.0),
            i.watches,
            verbs(&i.leases, 0.0),
            pass(other == 0)
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
