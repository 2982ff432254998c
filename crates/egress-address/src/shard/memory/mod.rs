//! Everything the controller remembers about a shard between reconciles, in one place with one
//! way to forget it ([`ShardMemory::forget`]). Callers see it through narrow views, each with
//! the few operations one concern needs: [`AddressBook`] (addresses, states, our last write),
//! [`Releases`] (deletions still to release, the watermark), [`EventLedger`] (what events said)
//! and [`Failures`] (backoff). No I/O: state only, behind one lock.
//!
//! Per shard: its address state (exported as counts), the resourceVersion our last write went
//! over, consecutive failures (for backoff), what events last said (so a refusal re-checked every
//! minute is not an event storm), the address it carries or is being given (so no address is
//! written onto two shards, whatever IPAM answers), and the incarnations that were deleted and
//! whose claims still have to be released.
//!
//! Memory is bounded by live shards plus deletions not yet released: a standby drops the
//! deletions the leader reports released (see [`Releases::drop_released`]), so it does
//! not grow with churn.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::net::Ipv6Addr;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use egress_api::shard::{AddressClaimRef, EgressShard};

use super::{CachedShard, ShardKey, ShardState};

mod addresses;
mod failures;
mod ledger;
mod releases;

use crate::metrics::Metrics;
pub use addresses::AddressBook;
pub use failures::Failures;
pub use ledger::EventLedger;
pub use releases::{HandedOver, Releases, Watermark};

/// How many recent deletions are remembered by resourceVersion, to place a leader's release
/// watermark in this instance's own order.
const DELETIONS_REMEMBERED: usize = 65_536;

/// A deleted incarnation of a shard whose claim may still be held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gone {
    /// The deleted object's UID; `None` when only its name is known.
    pub uid: Option<String>,
    /// The claim ref the deleted object carried.
    pub claim_ref: Option<AddressClaimRef>,
    seq: u64,
}

impl Gone {
    /// A deletion known by name only (nothing says which incarnation it was).
    pub fn unknown() -> Self {
        Gone {
            uid: None,
            claim_ref: None,
            seq: 0,
        }
    }
}

#[derive(Debug, Default)]
struct Record {
    state: Option<ShardState>,
    /// The address the cached object carries.
    address: Option<Ipv6Addr>,
    /// What only a shard being worked on or released has: boxed, so the record of each of
    /// 100,000 settled shards stays small.
    more: Option<Box<More>>,
}

#[derive(Debug, Default)]
struct More {
    written_over: Option<String>,
    failures: u32,
    said: Vec<Said>,
    /// An address being written right now.
    reserved: Option<Ipv6Addr>,
    gone: Vec<Gone>,
}

/// What a record without [`More`] reads as.
static NO_MORE: More = More {
    written_over: None,
    failures: 0,
    said: Vec::new(),
    reserved: None,
    gone: Vec::new(),
};

impl More {
    fn is_empty(&self) -> bool {
        self.written_over.is_none()
            && self.failures == 0
            && self.said.is_empty()
            && self.reserved.is_none()
            && self.gone.is_empty()
    }
}

impl Record {
    fn is_empty(&self) -> bool {
        self.state.is_none() && self.address.is_none() && self.more().is_empty()
    }

    fn more(&self) -> &More {
        self.more.as_deref().unwrap_or(&NO_MORE)
    }

    fn more_mut(&mut self) -> &mut More {
        self.more.get_or_insert_default()
    }

    /// Drops [`More`] once it holds nothing.
    fn settle(&mut self) {
        if self.more.as_deref().is_some_and(More::is_empty) {
            self.more = None;
        }
    }
}

/// The shards that carry (or are being given) one address. Almost every address has one: kept
/// inline, it costs no allocation of its own, which at 100,000 shards was megabytes.
#[derive(Debug)]
enum Holders {
    One(ShardKey),
    /// Two or more.
    Many(Vec<ShardKey>),
}

impl Holders {
    fn keys(&self) -> &[ShardKey] {
        match self {
            Holders::One(key) => std::slice::from_ref(key),
            Holders::Many(keys) => keys,
        }
    }

    fn add(&mut self, key: &ShardKey) {
        if self.keys().contains(key) {
            return;
        }
        match self {
            Holders::One(first) => *self = Holders::Many(vec![first.clone(), key.clone()]),
            Holders::Many(keys) => keys.push(key.clone()),
        }
    }

    /// Removes `key`; whether none is left.
    fn remove(&mut self, key: &ShardKey) -> bool {
        let Holders::Many(keys) = self else {
            return matches!(self, Holders::One(only) if only == key);
        };
        keys.retain(|k| k != key);
        match keys.as_slice() {
            [] => true,
            [only] => {
                *self = Holders::One(only.clone());
                false
            }
            _ => false,
        }
    }
}

#[derive(Debug)]
struct Said {
    reason: &'static str,
    note: Box<str>,
    at: Instant,
}

#[derive(Default)]
struct Inner {
    records: HashMap<ShardKey, Record>,
    /// Which shards carry (or are being given) each address.
    holders: HashMap<Ipv6Addr, Holders>,
    counts: [i64; 4],
    seq: u64,
    /// Recent deletions in the order seen: (seq, resourceVersion of the DELETED event).
    deletions: VecDeque<(u64, String)>,
    deletion_seq: HashMap<String, u64>,
    /// The sequence number when the shard watch last began a full list: every deletion after it
    /// was seen (as an event, or as an entry missing from a list), every one before may not have
    /// been.
    list_began: u64,
}

/// The per-shard memory of one controller instance.
pub struct ShardMemory {
    inner: Mutex<Inner>,
    metrics: Metrics,
}

impl ShardMemory {
    pub fn new(metrics: Metrics) -> Self {
        Self {
            inner: Mutex::default(),
            metrics,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        crate::sync::lock(&self.inner)
    }

    /// Forgets a shard that no longer exists: the one way out of this memory besides a release.
    /// Deletions still to release are kept: the pass that found the name empty took its list of
    /// them before it read the API server, so one seen meanwhile (an incarnation made and deleted
    /// during the read) is not yet released, and nothing else remembers its claim.
    pub fn forget(&self, key: &ShardKey) {
        let mut inner = self.lock();
        if let Some(record) = inner.records.remove(key) {
            inner.move_holder(key, record.address, None);
            inner.move_holder(key, record.more().reserved, None);
            inner.count(record.state, None, &self.metrics);
            let gone = record.more.map(|m| m.gone).unwrap_or_default();
            if !gone.is_empty() {
                inner.records.insert(
                    key.clone(),
                    Record {
                        more: Some(Box::new(More {
                            gone,
                            ..More::default()
                        })),
                        ..Record::default()
                    },
                );
            }
        }
    }

    /// Whether anything is remembered about `key`.
    pub fn knows(&self, key: &ShardKey) -> bool {
        self.lock().records.contains_key(key)
    }

    /// Shards remembered at all (live or with a deletion pending).
    pub fn len(&self) -> usize {
        self.lock().records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What each live shard carries and its state.
    pub fn addresses(&self) -> AddressBook<'_> {
        AddressBook(self)
    }

    /// Deletions still to release, and the release watermark.
    pub fn releases(&self) -> Releases<'_> {
        Releases(self)
    }

    /// What events last said.
    pub fn events(&self) -> EventLedger<'_> {
        EventLedger(self)
    }

    /// Consecutive failures, for backoff.
    pub fn failures(&self) -> Failures<'_> {
        Failures(self)
    }
}

impl Inner {
    /// Shards in a state, as exported.
    fn count(&mut self, old: Option<ShardState>, new: Option<ShardState>, metrics: &Metrics) {
        if old == new {
            return;
        }
        for (state, delta) in [(old, -1), (new, 1)] {
            if let Some(state) = state {
                self.counts[state.index()] += delta;
                metrics.set_shards(state.as_str(), self.counts[state.index()]);
            }
        }
    }

    fn move_holder(&mut self, key: &ShardKey, old: Option<Ipv6Addr>, new: Option<Ipv6Addr>) {
        if old == new {
            return;
        }
        let still_held =
            |r: &Record, a: Ipv6Addr| r.address == Some(a) || r.more().reserved == Some(a);
        if let Some(old) = old {
            let kept = self.records.get(key).is_some_and(|r| still_held(r, old));
            if !kept
                && let Some(holders) = self.holders.get_mut(&old)
                && holders.remove(key)
            {
                self.holders.remove(&old);
            }
        }
        if let Some(new) = new {
            match self.holders.entry(new) {
                Entry::Occupied(mut holders) => holders.get_mut().add(key),
                Entry::Vacant(slot) => {
                    slot.insert(Holders::One(key.clone()));
                }
            }
        }
    }

    fn remember_deletion(&mut self, seq: u64, rv: &str) {
        if self.deletions.len() == DELETIONS_REMEMBERED
            && let Some((_, old)) = self.deletions.pop_front()
        {
            self.deletion_seq.remove(&old);
        }
        self.deletions.push_back((seq, rv.to_string()));
        self.deletion_seq.insert(rv.to_string(), seq);
    }

    fn tidy(&mut self, key: &ShardKey) {
        let Some(record) = self.records.get_mut(key) else {
            return;
        };
        record.settle();
        if record.is_empty() {
            self.records.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use egress_api::shard::EgressShardSpec;
    use std::collections::HashSet;

    fn record(name: &str, uid: &str, address: &str) -> CachedShard {
        CachedShard::new(&shard(name, uid, address))
    }

    fn shard(name: &str, uid: &str, address: &str) -> EgressShard {
        let mut s = EgressShard::new(name, EgressShardSpec::default());
        s.metadata.namespace = Some("ns".into());
        s.metadata.uid = Some(uid.into());
        s.metadata.resource_version = Some("1".into());
        s.spec.shard_address_ipv6 = address.into();
        if !address.is_empty() {
            s.spec.shard_address_ipv6_claim_ref = Some(AddressClaimRef {
                api_group: "ipam.miloapis.com".into(),
                kind: "IPClaim".into(),
                project: "p".into(),
                namespace: "default".into(),
                name: format!("claim-{name}"),
            });
        }
        s
    }

    fn key(name: &str) -> ShardKey {
        ShardKey::new("ns", name)
    }

    fn key_set(keys: impl IntoIterator<Item = ShardKey>) -> HashSet<ShardKey> {
        keys.into_iter().collect()
    }

    fn memory() -> ShardMemory {
        ShardMemory::new(Metrics::unregistered())
    }

    #[test]
    fn states_are_counted_once_per_shard_and_refusals_stick() {
        let m = memory();
        m.addresses().observe(&key("a"), &record("a", "u1", ""));
        m.addresses().observe(&key("a"), &record("a", "u1", ""));
        m.addresses()
            .observe(&key("b"), &record("b", "u2", "2001:db8::1"));
        assert_eq!(m.addresses().count(ShardState::Pending), 1);
        assert_eq!(m.addresses().count(ShardState::Addressed), 1);
        m.addresses().set_state(&key("a"), ShardState::Refused);
        m.addresses().observe(&key("a"), &record("a", "u1", ""));
        assert_eq!(m.addresses().state(&key("a")), Some(ShardState::Refused));
        assert_eq!(m.addresses().count(ShardState::Pending), 0);
        m.forget(&key("a"));
        m.forget(&key("a"));
        assert_eq!(m.addresses().count(ShardState::Refused), 0);
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn an_address_is_reserved_for_one_shard_only() {
        let m = memory();
        let addr: Ipv6Addr = "2001:db8::7".parse().unwrap();
        m.addresses()
            .observe(&key("a"), &record("a", "u1", "2001:db8::7"));
        m.addresses().observe(&key("b"), &record("b", "u2", ""));
        assert_eq!(m.addresses().reserve(&key("b"), addr), Err(key("a")));
        // A shard may be given the address it already carries.
        assert_eq!(m.addresses().reserve(&key("a"), addr), Ok(()));
        m.addresses().unreserve(&key("a"), true);
        // In flight counts too: two writes of one address never overlap.
        let other: Ipv6Addr = "2001:db8::8".parse().unwrap();
        assert_eq!(m.addresses().reserve(&key("b"), other), Ok(()));
        m.addresses().observe(&key("c"), &record("c", "u3", ""));
        assert_eq!(m.addresses().reserve(&key("c"), other), Err(key("b")));
        // A failed write frees it; a successful one keeps it until the cache shows it.
        m.addresses().unreserve(&key("b"), false);
        assert_eq!(m.addresses().reserve(&key("c"), other), Ok(()));
        m.addresses().unreserve(&key("c"), true);
        assert_eq!(m.addresses().reserve(&key("b"), other), Err(key("c")));
        // A deleted shard frees its address.
        m.releases()
            .observe_deleted(&key("a"), Some(&shard("a", "u1", "2001:db8::7")), Some("9"));
        assert_eq!(m.addresses().reserve(&key("b"), addr), Ok(()));
    }

    #[test]
    fn an_address_two_shards_carry_stays_held_until_both_let_it_go() {
        let m = memory();
        let addr: Ipv6Addr = "2001:db8::9".parse().unwrap();
        for name in ["a", "b"] {
            m.addresses()
                .observe(&key(name), &record(name, name, "2001:db8::9"));
        }
        m.addresses().observe(&key("c"), &record("c", "c", ""));
        assert_eq!(m.addresses().reserve(&key("c"), addr), Err(key("a")));
        m.forget(&key("a"));
        assert_eq!(m.addresses().reserve(&key("c"), addr), Err(key("b")));
        assert_eq!(m.addresses().reserve(&key("b"), addr), Ok(()));
        m.addresses().unreserve(&key("b"), false);
        assert_eq!(
            m.addresses().reserve(&key("c"), addr),
            Err(key("b")),
            "b still carries it"
        );
        m.addresses().observe(&key("b"), &record("b", "b", ""));
        assert_eq!(m.addresses().reserve(&key("c"), addr), Ok(()));
        assert_eq!(m.lock().holders.len(), 1);
        m.forget(&key("c"));
        assert!(m.lock().holders.is_empty());
        // One holder costs no more than its key.
        assert_eq!(size_of::<Holders>(), size_of::<ShardKey>());
    }

    #[test]
    fn deletions_wait_for_their_release_and_then_go() {
        let m = memory();
        let s = shard("a", "u1", "2001:db8::1");
        m.addresses().observe(&key("a"), &CachedShard::new(&s));
        m.releases()
            .observe_deleted(&key("a"), Some(&s), Some("10"));
        let gone = m.releases().gone(&key("a"));
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].uid.as_deref(), Some("u1"));
        assert_eq!(gone[0].claim_ref.as_ref().unwrap().name, "claim-a");
        assert_eq!(m.addresses().count(ShardState::Addressed), 0);
        // A new incarnation does not hide the old one's pending release.
        m.addresses().observe(&key("a"), &record("a", "u2", ""));
        assert_eq!(m.releases().gone(&key("a")).len(), 1);
        m.releases().released(&key("a"), &gone[0]);
        assert!(m.releases().gone(&key("a")).is_empty());
        assert_eq!(m.len(), 1, "the live incarnation is still remembered");
        m.releases()
            .observe_deleted(&key("a"), Some(&shard("a", "u2", "")), Some("11"));
        let gone = m.releases().gone(&key("a"));
        m.releases().released(&key("a"), &gone[0]);
        assert!(m.is_empty(), "nothing is kept once released");
    }

    #[test]
    fn forgetting_a_shard_keeps_the_deletions_still_to_release() {
        let m = memory();
        let s = shard("a", "u1", "2001:db8::1");
        m.addresses().observe(&key("a"), &CachedShard::new(&s));
        m.releases()
            .observe_deleted(&key("a"), Some(&s), Some("10"));
        m.forget(&key("a"));
        let gone = m.releases().gone(&key("a"));
        assert_eq!(gone.len(), 1, "the deletion outlives the forgetting");
        assert_eq!(m.releases().keys_with_deletions(), vec![key("a")]);
        let addr: Ipv6Addr = "2001:db8::1".parse().unwrap();
        m.addresses().observe(&key("b"), &record("b", "u2", ""));
        assert_eq!(
            m.addresses().reserve(&key("b"), addr),
            Ok(()),
            "the address is free"
        );
        m.releases().released(&key("a"), &gone[0]);
        assert!(!m.knows(&key("a")), "gone once released");
    }

    fn watermark(from: &str, through: &str) -> Option<Watermark> {
        Some(Watermark {
            from: from.into(),
            through: through.into(),
        })
    }

    /// Both see a shard made and deleted under each resourceVersion in `rvs`.
    fn delete_on(ms: &[&ShardMemory], rvs: std::ops::Range<u32>) {
        for rv in rvs {
            let name = format!("s{rv}");
            let s = shard(&name, &format!("u{rv}"), "");
            for m in ms {
                m.addresses().observe(&key(&name), &CachedShard::new(&s));
                m.releases()
                    .observe_deleted(&key(&name), Some(&s), Some(&rv.to_string()));
            }
        }
    }

    fn release(m: &ShardMemory, name: &str) {
        let g = m.releases().gone(&key(name)).remove(0);
        m.releases().released(&key(name), &g);
    }

    #[test]
    fn a_standby_drops_what_the_leader_released_and_keeps_the_rest() {
        let leader = memory();
        let standby = memory();
        for m in [&leader, &standby] {
            m.releases().list_started();
        }
        delete_on(&[&leader, &standby], 20..23);
        assert_eq!(
            leader.releases().for_lease(0).0,
            None,
            "nothing released yet"
        );
        release(&leader, "s20");
        assert_eq!(leader.releases().for_lease(0).0, watermark("20", "20"));
        release(&leader, "s22");
        assert_eq!(
            leader.releases().for_lease(0).0,
            watermark("20", "20"),
            "s21 is still pending, so s22's release does not move the watermark"
        );
        assert_eq!(
            standby
                .releases()
                .drop_released(&watermark("20", "20").unwrap()),
            1
        );
        assert_eq!(
            key_set(standby.releases().keys_with_deletions()),
            key_set([key("s21"), key("s22")])
        );
        assert_eq!(
            standby
                .releases()
                .drop_released(&watermark("unknown", "22").unwrap()),
            0
        );
        release(&leader, "s21");
        assert_eq!(leader.releases().for_lease(0).0, watermark("20", "22"));
        assert_eq!(
            standby
                .releases()
                .drop_released(&watermark("20", "22").unwrap()),
            2
        );
        assert!(standby.is_empty());
    }

    #[test]
    fn a_leader_says_nothing_of_deletions_from_before_its_watch_began() {
        let standby = memory();
        standby.releases().list_started();
        // Deleted while the old leader led: the new one starts after.
        delete_on(&[&standby], 10..12);
        let leader = memory();
        leader.releases().list_started();
        delete_on(&[&leader, &standby], 20..22);
        release(&leader, "s20");
        release(&leader, "s21");
        let w = leader.releases().for_lease(0).0;
        assert_eq!(w, watermark("20", "21"));
        assert_eq!(standby.releases().drop_released(&w.unwrap()), 2);
        assert_eq!(
            key_set(standby.releases().keys_with_deletions()),
            key_set([key("s10"), key("s11")]),
            "what the leader never saw stays with the standby"
        );
        // A new list (the watch was down): what came before it is no longer vouched for.
        leader.releases().list_started();
        assert_eq!(leader.releases().for_lease(0).0, None);
        delete_on(&[&leader, &standby], 30..31);
        release(&leader, "s30");
        assert_eq!(leader.releases().for_lease(0).0, watermark("30", "30"));
    }

    #[test]
    fn a_successor_takes_on_what_its_predecessor_had_still_to_release() {
        let old = memory();
        old.releases().list_started();
        delete_on(&[&old], 1..6);
        release(&old, "s2");
        let (_, handed) = old.releases().for_lease(3);
        let names: Vec<&str> = handed.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(
            names,
            ["s1", "s3", "s4"],
            "the oldest first, no more than asked"
        );
        // As the lease carries it.
        let json = serde_json::to_string(&old.releases().for_lease(10).1).unwrap();
        let read: Vec<HandedOver> = serde_json::from_str(&json).unwrap();
        let new = memory();
        delete_on(&[&new], 5..6);
        let taken = new.releases().take_over(read.clone());
        assert_eq!(taken.len(), 3, "s5 it saw itself");
        assert!(
            new.releases().take_over(read.clone()).is_empty(),
            "each incarnation once"
        );
        // Lost the lease to another: what was taken on goes, what it saw itself stays.
        new.releases().give_back(taken);
        assert_eq!(
            key_set(new.releases().keys_with_deletions()),
            key_set([key("s5")])
        );
        new.releases().take_over(read);
        assert_eq!(
            key_set(new.releases().keys_with_deletions()),
            key_set([key("s1"), key("s3"), key("s4"), key("s5")])
        );
        let gone = new.releases().gone(&key("s3"));
        assert_eq!(gone[0].uid.as_deref(), Some("u3"));
        // Taken on, it holds the new leader's watermark back like any pending release.
        new.releases().list_started();
        delete_on(&[&new], 7..8);
        release(&new, "s7");
        assert_eq!(new.releases().for_lease(0).0, None);
    }

    #[test]
    fn events_repeat_only_after_the_interval_or_with_a_new_note() {
        let m = memory();
        m.addresses().observe(&key("a"), &record("a", "u1", ""));
        let t0 = Instant::now();
        let hour = Duration::from_secs(3600);
        assert!(
            m.events()
                .admit(&key("a"), "ClaimRefused", "Exhausted", t0, hour)
        );
        assert!(!m.events().admit(
            &key("a"),
            "ClaimRefused",
            "Exhausted",
            t0 + Duration::from_secs(60),
            hour
        ));
        assert!(
            m.events()
                .admit(&key("a"), "ClaimRefused", "Exhausted", t0 + hour, hour)
        );
        assert!(
            m.events()
                .admit(&key("a"), "ClaimRefused", "ClassNotFound", t0, hour)
        );
        m.events().retract(&key("a"), "ClaimRefused");
        assert!(
            m.events()
                .admit(&key("a"), "ClaimRefused", "ClassNotFound", t0, hour)
        );
        assert!(
            !m.events().admit(&key("zz"), "ClaimRefused", "x", t0, hour),
            "an unknown shard gets no event"
        );
    }

    #[test]
    fn staleness_follows_our_last_write() {
        let m = memory();
        let s = shard("a", "u1", "");
        m.addresses().observe(&key("a"), &CachedShard::new(&s));
        m.addresses().wrote_over(&key("a"), Some("1"));
        assert!(m.addresses().is_stale(&key("a"), &s));
        let mut newer = s.clone();
        newer.metadata.resource_version = Some("2".into());
        assert!(!m.addresses().is_stale(&key("a"), &newer));
        assert!(
            !m.addresses().is_stale(&key("a"), &s),
            "a newer version was seen"
        );
    }

    #[test]
    fn a_cache_past_our_write_ends_the_staleness_without_a_reconcile() {
        let m = memory();
        let s = shard("a", "u1", "");
        m.addresses().observe(&key("a"), &CachedShard::new(&s));
        m.addresses().wrote_over(&key("a"), Some("1"));
        m.addresses().cached_at(&key("a"), "1");
        assert!(
            m.addresses().is_stale(&key("a"), &s),
            "the cache still shows what we wrote over"
        );
        m.addresses().cached_at(&key("a"), "2");
        assert!(!m.addresses().is_stale(&key("a"), &s));
    }

    #[test]
    fn failures_count_up_and_reset() {
        let m = memory();
        assert_eq!(m.failures().failed(&key("a")), 1);
        assert_eq!(m.failures().failed(&key("a")), 2);
        m.failures().succeeded(&key("a"));
        assert!(m.is_empty());
    }
}
