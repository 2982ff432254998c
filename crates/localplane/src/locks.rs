//! Lock access that survives poisoning.
//!
//! A panic in one request (a bug, or a test asserting inside a hook) must not turn every later
//! request into a panic too. What these locks guard is never left half-written: store writes go
//! through a transaction that undoes itself on drop, and the counters and registries are updated
//! in single steps. So the data behind a poisoned lock is as good as before, and is used as is.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}
