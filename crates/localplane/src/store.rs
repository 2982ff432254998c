//! A plane's objects, its resourceVersion counter and its bounded watch history.
//!
//! Objects live in one ordered map per kind, keyed by (namespace, name), so gets are a lookup and
//! namespace lists and `continue` pages are range scans. All writes go through a [`Txn`], which
//! records an undo log and buffers watch events until commit: a hook that fails, or a dry run,
//! leaves no trace.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::iter::Peekable;
use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::hooks::{PlaneTxn, ResourceKey};
use crate::meta;
use crate::resources::Registry;

/// (namespace, name); the namespace is `""` for cluster-scoped kinds.
pub type ObjKey = (String, String);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as every watcher of the plane sees it.
#[derive(Debug)]
pub struct WatchEvent {
    pub rv: u64,
    pub res: ResourceKey,
    pub etype: EventType,
    pub obj: Arc<Value>,
    /// The state before a MODIFIED or DELETED: a selector watch turns "stopped matching" into
    /// a DELETED of the state it last saw, and a list as of an earlier resourceVersion is
    /// rebuilt from it.
    pub prev: Option<Arc<Value>>,
}

/// How long history is kept for lists at an earlier resourceVersion (`continue` pages, `Exact`
/// reads), whatever the watch window: the apiserver's etcd compaction interval.
const SNAPSHOT_RETENTION: Duration = Duration::from_secs(300);

pub struct Store {
    rv: u64,
    objects: HashMap<ResourceKey, BTreeMap<ObjKey, Arc<Value>>>,
    history: VecDeque<Arc<WatchEvent>>,
    /// When each event in `history` was committed.
    history_times: VecDeque<Instant>,
    /// How many events a watch can resume over.
    history_cap: usize,
    /// The newest resourceVersion whose event is outside the watch window; a watch from an
    /// older version would miss it and gets 410 Expired.
    compacted_through: u64,
    /// The newest resourceVersion whose event is gone altogether: no list can be read as of an
    /// older one.
    snapshot_floor: u64,
    tx: broadcast::Sender<Arc<WatchEvent>>,
}

impl Store {
    pub fn new(history_cap: usize) -> Self {
        let (tx, _) = broadcast::channel(65536);
        Store {
            rv: 1,
            objects: HashMap::new(),
            history: VecDeque::new(),
            history_times: VecDeque::new(),
            history_cap: history_cap.max(1),
            compacted_through: 0,
            snapshot_floor: 0,
            tx,
        }
    }

    pub fn rv(&self) -> u64 {
        self.rv
    }

    pub fn compacted_through(&self) -> u64 {
        self.compacted_through
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<WatchEvent>> {
        self.tx.subscribe()
    }

    /// Drops the history before the newest change, as etcd's compaction to its current revision
    /// does: it keeps that revision, and a watch starts after its resourceVersion, so a watch
    /// from just before the newest change still replays it; one resumed from any older
    /// resourceVersion gets 410, and so does a list as of one.
    pub fn compact(&mut self) {
        let newest = self.rv;
        let keep = self.history.iter().filter(|e| e.rv == newest).count();
        let drop = self.history.len() - keep;
        self.history.drain(..drop);
        self.history_times.drain(..drop);
        let floor = if keep > 0 { newest - 1 } else { newest };
        self.compacted_through = self.compacted_through.max(floor);
        // A read as of an older revision than the one kept is compacted away, as in etcd.
        self.snapshot_floor = self.snapshot_floor.max(newest);
    }

    /// Keeps the watch window at `history_cap` events, and every event for as long as a
    /// snapshot read may need it.
    fn trim_history(&mut self) {
        let now = Instant::now();
        while self.history.len() > self.history_cap
            && self
                .history_times
                .front()
                .is_some_and(|t| now.duration_since(*t) > SNAPSHOT_RETENTION)
        {
            self.history_times.pop_front();
            if let Some(e) = self.history.pop_front() {
                self.snapshot_floor = e.rv;
            }
        }
        if self.history.len() > self.history_cap {
            let outside = self.history.len() - self.history_cap - 1;
            self.compacted_through = self.compacted_through.max(self.history[outside].rv);
        }
        // A watch from just before the oldest readable revision still replays it while its
        // change is kept.
        let floor_kept = self
            .history
            .front()
            .is_some_and(|e| e.rv == self.snapshot_floor);
        let watch_floor = if floor_kept {
            self.snapshot_floor.saturating_sub(1)
        } else {
            self.snapshot_floor
        };
        self.compacted_through = self.compacted_through.max(watch_floor);
    }

    /// Objects of a kind as they were at resourceVersion `at` (in key order, optionally within
    /// one namespace and after a key): the current state with the changes since undone. `None`
    /// when history no longer reaches back that far.
    pub fn range_at<'a>(
        &'a self,
        res: &ResourceKey,
        ns: Option<&str>,
        after: Option<&ObjKey>,
        at: u64,
    ) -> Option<Box<dyn Iterator<Item = (ObjKey, Arc<Value>)> + 'a>> {
        if at >= self.rv {
            return Some(Box::new(
                self.range(res, ns, after)
                    .map(|(k, v)| (k.clone(), v.clone())),
            ));
        }
        let then = self.changed_since(res, ns, after, at)?;
        Some(Box::new(AsOf {
            now: self.range(res, ns, after).peekable(),
            then: then.into_iter().peekable(),
        }))
    }

    /// How many objects [`range_at`](Self::range_at) would give, counted without rebuilding
    /// them: the objects now, less those created since `at`, plus those deleted since. A
    /// continue page's `remainingItemCount` is this, once per page; rebuilding the rest of the
    /// snapshot for it made every page of a long list cost the whole list again (as soon as
    /// anything at all was written after its first page, a client's own Lease renewal
    /// included), which etcd, counting a range at a revision, does not.
    pub fn count_at(
        &self,
        res: &ResourceKey,
        ns: Option<&str>,
        after: Option<&ObjKey>,
        at: u64,
    ) -> Option<usize> {
        let now = self.range(res, ns, after).count();
        if at >= self.rv {
            return Some(now);
        }
        let exists_now = |key: &ObjKey| self.objects.get(res).is_some_and(|m| m.contains_key(key));
        let changed = self.changed_since(res, ns, after, at)?;
        let (mut gained, mut lost) = (0, 0);
        for (key, was) in &changed {
            match (was.is_some(), exists_now(key)) {
                (true, false) => gained += 1,
                (false, true) => lost += 1,
                _ => {}
            }
        }
        Some(now + gained - lost)
    }

    /// What each object of the range that changed after `at` was at `at` (`None`: it did not
    /// exist yet), told by the first change after `at`. `None` when history no longer reaches
    /// back that far.
    fn changed_since(
        &self,
        res: &ResourceKey,
        ns: Option<&str>,
        after: Option<&ObjKey>,
        at: u64,
    ) -> Option<BTreeMap<ObjKey, Option<Arc<Value>>>> {
        if at < self.snapshot_floor {
            return None;
        }
        let mut then: BTreeMap<ObjKey, Option<Arc<Value>>> = BTreeMap::new();
        for e in self.history_after(at).filter(|e| e.res == *res) {
            let key = key_of(&e.obj);
            if ns.is_some_and(|n| n != key.0) || after.is_some_and(|a| key <= *a) {
                continue;
            }
            then.entry(key).or_insert_with(|| match e.etype {
                EventType::Added => None,
                EventType::Modified | EventType::Deleted => e.prev.clone(),
            });
        }
        Some(then)
    }

    pub fn history_after(&self, rv: u64) -> impl Iterator<Item = &Arc<WatchEvent>> {
        // History is ordered by rv, so a binary search finds the first event to replay.
        let start = self.history.partition_point(|e| e.rv <= rv);
        self.history.range(start..)
    }

    pub fn get(&self, res: &ResourceKey, ns: &str, name: &str) -> Option<&Arc<Value>> {
        self.objects
            .get(res)?
            .get(&(ns.to_string(), name.to_string()))
    }

    /// Objects of a kind, in key order, optionally within one namespace and after a key.
    pub fn range<'a>(
        &'a self,
        res: &ResourceKey,
        ns: Option<&str>,
        after: Option<&ObjKey>,
    ) -> Box<dyn Iterator<Item = (&'a ObjKey, &'a Arc<Value>)> + 'a> {
        let Some(m) = self.objects.get(res) else {
            return Box::new(std::iter::empty());
        };
        let lower = match after {
            Some(k) => Bound::Excluded(k.clone()),
            None => Bound::Included((ns.unwrap_or("").to_string(), String::new())),
        };
        let it = m.range((lower, Bound::Unbounded));
        match ns {
            Some(ns) => {
                let ns = ns.to_string();
                Box::new(it.take_while(move |(k, _)| k.0 == ns))
            }
            None => Box::new(it),
        }
    }

    fn namespace_is_empty(&self, ns: &str) -> bool {
        self.objects
            .iter()
            .filter(|(k, _)| !(k.group.is_empty() && k.plural == "namespaces"))
            .all(|(_, m)| {
                m.range((ns.to_string(), String::new())..)
                    .next()
                    .is_none_or(|(k, _)| k.0 != ns)
            })
    }
}

/// Two key-ordered streams merged: the current objects, overridden by what changed since.
struct AsOf<'a, I: Iterator<Item = (&'a ObjKey, &'a Arc<Value>)>> {
    now: Peekable<I>,
    then: Peekable<std::collections::btree_map::IntoIter<ObjKey, Option<Arc<Value>>>>,
}

impl<'a, I: Iterator<Item = (&'a ObjKey, &'a Arc<Value>)>> Iterator for AsOf<'a, I> {
    type Item = (ObjKey, Arc<Value>);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let take_then = match (self.now.peek(), self.then.peek()) {
                (None, None) => return None,
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (Some((k, _)), Some((t, _))) => t <= *k,
            };
            if !take_then {
                let (k, v) = self.now.next().expect("peeked");
                return Some((k.clone(), v.clone()));
            }
            let (key, was) = self.then.next().expect("peeked");
            if self.now.peek().is_some_and(|(k, _)| **k == key) {
                self.now.next();
            }
            if let Some(v) = was {
                return Some((key, v));
            }
        }
    }
}

/// A write transaction over a plane's store. Dropped without [`Txn::commit`], it rolls back.
pub struct Txn<'a> {
    pub store: &'a mut Store,
    pub registry: &'a Registry,
    undo: Vec<(ResourceKey, ObjKey, Option<Arc<Value>>)>,
    events: Vec<Arc<WatchEvent>>,
    committed: bool,
    /// The plane's resourceVersion before this transaction, restored if it rolls back: a write
    /// nobody saw (a dry run, a refused hook) leaves no gap.
    start_rv: u64,
    /// Run once this transaction has committed (its events sent), in order; dropped with it.
    after_commit: Vec<Box<dyn FnOnce() + Send>>,
}

/// Where an object is stored: its namespace and name.
pub(crate) fn key_of(obj: &Value) -> ObjKey {
    (
        meta::str_at(obj, "/metadata/namespace").to_string(),
        meta::str_at(obj, "/metadata/name").to_string(),
    )
}

pub fn namespaces_key() -> ResourceKey {
    ResourceKey::new("", "namespaces")
}

impl<'a> Txn<'a> {
    pub fn new(store: &'a mut Store, registry: &'a Registry) -> Self {
        let start_rv = store.rv;
        Txn {
            store,
            registry,
            undo: vec![],
            events: vec![],
            committed: false,
            start_rv,
            after_commit: vec![],
        }
    }

    fn next_rv(&mut self) -> u64 {
        self.store.rv += 1;
        self.store.rv
    }

    pub fn get(&self, res: &ResourceKey, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.store.get(res, ns, name).cloned()
    }

    /// Stores a fully prepared object under a fresh resourceVersion and records the event.
    pub fn write(&mut self, res: &ResourceKey, mut obj: Value) -> Arc<Value> {
        let rv = self.next_rv();
        meta::meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
        let key = key_of(&obj);
        let obj = Arc::new(obj);
        let prev = self
            .store
            .objects
            .entry(res.clone())
            .or_default()
            .insert(key.clone(), obj.clone());
        let etype = if prev.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.undo.push((res.clone(), key, prev.clone()));
        self.events.push(Arc::new(WatchEvent {
            rv,
            res: res.clone(),
            etype,
            obj: obj.clone(),
            prev,
        }));
        obj
    }

    /// Removes an object; the DELETED event carries `last` under a fresh resourceVersion.
    pub fn delete(&mut self, res: &ResourceKey, mut last: Value) -> Arc<Value> {
        let rv = self.next_rv();
        meta::meta_mut(&mut last).insert("resourceVersion".into(), json!(rv.to_string()));
        let key = key_of(&last);
        let prev = self.store.objects.get_mut(res).and_then(|m| m.remove(&key));
        self.undo.push((res.clone(), key.clone(), prev.clone()));
        let last = Arc::new(last);
        self.events.push(Arc::new(WatchEvent {
            rv,
            res: res.clone(),
            etype: EventType::Deleted,
            obj: last.clone(),
            prev,
        }));
        if !key.0.is_empty() && *res != namespaces_key() {
            self.finish_namespace_if_drained(&key.0);
        }
        last
    }

    /// A terminating namespace disappears once its last object has (the namespace controller's
    /// job in a real cluster).
    pub fn finish_namespace_if_drained(&mut self, ns: &str) {
        let nk = namespaces_key();
        let Some(nsobj) = self.get(&nk, "", ns) else {
            return;
        };
        if nsobj.pointer("/metadata/deletionTimestamp").is_some()
            && meta::finalizers(&nsobj).is_empty()
            && self.store.namespace_is_empty(ns)
        {
            self.delete(&nk, (*nsobj).clone());
        }
    }

    pub fn commit(mut self) {
        self.committed = true;
        let events = std::mem::take(&mut self.events);
        let now = Instant::now();
        for e in events {
            self.store.history.push_back(e.clone());
            self.store.history_times.push_back(now);
            // No receivers is normal (nobody watching); the event is still in history.
            let _ = self.store.tx.send(e);
        }
        self.store.trim_history();
        for f in std::mem::take(&mut self.after_commit) {
            f();
        }
    }
}

impl Drop for Txn<'_> {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        self.store.rv = self.start_rv;
        for (res, key, prev) in self.undo.drain(..).rev() {
            let m = self.store.objects.entry(res).or_default();
            match prev {
                Some(p) => {
                    m.insert(key, p);
                }
                None => {
                    m.remove(&key);
                }
            }
        }
    }
}

impl PlaneTxn for Txn<'_> {
    fn get(&self, res: &ResourceKey, namespace: Option<&str>, name: &str) -> Option<Value> {
        self.store
            .get(res, namespace.unwrap_or(""), name)
            .map(|v| (**v).clone())
    }

    fn list(&self, res: &ResourceKey, namespace: Option<&str>) -> Vec<Value> {
        self.store
            .range(res, namespace, None)
            .map(|(_, v)| (**v).clone())
            .collect()
    }

    fn put(&mut self, res: &ResourceKey, mut obj: Value) -> Value {
        let key = key_of(&obj);
        let has_status = self.registry.get(res).is_some_and(|d| d.has_status());
        let tracks_generation = self.registry.get(res).is_none_or(|d| d.tracks_generation());
        let old = self.store.get(res, &key.0, &key.1).cloned();
        if let Some(def) = self.registry.get(res) {
            let api_version = def.api_version(&def.preferred().name);
            let o = obj.as_object_mut().expect("objects are JSON objects");
            o.entry("apiVersion").or_insert(json!(api_version));
            o.entry("kind").or_insert(json!(def.kind));
        }
        let m = meta::meta_mut(&mut obj);
        match &old {
            Some(old) => {
                for f in ["uid", "creationTimestamp"] {
                    if let Some(v) = old.pointer(&format!("/metadata/{f}")) {
                        m.insert(f.into(), v.clone());
                    }
                }
                let gen_old = old
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64)
                    .unwrap_or(1);
                m.insert("generation".into(), json!(gen_old));
                if meta::spec_changed(old, &obj, has_status) {
                    meta::meta_mut(&mut obj).insert("generation".into(), json!(gen_old + 1));
                }
            }
            None => {
                m.insert("uid".into(), json!(meta::new_uid()));
                m.insert("creationTimestamp".into(), json!(meta::now_rfc3339()));
                m.insert("generation".into(), json!(1));
            }
        }
        if !tracks_generation {
            meta::meta_mut(&mut obj).remove("generation");
        }
        (*self.write(res, obj)).clone()
    }

    fn remove(&mut self, res: &ResourceKey, namespace: Option<&str>, name: &str) -> Option<Value> {
        let old = self.store.get(res, namespace.unwrap_or(""), name)?.clone();
        Some((*self.delete(res, (*old).clone())).clone())
    }

    fn after_commit(&mut self, f: Box<dyn FnOnce() + Send>) {
        self.after_commit.push(f);
    }
}
