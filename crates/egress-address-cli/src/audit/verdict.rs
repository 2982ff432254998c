//! Attribution verdicts: given the shards of a cell and what IPAM says about the records their
//! refs name, decide for each shard whether its address is traceable and consistent.
//!
//! Pure: the I/O (listing shards, GETting records) happens in `audit`, so every verdict is tested
//! without a server.

use std::collections::BTreeMap;
use std::net::Ipv6Addr;

use serde::Serialize;

/// What a shard says about its address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardView {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// `spec.shardAddressIPv6`, empty when unassigned.
    pub address: String,
    /// `spec.shardAddressIPv6ClaimRef`, if any.
    pub holder: Option<Holder>,
    pub deleting: bool,
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

/// What reading a holder from IPAM returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The record exists; its `status.allocatedCIDR` (possibly empty).
    Found { allocated_cidr: String },
    /// IPAM answered 404 for it.
    Missing,
    /// IPAM could not be asked (network, auth, ...): no verdict about the record.
    Failed(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// The address equals what the record it names holds.
    Consistent,
    /// An address with no ref (e.g. hand-set): legal, but nothing says where it came from.
    Unattributable,
    /// No address yet (with or without a ref whose allocation has not resolved).
    Pending,
    /// The ref names a record IPAM does not have.
    ClaimMissing,
    /// The record holds a different address than the shard carries.
    AddressMismatch,
    /// Another shard in the cell carries the same address.
    AddressShared,
    /// IPAM could not be read for this shard.
    Unknown,
    /// A claim made for a shard that no longer exists: its address is held for nothing.
    OrphanedClaim,
}

impl Verdict {
    /// Whether this verdict makes the audit fail.
    pub fn is_inconsistent(self) -> bool {
        matches!(
            self,
            Verdict::ClaimMissing
                | Verdict::AddressMismatch
                | Verdict::AddressShared
                | Verdict::Unknown
                | Verdict::OrphanedClaim
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Consistent => "consistent",
            Verdict::Unattributable => "unattributable",
            Verdict::Pending => "pending",
            Verdict::ClaimMissing => "claim-missing",
            Verdict::AddressMismatch => "address-mismatch",
            Verdict::AddressShared => "address-shared",
            Verdict::Unknown => "unknown",
            Verdict::OrphanedClaim => "orphaned-claim",
        }
    }
}

/// One line of the audit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    pub namespace: String,
    pub name: String,
    pub address: String,
    pub holder: Option<Holder>,
    /// What the holder record holds, when it was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record_cidr: Option<String>,
    pub verdict: Verdict,
    pub detail: String,
}

/// Decides every shard's verdict. `lookup` answers for each distinct holder.
pub fn judge(shards: &[ShardView], lookup: &BTreeMap<Holder, Lookup>) -> Vec<Finding> {
    let mut by_address: BTreeMap<Ipv6Addr, Vec<String>> = BTreeMap::new();
    for s in shards {
        if let Ok(a) = s.address.parse::<Ipv6Addr>() {
            by_address
                .entry(a)
                .or_default()
                .push(format!("{}/{}", s.namespace, s.name));
        }
    }
    shards
        .iter()
        .map(|s| {
            let mut f = Finding {
                namespace: s.namespace.clone(),
                name: s.name.clone(),
                address: s.address.clone(),
                holder: s.holder.clone(),
                record_cidr: None,
                verdict: Verdict::Pending,
                detail: String::new(),
            };
            let parsed = s.address.parse::<Ipv6Addr>().ok();
            if let Some(a) = parsed {
                let others: Vec<&String> = by_address[&a]
                    .iter()
                    .filter(|n| **n != format!("{}/{}", s.namespace, s.name))
                    .collect();
                if !others.is_empty() {
                    f.verdict = Verdict::AddressShared;
                    f.detail = format!(
                        "{} is also carried by {}",
                        s.address,
                        others
                            .iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                    return f;
                }
            }
            match (&s.address[..], &s.holder) {
                ("", None) => f.detail = "no address assigned yet".into(),
                ("", Some(h)) => {
                    f.detail = format!(
                        "{} {:?} is recorded but no address is assigned yet",
                        h.kind, h.name
                    )
                }
                (_, None) => {
                    f.verdict = Verdict::Unattributable;
                    f.detail = "the address carries no claim ref (set by hand?)".into();
                }
                (addr, Some(h)) => match lookup.get(h) {
                    None | Some(Lookup::Failed(_)) => {
                        f.verdict = Verdict::Unknown;
                        f.detail = match lookup.get(h) {
                            Some(Lookup::Failed(e)) => {
                                format!("reading {} {:?}: {e}", h.kind, h.name)
                            }
                            _ => format!("{} {:?} was not read", h.kind, h.name),
                        };
                    }
                    Some(Lookup::Missing) => {
                        f.verdict = Verdict::ClaimMissing;
                        f.detail = format!(
                            "{} {:?} does not exist in project {:?} namespace {:?}",
                            h.kind, h.name, h.project, h.namespace
                        );
                    }
                    Some(Lookup::Found { allocated_cidr }) => {
                        f.record_cidr = Some(allocated_cidr.clone());
                        if holds(allocated_cidr, parsed) {
                            f.verdict = Verdict::Consistent;
                        } else {
                            f.verdict = Verdict::AddressMismatch;
                            f.detail = format!(
                                "the shard carries {addr} but {} {:?} holds {:?}",
                                h.kind, h.name, allocated_cidr
                            );
                        }
                    }
                },
            }
            f
        })
        .collect()
}

/// A claim listed from IPAM that this cell's controller made: named as it names claims, with the
/// shard (and, since claims record it, the shard's incarnation) in its annotations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimView {
    pub project: String,
    pub namespace: String,
    pub name: String,
    pub shard_namespace: String,
    pub shard_name: String,
    /// The incarnation the claim was made for; `None` for a claim made before claims recorded it.
    pub shard_uid: Option<String>,
    pub allocated_cidr: String,
}

/// Claims whose shard incarnation is not among `shards` (a claim recording a UID is orphaned
/// when no live shard has that UID, even if a newer shard of the same name exists).
/// `shard_namespace`: the shards were listed in this namespace only, so claims for shards
/// elsewhere say nothing.
pub fn orphaned(
    claims: &[ClaimView],
    shards: &[ShardView],
    shard_namespace: Option<&str>,
) -> Vec<Finding> {
    let live = |c: &ClaimView| {
        shards.iter().any(|s| {
            s.namespace == c.shard_namespace
                && s.name == c.shard_name
                && c.shard_uid.as_ref().is_none_or(|uid| *uid == s.uid)
        })
    };
    claims
        .iter()
        .filter(|c| shard_namespace.is_none_or(|ns| ns == c.shard_namespace))
        .filter(|c| !live(c))
        .map(|c| Finding {
            namespace: c.shard_namespace.clone(),
            name: c.shard_name.clone(),
            address: c
                .allocated_cidr
                .strip_suffix("/128")
                .unwrap_or(&c.allocated_cidr)
                .to_string(),
            holder: Some(Holder {
                kind: "IPClaim".into(),
                project: c.project.clone(),
                namespace: c.namespace.clone(),
                name: c.name.clone(),
            }),
            record_cidr: Some(c.allocated_cidr.clone()),
            verdict: Verdict::OrphanedClaim,
            detail: format!(
                "the shard is gone but its claim still holds {:?}; releasing it is `kubectl delete ipclaim {} -n {}` on project {:?}",
                c.allocated_cidr, c.name, c.namespace, c.project
            ),
        })
        .collect()
}

/// Whether a record's `allocatedCIDR` is exactly the /128 of the shard's address.
fn holds(allocated_cidr: &str, address: Option<Ipv6Addr>) -> bool {
    let Some(address) = address else { return false };
    let Some((ip, bits)) = allocated_cidr.split_once('/') else {
        return false;
    };
    bits == "128" && ip.parse::<Ipv6Addr>().ok() == Some(address)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(name: &str) -> Holder {
        Holder {
            kind: "IPClaim".into(),
            project: "platform".into(),
            namespace: "default".into(),
            name: name.into(),
        }
    }

    fn shard(name: &str, address: &str, holder: Option<Holder>) -> ShardView {
        ShardView {
            namespace: "egress".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            address: address.into(),
            holder,
            deleting: false,
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
        ];
        let lookup = BTreeMap::from([
            (
                holder("c-ok"),
                Lookup::Found {
                    allocated_cidr: "2001:db8::1/128".into(),
                },
            ),
            (holder("c-gone"), Lookup::Missing),
            (
                holder("c-moved"),
                Lookup::Found {
                    allocated_cidr: "2001:db8::9/128".into(),
                },
            ),
            (
                holder("c-a"),
                Lookup::Found {
                    allocated_cidr: "2001:db8::5/128".into(),
                },
            ),
            (
                holder("c-b"),
                Lookup::Found {
                    allocated_cidr: "2001:db8::5/128".into(),
                },
            ),
            (holder("c-err"), Lookup::Failed("connection refused".into())),
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
            ]
        );
    }

    fn claim_for(shard_namespace: &str, shard_name: &str, cidr: &str) -> ClaimView {
        ClaimView {
            project: "platform".into(),
            namespace: "default".into(),
            name: format!("egress-shard-ipv6.{shard_namespace}.{shard_name}"),
            shard_namespace: shard_namespace.into(),
            shard_name: shard_name.into(),
            shard_uid: None,
            allocated_cidr: cidr.into(),
        }
    }

    #[test]
    fn a_claim_of_an_earlier_incarnation_is_orphaned_beside_the_new_one() {
        let shards = vec![shard("s", "2001:db8::1", Some(holder("c1")))];
        let mut current = claim_for("egress", "s", "2001:db8::1/128");
        current.shard_uid = Some("uid-s".into());
        let mut earlier = claim_for("egress", "s", "2001:db8::7/128");
        earlier.shard_uid = Some("uid-earlier".into());
        earlier.name = "egress-shard-ipv6.abc.egress.s-earlier".into();
        let found = orphaned(&[current, earlier], &shards, None);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].address, "2001:db8::7");
    }

    #[test]
    fn only_claims_of_absent_shards_are_orphaned() {
        let mut deleting = shard("deleting", "2001:db8::2", Some(holder("c2")));
        deleting.deleting = true;
        let shards = vec![shard("live", "2001:db8::1", Some(holder("c1"))), deleting];
        let claims = vec![
            claim_for("egress", "live", "2001:db8::1/128"),
            claim_for("egress", "deleting", "2001:db8::2/128"),
            claim_for("egress", "gone", "2001:db8::3/128"),
            claim_for("elsewhere", "gone-too", "2001:db8::4/128"),
        ];
        let all = orphaned(&claims, &shards, None);
        let got: Vec<(&str, &str, Verdict)> = all
            .iter()
            .map(|f| (f.namespace.as_str(), f.name.as_str(), f.verdict))
            .collect();
        assert_eq!(
            got,
            [
                ("egress", "gone", Verdict::OrphanedClaim),
                ("elsewhere", "gone-too", Verdict::OrphanedClaim),
            ]
        );
        assert_eq!(all[0].address, "2001:db8::3");
        assert_eq!(
            all[0].holder.as_ref().map(|h| h.name.as_str()),
            Some("egress-shard-ipv6.egress.gone")
        );
        assert!(
            all[0]
                .detail
                .contains("kubectl delete ipclaim egress-shard-ipv6.egress.gone -n default"),
            "{}",
            all[0].detail
        );
        assert!(Verdict::OrphanedClaim.is_inconsistent());

        // Shards listed in one namespace only say nothing about claims for other namespaces.
        let scoped = orphaned(&claims, &shards, Some("egress"));
        assert_eq!(scoped.len(), 1);
        assert_eq!(scoped[0].name, "gone");
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
        let lookup = BTreeMap::from([(
            holder("c"),
            Lookup::Found {
                allocated_cidr: "2001:db8::9/128".into(),
            },
        )]);
        let f = judge(&shards, &lookup);
        assert_eq!(
            f[0].detail,
            "the shard carries 2001:db8::4 but IPClaim \"c\" holds \"2001:db8::9/128\""
        );
        assert!(f[0].verdict.is_inconsistent());
        assert!(!Verdict::Pending.is_inconsistent());
        assert!(!Verdict::Unattributable.is_inconsistent());
    }
}
