//! Shared by the manifest tests: finding the real kubectl and building kustomizations with it.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The kubectl 1.37 that `.ci/install-kubectl` puts in `.venv` (or `$KUBECTL`). `None` only
/// outside CI, where the test then says it skipped; in CI a missing kubectl is a failure.
pub fn kubectl() -> Option<PathBuf> {
    installed_tool("KUBECTL", ".venv/bin/kubectl", ".ci/install-kubectl")
}

/// A tool a `.ci/install-*` script installs: at `$env_var`, else at `default` in the repository.
/// `None` only outside CI, where the test then says it skipped; in CI a missing tool fails.
pub fn installed_tool(env_var: &str, default: &str, installer: &str) -> Option<PathBuf> {
    let candidate = std::env::var_os(env_var)
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(default));
    if candidate.is_file() {
        return Some(candidate);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{} not found (run {installer})",
        candidate.display()
    );
    eprintln!(
        "SKIPPED: {} not found (run {installer})",
        candidate.display()
    );
    None
}

/// `kubectl kustomize <dir>`, as JSON documents.
pub fn kustomize(kubectl: &Path, dir: &str) -> Vec<Value> {
    let out = Command::new(kubectl)
        .arg("kustomize")
        .arg(root().join(dir))
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kustomize {dir} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_saphyr::from_multiple::<Value>(&String::from_utf8_lossy(&out.stdout))
        .expect("kustomize prints YAML")
        .into_iter()
        .filter(|d| d.is_object())
        .collect()
}

/// The YAML documents of a file, as JSON.
pub fn documents(path: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(root().join(path)).unwrap();
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap()
        .into_iter()
        .filter(|d| d.is_object())
        .collect()
}

/// The UID of the cell's kube-system namespace (the controller's default cell identity),
/// creating the namespace first if this localplane has none.
pub fn kube_system_uid(cell: &localplane::Plane) -> String {
    let key = localplane::ResourceKey::new("", "namespaces");
    if cell.object(&key, None, "kube-system").is_none() {
        cell.apply_object(serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}}))
            .unwrap();
    }
    cell.object(&key, None, "kube-system").unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string()
}
