//! Request counters by plane, verb, resource and status code, and counts of injected faults.

use std::collections::HashMap;
use std::sync::Mutex;

use serde::Serialize;

use crate::faults::{FaultOutcome, FaultWhen, InjectedFaults};
use crate::locks;

/// One counter's labels.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct RequestKey {
    /// `cell` or a project name.
    pub plane: String,
    /// Kubernetes verb (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`), or the
    /// HTTP method in lower case for non-resource requests.
    pub verb: String,
    /// Group-qualified resource with subresource (`egressshards.network.datumapis.com/status`),
    /// or the path for non-resource requests.
    pub resource: String,
    /// The HTTP status answered, or 0 when an injected fault sent no answer (a reset or hang).
    pub code: u16,
}

/// A counter and its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RequestCount {
    #[serde(flatten)]
    pub key: RequestKey,
    pub count: u64,
}

/// The request counters of one localplane process, and the faults it injected.
#[derive(Debug, Default)]
pub struct Metrics {
    counts: Mutex<HashMap<RequestKey, u64>>,
    injected: Mutex<InjectedFaults>,
}

impl Metrics {
    pub(crate) fn record(&self, key: RequestKey) {
        *locks::lock(&self.counts).entry(key).or_default() += 1;
    }

    /// Every counter, sorted by labels.
    pub fn snapshot(&self) -> Vec<RequestCount> {
        let mut v: Vec<RequestCount> = locks::lock(&self.counts)
            .iter()
            .map(|(k, c)| RequestCount {
                key: k.clone(),
                count: *c,
            })
            .collect();
        v.sort_by(|a, b| a.key.cmp(&b.key));
        v
    }

    /// The sum of the counters whose labels satisfy `pred`.
    pub fn count(&self, pred: impl Fn(&RequestKey) -> bool) -> u64 {
        locks::lock(&self.counts)
            .iter()
            .filter(|(k, _)| pred(k))
            .map(|(_, c)| *c)
            .sum()
    }

    pub fn total(&self) -> u64 {
        self.count(|_| true)
    }

    /// How many faults of each kind were injected since the start (or the last reset).
    pub fn injected_faults(&self) -> InjectedFaults {
        *locks::lock(&self.injected)
    }

    pub(crate) fn record_failure(&self, when: FaultWhen, outcome: FaultOutcome) {
        let mut i = locks::lock(&self.injected);
        match when {
            FaultWhen::BeforeApply => i.before_apply.count(outcome),
            FaultWhen::AfterApply => i.after_apply.count(outcome),
        }
    }

    pub(crate) fn record_delayed_commit(&self) {
        locks::lock(&self.injected).delayed_commits += 1;
    }

    /// Zeroes every counter, the injected faults' too.
    pub fn reset(&self) {
        locks::lock(&self.counts).clear();
        *locks::lock(&self.injected) = InjectedFaults::default();
    }

    pub(crate) fn to_json(&self) -> serde_json::Value {
        let snap = self.snapshot();
        let total: u64 = snap.iter().map(|c| c.count).sum();
        serde_json::json!({
            "total": total,
            "requests": snap,
            "injectedFaults": self.injected_faults(),
        })
    }
}
