//! `/localplane/...`: counters and fault control for tests, benchmarks and demos. Unauthenticated
//! on purpose: localplane only listens on loopback.

use axum::body::Body;
use http::Method;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::faults::FaultConfig;
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
        (&Method::GET, "planes") => {
            let mut planes = vec!["cell".to_string()];
            planes.extend(shared.project_names());
            Ok(json!({"planes": planes}))
        }
        (&Method::POST, p) if p.starts_with("projects/") => {
            let name = &p["projects/".len()..];
            shared.add_project(name);
            Ok(json!({"project": name}))
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
