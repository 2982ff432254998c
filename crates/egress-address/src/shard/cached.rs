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
use std::collections::HashSet;
use std::fmt::Write as _;
use std::net::Ipv6Addr;
use std::sync::{Arc, LazyLock, Mutex};

use egress_api::shard::{
    AddressClaimRef, EgressShard, EgressShardSpec, LABEL_EGRESS_IPV6, LABEL_VALUE_FAMILY_SERVED,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::decide::Decision;
use super::{ShardKey, ShardState, intern};

/// One cached shard. Cheap to look up by name; [`CachedShard::shard`] gives the fields a
/// decision reads.
///
/// Paid 100,000 times, so packed: the UID, resourceVersion and address are kept as the 16, 8 and
/// 16 bytes they are when their text is exactly what those bytes print as (a lowercase UUID, a
/// decimal without leading zeros, an address as `Ipv6Addr` prints it), which is how the API
/// server and this controller write them. Any other text is kept as written, in [`Rare`]: events
/// and drift quote it, and a resourceVersion is a precondition the API server compares as text.
#[derive(Clone)]
pub struct CachedShard {
    /// Shared with the per-shard memory and the queue (see [`ShardKey`]).
    key: ShardKey,
    claim_ref: Option<ClaimRef>,
    /// Boxed, so that the shards without a deletionTimestamp or an odd text pay one pointer.
    rare: Option<Box<Rare>>,
    /// Each of these three means something only if its `*_packed` flag is set.
    resource_version: u64,
    /// Bytes rather than a `u128`, whose alignment would pad the record.
    uid: [u8; 16],
    address: Ipv6Addr,
    resource_version_packed: bool,
    uid_packed: bool,
    address_packed: bool,
    /// The served label (`network.datumapis.com/egress-ipv6: "true"`) is set; no other label
    /// decides anything.
    served: bool,
}

/// What a [`CachedShard`] keeps only when it has it.
#[derive(Clone, Debug, Default)]
struct Rare {
    deletion_timestamp: Option<Time>,
    uid: Option<Box<str>>,
    resource_version: Option<Box<str>>,
    /// `spec.shardAddressIPv6` as written; never empty (empty is no address).
    address: Option<Box<str>>,
}

impl Rare {
    fn is_empty(&self) -> bool {
        self.deletion_timestamp.is_none()
            && self.uid.is_none()
            && self.resource_version.is_none()
            && self.address.is_none()
    }
}

/// `spec.shardAddressIPv6ClaimRef`: its name, and the four fields every shard of a cell repeats.
#[derive(Clone, Debug)]
struct ClaimRef {
    scope: Arc<ClaimScope>,
    name: Box<str>,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ClaimScope {
    api_group: Arc<str>,
    kind: Arc<str>,
    project: Arc<str>,
    namespace: Arc<str>,
}

impl ClaimRef {
    fn new(r: &AddressClaimRef) -> Self {
        // Interned as a whole, so that a shard pays one pointer for the four; never emptied,
        // like [`intern`], which is fine for the few combinations a cell has. The strings are
        // interned first so that finding the scope allocates nothing.
        static SCOPES: LazyLock<Mutex<HashSet<Arc<ClaimScope>>>> = LazyLock::new(Mutex::default);
        let wanted = ClaimScope {
            api_group: intern(&r.api_group),
            kind: intern(&r.kind),
            project: intern(&r.project),
            namespace: intern(&r.namespace),
        };
        let mut scopes = crate::sync::lock(&SCOPES);
        let scope = match scopes.get(&wanted) {
            Some(scope) => scope.clone(),
            None => {
                let scope = Arc::new(wanted);
                scopes.insert(scope.clone());
                scope
            }
        };
        Self {
            scope,
            name: r.name.as_str().into(),
        }
    }

    fn to_ref(&self) -> AddressClaimRef {
        let s = &*self.scope;
        AddressClaimRef {
            api_group: s.api_group.to_string(),
            kind: s.kind.to_string(),
            project: s.project.to_string(),
            namespace: s.namespace.to_string(),
            name: self.name.to_string(),
        }
    }
}

/// The UUID `text` is, if it is written exactly as [`uuid_text`] writes it.
fn pack_uuid(text: &str) -> Option<[u8; 16]> {
    const DASHES: [usize; 4] = [8, 13, 18, 23];
    let t = text.as_bytes();
    if t.len() != 36 || DASHES.iter().any(|&i| t[i] != b'-') {
        return None;
    }
    let mut digits = t
        .iter()
        .enumerate()
        .filter(|(i, _)| !DASHES.contains(i))
        .map(|(_, &c)| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        });
    let mut uuid = [0; 16];
    for byte in &mut uuid {
        *byte = (digits.next()?? << 4) | digits.next()??;
    }
    Some(uuid)
}

fn uuid_text(uuid: &[u8; 16]) -> String {
    let mut text = String::with_capacity(36);
    for (i, byte) in uuid.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            text.push('-');
        }
        // Writing to a String cannot fail.
        let _ = write!(text, "{byte:02x}");
    }
    text
}

/// The number `text` is, if it is written exactly as `u64` prints it.
fn pack_decimal(text: &str) -> Option<u64> {
    let canonical =
        text.bytes().all(|c| c.is_ascii_digit()) && (text == "0" || !text.starts_with('0'));
    canonical.then(|| text.parse().ok()).flatten()
}

/// The address `text` is, if it is written exactly as `Ipv6Addr` prints it.
fn pack_address(text: &str) -> Option<Ipv6Addr> {
    text.parse::<Ipv6Addr>()
        .ok()
        .filter(|a| a.to_string() == text)
}

/// What a [`CachedShard`] is made of, as decoded: [`CachedShard::from_parts`].
pub struct Parts<'a> {
    /// The shard's namespace and name.
    pub key: ShardKey,
    pub uid: Option<&'a str>,
    pub resource_version: Option<&'a str>,
    pub deletion_timestamp: Option<Time>,
    /// The served label (`network.datumapis.com/egress-ipv6: "true"`) is set.
    pub served: bool,
    /// `spec.shardAddressIPv6`; empty when the shard has none.
    pub address: &'a str,
    pub claim_ref: Option<&'a AddressClaimRef>,
}

impl CachedShard {
    /// What the cache keeps of `shard`.
    pub fn new(shard: &EgressShard) -> Self {
        Self::with_key(ShardKey::of(shard), shard)
    }

    /// What the cache keeps of `shard`, whose key is `key` (its strings shared).
    pub fn with_key(key: ShardKey, shard: &EgressShard) -> Self {
        let m = &shard.metadata;
        Self::from_parts(Parts {
            key,
            uid: m.uid.as_deref(),
            resource_version: m.resource_version.as_deref(),
            deletion_timestamp: m.deletion_timestamp.clone(),
            served: m
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_EGRESS_IPV6))
                .is_some_and(|v| v == LABEL_VALUE_FAMILY_SERVED),
            address: &shard.spec.shard_address_ipv6,
            claim_ref: shard.spec.shard_address_ipv6_claim_ref.as_ref(),
        })
    }

    /// The record of a shard read field by field (the watch's decoder has no `EgressShard`):
    /// the one place a record is packed, so that one decoded by the watch and one made from a
    /// whole shard are the same.
    pub fn from_parts(parts: Parts<'_>) -> Self {
        let Parts {
            key,
            uid,
            resource_version,
            deletion_timestamp,
            served,
            address,
            claim_ref,
        } = parts;
        // Each: absent, packed (`Ok`) or kept as written (`Err`).
        let uid = uid.map(|t| pack_uuid(t).ok_or(t));
        let resource_version = resource_version.map(|t| pack_decimal(t).ok_or(t));
        let address = Some(address)
            .filter(|t| !t.is_empty())
            .map(|t| pack_address(t).ok_or(t));
        fn text<T>(v: Option<Result<T, &str>>) -> Option<Box<str>> {
            v.and_then(Result::err).map(Box::from)
        }
        let rare = Rare {
            deletion_timestamp,
            uid: text(uid),
            resource_version: text(resource_version),
            address: text(address),
        };
        Self {
            key,
            claim_ref: claim_ref.map(ClaimRef::new),
            rare: (!rare.is_empty()).then(|| Box::new(rare)),
            resource_version: resource_version.and_then(Result::ok).unwrap_or_default(),
            uid: uid.and_then(Result::ok).unwrap_or_default(),
            address: address
                .and_then(Result::ok)
                .unwrap_or(Ipv6Addr::UNSPECIFIED),
            resource_version_packed: matches!(resource_version, Some(Ok(_))),
            uid_packed: matches!(uid, Some(Ok(_))),
            address_packed: matches!(address, Some(Ok(_))),
            served,
        }
    }

    /// The record with `key` for its own: an equal key whose strings the cache, the memory and
    /// the queue already share, so the copy the record was decoded with is dropped.
    pub fn with_shared_key(mut self, key: ShardKey) -> Self {
        debug_assert_eq!(key, self.key, "a record re-keyed as another shard");
        self.key = key;
        self
    }

    fn rare(&self) -> Option<&Rare> {
        self.rare.as_deref()
    }

    /// `metadata.uid` as written.
    fn uid_text(&self) -> Option<Cow<'_, str>> {
        match self.rare().and_then(|r| r.uid.as_deref()) {
            Some(text) => Some(Cow::Borrowed(text)),
            None => self.uid_packed.then(|| uuid_text(&self.uid).into()),
        }
    }

    /// `spec.shardAddressIPv6` as written; empty when the shard has none.
    fn address_text(&self) -> Cow<'_, str> {
        match self.rare().and_then(|r| r.address.as_deref()) {
            Some(text) => Cow::Borrowed(text),
            None if self.address_packed => self.address.to_string().into(),
            None => Cow::Borrowed(""),
        }
    }

    /// The shard as far as a decision reads it: key, UID, resourceVersion, deletionTimestamp, the
    /// served label, address and claim ref; every other field empty.
    pub fn shard(&self) -> EgressShard {
        let mut s = EgressShard::new(
            &self.key.name,
            EgressShardSpec {
                shard_address_ipv6: self.address_text().into_owned(),
                shard_address_ipv6_claim_ref: self.claim_ref.as_ref().map(ClaimRef::to_ref),
                ..Default::default()
            },
        );
        let m = &mut s.metadata;
        m.namespace = (!self.key.namespace.is_empty()).then(|| self.key.namespace.to_string());
        m.uid = self.uid_text().map(Cow::into_owned);
        m.resource_version = self.resource_version().map(Cow::into_owned);
        m.deletion_timestamp = self.rare().and_then(|r| r.deletion_timestamp.clone());
        if self.served {
            m.labels = Some(
                [(
                    LABEL_EGRESS_IPV6.to_string(),
                    LABEL_VALUE_FAMILY_SERVED.to_string(),
                )]
                .into(),
            );
        }
        s
    }

    pub fn key(&self) -> ShardKey {
        self.key.clone()
    }

    /// The key, borrowed: what the cache finds the record by.
    pub fn key_ref(&self) -> &ShardKey {
        &self.key
    }

    /// The shard's UID, if it has one.
    pub fn uid(&self) -> Option<String> {
        self.uid_text().map(Cow::into_owned)
    }

    /// The address the shard carries, if it carries one that reads as an IPv6 address.
    pub fn address(&self) -> Option<Ipv6Addr> {
        if self.address_packed {
            return Some(self.address);
        }
        self.rare()?.address.as_deref()?.parse().ok()
    }

    /// Whether the shard carries an address and the ref to its claim.
    pub fn is_addressed(&self) -> bool {
        self.carries_address() && self.claim_ref.is_some()
    }

    /// The state the record shows by itself, as [`ShardState::observed`] reads it from the whole
    /// shard: the watch records a listed shard from this, without making its `EgressShard` view.
    pub fn observed_state(&self) -> ShardState {
        match (self.carries_address(), self.claim_ref.is_some()) {
            (false, _) => ShardState::Pending,
            (true, false) => ShardState::Unattributable,
            (true, true) => ShardState::Addressed,
        }
    }

    /// What the shard needs, as [`decide`](super::decide::decide) reads it from the whole
    /// shard: the watch asks this of every listed and changed shard, without making its
    /// `EgressShard` view.
    pub fn decision(&self) -> Decision {
        if self.rare().is_some_and(|r| r.deletion_timestamp.is_some()) {
            Decision::Skip
        } else if !self.carries_address() {
            Decision::Claim
        } else if self.served {
            Decision::Nothing
        } else {
            Decision::MarkServed
        }
    }

    /// Whether a reconcile has anything to do for the shard by itself (pending releases aside,
    /// which are queued by their deletion).
    pub fn needs_work(&self) -> bool {
        self.decision() != Decision::Nothing
    }

    /// Whether `spec.shardAddressIPv6` is set, whatever it reads as.
    fn carries_address(&self) -> bool {
        self.address_packed || self.rare().is_some_and(|r| r.address.is_some())
    }

    /// `metadata.resourceVersion` as written.
    pub fn resource_version(&self) -> Option<Cow<'_, str>> {
        match self.rare().and_then(|r| r.resource_version.as_deref()) {
            Some(text) => Some(Cow::Borrowed(text)),
            None => self
                .resource_version_packed
                .then(|| self.resource_version.to_string().into()),
        }
    }

    /// The bytes this record alone holds on the heap, besides itself: what the cache pays per
    /// shard, allocator rounding aside. What is interned (the namespace, a claim ref's scope) is
    /// shared by every shard and not counted.
    pub fn heap_bytes(&self) -> usize {
        let len = |s: &Option<Box<str>>| s.as_deref().map_or(0, str::len);
        // An `Arc<str>` keeps its two counts before the text.
        let name = 2 * size_of::<usize>() + self.key.name.len();
        let claim_name = self.claim_ref.as_ref().map_or(0, |c| c.name.len());
        let rare = self.rare().map_or(0, |r| {
            size_of::<Rare>() + len(&r.uid) + len(&r.resource_version) + len(&r.address)
        });
        name + claim_name + rare
    }
}

impl std::fmt::Debug for CachedShard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedShard")
            .field("key", &self.key)
            .field("uid", &self.uid_text())
            .field("resource_version", &self.resource_version())
            .field(
                "deletion_timestamp",
                &self.rare().and_then(|r| r.deletion_timestamp.as_ref()),
            )
            .field("served", &self.served)
            .field("address", &self.address_text())
            .field("claim_ref", &self.claim_ref)
            .finish()
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
    fn the_record_shows_the_state_the_whole_shard_shows() {
        let with = |address: &str, claim_ref: bool| {
            let mut s = shard(0);
            s.spec.shard_address_ipv6 = address.into();
            s.spec.shard_address_ipv6_claim_ref = claim_ref.then(self::claim_ref);
            s
        };
        for (address, claim_ref, state) in [
            ("", false, ShardState::Pending),
            ("", true, ShardState::Pending),
            ("2001:db8::1", true, ShardState::Addressed),
            ("2001:db8::1", false, ShardState::Unattributable),
            // Kept as written, not packed: still an address set.
            ("2001:DB8::1", true, ShardState::Addressed),
            ("not an address", false, ShardState::Unattributable),
        ] {
            let s = with(address, claim_ref);
            assert_eq!(ShardState::observed(&s), state, "{address:?} {claim_ref}");
            assert_eq!(
                CachedShard::new(&s).observed_state(),
                state,
                "{address:?} {claim_ref}"
            );
        }
    }

    #[test]
    fn the_record_needs_what_the_whole_shard_needs() {
        let mut cases = Vec::new();
        for address in ["", "2001:db8::1", "2001:DB8::1", "not an address"] {
            for served in [false, true] {
                for deleting in [false, true] {
                    let mut s = shard(0);
                    s.spec.shard_address_ipv6 = address.into();
                    if !served {
                        s.metadata.labels = None;
                    }
                    if deleting {
                        s.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
                    }
                    cases.push(s);
                }
            }
        }
        let mut seen = HashSet::new();
        for s in &cases {
            let wanted = crate::shard::decide::decide(s);
            let record = CachedShard::new(s);
            assert_eq!(record.decision(), wanted, "{:?}", s.metadata);
            assert_eq!(record.needs_work(), wanted != Decision::Nothing);
            seen.insert(format!("{wanted:?}"));
        }
        assert_eq!(seen.len(), 4, "every decision met: {seen:?}");
    }

    #[test]
    fn a_decision_gets_back_every_field_it_reads() {
        let mut original = shard(10);
        original.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        let cached = CachedShard::new(&original);
        let back = cached.shard();
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
        assert_eq!(cached.resource_version().as_deref(), Some("7"));
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
            std::mem::size_of::<CachedShard>() <= 112,
            "{}",
            std::mem::size_of::<CachedShard>()
        );
        let back = large.shard();
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
        assert_eq!(CachedShard::new(&s).shard().metadata.labels, None);
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

    /// Asserts that the cache gives back `s`'s UID, resourceVersion and address exactly as
    /// written; whether it packed every one of them.
    fn packs(s: &EgressShard) -> bool {
        let cached = CachedShard::new(s);
        let back = cached.shard();
        let m = &s.metadata;
        assert_eq!(back.metadata.uid, m.uid);
        assert_eq!(back.metadata.resource_version, m.resource_version);
        assert_eq!(
            cached.resource_version().as_deref(),
            m.resource_version.as_deref()
        );
        assert_eq!(back.spec.shard_address_ipv6, s.spec.shard_address_ipv6);
        cached.rare.is_none()
    }

    #[test]
    fn a_shard_as_the_api_server_writes_it_is_packed_whole() {
        let mut s = shard(0);
        s.metadata.name = Some("egress-shard-node-a1b2c3".into());
        s.metadata.uid = Some("0b7f3a52-9c1e-4d2a-8f6b-3e5d7c9a1b24".into());
        s.metadata.resource_version = Some("4817263".into());
        s.spec.shard_address_ipv6 = "2001:db8:0:1::2a".into();
        let mut r = claim_ref();
        r.name = "egress-shard-node-a1b2c3-ipv6-0123456789abcdef0123".into();
        s.spec.shard_address_ipv6_claim_ref = Some(r.clone());
        assert!(packs(&s));
        let cached = CachedShard::new(&s);
        assert_eq!(cached.shard().spec.shard_address_ipv6_claim_ref, Some(r));
        assert!(cached.is_addressed());
        // The name (after its `Arc` counts) and the claim's name: nothing else is the shard's own.
        assert_eq!(cached.heap_bytes(), 16 + 24 + 50);
    }

    #[test]
    fn a_uid_comes_back_as_written() {
        let mut s = shard(0);
        for uid in [
            "0b7f3a52-9c1e-4d2a-8f6b-3e5d7c9a1b24",
            "00000000-0000-0000-0000-000000000000",
            "ffffffff-ffff-ffff-ffff-ffffffffffff",
        ] {
            s.metadata.uid = Some(uid.into());
            assert!(packs(&s), "{uid}");
        }
        for uid in [
            "0B7F3A52-9C1E-4D2A-8F6B-3E5D7C9A1B24",
            "0b7f3a52-9c1e-4d2a-8f6b-3e5d7c9a1B24",
            "{0b7f3a52-9c1e-4d2a-8f6b-3e5d7c9a1b24}",
            "0b7f3a529c1e4d2a8f6b3e5d7c9a1b24",
            "0b7f3a52-9c1e-4d2a-8f6b-3e5d7c9a1b2",
            "0b7f3a52-9c1e-4d2a-8f6b-3e5d7c9a1b2g",
            "0b7f3a52+9c1e-4d2a-8f6b-3e5d7c9a1b24",
            "0b7f3a5-29c1e-4d2a-8f6b-3e5d7c9a1b24",
            "u-1",
            "",
        ] {
            s.metadata.uid = Some(uid.into());
            assert!(!packs(&s), "{uid}");
        }
        s.metadata.uid = None;
        s.metadata.resource_version = None;
        assert!(packs(&s), "nothing to keep");
    }

    #[test]
    fn a_resource_version_comes_back_as_written() {
        let mut s = shard(0);
        s.metadata.uid = None;
        for rv in ["0", "7", "4817263", "18446744073709551615"] {
            s.metadata.resource_version = Some(rv.into());
            assert!(packs(&s), "{rv}");
        }
        for rv in [
            "007",
            "00",
            "+7",
            "-1",
            " 7",
            "7 ",
            "1e3",
            "18446744073709551616",
            "abc",
            "",
        ] {
            s.metadata.resource_version = Some(rv.into());
            assert!(!packs(&s), "{rv}");
        }
    }

    #[test]
    fn an_address_comes_back_as_written() {
        let mut s = shard(0);
        s.metadata.uid = None;
        for address in [
            "2001:db8::1",
            "2001:db8:0:1::2a",
            "::",
            "::ffff:192.0.2.1",
            "",
        ] {
            s.spec.shard_address_ipv6 = address.into();
            assert!(packs(&s), "{address}");
        }
        for address in [
            "2001:DB8::1",
            "2001:0db8::1",
            "2001:db8:0:0:0:0:0:1",
            "::ffff:c000:201",
            "0::0",
            " 2001:db8::1",
            "2001:db8::1%eth0",
            "192.0.2.1",
            "not an address",
        ] {
            s.spec.shard_address_ipv6 = address.into();
            assert!(!packs(&s), "{address}");
            assert!(CachedShard::new(&s).is_addressed(), "{address}");
        }
    }

    #[test]
    fn claim_refs_share_all_but_their_name() {
        let mut s = shard(0);
        let a = CachedShard::new(&s);
        s.spec.shard_address_ipv6_claim_ref.as_mut().unwrap().name = "other".into();
        let b = CachedShard::new(&s);
        s.spec
            .shard_address_ipv6_claim_ref
            .as_mut()
            .unwrap()
            .project = "q".into();
        let c = CachedShard::new(&s);
        let scope = |c: &CachedShard| c.claim_ref.as_ref().unwrap().scope.clone();
        assert!(Arc::ptr_eq(&scope(&a), &scope(&b)));
        assert!(!Arc::ptr_eq(&scope(&a), &scope(&c)));
        assert_eq!(
            c.shard().spec.shard_address_ipv6_claim_ref,
            s.spec.shard_address_ipv6_claim_ref
        );
        assert_eq!(
            a.shard().spec.shard_address_ipv6_claim_ref,
            Some(claim_ref())
        );
    }
}
