//! Identities and the configuration file the binary (and [`crate::LocalPlaneBuilder::config`])
//! takes.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::faults::FaultConfig;

/// A bearer token and who it authenticates as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Identity {
    /// Short name used for kubeconfig files and lookups (`admin`, `controller`).
    pub name: String,
    pub token: String,
    /// The authenticated user name; defaults to `name`.
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub groups: Vec<String>,
    /// Bypasses RBAC (like `system:masters`).
    #[serde(default)]
    pub admin: bool,
    /// The user's uid, as a token file's third column gives it: reported by SelfSubjectReview
    /// and TokenReview. None: the user has no uid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

impl Identity {
    /// An identity that bypasses RBAC.
    pub fn admin(name: &str, token: &str) -> Identity {
        Identity {
            name: name.into(),
            token: token.into(),
            user: None,
            groups: vec!["system:masters".into()],
            admin: true,
            uid: None,
        }
    }

    /// An identity subject to RBAC, authenticated as `user`.
    pub fn user(name: &str, token: &str, user: &str) -> Identity {
        Identity {
            name: name.into(),
            token: token.into(),
            user: Some(user.into()),
            groups: vec![],
            admin: false,
            uid: None,
        }
    }

    pub fn user_name(&self) -> &str {
        self.user.as_deref().unwrap_or(&self.name)
    }

    /// Groups as the authenticator reports them (always including `system:authenticated`).
    pub fn all_groups(&self) -> Vec<String> {
        let mut g = self.groups.clone();
        if !g.iter().any(|x| x == "system:authenticated") {
            g.push("system:authenticated".into());
        }
        g
    }
}

/// The token of the identity a builder gets when none is configured.
pub const DEFAULT_ADMIN_TOKEN: &str = "localplane-admin-token";

/// Objects to create on a plane at start-up (RBAC grants, namespaces, fixtures).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// `cell` or a project name.
    #[serde(default = "cell")]
    pub plane: String,
    /// A (multi-document) YAML file.
    pub path: PathBuf,
}

fn cell() -> String {
    "cell".into()
}

/// The configuration file (YAML or JSON).
///
/// ```yaml
/// rbac: true
/// crdDirs: [config/crd]
/// identities:
///   - {name: admin, token: admin-token, admin: true}
///   - {name: controller, token: ctrl-token, user: "system:egress-address@cloud.datumapis.com"}
/// projects: [platform, tenant-a]
/// ipamPlatformProject: platform
/// cellNamespaces: [egress-system]
/// projectNamespaces: [ipam]
/// manifests:
///   - {plane: cell, path: config/rbac/role.yaml}
/// faults:
///   seed: 7
///   rules:
///     - {verb: patch, resource: egressshards, errorRate: 0.1, code: 503}
///     - {verb: delete, resource: ipclaims, commitDelayMs: 5000}
/// watchHistory: 10000
/// bookmarkIntervalSeconds: 10
/// quotas:
///   platform: {ipclaims.ipam.miloapis.com: 500}
/// ipamStrictDeletes: false
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Config {
    pub rbac: bool,
    pub crd_dirs: Vec<PathBuf>,
    /// CRD directories loaded on every project plane.
    pub project_crd_dirs: Vec<PathBuf>,
    pub identities: Vec<Identity>,
    pub projects: Vec<String>,
    /// Serve Milo IPAM on every project plane, with this project's plane holding the class
    /// catalog (the binary sets it to the first project when nothing names one).
    pub ipam_platform_project: Option<String>,
    pub cell_namespaces: Vec<String>,
    pub project_namespaces: Vec<String>,
    pub manifests: Vec<Manifest>,
    pub faults: FaultConfig,
    pub watch_history: Option<usize>,
    pub bookmark_interval_seconds: Option<f64>,
    /// Milo's quota, by project: the most live objects of each resource (`<plural>.<group>`).
    pub quotas: BTreeMap<String, BTreeMap<String, u64>>,
    /// IPClaim DELETEs read preconditions, as Milo's do not (see
    /// [`crate::LocalPlaneBuilder::ipam_strict_deletes`]).
    pub ipam_strict_deletes: bool,
}

impl Config {
    pub fn from_file(path: &std::path::Path) -> anyhow::Result<Config> {
        let text = std::fs::read_to_string(path)?;
        Ok(serde_saphyr::from_str(&text)?)
    }
}
