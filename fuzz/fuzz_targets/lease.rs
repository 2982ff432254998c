//! The leader Lease, end to end: the controller's own elector (`runtime::leader::Elector`) runs
//! against a cell that answers its reads and writes of the Lease with whatever the fuzzer says:
//! leases held by anyone for any duration, with any release watermark and any pending releases
//! handed over (`HandedOver` JSON in an annotation), Status refusals, cut bodies. The clock is
//! paused, so retry periods and lease durations pass at once; the run ends when the answers run
//! out, and the elector then releases the lease.
//!
//! What must hold: no panic, no hang; and the elector takes a lease held by another instance
//! only once that lease has looked unchanged (one resourceVersion) for its whole duration.

#![no_main]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use egress_address::config::LeaderElection;
use egress_address::runtime::leader::{
    ANNOTATION_RELEASED_FROM, ANNOTATION_RELEASED_THROUGH, ANNOTATION_RELEASES_PENDING, Elector,
};
use fuzzing::{Answer, Plane, json};
use http::Method;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use tokio::time::Instant;

const ME: &str = "me_0001";
const NAMESPACE: &str = "egress-system";

fn int(u: &mut Unstructured<'_>) -> arbitrary::Result<i64> {
    Ok(match u.int_in_range(0..=5)? {
        0 => i64::from(i32::MAX),
        1 => i64::from(i32::MIN),
        2 => i64::from(i32::arbitrary(u)?),
        _ => *u.choose(&[15, 0, -1, 1, 5, 30])?,
    })
}

fn pending(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    if u.ratio(1, 4)? {
        return json::text(u, &["[]", "null", "[{}]", "{"]);
    }
    let mut handed = Vec::new();
    for _ in 0..u.int_in_range(0..=3)? {
        handed.push(json::object(
            vec![
                ("namespace", json!(json::text(u, &["ns", "default"])?)),
                ("name", json!(json::text(u, &["w-1", "w-2"])?)),
                ("uid", json!(json::text(u, &["u-1", "u-2"])?)),
                (
                    "claimRef",
                    json!({"apiGroup": "ipam.miloapis.com", "kind": "IPClaim",
                        "project": "datum-platform", "namespace": "egress",
                        "name": json::text(u, &["egress-shard-ipv6.c.x.ns.w-1"])?}),
                ),
            ],
            u,
        )?);
    }
    Ok(serde_json::to_string(&handed).unwrap())
}

fn lease(u: &mut Unstructured<'_>) -> arbitrary::Result<Value> {
    let annotations = json::object(
        vec![
            (
                ANNOTATION_RELEASED_FROM,
                json!(json::text(u, &["ns/w-1@5", ""])?),
            ),
            (
                ANNOTATION_RELEASED_THROUGH,
                json!(json::text(u, &["ns/w-2@9", ""])?),
            ),
            (ANNOTATION_RELEASES_PENDING, json!(pending(u)?)),
        ],
        u,
    )?;
    let metadata = json::object(
        vec![
            ("name", json!("egress-address")),
            ("namespace", json!(NAMESPACE)),
            (
                "resourceVersion",
                json!(json::text(u, &["1", "2", "3", ""])?),
            ),
            ("annotations", annotations),
        ],
        u,
    )?;
    let spec = json::object(
        vec![
            (
                "holderIdentity",
                json!(json::text(u, &[ME, "other_0002", ""])?),
            ),
            ("leaseDurationSeconds", json!(int(u)?)),
            ("leaseTransitions", json!(int(u)?)),
            (
                "acquireTime",
                json!(json::text(u, &["2026-01-01T00:00:00.000000Z"])?),
            ),
            (
                "renewTime",
                json!(json::text(u, &["2026-01-01T00:00:05.000000Z", "soon"])?),
            ),
        ],
        u,
    )?;
    json::object(
        vec![
            ("apiVersion", json!("coordination.k8s.io/v1")),
            ("kind", json!("Lease")),
            ("metadata", metadata),
            ("spec", spec),
        ],
        u,
    )
}

fn answer(u: &mut Unstructured<'_>) -> arbitrary::Result<Answer> {
    let status = if u.ratio(2, 3)? {
        200
    } else {
        fuzzing::status(u)?
    };
    if let Some(body) = fuzzing::real(u, "lease")? {
        return fuzzing::answer(u, status, body);
    }
    let value = if (200..300).contains(&status) {
        lease(u)?
    } else {
        json::status(u, status)?
    };
    let body = json::bytes(u, &value)?;
    fuzzing::answer(u, status, body)
}

/// What the fake cell has told the elector about the lease.
#[derive(Default)]
struct Seen {
    /// When each resourceVersion was first answered.
    first: HashMap<String, Instant>,
    /// The last read answered: (resourceVersion, holder, leaseDurationSeconds).
    last_read: Option<(String, String, Option<i32>)>,
}

fuzz_target!(|data: &[u8]| {
    fuzzing::alloc::held_to(fuzzing::alloc::CELL, data.len(), || {
        let mut u = Unstructured::new(data);
        let mut answers = Vec::new();
        for _ in 0..u.int_in_range(1..=10).unwrap_or(1) {
            match answer(&mut u) {
                Ok(a) => answers.push(a),
                Err(_) => break,
            }
        }
        let config = LeaderElection::new(NAMESPACE);
        let default_duration = config.lease_duration;
        let cell = Plane::new(answers);
        let seen = Arc::new(Mutex::new(Seen::default()));
        cell.on_request({
        let seen = seen.clone();
        move |sent, answer| {
            let mut seen = seen.lock().unwrap();
            if sent.method == Method::PUT
                && let Ok(written) = serde_json::from_slice::<Lease>(&sent.body)
                && written
                    .spec
                    .as_ref()
                    .and_then(|s| s.holder_identity.as_deref())
                    == Some(ME)
                && let Some((rv, holder, duration)) = seen.last_read.take()
                && !holder.is_empty()
                && holder != ME
            {
                let held_for = duration
                    .map(|s| Duration::from_secs(u64::try_from(s.max(0)).unwrap_or(0)))
                    .unwrap_or(default_duration);
                let first = seen.first[&rv];
                assert!(
                    sent.at.duration_since(first) >= held_for,
                    "took a lease held by {holder:?} after {:?}, before its {held_for:?} passed",
                    sent.at.duration_since(first)
                );
            }
            seen.last_read = None;
            // kube decodes the body of any answer that is not a 4xx or 5xx as the Lease (a 696
            // too): that is what the elector has seen.
            if sent.method == Method::GET
                && let Some(a) = answer
                && !(400..600).contains(&a.status)
                && !a.reset
                && let Ok(lease) = serde_json::from_slice::<Lease>(&a.body)
            {
                let rv = lease.metadata.resource_version.clone().unwrap_or_default();
                seen.first.entry(rv.clone()).or_insert(sent.at);
                let spec = lease.spec.unwrap_or_default();
                seen.last_read = Some((
                    rv,
                    spec.holder_identity.unwrap_or_default(),
                    spec.lease_duration_seconds,
                ));
            }
        }
    });
        let rt = fuzzing::runtime();
        rt.block_on(async {
            let shared = fuzzing::shared(Plane::new([]).client(1 << 20));
            let api: Api<Lease> = Api::namespaced(cell.client(1 << 20), NAMESPACE);
            let elector = Elector::new(api, config, ME.to_string(), shared);
            tokio::time::timeout(
                Duration::from_secs(24 * 3600),
                elector.run(cell.exhausted()),
            )
            .await
            .expect("the elector stops once the cell's answers run out");
        });
    })
});
