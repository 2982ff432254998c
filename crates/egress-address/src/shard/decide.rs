//! What a shard, as the cache holds it, needs; and the single write that gives it an address.

use std::collections::BTreeMap;

use egress_api::shard::{
    AddressClaimRef, CLAIM_REF_DEFAULT_API_GROUP, EgressShard, LABEL_EGRESS_IPV6,
    LABEL_VALUE_FAMILY_SERVED,
};
use kube::ResourceExt;

use crate::ipam::holding::Holding;

/// The next step for a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Being deleted: it may still be draining flows, so it keeps everything and gets nothing.
    Skip,
    /// Addressed and labelled: no request at all.
    Nothing,
    /// Addressed (by us or by hand) but not labelled: add the label only, never a ref.
    MarkServed,
    /// No address yet: claim one.
    Claim,
}

/// Decides from the object alone; no I/O.
pub fn decide(shard: &EgressShard) -> Decision {
    if shard.metadata.deletion_timestamp.is_some() {
        return Decision::Skip;
    }
    if shard.spec.shard_address_ipv6.is_empty() {
        return Decision::Claim;
    }
    if has_served_label(shard) {
        Decision::Nothing
    } else {
        Decision::MarkServed
    }
}

fn has_served_label(shard: &EgressShard) -> bool {
    shard.labels().get(LABEL_EGRESS_IPV6).map(String::as_str) == Some(LABEL_VALUE_FAMILY_SERVED)
}

fn set_served_label(shard: &mut EgressShard) {
    shard
        .metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(
            LABEL_EGRESS_IPV6.to_string(),
            LABEL_VALUE_FAMILY_SERVED.to_string(),
        );
}

/// The shard as read, with the served label added. Everything else, including the
/// resourceVersion that makes the update conditional, is sent back as read.
pub fn mark_served(shard: &EgressShard) -> EgressShard {
    let mut out = shard.clone();
    set_served_label(&mut out);
    out
}

/// The ref recorded for a holding.
pub fn claim_ref(holding: &Holding, platform_project: &str) -> AddressClaimRef {
    AddressClaimRef {
        api_group: CLAIM_REF_DEFAULT_API_GROUP.to_string(),
        kind: holding.kind.as_str().to_string(),
        project: platform_project.to_string(),
        namespace: holding.namespace.clone(),
        name: holding.name.clone(),
    }
}

/// The shard as read, with address, ref and label set, for one conditional update.
///
/// The ref is assigned even over a different existing one: the server's write-once rule then
/// refuses the update, which is the answer we want rather than a silent overwrite or skip.
pub fn assign(shard: &EgressShard, holding: &Holding, platform_project: &str) -> EgressShard {
    let mut out = shard.clone();
    out.spec.shard_address_ipv6 = holding.address.to_string();
    out.spec.shard_address_ipv6_claim_ref = Some(claim_ref(holding, platform_project));
    set_served_label(&mut out);
    out
}

/// Whether a shard is addressed but carries no ref (hand-set, or from a controller older than
/// claim refs).
pub fn is_unattributable(shard: &EgressShard) -> bool {
    !shard.spec.shard_address_ipv6.is_empty() && shard.spec.shard_address_ipv6_claim_ref.is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipam::holding::HolderKind;
    use egress_api::shard::{EgressShardSpec, TargetRef};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn shard() -> EgressShard {
        let mut s = EgressShard::new(
            "worker-1",
            EgressShardSpec {
                target_ref: TargetRef {
                    kind: "Node".into(),
                    name: "node-a".into(),
                },
                ..Default::default()
            },
        );
        s.metadata.namespace = Some("galactic-system".into());
        s.metadata.resource_version = Some("42".into());
        s.metadata.labels = Some(BTreeMap::from([(
            "network.datumapis.com/egress-pool".into(),
            "p".into(),
        )]));
        s
    }

    fn holding(kind: HolderKind) -> Holding {
        Holding {
            kind,
            namespace: "default".into(),
            name: "egress-shard-ipv6.galactic-system.worker-1".into(),
            address: "2607:ed40:70::1".parse().unwrap(),
        }
    }

    #[test]
    fn a_deleting_shard_is_skipped_whatever_it_holds() {
        let mut s = shard();
        s.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
        assert_eq!(decide(&s), Decision::Skip);
        s.spec.shard_address_ipv6 = "2607:ed40:70::1".into();
        assert_eq!(decide(&s), Decision::Skip);
    }

    #[test]
    fn a_new_shard_is_claimed() {
        assert_eq!(decide(&shard()), Decision::Claim);
    }

    #[test]
    fn a_ref_without_an_address_is_still_claimed() {
        let mut s = shard();
        s.spec.shard_address_ipv6_claim_ref = Some(claim_ref(&holding(HolderKind::IPClaim), "p"));
        assert_eq!(decide(&s), Decision::Claim);
    }

    #[test]
    fn an_addressed_shard_needs_at_most_its_label() {
        let mut s = shard();
        s.spec.shard_address_ipv6 = "2607:ed40:70::9".into();
        assert_eq!(decide(&s), Decision::MarkServed);
        let marked = mark_served(&s);
        assert_eq!(decide(&marked), Decision::Nothing);
        assert_eq!(marked.spec, s.spec, "marking never touches spec");
        assert!(marked.spec.shard_address_ipv6_claim_ref.is_none());
        assert_eq!(marked.metadata.resource_version.as_deref(), Some("42"));
        assert!(is_unattributable(&marked));
    }

    #[test]
    fn only_true_counts_as_served() {
        let mut s = shard();
        s.spec.shard_address_ipv6 = "2607:ed40:70::9".into();
        s.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(LABEL_EGRESS_IPV6.into(), "false".into());
        assert_eq!(decide(&s), Decision::MarkServed);
    }

    #[test]
    fn assign_writes_address_ref_and_label_on_the_object_as_read() {
        let s = shard();
        let out = assign(&s, &holding(HolderKind::IPAllocation), "datum-platform");
        assert_eq!(out.spec.shard_address_ipv6, "2607:ed40:70::1");
        assert_eq!(
            out.spec.shard_address_ipv6_claim_ref,
            Some(AddressClaimRef {
                api_group: "ipam.miloapis.com".into(),
                kind: "IPAllocation".into(),
                project: "datum-platform".into(),
                namespace: "default".into(),
                name: "egress-shard-ipv6.galactic-system.worker-1".into(),
            })
        );
        let labels = out.metadata.labels.as_ref().unwrap();
        assert_eq!(
            labels.get(LABEL_EGRESS_IPV6).map(String::as_str),
            Some("true")
        );
        assert_eq!(
            labels
                .get("network.datumapis.com/egress-pool")
                .map(String::as_str),
            Some("p")
        );
        assert_eq!(out.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(out.spec.target_ref, s.spec.target_ref);
        assert_eq!(decide(&out), Decision::Nothing);
    }

    #[test]
    fn assign_creates_the_label_map() {
        let mut s = shard();
        s.metadata.labels = None;
        let out = assign(&s, &holding(HolderKind::IPClaim), "p");
        assert_eq!(
            out.spec.shard_address_ipv6_claim_ref.unwrap().kind,
            "IPClaim"
        );
        assert!(out.metadata.labels.unwrap().contains_key(LABEL_EGRESS_IPV6));
    }
}
