//! A keyed work queue: pending keys are deduplicated, one key is never handed out twice at once,
//! and a key can be scheduled for later (backoff, periodic re-check).
//!
//! Scheduled keys live in a timer wheel ([`DelayQueue`]) driven by one task, so waiting keys cost
//! nothing per hand-out however many there are (an IPAM outage can park thousands), and a key
//! that becomes ready wakes one worker, not all of them.
//!
//! The queue keeps the times client-go's work queue measures (when a key became pending, when
//! its work started) and tells a [`QueueEvents`] as things happen; what is in flight is read
//! with [`WorkQueue::load`]. It knows nothing of metrics.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use tokio_util::time::DelayQueue;
use tokio_util::time::delay_queue;

use super::activity::Activity;

enum Timer<K> {
    At(K, Instant),
    Cancel(K),
    Clear,
}

/// What the queue reports as it works. Every method defaults to nothing.
pub trait QueueEvents: Send + Sync + 'static {
    /// A key became pending (it was neither pending nor waiting to be processed again).
    fn added(&self) {}
    /// A failed key was scheduled again ([`WorkQueue::retry_after`]).
    fn retried(&self) {}
    /// A key was handed out after being pending this long.
    fn waited(&self, _pending_for: Duration) {}
    /// A key's processing ended after this long.
    fn worked(&self, _took: Duration) {}
}

/// Reports nothing.
pub struct Unobserved;

impl QueueEvents for Unobserved {}

/// The queue's load at one moment.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Load {
    /// Keys pending: ready, or to be processed again once their current processing ends.
    pub depth: usize,
    /// How long every key in flight has been processed, added up.
    pub unfinished: Duration,
    /// How long the key processed longest has been.
    pub longest: Duration,
}

struct State<K> {
    ready: VecDeque<K>,
    /// Every pending key: in `ready`, or added while being processed (dirty: back to `ready`
    /// when processing ends), with when it became pending. One table for both, since a rollout
    /// has every shard of the cell pending at once.
    pending: HashMap<K, Pending>,
    /// How many pending keys are dirty.
    dirty: usize,
    /// Keys being processed, and since when.
    active: HashMap<K, Instant>,
    /// When each scheduled key is due (the timer task holds the same).
    scheduled: HashMap<K, Instant>,
    /// Keys waiting for a dependency to come back (IPAM down): neither ready nor scheduled.
    parked: HashSet<K>,
    shutdown: bool,
}

/// A pending key: when it became pending, and whether it is in `ready` (else dirty).
struct Pending {
    since: Instant,
    ready: bool,
}

impl<K: Eq + Hash> State<K> {
    /// Whether `key` waits in `ready`.
    fn is_ready(&self, key: &K) -> bool {
        self.pending.get(key).is_some_and(|p| p.ready)
    }
}

/// The queue. Made with [`WorkQueue::start`], shared behind an `Arc`.
pub struct WorkQueue<K> {
    state: Mutex<State<K>>,
    ready: Notify,
    timers: mpsc::UnboundedSender<Timer<K>>,
    activity: Arc<Activity>,
    events: Arc<dyn QueueEvents>,
}

/// Whether a push made a key pending, and whether a worker should wake for it.
struct Pushed {
    added: bool,
    wake: bool,
}

impl<K: Clone + Eq + Hash + Send + Sync + 'static> WorkQueue<K> {
    /// A queue and the task that moves scheduled keys to ready when they are due; the task ends
    /// with the queue.
    pub fn start() -> Arc<Self> {
        Self::start_observed(Arc::default(), Arc::new(Unobserved))
    }

    /// [`start`](Self::start), telling `events` what happens and `activity` whether any work is
    /// ready or running.
    pub fn start_observed(activity: Arc<Activity>, events: Arc<dyn QueueEvents>) -> Arc<Self> {
        let (timers, rx) = mpsc::unbounded_channel();
        let queue = Arc::new(Self {
            state: Mutex::new(State {
                ready: VecDeque::new(),
                pending: HashMap::new(),
                dirty: 0,
                active: HashMap::new(),
                scheduled: HashMap::new(),
                parked: HashSet::new(),
                shutdown: false,
            }),
            ready: Notify::new(),
            timers,
            activity,
            events,
        });
        tokio::spawn(run_timers(Arc::downgrade(&queue), rx));
        queue
    }

    fn lock(&self) -> Guard<'_, K> {
        Guard {
            state: crate::sync::lock(&self.state),
            activity: &self.activity,
        }
    }

    /// Reports a push and wakes a worker if it made a key ready.
    fn pushed(&self, pushed: Pushed) {
        if pushed.added {
            self.events.added();
        }
        if pushed.wake {
            self.ready.notify_one();
        }
    }

    /// Queues a key now. A key already pending stays where it is; a key being processed is
    /// processed once more afterwards. An immediate add supersedes a scheduled one: something
    /// changed, so waiting out the old delay helps nobody.
    pub fn add(&self, key: K) {
        let mut st = self.lock();
        if st.shutdown {
            return;
        }
        if st.scheduled.remove(&key).is_some() {
            let _ = self.timers.send(Timer::Cancel(key.clone()));
        }
        st.parked.remove(&key);
        let pushed = push(&mut st, key);
        drop(st);
        self.pushed(pushed);
    }

    /// Queues a failed key again after `delay` (its backoff), counted as a retry.
    pub fn retry_after(&self, key: K, delay: Duration) {
        self.events.retried();
        self.add_after(key, delay);
    }

    /// Queues a key after `delay`, unless it is already pending or due sooner.
    pub fn add_after(&self, key: K, delay: Duration) {
        let mut st = self.lock();
        if st.shutdown || st.is_ready(&key) {
            return;
        }
        let at = Instant::now() + delay;
        match st.scheduled.get(&key) {
            Some(due) if *due <= at => {}
            _ => {
                st.scheduled.insert(key.clone(), at);
                let _ = self.timers.send(Timer::At(key, at));
            }
        }
    }

    /// Ends processing of a key handed out by [`next`](Self::next).
    pub fn done(&self, key: &K) {
        let mut st = self.lock();
        let started = st.active.remove(key);
        // Added again while processed: it was counted then, and is ready now.
        let again = match st.pending.get_mut(key) {
            Some(p) if !p.ready => {
                p.ready = true;
                true
            }
            _ => false,
        };
        if again {
            st.dirty -= 1;
            st.ready.push_back(key.clone());
        }
        drop(st);
        if let Some(started) = started {
            self.events.worked(started.elapsed());
        }
        if again {
            self.ready.notify_one();
        }
    }

    /// Sets a key aside until [`unpark_all`](Self::unpark_all) or
    /// [`unpark_one`](Self::unpark_one) (or an [`add`](Self::add): the shard changed). A key
    /// already queued again stays queued.
    pub fn park(&self, key: K) {
        let mut st = self.lock();
        if st.shutdown || st.is_ready(&key) || st.active.contains_key(&key) {
            return;
        }
        if st.scheduled.remove(&key).is_some() {
            let _ = self.timers.send(Timer::Cancel(key.clone()));
        }
        st.parked.insert(key);
    }

    /// Makes every parked key ready.
    pub fn unpark_all(&self) -> usize {
        let mut st = self.lock();
        let keys: Vec<K> = st.parked.drain().collect();
        let n = keys.len();
        let added = keys
            .into_iter()
            .filter(|key| push(&mut st, key.clone()).added)
            .count();
        drop(st);
        for _ in 0..added {
            self.events.added();
        }
        self.ready.notify_waiters();
        self.ready.notify_one();
        n
    }

    /// Makes one parked key ready (a probe); whether there was one.
    pub fn unpark_one(&self) -> bool {
        let mut st = self.lock();
        let Some(key) = st.parked.iter().next().cloned() else {
            return false;
        };
        st.parked.remove(&key);
        let pushed = push(&mut st, key);
        drop(st);
        self.pushed(pushed);
        true
    }

    /// Whether the queue owes `key` a hand-out: it is ready, being processed, scheduled or
    /// parked.
    pub fn owes(&self, key: &K) -> bool {
        let st = self.lock();
        st.is_ready(key)
            || st.active.contains_key(key)
            || st.scheduled.contains_key(key)
            || st.parked.contains(key)
    }

    /// Keys parked.
    pub fn parked(&self) -> usize {
        self.lock().parked.len()
    }

    /// Drops every pending, scheduled and parked key (keys being processed finish normally).
    pub fn clear(&self) {
        let mut st = self.lock();
        st.ready.clear();
        st.pending.clear();
        st.dirty = 0;
        st.scheduled.clear();
        st.parked.clear();
        let _ = self.timers.send(Timer::Clear);
    }

    /// Stops handing out keys; [`next`](Self::next) returns `None` from now on.
    pub fn shutdown(&self) {
        self.lock().shutdown = true;
        self.ready.notify_waiters();
    }

    /// Whether any key is ready now or being processed (scheduled ones do not count).
    pub fn is_busy(&self) -> bool {
        let st = self.lock();
        !st.ready.is_empty() || !st.active.is_empty()
    }

    /// Keys ready now, scheduled, and being processed.
    #[cfg(test)]
    pub fn counts(&self) -> (usize, usize, usize) {
        let st = self.lock();
        (st.ready.len(), st.scheduled.len(), st.active.len())
    }

    /// How much is pending and how long the work in flight has been running, now.
    pub fn load(&self) -> Load {
        let st = self.lock();
        let now = Instant::now();
        let running = st.active.values().map(|started| now - *started);
        Load {
            depth: st.ready.len() + st.dirty,
            unfinished: running.clone().sum(),
            longest: running.max().unwrap_or_default(),
        }
    }

    /// Waits for the next key that is ready and not being processed.
    pub async fn next(&self) -> Option<K> {
        loop {
            let notified = self.ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = self.lock();
                if st.shutdown {
                    return None;
                }
                if let Some(key) = st.ready.pop_front() {
                    let now = Instant::now();
                    let pending_since = st.pending.remove(&key).map(|p| p.since);
                    st.active.insert(key.clone(), now);
                    let more = !st.ready.is_empty();
                    drop(st);
                    if let Some(since) = pending_since {
                        self.events.waited(now - since);
                    }
                    // Pass the wake-up on: one notification may stand for several keys.
                    if more {
                        self.ready.notify_one();
                    }
                    return Some(key);
                }
            }
            notified.await;
        }
    }

    /// A scheduled key is due.
    fn due(&self, key: K, at: Instant) {
        let mut st = self.lock();
        // Rescheduled or superseded since: the newer schedule stands.
        if st.scheduled.get(&key) != Some(&at) {
            return;
        }
        st.scheduled.remove(&key);
        if st.shutdown {
            return;
        }
        let pushed = push(&mut st, key);
        drop(st);
        self.pushed(pushed);
    }
}

/// The state, locked; on release it tells the activity signal whether work is ready or running.
struct Guard<'a, K> {
    state: MutexGuard<'a, State<K>>,
    activity: &'a Activity,
}

impl<K> std::ops::Deref for Guard<'_, K> {
    type Target = State<K>;
    fn deref(&self) -> &State<K> {
        &self.state
    }
}

impl<K> std::ops::DerefMut for Guard<'_, K> {
    fn deref_mut(&mut self) -> &mut State<K> {
        &mut self.state
    }
}

impl<K> Drop for Guard<'_, K> {
    fn drop(&mut self) {
        self.activity
            .set_queue_busy(!self.state.ready.is_empty() || !self.state.active.is_empty());
    }
}

/// Makes a key pending: ready, or (while it is processed) due again once processing ends.
fn push<K: Clone + Eq + Hash>(st: &mut State<K>, key: K) -> Pushed {
    if st.pending.contains_key(&key) {
        return Pushed {
            added: false,
            wake: false,
        };
    }
    // Being processed: due again once that ends (dirty); else ready now.
    let ready = !st.active.contains_key(&key);
    let since = Instant::now();
    if ready {
        st.ready.push_back(key.clone());
    } else {
        st.dirty += 1;
    }
    st.pending.insert(key, Pending { since, ready });
    Pushed {
        added: true,
        wake: ready,
    }
}

async fn run_timers<K: Clone + Eq + Hash + Send + Sync + 'static>(
    queue: Weak<WorkQueue<K>>,
    mut rx: mpsc::UnboundedReceiver<Timer<K>>,
) {
    let mut wheel: DelayQueue<(K, Instant)> = DelayQueue::new();
    let mut entries: HashMap<K, delay_queue::Key> = HashMap::new();
    loop {
        tokio::select! {
            cmd = rx.recv() => match cmd {
                Some(Timer::At(key, at)) => {
                    if let Some(old) = entries.remove(&key) {
                        wheel.remove(&old);
                    }
                    let entry = wheel.insert_at((key.clone(), at), at);
                    entries.insert(key, entry);
                }
                Some(Timer::Cancel(key)) => {
                    if let Some(old) = entries.remove(&key) {
                        wheel.remove(&old);
                    }
                }
                Some(Timer::Clear) => {
                    wheel.clear();
                    entries.clear();
                }
                None => return,
            },
            Some(expired) = wheel.next(), if !wheel.is_empty() => {
                let (key, at) = expired.into_inner();
                entries.remove(&key);
                match queue.upgrade() {
                    Some(queue) => queue.due(key, at),
                    None => return,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue() -> Arc<WorkQueue<&'static str>> {
        WorkQueue::start()
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
        let q = queue();
        q.add("a");
        assert_eq!(q.next().await, Some("a"));
        q.add("a");
        let waiter = {
            let q = q.clone();
            tokio::spawn(async move { q.next().await })
        };
        tokio::task::yield_now().await;
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
        q.done(&"a");
        // The superseded schedule never fires.
        tokio::time::sleep(Duration::from_secs(200)).await;
        assert_eq!(q.counts(), (0, 0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn workers_process_different_keys_in_parallel() {
        let q = queue();
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
    async fn every_waiting_worker_gets_a_key_when_many_become_ready() {
        let q = queue();
        let workers: Vec<_> = (0..3)
            .map(|_| {
                let q = q.clone();
                tokio::spawn(async move { q.next().await })
            })
            .collect();
        tokio::task::yield_now().await;
        for k in ["a", "b", "c"] {
            q.add_after(k, Duration::from_secs(1));
        }
        let mut got = Vec::new();
        for w in workers {
            got.push(w.await.unwrap().unwrap());
        }
        got.sort();
        assert_eq!(got, ["a", "b", "c"]);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_wakes_waiters_and_refuses_new_work() {
        let q = queue();
        let waiter = {
            let q = q.clone();
            tokio::spawn(async move { q.next().await })
        };
        tokio::task::yield_now().await;
        q.shutdown();
        assert_eq!(waiter.await.unwrap(), None);
        q.add("a");
        assert_eq!(q.next().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn parked_keys_wait_until_let_go() {
        let q = queue();
        q.park("a");
        q.park("b");
        q.park("c");
        assert_eq!(q.parked(), 3);
        assert!(!q.is_busy(), "parked keys are not work to do");
        assert!(q.unpark_one());
        let first = q.next().await.unwrap();
        assert_eq!(q.parked(), 2);
        q.done(&first);
        // A change to a parked shard brings it back at once.
        let changed = if first == "a" { "b" } else { "a" };
        q.add(changed);
        assert_eq!(q.next().await, Some(changed));
        q.done(&changed);
        assert_eq!(q.unpark_all(), 1);
        assert!(q.next().await.is_some());
        assert_eq!(q.parked(), 0);
        assert!(!q.unpark_one());
    }

    #[tokio::test(start_paused = true)]
    async fn clear_drops_pending_and_scheduled_work() {
        let q = queue();
        q.add("a");
        q.add_after("b", Duration::from_secs(1));
        q.clear();
        assert_eq!(q.counts(), (0, 0, 0));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(q.counts(), (0, 0, 0));
        assert!(!q.is_busy());
    }

    /// Records what the queue reports.
    #[derive(Default)]
    struct Recorder {
        seen: std::sync::Mutex<Vec<String>>,
    }

    impl QueueEvents for Recorder {
        fn added(&self) {
            self.seen.lock().unwrap().push("added".into());
        }
        fn retried(&self) {
            self.seen.lock().unwrap().push("retried".into());
        }
        fn waited(&self, d: Duration) {
            self.seen
                .lock()
                .unwrap()
                .push(format!("waited {}s", d.as_secs()));
        }
        fn worked(&self, d: Duration) {
            self.seen
                .lock()
                .unwrap()
                .push(format!("worked {}s", d.as_secs()));
        }
    }

    impl Recorder {
        fn take(&self) -> Vec<String> {
            std::mem::take(&mut *self.seen.lock().unwrap())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_queue_reports_adds_waits_work_and_retries_as_client_go_counts_them() {
        let events = Arc::new(Recorder::default());
        let q = WorkQueue::start_observed(Arc::default(), events.clone());
        q.add("a");
        q.add("a");
        assert_eq!(events.take(), ["added"], "a pending key is not added twice");
        assert_eq!(q.load().depth, 1);
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(q.next().await, Some("a"));
        assert_eq!(events.take(), ["waited 3s"]);
        assert_eq!(q.load().depth, 0);

        tokio::time::sleep(Duration::from_secs(2)).await;
        q.add("b");
        assert_eq!(q.next().await, Some("b"));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            q.load(),
            Load {
                depth: 0,
                unfinished: Duration::from_secs(3 + 1),
                longest: Duration::from_secs(3),
            }
        );
        // Added while processed: pending (and counted) now, handed out after `done`.
        q.add("a");
        assert_eq!(q.load().depth, 1);
        tokio::time::sleep(Duration::from_secs(4)).await;
        q.done(&"a");
        assert_eq!(events.take(), ["added", "waited 0s", "added", "worked 7s"]);
        assert_eq!(q.next().await, Some("a"));
        assert_eq!(events.take(), ["waited 4s"]);

        q.done(&"a");
        q.done(&"b");
        events.take();
        q.retry_after("c", Duration::from_secs(10));
        assert_eq!(events.take(), ["retried"]);
        assert_eq!(q.load().depth, 0, "a scheduled key is not pending yet");
        assert_eq!(q.next().await, Some("c"));
        assert_eq!(events.take(), ["added", "waited 0s"]);
        assert_eq!(
            q.load(),
            Load {
                depth: 0,
                unfinished: Duration::ZERO,
                longest: Duration::ZERO
            }
        );
    }
}
