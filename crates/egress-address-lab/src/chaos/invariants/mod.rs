//! What a chaos run must never show, and what it must leave behind, judged from IPAM's store and
//! what each cell's server holds (reads only, never faulted or counted: see
//! [`super::server::CellServer`]).
//!
//! Checked at every sample during the run, where a read of the stores settles it:
//! * no two live shards, in any cell, carry one address;
//! * every address is a public unicast /128 (the documentation prefix allowed);
//! * every ref names an IPAM record holding exactly that address, made for that shard
//!   incarnation of that cell;
//! * no claim a live addressed shard references was ever deleted (or replaced under its name).
//!
//! Checked within a bounded time after a fault that lapses a leader's token quietly ends, and
//! after the faults stop ([`unaddressed`], judged by `lapse::Promptness`): every shard live then
//! is addressed.
//!
//! Checked once the faults stop and the controllers have settled, besides those four: every live
//! shard addressed, no write the API server had to refuse as write-once, and no claim left for a
//! deleted shard unless no controller was acting to see the delete, or the claim was created
//! (by a late request) after its shard was gone.
//!
//! The stores are read one after another, not at one instant, so a finding at a sample is kept
//! only when a re-read proves it held at one moment (see [`Observer::sample`]).
//!
//! One file per invariant (`shared`, `usable`, `refs`, `held`, `addressed`, `leftovers`); this
//! one holds the [`Observer`] that samples them all and the verdicts it keeps.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use egress_address::ipam::address::not_public_unicast;
use egress_address::ipam::naming::{
    ANNOTATION_CELL, ANNOTATION_SHARD_NAME, ANNOTATION_SHARD_NAMESPACE, ANNOTATION_SHARD_UID,
};
use localplane::Plane;
use localplane::testing::{
    CLAIM_NAMESPACE, PLATFORM_PROJECT, address_of, allocations_key, claims_key, is_addressed,
};
use serde_json::Value;

mod addressed;
mod held;
mod leftovers;
mod refs;
mod shared;
mod usable;

use addressed::each_addressed;
pub use addressed::unaddressed;
use held::Held;
pub use leftovers::{Deletion, Leftovers, Sample};
use refs::{made_for, ref_of, ref_problem};
use shared::{describe_shared, shared};
use usable::unusable;

use super::server::CellServer;
pub use super::server::NAMESPACE;

/// One cell of the run, as the checks read it.
pub struct CellRef<'a> {
    /// `a`, `b`: how reports name the cell.
    pub label: &'a str,
    /// The cell's identity, as its controllers mark claims with it.
    pub id: &'a str,
    pub server: &'a CellServer,
}

/// The stores a run is judged by: the platform project's IPAM and every cell.
pub struct Planes<'a> {
    /// The platform project's plane, where every cell's claims are.
    pub platform: &'a Plane,
    pub cells: Vec<CellRef<'a>>,
}

/// IPAM's records in the claim namespace, by name, read at one moment.
#[derive(Default)]
pub struct Records {
    pub claims: BTreeMap<String, Value>,
    pub allocations: BTreeMap<String, Value>,
}

impl Records {
    fn get(&self, kind: &str, name: &str) -> Option<&Value> {
        match kind {
            "IPClaim" => self.claims.get(name),
            "IPAllocation" => self.allocations.get(name),
            _ => None,
        }
    }
}

impl Planes<'_> {
    /// IPAM's records now (one store read per kind).
    pub fn records(&self) -> Records {
        let by_name = |key| {
            self.platform
                .objects(&key, Some(CLAIM_NAMESPACE))
                .into_iter()
                .map(|o| (name_of(&o).to_string(), o))
                .collect()
        };
        Records {
            claims: by_name(claims_key()),
            allocations: by_name(allocations_key()),
        }
    }

    /// Every cell's shards now, in the order of [`Planes::cells`] (one read per cell).
    pub async fn shards(&self) -> anyhow::Result<Vec<Vec<Value>>> {
        let mut out = Vec::with_capacity(self.cells.len());
        for c in &self.cells {
            out.push(c.server.shards().await?);
        }
        Ok(out)
    }

    async fn shard(&self, cell: usize, name: &str) -> anyhow::Result<Option<Value>> {
        self.cells[cell].server.shard(name).await
    }

    fn record(&self, kind: &str, name: &str) -> Option<Value> {
        let key = match kind {
            "IPClaim" => claims_key(),
            "IPAllocation" => allocations_key(),
            _ => return None,
        };
        self.platform.object(&key, Some(CLAIM_NAMESPACE), name)
    }
}

fn name_of(o: &Value) -> &str {
    o["metadata"]["name"].as_str().unwrap_or("")
}

/// The resourceVersion an object was last written at (its creation, for a claim: nothing
/// updates claims).
fn rv_of(o: &Value) -> u64 {
    o["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn uid_of(o: &Value) -> &str {
    o["metadata"]["uid"].as_str().unwrap_or("")
}

fn gone(o: Option<&Value>) -> bool {
    o.is_none_or(|o| !o["metadata"]["deletionTimestamp"].is_null())
}

fn annotation<'v>(o: &'v Value, key: &str) -> Option<&'v str> {
    o["metadata"]["annotations"][key].as_str()
}

/// A shard as a report names it: `cell a chaos/shard-7 (uid …)`.
fn who(label: &str, shard: &Value) -> String {
    format!(
        "cell {label} {NAMESPACE}/{} (uid {})",
        name_of(shard),
        uid_of(shard)
    )
}

/// How one invariant fared: how often it was judged, and every violation found (each once).
#[derive(Debug, Clone, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    pub checks: usize,
    pub violations: Vec<String>,
}

impl Verdict {
    /// One more judgement; each finding is listed once, stamped with when it was first seen.
    fn judge(&mut self, when: &str, found: Vec<String>, seen: &mut BTreeSet<String>) {
        self.checks += 1;
        for f in found {
            if seen.insert(f.clone()) {
                self.violations.push(format!("{when}: {f}"));
            }
        }
    }
}

/// The four invariants judged at every sample and at the end.
#[derive(Debug, Clone, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Sampled {
    /// No two live shards of any cell on one address.
    pub shared_addresses: Verdict,
    /// Every address a public unicast /128 (2001:db8::/32 allowed).
    pub unusable_addresses: Verdict,
    /// Every ref names a record holding exactly that address, made for that incarnation.
    pub ref_mismatches: Verdict,
    /// No claim of a live addressed shard deleted or replaced.
    pub deleted_live_claims: Verdict,
}

/// Watches the stores through a run: samples the four invariants, remembers which claims live
/// shards hold, and when each claim was first seen.
pub struct Observer {
    start: Instant,
    /// (cell index, shard uid) -> the record it references.
    held: BTreeMap<(usize, String), Held>,
    /// Claim uid -> when a sample first saw it.
    sightings: HashMap<String, Instant>,
    pub results: Sampled,
    /// Findings already reported, so a violation that persists is listed once.
    seen: BTreeSet<String>,
}

impl Observer {
    pub fn new(start: Instant) -> Observer {
        Observer {
            start,
            held: BTreeMap::new(),
            sightings: HashMap::new(),
            results: Sampled::default(),
            seen: BTreeSet::new(),
        }
    }

    /// One sample of the four invariants. Records are read first, then the cells, then whatever
    /// a finding needs re-read; a finding is kept only when it held at one moment:
    /// * a shared address, when every holder is re-read afterwards with its uid (an address is
    ///   written once, so each holder carried it throughout, while the others were read);
    /// * a ref mismatch, when the record is re-read afterwards with the uid read before the
    ///   shards (so that very record existed while the shard carried the ref);
    /// * a deleted claim, when a shard seen addressed at an earlier sample is still there, same
    ///   uid, after the records were read without the claim it references: the shard was live
    ///   throughout, so its claim was deleted while it lived.
    pub async fn sample(&mut self, planes: &Planes<'_>) -> anyhow::Result<()> {
        // Taken before the read: a claim missing from it was missing at this moment or later.
        let read_at = Instant::now();
        let records = planes.records();
        let cells = planes.shards().await?;
        self.sight(&records, read_at);
        let when = format!("at {:.1} s", self.start.elapsed().as_secs_f64());

        let mut shared_found = vec![];
        for (addr, holders) in shared(&cells) {
            let mut all_hold = true;
            for (i, name, uid) in &holders {
                let still = planes.shard(*i, name).await?.is_some_and(|s| {
                    uid_of(&s) == uid
                        && s["spec"]["shardAddressIPv6"]
                            .as_str()
                            .and_then(|t| t.parse::<Ipv6Addr>().ok())
                            .is_some_and(|a| a.to_string() == addr)
                });
                all_hold &= still;
            }
            if all_hold {
                shared_found.push(describe_shared(planes, &addr, &holders));
            }
        }
        self.results
            .shared_addresses
            .judge(&when, shared_found, &mut self.seen);

        let unusable_found = each_addressed(planes, &cells)
            .filter_map(|(label, s)| unusable(s).map(|why| format!("{}: {why}", who(label, s))))
            .collect::<Vec<_>>();
        self.results
            .unusable_addresses
            .judge(&when, unusable_found, &mut self.seen);

        let mut mismatches = vec![];
        for (i, shards) in cells.iter().enumerate() {
            let cell = &planes.cells[i];
            for s in shards.iter().filter(|s| is_addressed(s)) {
                let Ok(Some(problem)) = ref_problem(cell.id, s, &records) else {
                    continue;
                };
                let confirmed = match ref_of(s) {
                    Some((kind, name)) => match records.get(&kind, &name) {
                        Some(before) => planes
                            .record(&kind, &name)
                            .is_some_and(|after| uid_of(&after) == uid_of(before)),
                        // Nothing to re-read: the ref itself is malformed, and a shard's ref is
                        // written once.
                        None => true,
                    },
                    None => true,
                };
                if confirmed {
                    mismatches.push(format!("{}: {problem}", who(cell.label, s)));
                }
            }
        }
        self.results
            .ref_mismatches
            .judge(&when, mismatches, &mut self.seen);

        let deleted = self.track_held(planes, &records, &cells);
        self.results
            .deleted_live_claims
            .judge(&when, deleted, &mut self.seen);
        Ok(())
    }

    /// The end of the run: the four invariants once more on the settled stores (a missing
    /// record now counts: nothing is in flight), then the leftovers and the rest.
    pub async fn finish(
        mut self,
        planes: &Planes<'_>,
        run: &RunFacts<'_>,
    ) -> anyhow::Result<Findings> {
        self.sample(planes).await?;
        let records = planes.records();
        let cells = planes.shards().await?;
        let mut missing = vec![];
        for (label, s) in each_addressed(planes, &cells) {
            let id = planes
                .cells
                .iter()
                .find(|c| c.label == label)
                .map_or("", |c| c.id);
            if let Err(problem) = ref_problem(id, s, &records) {
                missing.push(format!("at the end: {}: {problem}", who(label, s)));
            }
        }
        let results = &mut self.results;
        results.ref_mismatches.violations.extend(missing);

        let mut unaddressed = vec![];
        for (i, shards) in cells.iter().enumerate() {
            let label = planes.cells[i].label;
            let stored: BTreeMap<&str, &Value> = shards.iter().map(|s| (name_of(s), s)).collect();
            for (name, uid) in run.cells[i].live {
                match stored.get(name.as_str()) {
                    None => unaddressed.push(format!("cell {label} {name}: expected live, gone")),
                    Some(s) if uid_of(s) != uid => unaddressed.push(format!(
                        "cell {label} {name}: uid {} where the run made {uid}",
                        uid_of(s)
                    )),
                    Some(s) if !is_addressed(s) => unaddressed.push(who(label, s)),
                    Some(_) => {}
                }
            }
        }

        let leftovers = self.leftovers_in(planes, &records, &cells, run);
        Ok(Findings {
            sampled: self.results,
            unaddressed,
            leftovers,
        })
    }
}

/// What the run itself knows about one cell, for the end of the run.
pub struct CellFacts<'a> {
    /// Shard name -> uid of every shard the run left live.
    pub live: &'a BTreeMap<String, String>,
    /// Shard uid -> when the run deleted it.
    pub deleted: &'a BTreeMap<String, Deletion>,
    /// Who could act, sampled through the run.
    pub samples: &'a [Sample],
}

pub struct RunFacts<'a> {
    /// In the order of [`Planes::cells`].
    pub cells: Vec<CellFacts<'a>>,
    /// How long after its shard's delete a claim may still be created by a request already
    /// under way (a paused process, a delayed commit, a request the client gave up on).
    pub late_window: Duration,
}

/// Everything the observer found.
#[derive(Debug, Clone, Default)]
pub struct Findings {
    pub sampled: Sampled,
    pub unaddressed: Vec<String>,
    pub leftovers: Leftovers,
}

#[cfg(test)]
mod tests;
