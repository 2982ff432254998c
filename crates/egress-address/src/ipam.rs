//! Access to Milo IPAM on the platform project's control plane: plain GET, POST and DELETE, no
//! cache, no watch (nothing watches IPAM).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use egress_api::ipam::{IPAllocation, IPClaim, project_control_plane_path};
use http::Uri;
use kube::api::{DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

use crate::Error;
use crate::ipam_error::{is_not_found, is_unauthorized, status_code};
use crate::metrics::Metrics;
use crate::runtime::Shared;

/// The kubeconfig server with its path replaced by the project's control-plane path, so that
/// every IPAM request goes to
/// `<server>/apis/resourcemanager.miloapis.com/v1alpha1/projects/<project>/control-plane/apis/ipam.miloapis.com/…`.
/// A path already in the kubeconfig is replaced, not appended to: the Milo grant's kubeconfig
/// names Milo's base URL.
pub fn project_url(server: &Uri, platform_project: &str) -> Result<Uri, Error> {
    let mut parts = server.clone().into_parts();
    let path = project_control_plane_path(platform_project);
    parts.path_and_query = Some(path.parse().map_err(|e| {
        Error::Config(format!(
            "the platform project {platform_project:?} does not make a URL path: {e}"
        ))
    })?);
    Uri::from_parts(parts).map_err(|e| {
        Error::Config(format!(
            "the IPAM server {server} with the path of project {platform_project:?} is not a URL: {e}"
        ))
    })
}

/// Reads a kubeconfig file, naming the file in any error.
pub async fn config_from_kubeconfig(path: &Path) -> Result<Config, Error> {
    let kubeconfig = Kubeconfig::read_from(path).map_err(|e| Error::Kubeconfig {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| Error::Kubeconfig {
            path: path.display().to_string(),
            message: e.to_string(),
        })
}

/// A client for IPAM built from `kubeconfig_path`, with its URL path replaced by the platform
/// project's control-plane path.
pub async fn ipam_client(kubeconfig_path: &Path, platform_project: &str) -> Result<Client, Error> {
    if platform_project.is_empty() {
        return Err(Error::Config(
            "the project serving the claims is required".into(),
        ));
    }
    let mut config = config_from_kubeconfig(kubeconfig_path).await?;
    config.cluster_url = project_url(&config.cluster_url, platform_project)?;
    // The claim path decides for itself what to retry; a silent client retry of a create would
    // hide how many requests a claim really cost.
    config.default_retry = false;
    Client::try_from(config).map_err(|e| Error::Kubeconfig {
        path: kubeconfig_path.display().to_string(),
        message: e.to_string(),
    })
}

/// One IPClaim by name.
pub async fn get_claim(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<IPClaim, kube::Error> {
    Api::<IPClaim>::namespaced(client.clone(), namespace)
        .get(name)
        .await
}

/// One IPAllocation by name.
pub async fn get_allocation(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<IPAllocation, kube::Error> {
    Api::<IPAllocation>::namespaced(client.clone(), namespace)
        .get(name)
        .await
}

/// The controller's IPAM calls, timed and counted.
#[derive(Clone)]
pub struct Ipam {
    client: Client,
    metrics: Metrics,
    timeout: Duration,
    auth: Option<Arc<Shared>>,
}

impl Ipam {
    pub fn new(client: Client, metrics: Metrics) -> Self {
        Self {
            client,
            metrics,
            timeout: Duration::from_secs(30),
            auth: None,
        }
    }

    /// Reports every answer's verdict on the credential to the readiness state: a 401/403 makes
    /// the controller not ready, and any other answer from IPAM (even a 404) proves the
    /// credential works again.
    pub(crate) fn with_auth_watch(mut self, shared: Arc<Shared>) -> Self {
        self.auth = Some(shared);
        self
    }

    /// Bounds every request, so a hung IPAM cannot hold a shard (or shutdown) forever.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    async fn timed<T>(
        &self,
        verb: &str,
        resource: &str,
        fut: impl Future<Output = Result<T, kube::Error>>,
        ok_code: u16,
    ) -> Result<T, kube::Error> {
        let start = Instant::now();
        let res = match tokio::time::timeout(self.timeout, fut).await {
            Ok(res) => res,
            Err(_) => Err(kube::Error::Service(
                format!("no answer from IPAM within {:?}", self.timeout).into(),
            )),
        };
        let code = match &res {
            Ok(_) => ok_code,
            Err(e) => status_code(e),
        };
        if let Some(shared) = &self.auth {
            match &res {
                Err(e) if is_unauthorized(e) => shared.set_ipam_auth_failed(true),
                Ok(_) | Err(kube::Error::Api(_)) => shared.set_ipam_auth_failed(false),
                Err(_) => {}
            }
        }
        self.metrics
            .ipam_request(verb, resource, code, start.elapsed());
        res
    }

    pub async fn create_claim(&self, claim: &IPClaim) -> Result<IPClaim, kube::Error> {
        let namespace = claim.metadata.namespace.as_deref().unwrap_or_default();
        let api = Api::<IPClaim>::namespaced(self.client.clone(), namespace);
        self.timed(
            "create",
            "ipclaims",
            api.create(&PostParams::default(), claim),
            201,
        )
        .await
    }

    pub async fn get_claim(&self, namespace: &str, name: &str) -> Result<IPClaim, kube::Error> {
        self.timed(
            "get",
            "ipclaims",
            get_claim(&self.client, namespace, name),
            200,
        )
        .await
    }

    pub async fn get_allocation(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<IPAllocation, kube::Error> {
        self.timed(
            "get",
            "ipallocations",
            get_allocation(&self.client, namespace, name),
            200,
        )
        .await
    }

    /// Deletes a claim; a claim already gone counts as deleted.
    pub async fn delete_claim(&self, namespace: &str, name: &str) -> Result<(), kube::Error> {
        let api = Api::<IPClaim>::namespaced(self.client.clone(), namespace);
        match self
            .timed(
                "delete",
                "ipclaims",
                api.delete(name, &DeleteParams::default()),
                200,
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_path_is_replaced_by_the_project_path() {
        for server in [
            "https://milo.example:6443",
            "https://milo.example:6443/",
            "https://milo.example:6443/some/base?x=1",
        ] {
            let got = project_url(&server.parse().unwrap(), "datum-platform").unwrap();
            assert_eq!(
                got.to_string(),
                "https://milo.example:6443/apis/resourcemanager.miloapis.com/v1alpha1/projects/datum-platform/control-plane",
                "{server}"
            );
        }
    }

    #[test]
    fn a_project_that_is_no_path_segment_is_refused() {
        assert!(project_url(&"https://m".parse().unwrap(), "a b").is_err());
    }

    #[tokio::test]
    async fn an_unreadable_kubeconfig_is_named() {
        let Err(err) = ipam_client(Path::new("/nonexistent/ipam-kubeconfig"), "p").await else {
            panic!("a missing kubeconfig built a client");
        };
        let text = err.to_string();
        assert!(text.contains("/nonexistent/ipam-kubeconfig"), "{text}");
    }

    #[tokio::test]
    async fn a_malformed_kubeconfig_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        std::fs::write(&path, "clusters: [not: {valid").unwrap();
        let Err(err) = ipam_client(&path, "p").await else {
            panic!("a malformed kubeconfig built a client");
        };
        assert!(err.to_string().contains(path.to_str().unwrap()), "{err}");
    }
}
