//! Events on shards (`events.k8s.io/v1`), off the reconcile path and without a storm: the same
//! reason and note for the same shard is published again only after a long interval (what was
//! said lives in the shard's memory), and a repeat within six minutes patches the first event's
//! `series` instead of creating another.
//!
//! kube's own `Recorder` is not used (see docs/architecture.md, "Events"): it rescans its whole
//! cache on every publish, caches every event for six minutes (10,000 `AddressAssigned` events in
//! a rollout), and names events past the 253-character limit for long shard names.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::Patch;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::activity::Activity;
use super::token::LeaderToken;
use crate::config::settings::CONTROLLER_NAME;
use crate::config::settings::{patch_params, write_params};
use crate::metrics::Metrics;
use crate::reconcile::{Note, reason};
use crate::shard::ShardMemory;

const PUBLISH_TIMEOUT: Duration = Duration::from_secs(10);

/// Events waiting for the publisher at most; past this the oldest is dropped (and counted), so
/// a slow or hung events API costs bounded memory and never holds up a reconcile. Sized so a
/// rollout of 10,000 new shards holds all its events until the addresses are written (held
/// events go out once the outbox is half full): an event costs the cell a write as dear as the
/// address's, and sending them beside the addresses made a rollout 9% slower. A waiting event is
/// about 250 bytes, so the bound is 8 MiB.
pub const OUTBOX_CAPACITY: usize = 32768;

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
    note: Note,
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
    instance: String,
    memory: Arc<ShardMemory>,
    outbox: Arc<Outbox>,
    series: Arc<Mutex<SeriesCache>>,
    leader: LeaderToken,
    metrics: Metrics,
    activity: Arc<Activity>,
    repeat_after: Duration,
}

impl Notifier {
    pub fn new(
        client: Client,
        identity: &str,
        memory: Arc<ShardMemory>,
        leader: LeaderToken,
        metrics: Metrics,
        activity: Arc<Activity>,
        repeat_after: Duration,
    ) -> Self {
        Self {
            client,
            instance: identity.to_string(),
            memory,
            series: Arc::default(),
            outbox: Arc::new(Outbox {
                queue: Mutex::new(VecDeque::new()),
                ready: Notify::new(),
            }),
            leader,
            metrics,
            activity,
            repeat_after,
        }
    }

    /// Queues an event; never waits for the API.
    pub fn publish(&self, mut note: Note) {
        if !self.leader.is_leader() {
            return;
        }
        let admitted = if note.reason == reason::ADDRESS_ASSIGNED {
            // Said once and never again (the address is write-once): nothing for the gate to
            // hold back, so nothing is recorded for it. A rollout holds thousands of these.
            self.memory.knows(&note.key)
        } else {
            self.memory.events().admit(
                &note.key,
                note.reason,
                &note.message,
                Instant::now(),
                self.repeat_after,
            )
        };
        if !admitted {
            return;
        }
        note.message = truncate(std::mem::take(&mut note.message), 1024);
        let pending = Pending {
            queued_at: Instant::now(),
            note,
        };
        let dropped = {
            let mut queue = crate::sync::lock(&self.outbox.queue);
            let dropped = if queue.len() >= OUTBOX_CAPACITY {
                queue.pop_front()
            } else {
                None
            };
            queue.push_back(pending);
            self.activity.events_queued(1);
            self.metrics.set_events_waiting(queue.len());
            dropped
        };
        self.outbox.ready.notify_one();
        if let Some(old) = dropped {
            self.activity.events_done(1);
            self.metrics.event_dropped();
            warn!(shard = %old.note.key, reason = old.note.reason, "too many events waiting; dropped the oldest");
            self.memory.events().retract(&old.note.key, old.note.reason);
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
            let hold = hold_events(busy(), waiting, OUTBOX_CAPACITY, oldest_wait);
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
        let queue = crate::sync::lock(&self.outbox.queue);
        let oldest = queue.front().map(|p| now.duration_since(p.queued_at));
        (queue.len(), oldest)
    }

    fn pop(&self) -> Option<Pending> {
        let mut queue = crate::sync::lock(&self.outbox.queue);
        let pending = queue.pop_front();
        self.metrics.set_events_waiting(queue.len());
        pending
    }

    async fn send(&self, pending: Pending) {
        self.deliver(pending).await;
        self.activity.events_done(1);
    }

    async fn deliver(&self, pending: Pending) {
        // Losing the lease stops writes at once, queued events included.
        let note = &pending.note;
        if !self.leader.is_leader() {
            self.memory.events().retract(&note.key, note.reason);
            return;
        }
        let r = note.regarding();
        let namespace = r.namespace.as_deref().unwrap_or("default");
        let url = <K8sEvent as kube::Resource>::url_path(&(), Some(namespace));
        let series_key: SeriesKey = (
            note.warning,
            note.reason,
            ObjectReferenceKey {
                namespace: r.namespace.clone(),
                name: r.name.clone(),
                uid: r.uid.clone(),
                resource_version: r.resource_version.clone(),
            },
        );
        let now = Instant::now();
        let earlier = crate::sync::lock(&self.series).get(&series_key, now);
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
                let req = kube::core::Request::new(&url).patch(
                    &name,
                    &patch_params(),
                    &Patch::Merge(&patch),
                );
                let sent = self.send_undecoded(req, "patch").await;
                (name, count + 1, sent)
            }
            None => {
                let event = self.render(note, r);
                let name = event.metadata.name.clone().unwrap_or_default();
                let req = serde_json::to_vec(&event)
                    .map_err(kube::Error::SerdeError)
                    .and_then(|body| {
                        kube::core::Request::new(&url)
                            .create(&write_params(), body)
                            .map_err(kube::Error::BuildRequest)
                    });
                let sent = match req {
                    Ok(req) => self.send_undecoded(Ok(req), "create").await,
                    Err(e) => Ok(Err(e)),
                };
                (name, 1, sent)
            }
        };
        if let Ok(Ok(())) = published
            // An assigned address is write-once: it is never repeated, so it needs no series.
            && note.reason != reason::ADDRESS_ASSIGNED
        {
            crate::sync::lock(&self.series).entries.insert(
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
                if note.reason == reason::ADDRESS_ASSIGNED {
                    self.memory.events().clear(&note.key);
                }
                return;
            }
            Ok(Err(err)) => err.to_string(),
            Err(_) => format!("no answer within {PUBLISH_TIMEOUT:?}"),
        };
        warn!(shard = %note.key, reason = note.reason, err = %failure, "could not publish an event on the shard");
        self.memory.events().retract(&note.key, note.reason);
    }

    /// Sends one event write. The answer (the whole event again, managedFields and all) is read
    /// but not decoded: nothing uses it, and at one event per shard its decoding was a visible
    /// share of the controller's CPU in a rollout.
    async fn send_undecoded(
        &self,
        req: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
        verb: &'static str,
    ) -> Result<Result<(), kube::Error>, tokio::time::error::Elapsed> {
        let mut req = match req {
            Ok(req) => req,
            Err(e) => return Ok(Err(kube::Error::BuildRequest(e))),
        };
        // kube's own calls name their verb this way; the request observer reads it.
        req.extensions_mut().insert(verb);
        tokio::time::timeout(PUBLISH_TIMEOUT, self.client.request_text(req))
            .await
            .map(|r| r.map(drop))
    }

    fn render(&self, note: &Note, regarding: ObjectReference) -> K8sEvent {
        let now = Timestamp::now();
        K8sEvent {
            action: Some(note.action().to_string()),
            reason: Some(note.reason.to_string()),
            event_time: Some(MicroTime(now)),
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(event_name(
                    regarding.name.as_deref().unwrap_or(CONTROLLER_NAME),
                    now.as_nanosecond(),
                )),
                ..Default::default()
            },
            regarding: Some(regarding),
            note: Some(note.message.clone()),
            reporting_controller: Some(CONTROLLER_NAME.to_string()),
            reporting_instance: Some(self.instance.clone()),
            type_: Some(if note.warning { "Warning" } else { "Normal" }.to_string()),
            ..Default::default()
        }
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
