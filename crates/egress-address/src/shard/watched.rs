//! What the watch decodes of a shard: the record the cache keeps ([`super::CachedShard`]), and
//! nothing else.
//!
//! Every shard crosses the watch at least twice (the list, and the echo of the address write),
//! each time as the whole object: labels and annotations of other owners, kubectl's
//! `last-applied-configuration`, the status, `managedFields`. Decoding all of that into an
//! `EgressShard` only to drop it was most of the controller's CPU per shard and the bulk of a
//! restart's list; here serde skips what no decision reads without allocating for it, and of the
//! labels only the served one is looked at.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::fmt;

use egress_api::shard::{
    AddressClaimRef, EgressShard, LABEL_EGRESS_IPV6, LABEL_VALUE_FAMILY_SERVED,
};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Resource;
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

use super::ShardKey;
use super::cached::{CachedShard, Parts};

/// A shard as the watch decodes it: straight into the record the cache keeps.
///
/// A page is decoded whole before any of it is used, so what one item costs is paid for every
/// item the page holds: a whole `EgressShard` per item (896 bytes, its `ObjectMeta` 360) made a
/// page of empty objects, `{"items":[{},{},...]}`, hold some 600 times its length (issue #37).
/// The record is 112 bytes, and an item must at least name its shard.
#[derive(Clone, Debug)]
pub struct WatchedShard(pub CachedShard, MetaView);

/// The `ObjectMeta` that [`Resource::meta`] has to lend, made from the record only when asked:
/// kube's watcher reads the resourceVersion of each watch event through it, nothing reads it
/// of a listed item, so a page pays a pointer per item rather than an `ObjectMeta`.
#[derive(Clone, Debug, Default)]
struct MetaView(OnceCell<Box<ObjectMeta>>);

impl WatchedShard {
    fn meta_view(&self) -> &ObjectMeta {
        self.1.0.get_or_init(|| {
            let shard = self.0.shard();
            Box::new(shard.metadata)
        })
    }
}

impl From<CachedShard> for WatchedShard {
    fn from(record: CachedShard) -> Self {
        Self(record, MetaView::default())
    }
}

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
        // An API server always names an object; without the name, an item would cost a record
        // for the two bytes of `{}`, and the key would be no shard's.
        let name = metadata
            .name
            .ok_or_else(|| de::Error::custom("an egress shard without metadata.name"))?;
        let record = CachedShard::from_parts(Parts {
            key: ShardKey::interned(metadata.namespace.as_deref().unwrap_or_default(), &name),
            uid: metadata.uid.as_deref(),
            resource_version: metadata.resource_version.as_deref(),
            deletion_timestamp: metadata.deletion_timestamp,
            served: metadata.labels,
            address: spec.address.as_deref().unwrap_or_default(),
            claim_ref: spec.claim_ref.as_ref(),
        });
        Ok(record.into())
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
        self.meta_view()
    }

    /// A copy: what is changed in it is not the record's. Nothing the watch runs edits a shard.
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.meta_view();
        self.1.0.get_mut().expect("made just now")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::ResourceExt;
    use kube::core::ObjectList;
    use serde_json::json;

    /// The shard a decision reads of what the watch decoded.
    fn decode(v: serde_json::Value) -> EgressShard {
        serde_json::from_value::<WatchedShard>(v).unwrap().0.shard()
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

    #[test]
    fn the_record_decoded_is_the_one_made_from_the_whole_shard() {
        let v = json!({
            "metadata": {
                "name": "s", "namespace": "ns", "uid": "0b7f3a52-9c1e-4d2a-8f6b-3e5d7c9a1b24",
                "resourceVersion": "007", "deletionTimestamp": "2026-01-01T00:00:00Z",
                "labels": {LABEL_EGRESS_IPV6: "true"},
            },
            "spec": {
                "targetRef": {"kind": "Node", "name": "n"},
                "shardAddressIPv6": "2001:DB8::1",
                "shardAddressIPv6ClaimRef": {"apiGroup": "ipam.miloapis.com", "kind": "IPClaim",
                    "project": "p", "namespace": "c", "name": "claim"},
            },
        });
        let decoded = serde_json::from_value::<WatchedShard>(v.clone()).unwrap().0;
        let whole = CachedShard::new(&serde_json::from_value::<EgressShard>(v).unwrap());
        assert_eq!(format!("{decoded:?}"), format!("{whole:?}"));
        assert_eq!(decoded.heap_bytes(), whole.heap_bytes());
    }

    #[test]
    fn the_watcher_reads_the_resource_version_of_an_event() {
        let w: WatchedShard = serde_json::from_value(
            json!({"metadata": {"name": "s", "namespace": "ns", "resourceVersion": "42"}}),
        )
        .unwrap();
        assert_eq!(w.resource_version().as_deref(), Some("42"));
        assert_eq!(
            (w.name_any(), w.namespace()),
            ("s".into(), Some("ns".into()))
        );
    }

    #[test]
    fn an_item_without_a_name_is_refused_naming_what_is_missing() {
        for item in [
            json!({}),
            json!({"metadata": {}}),
            json!({"metadata": {"name": null}}),
        ] {
            let err = serde_json::from_value::<WatchedShard>(item).unwrap_err();
            assert!(
                err.to_string()
                    .contains("an egress shard without metadata.name"),
                "{err}"
            );
        }
        // Nothing else is required.
        let bare = decode(json!({"metadata": {"name": ""}}));
        assert_eq!(bare.metadata.name.as_deref(), Some(""));
    }

    #[test]
    fn a_page_of_empty_items_is_refused_at_its_first() {
        // The fuzz seed of issue #37: 16,500 items `{}`, 49,617 bytes, which made 58.8 MB live
        // when each was decoded as a whole `EgressShard`.
        let page = include_bytes!("../../../../fuzz/corpus/list_page/alloc-empty-items-16500");
        let err = serde_json::from_slice::<ObjectList<WatchedShard>>(page).unwrap_err();
        assert!(
            err.to_string()
                .contains("an egress shard without metadata.name"),
            "{err}"
        );
        // Refused where the first item ends, not after decoding the page.
        assert!(err.column() < 200, "{err}");
    }

    #[test]
    fn a_page_of_minimal_items_costs_a_few_times_its_length() {
        // Each item is paid for before any is used: its footprint is the page's.
        assert!(
            size_of::<WatchedShard>() <= 128,
            "{}",
            size_of::<WatchedShard>()
        );
        let items = vec![r#"{"metadata":{"name":"a"}}"#; 10_000];
        let page = format!(r#"{{"items":[{}]}}"#, items.join(","));
        let list = serde_json::from_slice::<ObjectList<WatchedShard>>(page.as_bytes()).unwrap();
        assert_eq!(list.items.len(), items.len());
        let held = list.items.capacity() * size_of::<WatchedShard>()
            + list.items.iter().map(|w| w.0.heap_bytes()).sum::<usize>();
        // 26 bytes an item: a record and its name, up to twice the record while the `Vec` grows
        // by doubling. An `EgressShard` each (896 bytes) was 35 to 70 times the item.
        assert!(held <= 10 * page.len(), "{held} for {} bytes", page.len());
    }
}
