//! What a shard, as the cache holds it, needs; and the single write that gives it an address.

use egress_api::shard::{
    AddressClaimRef, CLAIM_REF_DEFAULT_API_GROUP, EgressShard, LABEL_EGRESS_IPV6,
    LABEL_VALUE_FAMILY_SERVED,
};
use kube::ResourceExt;
use serde_json::{Value, json};

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

/// One conditional write to a shard: a JSON merge patch of the fields it sets and the
/// resourceVersion the decision was made on. The API server takes a resourceVersion in a patch
/// as a precondition (409 Conflict when the shard changed since), so the patch is the one
/// optimistic-concurrency update a PUT of the object was, without the object: every other
/// field stays as the server has it.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardPatch {
    resource_version: String,
    address: Option<(String, AddressClaimRef)>,
}

impl ShardPatch {
    /// The served label only. `None` for a shard without a resourceVersion: nothing is written
    /// unconditionally.
    pub fn mark_served(shard: &EgressShard) -> Option<Self> {
        Some(Self {
            resource_version: shard.metadata.resource_version.clone()?,
            address: None,
        })
    }

    /// Address, ref and label together.
    ///
    /// The ref is set even over a different existing one (the patch names every field of a
    /// ref, so the result is exactly this ref): the server's write-once rule then refuses the
    /// update, which is the answer we want rather than a silent overwrite or skip.
    pub fn assign(shard: &EgressShard, holding: &Holding, platform_project: &str) -> Option<Self> {
        Some(Self {
            resource_version: shard.metadata.resource_version.clone()?,
            address: Some((
                holding.address.to_string(),
                claim_ref(holding, platform_project),
            )),
        })
    }

    /// The resourceVersion the write is conditional on.
    pub fn resource_version(&self) -> &str {
        &self.resource_version
    }

    /// The merge patch's body.
    pub fn to_json(&self) -> Value {
        let mut patch = json!({
            "metadata": {
                "resourceVersion": self.resource_version,
                "labels": { LABEL_EGRESS_IPV6: LABEL_VALUE_FAMILY_SERVED },
            },
        });
        if let Some((address, claim_ref)) = &self.address {
            patch["spec"] = json!({
                "shardAddressIPv6": address,
                "shardAddressIPv6ClaimRef": claim_ref,
            });
        }
        patch
    }
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
    use std::collections::BTreeMap;

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
        assert!(is_unattributable(&s));
        let patch = ShardPatch::mark_served(&s).unwrap().to_json();
        assert_eq!(
            patch,
            json!({"metadata": {"resourceVersion": "42", "labels": {LABEL_EGRESS_IPV6: "true"}}}),
            "the label and the precondition, never spec"
        );
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
    fn assign_writes_address_ref_and_label_conditional_on_the_version_read() {
        let s = shard();
        let patch =
            ShardPatch::assign(&s, &holding(HolderKind::IPAllocation), "datum-platform").unwrap();
        assert_eq!(patch.resource_version(), "42");
        assert_eq!(
            patch.to_json(),
            json!({
                "metadata": {
                    "resourceVersion": "42",
                    "labels": {"network.datumapis.com/egress-ipv6": "true"},
                },
                "spec": {
                    "shardAddressIPv6": "2607:ed40:70::1",
                    "shardAddressIPv6ClaimRef": {
                        "apiGroup": "ipam.miloapis.com",
                        "kind": "IPAllocation",
                        "project": "datum-platform",
                        "namespace": "default",
                        "name": "egress-shard-ipv6.galactic-system.worker-1",
                    },
                },
            })
        );
    }

    #[test]
    fn nothing_is_written_without_a_version_to_be_conditional_on() {
        let mut s = shard();
        s.metadata.resource_version = None;
        assert_eq!(
            ShardPatch::assign(&s, &holding(HolderKind::IPClaim), "p"),
            None
        );
        s.spec.shard_address_ipv6 = "2607:ed40:70::9".into();
        assert_eq!(ShardPatch::mark_served(&s), None);
    }
}
