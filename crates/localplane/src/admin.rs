//! `/localplane/...`: counters and fault control for tests, benchmarks and demos. Unauthenticated
//! on purpose: localplane only listens on loopback.

use axum::body::Body;
use http::Method;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::faults::FaultConfig;
use crate::hooks::ResourceKey;
use crate::plane::parse_resource;
use crate::shared::Shared;

/// Answers one admin request (everything after `/localplane/`) with a JSON body.
pub(crate) async fn handle(
    shared: &Shared,
    method: &Method,
    rest: &str,
    body: Body,
) -> Result<Value, ApiError> {
    match (method, rest.trim_end_matches('/')) {
        (&Method::GET, "metrics") => Ok(shared.metrics.to_json()),
        (&Method::DELETE, "metrics") => {
            shared.metrics.reset();
            Ok(json!({}))
        }
        (&Method::GET, "faults") => Ok(json!(shared.faults.get())),
        (&Method::DELETE, "faults") => {
            shared.faults.clear();
            Ok(json!(shared.faults.get()))
        }
        (&Method::POST | &Method::PUT, "faults") => {
            shared.faults.set(read_fault_config(body).await?);
            Ok(json!(shared.faults.get()))
        }
        (method, p) if p.starts_with("quotas/") => {
            quotas(shared, method, &p["quotas/".len()..], body).await
        }
        (&Method::POST, p) if p.starts_with("compact/") => {
            let name = &p["compact/".len()..];
            let plane = shared
                .plane(name)
                .ok_or_else(|| ApiError::new(404, "NotFound", format!("no plane {name:?}")))?;
            plane.compact_history();
            Ok(json!({"compacted": name, "resourceVersion": plane.resource_version()}))
        }
        _ => Err(ApiError::new(
            404,
            "NotFound",
            "unknown localplane admin endpoint",
        )),
    }
}

/// `GET quotas/{project}` lists a project's quotas with what each has used;
/// `PUT|POST quotas/{project}/{resource}` with `{"limit": N}` sets one, `DELETE` lifts it.
async fn quotas(
    shared: &Shared,
    method: &Method,
    rest: &str,
    body: Body,
) -> Result<Value, ApiError> {
    let (project, resource) = match rest.split_once('/') {
        Some((p, r)) => (p, Some(r)),
        None => (rest, None),
    };
    if project == "cell" {
        return Err(ApiError::bad_request(
            "quotas are Milo's, set on a project: the cell stands in for kube-apiserver, whose \
             ResourceQuota localplane does not serve",
        ));
    }
    let plane = shared
        .project(project)
        .ok_or_else(|| ApiError::new(404, "NotFound", format!("no project {project:?}")))?;
    let entry = |res: &ResourceKey, limit: u64| {
        json!({
            "resource": format!("{}.{}", res.plural, res.group),
            "limit": limit,
            "used": plane.live_count(res),
        })
    };
    let Some(spelled) = resource else {
        if method != Method::GET {
            return Err(ApiError::method_not_allowed(
                "a project's quotas are read here; set one at quotas/{project}/{resource}",
            ));
        }
        let all: Vec<Value> = plane.quotas().iter().map(|(r, l)| entry(r, *l)).collect();
        return Ok(json!({"project": project, "quotas": all}));
    };
    let res = parse_resource(spelled).map_err(ApiError::bad_request)?;
    if plane.def(&res).is_none() {
        return Err(ApiError::new(
            404,
            "NotFound",
            format!("project {project:?} serves no resource {spelled}"),
        ));
    }
    match *method {
        Method::GET => {}
        Method::PUT | Method::POST => {
            let limit = read_limit(body).await?;
            plane.set_quota(&res, Some(limit));
        }
        Method::DELETE => plane.set_quota(&res, None),
        _ => {
            return Err(ApiError::method_not_allowed(
                "a quota is read (GET), set (PUT, POST) or lifted (DELETE)",
            ));
        }
    }
    Ok(match plane.quota(&res) {
        Some(limit) => entry(&res, limit),
        None => json!({"resource": spelled, "limit": null, "used": plane.live_count(&res)}),
    })
}

/// The body of a quota write: `{"limit": N}` (JSON or YAML), N a whole number of objects.
async fn read_limit(body: Body) -> Result<u64, ApiError> {
    let bytes = axum::body::to_bytes(body, 1 << 16)
        .await
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let invalid = |e: String| ApiError::bad_request(format!("invalid quota: {e}"));
    let v: Value = serde_saphyr::from_str(&String::from_utf8_lossy(&bytes))
        .map_err(|e| invalid(e.to_string()))?;
    match v.get("limit") {
        None => Err(invalid(
            "limit: required (the most live objects the project may hold)".into(),
        )),
        Some(l) => l
            .as_u64()
            .ok_or_else(|| invalid(format!("limit: {l} is not a whole number of objects"))),
    }
}

async fn read_fault_config(body: Body) -> Result<FaultConfig, ApiError> {
    let bytes = axum::body::to_bytes(body, 1 << 20)
        .await
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let text = String::from_utf8_lossy(&bytes);
    let invalid = |e: String| ApiError::bad_request(format!("invalid fault config: {e}"));
    let cfg = serde_saphyr::from_str::<FaultConfig>(&text).map_err(|e| invalid(e.to_string()))?;
    cfg.validate().map_err(invalid)?;
    Ok(cfg)
}
