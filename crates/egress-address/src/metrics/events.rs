//! The events the controller publishes: how many wait for the events API, and how many were
//! dropped unsent.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::Metrics;

#[derive(Clone, Default)]
pub(super) struct EventSeries {
    dropped: Counter,
    waiting: Gauge,
}

impl EventSeries {
    pub(super) fn register(&self, r: &mut Registry) {
        r.register(
            "events_dropped",
            "Events dropped unsent because too many were waiting for the events API",
            self.dropped.clone(),
        );
        r.register(
            "events_waiting",
            "Events queued for the events API (held while shards wait to be reconciled)",
            self.waiting.clone(),
        );
    }
}

impl Metrics {
    pub fn event_dropped(&self) {
        self.events.dropped.inc();
    }

    pub fn set_events_waiting(&self, n: usize) {
        self.events
            .waiting
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
}
