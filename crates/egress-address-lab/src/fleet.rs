//! Controller processes against the test world (`localplane::testing`): finding the
//! `egress-address-controller` binary, starting it with a world's kubeconfigs, watching it, and
//! killing or stopping it. `bench` and `chaos` run their controllers this way; so do the tests
//! that check what the process itself says and does.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use localplane::testing::{
    ADDRESS_CLASS, CLAIM_NAMESPACE, LOCATION, PLATFORM_PROJECT, World, WorldBuilder, workspace_root,
};

/// The world the CLI's commands run in: this repository's `config/`, with room for a
/// 10,000-shard relist to resume instead of 410-ing.
pub fn world() -> WorldBuilder {
    World::builder(workspace_root().join("config")).watch_history(100_000)
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
    locate_binary(NAME).with_context(|| {
        format!("build it with `cargo build --release -p egress-address --bin {NAME}` (or the same without --release for tests), or pass --controller-bin")
    })
}

/// The workspace binary `name` of this executable's profile: next to this executable, or
/// above it (test executables live in `deps/`).
pub fn locate_binary(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the current executable")?;
    let mut dir = exe.parent().map(Path::to_path_buf);
    while let Some(d) = dir {
        let candidate = d.join(name);
        if candidate.is_file() {
            return Ok(candidate);
        }
        if d.file_name().is_some_and(|n| n == "target") {
            break;
        }
        dir = d.parent().map(Path::to_path_buf);
    }
    bail!("{name} was not found next to {}", exe.display())
}

/// The controller binary for the `bench` and `chaos` commands (see [`built_for_cli`]).
pub fn controller_for_cli(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if explicit.is_none() {
        built_for_cli("egress-address", "egress-address-controller")?;
    }
    locate_controller(explicit)
}

/// How a person runs the operator's tool from here: the `egress-address` binary beside this one
/// when it is there, else, under `cargo run`, the same command for it (cargo builds only the binary
/// it runs, and building the tool here would make the demo wait), else the one on PATH.
pub fn tool_command() -> String {
    tool_command_for(
        locate_binary("egress-address").ok().as_deref(),
        std::env::var_os("CARGO").is_some(),
        this_is_a_release_build(),
    )
}

fn tool_command_for(beside: Option<&Path>, under_cargo: bool, release: bool) -> String {
    match beside {
        Some(bin) => as_typed(bin),
        None if under_cargo && release => "cargo run --release --bin egress-address --".to_string(),
        None if under_cargo => "cargo run --bin egress-address --".to_string(),
        None => "egress-address".to_string(),
    }
}

/// A path as a person types it from the current directory: relative below it
/// (`target/release/egress-address`, `./x`), absolute elsewhere.
pub fn as_typed(path: &Path) -> String {
    let below = std::env::current_dir()
        .ok()
        .and_then(|cwd| path.strip_prefix(cwd).ok().map(Path::to_path_buf));
    match below {
        Some(rel) if rel.components().count() > 1 => rel.display().to_string(),
        Some(rel) => format!("./{}", rel.display()),
        None => path.display().to_string(),
    }
}

/// Whether this executable is of the release profile (test executables live in `deps/`, one
/// level below the profile's directory).
fn this_is_a_release_build() -> bool {
    std::env::current_exe().is_ok_and(|exe| {
        exe.ancestors()
            .skip(1)
            .take(2)
            .any(|d| d.file_name().is_some_and(|n| n == "release"))
    })
}

/// Under cargo (`cargo run`, `cargo test`: both set `CARGO`), builds workspace binary `bin` of
/// `package` in this executable's profile first: cargo builds only the package it runs, and a
/// stale or missing binary beside this one would be run without anyone noticing. Outside cargo
/// it does nothing; the binary is looked for where cargo puts it.
pub fn built_for_cli(package: &str, bin: &str) -> anyhow::Result<()> {
    let Some(cargo) = std::env::var_os("CARGO") else {
        return Ok(());
    };
    let release = this_is_a_release_build();
    let mut cmd = std::process::Command::new(cargo);
    cmd.current_dir(workspace_root())
        .args(["build", "-p", package, "--bin", bin]);
    if release {
        cmd.arg("--release");
    }
    eprintln!(
        "building {bin} ({})",
        if release { "release" } else { "dev" }
    );
    let status = cmd.status().context("running cargo build")?;
    if !status.success() {
        bail!("cargo build -p {package} --bin {bin} failed: {status}");
    }
    Ok(())
}

/// Whether controller binary `bin` knows `flag` (its `--help` lists it).
pub fn knows_flag(bin: &Path, flag: &str) -> anyhow::Result<bool> {
    let out = std::process::Command::new(bin)
        .arg("--help")
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {} --help", bin.display()))?;
    if !out.status.success() {
        bail!("{} --help failed: {}", bin.display(), out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .any(|word| word == flag))
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
    /// Environment variables besides the kubeconfig, the name and the log level: a setting
    /// given this way is ignored by a controller too old to know it, where a flag would stop it.
    pub env: Vec<(String, String)>,
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
    /// Binary `bin` as `name` with the world's controller kubeconfigs, logging into the world's
    /// `logs/`, at concurrency 4 under leader election, with no extra flags.
    pub fn new(world: &World, bin: PathBuf, name: &str) -> ControllerSpec {
        ControllerSpec {
            bin,
            name: name.into(),
            concurrency: 4,
            leader_elect: true,
            cell_kubeconfig: world.cell_kubeconfig().to_path_buf(),
            ipam_kubeconfig: world.ipam_kubeconfig().to_path_buf(),
            log_dir: world.dir().join("logs"),
            extra_args: vec![],
            env: vec![],
        }
    }

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
            .envs(self.env.iter().map(|(k, v)| (k, v)))
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

    /// Waits for `/ready`; the elapsed time since spawn, to within the 5 ms between polls (the
    /// restart is timed against a lister timed to its exit, so a coarse poll would add up to a
    /// poll's interval to the controller's side; each poll costs the controller a connection).
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
            tokio::time::sleep(Duration::from_millis(5)).await;
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

    /// SIGSTOP: the process halts where it is, requests half-sent or awaiting answers included,
    /// until [`Controller::resume`]; its lease runs out meanwhile.
    pub fn pause(&self) -> anyhow::Result<()> {
        signal(self.pid, "STOP")
    }

    /// SIGCONT: a stopped process carries on from where it was halted.
    pub fn resume(&self) -> anyhow::Result<()> {
        signal(self.pid, "CONT")
    }

    /// SIGCONT at `at`, sent by a task of its own: on time however long the caller is busy.
    pub fn resume_at(&self, at: Instant) {
        let pid = self.pid;
        tokio::spawn(async move {
            tokio::time::sleep_until(at.into()).await;
            // Gone by then (killed meanwhile) is no error: there is nothing left to wake.
            let _ = signal(pid, "CONT");
        });
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

/// Controller processes started from one spec, named `<spec name>-<n>`, counted as they are
/// started and killed.
pub struct Fleet {
    pub spec: ControllerSpec,
    pub procs: Vec<Controller>,
    pub starts: usize,
    pub kills: usize,
}

impl Fleet {
    pub fn new(spec: ControllerSpec) -> Fleet {
        Fleet {
            spec,
            procs: vec![],
            starts: 0,
            kills: 0,
        }
    }

    /// Starts one more controller, with or without leader election.
    pub fn start(&mut self, leader_elect: bool) -> anyhow::Result<()> {
        self.starts += 1;
        let mut spec = self.spec.clone();
        spec.name = format!("{}-{}", self.spec.name, self.starts);
        spec.leader_elect = leader_elect;
        self.procs.push(spec.spawn()?);
        Ok(())
    }

    /// SIGKILLs the `i`th controller; its name.
    pub async fn kill(&mut self, i: usize) -> String {
        let c = self.procs.remove(i);
        let name = c.name.clone();
        self.kills += 1;
        c.kill().await;
        name
    }

    /// SIGKILLs every controller.
    pub async fn kill_all(&mut self) {
        while !self.procs.is_empty() {
            self.kill(0).await;
        }
    }

    /// Forgets the controllers that exited on their own; their names.
    pub fn reap(&mut self) -> Vec<String> {
        let mut dead = vec![];
        self.procs.retain_mut(|c| match c.child.try_wait() {
            Ok(Some(_)) | Err(_) => {
                dead.push(c.name.clone());
                false
            }
            Ok(None) => true,
        });
        dead
    }
}

/// Sends signal `name` (`STOP`, `CONT`, ...) to process `pid`.
fn signal(pid: u32, name: &str) -> anyhow::Result<()> {
    let status = std::process::Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .with_context(|| format!("running kill -{name} {pid}"))?;
    if !status.success() {
        bail!("kill -{name} {pid} failed: {status}");
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tool_is_named_as_a_person_runs_it_from_here() {
        let cwd = std::env::current_dir().unwrap();
        let beside = cwd.join("target/release/egress-address");
        assert_eq!(
            tool_command_for(Some(&beside), true, true),
            "target/release/egress-address"
        );
        assert_eq!(
            tool_command_for(Some(Path::new("/opt/x/egress-address")), false, false),
            "/opt/x/egress-address"
        );
        assert_eq!(
            tool_command_for(None, true, true),
            "cargo run --release --bin egress-address --"
        );
        assert_eq!(
            tool_command_for(None, true, false),
            "cargo run --bin egress-address --"
        );
        assert_eq!(tool_command_for(None, false, true), "egress-address");
    }
}
