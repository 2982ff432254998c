//! Class references: an IPClass with `spec.source {project, name}` names a class of another
//! project (Milo's `resolveClassIn`, `internal/allocator/class.go`, and `validateReference`,
//! `internal/registry/ipam/ipclass/strategy.go`). It states no policy of its own; a claim of it
//! allocates as the class it names does: that class's chain, from that project's pools, in the
//! claiming project's address space. A reference resolves in one hop.
//!
//! A claim of a class whose chain has its root in another project binds from that project's
//! pools; `bind.rs` says how.

use egress_api::ipam::IPClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

use super::ctx::Ctx;
use super::errors::{self, FieldError, Result};
use super::store::{CLASSES, key, name_of, typed};

/// IPClass's `spec.source`, which the shared API types leave out, added to its schema.
pub fn with_source_field(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    if crd.spec.names.kind != "IPClass" {
        return crd;
    }
    let mut v = serde_json::to_value(&crd).expect("a CRD serialises");
    for version in v["spec"]["versions"].as_array_mut().into_iter().flatten() {
        let spec = &mut version["schema"]["openAPIV3Schema"]["properties"]["spec"];
        spec["properties"]["source"] = json!({
            "description": "Makes this class a reference to a class of another project: a claim of \
                            it allocates as that class does. A reference states no policy of its own.",
            "type": "object",
            "nullable": true,
            "properties": {
                "project": {"type": "string"},
                "name": {"type": "string"},
            },
        });
    }
    serde_json::from_value(v).expect("the CRD with spec.source reads back")
}

/// `spec.source` as (project, name), when the class is a reference.
pub(crate) fn source_of(class: &Value) -> Option<(String, String)> {
    let s = class.pointer("/spec/source").filter(|s| s.is_object())?;
    let field = |f: &str| s[f].as_str().unwrap_or("").to_string();
    Some((field("project"), field("name")))
}

fn dns1123_subdomain(v: &str) -> Option<String> {
    if v.len() > 253 {
        return Some("must be no more than 253 characters".into());
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    (!v.split('.').all(label_ok)).then(|| {
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or \
         '.', and must start and end with an alphanumeric character"
            .into()
    })
}

/// A reference says which class it points at and nothing else: a reference that also stated
/// policy would be a copy, and copies drift (Milo's `validateReference`).
pub(crate) fn validate_reference(obj: &Value, class: &IPClass, errs: &mut Vec<FieldError>) {
    let (project, name) = source_of(obj).unwrap_or_default();
    for (field, v) in [("project", &project), ("name", &name)] {
        let path = format!("spec.source.{field}");
        if v.is_empty() {
            errs.push(FieldError::required(
                &path,
                format!("source.{field} is required"),
            ));
        } else if let Some(why) = dns1123_subdomain(v) {
            errs.push(FieldError::invalid(&path, format!("{v:?}: {why}")));
        }
    }
    let s = &class.spec;
    for (field, set) in [
        ("ipFamily", !s.ip_family.is_empty()),
        ("parentClassName", !s.parent_class_name.is_empty()),
        ("poolPer", !s.pool_per.is_empty()),
        ("uniqueWithin", !s.unique_within.is_empty()),
        ("allowedPrefixLengths", s.allowed_prefix_lengths.is_some()),
        (
            "defaultPrefixLength",
            s.default_prefix_length.is_some_and(|d| d != 0),
        ),
        ("reservations", s.reservations.is_some()),
        (
            "routing",
            s.routing.as_ref().is_some_and(|r| *r != Default::default()),
        ),
        ("strategy", !s.strategy.is_empty()),
        ("reclaimPolicy", !s.reclaim_policy.is_empty()),
        ("retentionLease", !s.retention_lease.is_empty()),
        ("provisioner", !s.provisioner.is_empty()),
        ("parameters", !s.parameters.is_empty()),
    ] {
        if set {
            errs.push(FieldError::forbidden(
                &format!("spec.{field}"),
                "a class with spec.source is a reference and states no policy of its own; set this on \
                 the class it references",
            ));
        }
    }
}

/// Longest parent chain the service follows.
pub const MAX_CHAIN_DEPTH: usize = 8;

/// The class a name resolves to: the class itself, or the one it references.
pub(crate) struct Definition {
    pub class: IPClass,
    pub name: String,
    /// The project holding it, when that is not the plane's own.
    pub project: Option<String>,
}

/// A class as stored in `project` (`None`: this plane's). Another project's plane is read while
/// this one writes, which the realm allows: no other write of it can be under way.
fn read_class(ctx: &Ctx<'_, '_>, project: Option<&str>, name: &str) -> Option<Value> {
    match project {
        None => ctx.txn.get(&key(CLASSES), None, name),
        Some(p) => {
            let (plane, _) = ctx.realm.member(p)?;
            plane.object(&key(CLASSES), None, name)
        }
    }
}

/// Resolves the class `name` of this plane's project, following a reference one hop (Milo's
/// `resolveClassIn`). `None` when no class has the name; an error when a reference points at
/// nothing, or at another reference.
pub(crate) fn resolve(ctx: &Ctx<'_, '_>, name: &str) -> Result<Option<Definition>> {
    resolve_in(ctx, None, name)
}

/// [`resolve`] for a class of `project` (`None`: this plane's).
fn resolve_in(ctx: &Ctx<'_, '_>, project: Option<&str>, name: &str) -> Result<Option<Definition>> {
    let Some(obj) = read_class(ctx, project, name) else {
        return Ok(None);
    };
    let Some((target_project, target)) = source_of(&obj) else {
        return Ok(Some(Definition {
            class: typed(&obj)?,
            name: name.to_string(),
            project: project.map(str::to_string),
        }));
    };
    let own = project.unwrap_or(ctx.plane_project()).to_string();
    let project = target_project;
    let at = (project != ctx.plane_project()).then_some(project.as_str());
    let Some(def) = read_class(ctx, at, &target) else {
        return Err(errors::class_not_found_as(format!(
            "resolve class \"{name}\" in project \"{own}\": ipam: class not found: \"{target}\" in project \
             \"{project}\""
        )));
    };
    if source_of(&def).is_some() {
        return Err(errors::bad_request(format!(
            "ipam: class reference names another reference: \"{name}\" in project \"{own}\" names \
             \"{target}\" in project \"{project}\""
        )));
    }
    Ok(Some(Definition {
        class: typed(&def)?,
        name: name_of(&def).to_string(),
        project: at.map(str::to_string),
    }))
}

/// The class a claim resolved to and its ancestors, leaf first. Each parent is named relative
/// to the class naming it, so a chain may cross into another project and on (Milo's
/// `LoadAncestry`); a class met twice is a cycle.
pub(crate) fn chain(
    ctx: &Ctx<'_, '_>,
    name: &str,
    class: &IPClass,
    project: Option<String>,
) -> Result<Vec<Definition>> {
    let mut chain = vec![Definition {
        class: class.clone(),
        name: name.to_string(),
        project,
    }];
    loop {
        let current = chain.last().expect("leaf");
        let parent = current.class.spec.parent_class_name.clone();
        if parent.is_empty() {
            return Ok(chain);
        }
        if chain.len() > MAX_CHAIN_DEPTH {
            return Err(errors::internal("ipam: class chain too deep".to_string()));
        }
        let def = resolve_in(ctx, current.project.as_deref(), &parent)?
            .ok_or_else(|| errors::class_not_found(&parent))?;
        if chain
            .iter()
            .any(|d| d.name == def.name && d.project == def.project)
        {
            return Err(errors::internal(format!(
                "ipam: class chain too deep: cycle at class \"{}\"",
                def.name
            )));
        }
        chain.push(def);
    }
}
