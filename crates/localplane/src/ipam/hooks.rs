//! [`IpamHooks`]: the plane's seam into IPAM. Each hook runs one request handler with the
//! allocation index locked, and undoes the index's changes when the request is refused.
//!
//! A claim is deleted as Milo's `AllocatingREST.Delete` deletes it: in two writes (`Releasing`,
//! then the release and the removal), reading no `DeleteOptions.preconditions`, and a release
//! that fails answers 500 in Milo's words with the claim left `Releasing`.

use std::sync::{Arc, Mutex, MutexGuard};

use kube::core::Status;
use serde_json::Value;

use super::ctx::{self, Ctx, Remote, Work};
use super::errors::Result;
use super::index::{Index, IndexTxn};
use super::namespaces::Liveness;
use super::realm::Realm;
use super::store::{self, ALLOCATIONS, CLAIMS, CLASSES, POOLS};
use super::{allocations, claims, classes, pools};
use crate::hooks::{Caller, PlaneTxn, ResourceKey, StorageHooks};
use crate::plane::Plane;

/// IPAM for one project plane.
pub struct IpamHooks {
    project: Option<String>,
    platform_project: String,
    index: Mutex<Index>,
    liveness: Liveness,
    /// The other projects' planes, reached through a class's `spec.source`.
    realm: Arc<Realm>,
}

impl IpamHooks {
    /// `project` is the plane's project; `platform_project` the one holding the class catalog.
    /// Alone in its realm: a class may refer to a class of this project only.
    pub fn new(project: impl Into<String>, platform_project: impl Into<String>) -> Self {
        Self::in_realm(Realm::new(), Some(project.into()), platform_project.into())
    }

    /// For a plane that belongs to no project (the cell): every write is refused with
    /// `NoProjectScope`, as the service refuses untenanted writes.
    pub fn unscoped(platform_project: impl Into<String>) -> Self {
        Self::in_realm(Realm::new(), None, platform_project.into())
    }

    pub(crate) fn in_realm(
        realm: Arc<Realm>,
        project: Option<String>,
        platform_project: String,
    ) -> Self {
        Self {
            project,
            platform_project,
            index: Mutex::new(Index::default()),
            liveness: Liveness::default(),
            realm,
        }
    }

    /// The project named as holding the class catalog. Nothing on the claim path treats it
    /// specially: the line production runs has no platform project and no class visibility gate.
    pub fn platform_project(&self) -> &str {
        &self.platform_project
    }

    fn lock_index(&self) -> MutexGuard<'_, Index> {
        // A panic mid-request leaves the index suspect; rebuilding it from the store is always safe.
        self.index.lock().unwrap_or_else(|e| {
            self.index.clear_poison();
            let mut g = e.into_inner();
            g.built = false;
            g
        })
    }

    /// What one handler of this plane works with, for a request on `plural`.
    fn ctx<'a, 'b>(
        &'a self,
        txn: &'a mut dyn PlaneTxn,
        ix: &'a mut IndexTxn<'b>,
        caller: &'a Caller,
        plural: &'a str,
    ) -> Ctx<'a, 'b> {
        Ctx {
            txn,
            ix,
            caller,
            project: self.project.as_deref(),
            liveness: &self.liveness,
            plural,
            realm: &*self.realm,
        }
    }

    /// Runs one hook for a tenanted caller with the index locked, undoing its index changes when
    /// the request is refused (the plane discards the request's writes then, and the index must
    /// keep matching them).
    fn run(
        &self,
        txn: &mut dyn PlaneTxn,
        caller: &Caller,
        res: &ResourceKey,
        f: impl FnOnce(&mut Ctx<'_, '_>) -> Result<()>,
    ) -> std::result::Result<(), Status> {
        let mut guard = self.lock_index();
        let mut ix = IndexTxn::new(&mut guard);
        let mut ctx = self.ctx(txn, &mut ix, caller, res.plural.as_str());
        let out = (|| {
            ctx.tenant()?;
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

impl Remote for IpamHooks {
    fn run_boxed(&self, plane: &Plane, caller: &Caller, keep: bool, f: Work<'_>) -> Result<()> {
        plane.group_txn(|txn| {
            let mut guard = self.lock_index();
            let mut ix = IndexTxn::new(&mut guard);
            let mut ctx = self.ctx(txn, &mut ix, caller, CLAIMS);
            let out = store::ensure_fresh(ctx.txn, ctx.ix).and_then(|()| f(&mut ctx));
            let commit = keep && out.is_ok();
            if !commit {
                ix.rollback();
            }
            (out, commit)
        })
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
        self.run(txn, caller, res, |ctx| match ctx.plural {
            POOLS => pools::create(ctx, obj),
            CLASSES => classes::create(ctx, obj),
            CLAIMS => claims::create(ctx, obj),
            _ => allocations::create(ctx, obj),
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
        self.run(txn, caller, res, |ctx| match ctx.plural {
            POOLS => pools::update(ctx, old, new),
            CLASSES => classes::update(ctx, old, new),
            CLAIMS => claims::update(ctx, old, new),
            _ => allocations::update(ctx, old, new),
        })
    }

    fn before_delete(
        &self,
        txn: &mut dyn PlaneTxn,
        caller: &Caller,
        res: &ResourceKey,
        obj: &Value,
    ) -> std::result::Result<(), Status> {
        self.run(txn, caller, res, |ctx| match ctx.plural {
            POOLS => pools::delete(ctx, obj),
            CLASSES => Ok(()),
            CLAIMS => claims::delete(ctx, obj),
            _ => allocations::delete(ctx, obj),
        })
    }

    /// Milo's claim storage never reaches the generic registry's precondition check.
    fn reads_delete_preconditions(&self, res: &ResourceKey) -> bool {
        res.plural != CLAIMS
    }

    fn deletes_in_two_steps(&self, res: &ResourceKey) -> bool {
        res.plural == CLAIMS
    }

    /// Everything but the phase is left as it was, `status.allocatedCIDR` included: the address
    /// is still held until the release.
    fn mark_for_release(
        &self,
        caller: &Caller,
        res: &ResourceKey,
        obj: &mut Value,
    ) -> std::result::Result<(), Status> {
        ctx::tenant(caller, self.project.as_deref(), &res.plural).map_err(|s| *s)?;
        if !obj["status"].is_object() {
            obj["status"] = serde_json::json!({});
        }
        obj["status"]["phase"] = serde_json::json!(egress_api::ipam::CLAIM_PHASE_RELEASING);
        Ok(())
    }

    /// Milo retries its second transaction three times before it gives up, and wraps the last
    /// error in these words.
    fn release_failure(&self, _res: &ResourceKey, why: &str) -> Status {
        Status::failure(
            &format!("release allocation after 3 attempts: {why}"),
            "InternalError",
        )
        .with_code(500)
    }

    fn checks_namespace(&self, res: &ResourceKey) -> bool {
        res.plural == CLAIMS
    }

    fn forget_lookups(&self) {
        self.liveness.forget();
    }
}
