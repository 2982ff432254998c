//! The real Kubernetes control plane for this project's tests, demo and conformance run:
//! kube-apiserver 1.37 and etcd in one process, built from Go modules by `testcluster/` (see
//! `.ci/build-testcluster`). localplane is the stand-in; this is the judge.
//!
//! ```no_run
//! # async fn demo() -> Result<(), realcell::Error> {
//! let cell = realcell::RealCell::start().await?;
//! let admin = cell.client(realcell::Identity::Admin).await?;
//! # let _ = admin;
//! cell.stop().await?;
//! # Ok(()) }
//! ```
//!
//! The program runs with `--exit-on-stdin-close` and this side keeps its stdin: however the
//! test process ends, even killed, the control plane ends with it and leaves nothing behind. A
//! [`RealCell`] dropped without [`RealCell::stop`] closes that pipe too, and the program shuts
//! down cleanly by itself (it is never killed: a killed one could not remove its data).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::OnceCell;

/// How long a start may take: a loaded 2-core machine needs most of a minute.
const READY_WITHIN: Duration = Duration::from_secs(180);

/// Why the control plane could not be built or started.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("building the control plane (bash .ci/build-testcluster) failed: {0}")]
    Build(String),
    #[error("starting {binary}: {source}")]
    Spawn {
        binary: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the control plane did not become ready: {reason}; its log is {log}")]
    NotReady { reason: String, log: String },
    #[error("reading the kubeconfig {path}: {message}")]
    Kubeconfig { path: String, message: String },
    #[error("installing the CRDs of {path}: {message}")]
    Crd { path: String, message: String },
    #[error("stopping the control plane: {0}")]
    Stop(String),
    #[error("compacting etcd's history: {0}")]
    Compact(String),
}

impl Error {
    /// A short, stable label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Build(_) => "build",
            Error::Spawn { .. } => "spawn",
            Error::NotReady { .. } => "not_ready",
            Error::Kubeconfig { .. } => "kubeconfig",
            Error::Crd { .. } => "crd",
            Error::Stop(_) => "stop",
            Error::Compact(_) => "compact",
        }
    }
}

/// The identities the control plane serves, each with a bearer token and a kubeconfig.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity {
    /// `admin`, in `system:masters`: bypasses RBAC.
    Admin,
    /// The controller's ServiceAccount as the shipped manifests name it
    /// (`system:serviceaccount:egress-address-system:egress-address-controller`): only what RBAC
    /// grants it.
    Controller,
    /// `operator`, bound to the bootstrap `view` ClusterRole: reads, never writes.
    Operator,
}

impl Identity {
    pub fn file_name(self) -> &'static str {
        match self {
            Identity::Admin => "admin.kubeconfig",
            Identity::Controller => "controller.kubeconfig",
            Identity::Operator => "operator.kubeconfig",
        }
    }

    /// The user name the apiserver authenticates the identity as.
    pub fn user(self) -> &'static str {
        match self {
            Identity::Admin => "admin",
            Identity::Controller => {
                "system:serviceaccount:egress-address-system:egress-address-controller"
            }
            Identity::Operator => "operator",
        }
    }
}

/// The repository this crate was built in.
pub fn workspace_root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    here.canonicalize().unwrap_or(here)
}

/// The control plane's program, built by `.ci/build-testcluster` once per process (the script
/// itself does nothing when the program is newer than its sources).
pub async fn binary() -> Result<PathBuf, Error> {
    static BUILT: OnceCell<Result<PathBuf, String>> = OnceCell::const_new();
    BUILT
        .get_or_init(|| async {
            let root = workspace_root();
            let out = Command::new("bash")
                .arg(root.join(".ci/build-testcluster"))
                .current_dir(&root)
                .stdin(Stdio::null())
                .output()
                .await
                .map_err(|e| format!("running bash: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "{}\n{}{}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            Ok(root.join("target/testcluster/testcluster"))
        })
        .await
        .clone()
        .map_err(Error::Build)
}

/// One call to etcd's JSON gateway (its v3 API over HTTP/1.1).
async fn etcd_call(
    etcd: &str,
    path: &str,
    body: serde_json::Value,
) -> Result<serde_json::Value, Error> {
    use http_body_util::{BodyExt, Full};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;

    let fail = |m: String| Error::Compact(format!("POST {etcd}{path}: {m}"));
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<hyper::body::Bytes>>();
    let request = hyper::Request::post(format!("{etcd}{path}"))
        .header("content-type", "application/json")
        .body(Full::new(body.to_string().into()))
        .map_err(|e| fail(e.to_string()))?;
    let answer = tokio::time::timeout(Duration::from_secs(30), client.request(request))
        .await
        .map_err(|_| fail("no answer within 30 s".into()))?
        .map_err(|e| fail(e.to_string()))?;
    let status = answer.status();
    let bytes = answer
        .into_body()
        .collect()
        .await
        .map_err(|e| fail(e.to_string()))?
        .to_bytes();
    if !status.is_success() {
        return Err(fail(format!(
            "{status}: {}",
            String::from_utf8_lossy(&bytes)
        )));
    }
    serde_json::from_slice(&bytes).map_err(|e| fail(e.to_string()))
}

/// A client from the kubeconfig at `path` (its current context).
pub async fn client_from(path: &Path) -> Result<kube::Client, Error> {
    let fail = |message: String| Error::Kubeconfig {
        path: path.display().to_string(),
        message,
    };
    let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|e| fail(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| fail(e.to_string()))?;
    kube::Client::try_from(config).map_err(|e| fail(e.to_string()))
}

/// A running control plane.
pub struct RealCell {
    child: Child,
    /// Held open: the program exits when it closes.
    stdin: Option<ChildStdin>,
    dir: tempfile::TempDir,
    server: String,
    started_in: Duration,
}

impl RealCell {
    /// Builds the program if needed and starts a control plane of its own.
    pub async fn start() -> Result<RealCell, Error> {
        RealCell::start_with(&[]).await
    }

    /// [`RealCell::start`], with more kube-apiserver flags (`--FLAG=VALUE`) after the
    /// harness's own, which they override: `--watch-cache=false`, say, so that watches are
    /// served from etcd and see its compaction.
    pub async fn start_with(apiserver_args: &[&str]) -> Result<RealCell, Error> {
        let binary = binary().await?;
        let dir = tempfile::Builder::new()
            .prefix("realcell-")
            .tempdir()
            .map_err(|e| Error::Stop(format!("a temporary folder: {e}")))?;
        let log = dir.path().join("control-plane.log");
        let log_file = std::fs::File::create(&log).map_err(|e| Error::Spawn {
            binary: binary.display().to_string(),
            source: e,
        })?;
        let started = Instant::now();
        let mut child = Command::new(&binary)
            .arg("--dir")
            .arg(dir.path())
            .arg("--exit-on-stdin-close")
            .args(
                apiserver_args
                    .iter()
                    .map(|a| format!("--apiserver-arg={a}")),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .map_err(|source| Error::Spawn {
                binary: binary.display().to_string(),
                source,
            })?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout is piped");
        let not_ready = |reason: String| Error::NotReady {
            reason,
            log: log.display().to_string(),
        };
        let mut lines = BufReader::new(stdout).lines();
        let server = match tokio::time::timeout(READY_WITHIN, lines.next_line()).await {
            Err(_) => return Err(not_ready(format!("no ready line within {READY_WITHIN:?}"))),
            Ok(Err(e)) => return Err(not_ready(format!("reading its output: {e}"))),
            Ok(Ok(None)) => {
                let status = child.wait().await.ok();
                return Err(not_ready(format!(
                    "it exited ({status:?}) before it was ready"
                )));
            }
            Ok(Ok(Some(line))) => match line.strip_prefix("ready ") {
                Some(server) => server.trim().to_string(),
                None => return Err(not_ready(format!("it said {line:?} instead of ready"))),
            },
        };
        Ok(RealCell {
            child,
            stdin,
            dir,
            server,
            started_in: started.elapsed(),
        })
    }

    /// One control plane shared by every test of this process, started on first use. It ends
    /// when the process does (its stdin closes).
    pub async fn shared() -> Result<&'static RealCell, Error> {
        static SHARED: OnceCell<RealCell> = OnceCell::const_new();
        SHARED.get_or_try_init(RealCell::start).await
    }

    /// `https://127.0.0.1:PORT`.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// How long the start took, from spawn to the ready line.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// The folder holding the kubeconfigs, `ca.crt` and the control plane's log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn kubeconfig(&self, who: Identity) -> PathBuf {
        self.dir.path().join(who.file_name())
    }

    /// The control plane's process ID (to read its memory, say).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// etcd's client URL (plain HTTP on loopback), as the program wrote it.
    pub fn etcd_url(&self) -> Result<String, Error> {
        let path = self.dir.path().join("etcd.url");
        std::fs::read_to_string(&path)
            .map(|s| s.trim().to_string())
            .map_err(|e| Error::Compact(format!("reading {}: {e}", path.display())))
    }

    /// Compacts etcd's history up to its current revision, as the apiserver's own compactor
    /// does every five minutes. etcd keeps the revision it compacts to, N, and a watch from
    /// resourceVersion rv starts at rv + 1: a watch from rv < N - 1 is then told 410 Gone (where
    /// the apiserver serves it from etcd, not from its watch cache). Answers N.
    pub async fn compact_history(&self) -> Result<u64, Error> {
        let etcd = self.etcd_url()?;
        // Any range answers the current revision in its header; "AA==" is the key "\0".
        let range = etcd_call(&etcd, "/v3/kv/range", serde_json::json!({"key": "AA=="})).await?;
        let revision = range["header"]["revision"]
            .as_str()
            .and_then(|r| r.parse::<u64>().ok())
            .ok_or_else(|| Error::Compact(format!("no revision in etcd's answer {range}")))?;
        etcd_call(
            &etcd,
            "/v3/kv/compaction",
            serde_json::json!({"revision": revision.to_string(), "physical": true}),
        )
        .await?;
        Ok(revision)
    }

    /// A client of `who`, from its kubeconfig.
    pub async fn client(&self, who: Identity) -> Result<kube::Client, Error> {
        client_from(&self.kubeconfig(who)).await
    }

    /// Creates the CustomResourceDefinitions of a YAML file (several documents allowed), or
    /// finds them made already, and waits until each is established: served, with its schema
    /// and CEL rules compiled by the apiserver.
    pub async fn install_crds(&self, path: &Path) -> Result<(), Error> {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        use kube::api::{Api, PostParams};
        use kube::runtime::wait::{await_condition, conditions};

        let fail = |message: String| Error::Crd {
            path: path.display().to_string(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        let crds: Vec<CustomResourceDefinition> =
            serde_saphyr::from_multiple(&text).map_err(|e| fail(e.to_string()))?;
        let api: Api<CustomResourceDefinition> = Api::all(self.client(Identity::Admin).await?);
        for crd in crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            match api.create(&PostParams::default(), &crd).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(fail(format!("creating {name}: {e}"))),
            }
            tokio::time::timeout(
                Duration::from_secs(60),
                await_condition(api.clone(), &name, conditions::is_crd_established()),
            )
            .await
            .map_err(|_| fail(format!("{name} was not established within 60 s")))?
            .map_err(|e| fail(format!("waiting for {name}: {e}")))?;
        }
        Ok(())
    }

    /// Stops the control plane (it shuts down cleanly when its stdin closes) and waits for it to
    /// exit.
    pub async fn stop(mut self) -> Result<(), Error> {
        // Closing stdin is the program's own signal to shut down.
        drop(self.stdin.take());
        match tokio::time::timeout(Duration::from_secs(60), self.child.wait()).await {
            Ok(Ok(status)) if status.success() => Ok(()),
            Ok(Ok(status)) => Err(Error::Stop(format!("it exited {status}"))),
            Ok(Err(e)) => Err(Error::Stop(e.to_string())),
            Err(_) => {
                let _ = self.child.kill().await;
                Err(Error::Stop("it did not exit within 60 s; killed".into()))
            }
        }
    }
}
