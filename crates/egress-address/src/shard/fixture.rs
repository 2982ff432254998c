//! Shards as the unit tests of the layers above make them.

use egress_api::shard::{EgressShard, EgressShardSpec, TargetRef};

/// Shard `ns/name` of node `node-a`, with `address` (empty: none yet), UID `uid-<name>` and
/// resourceVersion `7`.
pub fn shard(name: &str, address: &str) -> EgressShard {
    let mut s = EgressShard::new(
        name,
        EgressShardSpec {
            target_ref: TargetRef {
                kind: "Node".into(),
                name: "node-a".into(),
            },
            shard_address_ipv6: address.into(),
            ..Default::default()
        },
    );
    s.metadata.namespace = Some("ns".into());
    s.metadata.uid = Some(format!("uid-{name}"));
    s.metadata.resource_version = Some("7".into());
    s
}
