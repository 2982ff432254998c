//! `bench churn`: latency under churn. A cell already holds N addressed shards; new shards are
//! created over HTTP at a steady rate, and each one's wait from create to addressed is taken from
//! the server's own commits ([`Timeline`]). With `--delete-share`, held shards are deleted on the
//! same span too, and each one's wait from its deletion to its claim's removal from IPAM is taken
//! the same way ([`Releases`]). The controller and the ideal client (a watch plus the two requests
//! per new shard and the one per deleted shard, [`ideal::watch`]) each get a world of their own
//! and the same schedule ([`schedule`]), in one run.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use egress_api::shard::EgressShard;
use futures::{StreamExt, TryStreamExt};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};

use localplane::testing::{PLATFORM_PROJECT, shards_key};

use super::bed::{self, Bed, ControlPlaneUse, Progress};
use super::host::{LoadAvg, load_range, mib};
use super::report::{self, pass};
use super::shape::{self, Objects, Releases, Timeline};
use super::{BENCH_NAMESPACE, Common, command_line, controller_run, ideal};

/// Options of `bench churn`.
#[derive(Args, Debug, Clone)]
pub struct ChurnArgs {
    #[command(flatten)]
    pub common: Common,
    /// Addressed shards the cell holds before the churn starts.
    #[arg(long, default_value_t = 10_000)]
    pub shards: usize,
    /// New shards per second.
    #[arg(long, default_value_t = 50.0)]
    pub rate: f64,
    /// How long new shards keep coming.
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// The share of the churn's operations that are deletes of held shards, from 0 up to (not
    /// including) 1: 0.5 deletes one held shard for every new one, over the same span. Both sides
    /// delete the same shards at the same instants from the start of the churn.
    #[arg(long, default_value_t = 0.0)]
    pub delete_share: f64,
    /// Reconcile concurrency of the controller, and parallel tasks of the ideal client.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Controller and ideal runs, alternating; each side's waits are pooled over its runs.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Give up on one run after this long.
    #[arg(long, default_value_t = 900)]
    pub run_timeout_seconds: u64,
}

/// Waits of one side, from create to addressed and from delete to released.
#[derive(Debug, Clone, Default)]
pub struct Waits {
    /// Sorted.
    pub waits: Vec<Duration>,
    /// Created shards that were never addressed in time.
    pub unaddressed: usize,
    /// From a held shard's deletion to its claim's removal from IPAM; sorted.
    pub releases: Vec<Duration>,
    /// Deleted shards whose claim was not removed in time.
    pub unreleased: usize,
    pub loads: Vec<LoadAvg>,
}

/// The `q` quantile (nearest rank) of sorted `waits`.
fn quantile(waits: &[Duration], q: f64) -> Duration {
    if waits.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((q * waits.len() as f64).ceil() as usize).clamp(1, waits.len());
    waits[rank - 1]
}

impl Waits {
    /// The `q` quantile (nearest rank).
    pub fn quantile(&self, q: f64) -> Duration {
        quantile(&self.waits, q)
    }

    pub fn max(&self) -> Duration {
        self.waits.last().copied().unwrap_or_default()
    }

    /// The `q` quantile of the release waits.
    pub fn release_quantile(&self, q: f64) -> Duration {
        quantile(&self.releases, q)
    }

    pub fn release_max(&self) -> Duration {
        self.releases.last().copied().unwrap_or_default()
    }

    /// Deleted shards, released or not.
    pub fn deleted(&self) -> usize {
        self.releases.len() + self.unreleased
    }
}

/// One operation of the churn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// New shard `churn-<run>-<i>`.
    Create(usize),
    /// Held shard `shard-<i>`.
    Delete(usize),
}

/// The churn's operations with their instants from its start, in time order: create `i` at
/// `i / rate`, as without deletes, so the creates' schedule (and its figures) stays what it
/// was; the deletes spread evenly over the same span, each in the middle of its share of it, of
/// held shards picked by a shuffle with a fixed seed. Both sides and every run get the same.
pub fn schedule(
    held: usize,
    rate: f64,
    seconds: u64,
    delete_share: f64,
) -> anyhow::Result<Vec<(Duration, Op)>> {
    if !(0.0..1.0).contains(&delete_share) {
        bail!("--delete-share must be at least 0 and below 1, not {delete_share}");
    }
    let creates = (rate * seconds as f64).round() as usize;
    let every = Duration::from_secs_f64(1.0 / rate);
    let deletes = (creates as f64 * delete_share / (1.0 - delete_share)).round() as usize;
    if deletes > held {
        bail!("--delete-share {delete_share} deletes {deletes} shards, more than the {held} held");
    }
    let at = |i: usize| every * u32::try_from(i).unwrap_or(u32::MAX);
    let mut ops: Vec<(Duration, Op)> = (0..creates).map(|i| (at(i), Op::Create(i))).collect();
    let span = at(creates);
    // Spread over the held set, as a cell's deletions are, rather than its first names.
    let mut picks: Vec<usize> = (0..held).collect();
    let mut seed = 38u64;
    for j in 0..deletes {
        let k = j + (splitmix64(&mut seed) % (held - j) as u64) as usize;
        picks.swap(j, k);
        ops.push((
            span.mul_f64((j as f64 + 0.5) / deletes as f64),
            Op::Delete(picks[j]),
        ));
    }
    // Stable: a create keeps its place before a delete of the same instant.
    ops.sort_by_key(|(at, _)| *at);
    Ok(ops)
}

/// The next number of the SplitMix64 sequence at `state` (the schedule must not depend on a
/// library's choice of generator, which may change between its versions).
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// What `bench churn` measured.
#[derive(Debug, Clone, Default)]
pub struct ChurnReport {
    pub command: String,
    pub objects: Objects,
    pub shards: usize,
    pub rate: f64,
    pub seconds: u64,
    pub delete_share: f64,
    /// Held shards deleted per run.
    pub deletes: usize,
    pub concurrency: usize,
    pub controller: Waits,
    pub ideal: Waits,
    /// Controller CPU during the churn, per new shard.
    pub controller_cpu_per_shard: Option<Duration>,
    pub controller_peak_rss: Option<u64>,
    /// Shard and IPAM requests of the controller during the churn, per new shard (the drift
    /// check's reads apart).
    pub controller_requests_per_shard: f64,
    /// Claim DELETEs and shard GETs of the controller's releases, per deleted shard (the ideal
    /// client makes one DELETE). Its claim GETs are counted with the drift reads: the two are
    /// the same request.
    pub controller_release_requests_per_deleted: f64,
    /// Reads of the drift check during the churn (it goes on at its own pace), and with deletes,
    /// the releases' claim reads.
    pub controller_drift_reads: u64,
    /// The real control plane during the churn beside the ideal client, and beside the
    /// controller (the last run of each; none on localplane).
    pub ideal_control_plane: Option<ControlPlaneUse>,
    pub controller_control_plane: Option<ControlPlaneUse>,
}

/// The p99 target: at most this many times the ideal client's.
pub const MAX_P99_RATIO: f64 = 1.5;
/// The p99 target with creates and deletes mixed (#38), for the addresses and the releases each.
pub const MAX_MIXED_P99_RATIO: f64 = 1.2;

pub async fn measure(args: &ChurnArgs, bin: &Path) -> anyhow::Result<ChurnReport> {
    if args.rate <= 0.0 || args.seconds == 0 || args.repeat == 0 {
        bail!("--rate, --seconds and --repeat must be positive");
    }
    let ops = schedule(args.shards, args.rate, args.seconds, args.delete_share)?;
    let deletes = ops
        .iter()
        .filter(|(_, op)| matches!(op, Op::Delete(_)))
        .count();
    let timeout = Duration::from_secs(args.run_timeout_seconds);
    let objects = args.common.objects;
    let mut report = ChurnReport {
        command: command_line(),
        objects,
        shards: args.shards,
        rate: args.rate,
        seconds: args.seconds,
        delete_share: args.delete_share,
        deletes,
        concurrency: args.concurrency,
        ..Default::default()
    };
    let mut cpu = Duration::ZERO;
    let mut requests = 0u64;
    let mut release_requests = 0u64;
    let mut drift_reads = 0u64;
    let cell = args.common.cell;
    for rep in 1..=args.repeat {
        eprintln!("bench churn: run {rep}: the ideal client");
        let bed = Bed::start(cell, args.shards, objects).await?;
        let ideal_cell = bed.ideal_cell_client().await?;
        ideal::run(
            ideal_cell.clone(),
            bed.world.claims(),
            BENCH_NAMESPACE,
            args.concurrency,
        )
        .await?;
        let task = ideal::watch(
            ideal_cell,
            bed.world.claims(),
            BENCH_NAMESPACE,
            args.concurrency,
        )
        .await?;
        let claims = held_claims(&bed, &ops).await?;
        let mut progress = bed.progress().await?;
        let cp_before = bed::control_plane_cpu(&bed);
        let (waits, load, deleted) =
            churn(&bed, &mut progress, args, &ops, &claims, rep, timeout).await?;
        report.ideal_control_plane = bed::control_plane_use(&bed, cp_before);
        task.abort();
        verify(&bed, &deleted)
            .await
            .with_context(|| format!("run {rep}: the ideal client"))?;
        drop(progress);
        bed.shutdown().await;
        merge(&mut report.ideal, waits, load);

        eprintln!("bench churn: run {rep}: the controller");
        let (_, mut bed, mut ctl, _) = controller_run(
            cell,
            bin,
            args.shards,
            args.concurrency,
            rep,
            timeout,
            objects,
            &[],
        )
        .await?;
        let claims = held_claims(&bed, &ops).await?;
        // On the real cell the bench's watch is counted when it ends: after the run's counts.
        let mut progress = bed.progress().await?;
        bed.reset_counters().await?;
        let before = ctl.cpu_time();
        let cp_before = bed::control_plane_cpu(&bed);
        let (waits, load, deleted) =
            churn(&bed, &mut progress, args, &ops, &claims, rep, timeout).await?;
        report.controller_control_plane = bed::control_plane_use(&bed, cp_before);
        ctl.check_alive()?;
        if let (Some(after), Some(before)) = (ctl.cpu_time(), before) {
            cpu += after.saturating_sub(before);
        }
        let is_drift_read =
            |k: &localplane::RequestKey| k.plane == PLATFORM_PROJECT && k.verb == "get";
        // The churn's own shard creates and deletes are counted on the cell too; the controller
        // makes none.
        let is_churn_op = |k: &localplane::RequestKey| {
            k.plane == "cell" && (k.verb == "create" || k.verb == "delete")
        };
        // Without deletes nothing is released, and the figure per new shard stays what it was.
        let is_release = |k: &localplane::RequestKey| {
            deletes > 0
                && ((k.plane == PLATFORM_PROJECT && k.verb == "delete")
                    || (k.plane == "cell" && k.verb == "get"))
        };
        let counts = bed.counts().await?;
        requests += report::count(&counts, |k| {
            report::is_shard_work(k) && !is_drift_read(k) && !is_churn_op(k) && !is_release(k)
        });
        release_requests += report::count(&counts, |k| report::is_shard_work(k) && is_release(k));
        drift_reads += report::count(&counts, is_drift_read);
        // After the counts: the check's own list is not the controller's.
        verify(&bed, &deleted)
            .await
            .with_context(|| format!("run {rep}: the controller"))?;
        drop(progress);
        report.controller_peak_rss = report.controller_peak_rss.max(ctl.peak_rss());
        ctl.stop(Duration::from_secs(10)).await;
        bed.shutdown().await;
        merge(&mut report.controller, waits, load);
    }
    let created = (report.controller.waits.len() + report.controller.unaddressed).max(1);
    report.controller_cpu_per_shard = Some(cpu / u32::try_from(created).unwrap_or(u32::MAX));
    report.controller_requests_per_shard = requests as f64 / created as f64;
    report.controller_release_requests_per_deleted =
        release_requests as f64 / report.controller.deleted().max(1) as f64;
    report.controller_drift_reads = drift_reads;
    eprintln!("{}", report.line());
    Ok(report)
}

fn merge(into: &mut Waits, mut from: Waits, load: Option<LoadAvg>) {
    into.waits.append(&mut from.waits);
    into.waits.sort();
    into.unaddressed += from.unaddressed;
    into.releases.append(&mut from.releases);
    into.releases.sort();
    into.unreleased += from.unreleased;
    into.loads.extend(load);
}

/// The claim each held shard that `ops` deletes names in its ref, read before the churn (and
/// before counting starts): a ref is write-once, and the real apiserver answers the DELETE of a
/// custom resource with a Status, not the object, so the deletion itself does not tell.
async fn held_claims(bed: &Bed, ops: &[(Duration, Op)]) -> anyhow::Result<HashMap<String, String>> {
    let names = ops.iter().filter_map(|(_, op)| match op {
        Op::Delete(i) => Some(format!("shard-{i}")),
        Op::Create(_) => None,
    });
    if !bed.is_real() {
        // localplane's store is read without a request.
        let cell = bed.world.lp().cell();
        return Ok(names
            .filter_map(|name| {
                let shard = cell.object(&shards_key(), Some(BENCH_NAMESPACE), &name)?;
                let claim = shard["spec"]["shardAddressIPv6ClaimRef"]["name"].as_str()?;
                Some((name, claim.to_string()))
            })
            .collect());
    }
    let api: Api<EgressShard> = Api::namespaced(bed.cell_admin(), BENCH_NAMESPACE);
    futures::stream::iter(names)
        .map(|name| {
            let api = api.clone();
            async move {
                let shard = api
                    .get(&name)
                    .await
                    .with_context(|| format!("reading held shard {name}"))?;
                anyhow::Ok(
                    shard
                        .spec
                        .shard_address_ipv6_claim_ref
                        .map(|r| (name, r.name)),
                )
            }
        })
        .buffer_unordered(16)
        .try_filter_map(|named| async move { Ok(named) })
        .try_collect()
        .await
}

/// A held shard the churn deleted: when, and the claim its ref named.
#[derive(Debug, Clone)]
pub struct Deleted {
    pub name: String,
    pub at: Instant,
    pub claim: Option<String>,
}

/// After a run: every deleted shard's claim is gone from IPAM, no deleted shard is left, and
/// every shard left is addressed. The error names what is wrong (the first few of each).
async fn verify(bed: &Bed, deleted: &[Deleted]) -> anyhow::Result<()> {
    fn some(names: &[String]) -> String {
        let mut s = names.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
        if names.len() > 5 {
            s.push_str(&format!(" and {} more", names.len() - 5));
        }
        s
    }
    let mut wrong = vec![];
    let unknown: Vec<String> = deleted
        .iter()
        .filter(|d| d.claim.is_none())
        .map(|d| d.name.clone())
        .collect();
    if !unknown.is_empty() {
        wrong.push(format!(
            "{} deleted shards named no claim before the churn: {}",
            unknown.len(),
            some(&unknown)
        ));
    }
    let kept: Vec<String> = deleted
        .iter()
        .filter_map(|d| {
            let claim = d.claim.as_deref()?;
            bed.world
                .claim_now(claim)
                .map(|_| format!("{} (claim {claim})", d.name))
        })
        .collect();
    if !kept.is_empty() {
        wrong.push(format!(
            "{} deleted shards' claims are still in IPAM: {}",
            kept.len(),
            some(&kept)
        ));
    }
    let api: Api<EgressShard> = Api::namespaced(bed.cell_admin(), BENCH_NAMESPACE);
    let live = api
        .list(&ListParams::default())
        .await
        .context("listing the shards left after the churn")?;
    let gone: std::collections::HashSet<&str> = deleted.iter().map(|d| d.name.as_str()).collect();
    let mut back = vec![];
    let mut unaddressed = vec![];
    for s in &live.items {
        let name = s.metadata.name.clone().unwrap_or_default();
        if gone.contains(name.as_str()) {
            back.push(name);
        } else if s.spec.shard_address_ipv6.is_empty() {
            unaddressed.push(name);
        }
    }
    if !back.is_empty() {
        wrong.push(format!(
            "{} deleted shards are still in the cell: {}",
            back.len(),
            some(&back)
        ));
    }
    if !unaddressed.is_empty() {
        wrong.push(format!(
            "{} shards left in the cell have no address: {}",
            unaddressed.len(),
            some(&unaddressed)
        ));
    }
    if !wrong.is_empty() {
        bail!("after the churn: {}", wrong.join("; "));
    }
    Ok(())
}

/// Runs the operations of `ops` over HTTP on their schedule, then waits until every shard of the
/// namespace is addressed and every deleted shard's claim is removed; the waits of the new ones
/// and of the deleted ones, the load average at the end, and the deleted shards. On localplane
/// a wait runs from the create's commit to the address's, as the store records them; on the
/// real cell from the bench's watch seeing the shard created to it seeing the address (one
/// watch, so its delivery delay is on both ends). A release wait ends at the claim's removal as
/// IPAM commits it and starts at the shard's removal as the store commits it; the real
/// apiserver's commit is not to be had in this process, so there it starts when the answer to
/// the DELETE arrives, after the commit by the answer's trip. `claims` names the claim of each
/// shard to delete ([`held_claims`]).
async fn churn(
    bed: &Bed,
    progress: &mut Progress,
    args: &ChurnArgs,
    ops: &[(Duration, Op)],
    claims: &HashMap<String, String>,
    rep: usize,
    timeout: Duration,
) -> anyhow::Result<(Waits, Option<LoadAvg>, Vec<Deleted>)> {
    let timeline = (!bed.is_real()).then(|| Timeline::record(&bed.world, BENCH_NAMESPACE));
    let releases = Releases::record(&bed.world);
    let api: Api<EgressShard> = Api::namespaced(bed.cell_admin(), BENCH_NAMESPACE);
    let start = tokio::time::Instant::now();
    let mut creates = tokio::task::JoinSet::new();
    let mut deletes = tokio::task::JoinSet::new();
    for (at, op) in ops {
        tokio::time::sleep_until(start + *at).await;
        match *op {
            Op::Create(i) => {
                let shard: EgressShard = serde_json::from_value(shape::shard(
                    BENCH_NAMESPACE,
                    &format!("churn-{rep}-{i}"),
                    args.common.objects,
                ))?;
                let api = api.clone();
                // Each create in a task of its own: a slow answer must not hold up the schedule.
                creates.spawn(async move { api.create(&PostParams::default(), &shard).await });
            }
            Op::Delete(i) => {
                let api = api.clone();
                let name = format!("shard-{i}");
                let claim = claims.get(&name).cloned();
                deletes.spawn(async move {
                    api.delete(&name, &DeleteParams::default())
                        .await
                        .with_context(|| format!("deleting shard {name}"))?;
                    let at = Instant::now();
                    anyhow::Ok(Deleted { name, at, claim })
                });
            }
        }
        // The watch's events are taken in as they come, so each is timed when it arrives.
        progress.wait_for(Duration::ZERO, |_, _| false).await;
    }
    while let Some(done) = creates.join_next().await {
        done?.context("creating a shard")?;
    }
    let mut deleted = vec![];
    while let Some(done) = deletes.join_next().await {
        let mut d = done??;
        if let Some(at) = timeline.as_ref().and_then(|t| t.deleted(&d.name)) {
            d.at = at;
        }
        deleted.push(d);
    }
    progress.wait_for(timeout, |all, done| all == done).await;
    let claims: Vec<String> = deleted.iter().filter_map(|d| d.claim.clone()).collect();
    // Whatever is not released by then is reported, and the run fails its check after.
    releases.wait_for(&claims, timeout).await;
    // The last address is seen at its commit, a moment before its request is counted.
    tokio::time::timeout(timeout, bed.settled())
        .await
        .context("requests still in flight after every shard was addressed")?;
    let load = LoadAvg::now();
    let mut waits = Waits::default();
    let all = match (&timeline, progress) {
        (Some(t), _) => t.waits(),
        (None, Progress::Real(t)) => t.waits(),
        (None, Progress::Local(_)) => vec![],
    };
    for (_, wait) in all {
        match wait {
            Some(d) => waits.waits.push(d),
            None => waits.unaddressed += 1,
        }
    }
    waits.waits.sort();
    for d in &deleted {
        match d.claim.as_deref().and_then(|c| releases.at(c)) {
            Some(released) => waits
                .releases
                .push(released.saturating_duration_since(d.at)),
            None => waits.unreleased += 1,
        }
    }
    waits.releases.sort();
    Ok((waits, load, deleted))
}

/// `a` over `b`, for a ratio of waits.
fn over(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-9)
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

impl ChurnReport {
    /// The p99 of the controller's release waits over the ideal client's.
    pub fn release_p99_ratio(&self) -> f64 {
        over(
            self.controller.release_quantile(0.99),
            self.ideal.release_quantile(0.99),
        )
    }

    /// The run in one line, as the bench prints it on stderr at the end.
    pub fn line(&self) -> String {
        let side = |w: &Waits| {
            let mut s = format!(
                "addressed p50 {} p99 {} max {} ({} unaddressed)",
                ms(w.quantile(0.5)),
                ms(w.quantile(0.99)),
                ms(w.max()),
                w.unaddressed
            );
            if self.deletes > 0 {
                s.push_str(&format!(
                    ", released p50 {} p99 {} max {} ({} of {} unreleased)",
                    ms(w.release_quantile(0.5)),
                    ms(w.release_quantile(0.99)),
                    ms(w.release_max()),
                    w.unreleased,
                    w.deleted()
                ));
            }
            s
        };
        let (c, i) = (&self.controller, &self.ideal);
        let mut s = format!(
            "bench: churn {} shards, {} new/s for {} s, {} deleted per run: controller {}; ideal {}; p99 ratio addressed {:.2} x",
            self.shards,
            self.rate,
            self.seconds,
            self.deletes,
            side(c),
            side(i),
            over(c.quantile(0.99), i.quantile(0.99)),
        );
        if self.deletes > 0 {
            s.push_str(&format!(", released {:.2} x", self.release_p99_ratio()));
        }
        s
    }

    pub fn markdown(&self) -> String {
        let c = &self.controller;
        let i = &self.ideal;
        let ratio = |q: f64| over(c.quantile(q), i.quantile(q));
        let mixed = self.deletes > 0;
        let mut s = format!(
            "`{}` ({} shards; {} addressed shards held, {} new per second for {} s, concurrency {})\n\n",
            self.command,
            self.objects.as_str(),
            self.shards,
            self.rate,
            self.seconds,
            self.concurrency
        );
        if mixed {
            s.push_str(&format!(
                "With deletes: {} held shards deleted per run (--delete-share {}), over the same span.\n\n",
                self.deletes, self.delete_share
            ));
        }
        s.push_str("| client | new shards | p50 | p90 | p99 | max | never addressed | load |");
        s.push_str(if mixed {
            " deleted | release p50 | release p99 | release max | never released |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
        } else {
            "\n|---|---:|---:|---:|---:|---:|---:|---:|\n"
        });
        for (name, w) in [("controller", c), ("ideal client", i)] {
            s.push_str(&format!(
                "| {name} | {} | {} | {} | {} | {} | {} | {} |",
                w.waits.len() + w.unaddressed,
                ms(w.quantile(0.5)),
                ms(w.quantile(0.9)),
                ms(w.quantile(0.99)),
                ms(w.max()),
                w.unaddressed,
                load_range(&w.loads),
            ));
            if mixed {
                s.push_str(&format!(
                    " {} | {} | {} | {} | {} |",
                    w.deleted(),
                    ms(w.release_quantile(0.5)),
                    ms(w.release_quantile(0.99)),
                    ms(w.release_max()),
                    w.unreleased,
                ));
            }
            s.push('\n');
        }
        if mixed {
            let met = ratio(0.99) <= MAX_MIXED_P99_RATIO
                && self.release_p99_ratio() <= MAX_MIXED_P99_RATIO
                && c.unaddressed == 0
                && c.unreleased == 0;
            s.push_str(&format!(
                "\nCreates and deletes mixed: controller over ideal, p99 {:.2} to an address and {:.2} to a release (target each ≤ {MAX_MIXED_P99_RATIO}: {}); the controller made {:.3} claim DELETEs and shard GETs per deleted shard (the ideal client 1; the releases' claim reads are among the drift reads below).\n",
                ratio(0.99),
                self.release_p99_ratio(),
                pass(met),
                self.controller_release_requests_per_deleted,
            ));
        }
        s.push_str(&format!(
            "\nController over ideal: p50 {:.2}, p99 {:.2} (target p99 ≤ {MAX_P99_RATIO}: {}). Controller during the churn: {} CPU and {:.3} shard/IPAM requests per new shard (besides {} drift reads); peak RSS {}.\n",
            ratio(0.5),
            ratio(0.99),
            pass(ratio(0.99) <= MAX_P99_RATIO && c.unaddressed == 0),
            self.controller_cpu_per_shard
                .map(|d| format!("{:.3} ms", d.as_secs_f64() * 1000.0))
                .unwrap_or_else(|| "n/a".into()),
            self.controller_requests_per_shard,
            self.controller_drift_reads,
            mib(self.controller_peak_rss),
        ));
        if let (Some(c), Some(i)) = (self.controller_control_plane, self.ideal_control_plane) {
            let per = |u: ControlPlaneUse| {
                u.cpu
                    .map(|d| {
                        format!(
                            "{:.3} ms",
                            d.as_secs_f64() * 1000.0 / (self.rate * self.seconds as f64).max(1.0)
                        )
                    })
                    .unwrap_or_else(|| "n/a".into())
            };
            s.push_str(&format!(
                "\nThe real control plane during the churn (the last run): {} CPU per new shard beside the controller, {} beside the ideal client; RSS {} and {} at the end (peak {} and {}).\n",
                per(c),
                per(i),
                mib(c.rss),
                mib(i.rss),
                mib(c.peak_rss),
                mib(i.peak_rss),
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deletes_leave_the_creates_schedule_as_it_was_and_repeat_exactly() {
        let only_creates = schedule(100, 10.0, 2, 0.0).unwrap();
        let mixed = schedule(100, 10.0, 2, 0.5).unwrap();
        assert_eq!(mixed, schedule(100, 10.0, 2, 0.5).unwrap());
        let creates: Vec<_> = mixed
            .iter()
            .filter(|(_, op)| matches!(op, Op::Create(_)))
            .copied()
            .collect();
        assert_eq!(creates, only_creates);
        let mut deleted: Vec<usize> = mixed
            .iter()
            .filter_map(|(_, op)| match op {
                Op::Delete(i) => Some(*i),
                Op::Create(_) => None,
            })
            .collect();
        assert_eq!(deleted.len(), 20, "as many deletes as creates at 0.5");
        assert!(mixed.windows(2).all(|w| w[0].0 <= w[1].0), "in time order");
        assert!(mixed.last().unwrap().0 < Duration::from_secs(2));
        deleted.sort();
        deleted.dedup();
        assert_eq!(deleted.len(), 20, "each held shard deleted once");
        assert!(deleted.iter().all(|&i| i < 100));
        assert!(*deleted.last().unwrap() >= 20, "not just the first held");
    }

    #[test]
    fn a_schedule_that_cannot_be_kept_is_refused() {
        assert!(schedule(5, 10.0, 1, 0.5).is_err(), "10 deletes of 5 held");
        assert!(schedule(100, 10.0, 1, 1.0).is_err());
        assert!(schedule(100, 10.0, 1, -0.1).is_err());
    }
}
