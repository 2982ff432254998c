//! The cell's answers to the shard watch, end to end: the controller's own watch task
//! (`runtime::watch::Watch`, with kube's watcher underneath and the lean decoder
//! `shard::watched::WatchedShard`) runs against a cell that answers every list with a page (items,
//! a resourceVersion, sometimes a continue token) and every watch with a stream of events (any
//! type, any object, garbage lines, an ERROR with a Status), each cut into chunks anywhere and
//! sometimes cut off, or refuses with a Status. The clock is paused, so the watcher's backoff
//! passes at once; the run ends when the cell's answers run out.
//!
//! What must hold: no panic, no hang, and the cache holds only shards the cell sent.

#![no_main]

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use egress_address::connect::connection::MAX_CELL_ANSWER;
use egress_address::runtime::watch::Watch;
use fuzzing::{Answer, Plane, Sent, json};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

const LIST: usize = 0;
const WATCH: usize = 1;

fn route(sent: &Sent) -> usize {
    let watch = sent
        .uri
        .split(['?', '&'])
        .any(|p| p == "watch=true" || p == "watch=1");
    if watch { WATCH } else { LIST }
}

fn version(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    json::text(u, &["1", "5", "10", "99", "0", ""])
}

fn page(u: &mut Unstructured<'_>) -> arbitrary::Result<Value> {
    let items = (0..u.int_in_range(0..=4)?)
        .map(|_| json::shard(u))
        .collect::<arbitrary::Result<Vec<_>>>()?;
    let continue_ = if u.ratio(1, 3)? {
        json!(json::text(
            u,
            &[
                "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTAsInN0YXJ0Ijoidy0yIn0",
                ""
            ]
        )?)
    } else {
        Value::Null
    };
    let metadata = json::object(
        vec![
            ("resourceVersion", json!(version(u)?)),
            ("continue", continue_),
        ],
        u,
    )?;
    json::object(
        vec![
            ("apiVersion", json!("network.datumapis.com/v1alpha1")),
            ("kind", json!("EgressShardList")),
            ("metadata", metadata),
            ("items", json!(items)),
        ],
        u,
    )
}

fn event(u: &mut Unstructured<'_>) -> arbitrary::Result<Vec<u8>> {
    if let Some(line) = fuzzing::real(u, "watch")? {
        return Ok(line);
    }
    let kind = json::text(u, &["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"])?;
    let object = match kind.as_str() {
        "ERROR" => {
            let code = *u.choose(&[410, 500, 403])?;
            json::status(u, code)?
        }
        "BOOKMARK" => json!({
            "kind": "EgressShard", "apiVersion": "network.datumapis.com/v1alpha1",
            "metadata": {"resourceVersion": version(u)?,
                "annotations": {"k8s.io/initial-events-end": "true"}}
        }),
        _ => json::shard(u)?,
    };
    let value = json::object(vec![("type", json!(kind)), ("object", object)], u)?;
    let mut line = json::bytes(u, &value)?;
    if u.ratio(15, 16)? {
        line.push(b'\n');
    }
    Ok(line)
}

fn list_answer(u: &mut Unstructured<'_>) -> arbitrary::Result<Answer> {
    let status = if u.ratio(4, 5)? {
        200
    } else {
        fuzzing::status(u)?
    };
    let body = match fuzzing::real(u, "list_page")? {
        Some(body) => body,
        None => {
            let value = if status == 200 {
                page(u)?
            } else {
                json::status(u, status)?
            };
            json::bytes(u, &value)?
        }
    };
    fuzzing::answer(u, status, body)
}

fn watch_answer(u: &mut Unstructured<'_>) -> arbitrary::Result<Answer> {
    let status = if u.ratio(5, 6)? {
        200
    } else {
        fuzzing::status(u)?
    };
    let body = if status == 200 {
        let mut body = Vec::new();
        for _ in 0..u.int_in_range(0..=6)? {
            body.extend(event(u)?);
        }
        body
    } else {
        let value = json::status(u, status)?;
        json::bytes(u, &value)?
    };
    let mut answer = fuzzing::answer(u, status, body)?;
    if answer.cuts.is_empty() && u.ratio(1, 2)? {
        answer.cuts = Vec::<u32>::arbitrary(u)?;
    }
    Ok(answer)
}

fuzz_target!(|data: &[u8]| {
    fuzzing::alloc::held_to(fuzzing::alloc::CELL, data.len(), || {
        let mut u = Unstructured::new(data);
        let (mut lists, mut watches) = (VecDeque::new(), VecDeque::new());
        for _ in 0..u.int_in_range(1..=8).unwrap_or(1) {
            let next = if u.ratio(1, 2).unwrap_or(false) {
                list_answer(&mut u).map(|a| lists.push_back(a))
            } else {
                watch_answer(&mut u).map(|a| watches.push_back(a))
            };
            if next.is_err() {
                break;
            }
        }
        // Every shard name the cell sends appears in some answer's bytes.
        let mut sent_bytes = Vec::new();
        for a in lists.iter().chain(watches.iter()) {
            sent_bytes.extend_from_slice(&a.body);
        }
        // Searched with memchr's substring finder: comparing every window of the bytes, each
        // comparison traced by the coverage instrumentation, took a third of this target's time.
        let sent = |needle: &[u8]| memchr::memmem::find(&sent_bytes, needle).is_some();
        let cell = Plane::routed(vec![lists, watches], route);
        let rt = fuzzing::runtime();
        let names = rt.block_on(async {
            let shared = fuzzing::shared(Plane::new([]).client(1 << 20));
            shared
                .leader
                .grant(tokio::time::Instant::now() + Duration::from_secs(3600));
            let api = Watch::api(cell.client(MAX_CELL_ANSWER), None);
            let watch = Watch::new(api, shared.clone());
            let stop = cell.exhausted();
            tokio::time::timeout(Duration::from_secs(24 * 3600), watch.run(stop))
                .await
                .expect("the watch stops once the cell's answers run out");
            shared
                .cache
                .collect(|c| Some(c.key().name.to_string()))
                .into_iter()
                .collect::<HashSet<_>>()
        });
        // Escapes would let a name stand in the bytes in another spelling.
        if sent_bytes.contains(&b'\\') {
            return;
        }
        for name in names {
            let quoted = serde_json::to_string(&name).unwrap();
            let raw = quoted.trim_matches('"');
            assert!(
                sent(raw.as_bytes()) || name.is_empty(),
                "the cache holds {name:?}, which the cell never sent"
            );
        }
    })
});
