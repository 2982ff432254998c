//! The whole install, rehearsed as the runbook writes it: every command of docs/operations.md
//! "Install" run with the real kubectl against localplane (the cell, and Milo serving the
//! platform project with IPAM), RBAC enforced; then the controller started exactly as the
//! installed Deployment starts it (its args and env, the Secret mounted where it says, the
//! service account's credential for the cell), addressing a shard.
//!
//! Then a Prometheus scrapes it as the runbook sets it up (its namespace labelled, its service
//! account bound to the reader role): over HTTPS without verifying the self-signed certificate,
//! as the shipped ServiceMonitor does, with its token; nobody else reads the metrics.
//!
//! The substitutions are of placeholders the runbook leaves to the operator: `<milo>` and
//! `<platform-project>` become this localplane and its project, `<prometheus-namespace>` and
//! `<prometheus-service-account>` the Prometheus's, and `milo-admin.kubeconfig` is an admin
//! kubeconfig for Milo. localplane has no Milo root above its projects, so that kubeconfig names
//! the platform project's control plane, where the grant must hold for IPAM's checks.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use egress_address_lab::fleet::locate_controller;
use localplane::testing::{eventually, shards_key};
use localplane::{Identity, LocalPlane};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{self, fenced_blocks, one_fleet_at_a_time, runbook_section};

/// The documented overlay's `PLATFORM_PROJECT` and `LOCATION`.
const PROJECT: &str = "datum-platform";
const LOCATION: &str = "us-central-1";
const NAMESPACE: &str = "egress-address-system";
const SA_USER: &str = "system:serviceaccount:egress-address-system:egress-address-controller";
const MILO_USER: &str = "system:egress-address@cloud.datumapis.com";
const SHARD_NS: &str = "galactic-system";
const PROMETHEUS_NS: &str = "monitoring";
const PROMETHEUS_SA: &str = "prometheus";
const PROMETHEUS_USER: &str = "system:serviceaccount:monitoring:prometheus";
const PROMETHEUS_TOKEN: &str = "prometheus-token";

/// Splits one shell command line into words: whitespace separates, double quotes group, a
/// trailing backslash continues the line. (The runbook's commands use nothing else.)
fn words(command: &str) -> Vec<String> {
    let joined = command.replace("\\\n", " ");
    let mut out = vec![];
    let mut word = String::new();
    let mut quoted = false;
    let mut started = false;
    for c in joined.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                started = true;
            }
            c if c.is_whitespace() && !quoted => {
                if started {
                    out.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            c => {
                word.push(c);
                started = true;
            }
        }
    }
    assert!(!quoted, "an unclosed quote in {command:?}");
    if started {
        out.push(word);
    }
    out
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

struct Kubectl {
    bin: PathBuf,
    dir: PathBuf,
    kubeconfig: PathBuf,
}

impl Kubectl {
    fn run(&self, args: &[String]) -> String {
        let out = Command::new(&self.bin)
            .args(args)
            .current_dir(&self.dir)
            .env("KUBECONFIG", &self.kubeconfig)
            .output()
            .expect("kubectl runs");
        assert!(
            out.status.success(),
            "kubectl {args:?} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        args.extend(["-o".into(), "json".into()]);
        serde_json::from_str(&self.run(&args)).unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_install_as_the_runbook_writes_it_addresses_shards() {
    let kubectl = common::kubectl();
    let _turn = one_fleet_at_a_time().await;
    let lp = LocalPlane::builder()
        .project(PROJECT)
        .ipam(PROJECT)
        .identity(Identity::admin("admin", "admin-token"))
        .identity(Identity::user("sa", "sa-token", SA_USER))
        .identity(Identity::user("milo", "milo-token", MILO_USER))
        .identity(Identity::user(
            "prometheus",
            PROMETHEUS_TOKEN,
            PROMETHEUS_USER,
        ))
        .namespace(PROMETHEUS_NS)
        .rbac(true)
        .build()
        .unwrap();
    // kubectl sends tokens only over TLS.
    let mut running = lp.serve_tls("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let work = tempfile::tempdir().unwrap();
    running.set_kubeconfig_dir(work.path().join("kubeconfigs"));
    copy_dir(&common::root().join("config"), &work.path().join("config"));
    let admin = running.kubeconfig_path("cell", "admin").unwrap();
    let milo_admin = running.kubeconfig_path(PROJECT, "admin").unwrap();
    std::fs::copy(&milo_admin, work.path().join("milo-admin.kubeconfig")).unwrap();
    // The credential of step 4: Milo's base URL, the controller's identity.
    std::fs::copy(
        running.kubeconfig_path("cell", "milo").unwrap(),
        work.path().join("egress-address.kubeconfig"),
    )
    .unwrap();
    let k = Kubectl {
        bin: kubectl,
        dir: work.path().to_path_buf(),
        kubeconfig: admin,
    };

    // The data plane installs the CRD before any of this.
    k.run(&words(
        "apply -f config/crd/network.datumapis.com_egressshards.yaml",
    ));
    // Step 2's edit: the root pool's CIDR.
    let inventory = work.path().join("config/ipam/egress-shard-ipv6.yaml");
    let text = std::fs::read_to_string(&inventory).unwrap();
    std::fs::write(
        &inventory,
        text.replacen("cidr: \"\"", "cidr: \"2001:db8:100::/40\"", 1),
    )
    .unwrap();
    // Step 5's overlay, as documented.
    let install = runbook_section("Install");
    let overlay = fenced_blocks(&install, "yaml")
        .into_iter()
        .map(|(_, b)| b)
        .find(|b| b.contains("kind: Kustomization"))
        .expect("the documented overlay");
    let overlay_dir = work.path().join("overlays/cell-a");
    std::fs::create_dir_all(&overlay_dir).unwrap();
    std::fs::write(overlay_dir.join("kustomization.yaml"), overlay).unwrap();

    let base = running.base_url();
    let milo = base.trim_start_matches("https://").trim_end_matches('/');
    let commands = fenced_blocks(&install, "sh");
    assert!(commands.len() >= 5, "the runbook's commands: {commands:?}");
    let mut ran = vec![];
    for (_, block) in &commands {
        for command in block.split("\n\n").map(str::trim).filter(|c| !c.is_empty()) {
            let command = command
                .replace("<milo>", milo)
                .replace("<platform-project>", PROJECT)
                .replace("<prometheus-namespace>", PROMETHEUS_NS)
                .replace("<prometheus-service-account>", PROMETHEUS_SA)
                .replace("<cell>", "cell-a");
            let mut argv = words(&command);
            assert_eq!(argv.remove(0), "kubectl", "{command}");
            k.run(&argv);
            ran.push(command);
        }
    }

    // What the runbook built is there.
    k.json(&["get", "namespace", NAMESPACE]);
    k.json(&[
        "-n",
        NAMESPACE,
        "get",
        "secret",
        "egress-address-ipam-kubeconfig",
    ]);
    let deployment = k.json(&[
        "-n",
        NAMESPACE,
        "get",
        "deployment",
        "egress-address-controller",
    ]);
    let pool_ready = running
        .project(PROJECT)
        .unwrap()
        .objects(
            &localplane::ResourceKey::new("ipam.miloapis.com", "ippools"),
            None,
        )
        .len();
    assert!(pool_ready >= 1, "the inventory was applied: {ran:#?}");

    // The controller, as the Deployment runs it.
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "egress-address-controller");
    let container = pod["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "manager")
        .expect("the manager container");
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for e in container["env"].as_array().unwrap() {
        let name = e["name"].as_str().unwrap().to_string();
        let value = match &e["value"] {
            Value::String(v) => v.clone(),
            _ => match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some("metadata.namespace") => NAMESPACE.to_string(),
                Some("metadata.name") => "egress-address-controller-rehearsal".to_string(),
                other => panic!("an env source the rehearsal does not know: {other:?} in {e}"),
            },
        };
        env.insert(name, value);
    }
    assert_eq!(env["LOCATION"], LOCATION);
    assert_eq!(env["PLATFORM_PROJECT"], PROJECT);
    // The Secret, mounted where the Deployment mounts it (under the rehearsal's own root).
    let mount = &container["volumeMounts"][0];
    let mount_path = mount["mountPath"].as_str().unwrap();
    let secret = k.json(&[
        "-n",
        NAMESPACE,
        "get",
        "secret",
        "egress-address-ipam-kubeconfig",
    ]);
    let mounted = work.path().join(mount_path.trim_start_matches('/'));
    std::fs::create_dir_all(&mounted).unwrap();
    for (key, value) in secret["data"].as_object().unwrap() {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(value.as_str().unwrap())
            .unwrap();
        std::fs::write(mounted.join(key), bytes).unwrap();
    }
    let (probe, metrics) = (free_port(), free_port());
    let args: Vec<String> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let mut a = a.as_str().unwrap().to_string();
            for (name, value) in &env {
                a = a.replace(&format!("$({name})"), value);
            }
            a.replace(mount_path, mounted.to_str().unwrap())
                .replace(
                    "--health-probe-bind-address=:8081",
                    &format!("--health-probe-bind-address=127.0.0.1:{probe}"),
                )
                .replace(
                    "--metrics-bind-address=:8443",
                    &format!("--metrics-bind-address=127.0.0.1:{metrics}"),
                )
        })
        .collect();
    // In a pod, the cell is reached with the service account's token.
    let in_cluster = running.kubeconfig_path("cell", "sa").unwrap();
    let log = work.path().join("controller.log");
    let mut child = tokio::process::Command::new(locate_controller(None).unwrap())
        .args(&args)
        .env_clear()
        .envs(&env)
        .env("KUBECONFIG", &in_cluster)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();

    running
        .cell()
        .apply_object(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SHARD_NS}}),
        )
        .unwrap();
    k.run(&words(&format!(
        "-n {SHARD_NS} create -f {}",
        write_shard(work.path()).display()
    )));
    let addressed = eventually(30, "the shard addressed", || async {
        let shard = running
            .cell()
            .object(&shards_key(), Some(SHARD_NS), "worker-1")?;
        let address = shard["spec"]["shardAddressIPv6"].as_str()?.to_string();
        (!address.is_empty()).then_some(shard)
    })
    .await;

    // The namespace the Prometheus runs in is labelled for the NetworkPolicy.
    let ns = k.json(&["get", "namespace", PROMETHEUS_NS]);
    assert_eq!(ns["metadata"]["labels"]["metrics"], "enabled", "{ns}");
    // The kubelet's probe: plain, no credential.
    assert_eq!(plain_get(probe, "/ready").await, 200);
    // The Prometheus reads the metrics; nobody else does.
    let (code, body) = scrape(metrics, "/metrics", Some(PROMETHEUS_TOKEN))
        .await
        .unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("egress_address_shards{"), "{body}");
    let (code, _) = scrape(metrics, "/metrics", None).await.unwrap();
    assert_eq!(code, 401);
    let (code, body) = scrape(metrics, "/metrics", Some("sa-token")).await.unwrap();
    assert_eq!(
        code, 403,
        "the controller's own account holds no reader role: {body}"
    );

    let pid = child.id().expect("the controller is running").to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("the controller stops on SIGTERM")
        .unwrap();
    let logs = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{logs}");
    let held = &addressed["spec"]["shardAddressIPv6ClaimRef"];
    assert_eq!(held["project"], PROJECT, "{addressed}");
    assert_eq!(held["kind"], "IPClaim");
    let forbidden: Vec<_> = running
        .metrics()
        .snapshot()
        .into_iter()
        .filter(|c| c.key.code == 403 || c.key.code == 401)
        .collect();
    assert!(
        forbidden.is_empty(),
        "the installed grants were not enough: {forbidden:#?}\n{logs}"
    );
    running.shutdown().await;
}

/// What the shipped ServiceMonitor's `insecureSkipVerify` does: the handshake's signatures are
/// checked against the certificate shown, whoever issued it.
#[derive(Debug)]
struct SkipVerify(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for SkipVerify {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A GET over HTTPS as a Prometheus with `insecureSkipVerify` sends it: the status and body.
async fn scrape(port: u16, path: &str, token: Option<&str>) -> Result<(u16, String), String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(SkipVerify(provider)))
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    tls.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    // The server closes without a close_notify once it has answered.
    let _ = tls.read_to_end(&mut buf).await;
    answer(&buf)
}

fn answer(buf: &[u8]) -> Result<(u16, String), String> {
    let text = String::from_utf8_lossy(buf).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no HTTP answer: {text:?}"))?;
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Ok((code, body.to_string()))
}

/// The status of a plain GET, as the kubelet probes.
async fn plain_get(port: u16, path: &str) -> u16 {
    let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    tcp.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    tcp.read_to_end(&mut buf).await.unwrap();
    answer(&buf).unwrap().0
}

fn write_shard(dir: &Path) -> PathBuf {
    let path = dir.join("shard.yaml");
    std::fs::write(
        &path,
        "apiVersion: network.datumapis.com/v1alpha1\nkind: EgressShard\nmetadata:\n  name: worker-1\nspec:\n  targetRef: {kind: Node, name: node-a}\n",
    )
    .unwrap();
    path
}

#[test]
fn command_lines_split_as_a_shell_splits_them() {
    assert_eq!(
        words("kubectl --server \"https://m/a b\" \\\n  apply -k config/ipam"),
        [
            "kubectl",
            "--server",
            "https://m/a b",
            "apply",
            "-k",
            "config/ipam"
        ]
    );
    assert_eq!(words("  a   \"\"  b "), ["a", "", "b"]);
}
