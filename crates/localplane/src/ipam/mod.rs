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
//!
//! Reservations (`spec.reservations {leading, trailing, unitPrefixLength}` on a root pool, or on
//! a provisioning class, which copies them onto every pool it provisions) become `Reservation`
//! rows of the pool's allocation index when the pool is created: they count toward
//! `status.capacity` and `utilizationPercent`, block every address space, and are never handed
//! out, not even to a claim that names the address. Unlike the service, they are not visible as
//! `IPAllocation` objects, so they cannot be force-released by deleting one.

// The hook seam answers with `kube::core::Status` by value; boxing it here would only move the
// copy to the boundary.
#![allow(clippy::result_large_err)]

mod allocations;
mod claims;
mod classes;
mod ctx;
pub mod digest;
mod errors;
mod hooks;
pub mod index;
mod namespaces;
mod pools;
mod store;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

pub use hooks::IpamHooks;
pub use store::{ALLOCATIONS, CLAIMS, CLASSES, POOLS};

/// The API group every IPAM kind is served under.
pub const GROUP: &str = egress_api::ipam::GROUP;

/// The CRDs a plane serves the IPAM kinds from.
pub fn crds() -> Vec<CustomResourceDefinition> {
    egress_api::ipam::crds()
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
