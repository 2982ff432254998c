//! The series a controller-runtime controller exports, under its names, labels and buckets:
//! `controller_runtime_*`, client-go's work queue (`workqueue_*`), `leader_election_master_status`
//! and `rest_client_requests_total`, for this one controller.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::workqueue::{QueueGauges, QueueLabels, QueueProbe};
use super::{HistogramFamily, Metrics};

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

/// This controller's work queue.
const THIS_QUEUE: QueueLabels = QueueLabels::of(CONTROLLER);

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

fn reconcile_time_histogram() -> Histogram {
    Histogram::new(RECONCILE_TIME_BUCKETS)
}

/// client-go's work queue buckets: ten nanoseconds to a thousand seconds, one per decade.
fn workqueue_histogram() -> Histogram {
    Histogram::new(exponential_buckets(10e-9, 10.0, 12))
}

/// The series a controller-runtime controller exports, for this one controller.
#[derive(Clone)]
pub(super) struct RuntimeSeries {
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
    queue_gauges: QueueGauges,
    leader_status: Family<LeaseLabels, Gauge>,
    rest_requests: Family<RestLabels, Counter>,
}

impl RuntimeSeries {
    pub(super) fn new() -> Self {
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
            queue_gauges: QueueGauges::new(THIS_QUEUE),
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
        let _ = s.queue_adds.get_or_create(&THIS_QUEUE);
        let _ = s.queue_retries.get_or_create(&THIS_QUEUE);
        let _ = s.queue_duration.get_or_create(&THIS_QUEUE);
        let _ = s.work_duration.get_or_create(&THIS_QUEUE);
        s
    }

    pub(super) fn register(&self, r: &mut Registry) {
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
        self.runtime.queue_adds.get_or_create(&THIS_QUEUE).inc();
    }

    /// A failed key was scheduled again after its backoff.
    pub fn queue_retried(&self) {
        self.runtime.queue_retries.get_or_create(&THIS_QUEUE).inc();
    }

    /// How long a key waited between becoming pending and being handed out.
    pub fn queue_waited(&self, waited: Duration) {
        self.runtime
            .queue_duration
            .get_or_create(&THIS_QUEUE)
            .observe(waited.as_secs_f64());
    }

    /// How long a key was worked on, from hand-out to done.
    pub fn queue_worked(&self, took: Duration) {
        self.runtime
            .work_duration
            .get_or_create(&THIS_QUEUE)
            .observe(took.as_secs_f64());
    }

    /// Where the queue's scrape-time gauges come from.
    pub fn watch_queue(&self, probe: QueueProbe) {
        self.runtime.queue_gauges.watch(probe);
    }

    /// The queue as a scrape would see it now.
    #[cfg(test)]
    pub fn queue_load(&self) -> super::QueueLoad {
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

    /// A reconcile's panic, as controller-runtime counts it.
    pub(super) fn runtime_panicked(&self) {
        self.runtime
            .reconcile_panics
            .get_or_create(&THIS_CONTROLLER)
            .inc();
    }
}
