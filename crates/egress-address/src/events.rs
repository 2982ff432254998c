//! Events on shards (`events.k8s.io/v1`), without a storm: the same reason and message for the
//! same shard is published again only after a long interval.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use egress_api::shard::EgressShard;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::events::{EventType, Reporter};
use kube::{Api, Client, Resource};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::ShardKey;
use crate::leader::LeaderToken;
use crate::metrics::Metrics;

/// Event reasons.
pub mod reason {
    pub const ADDRESS_ASSIGNED: &str = "AddressAssigned";
    pub const CLAIM_PENDING: &str = "ClaimPending";
    pub const CLAIM_REFUSED: &str = "ClaimRefused";
    pub const UNUSABLE_ANSWER: &str = "UnusableAnswer";
    pub const CLAIM_NAME_COLLISION: &str = "ClaimNameCollision";
    pub const ADDRESS_DRIFT: &str = "AddressDrift";
    pub const ASSIGN_REFUSED: &str = "AssignRefused";
}

/// Remembers what was last said about each shard.
#[derive(Debug, Default)]
pub struct EventGate {
    last: HashMap<ShardKey, HashMap<String, (String, Instant)>>,
}

impl EventGate {
    /// Whether an event should go out now, recording it if so. A different note for the same
    /// reason goes out at once: the situation changed.
    pub fn admit(
        &mut self,
        key: &ShardKey,
        reason: &str,
        note: &str,
        now: Instant,
        repeat_after: Duration,
    ) -> bool {
        let per_shard = self.last.entry(key.clone()).or_default();
        if let Some((last_note, at)) = per_shard.get(reason)
            && last_note == note
            && now.duration_since(*at) < repeat_after
        {
            return false;
        }
        per_shard.insert(reason.to_string(), (note.to_string(), now));
        true
    }

    /// Takes back an admitted event that could not be published, so the next attempt goes out.
    pub fn retract(&mut self, key: &ShardKey, reason: &str) {
        if let Some(per_shard) = self.last.get_mut(key) {
            per_shard.remove(reason);
        }
    }

    /// Forgets a shard that is gone.
    pub fn forget(&mut self, key: &ShardKey) {
        self.last.remove(key);
    }
}

const PUBLISH_TIMEOUT: Duration = Duration::from_secs(10);

/// Events waiting for the publisher at most; past this the oldest is dropped (and counted), so
/// a slow or hung events API costs bounded memory and never holds up a reconcile.
pub const OUTBOX_CAPACITY: usize = 8192;

/// Events sent at once by the publisher.
const PUBLISH_PARALLELISM: usize = 4;

/// While shards wait to be addressed, events wait too, for at most this long: an address is what
/// the datapath is waiting for, an event is read by a person later. Past it, or with the outbox
/// half full, they go out anyway.
pub const MAX_HOLD: Duration = Duration::from_secs(30);

/// How often held events look again whether the reconciles are done.
const HOLD_POLL: Duration = Duration::from_millis(50);

/// An admitted event waiting to be sent.
struct Pending {
    queued_at: Instant,
    key: ShardKey,
    type_: EventType,
    reason: &'static str,
    note: String,
    regarding: ObjectReference,
}

struct Outbox {
    queue: Mutex<VecDeque<Pending>>,
    ready: Notify,
}

/// How long a published event can gain a repeat (`series`) rather than a new event.
const SERIES_TTL: Duration = Duration::from_secs(6 * 60);

/// What the same event (type, reason, object as read) is called, so a repeat inside
/// [`SERIES_TTL`] patches its `series` instead of creating another event.
type SeriesKey = (bool, &'static str, ObjectReferenceKey);

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ObjectReferenceKey {
    namespace: Option<String>,
    name: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
}

struct Published {
    name: String,
    count: i32,
    last: Instant,
}

#[derive(Default)]
struct SeriesCache {
    entries: HashMap<SeriesKey, Published>,
    pruned: Option<Instant>,
}

impl SeriesCache {
    fn get(&mut self, key: &SeriesKey, now: Instant) -> Option<(String, i32)> {
        // Expired entries are dropped in bulk at most every few seconds, not on every publish.
        if self
            .pruned
            .is_none_or(|at| now.duration_since(at) > Duration::from_secs(10))
        {
            self.entries
                .retain(|_, p| now.duration_since(p.last) < SERIES_TTL);
            self.pruned = Some(now);
        }
        self.entries
            .get(key)
            .filter(|p| now.duration_since(p.last) < SERIES_TTL)
            .map(|p| (p.name.clone(), p.count))
    }
}

/// Publishes events, only while this instance may write. Reconciles only queue them; a
/// background task ([`Notifier::run`]) sends them.
#[derive(Clone)]
pub struct Notifier {
    client: Client,
    reporter: Reporter,
    gate: Arc<Mutex<EventGate>>,
    outbox: Arc<Outbox>,
    series: Arc<Mutex<SeriesCache>>,
    capacity: usize,
    leader: LeaderToken,
    metrics: Metrics,
    repeat_after: Duration,
}

impl Notifier {
    pub fn new(
        client: Client,
        identity: &str,
        leader: LeaderToken,
        metrics: Metrics,
        repeat_after: Duration,
    ) -> Self {
        let reporter = Reporter {
            controller: crate::settings::CONTROLLER_NAME.to_string(),
            instance: Some(identity.to_string()),
        };
        Self {
            client,
            reporter,
            gate: Arc::default(),
            series: Arc::default(),
            outbox: Arc::new(Outbox {
                queue: Mutex::new(VecDeque::new()),
                ready: Notify::new(),
            }),
            capacity: OUTBOX_CAPACITY,
            leader,
            metrics,
            repeat_after,
        }
    }

    /// The same notifier with room for `capacity` waiting events (at least 1).
    pub fn with_capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity.max(1);
        self
    }

    pub async fn normal(&self, shard: &EgressShard, reason: &'static str, note: String) {
        self.publish(shard, EventType::Normal, reason, note)
    }

    pub async fn warning(&self, shard: &EgressShard, reason: &'static str, note: String) {
        self.publish(shard, EventType::Warning, reason, note)
    }

    /// Queues an event; never waits for the API.
    fn publish(&self, shard: &EgressShard, type_: EventType, reason: &'static str, note: String) {
        if !self.leader.is_leader() {
            return;
        }
        let key = ShardKey::of(shard);
        let admitted = self.gate.lock().unwrap_or_else(|e| e.into_inner()).admit(
            &key,
            reason,
            &note,
            Instant::now(),
            self.repeat_after,
        );
        if !admitted {
            return;
        }
        let pending = Pending {
            queued_at: Instant::now(),
            key,
            type_,
            reason,
            note: truncate(note, 1024),
            regarding: shard.object_ref(&()),
        };
        let dropped = {
            let mut queue = self.outbox.queue.lock().unwrap_or_else(|e| e.into_inner());
            let dropped = if queue.len() >= self.capacity {
                queue.pop_front()
            } else {
                None
            };
            queue.push_back(pending);
            self.metrics.set_events_waiting(queue.len());
            dropped
        };
        self.outbox.ready.notify_one();
        if let Some(old) = dropped {
            self.metrics.event_dropped();
            warn!(shard = %old.key, reason = old.reason, "too many events waiting; dropped the oldest");
            self.retract(&old.key, old.reason);
        }
    }

    /// Sends queued events until `stop`; then sends what is left, for at most `flush_for`.
    /// While `busy()` says address work is pending, events are held (see [`MAX_HOLD`]).
    pub async fn run(
        self,
        stop: CancellationToken,
        flush_for: Duration,
        busy: impl Fn() -> bool + Send,
    ) {
        let mut in_flight = JoinSet::new();
        loop {
            let (waiting, oldest_wait) = self.backlog(Instant::now());
            let hold = hold_events(busy(), waiting, self.capacity, oldest_wait);
            let room = if hold { 0 } else { PUBLISH_PARALLELISM };
            while in_flight.len() < room {
                match self.pop() {
                    Some(pending) => {
                        let this = self.clone();
                        in_flight.spawn(async move { this.send(pending).await });
                    }
                    None => break,
                }
            }
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = self.outbox.ready.notified(), if in_flight.len() < PUBLISH_PARALLELISM => {}
                Some(_) = in_flight.join_next(), if !in_flight.is_empty() => {}
                _ = tokio::time::sleep(HOLD_POLL), if hold => {}
            }
        }
        let _ = tokio::time::timeout(flush_for, async {
            while in_flight.join_next().await.is_some() {}
            while let Some(pending) = self.pop() {
                self.send(pending).await;
            }
        })
        .await;
    }

    /// Events waiting, and how long the oldest has waited.
    fn backlog(&self, now: Instant) -> (usize, Option<Duration>) {
        let queue = self.outbox.queue.lock().unwrap_or_else(|e| e.into_inner());
        let oldest = queue.front().map(|p| now.duration_since(p.queued_at));
        (queue.len(), oldest)
    }

    /// Events waiting to be sent.
    pub fn waiting(&self) -> usize {
        self.outbox
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    fn pop(&self) -> Option<Pending> {
        let mut queue = self.outbox.queue.lock().unwrap_or_else(|e| e.into_inner());
        let pending = queue.pop_front();
        self.metrics.set_events_waiting(queue.len());
        pending
    }

    async fn send(&self, pending: Pending) {
        // Losing the lease stops writes at once, queued events included.
        if !self.leader.is_leader() {
            self.retract(&pending.key, pending.reason);
            return;
        }
        let namespace = pending.regarding.namespace.as_deref().unwrap_or("default");
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), namespace);
        let r = &pending.regarding;
        let series_key: SeriesKey = (
            matches!(pending.type_, EventType::Warning),
            pending.reason,
            ObjectReferenceKey {
                namespace: r.namespace.clone(),
                name: r.name.clone(),
                uid: r.uid.clone(),
                resource_version: r.resource_version.clone(),
            },
        );
        let now = Instant::now();
        let earlier = self
            .series
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&series_key, now);
        // An event is a courtesy to whoever reads the shard; failing to publish one must not
        // fail anything else.
        let (name, count, published) = match earlier {
            // The same event again: count it on the one already published.
            Some((name, count)) => {
                let patch = serde_json::json!({
                    "series": {
                        "count": count + 1,
                        "lastObservedTime": MicroTime(Timestamp::now()),
                    }
                });
                let sent = tokio::time::timeout(
                    PUBLISH_TIMEOUT,
                    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)),
                )
                .await
                .map(|r| r.map(|_| ()));
                (name, count + 1, sent)
            }
            None => {
                let event = self.render(&pending);
                let name = event.metadata.name.clone().unwrap_or_default();
                let sent = tokio::time::timeout(
                    PUBLISH_TIMEOUT,
                    api.create(&PostParams::default(), &event),
                )
                .await
                .map(|r| r.map(|_| ()));
                (name, 1, sent)
            }
        };
        if let Ok(Ok(())) = published
            // An assigned address is write-once: it is never repeated, so it needs no series.
            && pending.reason != reason::ADDRESS_ASSIGNED
        {
            self.series
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entries
                .insert(
                    series_key,
                    Published {
                        name,
                        count,
                        last: now,
                    },
                );
        }
        let failure = match published {
            Ok(Ok(())) => {
                // An assigned address is write-once: nothing more will be said about this
                // shard's claim, so what the gate remembered about it is only weight.
                if pending.reason == reason::ADDRESS_ASSIGNED {
                    self.forget(&pending.key);
                }
                return;
            }
            Ok(Err(err)) => err.to_string(),
            Err(_) => format!("no answer within {PUBLISH_TIMEOUT:?}"),
        };
        warn!(shard = %pending.key, reason = pending.reason, err = %failure, "could not publish an event on the shard");
        self.retract(&pending.key, pending.reason);
    }

    fn render(&self, pending: &Pending) -> K8sEvent {
        let now = Timestamp::now();
        let regarding = &pending.regarding;
        K8sEvent {
            action: Some(action_of(pending.reason).to_string()),
            reason: Some(pending.reason.to_string()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            note: Some(pending.note.clone()),
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(event_name(
                    regarding
                        .name
                        .as_deref()
                        .unwrap_or(&self.reporter.controller),
                    now.as_nanosecond(),
                )),
                ..Default::default()
            },
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| self.reporter.controller.clone()),
            ),
            type_: Some(
                match pending.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .to_string(),
            ),
            ..Default::default()
        }
    }

    fn retract(&self, key: &ShardKey, reason: &str) {
        self.gate
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retract(key, reason);
    }

    pub fn forget(&self, key: &ShardKey) {
        self.gate
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .forget(key);
    }
}

/// `<object>.<nanoseconds in hex>`, as Kubernetes names events, with the object's part cut so the
/// whole stays a valid name (253 characters) for objects named at the limit.
pub fn event_name(object: &str, nanos: i128) -> String {
    let suffix = format!("{:x}", nanos.max(0));
    let mut cut = object.len().min(253 - 1 - suffix.len());
    while !object.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut prefix = &object[..cut];
    // A cut name must still end a DNS label with a letter or digit.
    prefix = prefix.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    format!("{prefix}.{suffix}")
}

/// Whether queued events wait for the reconciles: only while address work is pending, for at
/// most [`MAX_HOLD`], and never past half the outbox (holding on would start dropping them).
pub fn hold_events(
    busy: bool,
    waiting: usize,
    capacity: usize,
    oldest_wait: Option<Duration>,
) -> bool {
    busy && waiting * 2 < capacity && oldest_wait.is_some_and(|w| w < MAX_HOLD)
}

fn action_of(reason: &str) -> &'static str {
    match reason {
        reason::ADDRESS_DRIFT => "CheckDrift",
        reason::ADDRESS_ASSIGNED | reason::ASSIGN_REFUSED => "Assign",
        _ => "Claim",
    }
}

/// The API limits a note to 1 kB.
fn truncate(mut note: String, max: usize) -> String {
    if note.len() > max {
        let mut cut = max - 3;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
        note.push_str("...");
    }
    note
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_are_held_back_until_the_interval_passes() {
        let mut gate = EventGate::default();
        let key = ShardKey::new("ns", "a");
        let t0 = Instant::now();
        let hour = Duration::from_secs(3600);
        assert!(gate.admit(&key, "ClaimRefused", "Exhausted", t0, hour));
        assert!(!gate.admit(
            &key,
            "ClaimRefused",
            "Exhausted",
            t0 + Duration::from_secs(60),
            hour
        ));
        assert!(gate.admit(&key, "ClaimRefused", "Exhausted", t0 + hour, hour));
    }

    #[test]
    fn a_changed_message_or_another_shard_goes_out_at_once() {
        let mut gate = EventGate::default();
        let a = ShardKey::new("ns", "a");
        let b = ShardKey::new("ns", "b");
        let t0 = Instant::now();
        let hour = Duration::from_secs(3600);
        assert!(gate.admit(&a, "ClaimRefused", "Exhausted", t0, hour));
        assert!(gate.admit(&a, "ClaimRefused", "ClassNotFound", t0, hour));
        assert!(gate.admit(&a, "ClaimPending", "x", t0, hour));
        assert!(gate.admit(&b, "ClaimRefused", "Exhausted", t0, hour));
        gate.forget(&a);
        assert!(gate.admit(&a, "ClaimRefused", "ClassNotFound", t0, hour));
        gate.retract(&a, "ClaimRefused");
        assert!(gate.admit(&a, "ClaimRefused", "ClassNotFound", t0, hour));
    }

    #[test]
    fn event_names_stay_valid_for_names_at_the_limit() {
        let nanos = 0x1874_2b3c_5d6e_7f80_i128;
        assert_eq!(event_name("shard-1", nanos), "shard-1.18742b3c5d6e7f80");
        let label = "a".repeat(62);
        let longest = format!("{label}.{label}.{label}.{label}.b");
        assert_eq!(longest.len(), 253);
        let name = event_name(&longest, nanos);
        assert_eq!(name.len(), 253, "{name}");
        assert!(name.ends_with(".18742b3c5d6e7f80"));
        // A cut that lands on a separator drops it rather than leave an empty label.
        let dotted = format!("{}.{}", "a".repeat(235), "b".repeat(17));
        let name = event_name(&dotted, nanos);
        assert_eq!(name, format!("{}.18742b3c5d6e7f80", "a".repeat(235)));
        assert!(!name.contains(".."));
    }

    #[test]
    fn events_wait_for_busy_reconciles_within_bounds() {
        let young = Some(Duration::from_secs(1));
        assert!(hold_events(true, 10, 100, young), "held while busy");
        assert!(!hold_events(false, 10, 100, young), "sent once idle");
        assert!(!hold_events(true, 0, 100, None), "nothing to hold");
        assert!(
            !hold_events(true, 50, 100, young),
            "a half-full outbox is sent rather than dropped"
        );
        assert!(hold_events(true, 49, 100, young));
        assert!(
            !hold_events(true, 10, 100, Some(MAX_HOLD)),
            "no event waits longer than MAX_HOLD"
        );
    }

    #[test]
    fn notes_are_cut_to_the_api_limit() {
        let long = "é".repeat(1000);
        let cut = truncate(long, 1024);
        assert!(cut.len() <= 1024);
        assert!(cut.ends_with("..."));
        assert_eq!(truncate("short".into(), 1024), "short");
    }
}
