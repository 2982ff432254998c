//! Which API server plays the cell (`--cell local|real`, for `demo` and `bench`), and what the
//! real one needs before a controller can run on it as its ServiceAccount: the CRD and the
//! shipped RBAC (`config/rbac`, placed in the controller's namespace as `config/egress-address`
//! places it), created through the API as the admin.

use std::path::Path;

use anyhow::Context;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::{Value, json};

/// The namespace the shipped install puts the controller (and its Lease) in.
pub const SYSTEM_NAMESPACE: &str = "egress-address-system";

/// Which API server plays the cell.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CellKind {
    /// localplane: starts in a second, counts its requests itself.
    #[default]
    Local,
    /// kube-apiserver 1.37 and etcd, built from Go modules by testcluster/ (built on first use;
    /// needs Go). IPAM is localplane's either way.
    Real,
}

/// A file of the shipped configuration that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ConfigError {
    pub path: String,
    pub message: String,
}

/// The resources of `config/rbac/kustomization.yaml` (`dir`) with the namespace
/// `config/egress-address` gives them (`system` is the kustomize placeholder).
pub fn shipped_rbac(dir: &Path) -> Result<Vec<Value>, ConfigError> {
    let read = |path: &Path| {
        std::fs::read_to_string(path).map_err(|e| ConfigError {
            path: path.display().to_string(),
            message: e.to_string(),
        })
    };
    let parse = |path: &Path, text: &str| {
        serde_saphyr::from_multiple::<Value>(text).map_err(|e| ConfigError {
            path: path.display().to_string(),
            message: e.to_string(),
        })
    };
    let kustomization = dir.join("kustomization.yaml");
    let k = parse(&kustomization, &read(&kustomization)?)?;
    let resources: Vec<String> = k
        .first()
        .and_then(|k| k["resources"].as_array())
        .map(|r| {
            r.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let mut out = Vec::new();
    for file in resources {
        let path = dir.join(&file);
        for mut doc in parse(&path, &read(&path)?)?
            .into_iter()
            .filter(Value::is_object)
        {
            if doc["metadata"].get("namespace").is_some() {
                doc["metadata"]["namespace"] = json!(SYSTEM_NAMESPACE);
            }
            if let Some(subjects) = doc["subjects"].as_array_mut() {
                for s in subjects {
                    if s.get("namespace").is_some() {
                        s["namespace"] = json!(SYSTEM_NAMESPACE);
                    }
                }
            }
            out.push(doc);
        }
    }
    Ok(out)
}

/// Prepares a fresh real control plane for a controller as its ServiceAccount: the EgressShard
/// CRD (established), the namespaces `namespaces` and the controller's, and the shipped RBAC.
pub async fn install(real: &realcell::RealCell, namespaces: &[&str]) -> anyhow::Result<()> {
    let config = realcell::workspace_root().join("config");
    real.install_crds(&config.join("crd/network.datumapis.com_egressshards.yaml"))
        .await?;
    let admin = real.client(realcell::Identity::Admin).await?;
    let mut objects: Vec<Value> = namespaces
        .iter()
        .chain([&SYSTEM_NAMESPACE])
        .map(|n| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}))
        .collect();
    objects.extend(shipped_rbac(&config.join("rbac"))?);
    for object in objects {
        create(&admin, &object).await?;
    }
    Ok(())
}

/// Creates `object` (a kind of the shipped RBAC, or a Namespace) as it is, or finds it there.
async fn create(client: &kube::Client, object: &Value) -> anyhow::Result<()> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let plural = match kind {
        "Namespace" => "namespaces",
        "ServiceAccount" => "serviceaccounts",
        "Role" => "roles",
        "RoleBinding" => "rolebindings",
        "ClusterRole" => "clusterroles",
        "ClusterRoleBinding" => "clusterrolebindings",
        other => anyhow::bail!("no collection known for kind {other} ({name})"),
    };
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let ar = ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let obj: DynamicObject = serde_json::from_value(object.clone())
        .with_context(|| format!("{kind} {name} as an object"))?;
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating {kind} {name}")),
    }
}
