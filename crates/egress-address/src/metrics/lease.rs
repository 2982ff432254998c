//! The leader lease as this instance holds it: whether it leads, whether its renewal is overdue,
//! and how often a renewal passed its deadline.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::Metrics;

#[derive(Clone, Default)]
pub(super) struct LeaseSeries {
    leader: Gauge,
    overdue: Gauge,
    lapses: Counter,
}

impl LeaseSeries {
    pub(super) fn register(&self, r: &mut Registry) {
        r.register(
            "leader",
            "1 while this instance holds the leader lease (or runs without election)",
            self.leader.clone(),
        );
        r.register(
            "leader_lease_overdue",
            "1 while this leader's lease renewal is past its deadline and has not failed: writes wait, shards stay queued",
            self.overdue.clone(),
        );
        r.register(
            "leader_lease_lapses",
            "Times this leader's lease renewal passed its deadline before it was answered",
            self.lapses.clone(),
        );
    }
}

impl Metrics {
    pub fn set_leader(&self, leading: bool) {
        self.lease.leader.set(i64::from(leading));
    }

    /// Whether the lease renewal is overdue; a change to overdue counts a lapse.
    pub fn set_lease_overdue(&self, overdue: bool) {
        if overdue {
            self.lease.lapses.inc();
        }
        self.lease.overdue.set(i64::from(overdue));
    }
}
