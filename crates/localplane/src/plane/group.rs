//! Planes whose writes may reach into each other: a write group.
//!
//! Each plane serialises its own writes with its lock. A service that spans planes (Milo IPAM: a
//! claim in one project may allocate from a pool of another, through a class's `spec.source`)
//! must also write a second plane inside the first one's write. Taking a second plane's lock
//! while holding one's own deadlocks as soon as two planes do it toward each other, so the
//! planes of a group take one more lock first: the group's. A write on a plane of a group holds
//! the group for its whole length; only then does it take its plane's lock, and from inside it
//! may take the lock of any other plane of the group ([`Plane::group_txn`]), since no other
//! writer of the group can hold one. Readers take no group lock and never wait for one.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard, RwLockWriteGuard};
use std::thread::ThreadId;

use super::{Plane, PlaneState};
use crate::hooks::PlaneTxn;
use crate::locks;
use crate::store::Txn;

/// Planes that write into each other; see the module documentation.
#[derive(Clone, Default)]
pub struct WriteGroup(Arc<GroupInner>);

#[derive(Default)]
struct GroupInner {
    lock: Mutex<()>,
    /// The thread holding `lock`, so that a write it makes on another plane of the group (from
    /// inside its own) does not wait for itself.
    holder: Mutex<Option<ThreadId>>,
}

impl WriteGroup {
    fn held_here(&self) -> bool {
        *locks::lock(&self.0.holder) == Some(std::thread::current().id())
    }

    /// The group's lock, unless this thread holds it already.
    fn enter(&self) -> Option<GroupGuard<'_>> {
        if self.held_here() {
            return None;
        }
        let guard = locks::lock(&self.0.lock);
        *locks::lock(&self.0.holder) = Some(std::thread::current().id());
        Some(GroupGuard {
            group: &self.0,
            _guard: guard,
        })
    }
}

struct GroupGuard<'a> {
    group: &'a GroupInner,
    _guard: MutexGuard<'a, ()>,
}

impl Drop for GroupGuard<'_> {
    fn drop(&mut self) {
        // Runs before `_guard` is dropped, so no other thread can be recorded first.
        *locks::lock(&self.group.holder) = None;
    }
}

/// A plane's write lock, and its group's when it is in one. The plane's lock is let go first.
pub(crate) struct WriteGuard<'a> {
    state: RwLockWriteGuard<'a, PlaneState>,
    _group: Option<GroupGuard<'a>>,
}

impl Deref for WriteGuard<'_> {
    type Target = PlaneState;
    fn deref(&self) -> &PlaneState {
        &self.state
    }
}

impl DerefMut for WriteGuard<'_> {
    fn deref_mut(&mut self) -> &mut PlaneState {
        &mut self.state
    }
}

impl Plane {
    /// Puts the plane in `group`, before it serves a request. A plane is in one group at most.
    pub fn join_group(&self, group: &WriteGroup) {
        if self.0.group.set(group.clone()).is_err() {
            tracing::warn!(plane = self.name(), "the plane is in a write group already");
        }
    }

    pub(super) fn write(&self) -> WriteGuard<'_> {
        let group = self.0.group.get().and_then(WriteGroup::enter);
        WriteGuard {
            state: locks::write(&self.0.state),
            _group: group,
        }
    }

    /// Runs `f` in a transaction of this plane, committed when `f` says so (and dropped, undone,
    /// otherwise). Called from inside a write of another plane of the same group, it joins that
    /// write's hold on the group; anywhere else it is a write of its own.
    pub(crate) fn group_txn<R>(&self, f: impl FnOnce(&mut dyn PlaneTxn) -> (R, bool)) -> R {
        let mut guard = self.write();
        let st = &mut *guard;
        let mut txn = Txn::new(&mut st.store, &st.registry);
        let (out, commit) = f(&mut txn);
        if commit {
            txn.commit();
        }
        out
    }
}
