//! Request counters by plane, verb, resource and status code, and counts of injected faults.

use std::collections::{BTreeMap, HashMap};
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
    /// By plane, so a run over several planes can say where each fault struck.
    injected: Mutex<BTreeMap<String, InjectedFaults>>,
    /// Resource requests admitted whose answer is not counted yet. A store change is seen by
    /// watchers the moment it commits, before its request is counted; a reader of the counters
    /// waits for this to reach zero ([`Metrics::settled`]) so the change it saw is counted.
    in_flight: tokio::sync::watch::Sender<u64>,
}

impl Metrics {
    pub(crate) fn record(&self, key: RequestKey) {
        *locks::lock(&self.counts).entry(key).or_default() += 1;
    }

    /// Marks a resource request admitted; it stays in flight until the returned guard drops,
    /// which its handler does after counting it.
    pub(crate) fn begin(&self) -> InFlight {
        self.in_flight.send_modify(|n| *n += 1);
        InFlight(self.in_flight.clone())
    }

    /// Resolves at the first moment no resource request is between its commit and its count,
    /// so every change a caller has already seen is in the counters.
    pub async fn settled(&self) {
        let mut rx = self.in_flight.subscribe();
        // The sender lives as long as `self`, so the wait cannot end in an error.
        let _ = rx.wait_for(|n| *n == 0).await;
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
        locks::lock(&self.injected)
            .values()
            .fold(InjectedFaults::default(), |sum, p| sum.plus(p))
    }

    /// [`Metrics::injected_faults`] by plane (`cell` or a project name); a plane where nothing
    /// was injected is absent.
    pub fn injected_faults_by_plane(&self) -> BTreeMap<String, InjectedFaults> {
        locks::lock(&self.injected).clone()
    }

    pub(crate) fn record_failure(&self, plane: &str, when: FaultWhen, outcome: FaultOutcome) {
        let mut all = locks::lock(&self.injected);
        let i = all.entry(plane.to_string()).or_default();
        match when {
            FaultWhen::BeforeApply => i.before_apply.count(outcome),
            FaultWhen::AfterApply => i.after_apply.count(outcome),
            FaultWhen::Release => i.failed_releases.count(outcome),
        }
    }

    pub(crate) fn record_delayed_release(&self, plane: &str) {
        locks::lock(&self.injected)
            .entry(plane.to_string())
            .or_default()
            .delayed_releases += 1;
    }

    pub(crate) fn record_delayed_commit(&self, plane: &str) {
        locks::lock(&self.injected)
            .entry(plane.to_string())
            .or_default()
            .delayed_commits += 1;
    }

    /// Zeroes every counter, the injected faults' too.
    pub fn reset(&self) {
        locks::lock(&self.counts).clear();
        locks::lock(&self.injected).clear();
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

/// One admitted request, until it is counted. See [`Metrics::begin`].
pub(crate) struct InFlight(tokio::sync::watch::Sender<u64>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::FaultOutcomes;

    #[tokio::test]
    async fn settled_waits_for_every_admitted_request_to_be_counted() {
        let m = Metrics::default();
        m.settled().await;
        let first = m.begin();
        let second = m.begin();
        let mut settled = std::pin::pin!(m.settled());
        assert!(futures::poll!(settled.as_mut()).is_pending());
        drop(first);
        assert!(futures::poll!(settled.as_mut()).is_pending());
        drop(second);
        assert!(futures::poll!(settled.as_mut()).is_ready());
    }

    #[test]
    fn injected_faults_are_kept_by_plane_and_summed() {
        let m = Metrics::default();
        m.record_failure("cell", FaultWhen::BeforeApply, FaultOutcome::Status);
        m.record_failure("platform", FaultWhen::AfterApply, FaultOutcome::Hang);
        m.record_failure("platform", FaultWhen::AfterApply, FaultOutcome::Reset);
        m.record_delayed_commit("platform");
        let by = m.injected_faults_by_plane();
        assert_eq!(by.keys().collect::<Vec<_>>(), ["cell", "platform"]);
        assert_eq!(by["cell"].before_apply.status, 1);
        assert_eq!(by["cell"].after_apply, FaultOutcomes::default());
        assert_eq!(
            (
                by["platform"].after_apply.hang,
                by["platform"].after_apply.reset,
                by["platform"].delayed_commits
            ),
            (1, 1, 1)
        );
        let all = m.injected_faults();
        assert_eq!(
            (
                all.before_apply.status,
                all.after_apply.hang + all.after_apply.reset,
                all.delayed_commits
            ),
            (1, 2, 1)
        );
        m.reset();
        assert!(m.injected_faults_by_plane().is_empty());
        assert_eq!(m.injected_faults(), InjectedFaults::default());
    }
}
