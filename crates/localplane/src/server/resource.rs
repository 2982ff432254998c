//! Resource requests: resolving the kind, authorizing, injecting faults, one function per verb,
//! and counting each request by how it was answered.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, header};
use serde_json::{Value, json};

use super::call::{Call, Count, LateFaults, Reply};
use super::impersonate::Subject;
use super::release;
use super::respond::{
    Shape, as_version, json_body, json_response, list_body, ok_json, resource_not_found,
};
use super::review;
use super::routes::{Query, ResourcePath, Verb};
use crate::error::ApiError;
use crate::faults::{Decision, FaultWhen, Reach};
use crate::hooks::Caller;
use crate::kinds::BuiltinKind;
use crate::plane::{ListQuery, PatchKind, Plane, Written};
use crate::rbac;
use crate::resources::ResourceDef;
use crate::selector::{FieldSelector, LabelSelector};
use crate::shared::Shared;
use crate::table::{self, IncludeObject};
use crate::watch::{self, WatchRequest};

const MAX_BODY: usize = 64 << 20;

/// An authenticated request for a resource, as routing left it.
pub(crate) struct Request<'a> {
    pub shared: Arc<Shared>,
    pub plane: Plane,
    pub subject: Subject,
    pub caller: Caller,
    pub verb: Verb,
    pub path: ResourcePath,
    pub query: Query,
    pub headers: &'a HeaderMap,
}

pub(crate) async fn serve(req: Request<'_>, body: Body) -> Reply {
    let count = Count::begin(&req.shared, req.plane.name(), req.verb, req.path.label());
    let (mut call, decision) = match admit(req) {
        Ok(x) => x,
        Err(e) => return count.answer(Err(e)),
    };
    if !decision.latency.is_zero() {
        tokio::time::sleep(decision.latency).await;
    }
    let mut late = LateFaults {
        release_delay: decision.release_delay,
        ..Default::default()
    };
    match decision.failure {
        Some(f) if f.when == FaultWhen::BeforeApply => return count.fail(f),
        Some(f) if f.when == FaultWhen::Release => late.release_failure = Some(f),
        other => late.after = other,
    }
    if call.verb == Verb::Watch {
        return count.answer(watch(&count.shared, &call));
    }
    if matches!(call.verb, Verb::Get | Verb::List)
        && let Some(rv) = Plane::wants_rv(
            call.query.get("resourceVersion"),
            call.query.get("continue"),
        )
    {
        call.plane.wait_for_rv(rv).await;
    }
    let body = match read_bytes(body).await {
        Ok(b) => b,
        Err(e) => return count.answer(Err(e)),
    };
    if decision.commit_delay.is_zero() {
        return settle(&count, &call, &body, late).await;
    }
    count.shared.metrics.record_delayed_commit(&count.plane);
    let delay = decision.commit_delay;
    call.late_commit = true;
    let counted = count.clone();
    // Spawned, not awaited in place: axum drops this handler when the client disconnects, and
    // the commit must land anyway.
    let commit = tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        settle(&counted, &call, &body, late).await
    });
    match commit.await {
        Ok(reply) => reply,
        Err(e) => count.answer(Err(ApiError::new(
            500,
            "InternalError",
            format!("a delayed commit failed: {e}"),
        ))),
    }
}

/// Applies the request, then answers it, or replaces the answer with an after-apply fault.
async fn settle(count: &Count, call: &Call, body: &[u8], late: LateFaults) -> Reply {
    if is_two_step_delete(call) {
        return release::delete(count, call, body, late).await;
    }
    count.applied(apply(call, body), late.after)
}

/// Resolves and authorizes the request, and draws the faults it gets.
fn admit(req: Request<'_>) -> Result<(Call, Decision), ApiError> {
    let shared = req.shared.clone();
    let call = resolve(req)?;
    authorize(&shared, &call)?;
    let fault_resource = match &call.path.sub {
        Some(s) => format!("{}/{s}", call.def.plural),
        None => call.def.plural.clone(),
    };
    let reach = if call.verb == Verb::Watch {
        Reach::Watch
    } else if is_two_step_delete(&call) {
        Reach::TwoStepDelete
    } else {
        Reach::Applies
    };
    let decision = shared.faults.decide(
        call.plane.name(),
        call.verb.as_str(),
        &call.def.group,
        &fault_resource,
        reach,
    );
    Ok((call, decision))
}

/// A DELETE of a kind the plane deletes in two writes (Milo's IPClaim).
fn is_two_step_delete(call: &Call) -> bool {
    call.verb == Verb::Delete && call.plane.deletes_in_two_steps(&call.def.key())
}

/// Finds the kind and checks the path fits it (scope, subresource, verb).
fn resolve(req: Request<'_>) -> Result<Call, ApiError> {
    let rp = &req.path;
    let def = req
        .plane
        .lookup(&rp.group, &rp.version, &rp.plural)
        .ok_or_else(resource_not_found)?;
    if rp.namespace.is_some() && !def.namespaced {
        return Err(resource_not_found());
    }
    if def.namespaced && rp.namespace.is_none() && (rp.name.is_some() || req.verb == Verb::Create) {
        return Err(resource_not_found());
    }
    let status = match rp.sub.as_deref() {
        None => false,
        Some("status")
            if def
                .version(&rp.version)
                .is_some_and(|v| v.status_subresource) =>
        {
            true
        }
        Some(_) => return Err(resource_not_found()),
    };
    if req.verb == Verb::Unsupported
        || (status && !matches!(req.verb, Verb::Get | Verb::Update | Verb::Patch))
        || (def.is_review() && req.verb != Verb::Create)
    {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    let content_type = req
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    let user_agent = req
        .headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    Ok(Call {
        shared: req.shared.clone(),
        shape: Shape::of(req.headers),
        user_agent,
        rbac: req.shared.rbac,
        plane: req.plane,
        def,
        caller: req.caller,
        subject: req.subject,
        verb: req.verb,
        path: req.path,
        query: req.query,
        content_type,
        status,
        late_commit: false,
    })
}

/// A request for one namespace is a request in that namespace (the apiserver's RequestInfo says
/// so), for RoleBindings there and for the wording of a denial.
fn namespace_named<'a>(def: &ResourceDef, name: Option<&'a str>) -> Option<&'a str> {
    (def.builtin == Some(BuiltinKind::Namespace))
        .then_some(name)
        .flatten()
}

/// RBAC from the plane's own roles and bindings, for whoever the request acts as, unless that
/// is an admin (or the request reviews its own access, which everyone may).
fn authorize(shared: &Shared, call: &Call) -> Result<(), ApiError> {
    if !shared.rbac || call.subject.privileged || review::needs_no_grant(&call.def) {
        return Ok(());
    }
    let def = &call.def;
    let attrs = rbac::Attributes {
        user: &call.caller.user,
        groups: &call.caller.groups,
        verb: call.verb.as_str(),
        group: &def.group,
        resource: &def.plural,
        subresource: call.path.sub.as_deref(),
        namespace: call
            .path
            .namespace
            .as_deref()
            .or(namespace_named(def, call.path.name.as_deref())),
        name: call.path.name.as_deref(),
    };
    if rbac::authorize(&call.plane.read().store, &attrs) {
        return Ok(());
    }
    Err(ApiError::forbidden(
        &def.group,
        &def.plural,
        call.path.name.as_deref().unwrap_or(""),
        &rbac::denial(&attrs),
    ))
}

/// Runs every verb but watch against the plane.
fn apply(call: &Call, body: &[u8]) -> Result<Response, ApiError> {
    match call.verb {
        Verb::Get => get(call),
        Verb::List => list(call),
        Verb::Create if call.def.is_review() => review(call, body),
        Verb::Create => create(call, body),
        Verb::Update => update(call, body),
        Verb::Patch => patch(call, body),
        Verb::Delete => delete(call, body),
        Verb::DeleteCollection => delete_collection(call, body),
        _ => Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        )),
    }
}

fn include_object(q: &Query) -> IncludeObject {
    match q.get("includeObject") {
        Some("None") => IncludeObject::None,
        Some("Object") => IncludeObject::Object,
        _ => IncludeObject::Metadata,
    }
}

fn selectors(def: &ResourceDef, q: &Query) -> Result<(LabelSelector, FieldSelector), ApiError> {
    Ok((
        LabelSelector::parse(q.get("labelSelector").unwrap_or(""))?,
        FieldSelector::parse(q.get("fieldSelector").unwrap_or(""), def.field_set())?,
    ))
}

fn get(call: &Call) -> Result<Response, ApiError> {
    let (def, version) = (&call.def, call.path.version.as_str());
    let obj = call.plane.get_at(
        def,
        call.path.namespace.as_deref(),
        call.name(),
        call.query.get("resourceVersion"),
    )?;
    let obj = as_version(def, version, &obj);
    Ok(ok_json(&match call.shape {
        Shape::Full => obj.into_owned(),
        Shape::Meta => table::partial_metadata(&obj),
        Shape::Table => table::table(
            def,
            version,
            &[&obj],
            include_object(&call.query),
            json!({"resourceVersion": crate::meta::str_at(&obj, "/metadata/resourceVersion")}),
        ),
    }))
}

fn list(call: &Call) -> Result<Response, ApiError> {
    let (def, version) = (&call.def, call.path.version.as_str());
    let (labels, fields) = selectors(def, &call.query)?;
    let q = ListQuery {
        labels: &labels,
        fields: &fields,
        limit: call.query.get("limit").and_then(|l| l.parse().ok()),
        cont: call.query.get("continue"),
        resource_version: call.query.get("resourceVersion"),
        resource_version_match: call.query.get("resourceVersionMatch"),
    };
    let res = call.plane.list(def, call.path.namespace.as_deref(), &q)?;
    let mut meta = json!({"resourceVersion": res.rv.to_string()});
    if let Some(c) = &res.cont {
        meta["continue"] = json!(c);
    } else if def.custom && call.shape == Shape::Full {
        // A custom resource list is unstructured on the server: its empty `continue` is
        // written, where a built-in list's `omitempty` drops it.
        meta["continue"] = json!("");
    }
    if let Some(n) = res.remaining {
        meta["remainingItemCount"] = json!(n);
    }
    Ok(match call.shape {
        Shape::Table => {
            let objs: Vec<&Value> = res.items.iter().map(|v| &**v).collect();
            ok_json(&table::table(
                def,
                version,
                &objs,
                include_object(&call.query),
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
        Shape::Full => json_response(200, list_body(def, version, &meta, &res.items)),
    })
}

fn watch(shared: &Shared, call: &Call) -> Result<Response, ApiError> {
    let (def, version) = (&call.def, call.path.version.as_str());
    let q = &call.query;
    let (labels, fields) = selectors(def, q)?;
    let rv = match q.get("resourceVersion").filter(|s| !s.is_empty()) {
        None => None,
        Some(s) => Some(
            // The watch path parses it in the storage layer, whose error surfaces as a 500
            // without a reason.
            s.parse::<u64>().map_err(|_| {
                let message = crate::plane::invalid_rv_message(s);
                let field = message.trim_start_matches("invalid resource version: ");
                ApiError::new(500, "", field)
            })?,
        ),
    };
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let (render, bookmark_type) = watch_render(def, version, call.shape, include_object(q));
    let req = WatchRequest {
        key: def.key(),
        namespace: call.path.namespace.clone(),
        labels,
        fields,
        resource_version: rv,
        timeout,
        bookmarks: q.flag("allowWatchBookmarks"),
        bookmark_interval: shared.bookmark_interval,
        cut_after: shared.faults.watch_cut_after(),
        bookmark_type,
        render,
        send_initial_events: q.flag("sendInitialEvents"),
    };
    Ok(watch::respond(
        &call.plane,
        req,
        shared.shutdown.subscribe(),
    ))
}

/// How a watch renders each object, and the type its BOOKMARK objects carry.
fn watch_render(
    def: &Arc<ResourceDef>,
    version: &str,
    shape: Shape,
    include: IncludeObject,
) -> (watch::Render, (String, String)) {
    let def2 = def.clone();
    let v2 = version.to_string();
    match shape {
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
                let meta =
                    json!({"resourceVersion": crate::meta::str_at(o, "/metadata/resourceVersion")});
                table::table(&def2, &v2, &[o], include, meta)
            }),
            ("meta.k8s.io/v1".into(), "Table".into()),
        ),
    }
}

/// A write's answer: the object, and a `Warning` header for each warning.
fn written(code: u16, w: Written) -> Response {
    let mut resp = json_response(code, json_body(&w.obj));
    for text in &w.warnings {
        if let Ok(v) = http::HeaderValue::from_str(&warning_header(text)) {
            resp.headers_mut().append(http::header::WARNING, v);
        }
    }
    resp
}

/// RFC 7234's `Warning: 299 - "<text>"`, with the text quoted as Go's `strconv.Quote` does.
fn warning_header(text: &str) -> String {
    let mut q = String::with_capacity(text.len() + 2);
    for c in text.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            c if c.is_ascii_graphic() || c == ' ' => q.push(c),
            c => q.push_str(&c.escape_unicode().to_string()),
        }
    }
    format!("299 - \"{q}\"")
}

fn review(call: &Call, body: &[u8]) -> Result<Response, ApiError> {
    let asked = parse_body(call, body)?;
    let mut answer = review::answer(
        &call.def,
        &call.plane,
        call.rbac,
        &call.subject,
        &call.shared,
        asked,
    )?;
    // An access or token review goes through the create handler's field manager before its REST
    // storage answers it with the request, so it carries the writer's entry, as the real
    // apiserver showed (the rules and self reviews answer with new objects that carry none).
    if matches!(
        call.def.builtin,
        Some(
            BuiltinKind::SelfSubjectAccessReview
                | BuiltinKind::SubjectAccessReview
                | BuiltinKind::TokenReview
        )
    ) {
        let mut asked = answer.clone();
        if let Some(o) = asked.as_object_mut() {
            o.remove("status");
        }
        if let Some(list) =
            crate::plane::created_fields(&call.def, &call.path.version, &asked, &call.write_opts())?
        {
            answer["metadata"]["managedFields"] = list;
        }
    }
    Ok(json_response(201, json_body(&answer)))
}

fn create(call: &Call, body: &[u8]) -> Result<Response, ApiError> {
    let obj = parse_body(call, body)?;
    let created = call
        .plane
        .create(call.target(), obj, &call.caller, &call.write_opts())?;
    Ok(written(201, created))
}

fn update(call: &Call, body: &[u8]) -> Result<Response, ApiError> {
    // Leases, Events and RBAC objects are made by a PUT where none is (their strategies allow
    // create on update, as a lease holder's first renewal relies on).
    let obj = parse_body(call, body)?;
    if call.def.builtin.is_some_and(|b| b.creates_on_update())
        && !call.status
        && obj.pointer("/metadata/name").and_then(Value::as_str) == Some(call.name())
        && call
            .plane
            .object(&call.def.key(), call.path.namespace.as_deref(), call.name())
            .is_none()
    {
        let created = call
            .plane
            .create(call.target(), obj, &call.caller, &call.write_opts())?;
        return Ok(written(201, created));
    }
    let updated = call.plane.update(
        call.target(),
        call.name(),
        obj,
        &call.caller,
        &call.write_opts(),
    )?;
    Ok(written(200, updated))
}

/// The patch types the apiserver takes for a custom resource: no strategic merge, as there is
/// no Go type to carry patch strategies.
const CUSTOM_PATCH_TYPES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
];

fn patch(call: &Call, body: &[u8]) -> Result<Response, ApiError> {
    let custom = call.def.custom;
    let kind = match call.content_type.as_str() {
        "application/json-patch+json" => PatchKind::Json,
        "application/merge-patch+json" => PatchKind::Merge,
        "application/strategic-merge-patch+json" if !custom => PatchKind::Strategic,
        "application/apply-patch+yaml" | "application/apply-patch+cbor" => PatchKind::Apply,
        // The CRD handler words its own refusal; a built-in kind's PATCH route is go-restful's,
        // whose Consumes check answers first in its own words.
        _ if custom => return Err(ApiError::unsupported_media_type(CUSTOM_PATCH_TYPES)),
        _ => return Err(ApiError::route_unsupported_media_type()),
    };
    let (patched, created) = call.plane.patch(
        call.target(),
        call.name(),
        kind,
        body,
        &call.caller,
        &call.write_opts(),
    )?;
    Ok(written(if created { 201 } else { 200 }, patched))
}

fn delete(call: &Call, body: &[u8]) -> Result<Response, ApiError> {
    let opts = call.delete_opts(body)?;
    let out = call.plane.delete(call.deletion(&opts))?;
    Ok(ok_json(&out))
}

/// DELETE on a collection (within one namespace for a namespaced kind, as the apiserver routes
/// it), selected like a list; answered with the objects as they were.
fn delete_collection(call: &Call, body: &[u8]) -> Result<Response, ApiError> {
    let (def, version) = (&call.def, call.path.version.as_str());
    if def.namespaced && call.path.namespace.is_none() {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    let opts = call.delete_opts(body)?;
    let (labels, fields) = selectors(def, &call.query)?;
    let q = ListQuery {
        labels: &labels,
        fields: &fields,
        limit: None,
        cont: None,
        resource_version: call.query.get("resourceVersion"),
        resource_version_match: call.query.get("resourceVersionMatch"),
    };
    let res = call.plane.delete_collection(
        def,
        call.path.namespace.as_deref(),
        &q,
        &opts,
        &call.caller,
    )?;
    let mut meta = json!({"resourceVersion": res.rv.to_string()});
    // As every custom resource list: an (empty) continue token.
    if def.custom {
        meta["continue"] = json!("");
    }
    Ok(json_response(
        200,
        list_body(def, version, &meta, &res.items),
    ))
}

async fn read_bytes(body: Body) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|e| ApiError::bad_request(format!("reading the request body: {e}")))
}

/// A create or update body in the media types the kind accepts: JSON and YAML always, and
/// protobuf for the built-in kinds kubectl sends that way. Any other type is refused with 415,
/// as the apiserver refuses a type it has no decoder for.
fn parse_body(call: &Call, body: &[u8]) -> Result<Value, ApiError> {
    let protobuf = call
        .def
        .builtin
        .filter(|b| crate::kinds::protobuf::accepts(*b));
    let accepted = if protobuf.is_some() {
        "application/json, application/yaml, application/vnd.kubernetes.protobuf"
    } else {
        "application/json, application/yaml"
    };
    let unknown = || {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {accepted}"
            ),
        )
    };
    let cannot = |e: String| {
        ApiError::bad_request(format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: {e}",
            kind = call.def.kind,
            version = call.path.version
        ))
    };
    match call.content_type.as_str() {
        "application/json" | "" => serde_json::from_slice(body).map_err(|e| cannot(e.to_string())),
        "application/yaml" => std::str::from_utf8(body)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_saphyr::from_str(t).map_err(|e| e.to_string()))
            .map_err(cannot),
        "application/vnd.kubernetes.protobuf" => match protobuf {
            Some(b) => crate::kinds::protobuf::decode(b, body).map_err(cannot),
            None => Err(unknown()),
        },
        _ => Err(unknown()),
    }
}
