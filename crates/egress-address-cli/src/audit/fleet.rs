//! The claims listed from IPAM, judged against the shards of every audited cell: which are
//! orphaned (made by an audited cell for an incarnation that no longer lives), which belong to a
//! cell that was not audited, and which were made by the Go controller.
//!
//! Pure, like [`super::verdict`]: whose a claim is comes from the controller's own rule
//! ([`egress_address::ipam::orphans`]), which its orphan sweep also judges by, and the release
//! of what is found here is I/O in `audit`.

use std::net::Ipv6Addr;

use egress_address::ipam::naming::{
    ANNOTATION_CELL, ANNOTATION_SHARD_NAME, ANNOTATION_SHARD_NAMESPACE, ANNOTATION_SHARD_UID,
    CLAIM_NAME_PREFIX,
};
use egress_address::ipam::orphans::{Marks, Standing, marks, standing};
use egress_address::ipam::spec::SCOPE_ROLE_LOCATION;
use egress_api::ipam::{CLAIM_PHASE_RELEASING, IPClaim};
use kube::ResourceExt;

use super::verdict::{Finding, Holder, ShardRef, ShardView, Verdict};

/// Where the claims were listed, and which of them concern this audit: those scoped to the
/// location, for shards in the namespace listed.
#[derive(Clone, Debug)]
pub struct Scope<'a> {
    pub project: &'a str,
    pub namespace: &'a str,
    pub location: &'a str,
    /// The shards were listed in this namespace only, so claims for shards elsewhere say nothing.
    pub shard_namespace: Option<&'a str>,
}

/// A claim found orphaned, as a release needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Orphan {
    /// Its index in the claims judged.
    pub claim: usize,
    /// Made by the Go controller (released only when asked for).
    pub legacy: bool,
    /// Why it must not be released whatever the live read says (its address is carried by a
    /// shard), if so.
    pub blocked: Option<String>,
}

/// One claim's finding, and the orphan in it if it is one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judged {
    pub finding: Finding,
    pub orphan: Option<Orphan>,
}

/// Judges every claim against `shards` (those of every audited cell, each carrying its cell);
/// `cells` are the audited cells' identities. Claims held by a live shard, claims of no shard,
/// and claims outside the scope give no finding.
pub fn judge_claims(
    claims: &[IPClaim],
    cells: &[String],
    shards: &[ShardView],
    scope: &Scope<'_>,
) -> Vec<Judged> {
    let mut judged = vec![];
    for (i, claim) in claims.iter().enumerate() {
        let marked = marks(claim);
        let (cell, namespace, name, uid) = match &marked {
            Marks::Cell {
                cell,
                namespace,
                name,
                uid,
                ..
            } => (cell.as_str(), namespace, name, Some(uid.clone())),
            Marks::Legacy { namespace, name } => ("", namespace, name, None),
            Marks::Foreign => {
                if let Some(finding) = untold(claim, scope) {
                    judged.push(Judged {
                        finding,
                        orphan: None,
                    });
                }
                continue;
            }
        };
        // Claims of other locations are other audits': even one marked with an audited cell
        // (two cells given one identity by mistake would otherwise free each other's).
        if scope.shard_namespace.is_some_and(|ns| ns != namespace)
            || location(claim) != Some(scope.location)
        {
            continue;
        }
        let address = address_of(claim);
        let mut finding = claim_finding(claim, scope, Verdict::OrphanedClaim);
        finding.cell = cell.to_string();
        finding.namespace = namespace.clone();
        finding.name = name.clone();
        finding.shard_uid = uid;
        let carriers: Vec<&ShardView> = shards
            .iter()
            .filter(|s| address.is_some() && s.address.parse::<Ipv6Addr>().ok() == address)
            .collect();
        let carried = |from: &str| {
            (!carriers.is_empty()).then(|| {
                let names: Vec<String> = carriers
                    .iter()
                    .map(|s| s.reference().seen_from(from))
                    .collect();
                format!(
                    "its address is carried by {} (set by hand?): freeing it would let IPAM hand that address out again",
                    names.join(", ")
                )
            })
        };
        if let Marks::Legacy { .. } = marked {
            let recorded = |s: &&ShardView| {
                s.holder.as_ref().is_some_and(|h| {
                    h.kind == "IPClaim"
                        && h.project == scope.project
                        && h.namespace == scope.namespace
                        && h.name == claim.name_any()
                })
            };
            let holders: Vec<ShardRef> = shards
                .iter()
                .filter(|s| recorded(s) || (s.namespace == *namespace && s.name == *name))
                .chain(carriers.iter().copied())
                .map(ShardView::reference)
                .collect();
            if let Some(h) = holders.first() {
                finding.verdict = Verdict::LegacyClaim;
                finding.detail = format!(
                    "made by the Go controller; held by (or named for) {}",
                    h.seen_from("")
                );
                judged.push(Judged {
                    finding,
                    orphan: None,
                });
            } else {
                finding.verdict = Verdict::OrphanedLegacyClaim;
                finding.detail = format!(
                    "made by the Go controller, which named no cell: no shard of the audited cells records it, is named for it or carries {:?} (give every cell of location {:?}); --release-orphaned-claims releases it only with --include-legacy-claims",
                    cidr_of(claim),
                    scope.location
                );
                judged.push(Judged {
                    finding,
                    orphan: Some(Orphan {
                        claim: i,
                        legacy: true,
                        blocked: None,
                    }),
                });
            }
            continue;
        }
        if !cells.iter().any(|c| c == cell) {
            finding.verdict = Verdict::CellNotAudited;
            finding.detail = format!(
                "made by cell {cell}, which was not given (--cell-kubeconfig): whether its shard lives is not known here, so it is not judged"
            );
            judged.push(Judged {
                finding,
                orphan: None,
            });
            continue;
        }
        let live = |ns: &str, n: &str| {
            shards
                .iter()
                .find(|s| s.cell == cell && s.namespace == ns && s.name == n)
                .map(|s| s.uid.clone())
        };
        let orphaned = standing(&marked, cell, live) == Standing::Orphan;
        if is_releasing(claim) && !orphaned {
            finding.verdict = Verdict::Releasing;
            finding.detail = format!(
                "IPAM is releasing the claim of a live shard incarnation (phase Releasing, still holding {:?}): its second step has not finished; the shard keeps its written address",
                cidr_of(claim)
            );
            judged.push(Judged {
                finding,
                orphan: None,
            });
            continue;
        }
        if !orphaned {
            continue;
        }
        if is_releasing(claim) {
            finding.verdict = Verdict::Releasing;
        }
        let blocked = carried(cell);
        finding.detail = format!(
            "the shard incarnation it was made for (uid {}) is gone but the claim still holds {:?}{}",
            finding.shard_uid.as_deref().unwrap_or_default(),
            cidr_of(claim),
            match &blocked {
                Some(why) => format!("; {why}"),
                None => "; --release-orphaned-claims releases it".into(),
            }
        );
        judged.push(Judged {
            finding,
            orphan: Some(Orphan {
                claim: i,
                legacy: false,
                blocked,
            }),
        });
    }
    judged
}

/// Whether IPAM has begun releasing the claim (Milo writes phase `Releasing` before it frees the
/// address, and leaves it there while that step keeps failing).
fn is_releasing(claim: &IPClaim) -> bool {
    claim
        .status
        .as_ref()
        .is_some_and(|s| s.phase == CLAIM_PHASE_RELEASING)
}

/// A claim in scope that looks like a shard's (it names a shard, or carries a cell's claim name)
/// but whose incarnation its name and annotations do not tell: never released automatically, so
/// it is named for an operator to look at.
fn untold(claim: &IPClaim, scope: &Scope<'_>) -> Option<Finding> {
    let a = claim.annotations();
    let names_a_shard = a.contains_key(ANNOTATION_SHARD_NAME);
    let looks_ours = claim
        .name_any()
        .starts_with(&format!("{CLAIM_NAME_PREFIX}."));
    if !(names_a_shard || looks_ours) || location(claim) != Some(scope.location) {
        return None;
    }
    let namespace = a
        .get(ANNOTATION_SHARD_NAMESPACE)
        .cloned()
        .unwrap_or_default();
    if scope
        .shard_namespace
        .is_some_and(|ns| !namespace.is_empty() && ns != namespace)
    {
        return None;
    }
    let mut finding = claim_finding(claim, scope, Verdict::UntoldIncarnation);
    finding.cell = a.get(ANNOTATION_CELL).cloned().unwrap_or_default();
    finding.namespace = namespace;
    finding.name = a.get(ANNOTATION_SHARD_NAME).cloned().unwrap_or_default();
    finding.shard_uid = a.get(ANNOTATION_SHARD_UID).cloned();
    finding.detail = format!(
        "its name and annotations do not tell which shard incarnation it was made for (marked by hand, or by another tool); it still holds {:?} and is never released automatically: delete it by hand once you know whose it is",
        cidr_of(claim)
    );
    Some(finding)
}

/// A finding about a listed claim: its address and IPAM record, with `verdict`; whose shard it
/// is, the caller says.
fn claim_finding(claim: &IPClaim, scope: &Scope<'_>, verdict: Verdict) -> Finding {
    Finding {
        cell: String::new(),
        namespace: String::new(),
        name: String::new(),
        shard_uid: None,
        address: address_of(claim).map(|a| a.to_string()).unwrap_or_default(),
        holder: Some(Holder {
            kind: "IPClaim".into(),
            project: scope.project.to_string(),
            namespace: scope.namespace.to_string(),
            name: claim.name_any(),
        }),
        record_cidr: Some(cidr_of(claim)),
        verdict,
        detail: String::new(),
        shared_with: vec![],
        release: None,
    }
}

fn location(claim: &IPClaim) -> Option<&str> {
    claim
        .spec
        .scope
        .get(SCOPE_ROLE_LOCATION)
        .map(|s| s.name.as_str())
}

fn cidr_of(claim: &IPClaim) -> String {
    claim
        .status
        .as_ref()
        .map(|s| s.allocated_cidr.clone())
        .unwrap_or_default()
}

fn address_of(claim: &IPClaim) -> Option<Ipv6Addr> {
    cidr_of(claim).strip_suffix("/128")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::verdict::tests::{holder, in_cell};
    use egress_address::ipam::naming::legacy_claim_name;
    use egress_address::ipam::spec::{ClaimRequest, desired_claim};
    use egress_api::ipam::IPClaimStatus;

    const SCOPE: Scope<'static> = Scope {
        project: "platform",
        namespace: "default",
        location: "dfw",
        shard_namespace: None,
    };

    /// The claim the controller of `cell` makes for incarnation `uid` of shard `name`, bound to
    /// `cidr`, in `location`.
    fn claim(cell: &str, name: &str, uid: &str, cidr: &str, location: &str) -> IPClaim {
        let mut c = desired_claim(&ClaimRequest {
            class_name: "class",
            claim_namespace: "default",
            location,
            cell,
            shard_namespace: "egress",
            shard_name: name,
            shard_uid: uid,
        });
        c.status = Some(IPClaimStatus {
            allocated_cidr: cidr.into(),
            ..Default::default()
        });
        c
    }

    fn legacy(name: &str, cidr: &str) -> IPClaim {
        let mut c = claim("x", name, "u", cidr, "dfw");
        c.metadata.name = Some(legacy_claim_name("egress", name));
        let a = c.metadata.annotations.as_mut().unwrap();
        a.retain(|k, _| k.ends_with("shard-namespace") || k.ends_with("shard-name"));
        c
    }

    fn verdicts(judged: &[Judged]) -> Vec<(&str, &str, Verdict)> {
        judged
            .iter()
            .map(|j| {
                (
                    j.finding.cell.as_str(),
                    j.finding.name.as_str(),
                    j.finding.verdict,
                )
            })
            .collect()
    }

    #[test]
    fn orphans_are_found_per_cell_by_incarnation() {
        let cells = ["cell-a".to_string(), "cell-b".to_string()];
        let shards = vec![
            in_cell("cell-a", "live", "2001:db8::1", Some(holder("x"))),
            in_cell("cell-b", "reborn", "", None),
        ];
        let claims = vec![
            claim("cell-a", "live", "uid-live", "2001:db8::1/128", "dfw"),
            claim("cell-a", "gone", "uid-gone", "2001:db8::2/128", "dfw"),
            // The shard of this name in cell B is a later incarnation.
            claim("cell-b", "reborn", "uid-earlier", "2001:db8::3/128", "dfw"),
            // Another location's claims are another audit's, whatever cell they name.
            claim("cell-a", "far", "uid-far", "2001:db8::5/128", "ord"),
            // Cell A has no shard "reborn": cell B's claim is not held by a shard of another cell.
            claim("cell-b", "live", "uid-live", "2001:db8::4/128", "dfw"),
        ];
        let judged = judge_claims(&claims, &cells, &shards, &SCOPE);
        assert_eq!(
            verdicts(&judged),
            [
                ("cell-a", "gone", Verdict::OrphanedClaim),
                ("cell-b", "reborn", Verdict::OrphanedClaim),
                ("cell-b", "live", Verdict::OrphanedClaim),
            ]
        );
        let gone = &judged[0];
        assert_eq!(gone.finding.shard_uid.as_deref(), Some("uid-gone"));
        assert_eq!(gone.finding.address, "2001:db8::2");
        assert_eq!(
            gone.orphan,
            Some(Orphan {
                claim: 1,
                legacy: false,
                blocked: None
            })
        );
        assert!(
            gone.finding
                .detail
                .contains("--release-orphaned-claims releases it"),
            "{}",
            gone.finding.detail
        );
    }

    #[test]
    fn a_claim_of_a_cell_not_given_is_never_an_orphan() {
        let cells = ["cell-a".to_string()];
        let claims = vec![
            claim("cell-c", "theirs", "u", "2001:db8::1/128", "dfw"),
            claim("cell-c", "far", "u", "2001:db8::2/128", "ord"),
        ];
        let judged = judge_claims(&claims, &cells, &[], &SCOPE);
        assert_eq!(
            verdicts(&judged),
            [("cell-c", "theirs", Verdict::CellNotAudited)],
            "another location's claims are another audit's"
        );
        assert_eq!(judged[0].orphan, None);
        assert!(!judged[0].finding.verdict.is_inconsistent());
    }

    #[test]
    fn an_orphan_whose_address_a_shard_carries_is_never_released() {
        let cells = ["cell-a".to_string(), "cell-b".to_string()];
        let shards = vec![in_cell("cell-b", "copy", "2001:db8::2", None)];
        let claims = vec![claim(
            "cell-a",
            "gone",
            "uid-gone",
            "2001:db8::2/128",
            "dfw",
        )];
        let judged = judge_claims(&claims, &cells, &shards, &SCOPE);
        let blocked = judged[0].orphan.as_ref().unwrap().blocked.clone().unwrap();
        assert!(blocked.contains("egress/copy in cell cell-b"), "{blocked}");
    }

    #[test]
    fn legacy_claims_are_held_by_a_shard_recording_them_or_orphaned() {
        let cells = ["cell-a".to_string()];
        let mut recorded = holder(&legacy_claim_name("egress", "old"));
        recorded.namespace = "default".into();
        let shards = vec![
            in_cell("cell-a", "old", "2001:db8::1", Some(recorded)),
            in_cell("cell-a", "renamed", "2001:db8::3", None),
        ];
        let claims = vec![
            legacy("old", "2001:db8::1/128"),
            legacy("forgotten", "2001:db8::2/128"),
            legacy("carried", "2001:db8::3/128"),
        ];
        let judged = judge_claims(&claims, &cells, &shards, &SCOPE);
        assert_eq!(
            verdicts(&judged),
            [
                ("", "old", Verdict::LegacyClaim),
                ("", "forgotten", Verdict::OrphanedLegacyClaim),
                ("", "carried", Verdict::LegacyClaim),
            ]
        );
        assert_eq!(
            judged[1].orphan,
            Some(Orphan {
                claim: 1,
                legacy: true,
                blocked: None
            })
        );
    }

    #[test]
    fn claims_for_shards_outside_the_listed_namespace_say_nothing() {
        let cells = ["cell-a".to_string()];
        let claims = vec![claim("cell-a", "gone", "u", "2001:db8::2/128", "dfw")];
        let scoped = Scope {
            shard_namespace: Some("elsewhere"),
            ..SCOPE
        };
        assert!(judge_claims(&claims, &cells, &[], &scoped).is_empty());
        assert_eq!(judge_claims(&claims, &cells, &[], &SCOPE).len(), 1);
    }
}
