//! The HTTP front: routing to planes, authentication, authorization, fault injection, counting,
//! and rendering responses in the shape the client's Accept header asks for.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use serde_json::{Value, json};

use crate::app::LocalPlane;
use crate::config::Identity;
use crate::error::{ApiError, qualified};
use crate::hooks::Caller;
use crate::metrics::RequestKey;
use crate::plane::{DeleteOpts, PatchKind, Plane, WriteOpts};
use crate::rbac;
use crate::resources::ResourceDef;
use crate::selector::{FieldSelector, LabelSelector};
use crate::table::{self, IncludeObject};
use crate::watch::{self, WatchRequest};
use crate::{discovery, openapi};

/// Where Milo serves a project's control plane; everything after it is a normal API path.
pub const PROJECT_PREFIX: &str = "/apis/resourcemanager.miloapis.com/v1alpha1/projects/";

const MAX_BODY: usize = 64 << 20;

pub(crate) fn json_body(v: &Value) -> Body {
    Body::from(serde_json::to_vec(v).expect("JSON values always serialise"))
}

fn json_response(code: u16, body: Body) -> Response {
    let mut r = Response::new(body);
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn ok_json(v: &Value) -> Response {
    json_response(200, json_body(v))
}

/// Go's `http.NotFound` body: what Milo answers for a project it does not know.
fn plain_not_found() -> Response {
    let mut r = Response::new(Body::from("404 page not found\n"));
    *r.status_mut() = StatusCode::NOT_FOUND;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn resource_not_found() -> ApiError {
    ApiError::new(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
}

/// Query parameters, tolerating the empty pairs kube's serializer leaves (`?&limit=500`).
pub(crate) struct Query(Vec<(String, String)>);

fn decode(s: &str) -> String {
    let s = s.replace('+', " ");
    percent_encoding::percent_decode_str(&s)
        .decode_utf8_lossy()
        .into_owned()
}

impl Query {
    pub fn parse(q: &str) -> Query {
        Query(
            q.split('&')
                .filter(|p| !p.is_empty())
                .map(|p| match p.split_once('=') {
                    Some((k, v)) => (decode(k), decode(v)),
                    None => (decode(p), String::new()),
                })
                .collect(),
        )
    }

    pub fn get(&self, k: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    }

    fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("true") | Some("1") | Some(""))
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Shape {
    Full,
    Meta,
    Table,
}

fn shape(headers: &HeaderMap) -> Shape {
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

/// A request for a resource (as opposed to discovery and other non-resource paths).
struct ResourcePath {
    group: String,
    version: String,
    plural: String,
    namespace: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

fn parse_resource(segs: &[&str]) -> Option<ResourcePath> {
    let (group, version, rest) = match segs {
        ["api", v, rest @ ..] if !rest.is_empty() => (String::new(), v.to_string(), rest),
        ["apis", g, v, rest @ ..] if !rest.is_empty() => (g.to_string(), v.to_string(), rest),
        _ => return None,
    };
    let namespace_subresource =
        group.is_empty() && rest.len() == 3 && matches!(rest[2], "status" | "finalize");
    let (namespace, rest) = if rest.len() >= 3 && rest[0] == "namespaces" && !namespace_subresource
    {
        (Some(rest[1].to_string()), &rest[2..])
    } else {
        (None, rest)
    };
    if rest.len() > 3 {
        return None;
    }
    Some(ResourcePath {
        group,
        version,
        plural: rest[0].to_string(),
        namespace,
        name: rest.get(1).map(|s| s.to_string()),
        sub: rest.get(2).map(|s| s.to_string()),
    })
}

pub(crate) async fn handle(State(lp): State<LocalPlane>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let query = Query::parse(parts.uri.query().unwrap_or(""));
    if let Some(rest) = path.strip_prefix("/localplane/") {
        return crate::admin::handle(&lp, &parts.method, rest, body).await;
    }
    let (plane, rest, prefix) = match path.strip_prefix(PROJECT_PREFIX) {
        Some(r) => {
            let (project, tail) = r.split_once('/').unwrap_or((r, ""));
            let Some(tail) = tail.strip_prefix("control-plane") else {
                return plain_not_found();
            };
            let Some(plane) = lp.project(project) else {
                return plain_not_found();
            };
            let prefix = format!("{PROJECT_PREFIX}{project}/control-plane");
            (plane, tail.to_string(), prefix)
        }
        None => (lp.cell(), path.clone(), String::new()),
    };
    let segs: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
    if matches!(segs.as_slice(), ["healthz" | "readyz" | "livez"]) {
        return Response::new(Body::from("ok"));
    }
    let identity = match authenticate(&lp, &parts.headers) {
        Some(i) => i,
        None => {
            let e = ApiError::unauthorized();
            record(&lp, plane.name(), parts.method.as_str(), &rest, 401);
            return e.into_response();
        }
    };
    let Some(rp) = parse_resource(&segs) else {
        let resp = non_resource(&lp, &plane, &segs, &prefix, &parts.headers);
        record(
            &lp,
            plane.name(),
            &parts.method.as_str().to_lowercase(),
            &rest,
            resp.status().as_u16(),
        );
        return resp;
    };
    let caller = Caller {
        user: identity.user_name().to_string(),
        groups: identity.all_groups(),
        project: plane.project().map(str::to_string),
    };
    let verb = match (&parts.method, rp.name.is_some()) {
        (&Method::GET, true) => "get",
        (&Method::GET, false) if query.flag("watch") => "watch",
        (&Method::GET, false) => "list",
        (&Method::POST, false) => "create",
        (&Method::PUT, true) => "update",
        (&Method::PATCH, true) => "patch",
        (&Method::DELETE, true) => "delete",
        (&Method::DELETE, false) => "deletecollection",
        _ => "unsupported",
    };
    let resource_label = {
        let q = qualified(&rp.group, &rp.plural);
        match &rp.sub {
            Some(s) => format!("{q}/{s}"),
            None => q,
        }
    };
    let (code, resp) = match serve_resource(
        &lp,
        &plane,
        &identity,
        &caller,
        verb,
        &rp,
        &query,
        &parts.headers,
        body,
    )
    .await
    {
        Ok(r) => (r.status().as_u16(), r),
        Err(e) => (e.code(), e.into_response()),
    };
    lp.shared().metrics.record(RequestKey {
        plane: plane.name().to_string(),
        verb: verb.to_string(),
        resource: resource_label,
        code,
    });
    resp
}

fn record(lp: &LocalPlane, plane: &str, verb: &str, path: &str, code: u16) {
    lp.shared().metrics.record(RequestKey {
        plane: plane.to_string(),
        verb: verb.to_string(),
        resource: path.to_string(),
        code,
    });
}

fn authenticate(lp: &LocalPlane, headers: &HeaderMap) -> Option<Identity> {
    let auth = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let token = auth
        .strip_prefix("Bearer ")
        .or_else(|| auth.strip_prefix("bearer "))?;
    lp.shared().identities.get(token.trim()).cloned()
}

fn non_resource(
    lp: &LocalPlane,
    plane: &Plane,
    segs: &[&str],
    prefix: &str,
    headers: &HeaderMap,
) -> Response {
    let st = plane.read();
    let reg = &st.registry;
    let found = match segs {
        [] => Some(
            json!({"paths": ["/api", "/api/v1", "/apis", "/openapi/v3", "/version", "/healthz"]}),
        ),
        ["version"] => Some(discovery::version()),
        ["api"] => {
            let host = headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("127.0.0.1");
            Some(discovery::core_versions(host))
        }
        ["api", v] => discovery::resource_list(reg, "", v),
        ["apis"] => Some(discovery::group_list(reg)),
        ["apis", g] => discovery::group(reg, g),
        ["apis", g, v] => discovery::resource_list(reg, g, v),
        ["openapi", "v3"] => Some(openapi::root(reg, prefix)),
        ["openapi", "v3", "api", v] => openapi::group_version(reg, "", v),
        ["openapi", "v3", "apis", g, v] => openapi::group_version(reg, g, v),
        _ => None,
    };
    let _ = lp;
    match found {
        Some(v) => ok_json(&v),
        None => resource_not_found().into_response(),
    }
}

/// The object as this version presents it (storage is shared across a kind's versions).
fn as_version<'a>(def: &ResourceDef, version: &str, obj: &'a Value) -> Cow<'a, Value> {
    if def.versions.len() == 1 {
        return Cow::Borrowed(obj);
    }
    let av = def.api_version(version);
    if crate::meta::str_at(obj, "/apiVersion") == av {
        Cow::Borrowed(obj)
    } else {
        let mut o = obj.clone();
        o["apiVersion"] = json!(av);
        Cow::Owned(o)
    }
}

fn include_object(q: &Query) -> IncludeObject {
    match q.get("includeObject") {
        Some("None") => IncludeObject::None,
        Some("Object") => IncludeObject::Object,
        _ => IncludeObject::Metadata,
    }
}

#[allow(clippy::too_many_arguments)]
async fn serve_resource(
    lp: &LocalPlane,
    plane: &Plane,
    identity: &Identity,
    caller: &Caller,
    verb: &str,
    rp: &ResourcePath,
    query: &Query,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let shared = lp.shared();
    let def = plane
        .read()
        .registry
        .lookup(&rp.group, &rp.version, &rp.plural)
        .ok_or_else(resource_not_found)?;
    let version = rp.version.as_str();
    if rp.namespace.is_some() && !def.namespaced {
        return Err(resource_not_found());
    }
    if def.namespaced && rp.namespace.is_none() && (rp.name.is_some() || verb == "create") {
        return Err(resource_not_found());
    }
    let status_sub = match rp.sub.as_deref() {
        None => false,
        Some("status") if def.version(version).is_some_and(|v| v.status_subresource) => true,
        Some(_) => return Err(resource_not_found()),
    };
    if verb == "unsupported" || (status_sub && !matches!(verb, "get" | "update" | "patch")) {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    if shared.rbac && !identity.admin {
        let st = plane.read();
        let attrs = rbac::Attributes {
            user: &caller.user,
            groups: &caller.groups,
            verb,
            group: &def.group,
            resource: &def.plural,
            subresource: rp.sub.as_deref(),
            namespace: rp.namespace.as_deref(),
            name: rp.name.as_deref(),
        };
        if !rbac::authorize(&st, &attrs) {
            return Err(ApiError::forbidden(
                &def.group,
                &def.plural,
                rp.name.as_deref().unwrap_or(""),
                &rbac::denial(&attrs),
            ));
        }
    }
    let fault_resource = match &rp.sub {
        Some(s) => format!("{}/{s}", def.plural),
        None => def.plural.clone(),
    };
    let decision = shared
        .faults
        .decide(plane.name(), verb, &def.group, &fault_resource);
    if !decision.latency.is_zero() {
        tokio::time::sleep(decision.latency).await;
    }
    if let Some(e) = decision.error {
        return Err(e);
    }
    let ns = rp.namespace.as_deref();
    let opts = WriteOpts {
        dry_run: query.get("dryRun").is_some_and(|d| d == "All"),
        strict: query.get("fieldValidation") == Some("Strict"),
    };
    let shape = shape(headers);
    match verb {
        "get" => {
            let name = rp.name.as_deref().expect("get has a name");
            let obj = plane.get(&def, ns, name)?;
            let obj = as_version(&def, version, &obj);
            Ok(ok_json(&match shape {
                Shape::Full => obj.into_owned(),
                Shape::Meta => table::partial_metadata(&obj),
                Shape::Table => table::table(
                    &def,
                    version,
                    &[&obj],
                    include_object(query),
                    json!({"resourceVersion": crate::meta::str_at(&obj, "/metadata/resourceVersion")}),
                ),
            }))
        }
        "list" => {
            let labels = LabelSelector::parse(query.get("labelSelector").unwrap_or(""))?;
            let fields = FieldSelector::parse(query.get("fieldSelector").unwrap_or(""))?;
            let limit = query.get("limit").and_then(|l| l.parse().ok());
            let res = plane.list(&def, ns, &labels, &fields, limit, query.get("continue"))?;
            let mut meta = json!({"resourceVersion": res.rv.to_string()});
            if let Some(c) = &res.cont {
                meta["continue"] = json!(c);
            }
            Ok(match shape {
                Shape::Table => {
                    let objs: Vec<&Value> = res.items.iter().map(|v| &**v).collect();
                    ok_json(&table::table(
                        &def,
                        version,
                        &objs,
                        include_object(query),
                        meta,
                    ))
                }
                Shape::Meta => {
                    let items: Vec<Value> = res
                        .items
                        .iter()
                        .map(|o| table::partial_metadata(o))
                        .collect();
                    ok_json(&json!({
                        "kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                        "metadata": meta, "items": items,
                    }))
                }
                Shape::Full => json_response(200, list_body(&def, version, &meta, &res.items)),
            })
        }
        "watch" => {
            let labels = LabelSelector::parse(query.get("labelSelector").unwrap_or(""))?;
            let fields = FieldSelector::parse(query.get("fieldSelector").unwrap_or(""))?;
            let rv = match query.get("resourceVersion").filter(|s| !s.is_empty()) {
                None => None,
                Some(s) => Some(s.parse::<u64>().map_err(|_| {
                    ApiError::bad_request(format!("invalid resource version: {s:?}"))
                })?),
            };
            let timeout = query
                .get("timeoutSeconds")
                .and_then(|t| t.parse::<u64>().ok())
                .map(Duration::from_secs)
                .unwrap_or(Duration::from_secs(1800));
            let def2 = def.clone();
            let v2 = version.to_string();
            let include = include_object(query);
            let (render, bookmark_type): (watch::Render, (String, String)) = match shape {
                Shape::Full => (
                    Arc::new(move |o: &Value| as_version(&def2, &v2, o).into_owned()),
                    (def.api_version(version), def.kind.clone()),
                ),
                Shape::Meta => (
                    Arc::new(table::partial_metadata),
                    ("meta.k8s.io/v1".into(), "PartialObjectMetadata".into()),
                ),
                Shape::Table => (
                    Arc::new(move |o: &Value| {
                        let meta = json!({"resourceVersion": crate::meta::str_at(o, "/metadata/resourceVersion")});
                        table::table(&def2, &v2, &[o], include, meta)
                    }),
                    ("meta.k8s.io/v1".into(), "Table".into()),
                ),
            };
            let req = WatchRequest {
                key: def.key(),
                namespace: rp.namespace.clone(),
                labels,
                fields,
                resource_version: rv,
                timeout,
                bookmarks: query.flag("allowWatchBookmarks"),
                bookmark_interval: shared.bookmark_interval,
                cut_after: shared.faults.watch_cut_after(),
                bookmark_type,
                render,
                send_initial_events: query.flag("sendInitialEvents"),
            };
            Ok(watch::respond(plane, req, shared.shutdown.subscribe()))
        }
        "create" => {
            let obj = read_json(body).await?;
            let created = plane.create(&def, version, ns, obj, caller, &opts)?;
            Ok(json_response(201, json_body(&created)))
        }
        "update" => {
            let obj = read_json(body).await?;
            let name = rp.name.as_deref().expect("update has a name");
            let updated = plane.update(&def, version, ns, name, obj, status_sub, caller, &opts)?;
            Ok(ok_json(&updated))
        }
        "patch" => {
            let ct = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_string();
            let kind = match ct.as_str() {
                "application/json-patch+json" => PatchKind::Json,
                "application/merge-patch+json" => PatchKind::Merge,
                "application/strategic-merge-patch+json" => PatchKind::Strategic,
                "application/apply-patch+yaml" | "application/apply-patch+cbor" => PatchKind::Apply,
                other => return Err(ApiError::unsupported_media_type(other)),
            };
            let bytes = read_bytes(body).await?;
            let name = rp.name.as_deref().expect("patch has a name");
            let patched = plane.patch(
                &def, version, ns, name, kind, &bytes, status_sub, caller, &opts,
            )?;
            Ok(ok_json(&patched))
        }
        "delete" => {
            let bytes = read_bytes(body).await?;
            let mut dopts = DeleteOpts {
                dry_run: opts.dry_run,
                ..Default::default()
            };
            if !bytes.is_empty() {
                let v: Value = serde_json::from_slice(&bytes)
                    .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?;
                dopts.uid = v
                    .pointer("/preconditions/uid")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                dopts.resource_version = v
                    .pointer("/preconditions/resourceVersion")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                if v.get("dryRun")
                    .and_then(Value::as_array)
                    .is_some_and(|a| a.iter().any(|x| x == "All"))
                {
                    dopts.dry_run = true;
                }
            }
            let name = rp.name.as_deref().expect("delete has a name");
            let (code, body) = plane.delete(&def, ns, name, &dopts, caller)?;
            Ok(json_response(code, json_body(&body)))
        }
        _ => Err(ApiError::method_not_allowed(
            "localplane does not implement deletecollection",
        )),
    }
}

/// Serialises a list item by item, without building one big JSON value.
fn list_body(def: &ResourceDef, version: &str, meta: &Value, items: &[Arc<Value>]) -> Body {
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
        serde_json::to_writer(&mut buf, &*as_version(def, version, it)).expect("value");
    }
    buf.extend_from_slice(b"]}");
    Body::from(Bytes::from(buf))
}

async fn read_bytes(body: Body) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|e| ApiError::bad_request(format!("reading the request body: {e}")))
}

async fn read_json(body: Body) -> Result<Value, ApiError> {
    let b = read_bytes(body).await?;
    serde_json::from_slice(&b).map_err(|e| {
        ApiError::bad_request(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml ({e})"
        ))
    })
}
