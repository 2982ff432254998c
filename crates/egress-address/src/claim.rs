//! Claiming a shard's address: create first, read only when the create fails.
//!
//! A new shard costs one request. The reference reads before it creates, which costs a read on
//! every claim; IPAM binds synchronously, so the create response already carries the address.
//! A failed create is followed by one read, which covers a raced writer, our own earlier claim,
//! and an older IPAM that answers a duplicate name with a bare 500.

use egress_api::ipam::reasons;
use tracing::debug;

use crate::address::{UnusableError, from_allocated_cidr};
use crate::claim_spec::{ClaimRequest, desired_claim};
use crate::holding::{HolderKind, Holding};
use crate::ipam::Ipam;
use crate::ipam_error::{IpamReason, classify};
use crate::naming::{claim_holder, claim_name, claim_names_shard};

/// Why no address came back.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// The create failed and no claim for this shard could be read either.
    #[error("claim an egress address: {source}")]
    Create {
        reason: IpamReason,
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
    /// IPAM answered with something that is not an IPv6 /128.
    #[error("{source}")]
    Unusable {
        kind: HolderKind,
        name: String,
        #[source]
        source: UnusableError,
    },
    /// A claim of this name exists but belongs to another shard (a shortened name, or another
    /// cell writing into the same namespace). Using it would give two shards one address.
    #[error(
        "the IPClaim {claim:?} was made for shard {holder}, not for this one; its address is not this shard's"
    )]
    Collision { claim: String, holder: String },
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
            ClaimError::Unusable { .. } | ClaimError::Collision { .. } => ClaimFailure::Refused,
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
            ClaimError::ReadAllocation { .. } => "AllocationUnreadable",
            ClaimError::Unbound { .. } => "Unbound",
            ClaimError::Unusable { .. } => "Unusable",
            ClaimError::Collision { .. } => "NameCollision",
        }
    }

    /// A credential IPAM did not accept.
    pub fn is_unauthorized(&self) -> bool {
        match self {
            ClaimError::Create { source, .. } | ClaimError::ReadAllocation { source, .. } => {
                crate::ipam_error::is_unauthorized(source)
            }
            _ => false,
        }
    }
}

/// Claims an address for a shard and returns what holds it.
pub async fn claim(ipam: &Ipam, req: &ClaimRequest<'_>) -> Result<Holding, ClaimError> {
    let desired = desired_claim(req);
    let name = claim_name(req.shard_namespace, req.shard_name);
    let create_err = match ipam.create_claim(&desired).await {
        Ok(created) => return claim_holding(req, &name, &created),
        Err(e) => e,
    };
    let reason = classify(&create_err);
    if let IpamReason::AllocationRetained(allocation) = reason {
        return adopt(ipam, req, allocation).await;
    }
    debug!(claim = %name, %create_err, "create refused; reading the claim");
    match ipam.get_claim(req.claim_namespace, &name).await {
        Ok(existing) if claim_names_shard(&existing, req.shard_namespace, req.shard_name) => {
            claim_holding(req, &name, &existing)
        }
        Ok(existing) => Err(ClaimError::Collision {
            claim: name,
            holder: claim_holder(&existing),
        }),
        // The read only stands in for a create that may have raced; when it fails too, the
        // create's answer is the one that explains what happened.
        Err(_) => Err(ClaimError::Create {
            reason,
            source: create_err,
        }),
    }
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

/// Whether an IPAM reason is one of the refusals events report by name.
pub fn is_ipam_refusal(outcome: &str) -> bool {
    reasons::ALL.contains(&outcome)
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
        let err = holding_from(
            HolderKind::IPAllocation,
            "default",
            "a",
            "10.0.0.1/32",
            "Ready",
        )
        .unwrap_err();
        assert_eq!(err.failure(), ClaimFailure::Refused);
        assert_eq!(err.outcome(), "Unusable");
        assert!(err.to_string().contains("read out of an IPv6 space"));
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
        assert!(!h.held_by_claim());
    }

    #[test]
    fn refusals_by_ipam_are_rechecked_and_transport_errors_backed_off() {
        let refused = ClaimError::Create {
            reason: IpamReason::Refused("Exhausted"),
            source: kube::Error::LinesCodecMaxLineLengthExceeded,
        };
        assert_eq!(refused.failure(), ClaimFailure::Refused);
        assert_eq!(refused.outcome(), "Exhausted");
        assert!(is_ipam_refusal(refused.outcome()));
        let transient = ClaimError::Create {
            reason: IpamReason::Unknown,
            source: kube::Error::LinesCodecMaxLineLengthExceeded,
        };
        assert_eq!(transient.failure(), ClaimFailure::Transient);
        let collision = ClaimError::Collision {
            claim: "c".into(),
            holder: "x/y".into(),
        };
        assert_eq!(collision.failure(), ClaimFailure::Refused);
    }
}
