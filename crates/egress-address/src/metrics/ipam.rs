//! IPAM as the controller sees it: the claims it made and released (and why not), the orphans
//! its sweep released, every request and its latency, and the refusals by what refused.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::{HistogramFamily, Metrics, seconds_histogram};

/// Claim outcomes the shipped alerts watch.
pub const ALERTED_OUTCOMES: [&str; 6] = [
    "Exhausted",
    "ClassNotFound",
    "NoDefaultClass",
    "NoOfferingPool",
    "Unusable",
    "AddressInUse",
];

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

#[derive(Clone)]
pub(super) struct IpamSeries {
    claim_outcomes: Family<OutcomeLabels, Counter>,
    claim_releases: Family<OutcomeLabels, Counter>,
    orphaned_claims_released: Counter,
    orphan_sweep_failures: Counter,
    requests: Family<RequestLabels, Counter>,
    request_duration: HistogramFamily<VerbLabels>,
    refusals: Family<RefusalLabels, Counter>,
}

impl IpamSeries {
    pub(super) fn new() -> Self {
        let s = Self {
            claim_outcomes: Family::default(),
            claim_releases: Family::default(),
            orphaned_claims_released: Counter::default(),
            orphan_sweep_failures: Counter::default(),
            requests: Family::default(),
            request_duration: Family::new_with_constructor(seconds_histogram),
            refusals: Family::default(),
        };
        // Alerts take `increase()` of these; a series that first appears at 1 would hide its
        // first increment, so they exist at 0 from the start.
        for outcome in ALERTED_OUTCOMES {
            let _ = s.claim_outcomes.get_or_create(&OutcomeLabels {
                outcome: outcome.to_string(),
            });
        }
        s
    }

    pub(super) fn register(&self, r: &mut Registry) {
        r.register(
            "claim_outcomes",
            "Claim attempts by outcome (Bound, Adopted, or IPAM's refusal reason)",
            self.claim_outcomes.clone(),
        );
        r.register(
            "ipam_requests",
            "IPAM requests by verb, resource and HTTP status code (0: no answer)",
            self.requests.clone(),
        );
        r.register(
            "ipam_request_duration_seconds",
            "IPAM request latency by verb and resource",
            self.request_duration.clone(),
        );
        r.register(
            "orphaned_claims_released",
            "Claims of shards deleted while no controller saw it, released by the orphan sweep",
            self.orphaned_claims_released.clone(),
        );
        r.register(
            "orphan_sweep_failures",
            "Orphan sweep passes that stopped on an error (a 403 on listing ipclaims: the grant overlay is missing)",
            self.orphan_sweep_failures.clone(),
        );
        r.register(
            "claim_releases",
            "Claim releases by outcome (released, held, already_gone, replaced; or why not: releasing (IPAM left the claim Releasing, a 500), delete, read_shard, not_leader, not_ours)",
            self.claim_releases.clone(),
        );
        r.register(
            "ipam_refusals",
            "IPAM answers of 401 or 403, by what refused: credential (the credential or its grant), quota (the project's quota), namespace (the claim namespace missing or terminating)",
            self.refusals.clone(),
        );
    }
}

impl Metrics {
    pub fn claim_outcome(&self, outcome: &str) {
        self.ipam
            .claim_outcomes
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_string(),
            })
            .inc();
    }

    /// One release through the release path, by outcome.
    pub fn claim_release(&self, outcome: &'static str) {
        self.ipam
            .claim_releases
            .get_or_create(&OutcomeLabels {
                outcome: outcome.into(),
            })
            .inc();
    }

    pub fn orphaned_claim_released(&self) {
        self.ipam.orphaned_claims_released.inc();
    }

    pub fn orphan_sweep_failed(&self) {
        self.ipam.orphan_sweep_failures.inc();
    }

    pub fn ipam_request(&self, verb: &str, resource: &str, code: u16, took: Duration) {
        self.ipam
            .requests
            .get_or_create(&RequestLabels {
                verb: verb.to_string(),
                resource: resource.to_string(),
                code: code.to_string(),
            })
            .inc();
        self.ipam
            .request_duration
            .get_or_create(&VerbLabels {
                verb: verb.to_string(),
                resource: resource.to_string(),
            })
            .observe(took.as_secs_f64());
    }

    /// One 401/403 from IPAM, by what refused it.
    pub fn ipam_refusal(&self, reason: &'static str) {
        self.ipam
            .refusals
            .get_or_create(&RefusalLabels {
                reason: reason.into(),
            })
            .inc();
    }
}
