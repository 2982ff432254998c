//! `EgressShard`: one egress shard of the NAT tier, pinned to a node.
//!
//! The schema mirrors `go.datum.net/network` `api/v1alpha1`, including every CEL rule and its
//! message, because the API server's enforcement of those rules is what makes the controller's
//! write-once guarantee hold: a conflicting second write is refused by the server, not by us.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// API group of the shard.
pub const GROUP: &str = "network.datumapis.com";
/// Operator-set pool membership.
pub const LABEL_EGRESS_POOL: &str = "network.datumapis.com/egress-pool";
/// Operator-set cell.
pub const LABEL_EGRESS_CELL: &str = "network.datumapis.com/egress-cell";
/// Set to [`LABEL_VALUE_FAMILY_SERVED`] once `spec.shardAddressIPv6` is assigned; written by this
/// controller.
pub const LABEL_EGRESS_IPV6: &str = "network.datumapis.com/egress-ipv6";
/// The IPv4 counterpart of [`LABEL_EGRESS_IPV6`]; never touched here.
pub const LABEL_EGRESS_IPV4: &str = "network.datumapis.com/egress-ipv4";
/// The only value a family label carries: absence, not `false`, means "not served".
pub const LABEL_VALUE_FAMILY_SERVED: &str = "true";
/// Every label key the API defines.
pub const LABEL_KEYS: [&str; 4] = [
    LABEL_EGRESS_POOL,
    LABEL_EGRESS_CELL,
    LABEL_EGRESS_IPV6,
    LABEL_EGRESS_IPV4,
];

/// Status condition written by the datapath (never by this controller).
pub const CONDITION_PROGRAMMED: &str = "Programmed";
pub const REASON_ADDRESSES_PROGRAMMED: &str = "AddressesProgrammed";
pub const REASON_ADDRESS_UNASSIGNED: &str = "AddressUnassigned";
pub const REASON_PROGRAMMING_FAILED: &str = "ProgrammingFailed";

/// Default `apiGroup` of an [`AddressClaimRef`].
pub const CLAIM_REF_DEFAULT_API_GROUP: &str = "ipam.miloapis.com";
/// Default `kind` of an [`AddressClaimRef`].
pub const CLAIM_REF_DEFAULT_KIND: &str = "IPClaim";

/// Desired state of an egress shard. Addresses are write-once: the API server refuses any change
/// or unassignment once set.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "network.datumapis.com",
    version = "v1alpha1",
    kind = "EgressShard",
    namespaced,
    status = "EgressShardStatus",
    shortname = "egressshard",
    derive = "PartialEq",
    derive = "Default",
    cel,
    printcolumn(name = "TARGET", type_ = "string", json_path = ".spec.targetRef.name"),
    printcolumn(name = "SHARD-SID", type_ = "string", json_path = ".status.shardSID"),
    printcolumn(
        name = "IPV6",
        type_ = "string",
        json_path = ".status.shardAddressIPv6"
    ),
    printcolumn(
        name = "IPV4",
        type_ = "string",
        json_path = ".status.shardAddressIPv4"
    ),
    printcolumn(name = "DRAIN", type_ = "boolean", json_path = ".spec.drain"),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(
    validation = Rule::new("!(has(oldSelf.shardSID) && size(oldSelf.shardSID) > 0) || (has(self.shardSID) && size(self.shardSID) > 0)").message("shardSID cannot be unassigned once assigned"),
    validation = Rule::new("(has(self.shardAddressIPv4) && size(self.shardAddressIPv4) > 0) == (has(self.nat64Prefix) && size(self.nat64Prefix) > 0)").message("shardAddressIPv4 and nat64Prefix must be set together"),
    validation = Rule::new("!(has(oldSelf.shardAddressIPv6) && size(oldSelf.shardAddressIPv6) > 0) || (has(self.shardAddressIPv6) && size(self.shardAddressIPv6) > 0)").message("shardAddressIPv6 cannot be unassigned once assigned"),
    validation = Rule::new("!(has(oldSelf.shardAddressIPv4) && size(oldSelf.shardAddressIPv4) > 0) || (has(self.shardAddressIPv4) && size(self.shardAddressIPv4) > 0)").message("shardAddressIPv4 cannot be unassigned once assigned"),
    validation = Rule::new("!(has(oldSelf.nat64Prefix) && size(oldSelf.nat64Prefix) > 0) || (has(self.nat64Prefix) && size(self.nat64Prefix) > 0)").message("nat64Prefix cannot be unassigned once assigned"),
    validation = Rule::new("!has(oldSelf.shardAddressIPv6ClaimRef) || has(self.shardAddressIPv6ClaimRef)").message("shardAddressIPv6ClaimRef cannot be unassigned once assigned"),
    validation = Rule::new("!has(oldSelf.shardAddressIPv4ClaimRef) || has(self.shardAddressIPv4ClaimRef)").message("shardAddressIPv4ClaimRef cannot be unassigned once assigned"),
    validation = Rule::new("!(has(self.translateWellKnownPrefix) && self.translateWellKnownPrefix) || (has(self.nat64Prefix) && size(self.nat64Prefix) > 0)").message("translateWellKnownPrefix requires nat64Prefix")
)]
#[serde(rename_all = "camelCase")]
pub struct EgressShardSpec {
    /// The node the shard runs on, e.g. `{kind: Node, name: <node>}`.
    pub target_ref: TargetRef,

    /// Operator-chosen SRv6 uSID of the shard.
    #[serde(rename = "shardSID", default, skip_serializing_if = "String::is_empty")]
    #[x_kube(
        validation = Rule::new("self == '' || (isIP(self) && ip(self).family() == 6)").message("shardSID must be a valid IPv6 address"),
        validation = Rule::new("self == oldSelf || oldSelf == ''").message("shardSID is immutable once assigned")
    )]
    pub shard_sid: String,

    /// The public IPv6 address the shard translates to; written once by the egress address
    /// controller.
    #[serde(
        rename = "shardAddressIPv6",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    #[x_kube(
        validation = Rule::new("self == '' || (isIP(self) && ip(self).family() == 6)").message("shardAddressIPv6 must be a valid IPv6 address"),
        validation = Rule::new("self == oldSelf || oldSelf == ''").message("shardAddressIPv6 is immutable once assigned")
    )]
    pub shard_address_ipv6: String,

    /// The IPAM record holding `shardAddressIPv6`; written in the same update as the address.
    #[serde(
        rename = "shardAddressIPv6ClaimRef",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[x_kube(validation = Rule::new("self == oldSelf").message("shardAddressIPv6ClaimRef is immutable once assigned"))]
    pub shard_address_ipv6_claim_ref: Option<AddressClaimRef>,

    /// The public IPv4 address of the shard (not written by this project).
    #[serde(
        rename = "shardAddressIPv4",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    #[x_kube(
        validation = Rule::new("self == '' || (isIP(self) && ip(self).family() == 4)").message("shardAddressIPv4 must be a valid IPv4 address"),
        validation = Rule::new("self == oldSelf || oldSelf == ''").message("shardAddressIPv4 is immutable once assigned")
    )]
    pub shard_address_ipv4: String,

    /// The IPAM record holding `shardAddressIPv4`.
    #[serde(
        rename = "shardAddressIPv4ClaimRef",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[x_kube(validation = Rule::new("self == oldSelf").message("shardAddressIPv4ClaimRef is immutable once assigned"))]
    pub shard_address_ipv4_claim_ref: Option<AddressClaimRef>,

    /// The NAT64 prefix the shard translates into.
    #[serde(
        rename = "nat64Prefix",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    #[x_kube(
        validation = Rule::new("self == '' || isCIDR(self)").message("nat64Prefix must be a valid CIDR"),
        validation = Rule::new("self == oldSelf || oldSelf == ''").message("nat64Prefix is immutable once assigned")
    )]
    pub nat64_prefix: String,

    /// Whether the shard also translates the well-known prefix `64:ff9b::/96`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub translate_well_known_prefix: Option<bool>,

    /// Whether the shard is being drained of flows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<bool>,
}

/// The object a shard is placed on.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct TargetRef {
    #[schemars(length(min = 1))]
    pub kind: String,
    #[schemars(length(min = 1))]
    pub name: String,
}

/// A record of the IPAM object holding an address. Nothing resolves it: IPAM lives on another
/// control plane and defines no CRD in the cell, so attribution runs from shard to claim only.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AddressClaimRef {
    #[serde(default = "default_claim_ref_api_group")]
    #[schemars(length(min = 1))]
    pub api_group: String,
    #[serde(default = "default_claim_ref_kind")]
    #[schemars(length(min = 1))]
    pub kind: String,
    #[schemars(length(min = 1))]
    pub project: String,
    #[schemars(length(min = 1))]
    pub namespace: String,
    #[schemars(length(min = 1))]
    pub name: String,
}

fn default_claim_ref_api_group() -> String {
    CLAIM_REF_DEFAULT_API_GROUP.to_string()
}

fn default_claim_ref_kind() -> String {
    CLAIM_REF_DEFAULT_KIND.to_string()
}

/// What the datapath programmed. Never written by the egress address controller.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EgressShardStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(rename = "shardSID", default, skip_serializing_if = "String::is_empty")]
    #[x_kube(validation = Rule::new("self == '' || (isIP(self) && ip(self).family() == 6)").message("shardSID must be a valid IPv6 address"))]
    pub shard_sid: String,
    #[serde(
        rename = "shardAddressIPv6",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    #[x_kube(validation = Rule::new("self == '' || (isIP(self) && ip(self).family() == 6)").message("shardAddressIPv6 must be a valid IPv6 address"))]
    pub shard_address_ipv6: String,
    #[serde(
        rename = "shardAddressIPv4",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    #[x_kube(validation = Rule::new("self == '' || (isIP(self) && ip(self).family() == 4)").message("shardAddressIPv4 must be a valid IPv4 address"))]
    pub shard_address_ipv4: String,
    #[serde(
        rename = "nat64Prefix",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    #[x_kube(validation = Rule::new("self == '' || isCIDR(self)").message("nat64Prefix must be a valid CIDR"))]
    pub nat64_prefix: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub translates_well_known_prefix: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}
