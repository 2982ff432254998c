//! Consecutive failures per shard, for its backoff.

use super::*;

/// A view of [`ShardMemory`]; see the module documentation.
pub struct Failures<'a>(pub(super) &'a ShardMemory);

impl Failures<'_> {
    /// Counts a failure of `key` and returns how many in a row.
    pub fn failed(&self, key: &ShardKey) -> u32 {
        let mut inner = self.0.lock();
        let record = inner.records.entry(key.clone()).or_default();
        let more = record.more_mut();
        more.failures = more.failures.saturating_add(1);
        more.failures
    }

    /// Clears the failure count after a success.
    pub fn succeeded(&self, key: &ShardKey) {
        let mut inner = self.0.lock();
        if let Some(more) = inner.records.get_mut(key).and_then(|r| r.more.as_mut()) {
            more.failures = 0;
        }
        inner.tidy(key);
    }
}
