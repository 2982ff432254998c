//! The standalone `localplane` binary, run as an operator runs it: `localplane --project platform`
//! serves Milo IPAM on the project plane, so the IPAM inventory applies with kubectl as against
//! Milo.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

use crate::common::repo_root;
use localplane::testing::judges;

/// The binary serving on a free loopback port; killed when dropped.
struct Binary {
    _child: tokio::process::Child,
    kubeconfigs: PathBuf,
}

/// Starts the binary with `args` and waits for it to say it is serving (its kubeconfigs are
/// written by then).
async fn start(dir: &Path, args: &[&str]) -> Binary {
    let kubeconfigs = dir.join("kubeconfigs");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_localplane"))
        .args(["--listen", "127.0.0.1:0", "--admin-token", "admin-token"])
        .arg("--kubeconfig-dir")
        .arg(&kubeconfigs)
        .args(args)
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("the localplane binary starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let serving = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("localplane serving") {
                return line;
            }
        }
        panic!("localplane exited before serving");
    })
    .await
    .expect("localplane serves within a minute");
    assert!(serving.contains("https://127.0.0.1:"), "{serving}");
    // Keep draining its log so it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Binary {
        _child: child,
        kubeconfigs,
    }
}

async fn kubectl(bin: &Path, kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let out = tokio::process::Command::new(bin)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .await
        .expect("kubectl runs");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[tokio::test]
async fn the_binary_serves_ipam_on_every_project_it_serves() {
    let bin = judges::kubectl();
    let tmp = tempfile::tempdir().unwrap();
    let lp = start(
        tmp.path(),
        &["--project", "platform", "--project", "tenant"],
    )
    .await;
    let platform = lp.kubeconfigs.join("platform-admin.kubeconfig");
    let tenant = lp.kubeconfigs.join("tenant-admin.kubeconfig");

    for kc in [&platform, &tenant] {
        let (ok, out) = kubectl(
            &bin,
            kc,
            &[
                "api-resources",
                "--api-group=ipam.miloapis.com",
                "-o",
                "name",
            ],
        )
        .await;
        assert!(ok, "{out}");
        let mut kinds: Vec<&str> = out.lines().collect();
        kinds.sort();
        assert_eq!(
            kinds,
            [
                "ipallocations.ipam.miloapis.com",
                "ipclaims.ipam.miloapis.com",
                "ipclasses.ipam.miloapis.com",
                "ippools.ipam.miloapis.com"
            ],
            "{}",
            kc.display()
        );
    }
    // The cell is a cell, not a project: no IPAM there.
    let cell = lp.kubeconfigs.join("cell-admin.kubeconfig");
    let (_, out) = kubectl(
        &bin,
        &cell,
        &[
            "api-resources",
            "--api-group=ipam.miloapis.com",
            "-o",
            "name",
        ],
    )
    .await;
    assert_eq!(out.trim(), "", "{out}");

    // The inventory as shipped is refused by IPAM's own rules, and accepted once edited.
    let shipped = repo_root().join("config/ipam");
    let (ok, out) = kubectl(&bin, &platform, &["apply", "-k", shipped.to_str().unwrap()]).await;
    assert!(
        !ok && out.contains("cidr is required for root pools"),
        "{out}"
    );
    let edited = tmp.path().join("edited");
    std::fs::create_dir(&edited).unwrap();
    let yaml = std::fs::read_to_string(shipped.join("egress-shard-ipv6.yaml")).unwrap();
    std::fs::write(
        edited.join("egress-shard-ipv6.yaml"),
        yaml.replace("cidr: \"\"", "cidr: 2001:db8::/40"),
    )
    .unwrap();
    std::fs::copy(
        shipped.join("kustomization.yaml"),
        edited.join("kustomization.yaml"),
    )
    .unwrap();
    let (ok, out) = kubectl(&bin, &platform, &["apply", "-k", edited.to_str().unwrap()]).await;
    assert!(ok, "{out}");
    assert!(
        out.contains("ippool.ipam.miloapis.com/datum-egress-shard-ipv6-root created"),
        "{out}"
    );
    let (ok, out) = kubectl(
        &bin,
        &platform,
        &[
            "get",
            "ippool",
            "datum-egress-shard-ipv6-root",
            "-o",
            "jsonpath={.status.allocatedCIDR}",
        ],
    )
    .await;
    assert!(ok, "{out}");
    assert_eq!(
        out.trim(),
        "2001:db8::/40",
        "IPAM's hooks ran: the pool was allocated"
    );
    let (ok, out) = kubectl(&bin, &platform, &["get", "ipclasses", "-o", "name"]).await;
    assert!(
        ok && out.contains("ipclass.ipam.miloapis.com/datum-egress-shard-ipv6"),
        "{out}"
    );
}
