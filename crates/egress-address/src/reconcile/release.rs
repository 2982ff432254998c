//! Releasing the claim of a shard that is really gone, and only that shard's claim.
//!
//! Three guards, each enough to keep a live shard's claim: the shard's incarnation is confirmed
//! gone against the API server (never the cache alone; when the release does not know which
//! incarnation was deleted, the one the claim names is confirmed gone after the claim is read);
//! the claim is read and its annotations must name this cell and that incarnation (or, for a
//! claim made before claims were marked, be the exact claim the deleted shard recorded); and the
//! DELETE carries the claim's UID as a precondition, so a delete that lands late cannot remove a
//! newer claim of the same name.

use kube::ResourceExt;
use tracing::{debug, info};

use super::Context;
use crate::Error;
use crate::ipam::client::Deleted;
use crate::ipam::holding::HolderKind;
use crate::ipam::naming::{ANNOTATION_SHARD_UID, Incarnation, Owner, claim_name, owner};
use crate::kube_status::is_not_found;
use crate::shard::{Gone, ShardKey};

/// Releases what a deleted incarnation of `key` held, once the API server confirms it is gone.
pub(super) async fn gone(ctx: &Context, key: &ShardKey, gone: &Gone) -> Result<(), Error> {
    let live = ctx.read_live(key).await?;
    let still_there = match (&live, &gone.uid) {
        (None, _) => false,
        (Some(live), Some(uid)) => live.metadata.uid.as_ref() == Some(uid),
        // Not knowing which incarnation was deleted, a live object of the name is reason
        // enough to keep everything.
        (Some(_), None) => true,
    };
    if !still_there {
        release(ctx, key, gone).await?;
    } else {
        debug!(shard = %key, "the shard the cache lost still exists; nothing is released");
    }
    ctx.memory.released(key, gone);
    Ok(())
}

/// Releases the claim of a shard the API server says does not exist and this instance never saw
/// deleted: only the claim this cell would have made for it, for an incarnation that is gone.
pub(super) async fn unseen(ctx: &Context, key: &ShardKey) -> Result<(), Error> {
    release(ctx, key, &Gone::unknown()).await
}

async fn release(ctx: &Context, key: &ShardKey, gone: &Gone) -> Result<(), Error> {
    let s = &ctx.settings;
    let derived = claim_name(&ctx.cell_id, &key.namespace, &key.name);
    // The claim the shard recorded (the Go controller's name, or ours), then the one this cell
    // derives (a claim made but never written onto the shard).
    let recorded = gone
        .claim_ref
        .as_ref()
        .filter(|r| {
            r.kind == HolderKind::IPClaim.as_str()
                && r.project == s.platform_project
                && r.namespace == s.claim_namespace
        })
        .map(|r| r.name.clone());
    let mut candidates = recorded.iter().cloned().collect::<Vec<_>>();
    if recorded.as_deref() != Some(derived.as_str()) {
        candidates.push(derived);
    }
    let incarnation = Incarnation {
        cell: &ctx.cell_id,
        namespace: &key.namespace,
        name: &key.name,
        uid: gone.uid.as_deref(),
    };
    for name in candidates {
        let claim = match ctx.ipam.get_claim(&s.claim_namespace, &name).await {
            Ok(claim) => claim,
            Err(e) if is_not_found(&e) => continue,
            Err(source) => {
                return Err(Error::Release {
                    claim: name,
                    source,
                });
            }
        };
        let is_recorded = recorded.as_deref() == Some(name.as_str());
        match owner(&claim, &incarnation) {
            Owner::This => {}
            Owner::Unmarked if is_recorded => {}
            other => {
                info!(shard = %key, claim = %name, owner = ?other, "the claim of this name is not the gone shard's; left alone");
                continue;
            }
        }
        if gone.uid.is_none() && claimed_incarnation_lives(ctx, key, &claim).await? {
            info!(shard = %key, claim = %name, "the claim is a live shard's, made since this release began; left alone");
            continue;
        }
        ctx.may_write()?;
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        let deleted = ctx
            .ipam
            .delete_claim(&s.claim_namespace, &name, &uid)
            .await
            .map_err(|source| Error::Release {
                claim: name.clone(),
                source,
            })?;
        match deleted {
            Deleted::Deleted => {
                info!(shard = %key, claim = %name, location = %s.location, "released the public IPv6 address of a shard that is gone");
            }
            Deleted::AlreadyGone => {
                debug!(shard = %key, claim = %name, "the claim was already gone")
            }
            Deleted::Replaced => {
                info!(shard = %key, claim = %name, "the claim was replaced by a newer one before the release landed; the newer one is kept")
            }
        }
    }
    Ok(())
}

/// Whether the incarnation a claim names is alive now. A release that did not know which
/// incarnation was gone learns it only from the claim, read after the API server said no shard of
/// the name existed; another writer (a second controller, a paused leader's successor) may have
/// created one since and claimed for it.
async fn claimed_incarnation_lives(
    ctx: &Context,
    key: &ShardKey,
    claim: &egress_api::ipam::IPClaim,
) -> Result<bool, Error> {
    let Some(claimed) = claim.annotations().get(ANNOTATION_SHARD_UID) else {
        return Ok(false);
    };
    ctx.incarnation_lives(key, claimed)
        .await
        .map_err(|source| Error::ReadShard {
            shard: key.to_string(),
            source,
        })
}
