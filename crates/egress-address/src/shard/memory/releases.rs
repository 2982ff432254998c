//! The deleted incarnations whose claims are still to be released, and the release watermark a
//! leader publishes so standbys drop what it released.

use super::*;

/// A view of [`ShardMemory`]; see the module documentation.
pub struct Releases<'a>(pub(super) &'a ShardMemory);

impl Releases<'_> {
    /// Records that the cache lost a shard: the live object is gone, and what it carried is kept
    /// until its claim is released. `deleted_at` is the DELETED event's resourceVersion, when
    /// the deletion was seen as an event.
    pub fn observe_deleted(
        &self,
        key: &ShardKey,
        last: Option<&EgressShard>,
        deleted_at: Option<&str>,
    ) {
        let mut inner = self.0.lock();
        inner.seq += 1;
        let seq = inner.seq;
        if let Some(rv) = deleted_at {
            inner.remember_deletion(seq, rv);
        }
        let record = inner.records.entry(key.clone()).or_default();
        let old_state = record.state.take();
        let old_address = record.address.take();
        let more = record.more_mut();
        more.written_over = None;
        more.said.clear();
        let gone = Gone {
            uid: last.and_then(|s| s.metadata.uid.clone()),
            claim_ref: last.and_then(|s| s.spec.shard_address_ipv6_claim_ref.clone()),
            seq,
        };
        if !more
            .gone
            .iter()
            .any(|g| g.uid.is_some() && g.uid == gone.uid)
        {
            more.gone.push(gone);
        }
        inner.move_holder(key, old_address, None);
        inner.count(old_state, None, &self.0.metrics);
    }

    /// The deleted incarnations of `key` whose claims may still be held.
    pub fn gone(&self, key: &ShardKey) -> Vec<Gone> {
        self.0
            .lock()
            .records
            .get(key)
            .map(|r| r.more().gone.clone())
            .unwrap_or_default()
    }

    /// Every key with a deletion still to release (for a new leader).
    pub fn keys_with_deletions(&self) -> Vec<ShardKey> {
        self.0
            .lock()
            .records
            .iter()
            .filter(|(_, r)| !r.more().gone.is_empty())
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// A deleted incarnation's claim was released (or found not to be held).
    pub fn released(&self, key: &ShardKey, gone: &Gone) {
        let mut inner = self.0.lock();
        if let Some(more) = inner.records.get_mut(key).and_then(|r| r.more.as_mut()) {
            more.gone.retain(|g| g != gone);
        }
        inner.tidy(key);
    }

    /// The DELETED event up to which every deletion this instance saw has been released: the
    /// leader publishes it so standbys can let go of those deletions. `None` before any.
    pub fn release_watermark(&self) -> Option<String> {
        let inner = self.0.lock();
        let oldest_pending = inner
            .records
            .values()
            .flat_map(|r| r.more().gone.iter().map(|g| g.seq))
            .min();
        inner
            .deletions
            .iter()
            .rev()
            .find(|(seq, _)| oldest_pending.is_none_or(|p| *seq < p))
            .map(|(_, rv)| rv.clone())
    }

    /// Drops every deletion this instance saw up to and including the DELETED event `through`,
    /// which the leader reports released. A watermark this instance never saw drops nothing.
    pub fn drop_released_through(&self, through: &str) -> usize {
        let mut inner = self.0.lock();
        let Some(&upto) = inner.deletion_seq.get(through) else {
            return 0;
        };
        let mut dropped = 0;
        let keys: Vec<ShardKey> = inner
            .records
            .iter()
            .filter(|(_, r)| r.more().gone.iter().any(|g| g.seq <= upto))
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            if let Some(more) = inner.records.get_mut(&key).and_then(|r| r.more.as_mut()) {
                let before = more.gone.len();
                more.gone.retain(|g| g.seq > upto);
                dropped += before - more.gone.len();
            }
            inner.tidy(&key);
        }
        dropped
    }
}
