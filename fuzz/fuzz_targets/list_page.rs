//! Any bytes as a page of the shard list (bounded to `MAX_CELL_ANSWER` by the client, so run with
//! `-max_len` below it): the watch's lean decoder (`shard::watched::WatchedShard`) page by page,
//! straight and through the controller's bounded cell client, and every listed shard through
//! what the controller does with it: the cache's record (`CachedShard`), the decision
//! (`shard::decide`) and the watch's `step`.
//!
//! What must hold: the lean decoder reads every page the full `EgressShard` type reads, and
//! agrees with it on every field a decision reads; the cache's record decides as the shard does.

#![no_main]

use egress_address::connect::connection::MAX_CELL_ANSWER;
use egress_address::runtime::watch::{Step, step};
use egress_address::shard::decide::{Decision, decide, is_unattributable};
use egress_address::shard::watched::WatchedShard;
use egress_address::shard::{CachedShard, ShardKey, ShardState};
use egress_api::shard::{EgressShard, LABEL_EGRESS_IPV6};
use fuzzing::{Answer, Plane};
use kube::api::{Api, ListParams};
use kube::core::ObjectList;
use kube::runtime::watcher::Event;
use libfuzzer_sys::fuzz_target;

fn judge(shard: &EgressShard) {
    let record = CachedShard::new(shard);
    let view = record.shard().expect("a record the cache wrote reads back");
    assert_eq!(decide(&view), decide(shard));
    assert_eq!(ShardState::observed(&view), ShardState::observed(shard));
    assert_eq!(is_unattributable(&view), is_unattributable(shard));
    assert_eq!(record.key(), ShardKey::of(shard));
    match step(&Event::Apply(shard.clone())) {
        Step::Changed {
            key,
            queue,
            version,
        } => {
            assert_eq!(key, ShardKey::of(shard));
            assert_eq!(queue, decide(shard) != Decision::Nothing);
            assert_eq!(version, shard.metadata.resource_version);
        }
        other => panic!("an applied shard is a change, not {other:?}"),
    }
}

/// The lean decoder says what the full type says, for every field a decision reads.
fn agree(lean: &EgressShard, full: &EgressShard) {
    let (l, f) = (&lean.metadata, &full.metadata);
    assert_eq!(l.name, f.name);
    assert_eq!(l.namespace, f.namespace);
    assert_eq!(l.uid, f.uid);
    assert_eq!(l.resource_version, f.resource_version);
    assert_eq!(l.deletion_timestamp, f.deletion_timestamp);
    let served = |s: &EgressShard| {
        s.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_EGRESS_IPV6))
            .map(String::as_str)
            == Some("true")
    };
    assert_eq!(served(lean), served(full));
    assert_eq!(lean.spec.shard_address_ipv6, full.spec.shard_address_ipv6);
    assert_eq!(
        lean.spec.shard_address_ipv6_claim_ref,
        full.spec.shard_address_ipv6_claim_ref
    );
    assert_eq!(decide(lean), decide(full));
}

fuzz_target!(|data: &[u8]| {
    fuzzing::alloc::held_to(fuzzing::alloc::CELL, data.len(), || {
        if data.len() >= MAX_CELL_ANSWER {
            return;
        }
        let lean = serde_json::from_slice::<ObjectList<WatchedShard>>(data);
        if let Ok(full) = serde_json::from_slice::<ObjectList<EgressShard>>(data) {
            match &lean {
                Ok(lean) => {
                    assert_eq!(lean.items.len(), full.items.len());
                    assert_eq!(lean.metadata.continue_, full.metadata.continue_);
                    for (l, f) in lean.items.iter().zip(&full.items) {
                        agree(&l.0, f);
                    }
                }
                // A key twice in one object: the full type keeps the last, the lean decoder refuses
                // the page, naming the field. No API server sends one (Go's encoder never writes it).
                Err(e) if e.to_string().contains("duplicate field") => {}
                Err(e) => panic!("the lean decoder refuses what the full type reads: {e}"),
            }
        }
        if let Ok(page) = &lean {
            for shard in &page.items {
                judge(&shard.0);
            }
        }
        if let Ok(one) = serde_json::from_slice::<WatchedShard>(data) {
            judge(&one.0);
        }
        let plane = Plane::new([Answer::new(200, data.to_vec())]);
        let rt = fuzzing::runtime();
        let listed = rt.block_on(async {
            let api: Api<WatchedShard> = Api::all(plane.client(MAX_CELL_ANSWER));
            api.list(&ListParams::default().limit(500)).await
        });
        if let Ok(page) = listed {
            for shard in &page.items {
                judge(&shard.0);
            }
        }
    })
});
