//! What a chaos run reports: as JSON, and as the summary printed at its end.

use std::io::Write;

use localplane::InjectedFaults;
use serde::Serialize;

use super::cell::CellStats;
use super::faults::FaultReport;
use super::invariants::{Leftovers, Sampled, Verdict};
use egress_address_cli::table;

/// Everything a run observed; [`ChaosReport::violations`] is empty when every invariant held.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChaosReport {
    /// The API server that played the cells: `local` (localplane) or `real` (kube-apiserver
    /// and etcd behind a fault proxy).
    pub cell: String,
    pub seed: u64,
    pub fault_seconds: f64,
    pub settle_time_seconds: f64,
    pub cells: Vec<CellStats>,
    pub faults: FaultReport,
    /// The four invariants judged at every sample and at the end.
    pub invariants: Sampled,
    /// Every shard live when a lapse fault ended, or when the faults stopped, addressed within
    /// `addressed_within_seconds`: one check per judgement, each late shard named once.
    pub addressed_in_time: Verdict,
    pub addressed_within_seconds: u64,
    /// The controllers' sweep of unaddressed shards, as the run set it.
    pub controller_sweep: String,
    /// Live shards without an address at the end (or not stored as the run left them).
    pub unaddressed: Vec<String>,
    pub leftover_claims: Leftovers,
    pub log_dir: Option<String>,
}

impl ChaosReport {
    /// Every invariant that broke, one line each.
    pub fn violations(&self) -> Vec<String> {
        let mut v = vec![];
        let mut list = |what: &str, items: &[String]| {
            if !items.is_empty() {
                v.push(format!("{what} ({}): {}", items.len(), preview(items)));
            }
        };
        let i = &self.invariants;
        list(
            &format!(
                "live shards not addressed within {} s of a lapse fault or of the faults' end",
                self.addressed_within_seconds
            ),
            &self.addressed_in_time.violations,
        );
        list("live shards without an address", &self.unaddressed);
        list(
            "addresses carried by more than one live shard",
            &i.shared_addresses.violations,
        );
        list(
            "addresses no egress shard may carry",
            &i.unusable_addresses.violations,
        );
        list(
            "refs not backed by a record of that address, made for that shard",
            &i.ref_mismatches.violations,
        );
        list(
            "claims of live shards deleted",
            &i.deleted_live_claims.violations,
        );
        list("claims left for deleted shards", &self.leftover_claims.owed);
        for c in &self.cells {
            if c.write_once_rejections > 0 {
                v.push(format!(
                    "cell {}: {} write-once rejections (422 on egressshards)",
                    c.label, c.write_once_rejections
                ));
            }
        }
        v
    }

    /// The human summary: what was done, what was injected, how every invariant fared.
    pub fn write_summary(&self, out: &mut impl Write) -> std::io::Result<()> {
        writeln!(
            out,
            "chaos: {} cells, seed {}, {:.0} s of faults, settled in {:.1} s",
            self.cell, self.seed, self.fault_seconds, self.settle_time_seconds
        )?;
        writeln!(out)?;
        let rows: Vec<[String; 11]> = self
            .cells
            .iter()
            .map(|c| {
                [
                    format!("cell {}", c.label),
                    c.shards_at_start.to_string(),
                    c.live_shards.to_string(),
                    c.created.to_string(),
                    c.deleted.to_string(),
                    format!("{} ({})", c.recreated, c.recreated_while_claim_held),
                    c.controller_starts.to_string(),
                    c.kills.to_string(),
                    format!(
                        "{} ({}, {})",
                        c.pauses, c.pauses_mid_write, c.pauses_past_lease
                    ),
                    c.unexpected_exits.len().to_string(),
                    c.write_once_rejections.to_string(),
                ]
            })
            .collect();
        table::write(
            out,
            &[
                "",
                "shards at start",
                "live at end",
                "created",
                "deleted",
                "recreated (claim still held)",
                "starts",
                "SIGKILLs",
                "SIGSTOPs (mid-write, past lease)",
                "own exits",
                "422s",
            ],
            &rows,
        )?;
        writeln!(out)?;
        let rows: Vec<[String; 4]> = self
            .cells
            .iter()
            .map(|c| {
                [
                    format!("cell {}", c.label),
                    format!("{} ({})", c.slow_renewal_phases, c.slow_renewals),
                    format!("{} ({})", c.short_pauses, c.short_pauses_within_lease),
                    c.made_during_lapses.to_string(),
                ]
            })
            .collect();
        table::write(
            out,
            &[
                "",
                "slow renewal phases (renewals)",
                "SIGSTOPs within the lease (woke holding it)",
                "shards made meanwhile",
            ],
            &rows,
        )?;
        writeln!(
            out,
            "slow renewals answered after {} ms; the controllers' unaddressed sweep: {}",
            self.faults.slow_renewal_latency_ms, self.controller_sweep
        )?;
        writeln!(out)?;
        let fault_row = |plane: &str, f: &InjectedFaults| -> [String; 8] {
            [
                plane.to_string(),
                f.before_apply.status.to_string(),
                f.before_apply.reset.to_string(),
                f.before_apply.hang.to_string(),
                f.after_apply.status.to_string(),
                f.after_apply.reset.to_string(),
                f.after_apply.hang.to_string(),
                f.delayed_commits.to_string(),
            ]
        };
        let mut rows: Vec<[String; 8]> = self
            .faults
            .by_plane
            .iter()
            .map(|(p, f)| fault_row(p, f))
            .collect();
        rows.push(fault_row("all", &self.faults.total));
        table::write(
            out,
            &[
                "plane",
                "before: status",
                "before: reset",
                "before: hang",
                "applied, then: status",
                "applied, then: reset",
                "applied, then: hang",
                "delayed commits",
            ],
            &rows,
        )?;
        let watches = self
            .faults
            .shard_watches_by_cell
            .iter()
            .map(|(c, n)| format!("{c} {n}"))
            .collect::<Vec<_>>()
            .join(", ");
        writeln!(
            out,
            "latency spikes: {} of {} ms; watch streams cut after {}; shard watches: {}",
            self.faults.latency_spikes,
            self.faults.latency_ms,
            self.faults
                .watch_cut_after_seconds
                .map_or("never".to_string(), |s| format!("{s} s")),
            if watches.is_empty() { "none" } else { &watches },
        )?;
        let t = &self.faults.total;
        writeln!(
            out,
            "Milo's two-step claim delete: {} releases failed (claims left Releasing), {} held past the request timeout; {} releases landed after their shard was made again",
            t.failed_releases.status + t.failed_releases.reset + t.failed_releases.hang,
            t.delayed_releases,
            self.faults.releases_after_recreation,
        )?;
        let missing = self.faults.missing_kinds();
        if !missing.is_empty() {
            writeln!(out, "never injected: {}", missing.join(", "))?;
        }
        writeln!(out)?;
        let i = &self.invariants;
        let verdict = |what: &str, v: &Verdict| -> [String; 3] {
            [
                what.to_string(),
                v.checks.to_string(),
                if v.violations.is_empty() {
                    "held".to_string()
                } else {
                    format!(
                        "VIOLATED {}: {}",
                        v.violations.len(),
                        preview(&v.violations)
                    )
                },
            ]
        };
        let plain = |what: &str, items: &[String]| -> [String; 3] {
            [
                what.to_string(),
                "end".to_string(),
                if items.is_empty() {
                    "held".to_string()
                } else {
                    format!("VIOLATED {}: {}", items.len(), preview(items))
                },
            ]
        };
        let rejections: u64 = self.cells.iter().map(|c| c.write_once_rejections).sum();
        let rows = vec![
            verdict(
                "no two live shards (any cell) on one address",
                &i.shared_addresses,
            ),
            verdict("every address public unicast /128", &i.unusable_addresses),
            verdict(
                "every ref names a record of that address, for that shard",
                &i.ref_mismatches,
            ),
            verdict("no claim of a live shard deleted", &i.deleted_live_claims),
            verdict(
                &format!(
                    "every live shard addressed within {} s of a lapse fault, and of the faults' end",
                    self.addressed_within_seconds
                ),
                &self.addressed_in_time,
            ),
            plain("every live shard addressed at the end", &self.unaddressed),
            [
                "no write-once rejection".to_string(),
                "end".to_string(),
                if rejections == 0 {
                    "held".to_string()
                } else {
                    format!("VIOLATED {rejections}")
                },
            ],
            plain("no claim owed a release left", &self.leftover_claims.owed),
        ];
        table::write(out, &["invariant", "checks", "result"], &rows)?;
        let l = &self.leftover_claims;
        writeln!(
            out,
            "excused leftover claims: {} whose delete no controller was acting to see, {} created \
             by a late request after their shard was gone",
            l.unseen_delete.len(),
            l.created_after_delete.len()
        )?;
        for name in self.cells.iter().flat_map(|c| &c.unexpected_exits) {
            writeln!(out, "controller exited on its own: {name}")?;
        }
        if let Some(d) = &self.log_dir {
            writeln!(out, "controller logs: {d}")?;
        }
        Ok(())
    }
}

fn preview(items: &[String]) -> String {
    let mut s = items.iter().take(5).cloned().collect::<Vec<_>>().join("; ");
    if items.len() > 5 {
        s.push_str("; ...");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_broken_invariant_is_a_violation_and_shows_in_the_summary() {
        let mut r = ChaosReport::default();
        assert!(r.violations().is_empty());
        let one = |s: &str| Verdict {
            checks: 3,
            violations: vec![s.into()],
        };
        r.invariants = Sampled {
            shared_addresses: one("2001:db8::1: cell a x, cell b x"),
            unusable_addresses: one("fe80::1 is link-local"),
            ref_mismatches: one("carries 2001:db8::1 but claim holds 2001:db8::2"),
            deleted_live_claims: one("claim c was deleted while cell a x lived"),
        };
        r.unaddressed = vec!["cell a y".into()];
        r.addressed_within_seconds = 20;
        r.addressed_in_time =
            one("cell a chaos/late-3 unaddressed 20 s after the slow lease renewals");
        r.leftover_claims.owed = vec!["claim z".into()];
        r.leftover_claims.unseen_delete = vec!["claim w".into()];
        r.cells = vec![CellStats {
            label: "a".into(),
            write_once_rejections: 2,
            ..Default::default()
        }];
        let v = r.violations();
        assert_eq!(v.len(), 8, "{v:?}");
        assert!(
            v.iter()
                .any(|l| l.starts_with("live shards not addressed within 20 s")
                    && l.contains("chaos/late-3")),
            "{v:?}"
        );
        let mut out = vec![];
        r.write_summary(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.matches("VIOLATED").count(), 8, "{text}");
        assert!(
            text.contains("1 whose delete no controller was acting"),
            "{text}"
        );
        assert!(
            text.contains("never injected: before-apply status"),
            "{text}"
        );
    }
}
