//! What the shard cache holds per shard: only what a decision reads.
//!
//! A shard as a cell has it is mostly what the controller never reads: labels and annotations of
//! other owners (kubectl's `last-applied-configuration` repeats the whole object), the status the
//! data plane writes, and `managedFields`. The controller's writes are JSON merge patches that
//! name only the fields they set and the resourceVersion they were decided on (the API server
//! takes a resourceVersion in a patch as a precondition), so nothing else of the object has to
//! be kept for them. A cached shard is its key, UID and resourceVersion, whether it is being
//! deleted, whether it carries the served label, its address and its claim ref: a few hundred
//! bytes, whatever the object's size (see the decision record in docs/architecture.md; a whole
//! compressed object cost three times that at 100,000 shards).
//!
//! [`CachedShard::shard`] gives those fields back as an `EgressShard` with nothing else set. It
//! is a view for decisions and events, never a body to PUT: every write built from it is a
//! patch.

use std::borrow::Cow;

use egress_api::shard::{
    AddressClaimRef, EgressShard, EgressShardSpec, LABEL_EGRESS_IPV6, LABEL_VALUE_FAMILY_SERVED,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource;
use kube::runtime::reflector::Lookup;

use super::ShardKey;

/// One cached shard. Cheap to look up by name; [`CachedShard::shard`] gives the fields a
/// decision reads.
#[derive(Clone, Debug)]
pub struct CachedShard {
    /// Shared with the per-shard memory and the queue (see [`ShardKey`]).
    key: ShardKey,
    uid: Option<Box<str>>,
    resource_version: Option<Box<str>>,
    deletion_timestamp: Option<Time>,
    /// The served label (`network.datumapis.com/egress-ipv6: "true"`) is set; no other label
    /// decides anything.
    served: bool,
    /// `spec.shardAddressIPv6` as the cell has it (empty: none); kept as written, since drift and
    /// events quote it.
    address: Box<str>,
    /// `spec.shardAddressIPv6ClaimRef`, as its JSON: one allocation instead of five strings.
    claim_ref: Option<Box<str>>,
}

impl CachedShard {
    /// What the cache keeps of `shard`.
    pub fn new(shard: &EgressShard) -> Self {
        Self::with_key(ShardKey::of(shard), shard)
    }

    /// What the cache keeps of `shard`, whose key is `key` (its strings shared).
    pub fn with_key(key: ShardKey, shard: &EgressShard) -> Self {
        let m = &shard.metadata;
        let boxed = |s: &Option<String>| s.as_deref().map(Box::<str>::from);
        let served = m
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_EGRESS_IPV6))
            .is_some_and(|v| v == LABEL_VALUE_FAMILY_SERVED);
        // Serializing a claim ref cannot fail: every field is a string.
        let claim_ref = shard
            .spec
            .shard_address_ipv6_claim_ref
            .as_ref()
            .and_then(|r| serde_json::to_string(r).ok())
            .map(String::into_boxed_str);
        Self {
            key,
            uid: boxed(&m.uid),
            resource_version: boxed(&m.resource_version),
            deletion_timestamp: m.deletion_timestamp.clone(),
            served,
            address: shard.spec.shard_address_ipv6.as_str().into(),
            claim_ref,
        }
    }

    /// The shard as far as a decision reads it: key, UID, resourceVersion, deletionTimestamp, the
    /// served label, address and claim ref; every other field empty. `None` only if the kept
    /// claim ref does not decode, which one written by [`CachedShard::new`] always does; a
    /// caller then treats the shard as not cached (and never writes from it).
    pub fn shard(&self) -> Option<EgressShard> {
        let claim_ref = match &self.claim_ref {
            Some(json) => Some(serde_json::from_str::<AddressClaimRef>(json).ok()?),
            None => None,
        };
        let mut s = EgressShard::new(
            &self.key.name,
            EgressShardSpec {
                shard_address_ipv6: self.address.to_string(),
                shard_address_ipv6_claim_ref: claim_ref,
                ..Default::default()
            },
        );
        let m = &mut s.metadata;
        m.namespace = (!self.key.namespace.is_empty()).then(|| self.key.namespace.to_string());
        m.uid = self.uid.as_deref().map(str::to_string);
        m.resource_version = self.resource_version.as_deref().map(str::to_string);
        m.deletion_timestamp = self.deletion_timestamp.clone();
        if self.served {
            m.labels = Some(
                [(
                    LABEL_EGRESS_IPV6.to_string(),
                    LABEL_VALUE_FAMILY_SERVED.to_string(),
                )]
                .into(),
            );
        }
        Some(s)
    }

    pub fn key(&self) -> ShardKey {
        self.key.clone()
    }

    /// Whether the shard carries an address and the ref to its claim.
    pub fn is_addressed(&self) -> bool {
        !self.address.is_empty() && self.claim_ref.is_some()
    }

    pub fn resource_version(&self) -> Option<&str> {
        self.resource_version.as_deref()
    }

    /// The bytes this record holds on the heap, besides itself: what the cache pays per shard.
    pub fn heap_bytes(&self) -> usize {
        let len = |s: &Option<Box<str>>| s.as_deref().map_or(0, str::len);
        self.key.namespace.len()
            + self.key.name.len()
            + len(&self.uid)
            + len(&self.resource_version)
            + self.address.len()
            + len(&self.claim_ref)
    }
}

impl Lookup for CachedShard {
    type DynamicType = ();

    fn kind(dt: &()) -> Cow<'_, str> {
        <EgressShard as Resource>::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        <EgressShard as Resource>::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        <EgressShard as Resource>::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        <EgressShard as Resource>::plural(dt)
    }

    fn name(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(&self.key.name))
    }

    fn namespace(&self) -> Option<Cow<'_, str>> {
        (!self.key.namespace.is_empty()).then_some(Cow::Borrowed(&*self.key.namespace))
    }

    // The reflector copies what these return into the key of every entry of its store, where
    // nothing reads them (a key compares by name and namespace); the record has its own.
    fn resource_version(&self) -> Option<Cow<'_, str>> {
        None
    }

    fn uid(&self) -> Option<Cow<'_, str>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use egress_api::shard::{EgressShardStatus, TargetRef};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

    fn claim_ref() -> AddressClaimRef {
        AddressClaimRef {
            api_group: "ipam.miloapis.com".into(),
            kind: "IPClaim".into(),
            project: "p".into(),
            namespace: "ns".into(),
            name: "c".into(),
        }
    }

    /// A shard as a cell has it: labels, annotations, finalizers, managedFields, a status.
    fn shard(annotation_bytes: usize) -> EgressShard {
        let mut s = EgressShard::new(
            "s",
            EgressShardSpec {
                target_ref: TargetRef {
                    kind: "Node".into(),
                    name: "n".into(),
                },
                shard_sid: "fd00::1".into(),
                shard_address_ipv6: "2001:db8::1".into(),
                shard_address_ipv6_claim_ref: Some(claim_ref()),
                drain: Some(false),
                ..Default::default()
            },
        );
        s.metadata.namespace = Some("ns".into());
        s.metadata.uid = Some("u-1".into());
        s.metadata.resource_version = Some("7".into());
        s.metadata.generation = Some(3);
        s.metadata.labels = Some(
            [
                ("l".to_string(), "1".to_string()),
                (LABEL_EGRESS_IPV6.to_string(), "true".to_string()),
            ]
            .into(),
        );
        s.metadata.annotations = Some(
            [(
                "kubectl.kubernetes.io/last-applied-configuration".to_string(),
                "x".repeat(annotation_bytes),
            )]
            .into(),
        );
        s.metadata.finalizers = Some(vec!["f".into()]);
        s.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("kubectl".into()),
            ..Default::default()
        }]);
        s.status = Some(EgressShardStatus {
            shard_sid: "fd00::1".into(),
            ..Default::default()
        });
        s
    }

    #[test]
    fn a_decision_gets_back_every_field_it_reads() {
        let mut original = shard(10);
        original.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        let cached = CachedShard::new(&original);
        let back = cached.shard().unwrap();
        let (m, o) = (&back.metadata, &original.metadata);
        assert_eq!(
            (&m.name, &m.namespace, &m.uid, &m.resource_version),
            (&o.name, &o.namespace, &o.uid, &o.resource_version)
        );
        assert_eq!(m.deletion_timestamp, o.deletion_timestamp);
        assert_eq!(
            m.labels,
            Some([(LABEL_EGRESS_IPV6.to_string(), "true".to_string())].into())
        );
        assert_eq!(back.spec.shard_address_ipv6, "2001:db8::1");
        assert_eq!(back.spec.shard_address_ipv6_claim_ref, Some(claim_ref()));
        assert_eq!(cached.key(), ShardKey::new("ns", "s"));
        assert_eq!(cached.resource_version(), Some("7"));
        assert!(cached.is_addressed());
    }

    #[test]
    fn the_cache_keeps_no_more_than_a_decision_reads() {
        // Guards the cache's size: a record that kept the object (its annotations, another
        // owner's labels, its status, its managedFields) would grow with it.
        let small = CachedShard::new(&shard(10));
        let large = CachedShard::new(&shard(100_000));
        assert_eq!(small.heap_bytes(), large.heap_bytes());
        assert!(small.heap_bytes() < 200, "{}", small.heap_bytes());
        // A new field is a cost paid 100,000 times: it has to be one a decision reads.
        assert!(
            std::mem::size_of::<CachedShard>() <= 128,
            "{}",
            std::mem::size_of::<CachedShard>()
        );
        let back = large.shard().unwrap();
        assert_eq!(back.metadata.annotations, None);
        assert_eq!(back.metadata.managed_fields, None);
        assert_eq!(back.metadata.finalizers, None);
        assert_eq!(back.status, None);
        assert_eq!(back.spec.target_ref, TargetRef::default());
        assert_eq!(back.spec.shard_sid, "");
    }

    #[test]
    fn only_the_served_label_with_true_counts() {
        let mut s = shard(0);
        s.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(LABEL_EGRESS_IPV6.into(), "false".into());
        assert_eq!(CachedShard::new(&s).shard().unwrap().metadata.labels, None);
    }

    #[test]
    fn addressed_means_an_address_and_its_claim_ref() {
        let mut s = shard(0);
        assert!(CachedShard::new(&s).is_addressed());
        s.spec.shard_address_ipv6.clear();
        assert!(
            !CachedShard::new(&s).is_addressed(),
            "a ref without an address"
        );
        s.spec.shard_address_ipv6 = "2001:db8::1".into();
        s.spec.shard_address_ipv6_claim_ref = None;
        assert!(
            !CachedShard::new(&s).is_addressed(),
            "an address without a ref"
        );
    }

    #[test]
    fn the_store_key_carries_name_and_namespace_only() {
        let cached = CachedShard::new(&shard(0));
        let key = cached.to_object_ref(());
        assert_eq!(
            (key.name.as_str(), key.namespace.as_deref()),
            ("s", Some("ns"))
        );
        assert_eq!((key.extra.uid, key.extra.resource_version), (None, None));
    }
}
