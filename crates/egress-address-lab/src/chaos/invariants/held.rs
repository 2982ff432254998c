//! No claim a live addressed shard references is ever deleted, or replaced under its name.

use super::*;

/// The claim a live addressed shard incarnation was seen to reference.
#[derive(Debug, Clone)]
pub(super) struct Held {
    pub(super) shard: String,
    pub(super) kind: String,
    pub(super) record: String,
    /// The record's uid once it has been read (a claim made after the records were read is
    /// first seen at the next sample).
    pub(super) record_uid: Option<String>,
}

impl Observer {
    pub(super) fn sight(&mut self, records: &Records, at: Instant) {
        for c in records.claims.values() {
            self.sightings.entry(uid_of(c).to_string()).or_insert(at);
        }
    }

    /// Checks the claims held by shards seen addressed earlier, then remembers what the shards
    /// addressed now hold. `records` was read before `cells`.
    pub(super) fn track_held(
        &mut self,
        planes: &Planes<'_>,
        records: &Records,
        cells: &[Vec<Value>],
    ) -> Vec<String> {
        let live: BTreeMap<(usize, &str), &Value> = cells
            .iter()
            .enumerate()
            .flat_map(|(i, shards)| shards.iter().map(move |s| ((i, uid_of(s)), s)))
            .collect();
        let mut found = vec![];
        self.held.retain(|(i, uid), h| {
            if !live.contains_key(&(*i, uid.as_str())) {
                // The shard is gone: releasing its claim is the controller's job, not a fault.
                return false;
            }
            let now = records.get(&h.kind, &h.record);
            let lost = if gone(now) {
                Some(format!("was deleted while {} lived", h.shard))
            } else {
                let now_uid = now.map(uid_of).unwrap_or("");
                match &h.record_uid {
                    Some(was) if was != now_uid => Some(format!(
                        "was replaced (uid {was} -> {now_uid}) while {} lived",
                        h.shard
                    )),
                    _ => None,
                }
            };
            match lost {
                Some(why) => {
                    found.push(format!("{} {} {why}", h.kind, h.record));
                    false
                }
                None => {
                    if h.record_uid.is_none() {
                        h.record_uid = now
                            .filter(|r| made_for(r, &h.kind, planes.cells[*i].id, uid))
                            .map(|r| uid_of(r).to_string());
                    }
                    true
                }
            }
        });
        for ((i, uid), s) in live {
            if !is_addressed(s) || self.held.contains_key(&(i, uid.to_string())) {
                continue;
            }
            let Some((kind, record)) = ref_of(s) else {
                continue;
            };
            let record_uid = records
                .get(&kind, &record)
                .filter(|r| !gone(Some(r)) && made_for(r, &kind, planes.cells[i].id, uid))
                .map(|r| uid_of(r).to_string());
            self.held.insert(
                (i, uid.to_string()),
                Held {
                    shard: who(planes.cells[i].label, s),
                    kind,
                    record,
                    record_uid,
                },
            );
        }
        found
    }
}
