//! Command-line flags, each with an environment fallback, as the reference Deployment passes them;
//! Go's flag syntax and controller-runtime's zap flags are accepted too (see [`super::goflags`]).

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;

use clap::{ArgAction, Args as ClapArgs, CommandFactory, FromArgMatches, Parser, Subcommand};

use super::duration::parse_duration;
use super::goflags;
use super::settings::{Backoff, LeaderElection, Settings, default_identity};
pub use crate::logs::LogFormat;
use crate::logs::{LogOptions, TimeEncoding, ZapLevel, parse_stacktrace_level};

/// What `--version` says: the version and the commit it was built from.
pub const VERSION_LINE: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("EGRESS_ADDRESS_COMMIT"),
    ")"
);

/// The binary's name, in help, version and completion scripts.
pub const BINARY: &str = "egress-address-controller";

/// Gives every EgressShard of this cell its public IPv6 address, claimed from Milo IPAM.
#[derive(Debug, Clone, Parser)]
#[command(name = BINARY, version = VERSION_LINE)]
pub struct Args {
    #[command(flatten)]
    pub claim: ClaimArgs,
    #[command(flatten)]
    pub planes: PlaneArgs,
    #[command(flatten)]
    pub leader: LeaderArgs,
    #[command(flatten)]
    pub admin: AdminArgs,
    #[command(flatten)]
    pub tuning: TuningArgs,
    #[command(flatten)]
    pub log: LogArgs,
    #[command(subcommand)]
    pub command: Option<Tool>,
}

/// What the binary does instead of running the controller.
#[derive(Debug, Clone, Subcommand)]
pub enum Tool {
    /// Prints a completion script for a shell (e.g. `source <(egress-address-controller
    /// completions bash)`).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// What is claimed, and where.
#[derive(Debug, Clone, ClapArgs)]
pub struct ClaimArgs {
    /// The IPClass handing out shard addresses.
    #[arg(long, env = "ADDRESS_CLASS_IPV6", default_value = "")]
    pub address_class_ipv6: String,
    /// Namespace in the platform project the claims are written in.
    #[arg(long, env = "CLAIM_NAMESPACE", default_value = "default")]
    pub claim_namespace: String,
    /// The location this cell serves (the cell's `topology.datum.net/location`); selects the
    /// shared range.
    #[arg(long, env = "LOCATION", default_value = "")]
    pub location: String,
    /// The project whose control plane serves platform allocations.
    #[arg(long, env = "PLATFORM_PROJECT", default_value = "")]
    pub platform_project: String,
    /// This cell's identity, recorded on every claim (two cells of one location never share a
    /// claim). Unset: the UID of the cell's kube-system namespace.
    #[arg(long, env = "CELL_ID")]
    pub cell_id: Option<String>,
}

/// How the two planes are reached.
#[derive(Debug, Clone, ClapArgs)]
pub struct PlaneArgs {
    /// Kubeconfig for the server of the IPAM API (its server path is replaced by the project's).
    #[arg(long, env = "IPAM_KUBECONFIG", default_value = "")]
    pub ipam_kubeconfig: String,
    /// Kubeconfig for the cell; without it, the in-cluster config or the default kubeconfig.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Only watch shards in this namespace.
    #[arg(long, env = "SHARD_NAMESPACE")]
    pub shard_namespace: Option<String>,
    /// Allow a kubeconfig to send its credential over plain HTTP to another host (never do this
    /// outside a lab).
    #[arg(long, env = "ALLOW_PLAINTEXT_CREDENTIALS")]
    pub allow_plaintext_credentials: bool,
}

impl PlaneArgs {
    pub fn transport(&self) -> crate::connect::kubeconfig::Transport {
        crate::connect::kubeconfig::Transport {
            allow_plaintext_credentials: self.allow_plaintext_credentials,
        }
    }
}

/// Leader election: a single writer is what keeps one shard to one address.
#[derive(Debug, Clone, ClapArgs)]
pub struct LeaderArgs {
    /// Elect a leader; only the leader writes. `--leader-elect` or `--leader-elect=false`.
    #[arg(
        long,
        env = "LEADER_ELECT",
        default_value_t = true,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        action = ArgAction::Set
    )]
    pub leader_elect: bool,
    /// Namespace of the leader-election Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub leader_election_namespace: String,
    /// How long an unrenewed lease holds.
    #[arg(long, env = "LEADER_ELECTION_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub leader_election_lease_duration: Duration,
    /// The leader stops writing when it has not renewed for this long.
    #[arg(long, env = "LEADER_ELECTION_RENEW_DEADLINE", default_value = "10s", value_parser = parse_duration)]
    pub leader_election_renew_deadline: Duration,
    /// Time between renewals and acquisition attempts.
    #[arg(long, env = "LEADER_ELECTION_RETRY_PERIOD", default_value = "5s", value_parser = parse_duration)]
    pub leader_election_retry_period: Duration,
    /// This instance's name in the lease and in events.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
}

/// The admin servers; each serves /live, /ready and /metrics, unless `--metrics-secure` keeps
/// /metrics to the metrics address. `0` turns one off.
#[derive(Debug, Clone, ClapArgs)]
pub struct AdminArgs {
    #[arg(long, env = "METRICS_BIND_ADDRESS", default_value = ":8080")]
    pub metrics_bind_address: String,
    #[arg(long, env = "HEALTH_PROBE_BIND_ADDRESS", default_value = ":8081")]
    pub health_probe_bind_address: String,
    /// Serve /metrics over HTTPS, only to callers whose bearer token the cell authenticates
    /// (TokenReview) and who may `get` the non-resource URL /metrics (SubjectAccessReview); the
    /// probe address then serves the health routes alone. `--metrics-secure` or
    /// `--metrics-secure=false`.
    #[arg(
        long,
        env = "METRICS_SECURE",
        default_value_t = false,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        action = ArgAction::Set
    )]
    pub metrics_secure: bool,
    /// Directory holding the metrics server's certificate and key; unset, a self-signed
    /// certificate is made at start. Changed files are picked up while running.
    #[arg(long, env = "METRICS_CERT_PATH", default_value = "")]
    pub metrics_cert_path: String,
    /// The certificate's file name in --metrics-cert-path.
    #[arg(long, env = "METRICS_CERT_NAME", default_value = "tls.crt")]
    pub metrics_cert_name: String,
    /// The private key's file name in --metrics-cert-path.
    #[arg(long, env = "METRICS_CERT_KEY", default_value = "tls.key")]
    pub metrics_cert_key: String,
}

impl AdminArgs {
    /// The certificate and key files of the secure metrics server, or `None` for a self-signed
    /// one. A certificate directory without `--metrics-secure` is refused: it would be ignored,
    /// and the metrics served in the clear.
    pub fn metrics_cert_files(&self) -> Result<Option<(PathBuf, PathBuf)>, String> {
        let dir = self.metrics_cert_path.trim();
        if dir.is_empty() {
            return Ok(None);
        }
        if !self.metrics_secure {
            return Err("--metrics-cert-path needs --metrics-secure".into());
        }
        for (flag, name) in [
            ("--metrics-cert-name", &self.metrics_cert_name),
            ("--metrics-cert-key", &self.metrics_cert_key),
        ] {
            if name.trim().is_empty() {
                return Err(format!("{flag} is required with --metrics-cert-path"));
            }
        }
        let dir = PathBuf::from(dir);
        Ok(Some((
            dir.join(self.metrics_cert_name.trim()),
            dir.join(self.metrics_cert_key.trim()),
        )))
    }
}

/// Pacing.
#[derive(Debug, Clone, ClapArgs)]
pub struct TuningArgs {
    /// Shards reconciled in parallel.
    #[arg(long, env = "EGRESS_ADDRESS_CONCURRENCY", default_value_t = 4)]
    pub concurrency: usize,
    /// First retry delay of a failing shard.
    #[arg(long, env = "EGRESS_ADDRESS_BACKOFF_BASE", default_value = "500ms", value_parser = parse_duration)]
    pub backoff_base: Duration,
    /// Longest retry delay of a failing shard.
    #[arg(long, env = "EGRESS_ADDRESS_BACKOFF_CAP", default_value = "5m", value_parser = parse_duration)]
    pub backoff_cap: Duration,
    /// Re-check interval of refused claims (nothing watches IPAM).
    #[arg(long, env = "EGRESS_ADDRESS_RECHECK_INTERVAL", default_value = "1m", value_parser = parse_duration)]
    pub recheck_interval: Duration,
    /// Every addressed shard's holder is checked once per interval, spread over it; 0 turns it off.
    #[arg(long, env = "EGRESS_ADDRESS_DRIFT_CHECK_INTERVAL", default_value = "1h", value_parser = parse_duration)]
    pub drift_check_interval: Duration,
    /// Longest an unaddressed shard waits for its next try, whatever dropped its trigger: the
    /// leader sweeps the cache once per interval; 0 turns the sweep off.
    #[arg(long, env = "EGRESS_ADDRESS_UNADDRESSED_SWEEP_INTERVAL", default_value = "1m", value_parser = parse_duration)]
    pub unaddressed_sweep_interval: Duration,
    /// Once per interval the leader lists this cell's claims and releases each whose shard is gone
    /// (deleted while no controller ran); 0 turns it off. Needs `list` on ipclaims, which only
    /// the grant overlay `milo-grant-orphan-sweep.yaml` gives.
    #[arg(long, env = "EGRESS_ADDRESS_RELEASE_ORPHANED_CLAIMS_EVERY", default_value = "0", value_parser = parse_duration)]
    pub release_orphaned_claims_every: Duration,
    /// The same event on the same shard is repeated no sooner than this.
    #[arg(long, env = "EGRESS_ADDRESS_EVENT_REPEAT_INTERVAL", default_value = "1h", value_parser = parse_duration)]
    pub event_repeat_interval: Duration,
    /// How long shutdown waits for in-flight reconciles.
    #[arg(long, env = "EGRESS_ADDRESS_SHUTDOWN_GRACE", default_value = "5s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    /// Upper bound of one API request made by a reconcile.
    #[arg(long, env = "EGRESS_ADDRESS_REQUEST_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub request_timeout: Duration,
    /// Consecutive failed IPAM requests (no answer, 5xx, 429, refused credential) after which
    /// IPAM is treated as down: requests stop, one probe goes out per probe interval.
    #[arg(
        long,
        env = "EGRESS_ADDRESS_IPAM_FAILURE_THRESHOLD",
        default_value_t = 5
    )]
    pub ipam_failure_threshold: u32,
    /// Time between probes while IPAM is down.
    #[arg(long, env = "EGRESS_ADDRESS_IPAM_PROBE_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub ipam_probe_interval: Duration,
    /// Retries of all shards together, per second on average (on top of per-shard backoff).
    #[arg(long, env = "EGRESS_ADDRESS_RETRY_QPS", default_value_t = 10.0)]
    pub retry_qps: f64,
    /// Retries of all shards together, at once.
    #[arg(long, env = "EGRESS_ADDRESS_RETRY_BURST", default_value_t = 100)]
    pub retry_burst: u32,
}

/// Log output. `--log-format` and `--log-level` (or their variables) win over the zap flags,
/// which a Deployment written for the Go controller may pass.
#[derive(Debug, Clone, ClapArgs)]
pub struct LogArgs {
    /// `plain` or `json` [default: plain, or as --zap-encoder says]
    #[arg(long, env = "LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// A filter in RUST_LOG syntax, e.g. `info` or `egress_address=debug,kube=warn`; a span
    /// field's value is compared as text, never as a pattern (`[reconcile{name=shard-a}]=debug`)
    /// [default: info, or as --zap-log-level or --zap-devel say]
    #[arg(long, env = "RUST_LOG", value_parser = parse_filter)]
    pub log_level: Option<String>,
    /// controller-runtime's development defaults: the console (plain) encoder and debug level,
    /// unless the flags above or below say otherwise.
    #[arg(
        long,
        default_value_t = false,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        action = ArgAction::Set
    )]
    pub zap_devel: bool,
    /// `json` or `console` (the plain format).
    #[arg(long, value_parser = parse_zap_encoder)]
    pub zap_encoder: Option<LogFormat>,
    /// `debug`, `info`, `error`, or a verbosity above 0 (1 is debug, 2 and more are trace).
    #[arg(long)]
    pub zap_log_level: Option<ZapLevel>,
    /// Lines at this level or more severe carry a `stacktrace` field (JSON output): `info`,
    /// `warn`, `error`, or `panic` (none). [default: none]
    #[arg(long, value_parser = parse_stacktrace)]
    pub zap_stacktrace_level: Option<StacktraceLevel>,
    /// How `ts` is written: `epoch` (seconds, a float), `millis`, `nano`, `iso8601`, `rfc3339`
    /// or `rfc3339nano`. [default: epoch]
    #[arg(long)]
    pub zap_time_encoding: Option<TimeEncoding>,
}

/// `--zap-stacktrace-level`; `None` inside for `panic`, which no line reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StacktraceLevel(pub Option<tracing::Level>);

fn parse_stacktrace(s: &str) -> Result<StacktraceLevel, String> {
    parse_stacktrace_level(s).map(StacktraceLevel)
}

fn parse_zap_encoder(s: &str) -> Result<LogFormat, String> {
    match s.to_ascii_lowercase().as_str() {
        "json" => Ok(LogFormat::Json),
        "console" => Ok(LogFormat::Plain),
        _ => Err(format!("invalid encoder {s:?} (json or console)")),
    }
}

fn parse_filter(s: &str) -> Result<String, String> {
    crate::logs::filter(s)
        .map(|_| s.to_string())
        .map_err(|e| format!("not a RUST_LOG filter: {e}"))
}

impl LogArgs {
    /// The log output these flags ask for.
    pub fn options(&self) -> LogOptions {
        let level = self
            .zap_log_level
            .or(self.zap_devel.then_some(ZapLevel::Debug));
        LogOptions {
            format: self
                .log_format
                .or(self.zap_encoder)
                .unwrap_or(LogFormat::Plain),
            filter: self
                .log_level
                .clone()
                .unwrap_or_else(|| level.map_or("info", ZapLevel::directive).to_string()),
            time: self.zap_time_encoding.unwrap_or_default(),
            stacktrace: self.zap_stacktrace_level.and_then(|s| s.0),
        }
    }
}

impl Args {
    /// Parses the process's arguments, Go's flag syntax included; exits as clap does on a
    /// refused argument, `--help` or `--version`.
    pub fn parse_go_style() -> Self {
        Self::try_parse_go_style(std::env::args_os()).unwrap_or_else(|e| e.exit())
    }

    /// [`parse_go_style`](Self::parse_go_style) of given arguments (the program name first).
    pub fn try_parse_go_style<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString>,
    {
        let mut command = Self::built();
        let args = goflags::normalize(args, &command);
        let mut matches = command.try_get_matches_from_mut(args)?;
        Self::from_arg_matches_mut(&mut matches).map_err(|e| e.format(&mut command))
    }

    /// The command, built once (a parse built it twice); a clone is not built again, and `env`
    /// fallbacks are read at parse time.
    fn built() -> clap::Command {
        static BUILT: LazyLock<clap::Command> = LazyLock::new(|| {
            let mut command = Args::command();
            command.build();
            command
        });
        BUILT.clone()
    }

    /// Writes the completion script for `shell`.
    pub fn completions(shell: clap_complete::Shell, out: &mut dyn std::io::Write) {
        clap_complete::generate(shell, &mut Self::command(), BINARY, out);
    }

    /// The reference's startup refusals, in its order, then the claim namespace. An empty value
    /// counts as missing: the Deployment sets `LOCATION=""` on purpose so that a pod without an
    /// overlay refuses to start.
    fn check_required(&self) -> Result<(), String> {
        let required = [
            ("--address-class-ipv6", &self.claim.address_class_ipv6),
            ("--location", &self.claim.location),
            ("--platform-project", &self.claim.platform_project),
            ("--ipam-kubeconfig", &self.planes.ipam_kubeconfig),
            ("--claim-namespace", &self.claim.claim_namespace),
        ];
        for (flag, value) in required {
            if value.trim().is_empty() {
                return Err(format!("{flag} is required"));
            }
        }
        Ok(())
    }

    /// The settings these flags ask for: required flags first (named as flags), then the
    /// settings' own checks.
    pub fn settings(&self) -> Result<Settings, String> {
        self.check_required()?;
        let settings = self.unchecked_settings();
        settings.validate().map_err(|e| e.to_string())?;
        Ok(settings)
    }

    fn unchecked_settings(&self) -> Settings {
        let mut s = Settings::new(
            self.claim.address_class_ipv6.clone(),
            self.claim.location.clone(),
            self.claim.platform_project.clone(),
        );
        s.claim_namespace = self.claim.claim_namespace.clone();
        s.cell_id = self.claim.cell_id.clone();
        s.shard_namespace = self
            .planes
            .shard_namespace
            .clone()
            .filter(|n| !n.is_empty());
        s.concurrency = self.tuning.concurrency;
        s.backoff = Backoff {
            base: self.tuning.backoff_base,
            cap: self.tuning.backoff_cap,
            ..Backoff::default()
        };
        s.recheck_interval = self.tuning.recheck_interval;
        s.drift_check_interval = self.tuning.drift_check_interval;
        s.unaddressed_sweep_interval = self.tuning.unaddressed_sweep_interval;
        s.release_orphaned_claims_every = self.tuning.release_orphaned_claims_every;
        s.event_repeat_interval = self.tuning.event_repeat_interval;
        s.shutdown_grace = self.tuning.shutdown_grace;
        s.request_timeout = self.tuning.request_timeout;
        s.ipam_failure_threshold = self.tuning.ipam_failure_threshold;
        s.ipam_probe_interval = self.tuning.ipam_probe_interval;
        s.retry_qps = self.tuning.retry_qps;
        s.retry_burst = self.tuning.retry_burst;
        s.identity = match self.leader.identity.as_deref() {
            Some(id) if !id.is_empty() => format!("{id}_{:08x}", rand::random::<u32>()),
            _ => default_identity(),
        };
        s.leader_election = self.leader.leader_elect.then(|| LeaderElection {
            lease_duration: self.leader.leader_election_lease_duration,
            renew_deadline: self.leader.leader_election_renew_deadline,
            retry_period: self.leader.leader_election_retry_period,
            ..LeaderElection::new(self.leader.leader_election_namespace.clone())
        });
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn try_parse(args: &[&str]) -> Result<Args, clap::Error> {
        let mut full = vec!["egress-address-controller"];
        full.extend_from_slice(args);
        Args::try_parse_go_style(full)
    }

    fn parse(args: &[&str]) -> Args {
        try_parse(args).expect("flags parse")
    }

    const ALL: [&str; 4] = [
        "--address-class-ipv6=c",
        "--location=dfw",
        "--platform-project=p",
        "--ipam-kubeconfig=/k",
    ];

    #[test]
    fn the_reference_deployment_args_parse() {
        let a = parse(&[
            "--leader-elect",
            "--health-probe-bind-address=:8081",
            "--metrics-bind-address=:8080",
            "--address-class-ipv6=datum-egress-shard-address-ipv6",
            "--claim-namespace=default",
            "--location=dfw",
            "--platform-project=datum-platform",
            "--ipam-kubeconfig=/etc/ipam-cluster/kubeconfig",
        ]);
        assert!(a.leader.leader_elect);
        let s = a.settings().unwrap();
        assert_eq!(s.claim_namespace, "default");
        assert!(s.leader_election.is_some());
        assert_eq!(s.cell_id, None);
    }

    #[test]
    fn leader_election_is_on_by_default_and_can_be_turned_off() {
        assert!(parse(&ALL).leader.leader_elect);
        let mut off = ALL.to_vec();
        off.push("--leader-elect=false");
        let a = parse(&off);
        assert!(!a.leader.leader_elect);
        assert!(a.settings().unwrap().leader_election.is_none());
    }

    #[test]
    fn missing_or_empty_values_are_named_in_the_reference_order() {
        let a = parse(&[]);
        assert_eq!(
            a.settings().unwrap_err(),
            "--address-class-ipv6 is required"
        );
        let a = parse(&["--address-class-ipv6=c", "--location="]);
        assert_eq!(a.settings().unwrap_err(), "--location is required");
        let a = parse(&["--address-class-ipv6=c", "--location=l"]);
        assert_eq!(a.settings().unwrap_err(), "--platform-project is required");
        let a = parse(&[
            "--address-class-ipv6=c",
            "--location=l",
            "--platform-project=p",
        ]);
        assert_eq!(a.settings().unwrap_err(), "--ipam-kubeconfig is required");
        let mut no_ns = ALL.to_vec();
        no_ns.push("--claim-namespace=");
        assert_eq!(
            parse(&no_ns).settings().unwrap_err(),
            "--claim-namespace is required"
        );
        let mut bad_cell = ALL.to_vec();
        bad_cell.push("--cell-id= ");
        assert!(
            parse(&bad_cell)
                .settings()
                .unwrap_err()
                .contains("cell identity")
        );
    }

    #[test]
    fn durations_and_concurrency_reach_the_settings() {
        let mut args = ALL.to_vec();
        args.extend([
            "--concurrency=9",
            "--recheck-interval=30s",
            "--drift-check-interval=0",
            "--unaddressed-sweep-interval=15s",
            "--leader-election-lease-duration=3s",
            "--leader-election-renew-deadline=2s",
            "--leader-election-retry-period=500ms",
        ]);
        let s = parse(&args).settings().unwrap();
        assert_eq!(s.concurrency, 9);
        assert_eq!(s.recheck_interval, Duration::from_secs(30));
        assert!(s.drift_check_interval.is_zero());
        assert_eq!(s.unaddressed_sweep_interval, Duration::from_secs(15));
        assert!(
            s.release_orphaned_claims_every.is_zero(),
            "the orphan sweep is off unless asked for"
        );
        let mut sweeping = ALL.to_vec();
        sweeping.push("--release-orphaned-claims-every=10m");
        assert_eq!(
            parse(&sweeping)
                .settings()
                .unwrap()
                .release_orphaned_claims_every,
            Duration::from_secs(600)
        );
        let le = s.leader_election.unwrap();
        assert_eq!(le.lease_duration, Duration::from_secs(3));
        assert_eq!(le.retry_period, Duration::from_millis(500));
    }

    #[test]
    fn go_flag_syntax_reaches_the_same_settings() {
        let forms: [&[&str]; 4] = [
            &ALL,
            &[
                "-address-class-ipv6=c",
                "-location=dfw",
                "-platform-project=p",
                "-ipam-kubeconfig=/k",
            ],
            &[
                "-address-class-ipv6",
                "c",
                "-location",
                "dfw",
                "-platform-project",
                "p",
                "-ipam-kubeconfig",
                "/k",
            ],
            &[
                "--address-class-ipv6",
                "c",
                "--location",
                "dfw",
                "-platform-project=p",
                "--ipam-kubeconfig",
                "/k",
            ],
        ];
        for form in forms {
            let s = parse(form).settings().unwrap();
            assert_eq!(
                (
                    s.address_class_ipv6.as_str(),
                    s.location.as_str(),
                    s.platform_project.as_str()
                ),
                ("c", "dfw", "p"),
                "{form:?}"
            );
        }
        let mut dashed = ALL.to_vec();
        dashed.extend(["-claim-namespace", "-odd"]);
        assert_eq!(parse(&dashed).claim.claim_namespace, "-odd");
        for (flag, elected) in [
            ("-leader-elect", true),
            ("-leader-elect=false", false),
            ("--leader-elect=true", true),
            ("-leader-elect=false", false),
        ] {
            let mut args = ALL.to_vec();
            args.push(flag);
            assert_eq!(parse(&args).leader.leader_elect, elected, "{flag}");
        }
        let mut duration = ALL.to_vec();
        duration.extend([
            "-leader-election-retry-period",
            "750ms",
            "-concurrency",
            "2",
        ]);
        let s = parse(&duration).settings().unwrap();
        assert_eq!(s.concurrency, 2);
        assert_eq!(
            s.leader_election.unwrap().retry_period,
            Duration::from_millis(750)
        );
    }

    #[test]
    fn help_and_version_keep_their_short_flags_and_the_version_names_the_commit() {
        use clap::error::ErrorKind;
        for help in ["-h", "--help", "-help"] {
            assert_eq!(
                try_parse(&[help]).unwrap_err().kind(),
                ErrorKind::DisplayHelp,
                "{help}"
            );
        }
        for version in ["-V", "--version", "-version"] {
            let err = try_parse(&[version]).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::DisplayVersion, "{version}");
            assert_eq!(
                err.to_string().trim(),
                format!(
                    "egress-address-controller {} (commit {})",
                    crate::version::VERSION,
                    crate::version::COMMIT
                )
            );
        }
        assert!(try_parse(&["-nonsense=1"]).is_err());
    }

    #[test]
    fn zap_flags_choose_the_log_output() {
        let options = |args: &[&str]| parse(args).log.options();
        let defaults = options(&[]);
        assert_eq!(defaults, LogOptions::default());
        assert_eq!(defaults.filter, "info");

        for (args, format) in [
            (&["-zap-encoder=json"][..], LogFormat::Json),
            (&["--zap-encoder", "console"], LogFormat::Plain),
            (&["-zap-encoder", "JSON"], LogFormat::Json),
            (&["-zap-devel"], LogFormat::Plain),
            (
                &["--log-format=json", "-zap-encoder=console"],
                LogFormat::Json,
            ),
        ] {
            assert_eq!(options(args).format, format, "{args:?}");
        }
        for (args, filter) in [
            (&["-zap-log-level=debug"][..], "debug"),
            (&["-zap-log-level", "error"], "error"),
            (&["--zap-log-level=info"], "info"),
            (&["-zap-log-level", "1"], "debug"),
            (&["-zap-log-level=4"], "trace"),
            (&["-zap-devel"], "debug"),
            (&["-zap-devel=true"], "debug"),
            (&["-zap-devel=false"], "info"),
            (&["-zap-devel", "-zap-log-level=error"], "error"),
            (
                &["--log-level=egress_address=debug", "-zap-log-level=error"],
                "egress_address=debug",
            ),
        ] {
            assert_eq!(options(args).filter, filter, "{args:?}");
        }
        for (args, time) in [
            (&["-zap-time-encoding=epoch"][..], TimeEncoding::Epoch),
            (&["-zap-time-encoding", "millis"], TimeEncoding::Millis),
            (&["-zap-time-encoding=nano"], TimeEncoding::Nano),
            (&["-zap-time-encoding=iso8601"], TimeEncoding::Iso8601),
            (&["--zap-time-encoding", "rfc3339"], TimeEncoding::Rfc3339),
            (
                &["-zap-time-encoding=rfc3339nano"],
                TimeEncoding::Rfc3339Nano,
            ),
        ] {
            assert_eq!(options(args).time, time, "{args:?}");
        }
        for (args, level) in [
            (
                &["-zap-stacktrace-level=error"][..],
                Some(tracing::Level::ERROR),
            ),
            (
                &["-zap-stacktrace-level", "info"],
                Some(tracing::Level::INFO),
            ),
            (&["-zap-stacktrace-level=panic"], None),
        ] {
            assert_eq!(options(args).stacktrace, level, "{args:?}");
        }
        for bad in [
            &["-zap-log-level=0"][..],
            &["-zap-log-level=loud"],
            &["-zap-encoder=xml"],
            &["-zap-time-encoding=unix"],
            &["-zap-stacktrace-level=debug"],
            &["--log-level=[broken"],
        ] {
            assert!(try_parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn secure_metrics_flags_read_as_controller_runtime_spells_them() {
        let a = parse(&ALL);
        assert!(
            !a.admin.metrics_secure,
            "plain, as the Go reference's flags ask"
        );
        assert_eq!(a.admin.metrics_cert_files(), Ok(None));
        for (flag, secure) in [
            ("--metrics-secure", true),
            ("-metrics-secure", true),
            ("--metrics-secure=true", true),
            ("-metrics-secure=false", false),
        ] {
            let mut args = ALL.to_vec();
            args.push(flag);
            assert_eq!(parse(&args).admin.metrics_secure, secure, "{flag}");
        }
        let mut args = ALL.to_vec();
        args.extend(["--metrics-secure", "-metrics-cert-path", "/certs"]);
        assert_eq!(
            parse(&args).admin.metrics_cert_files(),
            Ok(Some((
                PathBuf::from("/certs/tls.crt"),
                PathBuf::from("/certs/tls.key")
            )))
        );
        args.extend([
            "--metrics-cert-name=cert.pem",
            "--metrics-cert-key",
            "key.pem",
        ]);
        assert_eq!(
            parse(&args).admin.metrics_cert_files(),
            Ok(Some((
                PathBuf::from("/certs/cert.pem"),
                PathBuf::from("/certs/key.pem")
            )))
        );
        args.truncate(args.len() - 2);
        args.push("--metrics-cert-key=");
        assert_eq!(
            parse(&args).admin.metrics_cert_files(),
            Err("--metrics-cert-key is required with --metrics-cert-path".to_string())
        );
        let mut plain = ALL.to_vec();
        plain.push("--metrics-cert-path=/certs");
        assert_eq!(
            parse(&plain).admin.metrics_cert_files(),
            Err("--metrics-cert-path needs --metrics-secure".to_string())
        );
    }

    #[test]
    fn completions_are_a_subcommand_apart_from_the_flags() {
        let a = parse(&["completions", "bash"]);
        assert!(matches!(
            a.command,
            Some(Tool::Completions {
                shell: clap_complete::Shell::Bash
            })
        ));
        assert!(parse(&ALL).command.is_none());
        let mut script = Vec::new();
        Args::completions(clap_complete::Shell::Bash, &mut script);
        let script = String::from_utf8(script).unwrap();
        assert!(script.contains("--location"), "{script}");
        assert!(script.contains("--zap-log-level"), "{script}");
    }
}
