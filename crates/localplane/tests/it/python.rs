//! The official Kubernetes Python client (`kubernetes` from PyPI, pinned and installed into
//! `.venv` by `.ci/install-python-client`) against localplane and against the real kube-apiserver
//! with etcd, the same checks on both: list paging, watches with bookmarks and a 410 that leads
//! to a relist, conflicts, status isolation, deletecollection, impersonation. The checks are
//! `tests/python/suite.py`; this starts the server for it and surfaces what it printed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::*;
use localplane::testing::judges;

/// Runs the suite with its five arguments and asserts that every check passed.
async fn run_suite(server: &str, admin: &Path, user: &Path, user_name: &str, compaction: &str) {
    let python = judges::python();
    let suite = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/suite.py");
    let started = Instant::now();
    let out = tokio::process::Command::new(&python)
        .arg(&suite)
        .arg(admin)
        .arg(user)
        .arg(user_name)
        .arg("py")
        .arg(compaction)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .kill_on_drop(true)
        .output()
        .await
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    println!(
        "python suite against {server} took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        out.status.success(),
        "the Python client suite failed against {server}:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("7 passed, 0 failed"), "{stdout}\n{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_python_client_sees_localplane_as_a_real_apiserver() {
    let lp = serve_tls(
        builder()
            .namespace("py")
            .rbac(true)
            .bookmark_interval(Duration::from_millis(200)),
    )
    .await;
    let admin = lp.kubeconfig_path("cell", ADMIN).unwrap();
    let user = lp.kubeconfig_path("cell", USER).unwrap();
    run_suite("localplane", &admin, &user, USER_NAME, "localplane").await;
    lp.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_python_client_suite_passes_on_the_real_apiserver() {
    use realcell::{Identity, RealCell};
    // No watch cache for secrets, which the suite compacts: their watches come from etcd.
    let real = RealCell::start_with(&["--watch-cache-sizes=secrets#0"])
        .await
        .expect("the real control plane starts");
    let admin = real.client(Identity::Admin).await.unwrap();
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "py"}})).unwrap();
    kube::Api::all(admin)
        .create(&kube::api::PostParams::default(), &ns)
        .await
        .unwrap();
    // The controller's ServiceAccount identity holds no grant on a cell without the install.
    let compaction = format!("etcd={}", real.etcd_url().unwrap());
    run_suite(
        "the real kube-apiserver",
        &real.kubeconfig(Identity::Admin),
        &real.kubeconfig(Identity::Controller),
        Identity::Controller.user(),
        &compaction,
    )
    .await;
    real.stop().await.unwrap();
}
