//! The workers that reconcile queued shards while this instance leads, and the drift pacer that
//! checks one addressed shard's holder at a time, spread evenly over the drift interval.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use super::events::Notifier;
use super::leader::LeaderToken;
use super::limiter::RetryBucket;
use super::queue::WorkQueue;
use super::readiness::{CellHealth, Readiness};
use crate::config::Backoff;
use crate::ipam::Ipam;
use crate::kube_status::is_unauthorized;
use crate::reconcile::drift::{self, Checked};
use crate::reconcile::{Context, Next, reconcile};
use crate::shard::ShardKey;

/// What every worker shares.
pub struct Workers {
    pub ctx: Arc<Context>,
    pub queue: Arc<WorkQueue<ShardKey>>,
    pub notifier: Notifier,
    pub leader: LeaderToken,
    pub readiness: Arc<Readiness>,
    pub backoff: Backoff,
    pub retries: RetryBucket,
    pub recheck_interval: Duration,
}

impl Workers {
    /// One worker: takes a key, reconciles it, and files it by what the reconcile said.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        loop {
            if !self.leader.is_leader() {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = self.leader.wait_leader() => {}
                }
            }
            let key = tokio::select! {
                _ = stop.cancelled() => return,
                key = self.queue.next() => match key {
                    Some(key) => key,
                    None => return,
                },
            };
            // A panic is a bug, but it must cost one shard a retry, not this worker for good: a
            // controller whose workers all died would stay ready and do nothing.
            let next = match guarded(reconcile(&self.ctx, &key)).await {
                Ok(report) => {
                    if let Some(err) = &report.error
                        && err.is_cell_error()
                        && err.kube_error().is_some_and(is_unauthorized)
                    {
                        self.readiness.set_cell(CellHealth::CredentialRefused);
                    }
                    for note in report.notes {
                        self.notifier.publish(note);
                    }
                    report.next
                }
                Err(panic) => {
                    self.ctx.metrics.reconcile_panicked();
                    error!(shard = %key, %panic, "a reconcile panicked; the shard is retried after its backoff");
                    Next::Retry
                }
            };
            self.readiness.refresh();
            self.queue.done(&key);
            self.file(key, next);
        }
    }

    fn file(&self, key: ShardKey, next: Next) {
        let memory = &self.ctx.memory;
        match next {
            Next::Done => memory.succeeded(&key),
            Next::Retry => {
                let failures = memory.failed(&key);
                let own = self.backoff.delay(failures, rand::random::<f64>());
                self.queue.add_after(key, own.max(self.retries.reserve()));
            }
            Next::WaitIpam => self.queue.park(key),
            Next::Recheck => {
                memory.succeeded(&key);
                self.queue.add_after(key, self.recheck_interval);
            }
            Next::Yield => self.queue.add(key),
        }
    }
}

/// Lets parked shards go when IPAM answers again: all of them once the breaker closes, and one
/// per probe interval while it is open (that shard's request is the probe).
pub async fn release_parked(ipam: Ipam, queue: Arc<WorkQueue<ShardKey>>, stop: CancellationToken) {
    let mut open = ipam.breaker().subscribe();
    loop {
        let is_open = *open.borrow_and_update();
        if !is_open {
            let n = queue.unpark_all();
            if n > 0 {
                info!(
                    shards = n,
                    "IPAM answers again; the waiting shards go ahead"
                );
            }
        }
        let probe_at = ipam
            .breaker()
            .next_probe()
            .unwrap_or_else(tokio::time::Instant::now);
        tokio::select! {
            _ = stop.cancelled() => return,
            changed = open.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep_until(probe_at), if is_open => {
                // A probe may go: one waiting shard's request is it. The probe rate is the
                // pace here, so the next look is one interval on.
                queue.unpark_one();
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = open.changed() => {}
                    _ = tokio::time::sleep(ipam.breaker().probe_every()) => {}
                }
            }
        }
    }
}

/// Runs `fut`, turning a panic into its message.
pub async fn guarded<T>(fut: impl Future<Output = T>) -> Result<T, String> {
    std::panic::AssertUnwindSafe(fut)
        .catch_unwind()
        .await
        .map_err(|payload| {
            payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_string())
        })
}

/// Checks every addressed shard's holder once per `every`, one shard at a time, evenly spaced:
/// IPAM sees a steady trickle (one read per shard per interval), never a burst.
pub async fn drift_pacer(
    ctx: Arc<Context>,
    notifier: Notifier,
    leader: LeaderToken,
    readiness: Arc<Readiness>,
    every: Duration,
    stop: CancellationToken,
) {
    loop {
        let shards: Vec<_> = ctx
            .store
            .state()
            .into_iter()
            .filter(|s| {
                !s.spec.shard_address_ipv6.is_empty()
                    && s.spec.shard_address_ipv6_claim_ref.is_some()
            })
            .collect();
        let step = pace(every, shards.len());
        let (mut holds, mut drifted, mut unknown) = (0usize, 0usize, 0usize);
        for shard in &shards {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(step) => {}
            }
            if !leader.is_leader() || !readiness.is_synced() {
                continue;
            }
            match drift::check(&ctx, shard).await {
                Checked::Holds => holds += 1,
                Checked::Drifted(note) => {
                    drifted += 1;
                    notifier.publish(*note);
                }
                Checked::Unknown => unknown += 1,
                Checked::Skipped => {}
            }
        }
        if shards.is_empty() {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(step) => {}
            }
        } else {
            info!(holds, drifted, unknown, "drift check pass done");
        }
    }
}

/// The gap between two checks when `n` shards share `every`.
pub fn pace(every: Duration, n: usize) -> Duration {
    every / u32::try_from(n.max(1)).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panic_becomes_its_message_and_a_value_passes_through() {
        assert_eq!(guarded(async { 7 }).await, Ok(7));
        let err = guarded(async { panic!("boom {}", 1) }).await.unwrap_err();
        assert_eq!(err, "boom 1");
        let err = guarded(async { std::panic::panic_any(5u8) })
            .await
            .unwrap_err();
        assert_eq!(err, "a panic without a message");
    }

    #[test]
    fn checks_are_spread_over_the_interval() {
        let hour = Duration::from_secs(3600);
        assert_eq!(pace(hour, 0), hour);
        assert_eq!(pace(hour, 1), hour);
        assert_eq!(pace(hour, 10_000), Duration::from_millis(360));
    }
}
