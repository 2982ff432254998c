//! The localplane process: its planes, identities, counters and faults; building it, serving it
//! on loopback, and handing out clients and kubeconfigs.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

use crate::config::{Config, DEFAULT_ADMIN_TOKEN, Identity, Manifest};
use crate::faults::{FaultConfig, Faults};
use crate::metrics::Metrics;
use crate::plane::Plane;
use crate::resources::{load_crd_dir, parse_crds};
use crate::server::PROJECT_PREFIX;

type ProjectSetup = Arc<dyn Fn(&Plane) + Send + Sync>;

pub(crate) struct Shared {
    cell: Plane,
    projects: RwLock<BTreeMap<String, Plane>>,
    pub identities: HashMap<String, Identity>,
    identity_order: Vec<Identity>,
    pub rbac: bool,
    pub metrics: Metrics,
    pub faults: Faults,
    pub shutdown: tokio::sync::watch::Sender<bool>,
    pub bookmark_interval: Duration,
    watch_history: usize,
    project_crds: Vec<CustomResourceDefinition>,
    project_namespaces: Vec<String>,
    on_project: Vec<ProjectSetup>,
}

/// A localplane: the cell plane plus any number of Milo project planes. Cheap to clone.
///
/// Use it in-process ([`LocalPlane::client`], [`LocalPlane::router`]) or serve it on a loopback
/// port ([`LocalPlane::serve`]).
#[derive(Clone)]
pub struct LocalPlane(Arc<Shared>);

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

    /// Runs for every project plane, including ones added later with
    /// [`LocalPlane::add_project`]: the place to register hooks (`plane.add_hooks(..)`).
    pub fn on_project(mut self, f: impl Fn(&Plane) + Send + Sync + 'static) -> Self {
        self.on_project.push(Arc::new(f));
        self
    }

    /// Merges a configuration file's settings into the builder.
    pub fn config(mut self, c: Config) -> Self {
        self.rbac |= c.rbac;
        self.crd_dirs.extend(c.crd_dirs);
        self.project_crd_dirs.extend(c.project_crd_dirs);
        self.identities.extend(c.identities);
        self.projects.extend(c.projects);
        self.cell_namespaces.extend(c.cell_namespaces);
        self.project_namespaces.extend(c.project_namespaces);
        self.manifests.extend(c.manifests);
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
        let history = self.watch_history.unwrap_or(10_000);
        let cell = Plane::new("cell", None, history);
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
        let mut identities = self.identities;
        if identities.is_empty() {
            identities.push(Identity::admin("admin", DEFAULT_ADMIN_TOKEN));
        }
        let (shutdown, _) = tokio::sync::watch::channel(false);
        let lp = LocalPlane(Arc::new(Shared {
            cell,
            projects: RwLock::new(BTreeMap::new()),
            identities: identities
                .iter()
                .map(|i| (i.token.clone(), i.clone()))
                .collect(),
            identity_order: identities,
            rbac: self.rbac,
            metrics: Metrics::default(),
            faults: Faults::new(self.faults),
            shutdown,
            bookmark_interval: self.bookmark_interval.unwrap_or(Duration::from_secs(10)),
            watch_history: history,
            project_crds,
            project_namespaces: self.project_namespaces,
            on_project: self.on_project,
        }));
        for p in &self.projects {
            lp.add_project(p);
        }
        for m in &self.manifests {
            let plane = lp.plane(&m.plane).ok_or_else(|| {
                anyhow::anyhow!("manifest {}: no plane {:?}", m.path.display(), m.plane)
            })?;
            let text = std::fs::read_to_string(&m.path)?;
            let docs: Vec<Value> = serde_saphyr::from_multiple(&text)?;
            for d in docs.into_iter().filter(|d| d.is_object()) {
                if d.get("kind") == Some(&json!("CustomResourceDefinition")) {
                    plane
                        .add_crds(parse_crds(&serde_json::to_string(&d)?)?)
                        .map_err(anyhow::Error::msg)?;
                    continue;
                }
                plane.apply_object(d).map_err(|e| {
                    anyhow::anyhow!("manifest {}: {}", m.path.display(), e.0.message)
                })?;
            }
        }
        Ok(lp)
    }
}

impl LocalPlane {
    pub fn builder() -> LocalPlaneBuilder {
        LocalPlaneBuilder::default()
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.0
    }

    /// The cell's control plane (served at the root).
    pub fn cell(&self) -> Plane {
        self.0.cell.clone()
    }

    /// A project's control plane, if it exists.
    pub fn project(&self, name: &str) -> Option<Plane> {
        self.0
            .projects
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// `cell` or a project name.
    pub fn plane(&self, name: &str) -> Option<Plane> {
        if name == "cell" {
            Some(self.cell())
        } else {
            self.project(name)
        }
    }

    pub fn project_names(&self) -> Vec<String> {
        self.0
            .projects
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// Adds a project control plane (or returns the existing one), with the project CRDs,
    /// namespaces and `on_project` setup applied.
    pub fn add_project(&self, name: &str) -> Plane {
        assert_ne!(name, "cell", "`cell` names the root plane");
        let mut projects = self.0.projects.write().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = projects.get(name) {
            return p.clone();
        }
        let plane = Plane::new(name, Some(name), self.0.watch_history);
        if let Err(e) = plane.add_crds(self.0.project_crds.clone()) {
            tracing::warn!(project = name, "project CRDs: {e}");
        }
        for ns in &self.0.project_namespaces {
            plane.ensure_namespace(ns);
        }
        for f in &self.0.on_project {
            f(&plane);
        }
        projects.insert(name.to_string(), plane.clone());
        plane
    }

    /// Removes a project: its path answers 404 from now on, like a deleted Milo project.
    pub fn remove_project(&self, name: &str) -> bool {
        self.0
            .projects
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name)
            .is_some()
    }

    pub fn identity(&self, name: &str) -> Option<Identity> {
        self.0
            .identity_order
            .iter()
            .find(|i| i.name == name)
            .cloned()
    }

    pub fn identities(&self) -> Vec<Identity> {
        self.0.identity_order.clone()
    }

    pub fn metrics(&self) -> &Metrics {
        &self.0.metrics
    }

    pub fn faults(&self) -> &Faults {
        &self.0.faults
    }

    /// The HTTP application, for serving it yourself or calling it in-process.
    pub fn router(&self) -> axum::Router {
        axum::Router::new()
            .fallback(crate::server::handle)
            .with_state(self.clone())
    }

    /// The path prefix of a plane's API (empty for the cell).
    pub fn plane_path(plane: &str) -> String {
        if plane == "cell" {
            String::new()
        } else {
            format!("{PROJECT_PREFIX}{plane}/control-plane")
        }
    }

    /// A kube client that calls the router in-process (no socket), as `identity`, against
    /// `plane` (`cell` or a project), with default namespace `default`.
    pub fn client(&self, plane: &str, identity: &str) -> kube::Client {
        let token = self
            .identity(identity)
            .unwrap_or_else(|| panic!("no identity {identity:?}"))
            .token;
        let prefix = Self::plane_path(plane);
        let auth = http::HeaderValue::from_str(&format!("Bearer {token}")).expect("token is ASCII");
        let svc = tower::ServiceBuilder::new()
            .map_request(move |mut req: http::Request<kube::client::Body>| {
                req.headers_mut()
                    .insert(http::header::AUTHORIZATION, auth.clone());
                if !prefix.is_empty() {
                    let pq = req
                        .uri()
                        .path_and_query()
                        .map(|p| p.as_str().to_string())
                        .unwrap_or_default();
                    if let Ok(u) = format!("{prefix}{pq}").parse() {
                        *req.uri_mut() = u;
                    }
                }
                req
            })
            .service(self.router());
        kube::Client::new(svc, "default")
    }

    /// Serves plain HTTP on `addr` (use `127.0.0.1:0` for a free port) until
    /// [`Running::shutdown`]. Enough for kube-rs; kubectl needs [`LocalPlane::serve_tls`], since
    /// client-go sends bearer tokens only over TLS.
    pub async fn serve(self, addr: SocketAddr) -> std::io::Result<Running> {
        self.serve_inner(addr, None).await
    }

    /// Serves HTTPS on `addr` with a freshly generated CA, which the kubeconfigs and
    /// [`Running::http_client`] trust.
    pub async fn serve_tls(self, addr: SocketAddr) -> std::io::Result<Running> {
        let tls = crate::tls::TlsMaterial::generate().map_err(std::io::Error::other)?;
        self.serve_inner(addr, Some(tls)).await
    }

    async fn serve_inner(
        self,
        addr: SocketAddr,
        tls: Option<crate::tls::TlsMaterial>,
    ) -> std::io::Result<Running> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let mut stop = self.0.shutdown.subscribe();
        let router = self.router();
        let task = match &tls {
            Some(t) => tokio::spawn(crate::tls::serve(listener, router, t.server.clone(), stop)),
            None => tokio::spawn(async move {
                let res = axum::serve(listener, router)
                    .with_graceful_shutdown(async move {
                        let _ = stop.wait_for(|s| *s).await;
                    })
                    .await;
                if let Err(e) = res {
                    tracing::error!("localplane server: {e}");
                }
            }),
        };
        let dir =
            std::env::temp_dir().join(format!("localplane-{}-{}", std::process::id(), addr.port()));
        Ok(Running {
            lp: self,
            addr,
            tls,
            kubeconfig_dir: dir,
            task: Some(task),
        })
    }
}

/// A localplane serving on a loopback port. Derefs to [`LocalPlane`].
pub struct Running {
    lp: LocalPlane,
    addr: SocketAddr,
    tls: Option<crate::tls::TlsMaterial>,
    kubeconfig_dir: PathBuf,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl std::ops::Deref for Running {
    type Target = LocalPlane;
    fn deref(&self) -> &LocalPlane {
        &self.lp
    }
}

impl Running {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`, or `https://` when serving TLS.
    pub fn base_url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The CA and serving certificate, when serving TLS.
    pub fn tls(&self) -> Option<&crate::tls::TlsMaterial> {
        self.tls.as_ref()
    }

    /// The server URL of a plane (`cell` or a project), as a kubeconfig would carry it.
    pub fn plane_url(&self, plane: &str) -> String {
        format!("{}{}", self.base_url(), LocalPlane::plane_path(plane))
    }

    /// Writes kubeconfigs into `dir` instead of a directory under the system temp dir.
    pub fn set_kubeconfig_dir(&mut self, dir: impl Into<PathBuf>) {
        self.kubeconfig_dir = dir.into();
    }

    pub fn kubeconfig_dir(&self) -> &Path {
        &self.kubeconfig_dir
    }

    /// Writes (or rewrites) `<dir>/<plane>-<identity>.kubeconfig` and returns its path.
    pub fn kubeconfig_path(&self, plane: &str, identity: &str) -> std::io::Result<PathBuf> {
        let id = self.identity(identity).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("no identity {identity:?}"),
            )
        })?;
        std::fs::create_dir_all(&self.kubeconfig_dir)?;
        let path = self
            .kubeconfig_dir
            .join(format!("{plane}-{identity}.kubeconfig"));
        let ca = self.tls.as_ref().map(|t| t.ca_pem.as_str());
        let doc = crate::kubeconfig::render(&self.plane_url(plane), plane, &id, ca);
        std::fs::write(&path, doc)?;
        Ok(path)
    }

    /// Writes a kubeconfig for every plane and identity; returns the paths.
    pub fn write_kubeconfigs(&self) -> std::io::Result<Vec<PathBuf>> {
        let mut planes = vec!["cell".to_string()];
        planes.extend(self.project_names());
        let mut out = vec![];
        for p in &planes {
            for i in self.identities() {
                out.push(self.kubeconfig_path(p, &i.name)?);
            }
        }
        Ok(out)
    }

    /// A kube client over real HTTP, configured as a kubeconfig for `plane` and `identity`
    /// would configure it.
    pub fn http_client(&self, plane: &str, identity: &str) -> kube::Result<kube::Client> {
        let token = self
            .identity(identity)
            .unwrap_or_else(|| panic!("no identity {identity:?}"))
            .token;
        let url = self
            .plane_url(plane)
            .parse()
            .expect("a loopback URL parses");
        let mut cfg = kube::Config::new(url);
        cfg.auth_info.token = Some(token.into());
        cfg.default_namespace = "default".into();
        if let Some(t) = &self.tls {
            cfg.root_cert = Some(vec![t.ca_der.clone()]);
        }
        kube::Client::try_from(cfg)
    }

    /// Ends every watch and stops serving.
    pub async fn shutdown(mut self) {
        let _ = self.lp.0.shutdown.send(true);
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.task.is_some() {
            let _ = self.lp.0.shutdown.send(true);
        }
    }
}
