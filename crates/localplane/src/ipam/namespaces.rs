//! Namespace liveness on a claim create, as Milo's claim path checks it (§3.2 step 6 of the IPAM
//! spec; `internal/access/namespace.go`): an address bound into a namespace nothing will collect
//! would outlive every release, so a missing or terminating namespace is refused with 403, in
//! Milo's words. It runs after the class gates and before the claim is checked against its class,
//! where Milo runs it.
//!
//! Milo reuses a `Live` answer for ten seconds (`liveTTL`) before it looks again, and only a
//! `Live` answer: within ten seconds of a create that found the namespace live, another create
//! there is admitted even if the namespace has started terminating or is gone. localplane
//! remembers the same answers for the same time, so it is never the stricter of the two;
//! [`Liveness::forget`] is that time passing.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::errors::{self, Result};
use super::store::CLAIMS;
use crate::hooks::{PlaneTxn, ResourceKey};
use crate::locks;

/// How long a namespace found live is taken to be live (Milo's `liveTTL`).
pub(crate) const LIVE_FOR: Duration = Duration::from_secs(10);

/// Milo's bound on the answers it keeps (`maxLiveEntries`).
const MAX_REMEMBERED: usize = 4096;

/// What one plane's claim path remembers of the namespaces it found live.
#[derive(Default)]
pub(crate) struct Liveness {
    live_until: Mutex<HashMap<String, Instant>>,
}

impl Liveness {
    /// Admits a claim create into `ns`, or refuses it with Milo's 403.
    pub fn check(&self, txn: &dyn PlaneTxn, ns: &str) -> Result<()> {
        let now = Instant::now();
        if ns.is_empty() || self.remembered(ns, now) {
            return Ok(());
        }
        let key = ResourceKey::new("", "namespaces");
        match txn.get(&key, None, ns) {
            None => Err(errors::forbidden(
                CLAIMS,
                "",
                &format!(
                    "namespace {ns} does not exist: an address bound into it would have nothing to collect it"
                ),
            )),
            Some(n) if terminating(&n) => Err(errors::forbidden(
                CLAIMS,
                "",
                &format!(
                    "unable to create new content in namespace {ns} because it is being terminated: an address \
                     bound into a terminating namespace would outlive everything that could release it"
                ),
            )),
            Some(_) => {
                self.remember(ns, now);
                Ok(())
            }
        }
    }

    /// Forgets every namespace found live, as [`LIVE_FOR`] passing would: the next create looks
    /// again.
    pub fn forget(&self) {
        locks::lock(&self.live_until).clear();
    }

    fn remembered(&self, ns: &str, now: Instant) -> bool {
        locks::lock(&self.live_until)
            .get(ns)
            .is_some_and(|until| now < *until)
    }

    fn remember(&self, ns: &str, now: Instant) {
        let mut live = locks::lock(&self.live_until);
        if live.len() >= MAX_REMEMBERED {
            live.retain(|_, until| now < *until);
            if live.len() >= MAX_REMEMBERED {
                live.clear();
            }
        }
        live.insert(ns.to_string(), now + LIVE_FOR);
    }
}

/// Both signals Milo reads: `deletionTimestamp` is set the moment deletion is asked for, the
/// phase follows.
fn terminating(ns: &Value) -> bool {
    ns.pointer("/metadata/deletionTimestamp").is_some()
        || ns.pointer("/status/phase").and_then(Value::as_str) == Some("Terminating")
}
