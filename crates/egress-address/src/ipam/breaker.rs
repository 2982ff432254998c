//! A circuit breaker toward IPAM: after a run of failed requests (no answer, 5xx, 429, or a
//! refused credential) it opens, and every request is refused locally without touching the
//! network, except one probe per probe interval. The first answer closes it again.
//!
//! Without it an outage costs IPAM a retry per waiting shard per backoff step (hundreds of
//! thousands of requests for a large rollout), and recovery waits out per-shard backoff timers;
//! with it an outage costs one request per probe interval, and every waiting shard is let go the
//! moment a probe is answered (see `runtime::worker`).

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

#[derive(Debug)]
struct State {
    failures: u32,
    open: bool,
    /// When the next probe may go (while open).
    next_probe: Instant,
    probing: bool,
}

/// What [`Breaker::admit`] allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Closed: go ahead.
    Go,
    /// Open, and this request is the probe.
    Probe,
    /// Open: refused without a request.
    Refuse,
}

/// The breaker. Its open/closed state can be watched.
pub struct Breaker {
    state: Mutex<State>,
    threshold: u32,
    probe_every: Duration,
    open_tx: watch::Sender<bool>,
}

impl Breaker {
    pub fn new(threshold: u32, probe_every: Duration) -> Self {
        Self {
            state: Mutex::new(State {
                failures: 0,
                open: false,
                next_probe: Instant::now(),
                probing: false,
            }),
            threshold: threshold.max(1),
            probe_every,
            open_tx: watch::channel(false).0,
        }
    }

    /// Whether a request may go now.
    pub fn admit(&self) -> Admit {
        let mut st = crate::sync::lock(&self.state);
        if !st.open {
            return Admit::Go;
        }
        let now = Instant::now();
        if st.probing || now < st.next_probe {
            return Admit::Refuse;
        }
        st.probing = true;
        st.next_probe = now + self.probe_every;
        Admit::Probe
    }

    /// Records how a request that went ended: `answered` is any HTTP answer other than a 5xx, a
    /// 429 or a refused credential.
    pub fn record(&self, answered: bool) {
        let mut st = crate::sync::lock(&self.state);
        st.probing = false;
        if answered {
            st.failures = 0;
            if st.open {
                st.open = false;
                drop(st);
                self.open_tx.send_replace(false);
            }
            return;
        }
        st.failures = st.failures.saturating_add(1);
        if !st.open && st.failures >= self.threshold {
            st.open = true;
            st.next_probe = Instant::now() + self.probe_every;
            drop(st);
            self.open_tx.send_replace(true);
        }
    }

    pub fn is_open(&self) -> bool {
        crate::sync::lock(&self.state).open
    }

    /// Notified on every open and close.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.open_tx.subscribe()
    }

    /// The probe interval.
    pub fn probe_every(&self) -> Duration {
        self.probe_every
    }

    /// When the next probe may go, while open.
    pub fn next_probe(&self) -> Option<Instant> {
        let st = crate::sync::lock(&self.state);
        st.open.then_some(st.next_probe)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn it_opens_after_the_threshold_and_probes_once_per_interval() {
        let b = Breaker::new(3, Duration::from_secs(1));
        for _ in 0..2 {
            assert_eq!(b.admit(), Admit::Go);
            b.record(false);
        }
        assert!(!b.is_open(), "two failures are not an outage");
        b.record(false);
        assert!(b.is_open());
        assert_eq!(b.admit(), Admit::Refuse, "no probe before the interval");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(b.admit(), Admit::Probe);
        assert_eq!(b.admit(), Admit::Refuse, "one probe at a time");
        b.record(false);
        assert_eq!(
            b.admit(),
            Admit::Refuse,
            "a failed probe waits another interval"
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(b.admit(), Admit::Probe);
        let mut rx = b.subscribe();
        b.record(true);
        assert!(!b.is_open(), "an answer closes it");
        assert!(rx.has_changed().unwrap() && !*rx.borrow_and_update());
        assert_eq!(b.admit(), Admit::Go);
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_resets_the_count() {
        let b = Breaker::new(3, Duration::from_secs(1));
        b.record(false);
        b.record(false);
        b.record(true);
        b.record(false);
        b.record(false);
        assert!(!b.is_open());
    }
}
