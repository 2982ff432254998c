//! The localplane handle: its planes, identities, counters and faults; in-process clients; and
//! serving it on loopback ([`builder`] builds it, [`running`] is what serving returns).

mod builder;
mod running;

use std::sync::Arc;

use crate::config::Identity;
use crate::faults::Faults;
use crate::metrics::Metrics;
use crate::plane::Plane;
use crate::server::{self, PROJECT_PREFIX};
use crate::shared::Shared;
use crate::store::namespaces_key;

pub use builder::LocalPlaneBuilder;

/// The namespace whose uid identifies a cell.
const KUBE_SYSTEM: &str = "kube-system";
pub use running::Running;

/// A localplane: the cell plane plus any number of Milo project planes. Cheap to clone.
///
/// Use it in-process ([`LocalPlane::client`], [`LocalPlane::router`]) or serve it on a loopback
/// port ([`LocalPlane::serve`]).
#[derive(Clone)]
pub struct LocalPlane(Arc<Shared>);

impl LocalPlane {
    /// The cell's control plane (served at the root).
    pub fn cell(&self) -> Plane {
        self.0.cell.clone()
    }

    /// The uid of the cell's `kube-system` namespace, which a controller reads as the cell's
    /// stable identity. Random for each localplane, fixed for its life (the apiserver refuses to
    /// delete `kube-system`, and so does localplane).
    pub fn cell_uid(&self) -> String {
        let ns = self
            .0
            .cell
            .object(&namespaces_key(), None, KUBE_SYSTEM)
            .expect("the cell's kube-system namespace cannot be deleted");
        ns["metadata"]["uid"]
            .as_str()
            .expect("a stored namespace has a uid")
            .to_string()
    }

    /// A project's control plane, if it exists.
    pub fn project(&self, name: &str) -> Option<Plane> {
        self.0.project(name)
    }

    /// `cell` or a project name.
    pub fn plane(&self, name: &str) -> Option<Plane> {
        self.0.plane(name)
    }

    pub fn project_names(&self) -> Vec<String> {
        self.0.project_names()
    }

    /// Adds a project control plane (or returns the existing one), with the project CRDs,
    /// namespaces and `on_project` setup applied.
    pub fn add_project(&self, name: &str) -> Plane {
        self.0.add_project(name)
    }

    /// Removes a project: its path answers 404 from now on, like a deleted Milo project.
    pub fn remove_project(&self, name: &str) -> bool {
        self.0.remove_project(name)
    }

    pub fn identity(&self, name: &str) -> Option<Identity> {
        self.0.identity(name).cloned()
    }

    pub fn identities(&self) -> Vec<Identity> {
        self.0.identities().to_vec()
    }

    pub fn metrics(&self) -> &Metrics {
        &self.0.metrics
    }

    pub fn faults(&self) -> &Faults {
        &self.0.faults
    }

    /// The HTTP application, for serving it yourself or calling it in-process.
    pub fn router(&self) -> axum::Router {
        axum::Router::new()
            .fallback(server::handle)
            .with_state(self.0.clone())
    }

    /// The path prefix of a plane's API (empty for the cell).
    pub fn plane_path(plane: &str) -> String {
        if plane == "cell" {
            String::new()
        } else {
            format!("{PROJECT_PREFIX}{plane}/control-plane")
        }
    }

    /// A kube client that calls the router in-process (no socket), as `identity`, against
    /// `plane` (`cell` or a project), with default namespace `default`.
    pub fn client(&self, plane: &str, identity: &str) -> kube::Client {
        let token = self
            .identity(identity)
            .unwrap_or_else(|| panic!("no identity {identity:?}"))
            .token;
        let prefix = Self::plane_path(plane);
        let auth = http::HeaderValue::from_str(&format!("Bearer {token}")).expect("token is ASCII");
        let svc = tower::ServiceBuilder::new()
            .map_request(move |mut req: http::Request<kube::client::Body>| {
                req.headers_mut()
                    .insert(http::header::AUTHORIZATION, auth.clone());
                if !prefix.is_empty() {
                    let pq = req
                        .uri()
                        .path_and_query()
                        .map(|p| p.as_str().to_string())
                        .unwrap_or_default();
                    if let Ok(u) = format!("{prefix}{pq}").parse() {
                        *req.uri_mut() = u;
                    }
                }
                req
            })
            .service(self.router());
        kube::Client::new(svc, "default")
    }

    /// Ends every watch and stops serving.
    pub(crate) fn stop(&self) {
        let _ = self.0.shutdown.send(true);
    }
}
