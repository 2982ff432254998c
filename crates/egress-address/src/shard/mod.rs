//! Shards as this controller sees them: their key, what they need ([`decide`]), and everything
//! remembered about them between reconciles ([`memory`]). Pure: no I/O.

pub mod cache;
pub mod cached;
pub mod decide;
#[cfg(test)]
pub mod fixture;
pub mod memory;
pub mod watched;

use std::collections::HashSet;
use std::sync::{Arc, LazyLock, Mutex};

use egress_api::shard::EgressShard;

pub use cache::ShardCache;
pub use cached::CachedShard;
pub use memory::{Gone, HandedOver, ShardMemory, Watermark};

/// A shard's namespace and name: the unit of work.
///
/// The strings are shared: the cache, the per-shard memory and the work queue each hold the key
/// of every shard (the queue up to three times while a shard waits), and at 100,000 shards a
/// copy of the strings per holder was megabytes. Keys made by [`ShardKey::interned`] (as
/// [`ShardKey::of`] makes them) also share their namespace with every other shard of it: a cell
/// has few namespaces, and one allocation per shard for the same few strings was a megabyte more.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShardKey {
    pub namespace: Arc<str>,
    pub name: Arc<str>,
}

impl ShardKey {
    pub fn new(namespace: impl Into<Arc<str>>, name: impl Into<Arc<str>>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key of `namespace`/`name`, its namespace shared with every key made here.
    pub fn interned(namespace: &str, name: &str) -> Self {
        Self {
            namespace: intern(namespace),
            name: name.into(),
        }
    }

    pub fn of(shard: &EgressShard) -> Self {
        Self::interned(
            shard.metadata.namespace.as_deref().unwrap_or_default(),
            shard.metadata.name.as_deref().unwrap_or_default(),
        )
    }
}

/// One shared copy of `s`, for strings that a cell repeats on every shard.
///
/// Never emptied: it holds every distinct string ever interned, so it is only for strings of
/// which there are few whatever the shard count (namespaces, a claim ref's group, kind and
/// project), never for names. A namespace deleted stays, a few bytes for the process's life;
/// evicting would cost a scan or a count per key dropped.
pub(crate) fn intern(s: &str) -> Arc<str> {
    static INTERNED: LazyLock<Mutex<HashSet<Arc<str>>>> = LazyLock::new(Mutex::default);
    let mut interned = crate::sync::lock(&INTERNED);
    if let Some(shared) = interned.get(s) {
        return shared.clone();
    }
    let shared: Arc<str> = s.into();
    interned.insert(shared.clone());
    shared
}

impl std::fmt::Display for ShardKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Where a shard stands, as far as its address goes.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ShardState {
    /// Address and ref recorded.
    Addressed,
    /// Waiting: no claim yet, or a claim IPAM has not bound.
    Pending,
    /// IPAM refused, answered unusably, the claim belongs to someone else, or the address is
    /// already carried by another shard.
    Refused,
    /// Addressed without a ref: nothing says which IPAM record holds the address.
    Unattributable,
}

impl ShardState {
    pub const ALL: [ShardState; 4] = [
        ShardState::Addressed,
        ShardState::Pending,
        ShardState::Refused,
        ShardState::Unattributable,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ShardState::Addressed => "addressed",
            ShardState::Pending => "pending",
            ShardState::Refused => "refused",
            ShardState::Unattributable => "unattributable",
        }
    }

    fn index(self) -> usize {
        match self {
            ShardState::Addressed => 0,
            ShardState::Pending => 1,
            ShardState::Refused => 2,
            ShardState::Unattributable => 3,
        }
    }

    /// The state a shard's cached object shows by itself (refusals are only known to a
    /// reconcile).
    pub fn observed(shard: &EgressShard) -> ShardState {
        if decide::is_unattributable(shard) {
            ShardState::Unattributable
        } else if shard.spec.shard_address_ipv6.is_empty() {
            ShardState::Pending
        } else {
            ShardState::Addressed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_one_namespace_share_it_and_nothing_else() {
        let a = ShardKey::interned("cell-ns", "a");
        let b = ShardKey::interned("cell-ns", "b");
        let other = ShardKey::interned("other-ns", "a");
        assert!(Arc::ptr_eq(&a.namespace, &b.namespace));
        assert!(!Arc::ptr_eq(&a.namespace, &other.namespace));
        assert_eq!(a, ShardKey::new("cell-ns", "a"));
        assert_eq!(other, ShardKey::new("other-ns", "a"));
        let mut s = EgressShard::new("a", Default::default());
        s.metadata.namespace = Some("cell-ns".into());
        let of = ShardKey::of(&s);
        assert!(Arc::ptr_eq(&of.namespace, &a.namespace));
        assert_eq!(of, a);
    }
}
