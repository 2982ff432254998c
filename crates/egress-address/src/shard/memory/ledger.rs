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
        if let Some(said) = record.said.iter_mut().find(|s| s.reason == reason) {
            if said.note == note && now.duration_since(said.at) < repeat_after {
                return false;
            }
            said.note = note.to_string();
            said.at = now;
        } else {
            record.said.push(Said {
                reason,
                note: note.to_string(),
                at: now,
            });
        }
        true
    }

    /// Takes back an admitted event that could not be published, so the next attempt goes out.
    pub fn retract(&self, key: &ShardKey, reason: &str) {
        if let Some(record) = self.0.lock().records.get_mut(key) {
            record.said.retain(|s| s.reason != reason);
        }
    }

    /// Forgets what events said about a shard (its address is written: nothing more will be).
    pub fn clear(&self, key: &ShardKey) {
        if let Some(record) = self.0.lock().records.get_mut(key) {
            record.said = Vec::new();
        }
    }
}
