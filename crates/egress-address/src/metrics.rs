//! The controller's metrics (`prometheus-client`), all under the prefix `egress_address`.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Prefix of every metric name.
pub const PREFIX: &str = "egress_address";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    verb: String,
    resource: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerbLabels {
    verb: String,
    resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TransportLabels {
    plane: &'static str,
    cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DriftLabels {
    kind: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn seconds_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// Cheap to clone; every clone updates the same series.
#[derive(Clone)]
pub struct Metrics {
    shards: Family<StateLabels, Gauge>,
    claim_outcomes: Family<OutcomeLabels, Counter>,
    reconcile_duration: Histogram,
    ipam_requests: Family<RequestLabels, Counter>,
    ipam_request_duration: HistogramFamily<VerbLabels>,
    leader: Gauge,
    ipam_up: Gauge,
    cell_up: Gauge,
    transport_errors: Family<TransportLabels, Counter>,
    drift: Family<DriftLabels, Counter>,
    events_dropped: Counter,
    events_waiting: Gauge,
    reconcile_panics: Counter,
}

impl Metrics {
    /// Registers every metric under `egress_address` in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::unregistered();
        let r = registry.sub_registry_with_prefix(PREFIX);
        r.register("shards", "Shards by address state", m.shards.clone());
        r.register(
            "claim_outcomes",
            "Claim attempts by outcome (Bound, Adopted, or IPAM's refusal reason)",
            m.claim_outcomes.clone(),
        );
        r.register(
            "reconcile_duration_seconds",
            "Time to reconcile one shard",
            m.reconcile_duration.clone(),
        );
        r.register(
            "ipam_requests",
            "IPAM requests by verb, resource and HTTP status code (0: no answer)",
            m.ipam_requests.clone(),
        );
        r.register(
            "ipam_request_duration_seconds",
            "IPAM request latency by verb and resource",
            m.ipam_request_duration.clone(),
        );
        r.register(
            "leader",
            "1 while this instance holds the leader lease (or runs without election)",
            m.leader.clone(),
        );
        r.register(
            "ipam_up",
            "1 while IPAM's latest answer accepted the credential, 0 while it is unreachable or refuses it",
            m.ipam_up.clone(),
        );
        r.register(
            "transport_errors",
            "Requests that got no answer, by plane and cause (certificate, dns, refused, timeout, reset, too-large, server-error, throttled, transport)",
            m.transport_errors.clone(),
        );
        r.register(
            "cell_up",
            "1 while the cell's API server answers and accepts the credential, 0 otherwise",
            m.cell_up.clone(),
        );
        r.register(
            "drift",
            "Addressed shards whose recorded holder is gone or holds another address",
            m.drift.clone(),
        );
        r.register(
            "events_dropped",
            "Events dropped unsent because too many were waiting for the events API",
            m.events_dropped.clone(),
        );
        r.register(
            "events_waiting",
            "Events queued for the events API (held while shards wait to be reconciled)",
            m.events_waiting.clone(),
        );
        r.register(
            "reconcile_panics",
            "Reconciles that panicked (a bug: report it); the shard is retried after its backoff",
            m.reconcile_panics.clone(),
        );
        m
    }

    /// Metrics recorded nowhere, for callers that do not export them.
    pub fn unregistered() -> Self {
        let m = Self {
            shards: Family::default(),
            claim_outcomes: Family::default(),
            reconcile_duration: seconds_histogram(),
            ipam_requests: Family::default(),
            ipam_request_duration: Family::new_with_constructor(seconds_histogram),
            leader: Gauge::default(),
            ipam_up: Gauge::default(),
            cell_up: Gauge::default(),
            transport_errors: Family::default(),
            drift: Family::default(),
            events_dropped: Counter::default(),
            events_waiting: Gauge::default(),
            reconcile_panics: Counter::default(),
        };
        for state in ["addressed", "pending", "refused", "unattributable"] {
            m.shards.get_or_create(&StateLabels { state }).set(0);
        }
        m
    }

    /// Shards in a state, as the per-shard memory counts them.
    pub fn set_shards(&self, state: &'static str, count: i64) {
        self.shards.get_or_create(&StateLabels { state }).set(count);
    }

    pub fn shards_in(&self, state: &'static str) -> i64 {
        self.shards.get_or_create(&StateLabels { state }).get()
    }

    /// A request to `plane` that got no usable answer, and why.
    pub fn transport_error(&self, plane: &'static str, cause: &'static str) {
        self.transport_errors
            .get_or_create(&TransportLabels { plane, cause })
            .inc();
    }

    pub fn transport_error_count(&self, plane: &'static str, cause: &'static str) -> u64 {
        self.transport_errors
            .get_or_create(&TransportLabels { plane, cause })
            .get()
    }

    /// Whether the cell's latest answer accepted the credential.
    pub fn set_cell_up(&self, up: bool) {
        self.cell_up.set(i64::from(up));
    }

    /// Whether IPAM's latest answer was an answer that accepted the credential.
    pub fn set_ipam_up(&self, up: bool) {
        self.ipam_up.set(i64::from(up));
    }

    pub fn set_events_waiting(&self, n: usize) {
        self.events_waiting
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    pub fn events_waiting(&self) -> i64 {
        self.events_waiting.get()
    }

    pub fn reconcile_panicked(&self) {
        self.reconcile_panics.inc();
    }

    pub fn reconcile_panics(&self) -> u64 {
        self.reconcile_panics.get()
    }

    pub fn claim_outcome(&self, outcome: &str) {
        self.claim_outcomes
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_string(),
            })
            .inc();
    }

    pub fn claim_outcome_count(&self, outcome: &str) -> u64 {
        self.claim_outcomes
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_string(),
            })
            .get()
    }

    pub fn reconcile_took(&self, took: Duration) {
        self.reconcile_duration.observe(took.as_secs_f64());
    }

    pub fn ipam_request(&self, verb: &str, resource: &str, code: u16, took: Duration) {
        self.ipam_requests
            .get_or_create(&RequestLabels {
                verb: verb.to_string(),
                resource: resource.to_string(),
                code: code.to_string(),
            })
            .inc();
        self.ipam_request_duration
            .get_or_create(&VerbLabels {
                verb: verb.to_string(),
                resource: resource.to_string(),
            })
            .observe(took.as_secs_f64());
    }

    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    pub fn is_leader(&self) -> bool {
        self.leader.get() == 1
    }

    pub fn drift(&self, kind: &str) {
        self.drift
            .get_or_create(&DriftLabels {
                kind: kind.to_string(),
            })
            .inc();
    }

    pub fn event_dropped(&self) {
        self.events_dropped.inc();
    }

    pub fn events_dropped_count(&self) -> u64 {
        self.events_dropped.get()
    }

    pub fn drift_count(&self, kind: &str) -> u64 {
        self.drift
            .get_or_create(&DriftLabels {
                kind: kind.to_string(),
            })
            .get()
    }
}

/// OpenMetrics text of a registry.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_names_every_metric_with_the_prefix() {
        let mut registry = Registry::default();
        let m = Metrics::register(&mut registry);
        m.claim_outcome("Bound");
        m.ipam_request("create", "ipclaims", 201, Duration::from_millis(3));
        m.set_leader(true);
        m.drift("missing");
        m.set_ipam_up(true);
        m.reconcile_took(Duration::from_millis(1));
        let text = encode(&registry);
        for needle in [
            "egress_address_shards{state=\"addressed\"} 0",
            "egress_address_claim_outcomes_total{outcome=\"Bound\"} 1",
            "egress_address_ipam_requests_total{verb=\"create\",resource=\"ipclaims\",code=\"201\"} 1",
            "egress_address_ipam_request_duration_seconds_count{verb=\"create\",resource=\"ipclaims\"} 1",
            "egress_address_leader 1",
            "egress_address_drift_total{kind=\"missing\"} 1",
            "egress_address_reconcile_duration_seconds_count 1",
            "egress_address_events_dropped_total 0",
            "egress_address_ipam_up 1",
            "# EOF",
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
    }
}
