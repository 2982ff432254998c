//! The deleted incarnations whose claims are still to be released, and the release watermark a
//! leader publishes so standbys drop what it released.

use super::*;

/// A view of [`ShardMemory`]; see the module documentation.
pub struct Releases<'a>(pub(super) &'a ShardMemory);

impl Releases<'_> {
    /// Records that the cache lost a shard: the live object is gone, and what it carried is kept
    /// until its claim is released. `deleted_at` is the DELETED event's resourceVersion, when
    /// the deletion was seen as an event.
    pub fn observe_deleted(
        &self,
        key: &ShardKey,
        last: Option<&EgressShard>,
        deleted_at: Option<&str>,
    ) {
        let mut inner = self.0.lock();
        inner.seq += 1;
        let seq = inner.seq;
        if let Some(rv) = deleted_at {
            inner.remember_deletion(seq, rv);
        }
        let record = inner.records.entry(key.clone()).or_default();
        let old_state = record.state.take();
        let old_address = record.address.take();
        let more = record.more_mut();
        more.written_over = None;
        more.said.clear();
        let gone = Gone {
            uid: last.and_then(|s| s.metadata.uid.clone()),
            claim_ref: last.and_then(|s| s.spec.shard_address_ipv6_claim_ref.clone()),
            seq,
        };
        if !more
            .gone
            .iter()
            .any(|g| g.uid.is_some() && g.uid == gone.uid)
        {
            more.gone.push(gone);
        }
        inner.move_holder(key, old_address, None);
        inner.count(old_state, None, &self.0.metrics);
    }

    /// The deleted incarnations of `key` whose claims may still be held.
    pub fn gone(&self, key: &ShardKey) -> Vec<Gone> {
        self.0
            .lock()
            .records
            .get(key)
            .map(|r| r.more().gone.clone())
            .unwrap_or_default()
    }

    /// Every key with a deletion still to release (for a new leader).
    pub fn keys_with_deletions(&self) -> Vec<ShardKey> {
        self.0
            .lock()
            .records
            .iter()
            .filter(|(_, r)| !r.more().gone.is_empty())
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// A deleted incarnation's claim was released (or found not to be held).
    pub fn released(&self, key: &ShardKey, gone: &Gone) {
        let mut inner = self.0.lock();
        if let Some(more) = inner.records.get_mut(key).and_then(|r| r.more.as_mut()) {
            more.gone.retain(|g| g != gone);
        }
        inner.tidy(key);
    }

    /// Notes that the shard watch begins a full list: a deletion before it may have gone unseen
    /// (a shard made and deleted while the watch was down), so this instance's watermark speaks
    /// only of deletions after it.
    pub fn list_started(&self) {
        let mut inner = self.0.lock();
        inner.list_began = inner.seq;
    }

    /// What a leader's lease says of releases, in one pass over the memory: the watermark, so
    /// standbys can let go of deletions (the DELETED events from the first since the shard watch
    /// last began a list through the newest before the oldest deletion still to release; `None`
    /// before any, or while the oldest pending one comes first), and the deletions still to
    /// release, oldest first, at most `limit`, for whoever leads next.
    pub fn for_lease(&self, limit: usize) -> (Option<Watermark>, Vec<HandedOver>) {
        let inner = self.0.lock();
        let mut pending: Vec<(&ShardKey, &Gone)> = inner
            .records
            .iter()
            .flat_map(|(k, r)| r.more().gone.iter().map(move |g| (k, g)))
            .collect();
        pending.sort_by_key(|(_, g)| g.seq);
        let oldest_pending = pending.first().map(|(_, g)| g.seq);
        let mut seen = inner
            .deletions
            .iter()
            .filter(|(seq, _)| *seq > inner.list_began);
        let watermark = seen.clone().next().and_then(|(_, from)| {
            let (_, through) = seen.rfind(|(seq, _)| oldest_pending.is_none_or(|p| *seq < p))?;
            Some(Watermark {
                from: from.clone(),
                through: through.clone(),
            })
        });
        let handed = pending
            .into_iter()
            .take(limit)
            .map(|(k, g)| HandedOver {
                namespace: k.namespace.to_string(),
                name: k.name.to_string(),
                uid: g.uid.clone(),
                claim_ref: g.claim_ref.clone(),
            })
            .collect();
        (watermark, handed)
    }

    /// Drops every deletion this instance saw from the DELETED event `w.from` through `w.through`,
    /// which the leader reports released. Outside that span the leader may not have seen a
    /// deletion at all (one before its watch began), so nothing there is dropped; and a span whose
    /// ends this instance never saw drops nothing.
    pub fn drop_released(&self, w: &Watermark) -> usize {
        let mut inner = self.0.lock();
        let (Some(&from), Some(&upto)) = (
            inner.deletion_seq.get(&w.from),
            inner.deletion_seq.get(&w.through),
        ) else {
            return 0;
        };
        let released = |g: &Gone| (from..=upto).contains(&g.seq);
        let mut dropped = 0;
        let keys: Vec<ShardKey> = inner
            .records
            .iter()
            .filter(|(_, r)| r.more().gone.iter().any(released))
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            if let Some(more) = inner.records.get_mut(&key).and_then(|r| r.more.as_mut()) {
                let before = more.gone.len();
                more.gone.retain(|g| !released(g));
                dropped += before - more.gone.len();
            }
            inner.tidy(&key);
        }
        dropped
    }

    /// Takes on the deletions a former leader handed over and had not released (it may have
    /// died before it could): each incarnation already remembered is kept once. Returns the
    /// ones that were new, for [`Releases::give_back`].
    pub fn take_over(&self, handed: Vec<HandedOver>) -> Vec<(ShardKey, Gone)> {
        let mut inner = self.0.lock();
        let mut taken = Vec::new();
        for h in handed {
            let key = ShardKey::interned(&h.namespace, &h.name);
            inner.seq += 1;
            let gone = Gone {
                uid: h.uid,
                claim_ref: h.claim_ref,
                seq: inner.seq,
            };
            let more = inner.records.entry(key.clone()).or_default().more_mut();
            let known = more
                .gone
                .iter()
                .any(|g| g.uid == gone.uid && (g.uid.is_some() || g.claim_ref == gone.claim_ref));
            if !known {
                more.gone.push(gone.clone());
                taken.push((key, gone));
            }
        }
        taken
    }

    /// Forgets what [`Releases::take_over`] took on: another instance won the lease and took
    /// the same.
    pub fn give_back(&self, taken: Vec<(ShardKey, Gone)>) {
        for (key, gone) in taken {
            self.released(&key, &gone);
        }
    }
}

/// A leader's word that every deletion it saw from the DELETED event `from` through the DELETED
/// event `through` (resourceVersions) is released, and that it saw every deletion in between.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watermark {
    pub from: String,
    pub through: String,
}

/// A deleted incarnation whose claim is still to release, as one leader hands it to the next
/// (in the lease): a successor that started after the delete never saw it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HandedOver {
    pub namespace: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_ref: Option<AddressClaimRef>,
}
