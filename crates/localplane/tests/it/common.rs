//! Helpers every module shares: the standard localplane, raw HTTP, kubectl, error unwrapping.

use std::path::PathBuf;

use egress_api::ipam::{IPClaim, IPClass, IPPool};
use kube::Client;
use kube::api::{Api, PostParams};
use kube::core::Status;
use serde_json::{Value, json};

use localplane::{Identity, LocalPlane, LocalPlaneBuilder, Running};

pub const ADMIN: &str = "admin";
pub const ADMIN_TOKEN: &str = "admin-token";
pub const USER: &str = "controller";
pub const USER_TOKEN: &str = "controller-token";
pub const USER_NAME: &str = "system:egress-address@cloud.datumapis.com";
/// The project holding the IPAM class catalog in [`start_ipam`].
pub const PLATFORM: &str = "platform";

/// The workspace root (CRDs, the IPAM inventory and the `.venv` live there).
pub use localplane::testing::workspace_root as repo_root;

pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The cell with the repository's CRDs, a fixture CRD, a project, an admin and a plain user.
pub fn builder() -> LocalPlaneBuilder {
    LocalPlane::builder()
        .crd_dir(repo_root().join("config/crd"))
        .crd_dir(fixtures().join("crds"))
        .project("p1")
        .project_crd_dir(fixtures().join("crds"))
        .identity(Identity::admin(ADMIN, ADMIN_TOKEN))
        .identity(Identity::user(USER, USER_TOKEN, USER_NAME))
        .namespace("ns1")
}

pub async fn serve(b: LocalPlaneBuilder) -> Running {
    started(b, false).await
}

/// As [`serve`], over TLS: kubectl and the Python client verify the cell's certificate.
pub async fn serve_tls(b: LocalPlaneBuilder) -> Running {
    started(b, true).await
}

async fn started(b: LocalPlaneBuilder, tls: bool) -> Running {
    let lp = b.build().expect("localplane builds");
    let addr = "127.0.0.1:0".parse().unwrap();
    let served = if tls {
        lp.serve_tls(addr).await
    } else {
        lp.serve(addr).await
    };
    served.expect("localplane serves")
}

/// `b` served, with the admin's kube client for the cell: where most kube-rs tests start.
pub async fn serve_as_admin(b: LocalPlaneBuilder) -> (Running, Client) {
    let lp = serve(b).await;
    let client = lp.http_client("cell", ADMIN).unwrap();
    (lp, client)
}

/// A raw HTTP request, for asserting on wire details kube hides.
pub async fn raw(
    method: &str,
    url: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    use http_body_util::Full;
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    let client: Client<_, Full<bytes::Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut req = http::Request::builder().method(method).uri(url);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client
        .request(
            req.body(Full::new(bytes::Bytes::from(body.to_string())))
                .unwrap(),
        )
        .await
        .expect("request");
    answer(resp).await
}

/// An answer as the raw-request helpers give it: status code, content type, body as text.
pub async fn answer<B>(resp: http::Response<B>) -> (u16, String, String)
where
    B: hyper::body::Body,
    B::Error: std::fmt::Debug,
{
    use http_body_util::BodyExt;
    let code = resp.status().as_u16();
    let ct = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (code, ct, String::from_utf8_lossy(&body).into_owned())
}

/// The refusal inside a kube error; any other error fails the test.
pub fn api_err(e: kube::Error) -> Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// The platform and a tenant project, each serving Milo IPAM, over plain HTTP.
pub async fn start_ipam() -> Running {
    serve(ipam_builder()).await
}

/// What [`start_ipam`] serves, for a test that adds to it.
pub fn ipam_builder() -> LocalPlaneBuilder {
    LocalPlane::builder()
        .project(PLATFORM)
        .project("tenant")
        .project_namespace("default")
        .identity(Identity::admin("admin", "admin-token"))
        .ipam(PLATFORM)
}

/// Replaces the fault rules over the admin endpoint, as a test harness in another process would.
pub async fn set_faults(lp: &Running, rules: Value) {
    let body = json!({"seed": 1, "rules": rules}).to_string();
    let url = format!("{}/localplane/faults", lp.base_url());
    let (code, _, text) = raw("POST", &url, None, &[], &body).await;
    assert_eq!(code, 200, "{text}");
}

/// An IPClaim in namespace `default`.
pub fn claim(name: &str, spec: Value) -> IPClaim {
    serde_json::from_value(json!({
        "apiVersion": "ipam.miloapis.com/v1alpha1", "kind": "IPClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }))
    .unwrap()
}

/// A one-pool, one-class inventory drawing straight from `cidr`.
pub async fn flat(c: &Client, cidr: &str, class_spec: Value) {
    let fam = if cidr.contains(':') { "IPv6" } else { "IPv4" };
    let pool: IPPool = serde_json::from_value(json!({
        "metadata": {"name": "flat-pool"},
        "spec": {"cidr": cidr, "ipFamily": fam, "classNames": ["flat"]},
    }))
    .unwrap();
    Api::<IPPool>::all(c.clone())
        .create(&PostParams::default(), &pool)
        .await
        .unwrap();
    let mut spec = class_spec;
    spec["ipFamily"] = json!(fam);
    let class: IPClass =
        serde_json::from_value(json!({"metadata": {"name": "flat"}, "spec": spec})).unwrap();
    Api::<IPClass>::all(c.clone())
        .create(&PostParams::default(), &class)
        .await
        .unwrap();
}
