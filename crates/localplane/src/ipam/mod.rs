//! Milo IPAM's server-side behaviour (`ipam.miloapis.com/v1alpha1`) for one project plane: pools
//! and classes are validated, claims bind synchronously on create, allocations are created,
//! retained and freed with their claims. See `shared/spec/ipam-service.md`; where that spec
//! describes several service versions, this follows the one the platform's controllers are written
//! against (a retained allocation refuses a same-named claim with `AllocationRetained`).
//!
//! The plane serves the four kinds from their CRDs ([`crds`]) and calls [`IpamHooks`] under its
//! write lock, so every allocation is linearizable with the request that made it.
//!
//! Each project is its own catalog, as in the line production runs (`2f31bea`): a claim names a
//! class of its own project. That class may be a reference (`spec.source {project, name}`) to a
//! class of another project; the claim then allocates as that class does, from that project's
//! pools (`source.rs` resolves the class, `bind.rs` binds there). The project planes of one
//! [`install`] are one realm, so a write on one may write another.
//!
//! Reservations (`spec.reservations {leading, trailing, unitPrefixLength}` on a root pool, or on
//! a provisioning class, which copies them onto every pool it provisions) become `Reservation`
//! rows of the pool's allocation index when the pool is created: they count toward
//! `status.capacity` and `utilizationPercent`, block every address space, and are never handed
//! out, not even to a claim that names the address. As in the service, they are rows and not
//! `IPAllocation` objects: no DELETE reaches them, and they go with their pool.
//!
//! Imports between the files point down this list, never up:
//!
//! ```text
//! hooks        IpamHooks, the plane's seam: one handler per kind and verb, the index locked
//! realm        the project planes of one IPAM (a ctx::Projects); members are ctx::Remote
//! claims       IPClaim: the class, the checks, the allocation record; release on delete
//! allocations  IPAllocation: fixed, force-released by a delete
//! bind         what a claim takes from its chain's pools, here or in another project; freeing it
//! classes      IPClass: the catalog, validated
//! source       class references (`spec.source`): resolving a class, its chain
//! pools        IPPool: validated, carved, their status
//! ctx          what a handler works with (Ctx), and the traits it reaches other projects by
//! namespaces   namespace liveness on a claim create
//! store        reading and writing IPAM objects, the hidden records, keeping the index in step
//! index, digest, errors
//! ```

// The hook seam answers with `kube::core::Status` by value; boxing it here would only move the
// copy to the boundary.
#![allow(clippy::result_large_err)]

mod allocations;
mod bind;
mod claims;
mod classes;
mod ctx;
pub mod digest;
mod errors;
mod hooks;
pub mod index;
mod namespaces;
mod pools;
mod realm;
mod source;
mod store;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

pub use hooks::IpamHooks;
pub use store::{ALLOCATIONS, CLAIMS, CLASSES, POOLS};

/// The API group every IPAM kind is served under.
pub const GROUP: &str = egress_api::ipam::GROUP;

/// The CRDs a plane serves the IPAM kinds from: the project's own types, with IPClass's
/// `spec.source` added (the line production runs has it; the controller never reads it).
pub fn crds() -> Vec<CustomResourceDefinition> {
    egress_api::ipam::crds()
        .into_iter()
        .map(source::with_source_field)
        .collect()
}

/// Serves IPAM on every project plane the builder makes (including ones added later): the four
/// kinds from their CRDs, each plane with its own [`IpamHooks`], all of them one realm (a class
/// of one may refer to a class of another). `platform_project` names the project that holds the
/// class catalog.
pub fn install(
    builder: crate::LocalPlaneBuilder,
    platform_project: impl Into<String>,
) -> crate::LocalPlaneBuilder {
    let platform = platform_project.into();
    let realm = realm::Realm::new();
    builder
        .project_crds(crds())
        .on_project(move |plane| register_in(plane, &platform, &realm))
}

/// Adds IPAM's hooks to one plane that already serves the IPAM CRDs, in a realm of its own.
pub fn register(plane: &crate::Plane, platform_project: &str) {
    register_in(plane, platform_project, &realm::Realm::new());
}

fn register_in(plane: &crate::Plane, platform_project: &str, realm: &Arc<realm::Realm>) {
    let project = plane.project().map(str::to_string);
    let hooks = Arc::new(IpamHooks::in_realm(
        realm.clone(),
        project.clone(),
        platform_project.to_string(),
    ));
    if let Some(p) = &project {
        realm.join(p, plane, &hooks);
    }
    plane.add_hooks(hooks);
}

impl crate::LocalPlaneBuilder {
    /// Serves Milo IPAM on every project plane; see [`install`].
    pub fn ipam(self, platform_project: impl Into<String>) -> Self {
        install(self, platform_project)
    }
}
