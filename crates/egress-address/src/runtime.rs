//! The running controller: a reflector over shards feeding a work queue, workers that reconcile
//! while this instance leads, the drift check, leader election, and an orderly shutdown.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use egress_api::shard::EgressShard;
use futures::{FutureExt, StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::events::Notifier;
use crate::ipam::Ipam;
use crate::ipam_error::is_unauthorized;
use crate::leader::{Elector, LeaderToken};
use crate::metrics::{Metrics, ShardState};
use crate::reconcile::{Context, Next, observed_state, reconcile};
use crate::workqueue::WorkQueue;
use crate::{Error, Settings, ShardKey, drift};

/// How long a stopping controller keeps sending the events it had queued.
const EVENT_FLUSH_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Readiness inputs shared between the tasks and the [`Handle`].
pub struct Shared {
    synced: AtomicBool,
    cell_auth_failed: AtomicBool,
    ipam_auth_failed: AtomicBool,
    ready: watch::Sender<bool>,
}

impl Shared {
    fn new() -> Self {
        Self {
            synced: AtomicBool::new(false),
            cell_auth_failed: AtomicBool::new(false),
            ipam_auth_failed: AtomicBool::new(false),
            ready: watch::channel(false).0,
        }
    }

    fn refresh(&self) {
        let ready = self.synced.load(Ordering::SeqCst)
            && !self.cell_auth_failed.load(Ordering::SeqCst)
            && !self.ipam_auth_failed.load(Ordering::SeqCst);
        self.ready.send_replace(ready);
    }

    fn set_synced(&self) {
        self.synced.store(true, Ordering::SeqCst);
        self.refresh();
    }

    pub(crate) fn set_cell_auth_failed(&self, failed: bool) {
        if self.cell_auth_failed.swap(failed, Ordering::SeqCst) != failed {
            self.refresh();
        }
    }

    pub(crate) fn set_ipam_auth_failed(&self, failed: bool) {
        if self.ipam_auth_failed.swap(failed, Ordering::SeqCst) != failed {
            self.refresh();
        }
    }
}

/// A view of a running controller, for probes, tests and tools.
#[derive(Clone)]
pub struct Handle {
    shared: Arc<Shared>,
    leader: LeaderToken,
    metrics: Metrics,
}

impl Handle {
    /// Ready once the first full list of shards is in the cache, and while neither plane is
    /// refusing the controller's credential. Leadership does not matter: a standby with a warm
    /// cache is ready to take over, and failing its readiness would only page someone.
    pub fn is_ready(&self) -> bool {
        *self.shared.ready.borrow()
    }

    /// Whether the first full list of shards has been cached.
    pub fn is_synced(&self) -> bool {
        self.shared.synced.load(Ordering::SeqCst)
    }

    /// Whether this instance may write now.
    pub fn is_leader(&self) -> bool {
        self.leader.is_leader()
    }

    /// Resolves once [`is_ready`](Self::is_ready) is true.
    pub async fn wait_ready(&self) {
        let mut rx = self.shared.ready.subscribe();
        let _ = rx.wait_for(|r| *r).await;
    }

    /// Resolves once this instance leads.
    pub async fn wait_leader(&self) {
        self.leader.wait_leader().await
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

/// A controller ready to [`run`](Controller::run).
pub struct Controller {
    settings: Settings,
    cell: Client,
    ipam: Client,
    metrics: Metrics,
    shared: Arc<Shared>,
    leader: LeaderToken,
}

impl Controller {
    /// Validates the settings (nothing is contacted before that passes).
    pub fn new(
        settings: Settings,
        cell: Client,
        ipam: Client,
        metrics: Metrics,
    ) -> Result<Self, Error> {
        settings.validate()?;
        let leader = if settings.leader_election.is_some() {
            LeaderToken::elected()
        } else {
            LeaderToken::always()
        };
        Ok(Self {
            settings,
            cell,
            ipam,
            metrics,
            shared: Arc::new(Shared::new()),
            leader,
        })
    }

    pub fn handle(&self) -> Handle {
        Handle {
            shared: self.shared.clone(),
            leader: self.leader.clone(),
            metrics: self.metrics.clone(),
        }
    }

    /// Runs until `shutdown` resolves; then stops taking work, lets in-flight reconciles finish
    /// (up to `shutdown_grace`), and releases the lease.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
        let Controller {
            settings,
            cell,
            ipam,
            metrics,
            shared,
            leader,
        } = self;
        info!(location = %settings.location, "starting egress address controller");
        metrics.set_leader(leader.is_leader());

        let (store, writer) = reflector::store::<EgressShard>();
        let notifier = Notifier::new(
            cell.clone(),
            &settings.identity,
            leader.clone(),
            metrics.clone(),
            settings.event_repeat_interval,
        );
        let queue = Arc::new(WorkQueue::<ShardKey>::new(settings.backoff));
        let stop_events = CancellationToken::new();
        let publisher = tokio::spawn(notifier.clone().run(
            stop_events.clone(),
            EVENT_FLUSH_GRACE,
            {
                let queue = queue.clone();
                move || queue.is_busy()
            },
        ));
        let ipam = Ipam::new(ipam, metrics.clone())
            .with_timeout(settings.request_timeout)
            .with_auth_watch(shared.clone());
        let ctx = Arc::new(Context::new(
            settings.clone(),
            cell.clone(),
            ipam,
            store,
            leader.clone(),
            notifier,
            metrics.clone(),
            shared.clone(),
        ));

        let stop_work = CancellationToken::new();
        let stop_lease = CancellationToken::new();
        let mut background = JoinSet::new();
        background.spawn(watch_shards(
            ctx.clone(),
            writer,
            queue.clone(),
            stop_work.clone(),
        ));
        background.spawn(resync_on_leadership(
            ctx.clone(),
            queue.clone(),
            stop_work.clone(),
        ));
        if !settings.drift_check_interval.is_zero() {
            background.spawn(drift_loop(ctx.clone(), stop_work.clone()));
        }
        let elector = settings.leader_election.clone().map(|le| {
            let api: Api<Lease> = Api::namespaced(cell.clone(), &le.namespace);
            let elector = Elector::new(
                api,
                le,
                settings.identity.clone(),
                leader.clone(),
                metrics.clone(),
            );
            tokio::spawn(elector.run(stop_lease.clone()))
        });
        let mut workers = JoinSet::new();
        for _ in 0..settings.concurrency {
            workers.spawn(worker(ctx.clone(), queue.clone(), stop_work.clone()));
        }

        shutdown.await;
        info!("shutting down: no new work is taken");
        stop_work.cancel();
        queue.shutdown();
        let drained = tokio::time::timeout(settings.shutdown_grace, async {
            while workers.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            warn!(grace = ?settings.shutdown_grace, "in-flight reconciles did not finish in time; abandoning them");
            workers.abort_all();
        }
        background.abort_all();
        while background.join_next().await.is_some() {}
        // Events already queued go out while this instance still holds the lease.
        stop_events.cancel();
        let _ = publisher.await;
        stop_lease.cancel();
        if let Some(elector) = elector {
            let _ = elector.await;
        }
        info!("stopped");
        Ok(())
    }
}

/// Builds and runs a controller in one call; see [`Controller`] for a [`Handle`].
pub async fn run(
    settings: Settings,
    cell: Client,
    ipam: Client,
    metrics: Metrics,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    Controller::new(settings, cell, ipam, metrics)?
        .run(shutdown)
        .await
}

async fn worker(ctx: Arc<Context>, queue: Arc<WorkQueue<ShardKey>>, stop: CancellationToken) {
    loop {
        if !ctx.leader.is_leader() {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = ctx.leader.wait_leader() => {}
            }
        }
        let key = tokio::select! {
            _ = stop.cancelled() => return,
            key = queue.next() => match key {
                Some(key) => key,
                None => return,
            },
        };
        // A panic is a bug, but it must cost one shard a retry, not this worker for good: a
        // controller whose workers all died would stay ready and do nothing.
        let next = match guarded(reconcile(&ctx, &key)).await {
            Ok(next) => next,
            Err(panic) => {
                ctx.metrics.reconcile_panicked();
                error!(shard = %key, %panic, "a reconcile panicked; the shard is retried after its backoff");
                Next::Retry
            }
        };
        queue.done(&key);
        match next {
            Next::Done => queue.forget(&key),
            Next::Retry => {
                queue.retry(key);
            }
            Next::Recheck => {
                queue.forget(&key);
                queue.add_after(key, ctx.settings.recheck_interval);
            }
            Next::Yield => queue.add(key),
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

fn kube_error_of(err: &watcher::Error) -> Option<&kube::Error> {
    match err {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => Some(e),
        _ => None,
    }
}

async fn watch_shards(
    ctx: Arc<Context>,
    mut writer: Writer<EgressShard>,
    queue: Arc<WorkQueue<ShardKey>>,
    stop: CancellationToken,
) {
    let api: Api<EgressShard> = match &ctx.settings.shard_namespace {
        Some(ns) => Api::namespaced(ctx.cell.clone(), ns),
        None => Api::all(ctx.cell.clone()),
    };
    let mut stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .into_stream()
        .boxed();
    let mut known: HashSet<ShardKey> = HashSet::new();
    let mut listing: HashSet<ShardKey> = HashSet::new();
    loop {
        let item = tokio::select! {
            _ = stop.cancelled() => return,
            item = stream.try_next() => item,
        };
        let event = match item {
            Ok(Some(event)) => event,
            Ok(None) => return,
            Err(err) => {
                if kube_error_of(&err).is_some_and(is_unauthorized) {
                    ctx.shared.set_cell_auth_failed(true);
                    error!(%err, "the cell refused the controller's credential; not ready, nothing is written");
                } else {
                    warn!(%err, "watching egress shards failed; retrying");
                }
                continue;
            }
        };
        ctx.shared.set_cell_auth_failed(false);
        writer.apply_watcher_event(&event);
        match &event {
            watcher::Event::Init => listing.clear(),
            watcher::Event::InitApply(shard) => {
                let key = ShardKey::of(shard);
                observe(&ctx, &key, shard);
                // Queued at InitDone: until then the reflector keeps listed objects out of the
                // store, and a reconcile would take the shard for gone and read it live.
                listing.insert(key);
            }
            watcher::Event::InitDone => {
                // A shard that vanished while the watch was down only shows as a missing entry.
                for gone in known.difference(&listing) {
                    ctx.metrics.forget_shard(gone);
                    queue.add(gone.clone());
                }
                for key in &listing {
                    queue.add(key.clone());
                }
                known = std::mem::take(&mut listing);
                if !ctx.shared.synced.load(Ordering::SeqCst) {
                    info!(
                        shards = known.len(),
                        "the first full list of shards is cached"
                    );
                }
                ctx.shared.set_synced();
            }
            watcher::Event::Apply(shard) => {
                let key = ShardKey::of(shard);
                observe(&ctx, &key, shard);
                known.insert(key.clone());
                queue.add(key);
            }
            watcher::Event::Delete(shard) => {
                let key = ShardKey::of(shard);
                known.remove(&key);
                // Every instance keeps its gauge true, not only the leader that releases.
                ctx.metrics.forget_shard(&key);
                queue.add(key);
            }
        }
    }
}

/// Keeps the state gauge true to the cache; refusals stay until a reconcile says otherwise.
fn observe(ctx: &Context, key: &ShardKey, shard: &EgressShard) {
    let state = observed_state(shard);
    if state == ShardState::Pending && ctx.metrics.shard_state(key).is_some() {
        return;
    }
    ctx.metrics.set_shard_state(key, state);
}

/// A new leader looks at every shard once: the previous one may have left work unfinished.
async fn resync_on_leadership(
    ctx: Arc<Context>,
    queue: Arc<WorkQueue<ShardKey>>,
    stop: CancellationToken,
) {
    let mut rx = ctx.leader.subscribe();
    let mut was_leader = false;
    loop {
        let leading = *rx.borrow_and_update();
        if leading && !was_leader {
            for shard in ctx.store.state() {
                queue.add(ShardKey::of(&shard));
            }
        }
        was_leader = leading;
        tokio::select! {
            _ = stop.cancelled() => return,
            changed = rx.changed() => if changed.is_err() { return },
        }
    }
}

async fn drift_loop(ctx: Arc<Context>, stop: CancellationToken) {
    let every = ctx.settings.drift_check_interval;
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticker.tick() => {}
        }
        if !ctx.leader.is_leader() || !ctx.shared.synced.load(Ordering::SeqCst) {
            continue;
        }
        let report = drift::check(&ctx).await;
        info!(
            checked = report.checked,
            missing = report.missing,
            different = report.different,
            unknown = report.unknown,
            "drift check done"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::guarded;

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
}
