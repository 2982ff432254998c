//! Response bodies: JSON objects and lists, `metav1.Status` errors, and the shapes an Accept
//! header can ask for (full objects, metadata only, Tables).

use std::borrow::Cow;
use std::sync::Arc;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde_json::Value;

use crate::error::ApiError;
use crate::resources::ResourceDef;

pub(crate) fn json_body(v: &Value) -> Body {
    Body::from(serde_json::to_vec(v).expect("JSON values always serialise"))
}

pub(crate) fn json_response(code: u16, body: Body) -> Response {
    let mut r = Response::new(body);
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

pub(crate) fn ok_json(v: &Value) -> Response {
    json_response(200, json_body(v))
}

/// Go's `http.NotFound` body: what Milo answers for a project it does not know.
pub(crate) fn plain_not_found() -> Response {
    let mut r = Response::new(Body::from("404 page not found\n"));
    *r.status_mut() = StatusCode::NOT_FOUND;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

pub(crate) fn resource_not_found() -> ApiError {
    ApiError::new(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.0.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let retry_after = self
            .0
            .details
            .as_ref()
            .map(|d| d.retry_after_seconds)
            .filter(|s| *s > 0);
        let mut resp = (code, json_body(&self.to_json())).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(s) = retry_after
            && let Ok(v) = HeaderValue::from_str(&s.to_string())
        {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
        resp
    }
}

/// What the client's Accept header asks an object or list to be rendered as.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Shape {
    Full,
    Meta,
    Table,
}

impl Shape {
    pub fn of(headers: &HeaderMap) -> Shape {
        let accept = headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        for media in accept.split(',') {
            let mut params = media.split(';').map(str::trim);
            let mime = params.next().unwrap_or("");
            if mime != "application/json" && mime != "*/*" && !mime.is_empty() {
                continue;
            }
            let mut as_ = None;
            let mut v = None;
            for p in params {
                match p.split_once('=') {
                    Some(("as", x)) => as_ = Some(x),
                    Some(("v", x)) => v = Some(x),
                    _ => {}
                }
            }
            match (as_, v) {
                (None, _) => return Shape::Full,
                (Some("Table"), Some("v1") | None) => return Shape::Table,
                (Some(a), Some("v1") | None) if a.starts_with("PartialObjectMetadata") => {
                    return Shape::Meta;
                }
                _ => continue,
            }
        }
        Shape::Full
    }
}

/// The object as this version presents it (storage is shared across a kind's versions, and
/// across the two groups Events are served in).
pub(crate) fn as_version<'a>(def: &ResourceDef, version: &str, obj: &'a Value) -> Cow<'a, Value> {
    def.present(version, obj)
}

/// Serialises a list item by item, without building one big JSON value.
pub(crate) fn list_body(
    def: &ResourceDef,
    version: &str,
    meta: &Value,
    items: &[Arc<Value>],
) -> Body {
    let mut buf = Vec::with_capacity(256 + items.len() * 512);
    buf.extend_from_slice(b"{\"apiVersion\":");
    serde_json::to_writer(&mut buf, &def.api_version(version)).expect("string");
    buf.extend_from_slice(b",\"kind\":");
    serde_json::to_writer(&mut buf, &def.list_kind).expect("string");
    buf.extend_from_slice(b",\"metadata\":");
    serde_json::to_writer(&mut buf, meta).expect("value");
    buf.extend_from_slice(b",\"items\":[");
    for (i, it) in items.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        let item = as_version(def, version, it);
        if def.custom {
            serde_json::to_writer(&mut buf, &*item).expect("value");
        } else {
            // A built-in list is a typed Go list: its items carry no apiVersion or kind, as
            // the real apiserver showed (a custom resource list is unstructured and keeps them).
            let mut item = item.into_owned();
            if let Some(o) = item.as_object_mut() {
                o.remove("apiVersion");
                o.remove("kind");
            }
            serde_json::to_writer(&mut buf, &item).expect("value");
        }
    }
    buf.extend_from_slice(b"]}");
    Body::from(Bytes::from(buf))
}
