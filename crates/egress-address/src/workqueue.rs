//! A keyed work queue: pending keys are deduplicated, one key is never handed out twice at once,
//! and a key can be scheduled for later (backoff, periodic re-check).

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Exponential backoff with jitter and a cap.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// Delay after the first failure.
    pub base: Duration,
    /// No delay exceeds this.
    pub cap: Duration,
    /// Spread of the jitter as a fraction of the delay (0.2 → ±10%).
    pub jitter: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(500),
            cap: Duration::from_secs(300),
            jitter: 0.2,
        }
    }
}

impl Backoff {
    /// The delay after `failures` consecutive failures (1 = the first), for `unit` in [0, 1).
    /// Jitter keeps shards that failed together (an IPAM outage) from retrying in lockstep.
    pub fn delay(&self, failures: u32, unit: f64) -> Duration {
        let exp = failures.saturating_sub(1).min(32);
        let raw = self.base.as_secs_f64() * 2f64.powi(exp as i32);
        let capped = raw.min(self.cap.as_secs_f64());
        let jitter = self.jitter.clamp(0.0, 1.0);
        let factor = 1.0 - jitter / 2.0 + jitter * unit.clamp(0.0, 1.0);
        Duration::from_secs_f64((capped * factor).min(self.cap.as_secs_f64()))
    }
}

struct State<K> {
    ready: VecDeque<K>,
    queued: HashSet<K>,
    active: HashSet<K>,
    /// Keys added while being processed; they go back to `ready` when processing ends.
    dirty: HashSet<K>,
    delayed: HashMap<K, Instant>,
    failures: HashMap<K, u32>,
    shutdown: bool,
}

/// The queue. Share it behind an `Arc`.
pub struct WorkQueue<K> {
    state: Mutex<State<K>>,
    notify: Notify,
    backoff: Backoff,
}

impl<K: Clone + Eq + Hash> WorkQueue<K> {
    pub fn new(backoff: Backoff) -> Self {
        Self {
            state: Mutex::new(State {
                ready: VecDeque::new(),
                queued: HashSet::new(),
                active: HashSet::new(),
                dirty: HashSet::new(),
                delayed: HashMap::new(),
                failures: HashMap::new(),
                shutdown: false,
            }),
            notify: Notify::new(),
            backoff,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<K>> {
        // A panic while holding the lock leaves consistent sets behind; keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a key now. A key already pending stays where it is; a key being processed is
    /// processed once more afterwards. An immediate add supersedes a scheduled one: something
    /// changed, so waiting out the old delay helps nobody.
    pub fn add(&self, key: K) {
        let mut st = self.lock();
        if st.shutdown {
            return;
        }
        st.delayed.remove(&key);
        push(&mut st, key);
        drop(st);
        self.notify.notify_waiters();
    }

    /// Queues a key after `delay`, unless it is already pending sooner.
    pub fn add_after(&self, key: K, delay: Duration) {
        let mut st = self.lock();
        if st.shutdown || st.queued.contains(&key) {
            return;
        }
        let at = Instant::now() + delay;
        let entry = st.delayed.entry(key).or_insert(at);
        if at < *entry {
            *entry = at;
        }
        drop(st);
        self.notify.notify_waiters();
    }

    /// Records a failure of `key` and queues it after its backoff delay, which it returns.
    pub fn retry(&self, key: K) -> Duration {
        let failures = {
            let mut st = self.lock();
            let n = st.failures.entry(key.clone()).or_insert(0);
            *n = n.saturating_add(1);
            *n
        };
        let delay = self.backoff.delay(failures, rand::random::<f64>());
        self.add_after(key, delay);
        delay
    }

    /// Clears a key's failure count after a success.
    pub fn forget(&self, key: &K) {
        self.lock().failures.remove(key);
    }

    /// Consecutive failures recorded for a key.
    pub fn failures(&self, key: &K) -> u32 {
        self.lock().failures.get(key).copied().unwrap_or(0)
    }

    /// Drops any pending or scheduled work for a key (it no longer exists).
    pub fn remove(&self, key: &K) {
        let mut st = self.lock();
        st.delayed.remove(key);
        st.failures.remove(key);
        if st.queued.remove(key) {
            st.ready.retain(|k| k != key);
        }
        st.dirty.remove(key);
    }

    /// Ends processing of a key handed out by [`next`](Self::next).
    pub fn done(&self, key: &K) {
        let mut st = self.lock();
        st.active.remove(key);
        if st.dirty.remove(key) {
            push(&mut st, key.clone());
        }
        drop(st);
        self.notify.notify_waiters();
    }

    /// Stops handing out keys; [`next`](Self::next) returns `None` from now on.
    pub fn shutdown(&self) {
        self.lock().shutdown = true;
        self.notify.notify_waiters();
    }

    /// Whether any key is ready now or being processed (scheduled ones do not count).
    pub fn is_busy(&self) -> bool {
        let st = self.lock();
        !st.ready.is_empty() || !st.active.is_empty()
    }

    /// Keys ready now, scheduled, and being processed.
    pub fn counts(&self) -> (usize, usize, usize) {
        let st = self.lock();
        (st.ready.len(), st.delayed.len(), st.active.len())
    }

    /// Waits for the next key that is ready and not being processed.
    pub async fn next(&self) -> Option<K> {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let wake_at = {
                let mut st = self.lock();
                if st.shutdown {
                    return None;
                }
                promote_due(&mut st, Instant::now());
                if let Some(key) = st.ready.pop_front() {
                    st.queued.remove(&key);
                    st.active.insert(key.clone());
                    return Some(key);
                }
                st.delayed.values().min().copied()
            };
            match wake_at {
                Some(at) => {
                    tokio::select! {
                        _ = &mut notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }
}

fn push<K: Clone + Eq + Hash>(st: &mut State<K>, key: K) {
    if st.active.contains(&key) {
        st.dirty.insert(key);
    } else if st.queued.insert(key.clone()) {
        st.ready.push_back(key);
    }
}

fn promote_due<K: Clone + Eq + Hash>(st: &mut State<K>, now: Instant) {
    let due: Vec<K> = st
        .delayed
        .iter()
        .filter(|(_, at)| **at <= now)
        .map(|(k, _)| k.clone())
        .collect();
    for key in due {
        st.delayed.remove(&key);
        push(st, key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn queue() -> WorkQueue<&'static str> {
        WorkQueue::new(Backoff::default())
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let b = Backoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(10),
            jitter: 0.0,
        };
        assert_eq!(b.delay(1, 0.5), Duration::from_secs(1));
        assert_eq!(b.delay(2, 0.5), Duration::from_secs(2));
        assert_eq!(b.delay(4, 0.5), Duration::from_secs(8));
        assert_eq!(b.delay(5, 0.5), Duration::from_secs(10));
        assert_eq!(b.delay(u32::MAX, 0.5), Duration::from_secs(10));
    }

    #[test]
    fn jitter_stays_in_its_band_and_under_the_cap() {
        let b = Backoff {
            base: Duration::from_secs(10),
            cap: Duration::from_secs(100),
            jitter: 0.2,
        };
        assert_eq!(b.delay(1, 0.0), Duration::from_secs(9));
        assert_eq!(b.delay(1, 1.0), Duration::from_secs(11));
        assert!(b.delay(10, 1.0) <= Duration::from_secs(100));
        assert_ne!(b.delay(1, 0.1), b.delay(1, 0.9));
    }

    #[tokio::test(start_paused = true)]
    async fn pending_keys_are_deduplicated() {
        let q = queue();
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.next().await, Some("a"));
        assert_eq!(q.next().await, Some("b"));
        assert_eq!(q.counts(), (0, 0, 2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_is_never_handed_out_twice_at_once() {
        let q = Arc::new(queue());
        q.add("a");
        assert_eq!(q.next().await, Some("a"));
        q.add("a");
        let waiter = {
            let q = q.clone();
            tokio::spawn(async move { q.next().await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            !waiter.is_finished(),
            "a key in progress was handed out again"
        );
        q.done(&"a");
        assert_eq!(waiter.await.unwrap(), Some("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn done_without_a_new_add_does_not_requeue() {
        let q = queue();
        q.add("a");
        let k = q.next().await.unwrap();
        q.done(&k);
        assert_eq!(q.counts(), (0, 0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_keys_wait_their_turn() {
        let q = queue();
        let start = Instant::now();
        q.add_after("late", Duration::from_secs(30));
        q.add_after("early", Duration::from_secs(10));
        assert_eq!(q.next().await, Some("early"));
        assert_eq!(start.elapsed(), Duration::from_secs(10));
        assert_eq!(q.next().await, Some("late"));
        assert_eq!(start.elapsed(), Duration::from_secs(30));
    }

    #[tokio::test(start_paused = true)]
    async fn the_sooner_schedule_wins_and_an_add_supersedes_it() {
        let q = queue();
        let start = Instant::now();
        q.add_after("a", Duration::from_secs(30));
        q.add_after("a", Duration::from_secs(5));
        q.add_after("a", Duration::from_secs(60));
        assert_eq!(q.next().await, Some("a"));
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        q.done(&"a");
        q.add_after("a", Duration::from_secs(100));
        q.add("a");
        assert_eq!(q.next().await, Some("a"));
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn retries_back_off_per_key_and_forget_resets() {
        let q = WorkQueue::new(Backoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(4),
            jitter: 0.0,
        });
        assert_eq!(q.retry("a"), Duration::from_secs(1));
        assert_eq!(q.next().await, Some("a"));
        q.done(&"a");
        assert_eq!(q.retry("a"), Duration::from_secs(2));
        assert_eq!(q.retry("b"), Duration::from_secs(1), "backoff is per key");
        assert_eq!(q.failures(&"a"), 2);
        q.forget(&"a");
        assert_eq!(q.failures(&"a"), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn workers_process_different_keys_in_parallel() {
        let q = Arc::new(queue());
        for k in ["a", "b", "c"] {
            q.add(k);
        }
        let mut got = vec![
            q.next().await.unwrap(),
            q.next().await.unwrap(),
            q.next().await.unwrap(),
        ];
        got.sort();
        assert_eq!(got, ["a", "b", "c"]);
        assert_eq!(q.counts(), (0, 0, 3));
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_wakes_waiters_and_refuses_new_work() {
        let q = Arc::new(queue());
        let waiter = {
            let q = q.clone();
            tokio::spawn(async move { q.next().await })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        q.shutdown();
        assert_eq!(waiter.await.unwrap(), None);
        q.add("a");
        assert_eq!(q.next().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn remove_drops_pending_and_scheduled_work() {
        let q = Arc::new(queue());
        q.add("a");
        q.add_after("b", Duration::from_secs(1));
        q.remove(&"a");
        q.remove(&"b");
        assert_eq!(q.counts(), (0, 0, 0));
        let waiter = {
            let q = q.clone();
            tokio::spawn(async move { q.next().await })
        };
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!waiter.is_finished());
        waiter.abort();
    }
}
