//! localplane driven by the official Kubernetes Python client (`kubernetes` from PyPI, pinned
//! and installed into `.venv` by `.ci/install-python-client`): list paging, watches with
//! bookmarks and a 410 that leads to a relist, conflicts, status isolation, deletecollection,
//! impersonation. The checks are `tests/python/suite.py`; this starts localplane (TLS, RBAC on)
//! for it and surfaces what it printed.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::common::*;
use localplane::testing::judges;

#[tokio::test(flavor = "multi_thread")]
async fn the_official_python_client_sees_a_real_apiserver() {
    let python = judges::python();
    let lp = serve_tls(
        builder()
            .namespace("py")
            .rbac(true)
            .bookmark_interval(Duration::from_millis(200)),
    )
    .await;
    let admin = lp.kubeconfig_path("cell", ADMIN).unwrap();
    let user = lp.kubeconfig_path("cell", USER).unwrap();
    let suite = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/suite.py");
    let started = Instant::now();
    let out = tokio::process::Command::new(&python)
        .arg(&suite)
        .arg(&admin)
        .arg(&user)
        .arg(USER_NAME)
        .arg("py")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .kill_on_drop(true)
        .output()
        .await
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    println!("python suite took {:.1} s", started.elapsed().as_secs_f64());
    assert!(
        out.status.success(),
        "the Python client suite failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("7 passed, 0 failed"), "{stdout}\n{stderr}");
    lp.shutdown().await;
}
