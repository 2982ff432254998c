//! One world for every test, benchmark and demo of this repository: a localplane on loopback with
//! a cell and a Milo platform project serving IPAM, the shipped inventory applied, namespaces and
//! identities in place, and kubeconfigs written to a temporary folder the world owns.
//!
//! ```no_run
//! # async fn demo() -> Result<(), localplane::testing::WorldError> {
//! use localplane::testing::{World, workspace_root};
//!
//! let world = World::builder(workspace_root().join("config"))
//!     .root_cidr("2001:db8::/40") // the shipped inventory leaves the root pool's cidr empty
//!     .start()
//!     .await?;
//! // Kubeconfigs for a controller (a process, or a library client built from them):
//! let (cell, ipam) = (world.cell_kubeconfig(), world.ipam_kubeconfig());
//! // Typed clients over HTTP as the admin, and reads of the store that cost no request:
//! let shard = world.create_shard("shard-0").await;
//! let stored = world.shard_now("shard-0");
//! # let _ = (cell, ipam, shard, stored);
//! world.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! What a world holds, unless its [`WorldBuilder`] says otherwise:
//!
//! * the cell, serving the CRDs of `<config>/crd` and namespaces `kube-system` (its uid is the
//!   cell's identity), `default` and the shard namespace ([`SHARD_NAMESPACE`]);
//! * the platform project ([`PLATFORM_PROJECT`]) serving Milo IPAM, with the claim namespace
//!   ([`CLAIM_NAMESPACE`]) and the inventory `<config>/ipam/egress-shard-ipv6.yaml`, its empty
//!   root `cidr` filled in ([`ROOT_CIDR`] by default, a documentation prefix);
//! * identities [`ADMIN`] and [`CONTROLLER`] (both bypass RBAC; token `<name>-token`), and
//!   whatever others the builder adds;
//! * request counters reset after all of that, so they count only what the test does.
//!
//! IPAM answers as Milo's production line does: a claim DELETE reads no preconditions and takes
//! two writes (`Releasing`, then the release), a claim into a missing or terminating namespace is
//! refused with 403, and a quota, when set, refuses with 403. A test sets the quota
//! ([`WorldBuilder::claim_quota`], [`World::set_claim_quota`]), ends namespaces of the platform
//! project ([`World::terminate_project_namespace`], [`World::delete_project_namespace`]), and
//! fails or holds a claim's release with fault rules (`when: release`, `releaseDelayMs`).
//! [`WorldBuilder::ipam_strict_deletes`] is for a test that shows what strict mode changes, never
//! the default of one.
//!
//! A second world built with [`WorldBuilder::cell_only`] is a cell with no IPAM of its own: its
//! controller claims from the first world's IPAM, as two cells of one location do.
//!
//! Nothing here knows the controller: what it would name a claim, or how it is started, belongs to
//! the tests and tools that start it.

mod builder;
mod fixtures;
mod hooks;
pub mod judges;
mod world;

pub use builder::{WorldBuilder, WorldError};
pub use fixtures::{
    ADDRESS_CLASS, ADMIN, CLAIM_NAMESPACE, CONTROLLER, INVENTORY, LOCATION, PLATFORM_PROJECT,
    ROOT_CIDR, SHARD_NAMESPACE, address_of, allocations_key, answer_claim, causes, claims_key,
    events_key, eventually, fault, has_cause, is_addressed, leases_key, shard_object, shards_key,
    workspace_root,
};
pub use hooks::OnClaimCreate;
pub use world::World;
