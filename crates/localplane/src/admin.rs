//! `/localplane/...`: counters and fault control for tests, benchmarks and demos. Unauthenticated
//! on purpose: localplane only listens on loopback.

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::{Method, StatusCode};
use serde_json::json;

use crate::app::LocalPlane;
use crate::error::ApiError;
use crate::faults::FaultConfig;

fn json(code: StatusCode, v: serde_json::Value) -> Response {
    (
        code,
        [(http::header::CONTENT_TYPE, "application/json")],
        v.to_string(),
    )
        .into_response()
}

pub(crate) async fn handle(lp: &LocalPlane, method: &Method, rest: &str, body: Body) -> Response {
    let shared = lp.shared();
    match (method, rest.trim_end_matches('/')) {
        (&Method::GET, "metrics") => json(StatusCode::OK, shared.metrics.to_json()),
        (&Method::DELETE, "metrics") => {
            shared.metrics.reset();
            json(StatusCode::OK, json!({}))
        }
        (&Method::GET, "faults") => json(StatusCode::OK, json!(shared.faults.get())),
        (&Method::DELETE, "faults") => {
            shared.faults.clear();
            json(StatusCode::OK, json!(shared.faults.get()))
        }
        (&Method::POST | &Method::PUT, "faults") => {
            let bytes = match axum::body::to_bytes(body, 1 << 20).await {
                Ok(b) => b,
                Err(e) => return ApiError::bad_request(e.to_string()).into_response(),
            };
            let text = String::from_utf8_lossy(&bytes);
            match serde_saphyr::from_str::<FaultConfig>(&text) {
                Ok(cfg) => {
                    shared.faults.set(cfg);
                    json(StatusCode::OK, json!(shared.faults.get()))
                }
                Err(e) => {
                    ApiError::bad_request(format!("invalid fault config: {e}")).into_response()
                }
            }
        }
        (&Method::GET, "planes") => {
            let mut planes = vec!["cell".to_string()];
            planes.extend(lp.project_names());
            json(StatusCode::OK, json!({"planes": planes}))
        }
        (&Method::POST, p) if p.starts_with("projects/") => {
            let name = &p["projects/".len()..];
            lp.add_project(name);
            json(StatusCode::OK, json!({"project": name}))
        }
        (&Method::POST, p) if p.starts_with("compact/") => {
            let name = &p["compact/".len()..];
            match lp.plane(name) {
                Some(pl) => {
                    pl.compact_history();
                    json(
                        StatusCode::OK,
                        json!({"compacted": name, "resourceVersion": pl.resource_version()}),
                    )
                }
                None => {
                    ApiError::new(404, "NotFound", format!("no plane {name:?}")).into_response()
                }
            }
        }
        _ => ApiError::new(404, "NotFound", "unknown localplane admin endpoint").into_response(),
    }
}
