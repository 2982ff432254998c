//! The IPClaim this controller asks IPAM for.

use std::collections::BTreeMap;

use egress_api::ipam::{FAMILY_IPV6, IPClaim, IPClaimSpec, RECLAIM_DELETE, ScopeRef, TARGET_BLOCK};
use kube::api::ObjectMeta;

use super::address::ADDRESS_BITS;
use super::naming::{
    ANNOTATION_CELL, ANNOTATION_SHARD_NAME, ANNOTATION_SHARD_NAMESPACE, ANNOTATION_SHARD_UID,
    Incarnation, LABEL_CELL_TAG, cell_tag, claim_name,
};

/// Scope role the claim is placed under.
pub const SCOPE_ROLE_LOCATION: &str = "location";
/// The location scope object (compared by IPAM, never resolved).
pub const LOCATION_API_GROUP: &str = "networking.datumapis.com";
pub const LOCATION_KIND: &str = "Location";

/// What a claim is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRequest<'a> {
    pub class_name: &'a str,
    pub claim_namespace: &'a str,
    pub location: &'a str,
    /// The cell's identity, recorded on the claim and folded into its name.
    pub cell: &'a str,
    pub shard_namespace: &'a str,
    pub shard_name: &'a str,
    /// The shard's UID: the one incarnation this claim is for.
    pub shard_uid: &'a str,
}

impl ClaimRequest<'_> {
    /// The claim's name: this incarnation's alone.
    pub fn name(&self) -> String {
        claim_name(
            self.cell,
            self.shard_namespace,
            self.shard_name,
            self.shard_uid,
        )
    }

    /// The incarnation the claim is for.
    pub fn incarnation(&self) -> Incarnation<'_> {
        Incarnation {
            cell: self.cell,
            namespace: self.shard_namespace,
            name: self.shard_name,
            uid: self.shard_uid,
        }
    }
}

/// The desired claim: one IPv6 /128 block in the location's range, released with the claim,
/// marked with the cell and the shard incarnation it is for, and labelled with the cell's tag so
/// that a list can ask IPAM for one cell's claims only.
///
/// `ipFamily` is stated because the server bounds `prefixLength` by the claim's own family before
/// it resolves the class. `reclaimPolicy: Delete` is stated because under Retain a recreated
/// shard would quietly get the same, possibly wrong, address back. There is no `ownerRef`: the
/// server overwrites it with the caller's identity, and the shard lives in another cluster.
pub fn desired_claim(req: &ClaimRequest<'_>) -> IPClaim {
    let scope = BTreeMap::from([(
        SCOPE_ROLE_LOCATION.to_string(),
        ScopeRef {
            api_group: LOCATION_API_GROUP.to_string(),
            kind: LOCATION_KIND.to_string(),
            name: req.location.to_string(),
            uid: String::new(),
        },
    )]);
    IPClaim {
        metadata: ObjectMeta {
            name: Some(req.name()),
            namespace: Some(req.claim_namespace.to_string()),
            labels: Some(BTreeMap::from([(
                LABEL_CELL_TAG.to_string(),
                cell_tag(req.cell),
            )])),
            annotations: Some(BTreeMap::from([
                (
                    ANNOTATION_SHARD_NAMESPACE.to_string(),
                    req.shard_namespace.to_string(),
                ),
                (
                    ANNOTATION_SHARD_NAME.to_string(),
                    req.shard_name.to_string(),
                ),
                (ANNOTATION_SHARD_UID.to_string(), req.shard_uid.to_string()),
                (ANNOTATION_CELL.to_string(), req.cell.to_string()),
            ])),
            ..Default::default()
        },
        spec: IPClaimSpec {
            class_name: req.class_name.to_string(),
            ip_family: FAMILY_IPV6.to_string(),
            address: String::new(),
            prefix_length: Some(i32::from(ADDRESS_BITS)),
            scope,
            reclaim_policy: RECLAIM_DELETE.to_string(),
            owner_ref: None,
            target: TARGET_BLOCK.to_string(),
        },
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_claim_on_the_wire() {
        let claim = desired_claim(&ClaimRequest {
            class_name: "datum-egress-shard-address-ipv6",
            claim_namespace: "default",
            location: "dfw",
            cell: "cell-a",
            shard_namespace: "galactic-system",
            shard_name: "worker-1",
            shard_uid: "7d1e4b0a-uid",
        });
        assert_eq!(
            serde_json::to_value(&claim).unwrap(),
            json!({
                "apiVersion": "ipam.miloapis.com/v1alpha1",
                "kind": "IPClaim",
                "metadata": {
                    "name": claim_name("cell-a", "galactic-system", "worker-1", "7d1e4b0a-uid"),
                    "namespace": "default",
                    "labels": {"cloud.datumapis.com/egress-cell-tag": cell_tag("cell-a")},
                    "annotations": {
                        "cloud.datumapis.com/egress-shard-namespace": "galactic-system",
                        "cloud.datumapis.com/egress-shard-name": "worker-1",
                        "cloud.datumapis.com/egress-shard-uid": "7d1e4b0a-uid",
                        "cloud.datumapis.com/egress-cell": "cell-a"
                    }
                },
                "spec": {
                    "className": "datum-egress-shard-address-ipv6",
                    "ipFamily": "IPv6",
                    "prefixLength": 128,
                    "scope": {"location": {"apiGroup": "networking.datumapis.com", "kind": "Location", "name": "dfw"}},
                    "reclaimPolicy": "Delete",
                    "target": "Block"
                }
            })
        );
    }
}
