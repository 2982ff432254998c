//! What the fuzz targets share: a server that answers the controller's requests from the fuzzer's
//! bytes ([`Plane`]), reached through the controller's own bounded client
//! (`connect::connection::bounded_client`), and the handles a running controller's tasks share.
//!
//! Nothing here decodes or decides anything: every target hands the bytes to the controller's own
//! functions. A body is served cut into the chunks the fuzzer chose, and may end with the
//! connection cut, so a decoder sees an answer split anywhere.
//!
//! Every target runs each input inside [`alloc::held_to`], which holds the heap the input makes
//! live at once to the cap of the answers it stands for.

pub mod alloc;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use bytes::Bytes;
use egress_address::Metrics;
use egress_address::connect::connection::{Endpoint, bounded_client};
use egress_address::ipam::Ipam;
use egress_address::ipam::breaker::Breaker;
use egress_address::runtime::activity::Activity;
use egress_address::runtime::readiness::Readiness;
use egress_address::runtime::shared::Shared;
use egress_address::runtime::token::LeaderToken;
use egress_address::shard::{ShardCache, ShardMemory};
use futures::stream;
use http::{Method, Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, StreamBody};
use tokio_util::sync::CancellationToken;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One answer the fake server gives: a status, a body cut into chunks, and whether the connection
/// is cut after the last chunk.
#[derive(Debug, Clone, Default)]
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
    /// Byte offsets where the body is cut into chunks (any order, out of range ignored).
    pub cuts: Vec<u32>,
    /// The connection is reset after the body's last chunk.
    pub reset: bool,
}

impl Answer {
    pub fn new(status: u16, body: impl Into<Vec<u8>>) -> Self {
        Self {
            status,
            body: body.into(),
            ..Default::default()
        }
    }

    /// The body's chunks, in order.
    pub fn chunks(&self) -> Vec<Bytes> {
        let mut cuts: Vec<usize> = self
            .cuts
            .iter()
            .map(|&c| c as usize)
            .filter(|&c| c > 0 && c < self.body.len())
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        let mut out = Vec::with_capacity(cuts.len() + 1);
        let mut from = 0;
        for cut in cuts.into_iter().chain([self.body.len()]) {
            if cut > from {
                out.push(Bytes::copy_from_slice(&self.body[from..cut]));
            }
            from = cut;
        }
        out
    }
}

/// A status code as a server answers: mostly the ones the API answers, sometimes any.
pub fn status(u: &mut Unstructured<'_>) -> arbitrary::Result<u16> {
    const COMMON: &[u16] = &[
        200, 200, 200, 201, 201, 204, 400, 401, 403, 404, 409, 410, 422, 429, 500, 502, 503, 504,
        507,
    ];
    if u.ratio(1, 8)? {
        u.int_in_range(100..=999)
    } else {
        u.choose(COMMON).copied()
    }
}

/// Cuts and a reset for `body`, from the fuzzer.
pub fn answer(u: &mut Unstructured<'_>, status: u16, body: Vec<u8>) -> arbitrary::Result<Answer> {
    let cuts = if u.ratio(1, 3)? {
        Vec::<u32>::arbitrary(u)?
    } else {
        Vec::new()
    };
    Ok(Answer {
        status,
        body,
        cuts,
        reset: u.ratio(1, 10)?,
    })
}

/// A request the fake server received.
#[derive(Debug, Clone)]
pub struct Sent {
    pub method: Method,
    pub uri: String,
    pub body: Vec<u8>,
    pub at: tokio::time::Instant,
}

type Hook = Box<dyn FnMut(&Sent, Option<&Answer>) + Send>;

struct PlaneState {
    /// One queue of answers per route.
    answers: Vec<VecDeque<Answer>>,
    route: fn(&Sent) -> usize,
    sent: Vec<Sent>,
    /// Cancelled when the answers run out: the targets stop the task under test then.
    exhausted: CancellationToken,
    hook: Option<Hook>,
}

/// A server that answers each request with the next scripted answer, and refuses the connection
/// once they run out.
#[derive(Clone)]
pub struct Plane {
    state: Arc<Mutex<PlaneState>>,
}

impl Plane {
    pub fn new(answers: impl IntoIterator<Item = Answer>) -> Self {
        Self::routed(vec![answers.into_iter().collect()], |_| 0)
    }

    /// A server that answers each request from the queue `route` picks for it.
    pub fn routed(answers: Vec<VecDeque<Answer>>, route: fn(&Sent) -> usize) -> Self {
        Self {
            state: Arc::new(Mutex::new(PlaneState {
                answers,
                route,
                sent: Vec::new(),
                exhausted: CancellationToken::new(),
                hook: None,
            })),
        }
    }

    /// Calls `hook` with every request and the answer it gets (`None`: refused), before the
    /// answer is sent.
    pub fn on_request(&self, hook: impl FnMut(&Sent, Option<&Answer>) + Send + 'static) {
        self.state.lock().unwrap().hook = Some(Box::new(hook));
    }

    /// Cancelled once every answer has been given.
    pub fn exhausted(&self) -> CancellationToken {
        self.state.lock().unwrap().exhausted.clone()
    }

    /// Every request received so far.
    pub fn sent(&self) -> Vec<Sent> {
        self.state.lock().unwrap().sent.clone()
    }

    /// A kube client whose server is this plane, bounded as the controller bounds its clients
    /// (`limit`: `MAX_IPAM_ANSWER` or `MAX_CELL_ANSWER`; a watch is never bounded).
    pub fn client(&self, limit: usize) -> kube::Client {
        let plane = self.clone();
        let service = tower::service_fn(move |req: Request<kube::client::Body>| {
            let plane = plane.clone();
            async move { plane.answer(req).await }
        });
        let endpoint = Endpoint {
            client: kube::Client::new(service, "default"),
            host: "fuzz.invalid:443".to_string(),
        };
        bounded_client(endpoint, limit, None)
    }

    async fn answer(
        &self,
        req: Request<kube::client::Body>,
    ) -> Result<Response<UnsyncBoxBody<Bytes, BoxError>>, BoxError> {
        let (parts, body) = req.into_parts();
        let body = body
            .collect()
            .await
            .map(|c| c.to_bytes().to_vec())
            .unwrap_or_default();
        let sent = Sent {
            method: parts.method,
            uri: parts.uri.to_string(),
            body,
            at: tokio::time::Instant::now(),
        };
        let answer = {
            let mut state = self.state.lock().unwrap();
            let route = (state.route)(&sent);
            let answer = state.answers.get_mut(route).and_then(VecDeque::pop_front);
            if let Some(hook) = state.hook.as_mut() {
                hook(&sent, answer.as_ref());
            }
            state.sent.push(sent);
            if answer.is_none() {
                state.exhausted.cancel();
            }
            answer
        };
        let Some(answer) = answer else {
            return Err(Box::new(std::io::Error::from(
                std::io::ErrorKind::ConnectionRefused,
            )));
        };
        let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK);
        let mut frames: Vec<Result<Frame<Bytes>, BoxError>> = answer
            .chunks()
            .into_iter()
            .map(|c| Ok(Frame::data(c)))
            .collect();
        if answer.reset {
            frames.push(Err(Box::new(std::io::Error::from(
                std::io::ErrorKind::ConnectionReset,
            ))));
        }
        let body = StreamBody::new(stream::iter(frames)).boxed_unsync();
        Ok(Response::builder()
            .status(status)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body)
            .expect("a status and a header make a response"))
    }
}

/// A current-thread runtime whose clock only moves when every task waits: backoffs, retry
/// periods and lease durations pass at once, and a run is the same every time.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime")
}

/// The metrics every target reports to: registered once per process, as the controller does.
pub fn metrics() -> Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS
        .get_or_init(|| {
            let mut registry = prometheus_client::registry::Registry::default();
            Metrics::register(&mut registry)
        })
        .clone()
}

/// An IPAM handle over `client`, with the controller's default timeout and breaker.
pub fn ipam(client: kube::Client) -> Ipam {
    Ipam::new(
        client,
        metrics(),
        Duration::from_secs(30),
        Breaker::new(5, Duration::from_secs(1)),
    )
}

/// The handles a running controller's tasks share (its shard cache among them). Call inside
/// a runtime (the work queue starts a task).
pub fn shared(ipam_client: kube::Client) -> Shared {
    let metrics = metrics();
    let readiness = Arc::new(Readiness::new(ipam(ipam_client), metrics.clone()));
    Shared::new(
        ShardCache::new(),
        Arc::new(ShardMemory::new(metrics.clone())),
        LeaderToken::elected(),
        readiness,
        Arc::new(Activity::default()),
        metrics,
    )
}

/// A short text from a small alphabet of name-like characters, sometimes any string: names that
/// collide often, and some that no API server would send.
pub fn name(u: &mut Unstructured<'_>, choices: &[&str]) -> arbitrary::Result<String> {
    if !choices.is_empty() && u.ratio(3, 4)? {
        return Ok(u.choose(choices)?.to_string());
    }
    String::arbitrary(u)
}

/// The names a generated answer draws from: one cell's shards and their incarnations, so that
/// generated claims are often this cell's, sometimes another's, and sometimes anybody's.
pub mod world {
    pub const CELL: &str = "cell-a";
    pub const CELLS: &[&str] = &["cell-a", "cell-b", "3f0c5a8e-1d2b-4c6f-9a7e-0b1c2d3e4f50"];
    pub const NAMESPACES: &[&str] = &["ns", "default", "tenant-1"];
    pub const SHARDS: &[&str] = &["w-1", "w-2", "egress-0"];
    pub const UIDS: &[&str] = &["u-1", "u-2", "6a1e0c4e-8f1b-4f0e-9a55-2b7d41c0f3aa"];
    pub const CLAIM_NAMESPACE: &str = "egress";
    pub const CIDRS: &[&str] = &[
        "2001:db8::1/128",
        "2607:ed40:70::1/128",
        "2001:db8:1::/128",
        "2001:db8::1/64",
        "2001:db8::1/0128",
        "2001:db8::1",
        "::1/128",
        "::/128",
        "fe80::1/128",
        "fd00::1/128",
        "ff02::1/128",
        "2002::1/128",
        "3fff::1/128",
        "2001::1/128",
        "64:ff9b::1/128",
        "::ffff:10.0.0.1/128",
        "10.0.0.1/32",
        "2001:db8::1/129",
        "garbage/128",
        "",
    ];
    pub const PHASES: &[&str] = &["Bound", "Pending", "Releasing", "Ready", "", "bound"];
    pub const REASONS: &[&str] = &[
        "Exhausted",
        "ClassNotFound",
        "NoDefaultClass",
        "NoOfferingPool",
        "PrefixLengthRejected",
        "ScopeRolesMissing",
        "AllocationRetained",
        "ClaimExists",
        "NoProjectScope",
        "QuotaExceeded",
        "Forbidden",
        "Unauthorized",
        "Conflict",
        "AlreadyExists",
        "NotFound",
        "Invalid",
        "InternalError",
        "Expired",
        "",
    ];
    pub const MESSAGES: &[&str] = &[
        "ipclaims.ipam.miloapis.com \"c\" is forbidden: Insufficient quota resources available.",
        "exceeded quota: ipclaims",
        "ipclaims.ipam.miloapis.com is forbidden: unable to create new content in namespace egress because it is being terminated",
        "ipclaims.ipam.miloapis.com is forbidden: namespace egress does not exist",
        "ipclaims.ipam.miloapis.com is forbidden: User \"u\" cannot create resource \"ipclaims\"",
        "release allocation after 3 attempts",
        "alloc-3f2a1b0c9d8e7f60",
        "too old resource version: 5 (10)",
        "",
    ];
}

/// Generated JSON answers: what the API would send, with every field sometimes missing, wrong
/// or of the wrong type, and sometimes cut short.
pub mod json {
    use arbitrary::{Arbitrary, Unstructured};
    use serde_json::{Map, Value, json};

    use super::world::*;
    use egress_address::ipam::naming::{
        ANNOTATION_CELL, ANNOTATION_SHARD_NAME, ANNOTATION_SHARD_NAMESPACE, ANNOTATION_SHARD_UID,
        claim_name, claim_name_without_incarnation, legacy_claim_name,
    };

    /// A string from `choices`, any string, or a long run of one character (ASCII or not).
    pub fn text(u: &mut Unstructured<'_>, choices: &[&str]) -> arbitrary::Result<String> {
        Ok(match u.int_in_range(0..=9)? {
            0 => String::arbitrary(u)?,
            1 => u
                .choose(&["a", "é", "日", "🙂", "-", "."])?
                .repeat(u.int_in_range(0..=300)?),
            _ => u.choose(choices)?.to_string(),
        })
    }

    /// `value`, or (rarely) a value of another type in its place.
    pub fn odd(u: &mut Unstructured<'_>, value: Value) -> arbitrary::Result<Value> {
        Ok(match u.int_in_range(0..=24)? {
            0 => Value::Null,
            1 => json!(u.int_in_range(-3i64..=3)?),
            2 => json!([]),
            3 => json!({}),
            4 => json!(true),
            _ => value,
        })
    }

    /// An object of the pairs the fuzzer keeps.
    pub fn object(pairs: Vec<(&str, Value)>, u: &mut Unstructured<'_>) -> arbitrary::Result<Value> {
        let mut map = Map::new();
        for (k, v) in pairs {
            if u.ratio(7, 8)? {
                map.insert(k.to_string(), odd(u, v)?);
            }
        }
        Ok(Value::Object(map))
    }

    /// A claim name: the one an incarnation derives (now, before the incarnation was in the
    /// name, the Go controller's), or any.
    fn claim_name_for(
        u: &mut Unstructured<'_>,
        parts: Option<(&str, &str, &str, &str)>,
    ) -> arbitrary::Result<String> {
        Ok(match (u.int_in_range(0..=4)?, parts) {
            (0, Some((c, n, s, id))) => claim_name(c, n, s, id),
            (1, Some((c, n, s, _))) => claim_name_without_incarnation(c, n, s),
            (2, Some((_, n, s, _))) => legacy_claim_name(n, s),
            _ => text(u, &["c", "egress-shard-ipv6.x"])?,
        })
    }

    /// An IPClaim as IPAM would answer one, marked (or not) for an incarnation.
    pub fn claim(u: &mut Unstructured<'_>) -> arbitrary::Result<Value> {
        let (cell, ns, shard, uid) = (
            text(u, CELLS)?,
            text(u, NAMESPACES)?,
            text(u, SHARDS)?,
            text(u, UIDS)?,
        );
        // Names are derived only from names an API server would accept.
        let plain = |s: &str| s.len() < 64 && s.bytes().all(|b| b.is_ascii_graphic());
        let parts = (plain(&cell) && plain(&ns) && plain(&shard) && plain(&uid)).then_some((
            cell.as_str(),
            ns.as_str(),
            shard.as_str(),
            uid.as_str(),
        ));
        let name = claim_name_for(u, parts)?;
        let annotations = object(
            vec![
                (ANNOTATION_CELL, json!(cell)),
                (ANNOTATION_SHARD_NAMESPACE, json!(ns)),
                (ANNOTATION_SHARD_NAME, json!(shard)),
                (ANNOTATION_SHARD_UID, json!(uid)),
            ],
            u,
        )?;
        let deleting = if u.ratio(1, 8)? {
            json!("2026-01-01T00:00:00Z")
        } else {
            Value::Null
        };
        let metadata = object(
            vec![
                ("name", json!(name)),
                ("namespace", json!(CLAIM_NAMESPACE)),
                ("uid", json!(text(u, &["claim-uid-1", "claim-uid-2"])?)),
                (
                    "resourceVersion",
                    json!(u.int_in_range(1u32..=20)?.to_string()),
                ),
                ("annotations", annotations),
                ("deletionTimestamp", deleting),
            ],
            u,
        )?;
        let status = object(
            vec![
                ("phase", json!(text(u, PHASES)?)),
                ("allocatedCIDR", json!(text(u, CIDRS)?)),
                ("address", json!(text(u, CIDRS)?)),
            ],
            u,
        )?;
        object(
            vec![
                ("apiVersion", json!("ipam.miloapis.com/v1alpha1")),
                ("kind", json!("IPClaim")),
                ("metadata", metadata),
                (
                    "spec",
                    json!({"className": "egress-ipv6", "ipFamily": "IPv6", "prefixLength": 128,
                        "reclaimPolicy": "Delete", "target": "Block"}),
                ),
                ("status", status),
            ],
            u,
        )
    }

    /// An IPAllocation as IPAM would answer one.
    pub fn allocation(u: &mut Unstructured<'_>) -> arbitrary::Result<Value> {
        let metadata = object(
            vec![
                ("name", json!(text(u, &["alloc-3f2a1b0c9d8e7f60"])?)),
                ("namespace", json!(CLAIM_NAMESPACE)),
            ],
            u,
        )?;
        let status = object(
            vec![
                ("phase", json!(text(u, PHASES)?)),
                ("allocatedCIDR", json!(text(u, CIDRS)?)),
            ],
            u,
        )?;
        object(
            vec![
                ("apiVersion", json!("ipam.miloapis.com/v1alpha1")),
                ("kind", json!("IPAllocation")),
                ("metadata", metadata),
                ("status", status),
            ],
            u,
        )
    }

    /// A `metav1.Status` with causes, as IPAM or a gateway answers a refusal.
    pub fn status(u: &mut Unstructured<'_>, code: u16) -> arbitrary::Result<Value> {
        let mut causes = Vec::new();
        for _ in 0..u.int_in_range(0..=3)? {
            causes.push(object(
                vec![
                    ("reason", json!(text(u, REASONS)?)),
                    ("message", json!(text(u, MESSAGES)?)),
                    ("field", json!(text(u, &["spec.scope.location", ""])?)),
                ],
                u,
            )?);
        }
        let details = object(
            vec![
                ("name", json!(text(u, &["c"])?)),
                ("group", json!("ipam.miloapis.com")),
                ("kind", json!("ipclaims")),
                ("causes", json!(causes)),
            ],
            u,
        )?;
        let code = if u.ratio(1, 10)? {
            json!(u16::arbitrary(u)?)
        } else {
            json!(code)
        };
        object(
            vec![
                ("kind", json!("Status")),
                ("apiVersion", json!("v1")),
                ("metadata", json!({})),
                ("status", json!("Failure")),
                ("message", json!(text(u, MESSAGES)?)),
                ("reason", json!(text(u, REASONS)?)),
                ("details", details),
                ("code", code),
            ],
            u,
        )
    }

    /// An EgressShard as the cell would send it, with the fields a decision reads and some it
    /// does not (other labels, annotations, managedFields, the status).
    pub fn shard(u: &mut Unstructured<'_>) -> arbitrary::Result<Value> {
        let labels = object(
            vec![
                (
                    egress_api::shard::LABEL_EGRESS_IPV6,
                    json!(text(u, &["true", "false", ""])?),
                ),
                ("team", json!(text(u, &["a"])?)),
            ],
            u,
        )?;
        let deleting = if u.ratio(1, 6)? {
            json!(text(u, &["2026-01-01T00:00:00Z", "yesterday"])?)
        } else {
            Value::Null
        };
        let metadata = object(
            vec![
                ("name", json!(text(u, SHARDS)?)),
                ("namespace", json!(text(u, NAMESPACES)?)),
                ("uid", json!(text(u, UIDS)?)),
                (
                    "resourceVersion",
                    json!(u.int_in_range(1u32..=50)?.to_string()),
                ),
                ("generation", json!(u.int_in_range(1u32..=5)?)),
                ("labels", labels),
                (
                    "annotations",
                    json!({"kubectl.kubernetes.io/last-applied-configuration": text(u, &["{}"])?}),
                ),
                ("deletionTimestamp", deleting),
                (
                    "managedFields",
                    json!([{"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:spec": {}}}]),
                ),
            ],
            u,
        )?;
        let claim_ref = object(
            vec![
                ("apiGroup", json!("ipam.miloapis.com")),
                ("kind", json!(text(u, &["IPClaim", "IPAllocation"])?)),
                ("project", json!(text(u, &["datum-platform"])?)),
                ("namespace", json!(CLAIM_NAMESPACE)),
                ("name", json!(text(u, &["egress-shard-ipv6.c.x.ns.w-1"])?)),
            ],
            u,
        )?;
        let mut spec = vec![
            (
                "targetRef",
                json!({"kind": "Node", "name": text(u, &["node-1"])?}),
            ),
            ("shardSID", json!("fd00::1")),
        ];
        if u.ratio(1, 2)? {
            spec.push(("shardAddressIPv6", json!(text(u, &["2001:db8::1", ""])?)));
        }
        if u.ratio(1, 2)? {
            spec.push(("shardAddressIPv6ClaimRef", claim_ref));
        }
        let spec = object(spec, u)?;
        object(
            vec![
                ("apiVersion", json!("network.datumapis.com/v1alpha1")),
                ("kind", json!("EgressShard")),
                ("metadata", metadata),
                ("spec", spec),
                ("status", json!({"shardSID": "fd00::1"})),
            ],
            u,
        )
    }

    /// `value` as bytes: whole, cut short, or (rarely) replaced by any bytes.
    pub fn bytes(u: &mut Unstructured<'_>, value: &Value) -> arbitrary::Result<Vec<u8>> {
        if u.ratio(1, 12)? {
            return Vec::<u8>::arbitrary(u);
        }
        let mut out = serde_json::to_vec(value).expect("a JSON value serializes");
        if u.ratio(1, 12)? {
            let keep = u.int_in_range(0..=out.len())?;
            out.truncate(keep);
        }
        Ok(out)
    }
}

/// Real answers recorded from localplane (`fuzz/record-seeds`), for the structured targets to
/// serve now and then in place of a generated one: `kind` is a folder of `fuzz/recorded/` or of
/// `fuzz/corpus/` (`ipam_answer`, `list_page`).
pub fn recorded(kind: &str) -> &'static [Vec<u8>] {
    static ALL: OnceLock<Mutex<std::collections::HashMap<String, &'static [Vec<u8>]>>> =
        OnceLock::new();
    let mut all = ALL.get_or_init(Default::default).lock().unwrap();
    all.entry(kind.to_string()).or_insert_with(|| {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut found = Vec::new();
        for dir in [
            root.join("recorded").join(kind),
            root.join("corpus").join(kind),
        ] {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
            paths.sort();
            found.extend(paths.iter().filter_map(|p| std::fs::read(p).ok()));
        }
        Vec::leak(found)
    })
}

/// Now and then, one of the recorded answers of `kind` instead of a generated one.
pub fn real(u: &mut Unstructured<'_>, kind: &str) -> arbitrary::Result<Option<Vec<u8>>> {
    let answers = recorded(kind);
    if answers.is_empty() || !u.ratio(1, 6)? {
        return Ok(None);
    }
    Ok(Some(u.choose(answers)?.clone()))
}
