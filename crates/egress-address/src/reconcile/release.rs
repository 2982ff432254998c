//! Releasing the claims of a shard's incarnations that are really gone, and only theirs, through
//! the one release path ([`crate::ipam::release`]).
//!
//! Which claims: for each deleted incarnation, the claim its ref recorded and the one this cell
//! derives for it (a claim made but never written onto the shard), and, when no shard of the name
//! exists at all, the name claims had before they carried the incarnation. Each is read once; its
//! name and annotations say whose it is, and the release path decides from a read of the shard
//! that this incarnation is gone before it deletes the claim by name. The pass's own live read
//! stands in for that read when the claim's incarnation is one the pass already knew was deleted:
//! the read showed another UID or none, and UIDs are never reused, so that incarnation is gone for
//! good whenever the read was made. Any other claim gets a fresh read.

use egress_api::ipam::IPClaim;
use egress_api::shard::EgressShard;
use tracing::{debug, info};

use super::Context;
use crate::error::Error;
use crate::ipam::naming::{claim_name, claim_name_without_incarnation};
use crate::ipam::release::{
    Freed, LiveShard, ReleaseError, Vouch, live_shard, recorded_claim, release as release_claim,
    whose,
};
use crate::kube_status::is_not_found;
use crate::shard::{Gone, ShardKey};

/// What the API server said of the shard's name this pass.
pub(super) struct LiveRead<'a> {
    /// The shard of the name, if one exists.
    pub shard: Option<&'a EgressShard>,
    /// No shard of the name exists and the cache holds none either: any claim this cell made for
    /// an incarnation of the name belongs to one that is gone (confirmed per claim after it is
    /// read, since another writer may create one meanwhile).
    pub none_of_the_name: bool,
}

/// Releases what the deleted incarnations in `gone` held (those `live` does not show alive), and,
/// when no shard of the name exists, this cell's claim of the name made before claims carried the
/// incarnation. Each released incarnation is then dropped from memory.
pub(super) async fn release(
    ctx: &Context,
    key: &ShardKey,
    gone: &[Gone],
    live: &LiveRead<'_>,
) -> Result<(), Error> {
    let dead: Vec<&Gone> = gone
        .iter()
        .filter(|g| !still_there(g, live.shard))
        .collect();
    if dead.len() < gone.len() {
        debug!(shard = %key, "the shard the cache lost still exists; nothing of it is released");
    }
    if !dead.is_empty() || live.none_of_the_name {
        for name in candidates(ctx, key, &dead, live.none_of_the_name) {
            release_one(ctx, key, &name, &dead, live).await?;
        }
    }
    for g in gone {
        ctx.memory.releases().released(key, g);
    }
    Ok(())
}

/// Whether `live` is the incarnation `gone` names. Not knowing which incarnation was deleted, a
/// live object of the name is reason enough to keep everything.
fn still_there(gone: &Gone, live: Option<&EgressShard>) -> bool {
    match (live, &gone.uid) {
        (None, _) => false,
        (Some(live), Some(uid)) => live.metadata.uid.as_ref() == Some(uid),
        (Some(_), None) => true,
    }
}

/// The claims that may be the gone incarnations': each one's recorded claim (the Go
/// controller's name, or ours), then the one this cell derives for it; and when no incarnation is
/// known, the name without the incarnation (claims made before it was in the name). Each name
/// once.
fn candidates(
    ctx: &Context,
    key: &ShardKey,
    dead: &[&Gone],
    none_of_the_name: bool,
) -> Vec<String> {
    let s = &ctx.settings;
    let mut names: Vec<String> = dead
        .iter()
        .filter_map(|g| {
            recorded_claim(
                g.claim_ref.as_ref(),
                &s.platform_project,
                &s.claim_namespace,
            )
        })
        .map(str::to_string)
        .collect();
    for g in dead {
        if let Some(uid) = &g.uid {
            names.push(claim_name(&ctx.cell_id, &key.namespace, &key.name, uid));
        }
    }
    // Only when nothing names an incarnation: a deletion known by name alone, or a pass for a
    // name with no shard and nothing remembered. A deleted incarnation addressed before the
    // incarnation was in the name recorded that name in its ref; one never addressed left its
    // claim to the orphan sweep. So a release costs one claim read, as before.
    if (none_of_the_name && dead.is_empty()) || dead.iter().any(|g| g.uid.is_none()) {
        names.push(claim_name_without_incarnation(
            &ctx.cell_id,
            &key.namespace,
            &key.name,
        ));
    }
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| seen.insert(n.clone()));
    names
}

async fn release_one(
    ctx: &Context,
    key: &ShardKey,
    name: &str,
    dead: &[&Gone],
    live: &LiveRead<'_>,
) -> Result<(), Error> {
    let s = &ctx.settings;
    let claim = match ctx.ipam.get_claim(&s.claim_namespace, name).await {
        Ok(claim) => claim,
        Err(e) if is_not_found(&e) => return Ok(()),
        Err(source) => {
            return Err(Error::Release {
                claim: name.to_string(),
                source,
            });
        }
    };
    // A Go controller's claim names no incarnation; the deleted one that recorded it vouches.
    let recorder = dead
        .iter()
        .find(|g| {
            recorded_claim(
                g.claim_ref.as_ref(),
                &s.platform_project,
                &s.claim_namespace,
            ) == Some(name)
        })
        .and_then(|g| g.uid.as_deref());
    let vouch = recorder.map_or(Vouch::None, Vouch::RecordedBy);
    let whose = match whose(&claim, &ctx.cell_id, vouch) {
        Ok(w) if ours_to_release(&w, key, dead, live) => w,
        Ok(w) => {
            info!(shard = %key, claim = %name, owner = ?w, "the claim of this name is not a gone shard's; left alone");
            return Ok(());
        }
        Err(why) => {
            info!(shard = %key, claim = %name, %why, "the claim of this name is not this shard's to release; left alone");
            return Ok(());
        }
    };
    // The pass's read proves gone an incarnation the pass knew was deleted; any other needs a
    // read made after the claim was.
    let known_gone = whose
        .uid()
        .is_some_and(|uid| dead.iter().any(|g| g.uid.as_deref() == Some(uid)));
    let read = |ns: String, n: String| async move {
        if known_gone {
            Ok(live.shard.map(LiveShard::of))
        } else {
            live_shard(&ctx.cell, &ns, &n, s.request_timeout).await
        }
    };
    let freed = release_claim(&ctx.ipam, &claim, &whose, read, || ctx.gate.may_write())
        .await
        .map_err(|e| release_error(key, name, e))?;
    log_freed(ctx, key, name, &claim, freed);
    Ok(())
}

/// Whether `whose` is among what this pass releases: a deleted incarnation, or, when no shard
/// of the name exists, any incarnation of this shard.
fn ours_to_release(
    whose: &crate::ipam::release::Whose,
    key: &ShardKey,
    dead: &[&Gone],
    live: &LiveRead<'_>,
) -> bool {
    if whose.shard() != format!("{}/{}", key.namespace, key.name) {
        return false;
    }
    live.none_of_the_name
        || whose
            .uid()
            .is_some_and(|uid| dead.iter().any(|g| g.uid.as_deref() == Some(uid)))
}

fn release_error(key: &ShardKey, claim: &str, e: ReleaseError) -> Error {
    match e {
        ReleaseError::NotLeader { .. } => Error::NotLeader,
        ReleaseError::ReadShard { source, .. } => Error::ReadShard {
            shard: key.to_string(),
            source,
        },
        ReleaseError::Stuck { source, .. } | ReleaseError::Delete { source, .. } => {
            Error::Release {
                claim: claim.to_string(),
                source,
            }
        }
        ReleaseError::NotOurs { reason, .. } => Error::Config(format!(
            "claim {claim:?} of egress shard {key} is not released: {reason}"
        )),
    }
}

fn log_freed(ctx: &Context, key: &ShardKey, name: &str, claim: &IPClaim, freed: Freed) {
    let address = claim
        .status
        .as_ref()
        .map(|s| s.allocated_cidr.as_str())
        .unwrap_or_default();
    match freed {
        Freed::Released => {
            info!(shard = %key, claim = %name, %address, location = %ctx.settings.location, "released the public IPv6 address of a shard that is gone");
        }
        Freed::AlreadyGone => {
            debug!(shard = %key, claim = %name, "the claim was already gone")
        }
        Freed::Held => {
            info!(shard = %key, claim = %name, "the claim's shard incarnation lives (or a live shard records the claim); left alone")
        }
        Freed::Replaced => {
            info!(shard = %key, claim = %name, "the claim was replaced by a newer one before the release landed; the newer one is kept")
        }
    }
}
