//! Whether the controller can do its work, and if not, why: the first full list of shards is
//! cached, the cell answers and accepts the credential, and IPAM has not refused the credential
//! or stopped answering. `/ready` reports it, with the reasons in its body, and the same facts
//! are exported as metrics (`egress_address_ipam_up`, `egress_address_cell_up`).

use std::sync::Mutex;

use tokio::sync::watch;

use crate::ipam::{Health, Ipam};
use crate::metrics::Metrics;

/// What the cell's latest answer said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CellHealth {
    Up,
    CredentialRefused,
    /// No answer; the cause is named (see [`crate::kube_status::transport_cause`]).
    Unreachable(&'static str),
}

struct State {
    synced: bool,
    cell: CellHealth,
    /// What the cell's RBAC forbids the controller, by what it was doing: the apiserver's own
    /// words, which name the verb and the resource.
    forbidden: std::collections::BTreeMap<&'static str, String>,
    /// Since when the leader's lease renewal has been overdue.
    lease_overdue_since: Option<tokio::time::Instant>,
}

/// Readiness inputs, shared between the tasks and the handle.
pub struct Readiness {
    state: Mutex<State>,
    ipam: Ipam,
    metrics: Metrics,
    ready: watch::Sender<bool>,
}

impl Readiness {
    pub fn new(ipam: Ipam, metrics: Metrics) -> Self {
        Self {
            state: Mutex::new(State {
                synced: false,
                cell: CellHealth::Up,
                forbidden: Default::default(),
                lease_overdue_since: None,
            }),
            ipam,
            metrics,
            ready: watch::channel(false).0,
        }
    }

    pub fn set_synced(&self) {
        crate::sync::lock(&self.state).synced = true;
        self.refresh();
    }

    pub fn is_synced(&self) -> bool {
        crate::sync::lock(&self.state).synced
    }

    pub fn set_cell(&self, health: CellHealth) {
        let changed = {
            let mut st = crate::sync::lock(&self.state);
            std::mem::replace(&mut st.cell, health) != health
        };
        self.metrics.set_cell_up(health == CellHealth::Up);
        if changed {
            self.refresh();
        }
    }

    /// The cell refused `doing` with a 403 (`message` is the apiserver's, naming the verb and the
    /// resource), or, with `None`, no longer does. Not ready while any is refused: a controller
    /// whose RBAC lacks a verb cannot do its work, and says which.
    pub fn set_forbidden(&self, doing: &'static str, message: Option<String>) {
        let changed = {
            let mut st = crate::sync::lock(&self.state);
            match message {
                Some(m) => st.forbidden.insert(doing, m.clone()).as_ref() != Some(&m),
                None => st.forbidden.remove(doing).is_some(),
            }
        };
        if changed {
            self.refresh();
        }
    }

    /// Whether the leader's lease renewal is past its deadline (it neither landed nor failed).
    /// Not a reason to be unready: a standby is ready too, and the lease decides who writes.
    pub fn set_lease_overdue(&self, overdue: bool) {
        let mut st = crate::sync::lock(&self.state);
        st.lease_overdue_since = match (overdue, st.lease_overdue_since) {
            (false, _) => None,
            (true, since) => since.or_else(|| Some(tokio::time::Instant::now())),
        };
    }

    /// What a reader of `/ready` should know although the controller is ready.
    pub fn notes(&self) -> Vec<String> {
        let st = crate::sync::lock(&self.state);
        st.lease_overdue_since
            .map(|since| {
                format!(
                    "the leader lease renewal is {:.1} s overdue: writes wait for it, shards stay queued",
                    since.elapsed().as_secs_f64()
                )
            })
            .into_iter()
            .collect()
    }

    /// Re-reads IPAM's health (it changes with every answer) and publishes the verdict.
    pub fn refresh(&self) {
        let ready = self.reasons().is_empty();
        self.ready
            .send_if_modified(|r| std::mem::replace(r, ready) != ready);
    }

    /// Why the controller is not ready; empty when it is.
    pub fn reasons(&self) -> Vec<String> {
        let st = crate::sync::lock(&self.state);
        let mut reasons = Vec::new();
        if !st.synced {
            reasons.push("the shards are not listed yet".to_string());
        }
        match st.cell {
            CellHealth::Up => {}
            CellHealth::CredentialRefused => {
                reasons.push("the cell refuses the controller's credential".to_string())
            }
            CellHealth::Unreachable(cause) => {
                reasons.push(format!("the cell's API server does not answer ({cause})"))
            }
        }
        for (doing, message) in &st.forbidden {
            reasons.push(format!("the cell forbids {doing}: {message}"));
        }
        match self.ipam.health() {
            Health::Up | Health::Unknown => {}
            Health::CredentialRefused => {
                reasons.push("IPAM refuses the controller's credential".to_string())
            }
            Health::Unreachable(cause) => reasons.push(format!("IPAM does not answer ({cause})")),
        }
        reasons
    }

    pub fn is_ready(&self) -> bool {
        self.refresh();
        *self.ready.borrow()
    }

    /// Resolves once ready.
    pub async fn wait_ready(&self) {
        let mut rx = self.ready.subscribe();
        let mut ipam = self.ipam.health_changes();
        loop {
            self.refresh();
            if *rx.borrow_and_update() {
                return;
            }
            tokio::select! {
                _ = rx.changed() => {}
                _ = ipam.changed() => {}
            }
        }
    }
}
