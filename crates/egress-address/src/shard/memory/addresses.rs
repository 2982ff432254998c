//! What each live shard carries and the state it is in: its address (so no address is written onto
//! two shards, whatever IPAM answers), its state (exported as counts), and the version our last
//! write went over.

use super::*;

/// A view of [`ShardMemory`]; see the module documentation.
pub struct AddressBook<'a>(pub(super) &'a ShardMemory);

impl AddressBook<'_> {
    /// Records a shard as the cache now holds it: its address and its state. A refusal stays
    /// until a reconcile says otherwise; the object alone cannot tell it is over.
    pub fn observe(&self, key: &ShardKey, shard: &CachedShard) {
        let mut inner = self.0.lock();
        let state = shard.observed_state();
        let address = shard.address();
        let record = inner.records.entry(key.clone()).or_default();
        let old_address = std::mem::replace(&mut record.address, address);
        let old_state = record.state;
        let keep = state == ShardState::Pending && old_state.is_some();
        if !keep {
            record.state = Some(state);
        }
        let new_state = record.state;
        inner.move_holder(key, old_address, address);
        inner.count(old_state, new_state, &self.0.metrics);
    }

    /// Records a reconcile's verdict on a live shard.
    pub fn set_state(&self, key: &ShardKey, state: ShardState) {
        let mut inner = self.0.lock();
        let record = inner.records.entry(key.clone()).or_default();
        let old = record.state.replace(state);
        inner.count(old, Some(state), &self.0.metrics);
    }

    pub fn state(&self, key: &ShardKey) -> Option<ShardState> {
        self.0.lock().records.get(key).and_then(|r| r.state)
    }

    /// Shards in a state, as exported.
    pub fn count(&self, state: ShardState) -> i64 {
        self.0.lock().counts[state.index()]
    }

    /// Remembers that we wrote over `read_version`: a cache still showing it has not seen our
    /// write yet, and acting on it would only cost a conflict.
    pub fn wrote_over(&self, key: &ShardKey, read_version: Option<&str>) {
        if let Some(rv) = read_version
            && let Some(record) = self.0.lock().records.get_mut(key)
        {
            record.more_mut().written_over = Some(rv.to_string());
        }
    }

    /// The cache now holds `key` at `version`: once that is past the version we wrote over,
    /// [`is_stale`](Self::is_stale) has nothing left to guard.
    pub fn cached_at(&self, key: &ShardKey, version: &str) {
        if let Some(record) = self.0.lock().records.get_mut(key)
            && let Some(more) = record.more.as_mut()
            && more
                .written_over
                .as_deref()
                .is_some_and(|ours| ours != version)
        {
            more.written_over = None;
            record.settle();
        }
    }

    /// Whether the cache still shows the version we already wrote over.
    pub fn is_stale(&self, key: &ShardKey, shard: &EgressShard) -> bool {
        let mut inner = self.0.lock();
        let Some(record) = inner.records.get_mut(key) else {
            return false;
        };
        match (
            &record.more().written_over,
            shard.metadata.resource_version.as_ref(),
        ) {
            (Some(ours), Some(seen)) if ours == seen => true,
            (Some(_), _) => {
                record.more_mut().written_over = None;
                record.settle();
                false
            }
            _ => false,
        }
    }

    /// Takes `address` for `key` while it is written. Refused with the shard that already
    /// carries it (or is being given it): one address is never written onto two shards.
    pub fn reserve(&self, key: &ShardKey, address: Ipv6Addr) -> Result<(), ShardKey> {
        let mut inner = self.0.lock();
        if let Some(other) = inner
            .holders
            .get(&address)
            .and_then(|holders| holders.keys().iter().find(|k| *k != key))
        {
            return Err(other.clone());
        }
        let record = inner.records.entry(key.clone()).or_default();
        let old = record.more_mut().reserved.replace(address);
        inner.move_holder(key, old, Some(address));
        Ok(())
    }

    /// Ends a reservation. After a successful write the address stays with the shard until the
    /// cache shows it (then [`observe`](AddressBook::observe) owns it); after a failed one it is freed.
    pub fn unreserve(&self, key: &ShardKey, written: bool) {
        let mut inner = self.0.lock();
        let Some(record) = inner.records.get_mut(key) else {
            return;
        };
        let Some(reserved) = record.more.as_mut().and_then(|m| m.reserved.take()) else {
            return;
        };
        if written && record.address.is_none() {
            record.address = Some(reserved);
        } else if record.address != Some(reserved) {
            inner.move_holder(key, Some(reserved), None);
        }
        inner.tidy(key);
    }
}
