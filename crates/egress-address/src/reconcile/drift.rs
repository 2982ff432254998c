//! The drift check: does the IPAM record an addressed shard names still hold that address?
//! Drift is reported, never repaired: rewriting a live shard's address would renumber its
//! traffic, and the address is write-once anyway. The runtime paces these checks evenly over
//! the drift interval, one shard at a time.

use std::net::Ipv6Addr;

use egress_api::shard::EgressShard;
use tracing::{debug, warn};

use super::{Context, Note, reason};
use crate::ipam::address::host_address;
use crate::ipam::holding::HolderKind;
use crate::kube_status::is_not_found;

/// The drift metric's `kind` label for a holder that is gone.
pub const MISSING: &str = crate::metrics::DRIFT_MISSING;
/// The drift metric's `kind` label for a holder that holds another address.
pub const MISMATCH: &str = crate::metrics::DRIFT_MISMATCH;

/// What one check found.
#[derive(Debug, Clone, PartialEq)]
pub enum Checked {
    /// Nothing to check: no address, no ref, or a ref this controller cannot read.
    Skipped,
    /// The holder holds the shard's address.
    Holds,
    /// The holder could not be read this time (IPAM unreachable, ...).
    Unknown,
    /// The holder is gone or holds another address.
    Drifted(Box<Note>),
}

/// What a holder's allocated CIDR says about a shard's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Holds,
    HoldsOther(String),
}

/// Compares addresses, not strings: a hand-written address may be spelled differently.
pub fn verdict(shard_address: &str, allocated_cidr: &str) -> Verdict {
    let shard: Option<Ipv6Addr> = shard_address.parse().ok();
    match host_address(allocated_cidr) {
        Ok(held) if Some(held) == shard => Verdict::Holds,
        _ => Verdict::HoldsOther(allocated_cidr.to_string()),
    }
}

/// Checks one shard's holder.
pub async fn check(ctx: &Context, shard: &EgressShard) -> Checked {
    let Some(r) = shard.spec.shard_address_ipv6_claim_ref.as_ref() else {
        return Checked::Skipped;
    };
    if shard.spec.shard_address_ipv6.is_empty() {
        return Checked::Skipped;
    }
    let Some(kind) = HolderKind::parse(&r.kind) else {
        return Checked::Skipped;
    };
    if r.project != ctx.settings.platform_project {
        debug!(project = %r.project, "a ref into another project is not ours to check");
        return Checked::Skipped;
    }
    let held = match kind {
        HolderKind::IPClaim => ctx
            .ipam
            .get_claim(&r.namespace, &r.name)
            .await
            .map(|c| c.status.unwrap_or_default().allocated_cidr),
        HolderKind::IPAllocation => ctx
            .ipam
            .get_allocation(&r.namespace, &r.name)
            .await
            .map(|a| a.status.unwrap_or_default().allocated_cidr),
    };
    let address = &shard.spec.shard_address_ipv6;
    let (drift_kind, note) = match held {
        Ok(cidr) => match verdict(address, &cidr) {
            Verdict::Holds => return Checked::Holds,
            Verdict::HoldsOther(other) => (
                MISMATCH,
                format!(
                    "{kind} {}/{} now holds {other:?}, not the shard's address {address}; the shard is not rewritten",
                    r.namespace, r.name
                ),
            ),
        },
        Err(e) if is_not_found(&e) => (
            MISSING,
            format!(
                "{kind} {}/{} holding {address} is gone; the shard is not rewritten",
                r.namespace, r.name
            ),
        ),
        Err(err) => {
            debug!(shard = ?shard.metadata.name, %err, "could not read the holder; checking again next time");
            return Checked::Unknown;
        }
    };
    ctx.metrics.drift(drift_kind);
    warn!(
        shard = %crate::shard::ShardKey::of(shard),
        address = %address,
        holderKind = kind.as_str(),
        holderNamespace = %r.namespace,
        holderName = %r.name,
        "{note}"
    );
    Checked::Drifted(Box::new(Note::warning(shard, reason::ADDRESS_DRIFT, note)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_address_spelled_differently_holds() {
        assert_eq!(
            verdict("2607:ed40:70:0::1", "2607:ed40:70::1/128"),
            Verdict::Holds
        );
        assert_eq!(
            verdict("2001:db8::", "2001:db8::/128"),
            Verdict::Holds,
            "an address written before unusable ones were refused is still compared"
        );
    }

    #[test]
    fn another_address_or_an_unreadable_answer_is_drift() {
        assert_eq!(
            verdict("2607:ed40:70::1", "2607:ed40:70::2/128"),
            Verdict::HoldsOther("2607:ed40:70::2/128".into())
        );
        assert_eq!(
            verdict("2607:ed40:70::1", ""),
            Verdict::HoldsOther(String::new())
        );
    }
}
