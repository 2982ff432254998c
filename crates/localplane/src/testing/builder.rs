//! Building a [`World`]: which planes, namespaces, identities, grants and objects it starts with.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::fixtures::{
    ADMIN, CLAIM_NAMESPACE, CONTROLLER, INVENTORY, PLATFORM_PROJECT, ROOT_CIDR, SHARD_NAMESPACE,
    claims_key,
};
use super::world::World;
use crate::app::LocalPlane;
use crate::config::Identity;

/// Why a world could not be started.
#[derive(Debug, thiserror::Error)]
pub enum WorldError {
    #[error("building localplane: {0}")]
    Build(String),
    #[error("the IPAM inventory {path}: {message}")]
    Inventory { path: PathBuf, message: String },
    #[error("creating a start-up object on plane {plane:?}: {message}")]
    Object { plane: String, message: String },
    #[error("creating the world's temporary folder or kubeconfigs: {0}")]
    Files(#[source] std::io::Error),
    #[error("serving localplane on loopback: {0}")]
    Serve(#[source] std::io::Error),
}

/// Builds a [`World`]; see the [module documentation](super) for what it holds by default.
#[derive(Clone, Debug)]
pub struct WorldBuilder {
    config: PathBuf,
    inventory: PathBuf,
    root_cidr: String,
    project: String,
    claim_namespace: String,
    shard_namespace: String,
    namespaces: Vec<String>,
    project_namespaces: Vec<String>,
    identities: Vec<Identity>,
    rbac: bool,
    manifests: Vec<(String, PathBuf)>,
    objects: Vec<(String, Value)>,
    tls: bool,
    watch_history: Option<usize>,
    cell_only: bool,
    strict_deletes: bool,
    claim_quota: Option<u64>,
}

impl World {
    /// A world from a repository's `config/` folder: the CRDs of `crd/` on the cell and the
    /// inventory [`INVENTORY`] on the platform project.
    pub fn builder(config: impl Into<PathBuf>) -> WorldBuilder {
        let config = config.into();
        WorldBuilder {
            inventory: config.join(INVENTORY),
            config,
            root_cidr: ROOT_CIDR.into(),
            project: PLATFORM_PROJECT.into(),
            claim_namespace: CLAIM_NAMESPACE.into(),
            shard_namespace: SHARD_NAMESPACE.into(),
            namespaces: vec![],
            project_namespaces: vec![],
            identities: vec![],
            rbac: false,
            manifests: vec![],
            objects: vec![],
            tls: false,
            watch_history: None,
            cell_only: false,
            strict_deletes: false,
            claim_quota: None,
        }
    }
}

impl WorldBuilder {
    /// The platform project's name (default [`PLATFORM_PROJECT`]).
    pub fn project(mut self, name: &str) -> Self {
        self.project = name.into();
        self
    }

    /// The claim namespace in the platform project (default [`CLAIM_NAMESPACE`]).
    pub fn claim_namespace(mut self, name: &str) -> Self {
        self.claim_namespace = name.into();
        self
    }

    /// The cell namespace made for shards, which [`World::shards`] and friends use (default
    /// [`SHARD_NAMESPACE`]).
    pub fn shard_namespace(mut self, name: &str) -> Self {
        self.shard_namespace = name.into();
        self
    }

    /// Another cell namespace to create at start.
    pub fn namespace(mut self, name: &str) -> Self {
        self.namespaces.push(name.into());
        self
    }

    /// Another namespace of the platform project to create at start (besides the claim
    /// namespace): IPAM refuses a claim into a namespace the project does not have.
    pub fn project_namespace(mut self, name: &str) -> Self {
        self.project_namespaces.push(name.into());
        self
    }

    /// Milo's quota on the platform project's IPClaims from the start (none by default); see
    /// [`World::set_claim_quota`].
    pub fn claim_quota(mut self, limit: u64) -> Self {
        self.claim_quota = Some(limit);
        self
    }

    /// IPClaim DELETEs read their preconditions, which Milo's never do (off by default; see
    /// [`crate::LocalPlaneBuilder::ipam_strict_deletes`]). For a test that shows the difference
    /// strict mode makes, never for one that stands for production.
    pub fn ipam_strict_deletes(mut self, strict: bool) -> Self {
        self.strict_deletes = strict;
        self
    }

    /// The prefix filled into the inventory's empty root `cidr` (default [`ROOT_CIDR`]).
    pub fn root_cidr(mut self, cidr: &str) -> Self {
        self.root_cidr = cidr.into();
        self
    }

    /// An inventory other than the shipped one.
    pub fn inventory(mut self, path: impl Into<PathBuf>) -> Self {
        self.inventory = path.into();
        self
    }

    /// An identity besides [`ADMIN`] and [`CONTROLLER`] (one bound by RBAC, or one whose token
    /// no kubeconfig of the controller carries).
    pub fn identity(mut self, id: Identity) -> Self {
        self.identities.push(id);
        self
    }

    /// Enforces RBAC for identities that are not admins.
    pub fn rbac(mut self, enforce: bool) -> Self {
        self.rbac = enforce;
        self
    }

    /// The objects of a YAML file, created on `plane` (`cell` or the project) at start.
    pub fn manifest(mut self, plane: &str, path: impl Into<PathBuf>) -> Self {
        self.manifests.push((plane.into(), path.into()));
        self
    }

    /// One object created on `plane` at start (after the inventory and the manifests).
    pub fn object(mut self, plane: &str, object: Value) -> Self {
        self.objects.push((plane.into(), object));
        self
    }

    /// Serves HTTPS with a throwaway CA in every kubeconfig (kubectl sends tokens only over TLS).
    pub fn tls(mut self, tls: bool) -> Self {
        self.tls = tls;
        self
    }

    /// How many events each plane keeps for resuming watches (localplane's default otherwise).
    pub fn watch_history(mut self, events: usize) -> Self {
        self.watch_history = Some(events);
        self
    }

    /// A cell with no project and no IPAM: a second cell whose controller claims from another
    /// world's IPAM.
    pub fn cell_only(mut self) -> Self {
        self.cell_only = true;
        self
    }

    /// Builds, fills and serves the world on a free loopback port.
    pub async fn start(self) -> Result<World, WorldError> {
        let dir = tempfile::Builder::new()
            .prefix("localplane-world-")
            .tempdir()
            .map_err(WorldError::Files)?;
        let mut b = LocalPlane::builder()
            .crd_dir(self.config.join("crd"))
            .namespace(&self.shard_namespace)
            .identity(Identity::admin(ADMIN, &format!("{ADMIN}-token")))
            .identity(Identity::admin(CONTROLLER, &format!("{CONTROLLER}-token")))
            .identities(self.identities.iter().cloned())
            .rbac(self.rbac);
        for ns in &self.namespaces {
            b = b.namespace(ns);
        }
        if !self.cell_only {
            b = b
                .project(&self.project)
                .project_namespace(&self.claim_namespace)
                .ipam(self.project.as_str())
                .ipam_strict_deletes(self.strict_deletes);
            for ns in &self.project_namespaces {
                b = b.project_namespace(ns);
            }
            if let Some(limit) = self.claim_quota {
                b = b.quota(&self.project, &claims_resource(), limit);
            }
        }
        if let Some(h) = self.watch_history {
            b = b.watch_history(h);
        }
        for (plane, path) in &self.manifests {
            b = b.manifest(plane, path);
        }
        let lp = b.build().map_err(|e| WorldError::Build(format!("{e:#}")))?;
        if !self.cell_only {
            apply_inventory(&lp, &self.project, &self.inventory, &self.root_cidr)?;
        }
        for (plane, object) in &self.objects {
            let target = lp.plane(plane).ok_or_else(|| WorldError::Object {
                plane: plane.clone(),
                message: "no such plane".into(),
            })?;
            target
                .apply_object(object.clone())
                .map_err(|e| WorldError::Object {
                    plane: plane.clone(),
                    message: e.0.message,
                })?;
        }
        let addr = "127.0.0.1:0".parse().expect("a loopback address parses");
        let mut running = if self.tls {
            lp.serve_tls(addr).await
        } else {
            lp.serve(addr).await
        }
        .map_err(WorldError::Serve)?;
        running.set_kubeconfig_dir(dir.path().join("kubeconfigs"));
        let cell_kubeconfig = running
            .kubeconfig_path("cell", CONTROLLER)
            .map_err(WorldError::Files)?;
        let ipam_kubeconfig = if self.cell_only {
            None
        } else {
            Some(
                running
                    .kubeconfig_path(&self.project, CONTROLLER)
                    .map_err(WorldError::Files)?,
            )
        };
        running.metrics().reset();
        Ok(World {
            lp: running,
            dir,
            project: self.project,
            claim_namespace: self.claim_namespace,
            shard_namespace: self.shard_namespace,
            cell_kubeconfig,
            ipam_kubeconfig,
        })
    }
}

/// Creates the inventory's objects on the platform project as an operator would apply them, with
/// the root pool's empty `cidr` filled in (the file is unusable as shipped, on purpose).
fn apply_inventory(
    lp: &LocalPlane,
    project: &str,
    path: &Path,
    cidr: &str,
) -> Result<(), WorldError> {
    let fail = |message: String| WorldError::Inventory {
        path: path.to_path_buf(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).map_err(|e| fail(e.to_string()))?;
    let platform = lp
        .project(project)
        .ok_or_else(|| fail(format!("no project {project:?}")))?;
    for mut doc in docs.into_iter().filter(Value::is_object) {
        if doc["kind"] == "IPPool" && doc["spec"]["cidr"] == "" {
            doc["spec"]["cidr"] = json!(cidr);
        }
        platform.apply_object(doc).map_err(|e| fail(e.0.message))?;
    }
    Ok(())
}

/// The IPClaim resource as a quota names it.
fn claims_resource() -> String {
    let k = claims_key();
    format!("{}.{}", k.plural, k.group)
}
