//! One cell of a chaos run: its API server, its controllers and what is done to them (SIGKILL,
//! SIGSTOP/SIGCONT, slow Lease renewals), its shards and their churn, the bounded-time
//! judgements it is owed, and the samples of who could act.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use anyhow::Context;
use egress_address::ipam::naming::{ANNOTATION_SHARD_UID, claim_name};
use egress_api::shard::EgressShard;
use kube::Api;
use kube::api::{DeleteParams, Preconditions};
use localplane::Plane;
use localplane::testing::{CLAIM_NAMESPACE, claims_key, is_addressed, shard_object};
use rand::Rng;
use rand::rngs::StdRng;
use serde::Serialize;

use super::invariants::{Deletion, NAMESPACE, Sample, unaddressed};
use super::lapse::{Judged, Owed};
use super::server::CellServer;
use crate::fleet::Fleet;

/// How many controllers run at once in a cell (not counting a stopped one).
pub const RUNNING: usize = 2;

/// What happened to one cell during a run.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CellStats {
    pub label: String,
    pub cell_id: String,
    pub shards_at_start: usize,
    pub live_shards: usize,
    /// Shards made under new names during the run (in every cell under the same names).
    pub created: usize,
    /// Shards deleted and not made again.
    pub deleted: usize,
    /// Shards deleted and made again under the same name (a new incarnation).
    pub recreated: usize,
    /// Of those, made again while the earlier incarnation's claim was still in IPAM: its release
    /// was still to come or in flight.
    pub recreated_while_claim_held: usize,
    pub controller_starts: usize,
    pub kills: usize,
    /// SIGSTOPs, each followed by a SIGCONT.
    pub pauses: usize,
    /// Pauses that struck between a claim create landing and the shard's write.
    pub pauses_mid_write: usize,
    /// Leaders paused until another controller had taken the lease: they woke with requests
    /// of a leader that was no more.
    pub pauses_past_lease: usize,
    /// Phases of slow Lease renewals (each answered after the token it renews ran out).
    pub slow_renewal_phases: usize,
    /// Lease updates answered during them.
    pub slow_renewals: u64,
    /// Leaders SIGSTOPped for longer than the renew deadline and less than the lease.
    pub short_pauses: usize,
    /// Of those, the ones that woke still holding the lease.
    pub short_pauses_within_lease: usize,
    /// Shards made while a slow-renewal phase or a short pause was on.
    pub made_during_lapses: usize,
    /// Each lapse fault, as its judgement names it.
    pub lapses: Vec<String>,
    /// 422 answers on egressshards: writes the API server had to refuse as write-once.
    pub write_once_rejections: u64,
    /// Controllers that exited without being killed (their logs say why).
    pub unexpected_exits: Vec<String>,
}

/// A stopped controller and what to check when it wakes.
struct Pause {
    at: Instant,
    until: Instant,
    /// The lease holder when it was stopped: itself, if it led.
    was_leader: bool,
    /// Shorter than the lease: the leader is to wake still holding it.
    within_lease: bool,
}

/// A slow-renewal phase under way.
struct SlowRenewals {
    since: Instant,
    until: Instant,
    /// The cell's Lease updates answered before the phase began.
    updates_before: u64,
}

/// A shard to make again under its name.
struct Recreate {
    due: Instant,
    name: String,
    old_uid: String,
}

pub struct Cell {
    pub label: String,
    pub server: CellServer,
    /// The platform project's plane, where this cell's claims are.
    pub platform: Plane,
    pub id: String,
    pub fleet: Fleet,
    pub stats: CellStats,
    /// Who could act, every tick of the run.
    pub samples: Vec<Sample>,
    /// Shard name -> uid of the incarnation the run made and has not deleted.
    pub live: BTreeMap<String, String>,
    /// Shard uid -> when the run deleted it.
    pub deleted: BTreeMap<String, Deletion>,
    /// Shard uid -> when the run made it.
    pub born: BTreeMap<String, Instant>,
    /// Shard name -> the uids of every incarnation the run made under it.
    pub names: BTreeMap<String, Vec<String>>,
    /// Bounded-time judgements still to come, due in order of their faults' ends.
    pub owed: Vec<Owed>,
    /// How long after a lapse fault ends its judgement is due.
    pub addressed_within: Duration,
    /// When the run began, for the times the verdicts name.
    pub run_start: Instant,
    slow: Option<SlowRenewals>,
    /// What the cell's fault configuration was last made with: its leases spared the run's
    /// faults, its renewals slowed.
    pub lease_faults: (bool, bool),
    /// Whether the cell was caught up for a lapse fault, and when that was read.
    caught_up: Option<(Instant, bool)>,
    /// Lapse faults wait for the cell's first long SIGSTOP: a lapse's judgement holds pauses
    /// back for its bound, and back to back they could hold every pause past a short run.
    pub pause_before_lapse: bool,
    ready: HashMap<String, bool>,
    paused: BTreeMap<String, Pause>,
    recreates: Vec<Recreate>,
    /// After a kill of every controller, when they come back.
    restart_at: Option<Instant>,
    pub next_kill: Instant,
    pub next_pause: Instant,
    pub next_slow_renewals: Instant,
    pub next_short_pause: Instant,
    api: Api<EgressShard>,
}

impl Cell {
    /// Cell `label` served by `server`, whose controllers claim from `platform` (IPAM's plane:
    /// this cell's world's own, or another cell's).
    pub async fn new(
        label: &str,
        server: CellServer,
        platform: Plane,
        fleet: Fleet,
    ) -> anyhow::Result<Cell> {
        let id = server.id().await?;
        if let CellServer::Local(w) = &server {
            w.lp().cell().ensure_namespace(NAMESPACE);
        }
        let api = Api::namespaced(server.deleter(), NAMESPACE);
        Ok(Cell {
            label: label.into(),
            stats: CellStats {
                label: label.into(),
                cell_id: id.clone(),
                ..Default::default()
            },
            server,
            platform,
            id,
            fleet,
            samples: vec![],
            live: BTreeMap::new(),
            deleted: BTreeMap::new(),
            born: BTreeMap::new(),
            names: BTreeMap::new(),
            owed: vec![],
            addressed_within: Duration::from_secs(20),
            run_start: Instant::now(),
            slow: None,
            lease_faults: (false, false),
            caught_up: None,
            pause_before_lapse: false,
            ready: HashMap::new(),
            paused: BTreeMap::new(),
            recreates: vec![],
            restart_at: None,
            next_kill: Instant::now(),
            next_pause: Instant::now(),
            next_slow_renewals: Instant::now(),
            next_short_pause: Instant::now(),
            api,
        })
    }

    /// Makes shard `name` without a fault (see [`CellServer::create`]); the new incarnation's
    /// uid.
    pub async fn create(&mut self, name: &str) -> anyhow::Result<String> {
        let stored = self
            .server
            .create(shard_object(NAMESPACE, name))
            .await
            .with_context(|| format!("creating shard {name} in cell {}", self.label))?;
        let uid = stored["metadata"]["uid"]
            .as_str()
            .context("a stored shard has a uid")?
            .to_string();
        self.live.insert(name.into(), uid.clone());
        self.born.insert(uid.clone(), Instant::now());
        self.names
            .entry(name.to_string())
            .or_default()
            .push(uid.clone());
        if self.lapsing() {
            self.stats.made_during_lapses += 1;
        }
        Ok(uid)
    }

    /// Deletes live shard `name` through the API (so the controllers' watches see it as a user's
    /// delete), exactly the incarnation the run made (a uid precondition); its uid.
    pub async fn delete(&mut self, name: &str) -> anyhow::Result<String> {
        let uid = self
            .live
            .remove(name)
            .with_context(|| format!("shard {name} is not live in cell {}", self.label))?;
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        // The harness's own requests meet the injected faults too: each attempt is bounded (a
        // hung answer) and retried until the shard is gone.
        for _ in 0..100 {
            match tokio::time::timeout(Duration::from_secs(3), self.api.delete(name, &dp)).await {
                Ok(Ok(_)) => {
                    self.note_deleted(&uid);
                    return Ok(uid);
                }
                Ok(Err(kube::Error::Api(s))) if s.code == 404 => {
                    self.note_deleted(&uid);
                    return Ok(uid);
                }
                Ok(Err(kube::Error::Api(s))) if s.code == 409 && s.reason == "Conflict" => {
                    anyhow::bail!(
                        "deleting shard {name} (uid {uid}) in cell {}: another incarnation is stored: {}",
                        self.label,
                        s.message
                    );
                }
                _ => {
                    // Applied before its answer was lost: then the next attempt gets 404.
                    let stored = self.server.shard(name).await?;
                    if stored.is_none_or(|s| s["metadata"]["uid"].as_str() != Some(&uid)) {
                        self.note_deleted(&uid);
                        return Ok(uid);
                    }
                }
            }
        }
        anyhow::bail!(
            "could not delete shard {name} in cell {} in 100 attempts",
            self.label
        )
    }

    fn note_deleted(&mut self, uid: &str) {
        let d = Deletion {
            at: Instant::now(),
            platform_rv: self.platform.resource_version(),
        };
        self.deleted.insert(uid.to_string(), d);
    }

    /// Deletes `name` and makes it again after `delay` (at once when zero).
    pub async fn recreate(&mut self, name: &str, delay: Duration) -> anyhow::Result<()> {
        let old_uid = self.delete(name).await?;
        self.recreates.push(Recreate {
            due: Instant::now() + delay,
            name: name.into(),
            old_uid,
        });
        self.recreate_due(Instant::now()).await
    }

    /// Makes again the shards whose time has come; the uids of the new incarnations.
    pub async fn recreate_due(&mut self, now: Instant) -> anyhow::Result<()> {
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.recreates)
            .into_iter()
            .partition(|r| r.due <= now);
        self.recreates = later;
        for r in due {
            if self.holds_claim(&r.name, &r.old_uid) {
                self.stats.recreated_while_claim_held += 1;
            }
            self.create(&r.name).await?;
            self.stats.recreated += 1;
        }
        Ok(())
    }

    /// Whether IPAM still holds the claim this cell's controllers made for incarnation `uid` of
    /// shard `name`.
    pub fn holds_claim(&self, name: &str, uid: &str) -> bool {
        self.platform
            .object(
                &claims_key(),
                Some(CLAIM_NAMESPACE),
                &claim_name(&self.id, NAMESPACE, name, uid),
            )
            .is_some_and(|c| claim_of(&c, uid))
    }

    /// Waits (at most `within`) until IPAM holds the claim of shard `name`'s incarnation `uid`,
    /// waking at the write that lands it; whether it did.
    pub async fn claim_lands(&self, name: &str, uid: &str, within: Duration) -> bool {
        let (claim, uid) = (claim_name(&self.id, NAMESPACE, name, uid), uid.to_string());
        let mut tally = self
            .platform
            .tally(&claims_key(), Some(CLAIM_NAMESPACE), move |c| {
                c["metadata"]["name"].as_str() == Some(claim.as_str()) && claim_of(c, &uid)
            });
        let (_, held) = tally.wait_for(within, |_, held| held > 0).await;
        held > 0
    }

    /// A uniformly chosen live shard.
    pub fn pick_live(&self, rng: &mut StdRng) -> Option<String> {
        if self.live.is_empty() {
            return None;
        }
        let i = rng.random_range(0..self.live.len());
        self.live.keys().nth(i).cloned()
    }

    async fn lease_holder(&self) -> anyhow::Result<String> {
        self.server.lease_holder().await
    }

    fn holds(holder: &str, name: &str) -> bool {
        holder == name || holder.starts_with(&format!("{name}_"))
    }

    fn running(&self) -> impl Iterator<Item = &crate::fleet::Controller> {
        self.fleet
            .procs
            .iter()
            .filter(|c| !self.paused.contains_key(&c.name))
    }

    /// SIGKILLs one running (not stopped) controller at random; sometimes every one, leaving the
    /// cell without a controller for 0.5–2 s (deletes then go unseen, by design). With
    /// `spare_leader`, only a controller that does not hold the lease.
    pub async fn kill(&mut self, rng: &mut StdRng, spare_leader: bool) -> anyhow::Result<()> {
        let holder = self.lease_holder().await?;
        let running: Vec<String> = self
            .running()
            .map(|c| c.name.clone())
            .filter(|n| !(spare_leader && Self::holds(&holder, n)))
            .collect();
        if running.is_empty() {
            return Ok(());
        }
        let all = !spare_leader && rng.random_bool(0.25);
        let chosen = if all {
            running
        } else {
            vec![running[rng.random_range(0..running.len())].clone()]
        };
        for name in chosen {
            if let Some(i) = self.fleet.procs.iter().position(|c| c.name == name) {
                self.fleet.kill(i).await;
            }
        }
        let gap = if all {
            Duration::from_millis(rng.random_range(500..2000))
        } else {
            Duration::from_millis(rng.random_range(0..800))
        };
        self.restart_at = Some(Instant::now() + gap);
        Ok(())
    }

    /// Keeps [`RUNNING`] controllers running once any restart gap is over.
    pub fn keep_running(&mut self, elected: bool) -> anyhow::Result<()> {
        if self.restart_at.is_some_and(|t| Instant::now() < t) {
            return Ok(());
        }
        self.restart_at = None;
        while self.running().count() < RUNNING {
            self.fleet.start(elected)?;
        }
        Ok(())
    }

    /// Replaces every controller (stopped ones too) with [`RUNNING`] new ones, with or without
    /// election.
    pub async fn restart_all(&mut self, elected: bool) -> anyhow::Result<()> {
        self.paused.clear();
        self.end_slow_renewals();
        self.fleet.kill_all().await;
        self.restart_at = None;
        self.keep_running(elected)
    }

    /// The controller to stop: the lease holder under election, else any running one.
    pub async fn pause_target(
        &self,
        elected: bool,
        rng: &mut StdRng,
    ) -> anyhow::Result<Option<String>> {
        let running: Vec<&str> = self.running().map(|c| c.name.as_str()).collect();
        Ok(if elected {
            let holder = self.lease_holder().await?;
            running
                .into_iter()
                .find(|n| Self::holds(&holder, n))
                .map(str::to_string)
        } else if running.is_empty() {
            None
        } else {
            Some(running[rng.random_range(0..running.len())].to_string())
        })
    }

    /// The running controller holding the lease, if any.
    pub async fn leader(&self) -> anyhow::Result<Option<String>> {
        let holder = self.lease_holder().await?;
        Ok(self
            .running()
            .find(|c| Self::holds(&holder, &c.name))
            .map(|c| c.name.clone()))
    }

    /// SIGSTOPs controller `name` for `length`; `within_lease` for a leader that is to wake
    /// still holding its lease.
    pub async fn pause(
        &mut self,
        name: &str,
        length: Duration,
        mid_write: bool,
        within_lease: bool,
    ) -> anyhow::Result<()> {
        let Some(c) = self.fleet.procs.iter().find(|c| c.name == name) else {
            return Ok(());
        };
        let was_leader = Self::holds(&self.lease_holder().await?, name);
        c.pause()?;
        let at = Instant::now();
        if within_lease {
            // Woken by a timer, not by the run's loop, whose tick can last seconds (a delete
            // retried under faults): late, another controller would take the lease.
            c.resume_at(at + length);
            self.stats.short_pauses += 1;
        } else {
            self.stats.pauses += 1;
        }
        if mid_write {
            self.stats.pauses_mid_write += 1;
        }
        self.paused.insert(
            name.into(),
            Pause {
                at,
                until: at + length,
                was_leader,
                within_lease,
            },
        );
        Ok(())
    }

    /// SIGCONTs the stopped controllers whose time is up (all of them with `all`); a short
    /// pause has woken by its own timer already, and is judged from here.
    pub async fn resume_due(&mut self, all: bool) -> anyhow::Result<()> {
        let now = Instant::now();
        let due: Vec<String> = self
            .paused
            .iter()
            .filter(|(_, p)| all || p.until <= now)
            .map(|(n, _)| n.clone())
            .collect();
        if due.is_empty() {
            return Ok(());
        }
        let holder = self.lease_holder().await?;
        for name in due {
            let p = self.paused.remove(&name).expect("listed above");
            let still_holds = Self::holds(&holder, &name);
            if p.within_lease {
                if still_holds {
                    self.stats.short_pauses_within_lease += 1;
                }
                let cause = format!(
                    "{name} was stopped {:.1}–{:.1} s{}",
                    self.since_start(p.at),
                    self.since_start(p.until),
                    if still_holds {
                        ", within its lease"
                    } else {
                        " (another took the lease)"
                    }
                );
                self.stats.lapses.push(cause.clone());
                self.owe(cause, p.at);
            } else if p.was_leader && !still_holds && !holder.is_empty() {
                self.stats.pauses_past_lease += 1;
            }
            if let Some(c) = self.fleet.procs.iter().find(|c| c.name == name) {
                c.resume()?;
            }
        }
        Ok(())
    }

    fn since_start(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.run_start).as_secs_f64()
    }

    /// Owes a judgement, due [`Cell::addressed_within`] from now, of every shard live now: `cause`
    /// ended, having begun at `since`.
    pub fn owe(&mut self, cause: String, since: Instant) {
        self.owed.push(Owed {
            due: Instant::now() + self.addressed_within,
            cause,
            since,
            live: self.live.clone(),
        });
    }

    /// The judgements due by `now` (all of them with `all`), taken from the cell.
    pub fn owed_due(&mut self, now: Instant, all: bool) -> Vec<Owed> {
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.owed)
            .into_iter()
            .partition(|o| all || o.due <= now);
        self.owed = later;
        due
    }

    /// The cell as a judgement reads it.
    pub fn judged(&self, index: usize) -> Judged<'_> {
        Judged {
            index,
            label: &self.label,
            server: &self.server,
            live: &self.live,
            born: &self.born,
        }
    }

    /// Begins a phase of slow Lease renewals lasting `length`; the caller puts the fault rule in
    /// place.
    pub fn begin_slow_renewals(&mut self, length: Duration) {
        let since = Instant::now();
        self.slow = Some(SlowRenewals {
            since,
            until: since + length,
            updates_before: self.lease_updates(),
        });
        self.stats.slow_renewal_phases += 1;
    }

    /// Whether a slow-renewal phase is on.
    pub fn renewing_slowly(&self) -> bool {
        self.slow.is_some()
    }

    /// Whether the slow-renewal phase under way is over by `now`.
    pub fn slow_renewals_over(&self, now: Instant) -> bool {
        self.slow.as_ref().is_some_and(|s| now >= s.until)
    }

    /// Ends the slow-renewal phase under way, if one is, and owes its judgement; the caller
    /// lifts the fault rule.
    pub fn end_slow_renewals(&mut self) {
        let Some(s) = self.slow.take() else { return };
        self.stats.slow_renewals += self.lease_updates() - s.updates_before;
        let cause = format!(
            "the slow lease renewals of {:.1}–{:.1} s",
            self.since_start(s.since),
            self.since_start(Instant::now())
        );
        self.stats.lapses.push(cause.clone());
        self.owe(cause, s.since);
    }

    /// The cell's Lease updates answered so far.
    fn lease_updates(&self) -> u64 {
        self.server
            .cell_metrics()
            .count(|k| k.plane == "cell" && k.verb == "update" && k.resource.starts_with("leases."))
    }

    /// Whether a fault that lapses the leader's token quietly is on.
    fn lapsing(&self) -> bool {
        self.slow.is_some() || self.paused.values().any(|p| p.within_lease)
    }

    /// Whether a lapse fault is on or its judgement is still to come: the leader must then
    /// neither be killed nor stopped past its lease (a new leader queues every shard and would
    /// hide a lost trigger), and no other fault of the kind begins.
    pub fn guarding_lapse(&self) -> bool {
        self.lapsing() || !self.owed.is_empty()
    }

    /// Whether a lapse fault is due to begin by `now` and the cell is caught up for it: every
    /// shard made before the run, or longer than [`Cell::addressed_within`] ago, is addressed.
    /// Otherwise a judgement would find the backlog late (the 500 shards of the start take a
    /// while under the run's faults), not what the fault lost.
    pub async fn lapse_ready(&mut self, now: Instant) -> anyhow::Result<bool> {
        if now < self.next_slow_renewals.min(self.next_short_pause)
            || (self.pause_before_lapse && self.stats.pauses == 0)
        {
            return Ok(false);
        }
        // Read at most twice a second: every live shard, each time.
        if let Some((at, ready)) = self.caught_up
            && now < at + Duration::from_millis(500)
        {
            return Ok(ready);
        }
        let old: BTreeMap<String, String> = self
            .live
            .iter()
            .filter(|(_, uid)| {
                self.born
                    .get(*uid)
                    .is_some_and(|b| *b < self.run_start || *b + self.addressed_within <= now)
            })
            .map(|(n, u)| (n.clone(), u.clone()))
            .collect();
        let ready = unaddressed(&self.server.shards().await?, &old).is_empty();
        self.caught_up = Some((now, ready));
        Ok(ready)
    }

    /// Whether any controller of the cell is stopped.
    pub fn any_paused(&self) -> bool {
        !self.paused.is_empty()
    }

    /// Whether this cell's leader is stopped right now: kills wait, so that the stop is what
    /// the other controller has to take over from.
    pub fn leader_paused(&self) -> bool {
        self.paused.values().any(|p| p.was_leader)
    }

    /// Notes controllers that exited on their own, and samples who could act now: alive, ready,
    /// not stopped, and (under election) holding the lease.
    pub async fn sample(&mut self, elected: bool) -> anyhow::Result<()> {
        for name in self.fleet.reap() {
            self.paused.remove(&name);
            self.stats.unexpected_exits.push(name);
        }
        let holder = self.lease_holder().await?;
        let mut acting = BTreeSet::new();
        let candidates: Vec<(String, u16)> = self
            .running()
            .map(|c| (c.name.clone(), c.health_port))
            .collect();
        for (name, port) in candidates {
            let ready = match self.ready.get(&name) {
                Some(true) => true,
                _ => {
                    let r = crate::fleet::http_status(port, "/ready").await == Some(200);
                    self.ready.insert(name.clone(), r);
                    r
                }
            };
            if ready && (!elected || Self::holds(&holder, &name)) {
                acting.insert(name);
            }
        }
        self.samples.push(Sample {
            at: Instant::now(),
            acting,
        });
        Ok(())
    }

    /// Shards stored and addressed in this cell.
    pub async fn progress(&self) -> anyhow::Result<(usize, usize)> {
        let shards = self.server.shards().await?;
        let addressed = shards.iter().filter(|s| is_addressed(s)).count();
        Ok((shards.len(), addressed))
    }

    /// The final figures of this cell.
    pub fn finish_stats(&mut self) {
        self.stats.controller_starts = self.fleet.starts;
        self.stats.kills = self.fleet.kills;
        self.stats.live_shards = self.live.len();
        self.stats.write_once_rejections = self
            .server
            .cell_metrics()
            .count(|k| k.code == 422 && k.resource.starts_with("egressshards."));
    }
}

/// Whether `claim` was made for the shard incarnation `uid`.
fn claim_of(claim: &serde_json::Value, uid: &str) -> bool {
    claim["metadata"]["annotations"][ANNOTATION_SHARD_UID].as_str() == Some(uid)
}
