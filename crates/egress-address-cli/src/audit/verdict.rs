//! Attribution verdicts: given the shards of one or more cells and what IPAM says about the
//! records their refs name, decide for each shard whether its address is traceable to a record
//! made for it and held by nobody else, in any of the cells.
//!
//! Pure: the I/O (listing shards, GETting records) happens in `audit`, so every verdict is tested
//! without a server. The claims listed from IPAM are judged in [`super::fleet`].

use std::collections::BTreeMap;
use std::net::Ipv6Addr;

use serde::Serialize;

/// What a shard says about its address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardView {
    /// The identity of the cell the shard lives in, as the controller reads it.
    pub cell: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// `spec.shardAddressIPv6`, empty when unassigned.
    pub address: String,
    /// `spec.shardAddressIPv6ClaimRef`, if any.
    pub holder: Option<Holder>,
    pub deleting: bool,
}

impl ShardView {
    /// The shard as another finding names it.
    pub fn reference(&self) -> ShardRef {
        ShardRef {
            cell: self.cell.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

/// A shard of one cell, as a finding names another.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardRef {
    pub cell: String,
    pub namespace: String,
    pub name: String,
}

impl ShardRef {
    /// `namespace/name`, and the cell when it is not `from`'s.
    pub fn seen_from(&self, from: &str) -> String {
        if self.cell == from {
            format!("{}/{}", self.namespace, self.name)
        } else {
            format!("{}/{} in cell {}", self.namespace, self.name, self.cell)
        }
    }
}

/// The IPAM record a shard's ref names.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Holder {
    pub kind: String,
    pub project: String,
    pub namespace: String,
    pub name: String,
}

/// Whom a claim says it was made for: its annotations, each `None` when absent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimMarks {
    pub cell: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub uid: Option<String>,
}

impl ClaimMarks {
    fn is_empty(&self) -> bool {
        *self == ClaimMarks::default()
    }

    /// What about these marks says the claim was made for another shard than `s`, if anything.
    fn against(&self, s: &ShardView) -> Option<String> {
        if self.is_empty() {
            // Made by hand for a hand-made assignment: nothing claims it is anyone else's.
            return None;
        }
        let shard = match (&self.namespace, &self.name) {
            (Some(ns), Some(n)) => format!("{ns}/{n}"),
            _ => "no shard".to_string(),
        };
        let differs = |mark: &Option<String>, own: &str| mark.as_deref().is_some_and(|m| m != own);
        let foreign = shard != format!("{}/{}", s.namespace, s.name)
            || differs(&self.cell, &s.cell)
            || differs(&self.uid, &s.uid)
            // One of cell and UID without the other is not a mark this controller writes.
            || self.cell.is_some() != self.uid.is_some();
        if !foreign {
            return None;
        }
        let made_for = match (&self.cell, &self.uid) {
            (None, None) => format!("shard {shard} (by the Go controller, which named no cell)"),
            (cell, uid) => format!(
                "cell {} shard {shard} uid {}",
                cell.as_deref().unwrap_or("-"),
                uid.as_deref().unwrap_or("-")
            ),
        };
        Some(format!(
            "was made for {made_for}, not for this shard (cell {}, uid {})",
            s.cell, s.uid
        ))
    }
}

/// What reading a holder from IPAM returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The record exists; its `status.allocatedCIDR` (possibly empty), and whom it says it was
    /// made for (a claim's annotations; nothing for an allocation).
    Found {
        allocated_cidr: String,
        marks: ClaimMarks,
    },
    /// IPAM answered 404 for it.
    Missing,
    /// IPAM could not be asked (network, auth, ...): no verdict about the record.
    Failed(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// The address equals what the record it names holds, and the record was made for it.
    Consistent,
    /// An address with no ref (e.g. hand-set): legal, but nothing says where it came from.
    Unattributable,
    /// No address yet (with or without a ref whose allocation has not resolved).
    Pending,
    /// The ref names a record IPAM does not have.
    ClaimMissing,
    /// The record holds a different address than the shard carries.
    AddressMismatch,
    /// The record holds the shard's address but was made for another shard: another cell,
    /// another namespace/name, or another incarnation (a ref and address copied by hand).
    ForeignClaim,
    /// Another shard, of this cell or another audited one, carries the same address.
    AddressShared,
    /// IPAM could not be read for this shard.
    Unknown,
    /// A claim made by an audited cell for a shard incarnation that no longer exists: its
    /// address is held for nothing.
    OrphanedClaim,
    /// A claim of the Go controller in the location that no shard of an audited cell records,
    /// carries the address of, or is named for.
    OrphanedLegacyClaim,
    /// A claim of the Go controller a shard of an audited cell still holds: fine, listed so a
    /// migration can be followed.
    LegacyClaim,
    /// A claim of a cell that was not given (`--cell-kubeconfig`): whether its shard lives is not
    /// known here, so it is never called an orphan.
    CellNotAudited,
    /// A claim IPAM has begun releasing and not finished (phase `Releasing`: its second step
    /// failed); it still holds its address.
    Releasing,
    /// A claim marked for a shard whose incarnation its name and annotations do not tell: never
    /// released automatically.
    UntoldIncarnation,
}

impl Verdict {
    /// Whether this verdict makes the audit fail.
    pub fn is_inconsistent(self) -> bool {
        matches!(
            self,
            Verdict::ClaimMissing
                | Verdict::AddressMismatch
                | Verdict::ForeignClaim
                | Verdict::AddressShared
                | Verdict::Unknown
                | Verdict::OrphanedClaim
                | Verdict::OrphanedLegacyClaim
                | Verdict::Releasing
                | Verdict::UntoldIncarnation
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Consistent => "consistent",
            Verdict::Unattributable => "unattributable",
            Verdict::Pending => "pending",
            Verdict::ClaimMissing => "claim-missing",
            Verdict::AddressMismatch => "address-mismatch",
            Verdict::ForeignClaim => "foreign-claim",
            Verdict::AddressShared => "address-shared",
            Verdict::Unknown => "unknown",
            Verdict::OrphanedClaim => "orphaned-claim",
            Verdict::OrphanedLegacyClaim => "orphaned-legacy-claim",
            Verdict::LegacyClaim => "legacy-claim",
            Verdict::CellNotAudited => "cell-not-audited",
            Verdict::Releasing => "releasing",
            Verdict::UntoldIncarnation => "untold-incarnation",
        }
    }
}

/// What `--release-orphaned-claims` did with an orphaned claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReleaseAction {
    /// Deleted: IPAM frees the address.
    Released,
    /// A dry run (no `--yes`): the live read found it still orphaned; nothing was deleted.
    WouldRelease,
    /// Not deleted; the reason says why.
    Left,
}

impl ReleaseAction {
    pub fn as_str(self) -> &'static str {
        match self {
            ReleaseAction::Released => "released",
            ReleaseAction::WouldRelease => "would release (dry run)",
            ReleaseAction::Left => "left",
        }
    }
}

/// A release's outcome for one finding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Release {
    pub action: ReleaseAction,
    pub reason: String,
}

/// One line of the audit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// The cell of the shard, or the cell a claim is marked with (empty for a claim of the Go
    /// controller, which names none).
    pub cell: String,
    pub namespace: String,
    pub name: String,
    /// The shard's UID, or the incarnation a claim was made for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard_uid: Option<String>,
    pub address: String,
    pub holder: Option<Holder>,
    /// What the holder record holds, when it was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record_cidr: Option<String>,
    pub verdict: Verdict,
    pub detail: String,
    /// The other shards carrying the address (`address-shared`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shared_with: Vec<ShardRef>,
    /// What `--release-orphaned-claims` did with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub release: Option<Release>,
}

impl Finding {
    /// Whether this finding makes the audit fail: an inconsistent verdict, unless it was an
    /// orphan and was released.
    pub fn fails(&self) -> bool {
        self.verdict.is_inconsistent()
            && self
                .release
                .as_ref()
                .is_none_or(|r| r.action != ReleaseAction::Released)
    }
}

/// Decides every shard's verdict, across all the cells the shards come from. `lookup` answers
/// for each distinct holder.
pub fn judge(shards: &[ShardView], lookup: &BTreeMap<Holder, Lookup>) -> Vec<Finding> {
    let mut by_address: BTreeMap<Ipv6Addr, Vec<usize>> = BTreeMap::new();
    for (i, s) in shards.iter().enumerate() {
        if let Ok(a) = s.address.parse::<Ipv6Addr>() {
            by_address.entry(a).or_default().push(i);
        }
    }
    shards
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let (verdict, detail, record_cidr) = by_holder(s, lookup);
            let mut f = Finding {
                cell: s.cell.clone(),
                namespace: s.namespace.clone(),
                name: s.name.clone(),
                shard_uid: Some(s.uid.clone()).filter(|u| !u.is_empty()),
                address: s.address.clone(),
                holder: s.holder.clone(),
                record_cidr,
                verdict,
                detail,
                shared_with: vec![],
                release: None,
            };
            let others: Vec<ShardRef> = s
                .address
                .parse::<Ipv6Addr>()
                .ok()
                .map(|a| by_address[&a].iter().filter(|j| **j != i))
                .into_iter()
                .flatten()
                .map(|j| shards[*j].reference())
                .collect();
            if !others.is_empty() {
                let named: Vec<String> = others.iter().map(|o| o.seen_from(&s.cell)).collect();
                let mut detail = format!("{} is also carried by {}", s.address, named.join(", "));
                // Which of the twins is the rightful one is what the operator must decide: say
                // what this one's own record says.
                if f.verdict.is_inconsistent() {
                    detail.push_str(&format!("; and {}", f.detail));
                } else if f.verdict == Verdict::Consistent {
                    detail.push_str("; the record this shard names holds it and was made for it");
                }
                f.verdict = Verdict::AddressShared;
                f.detail = detail;
                f.shared_with = others;
            }
            f
        })
        .collect()
}

/// A shard's verdict from its own ref alone: verdict, detail and the record's CIDR if read.
fn by_holder(
    s: &ShardView,
    lookup: &BTreeMap<Holder, Lookup>,
) -> (Verdict, String, Option<String>) {
    let h = match (&s.address[..], &s.holder) {
        ("", None) => return (Verdict::Pending, "no address assigned yet".into(), None),
        ("", Some(h)) => {
            return (
                Verdict::Pending,
                format!(
                    "{} {:?} is recorded but no address is assigned yet",
                    h.kind, h.name
                ),
                None,
            );
        }
        (_, None) => {
            return (
                Verdict::Unattributable,
                "the address carries no claim ref (set by hand?)".into(),
                None,
            );
        }
        (_, Some(h)) => h,
    };
    match lookup.get(h) {
        None => (
            Verdict::Unknown,
            format!("{} {:?} was not read", h.kind, h.name),
            None,
        ),
        Some(Lookup::Failed(e)) => (
            Verdict::Unknown,
            format!("reading {} {:?}: {e}", h.kind, h.name),
            None,
        ),
        Some(Lookup::Missing) => (
            Verdict::ClaimMissing,
            format!(
                "{} {:?} does not exist in project {:?} namespace {:?}",
                h.kind, h.name, h.project, h.namespace
            ),
            None,
        ),
        Some(Lookup::Found {
            allocated_cidr,
            marks,
        }) => {
            let record = Some(allocated_cidr.clone());
            if !holds(allocated_cidr, s.address.parse().ok()) {
                return (
                    Verdict::AddressMismatch,
                    format!(
                        "the shard carries {} but {} {:?} holds {:?}",
                        s.address, h.kind, h.name, allocated_cidr
                    ),
                    record,
                );
            }
            match marks.against(s) {
                Some(problem) => (
                    Verdict::ForeignClaim,
                    format!("{} {:?} {problem}", h.kind, h.name),
                    record,
                ),
                None => (Verdict::Consistent, String::new(), record),
            }
        }
    }
}

/// Whether a record's `allocatedCIDR` is exactly the /128 of the shard's address.
pub fn holds(allocated_cidr: &str, address: Option<Ipv6Addr>) -> bool {
    let Some(address) = address else { return false };
    let Some((ip, bits)) = allocated_cidr.split_once('/') else {
        return false;
    };
    bits == "128" && ip.parse::<Ipv6Addr>().ok() == Some(address)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub fn holder(name: &str) -> Holder {
        Holder {
            kind: "IPClaim".into(),
            project: "platform".into(),
            namespace: "default".into(),
            name: name.into(),
        }
    }

    pub fn shard(name: &str, address: &str, holder: Option<Holder>) -> ShardView {
        in_cell("cell-a", name, address, holder)
    }

    pub fn in_cell(cell: &str, name: &str, address: &str, holder: Option<Holder>) -> ShardView {
        ShardView {
            cell: cell.into(),
            namespace: "egress".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            address: address.into(),
            holder,
            deleting: false,
        }
    }

    fn found(cidr: &str) -> Lookup {
        Lookup::Found {
            allocated_cidr: cidr.into(),
            marks: ClaimMarks::default(),
        }
    }

    /// The marks the controller of `cell` puts on the claim of shard `name`.
    fn marked(cidr: &str, cell: &str, name: &str) -> Lookup {
        Lookup::Found {
            allocated_cidr: cidr.into(),
            marks: ClaimMarks {
                cell: Some(cell.into()),
                namespace: Some("egress".into()),
                name: Some(name.into()),
                uid: Some(format!("uid-{name}")),
            },
        }
    }

    #[test]
    fn every_verdict() {
        let shards = vec![
            shard("ok", "2001:db8::1", Some(holder("c-ok"))),
            shard("hand", "2001:db8::2", None),
            shard("new", "", None),
            shard("resolving", "", Some(holder("c-resolving"))),
            shard("gone", "2001:db8::3", Some(holder("c-gone"))),
            shard("moved", "2001:db8::4", Some(holder("c-moved"))),
            shard("twin-a", "2001:db8::5", Some(holder("c-a"))),
            shard("twin-b", "2001:db8:0::5", Some(holder("c-b"))),
            shard("unreadable", "2001:db8::6", Some(holder("c-err"))),
            shard("marked", "2001:db8::7", Some(holder("c-marked"))),
            shard("copied", "2001:db8::8", Some(holder("c-copied"))),
        ];
        let lookup = BTreeMap::from([
            (holder("c-ok"), found("2001:db8::1/128")),
            (holder("c-gone"), Lookup::Missing),
            (holder("c-moved"), found("2001:db8::9/128")),
            (holder("c-a"), found("2001:db8::5/128")),
            (holder("c-b"), found("2001:db8::5/128")),
            (holder("c-err"), Lookup::Failed("connection refused".into())),
            (
                holder("c-marked"),
                marked("2001:db8::7/128", "cell-a", "marked"),
            ),
            (
                holder("c-copied"),
                marked("2001:db8::8/128", "cell-a", "original"),
            ),
        ]);
        let findings = judge(&shards, &lookup);
        let got: Vec<(&str, Verdict)> = findings
            .iter()
            .map(|f| (f.name.as_str(), f.verdict))
            .collect();
        assert_eq!(
            got,
            vec![
                ("ok", Verdict::Consistent),
                ("hand", Verdict::Unattributable),
                ("new", Verdict::Pending),
                ("resolving", Verdict::Pending),
                ("gone", Verdict::ClaimMissing),
                ("moved", Verdict::AddressMismatch),
                ("twin-a", Verdict::AddressShared),
                ("twin-b", Verdict::AddressShared),
                ("unreadable", Verdict::Unknown),
                ("marked", Verdict::Consistent),
                ("copied", Verdict::ForeignClaim),
            ]
        );
        assert!(Verdict::ForeignClaim.is_inconsistent());
    }

    #[test]
    fn a_claim_must_be_marked_for_the_shard_that_names_it() {
        let claim = |marks: ClaimMarks| {
            BTreeMap::from([(
                holder("c"),
                Lookup::Found {
                    allocated_cidr: "2001:db8::1/128".into(),
                    marks,
                },
            )])
        };
        let s = shard("s", "2001:db8::1", Some(holder("c")));
        let full = ClaimMarks {
            cell: Some("cell-a".into()),
            namespace: Some("egress".into()),
            name: Some("s".into()),
            uid: Some("uid-s".into()),
        };
        let verdict = |marks: ClaimMarks| judge(std::slice::from_ref(&s), &claim(marks))[0].verdict;
        assert_eq!(verdict(full.clone()), Verdict::Consistent);
        assert_eq!(
            verdict(ClaimMarks::default()),
            Verdict::Consistent,
            "a claim nobody marked names no other shard"
        );
        let legacy = ClaimMarks {
            cell: None,
            uid: None,
            ..full.clone()
        };
        assert_eq!(verdict(legacy), Verdict::Consistent, "the Go controller's");
        for (what, marks) in [
            (
                "another cell",
                ClaimMarks {
                    cell: Some("cell-b".into()),
                    ..full.clone()
                },
            ),
            (
                "another incarnation",
                ClaimMarks {
                    uid: Some("uid-earlier".into()),
                    ..full.clone()
                },
            ),
            (
                "another name",
                ClaimMarks {
                    name: Some("t".into()),
                    ..full.clone()
                },
            ),
            (
                "half a mark",
                ClaimMarks {
                    uid: None,
                    ..full.clone()
                },
            ),
        ] {
            assert_eq!(verdict(marks), Verdict::ForeignClaim, "{what}");
        }
        let f = &judge(
            std::slice::from_ref(&s),
            &claim(ClaimMarks {
                cell: Some("cell-b".into()),
                name: Some("w-1".into()),
                uid: Some("uid-w-1".into()),
                ..full
            }),
        )[0];
        assert_eq!(
            f.detail,
            "IPClaim \"c\" was made for cell cell-b shard egress/w-1 uid uid-w-1, not for this shard (cell cell-a, uid uid-s)"
        );
    }

    #[test]
    fn twins_in_two_cells_name_each_other_and_say_whose_record_it_is() {
        let shards = vec![
            in_cell("cell-a", "w-1", "2001:db8::5", Some(holder("c-w-1"))),
            in_cell("cell-b", "dup", "2001:db8::5", Some(holder("c-w-1"))),
        ];
        let lookup =
            BTreeMap::from([(holder("c-w-1"), marked("2001:db8::5/128", "cell-a", "w-1"))]);
        let f = judge(&shards, &lookup);
        assert_eq!(f[0].verdict, Verdict::AddressShared);
        assert_eq!(f[1].verdict, Verdict::AddressShared);
        assert_eq!(
            f[0].shared_with,
            [ShardRef {
                cell: "cell-b".into(),
                namespace: "egress".into(),
                name: "dup".into()
            }]
        );
        assert_eq!(f[1].shared_with[0].name, "w-1");
        assert_eq!(
            f[0].detail,
            "2001:db8::5 is also carried by egress/dup in cell cell-b; the record this shard names holds it and was made for it"
        );
        assert!(
            f[1].detail.starts_with(
                "2001:db8::5 is also carried by egress/w-1 in cell cell-a; and IPClaim \"c-w-1\" was made for cell cell-a shard egress/w-1"
            ),
            "{}",
            f[1].detail
        );
        // The same shard in one cell alone: only its own record gives it away.
        let alone = judge(&shards[1..], &lookup);
        assert_eq!(alone[0].verdict, Verdict::ForeignClaim);
    }

    #[test]
    fn a_record_must_hold_exactly_the_host_prefix() {
        let a = "2001:db8::1".parse().ok();
        assert!(holds("2001:db8::1/128", a));
        assert!(holds("2001:0db8::0001/128", a));
        assert!(!holds("2001:db8::1/64", a));
        assert!(!holds("2001:db8::1", a));
        assert!(!holds("", a));
        assert!(!holds("2001:db8::2/128", a));
    }

    #[test]
    fn details_name_the_other_shard_and_the_record() {
        let shards = vec![
            shard("a", "2001:db8::5", None),
            shard("b", "2001:db8::5", None),
        ];
        let f = judge(&shards, &BTreeMap::new());
        assert_eq!(f[0].detail, "2001:db8::5 is also carried by egress/b");
        let shards = vec![shard("m", "2001:db8::4", Some(holder("c")))];
        let lookup = BTreeMap::from([(holder("c"), found("2001:db8::9/128"))]);
        let f = judge(&shards, &lookup);
        assert_eq!(
            f[0].detail,
            "the shard carries 2001:db8::4 but IPClaim \"c\" holds \"2001:db8::9/128\""
        );
        assert!(f[0].verdict.is_inconsistent());
        assert!(!Verdict::Pending.is_inconsistent());
        assert!(!Verdict::Unattributable.is_inconsistent());
        assert!(!Verdict::CellNotAudited.is_inconsistent());
        assert!(!Verdict::LegacyClaim.is_inconsistent());
    }

    #[test]
    fn a_released_orphan_no_longer_fails_the_audit() {
        let mut f = judge(&[shard("s", "2001:db8::1", None)], &BTreeMap::new()).remove(0);
        f.verdict = Verdict::OrphanedClaim;
        assert!(f.fails());
        for (action, fails) in [
            (ReleaseAction::WouldRelease, true),
            (ReleaseAction::Left, true),
            (ReleaseAction::Released, false),
        ] {
            f.release = Some(Release {
                action,
                reason: String::new(),
            });
            assert_eq!(f.fails(), fails, "{action:?}");
        }
    }
}
