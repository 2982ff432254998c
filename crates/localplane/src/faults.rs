//! Fault injection, drawn from a seeded RNG so a failing run can be replayed: latency, failures
//! before a request takes effect or after it did (answered with a Status, a reset connection, or
//! no answer at all), commits that land late, the release step of a two-step delete (Milo's
//! IPClaim) failed or held back, and watch streams cut after a while.

use std::sync::Mutex;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::locks;

/// When an injected failure strikes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FaultWhen {
    /// Instead of the request: nothing is applied.
    #[default]
    BeforeApply,
    /// After the request was applied (a write committed, a read was served): the work is done
    /// and only the answer is lost.
    AfterApply,
    /// At the release step of a DELETE its service carries out in two writes (Milo's IPClaim):
    /// the first write commits (the claim is `Releasing`), the release fails, and the claim stays
    /// `Releasing` with its address and allocation. A `status` outcome is Milo's answer, 500
    /// `release allocation after 3 attempts: ...`. Other requests never draw it.
    Release,
}

/// What the client gets from an injected failure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FaultOutcome {
    /// A `metav1.Status` with the rule's `code`.
    #[default]
    Status,
    /// The TCP connection is reset without an HTTP answer. In-process clients
    /// ([`crate::LocalPlane::client`]) get a response whose body fails to read.
    Reset,
    /// No answer at all: the connection stays open until the client gives up (or localplane
    /// shuts down, which then resets it).
    Hang,
}

impl FaultOutcome {
    /// The spelling a configuration uses.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultOutcome::Status => "status",
            FaultOutcome::Reset => "reset",
            FaultOutcome::Hang => "hang",
        }
    }
}

/// One rule; empty selectors match everything.
///
/// A matching request is delayed by `latencyMs`, then fails with probability `errorRate` as
/// `when` and `outcome` say, and is applied `commitDelayMs` late with probability
/// `commitDelayRate`. Watches have nothing to apply: only `beforeApply` failures and latency
/// touch them (`watchCutAfterSeconds` cuts them).
///
/// A DELETE its service carries out in two writes (Milo's IPClaim: `Releasing`, then the
/// release) has a release step too: `when: release` fails it (the claim stays `Releasing` with
/// its address, and the client gets Milo's 500, or nothing with `outcome: reset|hang`), and
/// `releaseDelayMs` holds it back (with probability `releaseDelayRate`), so `Releasing` can be
/// seen and a late release lands on whatever claim holds the name then. Only such a DELETE draws
/// them, so a rule with `verb` other than `delete` cannot use them.
///
/// ```yaml
/// # A claim create that commits, then the client sees the connection reset.
/// - {verb: create, resource: ipclaims, errorRate: 1, when: afterApply, outcome: reset}
/// # A claim delete that lands 5 s after it arrived, whether or not the client still waits.
/// - {plane: platform, verb: delete, resource: ipclaims.ipam.miloapis.com, commitDelayMs: 5000}
/// # Half the claim deletes leave their claim Releasing and answer 500.
/// - {verb: delete, resource: ipclaims, errorRate: 0.5, when: release}
/// # Every claim delete releases 2 s after it marked the claim Releasing.
/// - {verb: delete, resource: ipclaims, releaseDelayMs: 2000}
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct FaultRule {
    /// `cell`, a project name, or unset for all planes.
    pub plane: Option<String>,
    /// A Kubernetes verb (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`) or unset.
    pub verb: Option<String>,
    /// A plural (`egressshards`), a group-qualified plural (`egressshards.network.datumapis.com`),
    /// optionally with `/status`, or unset.
    pub resource: Option<String>,
    /// Resources, spelled as `resource` is, that the rule never matches: a rule on every request
    /// but the leader election's (`notResources: [leases.coordination.k8s.io]`), say.
    pub not_resources: Vec<String>,
    /// Probability in [0, 1] that a matching request fails.
    pub error_rate: f64,
    /// HTTP code (400–599) of an injected `status` failure (500 if unset). kube's client retries
    /// 429/503/504.
    pub code: Option<u16>,
    /// Delay added to every matching request.
    pub latency_ms: u64,
    /// `Retry-After` for injected 429/503 failures (`status` outcomes only).
    pub retry_after_seconds: Option<u32>,
    /// When a failure strikes: `beforeApply` (the default), `afterApply`, or `release` (the
    /// release step of a two-step delete; then `code` and `retryAfterSeconds` may not be set,
    /// as the answer is Milo's).
    pub when: FaultWhen,
    /// What the client gets from a failure: `status` (the default), `reset` or `hang`.
    pub outcome: FaultOutcome,
    /// Applies a matching request this many milliseconds after it arrived, in a task of its own:
    /// a client that gives up meanwhile does not stop it, one that waits gets the real answer.
    /// Preconditions are checked when it is applied. Delays of several matching rules add up.
    pub commit_delay_ms: u64,
    /// Probability in [0, 1] that `commitDelayMs` applies to a matching request (every one when
    /// unset).
    pub commit_delay_rate: Option<f64>,
    /// Holds the release step of a matching two-step delete this many milliseconds after its
    /// first write committed (the claim `Releasing` meanwhile). The release then runs in a task
    /// of its own, so a client that gives up does not stop it. Delays of several rules add up.
    pub release_delay_ms: u64,
    /// Probability in [0, 1] that `releaseDelayMs` applies (every time when unset).
    pub release_delay_rate: Option<f64>,
}

/// The whole fault configuration (also the body of `POST /localplane/faults`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct FaultConfig {
    /// RNG seed; the same seed and request sequence inject the same failures.
    pub seed: Option<u64>,
    pub rules: Vec<FaultRule>,
    /// Cut every watch stream after this many seconds (the client sees a broken connection).
    pub watch_cut_after_seconds: Option<f64>,
}

fn probability(field: &str, p: f64) -> Result<(), String> {
    if (0.0..=1.0).contains(&p) {
        Ok(())
    } else {
        Err(format!("{field}: {p} is not a probability in [0, 1]"))
    }
}

impl FaultRule {
    fn validate(&self, at: &str) -> Result<(), String> {
        probability(&format!("{at}.errorRate"), self.error_rate)?;
        if let Some(r) = self.commit_delay_rate {
            probability(&format!("{at}.commitDelayRate"), r)?;
        }
        if let Some(r) = self.release_delay_rate {
            probability(&format!("{at}.releaseDelayRate"), r)?;
        }
        // Only a DELETE has a release step; a rule that names another verb would never fire.
        let not_a_delete = self.verb.as_deref().filter(|v| *v != "delete" && *v != "*");
        if let Some(verb) = not_a_delete {
            let release_field = if self.when == FaultWhen::Release && self.error_rate > 0.0 {
                Some("when")
            } else if self.release_delay_ms > 0 {
                Some("releaseDelayMs")
            } else {
                None
            };
            if let Some(field) = release_field {
                return Err(format!(
                    "{at}.{field}: only a DELETE (of a kind deleted in two steps, Milo's IPClaim) has a \
                     release step, and verb {verb} has none"
                ));
            }
        }
        // How a failure is shaped matters only for a rule that can fail; a rule used for latency
        // or delays alone may leave a placeholder code in place.
        if self.error_rate == 0.0 {
            return Ok(());
        }
        if self.when == FaultWhen::Release
            && let Some(field) = (self.code.is_some().then_some("code")).or(self
                .retry_after_seconds
                .is_some()
                .then_some("retryAfterSeconds"))
        {
            return Err(format!(
                "{at}.{field}: a failed release step answers as Milo does (500, \"release allocation after 3 \
                 attempts: ...\"), which {field} cannot change"
            ));
        }
        if let Some(c) = self.code
            && !(400..=599).contains(&c)
        {
            return Err(format!(
                "{at}.code: {c} is not an HTTP error code (400-599)"
            ));
        }
        if self.outcome != FaultOutcome::Status
            && (self.code.is_some() || self.retry_after_seconds.is_some())
        {
            return Err(format!(
                "{at}: code and retryAfterSeconds shape a Status, and outcome {} sends none",
                self.outcome.as_str()
            ));
        }
        Ok(())
    }
}

impl FaultConfig {
    /// Checks every rate, code and duration, naming the first one that is wrong
    /// (`rules[2].errorRate: 1.5 is not a probability in [0, 1]`).
    pub fn validate(&self) -> Result<(), String> {
        for (i, r) in self.rules.iter().enumerate() {
            r.validate(&format!("rules[{i}]"))?;
        }
        if let Some(s) = self.watch_cut_after_seconds
            && !(s.is_finite() && s >= 0.0)
        {
            return Err(format!(
                "watchCutAfterSeconds: {s} is not a number of seconds"
            ));
        }
        Ok(())
    }
}

/// How many faults of each kind were injected (see [`crate::Metrics::injected_faults`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InjectedFaults {
    /// Requests failed before they took effect, by what the client got.
    pub before_apply: FaultOutcomes,
    /// Requests that took effect and then failed, by what the client got.
    pub after_apply: FaultOutcomes,
    /// Requests applied late.
    pub delayed_commits: u64,
    /// Two-step deletes whose release step was made to fail (the claim stayed `Releasing`), by
    /// what the client got.
    pub failed_releases: FaultOutcomes,
    /// Two-step deletes whose release step was held back.
    pub delayed_releases: u64,
}

/// Injected failures by what the client got.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct FaultOutcomes {
    pub status: u64,
    pub reset: u64,
    pub hang: u64,
}

impl InjectedFaults {
    /// Every count of both.
    pub fn plus(&self, other: &InjectedFaults) -> InjectedFaults {
        InjectedFaults {
            before_apply: self.before_apply.plus(&other.before_apply),
            after_apply: self.after_apply.plus(&other.after_apply),
            delayed_commits: self.delayed_commits + other.delayed_commits,
            failed_releases: self.failed_releases.plus(&other.failed_releases),
            delayed_releases: self.delayed_releases + other.delayed_releases,
        }
    }
}

impl FaultOutcomes {
    /// Every count of both.
    pub fn plus(&self, other: &FaultOutcomes) -> FaultOutcomes {
        FaultOutcomes {
            status: self.status + other.status,
            reset: self.reset + other.reset,
            hang: self.hang + other.hang,
        }
    }

    pub(crate) fn count(&mut self, outcome: FaultOutcome) {
        match outcome {
            FaultOutcome::Status => self.status += 1,
            FaultOutcome::Reset => self.reset += 1,
            FaultOutcome::Hang => self.hang += 1,
        }
    }
}

/// An injected failure chosen for one request.
#[derive(Debug)]
pub(crate) struct Failure {
    pub when: FaultWhen,
    pub outcome: FaultOutcome,
    /// What a `status` outcome answers with. For a failed release step, the cause the service's
    /// own answer wraps ([`RELEASE_FAULT`]).
    pub status: ApiError,
}

/// Why an injected release step failed, as the service's answer quotes it.
pub(crate) const RELEASE_FAULT: &str = "injected fault: the release step failed";

/// What happens to one request.
#[derive(Debug, Default)]
pub(crate) struct Decision {
    pub latency: Duration,
    pub commit_delay: Duration,
    /// Between the two writes of a two-step delete.
    pub release_delay: Duration,
    pub failure: Option<Failure>,
}

/// What a request can do, which decides the faults it can draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    /// A watch: nothing to apply, so nothing to fail after or to delay.
    Watch,
    /// A request applied in one go.
    Applies,
    /// A DELETE its service carries out in two writes: it also has a release step.
    TwoStepDelete,
}

/// The live fault configuration of a localplane.
pub struct Faults {
    inner: Mutex<(FaultConfig, StdRng)>,
}

impl Faults {
    pub(crate) fn new(cfg: FaultConfig) -> Self {
        let rng = StdRng::seed_from_u64(cfg.seed.unwrap_or(0));
        Faults {
            inner: Mutex::new((cfg, rng)),
        }
    }

    /// Replaces the configuration and reseeds.
    ///
    /// # Panics
    ///
    /// If the configuration is invalid; [`Faults::try_set`] returns the reason instead.
    pub fn set(&self, cfg: FaultConfig) {
        if let Err(e) = self.try_set(cfg) {
            panic!("invalid fault config: {e}");
        }
    }

    /// Replaces the configuration and reseeds, or leaves it as it was if `cfg` is invalid.
    pub fn try_set(&self, cfg: FaultConfig) -> Result<(), String> {
        cfg.validate()?;
        let rng = StdRng::seed_from_u64(cfg.seed.unwrap_or(0));
        *locks::lock(&self.inner) = (cfg, rng);
        Ok(())
    }

    pub fn get(&self) -> FaultConfig {
        locks::lock(&self.inner).0.clone()
    }

    pub fn clear(&self) {
        self.set(FaultConfig::default());
    }

    pub(crate) fn watch_cut_after(&self) -> Option<Duration> {
        locks::lock(&self.inner)
            .0
            .watch_cut_after_seconds
            .filter(|s| *s > 0.0)
            .map(Duration::from_secs_f64)
    }

    /// Draws what happens to one request. A rule draws only for what the request can do (a
    /// watch has no effect to fail after or to delay, only a two-step delete has a release
    /// step), so the sequence of draws (and a replay from the seed) does not depend on how many
    /// watches ran, nor does a rule without the release fields draw differently than before they
    /// existed.
    pub(crate) fn decide(
        &self,
        plane: &str,
        verb: &str,
        group: &str,
        resource: &str,
        reach: Reach,
    ) -> Decision {
        let applies = reach != Reach::Watch;
        let mut g = locks::lock(&self.inner);
        let (cfg, rng) = &mut *g;
        let mut d = Decision::default();
        if cfg.rules.is_empty() {
            return d;
        }
        let qualified = if group.is_empty() {
            resource.to_string()
        } else {
            match resource.split_once('/') {
                Some((r, sub)) => format!("{r}.{group}/{sub}"),
                None => format!("{resource}.{group}"),
            }
        };
        for r in &cfg.rules {
            let sel = |s: &Option<String>, v: &[&str]| {
                s.as_deref().is_none_or(|x| x == "*" || v.contains(&x))
            };
            if !sel(&r.plane, &[plane])
                || !sel(&r.verb, &[verb])
                || !sel(&r.resource, &[resource, &qualified])
                || r.not_resources
                    .iter()
                    .any(|x| x == resource || *x == qualified)
            {
                continue;
            }
            d.latency += Duration::from_millis(r.latency_ms);
            let can_fail = match r.when {
                FaultWhen::BeforeApply => true,
                FaultWhen::AfterApply => applies,
                FaultWhen::Release => reach == Reach::TwoStepDelete,
            };
            if d.failure.is_none()
                && can_fail
                && r.error_rate > 0.0
                && rng.random::<f64>() < r.error_rate
            {
                d.failure = Some(r.failure());
            }
            if applies
                && r.commit_delay_ms > 0
                && r.commit_delay_rate.is_none_or(|p| rng.random::<f64>() < p)
            {
                d.commit_delay += Duration::from_millis(r.commit_delay_ms);
            }
            if reach == Reach::TwoStepDelete
                && r.release_delay_ms > 0
                && r.release_delay_rate.is_none_or(|p| rng.random::<f64>() < p)
            {
                d.release_delay += Duration::from_millis(r.release_delay_ms);
            }
        }
        d
    }
}

impl FaultRule {
    fn failure(&self) -> Failure {
        let code = self.code.unwrap_or(500);
        let message = match self.when {
            FaultWhen::BeforeApply => format!("injected fault ({code})"),
            FaultWhen::AfterApply => {
                format!("injected fault ({code}) after the request was applied")
            }
            // The service words it (see `Failure::status`); this is the cause it wraps.
            FaultWhen::Release => RELEASE_FAULT.to_string(),
        };
        let mut status = ApiError::from_code(code, message);
        if let Some(s) = self.retry_after_seconds {
            status.0.details = Some(kube::core::response::StatusDetails {
                name: String::new(),
                group: String::new(),
                kind: String::new(),
                uid: String::new(),
                causes: vec![],
                retry_after_seconds: s,
            });
        }
        Failure {
            when: self.when,
            outcome: self.outcome,
            status,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(yaml: &str) -> FaultRule {
        serde_saphyr::from_str(yaml).unwrap()
    }

    fn faults(seed: u64, rules: Vec<FaultRule>) -> Faults {
        Faults::new(FaultConfig {
            seed: Some(seed),
            rules,
            watch_cut_after_seconds: None,
        })
    }

    fn decide(f: &Faults, verb: &str, resource: &str) -> Decision {
        let reach = match verb {
            "watch" => Reach::Watch,
            "delete" if resource == "ipclaims" => Reach::TwoStepDelete,
            _ => Reach::Applies,
        };
        f.decide("platform", verb, "ipam.miloapis.com", resource, reach)
    }

    #[test]
    fn the_new_fields_read_as_documented() {
        let r = rule(
            "{verb: create, resource: ipclaims, errorRate: 1, when: afterApply, outcome: reset, \
             commitDelayMs: 5000, commitDelayRate: 0.5}",
        );
        assert_eq!(r.when, FaultWhen::AfterApply);
        assert_eq!(r.outcome, FaultOutcome::Reset);
        assert_eq!((r.commit_delay_ms, r.commit_delay_rate), (5000, Some(0.5)));
        let d = rule("{verb: get}");
        assert_eq!(
            (d.when, d.outcome),
            (FaultWhen::BeforeApply, FaultOutcome::Status)
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["when"], "afterApply");
        assert_eq!(json["outcome"], "reset");
        assert_eq!(json["commitDelayMs"], 5000);
    }

    #[test]
    fn bad_rules_are_refused_naming_the_field() {
        let bad = |yaml: &str| -> String {
            match serde_saphyr::from_str::<FaultConfig>(yaml) {
                Err(e) => e.to_string(),
                Ok(c) => c.validate().expect_err(yaml),
            }
        };
        let e = bad("{rules: [{verb: get}, {errorRate: 1.5}]}");
        assert!(e.starts_with("rules[1].errorRate: 1.5"), "{e}");
        let e = bad("{rules: [{commitDelayMs: 10, commitDelayRate: -1}]}");
        assert!(e.starts_with("rules[0].commitDelayRate"), "{e}");
        let e = bad("{rules: [{errorRate: 1, code: 200}]}");
        assert!(e.starts_with("rules[0].code: 200"), "{e}");
        let e = bad("{rules: [{errorRate: 1, outcome: reset, code: 503}]}");
        assert!(e.contains("outcome reset sends none"), "{e}");
        let e = bad("{rules: [{errorRate: 1, outcome: explode}]}");
        assert!(e.contains("explode"), "{e}");
        let e = bad("{rules: [{errorRate: 1, outcom: reset}]}");
        assert!(e.contains("outcom"), "{e}");
        assert_eq!(
            serde_saphyr::from_str::<FaultConfig>("{rules: [{latencyMs: 800, code: 0}]}")
                .unwrap()
                .validate(),
            Ok(()),
            "a rule that never fails is not held to a failure's shape"
        );
        let e = bad("{watchCutAfterSeconds: -1}");
        assert!(e.starts_with("watchCutAfterSeconds"), "{e}");

        let f = faults(1, vec![rule("{verb: get, errorRate: 1}")]);
        let before = f.get();
        assert!(
            f.try_set(serde_saphyr::from_str("{rules: [{errorRate: 2}]}").unwrap())
                .is_err()
        );
        assert_eq!(
            f.get(),
            before,
            "a refused config leaves the old one in place"
        );
    }

    #[test]
    fn selection_by_plane_verb_and_resource() {
        let f = faults(
            1,
            vec![rule(
                "{plane: platform, verb: delete, resource: ipclaims.ipam.miloapis.com, errorRate: 1, \
                 when: afterApply, outcome: hang}",
            )],
        );
        let hit = decide(&f, "delete", "ipclaims").failure.unwrap();
        assert_eq!(
            (hit.when, hit.outcome),
            (FaultWhen::AfterApply, FaultOutcome::Hang)
        );
        assert!(decide(&f, "create", "ipclaims").failure.is_none());
        assert!(decide(&f, "delete", "ippools").failure.is_none());
        assert!(
            f.decide(
                "cell",
                "delete",
                "ipam.miloapis.com",
                "ipclaims",
                Reach::TwoStepDelete
            )
            .failure
            .is_none()
        );
    }

    #[test]
    fn a_rule_skips_the_resources_it_names_not_to_match() {
        let f = faults(
            1,
            vec![rule(
                "{errorRate: 1, latencyMs: 5, notResources: [leases.coordination.k8s.io, ippools]}",
            )],
        );
        let lease = f.decide(
            "cell",
            "update",
            "coordination.k8s.io",
            "leases",
            Reach::Applies,
        );
        assert!(lease.failure.is_none() && lease.latency.is_zero());
        assert!(decide(&f, "get", "ippools").failure.is_none());
        let claim = decide(&f, "create", "ipclaims");
        assert!(claim.failure.is_some() && !claim.latency.is_zero());
    }

    #[test]
    fn a_status_failure_carries_the_code_and_says_when_it_struck() {
        let f = faults(
            1,
            vec![rule(
                "{verb: create, errorRate: 1, when: afterApply, code: 503, retryAfterSeconds: 2}",
            )],
        );
        let s = decide(&f, "create", "ipclaims").failure.unwrap().status;
        assert_eq!((s.0.code, s.0.reason.as_str()), (503, "ServiceUnavailable"));
        assert!(
            s.0.message.contains("after the request was applied"),
            "{}",
            s.0.message
        );
        assert_eq!(s.0.details.unwrap().retry_after_seconds, 2);
    }

    #[test]
    fn commit_delays_add_up_and_skip_watches() {
        let f = faults(
            1,
            vec![
                rule("{verb: delete, commitDelayMs: 5000}"),
                rule("{commitDelayMs: 100}"),
                rule("{errorRate: 1, when: afterApply}"),
            ],
        );
        let d = decide(&f, "delete", "ipclaims");
        assert_eq!(d.commit_delay, Duration::from_millis(5100));
        let w = decide(&f, "watch", "ipclaims");
        assert_eq!(w.commit_delay, Duration::ZERO);
        assert!(w.failure.is_none(), "a watch has nothing to fail after");
    }

    #[test]
    fn a_release_step_fails_or_waits_only_on_a_two_step_delete() {
        let f = faults(
            1,
            vec![
                rule("{verb: delete, errorRate: 1, when: release}"),
                rule("{releaseDelayMs: 300}"),
                rule(
                    "{verb: delete, resource: ipclaims, releaseDelayMs: 200, releaseDelayRate: 1}",
                ),
            ],
        );
        let d = decide(&f, "delete", "ipclaims");
        let hit = d.failure.expect("the release step fails");
        assert_eq!(
            (hit.when, hit.outcome),
            (FaultWhen::Release, FaultOutcome::Status)
        );
        assert_eq!(hit.status.0.message, RELEASE_FAULT);
        assert_eq!(d.release_delay, Duration::from_millis(500));
        for (verb, resource) in [
            ("delete", "ippools"),
            ("create", "ipclaims"),
            ("watch", "ipclaims"),
        ] {
            let d = decide(&f, verb, resource);
            assert!(d.failure.is_none(), "{verb} {resource} has no release step");
            assert_eq!(d.release_delay, Duration::ZERO, "{verb} {resource}");
        }
        let json = serde_json::to_value(rule(
            "{when: release, releaseDelayMs: 5, releaseDelayRate: 0.5}",
        ))
        .unwrap();
        assert_eq!(
            (
                &json["when"],
                &json["releaseDelayMs"],
                &json["releaseDelayRate"]
            ),
            (
                &serde_json::json!("release"),
                &serde_json::json!(5),
                &serde_json::json!(0.5)
            )
        );
    }

    #[test]
    fn bad_release_rules_are_refused_naming_the_field() {
        let bad = |yaml: &str| -> String {
            serde_saphyr::from_str::<FaultConfig>(yaml)
                .unwrap()
                .validate()
                .expect_err(yaml)
        };
        let e = bad("{rules: [{verb: create, errorRate: 1, when: release}]}");
        assert!(e.starts_with("rules[0].when: only a DELETE"), "{e}");
        assert!(e.contains("verb create has none"), "{e}");
        let e = bad("{rules: [{verb: get}, {verb: patch, releaseDelayMs: 10}]}");
        assert!(e.starts_with("rules[1].releaseDelayMs"), "{e}");
        let e = bad("{rules: [{verb: delete, errorRate: 1, when: release, code: 503}]}");
        assert!(
            e.starts_with("rules[0].code: a failed release step answers as Milo does"),
            "{e}"
        );
        let e = bad("{rules: [{errorRate: 1, when: release, retryAfterSeconds: 1}]}");
        assert!(e.starts_with("rules[0].retryAfterSeconds"), "{e}");
        let e = bad("{rules: [{releaseDelayMs: 10, releaseDelayRate: 2}]}");
        assert!(e.starts_with("rules[0].releaseDelayRate: 2"), "{e}");
        let e = serde_saphyr::from_str::<FaultConfig>("{rules: [{when: afterRelease}]}")
            .expect_err("an unknown when");
        assert!(e.to_string().contains("afterRelease"), "{e}");
    }

    #[test]
    fn the_same_seed_replays_the_same_choices() {
        let rules = vec![
            rule("{verb: create, errorRate: 0.5, when: afterApply, outcome: reset}"),
            rule("{verb: create, commitDelayMs: 10, commitDelayRate: 0.5}"),
            rule("{verb: create, errorRate: 0.5}"),
        ];
        let run = |seed| {
            let f = faults(seed, rules.clone());
            (0..64)
                .map(|_| {
                    let d = decide(&f, "create", "ipclaims");
                    (d.failure.map(|x| (x.when, x.outcome)), d.commit_delay)
                })
                .collect::<Vec<_>>()
        };
        let a = run(7);
        assert_eq!(a, run(7));
        assert_ne!(a, run(8));
        let kinds: std::collections::HashSet<_> = a.iter().map(|(f, _)| *f).collect();
        assert_eq!(
            kinds.len(),
            3,
            "both rules and no failure all occur: {kinds:?}"
        );
        assert!(a.iter().any(|(_, d)| d.is_zero()) && a.iter().any(|(_, d)| !d.is_zero()));
    }

    #[test]
    fn rules_without_new_fields_draw_as_before() {
        // One draw per matching failing rule until one fires: a seed recorded before the new
        // fields existed still picks the same requests.
        let f = faults(
            3,
            vec![
                rule("{errorRate: 0.5}"),
                rule("{errorRate: 0.5, code: 503}"),
            ],
        );
        let mut rng = StdRng::seed_from_u64(3);
        for _ in 0..64 {
            let want = if rng.random::<f64>() < 0.5 {
                Some(500)
            } else if rng.random::<f64>() < 0.5 {
                Some(503)
            } else {
                None
            };
            let got = decide(&f, "get", "ipclaims")
                .failure
                .map(|x| x.status.0.code);
            assert_eq!(got, want);
        }
    }
}
