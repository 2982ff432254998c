//! What ships is what an operator expects, checked with the real tools. Every kustomization builds
//! with the real kustomize into valid objects for their kinds: the namespace the runbook needs
//! first, the right credential readable by the user the pod runs as, a pod that refuses to start
//! half-configured, no grant it does not need, and the runbook's overlay (from docs/operations.md)
//! setting exactly what it says. The alerts pass the real promtool's checks and unit tests and
//! each names a runbook section that exists. The Dockerfile names files that exist, and the
//! binary it builds is static and starts in an empty root.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::LazyLock;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, Namespace, PodSpec, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Decodes into the typed object and back; a misspelled or misplaced field is dropped by the
/// typed form, so the round trip differing from the document means it is not valid for its kind.
fn typed<T: DeserializeOwned + Serialize>(doc: &Value) -> T {
    let t: T = serde_json::from_value(doc.clone()).unwrap_or_else(|e| {
        panic!(
            "{} is not a valid {}: {e}",
            doc["metadata"]["name"], doc["kind"]
        )
    });
    let back = serde_json::to_value(&t).unwrap();
    assert_eq!(
        strip_nulls(doc.clone()),
        strip_nulls(back),
        "{} {} has fields its kind does not know",
        doc["kind"],
        doc["metadata"]["name"]
    );
    t
}

/// Absent, null, empty strings and empty lists mean the same to these APIs (Go omitempty).
fn strip_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| {
                    !v.is_null()
                        && v.as_str() != Some("")
                        && v.as_array().is_none_or(|a| !a.is_empty())
                })
                .map(|(k, v)| (k, strip_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(strip_nulls).collect()),
        other => other,
    }
}

fn validate_all(docs: &[Value]) {
    for d in docs {
        match d["kind"].as_str().unwrap() {
            "Namespace" => drop(typed::<Namespace>(d)),
            "Deployment" => drop(typed::<Deployment>(d)),
            "Service" => drop(typed::<Service>(d)),
            "ServiceAccount" => drop(typed::<ServiceAccount>(d)),
            "ClusterRole" => drop(typed::<ClusterRole>(d)),
            "ClusterRoleBinding" => drop(typed::<ClusterRoleBinding>(d)),
            "Role" => drop(typed::<Role>(d)),
            "RoleBinding" => drop(typed::<RoleBinding>(d)),
            "NetworkPolicy" => drop(typed::<NetworkPolicy>(d)),
            "CustomResourceDefinition" => drop(typed::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>(d)),
            "IPPool" => drop(typed::<egress_api::ipam::IPPool>(d)),
            "IPClass" => drop(typed::<egress_api::ipam::IPClass>(d)),
            "ServiceMonitor" => drop(typed::<ServiceMonitor>(d)),
            "PrometheusRule" => drop(typed::<PrometheusRule>(d)),
            other => panic!("unexpected kind {other} in a kustomization"),
        }
    }
}

/// Every kustomization in `config/` that can be built on its own (the components are built by
/// the overlays: config/egress-address, and config/samples/monitoring for the optional two).
const KUSTOMIZATIONS: [&str; 6] = [
    "config/egress-address",
    "config/rbac",
    "config/network-policy",
    "config/crd",
    "config/ipam",
    "config/samples/monitoring",
];

/// The Prometheus Operator's kinds, as far as config/ uses them; an unknown or misspelled field
/// fails to decode.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ServiceMonitor {
    api_version: String,
    kind: String,
    metadata: ObjectMeta,
    spec: ServiceMonitorSpec,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ServiceMonitorSpec {
    selector: LabelSelector,
    endpoints: Vec<ScrapeEndpoint>,
    #[serde(skip_serializing_if = "Option::is_none")]
    job_label: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ScrapeEndpoint {
    port: String,
    path: Option<String>,
    scheme: Option<String>,
    interval: Option<String>,
    bearer_token_file: Option<String>,
    tls_config: Option<ScrapeTls>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ScrapeTls {
    insecure_skip_verify: Option<bool>,
    server_name: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PrometheusRule {
    api_version: String,
    kind: String,
    metadata: ObjectMeta,
    spec: PrometheusRuleSpec,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PrometheusRuleSpec {
    groups: Vec<RuleGroup>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleGroup {
    name: String,
    rules: Vec<Rule>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Rule {
    alert: String,
    expr: String,
    #[serde(rename = "for")]
    for_: Option<String>,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
}

#[test]
fn every_kustomization_builds_into_valid_objects() {
    let kubectl = common::kubectl();
    for dir in KUSTOMIZATIONS {
        let docs = common::kustomize(&kubectl, dir);
        assert!(!docs.is_empty(), "{dir} builds nothing");
        validate_all(&docs);
    }
    assert_eq!(
        common::kustomize(&kubectl, "config/crd")[0],
        serde_json::to_value(egress_api::crd::egress_shard_crd()).unwrap()
    );
}

#[test]
fn the_cell_install_is_what_an_operator_expects() {
    let kubectl = common::kubectl();
    let docs = common::kustomize(&kubectl, "config/egress-address");
    let kinds: BTreeSet<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        BTreeSet::from([
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "Namespace",
            "NetworkPolicy",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount"
        ]),
        "the CRD and the Milo grant stay out of the cell install"
    );
    for d in &docs {
        let kind = d["kind"].as_str().unwrap();
        if !kind.starts_with("Cluster") && kind != "Namespace" {
            assert_eq!(
                d["metadata"]["namespace"], "egress-address-system",
                "{} {}",
                d["kind"], d["metadata"]["name"]
            );
        }
    }
    let dep: Deployment = typed(docs.iter().find(|d| d["kind"] == "Deployment").unwrap());
    let pod = dep.spec.unwrap().template.spec.unwrap();
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("egress-address-controller")
    );
    let psc = pod.security_context.unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(psc.seccomp_profile.unwrap().type_, "RuntimeDefault");

    let secrets: Vec<String> = pod
        .volumes
        .unwrap_or_default()
        .iter()
        .filter_map(|v| v.secret.as_ref()?.secret_name.clone())
        .collect();
    assert_eq!(
        secrets,
        ["egress-address-ipam-kubeconfig"],
        "the controller's own credential, never ipam-cluster-kubeconfig"
    );

    let c = &pod.containers[0];
    assert_eq!(c.name, "manager");
    assert_eq!(
        c.command.as_deref(),
        Some(&["/egress-address-controller".to_string()][..])
    );
    let sc = c.security_context.as_ref().unwrap();
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(
        sc.capabilities.as_ref().unwrap().drop.as_deref(),
        Some(&["ALL".to_string()][..])
    );
    let path = |probe: &Option<k8s_openapi::api::core::v1::Probe>| {
        probe.as_ref()?.http_get.as_ref()?.path.clone()
    };
    assert_eq!(path(&c.liveness_probe).as_deref(), Some("/live"));
    assert_eq!(path(&c.readiness_probe).as_deref(), Some("/ready"));

    let env = |name: &str| {
        c.env
            .as_ref()
            .unwrap()
            .iter()
            .find(|e| e.name == name)
            .unwrap_or_else(|| panic!("env {name}"))
            .value
            .clone()
    };
    assert_eq!(
        env("LOCATION").unwrap_or_default(),
        "",
        "the pod must refuse to start until an overlay sets LOCATION"
    );
    assert_eq!(env("PLATFORM_PROJECT").unwrap_or_default(), "");
    assert_eq!(
        env("ADDRESS_CLASS_IPV6").as_deref(),
        Some("datum-egress-shard-address-ipv6")
    );
    assert_eq!(env("CLAIM_NAMESPACE").as_deref(), Some("default"));
    let args = c.args.clone().unwrap();
    for flag in [
        "--location=$(LOCATION)",
        "--platform-project=$(PLATFORM_PROJECT)",
        "--address-class-ipv6=$(ADDRESS_CLASS_IPV6)",
        "--ipam-kubeconfig=/etc/ipam-cluster/kubeconfig",
        "--metrics-secure",
        "--metrics-bind-address=:8443",
        "--health-probe-bind-address=:8081",
    ] {
        assert!(
            args.contains(&flag.to_string()),
            "args carry {flag}: {args:?}"
        );
    }
    let mount = &c.volume_mounts.as_ref().unwrap()[0];
    assert_eq!(
        (mount.mount_path.as_str(), mount.read_only),
        ("/etc/ipam-cluster", Some(true))
    );
}

#[test]
fn the_milo_grant_is_in_no_kustomization_and_allows_only_what_is_called() {
    let kubectl = common::kubectl();
    for dir in KUSTOMIZATIONS {
        for d in common::kustomize(&kubectl, dir) {
            for grant in ["egress-address-ipam", "egress-address-ipam-orphan-sweep"] {
                assert_ne!(
                    d["metadata"]["name"], grant,
                    "{dir} must not carry the Milo grant {grant}"
                );
            }
        }
    }
    let overlay = common::documents("config/egress-address/milo-grant-orphan-sweep.yaml");
    validate_all(&overlay);
    let sweep: ClusterRole = typed(&overlay[0]);
    let only = &sweep.rules.unwrap()[..];
    assert_eq!(only.len(), 1, "{only:?}");
    assert_eq!(
        (
            only[0].api_groups.clone().unwrap(),
            only[0].resources.clone().unwrap(),
            only[0].verbs.clone()
        ),
        (
            vec!["ipam.miloapis.com".to_string()],
            vec!["ipclaims".to_string()],
            vec!["list".to_string()]
        ),
        "the orphan sweep's overlay adds list on ipclaims and nothing else"
    );
    let docs = common::documents("config/egress-address/milo-grant.yaml");
    validate_all(&docs);
    let role: ClusterRole = typed(&docs[0]);
    let rules: Vec<(Vec<String>, Vec<String>, Vec<String>)> = role
        .rules
        .unwrap()
        .into_iter()
        .map(|r| (r.api_groups.unwrap(), r.resources.unwrap(), r.verbs))
        .collect();
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        rules,
        vec![
            (
                s(&["ipam.miloapis.com"]),
                s(&["ipclaims"]),
                s(&["get", "create", "delete"])
            ),
            (
                s(&["ipam.miloapis.com"]),
                s(&["ipallocations"]),
                s(&["get"])
            ),
        ]
    );
    let binding: ClusterRoleBinding = typed(&docs[1]);
    let subject = &binding.subjects.unwrap()[0];
    assert_eq!(
        (subject.kind.as_str(), subject.name.as_str()),
        ("User", "system:egress-address@cloud.datumapis.com")
    );
}

// ---------------------------------------------------------------------------------------------
// The runbook: docs/operations.md, "Install".
// ---------------------------------------------------------------------------------------------

const CELL_NAMESPACE: &str = "egress-address-system";

/// The runbook's overlay of step 5 and the components snippet of step 6.
fn documented_overlay() -> (String, String) {
    let yaml = common::fenced_blocks(&common::runbook_section("Install"), "yaml");
    let only = |what: &str, is: &dyn Fn(&str) -> bool| {
        let found: Vec<&String> = yaml.iter().map(|(_, b)| b).filter(|b| is(b)).collect();
        assert_eq!(found.len(), 1, "one documented {what}: {found:?}");
        found[0].clone()
    };
    (
        only("overlay", &|b| b.contains("kind: Kustomization")),
        only("components snippet", &|b| b.starts_with("components:")),
    )
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A scratch deployment repository: a copy of this repository's `config/`, and the runbook's
/// overlay where the runbook says to put it (`overlays/<cell>/kustomization.yaml`).
struct DeployRepo {
    dir: tempfile::TempDir,
}

impl DeployRepo {
    fn new(overlay: &str) -> DeployRepo {
        let dir = tempfile::tempdir().unwrap();
        copy_tree(&common::root().join("config"), &dir.path().join("config"));
        let repo = DeployRepo { dir };
        repo.write_overlay(overlay);
        repo
    }

    fn write_overlay(&self, overlay: &str) {
        let cell = self.dir.path().join("overlays/cell");
        std::fs::create_dir_all(&cell).unwrap();
        std::fs::write(cell.join("kustomization.yaml"), overlay).unwrap();
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn build(&self, kubectl: &Path, rel: &str) -> Vec<Value> {
        common::kustomize(kubectl, self.path(rel).to_str().unwrap())
    }
}

/// Sets `value` on env var `name` of container `manager` of the Deployment in `docs`.
fn set_env(docs: &mut [Value], name: &str, value: &str) {
    let dep = docs.iter_mut().find(|d| d["kind"] == "Deployment").unwrap();
    let container = dep["spec"]["template"]["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c["name"] == "manager")
        .unwrap();
    let var = container["env"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("env {name}"));
    var["value"] = Value::from(value);
}

fn set_image(docs: &mut [Value], image: &str) {
    let dep = docs.iter_mut().find(|d| d["kind"] == "Deployment").unwrap();
    dep["spec"]["template"]["spec"]["containers"][0]["image"] = Value::from(image);
}

/// The base with exactly the documented edits: the two variables and the image.
fn with_documented_edits(mut docs: Vec<Value>) -> Vec<Value> {
    set_env(&mut docs, "LOCATION", "us-central-1");
    set_env(&mut docs, "PLATFORM_PROJECT", "datum-platform");
    set_image(
        &mut docs,
        "registry.example/egress-address-controller:v0.1.0",
    );
    env_by_name(docs)
}

/// The containers' env lists sorted by name. A strategic-merge patch moves the variables it
/// names to the front of the list; the order means nothing here, as no variable refers to
/// another (`$(VAR)` in a value sees only those before it), and names are unique.
fn env_by_name(mut docs: Vec<Value>) -> Vec<Value> {
    for d in docs.iter_mut().filter(|d| d["kind"] == "Deployment") {
        for c in d["spec"]["template"]["spec"]["containers"]
            .as_array_mut()
            .unwrap()
        {
            if let Some(env) = c["env"].as_array_mut() {
                for e in env.iter() {
                    for v in env.iter().filter_map(|e| e["value"].as_str()) {
                        assert!(
                            !v.contains(&format!("$({})", e["name"].as_str().unwrap())),
                            "{v} refers to another variable: its order matters"
                        );
                    }
                }
                env.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
            }
        }
    }
    docs
}

#[test]
fn the_documented_overlay_sets_the_environment_by_name_and_nothing_else() {
    let kubectl = common::kubectl();
    let (overlay, components) = documented_overlay();
    assert!(
        !overlay.contains("/env/"),
        "the overlay must patch env by name, never by list index:\n{overlay}"
    );
    let repo = DeployRepo::new(&overlay);
    let base = repo.build(&kubectl, "config/egress-address");
    let built = repo.build(&kubectl, "overlays/cell");
    validate_all(&built);
    assert_eq!(
        env_by_name(built.clone()),
        with_documented_edits(base),
        "the documented overlay sets LOCATION, PLATFORM_PROJECT and the image, and changes nothing else"
    );

    // The reason to patch by name: a variable added in front of the others in the base moves
    // every index, and the overlay still sets the two it names.
    let deployment = repo.path("config/components/egress-address/deployment.yaml");
    let text = std::fs::read_to_string(&deployment).unwrap();
    let moved = text.replacen(
        "          env:\n",
        "          env:\n            - name: ADDED_IN_FRONT\n              value: x\n",
        1,
    );
    assert_ne!(moved, text);
    std::fs::write(&deployment, moved).unwrap();
    let base = repo.build(&kubectl, "config/egress-address");
    assert_eq!(
        env_by_name(repo.build(&kubectl, "overlays/cell")),
        with_documented_edits(base),
        "with a variable added in front of the base's env list"
    );
    std::fs::write(&deployment, text).unwrap();

    // Step 6: the optional components add a ServiceMonitor and a PrometheusRule, and nothing
    // else changes.
    repo.write_overlay(&format!("{overlay}{components}"));
    let monitored = repo.build(&kubectl, "overlays/cell");
    validate_all(&monitored);
    let (added, rest): (Vec<Value>, Vec<Value>) = monitored
        .into_iter()
        .partition(|d| d["kind"] == "ServiceMonitor" || d["kind"] == "PrometheusRule");
    assert_eq!(rest, built);
    let added: Vec<&str> = added.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(added, ["PrometheusRule", "ServiceMonitor"]);
}

#[test]
fn the_runbook_creates_the_namespace_before_the_secret_that_goes_into_it() {
    let kubectl = common::kubectl();
    let install = common::runbook_section("Install");
    let line_of = |needle: &str| {
        install
            .lines()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("the Install section has no line with {needle:?}"))
    };
    let namespace = line_of("kubectl apply -f config/egress-address/namespace.yaml");
    let secret = line_of("create secret generic egress-address-ipam-kubeconfig");
    let controller = line_of("kubectl apply -k overlays/");
    assert!(
        namespace < secret && secret < controller,
        "namespace (line {namespace}), then the Secret (line {secret}), then the controller (line {controller})"
    );
    assert!(
        install
            .lines()
            .nth(secret)
            .unwrap()
            .contains(&format!("-n {CELL_NAMESPACE} ")),
        "the Secret goes into {CELL_NAMESPACE}"
    );

    // The file step 1 applies on its own is the very Namespace the overlay applies later.
    let alone = common::documents("config/egress-address/namespace.yaml");
    assert_eq!(alone.len(), 1);
    let ns: Namespace = typed(&alone[0]);
    assert_eq!(ns.metadata.name.as_deref(), Some(CELL_NAMESPACE));
    let built = common::kustomize(&kubectl, "config/egress-address");
    let in_overlay: Vec<&Value> = built.iter().filter(|d| d["kind"] == "Namespace").collect();
    assert_eq!(in_overlay, [&alone[0]]);
    // And everything the overlay puts in a namespace goes into that one, the pod that mounts
    // the Secret included.
    for d in &built {
        if let Some(ns) = d["metadata"]["namespace"].as_str() {
            assert_eq!(
                ns, CELL_NAMESPACE,
                "{} {}",
                d["kind"], d["metadata"]["name"]
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The pod can read what it mounts.
// ---------------------------------------------------------------------------------------------

/// Who a container's process is, as far as file permissions go.
#[derive(Debug, Clone)]
struct Identity {
    uid: i64,
    gid: i64,
    groups: BTreeSet<i64>,
    /// root with CAP_DAC_OVERRIDE or CAP_DAC_READ_SEARCH reads any file regardless of its mode.
    bypasses_modes: bool,
}

/// One file the kubelet writes into a volume: mode and owner as the kubelet sets them.
#[derive(Debug, Clone, PartialEq)]
struct MountedFile {
    path: String,
    mode: i32,
    uid: i64,
    gid: i64,
}

/// The user and group the image runs as (`USER uid:gid` of the Dockerfile's final stage), which
/// is what a container gets when neither it nor its pod sets runAsUser/runAsGroup.
fn image_user() -> (i64, i64) {
    let dockerfile = Dockerfile::load();
    let user = dockerfile
        .stages
        .last()
        .unwrap()
        .args_of("USER")
        .last()
        .cloned()
        .expect("the final stage sets USER");
    let (uid, gid) = user.split_once(':').expect("USER uid:gid");
    (uid.parse().unwrap(), gid.parse().unwrap())
}

fn identity(pod: &PodSpec, container: &Container) -> Identity {
    let psc = pod.security_context.clone().unwrap_or_default();
    let csc = container.security_context.clone().unwrap_or_default();
    let (image_uid, image_gid) = image_user();
    let uid = csc.run_as_user.or(psc.run_as_user).unwrap_or(image_uid);
    let gid = csc.run_as_group.or(psc.run_as_group).unwrap_or(image_gid);
    let mut groups: BTreeSet<i64> = psc
        .supplemental_groups
        .unwrap_or_default()
        .into_iter()
        .collect();
    groups.insert(gid);
    groups.extend(psc.fs_group);
    let caps = csc.capabilities.unwrap_or_default();
    let dropped = caps.drop.unwrap_or_default();
    let added = caps.add.unwrap_or_default();
    let has = |cap: &str| {
        added.iter().any(|c| c == cap) || !dropped.iter().any(|c| c == "ALL" || c == cap)
    };
    Identity {
        uid,
        gid,
        groups,
        bypasses_modes: uid == 0 && (has("DAC_OVERRIDE") || has("DAC_READ_SEARCH")),
    }
}

/// What the kubelet writes for a volume, mounted at `mount`. A Secret or ConfigMap without
/// `items` projects every key (unknown here) with the same mode, shown as `<each key>`. Files
/// belong to root; with an fsGroup the kubelet gives them that group and adds group and owner
/// read to their mode (read-only volumes), without one they stay root:root.
fn mounted_files(pod: &PodSpec, volume: &str, mount: &str) -> Vec<MountedFile> {
    const DEFAULT_MODE: i32 = 0o644;
    const EACH_KEY: &str = "<each key>";
    let keys = |items: &Option<Vec<k8s_openapi::api::core::v1::KeyToPath>>,
                mode: i32|
     -> Vec<(String, i32)> {
        match items {
            Some(items) if !items.is_empty() => items
                .iter()
                .map(|i| (i.path.clone(), i.mode.unwrap_or(mode)))
                .collect(),
            _ => vec![(EACH_KEY.to_string(), mode)],
        }
    };
    let files: Vec<(String, i32)> = if volume == IMPLICIT_TOKEN_VOLUME {
        ["token", "ca.crt", "namespace"]
            .into_iter()
            .map(|f| (f.to_string(), DEFAULT_MODE))
            .collect()
    } else {
        let v = pod
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == volume)
            .unwrap_or_else(|| panic!("volume {volume} is mounted but not defined"));
        if let Some(s) = &v.secret {
            keys(&s.items, s.default_mode.unwrap_or(DEFAULT_MODE))
        } else if let Some(c) = &v.config_map {
            keys(&c.items, c.default_mode.unwrap_or(DEFAULT_MODE))
        } else if let Some(d) = &v.downward_api {
            let mode = d.default_mode.unwrap_or(DEFAULT_MODE);
            d.items
                .iter()
                .flatten()
                .map(|i| (i.path.clone(), i.mode.unwrap_or(mode)))
                .collect()
        } else if let Some(p) = &v.projected {
            let mode = p.default_mode.unwrap_or(DEFAULT_MODE);
            let mut files = vec![];
            for source in p.sources.iter().flatten() {
                if let Some(s) = &source.secret {
                    files.extend(keys(&s.items, mode));
                }
                if let Some(c) = &source.config_map {
                    files.extend(keys(&c.items, mode));
                }
                if let Some(d) = &source.downward_api {
                    files.extend(
                        d.items
                            .iter()
                            .flatten()
                            .map(|i| (i.path.clone(), i.mode.unwrap_or(mode))),
                    );
                }
                if let Some(t) = &source.service_account_token {
                    files.push((t.path.clone(), mode));
                }
                if let Some(b) = &source.cluster_trust_bundle {
                    files.push((b.path.clone(), mode));
                }
            }
            files
        } else {
            // emptyDir and the like: written by the pod itself, nothing for the kubelet to own.
            vec![]
        }
    };
    let fs_group = pod.security_context.as_ref().and_then(|s| s.fs_group);
    files
        .into_iter()
        .map(|(path, mode)| MountedFile {
            path: format!("{}/{path}", mount.trim_end_matches('/')),
            mode: if fs_group.is_some() {
                mode | 0o440
            } else {
                mode
            },
            uid: 0,
            gid: fs_group.unwrap_or(0),
        })
        .collect()
}

/// The service account token volume the API server adds to every pod that automounts one.
const IMPLICIT_TOKEN_VOLUME: &str = "<service account token>";

fn can_read(who: &Identity, file: &MountedFile) -> bool {
    let bits = if who.bypasses_modes {
        return true;
    } else if who.uid == file.uid {
        0o400
    } else if who.groups.contains(&file.gid) {
        0o040
    } else {
        0o004
    };
    file.mode & bits != 0
}

/// Every file a container of `pod` mounts that its process cannot read, described.
fn unreadable_mounts(pod: &PodSpec) -> Vec<String> {
    let mut problems = vec![];
    for c in pod
        .containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
    {
        let who = identity(pod, c);
        let mut mounts: Vec<(String, String)> = c
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| (m.name.clone(), m.mount_path.clone()))
            .collect();
        if pod.automount_service_account_token != Some(false) {
            mounts.push((
                IMPLICIT_TOKEN_VOLUME.to_string(),
                "/var/run/secrets/kubernetes.io/serviceaccount".to_string(),
            ));
        }
        for (volume, path) in mounts {
            for f in mounted_files(pod, &volume, &path) {
                if !can_read(&who, &f) {
                    problems.push(format!(
                        "container {} (uid {}, gid {}, groups {:?}) cannot read {} ({}:{} {:o})",
                        c.name, who.uid, who.gid, who.groups, f.path, f.uid, f.gid, f.mode
                    ));
                }
            }
        }
    }
    problems
}

fn cell_pod(kubectl: &Path) -> PodSpec {
    let docs = common::kustomize(kubectl, "config/egress-address");
    let dep: Deployment = typed(docs.iter().find(|d| d["kind"] == "Deployment").unwrap());
    dep.spec.unwrap().template.spec.unwrap()
}

#[test]
fn every_container_can_read_every_file_it_mounts() {
    let kubectl = common::kubectl();
    let pod = cell_pod(&kubectl);
    assert_eq!(unreadable_mounts(&pod), Vec::<String>::new());

    // The credential the controller is told to read is one of those files.
    let c = &pod.containers[0];
    let flag = c
        .args
        .iter()
        .flatten()
        .find_map(|a| a.strip_prefix("--ipam-kubeconfig="))
        .expect("--ipam-kubeconfig");
    let mount = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| flag.starts_with(&format!("{}/", m.mount_path)))
        .unwrap_or_else(|| panic!("{flag} is on no mount"));
    let secret = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == mount.name)
        .and_then(|v| v.secret.as_ref())
        .expect("the IPAM kubeconfig comes from a Secret");
    assert_eq!(secret.items, None, "every key of the Secret is a file");
    let who = identity(&pod, c);
    let files = mounted_files(&pod, &mount.name, &mount.mount_path);
    assert!(files.iter().all(|f| can_read(&who, f)));

    // Without fsGroup the kubelet leaves the files root:root 0440, and the controller (65532)
    // cannot read its own credential: the check sees it.
    let mut without = pod.clone();
    without.security_context.as_mut().unwrap().fs_group = None;
    let problems = unreadable_mounts(&without);
    assert!(
        problems.iter().any(|p| p.contains("/etc/ipam-cluster/")),
        "{problems:?}"
    );
}

#[test]
fn the_file_permission_model_follows_the_kubelet_and_the_kernel() {
    let user = |uid, gid, groups: &[i64]| Identity {
        uid,
        gid,
        groups: groups.iter().copied().chain([gid]).collect(),
        bypasses_modes: false,
    };
    let file = |mode, gid| MountedFile {
        path: "/f".into(),
        mode,
        uid: 0,
        gid,
    };
    // root:root 0440: neither owner nor group of a non-root user.
    assert!(!can_read(&user(65532, 65532, &[]), &file(0o440, 0)));
    // The group the kubelet gives the files with fsGroup.
    assert!(can_read(&user(65532, 65532, &[]), &file(0o440, 65532)));
    assert!(can_read(&user(1000, 1000, &[65532]), &file(0o440, 65532)));
    // The owner's bits decide for the owner, even when the group's would allow.
    assert!(!can_read(&user(0, 0, &[]), &file(0o040, 0)));
    // Others' bits for everyone else.
    assert!(can_read(&user(65532, 65532, &[]), &file(0o644, 0)));
    assert!(!can_read(&user(65532, 65532, &[]), &file(0o640, 0)));

    let pod: PodSpec = serde_json::from_value(serde_json::json!({
        "securityContext": {"runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 2000},
        "automountServiceAccountToken": false,
        "containers": [{"name": "c", "volumeMounts": [{"name": "s", "mountPath": "/s"}]}],
        "volumes": [{"name": "s", "secret": {"secretName": "x", "defaultMode": 0o400,
                     "items": [{"key": "k", "path": "k"}, {"key": "l", "path": "l", "mode": 0o600}]}}]
    }))
    .unwrap();
    // fsGroup: group 2000, and the kubelet adds group read to a read-only volume's files.
    assert_eq!(
        mounted_files(&pod, "s", "/s"),
        [
            MountedFile {
                path: "/s/k".into(),
                mode: 0o440,
                uid: 0,
                gid: 2000
            },
            MountedFile {
                path: "/s/l".into(),
                mode: 0o640,
                uid: 0,
                gid: 2000
            },
        ]
    );
    assert_eq!(unreadable_mounts(&pod), Vec::<String>::new());
    let mut no_fs_group = pod.clone();
    no_fs_group.security_context.as_mut().unwrap().fs_group = None;
    assert_eq!(unreadable_mounts(&no_fs_group).len(), 2);
    // Root that dropped every capability is bound by the modes like anyone else.
    let mut root = no_fs_group.clone();
    let sc = root.security_context.as_mut().unwrap();
    sc.run_as_user = Some(0);
    sc.run_as_group = Some(0);
    assert_eq!(
        unreadable_mounts(&root),
        Vec::<String>::new(),
        "root owns 0400 and 0600"
    );
    root.volumes.as_mut().unwrap()[0]
        .secret
        .as_mut()
        .unwrap()
        .default_mode = Some(0o040);
    root.volumes.as_mut().unwrap()[0]
        .secret
        .as_mut()
        .unwrap()
        .items
        .as_mut()
        .unwrap()[1]
        .mode = None;
    root.containers[0].security_context = Some(
        serde_json::from_value(serde_json::json!({"capabilities": {"drop": ["ALL"]}})).unwrap(),
    );
    assert_eq!(unreadable_mounts(&root).len(), 2);
    root.containers[0].security_context = None;
    assert_eq!(
        unreadable_mounts(&root),
        Vec::<String>::new(),
        "root with its default capabilities"
    );
}

// ---------------------------------------------------------------------------------------------
// Scraping and alerts: config/prometheus and config/alerts.
// ---------------------------------------------------------------------------------------------

/// The cell install with both optional components, as kustomize builds it.
fn monitored(kubectl: &Path) -> Vec<Value> {
    common::kustomize(kubectl, "config/samples/monitoring")
}

fn one_of_kind<T: DeserializeOwned + Serialize>(docs: &[Value], kind: &str) -> T {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind}");
    typed(found[0])
}

#[test]
fn the_service_monitor_scrapes_the_metrics_port_of_the_controller() {
    let kubectl = common::kubectl();
    let docs = monitored(&kubectl);
    let sm: ServiceMonitor = one_of_kind(&docs, "ServiceMonitor");
    // Without a namespaceSelector a ServiceMonitor selects Services of its own namespace.
    assert_eq!(sm.metadata.namespace.as_deref(), Some(CELL_NAMESPACE));
    let wanted = sm.spec.selector.match_labels.clone().unwrap_or_default();
    assert!(sm.spec.selector.match_expressions.is_none());
    let services: Vec<Service> = docs
        .iter()
        .filter(|d| d["kind"] == "Service" && d["metadata"]["namespace"] == CELL_NAMESPACE)
        .map(typed)
        .collect();
    let selected: Vec<&Service> = services
        .iter()
        .filter(|s| {
            let labels = s.metadata.labels.clone().unwrap_or_default();
            wanted.iter().all(|(k, v)| labels.get(k) == Some(v))
        })
        .collect();
    assert_eq!(selected.len(), 1, "exactly one Service is scraped");
    let svc = selected[0];
    assert_eq!(svc.metadata.name.as_deref(), Some("egress-address-metrics"));
    // The job is the Service's name, which the rules select on.
    assert!(sm.spec.job_label.is_none());

    let endpoint = &sm.spec.endpoints[..];
    assert_eq!(endpoint.len(), 1);
    assert_eq!(endpoint[0].path.as_deref(), Some("/metrics"));
    // Over TLS, with the token of the service account Prometheus runs as, which the controller
    // reviews; the certificate is self-signed unless one is mounted.
    assert_eq!(endpoint[0].scheme.as_deref(), Some("https"));
    assert_eq!(
        endpoint[0].bearer_token_file.as_deref(),
        Some("/var/run/secrets/kubernetes.io/serviceaccount/token")
    );
    assert_eq!(
        endpoint[0]
            .tls_config
            .as_ref()
            .and_then(|t| t.insecure_skip_verify),
        Some(true)
    );
    let port = svc
        .spec
        .as_ref()
        .unwrap()
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some(endpoint[0].port.as_str()))
        .unwrap_or_else(|| panic!("the Service has no port {}", endpoint[0].port));
    // ... which leads to the container's metrics port.
    let target = match &port.target_port {
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(name)) => name,
        other => panic!("targetPort by name, not {other:?}"),
    };
    let dep: Deployment = one_of_kind(&docs, "Deployment");
    let pod = dep.spec.unwrap().template;
    let container_ports: Vec<String> = pod.spec.as_ref().unwrap().containers[0]
        .ports
        .iter()
        .flatten()
        .filter_map(|p| p.name.clone())
        .collect();
    assert!(container_ports.contains(target), "{container_ports:?}");
    // ... on which the controller serves its metrics securely.
    let container = &pod.spec.as_ref().unwrap().containers[0];
    let number = container
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some(target.as_str()))
        .unwrap()
        .container_port;
    assert_eq!(port.port, number);
    assert_eq!(metrics_flag_port(container), Some(number));
    let selector = svc.spec.as_ref().unwrap().selector.clone().unwrap();
    let pod_labels = pod.metadata.unwrap().labels.unwrap();
    assert!(selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)));
}

/// The `###` headings of docs/operations.md's "Alerts" section, as the anchors a renderer makes
/// of them (lower case; spaces to hyphens; other punctuation dropped).
fn runbook_alert_anchors() -> BTreeMap<String, String> {
    common::runbook_section("Alerts")
        .lines()
        .filter_map(|l| l.strip_prefix("### "))
        .map(|h| {
            let anchor: String = h
                .trim()
                .to_lowercase()
                .chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                    _ => None,
                })
                .collect();
            (anchor, h.trim().to_string())
        })
        .collect()
}

fn alert_rules(kubectl: &Path) -> (PrometheusRule, Vec<Value>) {
    let docs = monitored(kubectl);
    let raw = docs
        .iter()
        .find(|d| d["kind"] == "PrometheusRule")
        .unwrap()
        .clone();
    (
        one_of_kind(&docs, "PrometheusRule"),
        raw["spec"]["groups"].as_array().unwrap().clone(),
    )
}

#[test]
fn every_alert_names_its_severity_and_a_runbook_section_that_exists() {
    let kubectl = common::kubectl();
    let (rule, _) = alert_rules(&kubectl);
    assert_eq!(rule.metadata.namespace.as_deref(), Some(CELL_NAMESPACE));
    let anchors = runbook_alert_anchors();
    let mut alerts = BTreeSet::new();
    for r in rule.spec.groups.iter().flat_map(|g| &g.rules) {
        assert!(alerts.insert(r.alert.clone()), "{} twice", r.alert);
        let severity = r.labels.get("severity").map(String::as_str);
        assert!(
            matches!(severity, Some("critical" | "warning")),
            "{}: severity {severity:?}",
            r.alert
        );
        for key in ["summary", "description", "runbook_url"] {
            assert!(
                r.annotations.get(key).is_some_and(|v| !v.trim().is_empty()),
                "{} has no {key}",
                r.alert
            );
        }
        let url = &r.annotations["runbook_url"];
        let (page, anchor) = url.split_once('#').expect("runbook_url has an anchor");
        assert!(page.ends_with("/docs/operations.md"), "{url}");
        assert_eq!(
            anchors.get(anchor),
            Some(&r.alert),
            "{}: {url} names no section \"### {}\" under \"## Alerts\" in docs/operations.md",
            r.alert,
            r.alert
        );
        // Every selector names the job the ServiceMonitor creates (the metrics Service's name).
        assert!(
            r.expr.contains("job=\"egress-address-metrics\""),
            "{}: {}",
            r.alert,
            r.expr
        );
        assert_eq!(
            r.expr.matches("job=").count(),
            r.expr.matches("job=\"egress-address-metrics\"").count(),
            "{}",
            r.alert
        );
    }
    let sections: BTreeSet<String> = anchors.into_values().collect();
    assert_eq!(sections, alerts, "one runbook section per alert, no more");
}

/// The promtool that `.ci/install-promtool` puts in `.venv` (or `$PROMTOOL`); `None` only
/// outside CI.
fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The unit tests of the rules, for promtool: `tests/alerts_test.yaml`.
const ALERT_TESTS: &str = "crates/egress-address-lab/tests/alerts_test.yaml";

#[test]
fn every_alert_passes_promtool_and_fires_exactly_when_it_should() {
    let kubectl = common::kubectl();
    let promtool = localplane::testing::judges::promtool();
    let (rule, groups) = alert_rules(&kubectl);
    let dir = tempfile::tempdir().unwrap();
    // JSON is YAML: the PrometheusRule's groups, as the plain rules file Prometheus reads.
    std::fs::write(
        dir.path().join("rules.yaml"),
        serde_json::to_string_pretty(&serde_json::json!({ "groups": groups })).unwrap(),
    )
    .unwrap();
    std::fs::copy(
        common::root().join(ALERT_TESTS),
        dir.path().join("tests.yaml"),
    )
    .unwrap();

    let (ok, out) =
        run(Command::new(&promtool)
            .current_dir(dir.path())
            .args(["check", "rules", "rules.yaml"]));
    assert!(ok, "promtool check rules:\n{out}");
    let (ok, out) =
        run(Command::new(&promtool)
            .current_dir(dir.path())
            .args(["test", "rules", "tests.yaml"]));
    assert!(ok, "promtool test rules:\n{out}");

    // Every alert is tested both ways: silent on the healthy cell, firing on its own series.
    let tests = common::documents(ALERT_TESTS).remove(0);
    let mut fires = BTreeSet::new();
    let mut silent_when_healthy = BTreeSet::new();
    for group in tests["tests"].as_array().unwrap() {
        let healthy = group["name"] == "a healthy cell";
        for case in group["alert_rule_test"].as_array().unwrap() {
            let name = case["alertname"].as_str().unwrap().to_string();
            let expected = case["exp_alerts"].as_array().map_or(0, Vec::len);
            if healthy {
                assert_eq!(expected, 0, "{name} fires on the healthy cell");
                silent_when_healthy.insert(name);
            } else if expected > 0 {
                fires.insert(name);
            }
        }
    }
    let alerts: BTreeSet<String> = rule
        .spec
        .groups
        .iter()
        .flat_map(|g| &g.rules)
        .map(|r| r.alert.clone())
        .collect();
    assert_eq!(fires, alerts, "alerts with a test that makes them fire");
    assert_eq!(
        silent_when_healthy, alerts,
        "alerts checked silent on the healthy cell"
    );
}

// ---------------------------------------------------------------------------------------------
// Who reaches the metrics: the secure port, the reader role, the NetworkPolicy.
// ---------------------------------------------------------------------------------------------

/// The port a `--<flag>=[host]:port` argument of the container binds.
fn flag_port(c: &Container, flag: &str) -> Option<i32> {
    c.args
        .iter()
        .flatten()
        .find_map(|a| a.strip_prefix(&format!("--{flag}=")))?
        .rsplit(':')
        .next()?
        .parse()
        .ok()
}

fn metrics_flag_port(c: &Container) -> Option<i32> {
    flag_port(c, "metrics-bind-address")
}

type Labels = BTreeMap<String, String>;

/// Whether a label selector selects `labels`, as the API server evaluates one (an empty
/// selector selects everything).
fn selects(selector: &LabelSelector, labels: &Labels) -> bool {
    let by_labels = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let by_expressions = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.clone().unwrap_or_default();
        let value = labels.get(&e.key);
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            other => panic!("no label selector operator {other}"),
        }
    });
    by_labels && by_expressions
}

/// A connection a NetworkPolicy is asked about: from a pod (its labels, and its namespace's
/// labels and name) to a TCP port of a pod.
struct Connection<'a> {
    from_namespace: &'a str,
    from_namespace_labels: &'a Labels,
    from_pod_labels: &'a Labels,
    to_pod_labels: &'a Labels,
    to_port: i32,
    /// The name the destination container gives that port, if any.
    to_port_name: Option<&'a str>,
}

/// What `policy` (in namespace `ns`) says of `c`: `None` when it does not isolate the
/// destination for ingress (it does not select the pod, or restricts only egress), else whether
/// one of its ingress rules admits the connection. An `ipBlock` peer is taken to admit any
/// source, as a pod's address may fall in it.
fn admits(policy: &NetworkPolicy, ns: &str, c: &Connection<'_>) -> Option<bool> {
    let spec = policy.spec.as_ref()?;
    let types = spec
        .policy_types
        .clone()
        .unwrap_or_else(|| vec!["Ingress".into()]);
    if !types.iter().any(|t| t == "Ingress")
        || !selects(
            &spec.pod_selector.clone().unwrap_or_default(),
            c.to_pod_labels,
        )
    {
        return None;
    }
    let peer_matches = |peer: &k8s_openapi::api::networking::v1::NetworkPolicyPeer| {
        if peer.ip_block.is_some() {
            return true;
        }
        let namespace_ok = match &peer.namespace_selector {
            Some(sel) => selects(sel, c.from_namespace_labels),
            None => c.from_namespace == ns,
        };
        let pod_ok = peer
            .pod_selector
            .as_ref()
            .is_none_or(|sel| selects(sel, c.from_pod_labels));
        namespace_ok && pod_ok
    };
    let port_matches = |p: &k8s_openapi::api::networking::v1::NetworkPolicyPort| {
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
        if p.protocol.as_deref().unwrap_or("TCP") != "TCP" {
            return false;
        }
        match &p.port {
            None => true,
            Some(IntOrString::Int(n)) => (*n..=p.end_port.unwrap_or(*n)).contains(&c.to_port),
            Some(IntOrString::String(name)) => c.to_port_name == Some(name.as_str()),
        }
    };
    Some(spec.ingress.iter().flatten().any(|rule| {
        let from_ok = rule
            .from
            .as_ref()
            .is_none_or(|f| f.is_empty() || f.iter().any(peer_matches));
        let port_ok = rule
            .ports
            .as_ref()
            .is_none_or(|p| p.is_empty() || p.iter().any(port_matches));
        from_ok && port_ok
    }))
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn the_policy_check_follows_the_network_policy_rules() {
    static EMPTY: LazyLock<Labels> = LazyLock::new(Labels::new);
    static APP: LazyLock<Labels> = LazyLock::new(|| labels(&[("app", "a")]));
    static MON: LazyLock<Labels> = LazyLock::new(|| labels(&[("metrics", "enabled")]));
    let policy = |spec: Value| -> NetworkPolicy {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "spec": spec}))
            .unwrap()
    };
    // From any pod of namespace `mon` (labelled as given) to a pod labelled app=a.
    let to = |port, from_ns_labels: &'static Labels| Connection {
        from_namespace: "mon",
        from_namespace_labels: from_ns_labels,
        from_pod_labels: &EMPTY,
        to_pod_labels: &APP,
        to_port: port,
        to_port_name: (port == 8443).then_some("https"),
    };

    let by_namespace = policy(serde_json::json!({
        "podSelector": {"matchLabels": {"app": "a"}}, "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"metrics": "enabled"}}}],
                     "ports": [{"port": 8443}]}]}));
    assert_eq!(admits(&by_namespace, "ns", &to(8443, &MON)), Some(true));
    assert_eq!(admits(&by_namespace, "ns", &to(8443, &EMPTY)), Some(false));
    assert_eq!(admits(&by_namespace, "ns", &to(8081, &MON)), Some(false));
    // By the port's name, and a range.
    let named = policy(serde_json::json!({"podSelector": {},
        "ingress": [{"ports": [{"port": "https"}]}]}));
    assert_eq!(admits(&named, "ns", &to(8443, &EMPTY)), Some(true));
    assert_eq!(admits(&named, "ns", &to(8081, &EMPTY)), Some(false));
    let range = policy(serde_json::json!({"podSelector": {},
        "ingress": [{"ports": [{"port": 8000, "endPort": 8100}]}]}));
    assert_eq!(admits(&range, "ns", &to(8081, &EMPTY)), Some(true));
    // A rule without `from` admits every source; an ipBlock may be anyone's address.
    let anyone =
        policy(serde_json::json!({"podSelector": {}, "ingress": [{"ports": [{"port": 8443}]}]}));
    assert_eq!(admits(&anyone, "ns", &to(8443, &EMPTY)), Some(true));
    let block = policy(serde_json::json!({"podSelector": {},
        "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]}));
    assert_eq!(admits(&block, "ns", &to(8081, &EMPTY)), Some(true));
    // A pod selector alone means pods of the policy's own namespace.
    let same_namespace = policy(serde_json::json!({"podSelector": {},
        "ingress": [{"from": [{"podSelector": {}}]}]}));
    assert_eq!(admits(&same_namespace, "ns", &to(8443, &MON)), Some(false));
    assert_eq!(admits(&same_namespace, "mon", &to(8443, &MON)), Some(true));
    // No ingress rule isolates and admits nothing; an egress-only policy or another pod's does
    // not isolate.
    let closed = policy(serde_json::json!({"podSelector": {}, "policyTypes": ["Ingress"]}));
    assert_eq!(admits(&closed, "ns", &to(8443, &MON)), Some(false));
    let egress = policy(serde_json::json!({"podSelector": {}, "policyTypes": ["Egress"]}));
    assert_eq!(admits(&egress, "ns", &to(8443, &MON)), None);
    let other = policy(serde_json::json!({"podSelector": {"matchLabels": {"app": "b"}}}));
    assert_eq!(admits(&other, "ns", &to(8443, &MON)), None);
    let expression = policy(serde_json::json!({"podSelector": {"matchExpressions": [
        {"key": "app", "operator": "In", "values": ["a", "c"]}]}}));
    assert_eq!(admits(&expression, "ns", &to(8443, &MON)), Some(false));
}

#[test]
fn the_network_policy_admits_only_scrapes_from_monitoring_namespaces() {
    let kubectl = common::kubectl();
    let docs = common::kustomize(&kubectl, "config/egress-address");
    let policy: NetworkPolicy = one_of_kind(&docs, "NetworkPolicy");
    assert_eq!(policy.metadata.namespace.as_deref(), Some(CELL_NAMESPACE));
    let dep: Deployment = one_of_kind(&docs, "Deployment");
    let template = dep.spec.unwrap().template;
    let pod_labels: Labels = template.metadata.unwrap().labels.unwrap();
    let pod = template.spec.unwrap();
    let c = &pod.containers[0];
    let named = |name: &str| {
        c.ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("container port {name}"))
            .container_port
    };
    let (https, health) = (named("https"), named("health"));
    assert_eq!(metrics_flag_port(c), Some(https));
    assert_eq!(flag_port(c, "health-probe-bind-address"), Some(health));

    let monitoring = labels(&[
        ("metrics", "enabled"),
        ("kubernetes.io/metadata.name", "monitoring"),
    ]);
    let elsewhere = labels(&[("kubernetes.io/metadata.name", "tenant")]);
    let own = labels(&[("kubernetes.io/metadata.name", CELL_NAMESPACE)]);
    let prometheus = labels(&[("app.kubernetes.io/name", "prometheus")]);
    let ask = |from_namespace: &str, ns_labels: &Labels, port: i32| {
        let name = c
            .ports
            .iter()
            .flatten()
            .find(|p| p.container_port == port)
            .and_then(|p| p.name.clone());
        admits(
            &policy,
            CELL_NAMESPACE,
            &Connection {
                from_namespace,
                from_namespace_labels: ns_labels,
                from_pod_labels: &prometheus,
                to_pod_labels: &pod_labels,
                to_port: port,
                to_port_name: name.as_deref(),
            },
        )
    };
    assert_eq!(
        ask("monitoring", &monitoring, https),
        Some(true),
        "a scrape"
    );
    assert_eq!(
        ask("tenant", &elsewhere, https),
        Some(false),
        "an unlabelled namespace"
    );
    assert_eq!(
        ask(CELL_NAMESPACE, &own, https),
        Some(false),
        "its own namespace"
    );
    for port in [health, 8080, 9443, 1] {
        assert_eq!(
            ask("monitoring", &monitoring, port),
            Some(false),
            "port {port}"
        );
    }
    // The probes go to the health port, which the policy does not admit: they come from the
    // pod's node, which no NetworkPolicy restricts (the runbook says so, and what to do where a
    // CNI does).
    let probe_port = |probe: &Option<k8s_openapi::api::core::v1::Probe>| match &probe
        .as_ref()?
        .http_get
        .as_ref()?
        .port
    {
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(n) => Some(named(n)),
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n) => Some(*n),
    };
    assert_eq!(probe_port(&c.liveness_probe), Some(health));
    assert_eq!(probe_port(&c.readiness_probe), Some(health));
    assert_ne!(health, https);
    let health_doc = common::runbook_section("Health");
    assert!(
        health_doc.contains("NetworkPolicy") && health_doc.contains("node"),
        "the runbook says why the probes pass the NetworkPolicy:\n{health_doc}"
    );
    // Nothing going out is restricted: the controller reaches the cell and IPAM.
    assert_eq!(
        policy.spec.as_ref().unwrap().policy_types.as_deref(),
        Some(&["Ingress".to_string()][..])
    );
    let metrics_doc = common::runbook_section("Metrics (`/metrics`)");
    assert!(
        metrics_doc.contains("metrics=enabled"),
        "the runbook names the label to put on the Prometheus namespace"
    );
}

#[test]
fn the_reader_role_grants_get_on_metrics_and_the_controller_may_ask_the_reviews() {
    let kubectl = common::kubectl();
    let docs = common::kustomize(&kubectl, "config/egress-address");
    let named = |kind: &str, name: &str| -> Value {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name}"))
            .clone()
    };
    let reader: ClusterRole = typed(&named("ClusterRole", "egress-address-metrics-reader"));
    let rules = reader.rules.unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        (rules[0].non_resource_urls.as_deref(), &rules[0].verbs[..]),
        (
            Some(&["/metrics".to_string()][..]),
            &["get".to_string()][..]
        )
    );
    assert!(rules[0].resources.is_none() && rules[0].api_groups.is_none());
    // Bound by the operator to whoever scrapes; the install binds it to no one.
    for d in docs
        .iter()
        .filter(|d| d["kind"].as_str().unwrap().ends_with("Binding"))
    {
        assert_ne!(d["roleRef"]["name"], "egress-address-metrics-reader", "{d}");
    }

    let auth: ClusterRole = typed(&named("ClusterRole", "egress-address-metrics-auth"));
    let rules: Vec<(Vec<String>, Vec<String>, Vec<String>)> = auth
        .rules
        .unwrap()
        .into_iter()
        .map(|r| (r.api_groups.unwrap(), r.resources.unwrap(), r.verbs))
        .collect();
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        rules,
        vec![
            (
                s(&["authentication.k8s.io"]),
                s(&["tokenreviews"]),
                s(&["create"])
            ),
            (
                s(&["authorization.k8s.io"]),
                s(&["subjectaccessreviews"]),
                s(&["create"])
            ),
        ]
    );
    let binding: ClusterRoleBinding =
        typed(&named("ClusterRoleBinding", "egress-address-metrics-auth"));
    assert_eq!(binding.role_ref.name, "egress-address-metrics-auth");
    let subjects = binding.subjects.unwrap();
    assert_eq!(subjects.len(), 1);
    assert_eq!(
        (
            subjects[0].kind.as_str(),
            subjects[0].name.as_str(),
            subjects[0].namespace.as_deref()
        ),
        (
            "ServiceAccount",
            "egress-address-controller",
            Some(CELL_NAMESPACE)
        )
    );
}

// ---------------------------------------------------------------------------------------------
// The image: Dockerfile, and the static binary it builds.
// ---------------------------------------------------------------------------------------------

/// One `FROM` and the instructions after it, continuation lines joined, comments dropped.
#[derive(Debug)]
struct Stage {
    from: Vec<String>,
    instructions: Vec<(String, Vec<String>)>,
}

impl Stage {
    fn args_of(&self, instruction: &str) -> Vec<String> {
        self.instructions
            .iter()
            .filter(|(i, _)| i == instruction)
            .map(|(_, args)| args.join(" "))
            .collect()
    }

    /// The image, the `--platform` and the `AS` name of the `FROM` line.
    fn base(&self) -> (String, Option<String>, Option<String>) {
        let mut platform = None;
        let mut words = vec![];
        for w in &self.from {
            match w.strip_prefix("--platform=") {
                Some(p) => platform = Some(p.to_string()),
                None => words.push(w.clone()),
            }
        }
        let name = match words.as_slice() {
            [_, kw, name] if kw.eq_ignore_ascii_case("as") => Some(name.clone()),
            [_] => None,
            other => panic!("FROM {other:?}"),
        };
        (words[0].clone(), platform, name)
    }
}

struct Dockerfile {
    stages: Vec<Stage>,
}

impl Dockerfile {
    fn load() -> Dockerfile {
        let text = std::fs::read_to_string(common::root().join("Dockerfile")).unwrap();
        let mut logical = vec![];
        let mut current = String::new();
        for line in text.lines() {
            let trimmed = line.trim();
            if current.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
                continue;
            }
            match trimmed.strip_suffix('\\') {
                Some(head) => {
                    current.push_str(head);
                    current.push(' ');
                }
                None => {
                    current.push_str(trimmed);
                    logical.push(std::mem::take(&mut current));
                }
            }
        }
        assert!(current.is_empty(), "the Dockerfile ends in a continuation");
        let mut stages: Vec<Stage> = vec![];
        for line in logical {
            let mut words = line.split_whitespace().map(str::to_string);
            let instruction = words.next().unwrap().to_uppercase();
            let args: Vec<String> = words.collect();
            if instruction == "FROM" {
                stages.push(Stage {
                    from: args,
                    instructions: vec![],
                });
            } else {
                stages
                    .last_mut()
                    .unwrap_or_else(|| panic!("{instruction} before the first FROM"))
                    .instructions
                    .push((instruction, args));
            }
        }
        Dockerfile { stages }
    }
}

/// The paths `.dockerignore` keeps out of the build context (plain names, as the file uses).
fn docker_ignored() -> Vec<String> {
    std::fs::read_to_string(common::root().join(".dockerignore"))
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.trim_matches('/').to_string())
        .collect()
}

/// `members = [...]` of the workspace's Cargo.toml.
fn workspace_members() -> Vec<String> {
    let text = std::fs::read_to_string(common::root().join("Cargo.toml")).unwrap();
    let start = text.find("members = [").expect("workspace members") + "members = [".len();
    let end = start + text[start..].find(']').unwrap();
    text[start..end]
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

/// The script both the image and CI build the static binary with.
const BUILD_SCRIPT: &str = ".ci/build-static-controller";
const BINARY: &str = "egress-address-controller";

#[test]
fn the_dockerfile_builds_every_platform_from_files_that_exist() {
    let kubectl = common::kubectl();
    let df = Dockerfile::load();
    let root = common::root();
    assert_eq!(df.stages.len(), 2, "a build stage and the final image");
    for stage in &df.stages {
        let (image, _, _) = stage.base();
        let (_, digest) = image
            .split_once("@sha256:")
            .unwrap_or_else(|| panic!("{image} is not pinned by digest"));
        assert!(
            digest.len() == 64 && digest.chars().all(|c| c.is_ascii_hexdigit()),
            "{image}"
        );
    }

    // The build stage runs on the build machine's platform and cross-compiles for the target.
    let build = &df.stages[0];
    let (_, platform, name) = build.base();
    assert_eq!(platform.as_deref(), Some("$BUILDPLATFORM"), "no emulation");
    let name = name.expect("the build stage is named");
    let arg_at = build
        .instructions
        .iter()
        .position(|(i, a)| i == "ARG" && a == &["TARGETARCH"])
        .expect("ARG TARGETARCH in the build stage");

    // Every file it copies from the context exists and is not kept out of the context.
    let ignored = docker_ignored();
    let mut copied = vec![];
    for (i, args) in &build.instructions {
        if i != "COPY" {
            continue;
        }
        let (dest, sources) = args.split_last().unwrap();
        for src in sources {
            assert!(!src.starts_with("--"), "COPY {args:?} in the build stage");
            assert!(
                root.join(src).exists(),
                "COPY {src}: no such file in the repository"
            );
            let first = src.trim_start_matches("./").split('/').next().unwrap();
            assert!(
                !ignored.iter().any(|x| x == first),
                "{src} is in .dockerignore"
            );
            copied.push((src.trim_end_matches('/').to_string(), dest.clone()));
        }
    }
    for member in workspace_members() {
        assert!(
            copied
                .iter()
                .any(|(src, _)| member.starts_with(&format!("{src}/"))),
            "workspace member {member} is not copied into the build"
        );
    }
    for manifest in ["Cargo.toml", "Cargo.lock"] {
        assert!(copied.iter().any(|(src, _)| src == manifest), "{manifest}");
    }

    // The build runs the script CI runs, for the target's architecture, after ARG TARGETARCH.
    let (script_src, script_dest) = copied
        .iter()
        .find(|(src, _)| src == BUILD_SCRIPT)
        .expect("the build script is copied");
    assert_eq!(script_dest, "/usr/local/bin/build-static-controller");
    let script = std::fs::read_to_string(root.join(script_src)).unwrap();
    assert!(script.contains(&format!("--bin {BINARY}")));
    assert!(script.contains("amd64)") && script.contains("arm64)"));
    let runs: Vec<(usize, Vec<String>)> = build
        .instructions
        .iter()
        .enumerate()
        .filter(|(_, (i, _))| i == "RUN")
        .map(|(n, (_, a))| {
            (
                n,
                a.iter().map(|w| w.trim_matches('"').to_string()).collect(),
            )
        })
        .collect();
    assert!(
        runs.iter()
            .any(|(n, a)| *n > arg_at
                && a[..] == ["build-static-controller", "setup", "$TARGETARCH"]),
        "{runs:?}"
    );
    let outdir = runs
        .iter()
        .find_map(|(n, a)| match &a[..] {
            [s, b, arch, profile, out]
                if *n > arg_at
                    && s == "build-static-controller"
                    && b == "build"
                    && arch == "$TARGETARCH"
                    && profile == "release" =>
            {
                Some(out.clone())
            }
            _ => None,
        })
        .expect("RUN build-static-controller build \"$TARGETARCH\" release OUTDIR");

    // The final image: distroless static, non-root, holding the binary the build made, which is
    // what the Deployment runs.
    let last = &df.stages[1];
    let (image, _, _) = last.base();
    assert!(
        image.starts_with("gcr.io/distroless/static-debian12:nonroot@"),
        "{image}"
    );
    let from_build = format!("--from={name}");
    let copies: Vec<Vec<String>> = last
        .instructions
        .iter()
        .filter(|(i, _)| i == "COPY")
        .map(|(_, a)| a.clone())
        .collect();
    assert_eq!(
        copies,
        [vec![
            from_build,
            format!("{outdir}/{BINARY}"),
            format!("/{BINARY}")
        ]]
    );
    assert_eq!(last.args_of("ENTRYPOINT"), [format!("[\"/{BINARY}\"]")]);
    assert_eq!(image_user(), (65532, 65532));
    let manifest = std::fs::read_to_string(root.join("crates/egress-address/Cargo.toml")).unwrap();
    assert!(manifest.contains(&format!("name = \"{BINARY}\"")));
    let pod = cell_pod(&kubectl);
    assert_eq!(pod.containers[0].command, Some(vec![format!("/{BINARY}")]));
    let psc = pod.security_context.unwrap();
    assert_eq!(
        (psc.run_as_user, psc.run_as_group),
        (Some(65532), Some(65532))
    );
}

/// What the ELF headers of a Linux executable say about how it is linked.
#[derive(Debug, PartialEq)]
struct Linking {
    machine: u16,
    interpreter: Option<String>,
    needed: usize,
}

fn linking(elf: &[u8]) -> Linking {
    let u16_at = |o: usize| u16::from_le_bytes(elf[o..o + 2].try_into().unwrap());
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap()) as usize;
    assert_eq!(&elf[..4], b"\x7fELF", "not an ELF file");
    assert_eq!((elf[4], elf[5]), (2, 1), "a 64-bit little-endian ELF");
    let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36) as usize, u16_at(0x38) as usize);
    let mut interpreter = None;
    let mut needed = 0;
    for h in (0..phnum).map(|i| phoff + i * phentsize) {
        let (kind, offset, size) = (u32_at(h), u64_at(h + 8), u64_at(h + 32));
        const PT_DYNAMIC: u32 = 2;
        const PT_INTERP: u32 = 3;
        const DT_NEEDED: u64 = 1;
        match kind {
            PT_INTERP => {
                let path = &elf[offset..offset + size];
                interpreter = Some(String::from_utf8_lossy(path).trim_end_matches('\0').into());
            }
            PT_DYNAMIC => {
                for entry in elf[offset..offset + size].chunks_exact(16) {
                    match u64::from_le_bytes(entry[..8].try_into().unwrap()) {
                        0 => break,
                        DT_NEEDED => needed += 1,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Linking {
        machine: u16_at(0x12),
        interpreter,
        needed,
    }
}

/// The binary `.ci/build-static-controller build` made for this machine (`.ci/test` builds it
/// and names it in `$EGRESS_ADDRESS_STATIC_CONTROLLER`); the test fails without it.
fn static_controller() -> PathBuf {
    std::env::var_os("EGRESS_ADDRESS_STATIC_CONTROLLER")
        .map(PathBuf::from)
        .expect("EGRESS_ADDRESS_STATIC_CONTROLLER is not set: `bash .ci/test` builds the image's binary and names it there")
}

#[test]
fn the_elf_reader_sees_a_dynamically_linked_executable_for_what_it_is() {
    // This very test program is linked the ordinary way: against the C library, through the
    // dynamic loader.
    let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    let l = linking(&me);
    assert!(l.interpreter.is_some() && l.needed > 0, "{l:?}");
}

/// An empty directory holding only `files`, for `chroot`.
fn empty_root(files: &[(&str, &[u8])]) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    for (path, content) in files {
        let p = root.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, content).unwrap();
    }
    root
}

/// `chroot ROOT ARGS...` with an empty environment (so chroot is found here, not on its PATH).
fn chrooted(root: &Path, args: &[&str]) -> Command {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let chroot = std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|dir| dir.join("chroot"))
        .find(|p| p.is_file())
        .expect("chroot (coreutils) is installed");
    let mut cmd = Command::new(chroot);
    cmd.arg(root).args(args).env_clear();
    cmd
}

#[test]
fn the_image_binary_is_static_and_runs_in_an_empty_root() {
    let binary = static_controller();
    let elf = std::fs::read(&binary).unwrap_or_else(|e| panic!("{}: {e}", binary.display()));
    let expected_machine = match std::env::consts::ARCH {
        "x86_64" => 62,
        "aarch64" => 183,
        other => panic!("no image is built for {other}"),
    };
    assert_eq!(
        linking(&elf),
        Linking {
            machine: expected_machine,
            interpreter: None,
            needed: 0
        },
        "{} must need no dynamic loader and no shared library",
        binary.display()
    );

    // An empty root: no C library, no loader, no CA files of the system, not even /dev. The
    // kubeconfig names its own CA, as the runbook's does.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://cell.test:{port}\n    certificate-authority: /ca.pem\nusers:\n- name: u\n  user:\n    token: not-a-secret\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n"
    );
    let ca = localplane::TlsMaterial::generate().unwrap().ca_pem;
    let root = empty_root(&[
        ("egress-address-controller", elf.as_slice()),
        // The kubelet writes /etc/hosts into every pod; name lookups must work from it alone.
        ("etc/hosts", b"127.0.0.1 cell.test\n".as_slice()),
        ("kubeconfig", kubeconfig.as_bytes()),
        ("ca.pem", ca.as_bytes()),
    ]);
    let binary_in_root = root.path().join("egress-address-controller");
    let mut perms = std::fs::metadata(&binary_in_root).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&binary_in_root, perms).unwrap();

    let (ok, out) = run(&mut chrooted(
        root.path(),
        &["/egress-address-controller", "--version"],
    ));
    assert!(
        !out.contains("Operation not permitted"),
        "the test runs as root (as CI does) to chroot: {out}"
    );
    assert!(ok, "--version in an empty root:\n{out}");
    assert!(out.starts_with("egress-address-controller "), "{out}");
    let (ok, out) = run(&mut chrooted(
        root.path(),
        &["/egress-address-controller", "--help"],
    ));
    assert!(ok && out.contains("--ipam-kubeconfig"), "--help:\n{out}");

    // Started for real, it resolves the kubeconfig's server from /etc/hosts, seeds its random
    // numbers and opens a TLS connection, all without a file of the operating system.
    let mut controller = chrooted(
        root.path(),
        &[
            "/egress-address-controller",
            "--address-class-ipv6=datum-egress-shard-address-ipv6",
            "--location=dfw",
            "--platform-project=platform",
            "--ipam-kubeconfig=/kubeconfig",
            "--kubeconfig=/kubeconfig",
            "--leader-elect=false",
            "--metrics-bind-address=0",
            "--health-probe-bind-address=0",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let first = listener.accept().map(|(mut conn, _)| {
            let mut byte = [0u8; 1];
            conn.read_exact(&mut byte).map(|_| byte[0])
        });
        let _ = tx.send(first);
    });
    // Until the first byte arrives, the controller exits, or a minute has passed.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let first = loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(first) => break Some(first),
            Err(_) if controller.try_wait().unwrap().is_some() => break rx.try_recv().ok(),
            Err(_) if std::time::Instant::now() > deadline => break None,
            Err(_) => {}
        }
    };
    let exited = controller.try_wait().unwrap();
    let _ = controller.kill();
    let _ = controller.wait();
    let mut stderr = String::new();
    let _ = controller
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr);
    match first {
        // 0x16: a TLS handshake record, the ClientHello.
        Some(Ok(Ok(0x16))) => {}
        other => panic!(
            "the controller in an empty root did not open a TLS connection to cell.test \
             ({other:?}, exited: {exited:?}); its log:\n{stderr}"
        ),
    }
}
