//! Giving an unaddressed shard its address: claim, check, then one conditional update (a merge
//! patch carrying the resourceVersion it was decided on).

use egress_api::shard::EgressShard;
use tracing::{error, info, warn};

use super::{Context, Next, Note, reason};
use crate::error::Error;
use crate::ipam::claim::{ClaimError, ClaimFailure, claim};
use crate::ipam::holding::{HolderKind, Holding};
use crate::ipam::spec::ClaimRequest;
use crate::kube_status::is_invalid;
use crate::shard::decide::ShardPatch;
use crate::shard::{ShardKey, ShardState};

pub(super) async fn claim_and_assign(
    ctx: &Context,
    key: &ShardKey,
    shard: &EgressShard,
    notes: &mut Vec<Note>,
) -> Result<Next, Error> {
    let s = &ctx.settings;
    if ctx.memory.addresses().state(key).is_none() {
        ctx.memory.addresses().set_state(key, ShardState::Pending);
    }
    let Some(uid) = shard.metadata.uid.as_deref() else {
        return Err(Error::Config(format!(
            "egress shard {key} has no UID; a claim is only ever made for one incarnation"
        )));
    };
    ctx.may_write()?;
    let req = ClaimRequest {
        class_name: &s.address_class_ipv6,
        claim_namespace: &s.claim_namespace,
        location: &s.location,
        cell: &ctx.cell_id,
        shard_namespace: &key.namespace,
        shard_name: &key.name,
        shard_uid: uid,
    };
    let holding = match claim(&ctx.ipam, &req).await {
        Ok(holding) => holding,
        Err(err) => return claim_failed(ctx, key, shard, err, notes),
    };
    ctx.metrics.claim_outcome(match holding.kind {
        HolderKind::IPClaim => "Bound",
        HolderKind::IPAllocation => "Adopted",
    });

    // Whatever IPAM answered, one address never goes onto two shards of this cell.
    if let Err(other) = ctx.memory.addresses().reserve(key, holding.address) {
        return Ok(address_in_use(ctx, key, shard, &holding, &other, notes));
    }
    if let Err(not_leader) = ctx.may_write() {
        ctx.memory.addresses().unreserve(key, false);
        return Err(not_leader);
    }
    let Some(patch) = ShardPatch::assign(shard, &holding, &s.platform_project) else {
        ctx.memory.addresses().unreserve(key, false);
        return Err(super::unversioned(key));
    };
    let written = ctx.patch_shard(key, &patch).await;
    // A 4xx proves the write was not made; anything else may have been applied.
    let maybe_applied = match &written {
        Ok(()) => true,
        Err(kube::Error::Api(status)) => status.code >= 500,
        Err(_) => true,
    };
    ctx.memory.addresses().unreserve(key, maybe_applied);
    let address = holding.address.to_string();
    match written {
        Ok(()) => {
            ctx.memory
                .addresses()
                .wrote_over(key, shard.metadata.resource_version.as_deref());
            ctx.memory.addresses().set_state(key, ShardState::Addressed);
            info!(
                shard = %key,
                address = %address,
                location = %s.location,
                holderKind = holding.kind.as_str(),
                holderNamespace = %holding.namespace,
                holderName = %holding.name,
                "assigned an egress shard its public IPv6 address"
            );
            notes.push(Note::normal(
                shard,
                reason::ADDRESS_ASSIGNED,
                format!(
                    "Assigned {address}, held by {} {}/{} in project {}",
                    holding.kind, holding.namespace, holding.name, s.platform_project
                ),
            ));
            Ok(Next::Done)
        }
        // The write-once rules refused it (a different ref is already recorded, or the object
        // changed shape): retrying cannot help until someone looks.
        Err(err) if is_invalid(&err) => {
            ctx.memory.addresses().set_state(key, ShardState::Refused);
            let err = assign_error(key, &holding, err);
            error!(shard = %key, %err, "the cell refused the address write; the shard is left as it was");
            notes.push(Note::warning(
                shard,
                reason::ASSIGN_REFUSED,
                err.to_string(),
            ));
            Ok(Next::Recheck)
        }
        Err(err) => Err(assign_error(key, &holding, err)),
    }
}

fn assign_error(key: &ShardKey, holding: &Holding, source: kube::Error) -> Error {
    Error::Assign {
        shard: key.name.to_string(),
        address: holding.address.to_string(),
        kind: holding.kind.to_string(),
        holder: holding.name.clone(),
        source: Box::new(source),
    }
}

fn address_in_use(
    ctx: &Context,
    key: &ShardKey,
    shard: &EgressShard,
    holding: &Holding,
    other: &ShardKey,
    notes: &mut Vec<Note>,
) -> Next {
    ctx.memory.addresses().set_state(key, ShardState::Refused);
    ctx.metrics.claim_outcome("AddressInUse");
    let message = format!(
        "IPAM handed out {} ({} {}/{}), which shard {other} already carries; nothing was written",
        holding.address, holding.kind, holding.namespace, holding.name
    );
    error!(shard = %key, address = %holding.address, holder = %other, "refusing an address another shard already carries");
    notes.push(Note::warning(shard, reason::ADDRESS_IN_USE, message));
    Next::Recheck
}

fn claim_failed(
    ctx: &Context,
    key: &ShardKey,
    shard: &EgressShard,
    err: ClaimError,
    notes: &mut Vec<Note>,
) -> Result<Next, Error> {
    let location = &ctx.settings.location;
    ctx.metrics.claim_outcome(err.outcome());
    match err.failure() {
        ClaimFailure::Pending => {
            ctx.memory.addresses().set_state(key, ShardState::Pending);
            info!(shard = %key, %err, "waiting for the address service to allocate");
            notes.push(Note::normal(shard, reason::CLAIM_PENDING, err.to_string()));
            Ok(Next::Retry)
        }
        ClaimFailure::Refused => {
            ctx.memory.addresses().set_state(key, ShardState::Refused);
            let note = match &err {
                ClaimError::Unusable { .. } => {
                    error!(shard = %key, location = %location, %err, "the public address space handed out something no shard address can be read from");
                    Note::warning(shard, reason::UNUSABLE_ANSWER, err.to_string())
                }
                ClaimError::Foreign { .. } => {
                    error!(shard = %key, %err, "refusing a claim made for someone else");
                    Note::warning(shard, reason::CLAIM_NAME_COLLISION, err.to_string())
                }
                other => {
                    warn!(shard = %key, ipamReason = other.outcome(), %err, "the address service refused the claim");
                    Note::warning(
                        shard,
                        reason::CLAIM_REFUSED,
                        format!("IPAM refused the claim ({}): {err}", other.outcome()),
                    )
                }
            };
            notes.push(note);
            Ok(Next::Recheck)
        }
        ClaimFailure::Transient => Err(Error::Claim {
            shard: key.name.to_string(),
            source: Box::new(err),
        }),
    }
}
