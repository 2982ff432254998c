//! The handles every task of a running controller shares, in one struct: each task takes a clone
//! and reads the fields it needs, so a new task or a new handle changes one place.

use std::sync::Arc;
use std::time::Duration;

use super::activity::Activity;
use super::queue::{QueueEvents, WorkQueue};
use super::readiness::Readiness;
use super::token::LeaderToken;
use crate::metrics::{Metrics, QueueLoad};
use crate::shard::{ShardCache, ShardKey, ShardMemory};

/// One running controller's shared state.
#[derive(Clone)]
pub struct Shared {
    /// The shard cache the watch keeps.
    pub cache: ShardCache,
    /// What this instance remembers per shard.
    pub memory: Arc<ShardMemory>,
    /// The shards owed a reconcile.
    pub queue: Arc<WorkQueue<ShardKey>>,
    /// Whether this instance may write (the lease).
    pub leader: LeaderToken,
    pub readiness: Arc<Readiness>,
    /// Signals tests and tools wait on instead of sleeping.
    pub activity: Arc<Activity>,
    pub metrics: Metrics,
}

impl Shared {
    /// Starts the work queue, reporting to `metrics` as client-go's work queue does.
    pub fn new(
        cache: ShardCache,
        memory: Arc<ShardMemory>,
        leader: LeaderToken,
        readiness: Arc<Readiness>,
        activity: Arc<Activity>,
        metrics: Metrics,
    ) -> Self {
        let queue = WorkQueue::<ShardKey>::start_observed(
            activity.clone(),
            Arc::new(QueueMetrics(metrics.clone())),
        );
        metrics.watch_queue({
            // Weak: the registry outlives a controller, and must not keep its queue alive.
            let queue = Arc::downgrade(&queue);
            Box::new(move || {
                queue.upgrade().map_or_else(QueueLoad::default, |q| {
                    let load = q.load();
                    QueueLoad {
                        depth: load.depth,
                        unfinished: load.unfinished,
                        longest: load.longest,
                    }
                })
            })
        });
        Self {
            cache,
            memory,
            queue,
            leader,
            readiness,
            activity,
            metrics,
        }
    }
}

/// The work queue's reports, as client-go's work queue metrics.
struct QueueMetrics(Metrics);

impl QueueEvents for QueueMetrics {
    fn added(&self) {
        self.0.queue_added();
    }

    fn retried(&self) {
        self.0.queue_retried();
    }

    fn waited(&self, pending_for: Duration) {
        self.0.queue_waited(pending_for);
    }

    fn worked(&self, took: Duration) {
        self.0.queue_worked(took);
    }
}
