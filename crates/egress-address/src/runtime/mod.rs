//! The running controller: the shard watch feeding a work queue ([`watch`], [`queue`]), workers
//! that reconcile while this instance leads and the drift pacer ([`worker`]), the sweep that
//! catches a dropped trigger ([`sweep`]), leader election ([`leader`], and the write gate it keeps, [`token`]), events ([`events`]) and
//! readiness ([`readiness`]). Every task shares one set of handles ([`shared`]); [`tasks`] starts
//! them and stops them in order. The admin servers (the `admin` folder) see the running controller
//! through its [`Handle`]; nothing here knows them.
//!
//! ```text
//! Controller::new(settings, cell, ipam, metrics)   validates; nothing is contacted
//!     .start()                                     -> Running: identify the cell, start the tasks
//! Running::stop()                                  no new work, drain, flush events, give up the lease
//! ```

pub mod activity;
pub mod events;
pub mod leader;
pub mod limiter;
pub mod orphans;
pub mod queue;
pub mod readiness;
pub mod shared;
pub mod sweep;
pub mod tasks;
pub mod token;
pub mod watch;
pub mod worker;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, Client};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::Settings;
use crate::error::Error;
use crate::ipam::Ipam;
use crate::ipam::breaker::Breaker;
use crate::kube_status::{forbidden_message, is_unauthorized, transport_cause};
use crate::metrics::Metrics;
use crate::reconcile::Context;
use crate::shard::{ShardCache, ShardKey, ShardMemory};
use activity::Activity;
use readiness::Readiness;
use shared::Shared;
use tasks::Tasks;
use token::LeaderToken;

/// What the controller was doing when the cell forbade reading its identity.
const IDENTIFYING: &str =
    "reading the cell's identity (get namespace kube-system; or set --cell-id)";

/// The namespace whose UID identifies the cell when no identity is given.
pub const CELL_ID_NAMESPACE: &str = "kube-system";

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

/// A controller, validated and not yet started.
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
        let breaker = Breaker::new(
            settings.ipam_failure_threshold,
            settings.ipam_probe_interval,
        );
        let ipam = Ipam::new(ipam, metrics.clone(), settings.request_timeout, breaker);
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

    /// Starts the controller; it runs until [`Running::stop`].
    pub fn start(self) -> Running {
        let stop = CancellationToken::new();
        let handle = self.handle();
        let task = tokio::spawn(self.serve(stop.clone()));
        Running {
            handle,
            stop,
            task: Some(task),
        }
    }

    /// Runs until `shutdown` resolves, then stops as [`Running::stop`] does.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
        let running = self.start();
        shutdown.await;
        running.stop().await
    }

    async fn serve(self, stop: CancellationToken) -> Result<(), Error> {
        let identified = tokio::select! {
            id = identify_cell(&self.settings, &self.cell, &self.readiness) => id,
            _ = stop.cancelled() => {
                info!("stopped before the cell's identity was known");
                return Ok(());
            }
        };
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
        info!(location = %settings.location, cell = %identified, version = crate::version::VERSION, commit = crate::version::COMMIT, "starting egress address controller");
        metrics.set_leader(leader.is_leader());
        metrics.set_max_concurrent_reconciles(settings.concurrency);

        let shared = Shared::new(
            ShardCache::new(),
            memory,
            leader,
            readiness,
            activity,
            metrics,
        );
        let ctx = Arc::new(Context {
            settings: settings.clone(),
            cell_id: identified,
            cell: cell.clone(),
            ipam,
            cache: shared.cache.clone(),
            memory: shared.memory.clone(),
            gate: Arc::new(shared.leader.clone()),
            metrics: shared.metrics.clone(),
        });
        let tasks = Tasks::start(&settings, &cell, &shared, ctx);

        stop.cancelled().await;
        tasks.stop(settings.shutdown_grace).await;
        info!("stopped");
        Ok(())
    }
}

/// A started controller.
pub struct Running {
    handle: Handle,
    stop: CancellationToken,
    task: Option<JoinHandle<Result<(), Error>>>,
}

impl Running {
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Stops taking work, lets in-flight reconciles finish (up to the shutdown grace), sends the
    /// events already queued, and releases the lease.
    pub async fn stop(mut self) -> Result<(), Error> {
        self.stop.cancel();
        let Some(task) = self.task.take() else {
            return Ok(());
        };
        match task.await {
            Ok(result) => result,
            Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
            Err(_) => Ok(()),
        }
    }
}

/// Dropped without [`Running::stop`] (a test that failed, a caller that gave up), the controller
/// is aborted where it stands, as a killed process would be, rather than going on writing with
/// nobody left to stop it.
impl Drop for Running {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
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
            Ok(id) => {
                readiness.set_forbidden(IDENTIFYING, None);
                return id;
            }
            Err(err) => {
                failures += 1;
                if let Some(message) = err.kube_error().and_then(forbidden_message) {
                    readiness.set_forbidden(IDENTIFYING, Some(message));
                } else {
                    let health = match err.kube_error() {
                        Some(e) if is_unauthorized(e) => readiness::CellHealth::CredentialRefused,
                        Some(e) => readiness::CellHealth::Unreachable(
                            transport_cause(e).unwrap_or("server-error"),
                        ),
                        None => readiness::CellHealth::Unreachable("timeout"),
                    };
                    readiness.set_cell(health);
                }
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
