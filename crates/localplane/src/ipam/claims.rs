//! IPClaim: synchronous binding on create, and release (free or retain) on delete.

use egress_api::ipam::{
    FAMILY_IPV4, FAMILY_IPV6, IPAllocation, IPClaim, IPClaimSpec, IPClass, LocalRef, ObjectRef,
    RECLAIM_DELETE, RECLAIM_RETAIN,
};
use serde_json::{Value, json};

use super::bind::{self, Bind, missing_roles, project_scope};
use super::classes::{self, block_len, family_bits};
use super::ctx::Ctx;
use super::digest;
use super::errors::{self, FieldError, Result};
use super::source::{self, Definition};
use super::store::{self, ALLOCATIONS, CLAIMS, CLASSES, key, name_of, namespace_of, typed};

const KIND: &str = "IPClaim";
const PROJECT_API_GROUP: &str = "resourcemanager.miloapis.com";

/// Spec rules checked before the class is read (422).
fn validate(name: &str, spec: &IPClaimSpec) -> Result<()> {
    let mut errs = Vec::new();
    if spec.class_name.is_empty() && spec.ip_family.is_empty() {
        errs.push(FieldError::required(
            "spec.className",
            "one of spec.className or spec.ipFamily is required",
        ));
    }
    if !["", FAMILY_IPV4, FAMILY_IPV6].contains(&spec.ip_family.as_str()) {
        errs.push(FieldError::not_supported(
            "spec.ipFamily",
            format!("{:?}: supported values: \"IPv4\", \"IPv6\"", spec.ip_family),
        ));
    }
    for (role, r) in &spec.scope {
        if role.is_empty() {
            errs.push(FieldError::invalid(
                "spec.scope",
                "scope has an entry with an empty role name",
            ));
        } else if r.kind.is_empty() {
            errs.push(FieldError::invalid(
                &format!("spec.scope.{role}"),
                format!("scope role {role:?} has no kind"),
            ));
        }
    }
    errs.extend(unsupported_reclaim_policy(&spec.reclaim_policy));
    errors::check(KIND, name, errs)?;

    // The bound comes from the claim's own family, before any class is read: a claim that names
    // no family is held to IPv4's 32 bits, which is why clients asking for a /128 set IPv6.
    if let Some(n) = spec.prefix_length {
        if n <= 0 {
            return Err(errors::prefix_length_rejected(format!(
                "prefixLength must be greater than 0, got {n}"
            )));
        }
        let fam = if spec.ip_family.is_empty() {
            FAMILY_IPV4
        } else {
            spec.ip_family.as_str()
        };
        let bits = family_bits(fam);
        if n > bits {
            let why = if spec.ip_family.is_empty() {
                " (spec.ipFamily is unset, so the IPv4 bound applies)"
            } else {
                ""
            };
            return Err(errors::prefix_length_rejected(format!(
                "prefixLength {n} exceeds {bits} for {fam}{why}"
            )));
        }
    }
    Ok(())
}

/// A claim's `spec.reclaimPolicy`, on create and on update: empty (the class decides), `Delete`
/// or `Retain`.
fn unsupported_reclaim_policy(policy: &str) -> Option<FieldError> {
    (!["", RECLAIM_DELETE, RECLAIM_RETAIN].contains(&policy)).then(|| {
        FieldError::not_supported(
            "spec.reclaimPolicy",
            format!("{policy:?}: supported values: \"Delete\", \"Retain\""),
        )
    })
}

/// The class a claim allocates under: the one it names, or the default for its family, each
/// followed through a reference. A reference states no family, so the family is matched after
/// resolving (Milo's `LoadDefaultClass`); a default marker on a reference that resolves to
/// nothing is passed over.
///
/// No class is refused to the claim: the line production runs (`2f31bea`) has no class
/// visibility gate and no container-class gate, and a stand-in that refused a project a class
/// Milo hands it would be stricter than Milo. A claim naming a container class binds from the
/// pools of its chain, as any class that provisions nothing below it.
fn resolve_class(ctx: &Ctx<'_, '_>, spec: &IPClaimSpec) -> Result<Definition> {
    if !spec.class_name.is_empty() {
        return source::resolve(ctx, &spec.class_name)?
            .ok_or_else(|| errors::class_not_found(&spec.class_name));
    }
    let mut defaults: Vec<String> = Vec::new();
    for v in ctx.txn.list(&key(CLASSES), None) {
        let c: IPClass = typed(&v)?;
        if classes::is_default(&c) {
            defaults.push(name_of(&v).to_string());
        }
    }
    defaults.sort();
    defaults
        .iter()
        .filter_map(|name| source::resolve(ctx, name).ok().flatten())
        .find(|d| d.class.spec.ip_family == spec.ip_family)
        .ok_or_else(|| errors::no_default_class(&spec.ip_family))
}

fn effective_prefix_length(
    class_name: &str,
    class: &IPClass,
    requested: Option<i32>,
) -> Result<u8> {
    let s = &class.spec;
    let Some(n) = requested.or_else(|| block_len(s)) else {
        return Err(errors::prefix_length_rejected(format!(
            "class \"{class_name}\" sets no defaultPrefixLength and the claim requested none"
        )));
    };
    if n <= 0 {
        return Err(errors::prefix_length_rejected(format!(
            "prefixLength must be greater than 0, got {n}"
        )));
    }
    let bits = family_bits(&s.ip_family);
    if n > bits {
        return Err(errors::prefix_length_rejected(format!(
            "prefixLength {n} exceeds {bits} for {}",
            s.ip_family
        )));
    }
    if let Some(r) = &s.allowed_prefix_lengths {
        let (min, max) = (r.min.unwrap_or(0), r.max.unwrap_or(bits));
        if n < min || n > max {
            return Err(errors::prefix_length_rejected(format!(
                "prefixLength {n} is outside class \"{class_name}\" allowedPrefixLengths [{min}, {max}]"
            )));
        }
    }
    Ok(n as u8)
}

fn owner_ref(project: &str) -> ObjectRef {
    ObjectRef {
        api_group: PROJECT_API_GROUP.to_string(),
        kind: "Project".to_string(),
        name: project.to_string(),
        ..ObjectRef::default()
    }
}

pub fn create(ctx: &mut Ctx<'_, '_>, obj: &mut Value) -> Result<()> {
    let tenant = ctx.tenant()?;
    let name = name_of(obj).to_string();
    let ns = namespace_of(obj).to_string();
    let claim: IPClaim = typed(obj)?;
    let spec = &claim.spec;
    validate(&name, spec)?;
    if ctx.txn.get(&key(CLAIMS), Some(&ns), &name).is_some() {
        return Err(errors::claim_exists(
            &name,
            "an IPClaim of this name already exists in this namespace",
        ));
    }

    let Definition {
        class,
        name: class_name,
        project: class_project,
    } = resolve_class(ctx, spec)?;
    ctx.liveness.check(ctx.txn, &ns)?;
    let family = class.spec.ip_family.clone();
    if !spec.ip_family.is_empty() && spec.ip_family != family {
        return Err(errors::bad_request(format!(
            "spec.ipFamily is {} but class \"{class_name}\" hands out {family}",
            spec.ip_family
        )));
    }
    let len = effective_prefix_length(&class_name, &class, spec.prefix_length)?;
    let missing = missing_roles(&spec.scope, &class.spec.unique_within);
    if !missing.is_empty() {
        return Err(errors::scope_roles_missing(
            &missing,
            &format!("uniqueWithin (class \"{class_name}\")"),
        ));
    }
    let unique = project_scope(&spec.scope, &class.spec.unique_within);
    let space = digest::address_space(&tenant, &unique);

    let alloc_name = digest::allocation_name(&ns, &name);
    if let Some(existing) = ctx.txn.get(&key(ALLOCATIONS), Some(&ns), &alloc_name) {
        let a: IPAllocation = typed(&existing)?;
        return Err(match a.spec.claim_ref {
            Some(r) if !r.name.is_empty() => errors::claim_exists(
                &name,
                &format!(
                    "an allocation under this identity is already bound to IPClaim \"{}\"",
                    r.name
                ),
            ),
            _ => errors::allocation_retained(&name, &alloc_name),
        });
    }

    // The pools are those of the chain's root, in the project holding it.
    let chain = source::chain(ctx, &class_name, &class, class_project)?;
    let root_project = chain.last().and_then(|d| d.project.clone());
    let bind = Bind {
        chain: chain.into_iter().map(|d| d.class).collect(),
        scope: spec.scope.clone(),
        space: space.clone(),
        len,
        address: spec.address.clone(),
    };
    let (pool, block) = bind.take(ctx, root_project.as_deref(), &ns, &alloc_name)?;

    // Fixed now: release reads the allocation, never the claim, so a later edit changes nothing.
    let policy = [
        spec.reclaim_policy.as_str(),
        class.spec.reclaim_policy.as_str(),
    ]
    .into_iter()
    .find(|p| !p.is_empty())
    .unwrap_or(RECLAIM_DELETE)
    .to_string();
    let owner = owner_ref(&tenant);
    let allocation = json!({
        "apiVersion": store::api_version(),
        "kind": "IPAllocation",
        "metadata": {"name": alloc_name, "namespace": ns},
        "spec": {
            "ipFamily": family,
            "poolRef": {"name": pool},
            "className": class_name,
            "purpose": "Claim",
            "claimRef": {"name": name},
            "scope": unique,
            "reclaimPolicy": policy,
            "ownerRef": owner,
        },
        "status": {
            "phase": "Ready",
            "allocatedCIDR": block.to_string(),
            "scopeDigest": space,
        },
    });
    ctx.txn.put(&key(ALLOCATIONS), allocation);

    obj["spec"]["ownerRef"] = store::to_json(&owner);
    obj["status"] = json!({
        "phase": "Bound",
        "allocatedCIDR": block.to_string(),
        "poolRef": LocalRef { name: pool },
        "boundAllocationRef": LocalRef { name: alloc_name },
    });
    Ok(())
}

pub fn update(_ctx: &mut Ctx<'_, '_>, old: &Value, new: &mut Value) -> Result<()> {
    let name = name_of(new).to_string();
    let o: IPClaim = typed(old)?;
    let n: IPClaim = typed(new)?;
    let mut errs = Vec::new();
    let why = "a claim binds its allocation once, at creation";
    errs.extend(FieldError::immutables(
        &store::to_json(&o.spec),
        &store::to_json(&n.spec),
        [
            ("className", why),
            ("ipFamily", why),
            ("prefixLength", why),
            ("address", why),
            ("scope", why),
        ],
    ));
    errs.extend(unsupported_reclaim_policy(&n.spec.reclaim_policy));
    errors::check(KIND, &name, errs)
}

/// Frees or retains the claim's allocation by the policy recorded on it at bind time.
pub fn delete(ctx: &mut Ctx<'_, '_>, obj: &Value) -> Result<()> {
    let name = name_of(obj).to_string();
    let ns = namespace_of(obj).to_string();
    let alloc_name = digest::allocation_name(&ns, &name);
    let Some(mut alloc_obj) = ctx.txn.get(&key(ALLOCATIONS), Some(&ns), &alloc_name) else {
        // Nothing was bound (or it was force-released); there is nothing to free.
        return Ok(());
    };
    let a: IPAllocation = typed(&alloc_obj)?;
    if a.spec.claim_ref.as_ref().is_none_or(|r| r.name != name) {
        return Ok(());
    }
    if a.spec.reclaim_policy == RECLAIM_RETAIN {
        alloc_obj["spec"]
            .as_object_mut()
            .expect("allocation spec")
            .remove("claimRef");
        let mut conditions: Vec<Value> = alloc_obj["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c["type"] != "Bound")
            .collect();
        conditions.push(store::condition(
            "Bound",
            "False",
            "Retained",
            "the claim was deleted under reclaimPolicy Retain; this address is still held",
        ));
        alloc_obj["status"]["conditions"] = json!(conditions);
        ctx.txn.put(&key(ALLOCATIONS), alloc_obj);
        return Ok(());
    }
    ctx.txn.remove(&key(ALLOCATIONS), Some(&ns), &alloc_name);
    let pool = a.spec.pool_ref.as_ref().map(|r| r.name.as_str());
    bind::release(ctx, pool, &ns, &alloc_name)
}
