//! The HTTP front: routing to planes, authentication, counting, and the resource verbs.
//!
//! [`handle`] is the router's only handler. It finds the plane, authenticates, and hands
//! resource requests to [`resource`]; [`routes`] parses paths and verbs, [`respond`] renders
//! bodies and errors, and [`listen`] accepts connections (and drops one when a fault says so).
//!
//! Imports between the files point down this list, never up:
//!
//! ```text
//! resource      serve: admit (resolve, authorize, draw faults), settle, one function per verb
//! release       the DELETE in two writes (Milo's IPClaim), with its release faults
//! call          Call (a request resolved to its kind), LateFaults, Count and Reply
//! review        the access and identity reviews
//! impersonate   who a request acts as
//! respond, routes, listen
//! ```

mod call;
mod impersonate;
pub(crate) mod listen;
mod release;
mod resource;
mod respond;
mod review;
pub(crate) mod routes;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, header};

use crate::admin;
use crate::config::Identity;
use crate::error::ApiError;
use crate::hooks::Caller;
use crate::shared::Shared;
use call::Reply;
use respond::{ok_json, plain_not_found, resource_not_found};
pub use routes::PROJECT_PREFIX;
use routes::{Query, ResourcePath, Verb};

pub(crate) async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path();
    if let Some(rest) = path.strip_prefix("/localplane/") {
        return match admin::handle(&shared, &parts.method, rest, body).await {
            Ok(v) => ok_json(&v),
            Err(e) => e.into_response(),
        };
    }
    let Some(route) = routes::plane_route(&shared, path) else {
        return plain_not_found();
    };
    let plane_name = route.plane.name().to_string();
    let segs: Vec<&str> = route.rest.split('/').filter(|s| !s.is_empty()).collect();
    let Some(identity) = authenticate(&shared, &parts.headers) else {
        shared.record(&plane_name, parts.method.as_str(), &route.rest, 401);
        return ApiError::unauthorized().into_response();
    };
    let rp = ResourcePath::parse(&segs);
    let query = Query::parse(parts.uri.query().unwrap_or(""));
    let target = match &rp {
        Some(rp) => impersonate::Target::Resource {
            verb: Verb::of(&parts.method, rp.name.is_some(), &query).as_str(),
            group: &rp.group,
            resource: &rp.plural,
            subresource: rp.sub.as_deref(),
            // A request for one namespace is a request in it (the apiserver's RequestInfo).
            namespace: rp.namespace.as_deref().or_else(|| {
                (rp.group.is_empty() && rp.plural == "namespaces")
                    .then_some(rp.name.as_deref())
                    .flatten()
            }),
            name: rp.name.as_deref(),
        },
        None => impersonate::Target::Path {
            verb: parts.method.as_str().to_lowercase(),
            path: format!("/{}", segs.join("/")),
        },
    };
    let subject = match impersonate::subject(
        &identity,
        &parts.headers,
        &route.plane,
        shared.rbac,
        &target,
    ) {
        Ok(s) => s,
        Err(e) => {
            let code = e.code();
            shared.record(&plane_name, "impersonate", &route.rest, code);
            return e.into_response();
        }
    };
    if segs == ["openapi", "v2"] {
        let resp = openapi_v2(&route.plane, &parts.headers);
        shared.record(&plane_name, "get", &route.rest, resp.status().as_u16());
        return resp;
    }
    let Some(rp) = rp else {
        let resp = match routes::non_resource(&route.plane, &segs, &route.prefix, &parts.headers) {
            Some(v) => ok_json(&v),
            None => resource_not_found().into_response(),
        };
        let verb = parts.method.as_str().to_lowercase();
        shared.record(&plane_name, &verb, &route.rest, resp.status().as_u16());
        return resp;
    };
    // Outside the built-in groups the apiserver routes by CRD, and a resource no CRD serves
    // falls through to Go's plain `404 page not found`, as the real apiserver showed.
    if route
        .plane
        .lookup(&rp.group, &rp.version, &rp.plural)
        .is_none()
        && !route.plane.has_builtin_in(&rp.group)
    {
        let resp = plain_not_found();
        let verb = parts.method.as_str().to_lowercase();
        shared.record(&plane_name, &verb, &route.rest, resp.status().as_u16());
        return resp;
    }
    let verb = Verb::of(&parts.method, rp.name.is_some(), &query);
    let caller = Caller {
        user: subject.user.clone(),
        groups: subject.groups.clone(),
        project: route.plane.project().map(str::to_string),
    };
    let conn = parts.extensions.get::<listen::Connection>().cloned();
    let req = resource::Request {
        shared: shared.clone(),
        plane: route.plane,
        subject,
        caller,
        verb,
        path: rp,
        query,
        headers: &parts.headers,
    };
    match resource::serve(req, body).await {
        Reply::Answer(r) => r,
        Reply::Silence(how) => listen::silence(conn, how, shared.shutdown.subscribe()).await,
    }
}

/// `/openapi/v2`, in protobuf when the client asks for it (client-go does), else JSON.
fn openapi_v2(plane: &crate::plane::Plane, headers: &HeaderMap) -> Response {
    let doc = crate::openapi_v2::document(&plane.read().registry);
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !accept.contains("protobuf") {
        return ok_json(&doc);
    }
    let mut resp = Response::new(Body::from(crate::openapi_v2::protobuf(&doc)));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static(crate::openapi_v2::PROTOBUF),
    );
    resp
}

fn authenticate(shared: &Shared, headers: &HeaderMap) -> Option<Identity> {
    let auth = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let token = auth
        .strip_prefix("Bearer ")
        .or_else(|| auth.strip_prefix("bearer "))?;
    shared.authenticate(token.trim()).cloned()
}
