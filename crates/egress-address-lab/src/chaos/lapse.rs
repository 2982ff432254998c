//! The faults that end a leader's writes without telling it, and the bounded-time judgement that
//! finds a shard they cost its trigger.
//!
//! A leader's token grants writes until its renewal attempt's start plus the renew deadline. Two
//! faults let that moment pass while the lease stays held:
//! * **slow renewals**: every Lease update of the cell answered after a latency above the renew
//!   deadline less the retry period (and below the renew deadline): the next renewal starts only
//!   after the token it renews ran out, and lands, so the lease is never lost;
//! * **a leader stopped within its lease**: SIGSTOP for longer than the renew deadline and
//!   shorter than the lease; it wakes with its token past its deadline, the shard events of the
//!   pause waiting in its watch, and nobody else has taken the lease.
//!
//! Either way the renewal that follows is no change of leadership, so nothing re-queues what the
//! watch delivered meanwhile. Shards are made during each fault, and once it ends every shard
//! then live in the cell must be addressed within `--addressed-within-seconds`; so must every
//! shard live when all faults stop. Until a fault's judgement, the cell's leader is neither killed
//! nor stopped for longer than its lease: a new leader queues every shard, and would hide a lost
//! trigger.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::server::CellServer;
use clap::Args;

use super::invariants::{Verdict, unaddressed};

/// Options of the faults that lapse a leader's token quietly, and of their judgement.
#[derive(Args, Debug, Clone)]
pub struct LapseArgs {
    /// Slow-renewal phases per minute in each cell, under leader election (0: none).
    #[arg(long, default_value_t = 1.0, env = "CHAOS_SLOW_RENEWALS_PER_MINUTE")]
    pub slow_renewals_per_minute: f64,
    /// How long a slow-renewal phase lasts.
    #[arg(long, default_value_t = 8, env = "CHAOS_SLOW_RENEWAL_SECONDS")]
    pub slow_renewal_seconds: u64,
    /// Latency of every Lease update of the cell during a slow-renewal phase: above the renew
    /// deadline less the retry period (1500 ms), below the renew deadline (2000 ms) and
    /// --request-timeout, so every renewal lands after the token it renews ran out.
    #[arg(long, default_value_t = 1700, env = "CHAOS_SLOW_RENEWAL_LATENCY_MS")]
    pub slow_renewal_latency_ms: u64,
    /// SIGSTOPs per minute in each cell of the leader for less than its lease (0: none).
    #[arg(long, default_value_t = 2.0, env = "CHAOS_SHORT_PAUSES_PER_MINUTE")]
    pub short_pauses_per_minute: f64,
    /// How long a leader stopped within its lease stays stopped: longer than the renew deadline
    /// (2000 ms), shorter than the lease (3000 ms), so it wakes past its deadline still holding
    /// the lease.
    #[arg(long, default_value_t = 2200, env = "CHAOS_SHORT_PAUSE_MS")]
    pub short_pause_ms: u64,
    /// Every shard live when a slow-renewal phase or a short pause ends, and when the faults
    /// stop, must be addressed within this many seconds (shorter than --settle-seconds).
    #[arg(long, default_value_t = 20, env = "CHAOS_ADDRESSED_WITHIN_SECONDS")]
    pub addressed_within_seconds: u64,
}

/// The controllers' leader election, as the run starts them.
#[derive(Debug, Clone, Copy)]
pub struct Election {
    pub lease: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl LapseArgs {
    /// Checks that each fault is the one meant under `election`, with requests bounded by
    /// `request_timeout`.
    pub fn validate(&self, election: Election, request_timeout: Duration) -> anyhow::Result<()> {
        for (flag, rate) in [
            ("--slow-renewals-per-minute", self.slow_renewals_per_minute),
            ("--short-pauses-per-minute", self.short_pauses_per_minute),
        ] {
            anyhow::ensure!(
                rate.is_finite() && rate >= 0.0,
                "{flag} {rate}: not a rate (0 or more a minute)"
            );
        }
        anyhow::ensure!(
            self.slow_renewal_seconds > 0,
            "--slow-renewal-seconds 0: a phase must last at least a second"
        );
        let ms = |d: Duration| d.as_millis() as u64;
        let floor = ms(election.renew_deadline - election.retry_period);
        anyhow::ensure!(
            self.slow_renewal_latency_ms > floor,
            "--slow-renewal-latency-ms {}: must be above the renew deadline less the retry period \
             ({floor} ms), or each renewal starts before the token it renews ran out",
            self.slow_renewal_latency_ms
        );
        let ceiling = ms(election.renew_deadline).min(ms(request_timeout));
        anyhow::ensure!(
            self.slow_renewal_latency_ms < ceiling,
            "--slow-renewal-latency-ms {}: must be below the renew deadline ({} ms) and \
             --request-timeout ({} ms), or the renewal fails and the leader is told",
            self.slow_renewal_latency_ms,
            ms(election.renew_deadline),
            ms(request_timeout)
        );
        anyhow::ensure!(
            self.short_pause_ms > ms(election.renew_deadline)
                && self.short_pause_ms < ms(election.lease),
            "--short-pause-ms {}: must be longer than the renew deadline ({} ms), or the \
             leader's token never lapses, and shorter than the lease ({} ms), or another \
             controller may take over (that is --pause-ms)",
            self.short_pause_ms,
            ms(election.renew_deadline),
            ms(election.lease)
        );
        anyhow::ensure!(
            self.addressed_within_seconds > 0,
            "--addressed-within-seconds 0: retries need time"
        );
        Ok(())
    }

    pub fn addressed_within(&self) -> Duration {
        Duration::from_secs(self.addressed_within_seconds)
    }
}

/// A bounded-time judgement a cell is owed: every shard live when `cause` ended, and still
/// live as the same incarnation at `due`, is addressed by then.
#[derive(Debug, Clone)]
pub struct Owed {
    pub due: Instant,
    /// What ended, as the verdict names it.
    pub cause: String,
    /// When the fault began: a shard made since was made during it.
    pub since: Instant,
    /// Shard name -> uid, live when the fault ended.
    pub live: BTreeMap<String, String>,
}

/// A shard found unaddressed at a judgement.
struct Late {
    cell: usize,
    name: String,
    uid: String,
    /// Its entry in the verdict's violations.
    entry: usize,
}

/// The bounded-time judgements of a run: each [`Owed`] judged at its due time, each shard
/// named once.
pub struct Promptness {
    start: Instant,
    within: Duration,
    pub verdict: Verdict,
    late: Vec<Late>,
    seen: BTreeSet<(usize, String)>,
}

/// What a judgement needs of one cell.
pub struct Judged<'a> {
    pub index: usize,
    pub label: &'a str,
    pub server: &'a CellServer,
    /// Shard name -> uid of the incarnations the run keeps live now.
    pub live: &'a BTreeMap<String, String>,
    /// Shard uid -> when the run made it.
    pub born: &'a BTreeMap<String, Instant>,
}

impl Promptness {
    pub fn new(start: Instant, within: Duration) -> Promptness {
        Promptness {
            start,
            within,
            verdict: Verdict::default(),
            late: vec![],
            seen: BTreeSet::new(),
        }
    }

    /// Seconds since the run started, as the verdict stamps moments.
    fn at(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.start).as_secs_f64()
    }

    /// Judges `owed` now. A shard deleted since (or made again under its name) is no longer
    /// owed anything; one still live must carry its address.
    pub async fn judge(&mut self, cell: &Judged<'_>, owed: &Owed) -> anyhow::Result<()> {
        self.verdict.checks += 1;
        let still: BTreeMap<String, String> = owed
            .live
            .iter()
            .filter(|(name, uid)| cell.live.get(*name) == Some(*uid))
            .map(|(n, u)| (n.clone(), u.clone()))
            .collect();
        for (name, uid) in unaddressed(&cell.server.shards().await?, &still) {
            if !self.seen.insert((cell.index, uid.clone())) {
                continue;
            }
            let during = if cell.born.get(&uid).is_some_and(|b| *b >= owed.since) {
                ", made during it,"
            } else {
                ""
            };
            self.late.push(Late {
                cell: cell.index,
                name: name.clone(),
                uid: uid.clone(),
                entry: self.verdict.violations.len(),
            });
            self.verdict.violations.push(format!(
                "at {:.1} s: cell {} {}/{name} (uid {uid}){during} unaddressed {} s after {}",
                self.at(Instant::now()),
                cell.label,
                super::invariants::NAMESPACE,
                self.within.as_secs(),
                owed.cause
            ));
        }
        Ok(())
    }

    /// Says of each shard found late whether it was addressed by the end of the run.
    pub async fn annotate_end(&mut self, cells: &[Judged<'_>]) -> anyhow::Result<()> {
        for l in &self.late {
            let Some(cell) = cells.iter().find(|c| c.index == l.cell) else {
                continue;
            };
            let one = BTreeMap::from([(l.name.clone(), l.uid.clone())]);
            let note = if cell.live.get(&l.name) != Some(&l.uid) {
                "; deleted later"
            } else if unaddressed(&cell.server.shards().await?, &one).is_empty() {
                "; addressed by the end"
            } else {
                "; still unaddressed at the end"
            };
            self.verdict.violations[l.entry].push_str(note);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        lapse: LapseArgs,
    }

    fn args(extra: &[&str]) -> LapseArgs {
        Cli::try_parse_from(std::iter::once("chaos").chain(extra.iter().copied()))
            .unwrap()
            .lapse
    }

    const ELECTION: Election = Election {
        lease: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(500),
    };
    const TIMEOUT: Duration = Duration::from_secs(2);

    fn refused(extra: &[&str]) -> String {
        args(extra)
            .validate(ELECTION, TIMEOUT)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn the_defaults_lapse_the_token_and_keep_the_lease() {
        let a = args(&[]);
        a.validate(ELECTION, TIMEOUT).unwrap();
        assert!(a.slow_renewals_per_minute > 0.0 && a.short_pauses_per_minute > 0.0);
        let (rd, retry) = (2000, 500);
        // The next renewal starts after the token of the last one ran out, and each lands.
        assert!(a.slow_renewal_latency_ms + retry > rd && a.slow_renewal_latency_ms < rd);
        assert!(a.short_pause_ms > rd && a.short_pause_ms < 3000);
    }

    #[test]
    fn flags_turn_the_kinds_off_and_bad_values_are_named() {
        let off = args(&[
            "--slow-renewals-per-minute=0",
            "--short-pauses-per-minute=0",
        ]);
        off.validate(ELECTION, TIMEOUT).unwrap();
        assert_eq!(off.slow_renewals_per_minute, 0.0);
        assert_eq!(off.short_pauses_per_minute, 0.0);

        let e = refused(&["--slow-renewal-latency-ms=1500"]);
        assert!(
            e.contains("--slow-renewal-latency-ms 1500") && e.contains("1500 ms"),
            "{e}"
        );
        let e = refused(&["--slow-renewal-latency-ms=2000"]);
        assert!(e.contains("below the renew deadline (2000 ms)"), "{e}");
        let e = args(&["--slow-renewal-latency-ms=1800"])
            .validate(ELECTION, Duration::from_millis(1800))
            .unwrap_err();
        assert!(e.to_string().contains("--request-timeout (1800 ms)"), "{e}");
        let e = refused(&["--short-pause-ms=1900"]);
        assert!(e.contains("--short-pause-ms 1900"), "{e}");
        let e = refused(&["--short-pause-ms=3000"]);
        assert!(e.contains("shorter than the lease (3000 ms)"), "{e}");
        let e = refused(&["--short-pauses-per-minute=-1"]);
        assert!(e.contains("--short-pauses-per-minute -1"), "{e}");
        let e = refused(&["--slow-renewals-per-minute=NaN"]);
        assert!(e.contains("--slow-renewals-per-minute NaN"), "{e}");
        let e = refused(&["--slow-renewal-seconds=0"]);
        assert!(e.contains("--slow-renewal-seconds 0"), "{e}");
        let e = refused(&["--addressed-within-seconds=0"]);
        assert!(e.contains("--addressed-within-seconds 0"), "{e}");
    }

    #[tokio::test]
    async fn a_shard_left_unaddressed_is_named_once_with_what_it_outlived() {
        let server = CellServer::Local(Box::new(crate::fleet::world().start().await.unwrap()));
        let CellServer::Local(world) = &server else {
            unreachable!()
        };
        let cell = world.lp().cell();
        cell.ensure_namespace(super::super::invariants::NAMESPACE);
        let store = |name: &str, address: Option<&str>| -> String {
            let mut s =
                localplane::testing::shard_object(super::super::invariants::NAMESPACE, name);
            if let Some(a) = address {
                s["spec"]["shardAddressIPv6"] = serde_json::json!(a);
                s["spec"]["shardAddressIPv6ClaimRef"] = serde_json::json!({
                    "apiGroup": "ipam.miloapis.com", "kind": "IPClaim",
                    "project": localplane::testing::PLATFORM_PROJECT,
                    "namespace": localplane::testing::CLAIM_NAMESPACE, "name": format!("claim-{name}"),
                });
            }
            let stored = cell.apply_object(s).unwrap();
            stored["metadata"]["uid"].as_str().unwrap().to_string()
        };
        let t0 = Instant::now();
        let early = store("early", None);
        let since = Instant::now();
        let during = store("during", None);
        let done = store("done", Some("2001:db8::1"));
        let gone = "uid-of-a-deleted-incarnation".to_string();
        let live: BTreeMap<String, String> = [
            ("early".to_string(), early.clone()),
            ("during".to_string(), during.clone()),
            ("done".to_string(), done.clone()),
        ]
        .into();
        let born: BTreeMap<String, Instant> =
            [(early.clone(), t0), (during.clone(), since), (done, since)].into();
        let mut owed_live = live.clone();
        // Deleted (and made again) since the fault ended: owed nothing.
        owed_live.insert("recreated".into(), gone);
        let owed = Owed {
            due: Instant::now(),
            cause: "a planted lapse".into(),
            since,
            live: owed_live,
        };
        let judged = Judged {
            index: 0,
            label: "a",
            server: &server,
            live: &live,
            born: &born,
        };
        let mut p = Promptness::new(t0, Duration::from_secs(20));
        p.judge(&judged, &owed).await.unwrap();
        p.judge(&judged, &owed).await.unwrap();
        let v = &p.verdict;
        assert_eq!(v.checks, 2);
        assert_eq!(v.violations.len(), 2, "each shard once: {v:?}");
        assert!(
            v.violations.iter().any(|s| s.contains("chaos/during")
                && s.contains("made during it")
                && s.contains("unaddressed 20 s after a planted lapse")),
            "{v:?}"
        );
        assert!(
            v.violations
                .iter()
                .any(|s| s.contains("chaos/early") && !s.contains("made during")),
            "{v:?}"
        );

        store("early", Some("2001:db8::2"));
        p.annotate_end(&[judged]).await.unwrap();
        let v = &p.verdict;
        assert!(
            v.violations
                .iter()
                .any(|s| s.contains("chaos/early") && s.ends_with("; addressed by the end")),
            "{v:?}"
        );
        assert!(
            v.violations.iter().any(
                |s| s.contains("chaos/during") && s.ends_with("; still unaddressed at the end")
            ),
            "{v:?}"
        );
        server.shutdown(false).await;
    }
}
