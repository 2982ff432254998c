//! Routing: which plane a path addresses, whether it names a resource, which verb a request is,
//! and the non-resource paths (discovery, OpenAPI, health).

use http::{HeaderMap, Method, header};
use serde_json::Value;

use crate::plane::Plane;
use crate::shared::Shared;
use crate::{discovery, openapi};

/// Where Milo serves a project's control plane; everything after it is a normal API path.
pub const PROJECT_PREFIX: &str = "/apis/resourcemanager.miloapis.com/v1alpha1/projects/";

/// Query parameters, tolerating the empty pairs kube's serializer leaves (`?&limit=500`).
pub(crate) struct Query(Vec<(String, String)>);

fn decode(s: &str) -> String {
    let s = s.replace('+', " ");
    percent_encoding::percent_decode_str(&s)
        .decode_utf8_lossy()
        .into_owned()
}

impl Query {
    pub fn parse(q: &str) -> Query {
        Query(
            q.split('&')
                .filter(|p| !p.is_empty())
                .map(|p| match p.split_once('=') {
                    Some((k, v)) => (decode(k), decode(v)),
                    None => (decode(p), String::new()),
                })
                .collect(),
        )
    }

    pub fn get(&self, k: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    }

    pub fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("true") | Some("1") | Some(""))
    }
}

/// The plane a request addresses, and the API path within it.
pub(crate) struct PlaneRoute {
    pub plane: Plane,
    /// The path after the plane's prefix (the whole path on the cell).
    pub rest: String,
    /// The plane's prefix (empty for the cell), for URLs the response hands back.
    pub prefix: String,
}

/// Splits a path into plane and API path; `None` for a project Milo does not serve.
pub(crate) fn plane_route(shared: &Shared, path: &str) -> Option<PlaneRoute> {
    let Some(r) = path.strip_prefix(PROJECT_PREFIX) else {
        return Some(PlaneRoute {
            plane: shared.cell.clone(),
            rest: path.to_string(),
            prefix: String::new(),
        });
    };
    let (project, tail) = r.split_once('/').unwrap_or((r, ""));
    let tail = tail.strip_prefix("control-plane")?;
    let plane = shared.project(project)?;
    Some(PlaneRoute {
        plane,
        rest: tail.to_string(),
        prefix: format!("{PROJECT_PREFIX}{project}/control-plane"),
    })
}

/// A request for a resource (as opposed to discovery and other non-resource paths).
pub(crate) struct ResourcePath {
    pub group: String,
    pub version: String,
    pub plural: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub sub: Option<String>,
}

impl ResourcePath {
    pub fn parse(segs: &[&str]) -> Option<ResourcePath> {
        let (group, version, rest) = match segs {
            ["api", v, rest @ ..] if !rest.is_empty() => (String::new(), v.to_string(), rest),
            ["apis", g, v, rest @ ..] if !rest.is_empty() => (g.to_string(), v.to_string(), rest),
            _ => return None,
        };
        let namespace_subresource =
            group.is_empty() && rest.len() == 3 && matches!(rest[2], "status" | "finalize");
        let (namespace, rest) =
            if rest.len() >= 3 && rest[0] == "namespaces" && !namespace_subresource {
                (Some(rest[1].to_string()), &rest[2..])
            } else {
                (None, rest)
            };
        if rest.len() > 3 {
            return None;
        }
        Some(ResourcePath {
            group,
            version,
            plural: rest[0].to_string(),
            namespace,
            name: rest.get(1).map(|s| s.to_string()),
            sub: rest.get(2).map(|s| s.to_string()),
        })
    }

    /// The metrics label: group-qualified resource with subresource.
    pub fn label(&self) -> String {
        let q = crate::error::qualified(&self.group, &self.plural);
        match &self.sub {
            Some(s) => format!("{q}/{s}"),
            None => q,
        }
    }
}

/// A Kubernetes verb, as RBAC, metrics and fault rules name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
    Unsupported,
}

impl Verb {
    pub fn of(method: &Method, named: bool, query: &Query) -> Verb {
        match (method, named) {
            (&Method::GET, true) => Verb::Get,
            (&Method::GET, false) if query.flag("watch") => Verb::Watch,
            (&Method::GET, false) => Verb::List,
            (&Method::POST, false) => Verb::Create,
            (&Method::PUT, true) => Verb::Update,
            (&Method::PATCH, true) => Verb::Patch,
            (&Method::DELETE, true) => Verb::Delete,
            (&Method::DELETE, false) => Verb::DeleteCollection,
            _ => Verb::Unsupported,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
            Verb::Unsupported => "unsupported",
        }
    }
}

/// Discovery, OpenAPI and the server root; `None` for a path nothing is served at.
pub(crate) fn non_resource(
    plane: &Plane,
    segs: &[&str],
    prefix: &str,
    headers: &HeaderMap,
) -> Option<Value> {
    let st = plane.read();
    let reg = &st.registry;
    match segs {
        ["api"] => {
            let host = headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("127.0.0.1");
            Some(discovery::core_versions(host))
        }
        ["api", v] => discovery::resource_list(reg, "", v),
        ["apis"] => Some(discovery::group_list(reg)),
        ["apis", g] => discovery::group(reg, g),
        ["apis", g, v] => discovery::resource_list(reg, g, v),
        ["openapi", "v3"] => Some(openapi::root(reg, prefix)),
        ["openapi", "v3", "api", v] => openapi::group_version(reg, "", v),
        ["openapi", "v3", "apis", g, v] => openapi::group_version(reg, g, v),
        _ => None,
    }
}
