//! The shared test world (`localplane::testing`): what it holds when it starts, and what it
//! refuses to start with.

use egress_api::ipam::IPPool;
use kube::Api;
use localplane::testing::{
    ADDRESS_CLASS, ADMIN, CONTROLLER, LOCATION, PLATFORM_PROJECT, ROOT_CIDR, SHARD_NAMESPACE,
    World, WorldError, workspace_root,
};

fn config() -> std::path::PathBuf {
    workspace_root().join("config")
}

#[tokio::test]
async fn a_world_holds_the_inventory_namespaces_and_kubeconfigs_and_counts_nothing_yet() {
    let world = World::builder(config()).start().await.unwrap();
    assert_eq!(world.lp().metrics().total(), 0, "start-up is not counted");

    // The inventory, with its empty root cidr filled in, served by IPAM.
    let pools: Api<IPPool> = Api::all(world.ipam_admin());
    let root = pools.get("datum-egress-shard-ipv6-root").await.unwrap();
    assert_eq!(root.spec.cidr, ROOT_CIDR);
    // A claim binds through the class chain the inventory describes, and its address can be
    // left retained.
    let claim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "earlier", "namespace": "default"},
        "spec": {"className": ADDRESS_CLASS, "ipFamily": "IPv6", "prefixLength": 128,
                 "scope": {"location": {"apiGroup": "networking.datumapis.com", "kind": "Location", "name": LOCATION}}},
    }))
    .unwrap();
    let held = world.retain_address(&claim).await;
    assert!(
        held.starts_with("2001:db8:") && held.ends_with("/128"),
        "{held}"
    );
    assert!(world.claim_now("earlier").is_none(), "the claim is gone");
    assert_eq!(
        world
            .allocations()
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    let shard = world.create_shard("s").await;
    assert_eq!(shard.metadata.namespace.as_deref(), Some(SHARD_NAMESPACE));
    assert!(world.lp().cell_uid().len() > 10, "kube-system has a uid");

    // Store reads cost no request; HTTP reads do.
    let before = world.lp().metrics().total();
    assert!(world.shard_now("s").is_some());
    assert!(world.claim_now("none").is_none());
    assert_eq!(world.lp().metrics().total(), before);

    // The controller's kubeconfigs name its identity and the right planes.
    let cell = std::fs::read_to_string(world.cell_kubeconfig()).unwrap();
    let ipam = std::fs::read_to_string(world.ipam_kubeconfig()).unwrap();
    assert!(cell.contains(&format!("{CONTROLLER}-token")), "{cell}");
    assert!(
        ipam.contains(&format!("/projects/{PLATFORM_PROJECT}/control-plane")),
        "{ipam}"
    );
    assert!(world.kubeconfig("cell", ADMIN).starts_with(world.dir()));
    world.shutdown().await;
}

#[tokio::test]
async fn a_cell_only_world_has_no_ipam() {
    let a = World::builder(config()).start().await.unwrap();
    let b = World::builder(config()).cell_only().start().await.unwrap();
    assert_ne!(
        a.lp().cell_uid(),
        b.lp().cell_uid(),
        "two cells, two identities"
    );
    assert!(b.lp().project(PLATFORM_PROJECT).is_none());
    assert!(b.claim_now("anything").is_none());
    b.create_shard("twin").await;
    assert!(b.shard_now("twin").is_some());
}

/// Why `builder` does not start.
async fn refusal(builder: localplane::testing::WorldBuilder) -> WorldError {
    match builder.start().await {
        Ok(_) => panic!("the world started"),
        Err(e) => e,
    }
}

#[tokio::test]
async fn a_missing_inventory_or_a_bad_manifest_is_named() {
    let missing = config().join("ipam/no-such-inventory.yaml");
    let err = refusal(World::builder(config()).inventory(&missing)).await;
    assert!(matches!(err, WorldError::Inventory { .. }), "{err}");
    assert!(err.to_string().contains("no-such-inventory.yaml"), "{err}");

    let nothing = serde_json::json!({"apiVersion": "v1", "kind": "Nothing"});
    let err = refusal(World::builder(config()).object("cell", nothing)).await;
    assert!(matches!(err, WorldError::Object { .. }), "{err}");
    assert!(err.to_string().contains("Nothing"), "{err}");
}
