//! What one IPAM request handler works with: the plane's transaction, the allocation index, the
//! caller, which project it acts for, and the other projects of its realm ([`Projects`]), each
//! with the IPAM serving it ([`Remote`]). Those two are traits so that the handlers never name
//! the hooks above them: `realm.rs` implements the one, `hooks.rs` the other.

use std::sync::Arc;

use super::errors::{self, Result};
use super::index::IndexTxn;
use super::namespaces::Liveness;
use crate::hooks::{Caller, PlaneTxn};
use crate::plane::Plane;

/// Everything a request handler needs.
pub(crate) struct Ctx<'a, 'b> {
    pub txn: &'a mut dyn PlaneTxn,
    pub ix: &'a mut IndexTxn<'b>,
    pub caller: &'a Caller,
    /// The plane's project (`None` on a plane of no project).
    pub project: Option<&'a str>,
    /// What the claim path remembers of namespaces it found live.
    pub liveness: &'a Liveness,
    pub plural: &'a str,
    /// The other projects' planes.
    pub realm: &'a dyn Projects,
}

impl Ctx<'_, '_> {
    /// The caller's project; every IPAM write is tenanted. The plane's own in-process admin
    /// writes (manifests loaded at start) carry no project and act for the plane's project.
    pub fn tenant(&self) -> Result<String> {
        tenant(self.caller, self.project, self.plural)
    }

    /// The project the plane's own objects (pools) belong to.
    pub fn plane_project(&self) -> &str {
        self.project.unwrap_or("")
    }
}

/// The projects of a realm, as a handler reaches them.
pub(crate) trait Projects: Send + Sync {
    /// A project's plane and the IPAM serving it, while both are served.
    fn member(&self, project: &str) -> Option<(Plane, Arc<dyn Remote>)>;
}

/// Work a handler runs on another project's plane.
pub(crate) type Work<'f> = Box<dyn FnOnce(&mut Ctx<'_, '_>) -> Result<()> + 'f>;

/// The IPAM serving another project's plane, as a handler of this one runs work there.
pub(crate) trait Remote: Send + Sync {
    /// Runs `f` on `plane` and its index, for a claim of another project of the realm, from
    /// inside that project's write (whose hold on the write group it joins). What `f` changed
    /// is kept when `keep` and `f` succeeded, and undone otherwise. Runs `f` once and answers as
    /// it answered.
    fn run_boxed(&self, plane: &Plane, caller: &Caller, keep: bool, f: Work<'_>) -> Result<()>;
}

impl dyn Remote {
    /// [`Remote::run_boxed`] for work that answers with a value.
    pub fn run_for_another<R>(
        &self,
        plane: &Plane,
        caller: &Caller,
        keep: bool,
        f: impl FnOnce(&mut Ctx<'_, '_>) -> Result<R>,
    ) -> Result<R> {
        let mut out = None;
        self.run_boxed(
            plane,
            caller,
            keep,
            Box::new(|ctx| {
                out = Some(f(ctx)?);
                Ok(())
            }),
        )?;
        Ok(out.expect("the work ran and succeeded"))
    }
}

/// The project `caller` acts for on a plane of `project`, or the refusal of an untenanted write
/// to `plural`; see [`Ctx::tenant`].
pub(crate) fn tenant(caller: &Caller, project: Option<&str>, plural: &str) -> Result<String> {
    match (caller.project.as_deref(), project) {
        (Some(p), _) if !p.is_empty() => Ok(p.to_string()),
        (None, Some(p)) if caller.groups.iter().any(|g| g == "system:masters") => Ok(p.to_string()),
        _ => Err(errors::no_project_scope(plural)),
    }
}
