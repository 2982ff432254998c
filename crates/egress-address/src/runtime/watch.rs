//! The shard watch: keeps the cache (reflector store) and the per-shard memory true, and queues
//! work for the leader. A standby queues nothing: it remembers only deletions (until the leader
//! reports them released), and on taking over looks at every shard once.
//!
//! A leader whose lease renewal is late (past its deadline, neither answered nor failed) is still
//! the holder: it keeps queueing, and its workers wait for the renewal. Dropping those events
//! would lose them for good, since the renewal that lands is no change of leadership.

use std::collections::HashSet;
use std::sync::Arc;

use egress_api::shard::EgressShard;
use futures::{StreamExt, TryStreamExt};
use kube::runtime::reflector::Store;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::activity::Activity;
use super::leader::{LapseReport, LeaderToken};
use super::queue::WorkQueue;
use super::readiness::{CellHealth, Readiness};
use crate::kube_status::{is_unauthorized, transport_cause};
use crate::shard::decide::{Decision, decide};
use crate::shard::{CachedShard, ShardKey, ShardMemory};

/// What the watch task works with.
pub struct Watch {
    pub api: Api<EgressShard>,
    pub store: Store<CachedShard>,
    pub writer: Writer<CachedShard>,
    pub memory: Arc<ShardMemory>,
    pub queue: Arc<WorkQueue<ShardKey>>,
    pub leader: LeaderToken,
    pub readiness: Arc<Readiness>,
    pub activity: Arc<Activity>,
}

impl Watch {
    pub fn new_api(cell: Client, namespace: Option<&str>) -> Api<EgressShard> {
        match namespace {
            Some(ns) => Api::namespaced(cell, ns),
            None => Api::all(cell),
        }
    }

    fn queue_unless_standby(&self, key: ShardKey) {
        if self.leader.holds() {
            self.queue.add(key);
        }
    }

    pub async fn run(mut self, stop: CancellationToken) {
        let mut stream = watcher(self.api.clone(), watcher::Config::default())
            .default_backoff()
            .modify(crate::shard::cached::trim)
            .into_stream()
            .boxed();
        let mut listing: HashSet<ShardKey> = HashSet::new();
        loop {
            let item = tokio::select! {
                _ = stop.cancelled() => return,
                item = stream.try_next() => item,
            };
            let event = match item {
                Ok(Some(event)) => event,
                Ok(None) => return,
                Err(err) => {
                    if kube_error_of(&err).is_some_and(is_unauthorized) {
                        self.readiness.set_cell(CellHealth::CredentialRefused);
                        error!(%err, "the cell refused the controller's credential; not ready, nothing is written");
                    } else {
                        let cause = kube_error_of(&err)
                            .map(|e| transport_cause(e).unwrap_or("server-error"))
                            .unwrap_or("transport");
                        self.readiness.set_cell(CellHealth::Unreachable(cause));
                        warn!(%err, cause, "watching egress shards failed; retrying");
                    }
                    continue;
                }
            };
            self.readiness.set_cell(CellHealth::Up);
            // Memory first, then the store, then the queue: a worker that takes the key must
            // find the cache already showing what the event said.
            let mut ready: Vec<ShardKey> = Vec::new();
            let mut applied: Option<ShardKey> = None;
            match &event {
                watcher::Event::Init => listing.clear(),
                watcher::Event::InitApply(shard) => {
                    let key = ShardKey::of(shard);
                    self.memory.observe(&key, shard);
                    // Queued at InitDone: until then the reflector keeps listed objects out of
                    // the store, and a reconcile would take the shard for gone and read it live.
                    listing.insert(key);
                }
                watcher::Event::InitDone => {
                    // A shard deleted while the watch was down shows only as a missing entry;
                    // the store still holds its last state until InitDone is applied.
                    for old in self.store.state() {
                        let key = old.key();
                        if !listing.contains(&key) {
                            self.memory
                                .observe_deleted(&key, old.shard().as_ref(), None);
                            ready.push(key);
                        }
                    }
                    ready.extend(listing.drain());
                }
                watcher::Event::Apply(shard) => {
                    let key = ShardKey::of(shard);
                    self.memory.observe(&key, shard);
                    // A shard that shows nothing left to do, most often the echo of this
                    // controller's own address write, is not queued: its reconcile would only
                    // decode it again to find that out (what it would record, `observe` did). A
                    // deleted incarnation's release needs no event: its DELETED event queued the
                    // key, and the key stays queued, scheduled or parked until it is released.
                    if decide(shard) != Decision::Nothing {
                        ready.push(key.clone());
                    }
                    applied = Some(key);
                }
                watcher::Event::Delete(shard) => {
                    let key = ShardKey::of(shard);
                    self.memory.observe_deleted(
                        &key,
                        Some(shard),
                        shard.metadata.resource_version.as_deref(),
                    );
                    ready.push(key);
                }
            }
            let rv = match &event {
                watcher::Event::Apply(s) | watcher::Event::Delete(s) => {
                    s.metadata.resource_version.clone()
                }
                _ => None,
            };
            let synced = matches!(event, watcher::Event::InitDone);
            self.writer.apply_watcher_event(&cached(event));
            for key in ready {
                self.queue_unless_standby(key);
            }
            if let Some(rv) = rv.as_deref() {
                if let Some(key) = &applied {
                    self.memory.cached_at(key, rv);
                }
                self.activity.observed(rv);
            }
            // Ready only once the listed shards are queued: whoever waits for readiness and
            // then for an idle queue sees the listed shards worked off.
            if synced && !self.readiness.is_synced() {
                info!(
                    shards = self.store.state().len(),
                    "the first full list of shards is cached"
                );
                self.readiness.set_synced();
            }
        }
    }
}

/// The event as the cache stores it (see [`CachedShard`]).
fn cached(event: watcher::Event<EgressShard>) -> watcher::Event<CachedShard> {
    match event {
        watcher::Event::Apply(s) => watcher::Event::Apply(CachedShard::new(s)),
        watcher::Event::Delete(s) => watcher::Event::Delete(CachedShard::new(s)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(s) => watcher::Event::InitApply(CachedShard::new(s)),
        watcher::Event::InitDone => watcher::Event::InitDone,
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

/// A new leader looks at every shard once, and at every deletion still pending: the previous
/// leader may have left work unfinished. A leader that loses the lease drops its queue. A
/// renewal past its deadline is no loss: it is said (a warning, the metric, a note on `/ready`)
/// and the queue is kept for when it lands.
pub async fn follow_leadership(
    leader: LeaderToken,
    store: Store<CachedShard>,
    memory: Arc<ShardMemory>,
    queue: Arc<WorkQueue<ShardKey>>,
    activity: Arc<Activity>,
    lapse: LapseReport,
    stop: CancellationToken,
) {
    let mut rx = leader.subscribe();
    let (mut held, mut overdue) = (false, false);
    loop {
        rx.borrow_and_update();
        let holds = leader.holds();
        if holds && !held {
            for shard in store.state() {
                queue.add(shard.key());
            }
            for key in memory.keys_with_deletions() {
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
