//! The faults a chaos run injects, from its flags into localplane's fault rules, and what
//! localplane counted of them afterwards.

use std::collections::BTreeMap;

use clap::{Args, ValueEnum};
use localplane::{FaultConfig, FaultOutcome, FaultRule, FaultWhen, InjectedFaults};
use serde::Serialize;

/// The platform project's plane, as localplane names it.
pub const PLATFORM_PLANE: &str = "platform";
/// A cell's plane, as localplane names it.
pub const CELL_PLANE: &str = "cell";
const CLAIMS: &str = "ipclaims.ipam.miloapis.com";
const SHARDS: &str = "egressshards.network.datumapis.com";
const LEASES: &str = "leases.coordination.k8s.io";

/// What a client gets from a request that was applied and then failed.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A 500 or 504 Status.
    Status,
    /// The connection reset without an answer.
    Reset,
    /// No answer until the client's request timeout.
    Hang,
}

/// Fault options of `egress-address-lab chaos`. Rates are per matching request; 0 turns a kind off.
#[derive(Args, Debug, Clone)]
pub struct FaultArgs {
    /// Before-apply failures (half 500s, half 503s) on every request of both planes.
    #[arg(long, default_value_t = 0.05, env = "CHAOS_BEFORE_APPLY_RATE")]
    pub before_apply_rate: f64,
    /// 409 conflicts, before apply, on every update of both planes and every shard patch (the
    /// controller's conditional write).
    #[arg(long, default_value_t = 0.05, env = "CHAOS_CONFLICT_RATE")]
    pub conflict_rate: f64,
    /// Applied-then-failed: claim creates and deletes (platform) and shard updates (cells)
    /// that commit, and whose answer is then lost as the outcomes say (shared out evenly).
    #[arg(long, default_value_t = 0.12, env = "CHAOS_AFTER_APPLY_RATE")]
    pub after_apply_rate: f64,
    /// What an applied-then-failed request answers.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "status,reset,hang",
        env = "CHAOS_AFTER_APPLY_OUTCOMES"
    )]
    pub after_apply_outcomes: Vec<Outcome>,
    /// Share of claim deletes applied --commit-delay-ms late, whether or not the client still
    /// waits.
    #[arg(long, default_value_t = 0.3, env = "CHAOS_DELETE_COMMIT_DELAY_RATE")]
    pub delete_commit_delay_rate: f64,
    /// Share of claim deletes whose release (the second step of Milo's delete, after the claim
    /// was marked Releasing) fails: the claim stays Releasing with its address, and the DELETE
    /// answers 500.
    #[arg(long, default_value_t = 0.05, env = "CHAOS_RELEASE_FAILURE_RATE")]
    pub release_failure_rate: f64,
    /// Share of claim deletes whose release is held --commit-delay-ms after the claim was marked
    /// Releasing: IPAM slower than the controller's --request-timeout, the claim Releasing
    /// meanwhile.
    #[arg(long, default_value_t = 0.1, env = "CHAOS_RELEASE_DELAY_RATE")]
    pub release_delay_rate: f64,
    /// Share of shard writes (the controller's conditional patches) applied --commit-delay-ms late.
    #[arg(long, default_value_t = 0.05, env = "CHAOS_UPDATE_COMMIT_DELAY_RATE")]
    pub update_commit_delay_rate: f64,
    /// How late a delayed commit lands; longer than --request-timeout, so the client has given
    /// up by then.
    #[arg(long, default_value_t = 3000, env = "CHAOS_COMMIT_DELAY_MS")]
    pub commit_delay_ms: u64,
    /// Latency added to every request of both planes during a spike (spikes of 0.3–1.2 s, every
    /// 2–5 s); 0 for none.
    #[arg(long, default_value_t = 400, env = "CHAOS_LATENCY_MS")]
    pub latency_ms: u64,
    /// Every watch stream is cut after this many seconds; 0 for never.
    #[arg(long, default_value_t = 3.0, env = "CHAOS_WATCH_CUT_SECONDS")]
    pub watch_cut_seconds: f64,
    /// The controllers' --request-timeout: how long a hung request holds them.
    #[arg(long, default_value = "2s", env = "CHAOS_REQUEST_TIMEOUT")]
    pub request_timeout: String,
}

impl FaultArgs {
    /// Checks what clap cannot: rates are probabilities, and a delayed commit lands after the
    /// client gave up (or the fault is not the one meant).
    pub fn validate(&self) -> anyhow::Result<()> {
        let rates = [
            ("--before-apply-rate", self.before_apply_rate),
            ("--conflict-rate", self.conflict_rate),
            ("--after-apply-rate", self.after_apply_rate),
            ("--delete-commit-delay-rate", self.delete_commit_delay_rate),
            ("--update-commit-delay-rate", self.update_commit_delay_rate),
            ("--release-failure-rate", self.release_failure_rate),
            ("--release-delay-rate", self.release_delay_rate),
        ];
        for (flag, r) in rates {
            anyhow::ensure!(
                (0.0..=1.0).contains(&r),
                "{flag} {r}: not a probability in [0, 1]"
            );
        }
        anyhow::ensure!(
            self.watch_cut_seconds.is_finite() && self.watch_cut_seconds >= 0.0,
            "--watch-cut-seconds {}: not a number of seconds",
            self.watch_cut_seconds
        );
        let timeout = self.request_timeout_ms()?;
        anyhow::ensure!(
            self.commit_delay_ms == 0 || self.commit_delay_ms > timeout,
            "--commit-delay-ms {} must be longer than --request-timeout {} (a delayed commit is \
             meant to land after the client gave up)",
            self.commit_delay_ms,
            self.request_timeout
        );
        Ok(())
    }

    /// --request-timeout in milliseconds (`2s`, `1500ms`).
    pub fn request_timeout_ms(&self) -> anyhow::Result<u64> {
        let t = self.request_timeout.trim();
        let parsed = if let Some(ms) = t.strip_suffix("ms") {
            ms.parse::<u64>().ok()
        } else if let Some(s) = t.strip_suffix('s') {
            s.parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s > 0.0)
                .map(|s| (s * 1000.0) as u64)
        } else {
            None
        };
        parsed
            .filter(|ms| *ms > 0)
            .ok_or_else(|| anyhow::anyhow!("--request-timeout {t:?}: expected e.g. 2s or 1500ms"))
    }

    /// The fault configuration, with or without a latency spike.
    pub fn config(&self, seed: u64, latency_spike: bool) -> FaultConfig {
        let mut rules = vec![];
        let mut rule = |r: FaultRule| {
            if r.error_rate > 0.0
                || r.latency_ms > 0
                || r.commit_delay_ms > 0
                || r.release_delay_ms > 0
            {
                rules.push(r);
            }
        };
        // Before apply: nothing is stored, the client gets a Status.
        for code in [500, 503] {
            rule(FaultRule {
                error_rate: self.before_apply_rate / 2.0,
                code: Some(code),
                ..Default::default()
            });
        }
        rule(FaultRule {
            verb: Some("update".into()),
            error_rate: self.conflict_rate,
            code: Some(409),
            ..Default::default()
        });
        rule(FaultRule {
            verb: Some("patch".into()),
            resource: Some(SHARDS.into()),
            error_rate: self.conflict_rate,
            code: Some(409),
            ..Default::default()
        });
        // Applied, then failed: the writes whose lost answers the controller must survive.
        let targets = [
            (PLATFORM_PLANE, "create", CLAIMS),
            (PLATFORM_PLANE, "delete", CLAIMS),
            (CELL_PLANE, "patch", SHARDS),
        ];
        let outcomes = &self.after_apply_outcomes;
        for (plane, verb, resource) in targets {
            for outcome in outcomes {
                let share = self.after_apply_rate / outcomes.len() as f64;
                let base = FaultRule {
                    plane: Some(plane.into()),
                    verb: Some(verb.into()),
                    resource: Some(resource.into()),
                    when: FaultWhen::AfterApply,
                    ..Default::default()
                };
                match outcome {
                    // An apiserver answers 500 for a storage error and 504 when the commit
                    // outlived its own deadline: both after the write landed.
                    Outcome::Status => {
                        for code in [500, 504] {
                            rule(FaultRule {
                                error_rate: share / 2.0,
                                code: Some(code),
                                ..base.clone()
                            });
                        }
                    }
                    Outcome::Reset | Outcome::Hang => rule(FaultRule {
                        error_rate: share,
                        outcome: if *outcome == Outcome::Reset {
                            FaultOutcome::Reset
                        } else {
                            FaultOutcome::Hang
                        },
                        ..base
                    }),
                }
            }
        }
        // Delayed commits: claim deletes above all (a release that lands after its client gave
        // up, maybe after the shard was made again), and shard updates.
        for (plane, verb, resource, rate) in [
            (
                PLATFORM_PLANE,
                "delete",
                CLAIMS,
                self.delete_commit_delay_rate,
            ),
            (CELL_PLANE, "patch", SHARDS, self.update_commit_delay_rate),
        ] {
            if rate > 0.0 {
                rule(FaultRule {
                    plane: Some(plane.into()),
                    verb: Some(verb.into()),
                    resource: Some(resource.into()),
                    commit_delay_ms: self.commit_delay_ms,
                    commit_delay_rate: Some(rate),
                    ..Default::default()
                });
            }
        }
        // Milo's two-step claim delete: the release that fails (the claim stays Releasing) and
        // the release held past the client's timeout.
        let claim_deletes = FaultRule {
            plane: Some(PLATFORM_PLANE.into()),
            verb: Some("delete".into()),
            resource: Some(CLAIMS.into()),
            ..Default::default()
        };
        rule(FaultRule {
            error_rate: self.release_failure_rate,
            when: FaultWhen::Release,
            ..claim_deletes.clone()
        });
        if self.release_delay_rate > 0.0 {
            rule(FaultRule {
                release_delay_ms: self.commit_delay_ms,
                release_delay_rate: Some(self.release_delay_rate),
                ..claim_deletes
            });
        }
        if latency_spike {
            rule(FaultRule {
                latency_ms: self.latency_ms,
                ..Default::default()
            });
        }
        FaultConfig {
            seed: Some(seed),
            rules,
            watch_cut_after_seconds: (self.watch_cut_seconds > 0.0)
                .then_some(self.watch_cut_seconds),
        }
    }
}

/// Every Lease update of a cell answered `latency_ms` late, and applied then: a leader's
/// renewals that land, each after the token it renews ran out (see `lapse`).
pub fn slow_lease_renewals(latency_ms: u64) -> FaultRule {
    FaultRule {
        plane: Some(CELL_PLANE.into()),
        verb: Some("update".into()),
        resource: Some(LEASES.into()),
        latency_ms,
        ..Default::default()
    }
}

/// Keeps the Lease out of every rule of `cfg` that matches all resources.
pub fn spare_leases(cfg: &mut FaultConfig) {
    for r in cfg.rules.iter_mut().filter(|r| r.resource.is_none()) {
        r.not_resources.push(LEASES.into());
    }
}

/// What was injected, by plane (`cell a`, `cell b`, `platform`), from localplane's counters;
/// and what the run did itself (latency spikes), or only configured (watch cuts, which
/// localplane does not count: the watches per plane show them as re-watches).
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultReport {
    pub by_plane: BTreeMap<String, InjectedFaults>,
    pub total: InjectedFaults,
    pub latency_spikes: usize,
    pub latency_ms: u64,
    pub watch_cut_after_seconds: Option<f64>,
    /// Shard watch requests per cell: one per controller start, the rest re-watches after a cut.
    pub shard_watches_by_cell: BTreeMap<String, u64>,
    /// Slow-renewal phases, all cells.
    pub slow_renewal_phases: usize,
    /// Lease updates answered during those phases, each `slow_renewal_latency_ms` late.
    pub slow_renewals: u64,
    pub slow_renewal_latency_ms: u64,
    /// Leaders stopped for less than their lease, all cells.
    pub short_pauses: usize,
    /// Of those, the ones that woke still holding the lease: the pause the fault is meant to be.
    pub short_pauses_within_lease: usize,
    /// Claim releases that IPAM carried out after a newer incarnation of the claim's shard had
    /// been made in its cell: with one name for every incarnation, each could have removed the
    /// newer one's claim (Milo reads no DELETE preconditions).
    pub releases_after_recreation: u64,
}

impl FaultReport {
    pub fn add(&mut self, plane: String, injected: InjectedFaults) {
        self.total = self.total.plus(&injected);
        self.by_plane.insert(plane, injected);
    }

    /// The kinds of fault localplane counted none of, or the run never started.
    pub fn missing_kinds(&self) -> Vec<&'static str> {
        let t = &self.total;
        [
            ("before-apply status", t.before_apply.status),
            ("after-apply status", t.after_apply.status),
            ("after-apply reset", t.after_apply.reset),
            ("after-apply hang", t.after_apply.hang),
            ("delayed commit", t.delayed_commits),
            (
                "release step failed (claim left Releasing)",
                t.failed_releases.status,
            ),
            ("release step delayed", t.delayed_releases),
            ("latency spike", self.latency_spikes as u64),
            ("slow lease renewal", self.slow_renewals),
            (
                "leader paused within its lease",
                self.short_pauses_within_lease as u64,
            ),
            (
                "claim release landed after its shard was made again",
                self.releases_after_recreation,
            ),
        ]
        .into_iter()
        .filter(|(_, n)| *n == 0)
        .map(|(k, _)| k)
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        faults: FaultArgs,
    }

    fn args(extra: &[&str]) -> FaultArgs {
        Cli::try_parse_from(std::iter::once("chaos").chain(extra.iter().copied()))
            .unwrap()
            .faults
    }

    #[test]
    fn the_defaults_configure_every_kind_on_both_planes() {
        let a = args(&[]);
        a.validate().unwrap();
        let cfg = a.config(1, true);
        cfg.validate().unwrap();
        let has = |f: &dyn Fn(&FaultRule) -> bool| cfg.rules.iter().any(f);
        for o in [
            FaultOutcome::Status,
            FaultOutcome::Reset,
            FaultOutcome::Hang,
        ] {
            for (plane, verb) in [
                (PLATFORM_PLANE, "create"),
                (PLATFORM_PLANE, "delete"),
                (CELL_PLANE, "patch"),
            ] {
                assert!(
                    has(&|r| r.when == FaultWhen::AfterApply
                        && r.outcome == o
                        && r.plane.as_deref() == Some(plane)
                        && r.verb.as_deref() == Some(verb)
                        && r.error_rate > 0.0),
                    "{o:?} after apply on {plane} {verb}"
                );
            }
        }
        assert!(has(&|r| r.commit_delay_ms == 3000
            && r.plane.as_deref() == Some(PLATFORM_PLANE)
            && r.verb.as_deref() == Some("delete")));
        assert!(has(
            &|r| r.commit_delay_ms > 0 && r.plane.as_deref() == Some(CELL_PLANE)
        ));
        assert!(has(
            &|r| r.when == FaultWhen::BeforeApply && r.code == Some(503)
        ));
        assert!(has(&|r| r.latency_ms == 400));
        assert_eq!(cfg.watch_cut_after_seconds, Some(3.0));
        assert!(!a.config(1, false).rules.iter().any(|r| r.latency_ms > 0));
        assert!(
            !cfg.rules
                .iter()
                .any(|r| r.resource.as_deref() == Some(LEASES)),
            "leases are slowed only by a slow-renewal phase"
        );
    }

    #[test]
    fn slow_renewals_delay_only_the_cells_lease_updates_and_fail_nothing() {
        let r = slow_lease_renewals(1700);
        let mut cfg = args(&[]).config(1, false);
        cfg.rules.push(r.clone());
        cfg.validate().unwrap();
        assert_eq!(r.plane.as_deref(), Some(CELL_PLANE));
        assert_eq!(r.verb.as_deref(), Some("update"));
        assert_eq!(r.resource.as_deref(), Some("leases.coordination.k8s.io"));
        assert_eq!(
            (r.latency_ms, r.error_rate, r.commit_delay_ms),
            (1700, 0.0, 0)
        );

        let mut spared = args(&[]).config(1, true);
        let before = spared.clone();
        spare_leases(&mut spared);
        assert_eq!(spared.rules.len(), before.rules.len());
        for (r, was) in spared.rules.iter().zip(&before.rules) {
            if was.resource.is_none() {
                assert_eq!(r.not_resources, [LEASES], "{r:?}");
            } else {
                assert_eq!(r, was, "a rule on one resource never matched leases");
            }
        }
        assert!(
            spared
                .rules
                .iter()
                .any(|r| r.latency_ms > 0 && !r.not_resources.is_empty()),
            "latency spikes spare the leases too"
        );
    }

    #[test]
    fn flags_turn_kinds_off_and_bad_values_are_named() {
        let a = args(&[
            "--after-apply-outcomes=hang",
            "--delete-commit-delay-rate=0",
            "--update-commit-delay-rate=0",
            "--watch-cut-seconds=0",
        ]);
        let cfg = a.config(1, false);
        assert!(cfg.rules.iter().all(|r| r.commit_delay_ms == 0));
        assert!(
            cfg.rules
                .iter()
                .filter(|r| r.when == FaultWhen::AfterApply)
                .all(|r| r.outcome == FaultOutcome::Hang)
        );
        assert_eq!(cfg.watch_cut_after_seconds, None);

        let e = args(&["--after-apply-rate=1.5"]).validate().unwrap_err();
        assert!(e.to_string().contains("--after-apply-rate 1.5"), "{e}");
        let e = args(&["--commit-delay-ms=1000", "--request-timeout=2s"])
            .validate()
            .unwrap_err();
        assert!(
            e.to_string().contains("longer than --request-timeout"),
            "{e}"
        );
        let e = args(&["--request-timeout=soon"]).validate().unwrap_err();
        assert!(e.to_string().contains("--request-timeout"), "{e}");
        assert_eq!(
            args(&["--request-timeout=1500ms"])
                .request_timeout_ms()
                .unwrap(),
            1500
        );
    }

    #[test]
    fn a_kind_never_injected_is_named() {
        let mut r = FaultReport::default();
        assert_eq!(r.missing_kinds().len(), 11);
        let mut i = InjectedFaults::default();
        i.before_apply.status = 3;
        i.after_apply.status = 1;
        i.after_apply.reset = 1;
        i.delayed_commits = 2;
        i.failed_releases.status = 1;
        i.delayed_releases = 1;
        r.add("platform".into(), i);
        assert!(
            r.missing_kinds()
                .contains(&"claim release landed after its shard was made again"),
            "a run that never reached the fault Milo's DELETE makes dangerous says so"
        );
        r.releases_after_recreation = 3;
        r.latency_spikes = 1;
        r.slow_renewals = 4;
        r.short_pauses = 2;
        assert_eq!(
            r.missing_kinds(),
            ["after-apply hang", "leader paused within its lease"],
            "a pause that let another take the lease is not this kind"
        );
        r.short_pauses_within_lease = 1;
        assert_eq!(r.missing_kinds(), ["after-apply hang"]);
        let mut j = InjectedFaults::default();
        j.after_apply.hang = 1;
        r.add("cell a".into(), j);
        assert!(r.missing_kinds().is_empty());
        assert_eq!(r.total.delayed_commits, 2);
    }
}
