//! DELETE: preconditions, finalizers, and what the namespace controller does for a deleted
//! namespace.

use std::sync::Arc;

use kube::core::Status;
use kube::core::response::{StatusDetails, StatusSummary};
use serde_json::{Value, json};

use super::group::WriteGuard;
use super::read::{ListQuery, ListResult};
use super::{Plane, crds};
use crate::error::{ApiError, status_json};
use crate::hooks::{Caller, ResourceKey, StorageHooks};
use crate::meta;
use crate::resources::ResourceDef;
use crate::store::{Txn, namespaces_key};

/// Namespaces the apiserver's namespace-lifecycle admission never lets go.
const IMMORTAL_NAMESPACES: [&str; 3] = ["default", "kube-system", "kube-public"];

/// `DeleteOptions` as far as this server honours them.
#[derive(Debug, Clone, Default)]
pub(crate) struct DeleteOpts {
    pub dry_run: bool,
    /// `preconditions.uid`: delete only the object with this uid.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`: delete only this version of the object.
    pub resource_version: Option<String>,
    /// The delete lands after it arrived (a delayed commit): the registry's check on arrival
    /// passed, so a mismatch now is the storage layer's to word.
    pub late_commit: bool,
    /// The finalizer `propagationPolicy` asks for: `foregroundDeletion` or `orphan`.
    pub propagation_finalizer: Option<&'static str>,
}

/// One DELETE as the plane takes it: the object it names, its options, and who asks.
#[derive(Clone, Copy)]
pub(crate) struct Deletion<'a> {
    pub def: &'a Arc<ResourceDef>,
    pub ns: Option<&'a str>,
    pub name: &'a str,
    pub opts: &'a DeleteOpts,
    pub caller: &'a Caller,
}

/// What a DELETE starts from (see [`Plane::open_delete`]): the kind's hooks, the plane locked
/// for writing, and the object as stored.
pub(super) struct Opened<'p>(
    pub Vec<Arc<dyn StorageHooks>>,
    pub WriteGuard<'p>,
    pub Arc<Value>,
);

impl Plane {
    /// DELETE: removes the object, or marks it deleting while finalizers remain. Answers with the
    /// object while it still exists, else a success Status.
    ///
    /// The preconditions are checked against the object as it is when the delete is applied,
    /// under the same lock as the removal, so a delete that arrives early and lands late can
    /// never remove an object created in between; unless the service this plane stands in for
    /// reads none for the kind (Milo's IPClaim), which a strict plane overrides.
    ///
    /// A kind its service deletes in two writes ([`StorageHooks::deletes_in_two_steps`]) takes
    /// both here, one after the other, and answers with the object as the first left it.
    pub(crate) fn delete(&self, d: Deletion<'_>) -> Result<Value, ApiError> {
        let Deletion {
            def,
            name,
            opts,
            caller,
            ..
        } = d;
        let key = def.key();
        if key == namespaces_key() && IMMORTAL_NAMESPACES.contains(&name) {
            return Err(ApiError::forbidden(
                "",
                "namespaces",
                name,
                "this namespace may not be deleted",
            ));
        }
        if self.deletes_in_two_steps(&key) {
            let marked = self.mark_for_release(d)?;
            if !opts.dry_run {
                self.finish_release(d, &marked)?;
            }
            return Ok(marked);
        }
        let Opened(hooks, mut guard, old) = self.open_delete(d)?;
        let st = &mut *guard;
        let mut txn = Txn::new(&mut st.store, &st.registry);
        let out = if key == namespaces_key() {
            let marked = mark_deleting(&mut txn, &key, &old, true);
            drain_namespace(&mut txn, name, caller, &|k| self.hooks_for(k));
            match txn.get(&key, "", name) {
                Some(still) => (*still).clone(),
                None => (*marked).clone(),
            }
        } else if !meta::finalizers(&old).is_empty() {
            if old.pointer("/metadata/deletionTimestamp").is_some() {
                return Ok((*old).clone());
            }
            (*mark_deleting(&mut txn, &key, &old, false)).clone()
        } else {
            // A foreground or orphaning delete is answered with the object marked deleting under
            // the policy's finalizer; the garbage collector then finds no dependents (localplane
            // keeps no owner graph) and lets it go: the watch sees both writes.
            let marked = opts.propagation_finalizer.map(|f| {
                let mut with = (*old).clone();
                meta::meta_mut(&mut with).insert("finalizers".into(), json!([f]));
                mark_deleting(&mut txn, &key, &with, false)
            });
            for h in &hooks {
                h.before_delete(&mut txn, caller, &key, &old)
                    .map_err(ApiError::from)?;
            }
            if crds::is_crd(def) {
                crds::remove_objects(&mut txn, &old);
            }
            match marked {
                Some(marked) => {
                    let mut gone = (*marked).clone();
                    meta::meta_mut(&mut gone).remove("finalizers");
                    txn.delete(&key, gone);
                    (*marked).clone()
                }
                None => {
                    txn.delete(&key, (*old).clone());
                    deleted_status(def, name, &old)
                }
            }
        };
        if !opts.dry_run {
            txn.commit();
            if crds::is_crd(def) && st.store.get(&key, "", name).is_none() {
                st.registry.remove(&crds::served_key(&old));
            }
        }
        Ok(out)
    }
}

impl Plane {
    /// What a DELETE starts from: the hooks of its kind, the plane locked for writing, and the
    /// object as stored now (404 when there is none) once the preconditions hold, where the kind
    /// reads them (Milo's IPClaim reads none).
    pub(super) fn open_delete(&self, d: Deletion<'_>) -> Result<Opened<'_>, ApiError> {
        let key = d.def.key();
        let hooks = self.hooks_for(&key);
        let guard = self.write();
        let old = guard
            .store
            .get(&key, d.ns.unwrap_or(""), d.name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&d.def.group, &d.def.plural, d.name))?;
        if self.reads_delete_preconditions(&key) {
            check_preconditions(d.def, d.name, &old, d.opts)?;
        }
        Ok(Opened(hooks, guard, old))
    }

    /// DELETE of a collection: every object the list's selectors match, each deleted as its own
    /// DELETE would be (preconditions, finalizers, hooks, one event each). Answers with the
    /// list as it was read (for a kind deleted in two writes, as Milo answers: the objects it
    /// deleted, as their first write left them); the first failure, if any, after trying them
    /// all.
    pub(crate) fn delete_collection(
        &self,
        def: &Arc<ResourceDef>,
        ns: Option<&str>,
        q: &ListQuery<'_>,
        opts: &DeleteOpts,
        caller: &Caller,
    ) -> Result<ListResult, ApiError> {
        if def.key() == namespaces_key() {
            return Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            ));
        }
        let mut listed = self.list(def, ns, q)?;
        let two_steps = self.deletes_in_two_steps(&def.key());
        let mut deleted = vec![];
        let mut failed = None;
        for obj in &listed.items {
            let obj_ns = meta::str_at(obj, "/metadata/namespace");
            let name = meta::str_at(obj, "/metadata/name");
            let ns = def.namespaced.then_some(obj_ns);
            let d = Deletion {
                def,
                ns,
                name,
                opts,
                caller,
            };
            match self.delete(d) {
                Ok(out) => deleted.push(Arc::new(out)),
                Err(e) if e.0.reason == "NotFound" => {}
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        if two_steps {
            listed.items = deleted;
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(listed),
        }
    }
}

/// The answer to a precondition the stored object does not meet. A delete applied as it
/// arrives is refused by the registry's `BeforeDelete` (by Kind, in its words, as the real
/// apiserver showed); one that lands late, by the storage layer (by plural, in its words).
pub(super) fn check_preconditions(
    def: &ResourceDef,
    name: &str,
    old: &Value,
    opts: &DeleteOpts,
) -> Result<(), ApiError> {
    let failed = |what: &str, want: &str, have: &str| {
        if opts.late_commit {
            return ApiError::conflict(
                &def.group,
                &def.plural,
                name,
                &format!(
                    "Precondition failed: {what} in precondition: {want}, {what} in object meta: {have}"
                ),
            );
        }
        let consequence = if what == "UID" {
            "The object might have been deleted and then recreated"
        } else {
            "The object might have been modified"
        };
        ApiError::conflict(
            &def.group,
            &def.kind,
            name,
            &format!(
                "the {what} in the precondition ({want}) does not match the {what} in record ({have}). {consequence}"
            ),
        )
    };
    let uid = meta::str_at(old, "/metadata/uid");
    if let Some(want) = opts.uid.as_deref()
        && want != uid
    {
        return Err(failed("UID", want, uid));
    }
    let rv = meta::str_at(old, "/metadata/resourceVersion");
    if let Some(want) = opts.resource_version.as_deref()
        && want != rv
    {
        return Err(failed("ResourceVersion", want, rv));
    }
    Ok(())
}

/// The Status a DELETE that removed the object answers with.
fn deleted_status(def: &ResourceDef, name: &str, old: &Value) -> Value {
    status_json(&Status {
        status: Some(StatusSummary::Success),
        code: 0,
        message: String::new(),
        metadata: None,
        reason: String::new(),
        details: Some(StatusDetails {
            name: name.to_string(),
            group: def.group.clone(),
            kind: def.plural.clone(),
            uid: meta::str_at(old, "/metadata/uid").to_string(),
            causes: vec![],
            retry_after_seconds: 0,
        }),
    })
}

/// Sets `deletionTimestamp` (and, on a namespace, phase Terminating): the state an object waits
/// in for its finalizers.
fn mark_deleting(txn: &mut Txn<'_>, key: &ResourceKey, old: &Value, ns: bool) -> Arc<Value> {
    let mut obj = old.clone();
    {
        let m = meta::meta_mut(&mut obj);
        m.insert("deletionTimestamp".into(), json!(meta::now_rfc3339()));
        // The namespace registry marks a namespace terminating without a grace period, as the
        // real apiserver showed; the generic registry gives other objects 0.
        if !ns {
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
        }
        // rest.BeforeDelete bumps generation when it sets deletionTimestamp.
        if let Some(g) = m.get("generation").and_then(Value::as_i64) {
            m.insert("generation".into(), json!(g + 1));
        }
    }
    if ns {
        obj["status"] = json!({"phase": "Terminating"});
    }
    txn.write(key, obj)
}

/// What the namespace controller does for a deleted namespace: delete everything in it (objects
/// with finalizers wait for them), then the namespace itself.
fn drain_namespace(
    txn: &mut Txn<'_>,
    ns: &str,
    caller: &Caller,
    hooks_for: &dyn Fn(&ResourceKey) -> Vec<Arc<dyn StorageHooks>>,
) {
    let keys: Vec<ResourceKey> = txn
        .registry
        .all()
        .filter(|d| d.namespaced)
        .map(|d| d.key())
        .collect();
    for k in keys {
        let objs: Vec<Arc<Value>> = txn
            .store
            .range(&k, Some(ns), None)
            .map(|(_, v)| v.clone())
            .collect();
        let hooks = hooks_for(&k);
        for o in objs {
            if !meta::finalizers(&o).is_empty() {
                if o.pointer("/metadata/deletionTimestamp").is_none() {
                    mark_deleting(txn, &k, &o, false);
                }
                continue;
            }
            let refused = hooks
                .iter()
                .find_map(|h| h.before_delete(txn, caller, &k, &o).err());
            if let Some(s) = refused {
                tracing::warn!(
                    ?s,
                    "a hook refused deleting an object of a deleted namespace"
                );
                continue;
            }
            txn.delete(&k, (*o).clone());
        }
    }
    txn.finish_namespace_if_drained(ns);
}
