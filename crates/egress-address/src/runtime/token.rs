//! Whether this instance may write right now: the [`LeaderToken`] every write checks right
//! before it is made. The elector (`leader.rs`) grants it while the lease is renewed and revokes
//! it the moment a renewal fails; the token stops granting by itself once the deadline of the
//! last renewal passes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::reconcile::WriteGate;

struct TokenState {
    always: bool,
    until: Mutex<Option<Instant>>,
    changed: watch::Sender<bool>,
}

/// Whether this instance may write right now. Cheap to clone and to check.
#[derive(Clone)]
pub struct LeaderToken {
    inner: Arc<TokenState>,
}

impl LeaderToken {
    /// A token that always grants: leader election is off.
    pub fn always() -> Self {
        Self::build(true)
    }

    /// A token that grants only while an elector keeps it renewed.
    pub fn elected() -> Self {
        Self::build(false)
    }

    fn build(always: bool) -> Self {
        let (changed, _) = watch::channel(always);
        Self {
            inner: Arc::new(TokenState {
                always,
                until: Mutex::new(None),
                changed,
            }),
        }
    }

    pub fn is_leader(&self) -> bool {
        self.inner.always || self.deadline().is_some_and(|t| Instant::now() < t)
    }

    /// Whether this instance holds the lease as far as it knows: granted and neither revoked nor
    /// lost, though its renewal may be overdue (then [`is_leader`](Self::is_leader) is false
    /// until the renewal lands or fails). Work that arrives meanwhile is this instance's to do.
    pub fn holds(&self) -> bool {
        self.inner.always || crate::sync::lock(&self.inner.until).is_some()
    }

    /// Whether the lease is held but its renewal is past its deadline.
    pub fn is_overdue(&self) -> bool {
        self.holds() && !self.is_leader()
    }

    /// Until when writes are granted; `None` without election or while not holding.
    pub fn deadline(&self) -> Option<Instant> {
        if self.inner.always {
            return None;
        }
        *crate::sync::lock(&self.inner.until)
    }

    /// Grants writes until `until`.
    pub fn grant(&self, until: Instant) {
        *crate::sync::lock(&self.inner.until) = Some(until);
        self.inner.changed.send_replace(true);
    }

    /// Stops writes at once.
    pub fn revoke(&self) {
        if self.inner.always {
            return;
        }
        *crate::sync::lock(&self.inner.until) = None;
        self.inner.changed.send_replace(false);
    }

    /// Resolves once this instance may write.
    pub async fn wait_leader(&self) {
        let mut rx = self.inner.changed.subscribe();
        loop {
            if self.is_leader() {
                return;
            }
            // A deadline can pass without a change being sent, so poll as well.
            tokio::select! {
                _ = rx.changed() => {}
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
    }

    /// Notified on every grant and revoke.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.inner.changed.subscribe()
    }
}

impl WriteGate for LeaderToken {
    fn may_write(&self) -> bool {
        self.is_leader()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_token_grants_until_its_deadline() {
        let token = LeaderToken::elected();
        assert!(!token.is_leader());
        assert!(!token.may_write());
        token.grant(Instant::now() + Duration::from_secs(10));
        assert!(token.is_leader());
        assert!(!token.is_overdue());
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert!(
            !token.is_leader(),
            "a missed renewal must stop writes by itself"
        );
        assert!(token.holds(), "a late renewal is not a lost lease");
        assert!(token.is_overdue());
        token.grant(Instant::now() + Duration::from_secs(10));
        assert!(token.is_leader() && !token.is_overdue());
        token.revoke();
        assert!(!token.holds() && !token.is_overdue());
    }

    #[tokio::test(start_paused = true)]
    async fn revoking_stops_writes_at_once() {
        let token = LeaderToken::elected();
        token.grant(Instant::now() + Duration::from_secs(10));
        token.revoke();
        assert!(!token.is_leader());
        assert!(LeaderToken::always().is_leader());
        let always = LeaderToken::always();
        always.revoke();
        assert!(always.is_leader());
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_wake_on_grant() {
        let token = LeaderToken::elected();
        let waiter = {
            let t = token.clone();
            tokio::spawn(async move { t.wait_leader().await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiter.is_finished());
        token.grant(Instant::now() + Duration::from_secs(10));
        waiter.await.unwrap();
    }
}
