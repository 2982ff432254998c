//! Which claim DELETEs landed after their shard had been made again: the fault that a DELETE
//! reading no preconditions (Milo's) makes dangerous, counted so that a run shows it reached it.
//!
//! A hook on the platform plane notes every claim as IPAM releases it (the second step of Milo's
//! delete, when the claim leaves the store), with the shard incarnation its annotations name. The
//! run knows when it made each incarnation of each name in each cell; a release that lands after
//! a newer incarnation of its shard was made is one that a name shared by every incarnation would
//! have let remove the newer one's claim.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use egress_address::ipam::naming::{ANNOTATION_CELL, ANNOTATION_SHARD_NAME, ANNOTATION_SHARD_UID};
use kube::core::Status;
use localplane::{Caller, Plane, PlaneTxn, ResourceKey, StorageHooks};
use serde_json::Value;

use super::cell::Cell;

/// One claim released by IPAM.
#[derive(Debug, Clone)]
struct Landing {
    at: Instant,
    cell: String,
    shard: String,
    uid: String,
}

/// Notes every claim release on the platform plane.
#[derive(Clone, Default)]
pub struct Landings(Arc<Mutex<Vec<Landing>>>);

impl Landings {
    /// Starts noting the releases of `platform`.
    pub fn watch(platform: &Plane) -> Landings {
        let landings = Landings::default();
        platform.add_hooks(Arc::new(landings.clone()));
        landings
    }

    /// How many releases landed after a newer incarnation of their shard was made in their cell.
    pub fn after_recreation(&self, cells: &[Cell]) -> u64 {
        let landed = self.0.lock().unwrap_or_else(|e| e.into_inner());
        landed
            .iter()
            .filter(|l| {
                let Some(cell) = cells.iter().find(|c| c.id == l.cell) else {
                    return false;
                };
                let Some(&born) = cell.born.get(&l.uid) else {
                    return false;
                };
                cell.names.get(&l.shard).is_some_and(|uids| {
                    uids.iter().any(|u| {
                        *u != l.uid && cell.born.get(u).is_some_and(|b| *b > born && *b < l.at)
                    })
                })
            })
            .count() as u64
    }
}

impl StorageHooks for Landings {
    fn handles(&self, res: &ResourceKey) -> bool {
        res.group == egress_api::ipam::GROUP && res.plural == "ipclaims"
    }

    fn before_delete(
        &self,
        _: &mut dyn PlaneTxn,
        _: &Caller,
        _: &ResourceKey,
        obj: &Value,
    ) -> Result<(), Status> {
        let a = &obj["metadata"]["annotations"];
        let text = |key: &str| a[key].as_str().unwrap_or_default().to_string();
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Landing {
                at: Instant::now(),
                cell: text(ANNOTATION_CELL),
                shard: text(ANNOTATION_SHARD_NAME),
                uid: text(ANNOTATION_SHARD_UID),
            });
        Ok(())
    }
}
