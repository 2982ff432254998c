//! Every knob of the controller, with the reference's defaults.

use std::time::Duration;

/// The name of the leader-election Lease.
pub const LEASE_NAME: &str = "egress-address-controller.cloud.datumapis.com";
/// The name events are reported under.
pub const CONTROLLER_NAME: &str = "egress-address-controller";

/// The field manager every write names, so the server's managedFields say which fields this
/// controller set.
pub fn write_params() -> kube::api::PostParams {
    kube::api::PostParams {
        dry_run: false,
        field_manager: Some(CONTROLLER_NAME.to_string()),
    }
}

/// [`write_params`] for patches.
pub fn patch_params() -> kube::api::PatchParams {
    kube::api::PatchParams {
        field_manager: Some(CONTROLLER_NAME.to_string()),
        ..Default::default()
    }
}

/// Leader election on a `coordination.k8s.io/v1` Lease.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaderElection {
    pub namespace: String,
    pub lease_name: String,
    /// How long a lease holds without renewal before another instance may take it.
    pub lease_duration: Duration,
    /// The leader stops writing when it has not renewed for this long; shorter than
    /// `lease_duration`, so it has stopped before anyone else can start.
    pub renew_deadline: Duration,
    /// Time between renewals, and between attempts to acquire.
    pub retry_period: Duration,
}

impl LeaderElection {
    pub fn new(namespace: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            lease_name: LEASE_NAME.to_string(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(5),
        }
    }
}

/// What the controller claims, where, and how it paces itself.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The IPClass handing out shard addresses (`--address-class-ipv6`).
    pub address_class_ipv6: String,
    /// Namespace in the platform project the claims are written in (`--claim-namespace`).
    pub claim_namespace: String,
    /// The location this cell serves; selects the shared range (`--location`).
    pub location: String,
    /// The project whose control plane serves the claims; recorded in every ref.
    pub platform_project: String,
    /// This cell's identity, recorded on every claim and folded into its name, so two cells
    /// never share a claim. `None`: the UID of the cell's `kube-system` namespace, read at start.
    pub cell_id: Option<String>,
    /// Watch shards in this namespace only; all namespaces when `None`.
    pub shard_namespace: Option<String>,
    /// Shards reconciled in parallel (one shard never twice at once).
    pub concurrency: usize,
    /// Per-shard retry backoff for transient failures and pending claims.
    pub backoff: Backoff,
    /// Re-check interval for refusals: nothing watches IPAM, so nothing else brings them back.
    pub recheck_interval: Duration,
    /// Every addressed shard's holder is checked once per interval, spread evenly over it (one
    /// IPAM read at a time); zero turns the check off.
    pub drift_check_interval: Duration,
    /// The leader queues every cached shard that should have an address, has none and is owed
    /// no work, once per interval: the longest a dropped trigger can delay a shard. Zero turns
    /// the sweep off.
    pub unaddressed_sweep_interval: Duration,
    /// The leader lists this cell's claims once per interval and releases those whose shard is
    /// gone for good (deleted while no controller ran). Zero, the default, turns it off: it
    /// needs `list` on ipclaims, which the minimal grant leaves out.
    pub release_orphaned_claims_every: Duration,
    /// The same event for the same shard is repeated no sooner than this.
    pub event_repeat_interval: Duration,
    /// `None` runs without election: this instance always writes.
    pub leader_election: Option<LeaderElection>,
    /// This instance's name in the lease and in events (e.g. the pod name).
    pub identity: String,
    /// How long shutdown waits for in-flight work before giving up on it.
    pub shutdown_grace: Duration,
    /// Upper bound of a single IPAM or cell request made by a reconcile.
    pub request_timeout: Duration,
    /// Consecutive failed IPAM requests that open the circuit breaker.
    pub ipam_failure_threshold: u32,
    /// While the breaker is open, one probe request per this interval.
    pub ipam_probe_interval: Duration,
    /// All retries together, as a token bucket over every shard's per-shard backoff: at most
    /// `retry_qps` per second on average, `retry_burst` at once.
    pub retry_qps: f64,
    pub retry_burst: u32,
}

impl Settings {
    /// Settings with the reference defaults: claim namespace `default`, leader election in
    /// namespace `default`, concurrency 4, refusals re-checked every minute, every holder checked
    /// for drift once an hour.
    pub fn new(
        address_class_ipv6: impl Into<String>,
        location: impl Into<String>,
        platform_project: impl Into<String>,
    ) -> Self {
        Self {
            address_class_ipv6: address_class_ipv6.into(),
            claim_namespace: "default".to_string(),
            location: location.into(),
            platform_project: platform_project.into(),
            cell_id: None,
            shard_namespace: None,
            concurrency: 4,
            backoff: Backoff::default(),
            recheck_interval: Duration::from_secs(60),
            drift_check_interval: Duration::from_secs(3600),
            unaddressed_sweep_interval: Duration::from_secs(60),
            release_orphaned_claims_every: Duration::ZERO,
            event_repeat_interval: Duration::from_secs(3600),
            leader_election: Some(LeaderElection::new("default")),
            identity: default_identity(),
            shutdown_grace: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            ipam_failure_threshold: 5,
            ipam_probe_interval: Duration::from_secs(1),
            retry_qps: 10.0,
            retry_burst: 100,
        }
    }

    /// The reference's setup checks, in its order; the first failure is returned.
    pub fn validate(&self) -> Result<(), Invalid> {
        let checks = [
            (&self.address_class_ipv6, "an address class is required"),
            (
                &self.claim_namespace,
                "a namespace to write claims in is required",
            ),
            (
                &self.platform_project,
                "the project serving the claims is required",
            ),
            (&self.location, "the location this cell serves is required"),
        ];
        for (value, message) in checks {
            if value.trim().is_empty() {
                return Err(Invalid(message.to_string()));
            }
        }
        if self.cell_id.as_deref().is_some_and(|c| c.trim().is_empty()) {
            return Err(Invalid(
                "the cell identity is empty; leave it unset to use the kube-system namespace UID"
                    .into(),
            ));
        }
        if !(self.retry_qps > 0.0 && self.retry_qps.is_finite()) || self.retry_burst == 0 {
            return Err(Invalid(format!(
                "the retry rate must be positive (qps {}, burst {})",
                self.retry_qps, self.retry_burst
            )));
        }
        if self.ipam_probe_interval.is_zero() {
            return Err(Invalid(
                "the IPAM probe interval must be longer than zero".into(),
            ));
        }
        if self.concurrency == 0 {
            return Err(Invalid("concurrency must be at least 1".into()));
        }
        if let Some(le) = &self.leader_election {
            if le.namespace.is_empty() {
                return Err(Invalid(
                    "leader election needs a namespace for its lease".into(),
                ));
            }
            if le.renew_deadline >= le.lease_duration {
                return Err(Invalid(format!(
                    "the renew deadline ({:?}) must be shorter than the lease duration ({:?}), or two leaders could write at once",
                    le.renew_deadline, le.lease_duration
                )));
            }
            if le.retry_period >= le.renew_deadline {
                return Err(Invalid(format!(
                    "the retry period ({:?}) must be shorter than the renew deadline ({:?})",
                    le.retry_period, le.renew_deadline
                )));
            }
        }
        Ok(())
    }
}

/// A setting is missing or inconsistent; nothing was contacted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

/// Exponential backoff with jitter and a cap, per shard.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// Delay after the first failure.
    pub base: Duration,
    /// No delay exceeds this.
    pub cap: Duration,
    /// Spread of the jitter as a fraction of the delay (0.2 → ±10%).
    pub jitter: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(500),
            cap: Duration::from_secs(300),
            jitter: 0.2,
        }
    }
}

impl Backoff {
    /// The delay after `failures` consecutive failures (1 = the first), for `unit` in [0, 1).
    /// Jitter keeps shards that failed together (an IPAM outage) from retrying in lockstep.
    pub fn delay(&self, failures: u32, unit: f64) -> Duration {
        let exp = failures.saturating_sub(1).min(32);
        let raw = self.base.as_secs_f64() * 2f64.powi(exp as i32);
        let capped = raw.min(self.cap.as_secs_f64());
        let jitter = self.jitter.clamp(0.0, 1.0);
        let factor = 1.0 - jitter / 2.0 + jitter * unit.clamp(0.0, 1.0);
        Duration::from_secs_f64((capped * factor).min(self.cap.as_secs_f64()))
    }
}

/// `POD_NAME`, else the host name, plus a random suffix so that two processes on one host
/// never share a lease identity.
pub fn default_identity() -> String {
    let base = std::env::var("POD_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_else(|| CONTROLLER_NAME.to_string());
    format!("{base}_{:08x}", rand::random::<u32>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_reference() {
        let s = Settings::new("class", "dfw", "platform");
        assert_eq!(s.claim_namespace, "default");
        let le = s.leader_election.as_ref().unwrap();
        assert_eq!(
            le.lease_name,
            "egress-address-controller.cloud.datumapis.com"
        );
        assert_eq!(le.lease_duration, Duration::from_secs(15));
        assert_eq!(le.retry_period, Duration::from_secs(5));
        assert!(s.validate().is_ok());
    }

    #[test]
    fn validation_runs_in_the_reference_order() {
        let mut s = Settings::new("", "", "");
        s.claim_namespace = String::new();
        let msg = |s: &Settings| s.validate().unwrap_err().to_string();
        assert_eq!(msg(&s), "an address class is required");
        s.address_class_ipv6 = "c".into();
        assert_eq!(msg(&s), "a namespace to write claims in is required");
        s.claim_namespace = "default".into();
        assert_eq!(msg(&s), "the project serving the claims is required");
        s.platform_project = "p".into();
        assert_eq!(msg(&s), "the location this cell serves is required");
        s.location = "dfw".into();
        assert!(s.validate().is_ok());
    }

    #[test]
    fn a_renew_deadline_past_the_lease_is_refused() {
        let mut s = Settings::new("c", "l", "p");
        s.leader_election.as_mut().unwrap().renew_deadline = Duration::from_secs(20);
        assert!(s.validate().is_err());
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let b = Backoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(10),
            jitter: 0.0,
        };
        assert_eq!(b.delay(1, 0.5), Duration::from_secs(1));
        assert_eq!(b.delay(2, 0.5), Duration::from_secs(2));
        assert_eq!(b.delay(4, 0.5), Duration::from_secs(8));
        assert_eq!(b.delay(5, 0.5), Duration::from_secs(10));
        assert_eq!(b.delay(u32::MAX, 0.5), Duration::from_secs(10));
    }

    #[test]
    fn jitter_stays_in_its_band_and_under_the_cap() {
        let b = Backoff {
            base: Duration::from_secs(10),
            cap: Duration::from_secs(100),
            jitter: 0.2,
        };
        assert_eq!(b.delay(1, 0.0), Duration::from_secs(9));
        assert_eq!(b.delay(1, 1.0), Duration::from_secs(11));
        assert!(b.delay(10, 1.0) <= Duration::from_secs(100));
        assert_ne!(b.delay(1, 0.1), b.delay(1, 0.9));
    }

    #[test]
    fn an_empty_cell_identity_is_refused() {
        let mut s = Settings::new("c", "l", "p");
        s.cell_id = Some(" ".into());
        assert!(
            s.validate()
                .unwrap_err()
                .to_string()
                .contains("cell identity")
        );
        s.cell_id = Some("dfw-a".into());
        assert!(s.validate().is_ok());
    }

    #[test]
    fn identities_are_unique_per_process_start() {
        assert_ne!(default_identity(), default_identity());
    }
}
