//! The shipped manifests as an operator applies them, to the real kube-apiserver 1.37:
//! `kubectl apply --server-side`, every object validated by the real API (the Deployment's pod
//! spec included), and applied twice without a conflict or a change.
//!
//! Not applied here, for want of their CRDs on a bare apiserver: `config/ipam` (Milo's IPAM kinds,
//! applied to Milo) and the Prometheus Operator's kinds of `config/prometheus`, `config/alerts`
//! and `config/samples/monitoring` (their schema is checked in `manifests.rs`).

use std::path::Path;
use std::process::Command;

use localplane::testing::workspace_root;
use realcell::{Identity, RealCell};
use serde_json::Value;

use crate::common;

fn kubectl(real: &RealCell, args: &[&str]) -> (bool, String) {
    let out = Command::new(common::kubectl())
        .arg("--kubeconfig")
        .arg(real.kubeconfig(Identity::Admin))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn apply(real: &RealCell, how: &str, path: &Path) -> String {
    let (ok, out) = kubectl(
        real,
        &[
            "apply",
            "--server-side",
            "--field-manager=operator",
            how,
            path.to_str().unwrap(),
        ],
    );
    assert!(
        ok,
        "kubectl apply --server-side {how} {}:\n{out}",
        path.display()
    );
    out
}

#[tokio::test]
async fn every_cell_manifest_applies_server_side_to_the_real_apiserver() {
    // The real control plane takes free ports as it starts: not while a fleet takes its own.
    let _turn = common::one_fleet_at_a_time().await;
    let real = RealCell::shared()
        .await
        .expect("the real control plane starts");
    let config = workspace_root().join("config");
    for (how, path) in [
        ("-k", config.join("crd")),
        ("-k", config.join("egress-address")),
        // The Milo grant is RBAC, judged by the same API as any cluster's.
        ("-f", config.join("egress-address/milo-grant.yaml")),
    ] {
        apply(real, how, &path);
        // A second apply by the same manager changes nothing and conflicts with nothing.
        let again = apply(real, how, &path);
        assert!(
            again.lines().all(|l| l.ends_with("serverside-applied")),
            "{}: {again}",
            path.display()
        );
    }
    let (ok, out) = kubectl(
        real,
        &[
            "get",
            "deployment",
            "egress-address-controller",
            "-n",
            "egress-address-system",
            "-o",
            "json",
        ],
    );
    assert!(ok, "{out}");
    let deployment: Value = serde_json::from_str(&out).unwrap();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["name"], "manager");
    // Defaults the real API fills in show the pod spec went through its validation and defaulting.
    assert_eq!(container["terminationMessagePolicy"], "File", "{container}");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["securityContext"]["fsGroup"],
        65532
    );
    let (ok, out) = kubectl(
        real,
        &[
            "auth",
            "can-i",
            "patch",
            "egressshards.network.datumapis.com",
            "--as",
            "system:serviceaccount:egress-address-system:egress-address-controller",
        ],
    );
    assert!(ok && out.trim() == "yes", "{out}");
}
