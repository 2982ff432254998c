//! A client whose connection follows its kubeconfig file, and whose answers are bounded.
//!
//! Kubernetes updates a mounted Secret in place (a new directory, then one symlink swap), so a
//! rotated credential appears under the same path. The client re-reads its kubeconfig when the
//! file's content changes and at once when a request is answered 401, and swaps the connection
//! underneath: requests and watches in flight finish on the connection they started on, the next
//! ones use the new credential, and nothing is restarted.
//!
//! Every answer except a watch stream is read up to a limit, so one huge answer cannot take the
//! process past its memory limit; past it the request fails, naming the limit. A watch stream has
//! no end, so there the limit holds for each of its events (a line): kube's watch decoder gathers
//! a line until its newline with no bound of its own.
//!
//! Every request of both planes passes here, so this is where they are counted: an optional
//! [`RequestObserver`] hears of each one when its answer (or its failure) arrives.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Limited};
use kube::Client;
use kube::client::Body;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::Error;
use super::follow::{Seen, fingerprint, next_look};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Largest answer read from IPAM: a claim or an allocation is a few kilobytes.
pub const MAX_IPAM_ANSWER: usize = 1 << 20;
/// Largest answer read from the cell outside watches: a page of 500 shards is one or two MiB.
pub const MAX_CELL_ANSWER: usize = 32 << 20;
/// How often the kubeconfig file is looked at (a 401 makes it look at once).
pub const KUBECONFIG_POLL: Duration = Duration::from_secs(5);

/// Builds a client from a kubeconfig path (the plane decides how).
pub type Build = Arc<dyn Fn(PathBuf) -> BoxFuture<'static, Result<Endpoint, Error>> + Send + Sync>;

/// Hears of every request: its method, the server's `host[:port]`, and the answer's status, or
/// `None` when no answer came (refused, timed out, cut).
pub type RequestObserver = Arc<dyn Fn(&Method, &str, Option<StatusCode>) + Send + Sync>;

/// The observer that counts every request in `rest_client_requests_total`.
pub fn counted_by(metrics: &crate::metrics::Metrics) -> RequestObserver {
    let metrics = metrics.clone();
    Arc::new(move |method, host, status| {
        metrics.rest_request(method.as_str(), host, status.map(|s| s.as_u16()))
    })
}

/// A client and the server it talks to.
#[derive(Clone)]
pub struct Endpoint {
    pub client: Client,
    /// `host[:port]` of the server, as the kubeconfig names it (never its credentials).
    pub host: String,
}

impl Endpoint {
    pub fn new(client: Client, server: &Uri) -> Self {
        Self {
            client,
            host: host_of(server),
        }
    }
}

/// `host[:port]` of a URL, leaving out any user information it carries.
pub fn host_of(server: &Uri) -> String {
    match (server.host(), server.port_u16()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.to_string(),
        (None, _) => String::new(),
    }
}

/// The answer to a request, bounded.
#[derive(Debug, thiserror::Error)]
#[error("the answer was larger than {limit} bytes and was not read")]
pub struct AnswerTooLarge {
    pub limit: usize,
}

/// An event of a watch stream, bounded.
#[derive(Debug, thiserror::Error)]
#[error("a watch event was larger than {limit} bytes and was not read; the watch starts over")]
pub struct EventTooLarge {
    pub limit: usize,
}

#[derive(Clone)]
struct Swap {
    current: Arc<RwLock<Endpoint>>,
    refused: Arc<Notify>,
    limit: usize,
    observe: Option<RequestObserver>,
}

impl tower::Service<Request<Body>> for Swap {
    type Response = Response<UnsyncBoxBody<Bytes, BoxError>>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let Endpoint { client, host } = crate::sync::read(&self.current).clone();
        let refused = self.refused.clone();
        let (limit, watch) = (self.limit, is_watch(&req));
        let observe = self.observe.clone();
        let method = req.method().clone();
        Box::pin(async move {
            let sent = client.send(req).await;
            if let Some(observe) = &observe {
                observe(&method, &host, sent.as_ref().ok().map(|res| res.status()));
            }
            let res = sent.map_err(BoxError::from)?;
            if res.status() == StatusCode::UNAUTHORIZED {
                refused.notify_one();
            }
            Ok(res.map(|body| bounded(body, limit, watch)))
        })
    }
}

fn is_watch(req: &Request<Body>) -> bool {
    req.uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"))
}

/// `body` read up to `limit` bytes, or for a `watch`, up to `limit` bytes an event.
fn bounded(body: Body, limit: usize, watch: bool) -> UnsyncBoxBody<Bytes, BoxError> {
    if watch {
        return LineBounded::new(body.map_err(BoxError::from), limit).boxed_unsync();
    }
    Limited::new(body, limit)
        .map_err(move |e| -> BoxError {
            if e.is::<http_body_util::LengthLimitError>() {
                Box::new(AnswerTooLarge { limit })
            } else {
                e
            }
        })
        .boxed_unsync()
}

/// A stream of lines none longer than `limit` bytes: the line that would be fails the stream
/// before any of its bytes past what was already passed on are handed over.
struct LineBounded<B> {
    inner: B,
    limit: usize,
    /// Bytes of the line in progress (since the last newline).
    run: usize,
}

impl<B> LineBounded<B> {
    fn new(inner: B, limit: usize) -> Self {
        Self {
            inner,
            limit,
            run: 0,
        }
    }
}

impl<B> hyper::body::Body for LineBounded<B>
where
    B: hyper::body::Body<Data = Bytes, Error = BoxError> + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, BoxError>>> {
        let frame = std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx));
        if let Some(Ok(frame)) = &frame
            && let Some(data) = frame.data_ref()
        {
            // The first part continues the line in progress; the last one starts the next.
            let mut parts = data.split(|b| *b == b'\n');
            let mut line = self.run + parts.next().map_or(0, <[u8]>::len);
            let mut longest = line;
            for part in parts {
                line = part.len();
                longest = longest.max(line);
            }
            self.run = line;
            if longest > self.limit {
                let limit = self.limit;
                return Poll::Ready(Some(Err(Box::new(EventTooLarge { limit }))));
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// A client that keeps following `path`, and the task that does the following.
pub async fn following(
    path: &Path,
    limit: usize,
    build: Build,
    observe: Option<RequestObserver>,
) -> Result<(Client, Follower), Error> {
    let first = build(path.to_path_buf()).await?;
    let namespace = first.client.default_namespace().to_string();
    let current = Arc::new(RwLock::new(first));
    let refused = Arc::new(Notify::new());
    let client = Client::new(
        Swap {
            current: current.clone(),
            refused: refused.clone(),
            limit,
            observe,
        },
        namespace,
    );
    let follower = Follower {
        path: path.to_path_buf(),
        current,
        refused,
        build,
        seen: Seen::serving(fingerprint(&[path])),
        poll: KUBECONFIG_POLL,
    };
    Ok((client, follower))
}

/// A client that never changes, with bounded answers.
pub fn bounded_client(
    endpoint: Endpoint,
    limit: usize,
    observe: Option<RequestObserver>,
) -> Client {
    let namespace = endpoint.client.default_namespace().to_string();
    Client::new(
        Swap {
            current: Arc::new(RwLock::new(endpoint)),
            refused: Arc::new(Notify::new()),
            limit,
            observe,
        },
        namespace,
    )
}

/// Re-reads a kubeconfig file when it changes, or when the server refused the credential.
pub struct Follower {
    path: PathBuf,
    current: Arc<RwLock<Endpoint>>,
    refused: Arc<Notify>,
    build: Build,
    seen: Seen,
    poll: Duration,
}

impl Follower {
    /// Looks at the file this often (tests use a short interval).
    pub fn poll_every(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }

    pub async fn run(mut self, stop: CancellationToken) {
        while next_look(&stop, self.poll, Some(&self.refused)).await {
            let Some(now) = self.seen.fresh(fingerprint(&[&self.path])) else {
                continue;
            };
            match self.seen.load(now, (self.build)(self.path.clone()).await) {
                Ok(endpoint) => {
                    *crate::sync::write(&self.current) = endpoint;
                    info!(path = %self.path.display(), "the kubeconfig changed; new requests use it");
                }
                Err(err) => {
                    warn!(%err, "the kubeconfig changed but cannot be used; the previous one stays in use");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watches_are_told_apart_by_their_query() {
        let req = |uri: &str| Request::get(uri).body(Body::empty()).unwrap();
        assert!(is_watch(&req(
            "/apis/x/v1/things?watch=true&resourceVersion=5"
        )));
        assert!(is_watch(&req(
            "/apis/x/v1/things?allowWatchBookmarks=true&watch=1"
        )));
        assert!(!is_watch(&req("/apis/x/v1/things?limit=500")));
        assert!(!is_watch(&req("/apis/x/v1/things/watcher")));
    }

    #[test]
    fn a_host_is_named_without_credentials_or_path() {
        let host = |u: &str| host_of(&u.parse().unwrap());
        assert_eq!(host("https://10.0.0.1:6443"), "10.0.0.1:6443");
        assert_eq!(
            host("https://user:secret@milo.example/apis/x"),
            "milo.example"
        );
        assert_eq!(host("http://[::1]:8080/"), "[::1]:8080");
    }

    #[tokio::test]
    async fn every_request_is_observed_with_its_status_or_as_unanswered() {
        let server = tower::service_fn(|req: Request<Body>| async move {
            if req.uri().path() == "/unreachable" {
                Err::<Response<Body>, BoxError>("connection refused".into())
            } else {
                Ok(Response::builder()
                    .status(StatusCode::NOT_FOUND)
                    .body(Body::empty())
                    .unwrap())
            }
        });
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let observe: RequestObserver = {
            let seen = seen.clone();
            Arc::new(move |method, host, status| {
                seen.lock().unwrap().push((
                    method.to_string(),
                    host.to_string(),
                    status.map(|s| s.as_u16()),
                ));
            })
        };
        let endpoint = Endpoint {
            client: Client::new(server, "default"),
            host: "cell.example:6443".into(),
        };
        let client = bounded_client(endpoint, 1024, Some(observe));
        let req = |method: Method, path: &str| {
            Request::builder()
                .method(method)
                .uri(path)
                .body(Body::empty())
                .unwrap()
        };
        let answered = client.send(req(Method::DELETE, "/apis/x")).await.unwrap();
        assert_eq!(answered.status(), StatusCode::NOT_FOUND);
        assert!(client.send(req(Method::GET, "/unreachable")).await.is_err());
        assert_eq!(
            *seen.lock().unwrap(),
            [
                (
                    "DELETE".to_string(),
                    "cell.example:6443".to_string(),
                    Some(404)
                ),
                ("GET".to_string(), "cell.example:6443".to_string(), None),
            ]
        );
    }

    #[tokio::test]
    async fn answers_past_the_limit_fail_naming_it() {
        let small = bounded(Body::from(vec![b'x'; 10]), 16, false);
        assert_eq!(small.collect().await.unwrap().to_bytes().len(), 10);
        let big = bounded(Body::from(vec![b'x'; 100]), 16, false);
        let err = big.collect().await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "the answer was larger than 16 bytes and was not read"
        );
        // A watch is bounded by event, not in all.
        let mut events = b"{}\n".repeat(50);
        events.extend(b"{\"a\":1}\n");
        let stream = bounded(Body::from(events.clone()), 16, true);
        assert_eq!(stream.collect().await.unwrap().to_bytes(), events);
        let long = bounded(Body::from(vec![b'x'; 100]), 16, true);
        assert_eq!(
            long.collect().await.unwrap_err().to_string(),
            "a watch event was larger than 16 bytes and was not read; the watch starts over"
        );
    }

    /// `chunks`, one frame each, through a watch's bound of 8 bytes an event.
    async fn read_events(chunks: &[&'static [u8]]) -> Result<Bytes, BoxError> {
        let frames = chunks
            .iter()
            .map(|c| Ok::<_, BoxError>(hyper::body::Frame::data(Bytes::from_static(c))))
            .collect::<Vec<_>>();
        let body = http_body_util::StreamBody::new(futures::stream::iter(frames));
        Ok(LineBounded::new(body, 8).collect().await?.to_bytes())
    }

    #[tokio::test]
    async fn a_watch_event_is_bounded_wherever_the_frames_cut_it() {
        // Events of 8 bytes, cut anywhere, pass whole.
        let whole = read_events(&[b"aaaa", b"aaaa\nbb", b"bbbbbb\n", b"cccccccc"]).await;
        assert_eq!(
            whole.unwrap(),
            Bytes::from_static(b"aaaaaaaa\nbbbbbbbb\ncccccccc")
        );
        // One of 9: across frames, within one frame between others, or still unfinished.
        for chunks in [
            &[b"aaaa" as &[u8], b"aaaaa\n"][..],
            &[b"a\nbbbbbbbbb\nc"],
            &[b"a\n", b"bbbbbbbb", b"b"],
        ] {
            let err = read_events(chunks).await.unwrap_err();
            assert!(err.is::<EventTooLarge>(), "{chunks:?}: {err}");
        }
    }
}
