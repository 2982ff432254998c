//! Every kustomization builds with the real kustomize, and what it builds is what an operator
//! expects: valid objects for their kinds, the right credential, a pod that refuses to start
//! half-configured, and no grant it does not need.

use crate::common;

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use serde::Serialize;
use serde::de::DeserializeOwned;
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
            "Deployment" => drop(typed::<Deployment>(d)),
            "Service" => drop(typed::<Service>(d)),
            "ServiceAccount" => drop(typed::<ServiceAccount>(d)),
            "ClusterRole" => drop(typed::<ClusterRole>(d)),
            "ClusterRoleBinding" => drop(typed::<ClusterRoleBinding>(d)),
            "Role" => drop(typed::<Role>(d)),
            "RoleBinding" => drop(typed::<RoleBinding>(d)),
            "CustomResourceDefinition" => drop(typed::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>(d)),
            "IPPool" => drop(typed::<egress_api::ipam::IPPool>(d)),
            "IPClass" => drop(typed::<egress_api::ipam::IPClass>(d)),
            other => panic!("unexpected kind {other} in a kustomization"),
        }
    }
}

/// Every kustomization in `config/` that can be built on its own (the component is built by the overlay).
const KUSTOMIZATIONS: [&str; 4] = [
    "config/egress-address",
    "config/rbac",
    "config/crd",
    "config/ipam",
];

#[test]
fn every_kustomization_builds_into_valid_objects() {
    let Some(kubectl) = common::kubectl() else {
        return;
    };
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
    let Some(kubectl) = common::kubectl() else {
        return;
    };
    let docs = common::kustomize(&kubectl, "config/egress-address");
    let kinds: BTreeSet<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        BTreeSet::from([
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount"
        ]),
        "the CRD and the Milo grant stay out of the cell install"
    );
    for d in &docs {
        if !d["kind"].as_str().unwrap().starts_with("Cluster") {
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
    let Some(kubectl) = common::kubectl() else {
        return;
    };
    for dir in KUSTOMIZATIONS {
        for d in common::kustomize(&kubectl, dir) {
            assert_ne!(
                d["metadata"]["name"], "egress-address-ipam",
                "{dir} must not carry the Milo grant"
            );
        }
    }
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
