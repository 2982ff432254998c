//! The event publisher against localplane over HTTP: events give way to address work.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::common::*;
use egress_address::Metrics;
use egress_address::reconcile::{Note, reason};
use egress_address::runtime::events::Notifier;
use egress_address::runtime::token::LeaderToken;
use egress_address::shard::{CachedShard, ShardKey, ShardMemory};
use egress_api::shard::EgressShard;
use tokio_util::sync::CancellationToken;

fn notifier(plane: &Plane, metrics: &Metrics) -> (Notifier, Arc<ShardMemory>) {
    let memory = Arc::new(ShardMemory::new(metrics.clone()));
    let notifier = Notifier::new(
        plane.cell(),
        "test-instance",
        memory.clone(),
        LeaderToken::always(),
        metrics.clone(),
        Arc::default(),
        Duration::from_secs(3600),
    );
    (notifier, memory)
}

fn assigned(memory: &ShardMemory, shard: &EgressShard, address: &str) -> Note {
    memory
        .addresses()
        .observe(&ShardKey::of(shard), &CachedShard::new(shard));
    Note::normal(
        shard,
        reason::ADDRESS_ASSIGNED,
        format!("Assigned {address}"),
    )
}

#[tokio::test]
async fn events_wait_while_shards_are_being_addressed() {
    let plane = Plane::start().await;
    let shard = plane.create_shard("busy-1").await;
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Metrics::register(&mut registry);
    let waiting = || {
        sample(
            &egress_address::metrics::encode(&registry),
            "egress_address_events_waiting",
            &[],
        )
    };
    let (notifier, memory) = notifier(&plane, &metrics);
    let busy = Arc::new(AtomicBool::new(true));
    let stop = CancellationToken::new();
    let publisher = tokio::spawn(notifier.clone().run(stop.clone(), Duration::from_secs(1), {
        let busy = busy.clone();
        move || busy.load(Ordering::SeqCst)
    }));
    notifier.publish(assigned(&memory, &shard, "2001:db8::1"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        plane.event_reasons("busy-1").await.is_empty(),
        "an event goes out while reconciles are busy"
    );
    assert_eq!(
        waiting(),
        1,
        "the held event is kept and shown in the gauge"
    );

    busy.store(false, Ordering::SeqCst);
    let reasons = eventually(5, "the held event sent once idle", || async {
        let r = plane.event_reasons("busy-1").await;
        (!r.is_empty()).then_some(r)
    })
    .await;
    assert_eq!(reasons, [reason::ADDRESS_ASSIGNED]);
    assert_eq!(waiting(), 0);
    stop.cancel();
    publisher.await.unwrap();
}

#[tokio::test]
async fn a_stopping_publisher_flushes_what_it_held() {
    let plane = Plane::start().await;
    let shard = plane.create_shard("busy-2").await;
    let metrics = Metrics::unregistered();
    let (notifier, memory) = notifier(&plane, &metrics);
    let stop = CancellationToken::new();
    let publisher = tokio::spawn(notifier.clone().run(
        stop.clone(),
        Duration::from_secs(2),
        || true,
    ));
    notifier.publish(assigned(&memory, &shard, "2001:db8::2"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(plane.event_reasons("busy-2").await.is_empty());
    stop.cancel();
    publisher.await.unwrap();
    assert_eq!(
        plane.event_reasons("busy-2").await,
        [reason::ADDRESS_ASSIGNED],
        "shutdown sends held events while the lease is still held"
    );
}
