//! The world a benchmark or chaos run happens in: localplane on a loopback port with the cell and
//! the platform project, the real IPAM inventory, shards seeded straight into the cell's store,
//! and the real controller binary started as a child process.

use std::collections::BTreeMap;
use std::net::{Ipv6Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use egress_api::ipam::{IPClass, IPPool};
use localplane::{Identity, LocalPlane, ResourceKey, Running};
use serde_json::{Value, json};

pub const PLATFORM_PROJECT: &str = "platform";
pub const CLAIM_NAMESPACE: &str = "default";
pub const LOCATION: &str = "dfw";
pub const ADDRESS_CLASS: &str = "datum-egress-shard-address-ipv6";
/// The documentation range: benchmarks must never look like real inventory.
pub const ROOT_CIDR: &str = "2001:db8::/40";
pub const ADMIN: &str = "admin";
pub const CONTROLLER: &str = "controller";
pub const LEASE_NAMESPACE: &str = "default";

pub fn shards_key() -> ResourceKey {
    ResourceKey::new(egress_api::shard::GROUP, "egressshards")
}

pub fn claims_key() -> ResourceKey {
    ResourceKey::new(egress_api::ipam::GROUP, "ipclaims")
}

pub fn allocations_key() -> ResourceKey {
    ResourceKey::new(egress_api::ipam::GROUP, "ipallocations")
}

pub fn leases_key() -> ResourceKey {
    ResourceKey::new("coordination.k8s.io", "leases")
}

/// The workspace root, where `config/` lives.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A running localplane with the inventory applied and kubeconfigs written.
pub struct World {
    pub lp: Running,
    pub dir: tempfile::TempDir,
    pub cell_kubeconfig: PathBuf,
    pub ipam_kubeconfig: PathBuf,
}

/// Options for building a [`World`].
#[derive(Clone, Debug)]
pub struct WorldOptions {
    pub inventory: PathBuf,
    pub crd_dir: PathBuf,
    /// Extra identities (e.g. one with a token the controller is not given, or one bound by RBAC).
    pub identities: Vec<Identity>,
    pub rbac: bool,
    /// The /40 filled into the root pool.
    pub root_cidr: String,
    /// Serve over TLS (with a throwaway CA in the kubeconfigs): kubectl sends tokens only over TLS.
    pub tls: bool,
}

impl Default for WorldOptions {
    fn default() -> Self {
        let root = workspace_root();
        WorldOptions {
            inventory: root.join("config/ipam/egress-shard-ipv6.yaml"),
            crd_dir: root.join("config/crd"),
            identities: vec![],
            rbac: false,
            root_cidr: ROOT_CIDR.to_string(),
            tls: false,
        }
    }
}

impl World {
    pub async fn start(opts: &WorldOptions) -> anyhow::Result<World> {
        let mut b = LocalPlane::builder()
            .crd_dir(&opts.crd_dir)
            .ipam(PLATFORM_PROJECT)
            .project(PLATFORM_PROJECT)
            .project_namespace(CLAIM_NAMESPACE)
            .identity(Identity::admin(ADMIN, "bench-admin-token"))
            .identity(Identity::admin(CONTROLLER, "bench-controller-token"))
            .identities(opts.identities.clone())
            .rbac(opts.rbac);
        // Room for a 10,000-shard relist to resume instead of 410-ing.
        b = b.watch_history(100_000);
        let lp = b.build()?;
        let addr = "127.0.0.1:0".parse()?;
        let mut running = if opts.tls {
            lp.serve_tls(addr).await?
        } else {
            lp.serve(addr).await?
        };
        let dir = tempfile::Builder::new().prefix("egress-bench-").tempdir()?;
        running.set_kubeconfig_dir(dir.path().join("kubeconfig"));
        let cell_kubeconfig = running.kubeconfig_path("cell", CONTROLLER)?;
        let ipam_kubeconfig = running.kubeconfig_path(PLATFORM_PROJECT, CONTROLLER)?;
        let w = World {
            lp: running,
            dir,
            cell_kubeconfig,
            ipam_kubeconfig,
        };
        w.apply_inventory(&opts.inventory, &opts.root_cidr).await?;
        // Every cluster has kube-system; the controller reads its UID as the cell's identity.
        let namespaces = ResourceKey::new("", "namespaces");
        if w.lp
            .cell()
            .object(&namespaces, None, "kube-system")
            .is_none()
        {
            w.lp.cell().apply_object(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}}),
            )
            .map_err(|e| anyhow::anyhow!("creating namespace kube-system: {}", e.0.message))?;
        }
        w.lp.metrics().reset();
        Ok(w)
    }

    /// Applies the inventory file as an operator would, over HTTP, with the empty root CIDR
    /// filled in (the file is deliberately unusable as shipped).
    async fn apply_inventory(&self, path: &Path, cidr: &str) -> anyhow::Result<()> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the IPAM inventory {}", path.display()))?;
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
            .with_context(|| format!("parsing {}", path.display()))?;
        let client = self.lp.http_client(PLATFORM_PROJECT, ADMIN)?;
        let pools: kube::Api<IPPool> = kube::Api::all(client.clone());
        let classes: kube::Api<IPClass> = kube::Api::all(client);
        let pp = kube::api::PostParams::default();
        for mut d in docs.into_iter().filter(|d| d.is_object()) {
            match d["kind"].as_str() {
                Some("IPPool") => {
                    if d["spec"]["cidr"].as_str() == Some("") {
                        d["spec"]["cidr"] = json!(cidr);
                    }
                    pools.create(&pp, &serde_json::from_value(d)?).await?;
                }
                Some("IPClass") => {
                    classes.create(&pp, &serde_json::from_value(d)?).await?;
                }
                other => bail!("{}: unexpected kind {other:?}", path.display()),
            }
        }
        Ok(())
    }

    /// Creates a namespace and shards `<prefix>-<i>` for `i` in `range` straight in the cell's
    /// store: seeding is not what is measured.
    pub fn seed_shards(&self, namespace: &str, prefix: &str, range: std::ops::Range<usize>) {
        let cell = self.lp.cell();
        cell.ensure_namespace(namespace);
        for i in range {
            cell.apply_object(shard_object(namespace, &format!("{prefix}-{i}")))
                .expect("a generated shard is valid");
        }
    }

    /// Shards in `namespace` and how many carry an address.
    pub fn shard_progress(&self, namespace: &str) -> (usize, usize) {
        self.lp
            .cell()
            .count_where(&shards_key(), Some(namespace), is_addressed)
    }

    /// Waits until every shard in `namespace` is addressed; `None` on timeout.
    pub async fn wait_addressed(
        &self,
        namespace: &str,
        timeout: Duration,
        watch: &mut dyn FnMut() -> anyhow::Result<()>,
    ) -> anyhow::Result<Option<Duration>> {
        let start = Instant::now();
        loop {
            let (n, done) = self.shard_progress(namespace);
            if n > 0 && n == done {
                return Ok(Some(start.elapsed()));
            }
            if start.elapsed() > timeout {
                return Ok(None);
            }
            watch()?;
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    pub fn admin_client(&self, plane: &str) -> anyhow::Result<kube::Client> {
        Ok(self.lp.http_client(plane, ADMIN)?)
    }
}

pub fn is_addressed(shard: &Value) -> bool {
    shard["spec"]["shardAddressIPv6"]
        .as_str()
        .is_some_and(|s| !s.is_empty())
}

pub fn shard_object(namespace: &str, name: &str) -> Value {
    json!({
        "apiVersion": "network.datumapis.com/v1alpha1",
        "kind": "EgressShard",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"targetRef": {"kind": "Node", "name": format!("node-{name}")}},
    })
}

/// A free loopback port (racy by nature; good enough for one machine's tests).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Where the controller binary is: `--controller-bin`, else next to this executable (cargo puts
/// every workspace binary of a profile in one directory; test executables live one level down, in
/// `deps/`).
pub fn locate_controller(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    const NAME: &str = "egress-address-controller";
    if let Some(p) = explicit {
        if p.is_file() {
            return Ok(p.to_path_buf());
        }
        bail!("--controller-bin {}: no such file", p.display());
    }
    let exe = std::env::current_exe().context("locating the current executable")?;
    let mut dir = exe.parent().map(Path::to_path_buf);
    while let Some(d) = dir {
        let candidate = d.join(NAME);
        if candidate.is_file() {
            return Ok(candidate);
        }
        if d.file_name().is_some_and(|n| n == "target") {
            break;
        }
        dir = d.parent().map(Path::to_path_buf);
    }
    bail!(
        "{NAME} was not found next to {}; build it with `cargo build --release -p egress-address --bin {NAME}` (or the same without --release for tests), or pass --controller-bin",
        exe.display()
    )
}

/// The controller binary for the `bench` and `chaos` commands. Under `cargo run` (which sets
/// `CARGO`) the binary of the same profile is built first: cargo builds only the package it runs,
/// and a stale controller would be measured without anyone noticing.
pub fn controller_for_cli(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if explicit.is_none()
        && let Some(cargo) = std::env::var_os("CARGO")
    {
        let exe = std::env::current_exe().context("locating the current executable")?;
        let release = exe
            .parent()
            .and_then(|d| d.file_name())
            .is_some_and(|n| n == "release");
        let mut cmd = std::process::Command::new(cargo);
        cmd.current_dir(workspace_root()).args([
            "build",
            "-p",
            "egress-address",
            "--bin",
            "egress-address-controller",
        ]);
        if release {
            cmd.arg("--release");
        }
        eprintln!(
            "building egress-address-controller ({})",
            if release { "release" } else { "dev" }
        );
        let status = cmd.status().context("running cargo build")?;
        if !status.success() {
            bail!("cargo build -p egress-address --bin egress-address-controller failed: {status}");
        }
    }
    locate_controller(explicit)
}

/// How one controller process is started.
#[derive(Clone, Debug)]
pub struct ControllerSpec {
    pub bin: PathBuf,
    pub name: String,
    pub concurrency: usize,
    pub leader_elect: bool,
    pub cell_kubeconfig: PathBuf,
    pub ipam_kubeconfig: PathBuf,
    pub log_dir: PathBuf,
    pub extra_args: Vec<String>,
}

/// A controller child process.
pub struct Controller {
    pub name: String,
    pub child: tokio::process::Child,
    pub pid: u32,
    pub health_port: u16,
    pub started: Instant,
    pub log: PathBuf,
}

impl ControllerSpec {
    pub fn args(&self, health_port: u16, metrics_port: u16) -> Vec<String> {
        let mut a = vec![
            format!("--address-class-ipv6={ADDRESS_CLASS}"),
            format!("--claim-namespace={CLAIM_NAMESPACE}"),
            format!("--location={LOCATION}"),
            format!("--platform-project={PLATFORM_PROJECT}"),
            format!("--ipam-kubeconfig={}", self.ipam_kubeconfig.display()),
            format!("--leader-elect={}", self.leader_elect),
            format!("--concurrency={}", self.concurrency),
            format!("--metrics-bind-address=127.0.0.1:{metrics_port}"),
            format!("--health-probe-bind-address=127.0.0.1:{health_port}"),
        ];
        a.extend(self.extra_args.iter().cloned());
        a
    }

    pub fn spawn(&self) -> anyhow::Result<Controller> {
        let health_port = free_port()?;
        let metrics_port = free_port()?;
        std::fs::create_dir_all(&self.log_dir)?;
        let log = self.log_dir.join(format!("{}.log", self.name));
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)?;
        let err = out.try_clone()?;
        let child = tokio::process::Command::new(&self.bin)
            .args(self.args(health_port, metrics_port))
            .env("KUBECONFIG", &self.cell_kubeconfig)
            .env("POD_NAME", &self.name)
            .env(
                "RUST_LOG",
                std::env::var("BENCH_CONTROLLER_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", self.bin.display()))?;
        let pid = child.id().context("the controller exited at once")?;
        Ok(Controller {
            name: self.name.clone(),
            child,
            pid,
            health_port,
            started: Instant::now(),
            log,
        })
    }
}

impl Controller {
    /// Fails if the process has exited (with the tail of its log, which says why).
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "controller {} exited with {status}:\n{}",
                self.name,
                log_tail(&self.log, 30)
            );
        }
        Ok(())
    }

    /// Whether `/ready` answers 200.
    pub async fn is_ready(&self) -> bool {
        http_status(self.health_port, "/ready").await == Some(200)
    }

    /// Waits for `/ready`; the elapsed time since spawn.
    pub async fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<Duration> {
        loop {
            self.check_alive()?;
            if self.is_ready().await {
                return Ok(self.started.elapsed());
            }
            if self.started.elapsed() > timeout {
                bail!(
                    "controller {} not ready after {timeout:?}:\n{}",
                    self.name,
                    log_tail(&self.log, 30)
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Peak resident set size (VmHWM) in bytes.
    pub fn peak_rss(&self) -> Option<u64> {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        s.lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
    }

    /// CPU time the process has used so far, user and system, all threads.
    pub fn cpu_time(&self) -> Option<Duration> {
        let s = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).ok()?;
        // The command name (field 2) may hold spaces; the fields after it are plain numbers.
        let rest = &s[s.rfind(')')? + 2..];
        let mut fields = rest.split_whitespace().skip(11);
        let utime: u64 = fields.next()?.parse().ok()?;
        let stime: u64 = fields.next()?.parse().ok()?;
        // /proc reports in USER_HZ, which Linux fixes at 100 for user space.
        Some(Duration::from_millis((utime + stime) * 10))
    }

    /// SIGKILL: no chance to finish anything.
    pub async fn kill(mut self) {
        let _ = self.child.kill().await;
    }

    /// SIGTERM, then SIGKILL after `grace`.
    pub async fn stop(mut self, grace: Duration) {
        let _ = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(self.pid.to_string())
            .status();
        if tokio::time::timeout(grace, self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let v: Vec<&str> = text.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

/// A minimal HTTP/1.1 GET on loopback: the status code, or `None` if nothing answers.
pub async fn http_status(port: u16, path: &str) -> Option<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut buf = vec![0u8; 64];
        let n = s.read(&mut buf).await.ok()?;
        let head = std::str::from_utf8(&buf[..n]).ok()?;
        head.split_whitespace().nth(1)?.parse().ok()
    };
    tokio::time::timeout(Duration::from_secs(2), fut)
        .await
        .ok()
        .flatten()
}

/// Counters grouped for a report: requests by plane and verb, without the ones a caller
/// excludes (e.g. lease traffic reported on its own).
pub fn requests_by(
    lp: &LocalPlane,
    include: impl Fn(&localplane::RequestKey) -> bool,
) -> BTreeMap<(String, String), u64> {
    let mut m = BTreeMap::new();
    for c in lp.metrics().snapshot() {
        if std::env::var_os("BENCH_DEBUG").is_some() {
            eprintln!("  {c:?}");
        }
        if include(&c.key) {
            // Non-resource requests are recorded under their path; the read of kube-system's
            // UID (the cell's identity) is one-time startup work like discovery.
            let verb = if c.key.resource.starts_with('/') {
                "discovery".to_string()
            } else if c.key.resource == "namespaces" && c.key.verb == "get" {
                "identity".to_string()
            } else {
                c.key.verb.clone()
            };
            *m.entry((c.key.plane.clone(), verb)).or_default() += c.count;
        }
    }
    m
}

pub fn is_lease(k: &localplane::RequestKey) -> bool {
    k.resource.starts_with("leases.coordination.k8s.io")
}

pub fn is_event(k: &localplane::RequestKey) -> bool {
    k.resource.starts_with("events") || k.resource == "events"
}

pub fn is_write(k: &localplane::RequestKey) -> bool {
    matches!(k.verb.as_str(), "create" | "update" | "patch" | "delete")
}

/// The address in an allocated CIDR, if it is a plain IPv6 /128.
pub fn address_of(cidr: &str) -> Option<Ipv6Addr> {
    let (a, len) = cidr.split_once('/')?;
    (len == "128").then_some(())?;
    a.parse().ok()
}
