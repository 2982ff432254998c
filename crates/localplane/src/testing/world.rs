//! A started world: its localplane, clients, store reads, counters and faults.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use egress_api::ipam::{IPAllocation, IPClaim};
use egress_api::shard::EgressShard;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::Value;

use super::fixtures::{ADMIN, claims_key, shard_object, shards_key};
use super::hooks::OnClaimCreate;
use crate::app::Running;
use crate::faults::{FaultConfig, FaultRule};
use crate::hooks::StorageHooks;

/// The finalizer [`World::terminate_project_namespace`] holds a namespace with.
const TERMINATING_HOLD: &str = "localplane.test/terminating";

/// A localplane serving a cell and (unless cell-only) the platform project with IPAM; see the
/// [module documentation](super). Dropping it stops serving and removes its folder.
pub struct World {
    pub(super) lp: Running,
    pub(super) dir: tempfile::TempDir,
    pub(super) project: String,
    pub(super) claim_namespace: String,
    pub(super) shard_namespace: String,
    pub(super) cell_kubeconfig: PathBuf,
    pub(super) ipam_kubeconfig: Option<PathBuf>,
}

impl World {
    /// The localplane itself: its planes and stores, metrics, faults, URLs and kubeconfigs.
    pub fn lp(&self) -> &Running {
        &self.lp
    }

    /// The world's temporary folder (kubeconfigs are in `kubeconfigs/`; the rest is the caller's).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn project(&self) -> &str {
        &self.project
    }

    pub fn claim_namespace(&self) -> &str {
        &self.claim_namespace
    }

    pub fn shard_namespace(&self) -> &str {
        &self.shard_namespace
    }

    /// The controller identity's kubeconfig for the cell.
    pub fn cell_kubeconfig(&self) -> &Path {
        &self.cell_kubeconfig
    }

    /// The controller identity's kubeconfig for the platform project (its server is the
    /// project's URL; a controller replaces the path with the project's as it does for Milo).
    ///
    /// # Panics
    /// In a cell-only world, which has no IPAM.
    pub fn ipam_kubeconfig(&self) -> &Path {
        self.ipam_kubeconfig
            .as_deref()
            .expect("a cell-only world has no IPAM kubeconfig")
    }

    /// Writes (or rewrites) the kubeconfig of `identity` for `plane` (`cell` or the project).
    ///
    /// # Panics
    /// When there is no such identity, or the file cannot be written.
    pub fn kubeconfig(&self, plane: &str, identity: &str) -> PathBuf {
        self.lp
            .kubeconfig_path(plane, identity)
            .unwrap_or_else(|e| panic!("the {plane} kubeconfig of {identity}: {e}"))
    }

    /// The text of the admin's cell kubeconfig.
    pub fn kubeconfig_text(&self) -> String {
        let path = self.kubeconfig("cell", ADMIN);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
    }

    /// A client over HTTP as `identity` on `plane`, configured as its kubeconfig would be.
    ///
    /// # Panics
    /// When there is no such identity.
    pub fn client(&self, plane: &str, identity: &str) -> kube::Client {
        self.lp
            .http_client(plane, identity)
            .expect("a loopback client builds")
    }

    /// The admin's client for the cell.
    pub fn cell(&self) -> kube::Client {
        self.client("cell", ADMIN)
    }

    /// The admin's client for the platform project.
    pub fn ipam_admin(&self) -> kube::Client {
        self.client(&self.project, ADMIN)
    }

    /// Shards in the shard namespace, as the admin.
    pub fn shards(&self) -> Api<EgressShard> {
        Api::namespaced(self.cell(), &self.shard_namespace)
    }

    /// Claims in the claim namespace, as the admin.
    pub fn claims(&self) -> Api<IPClaim> {
        Api::namespaced(self.ipam_admin(), &self.claim_namespace)
    }

    /// Allocations in the claim namespace, as the admin.
    pub fn allocations(&self) -> Api<IPAllocation> {
        Api::namespaced(self.ipam_admin(), &self.claim_namespace)
    }

    /// Creates shard `name` (targeting node `node-<name>`) in the shard namespace over HTTP.
    ///
    /// # Panics
    /// When the API server refuses it.
    pub async fn create_shard(&self, name: &str) -> EgressShard {
        let shard = serde_json::from_value(shard_object(&self.shard_namespace, name))
            .expect("a generated shard decodes");
        self.shards()
            .create(&PostParams::default(), &shard)
            .await
            .unwrap_or_else(|e| panic!("creating shard {name}: {e}"))
    }

    /// Deletes shard `name` over HTTP; a finalizer may keep it, marked for deletion, until its
    /// holder lets go.
    ///
    /// # Panics
    /// When the API server refuses it.
    pub async fn delete_shard(&self, name: &str) {
        self.shards()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("deleting shard {name}: {e}"));
    }

    /// Reads shard `name` over HTTP.
    ///
    /// # Panics
    /// When it does not exist.
    pub async fn shard(&self, name: &str) -> EgressShard {
        self.shards()
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("reading shard {name}: {e}"))
    }

    /// Shard `name` of the shard namespace as stored: no request, so the counters stay the
    /// test's own.
    pub fn shard_now(&self, name: &str) -> Option<EgressShard> {
        let v = self
            .lp
            .cell()
            .object(&shards_key(), Some(&self.shard_namespace), name)?;
        Some(serde_json::from_value(v).expect("a stored shard decodes"))
    }

    /// Claim `name` of the claim namespace as stored, read without a request.
    pub fn claim_now(&self, name: &str) -> Option<IPClaim> {
        let v = self.lp.project(&self.project)?.object(
            &claims_key(),
            Some(&self.claim_namespace),
            name,
        )?;
        Some(serde_json::from_value(v).expect("a stored claim decodes"))
    }

    /// Leaves the address of `claim` held as a retained `IPAllocation`, as an earlier claim of the
    /// same name released under `Retain` would: creates it with that policy over HTTP, deletes it,
    /// and returns the CIDR it was bound to.
    ///
    /// # Panics
    /// When IPAM refuses the claim or its delete.
    pub async fn retain_address(&self, claim: &IPClaim) -> String {
        let mut claim = claim.clone();
        claim.spec.reclaim_policy = egress_api::ipam::RECLAIM_RETAIN.into();
        let name = claim.metadata.name.clone().unwrap_or_default();
        let bound = self
            .claims()
            .create(&PostParams::default(), &claim)
            .await
            .unwrap_or_else(|e| panic!("creating claim {name}: {e}"));
        self.claims()
            .delete(&name, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("deleting claim {name}: {e}"));
        bound.status.map(|s| s.allocated_cidr).unwrap_or_default()
    }

    /// Creates shards `<prefix>-<i>` for `i` in `range` in `namespace` (created if missing),
    /// straight in the cell's store: no request, no watch lag of the seeding itself.
    pub fn seed_shards(&self, namespace: &str, prefix: &str, range: std::ops::Range<usize>) {
        let cell = self.lp.cell();
        cell.ensure_namespace(namespace);
        for i in range {
            cell.apply_object(shard_object(namespace, &format!("{prefix}-{i}")))
                .expect("a generated shard is valid");
        }
    }

    /// How many shards `namespace` holds, and how many of them carry an address (a store scan).
    pub fn shard_progress(&self, namespace: &str) -> (usize, usize) {
        self.lp
            .cell()
            .count_where(&shards_key(), Some(namespace), super::is_addressed)
    }

    /// The cell's events about shard `name` in the shard namespace, over HTTP.
    pub async fn events_for(&self, shard: &str) -> Vec<Event> {
        let api: Api<Event> = Api::namespaced(self.cell(), &self.shard_namespace);
        api.list(&ListParams::default())
            .await
            .expect("listing events")
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(shard))
            .collect()
    }

    /// The first of [`World::events_for`] with `reason`.
    pub async fn event(&self, shard: &str, reason: &str) -> Option<Event> {
        self.events_for(shard)
            .await
            .into_iter()
            .find(|e| e.reason.as_deref() == Some(reason))
    }

    /// The reasons of [`World::events_for`].
    pub async fn event_reasons(&self, shard: &str) -> Vec<String> {
        self.events_for(shard)
            .await
            .into_iter()
            .filter_map(|e| e.reason)
            .collect()
    }

    /// Sets (or, with `None`, lifts) Milo's quota on the platform project's IPClaims: a create
    /// that would make more than `limit` live claims (a claim still `Releasing` counts) is refused
    /// with 403 Forbidden in Milo's words. The same as `PUT /localplane/quotas/{project}/
    /// ipclaims.ipam.miloapis.com`.
    ///
    /// # Panics
    /// In a cell-only world.
    pub fn set_claim_quota(&self, limit: Option<u64>) {
        self.platform().set_quota(&claims_key(), limit);
    }

    /// How many IPClaims the platform project holds, `Releasing` ones included: what its quota
    /// counts (a store read, no request).
    ///
    /// # Panics
    /// In a cell-only world.
    pub fn live_claims(&self) -> usize {
        self.platform().live_count(&claims_key())
    }

    /// Creates namespace `name` in the platform project, if it has none of that name (no request).
    ///
    /// # Panics
    /// In a cell-only world.
    pub fn add_project_namespace(&self, name: &str) {
        self.platform().ensure_namespace(name);
    }

    /// Deletes namespace `name` of the platform project over HTTP while a finalizer of the
    /// test's holds it: it stays `Terminating` (what was in it is deleted, as the namespace
    /// controller deletes it) until [`World::finish_project_namespace`]. IPAM then looks it up
    /// afresh, as Milo does once its ten-second memory of a live namespace has passed, so the next
    /// claim into it is refused with 403.
    ///
    /// # Panics
    /// When the namespace does not exist or may not be deleted (`default`), or in a cell-only
    /// world.
    pub async fn terminate_project_namespace(&self, name: &str) {
        let api = self.project_namespaces();
        let held = serde_json::json!({"metadata": {"finalizers": [TERMINATING_HOLD]}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&held))
            .await
            .unwrap_or_else(|e| panic!("holding namespace {name}: {e}"));
        self.delete_project_namespace(name).await;
    }

    /// Lets go of a namespace [`World::terminate_project_namespace`] holds, over HTTP: it is gone.
    ///
    /// # Panics
    /// When the namespace is not held, or in a cell-only world.
    pub async fn finish_project_namespace(&self, name: &str) {
        let api = self.project_namespaces();
        let released = serde_json::json!({"metadata": {"finalizers": null}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&released))
            .await
            .unwrap_or_else(|e| panic!("letting go of namespace {name}: {e}"));
    }

    /// Deletes namespace `name` of the platform project over HTTP, and what is in it (its claims
    /// are released); see [`World::terminate_project_namespace`] for what IPAM remembers.
    ///
    /// # Panics
    /// When the namespace does not exist or may not be deleted (`default`), or in a cell-only
    /// world.
    pub async fn delete_project_namespace(&self, name: &str) {
        self.project_namespaces()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("deleting namespace {name}: {e}"));
        self.platform().forget_lookups();
    }

    fn project_namespaces(&self) -> Api<Namespace> {
        Api::all(self.ipam_admin())
    }

    fn platform(&self) -> crate::plane::Plane {
        self.lp
            .project(&self.project)
            .expect("a cell-only world has no platform project")
    }

    /// Forgets every request counted so far.
    pub fn reset_counters(&self) {
        self.lp.metrics().reset();
    }

    /// Injects `rules` from now on (seeded, so a run replays), replacing any before.
    pub fn set_faults(&self, rules: Vec<FaultRule>) {
        self.lp.faults().set(FaultConfig {
            seed: Some(1),
            rules,
            watch_cut_after_seconds: None,
        });
    }

    pub fn clear_faults(&self) {
        self.lp.faults().clear();
    }

    /// Adds server behaviour on the platform project after IPAM's own.
    ///
    /// # Panics
    /// In a cell-only world.
    pub fn add_platform_hook(&self, hook: Arc<dyn StorageHooks>) {
        self.lp
            .project(&self.project)
            .expect("a cell-only world has no platform project")
            .add_hooks(hook);
    }

    /// Runs `f` on every new claim after IPAM bound it (see [`OnClaimCreate`]).
    pub fn on_claim_create(&self, f: impl Fn(&mut Value) + Send + Sync + 'static) {
        self.add_platform_hook(Arc::new(OnClaimCreate(f)));
    }

    /// Stops serving and ends every watch; the folder is removed.
    pub async fn shutdown(self) {
        self.lp.shutdown().await;
    }

    /// Stops serving and keeps the folder (logs a caller wrote there, for instance); its path.
    pub async fn shutdown_keeping_files(self) -> PathBuf {
        self.lp.shutdown().await;
        self.dir.keep()
    }
}
