//! IPAM's answers to the claim path, end to end: `ipam::claim::claim` creates a shard's claim
//! through the controller's own bounded IPAM client (`MAX_IPAM_ANSWER`), and IPAM answers the
//! create, the read of a taken name and the read of a retained allocation with whatever the
//! fuzzer says: claims, allocations and Status bodies with causes, whole or cut, in any order.
//!
//! What must hold whatever IPAM answers: an address handed back is public unicast, and is held
//! either by a claim IPAM answered Bound, not being deleted, marked for this cell and this
//! incarnation, or by the allocation a 409's `AllocationRetained` cause named, answered Ready.

#![no_main]

use arbitrary::Unstructured;
use egress_address::connect::connection::MAX_IPAM_ANSWER;
use egress_address::ipam::address::{host_address, not_public_unicast};
use egress_address::ipam::claim::claim;
use egress_address::ipam::holding::HolderKind;
use egress_address::ipam::naming::{Owner, owner};
use egress_address::ipam::spec::ClaimRequest;
use egress_api::ipam::{IPAllocation, IPClaim};
use fuzzing::world::*;
use fuzzing::{Answer, Plane, json};
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, Mutex};

fn answer(u: &mut Unstructured<'_>) -> arbitrary::Result<Answer> {
    let status = fuzzing::status(u)?;
    if let Some(body) = fuzzing::real(u, "ipam_answer")? {
        return fuzzing::answer(u, status, body);
    }
    let value = match u.int_in_range(0..=2)? {
        _ if !(200..300).contains(&status) => json::status(u, status)?,
        0 => json::allocation(u)?,
        _ => json::claim(u)?,
    };
    let body = json::bytes(u, &value)?;
    fuzzing::answer(u, status, body)
}

fuzz_target!(|data: &[u8]| {
    fuzzing::alloc::held_to(fuzzing::alloc::IPAM, data.len(), || {
        let mut u = Unstructured::new(data);
        let (Ok(cell), Ok(ns), Ok(shard), Ok(uid)) = (
            u.choose(CELLS),
            u.choose(NAMESPACES),
            u.choose(SHARDS),
            u.choose(UIDS),
        ) else {
            return;
        };
        let mut answers = Vec::new();
        for _ in 0..u.int_in_range(1..=3).unwrap_or(1) {
            match answer(&mut u) {
                Ok(a) => answers.push(a),
                Err(_) => break,
            }
        }
        let req = ClaimRequest {
            class_name: "egress-ipv6",
            claim_namespace: CLAIM_NAMESPACE,
            location: "dfw",
            cell,
            shard_namespace: ns,
            shard_name: shard,
            shard_uid: uid,
        };
        let plane = Plane::new(answers);
        let served: Arc<Mutex<Vec<(String, Answer)>>> = Arc::default();
        plane.on_request({
            let served = served.clone();
            move |sent, answer| {
                if let Some(a) = answer {
                    served.lock().unwrap().push((sent.uri.clone(), a.clone()));
                }
            }
        });
        let rt = fuzzing::runtime();
        let outcome = rt.block_on(async {
            let ipam = fuzzing::ipam(plane.client(MAX_IPAM_ANSWER));
            claim(&ipam, &req).await
        });
        let Ok(holding) = outcome else {
            return;
        };
        assert_eq!(not_public_unicast(holding.address), None, "{holding:?}");
        let served = served.lock().unwrap();
        // What kube decodes as the object: the body of any answer that is not a 4xx or 5xx (an
        // IPAM answering 302 or 696 with a body is taken at its word, as the lease target found).
        let ok = |a: &Answer| !(400..600).contains(&a.status) && !a.reset;
        match holding.kind {
            HolderKind::IPClaim => {
                assert_eq!(holding.name, req.name());
                let (_, answer) = served
                    .iter()
                    .rev()
                    .find(|(uri, a)| uri.contains("/ipclaims") && ok(a))
                    .expect("an address from a claim IPAM answered");
                let claim: IPClaim =
                    serde_json::from_slice(&answer.body).expect("the claim decoded");
                assert_eq!(owner(&claim, &req.incarnation()), Owner::This);
                assert!(claim.metadata.deletion_timestamp.is_none());
                let status = claim.status.expect("a bound claim has a status");
                assert_eq!(status.phase, "Bound");
                assert_eq!(
                    host_address(&status.allocated_cidr).ok(),
                    Some(holding.address)
                );
            }
            HolderKind::IPAllocation => {
                let named = served.iter().any(|(_, a)| {
                    serde_json::from_slice::<kube::core::Status>(&a.body).is_ok_and(|s| {
                        s.details.is_some_and(|d| {
                            d.causes.iter().any(|c| {
                                c.reason == "AllocationRetained" && c.message == holding.name
                            })
                        })
                    })
                });
                assert!(named, "an allocation adopted only when a refusal named it");
                let (_, answer) = served
                    .iter()
                    .rev()
                    .find(|(uri, a)| uri.contains("/ipallocations/") && ok(a))
                    .expect("an address from an allocation IPAM answered");
                let allocation: IPAllocation =
                    serde_json::from_slice(&answer.body).expect("the allocation decoded");
                let status = allocation.status.expect("a ready allocation has a status");
                assert_eq!(status.phase, "Ready");
                assert_eq!(
                    host_address(&status.allocated_cidr).ok(),
                    Some(holding.address)
                );
            }
        }
    })
});
