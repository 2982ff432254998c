//! Releasing the claims of a shard's incarnations that are really gone, and only theirs.
//!
//! Three guards, each enough to keep a live shard's claim: the incarnation is confirmed gone
//! against the API server (never the cache alone; a claim whose incarnation the release did not
//! know was gone has that incarnation confirmed gone after the claim is read); the claim is read
//! and its annotations must name this cell and that incarnation (or, for a claim made before
//! claims were marked, be the exact claim the deleted shard recorded); and the DELETE carries the
//! claim's UID as a precondition, so a delete that lands late cannot remove a newer claim of the
//! same name.
//!
//! One pass reads the shard once and each candidate claim once: the live read is made by the
//! caller and handed in, and a name both recorded and derived is read once.

use egress_api::ipam::IPClaim;
use egress_api::shard::EgressShard;
use kube::ResourceExt;
use tracing::{debug, info};

use super::Context;
use crate::Error;
use crate::ipam::client::Deleted;
use crate::ipam::holding::HolderKind;
use crate::ipam::naming::{ANNOTATION_SHARD_UID, Incarnation, Owner, claim_name, owner};
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
/// when no shard of the name exists, this cell's claim of any incarnation of it. Each released
/// incarnation is then dropped from memory.
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
        for name in candidates(ctx, key, &dead) {
            release_claim(ctx, key, &name, &dead, live.none_of_the_name).await?;
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
/// controller's name, or ours), then the one this cell derives (a claim made but never written
/// onto the shard); each name once.
fn candidates(ctx: &Context, key: &ShardKey, dead: &[&Gone]) -> Vec<String> {
    let mut names: Vec<String> = dead
        .iter()
        .filter_map(|g| recorded(ctx, g))
        .map(str::to_string)
        .collect();
    names.push(claim_name(&ctx.cell_id, &key.namespace, &key.name));
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| seen.insert(n.clone()));
    names
}

/// The claim a deleted incarnation recorded in its ref, if it is an IPClaim where this
/// controller claims.
fn recorded<'g>(ctx: &Context, gone: &'g Gone) -> Option<&'g str> {
    let s = &ctx.settings;
    gone.claim_ref
        .as_ref()
        .filter(|r| {
            r.kind == HolderKind::IPClaim.as_str()
                && r.project == s.platform_project
                && r.namespace == s.claim_namespace
        })
        .map(|r| r.name.as_str())
}

/// Whose the claim of this name is, among what may be released.
enum Verdict {
    /// A dead incarnation's, known to be gone before the claim was read.
    Gone,
    /// An incarnation of this cell's shard that must be confirmed gone now that the claim is read.
    ConfirmFirst,
    /// Someone else's.
    Keep(Owner),
}

fn judge(
    ctx: &Context,
    key: &ShardKey,
    name: &str,
    claim: &IPClaim,
    dead: &[&Gone],
    none_of_the_name: bool,
) -> Verdict {
    fn of<'a>(ctx: &'a Context, key: &'a ShardKey, uid: Option<&'a str>) -> Incarnation<'a> {
        Incarnation {
            cell: &ctx.cell_id,
            namespace: &key.namespace,
            name: &key.name,
            uid,
        }
    }
    let mut last = None;
    for g in dead {
        match owner(claim, &of(ctx, key, g.uid.as_deref())) {
            Owner::This if g.uid.is_some() => return Verdict::Gone,
            Owner::This => return Verdict::ConfirmFirst,
            Owner::Unmarked if recorded(ctx, g) == Some(name) => return Verdict::Gone,
            other => last = Some(other),
        }
    }
    if none_of_the_name {
        match owner(claim, &of(ctx, key, None)) {
            Owner::This => return Verdict::ConfirmFirst,
            other => last = Some(other),
        }
    }
    Verdict::Keep(last.unwrap_or(Owner::Unmarked))
}

async fn release_claim(
    ctx: &Context,
    key: &ShardKey,
    name: &str,
    dead: &[&Gone],
    none_of_the_name: bool,
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
    match judge(ctx, key, name, &claim, dead, none_of_the_name) {
        Verdict::Gone => {}
        Verdict::ConfirmFirst => {
            if claimed_incarnation_lives(ctx, key, &claim).await? {
                info!(shard = %key, claim = %name, "the claim is a live shard's, made since this release began; left alone");
                return Ok(());
            }
        }
        Verdict::Keep(other) => {
            info!(shard = %key, claim = %name, owner = ?other, "the claim of this name is not the gone shard's; left alone");
            return Ok(());
        }
    }
    ctx.may_write()?;
    let uid = claim.metadata.uid.clone().unwrap_or_default();
    let deleted = ctx
        .ipam
        .delete_claim(&s.claim_namespace, name, &uid)
        .await
        .map_err(|source| Error::Release {
            claim: name.to_string(),
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
    Ok(())
}

/// Whether the incarnation a claim names is alive now. A release that did not know which
/// incarnation was gone learns it only from the claim, read after the API server said no shard of
/// the name existed; another writer (a second controller, a paused leader's successor) may have
/// created one since and claimed for it.
async fn claimed_incarnation_lives(
    ctx: &Context,
    key: &ShardKey,
    claim: &IPClaim,
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
