//! The shard watch: keeps the shard cache and the per-shard memory true, and queues
//! work for the leader. A standby queues nothing: it remembers only deletions (until the leader
//! reports them released), and on taking over looks once at every shard that needs work.
//!
//! A leader whose lease renewal is late (past its deadline, neither answered nor failed) is still
//! the holder: it keeps queueing, and its workers wait for the renewal. Dropping those events
//! would lose them for good, since the renewal that lands is no change of leadership.
//!
//! What an event asks for is decided by [`step`], from the event alone; [`Watch::run`] carries it
//! out in one order: memory, then the cache, then the queue, so a worker that takes a key finds
//! the cache already showing what the event said.
//!
//! The watch decodes each shard straight into the record the cache keeps ([`WatchedShard`]);
//! that record is what the cache stores and what the memory reads. Only a change or a deletion
//! makes the record's `EgressShard` view, for the decision that reads it; a listed shard (the
//! whole cell, on every start) is recorded from the record alone.

use std::borrow::Cow;

use futures::{StreamExt, TryStreamExt};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::leader::LapseReport;
use super::readiness::CellHealth;
use super::shared::Shared;
use crate::kube_status::{forbidden_message, is_unauthorized, transport_cause};
use crate::shard::watched::WatchedShard;
use crate::shard::{CachedShard, ShardKey};

/// What the watch was doing when the cell forbade it (a `/ready` reason names it).
const WATCHING: &str = "listing and watching egress shards";

/// What the watch does with one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A list (the first, or a relist after the watch broke) begins.
    ListStarts,
    /// A listed shard: recorded and cached now, queued once the list is complete (a shard the
    /// list has yet to show may still be cached from before it, and be one deleted meanwhile).
    Listed(ShardKey),
    /// The list is complete: every listed shard that needs work is queued, and whatever the
    /// cache held that the list lacks was deleted while the watch was down.
    ListDone,
    /// A shard changed: recorded, and queued unless it needs nothing (most often the echo of
    /// this controller's own write; a deleted incarnation's release needs no event, its DELETED
    /// event queued the key and it stays queued, scheduled or parked until released).
    Changed {
        key: ShardKey,
        queue: bool,
        version: Option<String>,
    },
    /// A shard was deleted: recorded with its last state, and queued for its release.
    Deleted {
        key: ShardKey,
        version: Option<String>,
    },
}

/// Decides what an event asks for, from the event alone.
pub fn step(event: &watcher::Event<CachedShard>) -> Step {
    let version = |shard: &CachedShard| shard.resource_version().map(Cow::into_owned);
    match event {
        watcher::Event::Init => Step::ListStarts,
        watcher::Event::InitApply(shard) => Step::Listed(shard.key()),
        watcher::Event::InitDone => Step::ListDone,
        watcher::Event::Apply(shard) => Step::Changed {
            key: shard.key(),
            queue: shard.needs_work(),
            version: version(shard),
        },
        watcher::Event::Delete(shard) => Step::Deleted {
            key: shard.key(),
            version: version(shard),
        },
    }
}

/// The watch task.
pub struct Watch {
    api: Api<WatchedShard>,
    shared: Shared,
}

impl Watch {
    pub fn api(cell: Client, namespace: Option<&str>) -> Api<WatchedShard> {
        match namespace {
            Some(ns) => Api::namespaced(cell, ns),
            None => Api::all(cell),
        }
    }

    pub fn new(api: Api<WatchedShard>, shared: Shared) -> Self {
        Self { api, shared }
    }

    pub async fn run(mut self, stop: CancellationToken) {
        let mut stream = watcher(self.api.clone(), watcher::Config::default())
            .default_backoff()
            .into_stream()
            .boxed();
        loop {
            let item = tokio::select! {
                _ = stop.cancelled() => return,
                item = stream.try_next() => item,
            };
            match item {
                Ok(Some(event)) => self.apply(event),
                Ok(None) => return,
                Err(err) => self.failed(&err),
            }
        }
    }

    fn apply(&mut self, event: watcher::Event<WatchedShard>) {
        let shared = &self.shared;
        shared.readiness.set_cell(CellHealth::Up);
        shared.readiness.set_forbidden(WATCHING, None);
        let event = records(event);
        let step = self.sharing_keys(step(&event));
        let mut ready = self.record(&step, &event);
        ready.extend(self.cache(&step, event));
        let shared = &self.shared;
        if shared.leader.holds() {
            for key in ready {
                shared.queue.add(key);
            }
        }
        match &step {
            Step::Changed {
                key,
                version: Some(version),
                ..
            } => {
                shared.memory.addresses().cached_at(key, version);
                shared.activity.observed(version);
            }
            Step::Deleted {
                version: Some(version),
                ..
            } => shared.activity.observed(version),
            // Ready only once the listed shards that need work are queued: whoever waits for
            // readiness and then for an idle queue sees them worked off.
            Step::ListDone if !shared.readiness.is_synced() => {
                info!(
                    shards = shared.cache.len(),
                    "the first full list of shards is cached"
                );
                shared.readiness.set_synced();
            }
            _ => {}
        }
    }

    /// `step` with the key the cache already holds for its shard, so the cache, the memory and
    /// the queue share one copy of its strings.
    fn sharing_keys(&self, step: Step) -> Step {
        let shared = |key: ShardKey| self.shared.cache.shared_key(&key).unwrap_or(key);
        match step {
            Step::Listed(key) => Step::Listed(shared(key)),
            Step::Changed {
                key,
                queue,
                version,
            } => Step::Changed {
                key: shared(key),
                queue,
                version,
            },
            Step::Deleted { key, version } => Step::Deleted {
                key: shared(key),
                version,
            },
            other => other,
        }
    }

    /// Records the event in memory; the keys to queue once the cache has it.
    fn record(&mut self, step: &Step, event: &watcher::Event<CachedShard>) -> Vec<ShardKey> {
        let memory = &self.shared.memory;
        let shard = match event {
            watcher::Event::InitApply(s) | watcher::Event::Apply(s) | watcher::Event::Delete(s) => {
                Some(s)
            }
            watcher::Event::Init | watcher::Event::InitDone => None,
        };
        match (step, shard) {
            (Step::ListStarts, _) => {
                memory.releases().list_started();
                Vec::new()
            }
            (Step::Listed(key), Some(shard)) => {
                memory.addresses().observe(key, shard);
                Vec::new()
            }
            (Step::ListDone, _) => {
                // A shard deleted while the watch was down shows only as a missing entry; the
                // cache still holds its last state until the list's end is applied to it.
                let mut ready = Vec::new();
                for old in self.shared.cache.unlisted() {
                    let key = old.key();
                    memory
                        .releases()
                        .observe_deleted(&key, Some(&old.shard()), None);
                    ready.push(key);
                }
                ready
            }
            (Step::Changed { key, queue, .. }, Some(shard)) => {
                memory.addresses().observe(key, shard);
                if *queue {
                    vec![key.clone()]
                } else {
                    Vec::new()
                }
            }
            (Step::Deleted { key, version }, Some(shard)) => {
                memory
                    .releases()
                    .observe_deleted(key, Some(&shard.shard()), version.as_deref());
                vec![key.clone()]
            }
            _ => Vec::new(),
        }
    }

    /// Applies the event to the cache, which keeps the record the event carried; at the list's
    /// end, the keys it showed (to queue).
    fn cache(&self, step: &Step, event: watcher::Event<CachedShard>) -> Vec<ShardKey> {
        let cache = &self.shared.cache;
        let record = match event {
            watcher::Event::InitApply(r) | watcher::Event::Apply(r) => Some(r),
            _ => None,
        };
        match (step, record) {
            (Step::ListStarts, _) => cache.begin_list(),
            (Step::Listed(key) | Step::Changed { key, .. }, Some(record)) => {
                cache.put(record.with_shared_key(key.clone()))
            }
            (Step::Deleted { key, .. }, _) => cache.remove(key),
            (Step::ListDone, _) => return cache.end_list(),
            _ => {}
        }
        Vec::new()
    }

    fn failed(&self, err: &watcher::Error) {
        let readiness = &self.shared.readiness;
        if is_expired(err) {
            // The cell answered: its history no longer reaches back to where the watch stood
            // (etcd compacted it). The watcher lists again, and the list's end finds what changed
            // meanwhile, deletions included; nothing is down.
            self.shared.metrics.shard_watch_expired();
            info!(%err, "the cell compacted the shard watch's history (410 Gone); listing every shard again");
        } else if let Some(message) = kube_error_of(err).and_then(forbidden_message) {
            readiness.set_forbidden(WATCHING, Some(message));
            error!(%err, "the cell's RBAC forbids listing or watching egress shards; not ready, nothing is written");
        } else if kube_error_of(err).is_some_and(is_unauthorized) {
            readiness.set_cell(CellHealth::CredentialRefused);
            error!(%err, "the cell refused the controller's credential; not ready, nothing is written");
        } else {
            let cause = kube_error_of(err)
                .map(|e| transport_cause(e).unwrap_or("server-error"))
                .unwrap_or("transport");
            readiness.set_cell(CellHealth::Unreachable(cause));
            warn!(%err, cause, "watching egress shards failed; retrying");
        }
    }
}

/// The event with the record each shard was decoded into.
fn records(event: watcher::Event<WatchedShard>) -> watcher::Event<CachedShard> {
    match event {
        watcher::Event::Apply(s) => watcher::Event::Apply(s.0),
        watcher::Event::Delete(s) => watcher::Event::Delete(s.0),
        watcher::Event::InitApply(s) => watcher::Event::InitApply(s.0),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// Whether the watch failed because its resourceVersion is older than the cell's history: an
/// ERROR event in the stream (served from etcd) or the watch request's own answer.
fn is_expired(err: &watcher::Error) -> bool {
    match err {
        watcher::Error::WatchError(status) => status.code == 410,
        _ => kube_error_of(err).is_some_and(|e| matches!(e, kube::Error::Api(s) if s.code == 410)),
    }
}

fn kube_error_of(err: &watcher::Error) -> Option<&kube::Error> {
    match err {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => Some(e),
        _ => None,
    }
}

/// A new leader looks once at every shard that needs work by itself (an addressed, labelled shard
/// needs none) and at every deletion still pending: the previous leader may have left work
/// unfinished. A leader that loses the lease drops its queue. A
/// renewal past its deadline is no loss: it is said (a warning, the metric, a note on `/ready`)
/// and the queue is kept for when it lands.
pub async fn follow_leadership(shared: Shared, stop: CancellationToken) {
    let Shared {
        cache,
        memory,
        queue,
        leader,
        activity,
        ..
    } = &shared;
    let lapse = LapseReport {
        metrics: shared.metrics.clone(),
        readiness: shared.readiness.clone(),
    };
    let mut rx = leader.subscribe();
    let (mut held, mut overdue) = (false, false);
    loop {
        rx.borrow_and_update();
        let holds = leader.holds();
        if holds && !held {
            for key in cache.keys_needing_work() {
                queue.add(key);
            }
            for key in memory.releases().keys_with_deletions() {
                queue.add(key);
            }
        } else if !holds && held {
            queue.clear();
        }
        held = holds;
        let now_overdue = leader.is_overdue();
        if now_overdue != overdue {
            lapse.set(now_overdue, holds, leader.deadline());
            overdue = now_overdue;
        }
        activity.set_leading(holds && !overdue);
        // Nothing is sent when a deadline passes, so its moment is waited for here.
        let deadline = leader.deadline().filter(|_| holds && !overdue);
        tokio::select! {
            _ = stop.cancelled() => return,
            changed = rx.changed() => if changed.is_err() { return },
            _ = sleep_until_some(deadline), if deadline.is_some() => {}
        }
    }
}

async fn sleep_until_some(deadline: Option<tokio::time::Instant>) {
    if let Some(at) = deadline {
        tokio::time::sleep_until(at).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::fixture;
    use egress_api::shard::EgressShard;
    use std::collections::BTreeMap;

    /// Shard `ns/w-1`, its label set when `labelled`.
    fn shard(address: &str, labelled: bool) -> EgressShard {
        let mut s = fixture::shard("w-1", address);
        if labelled {
            s.metadata.labels = Some(BTreeMap::from([(
                egress_api::shard::LABEL_EGRESS_IPV6.to_string(),
                egress_api::shard::LABEL_VALUE_FAMILY_SERVED.to_string(),
            )]));
        }
        s
    }

    fn key() -> ShardKey {
        ShardKey::new("ns", "w-1")
    }

    #[test]
    fn a_change_is_queued_unless_the_shard_needs_nothing() {
        let changed = |s| match step(&watcher::Event::Apply(CachedShard::new(&s))) {
            Step::Changed {
                key: k,
                queue,
                version,
            } => {
                assert_eq!((k, version.as_deref()), (key(), Some("7")));
                queue
            }
            other => panic!("{other:?}"),
        };
        assert!(changed(shard("", false)), "unaddressed: claim");
        assert!(
            changed(shard("2001:db8::1", false)),
            "unlabelled: mark served"
        );
        assert!(
            !changed(shard("2001:db8::1", true)),
            "the echo of our own write costs nothing"
        );
    }

    #[test]
    fn a_deletion_is_always_queued_and_a_list_waits_for_its_end() {
        assert_eq!(
            step(&watcher::Event::Delete(CachedShard::new(&shard(
                "2001:db8::1",
                true
            )))),
            Step::Deleted {
                key: key(),
                version: Some("7".into())
            }
        );
        assert_eq!(step(&watcher::Event::Init), Step::ListStarts);
        assert_eq!(
            step(&watcher::Event::InitApply(CachedShard::new(&shard(
                "", false
            )))),
            Step::Listed(key())
        );
        assert_eq!(step(&watcher::Event::InitDone), Step::ListDone);
    }

    #[test]
    fn a_compacted_history_is_told_apart_from_an_outage() {
        let status = |code: u16| -> kube::core::Status {
            serde_json::from_value(serde_json::json!({
                "status": "Failure", "code": code, "reason": "Expired",
                "message": "too old resource version"
            }))
            .unwrap()
        };
        assert!(is_expired(&watcher::Error::WatchError(Box::new(status(
            410
        )))));
        assert!(is_expired(&watcher::Error::WatchStartFailed(
            kube::Error::Api(Box::new(status(410)))
        )));
        assert!(!is_expired(&watcher::Error::WatchError(Box::new(status(
            500
        )))));
        assert!(!is_expired(&watcher::Error::WatchFailed(kube::Error::Api(
            Box::new(status(403))
        ))));
        assert!(!is_expired(&watcher::Error::NoResourceVersion));
    }
}
