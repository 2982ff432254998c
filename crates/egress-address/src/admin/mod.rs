//! The admin HTTP servers: `/live`, `/ready` and `/metrics` (plus the reference's `/healthz` and
//! `/readyz`, which its Deployment probes), served on both the probe and the metrics address.
//! With `--metrics-secure` the probe address serves only the health routes, and `/metrics` is
//! served over HTTPS ([`tls`]) to callers the cell vouches for ([`auth`]).
//!
//! The admin servers look at a running controller only through its [`Handle`]: the control loop
//! (`runtime`) knows nothing of them, and `main` wires the two together.
//!
//! `/metrics` speaks OpenMetrics to a scraper that asks for it (Prometheus does), and the
//! Prometheus text format to everyone else, as client_golang's handler does: `curl` and
//! `promtool check metrics` read the latter.

pub mod auth;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use crate::error::Error;
pub use crate::metrics::{OPENMETRICS, PROMETHEUS_TEXT};
use crate::metrics::{encode, encode_prometheus_text};
use crate::runtime::Handle;

#[derive(Clone)]
struct AdminState {
    handle: Handle,
    registry: Arc<Registry>,
}

/// The admin routes for one controller.
pub fn router(handle: Handle, registry: Arc<Registry>) -> Router {
    health_routes()
        .route("/metrics", get(metrics))
        .with_state(AdminState { handle, registry })
}

/// The health routes alone: what the probe address serves when `/metrics` needs a credential,
/// so that no port hands the metrics out without one.
pub fn probe_router(handle: Handle) -> Router {
    health_routes().with_state(AdminState {
        handle,
        registry: Arc::new(Registry::default()),
    })
}

fn health_routes() -> Router<AdminState> {
    Router::new()
        .route("/live", get(live))
        .route("/healthz", get(live))
        .route("/ready", get(ready))
        .route("/readyz", get(ready))
}

async fn live() -> &'static str {
    "ok\n"
}

/// 200 `ready` (with a line per note, such as an overdue lease renewal), or 503 with one line
/// per reason.
async fn ready(State(state): State<AdminState>) -> impl IntoResponse {
    let reasons = state.handle.not_ready_because();
    if reasons.is_empty() {
        let mut body = String::from("ready\n");
        for note in state.handle.ready_notes() {
            body.push_str("note: ");
            body.push_str(&note);
            body.push('\n');
        }
        (StatusCode::OK, body)
    } else {
        let mut body = String::from("not ready:\n");
        for reason in reasons {
            body.push_str(&reason);
            body.push('\n');
        }
        (StatusCode::SERVICE_UNAVAILABLE, body)
    }
}

async fn metrics(State(state): State<AdminState>, headers: HeaderMap) -> Response {
    metrics_response(&state.registry, &headers)
}

/// The registry's series, in the format the request's `Accept` prefers.
pub fn metrics_response(registry: &Registry, headers: &HeaderMap) -> Response {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if wants_openmetrics(accept) {
        ([(header::CONTENT_TYPE, OPENMETRICS)], encode(registry)).into_response()
    } else {
        (
            [(header::CONTENT_TYPE, PROMETHEUS_TEXT)],
            encode_prometheus_text(registry),
        )
            .into_response()
    }
}

/// Whether an `Accept` header prefers OpenMetrics to the Prometheus text format.
pub fn wants_openmetrics(accept: &str) -> bool {
    let (mut openmetrics, mut text) = (0.0_f64, 0.0_f64);
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.strip_prefix("q="))
            .find_map(|q| q.parse::<f64>().ok())
            .unwrap_or(1.0);
        match media.as_str() {
            "application/openmetrics-text" => openmetrics = openmetrics.max(q),
            "text/plain" => text = text.max(q),
            _ => {}
        }
    }
    openmetrics > 0.0 && openmetrics >= text
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

    #[test]
    fn openmetrics_goes_to_whoever_prefers_it() {
        // Prometheus's own scrape header.
        assert!(wants_openmetrics(
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
        ));
        assert!(wants_openmetrics("application/openmetrics-text"));
        assert!(!wants_openmetrics(""));
        assert!(!wants_openmetrics("*/*"));
        assert!(!wants_openmetrics("text/plain;version=0.0.4"));
        assert!(!wants_openmetrics(
            "text/plain;q=0.9, application/openmetrics-text;q=0.5"
        ));
        assert!(!wants_openmetrics("application/openmetrics-text;q=0"));
    }
}
