//! The types and the CRD they render: checked without a server, and the write-once rules also
//! on localplane and the real kube-apiserver. One test binary, one module per concern.

mod crd_drift;
mod shard_schema;
mod write_once;
