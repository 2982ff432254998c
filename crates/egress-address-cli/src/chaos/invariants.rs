//! What a chaos run must never show, and what it must leave behind, judged from the stores of
//! its worlds (reads only: no request, so nothing here disturbs the run or the counters).
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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use egress_address::ipam::address::not_public_unicast;
use egress_address::ipam::naming::{
    ANNOTATION_CELL, ANNOTATION_SHARD_NAME, ANNOTATION_SHARD_NAMESPACE, ANNOTATION_SHARD_UID,
};
use localplane::testing::{
    CLAIM_NAMESPACE, PLATFORM_PROJECT, World, address_of, allocations_key, claims_key,
    is_addressed, shards_key,
};
use serde_json::Value;

/// The namespace a chaos run's shards live in, in every cell.
pub const NAMESPACE: &str = "chaos";

/// One cell of the run, as the checks read it.
pub struct CellRef<'a> {
    /// `a`, `b`: how reports name the cell.
    pub label: &'a str,
    /// The cell's identity, as its controllers mark claims with it.
    pub id: &'a str,
    pub world: &'a World,
}

/// The stores a run is judged by: the platform project's IPAM and every cell.
pub struct Planes<'a> {
    pub platform: &'a World,
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
        let Some(p) = self.platform.lp().project(PLATFORM_PROJECT) else {
            return Records::default();
        };
        let by_name = |key| {
            p.objects(&key, Some(CLAIM_NAMESPACE))
                .into_iter()
                .map(|o| (name_of(&o).to_string(), o))
                .collect()
        };
        Records {
            claims: by_name(claims_key()),
            allocations: by_name(allocations_key()),
        }
    }

    /// Every cell's shards now, in the order of [`Planes::cells`] (one store read per cell).
    pub fn shards(&self) -> Vec<Vec<Value>> {
        self.cells
            .iter()
            .map(|c| c.world.lp().cell().objects(&shards_key(), Some(NAMESPACE)))
            .collect()
    }

    fn shard(&self, cell: usize, name: &str) -> Option<Value> {
        self.cells[cell]
            .world
            .lp()
            .cell()
            .object(&shards_key(), Some(NAMESPACE), name)
    }

    fn record(&self, kind: &str, name: &str) -> Option<Value> {
        let key = match kind {
            "IPClaim" => claims_key(),
            "IPAllocation" => allocations_key(),
            _ => return None,
        };
        self.platform
            .lp()
            .project(PLATFORM_PROJECT)?
            .object(&key, Some(CLAIM_NAMESPACE), name)
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

/// The record a shard's ref names: kind and name.
fn ref_of(shard: &Value) -> Option<(String, String)> {
    let r = &shard["spec"]["shardAddressIPv6ClaimRef"];
    Some((
        r["kind"].as_str()?.to_string(),
        r["name"].as_str()?.to_string(),
    ))
}

/// What is wrong with an addressed shard's ref, if anything, judged against `records`: the
/// record it names must exist in the platform project's claim namespace, hold exactly this
/// address (so nothing was written from an unbound claim), and a claim must have been made for
/// this incarnation of the shard by this cell. `Err` when the record is missing (a sample cannot
/// tell a claim made since the records were read from one that is gone).
fn ref_problem(cell_id: &str, shard: &Value, records: &Records) -> Result<Option<String>, String> {
    let r = &shard["spec"]["shardAddressIPv6ClaimRef"];
    if r.is_null() {
        return Ok(Some("addressed without a claim ref".into()));
    }
    let kind = r["kind"].as_str().unwrap_or("");
    if !matches!(kind, "IPClaim" | "IPAllocation") {
        return Ok(Some(format!("ref kind {kind:?}")));
    }
    if r["project"].as_str() != Some(PLATFORM_PROJECT) {
        return Ok(Some(format!("ref project {}", r["project"])));
    }
    if r["namespace"].as_str() != Some(CLAIM_NAMESPACE) {
        return Ok(Some(format!("ref namespace {}", r["namespace"])));
    }
    let rname = r["name"].as_str().unwrap_or("");
    let record = match records.get(kind, rname) {
        Some(rec) if !gone(Some(rec)) => rec,
        _ => return Err(format!("{kind} {rname} does not exist")),
    };
    let addr = shard["spec"]["shardAddressIPv6"].as_str().unwrap_or("");
    let cidr = record["status"]["allocatedCIDR"].as_str().unwrap_or("");
    match (address_of(cidr), addr.parse::<Ipv6Addr>()) {
        (Some(held), Ok(carried)) if held == carried => {}
        _ => {
            return Ok(Some(format!(
                "carries {addr} but {kind} {rname} holds {cidr:?}"
            )));
        }
    }
    if kind == "IPClaim" {
        let marks = (
            annotation(record, ANNOTATION_SHARD_NAMESPACE),
            annotation(record, ANNOTATION_SHARD_NAME),
            annotation(record, ANNOTATION_CELL),
            annotation(record, ANNOTATION_SHARD_UID),
        );
        let want = (
            Some(NAMESPACE),
            Some(name_of(shard)),
            Some(cell_id),
            Some(uid_of(shard)),
        );
        if marks != want {
            return Ok(Some(format!(
                "claim {rname} was made for another shard, cell or incarnation: {}",
                record["metadata"]["annotations"]
            )));
        }
    }
    Ok(None)
}

/// A shard as a report names it: `cell a chaos/shard-7 (uid …)`.
fn who(label: &str, shard: &Value) -> String {
    format!(
        "cell {label} {NAMESPACE}/{} (uid {})",
        name_of(shard),
        uid_of(shard)
    )
}

/// Addresses carried by more than one live shard across all cells: each with its holders as
/// (cell index, shard name, shard uid).
fn shared(cells: &[Vec<Value>]) -> BTreeMap<String, Vec<(usize, String, String)>> {
    let mut by: BTreeMap<String, Vec<(usize, String, String)>> = BTreeMap::new();
    for (i, shards) in cells.iter().enumerate() {
        for s in shards.iter().filter(|s| is_addressed(s)) {
            let text = s["spec"]["shardAddressIPv6"].as_str().unwrap_or("");
            // One address has many spellings; compare what they mean.
            let key = text
                .parse::<Ipv6Addr>()
                .map_or_else(|_| text.to_string(), |a| a.to_string());
            by.entry(key)
                .or_default()
                .push((i, name_of(s).to_string(), uid_of(s).to_string()));
        }
    }
    by.retain(|_, v| v.len() > 1);
    by
}

/// Why an address no egress shard may carry was written, if it was.
fn unusable(shard: &Value) -> Option<String> {
    let text = shard["spec"]["shardAddressIPv6"].as_str().unwrap_or("");
    match text.parse::<Ipv6Addr>() {
        Err(_) => Some(format!("{text:?} is not an IPv6 address")),
        Ok(a) => not_public_unicast(a).map(|why| format!("{a} is {why}")),
    }
}

/// The claim a live addressed shard incarnation was seen to reference.
#[derive(Debug, Clone)]
struct Held {
    shard: String,
    kind: String,
    record: String,
    /// The record's uid once it has been read (a claim made after the records were read is
    /// first seen at the next sample).
    record_uid: Option<String>,
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
    pub fn sample(&mut self, planes: &Planes<'_>) {
        // Taken before the read: a claim missing from it was missing at this moment or later.
        let read_at = Instant::now();
        let records = planes.records();
        let cells = planes.shards();
        self.sight(&records, read_at);
        let when = format!("at {:.1} s", self.start.elapsed().as_secs_f64());

        let shared = shared(&cells)
            .into_iter()
            .filter(|(addr, holders)| {
                holders.iter().all(|(i, name, uid)| {
                    planes.shard(*i, name).is_some_and(|s| {
                        uid_of(&s) == uid
                            && s["spec"]["shardAddressIPv6"]
                                .as_str()
                                .and_then(|t| t.parse::<Ipv6Addr>().ok())
                                .is_some_and(|a| a.to_string() == *addr)
                    })
                })
            })
            .map(|(addr, holders)| describe_shared(planes, &addr, &holders))
            .collect::<Vec<_>>();
        self.results
            .shared_addresses
            .judge(&when, shared, &mut self.seen);

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
    }

    fn sight(&mut self, records: &Records, at: Instant) {
        for c in records.claims.values() {
            self.sightings.entry(uid_of(c).to_string()).or_insert(at);
        }
    }

    /// Checks the claims held by shards seen addressed earlier, then remembers what the shards
    /// addressed now hold. `records` was read before `cells`.
    fn track_held(
        &mut self,
        planes: &Planes<'_>,
        records: &Records,
        cells: &[Vec<Value>],
    ) -> Vec<String> {
        let live: BTreeMap<(usize, &str), &Value> = cells
            .iter()
            .enumerate()
            .flat_map(|(i, shards)| shards.iter().map(move |s| ((i, uid_of(s)), s)))
            .collect();
        let mut found = vec![];
        self.held.retain(|(i, uid), h| {
            if !live.contains_key(&(*i, uid.as_str())) {
                // The shard is gone: releasing its claim is the controller's job, not a fault.
                return false;
            }
            let now = records.get(&h.kind, &h.record);
            let lost = if gone(now) {
                Some(format!("was deleted while {} lived", h.shard))
            } else {
                let now_uid = now.map(uid_of).unwrap_or("");
                match &h.record_uid {
                    Some(was) if was != now_uid => Some(format!(
                        "was replaced (uid {was} -> {now_uid}) while {} lived",
                        h.shard
                    )),
                    _ => None,
                }
            };
            match lost {
                Some(why) => {
                    found.push(format!("{} {} {why}", h.kind, h.record));
                    false
                }
                None => {
                    if h.record_uid.is_none() {
                        h.record_uid = now
                            .filter(|r| made_for(r, &h.kind, planes.cells[*i].id, uid))
                            .map(|r| uid_of(r).to_string());
                    }
                    true
                }
            }
        });
        for ((i, uid), s) in live {
            if !is_addressed(s) || self.held.contains_key(&(i, uid.to_string())) {
                continue;
            }
            let Some((kind, record)) = ref_of(s) else {
                continue;
            };
            let record_uid = records
                .get(&kind, &record)
                .filter(|r| !gone(Some(r)) && made_for(r, &kind, planes.cells[i].id, uid))
                .map(|r| uid_of(r).to_string());
            self.held.insert(
                (i, uid.to_string()),
                Held {
                    shard: who(planes.cells[i].label, s),
                    kind,
                    record,
                    record_uid,
                },
            );
        }
        found
    }

    /// The end of the run: the four invariants once more on the settled stores (a missing
    /// record now counts: nothing is in flight), then the leftovers and the rest.
    pub fn finish(mut self, planes: &Planes<'_>, run: &RunFacts<'_>) -> Findings {
        self.sample(planes);
        let records = planes.records();
        let cells = planes.shards();
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
        Findings {
            sampled: self.results,
            unaddressed,
            leftovers,
        }
    }

    /// Claims left for shards that are gone, sorted by whether a release is owed: from the
    /// stores now.
    pub fn leftovers(&self, planes: &Planes<'_>, run: &RunFacts<'_>) -> Leftovers {
        let records = planes.records();
        let cells = planes.shards();
        self.leftovers_in(planes, &records, &cells, run)
    }

    fn leftovers_in(
        &self,
        planes: &Planes<'_>,
        records: &Records,
        cells: &[Vec<Value>],
        run: &RunFacts<'_>,
    ) -> Leftovers {
        let mut leftovers = Leftovers::default();
        for c in records.claims.values().filter(|c| !gone(Some(c))) {
            if annotation(c, ANNOTATION_SHARD_NAMESPACE) != Some(NAMESPACE) {
                continue;
            }
            let shard_uid = annotation(c, ANNOTATION_SHARD_UID).unwrap_or("");
            let shard_name = annotation(c, ANNOTATION_SHARD_NAME).unwrap_or("");
            let cell = planes
                .cells
                .iter()
                .position(|x| Some(x.id) == annotation(c, ANNOTATION_CELL));
            let live = cell.is_some_and(|i| {
                cells[i]
                    .iter()
                    .any(|s| uid_of(s) == shard_uid && name_of(s) == shard_name)
            });
            if live {
                continue;
            }
            let label = cell.map_or("?", |i| planes.cells[i].label);
            let text = format!(
                "claim {} for cell {label} {NAMESPACE}/{shard_name} (uid {shard_uid})",
                name_of(c)
            );
            let deletion = cell.and_then(|i| run.cells[i].deleted.get(shard_uid));
            let deleted_at = deletion.map(|d| d.at);
            // The platform plane's resourceVersion orders the claim's creation after the delete;
            // the time bounds how long after it a request can still have been under way.
            let late = deletion.is_some_and(|d| {
                rv_of(c) > d.platform_rv
                    && self
                        .sightings
                        .get(uid_of(c))
                        .is_some_and(|first| *first <= d.at + run.late_window)
            });
            if late {
                leftovers.created_after_delete.push(text);
            } else if cell.is_some_and(|i| excused(run.cells[i].samples, deleted_at.as_ref())) {
                leftovers.unseen_delete.push(text);
            } else {
                leftovers.owed.push(text);
            }
        }
        leftovers
    }
}

/// When the run deleted a shard.
#[derive(Debug, Clone, Copy)]
pub struct Deletion {
    pub at: Instant,
    /// The platform plane's resourceVersion right after the delete: a claim stored with a
    /// greater one was created after it.
    pub platform_rv: u64,
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

/// Claims left for shards that are gone.
#[derive(Debug, Clone, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Leftovers {
    /// Owed a release: a violation.
    pub owed: Vec<String>,
    /// The delete happened while no controller was acting long enough to see it (no finalizer,
    /// and the grant has no `list` on claims: by design such a claim stays until an operator
    /// deletes it).
    pub unseen_delete: Vec<String>,
    /// Created after the shard's delete (by the platform plane's resourceVersion), and seen
    /// within the late window: by a request under way when the delete came (a SIGSTOPped
    /// process that woke, a second writer, a controller killed after its create landed) while
    /// the controller that saw the delete had found no claim to release.
    pub created_after_delete: Vec<String>,
}

/// Everything the observer found.
#[derive(Debug, Clone, Default)]
pub struct Findings {
    pub sampled: Sampled,
    pub unaddressed: Vec<String>,
    pub leftovers: Leftovers,
}

/// Of the shard incarnations `expected` (name -> uid), those not stored addressed in `world`'s
/// cell now: unaddressed, or not stored as that incarnation.
pub fn unaddressed(world: &World, expected: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let cell = world.lp().cell();
    expected
        .iter()
        .filter(|(name, uid)| {
            cell.object(&shards_key(), Some(NAMESPACE), name)
                .is_none_or(|s| uid_of(&s) != uid.as_str() || !is_addressed(&s))
        })
        .map(|(n, u)| (n.clone(), u.clone()))
        .collect()
}

fn made_for(record: &Value, kind: &str, cell_id: &str, shard_uid: &str) -> bool {
    kind != "IPClaim"
        || (annotation(record, ANNOTATION_CELL) == Some(cell_id)
            && annotation(record, ANNOTATION_SHARD_UID) == Some(shard_uid))
}

fn each_addressed<'p, 'v>(
    planes: &'p Planes<'_>,
    cells: &'v [Vec<Value>],
) -> impl Iterator<Item = (&'p str, &'v Value)> {
    cells.iter().enumerate().flat_map(move |(i, shards)| {
        shards
            .iter()
            .filter(|s| is_addressed(s))
            .map(move |s| (planes.cells[i].label, s))
    })
}

fn describe_shared(planes: &Planes<'_>, addr: &str, holders: &[(usize, String, String)]) -> String {
    let names = holders
        .iter()
        .map(|(i, name, uid)| {
            format!(
                "cell {} {NAMESPACE}/{name} (uid {uid})",
                planes.cells[*i].label
            )
        })
        .collect::<Vec<_>>();
    format!("{addr}: {}", names.join(", "))
}

/// One sample of who could act: alive, ready, not stopped, and (under election) holding the
/// lease.
#[derive(Debug, Clone)]
pub struct Sample {
    pub at: Instant,
    pub acting: BTreeSet<String>,
}

/// How long one controller must keep acting after a delete for its release to be owed.
const COVER: Duration = Duration::from_secs(8);

/// Whether a delete at `at` went unseen through no fault of the controller: no single process
/// was acting from the delete through [`COVER`] after it (or to the end of the run).
pub fn excused(samples: &[Sample], at: Option<&Instant>) -> bool {
    let Some(at) = at else { return false };
    let window: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.at >= *at && s.at <= *at + COVER)
        .collect();
    let Some(first) = window.first() else {
        return true;
    };
    // The sample just before the delete counts too: the process had to be acting already.
    let before = samples.iter().rev().find(|s| s.at < *at);
    let candidates: BTreeSet<String> = match before {
        Some(b) => first.acting.intersection(&b.acting).cloned().collect(),
        None => first.acting.clone(),
    };
    !candidates
        .iter()
        .any(|p| window.iter().all(|s| s.acting.contains(p)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use egress_address::ipam::spec::{ClaimRequest, desired_claim};
    use egress_api::shard::EgressShard;
    use kube::Api;
    use kube::api::{DeleteParams, PostParams};
    use localplane::testing::{ADDRESS_CLASS, LOCATION, answer_claim, shard_object};
    use serde_json::json;

    fn at(base: Instant, ms: u64, acting: &[&str]) -> Sample {
        Sample {
            at: base + Duration::from_millis(ms),
            acting: acting.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn a_delete_is_owed_only_when_one_controller_acted_throughout() {
        let t0 = Instant::now();
        let steady: Vec<Sample> = (0..200).map(|i| at(t0, i * 100, &["a"])).collect();
        let deleted = t0 + Duration::from_millis(1050);
        assert!(!excused(&steady, Some(&deleted)));

        // The only acting controller was killed (or stopped) two seconds after the delete.
        let killed: Vec<Sample> = (0..200)
            .map(|i| at(t0, i * 100, if i < 30 { &["a"] } else { &[] }))
            .collect();
        assert!(excused(&killed, Some(&deleted)));

        // A hand-over from a to b within the window does not count as one controller acting.
        let handover: Vec<Sample> = (0..200)
            .map(|i| at(t0, i * 100, if i < 30 { &["a"] } else { &["b"] }))
            .collect();
        assert!(excused(&handover, Some(&deleted)));

        // A claim for a shard the run never deleted is never excused.
        assert!(!excused(&killed, None));
    }

    #[test]
    fn only_public_unicast_addresses_pass() {
        let with = |a: &str| {
            let mut s = shard_object(NAMESPACE, "s");
            s["spec"]["shardAddressIPv6"] = json!(a);
            unusable(&s)
        };
        assert_eq!(
            with("2001:db8::7"),
            None,
            "the documentation prefix is allowed"
        );
        assert_eq!(with("2607:ed40:70::1"), None);
        for bad in [
            "fe80::1",
            "ff02::1",
            "2607:ed40:70::",
            "::1",
            "64:ff9b::c000:201",
        ] {
            assert!(with(bad).is_some(), "{bad} passed");
        }
        assert!(with("not-an-address").unwrap().contains("not an IPv6"));
    }

    /// The annotation a planted claim names the address IPAM is to answer with.
    const ANSWER: &str = "chaos.test/answer";

    /// Two worlds as a run has them: cell a with the platform project, cell b claiming from it.
    /// IPAM answers each planted claim with the address its [`ANSWER`] annotation names.
    async fn two_cells() -> (World, World) {
        let a = crate::fleet::world().start().await.unwrap();
        let b = crate::fleet::world().cell_only().start().await.unwrap();
        a.lp().cell().ensure_namespace(NAMESPACE);
        b.lp().cell().ensure_namespace(NAMESPACE);
        a.on_claim_create(|c| {
            if let Some(cidr) = c["metadata"]["annotations"][ANSWER].as_str() {
                let cidr = cidr.to_string();
                answer_claim(c, &cidr);
            }
        });
        (a, b)
    }

    fn planes<'a>(a: &'a World, b: &'a World, ids: &'a [String; 2]) -> Planes<'a> {
        Planes {
            platform: a,
            cells: vec![
                CellRef {
                    label: "a",
                    id: &ids[0],
                    world: a,
                },
                CellRef {
                    label: "b",
                    id: &ids[1],
                    world: b,
                },
            ],
        }
    }

    /// Stores a shard carrying `addr` with a ref to claim `claim`; its uid.
    fn addressed(world: &World, name: &str, addr: &str, claim: &str) -> String {
        let mut s = shard_object(NAMESPACE, name);
        s["spec"]["shardAddressIPv6"] = json!(addr);
        s["spec"]["shardAddressIPv6ClaimRef"] = json!({
            "apiGroup": "ipam.miloapis.com", "kind": "IPClaim", "project": PLATFORM_PROJECT,
            "namespace": CLAIM_NAMESPACE, "name": claim,
        });
        let stored = world.lp().cell().apply_object(s).unwrap();
        uid_of(&stored).to_string()
    }

    /// Creates claim `name` over HTTP as a controller of `cell` would for shard `shard`
    /// (incarnation `uid`), bound to `cidr`.
    async fn claim(platform: &World, name: &str, cell: &str, shard: &str, uid: &str, cidr: &str) {
        let mut c = desired_claim(&ClaimRequest {
            class_name: ADDRESS_CLASS,
            claim_namespace: CLAIM_NAMESPACE,
            location: LOCATION,
            cell,
            shard_namespace: NAMESPACE,
            shard_name: shard,
            shard_uid: uid,
        });
        c.metadata.name = Some(name.into());
        c.metadata
            .annotations
            .get_or_insert_default()
            .insert(ANSWER.into(), cidr.into());
        platform
            .claims()
            .create(&PostParams::default(), &c)
            .await
            .unwrap_or_else(|e| panic!("planting claim {name}: {e}"));
    }

    async fn delete_claim(platform: &World, name: &str) {
        platform
            .claims()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn the_checker_catches_every_planted_violation() {
        let (a, b) = two_cells().await;
        let ids = [a.lp().cell_uid(), b.lp().cell_uid()];
        let start = Instant::now();
        let mut obs = Observer::new(start);

        // Healthy: one shard per cell under one name, each with its own claim and address.
        let twin_a = addressed(&a, "twin", "2001:db8::10", "claim-a");
        claim(&a, "claim-a", &ids[0], "twin", &twin_a, "2001:db8::10/128").await;
        let twin_b = addressed(&b, "twin", "2001:db8::11", "claim-b");
        claim(&a, "claim-b", &ids[1], "twin", &twin_b, "2001:db8::11/128").await;
        obs.sample(&planes(&a, &b, &ids));
        assert_eq!(obs.results.shared_addresses.checks, 1);
        assert!(obs.seen.is_empty(), "a healthy world: {:?}", obs.results);

        // Planted: cell b's shard of another name on cell a's address (shared across cells),
        // a link-local address, a ref whose claim holds another address, and a claim made for
        // another incarnation.
        let dup = addressed(&b, "dup", "2001:db8::10", "claim-dup");
        claim(&a, "claim-dup", &ids[1], "dup", &dup, "2001:db8::10/128").await;
        let ll = addressed(&a, "ll", "fe80::1", "claim-ll");
        claim(&a, "claim-ll", &ids[0], "ll", &ll, "fe80::1/128").await;
        let off = addressed(&a, "off", "2001:db8::20", "claim-off");
        claim(&a, "claim-off", &ids[0], "off", &off, "2001:db8::21/128").await;
        addressed(&a, "stale", "2001:db8::30", "claim-stale");
        claim(
            &a,
            "claim-stale",
            &ids[0],
            "stale",
            "an-earlier-uid",
            "2001:db8::30/128",
        )
        .await;
        obs.sample(&planes(&a, &b, &ids));
        let r = &obs.results;
        assert_eq!(r.shared_addresses.violations.len(), 1, "{r:?}");
        assert!(r.shared_addresses.violations[0].contains("cell b chaos/dup"));
        assert!(r.shared_addresses.violations[0].contains("cell a chaos/twin"));
        assert_eq!(r.unusable_addresses.violations.len(), 1, "{r:?}");
        assert!(r.unusable_addresses.violations[0].contains("link-local"));
        assert_eq!(r.ref_mismatches.violations.len(), 2, "{r:?}");
        assert!(
            r.ref_mismatches
                .violations
                .iter()
                .any(|v| v.contains("holds"))
        );
        assert!(
            r.ref_mismatches
                .violations
                .iter()
                .any(|v| v.contains("another shard, cell or incarnation"))
        );
        assert!(r.deleted_live_claims.violations.is_empty(), "{r:?}");

        // Planted: the claim of cell b's live twin is deleted, and cell a's is replaced under
        // its name (deleted and made again, with a new uid).
        delete_claim(&a, "claim-b").await;
        delete_claim(&a, "claim-a").await;
        claim(&a, "claim-a", &ids[0], "twin", &twin_a, "2001:db8::10/128").await;
        obs.sample(&planes(&a, &b, &ids));
        let r = &obs.results;
        assert_eq!(r.deleted_live_claims.violations.len(), 2, "{r:?}");
        assert!(
            r.deleted_live_claims
                .violations
                .iter()
                .any(|v| v.contains("claim-b was deleted while cell b chaos/twin"))
        );
        assert!(
            r.deleted_live_claims
                .violations
                .iter()
                .any(|v| v.contains("claim-a was replaced"))
        );
        // A violation that persists is listed once.
        let before = obs.seen.len();
        obs.sample(&planes(&a, &b, &ids));
        assert_eq!(obs.seen.len(), before);
        a.shutdown().await;
        b.shutdown().await;
    }

    #[tokio::test]
    async fn a_claim_gone_from_under_a_live_shard_is_not_blamed_on_a_shard_that_left() {
        let (a, b) = two_cells().await;
        let ids = [a.lp().cell_uid(), b.lp().cell_uid()];
        let mut obs = Observer::new(Instant::now());
        let uid = addressed(&a, "leaving", "2001:db8::40", "claim-leaving");
        claim(
            &a,
            "claim-leaving",
            &ids[0],
            "leaving",
            &uid,
            "2001:db8::40/128",
        )
        .await;
        obs.sample(&planes(&a, &b, &ids));
        // The shard goes first, then its claim: a release, not a violation.
        Api::<EgressShard>::namespaced(a.cell(), NAMESPACE)
            .delete("leaving", &DeleteParams::default())
            .await
            .unwrap();
        delete_claim(&a, "claim-leaving").await;
        obs.sample(&planes(&a, &b, &ids));
        assert!(obs.seen.is_empty(), "{:?}", obs.results);
        assert_eq!(obs.results.deleted_live_claims.checks, 2);
        a.shutdown().await;
        b.shutdown().await;
    }

    #[tokio::test]
    async fn the_end_of_a_run_finds_gaps_missing_records_and_owed_releases() {
        let (a, b) = two_cells().await;
        let ids = [a.lp().cell_uid(), b.lp().cell_uid()];
        let t0 = Instant::now();
        let mut obs = Observer::new(t0);
        obs.sample(&planes(&a, &b, &ids));
        // A shard whose ref names nothing, a bare shard, one the run expected and is gone.
        let lost = addressed(&a, "lost-ref", "2001:db8::50", "no-such-claim");
        let bare = a
            .lp()
            .cell()
            .apply_object(shard_object(NAMESPACE, "bare"))
            .unwrap();
        // Claims for gone incarnations: one deleted while a controller of cell a acted
        // throughout, one whose delete in cell b no controller saw, and one of cell a that
        // appeared only after its shard was gone.
        claim(&a, "owed", &ids[0], "x", "uid-owed", "2001:db8::60/128").await;
        claim(&a, "unseen", &ids[1], "y", "uid-unseen", "2001:db8::61/128").await;
        let deleted = Deletion {
            at: Instant::now(),
            platform_rv: a.lp().project(PLATFORM_PROJECT).unwrap().resource_version(),
        };
        obs.sample(&planes(&a, &b, &ids));
        claim(&a, "late", &ids[0], "z", "uid-late", "2001:db8::62/128").await;
        obs.sample(&planes(&a, &b, &ids));

        let live_a: BTreeMap<String, String> = [
            ("lost-ref".to_string(), lost),
            ("bare".to_string(), uid_of(&bare).to_string()),
            ("vanished".to_string(), "uid-vanished".to_string()),
        ]
        .into();
        let deleted_a: BTreeMap<String, Deletion> = [
            ("uid-owed".to_string(), deleted),
            ("uid-late".to_string(), deleted),
        ]
        .into();
        let deleted_b: BTreeMap<String, Deletion> = [("uid-unseen".to_string(), deleted)].into();
        let acting =
            |names: &[&str]| -> Vec<Sample> { (0..200).map(|i| at(t0, i * 100, names)).collect() };
        // A controller acted throughout in cell a, none in cell b.
        let samples_a = acting(&["ctl-a"]);
        let samples_b = acting(&[]);
        let empty = BTreeMap::new();
        let facts = RunFacts {
            cells: vec![
                CellFacts {
                    live: &live_a,
                    deleted: &deleted_a,
                    samples: &samples_a,
                },
                CellFacts {
                    live: &empty,
                    deleted: &deleted_b,
                    samples: &samples_b,
                },
            ],
            late_window: Duration::from_secs(30),
        };
        let f = obs.finish(&planes(&a, &b, &ids), &facts);
        assert_eq!(
            f.unaddressed.len(),
            2,
            "bare and vanished: {:?}",
            f.unaddressed
        );
        assert!(
            f.sampled
                .ref_mismatches
                .violations
                .iter()
                .any(|v| v.starts_with("at the end") && v.contains("no-such-claim")),
            "{:?}",
            f.sampled.ref_mismatches
        );
        let names = |v: &[String]| -> Vec<String> {
            v.iter()
                .map(|c| c.split_whitespace().nth(1).unwrap_or("").to_string())
                .collect()
        };
        assert_eq!(names(&f.leftovers.owed), ["owed"], "{f:?}");
        assert_eq!(names(&f.leftovers.unseen_delete), ["unseen"], "{f:?}");
        assert_eq!(names(&f.leftovers.created_after_delete), ["late"], "{f:?}");
        a.shutdown().await;
        b.shutdown().await;
    }
}
