//! Claims whose shard is gone for good: deleted while no controller of its cell ran, so no
//! release followed (there is no finalizer, by design). How such a claim is recognised among the
//! claims listed from IPAM, and how it is released with the guards every release has.
//!
//! [`marks`] and [`standing`] are pure: whose a listed claim is, and whether a cell's live shards
//! still hold it. [`release_orphan`] is the I/O both the `audit` tool and the controller's sweep
//! release through: a live read of the shard made after the claim was listed (a list is old news
//! the moment it is read: a shard made since, with its claim, would look like an orphan), then a
//! DELETE conditional on the UID of the claim object that was judged, so a claim made since under
//! the same name (a shard recreated, its old claim replaced) is never the one deleted.

use std::time::Duration;

use egress_api::ipam::IPClaim;
use egress_api::shard::EgressShard;
use kube::{Api, Client, ResourceExt};

use super::client::{Deleted, Ipam};
use super::naming::{
    ANNOTATION_CELL, ANNOTATION_SHARD_NAME, ANNOTATION_SHARD_NAMESPACE, ANNOTATION_SHARD_UID,
    claim_name, legacy_claim_name,
};

/// Whose a claim is, read from its name and annotations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marks {
    /// Made by this controller in `cell` for one incarnation (`uid`) of a shard, and named as
    /// that cell names the shard's claim.
    Cell {
        cell: String,
        namespace: String,
        name: String,
        uid: String,
    },
    /// Made by the Go controller: named `egress-shard-ipv6.<namespace>.<name>` and annotated with
    /// the shard's namespace and name only. It names no cell, so no cell can call it its own.
    Legacy { namespace: String, name: String },
    /// Not a shard's claim, or marked in a way its name contradicts (made by hand, or by a
    /// broken tool): nobody's to release.
    Foreign,
}

/// Reads whose `claim` is.
pub fn marks(claim: &IPClaim) -> Marks {
    let get = |key: &str| claim.annotations().get(key).cloned();
    let (Some(namespace), Some(name)) =
        (get(ANNOTATION_SHARD_NAMESPACE), get(ANNOTATION_SHARD_NAME))
    else {
        return Marks::Foreign;
    };
    let claim = claim.metadata.name.as_deref().unwrap_or_default();
    match (get(ANNOTATION_CELL), get(ANNOTATION_SHARD_UID)) {
        (Some(cell), Some(uid)) if claim == claim_name(&cell, &namespace, &name) => Marks::Cell {
            cell,
            namespace,
            name,
            uid,
        },
        (None, None) if claim == legacy_claim_name(&namespace, &name) => {
            Marks::Legacy { namespace, name }
        }
        _ => Marks::Foreign,
    }
}

/// A claim judged against the live shards of one cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Made by the cell for an incarnation that no live shard of the cell is: its address is
    /// held for nothing. UIDs are never reused, so once the claim was read, a later read that
    /// finds no shard of that UID proves the incarnation gone for good.
    Orphan,
    /// Made by the cell for the shard of its name that lives.
    Held,
    /// Made by another cell: never judged, never released from here.
    OtherCell(String),
    /// Made by the Go controller: no cell is named, so none may release it as its own.
    Legacy,
    /// Nobody's (see [`Marks::Foreign`]).
    Foreign,
}

/// Judges `marks` against cell `cell`, whose live shard of a namespace/name has the UID
/// `live_uid` returns for it (`None`: no shard of that name lives).
pub fn standing(
    marks: &Marks,
    cell: &str,
    live_uid: impl FnOnce(&str, &str) -> Option<String>,
) -> Standing {
    match marks {
        Marks::Cell {
            cell: theirs,
            namespace,
            name,
            uid,
        } => {
            if theirs != cell {
                Standing::OtherCell(theirs.clone())
            } else if live_uid(namespace, name).as_deref() == Some(uid.as_str()) {
                Standing::Held
            } else {
                Standing::Orphan
            }
        }
        Marks::Legacy { .. } => Standing::Legacy,
        Marks::Foreign => Standing::Foreign,
    }
}

/// How the release of one orphan went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Freed {
    /// The claim was deleted; under `reclaimPolicy: Delete` IPAM frees its address.
    Released,
    /// The live read found the claim's incarnation alive (made after the list was read): kept.
    Held,
    /// The claim was gone already (another release got there first).
    AlreadyGone,
    /// The claim of that name is another object now (the shard was recreated and its old claim
    /// replaced): kept.
    Replaced,
}

/// Why an orphan was not released.
#[derive(Debug, thiserror::Error)]
pub enum OrphanError {
    /// The claim is not this cell's orphan to release (another cell's, the Go controller's, or
    /// one that carries no UID to make the delete conditional on).
    #[error("claim {claim:?} is not an orphan of this cell: {reason}")]
    NotAnOrphan { claim: String, reason: String },
    /// The shard could not be read live; nothing was deleted.
    #[error("read egress shard {shard:?} live (nothing was released): {source}")]
    ReadShard {
        shard: String,
        #[source]
        source: kube::Error,
    },
    /// This instance may not write now (it lost the lease); nothing was deleted.
    #[error("not the leader; claim {claim:?} was not released")]
    NotLeader { claim: String },
    /// The conditional DELETE failed.
    #[error("release orphaned claim {claim:?}: {source}")]
    Delete {
        claim: String,
        #[source]
        source: kube::Error,
    },
}

impl OrphanError {
    /// A short, stable label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            OrphanError::NotAnOrphan { .. } => "not_an_orphan",
            OrphanError::ReadShard { .. } => "read_shard",
            OrphanError::NotLeader { .. } => "not_leader",
            OrphanError::Delete { .. } => "release",
        }
    }
}

/// The UID of the shard `namespace/name` as the cell has it now (`None`: no such shard), read
/// within `timeout`.
pub async fn live_shard_uid(
    cell: &Client,
    namespace: &str,
    name: &str,
    timeout: Duration,
) -> Result<Option<String>, kube::Error> {
    let api: Api<EgressShard> = Api::namespaced(cell.clone(), namespace);
    match tokio::time::timeout(timeout, api.get_opt(name)).await {
        Ok(read) => Ok(read?.and_then(|s| s.metadata.uid)),
        Err(_) => Err(kube::Error::Service(
            format!("no answer from the cell within {timeout:?}").into(),
        )),
    }
}

/// Reads the shard `claim` was made for live (`read_live` answers with the UID of the shard of a
/// namespace/name in the cell, or `None`) and says whether the claim is still an orphan of cell
/// `cell`. Only a claim read before the call is judged: "yes" then means its incarnation is gone
/// for good.
pub async fn confirm_orphan<R, Fut>(
    claim: &IPClaim,
    cell: &str,
    read_live: R,
) -> Result<bool, OrphanError>
where
    R: FnOnce(String, String) -> Fut,
    Fut: Future<Output = Result<Option<String>, kube::Error>>,
{
    let not_ours = |reason: String| OrphanError::NotAnOrphan {
        claim: claim.name_any(),
        reason,
    };
    let marked = marks(claim);
    let (namespace, shard) = match &marked {
        Marks::Cell {
            cell: theirs,
            namespace,
            name,
            ..
        } if theirs == cell => (namespace.clone(), name.clone()),
        Marks::Cell { cell: theirs, .. } => {
            return Err(not_ours(format!("it was made by cell {theirs:?}")));
        }
        Marks::Legacy { .. } => {
            return Err(not_ours(
                "it was made by the Go controller and names no cell".into(),
            ));
        }
        Marks::Foreign => return Err(not_ours("it is marked as no shard's claim".into())),
    };
    let live = read_live(namespace.clone(), shard.clone())
        .await
        .map_err(|source| OrphanError::ReadShard {
            shard: format!("{namespace}/{shard}"),
            source,
        })?;
    Ok(standing(&marked, cell, |_, _| live) == Standing::Orphan)
}

/// Deletes exactly the claim object that was read (its UID as the precondition); nothing without
/// a UID to make the delete conditional on.
pub async fn delete_exactly(ipam: &Ipam, claim: &IPClaim) -> Result<Freed, OrphanError> {
    let name = claim.name_any();
    let Some(uid) = claim.metadata.uid.as_deref().filter(|u| !u.is_empty()) else {
        return Err(OrphanError::NotAnOrphan {
            claim: name,
            reason: "it carries no UID to make the delete conditional on".into(),
        });
    };
    let namespace = claim.namespace().unwrap_or_default();
    match ipam.delete_claim(&namespace, &name, uid).await {
        Ok(Deleted::Deleted) => Ok(Freed::Released),
        Ok(Deleted::AlreadyGone) => Ok(Freed::AlreadyGone),
        Ok(Deleted::Replaced) => Ok(Freed::Replaced),
        Err(source) => Err(OrphanError::Delete {
            claim: name,
            source,
        }),
    }
}

/// Releases `claim`, listed earlier and judged an orphan of cell `cell`: [`confirm_orphan`], then
/// [`delete_exactly`] once `may_write` allows it.
pub async fn release_orphan<R, Fut>(
    ipam: &Ipam,
    claim: &IPClaim,
    cell: &str,
    read_live: R,
    may_write: impl Fn() -> bool,
) -> Result<Freed, OrphanError>
where
    R: FnOnce(String, String) -> Fut,
    Fut: Future<Output = Result<Option<String>, kube::Error>>,
{
    if !confirm_orphan(claim, cell, read_live).await? {
        return Ok(Freed::Held);
    }
    if !may_write() {
        return Err(OrphanError::NotLeader {
            claim: claim.name_any(),
        });
    }
    delete_exactly(ipam, claim).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const CELL: &str = "3f0c5a8e-1d2b-4c6f-9a7e-0b1c2d3e4f50";

    fn claim(name: &str, pairs: &[(&str, &str)]) -> IPClaim {
        let mut c = IPClaim::new(name, Default::default());
        c.metadata.annotations = Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        );
        c
    }

    fn made_by(cell: &str, shard: &str, uid: &str) -> IPClaim {
        claim(
            &claim_name(cell, "ns", shard),
            &[
                (ANNOTATION_SHARD_NAMESPACE, "ns"),
                (ANNOTATION_SHARD_NAME, shard),
                (ANNOTATION_SHARD_UID, uid),
                (ANNOTATION_CELL, cell),
            ],
        )
    }

    #[test]
    fn marks_need_the_name_the_annotations_derive() {
        assert_eq!(
            marks(&made_by(CELL, "s", "u1")),
            Marks::Cell {
                cell: CELL.into(),
                namespace: "ns".into(),
                name: "s".into(),
                uid: "u1".into()
            }
        );
        let legacy = claim(
            "egress-shard-ipv6.ns.s",
            &[
                (ANNOTATION_SHARD_NAMESPACE, "ns"),
                (ANNOTATION_SHARD_NAME, "s"),
            ],
        );
        assert_eq!(
            marks(&legacy),
            Marks::Legacy {
                namespace: "ns".into(),
                name: "s".into()
            }
        );
        // Marks copied onto a claim of another name (by hand, or by a broken tool), half a mark,
        // or none: nobody's.
        let mut renamed = made_by(CELL, "s", "u1");
        renamed.metadata.name = Some(claim_name(CELL, "ns", "t"));
        let half = claim(
            &claim_name(CELL, "ns", "s"),
            &[
                (ANNOTATION_SHARD_NAMESPACE, "ns"),
                (ANNOTATION_SHARD_NAME, "s"),
                (ANNOTATION_CELL, CELL),
            ],
        );
        for foreign in [renamed, half, claim("c", &[])] {
            assert_eq!(marks(&foreign), Marks::Foreign, "{foreign:?}");
        }
    }

    #[test]
    fn an_orphan_is_a_claim_of_this_cell_whose_incarnation_does_not_live() {
        let of = |c: &IPClaim, live: Option<&str>| {
            standing(&marks(c), CELL, |ns, name| {
                assert_eq!(
                    (ns, name),
                    ("ns", "s"),
                    "the claim's own shard is looked up"
                );
                live.map(str::to_string)
            })
        };
        let mine = made_by(CELL, "s", "u1");
        assert_eq!(of(&mine, Some("u1")), Standing::Held);
        assert_eq!(of(&mine, None), Standing::Orphan);
        assert_eq!(
            of(&mine, Some("u2")),
            Standing::Orphan,
            "a shard recreated under the name is another incarnation"
        );
        assert_eq!(
            of(&made_by("other-cell", "s", "u1"), None),
            Standing::OtherCell("other-cell".into()),
            "another cell's claim is never an orphan of this one, whatever this cell holds"
        );
        let legacy = claim(
            "egress-shard-ipv6.ns.s",
            &[
                (ANNOTATION_SHARD_NAMESPACE, "ns"),
                (ANNOTATION_SHARD_NAME, "s"),
            ],
        );
        assert_eq!(of(&legacy, None), Standing::Legacy);
        assert_eq!(of(&claim("c", &[]), None), Standing::Foreign);
    }

    #[test]
    fn errors_have_stable_labels() {
        let e = OrphanError::NotLeader { claim: "c".into() };
        assert_eq!(e.metric_label(), "not_leader");
        assert_eq!(
            e.to_string(),
            "not the leader; claim \"c\" was not released"
        );
    }
}
