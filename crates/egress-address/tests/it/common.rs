//! A localplane (cell + Milo platform project with IPAM) on loopback, and a controller against it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use egress_address::{Controller, Handle, LeaderElection, Metrics, Settings};
use egress_api::ipam::{IPAllocation, IPClaim};
use egress_api::shard::{EgressShard, EgressShardSpec, TargetRef};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use localplane::{
    Caller, FaultConfig, FaultRule, Identity, LocalPlane, PlaneTxn, RequestKey, ResourceKey,
    Running, StorageHooks,
};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub const PLATFORM: &str = "datum-platform";
pub const CLASS: &str = "datum-egress-shard-address-ipv6";
pub const LOCATION: &str = "dfw";
pub const SHARD_NS: &str = "galactic-system";
pub const CLAIM_NS: &str = "default";
pub const ADMIN: &str = "admin";
pub const ADMIN_TOKEN: &str = "admin-token";
pub const ROOT_CIDR: &str = "2607:ed40:100::/40";

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The repository's IPAM inventory with the root pool's CIDR filled in, as an operator would.
pub fn inventory_file(dir: &std::path::Path) -> PathBuf {
    let text = std::fs::read_to_string(repo_root().join("config/ipam/egress-shard-ipv6.yaml"))
        .expect("config/ipam/egress-shard-ipv6.yaml");
    let text = text.replacen("cidr: \"\"", &format!("cidr: \"{ROOT_CIDR}\""), 1);
    let path = dir.join("inventory.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

pub struct Plane {
    pub lp: Running,
    pub dir: tempfile::TempDir,
}

impl Plane {
    pub async fn start() -> Plane {
        Self::start_serving(false).await
    }

    /// Served over TLS (a throwaway CA in every kubeconfig).
    pub async fn start_tls() -> Plane {
        Self::start_serving(true).await
    }

    async fn start_serving(tls: bool) -> Plane {
        let dir = tempfile::tempdir().unwrap();
        let inventory = inventory_file(dir.path());
        let lp = LocalPlane::builder()
            .crd_dir(repo_root().join("config/crd"))
            .project(PLATFORM)
            .project_namespace(CLAIM_NS)
            .namespace(SHARD_NS)
            .identity(Identity::admin(ADMIN, ADMIN_TOKEN))
            .ipam(PLATFORM)
            .manifest(PLATFORM, inventory)
            .build()
            .expect("localplane builds");
        let addr = "127.0.0.1:0".parse().unwrap();
        let mut lp = if tls {
            lp.serve_tls(addr).await.unwrap()
        } else {
            lp.serve(addr).await.unwrap()
        };
        lp.set_kubeconfig_dir(dir.path());
        let plane = Plane { lp, dir };
        plane.ensure_kube_system();
        plane
    }

    /// The admin kubeconfig's text (the controller's kubeconfigs name the base URL).
    pub fn kubeconfig_text(&self) -> String {
        std::fs::read_to_string(self.lp.kubeconfig_path("cell", ADMIN).unwrap()).unwrap()
    }

    /// Every cluster has kube-system; its UID is the cell's identity.
    pub fn ensure_kube_system(&self) {
        if self.cell_id_now().is_none() {
            self.lp
                .cell()
                .apply_object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}}))
                .unwrap();
        }
    }

    fn cell_id_now(&self) -> Option<String> {
        let ns = self
            .lp
            .cell()
            .object(&ResourceKey::new("", "namespaces"), None, "kube-system")?;
        ns["metadata"]["uid"].as_str().map(str::to_string)
    }

    /// The cell's identity as the controller reads it: the kube-system namespace's UID.
    pub fn cell_id(&self) -> String {
        self.cell_id_now().expect("kube-system exists")
    }

    /// The claim the controller makes for a shard of this cell.
    pub fn claim_name(&self, shard: &str) -> String {
        egress_address::ipam::naming::claim_name(&self.cell_id(), SHARD_NS, shard)
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

    /// A second cell served by its own localplane, with no IPAM of its own: its controller
    /// claims from the first plane's IPAM, as two cells of one location do.
    pub async fn start_cell_only() -> Plane {
        let dir = tempfile::tempdir().unwrap();
        let lp = LocalPlane::builder()
            .crd_dir(repo_root().join("config/crd"))
            .namespace(SHARD_NS)
            .identity(Identity::admin(ADMIN, ADMIN_TOKEN))
            .build()
            .expect("localplane builds");
        let mut lp = lp.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
        lp.set_kubeconfig_dir(dir.path());
        let plane = Plane { lp, dir };
        plane.ensure_kube_system();
        plane
    }

    pub fn cell(&self) -> Client {
        self.lp.http_client("cell", ADMIN).unwrap()
    }

    pub fn ipam_admin(&self) -> Client {
        self.lp.http_client(PLATFORM, ADMIN).unwrap()
    }

    /// The controller's IPAM client, built the way the binary builds it: from a kubeconfig whose
    /// server is the base URL, with the path replaced by the project's.
    pub async fn ipam_for_controller(&self) -> Client {
        let path = self.lp.kubeconfig_path("cell", ADMIN).unwrap();
        egress_address::ipam_client(&path, PLATFORM).await.unwrap()
    }

    pub fn shards(&self) -> Api<EgressShard> {
        Api::namespaced(self.cell(), SHARD_NS)
    }

    pub fn claims(&self) -> Api<IPClaim> {
        Api::namespaced(self.ipam_admin(), CLAIM_NS)
    }

    pub fn allocations(&self) -> Api<IPAllocation> {
        Api::namespaced(self.ipam_admin(), CLAIM_NS)
    }

    pub async fn create_shard(&self, name: &str) -> EgressShard {
        self.shards()
            .create(&PostParams::default(), &new_shard(name))
            .await
            .unwrap()
    }

    /// Reads the store directly: no request, so request counts stay the controller's own.
    pub fn shard_now(&self, name: &str) -> Option<EgressShard> {
        let key = ResourceKey::new("network.datumapis.com", "egressshards");
        let v = self.lp.cell().object(&key, Some(SHARD_NS), name)?;
        Some(serde_json::from_value(v).unwrap())
    }

    /// The claim as stored, read without a request.
    pub fn claim_now(&self, name: &str) -> Option<IPClaim> {
        let key = ResourceKey::new("ipam.miloapis.com", "ipclaims");
        let v = self
            .lp
            .project(PLATFORM)?
            .object(&key, Some(CLAIM_NS), name)?;
        Some(serde_json::from_value(v).unwrap())
    }

    pub async fn shard(&self, name: &str) -> EgressShard {
        self.shards().get(name).await.unwrap()
    }

    /// Requests that do work: everything but list/watch, events and leases.
    pub fn work_requests(&self) -> Vec<(RequestKey, u64)> {
        self.lp
            .metrics()
            .snapshot()
            .into_iter()
            .filter(|c| is_work(&c.key))
            .map(|c| (c.key, c.count))
            .collect()
    }

    pub fn work_request_total(&self) -> u64 {
        self.lp.metrics().count(is_work)
    }

    pub fn reset_counters(&self) {
        self.lp.metrics().reset();
    }

    pub fn set_faults(&self, rules: Vec<FaultRule>) {
        self.lp.faults().set(FaultConfig {
            seed: Some(1),
            rules,
            watch_cut_after_seconds: None,
        });
    }

    pub fn clear_faults(&self) {
        self.lp.faults().clear();
    }

    /// Adds server behaviour on the platform plane after IPAM's own (e.g. to rewrite answers).
    pub fn add_platform_hook(&self, hook: Arc<dyn StorageHooks>) {
        self.lp.project(PLATFORM).unwrap().add_hooks(hook);
    }

    pub async fn events_for(&self, shard: &str) -> Vec<Event> {
        let api: Api<Event> = Api::namespaced(self.cell(), SHARD_NS);
        api.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(shard))
            .collect()
    }

    pub async fn event_reasons(&self, shard: &str) -> Vec<String> {
        self.events_for(shard)
            .await
            .into_iter()
            .filter_map(|e| e.reason)
            .collect()
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
    let mut s = EgressShard::new(
        name,
        EgressShardSpec {
            target_ref: TargetRef {
                kind: "Node".into(),
                name: format!("node-{name}"),
            },
            ..Default::default()
        },
    );
    s.metadata.namespace = Some(SHARD_NS.into());
    s
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

pub struct Running_ {
    pub handle: Handle,
    pub metrics: Metrics,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), egress_address::Error>>>,
}

pub type Ctl = Running_;

impl Running_ {
    pub async fn stop(mut self) -> Result<(), egress_address::Error> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        self.task.take().unwrap().await.unwrap()
    }
}

impl Drop for Running_ {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
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
    let metrics = Metrics::unregistered();
    let controller = Controller::new(settings, cell, ipam, metrics.clone()).unwrap();
    let handle = controller.handle();
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(controller.run(async move {
        let _ = rx.await;
    }));
    Running_ {
        handle,
        metrics,
        stop: Some(tx),
        task: Some(task),
    }
}

/// Polls until `f` returns `Some`, or panics after `secs`.
pub async fn eventually<T, F, Fut>(secs: u64, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
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

/// A hook that rewrites what IPAM put in a new claim's `status.allocatedCIDR` (after IPAM bound
/// it), to play an IPAM that answers unbound or unusably.
pub struct RewriteCidr(pub String);

impl StorageHooks for RewriteCidr {
    fn handles(&self, res: &ResourceKey) -> bool {
        res.group == "ipam.miloapis.com" && res.plural == "ipclaims"
    }

    fn before_create(
        &self,
        _txn: &mut dyn PlaneTxn,
        _caller: &Caller,
        _res: &ResourceKey,
        obj: &mut Value,
    ) -> Result<(), kube::core::Status> {
        let status = obj
            .as_object_mut()
            .unwrap()
            .entry("status")
            .or_insert_with(|| json!({}));
        if self.0.is_empty() {
            status.as_object_mut().unwrap().remove("allocatedCIDR");
            status["phase"] = json!("Pending");
        } else {
            status["allocatedCIDR"] = json!(self.0);
        }
        Ok(())
    }

    fn before_update(
        &self,
        _txn: &mut dyn PlaneTxn,
        _caller: &Caller,
        _res: &ResourceKey,
        _old: &Value,
        _new: &mut Value,
    ) -> Result<(), kube::core::Status> {
        Ok(())
    }

    fn before_delete(
        &self,
        _txn: &mut dyn PlaneTxn,
        _caller: &Caller,
        _res: &ResourceKey,
        _obj: &Value,
    ) -> Result<(), kube::core::Status> {
        Ok(())
    }
}

pub fn fault(plane: &str, verb: &str, resource: &str, code: u16) -> FaultRule {
    FaultRule {
        plane: Some(plane.into()),
        verb: Some(verb.into()),
        resource: Some(resource.into()),
        error_rate: 1.0,
        code: Some(code),
        ..Default::default()
    }
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

/// A hook that pads every new claim's status with `bytes` of text: an answer far larger than
/// any claim, as a broken or hostile server might send.
pub struct Inflate(pub usize);

impl StorageHooks for Inflate {
    fn handles(&self, res: &ResourceKey) -> bool {
        res.group == "ipam.miloapis.com" && res.plural == "ipclaims"
    }

    fn before_create(
        &self,
        _txn: &mut dyn PlaneTxn,
        _caller: &Caller,
        _res: &ResourceKey,
        obj: &mut Value,
    ) -> Result<(), kube::core::Status> {
        obj["status"]["conditions"] = json!([{"type": "Padding", "status": "True",
            "reason": "Padding", "message": "x".repeat(self.0),
            "lastTransitionTime": "2026-12-03T00:00:00Z"}]);
        Ok(())
    }

    fn before_update(
        &self,
        _txn: &mut dyn PlaneTxn,
        _caller: &Caller,
        _res: &ResourceKey,
        _old: &Value,
        _new: &mut Value,
    ) -> Result<(), kube::core::Status> {
        Ok(())
    }

    fn before_delete(
        &self,
        _txn: &mut dyn PlaneTxn,
        _caller: &Caller,
        _res: &ResourceKey,
        _obj: &Value,
    ) -> Result<(), kube::core::Status> {
        Ok(())
    }
}
