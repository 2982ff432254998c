//! Serving a localplane on loopback, and what serving returns: its URLs, kubeconfigs and HTTP
//! clients.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use tokio::task::JoinHandle;

use super::LocalPlane;
use crate::kubeconfig;
use crate::server;
use crate::tls::TlsMaterial;

impl LocalPlane {
    /// Serves plain HTTP on `addr` (use `127.0.0.1:0` for a free port) until
    /// [`Running::shutdown`]. Enough for kube-rs; kubectl needs [`LocalPlane::serve_tls`], since
    /// client-go sends bearer tokens only over TLS.
    pub async fn serve(self, addr: SocketAddr) -> std::io::Result<Running> {
        self.serve_inner(addr, None).await
    }

    /// Serves HTTPS on `addr` with a freshly generated CA, which the kubeconfigs and
    /// [`Running::http_client`] trust.
    pub async fn serve_tls(self, addr: SocketAddr) -> std::io::Result<Running> {
        let tls = TlsMaterial::generate().map_err(std::io::Error::other)?;
        self.serve_inner(addr, Some(tls)).await
    }

    async fn serve_inner(
        self,
        addr: SocketAddr,
        tls: Option<TlsMaterial>,
    ) -> std::io::Result<Running> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let stop = self.0.shutdown.subscribe();
        let router = self.router();
        let server_tls = tls.as_ref().map(|t| t.server.clone());
        let task = tokio::spawn(server::listen::serve(listener, router, server_tls, stop));
        let kubeconfig_dir =
            std::env::temp_dir().join(format!("localplane-{}-{}", std::process::id(), addr.port()));
        Ok(Running {
            lp: self,
            addr,
            tls,
            kubeconfig_dir,
            task: Some(task),
        })
    }
}

/// A localplane serving on a loopback port. Derefs to [`LocalPlane`].
pub struct Running {
    lp: LocalPlane,
    addr: SocketAddr,
    tls: Option<TlsMaterial>,
    kubeconfig_dir: PathBuf,
    task: Option<JoinHandle<()>>,
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
    pub fn tls(&self) -> Option<&TlsMaterial> {
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
        let doc = kubeconfig::render(&self.plane_url(plane), plane, &id, ca);
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
        kube::Client::try_from(self.http_config(plane, identity))
    }

    /// The configuration [`Running::http_client`] builds its client from, for a client that
    /// needs more (a read timeout, to give up on an answer that never comes).
    pub fn http_config(&self, plane: &str, identity: &str) -> kube::Config {
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
        cfg
    }

    /// Ends every watch and stops serving.
    pub async fn shutdown(mut self) {
        self.lp.stop();
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.task.is_some() {
            self.lp.stop();
        }
    }
}
