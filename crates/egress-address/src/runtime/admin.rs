//! The admin HTTP servers: `/live`, `/ready` and `/metrics` (plus the reference's `/healthz` and
//! `/readyz`, which its Deployment probes), served on both the probe and the metrics address.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use super::Handle;
use crate::Error;
use crate::metrics::encode;

/// The content type of the OpenMetrics text format.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone)]
struct AdminState {
    handle: Handle,
    registry: Arc<Registry>,
}

/// The admin routes for one controller.
pub fn router(handle: Handle, registry: Arc<Registry>) -> Router {
    Router::new()
        .route("/live", get(live))
        .route("/healthz", get(live))
        .route("/ready", get(ready))
        .route("/readyz", get(ready))
        .route("/metrics", get(metrics))
        .with_state(AdminState { handle, registry })
}

async fn live() -> &'static str {
    "ok\n"
}

/// 200 `ready`, or 503 with one line per reason.
async fn ready(State(state): State<AdminState>) -> impl IntoResponse {
    let reasons = state.handle.not_ready_because();
    if reasons.is_empty() {
        (StatusCode::OK, "ready\n".to_string())
    } else {
        let mut body = String::from("not ready:\n");
        for reason in reasons {
            body.push_str(&reason);
            body.push('\n');
        }
        (StatusCode::SERVICE_UNAVAILABLE, body)
    }
}

async fn metrics(State(state): State<AdminState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, OPENMETRICS)],
        encode(&state.registry),
    )
}

/// `:8080` → every interface on 8080 (the Go flag convention); `0` → off.
pub fn parse_bind_address(value: &str) -> Result<Option<SocketAddr>, String> {
    let value = value.trim();
    if value == "0" || value.is_empty() {
        return Ok(None);
    }
    let full = if value.starts_with(':') {
        format!("0.0.0.0{value}")
    } else {
        value.to_string()
    };
    full.parse()
        .map(Some)
        .map_err(|_| format!("{value:?} is not a [host]:port address"))
}

/// Binds now, so a taken port fails startup instead of a later task.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(addr).await.map_err(|source| Error::Bind {
        addr: addr.to_string(),
        source,
    })
}

/// Serves the admin routes on `listener` until `stop` resolves.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    axum::serve(listener, router)
        .with_graceful_shutdown(stop)
        .await
        .map_err(|source| Error::Bind { addr, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_addresses_follow_the_go_convention() {
        assert_eq!(
            parse_bind_address(":8080").unwrap(),
            Some("0.0.0.0:8080".parse().unwrap())
        );
        assert_eq!(
            parse_bind_address("127.0.0.1:0").unwrap(),
            Some("127.0.0.1:0".parse().unwrap())
        );
        assert_eq!(
            parse_bind_address("[::1]:9").unwrap(),
            Some("[::1]:9".parse().unwrap())
        );
        assert_eq!(parse_bind_address("0").unwrap(), None);
        assert!(parse_bind_address("nonsense").is_err());
    }
}
