//! What the watch decodes of a shard: the fields the cache keeps ([`super::CachedShard`]) and
//! nothing else.
//!
//! Every shard crosses the watch at least twice (the list, and the echo of the address write),
//! each time as the whole object: labels and annotations of other owners, kubectl's
//! `last-applied-configuration`, the status, `managedFields`. Decoding all of that into an
//! `EgressShard` only to drop it was most of the controller's CPU per shard and the bulk of a
//! restart's list; here serde skips what no decision reads without allocating for it, and of the
//! labels only the served one is looked at.

use std::borrow::Cow;
use std::fmt;

use egress_api::shard::{
    AddressClaimRef, EgressShard, EgressShardSpec, LABEL_EGRESS_IPV6, LABEL_VALUE_FAMILY_SERVED,
};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Resource;
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

/// A shard as the watch decodes it: an `EgressShard` with only name, namespace, UID,
/// resourceVersion, deletionTimestamp, the served label, address and claim ref set.
#[derive(Clone, Debug, PartialEq)]
pub struct WatchedShard(pub EgressShard);

#[derive(Deserialize)]
struct Lean {
    #[serde(default)]
    metadata: LeanMeta,
    #[serde(default)]
    spec: LeanSpec,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct LeanMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    deletion_timestamp: Option<Time>,
    #[serde(default, deserialize_with = "served")]
    labels: bool,
}

#[derive(Deserialize, Default)]
struct LeanSpec {
    #[serde(rename = "shardAddressIPv6", default)]
    address: Option<String>,
    #[serde(rename = "shardAddressIPv6ClaimRef", default)]
    claim_ref: Option<AddressClaimRef>,
}

impl<'de> Deserialize<'de> for WatchedShard {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Lean { metadata, spec } = Lean::deserialize(d)?;
        let mut shard = EgressShard::new(
            metadata.name.as_deref().unwrap_or_default(),
            EgressShardSpec {
                shard_address_ipv6: spec.address.unwrap_or_default(),
                shard_address_ipv6_claim_ref: spec.claim_ref,
                ..Default::default()
            },
        );
        let m = &mut shard.metadata;
        m.name = metadata.name;
        m.namespace = metadata.namespace;
        m.uid = metadata.uid;
        m.resource_version = metadata.resource_version;
        m.deletion_timestamp = metadata.deletion_timestamp;
        if metadata.labels {
            m.labels = Some(
                [(
                    LABEL_EGRESS_IPV6.to_string(),
                    LABEL_VALUE_FAMILY_SERVED.to_string(),
                )]
                .into(),
            );
        }
        Ok(WatchedShard(shard))
    }
}

/// Whether a `labels` map (or null) carries the served label, without keeping any label.
fn served<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    struct Labels;
    impl<'de> Visitor<'de> for Labels {
        type Value = bool;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a map of labels")
        }

        fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
            Ok(false)
        }

        fn visit_none<E: de::Error>(self) -> Result<bool, E> {
            Ok(false)
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
            d.deserialize_map(self)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
            let mut served = false;
            while let Some(is_ours) = map.next_key_seed(Is(LABEL_EGRESS_IPV6))? {
                if is_ours {
                    served = map.next_value_seed(Is(LABEL_VALUE_FAMILY_SERVED))?;
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(served)
        }
    }
    d.deserialize_option(Labels)
}

/// Decodes a string only to say whether it is this one.
struct Is(&'static str);

impl<'de> DeserializeSeed<'de> for Is {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for Is {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<bool, E> {
        Ok(s == self.0)
    }
}

impl Resource for WatchedShard {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        EgressShard::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        EgressShard::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        EgressShard::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        EgressShard::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn decode(v: serde_json::Value) -> EgressShard {
        serde_json::from_value::<WatchedShard>(v).unwrap().0
    }

    #[test]
    fn only_what_a_decision_reads_is_decoded() {
        let shard = decode(json!({
            "apiVersion": "network.datumapis.com/v1alpha1", "kind": "EgressShard",
            "metadata": {
                "name": "s", "namespace": "ns", "uid": "u-1", "resourceVersion": "7",
                "generation": 3, "deletionTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"team": "a", LABEL_EGRESS_IPV6: "true", "z": "y"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
                "finalizers": ["f"],
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
            },
            "spec": {
                "targetRef": {"kind": "Node", "name": "n"}, "shardSID": "fd00::1",
                "shardAddressIPv6": "2001:db8::1",
                "shardAddressIPv6ClaimRef": {"apiGroup": "ipam.miloapis.com", "kind": "IPClaim",
                    "project": "p", "namespace": "c", "name": "claim"},
            },
            "status": {"shardSID": "fd00::1"},
        }));
        let m = &shard.metadata;
        assert_eq!(
            (m.name.as_deref(), m.namespace.as_deref(), m.uid.as_deref()),
            (Some("s"), Some("ns"), Some("u-1"))
        );
        assert_eq!(m.resource_version.as_deref(), Some("7"));
        assert!(m.deletion_timestamp.is_some());
        assert_eq!(
            m.labels,
            Some([(LABEL_EGRESS_IPV6.to_string(), "true".to_string())].into())
        );
        assert_eq!(
            (
                &m.annotations,
                &m.managed_fields,
                &m.finalizers,
                m.generation
            ),
            (&None, &None, &None, None)
        );
        assert_eq!(shard.spec.shard_address_ipv6, "2001:db8::1");
        assert_eq!(
            shard.spec.shard_address_ipv6_claim_ref.unwrap().name,
            "claim"
        );
        assert_eq!(shard.spec.shard_sid, "");
        assert_eq!(shard.status, None);
    }

    #[test]
    fn the_served_label_counts_only_when_true() {
        let labels = |l: serde_json::Value| {
            decode(json!({"metadata": {"name": "s", "labels": l}, "spec": {}}))
                .metadata
                .labels
        };
        assert_eq!(labels(json!({LABEL_EGRESS_IPV6: "false"})), None);
        assert_eq!(labels(json!(null)), None);
        assert_eq!(labels(json!({})), None);
        assert!(labels(json!({LABEL_EGRESS_IPV6: "true"})).is_some());
    }

    #[test]
    fn a_bare_shard_decodes() {
        let shard = decode(
            json!({"metadata": {"name": "s"}, "spec": {"targetRef": {"kind": "Node", "name": "n"}}}),
        );
        assert_eq!(shard.spec.shard_address_ipv6, "");
        assert_eq!(shard.spec.shard_address_ipv6_claim_ref, None);
    }
}
