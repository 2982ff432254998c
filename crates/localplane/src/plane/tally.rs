//! The bench's live tally: counts of a kind kept current from the plane's change stream, apart
//! from the request path so that polling them never takes the plane's lock.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::broadcast;

use super::Plane;
use crate::hooks::ResourceKey;
use crate::store::{EventType, ObjKey, WatchEvent, key_of};

impl Plane {
    /// A live [`count_where`](Plane::count_where): scanned once, then kept current from the
    /// plane's change stream, so polling it costs the plane nothing.
    pub fn tally(
        &self,
        res: &ResourceKey,
        namespace: Option<&str>,
        pred: impl Fn(&Value) -> bool + Send + 'static,
    ) -> Tally {
        // A kind read through another's store (events.k8s.io Events) is counted from that
        // store, each object as the kind presents it.
        let (key, def) = self.view(res);
        let pred: Box<dyn Fn(&Value) -> bool + Send> = match def {
            Some(d) => Box::new(move |v| pred(&d.present(&d.preferred().name, v))),
            None => Box::new(pred),
        };
        let mut t = Tally {
            plane: self.clone(),
            res: key,
            namespace: namespace.map(str::to_string),
            pred,
            rx: None,
            all: HashSet::new(),
            matched: HashSet::new(),
        };
        t.rescan();
        t
    }
}

/// Objects of one kind, and those a predicate accepts, counted from a plane's change stream
/// (see [`Plane::tally`]).
pub struct Tally {
    plane: Plane,
    res: ResourceKey,
    namespace: Option<String>,
    pred: Box<dyn Fn(&Value) -> bool + Send>,
    rx: Option<broadcast::Receiver<Arc<WatchEvent>>>,
    all: HashSet<ObjKey>,
    matched: HashSet<ObjKey>,
}

impl Tally {
    /// (objects, accepted objects) as of now.
    pub fn counts(&mut self) -> (usize, usize) {
        while let Some(rx) = self.rx.as_mut() {
            match rx.try_recv() {
                Ok(e) => self.apply(&e),
                Err(broadcast::error::TryRecvError::Empty) => break,
                // Changes were missed: only a fresh scan is exact again.
                Err(broadcast::error::TryRecvError::Lagged(_)) => self.rescan(),
                // The plane is gone; what was counted last stays.
                Err(broadcast::error::TryRecvError::Closed) => self.rx = None,
            }
        }
        (self.all.len(), self.matched.len())
    }

    /// Waits until `done(objects, accepted)` holds, applying changes as they come, or until
    /// `within` has passed; the counts as of then. A caller polling for completion wakes at the
    /// change that completes it, not at its next poll, and still gets control back every
    /// `within` for whatever else it watches.
    pub async fn wait_for(
        &mut self,
        within: Duration,
        done: impl Fn(usize, usize) -> bool,
    ) -> (usize, usize) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let counts = self.counts();
            if done(counts.0, counts.1) {
                return counts;
            }
            let Some(rx) = self.rx.as_mut() else {
                // The plane is gone: nothing will change any more.
                return counts;
            };
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Ok(e)) => self.apply(&e),
                Ok(Err(broadcast::error::RecvError::Lagged(_))) => self.rescan(),
                Ok(Err(broadcast::error::RecvError::Closed)) => self.rx = None,
                Err(_) => return self.counts(),
            }
        }
    }

    fn apply(&mut self, e: &WatchEvent) {
        if e.res != self.res {
            return;
        }
        let key = key_of(&e.obj);
        if self.namespace.as_ref().is_some_and(|ns| *ns != key.0) {
            return;
        }
        if e.etype == EventType::Deleted {
            self.all.remove(&key);
            self.matched.remove(&key);
        } else if (self.pred)(&e.obj) {
            self.all.insert(key.clone());
            self.matched.insert(key);
        } else {
            self.matched.remove(&key);
            self.all.insert(key);
        }
    }

    /// Subscribes and scans under one read lock: writers commit (and announce) under the write
    /// lock, so no change falls between the two.
    fn rescan(&mut self) {
        let plane = self.plane.clone();
        let st = plane.read();
        self.rx = Some(st.store.subscribe());
        self.all.clear();
        self.matched.clear();
        for (key, v) in st.store.range(&self.res, self.namespace.as_deref(), None) {
            if (self.pred)(v) {
                self.matched.insert(key.clone());
            }
            self.all.insert(key.clone());
        }
    }
}
