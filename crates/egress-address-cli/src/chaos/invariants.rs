//! What a chaos run must leave behind, checked against the world's stores once the faults stop:
//! every live shard addressed, no address carried twice, every address backed by the record its
//! ref names, no write the API server had to refuse as write-once, and no claim left for a shard
//! deleted while a controller was acting. Pure reads; the run itself is in the parent module.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use localplane::testing::{
    CLAIM_NAMESPACE, PLATFORM_PROJECT, World, address_of, allocations_key, claims_key,
    is_addressed, shards_key,
};
use serde::Serialize;
use serde_json::Value;

/// The namespace a chaos run's shards live in.
pub const NAMESPACE: &str = "chaos";
const ANNOTATION_SHARD_NAMESPACE: &str = "cloud.datumapis.com/egress-shard-namespace";
const ANNOTATION_SHARD_NAME: &str = "cloud.datumapis.com/egress-shard-name";

/// Everything the run observed; [`ChaosReport::violations`] is empty when every invariant held.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChaosReport {
    pub seed: u64,
    pub live_shards: usize,
    pub deleted_shards: usize,
    pub created_during_run: usize,
    pub kills: usize,
    pub controller_starts: usize,
    /// Controllers that exited without being killed (their logs say why).
    pub unexpected_exits: Vec<String>,
    pub injected_failures: u64,
    pub unaddressed: Vec<String>,
    pub shared_addresses: Vec<String>,
    pub ref_mismatches: Vec<String>,
    /// 422 answers on egressshards: a write the API server had to refuse as write-once.
    pub write_once_rejections: u64,
    /// Claims left for deleted shards whose delete happened while no controller was running
    /// (ready and, with election on, leading) for long enough to see it.
    pub excused_leftover_claims: Vec<String>,
    pub leftover_claims: Vec<String>,
    pub settle_time_seconds: f64,
    pub log_dir: Option<String>,
}

impl ChaosReport {
    pub fn violations(&self) -> Vec<String> {
        let mut v = vec![];
        let mut list = |what: &str, items: &[String]| {
            if !items.is_empty() {
                v.push(format!("{what} ({}): {}", items.len(), preview(items)));
            }
        };
        list("live shards without an address", &self.unaddressed);
        list(
            "addresses carried by more than one shard",
            &self.shared_addresses,
        );
        list(
            "addresses that differ from the record their ref names",
            &self.ref_mismatches,
        );
        list("claims left for deleted shards", &self.leftover_claims);
        if self.write_once_rejections > 0 {
            v.push(format!(
                "{} write-once rejections (422 on egressshards)",
                self.write_once_rejections
            ));
        }
        v
    }
}

fn preview(items: &[String]) -> String {
    let mut s = items.iter().take(5).cloned().collect::<Vec<_>>().join("; ");
    if items.len() > 5 {
        s.push_str("; ...");
    }
    s
}

/// One sample of who could act: alive, ready, and (under election) holding the lease.
#[derive(Debug, Clone)]
pub struct Sample {
    pub at: Instant,
    pub acting: BTreeSet<String>,
}

/// How long one controller must keep acting after a delete for its release to be owed.
const COVER: Duration = Duration::from_secs(8);

/// Whether a delete at `at` went unseen through no fault of the controller: no single process
/// was acting from the delete through [`COVER`] after it (or to the end of the run).
pub fn excused(samples: &[Sample], at: Option<&Instant>, _elected: bool) -> bool {
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

/// Claims (by shard name) whose shard is no longer live.
pub fn leftover_claims(world: &World, live: &BTreeSet<String>) -> Vec<String> {
    let Some(p) = world.lp().project(PLATFORM_PROJECT) else {
        return vec![];
    };
    p.objects(&claims_key(), Some(CLAIM_NAMESPACE))
        .iter()
        .filter(|c| c["metadata"]["deletionTimestamp"].is_null())
        .filter_map(|c| {
            let a = &c["metadata"]["annotations"];
            (a[ANNOTATION_SHARD_NAMESPACE].as_str() == Some(NAMESPACE))
                .then(|| a[ANNOTATION_SHARD_NAME].as_str().unwrap_or("").to_string())
        })
        .filter(|n| !live.contains(n))
        .collect()
}

pub fn check(
    world: &World,
    live: &BTreeSet<String>,
    deleted_at: &BTreeMap<String, Instant>,
    samples: &[Sample],
    elected: bool,
) -> ChaosReport {
    let shards = world.lp().cell().objects(&shards_key(), Some(NAMESPACE));
    let platform = world
        .lp()
        .project(PLATFORM_PROJECT)
        .expect("the platform project exists");
    let mut unaddressed = vec![];
    let mut by_address: BTreeMap<Ipv6Addr, Vec<String>> = BTreeMap::new();
    let mut ref_mismatches = vec![];
    let stored: BTreeSet<String> = shards
        .iter()
        .map(|s| s["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect();
    for name in live.difference(&stored) {
        unaddressed.push(format!("{name} (expected live, not stored)"));
    }
    for s in &shards {
        let name = s["metadata"]["name"].as_str().unwrap_or("").to_string();
        if !is_addressed(s) {
            unaddressed.push(name);
            continue;
        }
        let addr_text = s["spec"]["shardAddressIPv6"].as_str().unwrap_or("");
        let Ok(addr) = addr_text.parse::<Ipv6Addr>() else {
            ref_mismatches.push(format!("{name}: {addr_text:?} is not an IPv6 address"));
            continue;
        };
        by_address.entry(addr).or_default().push(name.clone());
        if let Some(problem) = ref_problem(&platform, &name, addr, s) {
            ref_mismatches.push(format!("{name}: {problem}"));
        }
    }
    let shared_addresses = by_address
        .iter()
        .filter(|(_, v)| v.len() > 1)
        .map(|(a, v)| format!("{a}: {}", v.join(", ")))
        .collect();
    let write_once_rejections = world
        .lp()
        .metrics()
        .count(|k| k.code == 422 && k.resource.starts_with("egressshards."));
    let mut excused_leftover_claims = vec![];
    let mut leftover = vec![];
    for n in leftover_claims(world, live) {
        if excused(samples, deleted_at.get(&n), elected) {
            excused_leftover_claims.push(n);
        } else {
            leftover.push(n);
        }
    }
    ChaosReport {
        seed: 0,
        live_shards: shards.len(),
        deleted_shards: deleted_at.len(),
        created_during_run: 0,
        kills: 0,
        controller_starts: 0,
        unexpected_exits: vec![],
        injected_failures: 0,
        unaddressed,
        shared_addresses,
        ref_mismatches,
        write_once_rejections,
        excused_leftover_claims,
        leftover_claims: leftover,
        settle_time_seconds: 0.0,
        log_dir: None,
    }
}

/// What is wrong with a shard's ref, if anything: the record it names must exist, hold exactly
/// this address (so nothing was written from an unbound claim), and a claim must name this shard.
fn ref_problem(
    platform: &localplane::Plane,
    name: &str,
    addr: Ipv6Addr,
    s: &Value,
) -> Option<String> {
    let r = &s["spec"]["shardAddressIPv6ClaimRef"];
    if r.is_null() {
        return Some("addressed without a claim ref".into());
    }
    let kind = r["kind"].as_str().unwrap_or("");
    let key = match kind {
        "IPClaim" => claims_key(),
        "IPAllocation" => allocations_key(),
        other => return Some(format!("ref kind {other:?}")),
    };
    if r["project"].as_str() != Some(PLATFORM_PROJECT) {
        return Some(format!("ref project {:?}", r["project"]));
    }
    let ns = r["namespace"].as_str().unwrap_or("");
    let rname = r["name"].as_str().unwrap_or("");
    let Some(record) = platform.object(&key, Some(ns), rname) else {
        return Some(format!("{kind} {ns}/{rname} does not exist"));
    };
    let cidr = record["status"]["allocatedCIDR"].as_str().unwrap_or("");
    match address_of(cidr) {
        Some(a) if a == addr => {}
        _ => return Some(format!("carries {addr} but {kind} {rname} holds {cidr:?}")),
    }
    if kind == "IPClaim" {
        let a = &record["metadata"]["annotations"];
        if a[ANNOTATION_SHARD_NAMESPACE].as_str() != Some(NAMESPACE)
            || a[ANNOTATION_SHARD_NAME].as_str() != Some(name)
        {
            return Some(format!("claim {rname} names another shard: {a}"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use localplane::testing::shard_object;
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
        assert!(!excused(&steady, Some(&deleted), true));

        // The only acting controller was killed two seconds after the delete.
        let killed: Vec<Sample> = (0..200)
            .map(|i| at(t0, i * 100, if i < 30 { &["a"] } else { &[] }))
            .collect();
        assert!(excused(&killed, Some(&deleted), true));

        // A hand-over from a to b within the window does not count as one controller acting.
        let handover: Vec<Sample> = (0..200)
            .map(|i| at(t0, i * 100, if i < 30 { &["a"] } else { &["b"] }))
            .collect();
        assert!(excused(&handover, Some(&deleted), true));

        // A claim for a shard the run never deleted is never excused.
        assert!(!excused(&killed, None, true));
    }

    #[tokio::test]
    async fn the_checker_catches_shared_addresses_bad_refs_and_gaps() {
        let world = crate::fleet::world().start().await.unwrap();
        let cell = world.lp().cell();
        cell.ensure_namespace(NAMESPACE);
        let with = |name: &str, addr: &str, claim: &str| {
            let mut s = shard_object(NAMESPACE, name);
            s["spec"]["shardAddressIPv6"] = json!(addr);
            s["spec"]["shardAddressIPv6ClaimRef"] = json!({
                "apiGroup": "ipam.miloapis.com", "kind": "IPClaim", "project": PLATFORM_PROJECT,
                "namespace": CLAIM_NAMESPACE, "name": claim,
            });
            cell.apply_object(s).unwrap();
        };
        with("one", "2001:db8::1", "no-such-claim");
        with("two", "2001:db8::1", "no-such-claim");
        cell.apply_object(shard_object(NAMESPACE, "bare")).unwrap();
        let live: BTreeSet<String> = ["one", "two", "bare", "lost"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let r = check(&world, &live, &BTreeMap::new(), &[], true);
        assert_eq!(r.shared_addresses.len(), 1, "{r:?}");
        assert_eq!(r.ref_mismatches.len(), 2, "{r:?}");
        assert_eq!(r.unaddressed.len(), 2, "bare and lost: {r:?}");
        assert_eq!(r.violations().len(), 3);
    }
}
