//! The secure `/metrics` (`--metrics-secure`): each request by how it was answered and what
//! decided it. The admin server reports here; nothing here knows it.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::Metrics;

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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MetricsAuthLabels {
    result: &'static str,
    source: &'static str,
}

#[derive(Clone)]
pub(super) struct MetricsAuthSeries(Family<MetricsAuthLabels, Counter>);

impl MetricsAuthSeries {
    pub(super) fn new() -> Self {
        let s = Self(Family::default());
        // Every way a request for the secure /metrics can end, at zero: the first refusal or
        // failed review shows in a rate() as it happens.
        for (result, source) in METRICS_AUTH_OUTCOMES {
            let _ = s.0.get_or_create(&MetricsAuthLabels { result, source });
        }
        s
    }

    pub(super) fn register(&self, r: &mut Registry) {
        r.register(
            "metrics_auth",
            "Requests to /metrics served with --metrics-secure, by result (allowed, unauthenticated, forbidden, error) and by what decided it (header, cache, review)",
            self.0.clone(),
        );
    }
}

impl Metrics {
    /// One request to the secure `/metrics`: how it was answered (`allowed`, `unauthenticated`,
    /// `forbidden`, `error`) and what decided it (`header`, `cache`, `review`).
    pub fn metrics_auth(&self, result: &'static str, source: &'static str) {
        self.metrics_auth
            .0
            .get_or_create(&MetricsAuthLabels { result, source })
            .inc();
    }
}
