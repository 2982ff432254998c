//! The controller's metrics (`prometheus-client`): its own under the prefix `egress_address`, and
//! the series a controller-runtime controller exports under the names, labels and buckets that
//! dashboards and alerts for such controllers already query (`controller_runtime_*`,
//! `workqueue_*`, `leader_election_master_status`, `rest_client_requests_total`, `process_*`).
//!
//! Nothing here knows the queue, the workers or the clients: they report through the methods of
//! [`Metrics`], and the queue's gauges are asked of a [`QueueProbe`] at scrape time. Each file
//! holds the series of one part of the controller and the methods that report to them: the
//! shards and their reconciles (`shards.rs`), IPAM (`ipam.rs`), whether the planes answer
//! (`planes.rs`), the lease (`lease.rs`), events (`events.rs`), the secure `/metrics`
//! (`metrics_auth.rs`), controller-runtime's and client-go's series (`controller_runtime.rs`,
//! `workqueue.rs`) and the process's (`process.rs`).

mod controller_runtime;
mod events;
mod ipam;
mod lease;
mod metrics_auth;
mod planes;
mod process;
mod shards;
mod workqueue;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub use controller_runtime::{CONTROLLER, ReconcileResult};
pub use ipam::ALERTED_OUTCOMES;
pub use metrics_auth::METRICS_AUTH_OUTCOMES;
pub use process::ProcessCollector;
pub use shards::{DRIFT_MISMATCH, DRIFT_MISSING};
pub use workqueue::{QueueLabels, QueueLoad, QueueProbe};

/// Prefix of the controller's own metric names.
pub const PREFIX: &str = "egress_address";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    commit: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn seconds_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// Cheap to clone; every clone updates the same series.
#[derive(Clone)]
pub struct Metrics {
    build_info: Family<BuildLabels, Gauge>,
    shards: shards::ShardSeries,
    ipam: ipam::IpamSeries,
    planes: planes::PlaneSeries,
    lease: lease::LeaseSeries,
    events: events::EventSeries,
    metrics_auth: metrics_auth::MetricsAuthSeries,
    runtime: controller_runtime::RuntimeSeries,
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
        m.shards.register(r);
        m.ipam.register(r);
        m.planes.register(r);
        m.lease.register(r);
        m.events.register(r);
        m.metrics_auth.register(r);
        m
    }

    /// Metrics recorded nowhere, for callers that do not export them.
    pub fn unregistered() -> Self {
        let m = Self {
            build_info: Family::default(),
            shards: shards::ShardSeries::new(),
            ipam: ipam::IpamSeries::new(),
            planes: planes::PlaneSeries::default(),
            lease: lease::LeaseSeries::default(),
            events: events::EventSeries::default(),
            metrics_auth: metrics_auth::MetricsAuthSeries::new(),
            runtime: controller_runtime::RuntimeSeries::new(),
        };
        m.build_info
            .get_or_create(&BuildLabels {
                version: crate::version::VERSION,
                commit: crate::version::COMMIT,
            })
            .set(1);
        m
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
    use std::time::Duration;

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
