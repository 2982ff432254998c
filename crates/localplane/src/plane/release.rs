//! A DELETE its service carries out in two writes (Milo's IPClaim, `AllocatingREST.Delete`): the
//! object is marked (`Releasing`) and committed, the plane's lock is let go, and a second write
//! releases what it holds and removes it. GETs and watches see the mark in between (a MODIFIED
//! event, then DELETED); a release that fails leaves it.
//!
//! The second step removes whatever holds the name when it runs, as Milo's second transaction
//! works by key: a same-named object made between the steps is the one released. Only a strict
//! plane ([`Plane::set_strict_deletes`]) reads preconditions, and then at both steps.

use std::sync::Arc;

use kube::core::Status;
use serde_json::Value;

use super::Plane;
use super::delete::{DeleteOpts, Deletion, Opened, check_preconditions};
use crate::error::ApiError;
use crate::hooks::{ResourceKey, StorageHooks};
use crate::meta;
use crate::resources::ResourceDef;
use crate::store::Txn;

impl Plane {
    /// Whether a DELETE of `key` takes two writes on this plane.
    pub(crate) fn deletes_in_two_steps(&self, key: &ResourceKey) -> bool {
        self.two_step_hook(key).is_some()
    }

    fn two_step_hook(&self, key: &ResourceKey) -> Option<Arc<dyn StorageHooks>> {
        self.hooks_for(key)
            .into_iter()
            .find(|h| h.deletes_in_two_steps(key))
    }

    /// The answer to a release step that failed for `why`, in the service's words.
    pub(crate) fn release_failure(&self, def: &ResourceDef, why: &str) -> ApiError {
        let key = def.key();
        let status = match self.two_step_hook(&key) {
            Some(h) => h.release_failure(&key, why),
            None => Status::failure(why, "InternalError").with_code(500),
        };
        ApiError(status)
    }

    /// The first write: the object as the hooks mark it, committed under its own resourceVersion
    /// (again, for an object already marked: a retried delete writes it again, as Milo does).
    /// Answers with the marked object; a dry run answers with the object as stored and writes
    /// nothing.
    pub(crate) fn mark_for_release(&self, d: Deletion<'_>) -> Result<Value, ApiError> {
        let key = d.def.key();
        let Opened(hooks, mut guard, old) = self.open_delete(d)?;
        let st = &mut *guard;
        let mut marked = (*old).clone();
        for h in &hooks {
            h.mark_for_release(d.caller, &key, &mut marked)
                .map_err(ApiError::from)?;
        }
        if d.opts.dry_run {
            return Ok((*old).clone());
        }
        let mut txn = Txn::new(&mut st.store, &st.registry);
        let stored = txn.write(&key, marked);
        txn.commit();
        Ok((*stored).clone())
    }

    /// The second write: the hooks release what the object holds, and it is removed. `marked` is
    /// what the first step wrote. A failure leaves the object as it is and answers in the
    /// service's words; so does finding nothing left (another delete finished it first).
    pub(crate) fn finish_release(&self, d: Deletion<'_>, marked: &Value) -> Result<(), ApiError> {
        let Deletion {
            def,
            ns,
            name,
            opts,
            caller,
        } = d;
        let key = def.key();
        let hooks = self.hooks_for(&key);
        let mut guard = self.write();
        let st = &mut *guard;
        let Some(now) = st.store.get(&key, ns.unwrap_or(""), name).cloned() else {
            let at = ns.map_or(name.to_string(), |ns| format!("{ns}/{name}"));
            return Err(self.release_failure(
                def,
                &format!(
                    "no {} {at} is left to release: another delete released it between this one's two steps",
                    def.kind
                ),
            ));
        };
        // The first step checked the object it marked; anything else there now is checked as a
        // commit that lands late is.
        let rv = |o: &Value| meta::str_at(o, "/metadata/resourceVersion").to_string();
        if self.reads_delete_preconditions(&key) && rv(&now) != rv(marked) {
            let late = DeleteOpts {
                late_commit: true,
                ..opts.clone()
            };
            check_preconditions(def, name, &now, &late)?;
        }
        let mut txn = Txn::new(&mut st.store, &st.registry);
        for h in &hooks {
            if let Err(refused) = h.before_delete(&mut txn, caller, &key, &now) {
                drop(txn);
                return Err(self.release_failure(def, &refused.message));
            }
        }
        txn.delete(&key, (*now).clone());
        txn.commit();
        Ok(())
    }
}
