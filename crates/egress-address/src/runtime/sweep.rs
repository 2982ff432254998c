//! The safety net under every trigger: once per interval the leader walks the cache and queues
//! each shard that should have an address, has none, and that nothing owes work (not queued, not
//! being worked on, not scheduled, not parked). The watch's event is a shard's only trigger; any
//! path that drops one (a bug, a lost leadership race) would otherwise leave the shard waiting
//! until it changes. A shard found this way is counted (`egress_address_unaddressed_swept`), so
//! a non-zero count is a lost trigger to look into, not routine.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::queue::WorkQueue;
use super::shared::Shared;
use crate::shard::decide::{Decision, decide};
use crate::shard::{CachedShard, ShardCache, ShardKey, ShardMemory, ShardState};

/// Cached shards looked at between two yields to the runtime: a pass over 100,000 shards must
/// not hold the one runtime thread for its whole length.
const BATCH: usize = 512;

/// What one pass reads and queues through.
pub struct Sweep {
    pub cache: ShardCache,
    pub memory: Arc<ShardMemory>,
    pub queue: Arc<WorkQueue<ShardKey>>,
}

/// Sweeps once per `every` while this instance leads and the cache is synced.
pub async fn run(shared: Shared, every: Duration, stop: CancellationToken) {
    let sweep = Sweep {
        cache: shared.cache.clone(),
        memory: shared.memory.clone(),
        queue: shared.queue.clone(),
    };
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        if !shared.leader.is_leader() || !shared.readiness.is_synced() {
            continue;
        }
        let queued = sweep.once().await;
        if queued > 0 {
            shared.metrics.unaddressed_swept(queued);
            warn!(
                shards = queued,
                "found unaddressed shards that no work was queued for; queued them"
            );
        }
    }
}

impl Sweep {
    /// One pass; how many shards it queued.
    pub async fn once(&self) -> u64 {
        let mut queued = 0;
        let unaddressed = self
            .cache
            .collect(|c| (!c.is_addressed()).then(|| c.clone()));
        for (i, cached) in unaddressed.iter().enumerate() {
            if i % BATCH == BATCH - 1 {
                tokio::task::yield_now().await;
            }
            let key = cached.key();
            if owed_an_address(cached, self.memory.addresses().state(&key))
                && !self.queue.owes(&key)
            {
                self.queue.add(key);
                queued += 1;
            }
        }
        queued
    }
}

/// Whether a cached shard still needs its address written, as far as this instance knows: one
/// written by this instance and not yet back through the watch is not.
fn owed_an_address(cached: &CachedShard, known: Option<ShardState>) -> bool {
    !cached.is_addressed()
        && known != Some(ShardState::Addressed)
        && decide(&cached.shard()) == Decision::Claim
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use crate::shard::fixture::shard;

    #[tokio::test]
    async fn queues_only_unaddressed_shards_nothing_owes() {
        let cache = ShardCache::new();
        for s in [
            shard("dropped", ""),
            shard("queued", ""),
            shard("scheduled", ""),
            shard("hand-set", "2001:db8::1"),
        ] {
            cache.put(CachedShard::new(&s));
        }
        let queue = WorkQueue::<ShardKey>::start();
        let key = |n: &str| ShardKey::new("ns", n);
        queue.add(key("queued"));
        queue.add_after(key("scheduled"), Duration::from_secs(3600));
        let sweep = Sweep {
            cache,
            memory: Arc::new(ShardMemory::new(Metrics::unregistered())),
            queue: queue.clone(),
        };
        assert_eq!(sweep.once().await, 1, "only the shard nothing owes work");
        assert!(queue.owes(&key("dropped")));
        assert_eq!(
            sweep.once().await,
            0,
            "now it is owed, so not counted again"
        );
    }
}
