//! The options of a chaos run: the flags, their one validation, and the bounded options CI runs
//! with.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::{ELECTION, FaultArgs, LapseArgs, Outcome};
use crate::cell::CellKind;
use egress_address::config::duration::parse_duration;

/// Options of `egress-address-lab chaos`.
#[derive(Args, Debug, Clone)]
pub struct ChaosArgs {
    /// Which API server plays each cell: localplane, or kube-apiserver and etcd behind a
    /// fault proxy (IPAM is localplane's either way).
    #[arg(long, value_enum, default_value_t = CellKind::Local, env = "CHAOS_CELL")]
    pub cell: CellKind,
    /// Seed for faults, kills, pauses and churn.
    #[arg(long, default_value_t = 1, env = "CHAOS_SEED")]
    pub seed: u64,
    /// Shards present at the start in each cell, under the same names in every cell.
    #[arg(long, default_value_t = 500, env = "CHAOS_SHARDS")]
    pub shards: usize,
    /// Cells claiming from one IPAM: 2, or 1.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=2), env = "CHAOS_CELLS")]
    pub cells: u8,
    /// Seconds of faults: first with leader election, then (--unelected-share of them) without.
    #[arg(long, default_value_t = 300, env = "CHAOS_SECONDS")]
    pub seconds: u64,
    /// Share of the fault time at the end that runs each cell's two controllers without leader
    /// election, two writers racing (0: election throughout).
    #[arg(long, default_value_t = 0.5, env = "CHAOS_UNELECTED_SHARE")]
    pub unelected_share: f64,
    /// Seconds allowed for settling once the faults stop.
    #[arg(long, default_value_t = 120, env = "CHAOS_SETTLE_SECONDS")]
    pub settle_seconds: u64,
    /// Reconcile concurrency of each controller.
    #[arg(long, default_value_t = 4, env = "CHAOS_CONCURRENCY")]
    pub concurrency: usize,
    #[command(flatten)]
    pub faults: FaultArgs,
    /// SIGKILLs per minute in each cell (a quarter of them kill every controller of the cell);
    /// none while the cell's leader is stopped, so that another controller takes over from it.
    #[arg(long, default_value_t = 20.0, env = "CHAOS_KILLS_PER_MINUTE")]
    pub kills_per_minute: f64,
    /// SIGSTOPs per minute in each cell: the leader (any controller without election), right
    /// after its claim for a freshly made shard landed.
    #[arg(long, default_value_t = 6.0, env = "CHAOS_PAUSES_PER_MINUTE")]
    pub pauses_per_minute: f64,
    /// How long a stopped controller stays stopped (±20%); past the 3 s lease, so it wakes
    /// after another controller took over.
    #[arg(long, default_value_t = 4500, env = "CHAOS_PAUSE_MS")]
    pub pause_ms: u64,
    /// Mean time between two churn steps (each a create in every cell, a delete, or a delete
    /// and create again under the same name).
    #[arg(long, default_value_t = 350, env = "CHAOS_CHURN_INTERVAL_MS")]
    pub churn_interval_ms: u64,
    /// Share of churn steps that delete a shard and make it again under its name (at once half
    /// the time, else within 2 s).
    #[arg(long, default_value_t = 0.4, env = "CHAOS_RECREATE_SHARE")]
    pub recreate_share: f64,
    /// Share of churn steps that delete a shard for good; the rest make new ones.
    #[arg(long, default_value_t = 0.25, env = "CHAOS_DELETE_SHARE")]
    pub delete_share: f64,
    /// Milliseconds between two samples of the invariants during the run.
    #[arg(long, default_value_t = 500, env = "CHAOS_CHECK_INTERVAL_MS")]
    pub check_interval_ms: u64,
    /// Run every controller with its orphan sweep at this interval
    /// (`--release-orphaned-claims-every`); unset, the sweep is off.
    #[arg(long, env = "CHAOS_RELEASE_ORPHANED_CLAIMS_EVERY")]
    pub release_orphaned_claims_every: Option<String>,
    #[command(flatten)]
    pub lapse: LapseArgs,
    /// The controllers' --unaddressed-sweep-interval, given by its environment variable so that
    /// a controller without the sweep starts too (it ignores the variable). The default 0 turns
    /// the sweep off: it would queue a shard whose trigger was lost, and the bounded-time
    /// judgement is of the triggers themselves.
    #[arg(long, default_value = "0", value_parser = parse_duration, env = "CHAOS_CONTROLLER_SWEEP_INTERVAL")]
    pub controller_sweep_interval: Duration,
    /// The egress-address-controller binary (default: next to this executable).
    #[arg(long, env = "CHAOS_CONTROLLER_BIN")]
    pub controller_bin: Option<PathBuf>,
    /// Keep the controllers' logs and print where they are.
    #[arg(long)]
    pub keep_logs: bool,
}

impl ChaosArgs {
    pub(super) fn validate(&self) -> anyhow::Result<()> {
        self.faults.validate()?;
        anyhow::ensure!(
            (0.0..=1.0).contains(&(self.recreate_share + self.delete_share))
                && self.recreate_share >= 0.0
                && self.delete_share >= 0.0,
            "--recreate-share and --delete-share must be shares that add up to at most 1"
        );
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.unelected_share),
            "--unelected-share {}: not a share in [0, 1]",
            self.unelected_share
        );
        anyhow::ensure!(
            self.kills_per_minute >= 0.0 && self.pauses_per_minute >= 0.0,
            "--kills-per-minute and --pauses-per-minute cannot be negative"
        );
        anyhow::ensure!(
            self.churn_interval_ms > 0 && self.check_interval_ms > 0,
            "--churn-interval-ms and --check-interval-ms must be positive"
        );
        let timeout = Duration::from_millis(self.faults.request_timeout_ms()?);
        self.lapse.validate(ELECTION, timeout)?;
        anyhow::ensure!(
            self.lapse.addressed_within_seconds < self.settle_seconds,
            "--addressed-within-seconds {} must be shorter than --settle-seconds {} (the settle \
             waits for the judgement of the end)",
            self.lapse.addressed_within_seconds,
            self.settle_seconds
        );
        Ok(())
    }
}

/// The bounded options the CI test runs with: two cells of 60 shards, 50 s of faults at higher
/// rates than the defaults (so each kind strikes in a short run; the elected 70% holds a long
/// pause, the first 60 shards worked off, and then a lapse fault in each cell), at most 30 s to
/// settle.
pub fn ci_options(seed: u64) -> ChaosArgs {
    ChaosArgs {
        cell: CellKind::Local,
        seed,
        shards: 60,
        cells: 2,
        seconds: 50,
        unelected_share: 0.3,
        settle_seconds: 30,
        concurrency: 4,
        faults: FaultArgs {
            before_apply_rate: 0.05,
            conflict_rate: 0.05,
            after_apply_rate: 0.2,
            after_apply_outcomes: vec![Outcome::Status, Outcome::Reset, Outcome::Hang],
            delete_commit_delay_rate: 0.4,
            release_failure_rate: 0.1,
            release_delay_rate: 0.15,
            update_commit_delay_rate: 0.05,
            commit_delay_ms: 3000,
            latency_ms: 400,
            watch_cut_seconds: 3.0,
            request_timeout: "2s".into(),
        },
        kills_per_minute: 15.0,
        pauses_per_minute: 10.0,
        pause_ms: 5000,
        churn_interval_ms: 300,
        recreate_share: 0.4,
        delete_share: 0.25,
        check_interval_ms: 400,
        release_orphaned_claims_every: None,
        lapse: LapseArgs {
            slow_renewals_per_minute: 2.0,
            slow_renewal_seconds: 5,
            slow_renewal_latency_ms: 1700,
            short_pauses_per_minute: 4.0,
            short_pause_ms: 2200,
            addressed_within_seconds: 20,
        },
        controller_sweep_interval: Duration::ZERO,
        controller_bin: None,
        keep_logs: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::LEASE;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        chaos: ChaosArgs,
    }

    #[test]
    fn the_defaults_run_two_cells_with_every_disruption() {
        let a = Cli::try_parse_from(["chaos"]).unwrap().chaos;
        a.validate().unwrap();
        assert_eq!(a.cells, 2);
        assert!(a.kills_per_minute > 0.0 && a.pauses_per_minute > 0.0);
        assert!(a.recreate_share > 0.0 && a.delete_share > 0.0);
        assert!(
            a.pause_ms * 4 / 5 > LEASE.as_millis() as u64,
            "a stopped leader wakes after its lease ran out"
        );
        ci_options(7).validate().unwrap();
        assert!(Cli::try_parse_from(["chaos", "--cells=3"]).is_err());
        let bad = Cli::try_parse_from(["chaos", "--recreate-share=0.8", "--delete-share=0.5"])
            .unwrap()
            .chaos;
        assert!(bad.validate().is_err());
        let bad = Cli::try_parse_from(["chaos", "--unelected-share=1.5"])
            .unwrap()
            .chaos;
        assert!(bad.validate().is_err());
    }

    #[test]
    fn the_lapse_faults_are_judged_before_the_settle_ends_with_the_sweep_off() {
        let a = Cli::try_parse_from(["chaos"]).unwrap().chaos;
        assert!(a.lapse.addressed_within_seconds < a.settle_seconds);
        assert_eq!(a.controller_sweep_interval, Duration::ZERO);
        let ci = ci_options(7);
        assert!(ci.lapse.addressed_within_seconds < ci.settle_seconds);
        assert!(ci.lapse.slow_renewals_per_minute > 0.0 && ci.lapse.short_pauses_per_minute > 0.0);
        // The elected part holds the first long pause (at most 4 s + 6 s), then a slow-renewal
        // phase and a second to spare.
        let elected = ci.seconds as f64 * (1.0 - ci.unelected_share);
        let pause_end = 4.0 + ci.pause_ms as f64 * 1.2 / 1000.0;
        assert!(pause_end + ci.lapse.slow_renewal_seconds as f64 + 1.0 < elected);

        let e = Cli::try_parse_from(["chaos", "--addressed-within-seconds=120"])
            .unwrap()
            .chaos
            .validate()
            .unwrap_err();
        assert!(
            e.to_string().contains(
                "--addressed-within-seconds 120 must be shorter than --settle-seconds 120"
            ),
            "{e}"
        );
        let e = Cli::try_parse_from(["chaos", "--short-pause-ms=5000"])
            .unwrap()
            .chaos
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("--short-pause-ms 5000"), "{e}");
        let sweep = Cli::try_parse_from(["chaos", "--controller-sweep-interval=90s"])
            .unwrap()
            .chaos;
        assert_eq!(sweep.controller_sweep_interval, Duration::from_secs(90));
        let e = Cli::try_parse_from(["chaos", "--controller-sweep-interval=soon"])
            .err()
            .unwrap();
        assert!(e.to_string().contains("--controller-sweep-interval"), "{e}");
    }
}
