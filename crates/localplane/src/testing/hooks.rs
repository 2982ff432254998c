//! Server behaviour a test adds to play an IPAM that answers otherwise.

use kube::core::Status;
use serde_json::Value;

use crate::hooks::{Caller, PlaneTxn, ResourceKey, StorageHooks};

/// Runs a function on every new IPClaim after IPAM's own hooks bound it (register it after
/// IPAM's, as [`crate::testing::World::on_claim_create`] does): to rewrite `status` or pad the
/// answer. Updates and deletes are left alone (the trait's defaults).
pub struct OnClaimCreate<F>(pub F);

impl<F> StorageHooks for OnClaimCreate<F>
where
    F: Fn(&mut Value) + Send + Sync,
{
    fn handles(&self, res: &ResourceKey) -> bool {
        res.group == egress_api::ipam::GROUP && res.plural == "ipclaims"
    }

    fn before_create(
        &self,
        _: &mut dyn PlaneTxn,
        _: &Caller,
        _: &ResourceKey,
        obj: &mut Value,
    ) -> Result<(), Status> {
        (self.0)(obj);
        Ok(())
    }
}
