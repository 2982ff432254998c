//! IPClaim: synchronous binding on create, and release (free or retain) on delete.

use std::collections::BTreeSet;

use egress_api::ipam::{
    FAMILY_IPV4, FAMILY_IPV6, IPAllocation, IPClaim, IPClaimSpec, IPClass, IPPool, LocalRef,
    ObjectRef, RECLAIM_DELETE, RECLAIM_RETAIN, Scope,
};
use serde_json::{Value, json};

use super::classes::{self, block_len, family_bits};
use super::ctx::Ctx;
use super::errors::{self, FieldError, Result};
use super::index::{Block, Row, RowKind, Sync};
use super::source::{self, Definition};
use super::store::{
    self, ALLOCATIONS, CLAIMS, CLASSES, LABEL_PROVISIONED_BY_CLASS, LABEL_SCOPE_DIGEST, POOLS, key,
    name_of, namespace_of, typed,
};
use super::{digest, pools};

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
    if !["", RECLAIM_DELETE, RECLAIM_RETAIN].contains(&spec.reclaim_policy.as_str()) {
        errs.push(FieldError::not_supported(
            "spec.reclaimPolicy",
            format!(
                "{:?}: supported values: \"Delete\", \"Retain\"",
                spec.reclaim_policy
            ),
        ));
    }
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

/// Roles a scope lacks; a ref without a name counts as missing.
fn missing_roles<'r>(scope: &Scope, roles: impl IntoIterator<Item = &'r String>) -> Vec<String> {
    let mut missing: Vec<String> = roles
        .into_iter()
        .filter(|r| scope.get(*r).is_none_or(|s| s.name.is_empty()))
        .cloned()
        .collect();
    missing.sort();
    missing.dedup();
    missing
}

fn project_scope<'r>(scope: &Scope, roles: impl IntoIterator<Item = &'r String>) -> Scope {
    roles
        .into_iter()
        .filter_map(|r| scope.get(r).map(|s| (r.clone(), s.clone())))
        .collect()
}

/// A pool serves a claim when every role the pool states is matched by the claim's scope.
fn pool_serves(pool: &IPPool, scope: &Scope) -> bool {
    pool.spec.scope.iter().all(|(role, want)| {
        scope.get(role).is_some_and(|have| {
            have.api_group == want.api_group && have.kind == want.kind && have.name == want.name
        })
    })
}

/// Picks the pool offering the chain's root class and walks down the chain, provisioning a
/// child pool per projected scope for each class with `poolPer`; returns the pool to bind from.
fn resolve_pool(ctx: &mut Ctx<'_, '_>, chain: &[IPClass], scope: &Scope) -> Result<String> {
    let leaf = chain.first().expect("leaf");
    let root = chain.last().expect("root");
    let root_name = root.metadata.name.clone().unwrap_or_default();
    let leaf_name = leaf.metadata.name.clone().unwrap_or_default();
    let mut candidates = Vec::new();
    for v in ctx.txn.list(&key(POOLS), None) {
        let p: IPPool = typed(&v)?;
        let name = name_of(&v).to_string();
        let Some(ix) = ctx.ix.pool(&name) else {
            continue;
        };
        if p.spec.class_names.contains(&root_name)
            && ix.block.family() == root.spec.ip_family
            && pool_serves(&p, scope)
        {
            candidates.push((name, ix.capacity().utilization_percent()));
        }
    }
    candidates.sort_by(|a, b| a.0.cmp(&b.0));
    if root.spec.strategy == "LeastUtilized" {
        candidates.sort_by(|a, b| a.1.total_cmp(&b.1));
    }
    let Some((mut current, _)) = candidates.into_iter().next() else {
        let via = if root_name == leaf_name {
            String::new()
        } else {
            format!(" (through its chain root \"{root_name}\")")
        };
        return Err(errors::no_offering_pool(format!(
            "ipam: no pool offers this class: no {} IPPool lists class \"{leaf_name}\"{via} in spec.classNames and \
             serves the claim's scope",
            root.spec.ip_family
        )));
    };
    let mut roles: BTreeSet<String> = BTreeSet::new();
    // The leaf binds; only its ancestors provision.
    for class in chain[1..].iter().rev() {
        if class.spec.pool_per.is_empty() {
            continue;
        }
        roles.extend(class.spec.pool_per.iter().cloned());
        current = provision(ctx, class, &current, &project_scope(scope, &roles))?;
    }
    Ok(current)
}

/// `sanitize("<class>-<scope names in role order>")-<first 8 hex of the pool digest>`.
fn provisioned_pool_name(class: &str, scope: &Scope, pool_digest: &str) -> String {
    let mut base = class.to_string();
    for r in scope.values() {
        base.push('-');
        base.push_str(&r.name);
    }
    let mut s: String = base
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    s.truncate(253 - 9);
    let s = s.trim_end_matches(['-', '.']);
    format!("{s}-{}", &pool_digest[..8])
}

/// The pool `class` owns for `scope`, carved from `parent` on first use.
fn provision(
    ctx: &mut Ctx<'_, '_>,
    class: &IPClass,
    parent: &str,
    scope: &Scope,
) -> Result<String> {
    let class_name = class.metadata.name.clone().unwrap_or_default();
    let pool_digest = digest::pool(ctx.plane_project(), scope);
    let name = provisioned_pool_name(&class_name, scope, &pool_digest);
    if let Some(existing) = ctx.txn.get(&key(POOLS), None, &name) {
        let by = existing.pointer(&format!(
            "/metadata/labels/{}",
            LABEL_PROVISIONED_BY_CLASS.replace('/', "~1")
        ));
        if by.and_then(Value::as_str) != Some(class_name.as_str()) {
            return Err(errors::internal(format!(
                "IPPool \"{name}\" exists but was not provisioned by class \"{class_name}\""
            )));
        }
        return Ok(name);
    }
    let Some(len) = block_len(&class.spec) else {
        return Err(errors::prefix_length_rejected(format!(
            "class \"{class_name}\" sets no defaultPrefixLength, so the size of the pools it provisions is unknown"
        )));
    };
    let Some(pb) = ctx.ix.pool(parent).map(|p| p.block) else {
        return Err(errors::bad_request(format!(
            "IPPool \"{parent}\" not found"
        )));
    };
    let block = match pools::carve(ctx, parent, &name, len) {
        Ok(b) => b,
        Err(e) if e.code == 507 => {
            return Err(errors::ancestor_exhausted(
                parent,
                &format!("no free /{len} is left in {pb}"),
            ));
        }
        Err(e) => return Err(e),
    };
    let mut obj = json!({
        "apiVersion": store::api_version(),
        "kind": "IPPool",
        "metadata": {
            "name": name,
            "labels": {
                LABEL_PROVISIONED_BY_CLASS: class_name,
                // A label value holds 63 characters, so the full digest lives in status.
                LABEL_SCOPE_DIGEST: &pool_digest[..32],
            },
        },
        "spec": {
            "parentPoolRef": {"name": parent},
            "prefixLength": len,
            "classRef": {"name": class_name},
            "scope": scope,
            "allocation": {"strategy": "FirstFit"},
        },
    });
    if let Some(r) = &class.spec.reservations {
        obj["spec"]["reservations"] = store::to_json(r);
    }
    if !class.spec.visibility.is_empty() {
        obj["spec"]["visibility"] = json!(class.spec.visibility);
    }
    let pool: IPPool = typed(&obj)?;
    let index = store::new_pool_index(&pool, block, Sync::AcceptNext)
        .map_err(|e| errors::bad_request(format!("ipam: invalid reservation: {e}")))?;
    ctx.ix.set_pool(&name, Some(index));
    obj["status"] = pools::ready_status(
        ctx,
        &name,
        block,
        scope,
        &format!("CIDR {block} allocated from {parent}"),
    );
    let stored = ctx.txn.put(&key(POOLS), obj);
    let rv = stored
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    ctx.ix.set_sync(&name, Sync::Rv(rv.to_string()));
    Ok(name)
}

/// What a claim takes from the pools of its class chain, on the plane of the project holding the
/// chain's root (this one's, or another's through a reference): the chain's pools (provisioned
/// on first use), a block of one, and the row that holds it under `row`.
#[derive(Clone)]
pub(super) struct Bind {
    /// The class and its ancestors, leaf first.
    pub chain: Vec<IPClass>,
    pub scope: Scope,
    /// The claim's address space.
    pub space: String,
    pub len: u8,
    pub address: String,
}

impl Bind {
    pub(super) fn run(&self, ctx: &mut Ctx<'_, '_>, row: &str) -> Result<(String, Block)> {
        // Only ancestors provision pools, so only their poolPer roles are needed; a class claimed
        // directly binds from the pool its chain provides.
        let missing = missing_roles(
            &self.scope,
            self.chain[1..].iter().flat_map(|c| c.spec.pool_per.iter()),
        );
        if !missing.is_empty() {
            return Err(errors::scope_roles_missing(&missing, "poolPer"));
        }
        let pool = resolve_pool(ctx, &self.chain, &self.scope)?;
        let block = choose_block(ctx, &pool, &self.space, self.len, &self.address)?;
        ctx.ix.insert(
            &pool,
            row,
            Row {
                block,
                kind: RowKind::Claim,
                digest: self.space.clone(),
            },
        );
        store::write_pool_status(ctx.txn, ctx.ix, &pool)?;
        Ok((pool, block))
    }
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
    let (pool, block) = match &root_project {
        None => bind.run(ctx, &store::claim_row_key(&ns, &alloc_name))?,
        Some(p) => source::bind_remote(ctx, p, bind, &ns, &alloc_name)?,
    };

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

/// The requested address, or the lowest free block of the pool in this address space.
fn choose_block(
    ctx: &Ctx<'_, '_>,
    pool: &str,
    space: &str,
    len: u8,
    address: &str,
) -> Result<Block> {
    let p = ctx
        .ix
        .pool(pool)
        .ok_or_else(|| errors::bad_request(format!("IPPool \"{pool}\" not found")))?;
    if address.is_empty() {
        return p.find_for_claim(space, len).ok_or_else(|| {
            let largest = p
                .largest_free_for_claim(space)
                .map_or("none".to_string(), |l| format!("/{l}"));
            let util = p.capacity().utilization_percent();
            errors::exhausted(
                pool,
                &format!("it cannot satisfy a /{len} (largest free {largest}, {util}% utilized)"),
            )
        });
    }
    let text = if address.contains('/') {
        address.to_string()
    } else {
        format!("{address}/{len}")
    };
    let block = Block::parse(&text).map_err(|_| {
        let what = if address.contains('/') {
            "a CIDR"
        } else {
            "an IP address"
        };
        errors::bad_request(format!(
            "ipam: invalid address: \"{address}\" is not {what}"
        ))
    })?;
    if !p.block.contains(&block) {
        return Err(errors::bad_request(format!(
            "ipam: address outside pool: {block} is outside pool \"{pool}\""
        )));
    }
    if !p.is_free_for_claim(space, &block) {
        return Err(errors::conflict(
            CLAIMS,
            "",
            &format!("ipam: address already allocated: {block}"),
            Vec::new(),
        ));
    }
    Ok(block)
}

pub fn update(_ctx: &mut Ctx<'_, '_>, old: &Value, new: &mut Value) -> Result<()> {
    let name = name_of(new).to_string();
    let o: IPClaim = typed(old)?;
    let n: IPClaim = typed(new)?;
    let mut errs = Vec::new();
    let fixed = |field: &str| {
        FieldError::immutable(field, "a claim binds its allocation once, at creation")
    };
    if o.spec.class_name != n.spec.class_name {
        errs.push(fixed("className"));
    }
    if o.spec.ip_family != n.spec.ip_family {
        errs.push(fixed("ipFamily"));
    }
    if o.spec.prefix_length != n.spec.prefix_length {
        errs.push(fixed("prefixLength"));
    }
    if o.spec.address != n.spec.address {
        errs.push(fixed("address"));
    }
    if o.spec.scope != n.spec.scope {
        errs.push(fixed("scope"));
    }
    if !["", RECLAIM_DELETE, RECLAIM_RETAIN].contains(&n.spec.reclaim_policy.as_str()) {
        errs.push(FieldError::not_supported(
            "spec.reclaimPolicy",
            format!(
                "{:?}: supported values: \"Delete\", \"Retain\"",
                n.spec.reclaim_policy
            ),
        ));
    }
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
    let pool = a
        .spec
        .pool_ref
        .as_ref()
        .map(|r| r.name.clone())
        .unwrap_or_default();
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
    if source::release_remote(ctx, &ns, &alloc_name)? {
        return Ok(());
    }
    if ctx
        .ix
        .remove(&pool, &store::claim_row_key(&ns, &alloc_name))
        .is_some()
    {
        store::write_pool_status(ctx.txn, ctx.ix, &pool)?;
    }
    Ok(())
}
