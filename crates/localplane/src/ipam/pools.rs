//! IPPool: validation, carving child pools from their parents, capacity, and refusing to delete a
//! pool that still holds allocations.

use egress_api::ipam::{FAMILY_IPV4, FAMILY_IPV6, IPPool, IPPoolSpec, LocalRef, Scope};
use serde_json::{Value, json};

use super::ctx::Ctx;
use super::digest;
use super::errors::{self, FieldError, Result};
use super::index::{Block, Row, RowKind, Sync};
use super::store::{self, POOLS, key, name_of, typed};

const KIND: &str = "IPPool";
pub const STRATEGIES: [&str; 3] = ["FirstFit", "BestFit", "LeastUtilized"];
pub const VISIBILITIES: [&str; 4] = ["", "platform", "consumer", "shared"];

fn is_root(spec: &IPPoolSpec) -> bool {
    spec.parent_pool_ref
        .as_ref()
        .is_none_or(|r| r.name.is_empty())
}

/// Field rules shared by create and update.
fn validate_common(spec: &IPPoolSpec, errs: &mut Vec<FieldError>) {
    if let Some(a) = &spec.allocation {
        for (field, v) in [
            ("minPrefixLength", a.min_prefix_length),
            ("maxPrefixLength", a.max_prefix_length),
        ] {
            if let Some(v) = v
                && !(0..=128).contains(&v)
            {
                errs.push(FieldError::invalid(
                    &format!("spec.allocation.{field}"),
                    format!("{v}: must be in [0, 128]"),
                ));
            }
        }
        if let (Some(min), Some(max)) = (a.min_prefix_length, a.max_prefix_length)
            && min > max
        {
            errs.push(FieldError::invalid(
                "spec.allocation.minPrefixLength",
                format!("minPrefixLength {min} must not exceed maxPrefixLength {max}"),
            ));
        }
        if !a.strategy.is_empty() && !STRATEGIES.contains(&a.strategy.as_str()) {
            errs.push(FieldError::not_supported(
                "spec.allocation.strategy",
                format!(
                    "{:?}: supported values: \"FirstFit\", \"BestFit\", \"LeastUtilized\"",
                    a.strategy
                ),
            ));
        }
    }
    if !VISIBILITIES.contains(&spec.visibility.as_str()) {
        errs.push(FieldError::not_supported(
            "spec.visibility",
            format!(
                "{:?}: supported values: \"platform\", \"consumer\", \"shared\"",
                spec.visibility
            ),
        ));
    }
    if spec.max_retention_lease.starts_with('-') || spec.max_retention_lease.starts_with('0') {
        errs.push(FieldError::invalid(
            "spec.maxRetentionLease",
            format!(
                "{:?}: a retention lease must be positive",
                spec.max_retention_lease
            ),
        ));
    }
    if spec.scope.keys().any(String::is_empty) {
        errs.push(FieldError::invalid(
            "spec.scope",
            "scope has an entry with an empty role name",
        ));
    }
}

/// Checks a root pool's own range; returns it when valid.
fn validate_root(spec: &IPPoolSpec, errs: &mut Vec<FieldError>) -> Option<Block> {
    let block = if spec.cidr.is_empty() {
        errs.push(FieldError::required(
            "spec.cidr",
            "cidr is required for root pools",
        ));
        None
    } else {
        match Block::parse(&spec.cidr) {
            Ok(b) => Some(b),
            Err(e) => {
                errs.push(FieldError::invalid(
                    "spec.cidr",
                    format!("invalid CIDR: {e}"),
                ));
                None
            }
        }
    };
    match spec.ip_family.as_str() {
        "" => errs.push(FieldError::required(
            "spec.ipFamily",
            "ipFamily is required for root pools",
        )),
        FAMILY_IPV4 | FAMILY_IPV6 => {
            if let Some(b) = block
                && b.family() != spec.ip_family
            {
                errs.push(FieldError::invalid(
                    "spec.ipFamily",
                    format!(
                        "ipFamily {} does not match cidr {}",
                        spec.ip_family, spec.cidr
                    ),
                ));
            }
        }
        other => errs.push(FieldError::not_supported(
            "spec.ipFamily",
            format!("{other:?}: supported values: \"IPv4\", \"IPv6\""),
        )),
    }
    if spec.prefix_length.is_some() {
        errs.push(FieldError::forbidden(
            "spec.prefixLength",
            "prefixLength sizes a child pool's block; a root pool's size is its cidr",
        ));
    }
    block
}

fn validate_child(spec: &IPPoolSpec, errs: &mut Vec<FieldError>) {
    if !spec.cidr.is_empty() {
        errs.push(FieldError::forbidden(
            "spec.cidr",
            "a child pool is carved from its parent; cidr is set only on root pools",
        ));
    }
    if !spec.ip_family.is_empty() {
        errs.push(FieldError::forbidden(
            "spec.ipFamily",
            "a child pool inherits its family from its parent; ipFamily is set only on root pools",
        ));
    }
    match spec.prefix_length {
        None => errs.push(FieldError::required(
            "spec.prefixLength",
            "prefixLength is required for child pools",
        )),
        Some(n) if !(1..=128).contains(&n) => errs.push(FieldError::invalid(
            "spec.prefixLength",
            format!("{n}: must be in [1, 128]"),
        )),
        Some(_) => {}
    }
}

/// The status a pool with a range carries.
pub fn ready_status(
    ctx: &Ctx<'_, '_>,
    name: &str,
    block: Block,
    scope: &Scope,
    message: &str,
) -> Value {
    let mut obj = json!({
        "status": {
            "phase": "Ready",
            "allocatedCIDR": block.to_string(),
            "ipFamily": block.family(),
            "scopeDigest": digest::pool(ctx.plane_project(), scope),
            "conditions": [store::condition("Allocated", "True", "AllocationSucceeded", message)],
        }
    });
    if let Some(p) = ctx.ix.pool(name) {
        store::set_capacity(&mut obj, p);
    }
    obj["status"].take()
}

pub fn create(ctx: &mut Ctx<'_, '_>, obj: &mut Value) -> Result<()> {
    let name = name_of(obj).to_string();
    let pool: IPPool = typed(obj)?;
    let spec = &pool.spec;
    let mut errs = Vec::new();
    validate_common(spec, &mut errs);
    let root = is_root(spec);
    let root_block = if root {
        validate_root(spec, &mut errs)
    } else {
        validate_child(spec, &mut errs);
        None
    };
    errors::check(KIND, &name, errs)?;
    // The plane would refuse this as AlreadyExists after the hook; refusing here keeps the index
    // from briefly describing a pool that was never stored.
    if ctx.txn.get(&key(POOLS), None, &name).is_some() {
        return Err(errors::already_exists(POOLS, &name));
    }

    let (block, message) = if let Some(block) = root_block {
        refuse_root_overlap(ctx, &name, block)?;
        (block, "IPPool is ready for allocation".to_string())
    } else {
        let parent = spec
            .parent_pool_ref
            .as_ref()
            .map(|r| r.name.clone())
            .unwrap_or_default();
        let len = spec.prefix_length.unwrap_or_default();
        let block = carve(ctx, &parent, &name, len)?;
        (block, format!("CIDR {block} allocated from {parent}"))
    };

    let index = store::new_pool_index(&pool, block, Sync::AcceptNext)
        .map_err(|e| errors::bad_request(format!("ipam: invalid reservation: {e}")))?;
    ctx.ix.set_pool(&name, Some(index));

    if spec
        .allocation
        .as_ref()
        .is_none_or(|a| a.strategy.is_empty())
    {
        obj["spec"]["allocation"]["strategy"] = json!("FirstFit");
    }
    obj["status"] = ready_status(ctx, &name, block, &spec.scope, &message);
    Ok(())
}

fn refuse_root_overlap(ctx: &Ctx<'_, '_>, name: &str, block: Block) -> Result<()> {
    for other in ctx.txn.list(&key(POOLS), None) {
        let o: IPPool = typed(&other)?;
        if !is_root(&o.spec) || name_of(&other) == name {
            continue;
        }
        if let Some(ob) = store::pool_block(&o)
            && ob.overlaps(&block)
        {
            let msg = format!(
                "spec.cidr {block} overlaps root IPPool \"{}\" ({ob}) in this project; two root pools over one \
                 range hand the same address to unrelated claims",
                name_of(&other)
            );
            return Err(errors::conflict(POOLS, name, &msg, Vec::new()));
        }
    }
    Ok(())
}

/// Carves `child`'s block of `/len` from `parent`, lowest free first, avoiding every row of every
/// address space there, and records the carve on the parent.
pub fn carve(ctx: &mut Ctx<'_, '_>, parent: &str, child: &str, len: i32) -> Result<Block> {
    let Some(p) = ctx.ix.pool(parent) else {
        return Err(errors::bad_request(format!(
            "parent IPPool not found: \"{parent}\""
        )));
    };
    let pb = p.block;
    if len <= i32::from(pb.len) || len > i32::from(pb.width()) {
        return Err(errors::bad_request(format!(
            "a /{len} cannot be carved from {} IPPool \"{parent}\" ({pb}): the block must be longer than /{} and at most /{}",
            pb.family(),
            pb.len,
            pb.width()
        )));
    }
    let Some(block) = p.find_exclusive(len as u8) else {
        let util = p.capacity().utilization_percent();
        return Err(errors::exhausted(
            parent,
            &format!("parent pool exhausted: no free /{len} is left ({util}% utilized)"),
        ));
    };
    ctx.ix.insert(
        parent,
        &store::carve_key(child),
        Row {
            block,
            kind: RowKind::Carve,
            digest: String::new(),
        },
    );
    store::write_pool_status(ctx.txn, ctx.ix, parent)?;
    Ok(block)
}

pub fn update(ctx: &mut Ctx<'_, '_>, old: &Value, new: &mut Value) -> Result<()> {
    let name = name_of(new).to_string();
    let o: IPPool = typed(old)?;
    let n: IPPool = typed(new)?;
    let mut errs = Vec::new();
    errs.extend(FieldError::immutables(
        &store::to_json(&o.spec),
        &store::to_json(&n.spec),
        [
            ("cidr", "a pool's range is fixed when it is created"),
            (
                "ipFamily",
                "a pool serves one address family for its whole life",
            ),
            (
                "parentPoolRef",
                "a child pool's block was carved from this parent",
            ),
            (
                "prefixLength",
                "a child pool's block was carved at this size",
            ),
        ],
    ));
    if o.spec.reservations != n.spec.reservations {
        errs.push(FieldError::forbidden(
            "spec.reservations",
            "spec.reservations is fixed when the pool is created and cannot be changed: the reserved blocks are \
             allocation records, and changing them would free or take addresses claims may hold",
        ));
    }
    validate_common(&n.spec, &mut errs);
    errors::check(KIND, &name, errs)?;

    // The range and capacity are the server's record, whatever a status write says.
    if new["status"].is_null() || !new["status"].is_object() {
        new["status"] = json!({});
    }
    for field in ["allocatedCIDR", "ipFamily"] {
        new["status"][field] = old["status"][field].clone();
    }
    new["status"]["scopeDigest"] = json!(digest::pool(ctx.plane_project(), &n.spec.scope));
    if let Some(p) = ctx.ix.pool(&name) {
        store::set_capacity(new, p);
        ctx.ix.set_sync(&name, Sync::AcceptNext);
    }
    Ok(())
}

pub fn delete(ctx: &mut Ctx<'_, '_>, obj: &Value) -> Result<()> {
    let name = name_of(obj).to_string();
    let pool: IPPool = typed(obj)?;
    let Some(p) = ctx.ix.pool(&name) else {
        return Ok(());
    };
    let active = p.active_rows();
    if active > 0 {
        let msg = format!(
            "cannot delete IPPool with {active} active allocation(s); release all claims and child pools first"
        );
        return Err(errors::conflict(POOLS, &name, &msg, Vec::new()));
    }
    if let Some(LocalRef { name: parent }) = &pool.spec.parent_pool_ref
        && ctx.ix.remove(parent, &store::carve_key(&name)).is_some()
    {
        store::write_pool_status(ctx.txn, ctx.ix, parent)?;
    }
    ctx.ix.set_pool(&name, None);
    Ok(())
}
