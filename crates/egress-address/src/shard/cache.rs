//! The shard cache: what the watch last showed of every shard, by key, and nothing else.
//!
//! Kept here rather than in kube-runtime's reflector store (decision record in
//! docs/architecture.md, "The shard cache"): that store keys each entry by an `ObjectRef` that
//! copies the name and namespace into strings of its own and holds the object behind an `Arc`,
//! and during a relist it builds a second full table beside the first. At 100,000 shards that was
//! about 280 bytes a shard of table, key strings and `Arc` besides the record itself, and twice
//! the cache while the watch relisted after a compaction. Here an entry is the record itself,
//! found by the key it carries; a relist updates entries in place and marks each one it shows, and
//! its end drops the entries it did not show (shards deleted while the watch was down).
//!
//! One writer (the watch task) and many readers; readers get copies of records, never a lock
//! held across an await.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, RwLock};

use super::{CachedShard, ShardKey};
use crate::sync::{read, write};

/// The shard cache; clones share it.
#[derive(Clone, Default)]
pub struct ShardCache {
    inner: Arc<RwLock<Inner>>,
}

#[derive(Default)]
struct Inner {
    entries: HashSet<Entry>,
    /// Counts lists begun: an entry carrying the current one was shown by the list in progress
    /// (or by an event after it).
    list: u32,
}

/// One cached shard, found by its key.
struct Entry {
    shard: CachedShard,
    list: u32,
}

impl Borrow<ShardKey> for Entry {
    fn borrow(&self) -> &ShardKey {
        self.shard.key_ref()
    }
}

impl Hash for Entry {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.shard.key_ref().hash(state);
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.shard.key_ref() == other.shard.key_ref()
    }
}

impl Eq for Entry {}

impl ShardCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// The shard as last seen.
    pub fn get(&self, key: &ShardKey) -> Option<CachedShard> {
        read(&self.inner).entries.get(key).map(|e| e.shard.clone())
    }

    /// The key the cache holds for `key`'s shard, whose strings every holder shares.
    pub fn shared_key(&self, key: &ShardKey) -> Option<ShardKey> {
        read(&self.inner).entries.get(key).map(|e| e.shard.key())
    }

    pub fn len(&self) -> usize {
        read(&self.inner).entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What `pick` takes from each cached shard (in no order), read under one lock: `pick`
    /// must be quick, since the watch waits meanwhile.
    pub fn collect<T>(&self, mut pick: impl FnMut(&CachedShard) -> Option<T>) -> Vec<T> {
        read(&self.inner)
            .entries
            .iter()
            .filter_map(|e| pick(&e.shard))
            .collect()
    }

    /// Every cached key.
    pub fn keys(&self) -> Vec<ShardKey> {
        self.collect(|c| Some(c.key()))
    }

    /// The keys of the cached shards a reconcile has work for by themselves (see
    /// [`CachedShard::needs_work`]).
    pub fn keys_needing_work(&self) -> Vec<ShardKey> {
        self.collect(|c| c.needs_work().then(|| c.key()))
    }

    /// A list begins: what it shows is marked, and [`ShardCache::end_list`] drops the rest.
    pub fn begin_list(&self) {
        let mut inner = write(&self.inner);
        inner.list = inner.list.wrapping_add(1);
    }

    /// Records a shard as listed or changed.
    pub fn put(&self, shard: CachedShard) {
        let mut inner = write(&self.inner);
        let list = inner.list;
        inner.entries.replace(Entry { shard, list });
    }

    /// Forgets a deleted shard.
    pub fn remove(&self, key: &ShardKey) {
        write(&self.inner).entries.remove(key);
    }

    /// The shards the list in progress has not shown (so far): at its end, those deleted while
    /// the watch was down.
    pub fn unlisted(&self) -> Vec<CachedShard> {
        let inner = read(&self.inner);
        inner
            .entries
            .iter()
            .filter(|e| e.list != inner.list)
            .map(|e| e.shard.clone())
            .collect()
    }

    /// The list is complete: drops what it did not show, and gives the keys of the shards it
    /// showed that need work. An addressed, labelled shard needs none: after a restart that is
    /// every shard, and queueing them all would only run as many passes that do nothing (while
    /// they run, a one-thread runtime answers `/ready` late).
    pub fn end_list(&self) -> Vec<ShardKey> {
        let mut inner = write(&self.inner);
        let list = inner.list;
        inner.entries.retain(|e| e.list == list);
        inner
            .entries
            .iter()
            .filter(|e| e.shard.needs_work())
            .map(|e| e.shard.key())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::fixture::shard;

    fn cached(name: &str, address: &str) -> CachedShard {
        CachedShard::new(&shard(name, address))
    }

    fn sorted(mut keys: Vec<ShardKey>) -> Vec<String> {
        keys.sort();
        keys.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_relist_keeps_what_it_shows_and_drops_what_it_does_not() {
        let cache = ShardCache::new();
        cache.begin_list();
        cache.put(cached("a", ""));
        cache.put(cached("b", ""));
        assert_eq!(sorted(cache.end_list()), ["ns/a", "ns/b"]);

        // The watch broke; b was deleted meanwhile and c created.
        cache.begin_list();
        cache.put(cached("a", "2001:db8::1"));
        cache.put(cached("c", ""));
        // Addressed and labelled: listed and kept, but no pass is owed.
        let mut done = shard("d", "2001:db8::4");
        done.metadata.labels = Some(
            [(
                egress_api::shard::LABEL_EGRESS_IPV6.to_string(),
                egress_api::shard::LABEL_VALUE_FAMILY_SERVED.to_string(),
            )]
            .into(),
        );
        cache.put(CachedShard::new(&done));
        let unlisted: Vec<_> = cache.unlisted().iter().map(|c| c.key()).collect();
        assert_eq!(sorted(unlisted), ["ns/b"]);
        assert!(
            cache.get(&ShardKey::new("ns", "b")).is_some(),
            "kept until the list is complete"
        );
        assert_eq!(sorted(cache.end_list()), ["ns/a", "ns/c"]);
        assert!(cache.get(&ShardKey::new("ns", "b")).is_none());
        assert!(cache.get(&ShardKey::new("ns", "d")).is_some());
        assert_eq!(sorted(cache.keys_needing_work()), ["ns/a", "ns/c"]);
        assert_eq!(cache.keys().len(), 3);
        assert_eq!(
            cache.get(&ShardKey::new("ns", "a")).unwrap().address(),
            Some("2001:db8::1".parse().unwrap()),
            "a listed shard replaces what was cached"
        );
    }

    #[test]
    fn events_replace_and_remove_by_key_and_keys_are_shared() {
        let cache = ShardCache::new();
        cache.put(cached("a", ""));
        cache.put(cached("a", "2001:db8::1"));
        assert_eq!(cache.len(), 1);
        let key = ShardKey::new("ns", "a");
        let shared = cache.shared_key(&key).unwrap();
        assert_eq!(shared, key);
        assert!(Arc::ptr_eq(
            &shared.name,
            &cache.get(&key).unwrap().key().name
        ));
        assert_eq!(
            cache.collect(|c| c.address()),
            ["2001:db8::1".parse::<std::net::Ipv6Addr>().unwrap()]
        );
        cache.remove(&key);
        assert!(cache.is_empty());
        assert_eq!(cache.shared_key(&key), None);
    }
}
