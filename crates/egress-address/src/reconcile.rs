//! One shard, one pass: read from the cache, decide, and make at most the writes the decision
//! needs.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Instant;

use egress_api::shard::EgressShard;
use kube::api::PostParams;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client};
use tracing::{debug, error, info, warn};

use crate::claim::{ClaimError, ClaimFailure, claim};
use crate::claim_spec::ClaimRequest;
use crate::decide::{Decision, assign, decide, is_unattributable, mark_served};
use crate::events::{Notifier, reason};
use crate::holding::HolderKind;
use crate::ipam::Ipam;
use crate::ipam_error::{is_conflict, is_not_found, is_unauthorized};
use crate::leader::LeaderToken;
use crate::metrics::{Metrics, ShardState};
use crate::naming::claim_name;
use crate::runtime::Shared;
use crate::{Error, Settings, ShardKey};

/// What the queue should do with the key afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Nothing until the shard changes.
    Done,
    /// Again after the backoff delay.
    Retry,
    /// Again after the fixed re-check interval.
    Recheck,
    /// Not the leader: keep the key for when this instance is.
    Yield,
}

/// Everything a reconcile reads and writes through.
pub struct Context {
    pub settings: Settings,
    pub cell: Client,
    pub ipam: Ipam,
    pub store: Store<EgressShard>,
    pub leader: LeaderToken,
    pub notifier: Notifier,
    pub metrics: Metrics,
    pub shared: std::sync::Arc<Shared>,
    /// The resourceVersion each shard had when we last updated it: a cache still showing that
    /// version has not seen our write yet, and acting on it would only cost a conflict.
    written: Mutex<HashMap<ShardKey, String>>,
    /// Shards whose claim name belongs to another shard: their release must not delete it.
    collided: Mutex<HashSet<ShardKey>>,
}

impl Context {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        settings: Settings,
        cell: Client,
        ipam: Ipam,
        store: Store<EgressShard>,
        leader: LeaderToken,
        notifier: Notifier,
        metrics: Metrics,
        shared: std::sync::Arc<Shared>,
    ) -> Self {
        Self {
            settings,
            cell,
            ipam,
            store,
            leader,
            notifier,
            metrics,
            shared,
            written: Mutex::default(),
            collided: Mutex::default(),
        }
    }

    fn shards(&self, namespace: &str) -> Api<EgressShard> {
        Api::namespaced(self.cell.clone(), namespace)
    }

    async fn timed<T>(
        &self,
        fut: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, kube::Error> {
        match tokio::time::timeout(self.settings.request_timeout, fut).await {
            Ok(res) => res,
            Err(_) => Err(kube::Error::Service(
                format!(
                    "no answer from the cell within {:?}",
                    self.settings.request_timeout
                )
                .into(),
            )),
        }
    }

    fn remember_write(&self, key: &ShardKey, read_version: Option<&str>) {
        if let Some(rv) = read_version {
            self.written
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key.clone(), rv.to_string());
        }
    }

    /// Whether the cache still shows the version we already wrote over.
    fn is_stale(&self, key: &ShardKey, shard: &EgressShard) -> bool {
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        match (written.get(key), shard.metadata.resource_version.as_ref()) {
            (Some(ours), Some(seen)) if ours == seen => true,
            (Some(_), _) => {
                written.remove(key);
                false
            }
            _ => false,
        }
    }

    fn forget(&self, key: &ShardKey) {
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        self.collided
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        self.metrics.forget_shard(key);
        self.notifier.forget(key);
    }
}

/// The state a shard's cached object shows by itself (refusals are only known to a reconcile).
pub fn observed_state(shard: &EgressShard) -> ShardState {
    if is_unattributable(shard) {
        ShardState::Unattributable
    } else if shard.spec.shard_address_ipv6.is_empty() {
        ShardState::Pending
    } else {
        ShardState::Addressed
    }
}

/// Reconciles one shard and says what to do with its key.
pub async fn reconcile(ctx: &Context, key: &ShardKey) -> Next {
    let start = Instant::now();
    let res = reconcile_key(ctx, key).await;
    ctx.metrics.reconcile_took(start.elapsed());
    match res {
        Ok(next) => next,
        Err(Error::NotLeader) => {
            debug!(shard = %key, "lost leadership mid-reconcile; no write made");
            Next::Yield
        }
        Err(err) => {
            if err.kube_error().is_some_and(is_conflict) {
                debug!(shard = %key, %err, "the shard changed underneath; retrying from the cache");
            } else if err.kube_error().is_some_and(is_unauthorized) {
                error!(shard = %key, %err, "the credential was refused; nothing is written until it is accepted");
            } else {
                warn!(shard = %key, kind = err.metric_label(), %err, "reconcile failed; retrying");
            }
            Next::Retry
        }
    }
}

async fn reconcile_key(ctx: &Context, key: &ShardKey) -> Result<Next, Error> {
    let cached = ctx
        .store
        .get(&ObjectRef::new(&key.name).within(&key.namespace));
    match cached {
        Some(shard) if ctx.is_stale(key, &shard) => Ok(Next::Done),
        Some(shard) => handle(ctx, key, &shard).await,
        None => confirm_gone(ctx, key).await,
    }
}

/// Absent from the cache is not proof of absence; only a live NotFound releases the claim.
async fn confirm_gone(ctx: &Context, key: &ShardKey) -> Result<Next, Error> {
    match ctx.timed(ctx.shards(&key.namespace).get(&key.name)).await {
        Ok(live) => handle(ctx, key, &live).await,
        Err(e) if is_not_found(&e) => release(ctx, key).await,
        Err(source) => Err(Error::ReadShard {
            shard: key.to_string(),
            source,
        }),
    }
}

async fn release(ctx: &Context, key: &ShardKey) -> Result<Next, Error> {
    let claim = claim_name(&key.namespace, &key.name);
    let collided = ctx
        .collided
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(key);
    if collided {
        info!(shard = %key, claim = %claim, "the shard is gone; its claim name belongs to another shard, so nothing is released");
        ctx.forget(key);
        return Ok(Next::Done);
    }
    ctx.leader.check()?;
    ctx.ipam
        .delete_claim(&ctx.settings.claim_namespace, &claim)
        .await
        .map_err(|source| Error::Release {
            claim: claim.clone(),
            source,
        })?;
    info!(shard = %key, location = %ctx.settings.location, "released the public IPv6 address of a shard that is gone");
    ctx.forget(key);
    Ok(Next::Done)
}

async fn handle(ctx: &Context, key: &ShardKey, shard: &EgressShard) -> Result<Next, Error> {
    match decide(shard) {
        Decision::Skip => {
            debug!(shard = %key, "the shard is being deleted; left alone");
            Ok(Next::Done)
        }
        Decision::Nothing => {
            ctx.metrics.set_shard_state(key, observed_state(shard));
            Ok(Next::Done)
        }
        Decision::MarkServed => {
            ctx.leader.check()?;
            let updated = mark_served(shard);
            ctx.timed(ctx.shards(&key.namespace).replace(
                &key.name,
                &PostParams::default(),
                &updated,
            ))
            .await
            .map_err(|source| Error::MarkServed {
                shard: key.name.clone(),
                source,
            })?;
            ctx.remember_write(key, shard.metadata.resource_version.as_deref());
            ctx.metrics.set_shard_state(key, observed_state(shard));
            info!(shard = %key, address = %shard.spec.shard_address_ipv6, "marked an addressed egress shard as serving IPv6");
            Ok(Next::Done)
        }
        Decision::Claim => claim_and_assign(ctx, key, shard).await,
    }
}

async fn claim_and_assign(
    ctx: &Context,
    key: &ShardKey,
    shard: &EgressShard,
) -> Result<Next, Error> {
    let s = &ctx.settings;
    if ctx.metrics.shard_state(key).is_none() {
        ctx.metrics.set_shard_state(key, ShardState::Pending);
    }
    ctx.leader.check()?;
    let req = ClaimRequest {
        class_name: &s.address_class_ipv6,
        claim_namespace: &s.claim_namespace,
        location: &s.location,
        shard_namespace: &key.namespace,
        shard_name: &key.name,
    };
    let holding = match claim(&ctx.ipam, &req).await {
        Ok(holding) => holding,
        Err(err) => return claim_failed(ctx, key, shard, err).await,
    };
    ctx.metrics.claim_outcome(match holding.kind {
        HolderKind::IPClaim => "Bound",
        HolderKind::IPAllocation => "Adopted",
    });
    ctx.collided
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(key);

    ctx.leader.check()?;
    let updated = assign(shard, &holding, &s.platform_project);
    let address = holding.address.to_string();
    let written = ctx
        .timed(
            ctx.shards(&key.namespace)
                .replace(&key.name, &PostParams::default(), &updated),
        )
        .await;
    match written {
        Ok(_) => {
            ctx.remember_write(key, shard.metadata.resource_version.as_deref());
            ctx.metrics.set_shard_state(key, ShardState::Addressed);
            info!(
                shard = %key,
                address = %address,
                location = %s.location,
                holderKind = holding.kind.as_str(),
                holderNamespace = %holding.namespace,
                holderName = %holding.name,
                "assigned an egress shard its public IPv6 address"
            );
            ctx.notifier
                .normal(
                    shard,
                    reason::ADDRESS_ASSIGNED,
                    format!(
                        "Assigned {address}, held by {} {}/{} in project {}",
                        holding.kind, holding.namespace, holding.name, s.platform_project
                    ),
                )
                .await;
            Ok(Next::Done)
        }
        // The write-once rules refused it (a different ref is already recorded, or the object
        // changed shape): retrying cannot help until someone looks.
        Err(kube::Error::Api(status)) if status.code == 422 || status.reason == "Invalid" => {
            ctx.metrics.set_shard_state(key, ShardState::Refused);
            let err = Error::Assign {
                shard: key.name.clone(),
                address: address.clone(),
                kind: holding.kind.to_string(),
                holder: holding.name.clone(),
                source: Box::new(kube::Error::Api(status)),
            };
            error!(shard = %key, %err, "the cell refused the address write; the shard is left as it was");
            ctx.notifier
                .warning(shard, reason::ASSIGN_REFUSED, err.to_string())
                .await;
            Ok(Next::Recheck)
        }
        Err(source) => Err(Error::Assign {
            shard: key.name.clone(),
            address,
            kind: holding.kind.to_string(),
            holder: holding.name,
            source: Box::new(source),
        }),
    }
}

async fn claim_failed(
    ctx: &Context,
    key: &ShardKey,
    shard: &EgressShard,
    err: ClaimError,
) -> Result<Next, Error> {
    let location = &ctx.settings.location;
    ctx.metrics.claim_outcome(err.outcome());
    match err.failure() {
        ClaimFailure::Pending => {
            ctx.metrics.set_shard_state(key, ShardState::Pending);
            info!(shard = %key, %err, "waiting for the address service to allocate");
            ctx.notifier
                .normal(shard, reason::CLAIM_PENDING, err.to_string())
                .await;
            Ok(Next::Retry)
        }
        ClaimFailure::Refused => {
            ctx.metrics.set_shard_state(key, ShardState::Refused);
            let (event_reason, note) = match &err {
                ClaimError::Unusable { .. } => {
                    error!(shard = %key, location = %location, %err, "the public address space handed out something no shard address can be read from");
                    (reason::UNUSABLE_ANSWER, err.to_string())
                }
                ClaimError::Collision { .. } => {
                    ctx.collided
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(key.clone());
                    error!(shard = %key, %err, "refusing a claim made for another shard");
                    (reason::CLAIM_NAME_COLLISION, err.to_string())
                }
                other => {
                    warn!(shard = %key, ipamReason = other.outcome(), %err, "the address service refused the claim");
                    (
                        reason::CLAIM_REFUSED,
                        format!("IPAM refused the claim ({}): {err}", other.outcome()),
                    )
                }
            };
            ctx.notifier.warning(shard, event_reason, note).await;
            Ok(Next::Recheck)
        }
        ClaimFailure::Transient => Err(Error::Claim {
            shard: key.name.clone(),
            source: Box::new(err),
        }),
    }
}
