//! What one IPAM request handler works with: the plane's transaction, the allocation index, the
//! caller, and which project it acts for.

use super::errors::{self, Result};
use super::index::IndexTxn;
use super::namespaces::Liveness;
use super::realm::Realm;
use crate::hooks::{Caller, PlaneTxn};

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
    pub realm: &'a Realm,
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

/// The project `caller` acts for on a plane of `project`, or the refusal of an untenanted write
/// to `plural`; see [`Ctx::tenant`].
pub(crate) fn tenant(caller: &Caller, project: Option<&str>, plural: &str) -> Result<String> {
    match (caller.project.as_deref(), project) {
        (Some(p), _) if !p.is_empty() => Ok(p.to_string()),
        (None, Some(p)) if caller.groups.iter().any(|g| g == "system:masters") => Ok(p.to_string()),
        _ => Err(errors::no_project_scope(plural)),
    }
}
