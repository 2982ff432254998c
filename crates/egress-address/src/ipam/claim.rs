//! Claiming a shard's address: create first, read only when the create's answer says the name
//! may be taken.
//!
//! A new shard costs one request: IPAM binds synchronously, so the create response already
//! carries the address. The claim's name is this incarnation's alone (see [`super::naming`]), so
//! a create refused because the name is taken is followed by one read of the claim, and the
//! annotations decide: the claim this incarnation made (its answer was lost) is used once it is
//! Bound; a claim of another cell or shard (a name made by hand, a hash collision) is refused and
//! never touched. A create whose answer was lost (the connection cut, no answer in time) is read
//! the same way, since it may have been applied; one that never left (refused, no such host, an
//! untrusted certificate) is not.
//!
//! Only a Bound claim gives an address: a claim Releasing (Milo writes that phase before it frees
//! the address, and leaves it there while the second step fails) is waited for, never used.

use egress_api::ipam::{
    ALLOCATION_PHASE_READY, CLAIM_PHASE_BOUND as PHASE_BOUND, CLAIM_PHASE_RELEASING,
};
use tracing::debug;

use super::address::{UnusableError, from_allocated_cidr};
use super::client::{Ipam, is_circuit_open};
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
    /// The claim is being released (phase `Releasing`, or a deletionTimestamp): its address is
    /// on its way out and is never used; resolves once the claim is gone.
    #[error(
        "the address service is releasing claim {name:?} (phase {phase:?}); its address is not used, and a new claim follows once it is gone"
    )]
    Releasing { name: String, phase: String },
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
            ClaimError::Unbound { .. } | ClaimError::Releasing { .. } => ClaimFailure::Pending,
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
            ClaimError::ReadAllocation { .. } => "AllocationUnreadable",
            ClaimError::Unbound { .. } => "Unbound",
            ClaimError::Releasing { .. } => "Releasing",
            ClaimError::Unusable { .. } => "Unusable",
            ClaimError::Foreign { .. } => "NameCollision",
        }
    }

    /// The kube error underneath, if any.
    pub fn kube_error(&self) -> Option<&kube::Error> {
        match self {
            ClaimError::Create { source, .. }
            | ClaimError::Read { source, .. }
            | ClaimError::ReadAllocation { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Claims an address for one incarnation of a shard and returns what holds it.
pub async fn claim(ipam: &Ipam, req: &ClaimRequest<'_>) -> Result<Holding, ClaimError> {
    let name = req.name();
    let create_err = match ipam.create_claim(&desired_claim(req)).await {
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
    if !worth_a_read {
        return Err(ClaimError::Create {
            reason,
            source: create_err,
        });
    }
    debug!(claim = %name, %create_err, "the name may be taken; reading the claim");
    let existing = match ipam.get_claim(req.claim_namespace, &name).await {
        Ok(existing) => existing,
        // Gone between the create and the read (or the create never landed): the next attempt
        // creates it.
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
    let holder = match owner(&existing, &req.incarnation()) {
        Owner::This => return claim_holding(req, &name, &existing),
        // Two incarnations deriving one name: only a hash collision does that.
        Owner::OtherIncarnation { uid } => format!("another incarnation of this shard (uid {uid})"),
        Owner::OtherCell { cell } => format!("a shard of cell {cell:?}"),
        Owner::Unmarked => {
            "a shard of this name by a controller that did not record its cell".to_string()
        }
        Owner::OtherShard { holder } => format!("shard {holder}"),
    };
    Err(ClaimError::Foreign {
        claim: name,
        holder,
    })
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

/// The address of a claim this incarnation made, once IPAM has bound it: phase `Bound`, no
/// deletionTimestamp, marked for this cell and incarnation (the create's answer is checked as
/// strictly as a claim read back, since a server may answer with anything).
fn claim_holding(
    req: &ClaimRequest<'_>,
    name: &str,
    claim: &egress_api::ipam::IPClaim,
) -> Result<Holding, ClaimError> {
    if owner(claim, &req.incarnation()) != Owner::This {
        return Err(ClaimError::Foreign {
            claim: name.to_string(),
            holder: "nobody this controller marks (the answer lost the claim's marks)".to_string(),
        });
    }
    let status = claim.status.clone().unwrap_or_default();
    if claim.metadata.deletion_timestamp.is_some() || status.phase == CLAIM_PHASE_RELEASING {
        return Err(ClaimError::Releasing {
            name: name.to_string(),
            phase: status.phase,
        });
    }
    if status.phase != PHASE_BOUND {
        return Err(ClaimError::Unbound {
            name: name.to_string(),
            phase: status.phase,
        });
    }
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
    if status.phase != ALLOCATION_PHASE_READY {
        return Err(ClaimError::Unbound {
            name: allocation,
            phase: status.phase,
        });
    }
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

    fn request() -> ClaimRequest<'static> {
        ClaimRequest {
            class_name: "class",
            claim_namespace: "default",
            location: "dfw",
            cell: "cell-a",
            shard_namespace: "ns",
            shard_name: "s",
            shard_uid: "u1",
        }
    }

    fn answered_claim(phase: &str) -> egress_api::ipam::IPClaim {
        let mut claim = desired_claim(&request());
        claim.status = Some(egress_api::ipam::IPClaimStatus {
            phase: phase.to_string(),
            allocated_cidr: "2607:ed40::5/128".to_string(),
            ..Default::default()
        });
        claim
    }

    #[test]
    fn only_a_bound_claim_of_this_incarnation_gives_an_address() {
        let req = request();
        let name = req.name();
        let bound = claim_holding(&req, &name, &answered_claim("Bound")).unwrap();
        assert_eq!(bound.address.to_string(), "2607:ed40::5");
        for phase in ["Releasing", "Pending", "Error", ""] {
            let err = claim_holding(&req, &name, &answered_claim(phase)).unwrap_err();
            assert_eq!(err.failure(), ClaimFailure::Pending, "{phase}: {err}");
        }
        let mut deleting = answered_claim("Bound");
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
        );
        let err = claim_holding(&req, &name, &deleting).unwrap_err();
        assert_eq!(err.outcome(), "Releasing", "{err}");
        let err = claim_holding(&req, &name, &answered_claim("Releasing")).unwrap_err();
        assert_eq!(err.outcome(), "Releasing", "{err}");
        let mut other = answered_claim("Bound");
        other.metadata.annotations.as_mut().unwrap().insert(
            super::super::naming::ANNOTATION_SHARD_UID.to_string(),
            "u2".to_string(),
        );
        let err = claim_holding(&req, &name, &other).unwrap_err();
        assert_eq!(err.failure(), ClaimFailure::Refused, "{err}");
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
