//! The `egress-address-controller` binary as a process, against localplane on loopback TCP with
//! kubeconfig files.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use crate::common::*;

pub const BIN: &str = env!("CARGO_BIN_EXE_egress-address-controller");

/// Env the controller reads; cleared so the host's environment cannot satisfy a required flag.
const ENV: [&str; 13] = [
    "METRICS_SECURE",
    "METRICS_CERT_PATH",
    "METRICS_CERT_NAME",
    "METRICS_CERT_KEY",
    "ADDRESS_CLASS_IPV6",
    "CLAIM_NAMESPACE",
    "LOCATION",
    "PLATFORM_PROJECT",
    "IPAM_KUBECONFIG",
    "KUBECONFIG",
    "LEADER_ELECT",
    "POD_NAMESPACE",
    "RUST_LOG",
];

pub fn command() -> Command {
    let mut c = Command::new(BIN);
    for v in ENV {
        c.env_remove(v);
    }
    // Nothing to contact: a required-flag refusal must come before any connection attempt.
    c.env("KUBECONFIG", "/nonexistent/kubeconfig");
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

pub fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = command();
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("the binary runs")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn each_missing_required_flag_exits_1_naming_it() {
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 6] = [
        (&[], &[], "--address-class-ipv6 is required"),
        (&["--address-class-ipv6=c"], &[], "--location is required"),
        // The Deployment sets LOCATION="" on purpose: empty is missing.
        (
            &["--address-class-ipv6=c"],
            &[("LOCATION", "")],
            "--location is required",
        ),
        (
            &["--address-class-ipv6=c", "--location=dfw"],
            &[],
            "--platform-project is required",
        ),
        (
            &["--location=dfw"],
            &[("ADDRESS_CLASS_IPV6", "c"), ("PLATFORM_PROJECT", "p")],
            "--ipam-kubeconfig is required",
        ),
        (
            &[
                "--address-class-ipv6=c",
                "--location=dfw",
                "--platform-project=p",
                "--ipam-kubeconfig=/x",
                "--claim-namespace=",
            ],
            &[],
            "--claim-namespace is required",
        ),
    ];
    for (args, env, message) in cases {
        let out = run(args, env);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(message), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn an_unreadable_or_malformed_ipam_kubeconfig_exits_1_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let cell = dir.path().join("cell.kubeconfig");
    // The cell kubeconfig is read but never contacted before the IPAM one is loaded.
    std::fs::write(
        &cell,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    )
    .unwrap();
    let bad = dir.path().join("ipam.kubeconfig");
    std::fs::write(&bad, "clusters: [oops").unwrap();
    // One mis-indented line in a kubeconfig full of secrets: the parser quotes the lines around
    // it, and none of that may reach the output.
    const TOKEN: &str = "eyJhbGciOiJSUzI1NiJ9.c2VjcmV0LXRva2VuLXRoYXQtbXVzdC1uZXZlci1sZWFr.sig";
    const KEY: &str = "LS0tLS1CRUdJTiBFQyBQUklWQVRFIEtFWS0tLS0tCk1IY0NBUUVFSUtleURhdGE=";
    let secretive = dir.path().join("secretive.kubeconfig");
    std::fs::write(
        &secretive,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: milo\n  cluster:\n    server: https://milo.example\nusers:\n- name: egress\n  user:\n    token: {TOKEN}\n   client-key-data: {KEY}\n    client-certificate-data: {KEY}\ncontexts: []\n"
        ),
    )
    .unwrap();
    for path in [
        bad.as_path(),
        secretive.as_path(),
        Path::new("/nonexistent/ipam.kubeconfig"),
    ] {
        let out = run(
            &[
                "--address-class-ipv6=c",
                "--location=dfw",
                "--platform-project=p",
                &format!("--ipam-kubeconfig={}", path.display()),
                &format!("--kubeconfig={}", cell.display()),
                "--metrics-bind-address=0",
                "--health-probe-bind-address=0",
            ],
            &[],
        );
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(
            stderr(&out).contains(&path.display().to_string()),
            "{}",
            stderr(&out)
        );
        let printed = format!("{}{}", stderr(&out), String::from_utf8_lossy(&out.stdout));
        for secret in [TOKEN, KEY, &TOKEN[20..44], &KEY[10..34]] {
            assert!(!printed.contains(secret), "printed {secret:?}: {printed}");
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub struct Proc {
    pub child: Child,
    pub probe: u16,
    pub metrics: u16,
    pub log: std::path::PathBuf,
}

/// How a test starts the controller, beyond the defaults every test shares.
#[derive(Default)]
pub struct Launch<'a> {
    pub env: &'a [(&'a str, &'a str)],
    /// Where the logs go instead of the test's file.
    pub stderr: Option<Stdio>,
    /// The log flags, instead of `--log-format=json` with `RUST_LOG=info`.
    pub log_flags: Option<&'a [&'a str]>,
    /// The IPAM kubeconfig, instead of the cell's.
    pub ipam_kubeconfig: Option<std::path::PathBuf>,
    /// The leader election timing flags, instead of 3 s / 2 s / 250 ms.
    pub lease_flags: Option<&'a [&'a str]>,
}

const LEASE_FLAGS: [&str; 3] = [
    "--leader-election-lease-duration=3s",
    "--leader-election-renew-deadline=2s",
    "--leader-election-retry-period=250ms",
];

impl Proc {
    pub fn start(plane: &Plane, identity_env: &str) -> Proc {
        Self::start_with(plane, identity_env, &[])
    }

    fn start_with(plane: &Plane, identity_env: &str, env: &[(&str, &str)]) -> Proc {
        Self::launch(
            plane,
            identity_env,
            Launch {
                env,
                ..Launch::default()
            },
        )
    }

    pub fn launch(plane: &Plane, identity_env: &str, launch: Launch<'_>) -> Proc {
        let Launch {
            env,
            stderr,
            log_flags,
            ipam_kubeconfig,
            lease_flags,
        } = launch;
        let cell = plane.lp().kubeconfig_path("cell", ADMIN).unwrap();
        // Milo's grant kubeconfig names the base URL; the controller appends the project path.
        let ipam =
            ipam_kubeconfig.unwrap_or_else(|| plane.lp().kubeconfig_path("cell", ADMIN).unwrap());
        let probe = free_port();
        let metrics = free_port();
        let mut c = command();
        c.env("KUBECONFIG", &cell)
            .env("ADDRESS_CLASS_IPV6", CLASS)
            .env("CLAIM_NAMESPACE", CLAIM_NS)
            .env("LOCATION", LOCATION)
            .env("PLATFORM_PROJECT", PLATFORM)
            .env("POD_NAME", identity_env)
            .args([
                &format!("--health-probe-bind-address=127.0.0.1:{probe}"),
                &format!("--metrics-bind-address=127.0.0.1:{metrics}"),
                &format!("--ipam-kubeconfig={}", ipam.display()),
                "--backoff-base=50ms",
            ])
            .args(lease_flags.unwrap_or(&LEASE_FLAGS));
        match log_flags {
            Some(flags) => {
                c.args(flags);
            }
            None => {
                c.env("RUST_LOG", "info").arg("--log-format=json");
            }
        }
        for (k, v) in env {
            c.env(k, v);
        }
        if !env.iter().any(|(k, _)| *k == "LEADER_ELECT") {
            // As the reference Deployment passes it: a bare flag.
            c.arg("--leader-elect");
        }
        // A file, not a pipe: nobody drains a pipe while the test runs, and a full one blocks.
        let log = plane.dir().join(format!("{identity_env}.log"));
        c.stderr(stderr.unwrap_or_else(|| std::fs::File::create(&log).unwrap().into()))
            .stdout(Stdio::null());
        Proc {
            child: c.spawn().unwrap(),
            probe,
            metrics,
            log,
        }
    }

    pub fn sigterm(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    pub async fn wait_exit(&mut self, secs: u64) -> (Option<i32>, String) {
        let deadline = std::time::Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (
                    status.code(),
                    std::fs::read_to_string(&self.log).unwrap_or_default(),
                );
            }
            if std::time::Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the controller did not exit within {secs}s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}

pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let (code, _, body) = http_get_with(port, path, &[]).await?;
    Some((code, body))
}

/// A GET with extra request headers; the status, the response head and the body.
pub async fn http_get_with(
    port: u16,
    path: &str,
    headers: &[(&str, &str)],
) -> Option<(u16, String, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: x\r\n{extra}Connection: close\r\n\r\n").as_bytes(),
    )
    .await
    .ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.ok()?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    Some((code, head.to_string(), body.to_string()))
}

pub async fn wait_ready(p: &Proc) {
    eventually(15, "/ready to answer 200", || async {
        matches!(http_get(p.probe, "/ready").await, Some((200, _))).then_some(())
    })
    .await;
}

#[tokio::test]
async fn the_binary_end_to_end_with_a_restart() {
    let plane = Plane::start().await;
    plane.create_shard("before").await;
    let first = Proc::start(&plane, "first");
    wait_ready(&first).await;
    for path in ["/live", "/healthz", "/readyz"] {
        assert_eq!(http_get(first.probe, path).await.unwrap().0, 200, "{path}");
    }
    assert_eq!(
        http_get(first.metrics, "/ready").await.unwrap().0,
        200,
        "served on both"
    );
    let a = addressed(&plane, "before").await;
    plane.create_shard("during").await;
    addressed(&plane, "during").await;
    let (code, metrics) = eventually(5, "the addressed gauge", || async {
        let (code, body) = http_get(first.metrics, "/metrics").await?;
        body.contains("egress_address_shards{state=\"addressed\"} 2")
            .then_some((code, body))
    })
    .await;
    assert_eq!(code, 200);
    assert!(metrics.contains("egress_address_leader 1"), "{metrics}");
    assert!(
        metrics.contains("egress_address_claim_outcomes_total{outcome=\"Bound\"} 2"),
        "{metrics}"
    );
    for zero in [
        "egress_address_events_dropped_total 0",
        "egress_address_reconcile_panics_total 0",
    ] {
        assert!(metrics.contains(zero), "{zero} is exported: {metrics}");
    }
    // Events may still be on their way: only the series is certain.
    assert!(
        metrics.contains("\negress_address_events_waiting "),
        "{metrics}"
    );

    first.sigterm();
    let mut first = first;
    let (code, logs) = first.wait_exit(10).await;
    assert_eq!(code, Some(0), "{logs}");
    assert!(
        logs.contains("assigned an egress shard its public IPv6 address"),
        "{logs}"
    );
    assert!(logs.contains("\"holderKind\":\"IPClaim\""), "{logs}");
    assert!(!logs.contains(ADMIN_TOKEN), "a credential was logged");

    // The restart: the addressed shards cost nothing, a new one is claimed, a deleted one released.
    plane.reset_counters();
    let second = Proc::start(&plane, "second");
    wait_ready(&second).await;
    // Leading, with nothing queued: both listed shards are addressed and labelled, so neither
    // needs a pass (each reconcile is timed, so the count says none ran).
    eventually(10, "leadership and an empty queue", || async {
        let (_, body) = http_get(second.metrics, "/metrics").await?;
        (body.contains("egress_address_leader 1")
            && body.contains("\nworkqueue_depth{controller=\"egressshardaddress\",name=\"egressshardaddress\"} 0.0")
            && body.contains("egress_address_reconcile_duration_seconds_count 0"))
        .then_some(())
    })
    .await;
    plane.assert_work_requests(0, "a successor after the takeover");
    assert_eq!(plane.shard_now("before").unwrap().spec, a.spec);
    plane.create_shard("after").await;
    addressed(&plane, "after").await;
    plane.delete_shard("during").await;
    let claim = plane.claim_name("during");
    eventually(10, "the released claim", || async {
        plane.claim_now(&claim).is_none().then_some(())
    })
    .await;
    second.sigterm();
    let mut second = second;
    let (code, logs) = second.wait_exit(10).await;
    assert_eq!(code, Some(0), "{logs}");
    assert!(
        logs.contains("released the public IPv6 address of a shard that is gone"),
        "{logs}"
    );
}

#[tokio::test]
async fn leader_election_can_be_turned_off_from_the_environment() {
    let plane = Plane::start().await;
    let mut p = Proc::start_with(&plane, "solo", &[("LEADER_ELECT", "false")]);
    wait_ready(&p).await;
    plane.create_shard("unelected").await;
    addressed(&plane, "unelected").await;
    let (_, body) = http_get(p.metrics, "/metrics").await.unwrap();
    assert!(body.contains("egress_address_leader 1"), "{body}");
    let leases = localplane::ResourceKey::new("coordination.k8s.io", "leases");
    assert!(
        plane.lp().cell().objects(&leases, None).is_empty(),
        "a lease was taken"
    );
    p.sigterm();
    assert_eq!(p.wait_exit(10).await.0, Some(0));
}

#[tokio::test]
async fn a_closed_log_pipe_neither_stops_the_work_nor_the_shutdown() {
    let plane = Plane::start().await;
    let mut p = Proc::launch(
        &plane,
        "piped",
        Launch {
            stderr: Some(Stdio::piped()),
            ..Launch::default()
        },
    );
    let pipe = p.child.stderr.take().expect("stderr is piped");
    wait_ready(&p).await;
    // Whoever read the logs is gone (a restarted log shipper, a closed terminal): every later
    // log line fails to write.
    drop(pipe);
    plane.create_shard("after-the-pipe").await;
    addressed(&plane, "after-the-pipe").await;
    p.sigterm();
    let (code, _) = p.wait_exit(10).await;
    assert_eq!(code, Some(0), "SIGTERM still stops the controller cleanly");
}

#[tokio::test]
async fn tls_verification_turned_off_is_said_loudly_at_start() {
    let plane = Plane::start_tls().await;
    let mut doc: serde_json::Value = serde_json::from_str(&plane.kubeconfig_text()).unwrap();
    let cluster = &mut doc["clusters"][0]["cluster"];
    cluster
        .as_object_mut()
        .unwrap()
        .remove("certificate-authority-data");
    cluster["insecure-skip-tls-verify"] = serde_json::json!(true);
    let path = plane.dir().join("skip-verify.kubeconfig");
    std::fs::write(&path, doc.to_string()).unwrap();
    let mut p = Proc::launch(
        &plane,
        "careless",
        Launch {
            ipam_kubeconfig: Some(path),
            ..Launch::default()
        },
    );
    wait_ready(&p).await;
    p.sigterm();
    let (code, logs) = p.wait_exit(10).await;
    assert_eq!(code, Some(0), "{logs}");
    let warning = logs
        .lines()
        .find(|l| l.contains("TLS VERIFICATION IS OFF"))
        .unwrap_or_else(|| panic!("no warning in {logs}"));
    assert!(warning.contains("\"level\":\"warn\""), "{warning}");
}
