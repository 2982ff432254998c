//! What one localplane's HTTP front and its Rust handle share: the planes, who may call them, the
//! counters and the faults. The server reads it; [`crate::LocalPlane`] wraps it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::config::Identity;
use crate::faults::Faults;
use crate::hooks::ResourceKey;
use crate::locks;
use crate::metrics::{Metrics, RequestKey};
use crate::plane::Plane;

/// Setup run for every project plane as it is added.
pub(crate) type ProjectSetup = Arc<dyn Fn(&Plane) + Send + Sync>;

/// How every project plane starts out.
pub(crate) struct ProjectTemplate {
    pub crds: Vec<CustomResourceDefinition>,
    pub namespaces: Vec<String>,
    pub setup: Vec<ProjectSetup>,
    /// See [`Plane::set_strict_deletes`].
    pub strict_deletes: bool,
    /// Quotas by project name: each resource's most live objects.
    pub quotas: BTreeMap<String, Vec<(ResourceKey, u64)>>,
}

pub(crate) struct Shared {
    pub cell: Plane,
    projects: RwLock<BTreeMap<String, Plane>>,
    /// By bearer token.
    identities: HashMap<String, Identity>,
    /// In the order they were configured (kubeconfigs are written in this order).
    identity_order: Vec<Identity>,
    pub rbac: bool,
    pub metrics: Metrics,
    pub faults: Faults,
    pub shutdown: tokio::sync::watch::Sender<bool>,
    pub bookmark_interval: Duration,
    pub watch_history: usize,
    template: ProjectTemplate,
}

impl Shared {
    pub fn new(
        cell: Plane,
        identities: Vec<Identity>,
        rbac: bool,
        faults: Faults,
        bookmark_interval: Duration,
        watch_history: usize,
        template: ProjectTemplate,
    ) -> Shared {
        let (shutdown, _) = tokio::sync::watch::channel(false);
        Shared {
            cell,
            projects: RwLock::new(BTreeMap::new()),
            identities: identities
                .iter()
                .map(|i| (i.token.clone(), i.clone()))
                .collect(),
            identity_order: identities,
            rbac,
            metrics: Metrics::default(),
            faults,
            shutdown,
            bookmark_interval,
            watch_history,
            template,
        }
    }

    pub fn project(&self, name: &str) -> Option<Plane> {
        locks::read(&self.projects).get(name).cloned()
    }

    /// `cell` or a project name.
    pub fn plane(&self, name: &str) -> Option<Plane> {
        if name == "cell" {
            Some(self.cell.clone())
        } else {
            self.project(name)
        }
    }

    pub fn project_names(&self) -> Vec<String> {
        locks::read(&self.projects).keys().cloned().collect()
    }

    /// Adds a project plane (or returns the existing one), set up from the template.
    pub fn add_project(&self, name: &str) -> Plane {
        assert_ne!(name, "cell", "`cell` names the root plane");
        let mut projects = locks::write(&self.projects);
        if let Some(p) = projects.get(name) {
            return p.clone();
        }
        let plane = Plane::new(name, Some(name), self.watch_history);
        if let Err(e) = plane.add_crds(self.template.crds.clone()) {
            tracing::warn!(project = name, "project CRDs: {e}");
        }
        for ns in &self.template.namespaces {
            plane.ensure_namespace(ns);
        }
        for f in &self.template.setup {
            f(&plane);
        }
        plane.set_strict_deletes(self.template.strict_deletes);
        for (res, limit) in self.template.quotas.get(name).into_iter().flatten() {
            plane.set_quota(res, Some(*limit));
        }
        projects.insert(name.to_string(), plane.clone());
        plane
    }

    pub fn remove_project(&self, name: &str) -> bool {
        locks::write(&self.projects).remove(name).is_some()
    }

    /// Counts one request by how it was answered (`code` 0: not at all).
    pub fn record(&self, plane: &str, verb: &str, resource: &str, code: u16) {
        self.metrics.record(RequestKey {
            plane: plane.to_string(),
            verb: verb.to_string(),
            resource: resource.to_string(),
            code,
        });
    }

    /// Who a bearer token authenticates as.
    pub fn authenticate(&self, token: &str) -> Option<&Identity> {
        self.identities.get(token)
    }

    pub fn identity(&self, name: &str) -> Option<&Identity> {
        self.identity_order.iter().find(|i| i.name == name)
    }

    pub fn identities(&self) -> &[Identity] {
        &self.identity_order
    }
}
