//! Fault injection: error rates and latency per verb and resource, and watch streams cut after a
//! while, drawn from a seeded RNG so a failing run can be replayed.

use std::sync::Mutex;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::locks;

/// One rule; empty selectors match everything.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FaultRule {
    /// `cell`, a project name, or unset for all planes.
    pub plane: Option<String>,
    /// A Kubernetes verb (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`) or unset.
    pub verb: Option<String>,
    /// A plural (`egressshards`), a group-qualified plural (`egressshards.network.datumapis.com`),
    /// optionally with `/status`, or unset.
    pub resource: Option<String>,
    /// Probability in [0, 1] that a matching request fails.
    pub error_rate: f64,
    /// HTTP code of the injected failure (500 if unset). 429/503/504 are retried by kube's client.
    pub code: Option<u16>,
    /// Delay added to every matching request.
    pub latency_ms: u64,
    /// `Retry-After` for injected 429/503 failures.
    pub retry_after_seconds: Option<u32>,
}

/// The whole fault configuration (also the body of `POST /localplane/faults`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FaultConfig {
    /// RNG seed; the same seed and request sequence inject the same failures.
    pub seed: Option<u64>,
    pub rules: Vec<FaultRule>,
    /// Cut every watch stream after this many seconds (the client sees a broken connection).
    pub watch_cut_after_seconds: Option<f64>,
}

pub(crate) struct Decision {
    pub latency: Duration,
    pub error: Option<ApiError>,
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
    pub fn set(&self, cfg: FaultConfig) {
        let rng = StdRng::seed_from_u64(cfg.seed.unwrap_or(0));
        *locks::lock(&self.inner) = (cfg, rng);
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

    pub(crate) fn decide(&self, plane: &str, verb: &str, group: &str, resource: &str) -> Decision {
        let mut g = locks::lock(&self.inner);
        let (cfg, rng) = &mut *g;
        let mut d = Decision {
            latency: Duration::ZERO,
            error: None,
        };
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
            {
                continue;
            }
            d.latency += Duration::from_millis(r.latency_ms);
            if d.error.is_none() && r.error_rate > 0.0 && rng.random::<f64>() < r.error_rate {
                let code = r.code.unwrap_or(500);
                let mut e = ApiError::from_code(code, format!("injected fault ({code})"));
                if let Some(s) = r.retry_after_seconds {
                    e.0.details = Some(kube::core::response::StatusDetails {
                        name: String::new(),
                        group: String::new(),
                        kind: String::new(),
                        uid: String::new(),
                        causes: vec![],
                        retry_after_seconds: s,
                    });
                }
                d.error = Some(e);
            }
        }
        d
    }
}
