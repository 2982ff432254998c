//! A watch resumed after the cell compacted its history: the controller is cut off from its
//! cell, shards are deleted and created meanwhile, the history is compacted past where its watch
//! stood, and the controller comes back to a 410 Gone. It must list again and lose nothing: the
//! new shard addressed, the deleted one's claim released, the kept one untouched. Judged on
//! localplane and on the real kube-apiserver with etcd (its watch cache off, so that watches are
//! served from etcd and meet its compaction, as they do once a watch cache's window has passed).

use std::path::{Path, PathBuf};

use egress_api::shard::EgressShard;
use futures::StreamExt;
use kube::api::{Api, DeleteParams, PostParams, WatchEvent, WatchParams};
use localplane::testing::shard_object;
use realcell::{Identity, RealCell};

use crate::common::*;
use crate::relay::{Relay, client_through};

/// The cell under test: where it is, who administers it, how its history is compacted.
enum Cell<'a> {
    Local(&'a Plane),
    Real(&'a RealCell),
}

impl Cell<'_> {
    fn kubeconfig(&self) -> PathBuf {
        match self {
            Cell::Local(plane) => plane.cell_kubeconfig().to_path_buf(),
            Cell::Real(real) => real.kubeconfig(Identity::Admin),
        }
    }

    async fn admin(&self) -> kube::Client {
        match self {
            Cell::Local(plane) => plane.cell(),
            Cell::Real(real) => real.client(Identity::Admin).await.unwrap(),
        }
    }

    async fn compact(&self) {
        match self {
            Cell::Local(plane) => plane.lp().plane("cell").unwrap().compact_history(),
            Cell::Real(real) => {
                real.compact_history().await.unwrap();
            }
        }
    }
}

/// The server a kubeconfig names.
fn server_of(kubeconfig: &Path) -> String {
    let config = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    config.clusters[0]
        .cluster
        .as_ref()
        .and_then(|c| c.server.clone())
        .unwrap()
}

async fn addressed_in(shards: &Api<EgressShard>, name: &str) -> EgressShard {
    eventually(30, &format!("shard {name} addressed"), || async {
        let s = shards.get(name).await.ok()?;
        (!s.spec.shard_address_ipv6.is_empty()).then_some(s)
    })
    .await
}

/// Whether a watch from `rv` is told 410 Gone (in its answer or as its first event).
async fn told_gone(shards: &Api<EgressShard>, rv: &str) -> bool {
    match shards.watch(&WatchParams::default(), rv).await {
        Err(kube::Error::Api(s)) => s.code == 410,
        Err(e) => panic!("watching from {rv}: {e}"),
        Ok(stream) => {
            let mut stream = stream.boxed();
            match tokio::time::timeout(std::time::Duration::from_secs(10), stream.next()).await {
                Ok(Some(Ok(WatchEvent::Error(s)))) => s.code == 410,
                _ => false,
            }
        }
    }
}

async fn a_watch_resumed_after_compaction_lists_again_and_loses_nothing(
    cell: Cell<'_>,
    ipam: &Plane,
) {
    let admin = cell.admin().await;
    let shards: Api<EgressShard> = Api::namespaced(admin, SHARD_NS);
    let kubeconfig = cell.kubeconfig();
    let relay = Relay::to(&server_of(&kubeconfig)).await;
    let ctl = start_controller_with(
        settings(),
        client_through(&relay, &kubeconfig).await,
        ipam.ipam_for_controller().await,
    )
    .await;
    let expired = |ctl: &Ctl| ctl.sample("egress_address_shard_watch_expired_total", &[]);

    for name in ["kept", "deleted"] {
        let shard: EgressShard = serde_json::from_value(shard_object(SHARD_NS, name)).unwrap();
        shards.create(&PostParams::default(), &shard).await.unwrap();
    }
    let kept = addressed_in(&shards, "kept").await;
    let deleted = addressed_in(&shards, "deleted").await;
    let claim = deleted
        .spec
        .shard_address_ipv6_claim_ref
        .clone()
        .unwrap()
        .name;
    let last = if kept.metadata.resource_version > deleted.metadata.resource_version {
        &kept
    } else {
        &deleted
    };
    settled(&ctl, last).await;
    let seen = last.metadata.resource_version.clone().unwrap();

    relay.cut();
    shards
        .delete("deleted", &DeleteParams::default())
        .await
        .unwrap();
    let created: EgressShard = serde_json::from_value(shard_object(SHARD_NS, "created")).unwrap();
    shards
        .create(&PostParams::default(), &created)
        .await
        .unwrap();
    cell.compact().await;
    assert!(
        told_gone(&shards, &seen).await,
        "a watch from {seen}, where the controller's stood, is told 410 after the compaction"
    );
    assert_eq!(
        expired(&ctl),
        0,
        "nothing expired before the controller came back"
    );

    relay.restore();
    addressed_in(&shards, "created").await;
    claim_released(
        ipam,
        &claim,
        "the deleted shard's claim released after the relist",
    )
    .await;
    assert!(
        expired(&ctl) >= 1,
        "the controller met the compaction (410) and listed again"
    );
    let kept_now = shards.get("kept").await.unwrap();
    assert_eq!(kept_now.spec, kept.spec, "the kept shard is untouched");
    assert_eq!(
        kept_now.metadata.resource_version, kept.metadata.resource_version,
        "nothing was written to the kept shard"
    );
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn on_localplane_a_watch_resumed_after_compaction_lists_again_and_loses_nothing() {
    let plane = Plane::start().await;
    a_watch_resumed_after_compaction_lists_again_and_loses_nothing(Cell::Local(&plane), &plane)
        .await;
}

#[tokio::test]
async fn on_the_real_apiserver_a_watch_resumed_after_etcd_compaction_lists_again_and_loses_nothing()
{
    // A control plane of its own: without its watch cache, the apiserver serves watches from
    // etcd, so a watch from before the compaction is told 410 at once rather than once the
    // cache's 75 s window has passed.
    let real = RealCell::start_with(&["--watch-cache=false"])
        .await
        .expect("the real control plane starts");
    real.install_crds(
        &localplane::testing::workspace_root()
            .join("config/crd/network.datumapis.com_egressshards.yaml"),
    )
    .await
    .unwrap();
    let admin = real.client(Identity::Admin).await.unwrap();
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": SHARD_NS}})).unwrap();
    Api::all(admin)
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let ipam = Plane::start().await;
    a_watch_resumed_after_compaction_lists_again_and_loses_nothing(Cell::Real(&real), &ipam).await;
    real.stop().await.unwrap();
}
