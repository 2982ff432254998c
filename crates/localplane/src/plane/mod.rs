//! One control plane (the cell, or one Milo project): its kinds, its store and its hooks.
//!
//! The write semantics the apiserver applies to every request are split by what they do:
//! [`read`] (get, list, `continue` pages), [`write`] (admission, create, update, patch),
//! [`delete`] (preconditions, finalizers, namespace draining), [`release`] (a delete its service
//! carries out in two writes), [`quota`] (Milo's quota on live objects) and [`tally`] (the live
//! counts the bench polls). This file holds the plane itself and access to its registry.

mod crds;
mod delete;
mod group;
mod quota;
mod read;
mod release;
mod tally;
mod write;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, RwLock, RwLockReadGuard, Weak};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::hooks::{ResourceKey, StorageHooks};
use crate::locks;
use crate::resources::{Registry, ResourceDef};

use crate::store::Store;

pub(crate) use delete::{DeleteOpts, Deletion};
pub use group::WriteGroup;
pub(crate) use quota::parse_resource;
pub(crate) use read::{ListQuery, invalid_rv_message};
pub use tally::Tally;
pub(crate) use write::{FieldValidation, PatchKind, Target, WriteOpts, Written, created_fields};

/// A control plane served by localplane. Cheap to clone; clones share the plane.
#[derive(Clone)]
pub struct Plane(Arc<PlaneInner>);

struct PlaneInner {
    name: String,
    project: Option<String>,
    state: RwLock<PlaneState>,
    hooks: RwLock<Vec<Arc<dyn StorageHooks>>>,
    /// Read DELETE preconditions on every kind, even where the service does not (see
    /// [`Plane::set_strict_deletes`]).
    strict_deletes: AtomicBool,
    /// The most live objects of a resource the plane admits (Milo's quota), by resource.
    quotas: RwLock<BTreeMap<ResourceKey, u64>>,
    /// The planes this one's writes may reach into, and that may reach into it ([`WriteGroup`]).
    group: OnceLock<WriteGroup>,
}

/// A plane that is not kept alive by being referred to (a service's registry of the planes it
/// spans, held by the planes' own hooks).
#[derive(Clone)]
pub struct WeakPlane(Weak<PlaneInner>);

impl WeakPlane {
    pub fn upgrade(&self) -> Option<Plane> {
        self.0.upgrade().map(Plane)
    }
}

/// What the plane's lock guards: the kinds it serves and their objects.
pub(crate) struct PlaneState {
    pub registry: Registry,
    pub store: Store,
}

impl Plane {
    pub(crate) fn new(name: &str, project: Option<&str>, history: usize) -> Plane {
        let plane = Plane(Arc::new(PlaneInner {
            name: name.to_string(),
            project: project.map(str::to_string),
            state: RwLock::new(PlaneState {
                registry: Registry::with_builtins(),
                store: Store::new(history),
            }),
            hooks: RwLock::new(vec![]),
            strict_deletes: AtomicBool::new(false),
            quotas: RwLock::new(BTreeMap::new()),
            group: OnceLock::new(),
        }));
        plane.ensure_namespace("default");
        plane
    }

    /// `cell`, or the project's name.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The Milo project this plane is the control plane of (`None` for the cell).
    pub fn project(&self) -> Option<&str> {
        self.0.project.as_deref()
    }

    pub(crate) fn read(&self) -> RwLockReadGuard<'_, PlaneState> {
        locks::read(&self.0.state)
    }

    pub fn downgrade(&self) -> WeakPlane {
        WeakPlane(Arc::downgrade(&self.0))
    }

    /// Registers server-side behaviour; it runs for every resource it `handles()`, in
    /// registration order, inside the write that triggers it.
    pub fn add_hooks(&self, hooks: Arc<dyn StorageHooks>) {
        locks::write(&self.0.hooks).push(hooks);
    }

    fn hooks_for(&self, key: &ResourceKey) -> Vec<Arc<dyn StorageHooks>> {
        locks::read(&self.0.hooks)
            .iter()
            .filter(|h| h.handles(key))
            .cloned()
            .collect()
    }

    /// Whether a DELETE of `key` reads its preconditions here: unless the plane is strict, only
    /// when every hook's service does.
    fn reads_delete_preconditions(&self, key: &ResourceKey) -> bool {
        self.0.strict_deletes.load(Ordering::Relaxed)
            || self
                .hooks_for(key)
                .iter()
                .all(|h| h.reads_delete_preconditions(key))
    }

    /// Reads `DeleteOptions.preconditions` on every kind, also where the service this plane
    /// stands in for reads none (Milo's IPClaim DELETE). Off by default: a strict plane is
    /// stricter than Milo, so it is for a test that shows the difference, never the default of
    /// one.
    pub fn set_strict_deletes(&self, strict: bool) {
        self.0.strict_deletes.store(strict, Ordering::Relaxed);
    }

    /// Drops what the plane's hooks remember from lookups outside its store (Milo's namespace
    /// liveness answers), as the passing of their time would.
    pub fn forget_lookups(&self) {
        for h in locks::read(&self.0.hooks).iter() {
            h.forget_lookups();
        }
    }

    /// Serves a CRD's kind on this plane, as if the CRD were applied to it: the CRD object is
    /// stored (`kubectl get crd` lists it) and its kind served (re-adding replaces the
    /// definition, keeping objects).
    pub fn add_crd(&self, crd: &CustomResourceDefinition) -> Result<(), String> {
        let mut obj = serde_json::to_value(crd).map_err(|e| e.to_string())?;
        obj["apiVersion"] = serde_json::json!("apiextensions.k8s.io/v1");
        obj["kind"] = serde_json::json!("CustomResourceDefinition");
        self.apply_object(obj).map(|_| ()).map_err(|e| {
            format!(
                "CRD {}: {}",
                crd.metadata.name.as_deref().unwrap_or(""),
                e.0.message
            )
        })
    }

    pub fn add_crds(
        &self,
        crds: impl IntoIterator<Item = CustomResourceDefinition>,
    ) -> Result<(), String> {
        for c in crds {
            self.add_crd(&c)?;
        }
        Ok(())
    }

    /// The kind stored under `key`.
    pub(crate) fn def(&self, key: &ResourceKey) -> Option<Arc<ResourceDef>> {
        self.read().registry.get(key).cloned()
    }

    /// The kind served at `/{group}/{version}/{plural}`.
    pub(crate) fn lookup(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<Arc<ResourceDef>> {
        self.read().registry.lookup(group, version, plural)
    }

    /// Whether a built-in kind is served in `group`: the apiserver's own handlers answer an
    /// unknown resource there with a Status; any other group falls through to a plain 404.
    pub(crate) fn has_builtin_in(&self, group: &str) -> bool {
        self.read().registry.has_builtin_in(group)
    }

    /// Forgets the watch history, so any watch resumed from an earlier resourceVersion is told
    /// 410 Expired and the client must relist.
    pub fn compact_history(&self) {
        self.write().store.compact();
    }

    /// The plane's current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.read().store.rv()
    }
}
