//! The secure metrics endpoint's request handling, end to end: requests with any headers reach
//! the controller's own router (`admin::auth::router` over `MetricsAuth`), which reads the bearer
//! token (`bearer_token`), asks the cell (TokenReview, then SubjectAccessReview) through a kube
//! client, and caches the answers. The cell answers the reviews with whatever the fuzzer says:
//! users authenticated or not, with any name, groups and extras, allowed or not, refusals,
//! bodies cut short. Time moves between requests, so cached answers expire. `Accept` headers go
//! through `admin::wants_openmetrics`, and any text through `admin::parse_bind_address`.
//!
//! What must hold: a request without a bearer token costs the cell nothing and is a 401; a 200
//! only follows a TokenReview of that very token and an answer that allowed it; nothing the
//! endpoint answers or logs as an error repeats the token.

#![no_main]

use std::sync::Arc;
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use axum::body::Body;
use egress_address::admin::auth::{MetricsAuth, bearer_token, router};
use egress_address::admin::{parse_bind_address, wants_openmetrics};
use fuzzing::{Answer, Plane, json};
use http::{HeaderMap, HeaderName, HeaderValue, Request, StatusCode, header};
use http_body_util::BodyExt;
use k8s_openapi::api::authentication::v1::TokenReview;
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use tower::ServiceExt;

const TOKENS: &[&str] = &["s3cret-scraper-token-0001", "another-token-0002", "x"];

fn authorization(u: &mut Unstructured<'_>) -> arbitrary::Result<Vec<u8>> {
    let token = json::text(u, TOKENS)?;
    Ok(match u.int_in_range(0..=6)? {
        0 => Vec::<u8>::arbitrary(u)?,
        1 => format!("Basic {token}").into_bytes(),
        2 => format!("bearer  {token}").into_bytes(),
        3 => format!(" BEARER {token} extra").into_bytes(),
        _ => format!("Bearer {token}").into_bytes(),
    })
}

fn headers(u: &mut Unstructured<'_>) -> arbitrary::Result<HeaderMap> {
    let mut headers = HeaderMap::new();
    for _ in 0..u.int_in_range(0..=4)? {
        let (name, value) = match u.int_in_range(0..=5)? {
            0 => (
                HeaderName::from_bytes(&Vec::<u8>::arbitrary(u)?),
                Vec::<u8>::arbitrary(u)?,
            ),
            1 => (
                Ok(header::ACCEPT),
                json::text(
                    u,
                    &[
                        "application/openmetrics-text;version=1.0.0;q=0.9,text/plain;q=0.5",
                        "text/plain;version=0.0.4",
                        "*/*",
                        "application/openmetrics-text; q=NaN",
                    ],
                )?
                .into_bytes(),
            ),
            _ => (Ok(header::AUTHORIZATION), authorization(u)?),
        };
        if let (Ok(name), Ok(value)) = (name, HeaderValue::from_bytes(&value)) {
            headers.append(name, value);
        }
    }
    Ok(headers)
}

fn token_review(u: &mut Unstructured<'_>) -> arbitrary::Result<Value> {
    let user = json::object(
        vec![
            (
                "username",
                json!(json::text(
                    u,
                    &["system:serviceaccount:monitoring:prometheus", ""]
                )?),
            ),
            ("uid", json!(json::text(u, &["5b1f", ""])?)),
            (
                "groups",
                json!([json::text(
                    u,
                    &["system:serviceaccounts", "system:authenticated"]
                )?]),
            ),
            (
                "extra",
                json!({"authentication.kubernetes.io/pod-name": [json::text(u, &["prometheus-0"])?]}),
            ),
        ],
        u,
    )?;
    let status = json::object(
        vec![
            ("authenticated", json!(u.ratio(3, 4)?)),
            ("user", user),
            ("audiences", json!(["https://kubernetes.default.svc"])),
            ("error", json!(json::text(u, &["", "token expired"])?)),
        ],
        u,
    )?;
    json::object(
        vec![
            ("apiVersion", json!("authentication.k8s.io/v1")),
            ("kind", json!("TokenReview")),
            ("spec", json!({})),
            ("status", status),
        ],
        u,
    )
}

fn access_review(u: &mut Unstructured<'_>) -> arbitrary::Result<Value> {
    let status = json::object(
        vec![
            ("allowed", json!(u.ratio(1, 2)?)),
            ("denied", json!(u.ratio(1, 4)?)),
            (
                "reason",
                json!(json::text(u, &["RBAC: allowed by ClusterRoleBinding", ""])?),
            ),
        ],
        u,
    )?;
    json::object(
        vec![
            ("apiVersion", json!("authorization.k8s.io/v1")),
            ("kind", json!("SubjectAccessReview")),
            ("spec", json!({})),
            ("status", status),
        ],
        u,
    )
}

fn answer(u: &mut Unstructured<'_>) -> arbitrary::Result<Answer> {
    let status = if u.ratio(3, 4)? {
        201
    } else {
        fuzzing::status(u)?
    };
    if let Some(body) = fuzzing::real(u, "reviews")? {
        return fuzzing::answer(u, status, body);
    }
    let value = match (status, u.ratio(1, 2)?) {
        (200..=299, true) => token_review(u)?,
        (200..=299, false) => access_review(u)?,
        _ => json::status(u, status)?,
    };
    let body = json::bytes(u, &value)?;
    fuzzing::answer(u, status, body)
}

fuzz_target!(|data: &[u8]| {
    fuzzing::alloc::held_to(fuzzing::alloc::CELL, data.len(), || {
        let mut u = Unstructured::new(data);
        if let Ok(text) = String::arbitrary(&mut u) {
            let _ = parse_bind_address(&text);
            let _ = wants_openmetrics(&text);
        }
        let mut answers = Vec::new();
        for _ in 0..u.int_in_range(0..=6).unwrap_or(0) {
            match answer(&mut u) {
                Ok(a) => answers.push(a),
                Err(_) => break,
            }
        }
        let mut requests = Vec::new();
        for _ in 0..u.int_in_range(1..=4).unwrap_or(1) {
            let (Ok(h), Ok(wait)) = (headers(&mut u), u.int_in_range(0u64..=90)) else {
                break;
            };
            requests.push((h, wait));
        }
        // A token the cell's own answers repeat (a user named after it) may come back in a 403.
        let mut answered = Vec::new();
        for a in &answers {
            answered.extend_from_slice(&a.body);
        }
        let cell = Plane::new(answers);
        let rt = fuzzing::runtime();
        rt.block_on(async {
            let auth = Arc::new(MetricsAuth::new(cell.client(1 << 20), fuzzing::metrics()));
            let registry = Arc::new(prometheus_client::registry::Registry::default());
            let app = router(auth, registry);
            for (headers, wait) in requests {
                tokio::time::advance(Duration::from_secs(wait)).await;
                if let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) {
                    let _ = wants_openmetrics(accept);
                }
                let token = bearer_token(&headers).map(str::to_string);
                let asked_before = cell.sent().len();
                let mut request = Request::get("/metrics").body(Body::empty()).unwrap();
                *request.headers_mut() = headers;
                let response = app
                    .clone()
                    .oneshot(request)
                    .await
                    .expect("the router answers");
                let status = response.status();
                let body = response.into_body().collect().await.unwrap().to_bytes();
                let sent = cell.sent();
                let Some(token) = token else {
                    assert_eq!(status, StatusCode::UNAUTHORIZED);
                    assert_eq!(sent.len(), asked_before, "no token, no review");
                    continue;
                };
                assert!(
                    [
                        StatusCode::OK,
                        StatusCode::UNAUTHORIZED,
                        StatusCode::FORBIDDEN,
                        StatusCode::SERVICE_UNAVAILABLE
                    ]
                    .contains(&status),
                    "{status}"
                );
                let reviewed = sent.iter().any(|s| {
                    serde_json::from_slice::<TokenReview>(&s.body)
                        .is_ok_and(|r| r.spec.token.as_deref() == Some(token.as_str()))
                });
                if status == StatusCode::OK {
                    assert!(reviewed, "allowed without a review of this token");
                }
                let echoed = !token.is_empty()
                    && memchr::memmem::find(&answered, token.as_bytes()).is_some();
                if status != StatusCode::OK && token.len() >= 6 && !echoed {
                    let text = String::from_utf8_lossy(&body);
                    assert!(
                        !text.contains(&token),
                        "the answer repeats the token: {text}"
                    );
                }
            }
        });
    })
});
