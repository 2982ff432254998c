//! Properties of the pure core, over generated inputs (proptest): claim naming, the address
//! checks, the decision that hands a shard an address and the one that releases a claim, and the
//! classification of IPAM's refusals. Each says what must hold for every input, not for the few
//! a hand-written test names; a failing case is shrunk to the smallest input that shows it.

use std::net::Ipv6Addr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use egress_address::ipam::Ipam;
use egress_address::ipam::address::{from_allocated_cidr, host_address, not_public_unicast};
use egress_address::ipam::breaker::Breaker;
use egress_address::ipam::claim::claim;
use egress_address::ipam::holding::{HolderKind, Holding};
use egress_address::ipam::naming::{
    ANNOTATION_CELL, ANNOTATION_SHARD_NAME, ANNOTATION_SHARD_NAMESPACE, ANNOTATION_SHARD_UID,
    MAX_CLAIM_NAME_LENGTH, claim_name, claim_name_without_incarnation, legacy_claim_name,
};
use egress_address::ipam::reasons::{
    IpamReason, NAMESPACE_REFUSED, QUOTA_EXCEEDED, Refusal, classify_status, refusal,
};
use egress_address::ipam::release::{Decision, LiveShard, Vouch, Whose, decide, judge, whose};
use egress_address::ipam::spec::{ClaimRequest, desired_claim};
use egress_address::shard::decide::{self as shard_decide, ShardPatch};
use egress_address::{Metrics, shard::CachedShard};
use egress_api::ipam::{IPClaim, reasons};
use egress_api::shard::{EgressShard, EgressShardSpec, LABEL_EGRESS_IPV6};
use http::{Request, Response};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::core::Status;
use kube::core::response::{StatusCause, StatusDetails};
use proptest::prelude::*;
use serde_json::json;

// ---------------------------------------------------------------------------------------------
// Claim naming

/// A DNS label, as a namespace is: `[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?`.
fn dns_label() -> impl Strategy<Value = String> {
    "[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
}

/// A DNS subdomain of at most 253 characters, as an object name is.
fn dns_subdomain() -> impl Strategy<Value = String> {
    prop::collection::vec(dns_label(), 1..6)
        .prop_map(|labels| labels.join("."))
        .prop_filter("at most 253 characters", |s| s.len() <= 253)
}

/// Kubernetes' DNS-1123 subdomain rule, which every object name must pass.
fn is_dns_subdomain(name: &str) -> bool {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    name.len() <= 253 && name.split('.').all(label_ok)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Every name a claim may carry is a valid DNS subdomain of at most 253 characters, whatever
    /// the cell's identity and the UID are, and however long the shard's name.
    #[test]
    fn claim_names_are_dns_subdomains(
        cell in any::<String>(),
        namespace in dns_label(),
        name in dns_subdomain(),
        uid in any::<String>(),
    ) {
        for derived in [
            claim_name(&cell, &namespace, &name, &uid),
            claim_name_without_incarnation(&cell, &namespace, &name),
            legacy_claim_name(&namespace, &name),
        ] {
            prop_assert!(derived.len() <= MAX_CLAIM_NAME_LENGTH, "{} characters: {derived}", derived.len());
            prop_assert!(is_dns_subdomain(&derived), "not a DNS subdomain: {derived}");
        }
    }

    /// Two different incarnations (cell, namespace, name, UID) never derive one claim name.
    #[test]
    fn two_incarnations_never_share_a_name(
        a in (any::<String>(), dns_label(), dns_subdomain(), any::<String>()),
        b in (any::<String>(), dns_label(), dns_subdomain(), any::<String>()),
        change in 0usize..4,
    ) {
        // Half the time the second differs from the first in one part only: the near misses.
        let b = if change % 2 == 0 {
            let mut near = a.clone();
            match change {
                0 => near.3 = b.3,
                _ => near.2 = b.2,
            }
            near
        } else {
            b
        };
        prop_assume!(a != b);
        prop_assert_ne!(
            claim_name(&a.0, &a.1, &a.2, &a.3),
            claim_name(&b.0, &b.1, &b.2, &b.3)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Address checks

/// Any IPv6 address, half of them in global unicast (2000::/3) where most usable ones are.
fn address() -> impl Strategy<Value = Ipv6Addr> {
    prop_oneof![
        any::<u128>().prop_map(Ipv6Addr::from),
        any::<u128>().prop_map(|bits| Ipv6Addr::from((bits >> 3) | (1u128 << 125))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// An allocated /128 gives its address exactly when the address is public unicast: inside
    /// 2000::/3, with an interface identifier, and what it gives round-trips through its text.
    #[test]
    fn only_public_unicast_addresses_are_read(addr in address()) {
        let cidr = format!("{addr}/128");
        let read = from_allocated_cidr(&cidr);
        prop_assert_eq!(read.is_ok(), not_public_unicast(addr).is_none(), "{}", cidr);
        prop_assert_eq!(host_address(&cidr), Ok(addr));
        if let Ok(read) = read {
            let bits = u128::from(read);
            prop_assert_eq!(read, addr);
            prop_assert_eq!(bits >> 125, 1, "outside 2000::/3: {}", cidr);
            prop_assert_ne!(bits & u128::from(u64::MAX), 0, "subnet-router anycast: {}", cidr);
            prop_assert_eq!(read.to_string().parse::<Ipv6Addr>().ok(), Some(read));
            prop_assert_eq!(from_allocated_cidr(&format!("{read}/128")), Ok(read));
        }
    }

    /// A subnet-router anycast address (all-zero interface identifier) is refused, whatever its
    /// prefix.
    #[test]
    fn subnet_router_anycast_is_refused(prefix in any::<u64>()) {
        let addr = Ipv6Addr::from(u128::from(prefix) << 64);
        let cidr = format!("{addr}/128");
        prop_assert!(from_allocated_cidr(&cidr).is_err());
        prop_assert!(not_public_unicast(addr).is_some());
    }

    /// Only a /128 is read; IPv4 and IPv4-mapped answers never are.
    #[test]
    fn only_a_v6_slash_128_is_read(addr in address(), bits in 0u16..300, v4 in any::<u32>()) {
        prop_assume!(bits != 128);
        let (other, v4, mapped) = (
            format!("{addr}/{bits}"),
            format!("{}/32", std::net::Ipv4Addr::from(v4)),
            format!("{}/128", std::net::Ipv4Addr::from(v4).to_ipv6_mapped()),
        );
        prop_assert!(from_allocated_cidr(&other).is_err());
        prop_assert!(from_allocated_cidr(&v4).is_err());
        prop_assert!(from_allocated_cidr(&mapped).is_err());
    }

    /// Any text at all gives an address or an error naming the answer, never a panic.
    #[test]
    fn any_text_is_an_address_or_an_error(text in any::<String>()) {
        if let Err(err) = from_allocated_cidr(&text) {
            prop_assert_eq!(err.answer, text);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The decision: which address a shard gets, and which claims may be released

const CELL: &str = "cell-a";
const CLAIM_NS: &str = "egress";

/// One way IPAM's answer may differ from the claim this incarnation made.
#[derive(Debug, Clone)]
struct Answered {
    phase: &'static str,
    deleting: bool,
    cell: Option<&'static str>,
    uid: Option<&'static str>,
    shard: (&'static str, &'static str),
    address: Ipv6Addr,
    /// The create is refused as a taken name, and the claim is read back.
    read_back: bool,
}

fn answered() -> impl Strategy<Value = Answered> {
    (
        prop::sample::select(vec!["Bound", "Pending", "Releasing", ""]),
        any::<bool>(),
        prop::sample::select(vec![Some(CELL), Some("cell-b"), None]),
        prop::sample::select(vec![Some("u-1"), Some("u-2"), None]),
        prop::sample::select(vec![("ns", "w-1"), ("ns", "w-2"), ("other", "w-1")]),
        address(),
        any::<bool>(),
    )
        .prop_map(
            |(phase, deleting, cell, uid, shard, address, read_back)| Answered {
                phase,
                deleting,
                cell,
                uid,
                shard,
                address,
                read_back,
            },
        )
}

fn request() -> ClaimRequest<'static> {
    ClaimRequest {
        class_name: "egress-ipv6",
        claim_namespace: CLAIM_NS,
        location: "dfw",
        cell: CELL,
        shard_namespace: "ns",
        shard_name: "w-1",
        shard_uid: "u-1",
    }
}

/// The claim IPAM answers with.
fn answered_claim(a: &Answered) -> serde_json::Value {
    let mut annotations = serde_json::Map::new();
    annotations.insert(ANNOTATION_SHARD_NAMESPACE.into(), json!(a.shard.0));
    annotations.insert(ANNOTATION_SHARD_NAME.into(), json!(a.shard.1));
    if let Some(cell) = a.cell {
        annotations.insert(ANNOTATION_CELL.into(), json!(cell));
    }
    if let Some(uid) = a.uid {
        annotations.insert(ANNOTATION_SHARD_UID.into(), json!(uid));
    }
    let mut metadata = json!({
        "name": request().name(), "namespace": CLAIM_NS, "uid": "claim-1",
        "resourceVersion": "3", "annotations": annotations,
    });
    if a.deleting {
        metadata["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    }
    json!({
        "apiVersion": "ipam.miloapis.com/v1alpha1", "kind": "IPClaim", "metadata": metadata,
        "spec": {"className": "egress-ipv6", "ipFamily": "IPv6", "prefixLength": 128},
        "status": {"phase": a.phase, "allocatedCIDR": format!("{}/128", a.address)},
    })
}

/// An IPAM that answers the create (and the read, if the create is refused as a taken name) with
/// `a`'s claim.
fn ipam_answering(a: &Answered) -> Ipam {
    let claim = Bytes::from(serde_json::to_vec(&answered_claim(a)).unwrap());
    let taken = Bytes::from_static(
        br#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"AlreadyExists","code":409,"message":"already exists"}"#,
    );
    let read_back = a.read_back;
    let calls = Arc::new(Mutex::new(0usize));
    let service = tower::service_fn(move |_req: Request<kube::client::Body>| {
        let (claim, taken, calls) = (claim.clone(), taken.clone(), calls.clone());
        async move {
            let call = {
                let mut calls = calls.lock().unwrap();
                *calls += 1;
                *calls
            };
            let (status, body) = match (read_back, call) {
                (true, 1) => (409, taken),
                (false, _) => (201, claim),
                (true, _) => (200, claim),
            };
            Ok::<_, std::convert::Infallible>(
                Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(http_body_util::Full::new(body))
                    .unwrap(),
            )
        }
    });
    let mut registry = prometheus_client::registry::Registry::default();
    Ipam::new(
        kube::Client::new(service, "default"),
        Metrics::register(&mut registry),
        std::time::Duration::from_secs(30),
        Breaker::new(5, std::time::Duration::from_secs(1)),
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A shard as the cell has it.
fn shard(address: &str, deleting: bool, served: bool, with_ref: bool) -> EgressShard {
    let mut s = EgressShard::new(
        "w-1",
        EgressShardSpec {
            shard_address_ipv6: address.to_string(),
            ..Default::default()
        },
    );
    s.metadata.namespace = Some("ns".into());
    s.metadata.uid = Some("u-1".into());
    s.metadata.resource_version = Some("7".into());
    if deleting {
        s.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    }
    if served {
        s.metadata.labels = Some([(LABEL_EGRESS_IPV6.to_string(), "true".to_string())].into());
    }
    if with_ref {
        let holding = Holding {
            kind: HolderKind::IPClaim,
            namespace: CLAIM_NS.into(),
            name: "c".into(),
            address: "2001:db8::1".parse().unwrap(),
        };
        s.spec.shard_address_ipv6_claim_ref = Some(shard_decide::claim_ref(&holding, "p"));
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The claim path hands back an address only from a claim IPAM answered Bound, not being
    /// deleted, marked for this cell and this incarnation, and only if that address is public
    /// unicast; and such a claim always gives its address.
    #[test]
    fn an_address_comes_only_from_this_incarnations_bound_claim(a in answered()) {
        let req = request();
        let outcome = runtime().block_on(async { claim(&ipam_answering(&a), &req).await });
        let ours = a.phase == "Bound"
            && !a.deleting
            && a.cell == Some(CELL)
            && a.uid == Some("u-1")
            && a.shard == ("ns", "w-1");
        let usable = not_public_unicast(a.address).is_none();
        match outcome {
            Ok(holding) => {
                prop_assert!(ours && usable, "{a:?} gave {holding:?}");
                prop_assert_eq!(holding.address, a.address);
                prop_assert_eq!(holding.kind, HolderKind::IPClaim);
                prop_assert_eq!(&holding.name, &req.name());
                // And the one write made of it carries exactly that address and its holder.
                let live = shard("", false, false, false);
                let patch = ShardPatch::assign(&live, &holding, "p").unwrap().to_json();
                prop_assert_eq!(&patch["spec"]["shardAddressIPv6"], &json!(a.address.to_string()));
                prop_assert_eq!(&patch["spec"]["shardAddressIPv6ClaimRef"]["name"], &json!(req.name()));
            }
            Err(err) => prop_assert!(!(ours && usable), "{a:?} refused: {err}"),
        }
    }

    /// A shard being deleted gets nothing; one without an address is claimed for; one with an
    /// address is never claimed for again; and the cache's record of a shard decides the same.
    #[test]
    fn the_shard_decision(address in prop::sample::select(vec!["", "2001:db8::1", "garbage"]),
                          deleting in any::<bool>(), served in any::<bool>(), with_ref in any::<bool>()) {
        let s = shard(address, deleting, served, with_ref);
        let decision = shard_decide::decide(&s);
        let expected = match (deleting, address.is_empty(), served) {
            (true, _, _) => shard_decide::Decision::Skip,
            (false, true, _) => shard_decide::Decision::Claim,
            (false, false, true) => shard_decide::Decision::Nothing,
            (false, false, false) => shard_decide::Decision::MarkServed,
        };
        prop_assert_eq!(decision, expected);
        let cached = CachedShard::new(&s).shard();
        prop_assert_eq!(shard_decide::decide(&cached), decision);
    }

    /// A claim this controller made for an incarnation is never released while that incarnation
    /// lives, nor while a live shard records it in its ref; it is released once the incarnation
    /// is gone for good (no shard of the name, or one of another UID).
    #[test]
    fn a_live_incarnations_claim_is_never_released(
        namespace in dns_label(),
        name in dns_subdomain(),
        uid in "[a-f0-9-]{1,36}",
        other_uid in "[a-f0-9-]{1,36}",
        recorded in any::<bool>(),
    ) {
        let req = ClaimRequest {
            shard_namespace: &namespace,
            shard_name: &name,
            shard_uid: &uid,
            ..request()
        };
        let mut claim: IPClaim = desired_claim(&req);
        claim.metadata.name = Some(req.name());
        prop_assert!(whose(&claim, "cell-b", Vouch::None).is_err(), "another cell's claim is not ours");
        let whose = whose(&claim, CELL, Vouch::None).expect("a claim this cell made is its own");
        prop_assert_eq!(whose.uid(), Some(uid.as_str()));
        let holds_claim = recorded.then(|| claim.name_any());
        let lives = LiveShard { uid: uid.clone(), holds_claim: holds_claim.clone() };
        let judged = |live: Option<LiveShard>| {
            futures::executor::block_on(judge(&claim, &whose, |_, _| async move { Ok(live) })).unwrap()
        };
        prop_assert_ne!(judged(Some(lives.clone())), Decision::Gone);
        prop_assert_ne!(decide(&whose, &claim.name_any(), Some(&lives)), Decision::Gone);
        let successor = LiveShard { uid: other_uid.clone(), holds_claim };
        let expected = if recorded {
            Decision::RecordedByLive
        } else if other_uid == uid {
            Decision::Lives
        } else {
            Decision::Gone
        };
        prop_assert_eq!(judged(Some(successor)), expected);
        prop_assert_eq!(judged(None), Decision::Gone);
    }

    /// A claim whose incarnation cannot be told (any name, any annotations) is released only for
    /// an incarnation its marks name, and never while that incarnation lives.
    #[test]
    fn whatever_a_claim_says_its_live_incarnation_keeps_it(
        name in any::<String>(),
        marks in prop::collection::btree_map(
            prop::sample::select(vec![ANNOTATION_CELL, ANNOTATION_SHARD_UID,
                ANNOTATION_SHARD_NAMESPACE, ANNOTATION_SHARD_NAME]),
            "[a-z0-9-]{0,12}", 0..5),
    ) {
        let mut claim = IPClaim::new(&name, Default::default());
        claim.metadata.annotations = Some(marks.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
        for vouch in [Vouch::None, Vouch::RecordedBy("u-1"), Vouch::LegacyByOperator] {
            let Ok(whose) = whose(&claim, CELL, vouch) else { continue };
            if let Whose::Incarnation { uid, .. } = &whose {
                let live = LiveShard { uid: uid.clone(), holds_claim: None };
                prop_assert_eq!(decide(&whose, &name, Some(&live)), Decision::Lives);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reason classification

const WORDS: &[&str] = &[
    "Exhausted",
    "ClassNotFound",
    "NoDefaultClass",
    "NoOfferingPool",
    "PrefixLengthRejected",
    "ScopeRolesMissing",
    "AllocationRetained",
    "ClaimExists",
    "NoProjectScope",
    "QuotaExceeded",
    "Forbidden",
    "Unauthorized",
    "Conflict",
    "AlreadyExists",
    "NotFound",
    "InternalError",
    "",
];

const MESSAGES: &[&str] = &[
    "ipclaims.ipam.miloapis.com \"c\" is forbidden: Insufficient quota resources available.",
    "exceeded quota: ipclaims",
    "is forbidden: unable to create new content in namespace egress because it is being terminated",
    "is forbidden: namespace egress does not exist",
    "User \"u\" cannot create resource \"ipclaims\"",
    "alloc-3f2a1b0c9d8e7f60",
    "",
];

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(WORDS).prop_map(str::to_string),
        1 => any::<String>(),
    ]
}

fn message() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(MESSAGES).prop_map(str::to_string),
        1 => any::<String>(),
    ]
}

fn status() -> impl Strategy<Value = Status> {
    let code = prop_oneof![
        4 => prop::sample::select(vec![0u16, 400, 401, 403, 404, 409, 422, 500, 503, 507]),
        1 => any::<u16>(),
    ];
    let cause = (word(), message()).prop_map(|(reason, message)| StatusCause {
        reason,
        message,
        field: String::new(),
    });
    (
        code,
        word(),
        message(),
        prop::option::of(prop::collection::vec(cause, 0..4)),
    )
        .prop_map(|(code, reason, message, causes)| Status {
            code,
            reason,
            message,
            details: causes.map(|causes| StatusDetails {
                name: String::new(),
                group: String::new(),
                kind: String::new(),
                uid: String::new(),
                causes,
                retry_after_seconds: 0,
            }),
            ..Default::default()
        })
}

/// Every label `IpamReason::label` may give.
fn known_label(label: &str) -> bool {
    reasons::ALL.contains(&label)
        || [
            QUOTA_EXCEEDED,
            NAMESPACE_REFUSED,
            "NotFound",
            "AlreadyExists",
            "Conflict",
            "Unauthorized",
            "Unknown",
        ]
        .contains(&label)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// Every Status maps to exactly one reason, the same every time, with a known label; a
    /// retained allocation is named by its first cause that names one; a refusal reason is one
    /// IPAM or Milo's admission gives.
    #[test]
    fn every_status_maps_to_exactly_one_reason(s in status()) {
        let reason = classify_status(&s);
        prop_assert_eq!(&classify_status(&s.clone()), &reason);
        prop_assert!(known_label(reason.label()), "{:?} labelled {:?}", reason, reason.label());
        let causes = s.details.as_ref().map(|d| d.causes.as_slice()).unwrap_or_default();
        let retained = causes
            .iter()
            .find(|c| c.reason == reasons::ALLOCATION_RETAINED && !c.message.is_empty());
        match retained {
            Some(cause) => prop_assert_eq!(&reason, &IpamReason::AllocationRetained(cause.message.clone())),
            None => prop_assert!(!matches!(reason, IpamReason::AllocationRetained(_))),
        }
        if let IpamReason::Refused(r) = &reason {
            prop_assert!(reasons::ALL.contains(r) || *r == QUOTA_EXCEEDED || *r == NAMESPACE_REFUSED);
        }
        // A cause IPAM names decides before the code does.
        let first_known = causes.iter().find(|c| {
            c.reason == reasons::CLAIM_EXISTS
                || (reasons::ALL.contains(&c.reason.as_str()) && c.reason != reasons::ALLOCATION_RETAINED)
        });
        if retained.is_none() && let Some(cause) = first_known {
            let expected = if cause.reason == reasons::CLAIM_EXISTS {
                IpamReason::AlreadyExists
            } else {
                IpamReason::Refused(reasons::ALL.iter().find(|r| **r == cause.reason).unwrap())
            };
            prop_assert_eq!(&reason, &expected);
        }
        let forbidden = s.code == 403 || (s.code == 0 && s.reason == "Forbidden");
        let unauthorized = s.code == 401 || (s.code == 0 && s.reason == "Unauthorized");
        let refused = refusal(&s);
        prop_assert_eq!(refused.is_some(), forbidden || unauthorized);
        if unauthorized {
            prop_assert_eq!(refused, Some(Refusal::Credential));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Cases the properties found, kept as plain tests

/// Found by `claim_names_are_dns_subdomains`: a long shard name whose 236th character was a `-`
/// was shortened to `...-.<hash>`, a name the API refuses (a label may not end in `-`), so the
/// shard could never be claimed for.
#[test]
fn a_shortened_claim_name_never_ends_a_label_in_a_dash() {
    let name = "a00a0aaaa00000-0--a-000a000aa000aa-0000a0000aa0a-a0aa-0-aaaa0aa.00a00a--0--aaaa----a-0-0000aa0a00-00-0a0a0a--00-00a-0aaaaa-00.0a-0-0-a0--0a0-0-000a0.a.aa0-a------aa-aa00a0-a0aaaa";
    let derived = claim_name("", "0a0-aaa000--aa----a--aaa0--0a", name, "");
    assert!(is_dns_subdomain(&derived), "{derived}");
    assert!(derived.len() <= MAX_CLAIM_NAME_LENGTH);
    // A dot as the last character kept (`...a..<hash>`, an empty label) for the incarnation's name.
    let dotted = format!("{}.{}", "a".repeat(186), "b".repeat(70));
    for derived in [
        claim_name("c", "ns", &dotted, "u"),
        legacy_claim_name("ns", &dotted),
        claim_name_without_incarnation("c", "ns", &dotted),
    ] {
        assert!(is_dns_subdomain(&derived), "{derived}");
    }
}

// ---------------------------------------------------------------------------------------------
// Cases the fuzzers found (fuzz/), replayed without the fuzzer

/// Found by the `durations` and `flags` fuzz targets: a duration flag too large for a Duration
/// (`--backoff-cap=99999999999999999999h`) panicked at startup instead of being refused.
#[test]
fn a_duration_flag_past_what_a_duration_holds_is_refused() {
    use egress_address::config::args::{Args, BINARY};
    use egress_address::config::duration::parse_duration;
    for huge in [
        "99999999999999999999h",
        "5000000000000000h5000000000000000h",
    ] {
        let err = parse_duration(huge).unwrap_err();
        assert!(err.contains("too long a duration"), "{huge}: {err}");
        let flag = format!("-backoff-cap={huge}");
        let refused = Args::try_parse_go_style([BINARY, flag.as_str()]).unwrap_err();
        assert!(
            refused.to_string().contains("too long a duration"),
            "{refused}"
        );
    }
}

/// A claim read from IPAM whose annotations name a long shard of non-ASCII characters: judging
/// whose it is derives its names, and the shortened name was cut inside a character (a panic).
#[test]
fn a_claim_marked_with_a_long_non_ascii_name_is_judged_without_a_panic() {
    use egress_address::ipam::orphans::{Marks, marks};
    let long = "é".repeat(150);
    let mut claim = IPClaim::new("c", Default::default());
    claim.metadata.annotations = Some(
        [
            (ANNOTATION_CELL, CELL),
            (ANNOTATION_SHARD_UID, "u-1"),
            (ANNOTATION_SHARD_NAMESPACE, "ns"),
            (ANNOTATION_SHARD_NAME, long.as_str()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
    );
    assert_eq!(marks(&claim), Marks::Foreign);
    assert!(whose(&claim, CELL, Vouch::None).is_err());
}

/// Found by the `lease` fuzz target: taking over a lease that says `leaseTransitions: 2147483647`
/// overflowed (a panic where overflow is checked, a negative count the API refuses elsewhere).
#[test]
fn a_lease_at_the_most_transitions_is_taken_over_without_overflow() {
    use egress_address::config::LeaderElection;
    use egress_address::runtime::{
        activity::Activity, leader::Elector, readiness::Readiness, shared::Shared,
        token::LeaderToken,
    };
    use k8s_openapi::api::coordination::v1::Lease;
    let lease = Bytes::from_static(
        br#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"egress-address","namespace":"ns","resourceVersion":"1"},"spec":{"holderIdentity":"other","leaseDurationSeconds":0,"leaseTransitions":2147483647}}"#,
    );
    let written = Arc::new(Mutex::new(Vec::<Vec<u8>>::new()));
    let seen = written.clone();
    let service = tower::service_fn(move |req: Request<kube::client::Body>| {
        let (lease, seen) = (lease.clone(), seen.clone());
        async move {
            let put = req.method() == http::Method::PUT;
            let body = http_body_util::BodyExt::collect(req.into_body())
                .await
                .unwrap()
                .to_bytes();
            let answer = if put {
                seen.lock().unwrap().push(body.to_vec());
                body
            } else {
                lease
            };
            Ok::<_, std::convert::Infallible>(
                Response::builder()
                    .header("content-type", "application/json")
                    .body(http_body_util::Full::new(answer))
                    .unwrap(),
            )
        }
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let client = kube::Client::new(service, "ns");
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = Metrics::register(&mut registry);
        let ipam = Ipam::new(
            client.clone(),
            metrics.clone(),
            std::time::Duration::from_secs(30),
            Breaker::new(5, std::time::Duration::from_secs(1)),
        );
        let shared = Shared::new(
            egress_address::shard::ShardCache::new(),
            Arc::new(egress_address::shard::ShardMemory::new(metrics.clone())),
            LeaderToken::elected(),
            Arc::new(Readiness::new(ipam, metrics.clone())),
            Arc::new(Activity::default()),
            metrics,
        );
        let stop = tokio_util::sync::CancellationToken::new();
        let elector = Elector::new(
            kube::Api::<Lease>::namespaced(client, "ns"),
            LeaderElection::new("ns"),
            "me".into(),
            shared,
        );
        let run = tokio::spawn(elector.run(stop.clone()));
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        stop.cancel();
        run.await.expect("the elector ran without a panic");
    });
    let written = written.lock().unwrap();
    let taken: Lease =
        serde_json::from_slice(written.first().expect("the lease was taken over")).unwrap();
    let spec = taken.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("me"));
    assert_eq!(spec.lease_transitions, Some(i32::MAX));
}
