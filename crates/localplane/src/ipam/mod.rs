//! Milo IPAM's server-side behaviour (`ipam.miloapis.com/v1alpha1`) for one project plane: pools
//! and classes are validated, claims bind synchronously on create, allocations are created,
//! retained and freed with their claims. See `shared/spec/ipam-service.md`; where that spec
//! describes several service versions, this follows the one the platform's controllers are written
//! against (a retained allocation refuses a same-named claim with `AllocationRetained`).
//!
//! The plane serves the four kinds from their CRDs ([`crds`]) and calls [`IpamHooks`] under its
//! write lock, so every allocation is linearizable with the request that made it.
//!
//! Classes and offering pools are read from the plane the claim arrives on. On the platform
//! project's plane that is exactly the service's model (catalog and operator pools live there);
//! another project's plane acts as its own catalog, since a hook sees only its own plane.

// The hook seam answers with `kube::core::Status` by value; boxing it here would only move the
// copy to the boundary.
#![allow(clippy::result_large_err)]

mod allocations;
mod claims;
mod classes;
pub mod digest;
mod errors;
pub mod index;
mod pools;
mod store;

#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::core::Status;
use serde_json::Value;

use crate::hooks::{Caller, PlaneTxn, ResourceKey, StorageHooks};
use errors::Result;
use index::{Index, IndexTxn};

pub use store::{ALLOCATIONS, CLAIMS, CLASSES, POOLS};

/// The API group every IPAM kind is served under.
pub const GROUP: &str = egress_api::ipam::GROUP;

/// The CRDs a plane serves the IPAM kinds from.
pub fn crds() -> Vec<CustomResourceDefinition> {
    egress_api::ipam::crds()
}

/// The resources [`IpamHooks`] governs.
pub fn resources() -> Vec<ResourceKey> {
    [POOLS, CLASSES, CLAIMS, ALLOCATIONS]
        .iter()
        .map(|p| store::key(p))
        .collect()
}

/// Serves IPAM on every project plane the builder makes (including ones added later): the four
/// kinds from their CRDs, each plane with its own [`IpamHooks`]. `platform_project` names the
/// project that holds the class catalog.
pub fn install(
    builder: crate::LocalPlaneBuilder,
    platform_project: impl Into<String>,
) -> crate::LocalPlaneBuilder {
    let platform = platform_project.into();
    builder
        .project_crds(crds())
        .on_project(move |plane| register(plane, &platform))
}

/// Adds IPAM's hooks to one plane that already serves the IPAM CRDs.
pub fn register(plane: &crate::Plane, platform_project: &str) {
    let hooks = match plane.project() {
        Some(p) => IpamHooks::new(p, platform_project),
        None => IpamHooks::unscoped(platform_project),
    };
    plane.add_hooks(Arc::new(hooks));
}

impl crate::LocalPlaneBuilder {
    /// Serves Milo IPAM on every project plane; see [`install`].
    pub fn ipam(self, platform_project: impl Into<String>) -> Self {
        install(self, platform_project)
    }
}

/// IPAM for one project plane.
pub struct IpamHooks {
    project: Option<String>,
    platform_project: String,
    index: Mutex<Index>,
}

impl IpamHooks {
    /// `project` is the plane's project; `platform_project` the one holding the class catalog,
    /// whose callers pass the class visibility gate.
    pub fn new(project: impl Into<String>, platform_project: impl Into<String>) -> Self {
        Self {
            project: Some(project.into()),
            platform_project: platform_project.into(),
            index: Mutex::new(Index::default()),
        }
    }

    /// For a plane that belongs to no project (the cell): every write is refused with
    /// `NoProjectScope`, as the service refuses untenanted writes.
    pub fn unscoped(platform_project: impl Into<String>) -> Self {
        Self {
            project: None,
            platform_project: platform_project.into(),
            index: Mutex::new(Index::default()),
        }
    }

    pub fn project(&self) -> Option<&str> {
        self.project.as_deref()
    }

    /// Runs one hook with the index locked, undoing its index changes when the request is refused
    /// (the plane discards the request's writes then, and the index must keep matching them).
    fn run(
        &self,
        txn: &mut dyn PlaneTxn,
        caller: &Caller,
        res: &ResourceKey,
        f: impl FnOnce(&mut Ctx<'_, '_>) -> Result<()>,
    ) -> std::result::Result<(), Status> {
        // A panic mid-request leaves the index suspect; rebuilding it from the store is always safe.
        let mut guard = self.index.lock().unwrap_or_else(|e| {
            self.index.clear_poison();
            let mut g = e.into_inner();
            g.built = false;
            g
        });
        let mut ix = IndexTxn::new(&mut guard);
        let mut ctx = Ctx {
            txn,
            ix: &mut ix,
            caller,
            hooks: self,
            plural: res.plural.as_str(),
        };
        let out = (|| {
            if ctx.plural != CLASSES {
                store::ensure_fresh(ctx.txn, ctx.ix)?;
            }
            f(&mut ctx)
        })();
        match out {
            Ok(()) => Ok(()),
            Err(status) => {
                ix.rollback();
                Err(*status)
            }
        }
    }
}

/// Everything a request handler needs.
pub(crate) struct Ctx<'a, 'b> {
    pub txn: &'a mut dyn PlaneTxn,
    pub ix: &'a mut IndexTxn<'b>,
    pub caller: &'a Caller,
    pub hooks: &'a IpamHooks,
    pub plural: &'a str,
}

impl Ctx<'_, '_> {
    /// The caller's project; every IPAM write is tenanted. The plane's own in-process admin
    /// writes (manifests loaded at start) carry no project and act for the plane's project.
    pub fn tenant(&self) -> Result<String> {
        match (
            self.caller.project.as_deref(),
            self.hooks.project.as_deref(),
        ) {
            (Some(p), _) if !p.is_empty() => Ok(p.to_string()),
            (None, Some(p)) if self.caller.groups.iter().any(|g| g == "system:masters") => {
                Ok(p.to_string())
            }
            _ => Err(errors::no_project_scope(self.plural)),
        }
    }

    pub fn is_platform(&self) -> bool {
        self.tenant()
            .is_ok_and(|t| t == self.hooks.platform_project)
    }

    /// The project the plane's own objects (pools) belong to.
    pub fn plane_project(&self) -> &str {
        self.hooks.project.as_deref().unwrap_or("")
    }
}

impl StorageHooks for IpamHooks {
    fn handles(&self, res: &ResourceKey) -> bool {
        res.group == GROUP && [POOLS, CLASSES, CLAIMS, ALLOCATIONS].contains(&res.plural.as_str())
    }

    fn before_create(
        &self,
        txn: &mut dyn PlaneTxn,
        caller: &Caller,
        res: &ResourceKey,
        obj: &mut Value,
    ) -> std::result::Result<(), Status> {
        self.run(txn, caller, res, |ctx| {
            ctx.tenant()?;
            match ctx.plural {
                POOLS => pools::create(ctx, obj),
                CLASSES => classes::create(ctx, obj),
                CLAIMS => claims::create(ctx, obj),
                _ => allocations::create(ctx, obj),
            }
        })
    }

    fn before_update(
        &self,
        txn: &mut dyn PlaneTxn,
        caller: &Caller,
        res: &ResourceKey,
        old: &Value,
        new: &mut Value,
    ) -> std::result::Result<(), Status> {
        self.run(txn, caller, res, |ctx| {
            ctx.tenant()?;
            match ctx.plural {
                POOLS => pools::update(ctx, old, new),
                CLASSES => classes::update(ctx, old, new),
                CLAIMS => claims::update(ctx, old, new),
                _ => allocations::update(ctx, old, new),
            }
        })
    }

    fn before_delete(
        &self,
        txn: &mut dyn PlaneTxn,
        caller: &Caller,
        res: &ResourceKey,
        obj: &Value,
    ) -> std::result::Result<(), Status> {
        self.run(txn, caller, res, |ctx| {
            ctx.tenant()?;
            match ctx.plural {
                POOLS => pools::delete(ctx, obj),
                CLASSES => Ok(()),
                CLAIMS => claims::delete(ctx, obj),
                _ => allocations::delete(ctx, obj),
            }
        })
    }
}
