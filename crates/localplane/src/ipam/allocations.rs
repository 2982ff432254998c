//! IPAllocation: the server's record of a binding. Never created through the API; its spec is
//! fixed; deleting an unbound (retained) one is how its address is force-released.

use egress_api::ipam::IPAllocation;
use serde_json::{Value, json};

use super::bind;
use super::ctx::Ctx;
use super::errors::{self, FieldError, Result};
use super::store::{ALLOCATIONS, name_of, namespace_of, typed};

pub fn create(_ctx: &mut Ctx<'_, '_>, _obj: &mut Value) -> Result<()> {
    Err(errors::method_not_allowed(
        ALLOCATIONS,
        "IPAllocations are created by the server when it binds an IPClaim; create an IPClaim instead",
    ))
}

pub fn update(_ctx: &mut Ctx<'_, '_>, old: &Value, new: &mut Value) -> Result<()> {
    if old["spec"] != new["spec"] {
        return Err(errors::invalid(
            "IPAllocation",
            name_of(new),
            vec![FieldError::forbidden(
                "spec",
                "spec is immutable: an IPAllocation records an allocation the server already made. To release the \
                 address, delete the owning IPClaim; to force-release a retained one, delete the IPAllocation",
            )],
        ));
    }
    // The address and its space are what the index is rebuilt from, so a status write keeps them.
    if !new["status"].is_object() {
        new["status"] = json!({});
    }
    for field in ["allocatedCIDR", "scopeDigest"] {
        new["status"][field] = old["status"][field].clone();
    }
    Ok(())
}

pub fn delete(ctx: &mut Ctx<'_, '_>, obj: &Value) -> Result<()> {
    let name = name_of(obj).to_string();
    let ns = namespace_of(obj).to_string();
    let a: IPAllocation = typed(obj)?;
    if let Some(claim) = a.spec.claim_ref.as_ref().filter(|r| !r.name.is_empty()) {
        let msg = format!(
            "this allocation is bound to IPClaim \"{}\"; delete the claim to release the address, and its \
             reclaimPolicy decides whether the address is freed or retained",
            claim.name
        );
        return Err(errors::conflict(ALLOCATIONS, &name, &msg, Vec::new()));
    }
    let pool = a.spec.pool_ref.as_ref().map(|r| r.name.as_str());
    bind::release(ctx, pool, &ns, &name)
}
