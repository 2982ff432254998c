//! Reading and writing IPAM objects through the plane, the hidden records of rows held across
//! projects, and keeping the allocation index in step with what the plane actually stored.

use std::collections::HashSet;

use egress_api::ipam::{GROUP, IPPool, VERSION};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::errors::{self, Result};
use super::index::{Block, Index, IndexTxn, PoolIndex, Row, RowKind, Sync};
use crate::hooks::{PlaneTxn, ResourceKey};

pub const POOLS: &str = "ippools";
pub const CLASSES: &str = "ipclasses";
pub const CLAIMS: &str = "ipclaims";
pub const ALLOCATIONS: &str = "ipallocations";

pub const LABEL_PROVISIONED_BY_CLASS: &str = "ipam.miloapis.com/provisioned-by-class";
pub const LABEL_SCOPE_DIGEST: &str = "ipam.miloapis.com/scope-digest";
pub const ANNOTATION_DEFAULT_CLASS: &str = "ipam.miloapis.com/is-default-class";

pub fn key(plural: &str) -> ResourceKey {
    ResourceKey::new(GROUP, plural)
}

pub fn api_version() -> String {
    format!("{GROUP}/{VERSION}")
}

pub fn name_of(v: &Value) -> &str {
    v.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

pub fn namespace_of(v: &Value) -> &str {
    v.pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn rv_of(v: &Value) -> String {
    v.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// Reads a stored or submitted object as its Rust type. Schema validation already ran, so a
/// failure here is a server fault rather than a bad request.
pub fn typed<T: DeserializeOwned>(v: &Value) -> Result<T> {
    serde_json::from_value(v.clone())
        .map_err(|e| errors::internal(format!("cannot read {} {:?}: {e}", v["kind"], name_of(v))))
}

pub fn to_json<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).expect("IPAM types serialise")
}

/// A condition with the current time, in the shape `metav1.Condition` serialises to.
pub fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    json!({
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    })
}

/// The range a pool hands out from, once it has one.
pub fn pool_block(pool: &IPPool) -> Option<Block> {
    let status_cidr = pool
        .status
        .as_ref()
        .map(|s| s.allocated_cidr.as_str())
        .unwrap_or("");
    let cidr = if status_cidr.is_empty() {
        pool.spec.cidr.as_str()
    } else {
        status_cidr
    };
    (!cidr.is_empty())
        .then(|| Block::parse(cidr).ok())
        .flatten()
}

/// The leading and trailing reserved blocks of a pool's range.
pub fn reservation_blocks(
    pool: Block,
    r: &egress_api::ipam::Reservations,
) -> std::result::Result<Vec<Block>, String> {
    let leading = r.leading.unwrap_or(0);
    let trailing = r.trailing.unwrap_or(0);
    let unit = r.unit_prefix_length.unwrap_or(i32::from(pool.width()));
    if leading < 0 || trailing < 0 {
        return Err("leading and trailing must not be negative".into());
    }
    if unit < i32::from(pool.len) || unit > i32::from(pool.width()) {
        return Err(format!(
            "unitPrefixLength {unit} does not fit inside {pool} (must be in [{}, {}])",
            pool.len,
            pool.width()
        ));
    }
    let unit = unit as u8;
    let units = 1u128
        .checked_shl(u32::from(unit - pool.len))
        .unwrap_or(u128::MAX);
    let wanted = leading as u128 + trailing as u128;
    if wanted > units {
        return Err(format!(
            "{wanted} reserved /{unit} blocks do not fit in {pool}"
        ));
    }
    let step = 1u128
        .checked_shl(u32::from(pool.width() - unit))
        .unwrap_or(u128::MAX);
    let mut out = Vec::new();
    for i in 0..leading as u128 {
        out.push(Block {
            start: pool.start + i * step,
            len: unit,
            v6: pool.v6,
        });
    }
    for i in 0..trailing as u128 {
        out.push(Block {
            start: pool.start + (units - 1 - i) * step,
            len: unit,
            v6: pool.v6,
        });
    }
    Ok(out)
}

/// Where the hidden records live: no API serves this group, and the records are cluster-scoped,
/// so no namespace waits for them to go.
const INTERNAL_GROUP: &str = "ipam.localplane.internal";

/// In a pool's project: a row of one of its pools that another project's allocation holds.
pub fn held_key() -> ResourceKey {
    ResourceKey::new(INTERNAL_GROUP, "heldrows")
}

/// In a claim's project: an allocation whose row is in a pool of another project.
pub fn remote_key() -> ResourceKey {
    ResourceKey::new(INTERNAL_GROUP, "remoterows")
}

/// The key of a row held for `project`'s allocation `namespace/allocation`, in the pool's index
/// and as the name of its hidden record.
pub fn held_row_key(project: &str, namespace: &str, allocation: &str) -> String {
    format!("{project}:{namespace}/{allocation}")
}

/// The name of the hidden record of a remote allocation, in its own project.
pub fn remote_name(namespace: &str, allocation: &str) -> String {
    format!("{namespace}/{allocation}")
}

pub fn reservation_key(i: usize) -> String {
    format!("reservation:{i}")
}

pub fn carve_key(child: &str) -> String {
    format!("pool:{child}")
}

pub fn claim_row_key(namespace: &str, allocation: &str) -> String {
    format!("{namespace}/{allocation}")
}

/// A fresh pool index holding the pool's reservations.
pub fn new_pool_index(
    pool: &IPPool,
    block: Block,
    sync: Sync,
) -> std::result::Result<PoolIndex, String> {
    let mut p = PoolIndex::new(block, sync);
    if let Some(r) = &pool.spec.reservations {
        for (i, b) in reservation_blocks(block, r)?.into_iter().enumerate() {
            p.insert_row(
                reservation_key(i),
                Row {
                    block: b,
                    kind: RowKind::Reservation,
                    digest: String::new(),
                },
            );
        }
    }
    Ok(p)
}

/// Rebuilds the index from the plane's objects when it may not match them: on first use, and
/// whenever a pool's stored version is not the one the index last wrote (a write rolled back
/// after this hook accepted it, or a pool written some other way).
pub fn ensure_fresh(txn: &dyn PlaneTxn, ix: &mut IndexTxn<'_>) -> Result<()> {
    let pools = txn.list(&key(POOLS), None);
    let mut stale = !ix.index().built;
    let mut seen = 0usize;
    let mut adopt = Vec::new();
    for obj in &pools {
        let pool: IPPool = typed(obj)?;
        if pool_block(&pool).is_none() {
            continue;
        }
        seen += 1;
        let name = name_of(obj);
        match ix.pool(name).map(|p| &p.sync) {
            None => stale = true,
            Some(Sync::AcceptNext) => adopt.push((name.to_string(), rv_of(obj))),
            Some(Sync::Rv(rv)) if *rv != rv_of(obj) => stale = true,
            Some(_) => {}
        }
    }
    if seen != ix.index().pools.len() {
        stale = true;
    }
    if stale {
        let rebuilt = rebuild(txn, &pools)?;
        ix.replace(rebuilt);
    } else {
        for (name, rv) in adopt {
            ix.adopt_sync(&name, rv);
        }
    }
    Ok(())
}

fn rebuild(txn: &dyn PlaneTxn, pool_objs: &[Value]) -> Result<Index> {
    let mut ix = Index {
        built: true,
        ..Index::default()
    };
    let mut pools = Vec::new();
    for obj in pool_objs {
        let pool: IPPool = typed(obj)?;
        let Some(block) = pool_block(&pool) else {
            continue;
        };
        // A reservation that no longer fits was refused at create; an unreadable one reserves nothing.
        let p = new_pool_index(&pool, block, Sync::Rv(rv_of(obj)))
            .unwrap_or_else(|_| PoolIndex::new(block, Sync::Rv(rv_of(obj))));
        ix.pools.insert(name_of(obj).to_string(), p);
        pools.push((name_of(obj).to_string(), pool, block));
    }
    for (name, pool, block) in &pools {
        if let Some(parent) = pool.spec.parent_pool_ref.as_ref().map(|r| r.name.as_str())
            && let Some(p) = ix.pools.get_mut(parent)
            && p.block.contains(block)
        {
            p.insert_row(
                carve_key(name),
                Row {
                    block: *block,
                    kind: RowKind::Carve,
                    digest: String::new(),
                },
            );
        }
    }
    // An allocation whose row is in another project's pool is that project's to index; a row
    // of this project's pools held for another project is this one's.
    let remote: HashSet<String> = txn
        .list(&remote_key(), None)
        .iter()
        .map(|r| name_of(r).to_string())
        .collect();
    for held in txn.list(&held_key(), None) {
        let (Some(pool), Ok(block)) = (
            held["pool"].as_str().and_then(|p| ix.pools.get_mut(p)),
            Block::parse(held["allocatedCIDR"].as_str().unwrap_or("")),
        ) else {
            continue;
        };
        if pool.block.contains(&block) {
            pool.insert_row(
                name_of(&held).to_string(),
                Row {
                    block,
                    kind: RowKind::Claim,
                    digest: held["scopeDigest"].as_str().unwrap_or("").to_string(),
                },
            );
        }
    }
    for obj in txn.list(&key(ALLOCATIONS), None) {
        if remote.contains(&remote_name(namespace_of(&obj), name_of(&obj))) {
            continue;
        }
        let a: egress_api::ipam::IPAllocation = typed(&obj)?;
        let Some(status) = &a.status else { continue };
        let Ok(block) = Block::parse(&status.allocated_cidr) else {
            continue;
        };
        let Some(pool) = a
            .spec
            .pool_ref
            .as_ref()
            .and_then(|r| ix.pools.get_mut(&r.name))
        else {
            continue;
        };
        if !pool.block.contains(&block) {
            continue;
        }
        let kind = match a.spec.purpose.as_str() {
            "Reservation" => RowKind::Reservation,
            "PoolCarve" => RowKind::Carve,
            _ => RowKind::Claim,
        };
        pool.insert_row(
            claim_row_key(namespace_of(&obj), name_of(&obj)),
            Row {
                block,
                kind,
                digest: status.scope_digest.clone(),
            },
        );
    }
    Ok(ix)
}

/// Writes a pool's capacity after its rows changed, and records the version the write produced
/// so a later rollback of this write is noticed.
pub fn write_pool_status(txn: &mut dyn PlaneTxn, ix: &mut IndexTxn<'_>, pool: &str) -> Result<()> {
    let Some(mut obj) = txn.get(&key(POOLS), None, pool) else {
        return Err(errors::bad_request(format!("IPPool \"{pool}\" not found")));
    };
    let Some(p) = ix.pool(pool) else {
        return Err(errors::internal(format!(
            "IPPool \"{pool}\" is not indexed"
        )));
    };
    set_capacity(&mut obj, p);
    let stored = txn.put(&key(POOLS), obj);
    ix.set_sync(pool, Sync::Rv(rv_of(&stored)));
    Ok(())
}

/// Fills `status.capacity` and `status.utilizationPercent` from the index.
pub fn set_capacity(obj: &mut Value, p: &PoolIndex) {
    let c = p.capacity();
    if !obj["status"].is_object() {
        obj["status"] = json!({});
    }
    obj["status"]["capacity"] = json!({
        "total": c.total.to_string(),
        "allocated": c.allocated.to_string(),
        "available": c.available.to_string(),
    });
    obj["status"]["utilizationPercent"] = json!(c.utilization_percent());
}
