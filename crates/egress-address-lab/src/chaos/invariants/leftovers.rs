//! What a run must not leave behind: a claim for a deleted shard, unless no controller was
//! acting to see the delete.

use super::*;

/// When the run deleted a shard.
#[derive(Debug, Clone, Copy)]
pub struct Deletion {
    pub at: Instant,
    /// The platform plane's resourceVersion right after the delete: a claim stored with a
    /// greater one was created after it.
    pub platform_rv: u64,
}

/// Claims left for shards that are gone.
#[derive(Debug, Clone, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Leftovers {
    /// Owed a release: a violation.
    pub owed: Vec<String>,
    /// The delete happened while no controller was acting long enough to see it (no finalizer,
    /// and the grant has no `list` on claims: by design such a claim stays until an operator
    /// deletes it).
    pub unseen_delete: Vec<String>,
    /// Created after the shard's delete (by the platform plane's resourceVersion), and seen
    /// within the late window: by a request under way when the delete came (a SIGSTOPped
    /// process that woke, a second writer, a controller killed after its create landed) while
    /// the controller that saw the delete had found no claim to release.
    pub created_after_delete: Vec<String>,
}

/// One sample of who could act: alive, ready, not stopped, and (under election) holding the
/// lease.
#[derive(Debug, Clone)]
pub struct Sample {
    pub at: Instant,
    pub acting: BTreeSet<String>,
}

/// How long one controller must keep acting after a delete for its release to be owed.
pub(super) const COVER: Duration = Duration::from_secs(8);

/// The processes acting from just before a delete at `at` through [`COVER`] after it: those that
/// owed its release. None (the delete is excused: it went unseen through no fault of the
/// controller) when no single process acted throughout, or the run ended without a sample after
/// the delete.
pub(super) fn witnesses(samples: &[Sample], at: Instant) -> BTreeSet<String> {
    let window: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.at >= at && s.at <= at + COVER)
        .collect();
    let Some(first) = window.first() else {
        return BTreeSet::new();
    };
    // The sample just before the delete counts too: the process had to be acting already.
    let before = samples.iter().rev().find(|s| s.at < at);
    let candidates: BTreeSet<String> = match before {
        Some(b) => first.acting.intersection(&b.acting).cloned().collect(),
        None => first.acting.clone(),
    };
    candidates
        .into_iter()
        .filter(|p| window.iter().all(|s| s.acting.contains(p)))
        .collect()
}

impl Observer {
    /// Claims left for shards that are gone, sorted by whether a release is owed: from the
    /// stores now.
    pub async fn leftovers(
        &self,
        planes: &Planes<'_>,
        run: &RunFacts<'_>,
    ) -> anyhow::Result<Leftovers> {
        let records = planes.records();
        let cells = planes.shards().await?;
        Ok(self.leftovers_in(planes, &records, &cells, run))
    }

    pub(super) fn leftovers_in(
        &self,
        planes: &Planes<'_>,
        records: &Records,
        cells: &[Vec<Value>],
        run: &RunFacts<'_>,
    ) -> Leftovers {
        let mut leftovers = Leftovers::default();
        for c in records.claims.values().filter(|c| !gone(Some(c))) {
            if annotation(c, ANNOTATION_SHARD_NAMESPACE) != Some(NAMESPACE) {
                continue;
            }
            let shard_uid = annotation(c, ANNOTATION_SHARD_UID).unwrap_or("");
            let shard_name = annotation(c, ANNOTATION_SHARD_NAME).unwrap_or("");
            let cell = planes
                .cells
                .iter()
                .position(|x| Some(x.id) == annotation(c, ANNOTATION_CELL));
            let live = cell.is_some_and(|i| {
                cells[i]
                    .iter()
                    .any(|s| uid_of(s) == shard_uid && name_of(s) == shard_name)
            });
            if live {
                continue;
            }
            let label = cell.map_or("?", |i| planes.cells[i].label);
            let text = format!(
                "claim {} for cell {label} {NAMESPACE}/{shard_name} (uid {shard_uid})",
                name_of(c)
            );
            let deletion = cell.and_then(|i| run.cells[i].deleted.get(shard_uid));
            let deleted_at = deletion.map(|d| d.at);
            // The platform plane's resourceVersion orders the claim's creation after the delete;
            // the time bounds how long after it a request can still have been under way.
            let late = deletion.is_some_and(|d| {
                rv_of(c) > d.platform_rv
                    && self
                        .sightings
                        .get(uid_of(c))
                        .is_some_and(|first| *first <= d.at + run.late_window)
            });
            let owed_by = match (cell, deleted_at) {
                (Some(i), Some(at)) => Some((at, witnesses(run.cells[i].samples, at))),
                _ => None,
            };
            if late {
                leftovers.created_after_delete.push(text);
            } else if owed_by.as_ref().is_some_and(|(_, w)| w.is_empty()) {
                leftovers.unseen_delete.push(text);
            } else {
                // Who should have seen the delete, and when: where the controllers' logs begin.
                let why = match owed_by {
                    Some((at, w)) => format!(
                        ", deleted at {:.1} s while {} acted throughout",
                        at.saturating_duration_since(self.start).as_secs_f64(),
                        w.into_iter().collect::<Vec<_>>().join(" and ")
                    ),
                    None => ", a shard the run did not delete".into(),
                };
                leftovers.owed.push(text + &why);
            }
        }
        leftovers
    }
}
