//! Any bytes as an IPAM answer body (already bounded to `MAX_IPAM_ANSWER` by the client, so run
//! with `-max_len` below it): decoded as an IPClaim, an IPAllocation, a list of claims and a
//! `metav1.Status`, and each handed to what the controller does with it: the address checks
//! (`ipam::address`), whose a claim is (`naming::owner`, `orphans::marks`/`standing`,
//! `release::whose`/`decide`) and the reason classification (`ipam::reasons`). The same bytes are
//! also served as the answer to a claim read, through the controller's bounded IPAM client.

#![no_main]

use egress_address::connect::connection::MAX_IPAM_ANSWER;
use egress_address::ipam::address::{from_allocated_cidr, host_address, not_public_unicast};
use egress_address::ipam::naming::{Incarnation, owner};
use egress_address::ipam::orphans::{marks, standing};
use egress_address::ipam::reasons::{
    IpamReason, NAMESPACE_REFUSED, QUOTA_EXCEEDED, Refusal, classify, classify_status, refusal,
};
use egress_address::ipam::release::{Decision, LiveShard, Vouch, Whose, decide, whose};
use egress_api::ipam::{IPAllocation, IPClaim, reasons};
use fuzzing::world::*;
use fuzzing::{Answer, Plane};
use kube::ResourceExt;
use kube::core::{ObjectList, Status};
use libfuzzer_sys::fuzz_target;

fn judge_claim(claim: &IPClaim) {
    let name = claim.name_any();
    for cell in CELLS {
        for (ns, shard, uid) in [("ns", "w-1", "u-1"), ("default", "w-2", "u-2")] {
            let _ = owner(
                claim,
                &Incarnation {
                    cell,
                    namespace: ns,
                    name: shard,
                    uid,
                },
            );
        }
    }
    let marked = marks(claim);
    let _ = standing(&marked, CELL, |_, _| Some("u-1".to_string()));
    for vouch in [
        Vouch::None,
        Vouch::RecordedBy("u-1"),
        Vouch::LegacyByOperator,
    ] {
        let Ok(whose) = whose(claim, CELL, vouch) else {
            continue;
        };
        // Never a release of a live incarnation's claim, nor of one a live shard records.
        if let Whose::Incarnation { uid, .. } = &whose {
            let live = LiveShard {
                uid: uid.clone(),
                holds_claim: None,
            };
            assert_eq!(decide(&whose, &name, Some(&live)), Decision::Lives);
        }
        let recording = LiveShard {
            uid: "other".into(),
            holds_claim: Some(name.clone()),
        };
        assert_eq!(
            decide(&whose, &name, Some(&recording)),
            Decision::RecordedByLive
        );
    }
    if let Some(status) = &claim.status {
        check_cidr(&status.allocated_cidr);
    }
}

fn check_cidr(cidr: &str) {
    match from_allocated_cidr(cidr) {
        Ok(addr) => {
            assert_eq!(not_public_unicast(addr), None);
            assert_eq!(host_address(cidr).ok(), Some(addr));
        }
        Err(err) => assert!(!err.to_string().is_empty()),
    }
}

fn judge_status(status: &Status) {
    let reason = classify_status(status);
    assert!(!reason.label().is_empty());
    match &reason {
        IpamReason::Refused(r) => assert!(
            reasons::ALL.contains(r) || *r == QUOTA_EXCEEDED || *r == NAMESPACE_REFUSED,
            "{r}"
        ),
        IpamReason::AllocationRetained(name) => {
            let causes = status
                .details
                .as_ref()
                .map(|d| d.causes.as_slice())
                .unwrap_or_default();
            assert!(!name.is_empty());
            assert!(
                causes
                    .iter()
                    .any(|c| c.reason == reasons::ALLOCATION_RETAINED && c.message == *name)
            );
        }
        _ => {}
    }
    let refused = refusal(status);
    let credential_code = status.code == 401
        || status.code == 403
        || (status.code == 0 && matches!(status.reason.as_str(), "Unauthorized" | "Forbidden"));
    assert_eq!(refused.is_some(), credential_code, "{status:?}");
    if status.code == 401 {
        assert_eq!(refused, Some(Refusal::Credential));
    }
}

fuzz_target!(|data: &[u8]| {
    fuzzing::alloc::held_to(fuzzing::alloc::IPAM, data.len(), || {
        if data.len() >= MAX_IPAM_ANSWER {
            return;
        }
        if let Ok(claim) = serde_json::from_slice::<IPClaim>(data) {
            judge_claim(&claim);
        }
        if let Ok(allocation) = serde_json::from_slice::<IPAllocation>(data) {
            if let Some(status) = &allocation.status {
                check_cidr(&status.allocated_cidr);
            }
        }
        if let Ok(list) = serde_json::from_slice::<ObjectList<IPClaim>>(data) {
            for claim in &list.items {
                judge_claim(claim);
            }
        }
        if let Ok(status) = serde_json::from_slice::<Status>(data) {
            judge_status(&status);
        }
        if let Ok(text) = std::str::from_utf8(data) {
            check_cidr(text);
        }
        // The same bytes as IPAM's answer to a read, through the controller's client: kube decodes
        // a refusal into a Status, and the controller classifies it.
        let code = [200, 403, 409, 500][data.first().map_or(0, |b| usize::from(*b) % 4)];
        let plane = Plane::new([Answer::new(code, data.to_vec())]);
        let rt = fuzzing::runtime();
        rt.block_on(async {
            let ipam = fuzzing::ipam(plane.client(MAX_IPAM_ANSWER));
            match ipam.get_claim(CLAIM_NAMESPACE, "c").await {
                Ok(claim) => judge_claim(&claim),
                Err(err) => {
                    if let kube::Error::Api(status) = &err {
                        judge_status(status);
                    }
                    let _ = classify(&err);
                }
            }
        });
    })
});
