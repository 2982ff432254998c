//! Class references: an IPClass with `spec.source {project, name}` names a class of another
//! project (Milo's `resolveClassIn`, `internal/allocator/class.go`, and `validateReference`,
//! `internal/registry/ipam/ipclass/strategy.go`). It states no policy of its own; a claim of it
//! allocates as the class it names does: that class's chain, from that project's pools, in the
//! claiming project's address space. A reference resolves in one hop.
//!
//! Milo keeps every project in one database; here each project is a plane. A claim in project A
//! whose class chain has its root in project P (through a reference) binds from P's pools, and
//! so in two places: A stores the claim and its `IPAllocation` (with a hidden record naming P),
//! P's pool holds the row (with a hidden record, so that P's index rebuilt from its store still
//! holds it). The chain's pools are provisioned in P too, whichever project defines each level. The hook on A works out the block
//! on P and undoes it, and P takes it for real once A's write commits (nothing changes P in
//! between: the planes of a realm write one at a time). A dry run or a refusal of A's write
//! leaves P untouched. Releasing such an allocation frees P's row the same way.

use egress_api::ipam::IPClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

use super::claims::Bind;
use super::classes::MAX_CHAIN_DEPTH;
use super::ctx::Ctx;
use super::errors::{self, FieldError, Result};
use super::index::Block;
use super::store::{self, CLASSES, key, name_of, typed};
use crate::hooks::ResourceKey;

/// Where the hidden records live: no API serves this group, and the records are cluster-scoped,
/// so no namespace waits for them to go.
const INTERNAL_GROUP: &str = "ipam.localplane.internal";

/// In a pool's project: a row of one of its pools that another project's allocation holds.
pub(crate) fn held_key() -> ResourceKey {
    ResourceKey::new(INTERNAL_GROUP, "heldrows")
}

/// In a claim's project: an allocation whose row is in a pool of another project.
pub(crate) fn remote_key() -> ResourceKey {
    ResourceKey::new(INTERNAL_GROUP, "remoterows")
}

/// The key of a row held for `project`'s allocation `namespace/allocation`, in the pool's index
/// and as the name of its hidden record.
pub(crate) fn held_row_key(project: &str, namespace: &str, allocation: &str) -> String {
    format!("{project}:{namespace}/{allocation}")
}

/// The name of the hidden record of a remote allocation, in its own project.
pub(crate) fn remote_name(namespace: &str, allocation: &str) -> String {
    format!("{namespace}/{allocation}")
}

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

/// Binds `bind` from the pools of `project` (another project of the realm) for this plane's
/// allocation `namespace/allocation`: works the block out on that project's plane and undoes
/// it, records here that the row is there, and has that plane take the block once this write
/// commits. Returns the pool and the block.
pub(crate) fn bind_remote(
    ctx: &mut Ctx<'_, '_>,
    project: &str,
    bind: Bind,
    namespace: &str,
    allocation: &str,
) -> Result<(String, Block)> {
    let Some((plane, hooks)) = ctx.realm.member(project) else {
        return Err(errors::class_not_found_as(format!(
            "ipam: class not found: \"{}\" in project \"{project}\"",
            bind.chain
                .last()
                .and_then(|c| c.metadata.name.as_deref())
                .unwrap_or("")
        )));
    };
    let row = held_row_key(ctx.plane_project(), namespace, allocation);
    let caller = ctx.caller.clone();
    let planned = hooks.run_for_another(&plane, &caller, false, |p| bind.run(p, &row))?;
    ctx.txn.put(
        &remote_key(),
        json!({
            "metadata": {"name": remote_name(namespace, allocation)},
            "project": project,
            "pool": planned.0,
        }),
    );
    let expected = planned.clone();
    ctx.txn.after_commit(Box::new(move || {
        let taken = hooks.run_for_another(&plane, &caller, true, |p| {
            let (pool, block) = bind.run(p, &row)?;
            p.txn.put(
                &held_key(),
                json!({
                    "metadata": {"name": row},
                    "pool": pool,
                    "allocatedCIDR": block.to_string(),
                    "scopeDigest": bind.space,
                }),
            );
            Ok((pool, block))
        });
        match taken {
            Ok(t) if t == expected => {}
            Ok((pool, block)) => tracing::error!(
                row,
                pool,
                %block,
                "a claim's remote block changed between working it out and taking it"
            ),
            Err(e) => tracing::error!(row, error = %e.message, "a claim's remote block could not be taken"),
        }
    }));
    Ok(planned)
}

/// Releases the row of this plane's allocation `namespace/allocation` when it is in another
/// project's pool: forgets the record here, and has that project free the row once this write
/// commits. `false` when the row is in this plane's own pool.
pub(crate) fn release_remote(
    ctx: &mut Ctx<'_, '_>,
    namespace: &str,
    allocation: &str,
) -> Result<bool> {
    let name = remote_name(namespace, allocation);
    let Some(record) = ctx.txn.remove(&remote_key(), None, &name) else {
        return Ok(false);
    };
    let project = record["project"].as_str().unwrap_or("").to_string();
    let pool = record["pool"].as_str().unwrap_or("").to_string();
    let row = held_row_key(ctx.plane_project(), namespace, allocation);
    // A project no longer served took its pools with it.
    let Some((plane, hooks)) = ctx.realm.member(&project) else {
        return Ok(true);
    };
    let caller = ctx.caller.clone();
    ctx.txn.after_commit(Box::new(move || {
        let freed = hooks.run_for_another(&plane, &caller, true, |p| {
            if p.ix.remove(&pool, &row).is_some() {
                store::write_pool_status(p.txn, p.ix, &pool)?;
            }
            p.txn.remove(&held_key(), None, &row);
            Ok(())
        });
        if let Err(e) = freed {
            tracing::error!(row, pool, error = %e.message, "a remote row could not be freed");
        }
    }));
    Ok(true)
}
