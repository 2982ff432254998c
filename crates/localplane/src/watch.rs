//! `?watch=true`: newline-delimited JSON events, resumable from a resourceVersion.
//!
//! A watch replays history after the requested resourceVersion and then follows the plane's
//! broadcast. Both are captured under the plane's read lock, and writes publish under the write
//! lock, so no event is lost or duplicated between the two. A resourceVersion older than the
//! bounded history gets what the apiserver sends: HTTP 200 and a single ERROR event with a 410
//! Expired Status (kube's watcher relists on that; an HTTP 410 would make it retry forever).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderValue, header};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use crate::error::ApiError;
use crate::hooks::ResourceKey;
use crate::plane::Plane;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{EventType, WatchEvent};

/// Turns a stored object into what the client asked for (full, metadata-only, a table row).
pub(crate) type Render = Arc<dyn Fn(&Value) -> Value + Send + Sync>;

pub(crate) struct WatchRequest {
    pub key: ResourceKey,
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub resource_version: Option<u64>,
    pub timeout: Duration,
    pub bookmarks: bool,
    pub bookmark_interval: Duration,
    /// Fault injection: drop the connection (no clean end of stream) after this long.
    pub cut_after: Option<Duration>,
    /// apiVersion and kind a BOOKMARK object carries (kube requires both).
    pub bookmark_type: (String, String),
    pub render: Render,
    /// `sendInitialEvents=true` (a streaming list, client-go's default since 1.35): the current
    /// state as ADDED events, then a BOOKMARK annotated `k8s.io/initial-events-end`.
    pub send_initial_events: bool,
}

type Chunk = Result<Bytes, std::io::Error>;

/// One event as the apiserver frames it: `type` before `object`, as Go writes the struct's
/// fields. The order matters to clients: serde decodes an adjacently tagged enum (kube's
/// `WatchEvent`) straight into the object when the tag comes first, and buffers the whole object
/// first when it does not.
fn line(etype: &str, object: &Value) -> Bytes {
    let mut buf = Vec::with_capacity(1024);
    buf.extend_from_slice(b"{\"type\":");
    serde_json::to_writer(&mut buf, etype).expect("a string always serialises");
    buf.extend_from_slice(b",\"object\":");
    serde_json::to_writer(&mut buf, object).expect("JSON values always serialise");
    buf.extend_from_slice(b"}\n");
    Bytes::from(buf)
}

/// Decides what a watcher with these selectors sees for an event. An object that stops
/// matching is DELETED as the watcher last saw it (under the event's resourceVersion), as the
/// watch cache does; one that starts matching is ADDED.
fn translate<'a>(req: &WatchRequest, ev: &'a WatchEvent) -> Option<(EventType, Cow<'a, Value>)> {
    if ev.res != req.key {
        return None;
    }
    if let Some(ns) = &req.namespace
        && crate::meta::str_at(&ev.obj, "/metadata/namespace") != ns
    {
        return None;
    }
    let m = |v: &Value| req.labels.matches(v) && req.fields.matches(v);
    let now = m(&ev.obj);
    match ev.etype {
        EventType::Modified => {
            let before = ev.prev.as_deref().is_some_and(m);
            match (before, now) {
                (true, true) => Some((EventType::Modified, Cow::Borrowed(&*ev.obj))),
                (false, true) => Some((EventType::Added, Cow::Borrowed(&*ev.obj))),
                (true, false) => {
                    let mut last = ev.prev.as_deref().cloned().unwrap_or_default();
                    crate::meta::meta_mut(&mut last)
                        .insert("resourceVersion".into(), json!(ev.rv.to_string()));
                    Some((EventType::Deleted, Cow::Owned(last)))
                }
                (false, false) => None,
            }
        }
        t => now.then_some((t, Cow::Borrowed(&*ev.obj))),
    }
}

pub(crate) fn respond(
    plane: &Plane,
    req: WatchRequest,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> Response {
    let (tx, rx) = mpsc::channel::<Chunk>(1024);
    let (initial, mut events, start_rv) = {
        let st = plane.read();
        let rv = req
            .resource_version
            .filter(|rv| *rv > 0 && !req.send_initial_events);
        match rv {
            Some(rv) if rv < st.store.compacted_through() => {
                let err = ApiError::expired(format!(
                    "too old resource version: {rv} ({})",
                    st.store.compacted_through() + 1
                ));
                let body = line("ERROR", &err.to_json());
                return stream_response(Body::from(body));
            }
            Some(rv) => {
                let replay: Vec<Arc<WatchEvent>> = st
                    .store
                    .history_after(rv)
                    .filter(|e| e.res == req.key)
                    .cloned()
                    .collect();
                (replay, st.store.subscribe(), st.store.rv())
            }
            None => {
                // "Any" resourceVersion: synthetic ADDED events for the current state, then live.
                let current: Vec<Arc<WatchEvent>> = st
                    .store
                    .range(&req.key, req.namespace.as_deref(), None)
                    .map(|(_, v)| {
                        Arc::new(WatchEvent {
                            rv: 0,
                            res: req.key.clone(),
                            etype: EventType::Added,
                            obj: v.clone(),
                            prev: None,
                        })
                    })
                    .collect();
                (current, st.store.subscribe(), st.store.rv())
            }
        }
    };
    tokio::spawn(async move {
        let mut last_rv = start_rv;
        for ev in &initial {
            if let Some((t, obj)) = translate(&req, ev)
                && tx
                    .send(Ok(line(t.as_str(), &(req.render)(&obj))))
                    .await
                    .is_err()
            {
                return;
            }
        }
        if req.send_initial_events {
            let obj = json!({
                "apiVersion": req.bookmark_type.0,
                "kind": req.bookmark_type.1,
                "metadata": {
                    "resourceVersion": last_rv.to_string(),
                    "annotations": {"k8s.io/initial-events-end": "true"},
                },
            });
            if tx.send(Ok(line("BOOKMARK", &obj))).await.is_err() {
                return;
            }
        }
        let deadline = tokio::time::sleep(req.timeout);
        tokio::pin!(deadline);
        let cut = tokio::time::sleep(req.cut_after.unwrap_or(Duration::from_secs(365 * 86400)));
        tokio::pin!(cut);
        let mut tick = tokio::time::interval(req.bookmark_interval.max(Duration::from_millis(10)));
        tick.tick().await;
        loop {
            tokio::select! {
                _ = &mut deadline => return,
                _ = &mut cut, if req.cut_after.is_some() => {
                    // An error chunk makes hyper reset the connection: a cut, not a clean end.
                    let _ = tx.send(Err(std::io::Error::other("watch cut by fault injection"))).await;
                    return;
                }
                _ = shutdown.changed() => return,
                _ = tick.tick() => {
                    if req.bookmarks {
                        let obj = json!({
                            "apiVersion": req.bookmark_type.0,
                            "kind": req.bookmark_type.1,
                            "metadata": {"resourceVersion": last_rv.to_string()},
                        });
                        if tx.send(Ok(line("BOOKMARK", &obj))).await.is_err() {
                            return;
                        }
                    } else if tx.is_closed() {
                        return;
                    }
                }
                r = events.recv() => match r {
                    Ok(ev) => {
                        if ev.rv <= last_rv {
                            continue;
                        }
                        last_rv = ev.rv;
                        if let Some((t, obj)) = translate(&req, &ev)
                            && tx.send(Ok(line(t.as_str(), &(req.render)(&obj)))).await.is_err()
                        {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        let err = ApiError::expired(format!(
                            "too old resource version: {last_rv} (watcher fell behind)"
                        ));
                        let _ = tx.send(Ok(line("ERROR", &err.to_json()))).await;
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        }
    });
    stream_response(Body::from_stream(
        tokio_stream::wrappers::ReceiverStream::new(rx),
    ))
}

fn stream_response(body: Body) -> Response {
    let mut resp = Response::new(body);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    resp
}
