//! Claiming a shard's address: create first, read only when the create's answer says the name
//! may be taken.
//!
//! A new shard costs one request: IPAM binds synchronously, so the create response already
//! carries the address. A create refused because the name is taken is followed by one read of
//! the claim, and the annotations decide: the claim this incarnation made (its answer was lost)
//! is used; a claim of an earlier incarnation of the shard is released, exactly that object, and
//! a fresh one made; a claim of another cell or shard is refused and never touched. A create whose
//! answer was lost (the connection cut, no answer in time) is read the same way, since it may
//! have been applied; one that never left (refused, no such host, an untrusted certificate) is
//! not.

use tracing::{debug, info};

use super::address::{UnusableError, from_allocated_cidr};
use super::client::{Deleted, Ipam, is_circuit_open};
use super::holding::{HolderKind, Holding};
use super::naming::{Owner, owner};
use super::reasons::{IpamReason, classify};
use super::spec::{ClaimRequest, desired_claim};
use crate::kube_status::{answered, is_not_found, transport_cause};

/// Why no address came back.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// The create failed, and nothing read afterwards changes what its answer means.
    #[error("claim an egress address: {source}")]
    Create {
        reason: IpamReason,
        #[source]
        source: kube::Error,
    },
    /// The create said the name is taken, and the claim could not be read.
    #[error("read the egress address claim {claim:?}: {source}")]
    Read {
        claim: String,
        #[source]
        source: kube::Error,
    },
    /// An earlier incarnation's claim holds the name and could not be released.
    #[error(
        "release the egress address claim {claim:?} of an earlier shard of this name: {source}"
    )]
    ReleaseEarlier {
        claim: String,
        #[source]
        source: kube::Error,
    },
    /// The claim of the name was made for another incarnation of this shard, and that one is the
    /// shard alive now: the object this pass decided from has been deleted and replaced since
    /// (another writer claimed for the new one). Retried once the cache shows the live shard.
    #[error(
        "the IPClaim {claim:?} is held by the live shard of this name (uid {uid}); this pass read an earlier one"
    )]
    Superseded { claim: String, uid: String },
    /// IPAM named a retained allocation that could not be read.
    #[error("read the retained allocation {allocation:?}: {source}")]
    ReadAllocation {
        allocation: String,
        #[source]
        source: kube::Error,
    },
    /// The holder exists but IPAM has not allocated yet; resolves on its own.
    #[error("the address service has allocated nothing for claim {name:?} yet (phase {phase:?})")]
    Unbound { name: String, phase: String },
    /// IPAM answered with something no egress shard may carry.
    #[error("{source}")]
    Unusable {
        kind: HolderKind,
        name: String,
        #[source]
        source: UnusableError,
    },
    /// A claim of this name exists but was made for someone else: another cell, another shard,
    /// or a controller that did not mark claims. Using it could give two shards one address.
    #[error(
        "the IPClaim {claim:?} was made for {holder}, not for this shard; its address is not this shard's"
    )]
    Foreign { claim: String, holder: String },
}

/// How the claim path should be followed up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimFailure {
    /// Waiting for IPAM to bind.
    Pending,
    /// A refusal that will not change without an operator; re-checked on a fixed interval.
    Refused,
    /// Anything else; retried with backoff.
    Transient,
}

impl ClaimError {
    pub fn failure(&self) -> ClaimFailure {
        match self {
            ClaimError::Unbound { .. } => ClaimFailure::Pending,
            ClaimError::Unusable { .. } | ClaimError::Foreign { .. } => ClaimFailure::Refused,
            ClaimError::Create {
                reason: IpamReason::Refused(_),
                ..
            } => ClaimFailure::Refused,
            _ => ClaimFailure::Transient,
        }
    }

    /// The label recorded in `claim_outcomes` and, for refusals, the event's IPAM reason.
    pub fn outcome(&self) -> &'static str {
        match self {
            ClaimError::Create { reason, .. } => reason.label(),
            ClaimError::Read { .. } => "ClaimUnreadable",
            ClaimError::ReleaseEarlier { .. } => "EarlierClaimUnreleased",
            ClaimError::ReadAllocation { .. } => "AllocationUnreadable",
            ClaimError::Unbound { .. } => "Unbound",
            ClaimError::Unusable { .. } => "Unusable",
            ClaimError::Foreign { .. } => "NameCollision",
            ClaimError::Superseded { .. } => "Superseded",
        }
    }

    /// The kube error underneath, if any.
    pub fn kube_error(&self) -> Option<&kube::Error> {
        match self {
            ClaimError::Create { source, .. }
            | ClaimError::Read { source, .. }
            | ClaimError::ReleaseEarlier { source, .. }
            | ClaimError::ReadAllocation { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Claims an address for one incarnation of a shard and returns what holds it. A claim of the
/// name made for another incarnation is released only when `lives` (asked with that
/// incarnation's UID, after the claim was read) says no shard of that UID exists: the caller
/// reads the cell, which this module does not.
pub async fn claim<F, Fut>(
    ipam: &Ipam,
    req: &ClaimRequest<'_>,
    lives: F,
) -> Result<Holding, ClaimError>
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Result<bool, kube::Error>>,
{
    let name = req.name();
    let desired = desired_claim(req);
    // At most twice: a second create only follows the release of an earlier incarnation's claim.
    let mut released_earlier = false;
    loop {
        let create_err = match ipam.create_claim(&desired).await {
            Ok(created) => return claim_holding(req, &name, &created),
            Err(e) => e,
        };
        let reason = classify(&create_err);
        if let IpamReason::AllocationRetained(allocation) = reason {
            return adopt(ipam, req, allocation).await;
        }
        let worth_a_read = if answered(&create_err) {
            reason.name_may_be_taken()
        } else {
            may_have_been_applied(&create_err)
        };
        if !worth_a_read || released_earlier {
            return Err(ClaimError::Create {
                reason,
                source: create_err,
            });
        }
        debug!(claim = %name, %create_err, "the name may be taken; reading the claim");
        let existing = match ipam.get_claim(req.claim_namespace, &name).await {
            Ok(existing) => existing,
            // Gone between the create and the read: the next attempt creates it.
            Err(e) if is_not_found(&e) => {
                return Err(ClaimError::Create {
                    reason,
                    source: create_err,
                });
            }
            Err(source) => {
                return Err(ClaimError::Read {
                    claim: name,
                    source,
                });
            }
        };
        match owner(&existing, &req.incarnation()) {
            Owner::This => return claim_holding(req, &name, &existing),
            Owner::OtherIncarnation { uid } => {
                // Another incarnation of this cell's shard made the claim. Which one is gone is
                // known only from the cell: usually the claim's (the shard was deleted and
                // created again), but a pass that decided from an out-of-date object may be the
                // gone one, and the claim the live shard's.
                match lives(uid.clone()).await {
                    Ok(false) => {}
                    Ok(true) => return Err(ClaimError::Superseded { claim: name, uid }),
                    Err(source) => {
                        return Err(ClaimError::Read {
                            claim: name,
                            source,
                        });
                    }
                }
                // The claim's incarnation is gone; its claim is released, and only that object
                // (the UID precondition), so a newer claim of the name can never be the one freed.
                let claim_uid = existing.metadata.uid.clone().unwrap_or_default();
                match ipam
                    .delete_claim(req.claim_namespace, &name, &claim_uid)
                    .await
                {
                    Ok(Deleted::Deleted | Deleted::AlreadyGone | Deleted::Replaced) => {
                        info!(claim = %name, earlierShardUid = %uid, "released the claim of an earlier shard of this name");
                    }
                    Err(source) => {
                        return Err(ClaimError::ReleaseEarlier {
                            claim: name,
                            source,
                        });
                    }
                }
                released_earlier = true;
            }
            Owner::OtherCell { cell } => {
                return Err(ClaimError::Foreign {
                    claim: name,
                    holder: format!("a shard of cell {cell:?}"),
                });
            }
            Owner::Unmarked => {
                return Err(ClaimError::Foreign {
                    claim: name,
                    holder: "a shard of this name by a controller that did not record its cell"
                        .to_string(),
                });
            }
            Owner::OtherShard { holder } => {
                return Err(ClaimError::Foreign {
                    claim: name,
                    holder: format!("shard {holder}"),
                });
            }
        }
    }
}

/// Whether a create that got no answer may still have been applied: the request left (the
/// connection was cut, or the answer did not come in time). A connection that was never made
/// (refused, no such name, an untrusted certificate, the breaker open) sent nothing.
fn may_have_been_applied(err: &kube::Error) -> bool {
    !is_circuit_open(err)
        && !matches!(
            transport_cause(err),
            Some("refused" | "dns" | "certificate")
        )
}

fn claim_holding(
    req: &ClaimRequest<'_>,
    name: &str,
    claim: &egress_api::ipam::IPClaim,
) -> Result<Holding, ClaimError> {
    let status = claim.status.clone().unwrap_or_default();
    holding_from(
        HolderKind::IPClaim,
        req.claim_namespace,
        name,
        &status.allocated_cidr,
        &status.phase,
    )
}

async fn adopt(
    ipam: &Ipam,
    req: &ClaimRequest<'_>,
    allocation: String,
) -> Result<Holding, ClaimError> {
    let found = ipam
        .get_allocation(req.claim_namespace, &allocation)
        .await
        .map_err(|source| ClaimError::ReadAllocation {
            allocation: allocation.clone(),
            source,
        })?;
    let status = found.status.unwrap_or_default();
    holding_from(
        HolderKind::IPAllocation,
        req.claim_namespace,
        &allocation,
        &status.allocated_cidr,
        &status.phase,
    )
}

/// Only `status.allocatedCIDR` is read: no released IPAM writes `status.address`.
fn holding_from(
    kind: HolderKind,
    namespace: &str,
    name: &str,
    allocated_cidr: &str,
    phase: &str,
) -> Result<Holding, ClaimError> {
    if allocated_cidr.is_empty() {
        return Err(ClaimError::Unbound {
            name: name.to_string(),
            phase: phase.to_string(),
        });
    }
    let address = from_allocated_cidr(allocated_cidr).map_err(|source| ClaimError::Unusable {
        kind,
        name: name.to_string(),
        source,
    })?;
    Ok(Holding {
        kind,
        namespace: namespace.to_string(),
        name: name.to_string(),
        address,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_cidr_is_unbound_with_its_phase() {
        let err = holding_from(HolderKind::IPClaim, "default", "c", "", "Pending").unwrap_err();
        assert_eq!(
            err.to_string(),
            "the address service has allocated nothing for claim \"c\" yet (phase \"Pending\")"
        );
        assert_eq!(err.failure(), ClaimFailure::Pending);
    }

    #[test]
    fn an_unusable_cidr_is_a_refusal() {
        for bad in ["10.0.0.1/32", "fe80::1/128", "2607:ed40:70::/128"] {
            let err =
                holding_from(HolderKind::IPAllocation, "default", "a", bad, "Ready").unwrap_err();
            assert_eq!(err.failure(), ClaimFailure::Refused, "{bad}");
            assert_eq!(err.outcome(), "Unusable");
        }
    }

    #[test]
    fn a_bound_cidr_is_held_by_its_kind() {
        let h = holding_from(
            HolderKind::IPAllocation,
            "default",
            "alloc-1",
            "2607:ed40::5/128",
            "Ready",
        )
        .unwrap();
        assert_eq!(h.kind, HolderKind::IPAllocation);
        assert_eq!(h.name, "alloc-1");
        assert_eq!(h.address.to_string(), "2607:ed40::5");
    }

    #[test]
    fn refusals_are_rechecked_and_everything_else_backed_off() {
        let refused = ClaimError::Create {
            reason: IpamReason::Refused("Exhausted"),
            source: kube::Error::LinesCodecMaxLineLengthExceeded,
        };
        assert_eq!(refused.failure(), ClaimFailure::Refused);
        assert_eq!(refused.outcome(), "Exhausted");
        let transient = ClaimError::Create {
            reason: IpamReason::Unknown,
            source: kube::Error::LinesCodecMaxLineLengthExceeded,
        };
        assert_eq!(transient.failure(), ClaimFailure::Transient);
        let unreadable = ClaimError::Read {
            claim: "c".into(),
            source: kube::Error::LinesCodecMaxLineLengthExceeded,
        };
        assert_eq!(
            unreadable.failure(),
            ClaimFailure::Transient,
            "a failed read after a 409 is a retry, not a refusal"
        );
        let foreign = ClaimError::Foreign {
            claim: "c".into(),
            holder: "shard x/y".into(),
        };
        assert_eq!(foreign.failure(), ClaimFailure::Refused);
    }
}
