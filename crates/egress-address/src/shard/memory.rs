//! Everything the controller remembers about a shard between reconciles, in one place with one
//! way to forget it.
//!
//! Per shard: its address state (exported as counts), the resourceVersion our last write went
//! over, consecutive failures (for backoff), what events last said (so a refusal re-checked every
//! minute is not an event storm), the address it carries or is being given (so no address is
//! written onto two shards, whatever IPAM answers), and the incarnations that were deleted and
//! whose claims still have to be released.
//!
//! Memory is bounded by live shards plus deletions not yet released: a standby drops the
//! deletions the leader reports released (see [`ShardMemory::drop_released_through`]), so it does
//! not grow with churn.

use std::collections::{HashMap, VecDeque};
use std::net::Ipv6Addr;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use egress_api::shard::{AddressClaimRef, EgressShard};

use super::{ShardKey, ShardState};
use crate::metrics::Metrics;

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
    written_over: Option<String>,
    failures: u32,
    said: Vec<Said>,
    /// The address the cached object carries.
    address: Option<Ipv6Addr>,
    /// An address being written right now.
    reserved: Option<Ipv6Addr>,
    gone: Vec<Gone>,
}

impl Record {
    fn is_empty(&self) -> bool {
        self.state.is_none()
            && self.gone.is_empty()
            && self.failures == 0
            && self.reserved.is_none()
            && self.address.is_none()
    }
}

#[derive(Debug)]
struct Said {
    reason: &'static str,
    note: String,
    at: Instant,
}

#[derive(Default)]
struct Inner {
    records: HashMap<ShardKey, Record>,
    /// Which shards carry (or are being given) each address.
    holders: HashMap<Ipv6Addr, Vec<ShardKey>>,
    counts: [i64; 4],
    seq: u64,
    /// Recent deletions in the order seen: (seq, resourceVersion of the DELETED event).
    deletions: VecDeque<(u64, String)>,
    deletion_seq: HashMap<String, u64>,
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
        crate::lock(&self.inner)
    }

    /// Records a shard as the cache now holds it: its address and its state. A refusal stays
    /// until a reconcile says otherwise; the object alone cannot tell it is over.
    pub fn observe(&self, key: &ShardKey, shard: &EgressShard) {
        let mut inner = self.lock();
        let state = ShardState::observed(shard);
        let address = shard.spec.shard_address_ipv6.parse::<Ipv6Addr>().ok();
        let record = inner.records.entry(key.clone()).or_default();
        let old_address = std::mem::replace(&mut record.address, address);
        let old_state = record.state;
        let keep = state == ShardState::Pending && old_state.is_some();
        if !keep {
            record.state = Some(state);
        }
        let new_state = record.state;
        inner.move_holder(key, old_address, address);
        inner.count(old_state, new_state, &self.metrics);
    }

    /// Records that the cache lost a shard: the live object is gone, and what it carried is kept
    /// until its claim is released. `deleted_at` is the DELETED event's resourceVersion, when
    /// the deletion was seen as an event.
    pub fn observe_deleted(
        &self,
        key: &ShardKey,
        last: Option<&EgressShard>,
        deleted_at: Option<&str>,
    ) {
        let mut inner = self.lock();
        inner.seq += 1;
        let seq = inner.seq;
        if let Some(rv) = deleted_at {
            inner.remember_deletion(seq, rv);
        }
        let record = inner.records.entry(key.clone()).or_default();
        let old_state = record.state.take();
        let old_address = record.address.take();
        record.written_over = None;
        record.said.clear();
        let gone = Gone {
            uid: last.and_then(|s| s.metadata.uid.clone()),
            claim_ref: last.and_then(|s| s.spec.shard_address_ipv6_claim_ref.clone()),
            seq,
        };
        if !record
            .gone
            .iter()
            .any(|g| g.uid.is_some() && g.uid == gone.uid)
        {
            record.gone.push(gone);
        }
        inner.move_holder(key, old_address, None);
        inner.count(old_state, None, &self.metrics);
    }

    /// The deleted incarnations of `key` whose claims may still be held.
    pub fn gone(&self, key: &ShardKey) -> Vec<Gone> {
        self.lock()
            .records
            .get(key)
            .map(|r| r.gone.clone())
            .unwrap_or_default()
    }

    /// Every key with a deletion still to release (for a new leader).
    pub fn keys_with_deletions(&self) -> Vec<ShardKey> {
        self.lock()
            .records
            .iter()
            .filter(|(_, r)| !r.gone.is_empty())
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// A deleted incarnation's claim was released (or found not to be held).
    pub fn released(&self, key: &ShardKey, gone: &Gone) {
        let mut inner = self.lock();
        if let Some(record) = inner.records.get_mut(key) {
            record.gone.retain(|g| g != gone);
        }
        inner.tidy(key);
    }

    /// Forgets everything about a shard: the one way out of this memory.
    pub fn forget(&self, key: &ShardKey) {
        let mut inner = self.lock();
        if let Some(record) = inner.records.remove(key) {
            inner.move_holder(key, record.address, None);
            inner.move_holder(key, record.reserved, None);
            inner.count(record.state, None, &self.metrics);
        }
    }

    /// Records a reconcile's verdict on a live shard.
    pub fn set_state(&self, key: &ShardKey, state: ShardState) {
        let mut inner = self.lock();
        let record = inner.records.entry(key.clone()).or_default();
        let old = record.state.replace(state);
        inner.count(old, Some(state), &self.metrics);
    }

    pub fn state(&self, key: &ShardKey) -> Option<ShardState> {
        self.lock().records.get(key).and_then(|r| r.state)
    }

    /// Shards in a state, as exported.
    pub fn count(&self, state: ShardState) -> i64 {
        self.lock().counts[state.index()]
    }

    /// Remembers that we wrote over `read_version`: a cache still showing it has not seen our
    /// write yet, and acting on it would only cost a conflict.
    pub fn wrote_over(&self, key: &ShardKey, read_version: Option<&str>) {
        if let Some(rv) = read_version
            && let Some(record) = self.lock().records.get_mut(key)
        {
            record.written_over = Some(rv.to_string());
        }
    }

    /// The cache now holds `key` at `version`: once that is past the version we wrote over,
    /// [`ShardMemory::is_stale`] has nothing left to guard.
    pub fn cached_at(&self, key: &ShardKey, version: &str) {
        if let Some(record) = self.lock().records.get_mut(key)
            && record
                .written_over
                .as_deref()
                .is_some_and(|ours| ours != version)
        {
            record.written_over = None;
        }
    }

    /// Whether the cache still shows the version we already wrote over.
    pub fn is_stale(&self, key: &ShardKey, shard: &EgressShard) -> bool {
        let mut inner = self.lock();
        let Some(record) = inner.records.get_mut(key) else {
            return false;
        };
        match (
            &record.written_over,
            shard.metadata.resource_version.as_ref(),
        ) {
            (Some(ours), Some(seen)) if ours == seen => true,
            (Some(_), _) => {
                record.written_over = None;
                false
            }
            _ => false,
        }
    }

    /// Counts a failure of `key` and returns how many in a row.
    pub fn failed(&self, key: &ShardKey) -> u32 {
        let mut inner = self.lock();
        let record = inner.records.entry(key.clone()).or_default();
        record.failures = record.failures.saturating_add(1);
        record.failures
    }

    /// Clears the failure count after a success.
    pub fn succeeded(&self, key: &ShardKey) {
        let mut inner = self.lock();
        if let Some(record) = inner.records.get_mut(key) {
            record.failures = 0;
        }
        inner.tidy(key);
    }

    /// Takes `address` for `key` while it is written. Refused with the shard that already
    /// carries it (or is being given it): one address is never written onto two shards.
    pub fn reserve(&self, key: &ShardKey, address: Ipv6Addr) -> Result<(), ShardKey> {
        let mut inner = self.lock();
        if let Some(other) = inner
            .holders
            .get(&address)
            .and_then(|keys| keys.iter().find(|k| *k != key))
        {
            return Err(other.clone());
        }
        let record = inner.records.entry(key.clone()).or_default();
        let old = record.reserved.replace(address);
        inner.move_holder(key, old, Some(address));
        Ok(())
    }

    /// Ends a reservation. After a successful write the address stays with the shard until the
    /// cache shows it (then [`observe`](Self::observe) owns it); after a failed one it is freed.
    pub fn unreserve(&self, key: &ShardKey, written: bool) {
        let mut inner = self.lock();
        let Some(record) = inner.records.get_mut(key) else {
            return;
        };
        let Some(reserved) = record.reserved.take() else {
            return;
        };
        if written && record.address.is_none() {
            record.address = Some(reserved);
        } else if record.address != Some(reserved) {
            inner.move_holder(key, Some(reserved), None);
        }
        inner.tidy(key);
    }

    /// Whether an event should go out now, recording it if so. The same reason with the same
    /// note for the same shard is held back for `repeat_after`; a different note goes out at
    /// once, since the situation changed.
    pub fn admit_event(
        &self,
        key: &ShardKey,
        reason: &'static str,
        note: &str,
        now: Instant,
        repeat_after: Duration,
    ) -> bool {
        let mut inner = self.lock();
        let Some(record) = inner.records.get_mut(key) else {
            // A shard no longer known: nothing to say about it.
            return false;
        };
        if let Some(said) = record.said.iter_mut().find(|s| s.reason == reason) {
            if said.note == note && now.duration_since(said.at) < repeat_after {
                return false;
            }
            said.note = note.to_string();
            said.at = now;
        } else {
            record.said.push(Said {
                reason,
                note: note.to_string(),
                at: now,
            });
        }
        true
    }

    /// Takes back an admitted event that could not be published, so the next attempt goes out.
    pub fn retract_event(&self, key: &ShardKey, reason: &str) {
        if let Some(record) = self.lock().records.get_mut(key) {
            record.said.retain(|s| s.reason != reason);
        }
    }

    /// Forgets what events said about a shard (its address is written: nothing more will be).
    pub fn clear_events(&self, key: &ShardKey) {
        if let Some(record) = self.lock().records.get_mut(key) {
            record.said = Vec::new();
        }
    }

    /// The DELETED event up to which every deletion this instance saw has been released: the
    /// leader publishes it so standbys can let go of those deletions. `None` before any.
    pub fn release_watermark(&self) -> Option<String> {
        let inner = self.lock();
        let oldest_pending = inner
            .records
            .values()
            .flat_map(|r| r.gone.iter().map(|g| g.seq))
            .min();
        inner
            .deletions
            .iter()
            .rev()
            .find(|(seq, _)| oldest_pending.is_none_or(|p| *seq < p))
            .map(|(_, rv)| rv.clone())
    }

    /// Drops every deletion this instance saw up to and including the DELETED event `through`,
    /// which the leader reports released. A watermark this instance never saw drops nothing.
    pub fn drop_released_through(&self, through: &str) -> usize {
        let mut inner = self.lock();
        let Some(&upto) = inner.deletion_seq.get(through) else {
            return 0;
        };
        let mut dropped = 0;
        let keys: Vec<ShardKey> = inner
            .records
            .iter()
            .filter(|(_, r)| r.gone.iter().any(|g| g.seq <= upto))
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            if let Some(record) = inner.records.get_mut(&key) {
                let before = record.gone.len();
                record.gone.retain(|g| g.seq > upto);
                dropped += before - record.gone.len();
            }
            inner.tidy(&key);
        }
        dropped
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
}

impl Inner {
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
        let still_held = |r: &Record, a: Ipv6Addr| r.address == Some(a) || r.reserved == Some(a);
        if let Some(old) = old {
            let kept = self.records.get(key).is_some_and(|r| still_held(r, old));
            if !kept && let Some(keys) = self.holders.get_mut(&old) {
                keys.retain(|k| k != key);
                if keys.is_empty() {
                    self.holders.remove(&old);
                }
            }
        }
        if let Some(new) = new {
            let keys = self.holders.entry(new).or_default();
            if !keys.contains(key) {
                keys.push(key.clone());
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
        if self.records.get(key).is_some_and(Record::is_empty) {
            self.records.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use egress_api::shard::EgressShardSpec;
    use std::collections::HashSet;

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
        m.observe(&key("a"), &shard("a", "u1", ""));
        m.observe(&key("a"), &shard("a", "u1", ""));
        m.observe(&key("b"), &shard("b", "u2", "2001:db8::1"));
        assert_eq!(m.count(ShardState::Pending), 1);
        assert_eq!(m.count(ShardState::Addressed), 1);
        m.set_state(&key("a"), ShardState::Refused);
        m.observe(&key("a"), &shard("a", "u1", ""));
        assert_eq!(m.state(&key("a")), Some(ShardState::Refused));
        assert_eq!(m.count(ShardState::Pending), 0);
        m.forget(&key("a"));
        m.forget(&key("a"));
        assert_eq!(m.count(ShardState::Refused), 0);
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn an_address_is_reserved_for_one_shard_only() {
        let m = memory();
        let addr: Ipv6Addr = "2001:db8::7".parse().unwrap();
        m.observe(&key("a"), &shard("a", "u1", "2001:db8::7"));
        m.observe(&key("b"), &shard("b", "u2", ""));
        assert_eq!(m.reserve(&key("b"), addr), Err(key("a")));
        // A shard may be given the address it already carries.
        assert_eq!(m.reserve(&key("a"), addr), Ok(()));
        m.unreserve(&key("a"), true);
        // In flight counts too: two writes of one address never overlap.
        let other: Ipv6Addr = "2001:db8::8".parse().unwrap();
        assert_eq!(m.reserve(&key("b"), other), Ok(()));
        m.observe(&key("c"), &shard("c", "u3", ""));
        assert_eq!(m.reserve(&key("c"), other), Err(key("b")));
        // A failed write frees it; a successful one keeps it until the cache shows it.
        m.unreserve(&key("b"), false);
        assert_eq!(m.reserve(&key("c"), other), Ok(()));
        m.unreserve(&key("c"), true);
        assert_eq!(m.reserve(&key("b"), other), Err(key("c")));
        // A deleted shard frees its address.
        m.observe_deleted(&key("a"), Some(&shard("a", "u1", "2001:db8::7")), Some("9"));
        assert_eq!(m.reserve(&key("b"), addr), Ok(()));
    }

    #[test]
    fn deletions_wait_for_their_release_and_then_go() {
        let m = memory();
        let s = shard("a", "u1", "2001:db8::1");
        m.observe(&key("a"), &s);
        m.observe_deleted(&key("a"), Some(&s), Some("10"));
        let gone = m.gone(&key("a"));
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].uid.as_deref(), Some("u1"));
        assert_eq!(gone[0].claim_ref.as_ref().unwrap().name, "claim-a");
        assert_eq!(m.count(ShardState::Addressed), 0);
        // A new incarnation does not hide the old one's pending release.
        m.observe(&key("a"), &shard("a", "u2", ""));
        assert_eq!(m.gone(&key("a")).len(), 1);
        m.released(&key("a"), &gone[0]);
        assert!(m.gone(&key("a")).is_empty());
        assert_eq!(m.len(), 1, "the live incarnation is still remembered");
        m.observe_deleted(&key("a"), Some(&shard("a", "u2", "")), Some("11"));
        let gone = m.gone(&key("a"));
        m.released(&key("a"), &gone[0]);
        assert!(m.is_empty(), "nothing is kept once released");
    }

    #[test]
    fn a_standby_drops_what_the_leader_released_and_keeps_the_rest() {
        let leader = memory();
        let standby = memory();
        for (i, name) in ["a", "b", "c"].iter().enumerate() {
            let s = shard(name, &format!("u{i}"), "");
            let rv = format!("{}", 20 + i);
            for m in [&leader, &standby] {
                m.observe(&key(name), &s);
                m.observe_deleted(&key(name), Some(&s), Some(&rv));
            }
        }
        assert_eq!(leader.release_watermark(), None, "nothing released yet");
        let a = leader.gone(&key("a")).remove(0);
        leader.released(&key("a"), &a);
        assert_eq!(leader.release_watermark().as_deref(), Some("20"));
        let c = leader.gone(&key("c")).remove(0);
        leader.released(&key("c"), &c);
        assert_eq!(
            leader.release_watermark().as_deref(),
            Some("20"),
            "b is still pending, so c's release does not move the watermark"
        );
        assert_eq!(standby.drop_released_through("20"), 1);
        assert_eq!(
            key_set(standby.keys_with_deletions()),
            key_set([key("b"), key("c")])
        );
        assert_eq!(standby.drop_released_through("unknown"), 0);
        let b = leader.gone(&key("b")).remove(0);
        leader.released(&key("b"), &b);
        assert_eq!(leader.release_watermark().as_deref(), Some("22"));
        assert_eq!(standby.drop_released_through("22"), 2);
        assert!(standby.is_empty());
    }

    #[test]
    fn events_repeat_only_after_the_interval_or_with_a_new_note() {
        let m = memory();
        m.observe(&key("a"), &shard("a", "u1", ""));
        let t0 = Instant::now();
        let hour = Duration::from_secs(3600);
        assert!(m.admit_event(&key("a"), "ClaimRefused", "Exhausted", t0, hour));
        assert!(!m.admit_event(
            &key("a"),
            "ClaimRefused",
            "Exhausted",
            t0 + Duration::from_secs(60),
            hour
        ));
        assert!(m.admit_event(&key("a"), "ClaimRefused", "Exhausted", t0 + hour, hour));
        assert!(m.admit_event(&key("a"), "ClaimRefused", "ClassNotFound", t0, hour));
        m.retract_event(&key("a"), "ClaimRefused");
        assert!(m.admit_event(&key("a"), "ClaimRefused", "ClassNotFound", t0, hour));
        assert!(
            !m.admit_event(&key("zz"), "ClaimRefused", "x", t0, hour),
            "an unknown shard gets no event"
        );
    }

    #[test]
    fn staleness_follows_our_last_write() {
        let m = memory();
        let s = shard("a", "u1", "");
        m.observe(&key("a"), &s);
        m.wrote_over(&key("a"), Some("1"));
        assert!(m.is_stale(&key("a"), &s));
        let mut newer = s.clone();
        newer.metadata.resource_version = Some("2".into());
        assert!(!m.is_stale(&key("a"), &newer));
        assert!(!m.is_stale(&key("a"), &s), "a newer version was seen");
    }

    #[test]
    fn a_cache_past_our_write_ends_the_staleness_without_a_reconcile() {
        let m = memory();
        let s = shard("a", "u1", "");
        m.observe(&key("a"), &s);
        m.wrote_over(&key("a"), Some("1"));
        m.cached_at(&key("a"), "1");
        assert!(
            m.is_stale(&key("a"), &s),
            "the cache still shows what we wrote over"
        );
        m.cached_at(&key("a"), "2");
        assert!(!m.is_stale(&key("a"), &s));
    }

    #[test]
    fn failures_count_up_and_reset() {
        let m = memory();
        assert_eq!(m.failed(&key("a")), 1);
        assert_eq!(m.failed(&key("a")), 2);
        m.succeeded(&key("a"));
        assert!(m.is_empty());
    }
}
