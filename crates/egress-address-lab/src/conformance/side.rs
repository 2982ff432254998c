//! One server of the comparison: a client per identity, its tokens, the way to compact its
//! history, and requests sent as they are (a whole answer, or a watch read as it streams).

use std::time::Duration;

use http_body_util::BodyExt;
use serde_json::Value;
use tokio::sync::mpsc;

use super::Error;
use super::compare::Answer;
use super::shapes::{JSON, Who};

/// How a server's history is compacted: localplane's own, or etcd's under the real apiserver.
pub enum History<'a> {
    Local(localplane::Plane),
    Real(&'a realcell::RealCell),
}

/// One server, with a client per identity.
pub struct Side<'a> {
    pub name: &'static str,
    pub admin: kube::Client,
    pub controller: kube::Client,
    pub operator: kube::Client,
    pub nobody: kube::Client,
    /// The operator's bearer token as this server issued it (what a TokenReview the metrics
    /// endpoint sends carries).
    pub operator_token: String,
    pub history: History<'a>,
}

/// A request as sent: method, path with query, content type, extra headers, body.
pub struct Request<'a> {
    pub method: &'a str,
    pub uri: String,
    pub content_type: Option<&'a str>,
    pub headers: &'a [(&'static str, &'static str)],
    pub body: Option<Vec<u8>>,
    pub watch: bool,
}

impl<'a> Request<'a> {
    /// A request with no body.
    pub fn bare(method: &'a str, uri: String) -> Request<'a> {
        Request {
            method,
            uri,
            content_type: None,
            headers: &[],
            body: None,
            watch: false,
        }
    }

    /// A request with a JSON (or patch) body of `content_type`.
    pub fn with_body(
        method: &'a str,
        uri: String,
        content_type: &'a str,
        body: &Value,
    ) -> Request<'a> {
        Request {
            content_type: Some(content_type),
            body: Some(body.to_string().into_bytes()),
            ..Request::bare(method, uri)
        }
    }
}

/// A watch as it streams: its status code, and its events as they arrive.
pub struct Watch {
    pub code: u16,
    /// The whole body when the server refused the watch (not 200).
    pub refusal: Value,
    events: mpsc::Receiver<Value>,
    reader: tokio::task::JoinHandle<()>,
}

impl Watch {
    /// The events that arrive until `done` holds for those read so far, or `within` passes.
    pub async fn until(&mut self, within: Duration, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let mut seen = Vec::new();
        let deadline = tokio::time::Instant::now() + within;
        while !done(&seen) {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some(event)) => seen.push(event),
                Ok(None) | Err(_) => break,
            }
        }
        seen
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Side<'_> {
    pub fn client(&self, who: Who) -> &kube::Client {
        match who {
            Who::Admin => &self.admin,
            Who::Controller => &self.controller,
            Who::Operator => &self.operator,
            Who::Nobody => &self.nobody,
        }
    }

    /// Creates `objects` in order as the admin; one there already (a shared control plane's
    /// namespace) is fine.
    pub async fn prepare(&self, objects: &[Value]) -> Result<(), Error> {
        for object in objects {
            let what = format!(
                "{} {}",
                object["kind"].as_str().unwrap_or("?"),
                object["metadata"]["name"].as_str().unwrap_or("?")
            );
            let answer = self.create(object, &what).await?;
            if answer.code >= 300 && answer.code != 409 {
                return Err(Error::Prepare {
                    side: self.name,
                    what,
                    code: answer.code,
                    body: answer.body.to_string(),
                });
            }
        }
        Ok(())
    }

    /// POSTs `object` to its collection as the admin.
    pub async fn create(&self, object: &Value, what: &str) -> Result<Answer, Error> {
        let uri = collection_path(object).ok_or_else(|| Error::Request {
            side: self.name,
            shape: what.into(),
            message: "no collection path for its kind".into(),
        })?;
        self.send(
            Who::Admin,
            what,
            Request::with_body("POST", uri, JSON, object),
        )
        .await
    }

    /// Drops the server's history up to now: a watch or a continued list from an earlier
    /// resourceVersion is then too old.
    pub async fn compact(&self) -> Result<(), Error> {
        match &self.history {
            History::Local(plane) => {
                plane.compact_history();
                Ok(())
            }
            History::Real(cell) => cell
                .compact_history()
                .await
                .map(|_| ())
                .map_err(Error::Real),
        }
    }

    /// Sends `request` as `who` and reads the whole answer.
    pub async fn send(&self, who: Who, what: &str, request: Request<'_>) -> Result<Answer, Error> {
        let watch = request.watch;
        let response = self.respond(who, what, request).await?;
        let code = response.status().as_u16();
        let warnings = response
            .headers()
            .get_all("Warning")
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| self.fail(what, e.to_string()))?
            .to_bytes();
        Ok(Answer {
            code,
            warnings,
            body: Answer::body_from(&bytes, watch),
            facts: Value::Null,
        })
    }

    /// Opens a watch as `who` and reads its events in the background as they stream.
    pub async fn watch(&self, who: Who, what: &str, uri: String) -> Result<Watch, Error> {
        let mut request = Request::bare("GET", uri);
        request.watch = true;
        let response = self.respond(who, what, request).await?;
        let code = response.status().as_u16();
        let mut body = response.into_body();
        let (tx, events) = mpsc::channel(1024);
        if code != 200 {
            let bytes = body
                .collect()
                .await
                .map_err(|e| self.fail(what, e.to_string()))?
                .to_bytes();
            return Ok(Watch {
                code,
                refusal: Answer::body_from(&bytes, false),
                events,
                reader: tokio::spawn(async {}),
            });
        }
        let reader = tokio::spawn(async move {
            let mut pending: Vec<u8> = Vec::new();
            while let Some(Ok(frame)) = body.frame().await {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                pending.extend_from_slice(&data);
                while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=end).collect();
                    if line.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    let event = serde_json::from_slice(&line).unwrap_or_else(
                        |_| serde_json::json!({"text": String::from_utf8_lossy(&line)}),
                    );
                    if tx.send(event).await.is_err() {
                        return;
                    }
                }
            }
        });
        Ok(Watch {
            code,
            refusal: Value::Null,
            events,
            reader,
        })
    }

    async fn respond(
        &self,
        who: Who,
        what: &str,
        request: Request<'_>,
    ) -> Result<http::Response<kube::client::Body>, Error> {
        let mut builder = http::Request::builder()
            .method(request.method)
            .uri(&request.uri);
        if !request.headers.iter().any(|(k, _)| *k == "Accept") {
            builder = builder.header("Accept", JSON);
        }
        for (k, v) in request.headers {
            builder = builder.header(*k, *v);
        }
        if let Some(ct) = request.content_type {
            builder = builder.header("Content-Type", ct);
        }
        let http_request = builder
            .body(kube::client::Body::from(request.body.unwrap_or_default()))
            .map_err(|e| self.fail(what, e.to_string()))?;
        self.client(who)
            .send(http_request)
            .await
            .map_err(|e| self.fail(what, e.to_string()))
    }

    fn fail(&self, what: &str, message: String) -> Error {
        Error::Request {
            side: self.name,
            shape: what.into(),
            message,
        }
    }
}

/// Where an object of a kind the shapes create is POSTed.
pub fn collection_path(object: &Value) -> Option<String> {
    let api_version = object["apiVersion"].as_str()?;
    let kind = object["kind"].as_str()?;
    let plural = match kind {
        "Namespace" => "namespaces",
        "ConfigMap" => "configmaps",
        "ServiceAccount" => "serviceaccounts",
        "Secret" => "secrets",
        "Service" => "services",
        "Deployment" => "deployments",
        "NetworkPolicy" => "networkpolicies",
        "Lease" => "leases",
        "Event" => "events",
        "EgressShard" => "egressshards",
        "Role" => "roles",
        "RoleBinding" => "rolebindings",
        "ClusterRole" => "clusterroles",
        "ClusterRoleBinding" => "clusterrolebindings",
        _ => return None,
    };
    let root = if api_version == "v1" {
        "/api/v1".to_string()
    } else {
        format!("/apis/{api_version}")
    };
    Some(match object["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{root}/namespaces/{ns}/{plural}"),
        None => format!("{root}/{plural}"),
    })
}
