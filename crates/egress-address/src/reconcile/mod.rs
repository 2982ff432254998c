//! One shard, one pass: release what its deleted incarnations held, then read the live shard from
//! the cache, decide, and make at most the writes the decision needs.
//!
//! A reconcile writes only through the [`WriteGate`] (the leader lease) and says what happened in
//! [`Note`]s, which the runtime publishes as events; it never waits on the events API.

mod assign;
pub mod drift;
mod note;
mod release;

use std::sync::Arc;
use std::time::Instant;

use egress_api::shard::EgressShard;
use kube::Client;
use tracing::{debug, error, info};

use crate::config::Settings;
use crate::config::settings::patch_params;
use crate::connect::cell::{get_shard, within};
use crate::error::Error;
use crate::ipam::Ipam;
use crate::kube_status::{is_conflict, is_unauthorized};
use crate::metrics::Metrics;
use crate::shard::decide::{Decision, ShardPatch, decide};
use crate::shard::{ShardCache, ShardKey, ShardMemory, ShardState};

pub use note::{Note, reason};

/// Whether this instance may write right now (the leader lease).
pub trait WriteGate: Send + Sync {
    fn may_write(&self) -> bool;
}

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
    /// IPAM is down (its circuit breaker is open): park the key until a probe is answered.
    WaitIpam,
}

/// What one reconcile did.
#[derive(Debug)]
pub struct Report {
    pub next: Next,
    /// What to tell whoever reads the shard.
    pub notes: Vec<Note>,
    /// Why the pass failed, when `next` is [`Next::Retry`].
    pub error: Option<Error>,
}

/// Everything a reconcile reads and writes through.
pub struct Context {
    pub settings: Settings,
    /// This cell's identity, resolved at start.
    pub cell_id: String,
    pub cell: Client,
    pub ipam: Ipam,
    pub cache: ShardCache,
    pub memory: Arc<ShardMemory>,
    pub gate: Arc<dyn WriteGate>,
    pub metrics: Metrics,
}

impl Context {
    /// `Err(NotLeader)` unless a write may be made now.
    fn may_write(&self) -> Result<(), Error> {
        if self.gate.may_write() {
            Ok(())
        } else {
            Err(Error::NotLeader)
        }
    }

    /// Writes `patch` to the shard of `key`, conditional on the resourceVersion it carries (a
    /// JSON merge patch: the API server answers 409 Conflict if the shard changed since). The
    /// answer (the whole shard again, managedFields and all) is read but not decoded: nothing
    /// uses it, and the watch brings the same object to the cache anyway.
    async fn patch_shard(&self, key: &ShardKey, patch: &ShardPatch) -> Result<(), kube::Error> {
        let url = <EgressShard as kube::Resource>::url_path(&(), Some(&key.namespace));
        let mut req = kube::core::Request::new(url)
            .patch(
                &key.name,
                &patch_params(),
                &kube::api::Patch::Merge(patch.to_json()),
            )
            .map_err(kube::Error::BuildRequest)?;
        req.extensions_mut().insert("patch");
        within(self.settings.request_timeout, self.cell.request_text(req))
            .await
            .map(drop)
    }

    /// The shard as the API server has it now, or `None` when it does not exist.
    async fn read_live(&self, key: &ShardKey) -> Result<Option<EgressShard>, Error> {
        let timeout = self.settings.request_timeout;
        get_shard(&self.cell, &key.namespace, &key.name, timeout)
            .await
            .map_err(|source| Error::ReadShard {
                shard: key.to_string(),
                source,
            })
    }
}

/// Reconciles one shard and reports what to do with its key.
pub async fn reconcile(ctx: &Context, key: &ShardKey) -> Report {
    let start = Instant::now();
    let mut notes = Vec::new();
    let res = reconcile_key(ctx, key, &mut notes).await;
    ctx.metrics.reconcile_took(start.elapsed());
    let (next, error) = match res {
        Ok(next) => (next, None),
        Err(Error::NotLeader) => {
            debug!(shard = %key, "not the leader (any more); no write made");
            (Next::Yield, None)
        }
        Err(err) if err.is_ipam_error() && ctx.ipam.breaker().is_open() => {
            debug!(shard = %key, %err, "IPAM is down; the shard waits for it");
            (Next::WaitIpam, Some(err))
        }
        Err(err) => {
            // The runtime logs every failed pass as "Reconciler error"; these say more.
            if err.kube_error().is_some_and(is_conflict) {
                debug!(shard = %key, %err, "the shard changed underneath; retrying from the cache");
            } else if err.kube_error().is_some_and(is_unauthorized) {
                error!(shard = %key, %err, "the credential was refused; nothing is written until it is accepted");
            }
            (Next::Retry, Some(err))
        }
    };
    Report { next, notes, error }
}

/// A shard without a resourceVersion (no cache or API server sends one) gets no write: it could
/// not be conditional.
fn unversioned(key: &ShardKey) -> Error {
    Error::Config(format!(
        "egress shard {key} has no resourceVersion; it is only ever written conditionally"
    ))
}

async fn reconcile_key(
    ctx: &Context,
    key: &ShardKey,
    notes: &mut Vec<Note>,
) -> Result<Next, Error> {
    let in_cache = || ctx.cache.get(key).map(|c| c.shard());
    let gone = ctx.memory.releases().gone(key);
    let mut cached = in_cache();
    // The API server's word on the name, read at most once a pass: a release needs it, and so
    // does a shard the cache lacks (absent from the cache is not proof of absence).
    let live = if gone.is_empty() && cached.is_some() {
        None
    } else {
        Some(ctx.read_live(key).await?)
    };
    let mut owed = None;
    if let Some(live) = &live {
        // Deleted incarnations first: what they held is released before anything else is
        // claimed, where IPAM lets it be. The cache is looked at again, after the read: what it
        // shows then is no older.
        cached = in_cache();
        let read = release::LiveRead {
            shard: live.as_ref(),
            none_of_the_name: live.is_none() && cached.is_none(),
        };
        let releasing = !gone.is_empty() || read.none_of_the_name;
        if releasing && let Err(err) = release::release(ctx, key, &gone, &read).await {
            // A release IPAM has not finished (a 500 with the claim left Releasing, an outage)
            // must not hold back the live shard of the name: its claim has a name of its own, so
            // it is addressed now and the release retried with the key's backoff.
            if matches!(err, Error::NotLeader) || live.is_none() {
                return Err(err);
            }
            owed = Some(err);
        }
    }
    let next = address(ctx, key, cached, live, notes).await?;
    match owed {
        Some(err) => Err(err),
        None => Ok(next),
    }
}

/// The live shard's part of a pass: decide from what the cache (or the live read) shows, and
/// make at most the writes the decision needs.
async fn address(
    ctx: &Context,
    key: &ShardKey,
    cached: Option<EgressShard>,
    live: Option<Option<EgressShard>>,
    notes: &mut Vec<Note>,
) -> Result<Next, Error> {
    let shard = match (cached, live) {
        (Some(cached), _) if ctx.memory.addresses().is_stale(key, &cached) => {
            return Ok(Next::Done);
        }
        (Some(cached), _) => cached,
        (None, Some(Some(live))) => live,
        (None, _) => {
            ctx.memory.forget(key);
            return Ok(Next::Done);
        }
    };
    match decide(&shard) {
        Decision::Skip => {
            debug!(shard = %key, "the shard is being deleted; left alone");
            Ok(Next::Done)
        }
        Decision::Nothing => {
            ctx.memory
                .addresses()
                .set_state(key, ShardState::observed(&shard));
            Ok(Next::Done)
        }
        Decision::MarkServed => {
            ctx.may_write()?;
            let patch = ShardPatch::mark_served(&shard).ok_or_else(|| unversioned(key))?;
            ctx.patch_shard(key, &patch)
                .await
                .map_err(|source| Error::MarkServed {
                    shard: key.name.to_string(),
                    source,
                })?;
            ctx.memory
                .addresses()
                .wrote_over(key, shard.metadata.resource_version.as_deref());
            ctx.memory
                .addresses()
                .set_state(key, ShardState::observed(&shard));
            info!(shard = %key, address = %shard.spec.shard_address_ipv6, "marked an addressed egress shard as serving IPv6");
            Ok(Next::Done)
        }
        Decision::Claim => assign::claim_and_assign(ctx, key, &shard, notes).await,
    }
}
