//! Kubeconfig files, one per plane and identity.

use serde_json::json;

use crate::config::Identity;

/// A kubeconfig (JSON, which every YAML reader accepts) with one cluster, user and context.
pub fn render(server: &str, plane: &str, id: &Identity, ca_pem: Option<&str>) -> String {
    use base64::Engine;
    let cluster = format!("localplane-{plane}");
    let user = format!("{plane}-{}", id.name);
    let mut cluster_entry = json!({"server": server});
    if let Some(ca) = ca_pem {
        cluster_entry["certificate-authority-data"] =
            json!(base64::engine::general_purpose::STANDARD.encode(ca));
    }
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": cluster_entry}],
        "users": [{"name": user, "user": {"token": id.token}}],
        "contexts": [{"name": user, "context": {"cluster": cluster, "user": user, "namespace": "default"}}],
        "current-context": user,
        "preferences": {},
    });
    serde_json::to_string_pretty(&doc).expect("JSON values always serialise")
}
