//! A fault proxy in front of a Kubernetes API server (the real one of `realcell`, or a
//! localplane): TLS in with a certificate of its own CA, TLS out trusting the server's CA, and
//! the caller's credentials (its `Authorization` header, impersonation headers) passed on
//! unchanged, so the caller still acts as itself under the server's own RBAC.
//!
//! Every request draws what happens to it from a [`Faults`], the same rules, seed and decision
//! localplane's own server draws from; the proxy only carries the decision out on the wire:
//!
//! * latency, before anything else;
//! * a failure before apply: the request is never forwarded (a Status, a reset, or no answer);
//! * a failure after apply: the request is forwarded, the server applies it and answers, and the
//!   answer is dropped (replaced by a Status, a reset connection, or nothing);
//! * a delayed commit: the request is held and forwarded `commitDelayMs` after it arrived, in a
//!   task of its own, so it lands even if the client gave up meanwhile;
//! * watch streams cut after `watchCutAfterSeconds` (a broken connection, not a clean end).
//!
//! Release faults (`when: release`, `releaseDelayMs`) never fire here: they strike the second
//! write of a DELETE that Milo's IPClaim takes in two, and kube-apiserver deletes nothing so.
//!
//! Answers stream through unbuffered (a watch event reaches the client when the server sends
//! it), except those a fault has to see whole: an answer to drop after apply, a delayed commit.
//! Requests are counted as localplane counts its own ([`Metrics`]), by plane, verb, resource
//! and code, with the faults injected.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, Uri, header};
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::error::ApiError;
use crate::faults::{Failure, FaultConfig, FaultOutcome, FaultWhen, Faults, Reach};
use crate::metrics::{Metrics, RequestKey};
use crate::server::PROJECT_PREFIX;
use crate::server::listen::{self, Connection, Silence};
use crate::server::routes::{Query, ResourcePath, Verb};
use crate::tls::TlsMaterial;

/// Headers of one hop, never passed on.
const HOP_BY_HOP: [HeaderName; 7] = [
    header::CONNECTION,
    header::HOST,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::TE,
    header::TRAILER,
    header::PROXY_AUTHORIZATION,
];

/// Where a proxy forwards to.
#[derive(Debug, Clone)]
pub struct Upstream {
    /// `https://127.0.0.1:PORT` (or `http://` for a plain localplane).
    pub server: String,
    /// The server's CA certificate, PEM; the proxy trusts only it.
    pub ca_pem: Option<String>,
    /// The name fault rules match the server's own API by (`cell`); a Milo project path
    /// (`/apis/resourcemanager.miloapis.com/v1alpha1/projects/P/control-plane/...`) is plane `P`.
    pub plane: String,
}

type UpstreamClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

struct Shared {
    upstream: Upstream,
    client: UpstreamClient,
    faults: Faults,
    metrics: Metrics,
    stop: watch::Receiver<bool>,
}

/// A running fault proxy; stop it with [`FaultProxy::shutdown`].
pub struct FaultProxy {
    shared: Arc<Shared>,
    url: String,
    tls: TlsMaterial,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("url", &self.url)
            .field("upstream", &self.shared.upstream.server)
            .finish_non_exhaustive()
    }
}

impl FaultProxy {
    /// Listens on `listen` (port 0 for any) over TLS with a throwaway CA of its own and forwards
    /// to `upstream`. No faults until [`FaultProxy::faults`] is given some.
    pub async fn start(listen: SocketAddr, upstream: Upstream) -> anyhow::Result<FaultProxy> {
        let mut roots = rustls::RootCertStore::empty();
        if let Some(pem) = &upstream.ca_pem {
            for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                let cert = cert.map_err(|e| anyhow::anyhow!("the upstream CA: {e}"))?;
                roots.add(cert)?;
            }
            anyhow::ensure!(!roots.is_empty(), "the upstream CA holds no certificate");
        }
        let tls_out = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls_out)
            .https_or_http()
            .enable_http1()
            .build();
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        let tls = TlsMaterial::generate()?;
        let listener = TcpListener::bind(listen).await?;
        let url = format!("https://{}", listener.local_addr()?);
        let (stop, stop_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            upstream,
            client,
            faults: Faults::new(FaultConfig::default()),
            metrics: Metrics::default(),
            stop: stop_rx.clone(),
        });
        let router = axum::Router::new()
            .fallback(handle)
            .with_state(shared.clone());
        let task = tokio::spawn(listen::serve(
            listener,
            router,
            Some(tls.server.clone()),
            stop_rx,
        ));
        Ok(FaultProxy {
            shared,
            url,
            tls,
            stop,
            task: Some(task),
        })
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The proxy's CA certificate, PEM: what a client of the proxy trusts.
    pub fn ca_pem(&self) -> &str {
        &self.tls.ca_pem
    }

    /// The live fault rules (the same type localplane's own server draws from).
    pub fn faults(&self) -> &Faults {
        &self.shared.faults
    }

    /// Requests counted and faults injected.
    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// Writes to `to` the kubeconfig `from` (a kubeconfig of the upstream) pointed at the proxy:
    /// every cluster's server is the proxy and its CA the proxy's; the users (their tokens) are
    /// kept as they are, so a client of it acts as the same identity.
    pub fn kubeconfig_through(&self, from: &Path, to: &Path) -> anyhow::Result<()> {
        use base64::Engine;
        let text = std::fs::read_to_string(from)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", from.display()))?;
        let mut doc: serde_json::Value = serde_saphyr::from_str(&text)
            .map_err(|e| anyhow::anyhow!("parsing {}: {e}", from.display()))?;
        let clusters = doc["clusters"]
            .as_array_mut()
            .filter(|c| !c.is_empty())
            .ok_or_else(|| anyhow::anyhow!("{} names no cluster", from.display()))?;
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.tls.ca_pem);
        for c in clusters {
            let cluster = c["cluster"].as_object_mut().ok_or_else(|| {
                anyhow::anyhow!("{}: a cluster without `cluster`", from.display())
            })?;
            cluster.remove("certificate-authority");
            cluster.remove("insecure-skip-tls-verify");
            cluster.remove("tls-server-name");
            cluster.insert("server".into(), self.url.clone().into());
            cluster.insert("certificate-authority-data".into(), ca.clone().into());
        }
        let out = serde_json::to_string_pretty(&doc)?;
        std::fs::write(to, out).map_err(|e| anyhow::anyhow!("writing {}: {e}", to.display()))
    }

    /// Stops accepting, ends the streams it passes on and hung answers, and waits (at most 10 s)
    /// for the connections to close.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// What a request is, as fault rules and counters name it.
struct Class {
    plane: String,
    verb: Verb,
    group: String,
    /// The plural, with its subresource (`egressshards/status`): what a rule's `resource` matches.
    fault_resource: String,
    /// The counters' label (`egressshards.network.datumapis.com/status`).
    label: String,
}

/// The plane and the resource a request addresses; `None` for discovery and other non-resource
/// paths, which pass through untouched.
fn classify(default_plane: &str, method: &http::Method, uri: &Uri) -> Option<Class> {
    let path = uri.path();
    let (plane, rest) = match path.strip_prefix(PROJECT_PREFIX) {
        Some(r) => {
            let (project, tail) = r.split_once('/')?;
            (project.to_string(), tail.strip_prefix("control-plane")?)
        }
        None => (default_plane.to_string(), path),
    };
    let segs: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
    let rp = ResourcePath::parse(&segs)?;
    let query = Query::parse(uri.query().unwrap_or(""));
    let verb = Verb::of(method, rp.name.is_some(), &query);
    Some(Class {
        plane,
        verb,
        fault_resource: match &rp.sub {
            Some(s) => format!("{}/{s}", rp.plural),
            None => rp.plural.clone(),
        },
        label: rp.label(),
        group: rp.group,
    })
}

async fn handle(State(p): State<Arc<Shared>>, req: Request) -> Response {
    let conn = req.extensions().get::<Connection>().cloned();
    let (parts, body) = req.into_parts();
    let Some(class) = classify(&p.upstream.plane, &parts.method, &parts.uri) else {
        let key = RequestKey {
            plane: p.upstream.plane.clone(),
            verb: parts.method.as_str().to_ascii_lowercase(),
            resource: parts.uri.path().to_string(),
            code: 0,
        };
        let resp = match read(body).await {
            Ok(b) => p.forward(&parts, b, false).await,
            Err(e) => e.into_response(),
        };
        p.record(key, resp.status().as_u16());
        return resp;
    };
    let watch = class.verb == Verb::Watch;
    // kube-apiserver deletes nothing in two writes, so no request here has a release step.
    let reach = if watch { Reach::Watch } else { Reach::Applies };
    let decision = p.faults.decide(
        &class.plane,
        class.verb.as_str(),
        &class.group,
        &class.fault_resource,
        reach,
    );
    let key = RequestKey {
        plane: class.plane.clone(),
        verb: class.verb.as_str().to_string(),
        resource: class.label.clone(),
        code: 0,
    };
    if !decision.latency.is_zero() {
        tokio::time::sleep(decision.latency).await;
    }
    let (before, after) = match decision.failure {
        Some(f) if f.when == FaultWhen::BeforeApply => (Some(f), None),
        f => (None, f),
    };
    if let Some(f) = before {
        return p.fail(conn, &class.plane, key, f).await;
    }
    let body = match read(body).await {
        Ok(b) => b,
        Err(e) => {
            let resp = e.into_response();
            p.record(key, resp.status().as_u16());
            return resp;
        }
    };
    let answer = if !decision.commit_delay.is_zero() {
        p.metrics.record_delayed_commit(&class.plane);
        let delay = decision.commit_delay;
        let late = p.clone();
        // Spawned, not awaited in place: axum drops this handler when the client disconnects,
        // and the held write must land anyway.
        let commit = tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            late.forward(&parts, body, true).await
        });
        match commit.await {
            Ok(r) => r,
            Err(e) => {
                ApiError::from_code(500, format!("a delayed commit failed: {e}")).into_response()
            }
        }
    } else {
        // An answer to drop is read whole first: the server has applied the request only once it
        // has answered it all.
        p.forward(&parts, body, after.is_some()).await
    };
    if let Some(f) = after {
        return p.fail(conn, &class.plane, key, f).await;
    }
    p.record(key.clone(), answer.status().as_u16());
    if watch && answer.status().is_success() {
        return p.watch_through(answer);
    }
    answer
}

async fn read(body: Body) -> Result<Bytes, ApiError> {
    body.collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| ApiError::from_code(400, format!("reading the request body: {e}")))
}

impl Shared {
    fn record(&self, mut key: RequestKey, code: u16) {
        key.code = code;
        self.metrics.record(key);
    }

    async fn fail(
        &self,
        conn: Option<Connection>,
        plane: &str,
        key: RequestKey,
        f: Failure,
    ) -> Response {
        self.metrics.record_failure(plane, f.when, f.outcome);
        match f.outcome {
            FaultOutcome::Status => {
                let resp = f.status.into_response();
                self.record(key, resp.status().as_u16());
                resp
            }
            FaultOutcome::Reset | FaultOutcome::Hang => {
                self.record(key, 0);
                let how = if f.outcome == FaultOutcome::Reset {
                    Silence::Reset
                } else {
                    Silence::Hang
                };
                listen::silence(conn, how, self.stop.clone()).await
            }
        }
    }

    /// Sends the request on to the server with the caller's headers; the answer streams back
    /// unless `whole`, when it is read to its end first.
    async fn forward(&self, parts: &http::request::Parts, body: Bytes, whole: bool) -> Response {
        let path = parts
            .uri
            .path_and_query()
            .map(|pq| pq.as_str())
            .unwrap_or("/");
        let uri: Uri = match format!("{}{path}", self.upstream.server.trim_end_matches('/')).parse()
        {
            Ok(u) => u,
            Err(e) => {
                return ApiError::from_code(400, format!("forwarding {path}: {e}")).into_response();
            }
        };
        let mut req = http::Request::builder()
            .method(parts.method.clone())
            .uri(uri)
            .body(Full::new(body))
            .expect("method and uri are valid already");
        *req.headers_mut() = passed_on(&parts.headers);
        req.headers_mut().remove(header::CONTENT_LENGTH);
        let resp = match self.client.request(req).await {
            Ok(r) => r,
            Err(e) => {
                return ApiError::from_code(
                    503,
                    format!(
                        "the fault proxy could not reach {}: {e}",
                        self.upstream.server
                    ),
                )
                .into_response();
            }
        };
        let (mut head, incoming) = resp.into_parts();
        head.headers = passed_on(&head.headers);
        let body = if whole {
            match incoming.collect().await {
                Ok(c) => Body::from(c.to_bytes()),
                Err(e) => {
                    return ApiError::from_code(503, format!("the server's answer broke off: {e}"))
                        .into_response();
                }
            }
        } else {
            head.headers.remove(header::CONTENT_LENGTH);
            Body::new(incoming)
        };
        Response::from_parts(head, body)
    }

    /// Passes a watch stream on as it comes, and cuts it (an error, so the connection breaks)
    /// after `watchCutAfterSeconds` if set; it ends when the proxy stops or the client leaves.
    fn watch_through(&self, answer: Response) -> Response {
        let cut = self.faults.watch_cut_after();
        let (head, body) = answer.into_parts();
        let mut stream = body.into_data_stream();
        let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
        let mut stop = self.stop.clone();
        tokio::spawn(async move {
            use futures::StreamExt;
            let cut_at = tokio::time::sleep(cut.unwrap_or(Duration::from_secs(365 * 86400)));
            tokio::pin!(cut_at);
            let stopped = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            tokio::pin!(stopped);
            loop {
                tokio::select! {
                    _ = &mut cut_at, if cut.is_some() => {
                        let _ = tx.send(Err(std::io::Error::other("watch cut by fault injection"))).await;
                        return;
                    }
                    _ = &mut stopped => return,
                    _ = tx.closed() => return,
                    chunk = stream.next() => match chunk {
                        Some(Ok(b)) => {
                            if tx.send(Ok(b)).await.is_err() {
                                return;
                            }
                        }
                        Some(Err(e)) => {
                            let _ = tx.send(Err(std::io::Error::other(e))).await;
                            return;
                        }
                        None => return,
                    },
                }
            }
        });
        Response::from_parts(
            head,
            Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx)),
        )
    }
}

/// The headers of `h` that go on to the next hop: all but the hop-by-hop ones.
fn passed_on(h: &HeaderMap) -> HeaderMap {
    let mut out = h.clone();
    for name in &HOP_BY_HOP {
        out.remove(name);
    }
    out.remove("keep-alive");
    out.remove("proxy-connection");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_classified_as_the_rules_name_them() {
        let c = |m: http::Method, u: &str| classify("cell", &m, &u.parse().unwrap());
        let w = c(
            http::Method::GET,
            "/apis/network.datumapis.com/v1alpha1/namespaces/egress/egressshards?watch=true&resourceVersion=5",
        )
        .unwrap();
        assert_eq!(
            (
                w.plane.as_str(),
                w.verb,
                w.group.as_str(),
                w.fault_resource.as_str()
            ),
            ("cell", Verb::Watch, "network.datumapis.com", "egressshards")
        );
        assert_eq!(w.label, "egressshards.network.datumapis.com");
        let s = c(
            http::Method::PUT,
            "/apis/network.datumapis.com/v1alpha1/namespaces/egress/egressshards/a/status",
        )
        .unwrap();
        assert_eq!(
            (s.verb, s.fault_resource.as_str()),
            (Verb::Update, "egressshards/status")
        );
        let l = c(
            http::Method::PUT,
            "/apis/coordination.k8s.io/v1/namespaces/default/leases/x",
        )
        .unwrap();
        assert_eq!(l.label, "leases.coordination.k8s.io");
        let claim = c(
            http::Method::DELETE,
            "/apis/resourcemanager.miloapis.com/v1alpha1/projects/platform/control-plane/apis/ipam.miloapis.com/v1alpha1/namespaces/n/ipclaims/c",
        )
        .unwrap();
        assert_eq!(
            (
                claim.plane.as_str(),
                claim.verb,
                claim.fault_resource.as_str()
            ),
            ("platform", Verb::Delete, "ipclaims")
        );
        assert!(c(http::Method::GET, "/apis").is_none());
        assert!(c(http::Method::GET, "/version").is_none());
        assert_eq!(
            c(http::Method::GET, "/api/v1/namespaces/kube-system")
                .unwrap()
                .verb,
            Verb::Get
        );
    }

    #[test]
    fn hop_by_hop_headers_stop_and_credentials_go_on() {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, "Bearer t".parse().unwrap());
        h.insert("impersonate-user", "u".parse().unwrap());
        h.insert(header::CONNECTION, "keep-alive".parse().unwrap());
        h.insert(header::HOST, "127.0.0.1:1".parse().unwrap());
        h.insert(header::TRANSFER_ENCODING, "chunked".parse().unwrap());
        let out = passed_on(&h);
        assert_eq!(out[header::AUTHORIZATION], "Bearer t");
        assert_eq!(out["impersonate-user"], "u");
        assert!(out.get(header::CONNECTION).is_none() && out.get(header::HOST).is_none());
        assert!(out.get(header::TRANSFER_ENCODING).is_none());
    }
}
