//! Whether the two planes answer: the cell's API server and IPAM, each up while its latest answer
//! accepted the credential, and the requests that got no answer, by plane and cause.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::Metrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TransportLabels {
    plane: &'static str,
    cause: &'static str,
}

#[derive(Clone, Default)]
pub(super) struct PlaneSeries {
    cell_up: Gauge,
    ipam_up: Gauge,
    transport_errors: Family<TransportLabels, Counter>,
}

impl PlaneSeries {
    pub(super) fn register(&self, r: &mut Registry) {
        r.register(
            "ipam_up",
            "1 while IPAM's latest answer accepted the credential, 0 while it is unreachable or refuses it",
            self.ipam_up.clone(),
        );
        r.register(
            "transport_errors",
            "Requests that got no answer, by plane and cause (certificate, dns, refused, timeout, reset, too-large, server-error, throttled, transport)",
            self.transport_errors.clone(),
        );
        r.register(
            "cell_up",
            "1 while the cell's API server answers and accepts the credential, 0 otherwise",
            self.cell_up.clone(),
        );
    }
}

impl Metrics {
    /// Whether the cell's latest answer accepted the credential.
    pub fn set_cell_up(&self, up: bool) {
        self.planes.cell_up.set(i64::from(up));
    }

    /// Whether IPAM's latest answer was an answer that accepted the credential.
    pub fn set_ipam_up(&self, up: bool) {
        self.planes.ipam_up.set(i64::from(up));
    }

    /// A request to `plane` that got no usable answer, and why.
    pub fn transport_error(&self, plane: &'static str, cause: &'static str) {
        self.planes
            .transport_errors
            .get_or_create(&TransportLabels { plane, cause })
            .inc();
    }
}
