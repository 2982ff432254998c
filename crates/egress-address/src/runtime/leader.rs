//! Leader election on a `coordination.k8s.io/v1` Lease. Only the leader writes: every write
//! checks the [`LeaderToken`](super::token::LeaderToken) right before it is made, and the token stops granting the moment a
//! renewal fails or its deadline passes, whichever comes first.
//!
//! The lease is acquired and renewed with `replace` (a PUT carrying the resourceVersion just
//! read) or `create`, so a 409 means someone else wrote it first: leadership is lost, never
//! shared. Expiry is judged by how long the lease has looked unchanged on our own clock, not by
//! comparing its `renewTime` with our clock, so clock skew between instances cannot elect two.
//!
//! Every renewal also carries the leader's release watermark (annotations naming the span of
//! DELETED events, from the first since its shard watch began a list through the newest before
//! anything still pending, whose claims are all released), and every standby's look at the lease
//! drops those deletions from its memory: a standby remembers only what is still pending, however
//! long it waits and however many shards come and go. A deletion from before the leader's watch
//! began is outside the span, so a standby keeps what a leader started since never saw.
//!
//! The renewal also hands over the deletions the leader has still to release (the oldest
//! [`HANDOVER_LIMIT`]), and whoever takes the lease over takes them on: a successor that started
//! after a delete would otherwise never release the claim its dead predecessor owed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::ObjectMeta;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::shared::Shared;
use crate::config::LeaderElection;
use crate::config::settings::write_params;
use crate::error::Error;
use crate::kube_status::{forbidden_message, is_already_exists, is_conflict, is_not_found};
use crate::metrics::Metrics;
use crate::shard::{Gone, HandedOver, ShardKey, Watermark};

/// What the elector was doing when the cell forbade it (a `/ready` reason names it).
const LEASING: &str = "reading and renewing the leader Lease";

/// Lease annotation naming the DELETED event where the leader's release watermark begins.
pub const ANNOTATION_RELEASED_FROM: &str = "cloud.datumapis.com/egress-address-released-from";
/// Lease annotation naming the DELETED event where the leader's release watermark ends.
pub const ANNOTATION_RELEASED_THROUGH: &str = "cloud.datumapis.com/egress-address-released-through";
/// Lease annotation handing the leader's pending releases to its successor (a JSON list).
pub const ANNOTATION_RELEASES_PENDING: &str = "cloud.datumapis.com/egress-address-releases-pending";
/// The most pending releases a lease hands over: a few hundred bytes each, well inside what an
/// object's annotations may hold (256 KiB) and cheap to rewrite every renewal. The oldest go
/// first; the rest follow as those are released.
pub const HANDOVER_LIMIT: usize = 256;

/// Acquires and renews the lease, and releases it on stop: grants and revokes the shared
/// [`LeaderToken`](super::token::LeaderToken), reports to the shared metrics and readiness, and hands the shared memory's
/// pending releases over.
pub struct Elector {
    api: Api<Lease>,
    config: LeaderElection,
    identity: String,
    shared: Shared,
    /// The lease's resourceVersion and when we first saw it.
    observed: Option<(String, Instant)>,
    /// The lease as our last write left it: a renewal PUTs on top of it without reading first,
    /// and any other writer in between makes that PUT a 409.
    held: Option<Lease>,
}

impl Elector {
    pub fn new(api: Api<Lease>, config: LeaderElection, identity: String, shared: Shared) -> Self {
        Self {
            api,
            config,
            identity,
            shared,
            observed: None,
            held: None,
        }
    }

    /// Runs until `stop`, then gives the lease up so a successor need not wait for it to expire.
    pub async fn run(mut self, stop: CancellationToken) {
        let mut leading = false;
        // A standby reports 0 from the start: `sum(...) != 1` across replicas stays meaningful.
        self.shared
            .metrics
            .set_lease_held(&self.config.lease_name, false);
        loop {
            let started = Instant::now();
            let attempt =
                tokio::time::timeout(self.config.renew_deadline, self.try_acquire_or_renew()).await;
            let forbidden = match &attempt {
                Ok(Err(Error::Lease { source, .. })) => forbidden_message(source),
                _ => None,
            };
            if forbidden.is_some() || matches!(attempt, Ok(Ok(_))) {
                self.shared.readiness.set_forbidden(LEASING, forbidden);
            }
            match attempt {
                Ok(Ok(true)) => {
                    self.shared
                        .leader
                        .grant(started + self.config.renew_deadline);
                    if !leading {
                        info!(lease = %self.config.lease_name, identity = %self.identity, "became the leader");
                    }
                    leading = true;
                }
                outcome => {
                    self.shared.leader.revoke();
                    if leading {
                        match &outcome {
                            Ok(Ok(_)) => {
                                warn!(lease = %self.config.lease_name, "lost the lease to another instance; writes stopped")
                            }
                            Ok(Err(err)) => {
                                warn!(lease = %self.config.lease_name, %err, "could not renew the lease; writes stopped")
                            }
                            Err(_) => {
                                warn!(lease = %self.config.lease_name, "renewing the lease took too long; writes stopped")
                            }
                        }
                    } else if let Ok(Err(err)) = &outcome {
                        warn!(lease = %self.config.lease_name, %err, "could not read or take the lease");
                    }
                    leading = false;
                }
            }
            self.report(leading && self.shared.leader.is_leader());
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(self.config.retry_period) => {}
            }
        }
        self.shared.leader.revoke();
        self.report(false);
        if leading {
            match tokio::time::timeout(self.config.retry_period, self.release()).await {
                Ok(Ok(())) => info!(lease = %self.config.lease_name, "released the lease"),
                Ok(Err(err)) => {
                    warn!(lease = %self.config.lease_name, %err, "could not release the lease; it expires on its own")
                }
                Err(_) => {
                    warn!(lease = %self.config.lease_name, "releasing the lease took too long; it expires on its own")
                }
            }
        }
    }

    fn report(&self, leading: bool) {
        self.shared.metrics.set_leader(leading);
        self.shared
            .metrics
            .set_lease_held(&self.config.lease_name, leading);
    }

    fn lease_error(&self, source: kube::Error) -> Error {
        Error::Lease {
            lease: format!("{}/{}", self.config.namespace, self.config.lease_name),
            source,
        }
    }

    fn duration_secs(&self) -> i32 {
        i32::try_from(self.config.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    /// `Ok(true)` when this instance holds the lease after the call.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, Error> {
        let now = MicroTime(jiff::Timestamp::now());
        let name = self.config.lease_name.clone();
        if let Some(mut ours) = self.held.take() {
            self.stamp_releases(&mut ours);
            let spec = ours.spec.get_or_insert_with(LeaseSpec::default);
            spec.renew_time = Some(now.clone());
            spec.lease_duration_seconds = Some(self.duration_secs());
            return match self.api.replace(&name, &write_params(), &ours).await {
                Ok(renewed) => {
                    self.held = Some(renewed);
                    Ok(true)
                }
                Err(e) if is_conflict(&e) => Ok(false),
                Err(e) => Err(self.lease_error(e)),
            };
        }
        let current = match self.api.get(&name).await {
            Ok(lease) => lease,
            Err(e) if is_not_found(&e) => {
                let mut lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(self.config.namespace.clone()),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.identity.clone()),
                        lease_duration_seconds: Some(self.duration_secs()),
                        acquire_time: Some(now.clone()),
                        renew_time: Some(now),
                        lease_transitions: Some(0),
                        ..Default::default()
                    }),
                };
                self.stamp_releases(&mut lease);
                return match self.api.create(&write_params(), &lease).await {
                    Ok(created) => {
                        self.held = Some(created);
                        Ok(true)
                    }
                    Err(e) if is_conflict(&e) || is_already_exists(&e) => Ok(false),
                    Err(e) => Err(self.lease_error(e)),
                };
            }
            Err(e) => return Err(self.lease_error(e)),
        };
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        if holder != self.identity
            && let Some(released) = watermark_of(&current)
        {
            self.shared.memory.releases().drop_released(&released);
        }
        let rv = current
            .metadata
            .resource_version
            .clone()
            .unwrap_or_default();
        let mut next = current.clone();
        let mut taken = Vec::new();
        let next_spec = next.spec.get_or_insert_with(LeaseSpec::default);
        if holder == self.identity {
            next_spec.renew_time = Some(now);
            next_spec.lease_duration_seconds = Some(self.duration_secs());
        } else {
            let first_seen = match &self.observed {
                Some((seen_rv, at)) if *seen_rv == rv => *at,
                _ => {
                    let at = Instant::now();
                    self.observed = Some((rv.clone(), at));
                    at
                }
            };
            let held_for = spec
                .lease_duration_seconds
                .map(|s| Duration::from_secs(u64::try_from(s.max(0)).unwrap_or(0)))
                .unwrap_or(self.config.lease_duration);
            if !holder.is_empty() && first_seen.elapsed() < held_for {
                return Ok(false);
            }
            // Taken on before the write: a takeover whose answer is lost may hold the lease.
            taken = self.take_over_releases(&current);
            next_spec.holder_identity = Some(self.identity.clone());
            next_spec.acquire_time = Some(now.clone());
            next_spec.renew_time = Some(now);
            next_spec.lease_duration_seconds = Some(self.duration_secs());
            // A lease that says i32::MAX transitions (found by the lease fuzz target) stays there.
            next_spec.lease_transitions =
                Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        self.stamp_releases(&mut next);
        match self.api.replace(&name, &write_params(), &next).await {
            Ok(written) => {
                self.held = Some(written);
                Ok(true)
            }
            Err(e) if is_conflict(&e) => {
                // The winner took the same on.
                self.shared.memory.releases().give_back(taken);
                Ok(false)
            }
            Err(e) => Err(self.lease_error(e)),
        }
    }

    /// Records what this leader has released, for the standbys, and what it has still to
    /// release, for its successor. What it has nothing to say about is removed, so a former
    /// leader's word is not passed on as this one's.
    fn stamp_releases(&self, lease: &mut Lease) {
        let (watermark, handed) = self.shared.memory.releases().for_lease(HANDOVER_LIMIT);
        let annotations = lease.metadata.annotations.get_or_insert_with(BTreeMap::new);
        match watermark {
            Some(w) => {
                annotations.insert(ANNOTATION_RELEASED_FROM.to_string(), w.from);
                annotations.insert(ANNOTATION_RELEASED_THROUGH.to_string(), w.through);
            }
            None => {
                annotations.remove(ANNOTATION_RELEASED_FROM);
                annotations.remove(ANNOTATION_RELEASED_THROUGH);
            }
        }
        if handed.is_empty() {
            annotations.remove(ANNOTATION_RELEASES_PENDING);
        } else {
            let json = serde_json::to_string(&handed).expect("plain strings serialize");
            annotations.insert(ANNOTATION_RELEASES_PENDING.to_string(), json);
        }
    }

    /// Takes on the releases the lease's former holder handed over; returns the ones new here.
    fn take_over_releases(&self, lease: &Lease) -> Vec<(ShardKey, Gone)> {
        let Some(json) = lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_RELEASES_PENDING))
        else {
            return Vec::new();
        };
        match serde_json::from_str::<Vec<HandedOver>>(json) {
            Ok(handed) => {
                let offered = handed.len();
                let taken = self.shared.memory.releases().take_over(handed);
                if !taken.is_empty() {
                    info!(lease = %self.config.lease_name, offered, taken = taken.len(), "took on the releases the former leader had still to make");
                }
                taken
            }
            Err(err) => {
                warn!(lease = %self.config.lease_name, annotation = ANNOTATION_RELEASES_PENDING, %err, "the former leader's pending releases are unreadable; they are left to the orphan sweep");
                Vec::new()
            }
        }
    }

    /// Clears the holder, if it is still us, so the next candidate takes over at once.
    async fn release(&self) -> Result<(), Error> {
        let name = &self.config.lease_name;
        let current = self.api.get(name).await.map_err(|e| self.lease_error(e))?;
        let mut next = current.clone();
        let spec = next.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
        match self.api.replace(name, &write_params(), &next).await {
            Ok(_) => Ok(()),
            // Someone else wrote it first, so it is no longer ours to release.
            Err(e) if is_conflict(&e) => Ok(()),
            Err(e) => Err(self.lease_error(e)),
        }
    }
}

/// The release watermark a lease carries. A lease written by a version that named only where it
/// ends says nothing a standby can act on (it may begin before that leader's watch did).
fn watermark_of(lease: &Lease) -> Option<Watermark> {
    let a = lease.metadata.annotations.as_ref()?;
    Some(Watermark {
        from: a.get(ANNOTATION_RELEASED_FROM)?.clone(),
        through: a.get(ANNOTATION_RELEASED_THROUGH)?.clone(),
    })
}

/// Where a late lease renewal is said: the log, the metrics and `/ready`.
pub struct LapseReport {
    pub metrics: Metrics,
    pub readiness: Arc<super::readiness::Readiness>,
}

impl LapseReport {
    pub(super) fn set(&self, overdue: bool, holds: bool, deadline: Option<tokio::time::Instant>) {
        self.metrics.set_lease_overdue(overdue);
        self.readiness.set_lease_overdue(overdue);
        if overdue {
            let late = deadline.map(|d| d.elapsed()).unwrap_or_default();
            warn!(overdueBy = ?late, "the leader lease renewal is past its deadline; writes wait for it, shards stay queued");
        } else if holds {
            info!("the late leader lease renewal landed; writes resume");
        }
    }
}
