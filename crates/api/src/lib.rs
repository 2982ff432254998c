// The CRD derives repeat `printcolumn(...)` and `derive = ...` by design; clippy reads those as
// duplicated attributes.
#![allow(clippy::duplicated_attributes)]

//! Resource types shared by the egress address controller and localplane.
//!
//! * [`shard`]: `EgressShard` (`network.datumapis.com/v1alpha1`), owned by the data plane; this
//!   project writes only its IPv6 address, claim ref and family label.
//! * [`ipam`]: the Milo IPAM kinds (`ipam.miloapis.com/v1alpha1`) the controller claims from and
//!   localplane serves.
//! * [`crd`]: rendering CRDs as YAML, for `config/crd/` and for localplane.

pub mod crd;
pub mod ipam;
pub mod shard;
