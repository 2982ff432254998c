//! The periodic drift check: does the IPAM record each addressed shard names still hold that
//! address? Drift is reported, never repaired: rewriting a live shard's address would renumber
//! its traffic, and the address is write-once anyway.

use std::net::Ipv6Addr;

use tracing::{debug, warn};

use crate::address::from_allocated_cidr;
use crate::events::reason;
use crate::holding::HolderKind;
use crate::ipam_error::is_not_found;
use crate::reconcile::Context;

/// What one pass found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DriftReport {
    pub checked: usize,
    pub missing: usize,
    pub different: usize,
    /// Holders that could not be read this time (IPAM unreachable, not ours to read, ...).
    pub unknown: usize,
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
    match from_allocated_cidr(allocated_cidr) {
        Ok(held) if Some(held) == shard => Verdict::Holds,
        _ => Verdict::HoldsOther(allocated_cidr.to_string()),
    }
}

/// Checks every addressed shard with a ref in the platform project.
pub async fn check(ctx: &Context) -> DriftReport {
    let mut report = DriftReport::default();
    for shard in ctx.store.state() {
        if !ctx.leader.is_leader() {
            break;
        }
        let Some(r) = shard.spec.shard_address_ipv6_claim_ref.as_ref() else {
            continue;
        };
        if shard.spec.shard_address_ipv6.is_empty() {
            continue;
        }
        let Some(kind) = HolderKind::parse(&r.kind) else {
            report.unknown += 1;
            continue;
        };
        if r.project != ctx.settings.platform_project {
            debug!(project = %r.project, "a ref into another project is not ours to check");
            report.unknown += 1;
            continue;
        }
        report.checked += 1;
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
        let shard_name = format!(
            "{}/{}",
            shard.metadata.namespace.as_deref().unwrap_or_default(),
            shard.metadata.name.as_deref().unwrap_or_default()
        );
        let note = match held {
            Ok(cidr) => match verdict(&shard.spec.shard_address_ipv6, &cidr) {
                Verdict::Holds => continue,
                Verdict::HoldsOther(other) => {
                    report.different += 1;
                    ctx.metrics.drift("different");
                    format!(
                        "{kind} {}/{} now holds {other:?}, not the shard's address {}; the shard is not rewritten",
                        r.namespace, r.name, shard.spec.shard_address_ipv6
                    )
                }
            },
            Err(e) if is_not_found(&e) => {
                report.missing += 1;
                ctx.metrics.drift("missing");
                format!(
                    "{kind} {}/{} holding {} is gone; the shard is not rewritten",
                    r.namespace, r.name, shard.spec.shard_address_ipv6
                )
            }
            Err(err) => {
                report.checked -= 1;
                report.unknown += 1;
                debug!(shard = %shard_name, %err, "could not read the holder; checking again next time");
                continue;
            }
        };
        warn!(shard = %shard_name, address = %shard.spec.shard_address_ipv6, holderKind = kind.as_str(), holderNamespace = %r.namespace, holderName = %r.name, "{note}");
        ctx.notifier
            .warning(&shard, reason::ADDRESS_DRIFT, note)
            .await;
    }
    report
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
    }

    #[test]
    fn another_address_or_an_unusable_answer_is_drift() {
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
