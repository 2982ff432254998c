//! Events on shards (`events.k8s.io/v1`), without a storm: the same reason and message for the
//! same shard is published again only after a long interval.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use egress_api::shard::EgressShard;
use kube::Client;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tracing::warn;

use crate::ShardKey;
use crate::leader::LeaderToken;

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

/// Publishes events, only while this instance may write.
#[derive(Clone)]
pub struct Notifier {
    recorder: Recorder,
    gate: Arc<Mutex<EventGate>>,
    leader: LeaderToken,
    repeat_after: Duration,
}

impl Notifier {
    pub fn new(
        client: Client,
        identity: &str,
        leader: LeaderToken,
        repeat_after: Duration,
    ) -> Self {
        let reporter = Reporter {
            controller: crate::settings::CONTROLLER_NAME.to_string(),
            instance: Some(identity.to_string()),
        };
        Self {
            recorder: Recorder::new(client, reporter),
            gate: Arc::default(),
            leader,
            repeat_after,
        }
    }

    pub async fn normal(&self, shard: &EgressShard, reason: &str, note: String) {
        self.publish(shard, EventType::Normal, reason, note).await
    }

    pub async fn warning(&self, shard: &EgressShard, reason: &str, note: String) {
        self.publish(shard, EventType::Warning, reason, note).await
    }

    async fn publish(&self, shard: &EgressShard, type_: EventType, reason: &str, note: String) {
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
        let event = Event {
            type_,
            reason: reason.to_string(),
            note: Some(truncate(note, 1024)),
            action: action_of(reason).to_string(),
            secondary: None,
        };
        // An event is a courtesy to whoever reads the shard; failing to publish one must not
        // fail (or, with a hung API, hold up) the reconcile that already did its work.
        let published = tokio::time::timeout(
            PUBLISH_TIMEOUT,
            self.recorder.publish(&event, &shard.object_ref(&())),
        )
        .await;
        let failure = match published {
            Ok(Ok(())) => return,
            Ok(Err(err)) => err.to_string(),
            Err(_) => format!("no answer within {PUBLISH_TIMEOUT:?}"),
        };
        warn!(shard = %key, reason, err = %failure, "could not publish an event on the shard");
        self.gate
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retract(&key, reason);
    }

    pub fn forget(&self, key: &ShardKey) {
        self.gate
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .forget(key);
    }
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
    fn notes_are_cut_to_the_api_limit() {
        let long = "é".repeat(1000);
        let cut = truncate(long, 1024);
        assert!(cut.len() <= 1024);
        assert!(cut.ends_with("..."));
        assert_eq!(truncate("short".into(), 1024), "short");
    }
}
