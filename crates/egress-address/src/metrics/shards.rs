//! The shards and their reconciles: how many are in each address state, how long a reconcile
//! takes and how many panicked, the drift of addressed shards, and the triggers the sweep and
//! the watch had to make up for.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::{Metrics, seconds_histogram};

/// The drift metric's `kind` for a holder that is gone, and for one that holds another address.
pub const DRIFT_MISSING: &str = "missing";
pub const DRIFT_MISMATCH: &str = "mismatch";

/// The states the per-shard memory counts shards in.
const STATES: [&str; 4] = ["addressed", "pending", "refused", "unattributable"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DriftLabels {
    kind: String,
}

#[derive(Clone)]
pub(super) struct ShardSeries {
    shards: Family<StateLabels, Gauge>,
    reconcile_duration: Histogram,
    reconcile_panics: Counter,
    drift: Family<DriftLabels, Counter>,
    unaddressed_swept: Counter,
    watch_expired: Counter,
}

impl ShardSeries {
    pub(super) fn new() -> Self {
        let s = Self {
            shards: Family::default(),
            reconcile_duration: seconds_histogram(),
            reconcile_panics: Counter::default(),
            drift: Family::default(),
            unaddressed_swept: Counter::default(),
            watch_expired: Counter::default(),
        };
        for state in STATES {
            s.shards.get_or_create(&StateLabels { state }).set(0);
        }
        for kind in [DRIFT_MISSING, DRIFT_MISMATCH] {
            let _ = s.drift.get_or_create(&DriftLabels { kind: kind.into() });
        }
        s
    }

    pub(super) fn register(&self, r: &mut Registry) {
        r.register("shards", "Shards by address state", self.shards.clone());
        r.register(
            "reconcile_duration_seconds",
            "Time to reconcile one shard",
            self.reconcile_duration.clone(),
        );
        r.register(
            "unaddressed_swept",
            "Shards the periodic sweep found without an address and owed no work, and queued (each is a trigger something dropped)",
            self.unaddressed_swept.clone(),
        );
        r.register(
            "shard_watch_expired",
            "Times the shard watch resumed from a resourceVersion the cell had compacted away (410 Gone) and listed every shard again",
            self.watch_expired.clone(),
        );
        r.register(
            "drift",
            "Addressed shards whose recorded holder is gone or holds another address",
            self.drift.clone(),
        );
        r.register(
            "reconcile_panics",
            "Reconciles that panicked (a bug: report it); the shard is retried after its backoff",
            self.reconcile_panics.clone(),
        );
    }
}

impl Metrics {
    /// Shards in a state, as the per-shard memory counts them.
    pub fn set_shards(&self, state: &'static str, count: i64) {
        self.shards
            .shards
            .get_or_create(&StateLabels { state })
            .set(count);
    }

    pub fn reconcile_took(&self, took: Duration) {
        self.shards.reconcile_duration.observe(took.as_secs_f64());
    }

    pub fn reconcile_panicked(&self) {
        self.shards.reconcile_panics.inc();
        self.runtime_panicked();
    }

    pub fn drift(&self, kind: &str) {
        self.shards
            .drift
            .get_or_create(&DriftLabels {
                kind: kind.to_string(),
            })
            .inc();
    }

    pub fn unaddressed_swept(&self, shards: u64) {
        self.shards.unaddressed_swept.inc_by(shards);
    }

    pub fn shard_watch_expired(&self) {
        self.shards.watch_expired.inc();
    }
}
