//! The running controller: the shard watch feeding a work queue ([`watch`], [`queue`]), workers
//! that reconcile while this instance leads and the drift pacer ([`worker`]), leader election
//! ([`leader`]), events ([`events`]), readiness ([`readiness`]) and the admin server
//! ([`admin`]), started and stopped in order.

pub mod activity;
pub mod admin;
pub mod events;
pub mod leader;
pub mod limiter;
pub mod orphans;
pub mod queue;
pub mod readiness;
pub mod sweep;
pub mod watch;
pub mod worker;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::runtime::reflector;
use kube::{Api, Client};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::Error;
use crate::config::Settings;
use crate::ipam::Ipam;
use crate::ipam::breaker::Breaker;
use crate::kube_status::{is_unauthorized, transport_cause};
use crate::metrics::{Metrics, QueueLoad};
use crate::reconcile::Context;
use crate::shard::{CachedShard, ShardKey, ShardMemory};
use activity::Activity;
use events::Notifier;
use leader::{Elector, LeaderToken};
use queue::{QueueEvents, WorkQueue};
use readiness::Readiness;
use watch::Watch;
use worker::Workers;

/// How long a stopping controller keeps sending the events it had queued.
const EVENT_FLUSH_GRACE: Duration = Duration::from_secs(2);

/// The namespace whose UID identifies the cell when no identity is given.
pub const CELL_ID_NAMESPACE: &str = "kube-system";

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

/// A view of a running controller, for probes, tests and tools.
#[derive(Clone)]
pub struct Handle {
    readiness: Arc<Readiness>,
    leader: LeaderToken,
    metrics: Metrics,
    memory: Arc<ShardMemory>,
    activity: Arc<Activity>,
}

impl Handle {
    /// Ready once the first full list of shards is cached, while the cell answers and accepts
    /// the credential, and while IPAM has not refused the credential or stopped answering.
    /// Leadership does not matter: a standby with a warm cache is ready to take over.
    pub fn is_ready(&self) -> bool {
        self.readiness.is_ready()
    }

    /// Why the controller is not ready (empty when it is).
    pub fn not_ready_because(&self) -> Vec<String> {
        self.readiness.reasons()
    }

    /// What `/ready` says beside its verdict (an overdue lease renewal).
    pub fn ready_notes(&self) -> Vec<String> {
        self.readiness.notes()
    }

    /// Whether the first full list of shards has been cached.
    pub fn is_synced(&self) -> bool {
        self.readiness.is_synced()
    }

    /// Whether this instance may write now.
    pub fn is_leader(&self) -> bool {
        self.leader.is_leader()
    }

    /// Resolves once [`is_ready`](Self::is_ready) is true.
    pub async fn wait_ready(&self) {
        self.readiness.wait_ready().await
    }

    /// Resolves once this instance leads and has queued what a new leader looks at.
    pub async fn wait_leader(&self) {
        self.activity.leading().await
    }

    /// Whether this instance remembers anything about a shard (live, or deleted and not yet
    /// released).
    pub fn remembers(&self, key: &ShardKey) -> bool {
        self.memory.knows(key)
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Resolves once no shard is ready or being worked on and no event is waiting or in flight
    /// (shards scheduled for later, or parked while IPAM is down, do not count).
    pub async fn wait_idle(&self) {
        self.activity.idle().await
    }

    /// Resolves once the shard cache has applied `resource_version` (or a later one).
    pub async fn wait_seen(&self, resource_version: &str) {
        self.activity.seen(resource_version).await
    }

    /// Shards this instance remembers anything about (live, or deleted and not yet released).
    pub fn remembered_shards(&self) -> usize {
        self.memory.len()
    }
}

/// A controller ready to [`run`](Controller::run).
pub struct Controller {
    settings: Settings,
    cell: Client,
    ipam: Ipam,
    metrics: Metrics,
    readiness: Arc<Readiness>,
    leader: LeaderToken,
    memory: Arc<ShardMemory>,
    activity: Arc<Activity>,
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
        let ipam = Ipam::new(
            ipam,
            metrics.clone(),
            settings.request_timeout,
            Breaker::new(
                settings.ipam_failure_threshold,
                settings.ipam_probe_interval,
            ),
        );
        Ok(Self {
            readiness: Arc::new(Readiness::new(ipam.clone(), metrics.clone())),
            memory: Arc::new(ShardMemory::new(metrics.clone())),
            activity: Arc::default(),
            settings,
            cell,
            ipam,
            metrics,
            leader,
        })
    }

    pub fn handle(&self) -> Handle {
        Handle {
            readiness: self.readiness.clone(),
            leader: self.leader.clone(),
            metrics: self.metrics.clone(),
            memory: self.memory.clone(),
            activity: self.activity.clone(),
        }
    }

    /// Runs until `shutdown` resolves; then stops taking work, lets in-flight reconciles finish
    /// (up to `shutdown_grace`), sends queued events, and releases the lease.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
        let Controller {
            settings,
            cell,
            ipam,
            metrics,
            readiness,
            leader,
            memory,
            activity,
        } = self;
        let mut shutdown = std::pin::pin!(shutdown);
        let cell_id = tokio::select! {
            id = identify_cell(&settings, &cell, &readiness) => id,
            _ = &mut shutdown => {
                info!("stopped before the cell's identity was known");
                return Ok(());
            }
        };
        info!(location = %settings.location, cell = %cell_id, version = crate::VERSION, commit = crate::COMMIT, "starting egress address controller");
        metrics.set_leader(leader.is_leader());
        metrics.set_max_concurrent_reconciles(settings.concurrency);

        let (store, writer) = reflector::store::<CachedShard>();
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
        let notifier = Notifier::new(
            cell.clone(),
            &settings.identity,
            memory.clone(),
            leader.clone(),
            metrics.clone(),
            activity.clone(),
            settings.event_repeat_interval,
        );
        let stop_events = CancellationToken::new();
        let publisher = tokio::spawn(notifier.clone().run(
            stop_events.clone(),
            EVENT_FLUSH_GRACE,
            {
                let queue = queue.clone();
                move || queue.is_busy()
            },
        ));
        let ctx = Arc::new(Context {
            settings: settings.clone(),
            cell_id,
            cell: cell.clone(),
            ipam,
            store: store.clone(),
            memory: memory.clone(),
            gate: Arc::new(leader.clone()),
            metrics: metrics.clone(),
        });

        let stop_work = CancellationToken::new();
        let stop_lease = CancellationToken::new();
        let mut background = JoinSet::new();
        background.spawn(
            Watch {
                api: Watch::new_api(cell.clone(), settings.shard_namespace.as_deref()),
                store: store.clone(),
                writer,
                memory: memory.clone(),
                queue: queue.clone(),
                leader: leader.clone(),
                readiness: readiness.clone(),
                activity: activity.clone(),
            }
            .run(stop_work.clone()),
        );
        background.spawn(watch::follow_leadership(
            leader.clone(),
            store.clone(),
            memory.clone(),
            queue.clone(),
            activity.clone(),
            leader::LapseReport {
                metrics: metrics.clone(),
                readiness: readiness.clone(),
            },
            stop_work.clone(),
        ));
        if !settings.drift_check_interval.is_zero() {
            background.spawn(worker::drift_pacer(
                ctx.clone(),
                notifier.clone(),
                leader.clone(),
                readiness.clone(),
                settings.drift_check_interval,
                stop_work.clone(),
            ));
        }
        if !settings.unaddressed_sweep_interval.is_zero() {
            background.spawn(
                sweep::Sweep {
                    store: store.clone(),
                    memory: memory.clone(),
                    queue: queue.clone(),
                }
                .run(
                    settings.unaddressed_sweep_interval,
                    leader.clone(),
                    readiness.clone(),
                    metrics.clone(),
                    stop_work.clone(),
                ),
            );
        }
        if !settings.release_orphaned_claims_every.is_zero() {
            background.spawn(
                orphans::OrphanSweep {
                    ctx: ctx.clone(),
                    leader: leader.clone(),
                    readiness: readiness.clone(),
                }
                .run(settings.release_orphaned_claims_every, stop_work.clone()),
            );
        }
        background.spawn(worker::release_parked(
            ctx.ipam.clone(),
            queue.clone(),
            stop_work.clone(),
        ));
        let elector = settings.leader_election.clone().map(|le| {
            let api: Api<Lease> = Api::namespaced(cell.clone(), &le.namespace);
            let elector = Elector::new(
                api,
                le,
                settings.identity.clone(),
                leader.clone(),
                metrics.clone(),
                memory.clone(),
            );
            tokio::spawn(elector.run(stop_lease.clone()))
        });
        let workers = Arc::new(Workers {
            ctx: ctx.clone(),
            queue: queue.clone(),
            notifier: notifier.clone(),
            leader: leader.clone(),
            readiness: readiness.clone(),
            backoff: settings.backoff,
            retries: limiter::RetryBucket::new(settings.retry_qps, settings.retry_burst),
            recheck_interval: settings.recheck_interval,
        });
        let mut running = JoinSet::new();
        for _ in 0..settings.concurrency {
            running.spawn(workers.clone().run(stop_work.clone()));
        }

        shutdown.await;
        info!("shutting down: no new work is taken");
        stop_work.cancel();
        queue.shutdown();
        let drained = tokio::time::timeout(settings.shutdown_grace, async {
            while running.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            warn!(grace = ?settings.shutdown_grace, "in-flight reconciles did not finish in time; abandoning them");
            running.abort_all();
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

/// Reads the cell's identity until it succeeds: a refused credential or an unreachable API server
/// keeps the controller up and not ready (and saying why), rather than in a crash loop.
async fn identify_cell(settings: &Settings, cell: &Client, readiness: &Readiness) -> String {
    let mut failures = 0;
    loop {
        match cell_identity(settings.cell_id.as_deref(), cell, settings.request_timeout).await {
            Ok(id) => return id,
            Err(err) => {
                failures += 1;
                let health = match err.kube_error() {
                    Some(e) if is_unauthorized(e) => readiness::CellHealth::CredentialRefused,
                    Some(e) => readiness::CellHealth::Unreachable(
                        transport_cause(e).unwrap_or("server-error"),
                    ),
                    None => readiness::CellHealth::Unreachable("timeout"),
                };
                readiness.set_cell(health);
                let delay = settings.backoff.delay(failures, rand::random::<f64>());
                warn!(%err, retryIn = ?delay, "could not read the cell's identity; nothing is done until it is known");
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// The cell's identity: as configured, or the UID of its `kube-system` namespace, which lives as
/// long as the cluster does.
pub async fn cell_identity(
    configured: Option<&str>,
    cell: &Client,
    timeout: Duration,
) -> Result<String, Error> {
    if let Some(id) = configured {
        return Ok(id.to_string());
    }
    let namespaces: Api<Namespace> = Api::all(cell.clone());
    let read = tokio::time::timeout(timeout, namespaces.get(CELL_ID_NAMESPACE))
        .await
        .map_err(|_| Error::CellIdentity {
            reason: format!("no answer reading namespace {CELL_ID_NAMESPACE} within {timeout:?}"),
            source: None,
        })?
        .map_err(|e| Error::CellIdentity {
            reason: format!("reading namespace {CELL_ID_NAMESPACE}: {e}"),
            source: Some(e),
        })?;
    read.metadata
        .uid
        .filter(|uid| !uid.is_empty())
        .ok_or_else(|| Error::CellIdentity {
            reason: format!("namespace {CELL_ID_NAMESPACE} carries no UID"),
            source: None,
        })
}
