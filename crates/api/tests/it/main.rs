//! The types and the CRD they render, checked without a server: one test binary, one module per
//! concern.

mod crd_drift;
mod shard_schema;
