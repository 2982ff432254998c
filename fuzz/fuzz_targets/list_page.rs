//! Any bytes as a page of the shard list (bounded to `MAX_CELL_ANSWER` by the client, so run with
//! `-max_len` below it): the watch's lean decoder (`shard::watched::WatchedShard`) page by page,
//! straight and through the controller's bounded cell client, and every listed shard through
//! what the controller does with it: the decoder's record (`CachedShard`, what the cache keeps),
//! its view (`CachedShard::shard`), the decision (`shard::decide`) and the watch's `step`.
//!
//! What must hold: the lean decoder reads every page the full `EgressShard` type reads (but a
//! shard without a name, which it refuses), makes the record the cache made of the full shard,
//! and agrees with it on every field a decision reads.

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

/// What the controller does with a record the watch decoded: the cache keeps it, and a decision
/// and the watch's `step` read it, the decision through its view.
fn judge(record: &CachedShard) {
    let view = record.shard();
    // The record the view makes again is the same: nothing a decision reads is lost or changed
    // by keeping a shard as a record.
    assert_eq!(
        format!("{:?}", CachedShard::new(&view)),
        format!("{record:?}")
    );
    assert_eq!(record.key(), ShardKey::of(&view));
    match step(&Event::Apply(record.clone())) {
        Step::Changed {
            key,
            queue,
            version,
        } => {
            assert_eq!(key, ShardKey::of(&view));
            assert_eq!(queue, decide(&view) != Decision::Nothing);
            assert_eq!(version, view.metadata.resource_version);
        }
        other => panic!("an applied shard is a change, not {other:?}"),
    }
}

/// The lean decoder says what the full type says, for every field a decision reads.
fn agree(record: &CachedShard, full: &EgressShard) {
    // The record of the full shard, made as the cache made it before the watch decoded records.
    assert_eq!(
        format!("{record:?}"),
        format!("{:?}", CachedShard::new(full))
    );
    let lean = &record.shard();
    let (l, f) = (&lean.metadata, &full.metadata);
    assert_eq!(l.name, f.name);
    // A key has no namespace or an empty one alike: no shard of a cell has an empty one.
    assert_eq!(
        l.namespace.as_deref().unwrap_or_default(),
        f.namespace.as_deref().unwrap_or_default()
    );
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
    assert_eq!(ShardState::observed(lean), ShardState::observed(full));
    assert_eq!(is_unattributable(lean), is_unattributable(full));
}

/// The lean decoder's items of the page, for the full type's items to be compared with as they
/// are read.
#[derive(Default)]
struct Against {
    records: Vec<WatchedShard>,
    /// Full items read so far.
    read: usize,
    /// One of them has no name.
    unnamed: bool,
}

thread_local! {
    static AGAINST: std::cell::RefCell<Against> = std::cell::RefCell::default();
}

/// An item of the page read as the full type, compared with the lean decoder's item of the same
/// place and dropped at once. `ObjectList<EgressShard>` held an `EgressShard` (896 bytes) per
/// item: a page of minimal shards made the oracle alone pass the heap budget the controller's
/// decoding is held to (2,760,117 bytes of 40,000 shards needed one allocation of 58.7 MB).
#[derive(Clone)]
struct Compared;

impl<'de> serde::Deserialize<'de> for Compared {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let full = EgressShard::deserialize(d)?;
        AGAINST.with_borrow_mut(|a| {
            if let Some(lean) = a.records.get(a.read) {
                agree(&lean.0, &full);
            }
            a.read += 1;
            a.unnamed |= full.metadata.name.is_none();
        });
        Ok(Compared)
    }
}

fuzz_target!(|data: &[u8]| {
    fuzzing::alloc::held_to(fuzzing::alloc::CELL, data.len(), || {
        if data.len() >= MAX_CELL_ANSWER {
            return;
        }
        // In a block of its own, so that the page decoded here is not held while the client
        // decodes it again below.
        {
            let (lean, records) = match serde_json::from_slice::<ObjectList<WatchedShard>>(data) {
                Ok(page) => (Ok(page.metadata), page.items),
                Err(e) => (Err(e), Vec::new()),
            };
            AGAINST.set(Against {
                records,
                ..Against::default()
            });
            let full = serde_json::from_slice::<ObjectList<Compared>>(data);
            let Against {
                records, unnamed, ..
            } = AGAINST.take();
            if let Ok(full) = full {
                match &lean {
                    Ok(lean) => {
                        assert_eq!(records.len(), full.items.len());
                        assert_eq!(lean.continue_, full.metadata.continue_);
                    }
                    // A key twice in one object: the full type keeps the last, the lean decoder
                    // refuses the page, naming the field. No API server sends one (Go's encoder
                    // never writes it).
                    Err(e) if e.to_string().contains("duplicate field") => {}
                    // A shard without a name: refused, so that a tiny item cannot cost a record
                    // (issue #37). No API server sends one.
                    Err(e) if e.to_string().contains("without metadata.name") && unnamed => {}
                    Err(e) => panic!("the lean decoder refuses what the full type reads: {e}"),
                }
            }
            for shard in &records {
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
