//! Building a [`LocalPlane`]: kinds, projects, identities, faults and start-up objects.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

use super::{KUBE_SYSTEM, LocalPlane};
use crate::config::{Config, DEFAULT_ADMIN_TOKEN, Identity, Manifest};
use crate::faults::{FaultConfig, Faults};
use crate::hooks::ResourceKey;
use crate::plane::{Plane, parse_resource};
use crate::resources::{load_crd_dir, parse_crds};
use crate::shared::{ProjectSetup, ProjectTemplate, Shared};

/// Builds a [`LocalPlane`]. Everything is optional; the default is a cell with the built-in
/// kinds, no projects, RBAC off, and one admin identity with token [`DEFAULT_ADMIN_TOKEN`].
#[derive(Default)]
pub struct LocalPlaneBuilder {
    crd_dirs: Vec<PathBuf>,
    crds: Vec<CustomResourceDefinition>,
    project_crd_dirs: Vec<PathBuf>,
    project_crds: Vec<CustomResourceDefinition>,
    projects: Vec<String>,
    identities: Vec<Identity>,
    rbac: bool,
    faults: FaultConfig,
    watch_history: Option<usize>,
    bookmark_interval: Option<Duration>,
    cell_namespaces: Vec<String>,
    project_namespaces: Vec<String>,
    manifests: Vec<Manifest>,
    on_project: Vec<ProjectSetup>,
    strict_deletes: bool,
    /// `(project, resource as spelled, limit)`.
    quotas: Vec<(String, String, u64)>,
}

impl LocalPlane {
    pub fn builder() -> LocalPlaneBuilder {
        LocalPlaneBuilder::default()
    }
}

impl LocalPlaneBuilder {
    /// Serves every CRD in the YAML files of `dir` on the cell (e.g. `config/crd`).
    pub fn crd_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.crd_dirs.push(dir.into());
        self
    }

    /// Serves a CRD on the cell.
    pub fn crd(mut self, crd: CustomResourceDefinition) -> Self {
        self.crds.push(crd);
        self
    }

    pub fn crds(mut self, crds: impl IntoIterator<Item = CustomResourceDefinition>) -> Self {
        self.crds.extend(crds);
        self
    }

    /// Serves these CRDs on every project plane (e.g. `egress_api::ipam::crds()`).
    pub fn project_crds(
        mut self,
        crds: impl IntoIterator<Item = CustomResourceDefinition>,
    ) -> Self {
        self.project_crds.extend(crds);
        self
    }

    pub fn project_crd_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.project_crd_dirs.push(dir.into());
        self
    }

    /// Adds a Milo project control plane.
    pub fn project(mut self, name: &str) -> Self {
        self.projects.push(name.into());
        self
    }

    pub fn identity(mut self, id: Identity) -> Self {
        self.identities.push(id);
        self
    }

    pub fn identities(mut self, ids: impl IntoIterator<Item = Identity>) -> Self {
        self.identities.extend(ids);
        self
    }

    /// Enforce RBAC for non-admin identities (off by default: every identity may do anything).
    pub fn rbac(mut self, enforce: bool) -> Self {
        self.rbac = enforce;
        self
    }

    /// Faults to inject from the start (see [`FaultConfig`]); [`LocalPlaneBuilder::build`]
    /// refuses an invalid one.
    pub fn faults(mut self, faults: FaultConfig) -> Self {
        self.faults = faults;
        self
    }

    /// How many events each plane keeps for resuming watches (default 10,000); older
    /// resourceVersions get 410 Expired.
    pub fn watch_history(mut self, events: usize) -> Self {
        self.watch_history = Some(events);
        self
    }

    /// How often watches with `allowWatchBookmarks` get a BOOKMARK (default 10s).
    pub fn bookmark_interval(mut self, every: Duration) -> Self {
        self.bookmark_interval = Some(every);
        self
    }

    /// Creates a namespace on the cell at start (`default` always exists).
    pub fn namespace(mut self, name: &str) -> Self {
        self.cell_namespaces.push(name.into());
        self
    }

    /// Creates a namespace on every project plane.
    pub fn project_namespace(mut self, name: &str) -> Self {
        self.project_namespaces.push(name.into());
        self
    }

    /// Creates the objects of a YAML file on a plane at start.
    pub fn manifest(mut self, plane: &str, path: impl Into<PathBuf>) -> Self {
        self.manifests.push(Manifest {
            plane: plane.into(),
            path: path.into(),
        });
        self
    }

    /// IPClaim DELETEs on IPAM planes read `DeleteOptions.preconditions` (`uid`,
    /// `resourceVersion`), as the generic registry does. Off by default, because Milo's
    /// `AllocatingREST.Delete` reads none: a delete removes whatever claim holds the name when it
    /// is processed. Strict mode is stricter than Milo, so a test that turns it on shows the
    /// difference and nothing else. See [`Plane::set_strict_deletes`].
    pub fn ipam_strict_deletes(mut self, strict: bool) -> Self {
        self.strict_deletes = strict;
        self
    }

    /// Milo's quota: project `project` may hold at most `limit` live objects of `resource`
    /// (`<plural>.<group>`, as `ipclaims.ipam.miloapis.com`); a create past it is refused with
    /// 403 in Milo's words. Also at runtime: [`Plane::set_quota`] or
    /// `PUT /localplane/quotas/{project}/{resource}`.
    pub fn quota(mut self, project: &str, resource: &str, limit: u64) -> Self {
        self.quotas
            .push((project.to_string(), resource.to_string(), limit));
        self
    }

    /// Runs for every project plane, including ones added later with
    /// [`LocalPlane::add_project`]: the place to register hooks (`plane.add_hooks(..)`).
    pub fn on_project(mut self, f: impl Fn(&Plane) + Send + Sync + 'static) -> Self {
        self.on_project.push(Arc::new(f));
        self
    }

    /// Merges a configuration file's settings into the builder.
    pub fn config(mut self, c: Config) -> Self {
        if let Some(p) = &c.ipam_platform_project {
            self = self.ipam(p.clone());
        }
        self.rbac |= c.rbac;
        self.crd_dirs.extend(c.crd_dirs);
        self.project_crd_dirs.extend(c.project_crd_dirs);
        self.identities.extend(c.identities);
        self.projects.extend(c.projects);
        self.cell_namespaces.extend(c.cell_namespaces);
        self.project_namespaces.extend(c.project_namespaces);
        self.manifests.extend(c.manifests);
        self.strict_deletes |= c.ipam_strict_deletes;
        for (project, limits) in c.quotas {
            for (resource, limit) in limits {
                self.quotas.push((project.clone(), resource, limit));
            }
        }
        if c.faults != FaultConfig::default() {
            self.faults = c.faults;
        }
        if let Some(h) = c.watch_history {
            self.watch_history = Some(h);
        }
        if let Some(b) = c.bookmark_interval_seconds {
            self.bookmark_interval = Some(Duration::from_secs_f64(b));
        }
        self
    }

    pub fn build(self) -> anyhow::Result<LocalPlane> {
        self.faults
            .validate()
            .map_err(|e| anyhow::anyhow!("invalid fault config: {e}"))?;
        let history = self.watch_history.unwrap_or(10_000);
        let cell = Plane::new("cell", None, history);
        // Every real cluster has it, and its uid is the cell's stable identity.
        cell.ensure_namespace(KUBE_SYSTEM);
        let mut crds = self.crds;
        for d in &self.crd_dirs {
            crds.extend(load_crd_dir(d)?);
        }
        cell.add_crds(crds).map_err(anyhow::Error::msg)?;
        for ns in &self.cell_namespaces {
            cell.ensure_namespace(ns);
        }
        let mut project_crds = self.project_crds;
        for d in &self.project_crd_dirs {
            project_crds.extend(load_crd_dir(d)?);
        }
        let mut quotas: BTreeMap<String, Vec<(ResourceKey, u64)>> = BTreeMap::new();
        for (project, spelled, limit) in &self.quotas {
            let res = parse_resource(spelled)
                .map_err(|e| anyhow::anyhow!("quota of project {project:?}: {e}"))?;
            quotas
                .entry(project.clone())
                .or_default()
                .push((res, *limit));
        }
        let mut identities = self.identities;
        if identities.is_empty() {
            identities.push(Identity::admin("admin", DEFAULT_ADMIN_TOKEN));
        }
        let lp = LocalPlane(Arc::new(Shared::new(
            cell,
            identities,
            self.rbac,
            Faults::new(self.faults),
            self.bookmark_interval.unwrap_or(Duration::from_secs(10)),
            history,
            ProjectTemplate {
                crds: project_crds,
                namespaces: self.project_namespaces,
                setup: self.on_project,
                strict_deletes: self.strict_deletes,
                quotas: quotas.clone(),
            },
        )));
        for p in &self.projects {
            lp.add_project(p);
        }
        // A quota on a kind the project does not serve would never refuse anything: a typo.
        for (project, limits) in &quotas {
            let Some(plane) = lp.project(project) else {
                continue;
            };
            for (res, _) in limits {
                anyhow::ensure!(
                    plane.def(res).is_some(),
                    "quota of project {project:?}: it serves no resource {}.{}",
                    res.plural,
                    res.group
                );
            }
        }
        for m in &self.manifests {
            load_manifest(&lp, m)?;
        }
        Ok(lp)
    }
}

/// Creates a manifest's objects (and serves its CRDs) on its plane.
fn load_manifest(lp: &LocalPlane, m: &Manifest) -> anyhow::Result<()> {
    let plane = lp
        .plane(&m.plane)
        .ok_or_else(|| anyhow::anyhow!("manifest {}: no plane {:?}", m.path.display(), m.plane))?;
    let text = std::fs::read_to_string(&m.path)?;
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)?;
    for d in docs.into_iter().filter(|d| d.is_object()) {
        if d.get("kind") == Some(&json!("CustomResourceDefinition")) {
            plane
                .add_crds(parse_crds(&serde_json::to_string(&d)?)?)
                .map_err(anyhow::Error::msg)?;
            continue;
        }
        plane
            .apply_object(d)
            .map_err(|e| anyhow::anyhow!("manifest {}: {}", m.path.display(), e.0.message))?;
    }
    Ok(())
}
