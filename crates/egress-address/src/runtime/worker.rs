//! The workers that reconcile queued shards while this instance leads, and the drift pacer that
//! checks one addressed shard's holder at a time, spread evenly over the drift interval.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Span, error, info};

use super::events::Notifier;
use super::limiter::RetryBucket;
use super::queue::WorkQueue;
use super::readiness::CellHealth;
use super::shared::Shared;
use crate::config::Backoff;
use crate::ipam::Ipam;
use crate::kube_status::{forbidden_message, is_unauthorized, transport_cause};
use crate::logs::{object_ref, reconcile_id};
use crate::metrics::{CONTROLLER, Metrics, ReconcileResult};
use crate::reconcile::drift::{self, Checked};
use crate::reconcile::{Context, Next, reconcile};
use crate::shard::{ShardCache, ShardKey, ShardState};

/// What the workers were doing when the cell forbade it (a `/ready` reason names it).
const RECONCILING: &str = "reading and writing egress shards";

/// What every worker shares.
pub struct Workers {
    pub shared: Shared,
    pub ctx: Arc<Context>,
    pub notifier: Notifier,
    pub backoff: Backoff,
    pub retries: RetryBucket,
    pub recheck_interval: Duration,
}

impl Workers {
    /// One worker: takes a key, reconciles it, and files it by what the reconcile said.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        loop {
            if !self.shared.leader.is_leader() {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = self.shared.leader.wait_leader() => {}
                }
            }
            let key = tokio::select! {
                _ = stop.cancelled() => return,
                key = self.shared.queue.next() => match key {
                    Some(key) => key,
                    None => return,
                },
            };
            let _busy = Busy::new(&self.ctx.metrics);
            let span = reconcile_span(&key);
            let started = Instant::now();
            // A panic is a bug, but it must cost one shard a retry, not this worker for good: a
            // controller whose workers all died would stay ready and do nothing.
            let outcome = guarded(reconcile(&self.ctx, &key))
                .instrument(span.clone())
                .await;
            let took = started.elapsed();
            let next = {
                let _in = span.enter();
                match outcome {
                    Ok(report) => {
                        let forbidden = report
                            .error
                            .as_ref()
                            .filter(|e| e.is_cell_error())
                            .and_then(|e| e.kube_error())
                            .and_then(forbidden_message);
                        // Said until a reconcile gets through: one that needs no cell write
                        // proves nothing, but the next write does.
                        if forbidden.is_some() || report.error.is_none() {
                            self.shared
                                .readiness
                                .set_forbidden(RECONCILING, forbidden.clone());
                        }
                        if let Some(err) = &report.error {
                            if forbidden.is_none()
                                && err.is_cell_error()
                                && err.kube_error().is_some_and(is_unauthorized)
                            {
                                self.shared
                                    .readiness
                                    .set_cell(CellHealth::CredentialRefused);
                            }
                            if report.next == Next::Retry {
                                let cause = err
                                    .kube_error()
                                    .and_then(transport_cause)
                                    .unwrap_or("answered");
                                error!(shard = %key, kind = err.metric_label(), cause, error = %err, "Reconciler error");
                            }
                        }
                        for note in report.notes {
                            self.notifier.publish(note);
                        }
                        report.next
                    }
                    Err(panic) => {
                        self.ctx.metrics.reconcile_panicked();
                        error!(shard = %key, %panic, "a reconcile panicked; the shard is retried after its backoff");
                        error!(shard = %key, kind = "panic", error = %format!("panic: {panic} [recovered]"), "Reconciler error");
                        Next::Retry
                    }
                }
            };
            self.ctx.metrics.reconciled(result_of(next), took);
            self.shared.readiness.refresh();
            self.shared.queue.done(&key);
            self.file(key, next);
            // A pass with nothing to ask of anyone never waits, and a queue of them would hold a
            // one-thread runtime: `/live`, `/ready` and `/metrics` would answer only after the
            // burst. Tokio's budget makes the worker step aside every so many passes.
            tokio::task::consume_budget().await;
        }
    }

    fn file(&self, key: ShardKey, next: Next) {
        let memory = &self.ctx.memory;
        match next {
            Next::Done => memory.failures().succeeded(&key),
            Next::Retry => {
                let failures = memory.failures().failed(&key);
                let own = self.backoff.delay(failures, rand::random::<f64>());
                self.shared
                    .queue
                    .retry_after(key, own.max(self.retries.reserve()));
            }
            Next::WaitIpam => self.shared.queue.park(key),
            Next::Recheck => {
                memory.failures().succeeded(&key);
                self.shared.queue.add_after(key, self.recheck_interval);
            }
            Next::Yield => self.shared.queue.add(key),
        }
    }
}

/// How controller-runtime would count a reconcile that ends in `next`: an error is `error`, a
/// fixed delay `requeue_after`, a key kept for later (not leading, IPAM down) `requeue`.
pub fn result_of(next: Next) -> ReconcileResult {
    match next {
        Next::Done => ReconcileResult::Success,
        Next::Retry => ReconcileResult::Error,
        Next::Recheck => ReconcileResult::RequeueAfter,
        Next::Yield | Next::WaitIpam => ReconcileResult::Requeue,
    }
}

/// The fields controller-runtime puts on every line of a reconcile: the controller, the object
/// (as a reference, and as `namespace` and `name`), and an ID of its own.
fn reconcile_span(key: &ShardKey) -> Span {
    // At error level, so that the fields are there whenever a "Reconciler error" line is. Every
    // field is recorded as Display, so a `--log-level` filter names each value without quotes
    // (a `&str` would be matched by its Debug form, quotes and all).
    tracing::error_span!(
        "reconcile",
        controller = %CONTROLLER,
        controllerGroup = %egress_api::shard::GROUP,
        controllerKind = %"EgressShard",
        EgressShard = %object_ref(&key.namespace, &key.name),
        namespace = %key.namespace,
        name = %key.name,
        reconcileID = %reconcile_id(),
    )
}

/// Counts a worker as busy while it lives.
struct Busy<'a>(&'a Metrics);

impl<'a> Busy<'a> {
    fn new(metrics: &'a Metrics) -> Self {
        metrics.worker_busy();
        Self(metrics)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.worker_idle();
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

/// How soon the drift pacer looks again when no shard is addressed yet.
const NOTHING_TO_CHECK_LOOK: Duration = Duration::from_secs(10);

/// Checks every addressed shard's holder once per `every`, one shard at a time, evenly spaced:
/// IPAM sees a steady trickle (one read per shard per interval), never a burst.
///
/// A pass is the list of shards addressed when it began, by key: each is read from the cache
/// when its turn comes, so a shard deleted meanwhile is skipped (its claim is being released; a
/// check would call that drift) and the pass holds no old copies of the objects. The gap
/// before each check is `every` over the shards addressed *now*, so a cell that grows during a
/// pass is paced for its new size at once, and a shard is never checked more than once per
/// interval on average. Every check waits one gap first: a shard is not read the moment it
/// was addressed, and a controller that just started sends nothing at once.
pub async fn drift_pacer(
    ctx: Arc<Context>,
    notifier: Notifier,
    shared: Shared,
    every: Duration,
    stop: CancellationToken,
) {
    let Shared {
        leader, readiness, ..
    } = &shared;
    let mut pass: std::collections::VecDeque<ShardKey> = Default::default();
    let (mut holds, mut drifted, mut unknown) = (0usize, 0usize, 0usize);
    loop {
        if pass.is_empty() {
            if holds + drifted + unknown > 0 {
                info!(holds, drifted, unknown, "drift check pass done");
                (holds, drifted, unknown) = (0, 0, 0);
            }
            pass = checkable(&ctx.cache);
            if pass.is_empty() {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(NOTHING_TO_CHECK_LOOK.min(every)) => {}
                }
                continue;
            }
        }
        let addressed =
            usize::try_from(ctx.memory.addresses().count(ShardState::Addressed)).unwrap_or(0);
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(pace(every, addressed.max(pass.len()).max(1))) => {}
        }
        let Some(key) = pass.pop_front() else {
            continue;
        };
        if !leader.is_leader() || !readiness.is_synced() {
            continue;
        }
        let Some(shard) = ctx.cache.get(&key).map(|c| c.shard()) else {
            continue;
        };
        match drift::check(&ctx, &shard).await {
            Checked::Holds => holds += 1,
            Checked::Drifted(note) => {
                drifted += 1;
                notifier.publish(*note);
            }
            Checked::Unknown => unknown += 1,
            Checked::Skipped => {}
        }
    }
}

/// The keys of the cached shards that carry an address and a ref: what a pass checks.
fn checkable(cache: &ShardCache) -> std::collections::VecDeque<ShardKey> {
    cache.collect(|c| c.is_addressed().then(|| c.key())).into()
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
    fn results_are_classified_as_controller_runtime_classifies_them() {
        assert_eq!(result_of(Next::Done), ReconcileResult::Success);
        assert_eq!(result_of(Next::Retry), ReconcileResult::Error);
        assert_eq!(result_of(Next::Recheck), ReconcileResult::RequeueAfter);
        assert_eq!(result_of(Next::Yield), ReconcileResult::Requeue);
        assert_eq!(result_of(Next::WaitIpam), ReconcileResult::Requeue);
    }

    #[test]
    fn a_busy_worker_is_counted_until_it_is_done() {
        let metrics = Metrics::unregistered();
        {
            let _busy = Busy::new(&metrics);
            assert_eq!(metrics.active_workers(), 1);
        }
        assert_eq!(metrics.active_workers(), 0);
    }

    #[test]
    fn checks_are_spread_over_the_interval() {
        let hour = Duration::from_secs(3600);
        assert_eq!(pace(hour, 0), hour);
        assert_eq!(pace(hour, 1), hour);
        assert_eq!(pace(hour, 10_000), Duration::from_millis(360));
    }

    #[test]
    fn a_log_filter_names_each_reconcile_field_without_quotes() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

        struct Lines(Arc<AtomicUsize>);
        impl<S: tracing::Subscriber> Layer<S> for Lines {
            fn on_event(&self, _: &tracing::Event<'_>, _: Context<'_, S>) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        let key = ShardKey::new("galactic-system", "shard-a");
        let lines = |directive: &str| {
            let seen = Arc::new(AtomicUsize::new(0));
            let subscriber = tracing_subscriber::registry()
                .with(crate::logs::filter(directive).unwrap())
                .with(Lines(seen.clone()));
            tracing::subscriber::with_default(subscriber, || {
                reconcile_span(&key).in_scope(|| tracing::debug!("inside"));
            });
            seen.load(Ordering::Relaxed)
        };
        for (field, value) in [
            ("controller", CONTROLLER),
            ("controllerGroup", egress_api::shard::GROUP),
            ("controllerKind", "EgressShard"),
            ("namespace", "galactic-system"),
            ("name", "shard-a"),
        ] {
            let directive = format!("warn,[reconcile{{{field}={value}}}]=debug");
            assert_eq!(lines(&directive), 1, "{directive}");
            let other = format!("warn,[reconcile{{{field}=x{value}}}]=debug");
            assert_eq!(lines(&other), 0, "{other}");
            // tracing-subscriber 0.3.23 also takes a field whose value is the start of the
            // filter's, as docs/operations.md warns. When this fails the library has closed that
            // gap: drop the warning there.
            let longer = format!("warn,[reconcile{{{field}={value}x}}]=debug");
            assert_eq!(lines(&longer), 1, "{longer}");
        }
    }
}
