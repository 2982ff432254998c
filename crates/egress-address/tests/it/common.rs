//! The controller against the test world (`localplane::testing`): the world as these tests
//! build it, starting and stopping the controller in-process, waiting on the signals it exposes,
//! and the shards and claims it makes.

use std::ops::Deref;
use std::path::PathBuf;
use std::time::Duration;

use egress_address::runtime::Running;
use egress_address::{Controller, Handle, LeaderElection, Metrics, Settings};
use egress_api::ipam::IPClaim;
use egress_api::shard::EgressShard;
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use localplane::RequestKey;
use localplane::testing::{World, WorldBuilder, shard_object, workspace_root};
use serde_json::json;

pub use localplane::testing::{ADMIN, eventually, fault};

pub const PLATFORM: &str = "datum-platform";
pub const CLASS: &str = localplane::testing::ADDRESS_CLASS;
pub const LOCATION: &str = localplane::testing::LOCATION;
pub const SHARD_NS: &str = "galactic-system";
pub const CLAIM_NS: &str = localplane::testing::CLAIM_NAMESPACE;
pub const ADMIN_TOKEN: &str = "admin-token";
pub const ROOT_CIDR: &str = "2607:ed40:100::/40";

/// The test world with the names these tests use: project `datum-platform`, shards in
/// `galactic-system`, the inventory under a /40 of the platform's own range.
pub struct Plane(World);

impl Deref for Plane {
    type Target = World;
    fn deref(&self) -> &World {
        &self.0
    }
}

impl Plane {
    /// The world these tests start, for one that needs more (RBAC, identities, grants).
    pub fn builder() -> WorldBuilder {
        World::builder(workspace_root().join("config"))
            .project(PLATFORM)
            .claim_namespace(CLAIM_NS)
            .shard_namespace(SHARD_NS)
            .root_cidr(ROOT_CIDR)
    }

    pub async fn with(builder: WorldBuilder) -> Plane {
        Plane(builder.start().await.expect("the test world starts"))
    }

    pub async fn start() -> Plane {
        Self::with(Self::builder()).await
    }

    /// Served over TLS (a throwaway CA in every kubeconfig).
    pub async fn start_tls() -> Plane {
        Self::with(Self::builder().tls(true)).await
    }

    /// A second cell with no IPAM of its own: its controller claims from the first plane's
    /// IPAM, as two cells of one location do.
    pub async fn start_cell_only() -> Plane {
        Self::with(Self::builder().cell_only()).await
    }

    /// The cell's identity as the controller reads it: the kube-system namespace's UID.
    pub fn cell_id(&self) -> String {
        self.lp().cell_uid()
    }

    /// The claim the controller makes for a shard of this cell: for the incarnation stored now;
    /// for a shard that is gone, the claim IPAM still holds for one of its incarnations (none:
    /// a name no claim has, so that "no such claim" reads as released).
    pub fn claim_name(&self, shard: &str) -> String {
        if let Some(uid) = self.shard_now(shard).and_then(|s| s.metadata.uid) {
            return self.claim_name_of(shard, &uid);
        }
        self.claims_of(shard).into_iter().next().unwrap_or_else(|| {
            egress_address::ipam::naming::claim_name_without_incarnation(
                &self.cell_id(),
                SHARD_NS,
                shard,
            )
        })
    }

    /// The claim the controller makes for incarnation `uid` of a shard of this cell.
    pub fn claim_name_of(&self, shard: &str, uid: &str) -> String {
        egress_address::ipam::naming::claim_name(&self.cell_id(), SHARD_NS, shard, uid)
    }

    /// The names of the claims IPAM holds for any incarnation of a shard of this cell, read
    /// without a request.
    pub fn claims_of(&self, shard: &str) -> Vec<String> {
        use egress_address::ipam::naming::{ANNOTATION_CELL, ANNOTATION_SHARD_NAME};
        let cell = self.cell_id();
        self.lp()
            .project(PLATFORM)
            .map(|p| p.objects(&localplane::testing::claims_key(), Some(CLAIM_NS)))
            .unwrap_or_default()
            .into_iter()
            .filter(|c| {
                let a = &c["metadata"]["annotations"];
                a[ANNOTATION_SHARD_NAME].as_str() == Some(shard)
                    && a[ANNOTATION_CELL].as_str() == Some(cell.as_str())
            })
            .filter_map(|c| c["metadata"]["name"].as_str().map(str::to_string))
            .collect()
    }

    /// The claim the controller makes for a shard of this cell, read over HTTP.
    pub async fn claim_for(&self, shard: &str) -> Option<IPClaim> {
        self.claims()
            .get_opt(&self.claim_name(shard))
            .await
            .unwrap()
    }

    /// The claim the controller would make for one incarnation of a shard.
    pub fn desired_claim(&self, shard: &str, uid: &str) -> IPClaim {
        let cell = self.cell_id();
        egress_address::ipam::spec::desired_claim(&egress_address::ipam::spec::ClaimRequest {
            class_name: CLASS,
            claim_namespace: CLAIM_NS,
            location: LOCATION,
            cell: &cell,
            shard_namespace: SHARD_NS,
            shard_name: shard,
            shard_uid: uid,
        })
    }

    /// The controller's IPAM client, built the way the binary builds it: from a kubeconfig whose
    /// server is the base URL, with the path replaced by the project's.
    pub async fn ipam_for_controller(&self) -> Client {
        let path = self.kubeconfig("cell", ADMIN);
        egress_address::ipam_client(&path, PLATFORM).await.unwrap()
    }

    /// Requests that do work: everything but list/watch, events and leases.
    pub fn work_requests(&self) -> Vec<(RequestKey, u64)> {
        self.lp()
            .metrics()
            .snapshot()
            .into_iter()
            .filter(|c| is_work(&c.key))
            .map(|c| (c.key, c.count))
            .collect()
    }

    /// Requests since the counters were reset that `pred` picks.
    pub fn requests(&self, pred: impl Fn(&RequestKey) -> bool) -> u64 {
        self.lp().metrics().count(pred)
    }

    pub fn work_request_total(&self) -> u64 {
        self.requests(is_work)
    }

    /// Fails unless exactly `expected` requests did work since the counters were reset.
    #[track_caller]
    pub fn assert_work_requests(&self, expected: u64, what: &str) {
        assert_eq!(
            self.work_request_total(),
            expected,
            "{what}: {:#?}",
            self.work_requests()
        );
    }

    /// Writes to shards (updates and patches) anyone sent, answered or refused.
    pub fn shard_updates(&self) -> u64 {
        self.requests(|k| {
            matches!(k.verb.as_str(), "update" | "patch") && k.resource.starts_with("egressshards")
        })
    }
}

pub fn is_work(k: &RequestKey) -> bool {
    !matches!(k.verb.as_str(), "list" | "watch")
        && !k.resource.starts_with("events")
        && !k.resource.starts_with("leases")
        && (k.resource.starts_with("ipclaims")
            || k.resource.starts_with("ipallocations")
            || k.resource.starts_with("egressshards"))
}

pub fn new_shard(name: &str) -> EgressShard {
    serde_json::from_value(shard_object(SHARD_NS, name)).unwrap()
}

/// Plays an IPAM that answers every new claim with `cidr` in `status.allocatedCIDR` (after it
/// bound it), or unbound when `cidr` is empty.
pub fn answer_claims_with(plane: &Plane, cidr: &str) {
    let cidr = cidr.to_string();
    plane.on_claim_create(move |claim| {
        localplane::testing::answer_claim(claim, &cidr);
    });
}

/// Plays a broken or hostile IPAM: every new claim's status is padded with `bytes` of text, an
/// answer far larger than any claim.
pub fn inflate_claims(plane: &Plane, bytes: usize) {
    plane.on_claim_create(move |claim| {
        claim["status"]["conditions"] = json!([{"type": "Padding", "status": "True",
            "reason": "Padding", "message": "x".repeat(bytes),
            "lastTransitionTime": "2026-12-03T00:00:00Z"}]);
    });
}

/// Settings tuned for tests: no election unless asked, fast retries, no drift check.
pub fn settings() -> Settings {
    let mut s = Settings::new(CLASS, LOCATION, PLATFORM);
    s.claim_namespace = CLAIM_NS.into();
    s.leader_election = None;
    s.backoff.base = Duration::from_millis(50);
    s.backoff.cap = Duration::from_millis(500);
    s.recheck_interval = Duration::from_millis(300);
    s.drift_check_interval = Duration::ZERO;
    s.shutdown_grace = Duration::from_secs(2);
    s.request_timeout = Duration::from_secs(5);
    s
}

pub struct Ctl {
    pub handle: Handle,
    registry: prometheus_client::registry::Registry,
    running: Option<Running>,
}

impl Ctl {
    /// The value of one series as `/metrics` shows it (0 when absent), e.g.
    /// `ctl.sample("egress_address_claim_outcomes_total", &[("outcome", "Bound")])`.
    pub fn sample(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        sample(
            &egress_address::metrics::encode(&self.registry),
            name,
            labels,
        )
    }

    /// The sum of every series of `name` whose labels include `label` (other labels any).
    pub fn sum(&self, name: &str, label: (&str, &str)) -> u64 {
        let text = egress_address::metrics::encode(&self.registry);
        let wanted = format!("{}=\"{}\"", label.0, label.1);
        let mut total = 0.0;
        for line in text.lines() {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Some(labels) = series
                .strip_prefix(name)
                .and_then(|rest| rest.strip_prefix('{'))
                .and_then(|rest| rest.strip_suffix('}'))
            else {
                continue;
            };
            if labels.split(',').any(|l| l == wanted) {
                total += value.parse::<f64>().unwrap_or(0.0);
            }
        }
        total as u64
    }

    /// How many claims ended in `outcome` (the label of `egress_address_claim_outcomes_total`).
    pub fn claim_outcomes(&self, outcome: &str) -> u64 {
        self.sample(
            "egress_address_claim_outcomes_total",
            &[("outcome", outcome)],
        )
    }

    pub async fn stop(mut self) -> Result<(), egress_address::Error> {
        self.running.take().unwrap().stop().await
    }
}

pub async fn start_controller(plane: &Plane, settings: Settings) -> Ctl {
    start_controller_with(settings, plane.cell(), plane.ipam_for_controller().await).await
}

pub async fn start_controller_with(settings: Settings, cell: Client, ipam: Client) -> Ctl {
    let ctl = start_unready(settings, cell, ipam);
    tokio::time::timeout(Duration::from_secs(10), ctl.handle.wait_ready())
        .await
        .expect("the controller becomes ready");
    ctl
}

/// Starts a controller without waiting for it to be ready.
pub fn start_unready(settings: Settings, cell: Client, ipam: Client) -> Ctl {
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Metrics::register(&mut registry);
    start_registered(settings, cell, ipam, registry, metrics)
}

/// Starts a controller whose cell client is built from `kubeconfig` as the binary builds it,
/// every request counted in `rest_client_requests_total`, and waits until it is ready.
pub async fn start_counted(settings: Settings, kubeconfig: &std::path::Path, ipam: Client) -> Ctl {
    let ctl = start_counted_unready(settings, kubeconfig, ipam).await;
    tokio::time::timeout(Duration::from_secs(10), ctl.handle.wait_ready())
        .await
        .expect("the controller becomes ready");
    ctl
}

/// [`start_counted`] without waiting for readiness.
pub async fn start_counted_unready(
    settings: Settings,
    kubeconfig: &std::path::Path,
    ipam: Client,
) -> Ctl {
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Metrics::register(&mut registry);
    let observe = egress_address::connect::connection::counted_by(&metrics);
    let (cell, _follower) = egress_address::connect::kubeconfig::following_cell_client(
        Some(kubeconfig),
        egress_address::connect::kubeconfig::Transport::default(),
        Some(observe),
    )
    .await
    .unwrap();
    start_registered(settings, cell, ipam, registry, metrics)
}

fn start_registered(
    settings: Settings,
    cell: Client,
    ipam: Client,
    registry: prometheus_client::registry::Registry,
    metrics: Metrics,
) -> Ctl {
    let running = Controller::new(settings, cell, ipam, metrics)
        .unwrap()
        .start();
    Ctl {
        handle: running.handle().clone(),
        registry,
        running: Some(running),
    }
}

/// A plane, a controller with [`settings`] running against it, and shard `name` it addressed.
pub async fn with_addressed(name: &str) -> (Plane, Ctl, EgressShard) {
    with_addressed_by(settings(), name).await
}

/// [`with_addressed`] with a controller of other settings.
pub async fn with_addressed_by(settings: Settings, name: &str) -> (Plane, Ctl, EgressShard) {
    let plane = Plane::start().await;
    let ctl = start_controller(&plane, settings).await;
    plane.create_shard(name).await;
    let shard = addressed(&plane, name).await;
    (plane, ctl, shard)
}

pub async fn addressed(plane: &Plane, name: &str) -> EgressShard {
    eventually(10, &format!("shard {name} to be addressed"), || async {
        let s = plane.shard_now(name)?;
        (!s.spec.shard_address_ipv6.is_empty()).then_some(s)
    })
    .await
}

/// Waits until the claim `name` is gone from IPAM.
pub async fn claim_released(plane: &Plane, name: &str, what: &str) {
    eventually(10, what, || async {
        plane
            .claims()
            .get_opt(name)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
}

/// Waits until the controller has seen `shard` as it is now and has nothing left to do for it
/// (or anything else): its cache reached that version, no shard is queued or being worked on,
/// and no event is on its way.
pub async fn settled(ctl: &Ctl, shard: &EgressShard) {
    let rv = shard.metadata.resource_version.clone().unwrap_or_default();
    tokio::time::timeout(Duration::from_secs(10), async {
        ctl.handle.wait_seen(&rv).await;
        ctl.handle.wait_idle().await;
    })
    .await
    .expect("the controller settles");
}

/// Waits until no shard is queued or being worked on and no event is on its way.
pub async fn idle(ctl: &Ctl) {
    tokio::time::timeout(Duration::from_secs(10), ctl.handle.wait_idle())
        .await
        .expect("the controller goes idle");
}

pub const LEASE: &str = "egress-address-controller.cloud.datumapis.com";

pub fn elected(identity: &str) -> egress_address::Settings {
    let mut s = settings();
    s.identity = identity.into();
    s.leader_election = Some(LeaderElection {
        lease_duration: Duration::from_millis(2000),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(200),
        ..LeaderElection::new("default")
    });
    s
}

pub fn leases(plane: &Plane) -> Api<Lease> {
    Api::namespaced(plane.cell(), "default")
}

pub async fn holder(plane: &Plane) -> Option<String> {
    leases(plane)
        .get_opt(LEASE)
        .await
        .unwrap()
        .and_then(|l| l.spec?.holder_identity)
}

/// A controller with election on, once it leads.
pub async fn leading(plane: &Plane, identity: &str) -> Ctl {
    let ctl = start_controller(plane, elected(identity)).await;
    tokio::time::timeout(Duration::from_secs(10), ctl.handle.wait_leader())
        .await
        .expect("the controller leads");
    ctl
}

/// A Secret volume as the kubelet lays it out: the file is a symlink into `..data`, itself a
/// symlink to a timestamped directory, and an update writes a new directory and swaps `..data`
/// in one rename.
pub struct MountedSecret {
    dir: PathBuf,
    file: String,
    generation: u32,
}

impl MountedSecret {
    pub fn new(dir: PathBuf, file: &str, content: &str) -> MountedSecret {
        std::fs::create_dir_all(&dir).unwrap();
        let mut secret = MountedSecret {
            dir,
            file: file.to_string(),
            generation: 0,
        };
        secret.update(content);
        std::os::unix::fs::symlink(PathBuf::from("..data").join(file), secret.dir.join(file))
            .unwrap();
        secret
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join(&self.file)
    }

    pub fn update(&mut self, content: &str) {
        self.generation += 1;
        let stamp = format!("..2026_12_03_00_00_00.{}", self.generation);
        let new = self.dir.join(&stamp);
        std::fs::create_dir(&new).unwrap();
        std::fs::write(new.join(&self.file), content).unwrap();
        let tmp = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(&stamp, &tmp).unwrap();
        let old = std::fs::read_link(self.dir.join("..data")).ok();
        std::fs::rename(&tmp, self.dir.join("..data")).unwrap();
        if let Some(old) = old {
            std::fs::remove_dir_all(self.dir.join(old)).unwrap();
        }
    }
}

/// The value of the counter or gauge `name{labels}` in an exposition (0 when absent): labels must
/// match exactly those given, in any order.
pub fn sample(exposition: &str, name: &str, labels: &[(&str, &str)]) -> u64 {
    for line in exposition.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (series_name, series_labels) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        if series_name != name {
            continue;
        }
        let mut found: Vec<(String, String)> = series_labels
            .split(',')
            .filter(|p| !p.is_empty())
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
            .collect();
        let mut want: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        found.sort();
        want.sort();
        if found == want {
            let value: f64 = value.parse().expect("a numeric sample");
            return value as u64;
        }
    }
    0
}

/// The controller's write as a server answers it, with `admin` creating and changing shard
/// `name` and `controller` writing as the controller does: a merge patch carrying the
/// resourceVersion it read is refused with 409 once the shard moved on, leaves the shard as it
/// was, and, at the version the server has, sets address, ref and label and keeps every other
/// field; a second address is refused by the write-once rules.
pub async fn the_patch_is_conditional(
    admin: &Api<EgressShard>,
    controller: &Api<EgressShard>,
    name: &str,
) {
    use egress_address::ipam::{HolderKind, Holding};
    use egress_address::shard::decide::ShardPatch;
    use kube::api::{Patch, PatchParams, PostParams};

    let namespace = admin.namespace().unwrap_or_default().to_string();
    let mut object = shard_object(&namespace, name);
    object["metadata"]["annotations"] = json!({"owner": "datapath"});
    let shard: EgressShard = serde_json::from_value(object).unwrap();
    let read = admin.create(&PostParams::default(), &shard).await.unwrap();
    let holding = |address: &str| Holding {
        kind: HolderKind::IPClaim,
        namespace: CLAIM_NS.into(),
        name: format!("egress-shard-ipv6.{name}"),
        address: address.parse().unwrap(),
    };
    let write = |read: &EgressShard, address: &str| {
        let patch = ShardPatch::assign(read, &holding(address), PLATFORM).unwrap();
        let controller = controller.clone();
        async move {
            controller
                .patch(
                    name,
                    &PatchParams {
                        field_manager: Some("egress-address-controller".into()),
                        ..Default::default()
                    },
                    &Patch::Merge(patch.to_json()),
                )
                .await
        }
    };
    // Someone else writes after the controller read.
    let mut moved = read.clone();
    moved
        .metadata
        .labels
        .get_or_insert_default()
        .insert("team".into(), "a".into());
    let moved = admin
        .replace(name, &PostParams::default(), &moved)
        .await
        .unwrap();
    match write(&read, "2001:db8::1").await {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"), "{s:?}")
        }
        other => panic!("a patch at a stale resourceVersion: {other:?}"),
    }
    let after = admin.get(name).await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        moved.metadata.resource_version
    );
    assert_eq!(
        after.spec.shard_address_ipv6, "",
        "the refused patch wrote nothing"
    );

    let written = write(&moved, "2001:db8::1").await.unwrap();
    assert_eq!(written.spec.shard_address_ipv6, "2001:db8::1");
    assert_eq!(
        written
            .spec
            .shard_address_ipv6_claim_ref
            .as_ref()
            .map(|r| r.name.as_str()),
        Some(format!("egress-shard-ipv6.{name}").as_str())
    );
    let labels = written.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels
            .get(egress_api::shard::LABEL_EGRESS_IPV6)
            .map(String::as_str),
        Some("true")
    );
    assert_eq!(
        labels.get("team").map(String::as_str),
        Some("a"),
        "other labels stay"
    );
    assert_eq!(
        written
            .metadata
            .annotations
            .and_then(|a| a.get("owner").cloned())
            .as_deref(),
        Some("datapath"),
        "fields the patch does not name stay"
    );
    assert_eq!(written.spec.target_ref, shard.spec.target_ref);

    let current = admin.get(name).await.unwrap();
    match write(&current, "2001:db8::2").await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 422, "{s:?}"),
        other => panic!("a second address: {other:?}"),
    }
}
