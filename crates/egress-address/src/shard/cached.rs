//! What the shard cache holds per shard: the object as compact JSON, and the few metadata
//! fields a lookup needs.
//!
//! A shard as a cell has it is mostly what the controller never reads: labels and annotations of
//! other owners (kubectl's `last-applied-configuration` repeats the whole object), the status the
//! data plane writes, and `managedFields`. The controller still has to send every field back (its
//! one write is a PUT of the object as read, carrying the resourceVersion it read), so nothing of
//! the object's own can be dropped, but it need not be kept as parsed structures: a decoded
//! `EgressShard` spends about twice its JSON size on string and map headers and some fifty small
//! allocations. The cache keeps one compressed string per shard instead (LZ4: a shard's JSON
//! repeats its keys and, in kubectl's `last-applied-configuration`, much of itself), and a
//! reconcile decodes the shard it works on (a few microseconds, once per pass).
//!
//! Left out of the string: `managedFields` (an update without them leaves the server's record as
//! it is, where an empty list would wipe every manager's ownership) and `status` (the shard's
//! status is a subresource; an update of the shard ignores it, and nothing here reads it).

use std::borrow::Cow;

use egress_api::shard::EgressShard;
use kube::Resource;
use kube::runtime::reflector::Lookup;

use super::ShardKey;

/// One cached shard. Cheap to look up by name; [`CachedShard::shard`] decodes the object.
#[derive(Clone, Debug)]
pub struct CachedShard {
    /// What the cache's lookups use.
    namespace: Box<str>,
    name: Box<str>,
    uid: Option<Box<str>>,
    resource_version: Option<Box<str>>,
    /// The shard carries an address and its claim ref: what a drift pass checks, known without
    /// decoding the body of each of thousands of shards.
    addressed: bool,
    /// The shard as JSON, without `managedFields` and `status`, LZ4-compressed.
    body: Box<[u8]>,
}

impl CachedShard {
    /// What the cache keeps of `shard`.
    pub fn new(mut shard: EgressShard) -> Self {
        trim(&mut shard);
        let m = &shard.metadata;
        let boxed = |s: &Option<String>| s.as_deref().map(Box::<str>::from);
        let (namespace, name) = (
            boxed(&m.namespace).unwrap_or_default(),
            boxed(&m.name).unwrap_or_default(),
        );
        let (uid, resource_version) = (boxed(&m.uid), boxed(&m.resource_version));
        let addressed = !shard.spec.shard_address_ipv6.is_empty()
            && shard.spec.shard_address_ipv6_claim_ref.is_some();
        // Serializing a decoded shard cannot fail: every field is a string, number or map.
        let json = serde_json::to_vec(&shard).unwrap_or_default();
        let body = lz4_flex::compress_prepend_size(&json).into_boxed_slice();
        Self {
            namespace,
            name,
            uid,
            resource_version,
            addressed,
            body,
        }
    }

    /// The shard as cached: every field the cell sent but `managedFields` and `status`. `None`
    /// only if the body does not decode, which a body written by [`CachedShard::new`] always
    /// does; a caller then treats the shard as not cached (and never writes from it).
    pub fn shard(&self) -> Option<EgressShard> {
        let json = lz4_flex::decompress_size_prepended(&self.body).ok()?;
        serde_json::from_slice(&json).ok()
    }

    pub fn key(&self) -> ShardKey {
        ShardKey::new(&*self.namespace, &*self.name)
    }

    /// Whether the shard carries an address and the ref to its claim.
    pub fn is_addressed(&self) -> bool {
        self.addressed
    }

    pub fn resource_version(&self) -> Option<&str> {
        self.resource_version.as_deref()
    }
}

/// Drops what the cache never keeps: `managedFields` and `status` (see the module documentation).
pub fn trim(shard: &mut EgressShard) {
    shard.metadata.managed_fields = None;
    shard.status = None;
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
        Some(Cow::Borrowed(&self.name))
    }

    fn namespace(&self) -> Option<Cow<'_, str>> {
        (!self.namespace.is_empty()).then_some(Cow::Borrowed(&*self.namespace))
    }

    fn resource_version(&self) -> Option<Cow<'_, str>> {
        self.resource_version.as_deref().map(Cow::Borrowed)
    }

    fn uid(&self) -> Option<Cow<'_, str>> {
        self.uid.as_deref().map(Cow::Borrowed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use egress_api::shard::{AddressClaimRef, EgressShardSpec, EgressShardStatus, TargetRef};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

    fn shard() -> EgressShard {
        let mut s = EgressShard::new(
            "s",
            EgressShardSpec {
                target_ref: TargetRef {
                    kind: "Node".into(),
                    name: "n".into(),
                },
                shard_address_ipv6: "2001:db8::1".into(),
                ..Default::default()
            },
        );
        s.metadata.namespace = Some("ns".into());
        s.metadata.uid = Some("u-1".into());
        s.metadata.resource_version = Some("7".into());
        s.metadata.labels = Some([("l".to_string(), "1".to_string())].into());
        s.metadata.annotations = Some(
            [(
                "kubectl.kubernetes.io/last-applied-configuration".to_string(),
                "{\"a\":1}\n".to_string(),
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
    fn every_field_but_managed_fields_and_status_comes_back() {
        let original = shard();
        let cached = CachedShard::new(original.clone());
        let back = cached.shard().unwrap();
        let mut expected = original;
        expected.metadata.managed_fields = None;
        expected.status = None;
        assert_eq!(back, expected);
        assert_eq!(cached.key(), ShardKey::new("ns", "s"));
        assert_eq!(cached.resource_version(), Some("7"));
        assert_eq!(Lookup::uid(&cached).as_deref(), Some("u-1"));
        assert_eq!(Lookup::namespace(&cached).as_deref(), Some("ns"));
    }

    #[test]
    fn addressed_means_an_address_and_its_claim_ref() {
        let mut s = shard();
        assert!(
            !CachedShard::new(s.clone()).is_addressed(),
            "an address without a ref"
        );
        s.spec.shard_address_ipv6_claim_ref = Some(AddressClaimRef {
            api_group: "ipam.miloapis.com".into(),
            kind: "IPClaim".into(),
            project: "p".into(),
            namespace: "ns".into(),
            name: "c".into(),
        });
        assert!(CachedShard::new(s.clone()).is_addressed());
        s.spec.shard_address_ipv6.clear();
        assert!(
            !CachedShard::new(s).is_addressed(),
            "a ref without an address"
        );
    }

    #[test]
    fn an_update_from_the_cache_carries_no_managed_fields_or_status() {
        let json = serde_json::to_value(CachedShard::new(shard()).shard().unwrap()).unwrap();
        assert!(json["metadata"].get("managedFields").is_none(), "{json}");
        assert!(json.get("status").is_none(), "{json}");
        assert_eq!(
            json["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"],
            "{\"a\":1}\n"
        );
    }
}
