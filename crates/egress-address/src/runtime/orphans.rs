//! The orphan sweep (`--release-orphaned-claims-every`, off by default): once per interval the
//! leader lists this cell's claims and releases each whose shard incarnation is gone for good, a
//! shard deleted while no controller of the cell ran (there is no finalizer, so nothing else
//! ever releases such a claim).
//!
//! Claims made since claims were labelled are listed by their cell label
//! ([`LABEL_CELL_TAG`]), so IPAM filters them itself. Claims made before that carry no label; they
//! are found by a full list of the claim namespace, paged, kept by the cell's name prefix. The
//! first pass after this instance becomes the leader makes that full list, and later passes use the
//! label only: a claim is orphaned only by a delete no running controller saw, and the controller
//! that runs next, a new leader, begins with a full pass.
//!
//! A claim the list shows is a candidate when it is scoped to this controller's location and the
//! shard cache holds no shard of its incarnation.
//! It is released through the one release path ([`crate::ipam::release`]): the shard is read live
//! after the claim was listed (a shard made since, and its claim, would look like an orphan to a
//! cache that has not caught up), and the DELETE names a claim whose name is its incarnation's
//! alone, so it cannot remove a claim made since for a shard recreated under the name. A
//! candidate whose address a cached shard carries (written by hand) is left: freeing it would let
//! IPAM hand that address out a second time.
//!
//! Requests go out at most [`REQUESTS_PER_SECOND`] on average (both planes together), so a sweep
//! over many orphans never competes with new shards for IPAM. Each release is counted
//! (`egress_address_orphaned_claims_released_total`) and logged. No event is published: an event
//! regards an object of the cell, and an orphan's shard is gone (a shard recreated under its name
//! is another incarnation, which an event about this claim would mislead).

use std::collections::HashSet;
use std::net::Ipv6Addr;
use std::sync::Arc;
use std::time::Duration;

use egress_api::ipam::IPClaim;
use kube::ResourceExt;
use kube::api::ListParams;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::limiter::RetryBucket;
use super::readiness::Readiness;
use super::token::LeaderToken;
use crate::ipam::naming::{LABEL_CELL_TAG, cell_claim_prefix, cell_tag};
use crate::ipam::orphans::{Marks, Standing, marks, standing};
use crate::ipam::release::{Freed, ReleaseError, Vouch, live_shard, release, whose};
use crate::ipam::spec::SCOPE_ROLE_LOCATION;
use crate::reconcile::Context;
use crate::shard::{ShardCache, ShardKey};

/// The sweep's requests per second, on average, to IPAM and the cell together.
pub const REQUESTS_PER_SECOND: f64 = 5.0;
/// Claims per page of a list: a page must fit the bound on an answer from IPAM (1 MiB) with
/// room to spare, at a few hundred bytes to a couple of kilobytes per claim.
const PAGE: u32 = 250;

/// Why a pass stopped early. The next pass starts over.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// Listing the claims failed (a `403` means the grant overlay is not applied).
    #[error(
        "list the claims of this cell in namespace {namespace:?} (the orphan sweep needs list on ipclaims: apply milo-grant-orphan-sweep.yaml): {source}"
    )]
    List {
        namespace: String,
        #[source]
        source: kube::Error,
    },
    /// One release failed; see [`ReleaseError`].
    #[error(transparent)]
    Release(#[from] ReleaseError),
    /// Leadership was lost during the pass.
    #[error("not the leader any more; the pass stopped")]
    NotLeader,
}

impl SweepError {
    /// A short, stable label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            SweepError::List { .. } => "list",
            SweepError::Release(e) => e.metric_label(),
            SweepError::NotLeader => "not_leader",
        }
    }
}

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    /// Claims of this cell the list showed.
    pub listed: usize,
    /// Of those, the ones the cache showed no shard for.
    pub candidates: usize,
    pub released: usize,
    /// Candidates left: a live shard (made since the list), a cached shard carrying the address,
    /// or a claim replaced or released by someone else meanwhile.
    pub kept: usize,
}

/// The sweep's view of the controller.
pub struct OrphanSweep {
    pub ctx: Arc<Context>,
    pub leader: LeaderToken,
    pub readiness: Arc<Readiness>,
}

/// The UID of the shard the cache holds under a namespace and name: a claim of that incarnation
/// is held, not orphaned.
fn cached_uid(cache: &ShardCache) -> impl Fn(&str, &str) -> Option<String> + '_ {
    |ns, name| cache.get(&ShardKey::new(ns, name)).and_then(|c| c.uid())
}

impl OrphanSweep {
    /// Sweeps once per `every` while this instance leads and its cache is synced.
    pub async fn run(self, every: Duration, stop: CancellationToken) {
        let pace = RetryBucket::new(REQUESTS_PER_SECOND, 1);
        let mut full_pass_owed = true;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            if !self.leader.is_leader() {
                full_pass_owed = true;
                continue;
            }
            if !self.readiness.is_synced() {
                continue;
            }
            let pass = tokio::select! {
                _ = stop.cancelled() => return,
                pass = self.once(full_pass_owed, &pace) => pass,
            };
            match pass {
                Ok(swept) => {
                    full_pass_owed = false;
                    if swept.candidates > 0 {
                        info!(
                            listed = swept.listed,
                            released = swept.released,
                            kept = swept.kept,
                            "orphaned-claim sweep done"
                        );
                    }
                }
                Err(SweepError::NotLeader) => full_pass_owed = true,
                Err(err) => {
                    self.ctx.metrics.orphan_sweep_failed();
                    warn!(%err, kind = err.metric_label(), "the orphaned-claim sweep stopped; it starts over next interval");
                }
            }
        }
    }

    /// One pass: a full list of the claim namespace when `full`, else the cell's labelled claims.
    pub async fn once(&self, full: bool, pace: &RetryBucket) -> Result<Swept, SweepError> {
        let ctx = &self.ctx;
        let mut swept = Swept::default();
        let candidates = self.candidates(full, pace, &mut swept).await?;
        swept.candidates = candidates.len();
        if candidates.is_empty() {
            return Ok(swept);
        }
        let carried = self.carried_addresses().await;
        for claim in &candidates {
            let name = claim.name_any();
            let address = claim
                .status
                .as_ref()
                .map(|s| s.allocated_cidr.clone())
                .unwrap_or_default();
            let held = address
                .strip_suffix("/128")
                .and_then(|a| a.parse::<Ipv6Addr>().ok());
            if held.is_some_and(|a| carried.contains(&a)) {
                warn!(claim = %name, %address, "an orphaned claim's address is carried by a shard of this cell (set by hand?); the claim is kept");
                swept.kept += 1;
                continue;
            }
            let Marks::Cell {
                namespace,
                name: shard,
                uid,
                ..
            } = marks(claim)
            else {
                continue;
            };
            let whose = whose(claim, &ctx.cell_id, Vouch::None).map_err(|reason| {
                SweepError::Release(ReleaseError::NotOurs {
                    claim: name.clone(),
                    reason,
                })
            })?;
            // The live read and the DELETE: two requests.
            pace.reserve();
            tokio::time::sleep(pace.reserve()).await;
            let freed = release(
                &ctx.ipam,
                claim,
                &whose,
                |ns, n| async move {
                    live_shard(&ctx.cell, &ns, &n, ctx.settings.request_timeout).await
                },
                || self.leader.is_leader(),
            )
            .await
            .map_err(|e| match e {
                ReleaseError::NotLeader { .. } => SweepError::NotLeader,
                other => SweepError::Release(other),
            })?;
            match freed {
                Freed::Released => {
                    swept.released += 1;
                    ctx.metrics.orphaned_claim_released();
                    info!(claim = %name, shard = %format!("{namespace}/{shard}"), shardUid = %uid, %address, location = %ctx.settings.location, "released the claim of a shard deleted while no controller saw it");
                }
                Freed::Held => {
                    swept.kept += 1;
                    debug!(claim = %name, "the claim's shard lives (made since the list was read); kept");
                }
                Freed::AlreadyGone | Freed::Replaced => {
                    swept.kept += 1;
                    debug!(claim = %name, outcome = ?freed, "the listed claim was released or replaced meanwhile");
                }
            }
        }
        Ok(swept)
    }

    /// The claims of this cell the list shows whose incarnation the cache does not hold, in the
    /// namespaces this instance watches.
    async fn candidates(
        &self,
        full: bool,
        pace: &RetryBucket,
        swept: &mut Swept,
    ) -> Result<Vec<IPClaim>, SweepError> {
        let ctx = &self.ctx;
        let settings = &ctx.settings;
        let prefix = cell_claim_prefix(&ctx.cell_id);
        let mut params = ListParams::default().limit(PAGE);
        if !full {
            params = params.labels(&format!("{LABEL_CELL_TAG}={}", cell_tag(&ctx.cell_id)));
        }
        let mut candidates = vec![];
        loop {
            tokio::time::sleep(pace.reserve()).await;
            if !self.leader.is_leader() {
                return Err(SweepError::NotLeader);
            }
            let page = ctx
                .ipam
                .list_claims(&settings.claim_namespace, &params)
                .await
                .map_err(|source| SweepError::List {
                    namespace: settings.claim_namespace.clone(),
                    source,
                })?;
            for claim in page.items {
                if !claim.name_any().starts_with(&prefix) {
                    continue;
                }
                swept.listed += 1;
                let m = marks(&claim);
                // Claims in another location are not this controller's to judge, whatever they
                // say: two cells given one identity by mistake would otherwise free each
                // other's.
                let here = claim
                    .spec
                    .scope
                    .get(SCOPE_ROLE_LOCATION)
                    .is_some_and(|l| l.name == settings.location);
                let watched = here
                    && match &m {
                        Marks::Cell { namespace, .. } => settings
                            .shard_namespace
                            .as_ref()
                            .is_none_or(|w| w == namespace),
                        _ => false,
                    };
                if watched && standing(&m, &ctx.cell_id, cached_uid(&ctx.cache)) == Standing::Orphan
                {
                    candidates.push(claim);
                }
            }
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => params = params.continue_token(&token),
                _ => return Ok(candidates),
            }
        }
    }

    /// The addresses the cached shards carry.
    async fn carried_addresses(&self) -> HashSet<Ipv6Addr> {
        // A hand-set address has no ref, so every cached shard's address counts (read only when
        // a pass found candidates).
        self.ctx
            .cache
            .collect(|c| c.address())
            .into_iter()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipam::naming::{
        ANNOTATION_CELL, ANNOTATION_SHARD_NAME, ANNOTATION_SHARD_NAMESPACE, ANNOTATION_SHARD_UID,
        annotated_claim, claim_name,
    };
    use crate::shard::CachedShard;
    use crate::shard::fixture::shard;

    #[test]
    fn a_cached_incarnations_claim_is_held_and_a_gone_ones_orphaned() {
        // Guards the glue between the cache and the judgement: a cache that answered no UID
        // made every live shard's claim a candidate, and each pass then warned about it.
        const CELL: &str = "3f0c5a8e-1d2b-4c6f-9a7e-0b1c2d3e4f50";
        let cache = ShardCache::new();
        let live = shard("w-1", "2001:db8::1");
        let uid = live.metadata.uid.clone().unwrap();
        cache.put(CachedShard::new(&live));
        let of = |uid: &str| {
            marks(&annotated_claim(
                &claim_name(CELL, "ns", "w-1", uid),
                &[
                    (ANNOTATION_SHARD_NAMESPACE, "ns"),
                    (ANNOTATION_SHARD_NAME, "w-1"),
                    (ANNOTATION_SHARD_UID, uid),
                    (ANNOTATION_CELL, CELL),
                ],
            ))
        };
        assert_eq!(
            standing(&of(&uid), CELL, cached_uid(&cache)),
            Standing::Held
        );
        assert_eq!(
            standing(&of("an-earlier-uid"), CELL, cached_uid(&cache)),
            Standing::Orphan
        );
    }
}
