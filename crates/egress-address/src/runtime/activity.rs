//! What the controller is doing, as signals a waiter can follow: whether shards are being
//! worked on, how many events are still on their way, and which version of the shards the
//! cache has seen. Tests and tools wait on these instead of sleeping.

use tokio::sync::watch;

/// The signals, shared by the queue, the event publisher, the watch and the [`super::Handle`].
pub struct Activity {
    queue_busy: watch::Sender<bool>,
    events_pending: watch::Sender<usize>,
    observed: watch::Sender<u64>,
    /// This instance leads and has queued everything a new leader looks at.
    leading: watch::Sender<bool>,
}

impl Default for Activity {
    fn default() -> Self {
        Self {
            queue_busy: watch::channel(false).0,
            events_pending: watch::channel(0).0,
            observed: watch::channel(0).0,
            leading: watch::channel(false).0,
        }
    }
}

impl Activity {
    pub fn set_leading(&self, leading: bool) {
        self.leading
            .send_if_modified(|l| std::mem::replace(l, leading) != leading);
    }

    /// Resolves once this instance leads and has queued its takeover work.
    pub async fn leading(&self) {
        let _ = self.leading.subscribe().wait_for(|l| *l).await;
    }

    pub fn set_queue_busy(&self, busy: bool) {
        self.queue_busy
            .send_if_modified(|b| std::mem::replace(b, busy) != busy);
    }

    pub fn events_queued(&self, n: usize) {
        self.events_pending.send_modify(|p| *p += n);
    }

    pub fn events_done(&self, n: usize) {
        self.events_pending
            .send_modify(|p| *p = p.saturating_sub(n));
    }

    /// The shards' resourceVersion the cache has applied (resourceVersions are opaque to clients;
    /// this compares them as the numbers every apiserver this runs against hands out, and only
    /// for waiting).
    pub fn observed(&self, resource_version: &str) {
        if let Ok(rv) = resource_version.parse::<u64>() {
            self.observed
                .send_if_modified(|o| (rv > *o).then(|| *o = rv).is_some());
        }
    }

    /// Resolves once no shard is ready or being worked on and no event is waiting or in flight.
    pub async fn idle(&self) {
        let mut busy = self.queue_busy.subscribe();
        let mut events = self.events_pending.subscribe();
        loop {
            if !*busy.borrow_and_update() && *events.borrow_and_update() == 0 {
                return;
            }
            tokio::select! {
                _ = busy.changed() => {}
                _ = events.changed() => {}
            }
        }
    }

    /// Resolves once the cache has applied `resource_version` (or a later one).
    pub async fn seen(&self, resource_version: &str) {
        let Ok(want) = resource_version.parse::<u64>() else {
            return;
        };
        let mut rx = self.observed.subscribe();
        let _ = rx.wait_for(|o| *o >= want).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn idle_waits_for_the_queue_and_the_events() {
        let a = std::sync::Arc::new(Activity::default());
        a.set_queue_busy(true);
        a.events_queued(2);
        let waiter = tokio::spawn({
            let a = a.clone();
            async move { a.idle().await }
        });
        tokio::task::yield_now().await;
        a.set_queue_busy(false);
        a.events_done(1);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "an event is still on its way");
        a.events_done(1);
        waiter.await.unwrap();
    }

    #[tokio::test]
    async fn seen_waits_for_the_version() {
        let a = std::sync::Arc::new(Activity::default());
        let waiter = tokio::spawn({
            let a = a.clone();
            async move { a.seen("12").await }
        });
        a.observed("7");
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        a.observed("13");
        waiter.await.unwrap();
    }
}
