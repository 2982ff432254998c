//! Releasing a claim: the one path every release takes (a shard the controller saw deleted, the
//! retry after a lost answer, the orphan sweep, the operator's `audit --release-orphaned-claims`).
//!
//! Milo's claim DELETE reads no preconditions: it removes whatever claim holds the name when it
//! lands, however late that is. So nothing here leans on one. What makes a release safe is:
//! 1. **whose** the claim is, read from its name and annotations ([`whose`]): one incarnation of
//!    one shard of this cell. A claim named with its incarnation (`naming::claim_name`) is
//!    that incarnation's alone, so a DELETE of the name can only ever remove it. A claim whose
//!    incarnation cannot be told (another cell's, one marked by nobody, the Go controller's
//!    without the word of the shard that recorded it) is never released;
//! 2. **gone**, decided from one authoritative read of the shard made for this release ([`decide`]):
//!    no shard of the name, or one of another UID (UIDs are never reused, so that incarnation is
//!    gone for good), and no live shard whose ref names the claim;
//! 3. then the DELETE, by name. The claim's UID is still sent as a precondition (a stricter server
//!    honours it); nothing depends on it.
//!
//! A DELETE that Milo answers 500 (its second step, the one that frees the address, kept
//! failing) leaves the claim `Releasing`; the caller retries with backoff, and the failure is
//! counted under its own label.

use egress_api::ipam::IPClaim;
use egress_api::shard::{AddressClaimRef, EgressShard};
use kube::{Client, ResourceExt};

use crate::connect::cell::get_shard;

use super::client::{Deleted, Ipam};
use super::holding::HolderKind;
use super::orphans::{Marks, marks};

/// The shard of a name as the cell has it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveShard {
    pub uid: String,
    /// The IPClaim its ref names, if its ref names one (an `IPAllocation` ref holds no claim).
    pub holds_claim: Option<String>,
}

impl LiveShard {
    /// What a read of the shard says for a release.
    pub fn of(shard: &EgressShard) -> LiveShard {
        LiveShard {
            uid: shard.metadata.uid.clone().unwrap_or_default(),
            holds_claim: shard
                .spec
                .shard_address_ipv6_claim_ref
                .as_ref()
                .filter(|r| r.kind == HolderKind::IPClaim.as_str())
                .map(|r| r.name.clone()),
        }
    }
}

/// Which shard incarnation a claim is, as far as a release may act on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Whose {
    /// One incarnation (`uid`) of shard `namespace/name`.
    Incarnation {
        namespace: String,
        name: String,
        uid: String,
    },
    /// Any shard of `namespace/name`: the Go controller's claim, which names no incarnation,
    /// released only on an operator's word (`--include-legacy-claims`) once no shard of the name
    /// lives in any audited cell.
    AnyOfName { namespace: String, name: String },
}

impl Whose {
    /// `namespace/name` of the shard.
    pub fn shard(&self) -> String {
        match self {
            Whose::Incarnation {
                namespace, name, ..
            }
            | Whose::AnyOfName { namespace, name } => format!("{namespace}/{name}"),
        }
    }

    /// The incarnation's UID, when one is named.
    pub fn uid(&self) -> Option<&str> {
        match self {
            Whose::Incarnation { uid, .. } => Some(uid),
            Whose::AnyOfName { .. } => None,
        }
    }
}

/// Who else vouches for a claim's incarnation, where its marks do not name one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vouch<'a> {
    /// Nobody: the claim's own name and annotations must tell.
    None,
    /// The deleted incarnation `uid` recorded this claim in its (write-once) ref: a Go
    /// controller's claim is that incarnation's.
    RecordedBy(&'a str),
    /// The operator asked for the Go controller's claims to be released
    /// (`--include-legacy-claims`): any shard of the name holds it.
    LegacyByOperator,
}

/// Whose `claim` is, for a release from cell `cell`; `Err` says why it is nobody's to release.
pub fn whose(claim: &IPClaim, cell: &str, vouch: Vouch<'_>) -> Result<Whose, String> {
    match marks(claim) {
        Marks::Cell {
            cell: theirs,
            namespace,
            name,
            uid,
            ..
        } => {
            if theirs != cell {
                return Err(format!("it was made by cell {theirs:?}"));
            }
            Ok(Whose::Incarnation {
                namespace,
                name,
                uid,
            })
        }
        Marks::Legacy { namespace, name } => match vouch {
            Vouch::RecordedBy(uid) => Ok(Whose::Incarnation {
                namespace,
                name,
                uid: uid.to_string(),
            }),
            Vouch::LegacyByOperator => Ok(Whose::AnyOfName { namespace, name }),
            Vouch::None => Err(
                "it was made by the Go controller and names neither a cell nor an incarnation"
                    .into(),
            ),
        },
        Marks::Foreign => Err(
            "its name and annotations do not tell which shard incarnation it was made for".into(),
        ),
    }
}

/// Whether a claim is still held, judged from a read of its shard made for this release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Its incarnation is gone for good, and no live shard's ref names it: release.
    Gone,
    /// The incarnation lives.
    Lives,
    /// A live shard (another incarnation) records this very claim in its ref: whatever the marks
    /// say, releasing it would take an address from a live shard.
    RecordedByLive,
}

/// Decides from `live`, the shard of the claim's name as the cell has it now (`None`: no such
/// shard), whether claim `claim_name` of `whose` may be released.
pub fn decide(whose: &Whose, claim_name: &str, live: Option<&LiveShard>) -> Decision {
    let Some(live) = live else {
        return Decision::Gone;
    };
    if live.holds_claim.as_deref() == Some(claim_name) {
        return Decision::RecordedByLive;
    }
    match whose {
        Whose::Incarnation { uid, .. } if *uid != live.uid => Decision::Gone,
        _ => Decision::Lives,
    }
}

/// How a release went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freed {
    /// The claim was deleted; under `reclaimPolicy: Delete` IPAM frees its address.
    Released,
    /// Its incarnation lives, or a live shard records it: kept.
    Held,
    /// The claim was gone already (another release got there first).
    AlreadyGone,
    /// A server that honours the UID precondition answered that the name holds another object
    /// now (Milo never does; a claim named with its incarnation is never another's).
    Replaced,
}

impl Freed {
    /// A short, stable label for metrics.
    pub fn metric_label(self) -> &'static str {
        match self {
            Freed::Released => "released",
            Freed::Held => "held",
            Freed::AlreadyGone => "already_gone",
            Freed::Replaced => "replaced",
        }
    }
}

/// Why a claim was not released.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    /// The claim is nobody's to release from here (see [`whose`]).
    #[error("claim {claim:?} is not released: {reason}")]
    NotOurs { claim: String, reason: String },
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
    /// IPAM marked the claim `Releasing` but could not free its address (its answer was a 500);
    /// the claim keeps its address until a DELETE gets through.
    #[error("IPAM could not finish releasing claim {claim:?} (it stays Releasing): {source}")]
    Stuck {
        claim: String,
        #[source]
        source: kube::Error,
    },
    /// The DELETE failed otherwise.
    #[error("release claim {claim:?}: {source}")]
    Delete {
        claim: String,
        #[source]
        source: kube::Error,
    },
}

impl ReleaseError {
    /// A short, stable label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ReleaseError::NotOurs { .. } => "not_ours",
            ReleaseError::ReadShard { .. } => "read_shard",
            ReleaseError::NotLeader { .. } => "not_leader",
            ReleaseError::Stuck { .. } => "releasing",
            ReleaseError::Delete { .. } => "delete",
        }
    }

    /// The kube error underneath, if any.
    pub fn kube_error(&self) -> Option<&kube::Error> {
        match self {
            ReleaseError::ReadShard { source, .. }
            | ReleaseError::Stuck { source, .. }
            | ReleaseError::Delete { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Whether a DELETE's failure is Milo's second step failing: the claim was marked `Releasing`
/// and stays so (`release allocation after 3 attempts: …`, a 500).
pub fn is_release_step_failure(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s)
        if s.code == 500 && s.message.contains("release allocation after"))
}

/// The shard `namespace/name` as the cell has it now (`None`: no such shard), read within
/// `timeout`.
pub async fn live_shard(
    cell: &Client,
    namespace: &str,
    name: &str,
    timeout: std::time::Duration,
) -> Result<Option<LiveShard>, kube::Error> {
    let shard = get_shard(cell, namespace, name, timeout).await?;
    Ok(shard.as_ref().map(LiveShard::of))
}

/// Reads the shard of `whose` once (`read_live` answers for a namespace/name) and decides; no
/// write. What a dry run reports.
pub async fn judge<R, Fut>(
    claim: &IPClaim,
    whose: &Whose,
    read_live: R,
) -> Result<Decision, ReleaseError>
where
    R: FnOnce(String, String) -> Fut,
    Fut: Future<Output = Result<Option<LiveShard>, kube::Error>>,
{
    let (namespace, name) = match whose {
        Whose::Incarnation {
            namespace, name, ..
        }
        | Whose::AnyOfName { namespace, name } => (namespace.clone(), name.clone()),
    };
    let live = read_live(namespace, name)
        .await
        .map_err(|source| ReleaseError::ReadShard {
            shard: whose.shard(),
            source,
        })?;
    Ok(decide(whose, &claim.name_any(), live.as_ref()))
}

/// Releases `claim` (read or listed before the call) of `whose`: one read of its shard
/// ([`judge`]), then, if its incarnation is gone and `may_write` allows it, the DELETE by name.
/// Every outcome is counted (`egress_address_claim_releases_total`).
pub async fn release<R, Fut>(
    ipam: &Ipam,
    claim: &IPClaim,
    whose: &Whose,
    read_live: R,
    may_write: impl Fn() -> bool,
) -> Result<Freed, ReleaseError>
where
    R: FnOnce(String, String) -> Fut,
    Fut: Future<Output = Result<Option<LiveShard>, kube::Error>>,
{
    let out = async {
        let name = claim.name_any();
        if judge(claim, whose, read_live).await? != Decision::Gone {
            return Ok(Freed::Held);
        }
        if !may_write() {
            return Err(ReleaseError::NotLeader { claim: name });
        }
        let namespace = claim.namespace().unwrap_or_default();
        let uid = claim.metadata.uid.as_deref().unwrap_or_default();
        match ipam.delete_claim(&namespace, &name, uid).await {
            Ok(Deleted::Deleted) => Ok(Freed::Released),
            Ok(Deleted::AlreadyGone) => Ok(Freed::AlreadyGone),
            Ok(Deleted::Replaced) => Ok(Freed::Replaced),
            Err(source) if is_release_step_failure(&source) => Err(ReleaseError::Stuck {
                claim: name,
                source,
            }),
            Err(source) => Err(ReleaseError::Delete {
                claim: name,
                source,
            }),
        }
    }
    .await;
    ipam.metrics().claim_release(match &out {
        Ok(freed) => freed.metric_label(),
        Err(e) => e.metric_label(),
    });
    out
}

/// The claim a deleted incarnation recorded in its ref, when it is an IPClaim in `project` and
/// `namespace` (where this controller claims).
pub fn recorded_claim<'r>(
    claim_ref: Option<&'r AddressClaimRef>,
    project: &str,
    namespace: &str,
) -> Option<&'r str> {
    claim_ref
        .filter(|r| {
            r.kind == HolderKind::IPClaim.as_str()
                && r.project == project
                && r.namespace == namespace
        })
        .map(|r| r.name.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipam::naming::{
        ANNOTATION_CELL, ANNOTATION_SHARD_NAME, ANNOTATION_SHARD_NAMESPACE, ANNOTATION_SHARD_UID,
        claim_name, claim_name_without_incarnation, legacy_claim_name,
    };

    const CELL: &str = "cell-a";

    use crate::ipam::naming::annotated_claim as claim;

    fn marked(name: &str, cell: &str, uid: &str) -> IPClaim {
        claim(
            name,
            &[
                (ANNOTATION_SHARD_NAMESPACE, "ns"),
                (ANNOTATION_SHARD_NAME, "s"),
                (ANNOTATION_SHARD_UID, uid),
                (ANNOTATION_CELL, cell),
            ],
        )
    }

    fn live(uid: &str, holds: Option<&str>) -> LiveShard {
        LiveShard {
            uid: uid.into(),
            holds_claim: holds.map(str::to_string),
        }
    }

    #[test]
    fn a_claim_named_with_its_incarnation_is_that_incarnations() {
        let name = claim_name(CELL, "ns", "s", "u1");
        let w = whose(&marked(&name, CELL, "u1"), CELL, Vouch::None).unwrap();
        assert_eq!(w.uid(), Some("u1"));
        let old = claim_name_without_incarnation(CELL, "ns", "s");
        let w = whose(&marked(&old, CELL, "u1"), CELL, Vouch::None).unwrap();
        assert_eq!(
            w.uid(),
            Some("u1"),
            "a claim named before the incarnation was in the name is still its incarnation's"
        );
    }

    #[test]
    fn a_claim_whose_incarnation_cannot_be_told_is_nobodys() {
        let theirs = claim_name("other", "ns", "s", "u1");
        assert!(
            whose(&marked(&theirs, "other", "u1"), CELL, Vouch::None)
                .unwrap_err()
                .contains("cell \"other\"")
        );
        // Marks that do not derive the claim's own name: copied by hand onto another claim.
        let err = whose(
            &marked(&claim_name(CELL, "ns", "s", "u2"), CELL, "u1"),
            CELL,
            Vouch::None,
        )
        .unwrap_err();
        assert!(err.contains("do not tell"), "{err}");
        let legacy = claim(
            &legacy_claim_name("ns", "s"),
            &[
                (ANNOTATION_SHARD_NAMESPACE, "ns"),
                (ANNOTATION_SHARD_NAME, "s"),
            ],
        );
        assert!(whose(&legacy, CELL, Vouch::None).is_err());
        assert_eq!(
            whose(&legacy, CELL, Vouch::RecordedBy("u9")).unwrap().uid(),
            Some("u9")
        );
        assert_eq!(
            whose(&legacy, CELL, Vouch::LegacyByOperator).unwrap(),
            Whose::AnyOfName {
                namespace: "ns".into(),
                name: "s".into()
            }
        );
    }

    #[test]
    fn gone_is_no_shard_or_another_uid_and_never_a_claim_a_live_shard_records() {
        let name = claim_name(CELL, "ns", "s", "u1");
        let w = whose(&marked(&name, CELL, "u1"), CELL, Vouch::None).unwrap();
        assert_eq!(decide(&w, &name, None), Decision::Gone);
        assert_eq!(decide(&w, &name, Some(&live("u2", None))), Decision::Gone);
        assert_eq!(decide(&w, &name, Some(&live("u1", None))), Decision::Lives);
        assert_eq!(
            decide(&w, &name, Some(&live("u2", Some(&name)))),
            Decision::RecordedByLive,
            "a live shard that records the claim keeps it, whatever its marks say"
        );
        let any = Whose::AnyOfName {
            namespace: "ns".into(),
            name: "s".into(),
        };
        assert_eq!(decide(&any, "c", None), Decision::Gone);
        assert_eq!(decide(&any, "c", Some(&live("u7", None))), Decision::Lives);
    }

    #[test]
    fn a_failed_second_step_is_told_from_other_failures() {
        let err = |code: u16, message: &str| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                message: message.into(),
                ..Default::default()
            }))
        };
        assert!(is_release_step_failure(&err(
            500,
            "release allocation after 3 attempts: connection refused"
        )));
        assert!(!is_release_step_failure(&err(500, "etcd timeout")));
        assert!(!is_release_step_failure(&err(
            409,
            "release allocation after 3 attempts"
        )));
    }

    #[test]
    fn errors_have_stable_labels() {
        let e = ReleaseError::NotLeader { claim: "c".into() };
        assert_eq!(e.metric_label(), "not_leader");
        assert_eq!(
            e.to_string(),
            "not the leader; claim \"c\" was not released"
        );
        assert_eq!(Freed::AlreadyGone.metric_label(), "already_gone");
    }
}
