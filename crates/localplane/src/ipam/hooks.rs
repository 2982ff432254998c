//! [`IpamHooks`]: the plane's seam into IPAM. Each hook runs one request handler with the
//! allocation index locked, and undoes the index's changes when the request is refused.

use std::sync::Mutex;

use kube::core::Status;
use serde_json::Value;

use super::ctx::Ctx;
use super::errors::Result;
use super::index::{Index, IndexTxn};
use super::store::{self, ALLOCATIONS, CLAIMS, CLASSES, POOLS};
use super::{allocations, claims, classes, pools};
use crate::hooks::{Caller, PlaneTxn, ResourceKey, StorageHooks};

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
            project: self.project.as_deref(),
            platform_project: &self.platform_project,
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

impl StorageHooks for IpamHooks {
    fn handles(&self, res: &ResourceKey) -> bool {
        res.group == egress_api::ipam::GROUP
            && [POOLS, CLASSES, CLAIMS, ALLOCATIONS].contains(&res.plural.as_str())
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
