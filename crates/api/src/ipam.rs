//! Milo IPAM kinds (`ipam.miloapis.com/v1alpha1`), with the fields the controller and localplane
//! use. IPAM is an aggregated API on a project control plane, not a CRD; the CRDs rendered here
//! exist so localplane can serve, validate and describe these kinds like any other resource.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group of every IPAM kind.
pub const GROUP: &str = "ipam.miloapis.com";
/// The API version served.
pub const VERSION: &str = "v1alpha1";
/// Milo's per-project control-plane path; IPAM is reached by appending the usual group path.
pub const PROJECT_CONTROL_PLANE_PREFIX: &str =
    "/apis/resourcemanager.miloapis.com/v1alpha1/projects";

/// The control-plane path of a Milo project.
pub fn project_control_plane_path(project: &str) -> String {
    format!("{PROJECT_CONTROL_PLANE_PREFIX}/{project}/control-plane")
}

/// Address family.
pub const FAMILY_IPV4: &str = "IPv4";
pub const FAMILY_IPV6: &str = "IPv6";
/// Reclaim policies.
pub const RECLAIM_DELETE: &str = "Delete";
pub const RECLAIM_RETAIN: &str = "Retain";
/// Claim phases.
pub const CLAIM_PHASE_PENDING: &str = "Pending";
pub const CLAIM_PHASE_BOUND: &str = "Bound";
pub const CLAIM_PHASE_RELEASING: &str = "Releasing";
/// The phase of an allocation that holds its address.
pub const ALLOCATION_PHASE_READY: &str = "Ready";
/// A claim for a block inside a pool (as opposed to the range of a pool itself).
pub const TARGET_BLOCK: &str = "Block";
pub const TARGET_SCOPE_RANGE: &str = "ScopeRange";

/// The reasons IPAM puts in `status.details.causes[].type` of a refusal.
pub mod reasons {
    pub const EXHAUSTED: &str = "Exhausted";
    pub const CLASS_NOT_FOUND: &str = "ClassNotFound";
    pub const NO_DEFAULT_CLASS: &str = "NoDefaultClass";
    pub const NO_OFFERING_POOL: &str = "NoOfferingPool";
    pub const PREFIX_LENGTH_REJECTED: &str = "PrefixLengthRejected";
    pub const SCOPE_ROLES_MISSING: &str = "ScopeRolesMissing";
    pub const ALLOCATION_RETAINED: &str = "AllocationRetained";
    pub const CLAIM_EXISTS: &str = "ClaimExists";
    pub const NO_PROJECT_SCOPE: &str = "NoProjectScope";
    /// Every reason IPAM is known to send.
    pub const ALL: [&str; 9] = [
        EXHAUSTED,
        CLASS_NOT_FOUND,
        NO_DEFAULT_CLASS,
        NO_OFFERING_POOL,
        PREFIX_LENGTH_REJECTED,
        SCOPE_ROLES_MISSING,
        ALLOCATION_RETAINED,
        CLAIM_EXISTS,
        NO_PROJECT_SCOPE,
    ];
}

/// A reference to a scope object (compared, never resolved).
#[derive(
    JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord,
)]
#[serde(rename_all = "camelCase")]
pub struct ScopeRef {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

/// A reference to an owning object.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

/// A reference by name within the same project (and namespace, for namespaced kinds).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct LocalRef {
    #[serde(default)]
    pub name: String,
}

/// Scope of a claim or allocation: role (e.g. `location`) to the object it names.
pub type Scope = BTreeMap<String, ScopeRef>;

/// A request for an address or block, bound synchronously on create.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "ipam.miloapis.com",
    version = "v1alpha1",
    kind = "IPClaim",
    namespaced,
    status = "IPClaimStatus",
    shortname = "ipclaim",
    derive = "PartialEq",
    derive = "Default",
    printcolumn(name = "CLASS", type_ = "string", json_path = ".spec.className"),
    printcolumn(name = "PHASE", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "CIDR", type_ = "string", json_path = ".status.allocatedCIDR"),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct IPClaimSpec {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub class_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ip_family: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub address: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 128))]
    pub prefix_length: Option<i32>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scope: Scope,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reclaim_policy: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_ref: Option<ObjectRef>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub target: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IPClaimStatus {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    #[serde(
        rename = "allocatedCIDR",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub allocated_cidr: String,
    /// Exists in the API; no released IPAM writes it, so nothing here reads it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub address: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_ref: Option<LocalRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_allocation_ref: Option<LocalRef>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The server's record of an allocation; created with a bound claim, kept when retained.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "ipam.miloapis.com",
    version = "v1alpha1",
    kind = "IPAllocation",
    namespaced,
    status = "IPAllocationStatus",
    shortname = "ipalloc",
    derive = "PartialEq",
    derive = "Default",
    printcolumn(name = "POOL", type_ = "string", json_path = ".spec.poolRef.name"),
    printcolumn(name = "CLAIM", type_ = "string", json_path = ".spec.claimRef.name"),
    printcolumn(name = "CIDR", type_ = "string", json_path = ".status.allocatedCIDR"),
    printcolumn(name = "POLICY", type_ = "string", json_path = ".spec.reclaimPolicy")
)]
#[serde(rename_all = "camelCase")]
pub struct IPAllocationSpec {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ip_family: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_ref: Option<LocalRef>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub class_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub purpose: String,
    /// `None` once the allocation is retained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_ref: Option<LocalRef>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scope: Scope,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reclaim_policy: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_ref: Option<ObjectRef>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IPAllocationStatus {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    #[serde(
        rename = "allocatedCIDR",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub allocated_cidr: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub address: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scope_digest: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Allocation limits of a pool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolAllocation {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_prefix_length: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_prefix_length: Option<i32>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub strategy: String,
}

/// Leading and trailing blocks kept out of allocation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Reservations {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leading: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trailing: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit_prefix_length: Option<i32>,
}

/// Address space: a root pool declares a CIDR, a child pool is carved from its parent.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "ipam.miloapis.com",
    version = "v1alpha1",
    kind = "IPPool",
    status = "IPPoolStatus",
    shortname = "ippool",
    derive = "PartialEq",
    derive = "Default",
    printcolumn(name = "CIDR", type_ = "string", json_path = ".status.allocatedCIDR"),
    printcolumn(name = "FAMILY", type_ = "string", json_path = ".status.ipFamily"),
    printcolumn(name = "PHASE", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "UTILIZATION",
        type_ = "number",
        json_path = ".status.utilizationPercent"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct IPPoolSpec {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cidr: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ip_family: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_pool_ref: Option<LocalRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_length: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub class_names: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_ref: Option<LocalRef>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scope: Scope,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservations: Option<Reservations>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub max_retention_lease: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation: Option<PoolAllocation>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub visibility: String,
}

/// Capacity counters, as decimal strings (an IPv6 pool's size does not fit in 64 bits).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct PoolCapacity {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub total: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub allocated: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub available: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IPPoolStatus {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    #[serde(
        rename = "allocatedCIDR",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub allocated_cidr: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ip_family: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scope_digest: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<PoolCapacity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization_percent: Option<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Allowed prefix lengths of a class.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct PrefixLengthRange {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 128))]
    pub min: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 128))]
    pub max: Option<i32>,
}

/// How a class's addresses are routed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct Routing {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub internal: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub external: String,
}

/// Operator policy: consumers name a class, never a pool.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "ipam.miloapis.com",
    version = "v1alpha1",
    kind = "IPClass",
    plural = "ipclasses",
    status = "IPClassStatus",
    shortname = "ipclass",
    derive = "PartialEq",
    derive = "Default",
    printcolumn(name = "FAMILY", type_ = "string", json_path = ".spec.ipFamily"),
    printcolumn(name = "PARENT", type_ = "string", json_path = ".spec.parentClassName"),
    printcolumn(name = "PHASE", type_ = "string", json_path = ".status.phase")
)]
#[serde(rename_all = "camelCase")]
pub struct IPClassSpec {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ip_family: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub parent_class_name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pool_per: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unique_within: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_prefix_lengths: Option<PrefixLengthRange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_prefix_length: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservations: Option<Reservations>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing: Option<Routing>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub strategy: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reclaim_policy: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub retention_lease: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub visibility: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backing_projects: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub provisioner: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IPClassStatus {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offering_pools: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned_pools: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_scope_roles: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The four IPAM kinds as CRDs, for serving them from a local stand-in.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        IPClass::crd(),
        IPPool::crd(),
        IPClaim::crd(),
        IPAllocation::crd(),
    ]
}
