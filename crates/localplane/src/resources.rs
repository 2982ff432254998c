//! The kinds a plane serves: built-ins and CRDs, with what discovery, validation and tables need.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::core::cel::{CompiledSchema, compile_schema};
use serde_json::{Value, json};

use crate::hooks::ResourceKey;
use crate::kinds::BuiltinKind;
use crate::selector::{FieldSet, METADATA_FIELDS};

/// One additionalPrinterColumn.
#[derive(Debug, Clone)]
pub struct PrinterColumn {
    pub name: String,
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i32,
    pub json_path: String,
}

/// One served version of a kind.
pub struct VersionDef {
    pub name: String,
    pub storage: bool,
    /// `openAPIV3Schema`, if the kind has one (built-ins here do not).
    pub schema: Option<Arc<Value>>,
    /// The schema's CEL rules, compiled once at registration.
    pub compiled: Option<Arc<CompiledSchema>>,
    pub status_subresource: bool,
    pub printer_columns: Vec<PrinterColumn>,
}

impl std::fmt::Debug for VersionDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VersionDef")
            .field("name", &self.name)
            .field("status_subresource", &self.status_subresource)
            .finish()
    }
}

/// A kind and how it is addressed.
#[derive(Debug)]
pub struct ResourceDef {
    pub group: String,
    pub kind: String,
    pub list_kind: String,
    pub plural: String,
    pub singular: String,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub namespaced: bool,
    pub versions: Vec<VersionDef>,
    /// Custom resources refuse unconditional PUTs and strategic merge patches; built-ins accept them.
    pub custom: bool,
    /// The built-in kind this is, for what the apiserver knows about it beyond storage.
    pub builtin: Option<BuiltinKind>,
}

impl ResourceDef {
    /// Where the kind's objects are stored. Usually where it is served; a kind served in two
    /// groups (Event) has one store.
    pub fn key(&self) -> ResourceKey {
        self.builtin
            .and_then(BuiltinKind::storage)
            .unwrap_or_else(|| self.served_key())
    }

    /// Where the kind is served: its group and plural.
    pub fn served_key(&self) -> ResourceKey {
        ResourceKey::new(self.group.clone(), self.plural.clone())
    }

    /// The verbs the kind is served with (a review is only ever created).
    pub fn verbs(&self) -> &'static [&'static str] {
        if self.is_review() {
            &["create"]
        } else if self.group.is_empty() && self.plural == "namespaces" {
            // Namespaces cannot be deleted as a collection.
            &[
                "create", "delete", "get", "list", "patch", "update", "watch",
            ]
        } else {
            &[
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch",
            ]
        }
    }

    /// Whether this is a review kind (created to ask a question, never stored).
    pub fn is_review(&self) -> bool {
        self.builtin.is_some_and(BuiltinKind::is_review)
    }

    /// The field labels lists and watches of the kind may select on.
    pub fn field_set(&self) -> FieldSet {
        self.builtin
            .map(BuiltinKind::field_set)
            .unwrap_or(METADATA_FIELDS)
    }

    /// A stored object as `version` of this kind presents it.
    pub fn present<'a>(&self, version: &str, obj: &'a Value) -> Cow<'a, Value> {
        if let Some(b) = self.builtin {
            return b.present(obj);
        }
        if self.versions.len() == 1 {
            return Cow::Borrowed(obj);
        }
        let av = self.api_version(version);
        if obj.get("apiVersion").and_then(Value::as_str) == Some(av.as_str()) {
            Cow::Borrowed(obj)
        } else {
            let mut o = obj.clone();
            o["apiVersion"] = json!(av);
            Cow::Owned(o)
        }
    }

    /// An object written in this kind's version, as it is stored.
    pub fn to_storage(&self, obj: Value) -> Value {
        match self.builtin {
            Some(b) => b.to_storage(obj),
            None => obj,
        }
    }

    pub fn version(&self, v: &str) -> Option<&VersionDef> {
        self.versions.iter().find(|x| x.name == v)
    }

    /// The version discovery advertises as preferred: the storage version, else the first.
    pub fn preferred(&self) -> &VersionDef {
        self.versions
            .iter()
            .find(|v| v.storage)
            .unwrap_or(&self.versions[0])
    }

    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", self.group)
        }
    }

    /// Whether the apiserver keeps `metadata.generation` for the kind: custom resources, CRDs,
    /// Deployments and NetworkPolicies; the other built-ins served here (ConfigMap, Lease, Event,
    /// Namespace, Service, ...) have none, as the real apiserver showed.
    pub fn tracks_generation(&self) -> bool {
        matches!(
            self.builtin,
            None | Some(
                BuiltinKind::Deployment
                    | BuiltinKind::NetworkPolicy
                    | BuiltinKind::CustomResourceDefinition
            )
        )
    }

    /// Whether the kind has a `/status` subresource in any version (the store treats status
    /// separation as a property of the kind).
    pub fn has_status(&self) -> bool {
        self.versions.iter().any(|v| v.status_subresource)
    }

    /// Builds the definition from a CRD, compiling each served version's CEL rules.
    pub fn from_crd(crd: &CustomResourceDefinition) -> Result<ResourceDef, String> {
        let spec = &crd.spec;
        let names = &spec.names;
        let mut versions = Vec::new();
        for v in spec.versions.iter().filter(|v| v.served) {
            let schema = v
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .map(|s| serde_json::to_value(s).map_err(|e| e.to_string()))
                .transpose()?;
            let compiled = schema.as_ref().map(|s| {
                let c = compile_schema(s);
                if c.has_errors() {
                    tracing::warn!(crd = ?crd.metadata.name, version = %v.name, "some CEL rules do not compile; objects hitting them will be refused");
                }
                Arc::new(c)
            });
            let printer_columns = v
                .additional_printer_columns
                .iter()
                .flatten()
                .map(|c| PrinterColumn {
                    name: c.name.clone(),
                    type_: c.type_.clone(),
                    format: c.format.clone().unwrap_or_default(),
                    description: c.description.clone().unwrap_or_default(),
                    priority: c.priority.unwrap_or(0),
                    json_path: c.json_path.clone(),
                })
                .collect();
            versions.push(VersionDef {
                name: v.name.clone(),
                storage: v.storage,
                schema: schema.map(Arc::new),
                compiled,
                status_subresource: v.subresources.as_ref().is_some_and(|s| s.status.is_some()),
                printer_columns,
            });
        }
        if versions.is_empty() {
            return Err(format!("CRD {:?} serves no version", crd.metadata.name));
        }
        Ok(ResourceDef {
            group: spec.group.clone(),
            kind: names.kind.clone(),
            list_kind: names
                .list_kind
                .clone()
                .unwrap_or_else(|| format!("{}List", names.kind)),
            plural: names.plural.clone(),
            singular: names
                .singular
                .clone()
                .unwrap_or_else(|| names.kind.to_lowercase()),
            short_names: names.short_names.clone().unwrap_or_default(),
            categories: names.categories.clone().unwrap_or_default(),
            namespaced: spec.scope == "Namespaced",
            versions,
            custom: true,
            builtin: None,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn builtin(
        builtin: BuiltinKind,
        group: &str,
        version: &str,
        kind: &str,
        plural: &str,
        short: &[&str],
        namespaced: bool,
        status: bool,
    ) -> ResourceDef {
        ResourceDef {
            group: group.into(),
            kind: kind.into(),
            list_kind: format!("{kind}List"),
            plural: plural.into(),
            singular: kind.to_lowercase(),
            short_names: short.iter().map(|s| s.to_string()).collect(),
            categories: vec![],
            namespaced,
            versions: vec![VersionDef {
                name: version.into(),
                storage: true,
                schema: None,
                compiled: None,
                status_subresource: status,
                printer_columns: vec![],
            }],
            custom: false,
            builtin: Some(builtin),
        }
    }

    fn in_categories(mut self, categories: &[&str]) -> ResourceDef {
        self.categories = categories.iter().map(|c| c.to_string()).collect();
        self
    }
}

/// The built-in kinds every plane serves.
pub fn builtins() -> Vec<ResourceDef> {
    use BuiltinKind as B;
    const RBAC: &str = "rbac.authorization.k8s.io";
    const AUTHZ: &str = "authorization.k8s.io";
    vec![
        ResourceDef::builtin(
            B::Namespace,
            "",
            "v1",
            "Namespace",
            "namespaces",
            &["ns"],
            false,
            true,
        ),
        ResourceDef::builtin(B::Event, "", "v1", "Event", "events", &["ev"], true, false),
        ResourceDef::builtin(
            B::EventsV1Event,
            "events.k8s.io",
            "v1",
            "Event",
            "events",
            &["ev"],
            true,
            false,
        ),
        ResourceDef::builtin(
            B::Lease,
            "coordination.k8s.io",
            "v1",
            "Lease",
            "leases",
            &[],
            true,
            false,
        ),
        ResourceDef::builtin(
            B::ClusterRole,
            RBAC,
            "v1",
            "ClusterRole",
            "clusterroles",
            &[],
            false,
            false,
        ),
        ResourceDef::builtin(
            B::ClusterRoleBinding,
            RBAC,
            "v1",
            "ClusterRoleBinding",
            "clusterrolebindings",
            &[],
            false,
            false,
        ),
        ResourceDef::builtin(B::Role, RBAC, "v1", "Role", "roles", &[], true, false),
        ResourceDef::builtin(
            B::RoleBinding,
            RBAC,
            "v1",
            "RoleBinding",
            "rolebindings",
            &[],
            true,
            false,
        ),
        ResourceDef::builtin(
            B::ServiceAccount,
            "",
            "v1",
            "ServiceAccount",
            "serviceaccounts",
            &["sa"],
            true,
            false,
        ),
        ResourceDef::builtin(B::Secret, "", "v1", "Secret", "secrets", &[], true, false),
        ResourceDef::builtin(
            B::ConfigMap,
            "",
            "v1",
            "ConfigMap",
            "configmaps",
            &["cm"],
            true,
            false,
        ),
        ResourceDef::builtin(
            B::Service,
            "",
            "v1",
            "Service",
            "services",
            &["svc"],
            true,
            true,
        )
        .in_categories(&["all"]),
        ResourceDef::builtin(
            B::Deployment,
            "apps",
            "v1",
            "Deployment",
            "deployments",
            &["deploy"],
            true,
            true,
        )
        .in_categories(&["all"]),
        ResourceDef::builtin(
            B::NetworkPolicy,
            "networking.k8s.io",
            "v1",
            "NetworkPolicy",
            "networkpolicies",
            &["netpol"],
            true,
            false,
        ),
        ResourceDef::builtin(
            B::CustomResourceDefinition,
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            &["crd", "crds"],
            false,
            true,
        )
        .in_categories(&["api-extensions"]),
        ResourceDef::builtin(
            B::SelfSubjectAccessReview,
            AUTHZ,
            "v1",
            "SelfSubjectAccessReview",
            "selfsubjectaccessreviews",
            &[],
            false,
            false,
        ),
        ResourceDef::builtin(
            B::SelfSubjectRulesReview,
            AUTHZ,
            "v1",
            "SelfSubjectRulesReview",
            "selfsubjectrulesreviews",
            &[],
            false,
            false,
        ),
        ResourceDef::builtin(
            B::SubjectAccessReview,
            AUTHZ,
            "v1",
            "SubjectAccessReview",
            "subjectaccessreviews",
            &[],
            false,
            false,
        ),
        ResourceDef::builtin(
            B::SelfSubjectReview,
            "authentication.k8s.io",
            "v1",
            "SelfSubjectReview",
            "selfsubjectreviews",
            &[],
            false,
            false,
        ),
        ResourceDef::builtin(
            B::TokenReview,
            "authentication.k8s.io",
            "v1",
            "TokenReview",
            "tokenreviews",
            &[],
            false,
            false,
        ),
    ]
}

/// The kinds one plane serves, indexed for request routing.
#[derive(Default)]
pub struct Registry {
    by_key: BTreeMap<ResourceKey, Arc<ResourceDef>>,
}

impl Registry {
    pub fn with_builtins() -> Self {
        let mut r = Registry::default();
        for d in builtins() {
            r.insert(d);
        }
        r
    }

    /// Adds or replaces a kind. Replacing keeps the stored objects (like re-applying a CRD).
    pub fn insert(&mut self, def: ResourceDef) {
        self.by_key.insert(def.served_key(), Arc::new(def));
    }

    /// Stops serving a kind.
    pub fn remove(&mut self, key: &ResourceKey) -> Option<Arc<ResourceDef>> {
        self.by_key.remove(key)
    }

    /// The kind served at `key` (a group and plural; a store key names the kind that owns it).
    pub fn get(&self, key: &ResourceKey) -> Option<&Arc<ResourceDef>> {
        self.by_key.get(key)
    }

    /// Finds the kind served at `/{group}/{version}/{plural}`.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        let d = self.by_key.get(&ResourceKey::new(group, plural))?;
        d.version(version).map(|_| d.clone())
    }

    /// Whether a built-in kind is served in `group` (the core group is `""`).
    pub fn has_builtin_in(&self, group: &str) -> bool {
        self.by_key.values().any(|d| !d.custom && d.group == group)
    }

    pub fn all(&self) -> impl Iterator<Item = &Arc<ResourceDef>> {
        self.by_key.values()
    }

    /// Every (group, version) some kind is served at, sorted, each once.
    pub fn group_versions(&self) -> Vec<(String, String)> {
        let mut gvs: Vec<(String, String)> = self
            .all()
            .flat_map(|d| d.versions.iter().map(|v| (d.group.clone(), v.name.clone())))
            .collect();
        gvs.sort();
        gvs.dedup();
        gvs
    }

    /// Groups in discovery order (core first, then alphabetically), each with its versions.
    pub fn groups(&self) -> BTreeMap<String, Vec<Arc<ResourceDef>>> {
        let mut out: BTreeMap<String, Vec<Arc<ResourceDef>>> = BTreeMap::new();
        for d in self.by_key.values() {
            out.entry(d.group.clone()).or_default().push(d.clone());
        }
        out
    }
}

/// Reads every CustomResourceDefinition from the YAML files in `dir` (other documents are skipped).
pub fn load_crd_dir(dir: &Path) -> anyhow::Result<Vec<CustomResourceDefinition>> {
    let mut files: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
        })
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f)?;
        out.extend(parse_crds(&text).map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?);
    }
    Ok(out)
}

/// Parses the CRDs out of a (multi-document) YAML text.
pub fn parse_crds(text: &str) -> anyhow::Result<Vec<CustomResourceDefinition>> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text)?;
    let mut out = Vec::new();
    for d in docs {
        if d.get("kind") == Some(&json!("CustomResourceDefinition")) {
            out.push(serde_json::from_value(d)?);
        }
    }
    Ok(out)
}
