//! Binding a claim: what it takes from the pools of its class chain (the chain's pools,
//! provisioned on first use, a block of one, and the row that holds it), and freeing that row.
//!
//! The pools are those of the project holding the chain's root: this plane's, or, through a
//! class reference (`source.rs`), another project's. Milo keeps every project in one database;
//! here each project is a plane. A claim in project A whose class chain has its root in project P
//! binds from P's pools, and so in two places: A stores the claim and its `IPAllocation` (with a
//! hidden record naming P), P's pool holds the row (with a hidden record, so that P's index
//! rebuilt from its store still holds it). The chain's pools are provisioned in P too, whichever
//! project defines each level. The hook on A works out the block on P and undoes it, and P takes
//! it for real once A's write commits (nothing changes P in between: the planes of a realm write
//! one at a time). A dry run or a refusal of A's write leaves P untouched. Releasing such an
//! allocation frees P's row the same way.

use std::collections::BTreeSet;

use egress_api::ipam::{IPClass, IPPool, Scope};
use serde_json::{Value, json};

use super::classes::block_len;
use super::ctx::Ctx;
use super::errors::{self, Result};
use super::index::{Block, Row, RowKind, Sync};
use super::store::{
    self, CLAIMS, LABEL_PROVISIONED_BY_CLASS, LABEL_SCOPE_DIGEST, POOLS, held_key, held_row_key,
    key, name_of, remote_key, remote_name, typed,
};
use super::{digest, pools};

/// Roles a scope lacks; a ref without a name counts as missing.
pub(super) fn missing_roles<'r>(
    scope: &Scope,
    roles: impl IntoIterator<Item = &'r String>,
) -> Vec<String> {
    let mut missing: Vec<String> = roles
        .into_iter()
        .filter(|r| scope.get(*r).is_none_or(|s| s.name.is_empty()))
        .cloned()
        .collect();
    missing.sort();
    missing.dedup();
    missing
}

pub(super) fn project_scope<'r>(
    scope: &Scope,
    roles: impl IntoIterator<Item = &'r String>,
) -> Scope {
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
    fn run(&self, ctx: &mut Ctx<'_, '_>, row: &str) -> Result<(String, Block)> {
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

    /// Takes the block for this plane's allocation `namespace/allocation` from the pools of
    /// `project` (`None`: this plane's), the project holding the chain's root. Returns the pool
    /// and the block.
    pub(super) fn take(
        self,
        ctx: &mut Ctx<'_, '_>,
        project: Option<&str>,
        namespace: &str,
        allocation: &str,
    ) -> Result<(String, Block)> {
        match project {
            None => self.run(ctx, &store::claim_row_key(namespace, allocation)),
            Some(p) => bind_remote(ctx, p, self, namespace, allocation),
        }
    }
}

/// Frees the row of this plane's allocation `namespace/allocation`, wherever it is: in another
/// project's pool (see [`release_remote`]), or in this plane's `pool`.
pub(super) fn release(
    ctx: &mut Ctx<'_, '_>,
    pool: Option<&str>,
    namespace: &str,
    allocation: &str,
) -> Result<()> {
    if release_remote(ctx, namespace, allocation)? {
        return Ok(());
    }
    let Some(pool) = pool else {
        return Ok(());
    };
    if ctx
        .ix
        .remove(pool, &store::claim_row_key(namespace, allocation))
        .is_some()
    {
        store::write_pool_status(ctx.txn, ctx.ix, pool)?;
    }
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

/// Binds `bind` from the pools of `project` (another project of the realm) for this plane's
/// allocation `namespace/allocation`: works the block out on that project's plane and undoes
/// it, records here that the row is there, and has that plane take the block once this write
/// commits. Returns the pool and the block.
fn bind_remote(
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
fn release_remote(ctx: &mut Ctx<'_, '_>, namespace: &str, allocation: &str) -> Result<bool> {
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
