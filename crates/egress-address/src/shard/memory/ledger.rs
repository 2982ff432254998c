//! What events last said about each shard, so that a refusal re-checked every minute is not an
//! event storm.

use super::*;

/// A view of [`ShardMemory`]; see the module documentation.
pub struct EventLedger<'a>(pub(super) &'a ShardMemory);

impl EventLedger<'_> {
    /// Whether an event should go out now, recording it if so. The same reason with the same
    /// note for the same shard is held back for `repeat_after`; a different note goes out at
    /// once, since the situation changed.
    pub fn admit(
        &self,
        key: &ShardKey,
        reason: &'static str,
        note: &str,
        now: Instant,
        repeat_after: Duration,
    ) -> bool {
        let mut inner = self.0.lock();
        let Some(record) = inner.records.get_mut(key) else {
            // A shard no longer known: nothing to say about it.
            return false;
        };
        let said_before = &mut record.more_mut().said;
        if let Some(said) = said_before.iter_mut().find(|s| s.reason == reason) {
            if *said.note == *note && now.duration_since(said.at) < repeat_after {
                return false;
            }
            said.note = note.into();
            said.at = now;
        } else {
            // One reason at a time is the rule: a default Vec would reserve room for four.
            said_before.reserve_exact(1);
            said_before.push(Said {
                reason,
                note: note.into(),
                at: now,
            });
        }
        true
    }

    /// Takes back an admitted event that could not be published, so the next attempt goes out.
    pub fn retract(&self, key: &ShardKey, reason: &str) {
        if let Some(record) = self.0.lock().records.get_mut(key) {
            if let Some(more) = record.more.as_mut() {
                more.said.retain(|s| s.reason != reason);
            }
            record.settle();
        }
    }

    /// Forgets what events said about a shard (its address is written: nothing more will be).
    pub fn clear(&self, key: &ShardKey) {
        if let Some(record) = self.0.lock().records.get_mut(key) {
            if let Some(more) = record.more.as_mut() {
                more.said = Vec::new();
            }
            record.settle();
        }
    }
}
