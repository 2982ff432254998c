//! Access to Milo IPAM on the platform project's control plane: plain GET, POST and DELETE, no
//! cache, no watch (nothing watches IPAM). Every request is bounded in time, counted, and its
//! answer read for what it says about IPAM's health.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use egress_api::ipam::{IPAllocation, IPClaim, project_control_plane_path};
use http::Uri;
use kube::api::{DeleteParams, ListParams, ObjectList, Preconditions};
use kube::{Api, Client};
use tokio::sync::watch;

use super::breaker::{Admit, Breaker};
use super::reasons::{Refusal, refusal};
use crate::config::settings::write_params;
use crate::connect::Error;
use crate::connect::connection::{self, Endpoint, Follower, MAX_IPAM_ANSWER, RequestObserver};
use crate::connect::kubeconfig::{self, Transport};
use crate::kube_status::{
    is_conflict, is_not_found, is_unauthorized, status_code, transport_cause,
};
use crate::metrics::Metrics;

/// The kubeconfig server with its path replaced by the project's control-plane path, so that
/// every IPAM request goes to
/// `<server>/apis/resourcemanager.miloapis.com/v1alpha1/projects/<project>/control-plane/apis/ipam.miloapis.com/…`.
/// A path already in the kubeconfig is replaced, not appended to: the Milo grant's kubeconfig
/// names Milo's base URL.
pub fn project_url(server: &Uri, platform_project: &str) -> Result<Uri, Error> {
    let mut parts = server.clone().into_parts();
    let path = project_control_plane_path(platform_project);
    parts.path_and_query = Some(path.parse().map_err(|e| {
        Error::Invalid(format!(
            "the platform project {platform_project:?} does not make a URL path: {e}"
        ))
    })?);
    Uri::from_parts(parts).map_err(|e| {
        Error::Invalid(format!(
            "the IPAM server {server} with the path of project {platform_project:?} is not a URL: {e}"
        ))
    })
}

/// A client for IPAM built from `kubeconfig_path`, with its URL path replaced by the platform
/// project's control-plane path.
pub async fn ipam_client(kubeconfig_path: &Path, platform_project: &str) -> Result<Client, Error> {
    ipam_client_with(kubeconfig_path, platform_project, Transport::default()).await
}

/// [`ipam_client`] with an explicit transport policy.
pub async fn ipam_client_with(
    kubeconfig_path: &Path,
    platform_project: &str,
    transport: Transport,
) -> Result<Client, Error> {
    Ok(ipam_endpoint(kubeconfig_path, platform_project, transport)
        .await?
        .client)
}

/// [`ipam_client_with`], with the server it talks to.
async fn ipam_endpoint(
    kubeconfig_path: &Path,
    platform_project: &str,
    transport: Transport,
) -> Result<Endpoint, Error> {
    if platform_project.is_empty() {
        return Err(Error::Invalid(
            "the project serving the claims is required".into(),
        ));
    }
    let mut config = kubeconfig::load_with(kubeconfig_path, transport).await?;
    config.cluster_url = project_url(&config.cluster_url, platform_project)?;
    // The claim path decides for itself what to retry; a silent client retry of a create would
    // hide how many requests a claim really cost.
    config.default_retry = false;
    kubeconfig::endpoint(config, kubeconfig_path)
}

/// An IPAM client that follows its kubeconfig file (a rotated credential is picked up without a
/// restart) and reads answers of at most [`MAX_IPAM_ANSWER`] bytes; run the follower beside it.
/// `observe` hears of every request.
pub async fn following_ipam_client(
    kubeconfig_path: &Path,
    platform_project: &str,
    transport: Transport,
    observe: Option<RequestObserver>,
) -> Result<(Client, Follower), Error> {
    let project = platform_project.to_string();
    connection::following(
        kubeconfig_path,
        MAX_IPAM_ANSWER,
        Arc::new(move |path| {
            let project = project.clone();
            Box::pin(async move { ipam_endpoint(&path, &project, transport).await })
        }),
        observe,
    )
    .await
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

/// What IPAM's latest answer says about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// No request made yet (a standby, or nothing to claim).
    Unknown,
    /// It answered, and accepted the credential.
    Up,
    /// It answered 401/403: the credential is refused.
    CredentialRefused,
    /// No answer (a connection that failed, timed out or was cut; the cause is named), a 5xx,
    /// or a 429.
    Unreachable(&'static str),
}

impl Health {
    fn of<T>(res: &Result<T, kube::Error>) -> Health {
        match res {
            Ok(_) => Health::Up,
            Err(kube::Error::Api(s)) if refusal(s).is_some() => match refusal(s) {
                Some(Refusal::Credential) => Health::CredentialRefused,
                // Quota and a missing namespace are IPAM answering, and accepting the credential.
                _ => Health::Up,
            },
            Err(e) if is_unauthorized(e) => Health::CredentialRefused,
            Err(kube::Error::Api(s)) if s.code >= 500 => Health::Unreachable("server-error"),
            Err(kube::Error::Api(s)) if s.code == 429 => Health::Unreachable("throttled"),
            Err(kube::Error::Api(_)) => Health::Up,
            Err(e) => Health::Unreachable(transport_cause(e).unwrap_or("transport")),
        }
    }
}

/// The error of a request the open circuit breaker kept from going out.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("IPAM is not answering; requests wait until a probe is answered")]
pub struct CircuitOpen;

/// Whether a request failed because the circuit breaker is open (nothing was sent).
pub fn is_circuit_open(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Service(e) if e.downcast_ref::<CircuitOpen>().is_some())
}

/// How a release went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleted {
    /// The claim was deleted.
    Deleted,
    /// There was no claim of that name.
    AlreadyGone,
    /// The claim of that name is another object now (its UID differs): not ours to delete.
    Replaced,
}

/// The controller's IPAM calls, timed and counted. Cheap to clone.
#[derive(Clone)]
pub struct Ipam {
    client: Client,
    metrics: Metrics,
    timeout: Duration,
    health: Arc<watch::Sender<Health>>,
    breaker: Arc<Breaker>,
}

impl Ipam {
    pub fn new(client: Client, metrics: Metrics, timeout: Duration, breaker: Breaker) -> Self {
        Self {
            client,
            metrics,
            timeout,
            health: Arc::new(watch::channel(Health::Unknown).0),
            breaker: Arc::new(breaker),
        }
    }

    /// Where every request is counted.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The circuit breaker every request passes.
    pub fn breaker(&self) -> &Breaker {
        &self.breaker
    }

    /// What the latest answer said about IPAM.
    pub fn health(&self) -> Health {
        *self.health.borrow()
    }

    /// Notified whenever [`health`](Self::health) changes.
    pub fn health_changes(&self) -> watch::Receiver<Health> {
        self.health.subscribe()
    }

    async fn timed<T>(
        &self,
        verb: &str,
        resource: &str,
        fut: impl Future<Output = Result<T, kube::Error>>,
        ok_code: u16,
    ) -> Result<T, kube::Error> {
        if self.breaker.admit() == Admit::Refuse {
            return Err(kube::Error::Service(Box::new(CircuitOpen)));
        }
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
        if let Err(kube::Error::Api(s)) = &res
            && let Some(refused) = refusal(s)
        {
            self.metrics.ipam_refusal(refused.label());
        }
        let health = Health::of(&res);
        self.breaker.record(health == Health::Up);
        if let Health::Unreachable(cause) = health {
            self.metrics.transport_error("ipam", cause);
        }
        self.health
            .send_if_modified(|h| std::mem::replace(h, health) != health);
        self.metrics.set_ipam_up(health == Health::Up);
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
            api.create(&write_params(), claim),
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

    /// One page of the claims in `namespace` that `params` select (only the orphan sweep lists,
    /// and only under the grant overlay that allows it).
    pub async fn list_claims(
        &self,
        namespace: &str,
        params: &ListParams,
    ) -> Result<ObjectList<IPClaim>, kube::Error> {
        let api = Api::<IPClaim>::namespaced(self.client.clone(), namespace);
        self.timed("list", "ipclaims", api.list(params), 200).await
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

    /// Deletes exactly the claim object with `uid`: the UID precondition makes a late or
    /// repeated delete harmless to a newer claim of the same name.
    pub async fn delete_claim(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<Deleted, kube::Error> {
        let api = Api::<IPClaim>::namespaced(self.client.clone(), namespace);
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match self
            .timed("delete", "ipclaims", api.delete(name, &params), 200)
            .await
        {
            Ok(_) => Ok(Deleted::Deleted),
            Err(e) if is_not_found(&e) => Ok(Deleted::AlreadyGone),
            Err(e) if is_conflict(&e) => Ok(Deleted::Replaced),
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

    #[test]
    fn health_follows_what_the_answer_says() {
        let api = |code: u16| -> Result<(), kube::Error> {
            Err(kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..Default::default()
            })))
        };
        assert_eq!(Health::of(&Ok::<(), kube::Error>(())), Health::Up);
        assert_eq!(Health::of(&api(404)), Health::Up);
        assert_eq!(Health::of(&api(409)), Health::Up);
        assert_eq!(Health::of(&api(401)), Health::CredentialRefused);
        assert_eq!(Health::of(&api(403)), Health::CredentialRefused);
        let forbidden = |message: &str| -> Result<(), kube::Error> {
            Err(kube::Error::Api(Box::new(kube::core::Status {
                code: 403,
                reason: "Forbidden".into(),
                message: message.into(),
                ..Default::default()
            })))
        };
        assert_eq!(
            Health::of(&forbidden(
                "ipclaims.ipam.miloapis.com \"c\" is forbidden: Insufficient quota resources available."
            )),
            Health::Up,
            "a quota refusal is IPAM answering: it opens no breaker"
        );
        assert_eq!(
            Health::of(&forbidden(
                "ipclaims.ipam.miloapis.com is forbidden: namespace default does not exist: an address bound into it would have nothing to collect it"
            )),
            Health::Up
        );
        assert_eq!(Health::of(&api(503)), Health::Unreachable("server-error"));
        assert_eq!(Health::of(&api(429)), Health::Unreachable("throttled"));
        assert_eq!(
            Health::of(&Err::<(), _>(kube::Error::Service(
                "no answer from IPAM within 1s".into()
            ))),
            Health::Unreachable("timeout")
        );
    }
}
