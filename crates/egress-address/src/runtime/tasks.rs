//! The tasks of a running controller, started together and stopped in the order that loses
//! nothing: work first (no new reconcile, in-flight ones finish within the grace), then the
//! events already queued go out while the lease is still held, then the lease is given up.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::events::Notifier;
use super::leader::Elector;
use super::limiter::RetryBucket;
use super::orphans::OrphanSweep;
use super::shared::Shared;
use super::sweep;
use super::watch::{self, Watch};
use super::worker::{self, Workers};
use crate::config::Settings;
use crate::reconcile::Context;

/// How long a stopping controller keeps sending the events it had queued.
const EVENT_FLUSH_GRACE: Duration = Duration::from_secs(2);

/// A task and the token that stops it.
struct Stoppable<T> {
    stop: CancellationToken,
    task: T,
}

/// Every task of one running controller.
pub struct Tasks {
    shared: Shared,
    /// The watch, leadership, drift, sweep and parked-shard tasks.
    background: Stoppable<JoinSet<()>>,
    /// The reconcile workers (stopped by the same token as `background`, drained first).
    workers: JoinSet<()>,
    events: Stoppable<JoinHandle<()>>,
    lease: Option<Stoppable<JoinHandle<()>>>,
}

impl Tasks {
    /// Starts every task.
    pub fn start(settings: &Settings, cell: &Client, shared: &Shared, ctx: Arc<Context>) -> Self {
        let work = CancellationToken::new();
        let notifier = Notifier::new(
            cell.clone(),
            &settings.identity,
            shared.memory.clone(),
            shared.leader.clone(),
            shared.metrics.clone(),
            shared.activity.clone(),
            settings.event_repeat_interval,
        );
        let events_stop = CancellationToken::new();
        let events = Stoppable {
            task: tokio::spawn(
                notifier
                    .clone()
                    .run(events_stop.clone(), EVENT_FLUSH_GRACE, {
                        let queue = shared.queue.clone();
                        move || queue.is_busy()
                    }),
            ),
            stop: events_stop,
        };

        let mut background = JoinSet::new();
        let api = Watch::api(cell.clone(), settings.shard_namespace.as_deref());
        background.spawn(Watch::new(api, shared.clone()).run(work.clone()));
        background.spawn(watch::follow_leadership(shared.clone(), work.clone()));
        if !settings.drift_check_interval.is_zero() {
            background.spawn(worker::drift_pacer(
                ctx.clone(),
                notifier.clone(),
                shared.clone(),
                settings.drift_check_interval,
                work.clone(),
            ));
        }
        if !settings.unaddressed_sweep_interval.is_zero() {
            background.spawn(sweep::run(
                shared.clone(),
                settings.unaddressed_sweep_interval,
                work.clone(),
            ));
        }
        if !settings.release_orphaned_claims_every.is_zero() {
            background.spawn(
                OrphanSweep {
                    ctx: ctx.clone(),
                    leader: shared.leader.clone(),
                    readiness: shared.readiness.clone(),
                }
                .run(settings.release_orphaned_claims_every, work.clone()),
            );
        }
        background.spawn(worker::release_parked(
            ctx.ipam.clone(),
            shared.queue.clone(),
            work.clone(),
        ));

        let lease = settings.leader_election.clone().map(|le| {
            let stop = CancellationToken::new();
            let api: Api<Lease> = Api::namespaced(cell.clone(), &le.namespace);
            let elector = Elector::new(api, le, settings.identity.clone(), shared.clone());
            Stoppable {
                task: tokio::spawn(elector.run(stop.clone())),
                stop,
            }
        });

        let pool = Arc::new(Workers {
            shared: shared.clone(),
            ctx,
            notifier,
            backoff: settings.backoff,
            retries: RetryBucket::new(settings.retry_qps, settings.retry_burst),
            recheck_interval: settings.recheck_interval,
        });
        let mut workers = JoinSet::new();
        for _ in 0..settings.concurrency {
            workers.spawn(pool.clone().run(work.clone()));
        }
        Self {
            shared: shared.clone(),
            background: Stoppable {
                stop: work,
                task: background,
            },
            workers,
            events,
            lease,
        }
    }

    /// Stops every task in order; in-flight reconciles get `grace` to finish.
    pub async fn stop(mut self, grace: Duration) {
        info!("shutting down: no new work is taken");
        self.background.stop.cancel();
        self.shared.queue.shutdown();
        let drained = tokio::time::timeout(grace, async {
            while self.workers.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            warn!(
                ?grace,
                "in-flight reconciles did not finish in time; abandoning them"
            );
            self.workers.abort_all();
        }
        self.background.task.abort_all();
        while self.background.task.join_next().await.is_some() {}
        // Events already queued go out while this instance still holds the lease.
        self.events.stop.cancel();
        let _ = self.events.task.await;
        if let Some(lease) = self.lease {
            lease.stop.cancel();
            let _ = lease.task.await;
        }
    }
}
