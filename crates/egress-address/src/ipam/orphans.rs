//! Claims whose shard is gone for good: deleted while no controller of its cell ran, so no
//! release followed (there is no finalizer, by design). How such a claim is recognised among the
//! claims listed from IPAM.
//!
//! [`marks`] and [`standing`] are pure: whose a listed claim is, and whether a cell's live shards
//! still hold it. A list is old news the moment it is read, so a claim judged an orphan here is
//! released only through the release path (`release.rs`), which reads its shard live first.

use egress_api::ipam::IPClaim;
use kube::ResourceExt;

use super::naming::{
    ANNOTATION_CELL, ANNOTATION_SHARD_NAME, ANNOTATION_SHARD_NAMESPACE, ANNOTATION_SHARD_UID,
    Naming, legacy_claim_name, naming_of,
};

/// Whose a claim is, read from its name and annotations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marks {
    /// Made by this controller in `cell` for one incarnation (`uid`) of a shard, and named as
    /// that cell names the incarnation's claim (now, or before the incarnation was in the name).
    Cell {
        cell: String,
        namespace: String,
        name: String,
        uid: String,
        naming: Naming,
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
        (Some(cell), Some(uid)) => match naming_of(claim, &cell, &namespace, &name, &uid) {
            Some(naming) => Marks::Cell {
                cell,
                namespace,
                name,
                uid,
                naming,
            },
            None => Marks::Foreign,
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
            ..
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipam::naming::{claim_name, claim_name_without_incarnation};

    const CELL: &str = "3f0c5a8e-1d2b-4c6f-9a7e-0b1c2d3e4f50";

    use crate::ipam::naming::annotated_claim as claim;

    fn made_by(cell: &str, shard: &str, uid: &str) -> IPClaim {
        claim(
            &claim_name(cell, "ns", shard, uid),
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
                uid: "u1".into(),
                naming: Naming::Incarnation,
            }
        );
        let mut older = made_by(CELL, "s", "u1");
        older.metadata.name = Some(claim_name_without_incarnation(CELL, "ns", "s"));
        assert!(matches!(
            marks(&older),
            Marks::Cell {
                naming: Naming::WithoutIncarnation,
                ..
            }
        ));
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
        renamed.metadata.name = Some(claim_name(CELL, "ns", "t", "u1"));
        let mut other_incarnation = made_by(CELL, "s", "u1");
        other_incarnation.metadata.name = Some(claim_name(CELL, "ns", "s", "u2"));
        let half = claim(
            &claim_name(CELL, "ns", "s", "u1"),
            &[
                (ANNOTATION_SHARD_NAMESPACE, "ns"),
                (ANNOTATION_SHARD_NAME, "s"),
                (ANNOTATION_CELL, CELL),
            ],
        );
        for foreign in [renamed, other_incarnation, half, claim("c", &[])] {
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
}
