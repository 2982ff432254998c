//! The controller's metrics (`prometheus-client`): its own under the prefix `egress_address`, and
//! the series a controller-runtime controller exports under the names, labels and buckets that
//! dashboards and alerts for such controllers already query (`controller_runtime_*`,
//! `workqueue_*`, `leader_election_master_status`, `rest_client_requests_total`, `process_*`).
//!
//! Nothing here knows the queue, the workers or the clients: they report through the methods
//! below, and the queue's gauges are asked of a [`QueueProbe`] at scrape time.

mod process;
mod workqueue;

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub use process::ProcessCollector;
pub use workqueue::{QueueLoad, QueueProbe};

/// Prefix of the controller's own metric names.
pub const PREFIX: &str = "egress_address";

/// The drift metric's `kind` for a holder that is gone, and for one that holds another address.
pub const DRIFT_MISSING: &str = "missing";
pub const DRIFT_MISMATCH: &str = "mismatch";

/// The (`result`, `source`) pairs of `egress_address_metrics_auth_total` that can occur: a
/// request without a token is decided by its header alone, and only a review can fail.
pub const METRICS_AUTH_OUTCOMES: [(&str, &str); 8] = [
    ("unauthenticated", "header"),
    ("unauthenticated", "cache"),
    ("unauthenticated", "review"),
    ("forbidden", "cache"),
    ("forbidden", "review"),
    ("allowed", "cache"),
    ("allowed", "review"),
    ("error", "review"),
];

/// Claim outcomes the shipped alerts watch.
pub const ALERTED_OUTCOMES: [&str; 6] = [
    "Exhausted",
    "ClassNotFound",
    "NoDefaultClass",
    "NoOfferingPool",
    "Unusable",
    "AddressInUse",
];

/// The controller's name in the `controller` label (and the work queue's `name`), as
/// controller-runtime derives it from the reconciler.
pub const CONTROLLER: &str = "egressshardaddress";

/// Bucket bounds of `controller_runtime_reconcile_time_seconds`, as controller-runtime sets them.
const RECONCILE_TIME_BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

/// How a reconcile ended, in controller-runtime's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReconcileResult {
    /// Nothing to do until the object changes.
    Success,
    /// Failed; retried after a backoff.
    Error,
    /// Asked to be queued again through the rate limiter.
    Requeue,
    /// Asked to be queued again after a fixed delay.
    RequeueAfter,
}

impl ReconcileResult {
    pub const ALL: [ReconcileResult; 4] = [
        ReconcileResult::Success,
        ReconcileResult::Error,
        ReconcileResult::Requeue,
        ReconcileResult::RequeueAfter,
    ];

    pub fn label(self) -> &'static str {
        match self {
            ReconcileResult::Success => "success",
            ReconcileResult::Error => "error",
            ReconcileResult::Requeue => "requeue",
            ReconcileResult::RequeueAfter => "requeue_after",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusalLabels {
    reason: String,
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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MetricsAuthLabels {
    result: &'static str,
    source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: &'static str,
}

const THIS_CONTROLLER: ControllerLabels = ControllerLabels {
    controller: CONTROLLER,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    controller: &'static str,
    result: &'static str,
}

/// A work queue's labels: controller-runtime names each controller's queue after it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    controller: &'static str,
    name: &'static str,
}

impl Default for QueueLabels {
    fn default() -> Self {
        Self {
            controller: CONTROLLER,
            name: CONTROLLER,
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabels {
    name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RestLabels {
    code: String,
    method: String,
    host: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    commit: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn seconds_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

fn reconcile_time_histogram() -> Histogram {
    Histogram::new(RECONCILE_TIME_BUCKETS)
}

/// client-go's work queue buckets: ten nanoseconds to a thousand seconds, one per decade.
fn workqueue_histogram() -> Histogram {
    Histogram::new(exponential_buckets(10e-9, 10.0, 12))
}

/// The series a controller-runtime controller exports, for this one controller.
#[derive(Clone)]
struct RuntimeSeries {
    reconcile_total: Family<ResultLabels, Counter>,
    reconcile_errors: Family<ControllerLabels, Counter>,
    reconcile_panics: Family<ControllerLabels, Counter>,
    reconcile_time: HistogramFamily<ControllerLabels>,
    max_concurrent: Family<ControllerLabels, Gauge>,
    active_workers: Family<ControllerLabels, Gauge>,
    queue_adds: Family<QueueLabels, Counter>,
    queue_retries: Family<QueueLabels, Counter>,
    queue_duration: HistogramFamily<QueueLabels>,
    work_duration: HistogramFamily<QueueLabels>,
    queue_gauges: workqueue::QueueGauges,
    leader_status: Family<LeaseLabels, Gauge>,
    rest_requests: Family<RestLabels, Counter>,
}

impl RuntimeSeries {
    fn new() -> Self {
        let s = Self {
            reconcile_total: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_panics: Family::default(),
            reconcile_time: Family::new_with_constructor(reconcile_time_histogram),
            max_concurrent: Family::default(),
            active_workers: Family::default(),
            queue_adds: Family::default(),
            queue_retries: Family::default(),
            queue_duration: Family::new_with_constructor(workqueue_histogram),
            work_duration: Family::new_with_constructor(workqueue_histogram),
            queue_gauges: workqueue::QueueGauges::new(QueueLabels::default()),
            leader_status: Family::default(),
            rest_requests: Family::default(),
        };
        // Every series of this controller exists from the start, at zero, as controller-runtime
        // and client-go create them: a rate() over a series that appears only on the first
        // error misses that error.
        for result in ReconcileResult::ALL {
            let _ = s.reconcile_total.get_or_create(&ResultLabels {
                controller: CONTROLLER,
                result: result.label(),
            });
        }
        let _ = s.reconcile_errors.get_or_create(&THIS_CONTROLLER);
        let _ = s.reconcile_panics.get_or_create(&THIS_CONTROLLER);
        let _ = s.reconcile_time.get_or_create(&THIS_CONTROLLER);
        let _ = s.max_concurrent.get_or_create(&THIS_CONTROLLER);
        let _ = s.active_workers.get_or_create(&THIS_CONTROLLER);
        let queue = QueueLabels::default();
        let _ = s.queue_adds.get_or_create(&queue);
        let _ = s.queue_retries.get_or_create(&queue);
        let _ = s.queue_duration.get_or_create(&queue);
        let _ = s.work_duration.get_or_create(&queue);
        s
    }

    fn register(&self, r: &mut Registry) {
        r.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            self.reconcile_total.clone(),
        );
        r.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            self.reconcile_errors.clone(),
        );
        r.register(
            "controller_runtime_reconcile_panics",
            "Total number of reconciliation panics per controller",
            self.reconcile_panics.clone(),
        );
        r.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            self.reconcile_time.clone(),
        );
        r.register(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            self.max_concurrent.clone(),
        );
        r.register(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            self.active_workers.clone(),
        );
        r.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            self.queue_adds.clone(),
        );
        r.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            self.queue_retries.clone(),
        );
        r.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            self.queue_duration.clone(),
        );
        r.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            self.work_duration.clone(),
        );
        r.register_collector(Box::new(self.queue_gauges.clone()));
        r.register(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name",
            self.leader_status.clone(),
        );
        r.register(
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host",
            self.rest_requests.clone(),
        );
    }
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
    lease_overdue: Gauge,
    lease_lapses: Counter,
    unaddressed_swept: Counter,
    watch_expired: Counter,
    orphaned_claims_released: Counter,
    orphan_sweep_failures: Counter,
    claim_releases: Family<OutcomeLabels, Counter>,
    ipam_refusals: Family<RefusalLabels, Counter>,
    ipam_up: Gauge,
    cell_up: Gauge,
    transport_errors: Family<TransportLabels, Counter>,
    drift: Family<DriftLabels, Counter>,
    events_dropped: Counter,
    events_waiting: Gauge,
    reconcile_panics: Counter,
    metrics_auth: Family<MetricsAuthLabels, Counter>,
    build_info: Family<BuildLabels, Gauge>,
    runtime: RuntimeSeries,
}

impl Metrics {
    /// Registers every metric in `registry`: the controller's own under `egress_address`, the
    /// controller-runtime and client-go series, and the process's.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::unregistered();
        m.runtime.register(registry);
        registry.register_collector(Box::new(ProcessCollector));
        let r = registry.sub_registry_with_prefix(PREFIX);
        r.register(
            "build_info",
            "Always 1; the labels name the version and the git commit this binary was built from",
            m.build_info.clone(),
        );
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
            "leader_lease_overdue",
            "1 while this leader's lease renewal is past its deadline and has not failed: writes wait, shards stay queued",
            m.lease_overdue.clone(),
        );
        r.register(
            "leader_lease_lapses",
            "Times this leader's lease renewal passed its deadline before it was answered",
            m.lease_lapses.clone(),
        );
        r.register(
            "unaddressed_swept",
            "Shards the periodic sweep found without an address and owed no work, and queued (each is a trigger something dropped)",
            m.unaddressed_swept.clone(),
        );
        r.register(
            "shard_watch_expired",
            "Times the shard watch resumed from a resourceVersion the cell had compacted away (410 Gone) and listed every shard again",
            m.watch_expired.clone(),
        );
        r.register(
            "orphaned_claims_released",
            "Claims of shards deleted while no controller saw it, released by the orphan sweep",
            m.orphaned_claims_released.clone(),
        );
        r.register(
            "orphan_sweep_failures",
            "Orphan sweep passes that stopped on an error (a 403 on listing ipclaims: the grant overlay is missing)",
            m.orphan_sweep_failures.clone(),
        );
        r.register(
            "claim_releases",
            "Claim releases by outcome (released, held, already_gone, replaced; or why not: releasing (IPAM left the claim Releasing, a 500), delete, read_shard, not_leader, not_ours)",
            m.claim_releases.clone(),
        );
        r.register(
            "ipam_refusals",
            "IPAM answers of 401 or 403, by what refused: credential (the credential or its grant), quota (the project's quota), namespace (the claim namespace missing or terminating)",
            m.ipam_refusals.clone(),
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
        r.register(
            "metrics_auth",
            "Requests to /metrics served with --metrics-secure, by result (allowed, unauthenticated, forbidden, error) and by what decided it (header, cache, review)",
            m.metrics_auth.clone(),
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
            lease_overdue: Gauge::default(),
            lease_lapses: Counter::default(),
            unaddressed_swept: Counter::default(),
            watch_expired: Counter::default(),
            orphaned_claims_released: Counter::default(),
            orphan_sweep_failures: Counter::default(),
            claim_releases: Family::default(),
            ipam_refusals: Family::default(),
            ipam_up: Gauge::default(),
            cell_up: Gauge::default(),
            transport_errors: Family::default(),
            drift: Family::default(),
            events_dropped: Counter::default(),
            events_waiting: Gauge::default(),
            reconcile_panics: Counter::default(),
            metrics_auth: Family::default(),
            build_info: Family::default(),
            runtime: RuntimeSeries::new(),
        };
        m.build_info
            .get_or_create(&BuildLabels {
                version: crate::version::VERSION,
                commit: crate::version::COMMIT,
            })
            .set(1);
        for state in ["addressed", "pending", "refused", "unattributable"] {
            m.shards.get_or_create(&StateLabels { state }).set(0);
        }
        for kind in [DRIFT_MISSING, DRIFT_MISMATCH] {
            let _ = m.drift.get_or_create(&DriftLabels { kind: kind.into() });
        }
        // Every way a request for the secure /metrics can end, at zero: the first refusal or
        // failed review shows in a rate() as it happens.
        for (result, source) in METRICS_AUTH_OUTCOMES {
            let _ = m
                .metrics_auth
                .get_or_create(&MetricsAuthLabels { result, source });
        }
        // Alerts take `increase()` of these; a series that first appears at 1 would hide its
        // first increment, so they exist at 0 from the start.
        for outcome in ALERTED_OUTCOMES {
            let _ = m.claim_outcomes.get_or_create(&OutcomeLabels {
                outcome: outcome.to_string(),
            });
        }
        m
    }

    /// Shards in a state, as the per-shard memory counts them.
    pub fn set_shards(&self, state: &'static str, count: i64) {
        self.shards.get_or_create(&StateLabels { state }).set(count);
    }

    /// A request to `plane` that got no usable answer, and why.
    pub fn transport_error(&self, plane: &'static str, cause: &'static str) {
        self.transport_errors
            .get_or_create(&TransportLabels { plane, cause })
            .inc();
    }

    /// One request to the secure `/metrics`: how it was answered (`allowed`, `unauthenticated`,
    /// `forbidden`, `error`) and what decided it (`header`, `cache`, `review`).
    pub fn metrics_auth(&self, result: &'static str, source: &'static str) {
        self.metrics_auth
            .get_or_create(&MetricsAuthLabels { result, source })
            .inc();
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

    pub fn reconcile_panicked(&self) {
        self.reconcile_panics.inc();
        self.runtime_panicked();
    }

    pub fn claim_outcome(&self, outcome: &str) {
        self.claim_outcomes
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_string(),
            })
            .inc();
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

    /// Whether the lease renewal is overdue; a change to overdue counts a lapse.
    pub fn set_lease_overdue(&self, overdue: bool) {
        if overdue {
            self.lease_lapses.inc();
        }
        self.lease_overdue.set(i64::from(overdue));
    }

    pub fn unaddressed_swept(&self, shards: u64) {
        self.unaddressed_swept.inc_by(shards);
    }

    pub fn shard_watch_expired(&self) {
        self.watch_expired.inc();
    }

    pub fn orphaned_claim_released(&self) {
        self.orphaned_claims_released.inc();
    }

    /// One 401/403 from IPAM, by what refused it.
    pub fn ipam_refusal(&self, reason: &'static str) {
        self.ipam_refusals
            .get_or_create(&RefusalLabels {
                reason: reason.into(),
            })
            .inc();
    }

    /// One release through the release path, by outcome.
    pub fn claim_release(&self, outcome: &'static str) {
        self.claim_releases
            .get_or_create(&OutcomeLabels {
                outcome: outcome.into(),
            })
            .inc();
    }

    pub fn orphan_sweep_failed(&self) {
        self.orphan_sweep_failures.inc();
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
}

/// The controller-runtime and client-go series.
impl Metrics {
    /// One reconcile ended: counted by result (and as an error), and timed.
    pub fn reconciled(&self, result: ReconcileResult, took: Duration) {
        let rt = &self.runtime;
        rt.reconcile_total
            .get_or_create(&ResultLabels {
                controller: CONTROLLER,
                result: result.label(),
            })
            .inc();
        if result == ReconcileResult::Error {
            rt.reconcile_errors.get_or_create(&THIS_CONTROLLER).inc();
        }
        rt.reconcile_time
            .get_or_create(&THIS_CONTROLLER)
            .observe(took.as_secs_f64());
    }

    pub fn reconcile_count(&self, result: ReconcileResult) -> u64 {
        self.runtime
            .reconcile_total
            .get_or_create(&ResultLabels {
                controller: CONTROLLER,
                result: result.label(),
            })
            .get()
    }

    pub fn reconcile_error_count(&self) -> u64 {
        self.runtime
            .reconcile_errors
            .get_or_create(&THIS_CONTROLLER)
            .get()
    }

    /// The workers this controller runs.
    pub fn set_max_concurrent_reconciles(&self, n: usize) {
        self.runtime
            .max_concurrent
            .get_or_create(&THIS_CONTROLLER)
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// A worker took a key ([`worker_idle`](Self::worker_idle) when it is through with it).
    pub fn worker_busy(&self) {
        self.runtime
            .active_workers
            .get_or_create(&THIS_CONTROLLER)
            .inc();
    }

    pub fn worker_idle(&self) {
        self.runtime
            .active_workers
            .get_or_create(&THIS_CONTROLLER)
            .dec();
    }

    pub fn active_workers(&self) -> i64 {
        self.runtime
            .active_workers
            .get_or_create(&THIS_CONTROLLER)
            .get()
    }

    /// A key became pending in the work queue.
    pub fn queue_added(&self) {
        self.runtime
            .queue_adds
            .get_or_create(&QueueLabels::default())
            .inc();
    }

    /// A failed key was scheduled again after its backoff.
    pub fn queue_retried(&self) {
        self.runtime
            .queue_retries
            .get_or_create(&QueueLabels::default())
            .inc();
    }

    /// How long a key waited between becoming pending and being handed out.
    pub fn queue_waited(&self, waited: Duration) {
        self.runtime
            .queue_duration
            .get_or_create(&QueueLabels::default())
            .observe(waited.as_secs_f64());
    }

    /// How long a key was worked on, from hand-out to done.
    pub fn queue_worked(&self, took: Duration) {
        self.runtime
            .work_duration
            .get_or_create(&QueueLabels::default())
            .observe(took.as_secs_f64());
    }

    /// Where the queue's scrape-time gauges come from.
    pub fn watch_queue(&self, probe: QueueProbe) {
        self.runtime.queue_gauges.watch(probe);
    }

    /// The queue as a scrape would see it now.
    #[cfg(test)]
    pub fn queue_load(&self) -> QueueLoad {
        self.runtime.queue_gauges.load()
    }

    /// Whether this instance holds the lease `name`.
    pub fn set_lease_held(&self, name: &str, held: bool) {
        self.runtime
            .leader_status
            .get_or_create(&LeaseLabels {
                name: name.to_string(),
            })
            .set(i64::from(held));
    }

    /// A request to an API server (`host` as `host[:port]`) and its HTTP status, or `None` when
    /// no answer came, which client-go counts as the code `<error>`.
    pub fn rest_request(&self, method: &str, host: &str, status: Option<u16>) {
        self.runtime
            .rest_requests
            .get_or_create(&RestLabels {
                code: status.map_or_else(|| "<error>".to_string(), |c| c.to_string()),
                method: method.to_string(),
                host: host.to_string(),
            })
            .inc();
    }

    /// The panic also counts as a controller-runtime panic.
    fn runtime_panicked(&self) {
        self.runtime
            .reconcile_panics
            .get_or_create(&THIS_CONTROLLER)
            .inc();
    }
}

/// The content type of the OpenMetrics text format.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The content type of the Prometheus text format.
pub const PROMETHEUS_TEXT: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// OpenMetrics text of a registry.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

/// The same, in the Prometheus text format (version 0.0.4), for scrapers and tools that do not
/// ask for OpenMetrics (`promtool check metrics`, a plain `curl`).
pub fn encode_prometheus_text(registry: &Registry) -> String {
    let mut out = String::new();
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, registry);
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

    #[test]
    fn the_controller_runtime_series_carry_its_names_and_labels() {
        let mut registry = Registry::default();
        let m = Metrics::register(&mut registry);
        m.reconciled(ReconcileResult::Error, Duration::from_millis(30));
        m.reconciled(ReconcileResult::RequeueAfter, Duration::from_millis(2));
        m.reconcile_panicked();
        m.set_max_concurrent_reconciles(4);
        m.worker_busy();
        m.queue_added();
        m.queue_retried();
        m.queue_waited(Duration::from_micros(5));
        m.queue_worked(Duration::from_millis(7));
        m.watch_queue(Box::new(|| QueueLoad {
            depth: 3,
            unfinished: Duration::from_millis(1500),
            longest: Duration::from_secs(1),
        }));
        m.set_lease_held("egress-address-controller.cloud.datumapis.com", true);
        m.rest_request("GET", "10.0.0.1:6443", Some(200));
        m.rest_request("POST", "milo.example", None);
        let c = r#"controller="egressshardaddress""#;
        let q = r#"controller="egressshardaddress",name="egressshardaddress""#;
        let text = encode(&registry);
        for needle in [
            format!("controller_runtime_reconcile_total{{{c},result=\"error\"}} 1"),
            format!("controller_runtime_reconcile_total{{{c},result=\"requeue_after\"}} 1"),
            format!("controller_runtime_reconcile_total{{{c},result=\"success\"}} 0"),
            format!("controller_runtime_reconcile_total{{{c},result=\"requeue\"}} 0"),
            format!("controller_runtime_reconcile_errors_total{{{c}}} 1"),
            format!("controller_runtime_reconcile_panics_total{{{c}}} 1"),
            format!("controller_runtime_reconcile_time_seconds_bucket{{le=\"0.05\",{c}}} 2"),
            format!("controller_runtime_reconcile_time_seconds_bucket{{le=\"0.025\",{c}}} 1"),
            format!("controller_runtime_reconcile_time_seconds_count{{{c}}} 2"),
            format!("controller_runtime_max_concurrent_reconciles{{{c}}} 4"),
            format!("controller_runtime_active_workers{{{c}}} 1"),
            format!("workqueue_adds_total{{{q}}} 1"),
            format!("workqueue_retries_total{{{q}}} 1"),
            format!("workqueue_queue_duration_seconds_bucket{{le=\"0.00001\",{q}}} 1"),
            format!("workqueue_queue_duration_seconds_bucket{{le=\"0.000001\",{q}}} 0"),
            format!("workqueue_work_duration_seconds_count{{{q}}} 1"),
            format!("workqueue_depth{{{q}}} 3.0"),
            format!("workqueue_unfinished_work_seconds{{{q}}} 1.5"),
            format!("workqueue_longest_running_processor_seconds{{{q}}} 1.0"),
            "leader_election_master_status{name=\"egress-address-controller.cloud.datumapis.com\"} 1".into(),
            "rest_client_requests_total{code=\"200\",method=\"GET\",host=\"10.0.0.1:6443\"} 1".into(),
            "rest_client_requests_total{code=\"<error>\",method=\"POST\",host=\"milo.example\"} 1".into(),
            format!(
                "egress_address_build_info{{version=\"{}\",commit=\"{}\"}} 1",
                crate::version::VERSION,
                crate::version::COMMIT
            ),
            "# TYPE process_cpu_seconds counter".into(),
            "\nprocess_resident_memory_bytes ".into(),
        ] {
            assert!(text.contains(&needle), "missing {needle} in\n{text}");
        }
        assert_eq!(m.reconcile_count(ReconcileResult::Error), 1);
        assert_eq!(m.reconcile_error_count(), 1);
        assert_eq!(m.queue_load().depth, 3);
    }

    #[test]
    fn the_prometheus_text_names_counters_with_their_suffix_and_has_no_eof() {
        let mut registry = Registry::default();
        let m = Metrics::register(&mut registry);
        m.reconciled(ReconcileResult::Success, Duration::from_millis(1));
        let text = encode_prometheus_text(&registry);
        assert!(
            text.contains("# TYPE controller_runtime_reconcile_total counter"),
            "{text}"
        );
        assert!(!text.contains("# EOF"), "{text}");
        assert!(!text.contains("# UNIT"), "{text}");
    }
}
