//! How a shard's claim is named and marked, and whose a claim found in IPAM is.
//!
//! A claim is named after the cell, the shard's incarnation and the shard
//! (`egress-shard-ipv6.<cell tag>.<incarnation tag>.<namespace>.<name>`): two cells serving one
//! location never derive one name, a replacement controller finds an incarnation's claim again
//! with one GET, and two incarnations of one shard never share a name. That last part is what
//! makes a release safe against Milo, whose claim DELETE reads no preconditions and removes
//! whatever claim holds the name when it lands: a DELETE sent for one incarnation can only ever
//! remove that incarnation's claim, however late it lands and whoever sends it.
//!
//! The name alone proves nothing: the annotations say which cell and which incarnation (UID) of
//! the shard a claim was made for, and only that incarnation ever uses or releases it. Claims
//! named before the incarnation was in the name ([`claim_name_without_incarnation`]) and the Go
//! controller's ([`legacy_claim_name`]) are still read, adopted by nobody new, and released;
//! neither is ever created again.

use egress_api::ipam::IPClaim;
use kube::ResourceExt;
use sha2::{Digest, Sha256};

/// Prefix of every claim this controller creates.
pub const CLAIM_NAME_PREFIX: &str = "egress-shard-ipv6";
/// Claim annotation naming the shard's namespace.
pub const ANNOTATION_SHARD_NAMESPACE: &str = "cloud.datumapis.com/egress-shard-namespace";
/// Claim annotation naming the shard.
pub const ANNOTATION_SHARD_NAME: &str = "cloud.datumapis.com/egress-shard-name";
/// Claim annotation naming the shard's UID: the incarnation the claim was made for.
pub const ANNOTATION_SHARD_UID: &str = "cloud.datumapis.com/egress-shard-uid";
/// Claim annotation naming the cell the shard lives in.
pub const ANNOTATION_CELL: &str = "cloud.datumapis.com/egress-cell";
/// Claim label carrying the cell's tag (the one in the claim's name), so that IPAM can list one
/// cell's claims itself: a label value holds at most 63 characters, and a cell identity may be
/// any operator's name, so the label carries the tag rather than the identity.
pub const LABEL_CELL_TAG: &str = "cloud.datumapis.com/egress-cell-tag";
/// The longest object name the API accepts.
pub const MAX_CLAIM_NAME_LENGTH: usize = 253;
/// Hex characters of the sha256 kept in a shortened name.
const HASH_HEX_CHARS: usize = 16;
/// Hex characters of the sha256 of the cell identity in a claim name.
const CELL_HEX_CHARS: usize = 10;
/// Hex characters of the sha256 of the shard's UID in a claim name: 64 bits, so two incarnations
/// of one shard deriving one name is as likely as two random 64-bit numbers being equal.
const INCARNATION_HEX_CHARS: usize = 16;

/// The IPClaim name for one incarnation (`uid`) of a shard of a cell:
/// `egress-shard-ipv6.<cell tag>.<incarnation tag>.<namespace>.<name>`, where the cell tag is 10
/// hex characters of sha256(cell identity) and the incarnation tag 16 hex characters of
/// sha256(shard UID) (a UID is longer than it needs to be here, and may hold characters a name
/// may not).
///
/// A namespace is a DNS label and holds no dot, so the split is unambiguous. Past 253 characters
/// the name keeps its first 236 characters (less a `-` or `.` it would end in, which no DNS
/// label may) and ends in `.` plus 16 hex characters of
/// sha256(`cell/namespace/name/uid`), so two long names sharing a prefix still differ; the cell
/// and incarnation tags come first, so a shortened name keeps them whole.
pub fn claim_name(cell: &str, shard_namespace: &str, shard_name: &str, uid: &str) -> String {
    shorten(
        format!(
            "{}{}.{shard_namespace}.{shard_name}",
            cell_claim_prefix(cell),
            incarnation_tag(uid)
        ),
        &format!("{cell}/{shard_namespace}/{shard_name}/{uid}"),
    )
}

/// The incarnation's tag in a claim name: 16 hex characters of sha256(shard UID).
pub fn incarnation_tag(uid: &str) -> String {
    hex::encode(Sha256::digest(uid.as_bytes()))[..INCARNATION_HEX_CHARS].to_string()
}

/// The name this controller gave a shard's claim before the incarnation was in the name:
/// `egress-shard-ipv6.<cell tag>.<namespace>.<name>`. Only ever read (claims made then are kept,
/// found and released), never created: every incarnation of a shard derives it, so a DELETE of
/// it cannot tell them apart.
pub fn claim_name_without_incarnation(
    cell: &str,
    shard_namespace: &str,
    shard_name: &str,
) -> String {
    shorten(
        format!("{}{shard_namespace}.{shard_name}", cell_claim_prefix(cell)),
        &format!("{cell}/{shard_namespace}/{shard_name}"),
    )
}

/// The cell's tag: 10 hex characters of sha256(cell identity), as claim names and the
/// [`LABEL_CELL_TAG`] label carry it.
pub fn cell_tag(cell: &str) -> String {
    hex::encode(Sha256::digest(cell.as_bytes()))[..CELL_HEX_CHARS].to_string()
}

/// What every claim name of the cell begins with, shortened or not, with the incarnation or
/// without (`egress-shard-ipv6.<cell tag>.`): how a full list finds the cell's claims made before
/// they carried the label.
pub fn cell_claim_prefix(cell: &str) -> String {
    format!("{CLAIM_NAME_PREFIX}.{}.", cell_tag(cell))
}

/// The name the Go controller derived: `egress-shard-ipv6.<namespace>.<name>`. Only ever read,
/// never created.
pub fn legacy_claim_name(shard_namespace: &str, shard_name: &str) -> String {
    shorten(
        format!("{CLAIM_NAME_PREFIX}.{shard_namespace}.{shard_name}"),
        &format!("{shard_namespace}/{shard_name}"),
    )
}

/// How a claim of this cell was named: whether its name alone tells its incarnation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    /// [`claim_name`]: the name is this incarnation's alone.
    Incarnation,
    /// [`claim_name_without_incarnation`]: made before the incarnation was in the name; every
    /// incarnation of the shard derives it.
    WithoutIncarnation,
}

/// How `claim` (named `name`) was named for the incarnation its annotations give, or `None` when
/// its name is neither name they derive.
pub fn naming_of(
    name: &str,
    cell: &str,
    namespace: &str,
    shard: &str,
    uid: &str,
) -> Option<Naming> {
    if name == claim_name(cell, namespace, shard, uid) {
        Some(Naming::Incarnation)
    } else if name == claim_name_without_incarnation(cell, namespace, shard) {
        Some(Naming::WithoutIncarnation)
    } else {
        None
    }
}

fn shorten(base: String, identity: &str) -> String {
    if base.len() <= MAX_CLAIM_NAME_LENGTH {
        return base;
    }
    let digest = Sha256::digest(identity.as_bytes());
    let hash = &hex::encode(digest)[..HASH_HEX_CHARS];
    let mut keep = MAX_CLAIM_NAME_LENGTH - HASH_HEX_CHARS - 1;
    // The parts come from annotations a server answered with, which may hold any character:
    // the cut falls where a character begins.
    while !base.is_char_boundary(keep) {
        keep -= 1;
    }
    // What is kept ends a label: a trailing '-' or '.' would make the name no DNS subdomain
    // (`...-.<hash>`, `...<dot><dot><hash>`), which the API refuses.
    let kept = base[..keep].trim_end_matches(['-', '.']);
    format!("{kept}.{hash}")
}

/// One incarnation of a shard of one cell: who a claim may belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Incarnation<'a> {
    pub cell: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
}

/// Whose a claim is, judged from its annotations against one incarnation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// Made by this cell for exactly this incarnation.
    This,
    /// Made by this cell for another incarnation of the same namespace/name (a shard deleted
    /// and created again under its name).
    OtherIncarnation { uid: String },
    /// Made by another cell: never adopted, never released from here.
    OtherCell { cell: String },
    /// Made before claims named their cell and incarnation (by the Go controller), for this
    /// namespace/name. Never adopted.
    Unmarked,
    /// Made for another shard, or marked by nobody.
    OtherShard { holder: String },
}

/// Judges a claim's annotations against an incarnation.
pub fn owner(claim: &IPClaim, of: &Incarnation<'_>) -> Owner {
    let get = |key: &str| claim.annotations().get(key).map(String::as_str);
    let namespace = get(ANNOTATION_SHARD_NAMESPACE);
    let name = get(ANNOTATION_SHARD_NAME);
    if namespace != Some(of.namespace) || name != Some(of.name) {
        return Owner::OtherShard {
            holder: format!(
                "{}/{}",
                namespace.unwrap_or("<none>"),
                name.unwrap_or("<none>")
            ),
        };
    }
    match (get(ANNOTATION_CELL), get(ANNOTATION_SHARD_UID)) {
        (None, None) => Owner::Unmarked,
        (Some(cell), _) if cell != of.cell => Owner::OtherCell {
            cell: cell.to_string(),
        },
        // Marked with a cell but no incarnation, or the reverse: not something this controller
        // writes, so nobody's to use.
        (None, Some(_)) | (Some(_), None) => Owner::OtherShard {
            holder: format!("{}/{} (incompletely marked)", of.namespace, of.name),
        },
        (Some(_), Some(uid)) if uid == of.uid => Owner::This,
        (Some(_), Some(uid)) => Owner::OtherIncarnation {
            uid: uid.to_string(),
        },
    }
}

/// A claim named `name` with exactly the annotations `pairs`, for the tests of what is judged
/// from a claim's marks.
#[cfg(test)]
pub(crate) fn annotated_claim(name: &str, pairs: &[(&str, &str)]) -> IPClaim {
    let mut claim = IPClaim::new(name, Default::default());
    claim.metadata.annotations = Some(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    claim
}

#[cfg(test)]
mod tests {
    use super::*;

    const CELL: &str = "3f0c5a8e-1d2b-4c6f-9a7e-0b1c2d3e4f50";

    #[test]
    fn names_carry_the_cell_and_the_incarnation() {
        let name = claim_name(CELL, "galactic-system", "worker-8b4e1647-dfw", "uid-1");
        let tag = &hex::encode(Sha256::digest(CELL.as_bytes()))[..10];
        let inc = &hex::encode(Sha256::digest(b"uid-1"))[..16];
        assert_eq!(
            name,
            format!("egress-shard-ipv6.{tag}.{inc}.galactic-system.worker-8b4e1647-dfw")
        );
        assert_ne!(
            claim_name("cell-a", "ns", "s", "u"),
            claim_name("cell-b", "ns", "s", "u"),
            "two cells never derive one name"
        );
        assert_ne!(
            claim_name(CELL, "ns", "s", "u1"),
            claim_name(CELL, "ns", "s", "u2"),
            "two incarnations of one shard never derive one name"
        );
        assert_eq!(
            claim_name_without_incarnation(CELL, "galactic-system", "worker-1"),
            format!("egress-shard-ipv6.{tag}.galactic-system.worker-1")
        );
        assert_eq!(
            legacy_claim_name("galactic-system", "worker-1"),
            "egress-shard-ipv6.galactic-system.worker-1"
        );
    }

    #[test]
    fn every_name_of_a_cell_starts_with_its_prefix_and_the_tag_fits_a_label() {
        let tag = cell_tag(CELL);
        assert_eq!(tag.len(), 10);
        assert!(tag.chars().all(|c| c.is_ascii_hexdigit()));
        let prefix = cell_claim_prefix(CELL);
        assert_eq!(prefix, format!("egress-shard-ipv6.{tag}."));
        for name in ["s", &"x".repeat(300)] {
            assert!(
                claim_name(CELL, "ns", name, "u").starts_with(&prefix),
                "{name}"
            );
            assert!(
                claim_name_without_incarnation(CELL, "ns", name).starts_with(&prefix),
                "{name}"
            );
        }
        assert!(!legacy_claim_name("ns", "s").starts_with(&prefix));
    }

    #[test]
    fn the_naming_is_read_back_from_the_annotations() {
        let new = claim_name(CELL, "ns", "s", "u1");
        let old = claim_name_without_incarnation(CELL, "ns", "s");
        assert_eq!(
            naming_of(&new, CELL, "ns", "s", "u1"),
            Some(Naming::Incarnation)
        );
        assert_eq!(
            naming_of(&old, CELL, "ns", "s", "u1"),
            Some(Naming::WithoutIncarnation)
        );
        assert_eq!(
            naming_of(&new, CELL, "ns", "s", "u2"),
            None,
            "another incarnation's name is not this one's"
        );
        assert_eq!(naming_of(&new, "other", "ns", "s", "u1"), None);
    }

    #[test]
    fn dashes_and_dots_do_not_collide_across_the_namespace_boundary() {
        assert_ne!(
            claim_name(CELL, "a-b", "c", "u"),
            claim_name(CELL, "a", "b-c", "u")
        );
    }

    #[test]
    fn exactly_253_characters_is_kept_whole() {
        let fixed = claim_name(CELL, "ns", "", "u").len();
        let name = "n".repeat(MAX_CLAIM_NAME_LENGTH - fixed);
        let got = claim_name(CELL, "ns", &name, "u");
        assert_eq!(got.len(), 253);
        assert!(got.ends_with(&format!(".ns.{name}")));
    }

    #[test]
    fn long_names_end_in_a_hash_of_cell_namespace_name_and_uid() {
        let name = "x".repeat(300);
        let got = claim_name(CELL, "galactic-system", &name, "u1");
        assert_eq!(got.len(), 253);
        let digest = hex::encode(Sha256::digest(
            format!("{CELL}/galactic-system/{name}/u1").as_bytes(),
        ));
        assert!(got.ends_with(&format!(".{}", &digest[..16])), "{got}");
        assert!(
            got.starts_with(&format!(
                "{}{}.",
                cell_claim_prefix(CELL),
                incarnation_tag("u1")
            )),
            "a shortened name keeps both tags whole: {got}"
        );
        let a = format!("{}a", "x".repeat(300));
        let b = format!("{}b", "x".repeat(300));
        assert_ne!(
            claim_name(CELL, "ns", &a, "u"),
            claim_name(CELL, "ns", &b, "u")
        );
        assert_ne!(
            claim_name("c1", "ns", &a, "u"),
            claim_name("c2", "ns", &a, "u")
        );
        assert_ne!(
            claim_name(CELL, "ns", &a, "u1"),
            claim_name(CELL, "ns", &a, "u2")
        );
        assert_eq!(legacy_claim_name("ns", &a).len(), 253);
        assert_eq!(claim_name_without_incarnation(CELL, "ns", &a).len(), 253);
    }

    fn claim_with(pairs: &[(&str, &str)]) -> IPClaim {
        annotated_claim("c", pairs)
    }

    fn incarnation(uid: &'static str) -> Incarnation<'static> {
        Incarnation {
            cell: CELL,
            namespace: "ns",
            name: "s",
            uid,
        }
    }

    #[test]
    fn a_claim_belongs_to_the_incarnation_and_cell_it_names() {
        let full = |cell: &str, uid: &str| {
            claim_with(&[
                (ANNOTATION_SHARD_NAMESPACE, "ns"),
                (ANNOTATION_SHARD_NAME, "s"),
                (ANNOTATION_CELL, cell),
                (ANNOTATION_SHARD_UID, uid),
            ])
        };
        assert_eq!(owner(&full(CELL, "u1"), &incarnation("u1")), Owner::This);
        assert_eq!(
            owner(&full(CELL, "u1"), &incarnation("u2")),
            Owner::OtherIncarnation { uid: "u1".into() }
        );
        assert_eq!(
            owner(&full("other-cell", "u1"), &incarnation("u1")),
            Owner::OtherCell {
                cell: "other-cell".into()
            },
            "another cell's claim is never ours, even with the same UID"
        );
    }

    #[test]
    fn unmarked_and_foreign_claims_are_told_apart() {
        let legacy = claim_with(&[
            (ANNOTATION_SHARD_NAMESPACE, "ns"),
            (ANNOTATION_SHARD_NAME, "s"),
        ]);
        assert_eq!(owner(&legacy, &incarnation("u1")), Owner::Unmarked);
        let other = claim_with(&[
            (ANNOTATION_SHARD_NAMESPACE, "ns"),
            (ANNOTATION_SHARD_NAME, "t"),
        ]);
        assert_eq!(
            owner(&other, &incarnation("u1")),
            Owner::OtherShard {
                holder: "ns/t".into()
            }
        );
        assert_eq!(
            owner(&claim_with(&[]), &incarnation("u1")),
            Owner::OtherShard {
                holder: "<none>/<none>".into()
            }
        );
        let half = claim_with(&[
            (ANNOTATION_SHARD_NAMESPACE, "ns"),
            (ANNOTATION_SHARD_NAME, "s"),
            (ANNOTATION_SHARD_UID, "u1"),
        ]);
        assert!(matches!(
            owner(&half, &incarnation("u1")),
            Owner::OtherShard { .. }
        ));
    }
}
