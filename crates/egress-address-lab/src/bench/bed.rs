//! Where one run's shards live, and how the bench reads what happened there (`--cell`).
//!
//! - **local**: a fresh localplane world serves the cell and IPAM; shards are seeded straight
//!   into its store, progress comes from its change stream, requests from its own counters.
//! - **real**: a fresh real control plane (`realcell`: kube-apiserver 1.37 and etcd, one process)
//!   is the cell, with the CRD and the shipped RBAC installed and the controller as its
//!   ServiceAccount; IPAM is still a fresh localplane world's. Shards are created over HTTP as a
//!   data plane does (kubectl's create, then the data plane's status write), before counting
//!   starts. Progress comes from one watch the bench holds on the namespace (the same for the
//!   ideal client and the controller). Cell requests are the apiserver's own figure,
//!   `apiserver_request_total` from its `/metrics` read as the admin before and after; IPAM
//!   requests are still localplane's.
//!
//! On the real cell, only EgressShard and Event requests are taken from the apiserver's
//! counters: it makes lease and namespace requests of its own (its identity lease in
//! kube-system every 10 s, the system namespaces every minute) under the same labels, and it
//! counts a watch when the watch ends, so a watch still open is not in a run's figures.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use egress_api::shard::EgressShard;
use futures::{StreamExt, TryStreamExt};
use kube::api::{
    Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use localplane::testing::{ADMIN, World, is_addressed, shards_key};
use localplane::{RequestCount, RequestKey};
use realcell::{Identity, RealCell};
use serde_json::json;
use tokio::sync::mpsc;

use super::shape::{self, Objects};
use super::{BENCH_NAMESPACE, host};
use crate::cell::{self, CellKind};
use crate::fleet::{self, ControllerSpec};

/// One run's servers, `n` unaddressed shards seeded in the bench namespace.
pub struct Bed {
    /// IPAM always; the cell too when there is no real one.
    pub world: World,
    real: Option<Real>,
}

struct Real {
    cell: RealCell,
    admin: kube::Client,
    /// The apiserver's counters when counting began.
    baseline: BTreeMap<RequestKey, u64>,
}

impl Bed {
    /// A fresh bed of `kind` with `n` unaddressed shards of the shape `objects`.
    pub async fn start(kind: CellKind, n: usize, objects: Objects) -> anyhow::Result<Bed> {
        let world = fleet::world().start().await?;
        let real = match kind {
            CellKind::Local => {
                shape::prepare(&world, objects);
                shape::seed(&world, BENCH_NAMESPACE, "shard", 0..n, objects);
                None
            }
            CellKind::Real => {
                let cell = RealCell::start()
                    .await
                    .context("starting the real control plane")?;
                cell::install(&cell, &[BENCH_NAMESPACE]).await?;
                let admin = cell.client(Identity::Admin).await?;
                let started = Instant::now();
                create_shards(&admin, "shard", 0..n, objects, 16).await?;
                eprintln!(
                    "bench: the real cell (ready in {:.1} s) holds {n} shards, created in {:.1} s",
                    cell.started_in().as_secs_f64(),
                    started.elapsed().as_secs_f64()
                );
                Some(Real {
                    cell,
                    admin,
                    baseline: BTreeMap::new(),
                })
            }
        };
        Ok(Bed { world, real })
    }

    pub fn is_real(&self) -> bool {
        self.real.is_some()
    }

    /// A client of the cell as its admin (creates of the churn).
    pub fn cell_admin(&self) -> kube::Client {
        match &self.real {
            Some(r) => r.admin.clone(),
            None => self.world.cell(),
        }
    }

    /// A client of the cell as the ideal client is one (see [`Bed::ideal_cell_kubeconfig`]).
    pub async fn ideal_cell_client(&self) -> anyhow::Result<kube::Client> {
        match &self.real {
            Some(r) => Ok(r.cell.client(Identity::Controller).await?),
            None => Ok(self.world.cell()),
        }
    }

    /// The kubeconfig of the cell the ideal client uses: the admin's on localplane, the
    /// controller's ServiceAccount on the real cell (so both clients are authorized alike).
    pub fn ideal_cell_kubeconfig(&self) -> PathBuf {
        match &self.real {
            Some(r) => r.cell.kubeconfig(Identity::Controller),
            None => self.world.kubeconfig("cell", ADMIN),
        }
    }

    /// The kubeconfig of the platform project the ideal client uses.
    pub fn ideal_ipam_kubeconfig(&self) -> PathBuf {
        self.world.kubeconfig(self.world.project(), ADMIN)
    }

    /// A controller spec for this bed: on the real cell, as its ServiceAccount, its Lease in the
    /// install's namespace.
    pub fn controller_spec(&self, bin: PathBuf, name: &str) -> ControllerSpec {
        let mut spec = ControllerSpec::new(&self.world, bin, name);
        if let Some(r) = &self.real {
            spec.cell_kubeconfig = r.cell.kubeconfig(Identity::Controller);
            spec.env
                .push(("POD_NAMESPACE".into(), cell::SYSTEM_NAMESPACE.into()));
        }
        spec
    }

    /// The control plane's process, on the real cell.
    pub fn control_plane_pid(&self) -> Option<u32> {
        self.real.as_ref().and_then(|r| r.cell.pid())
    }

    /// Counting starts (again) now.
    pub async fn reset_counters(&mut self) -> anyhow::Result<()> {
        self.world.reset_counters();
        if let Some(r) = &mut self.real {
            r.baseline = apiserver_requests(&r.admin).await?;
        }
        Ok(())
    }

    /// Every request counted since [`Bed::reset_counters`]: localplane's, and on the real cell
    /// the apiserver's own figures for the cell (see the module documentation).
    pub async fn counts(&self) -> anyhow::Result<Vec<RequestCount>> {
        let mut out = self.world.lp().metrics().snapshot();
        if let Some(r) = &self.real {
            out.retain(|c| c.key.plane != "cell");
            let now = apiserver_requests(&r.admin).await?;
            out.extend(now.into_iter().filter_map(|(key, n)| {
                let count = n.saturating_sub(r.baseline.get(&key).copied().unwrap_or(0));
                (count > 0).then_some(RequestCount { key, count })
            }));
        }
        Ok(out)
    }

    /// Waits until every IPAM request (and on localplane every cell request) is counted.
    pub async fn settled(&self) {
        self.world.lp().metrics().settled().await;
    }

    /// Follows the shards of the bench namespace: how many there are and how many are
    /// addressed, and when each was created and addressed.
    pub async fn progress(&self) -> anyhow::Result<Progress> {
        match &self.real {
            None => Ok(Progress::Local(self.world.lp().cell().tally(
                &shards_key(),
                Some(BENCH_NAMESPACE),
                is_addressed,
            ))),
            Some(r) => Ok(Progress::Real(Box::new(
                WatchTally::start(&r.admin, BENCH_NAMESPACE).await?,
            ))),
        }
    }

    pub async fn shutdown(self) {
        self.world.shutdown().await;
        if let Some(r) = self.real
            && let Err(e) = r.cell.stop().await
        {
            eprintln!("bench: stopping the real control plane: {e}");
        }
    }
}

/// What the control plane process used, on the real cell: CPU over an interval, resident memory
/// at its end and the highest since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ControlPlaneUse {
    pub cpu: Option<Duration>,
    pub rss: Option<u64>,
    pub peak_rss: Option<u64>,
}

/// CPU time of the control plane so far (to subtract from a later reading).
pub fn control_plane_cpu(bed: &Bed) -> Option<Duration> {
    bed.control_plane_pid()
        .and_then(|p| host::cpu_time(Some(p)))
}

/// The control plane's use since `cpu_before`.
pub fn control_plane_use(bed: &Bed, cpu_before: Option<Duration>) -> Option<ControlPlaneUse> {
    let pid = bed.control_plane_pid()?;
    Some(ControlPlaneUse {
        cpu: host::cpu_time(Some(pid))
            .zip(cpu_before)
            .map(|(a, b)| a.saturating_sub(b)),
        rss: host::rss(pid),
        peak_rss: host::status_bytes(pid, "VmHWM"),
    })
}

/// Creates shards `<prefix>-<i>` over HTTP as a cell's data plane does: kubectl creates each
/// (field manager `kubectl-client-side-apply`), and for production shapes the data plane then
/// writes its status (`egress-dataplane`), so the apiserver records both in `managedFields`.
pub async fn create_shards(
    admin: &kube::Client,
    prefix: &str,
    range: std::ops::Range<usize>,
    objects: Objects,
    parallel: usize,
) -> anyhow::Result<()> {
    let ar = ApiResource::erase::<EgressShard>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), BENCH_NAMESPACE, &ar);
    futures::stream::iter(range)
        .map(|i| {
            let api = api.clone();
            let name = format!("{prefix}-{i}");
            async move { create_shard(&api, &name, objects).await }
        })
        .buffer_unordered(parallel.max(1))
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// One shard, created as [`create_shards`] creates them.
pub async fn create_shard(
    api: &Api<DynamicObject>,
    name: &str,
    objects: Objects,
) -> anyhow::Result<()> {
    let obj: DynamicObject = serde_json::from_value(shape::shard(BENCH_NAMESPACE, name, objects))?;
    let created = api
        .create(
            &PostParams {
                field_manager: Some(shape::KUBECTL.into()),
                ..Default::default()
            },
            &obj,
        )
        .await
        .with_context(|| format!("creating shard {name}"))?;
    if objects == Objects::Production {
        let time = created
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_default();
        let status = shape::data_plane_status(&serde_json::to_value(&created)?, &time);
        api.patch_status(
            name,
            &PatchParams {
                field_manager: Some(shape::DATA_PLANE.into()),
                ..Default::default()
            },
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .with_context(|| format!("writing the status of shard {name}"))?;
    }
    Ok(())
}

/// `apiserver_request_total` of the apiserver behind `admin`, for the resources the bench takes
/// from it (EgressShards and Events), as localplane's request keys on the plane `cell`.
async fn apiserver_requests(admin: &kube::Client) -> anyhow::Result<BTreeMap<RequestKey, u64>> {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .context("a request for /metrics")?;
    let text = admin
        .request_text(req)
        .await
        .context("reading the apiserver's /metrics as the admin")?;
    Ok(parse_request_total(&text))
}

/// The `apiserver_request_total` series of a Prometheus text exposition, summed by (verb,
/// group-qualified resource with subresource, code), for EgressShards and Events only.
pub fn parse_request_total(text: &str) -> BTreeMap<RequestKey, u64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let labels: HashMap<&str, &str> = labels
            .split("\",")
            .filter_map(|kv| {
                let (k, v) = kv.split_once("=\"")?;
                Some((k.trim_start_matches(','), v.trim_end_matches('"')))
            })
            .collect();
        let get = |k: &str| labels.get(k).copied().unwrap_or_default();
        let resource = get("resource");
        if !matches!(resource, "egressshards" | "events") {
            continue;
        }
        let mut qualified = match get("group") {
            "" => resource.to_string(),
            g => format!("{resource}.{g}"),
        };
        if !get("subresource").is_empty() {
            qualified = format!("{qualified}/{}", get("subresource"));
        }
        let key = RequestKey {
            plane: "cell".into(),
            verb: kube_verb(get("verb")),
            resource: qualified,
            code: get("code").parse().unwrap_or(0),
        };
        *out.entry(key).or_default() += value as u64;
    }
    out
}

/// The Kubernetes verb of an `apiserver_request_total` verb label, which names most by their
/// HTTP method (`POST` a create, `PUT` an update, `APPLY` a server-side apply patch).
fn kube_verb(label: &str) -> String {
    match label {
        "POST" => "create".into(),
        "PUT" => "update".into(),
        "APPLY" => "patch".into(),
        other => other.to_ascii_lowercase(),
    }
}

/// Counts of shards, and of those addressed.
pub enum Progress {
    Local(localplane::Tally),
    Real(Box<WatchTally>),
}

impl Progress {
    /// Waits until `done(shards, addressed)` holds or `within` has passed; the counts then.
    pub async fn wait_for(
        &mut self,
        within: Duration,
        done: impl Fn(usize, usize) -> bool,
    ) -> (usize, usize) {
        match self {
            Progress::Local(t) => t.wait_for(within, done).await,
            Progress::Real(t) => t.wait_for(within, done).await,
        }
    }
}

/// What the bench's watch saw of one shard.
struct Seen {
    created: Option<Instant>,
    addressed: Option<Instant>,
}

/// One shard as the bench's watch saw it, or as a list it fell back on saw it.
struct Sighting {
    name: String,
    addressed: bool,
    at: Instant,
    /// Seen by a list: when it was created is not known.
    listed: bool,
}

/// Every shard of the namespace, each with whether it is addressed, and the resourceVersion to
/// watch from. The label says which are addressed without the bodies.
async fn list_sightings(api: &Api<EgressShard>) -> anyhow::Result<(String, Vec<Sighting>)> {
    let listed = api
        .list_metadata(&ListParams::default())
        .await
        .context("listing the shards")?;
    let addressed: HashSet<String> = api
        .list_metadata(&ListParams::default().labels(egress_api::shard::LABEL_EGRESS_IPV6))
        .await
        .context("listing the addressed shards")?
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect();
    let at = Instant::now();
    let sightings = listed
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .map(|name| Sighting {
            addressed: addressed.contains(&name),
            name,
            at,
            listed: true,
        })
        .collect();
    Ok((
        listed.metadata.resource_version.unwrap_or_default(),
        sightings,
    ))
}

/// Watches the namespace's shards from `rv` and sends every sighting until `tx` is closed.
///
/// When the watch is refused or ends with an error (a 410 once the resourceVersion is older
/// than what etcd keeps, as after a long burst of writes) the events in between are gone, so it
/// lists again and watches on from there; without that the tally would stop counting and the
/// run would wait out its timeout over shards long addressed.
async fn follow(api: Api<EgressShard>, mut rv: String, tx: mpsc::UnboundedSender<Sighting>) {
    let mut must_list = false;
    loop {
        if must_list {
            match list_sightings(&api).await {
                Ok((fresh, sightings)) => {
                    rv = fresh;
                    must_list = false;
                    for s in sightings {
                        if tx.send(s).is_err() {
                            return;
                        }
                    }
                }
                Err(e) => {
                    // A pause before asking again: nothing signals the server is back.
                    eprintln!("bench: the progress watch: {e:#}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            }
        }
        match api.watch(&WatchParams::default().timeout(290), &rv).await {
            Ok(stream) => match read_watch(stream, &mut rv, &tx).await {
                WatchEnd::Closed => {}
                WatchEnd::Expired => must_list = true,
                WatchEnd::NobodyListens => return,
            },
            Err(kube::Error::Api(s)) if s.code == 410 => {
                eprintln!("bench: the progress watch was refused (410); listing again");
                must_list = true;
            }
            Err(e) => {
                eprintln!("bench: the progress watch: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// How one watch of [`follow`] ended.
enum WatchEnd {
    /// The stream closed or failed: watch again from the last resourceVersion seen.
    Closed,
    /// An ERROR event: the events since the last resourceVersion are gone.
    Expired,
    /// The tally was dropped.
    NobodyListens,
}

/// Sends every shard the stream shows, keeping `rv` at the last resourceVersion seen.
async fn read_watch(
    stream: impl futures::Stream<Item = kube::Result<WatchEvent<EgressShard>>>,
    rv: &mut String,
    tx: &mpsc::UnboundedSender<Sighting>,
) -> WatchEnd {
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        let shard = match event {
            Ok(WatchEvent::Added(s) | WatchEvent::Modified(s)) => s,
            Ok(WatchEvent::Bookmark(b)) => {
                *rv = b.metadata.resource_version;
                continue;
            }
            Ok(WatchEvent::Deleted(s)) => {
                *rv = s.metadata.resource_version.unwrap_or_default();
                continue;
            }
            Ok(WatchEvent::Error(e)) => {
                eprintln!(
                    "bench: the progress watch ended ({} {}: {}); listing again",
                    e.code, e.reason, e.message
                );
                return WatchEnd::Expired;
            }
            Err(e) => {
                eprintln!("bench: the progress watch: {e}");
                return WatchEnd::Closed;
            }
        };
        let addressed = !shard.spec.shard_address_ipv6.is_empty();
        *rv = shard.metadata.resource_version.unwrap_or_default();
        let sighting = Sighting {
            name: shard.metadata.name.unwrap_or_default(),
            addressed,
            at: Instant::now(),
            listed: false,
        };
        if tx.send(sighting).is_err() {
            return WatchEnd::NobodyListens;
        }
    }
    WatchEnd::Closed
}

/// The shards of a namespace of the real cell as one watch sees them: those listed when it
/// opened, and every one created or addressed since, with the time the watch saw it. A shard
/// first seen by a list (when it opened, or after the watch expired) has no creation time and
/// so no wait. The watch task ends when the tally is dropped.
pub struct WatchTally {
    shards: HashMap<String, Seen>,
    rx: mpsc::UnboundedReceiver<Sighting>,
    task: tokio::task::JoinHandle<()>,
}

impl WatchTally {
    async fn start(admin: &kube::Client, namespace: &str) -> anyhow::Result<WatchTally> {
        let api: Api<EgressShard> = Api::namespaced(admin.clone(), namespace);
        let (rv, listed) = list_sightings(&api)
            .await
            .context("before watching the shards")?;
        let (tx, rx) = mpsc::unbounded_channel();
        let mut tally = WatchTally {
            shards: HashMap::new(),
            rx,
            task: tokio::spawn(follow(api, rv, tx)),
        };
        for s in listed {
            tally.apply(s);
        }
        Ok(tally)
    }

    fn apply(&mut self, s: Sighting) {
        let seen = self.shards.entry(s.name).or_insert(Seen {
            created: (!s.listed).then_some(s.at),
            addressed: None,
        });
        if s.addressed {
            seen.addressed.get_or_insert(s.at);
        }
    }

    fn counts(&self) -> (usize, usize) {
        (
            self.shards.len(),
            self.shards
                .values()
                .filter(|s| s.addressed.is_some())
                .count(),
        )
    }

    async fn wait_for(
        &mut self,
        within: Duration,
        done: impl Fn(usize, usize) -> bool,
    ) -> (usize, usize) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            while let Ok(e) = self.rx.try_recv() {
                self.apply(e);
            }
            let counts = self.counts();
            if done(counts.0, counts.1) {
                return counts;
            }
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(e)) => self.apply(e),
                Ok(None) | Err(_) => return self.counts(),
            }
        }
    }

    /// For every shard created since the watch opened: from the watch seeing it created to the
    /// watch seeing it addressed (`None` while it has no address).
    pub fn waits(&mut self) -> Vec<(String, Option<Duration>)> {
        while let Ok(e) = self.rx.try_recv() {
            self.apply(e);
        }
        self.shards
            .iter()
            .filter_map(|(name, s)| {
                let created = s.created?;
                Some((name.clone(), s.addressed.map(|a| a.duration_since(created))))
            })
            .collect()
    }
}

impl Drop for WatchTally {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Whether a bed of `kind` can run `mode` (the outage and soak modes are localplane's only).
pub fn require_local(kind: CellKind, mode: &str) -> anyhow::Result<()> {
    if kind == CellKind::Real {
        bail!("bench {mode} runs on localplane only (--cell local)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_apiserver_request_counter_is_read_for_shards_and_events() {
        let text = r#"# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="network.datumapis.com",resource="egressshards",scope="resource",subresource="",verb="PUT",version="v1alpha1"} 40
apiserver_request_total{code="200",component="apiserver",dry_run="",group="network.datumapis.com",resource="egressshards",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 3
apiserver_request_total{code="409",component="apiserver",dry_run="",group="network.datumapis.com",resource="egressshards",scope="resource",subresource="",verb="PUT",version="v1alpha1"} 2
apiserver_request_total{code="201",component="apiserver",dry_run="",group="events.k8s.io",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 9
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="",scope="",subresource="/metrics",verb="GET",version=""} 1
apiserver_request_total_other{code="200",resource="egressshards",verb="UPDATE"} 5
"#;
        let m = parse_request_total(text);
        let key = |verb: &str, resource: &str, code: u16| RequestKey {
            plane: "cell".into(),
            verb: verb.into(),
            resource: resource.into(),
            code,
        };
        assert_eq!(
            m.get(&key("update", "egressshards.network.datumapis.com", 200)),
            Some(&40)
        );
        assert_eq!(
            m.get(&key("update", "egressshards.network.datumapis.com", 409)),
            Some(&2)
        );
        assert_eq!(
            m.get(&key(
                "patch",
                "egressshards.network.datumapis.com/status",
                200
            )),
            Some(&3)
        );
        assert_eq!(m.get(&key("create", "events.events.k8s.io", 201)), Some(&7));
        assert_eq!(
            m.len(),
            4,
            "leases, non-resource and other series left out: {m:?}"
        );
    }

    #[tokio::test]
    async fn the_progress_watch_lists_again_once_its_resource_version_has_expired() {
        let w = crate::fleet::world().start().await.unwrap();
        shape::prepare(&w, Objects::Bare);
        shape::seed(&w, "ns", "s", 0..3, Objects::Bare);
        // The history is gone, so a watch from an early resourceVersion is told 410.
        w.lp().cell().compact_history();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(follow(Api::namespaced(w.cell(), "ns"), "1".into(), tx));
        let mut next = async || {
            tokio::time::timeout(Duration::from_secs(30), rx.recv())
                .await
                .expect("a sighting within 30 s")
                .expect("the watch task is running")
        };
        let mut listed = Vec::new();
        for _ in 0..3 {
            let s = next().await;
            assert!(
                s.listed,
                "{} should come from the list, not a watch event",
                s.name
            );
            listed.push(s.name);
        }
        listed.sort();
        assert_eq!(listed, ["s-0", "s-1", "s-2"]);
        // And it watches on from the list: a shard created now is seen as created.
        shape::seed(&w, "ns", "s", 3..4, Objects::Bare);
        let s = next().await;
        assert_eq!((s.name.as_str(), s.listed), ("s-3", false));
        task.abort();
        w.shutdown().await;
    }
}
