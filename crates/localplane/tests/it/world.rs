//! The shared test world (`localplane::testing`): what it holds when it starts, and what it
//! refuses to start with.

use egress_api::ipam::{IPClaim, IPPool};
use kube::Api;
use kube::api::{DeleteParams, PostParams, Preconditions};
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

/// A claim of the shipped class in `ns`, created over HTTP as the admin.
async fn claim_in(world: &World, ns: &str, name: &str) -> Result<IPClaim, kube::core::Status> {
    let claim: IPClaim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"className": ADDRESS_CLASS, "ipFamily": "IPv6", "prefixLength": 128,
                 "scope": {"location": {"apiGroup": "networking.datumapis.com", "kind": "Location", "name": LOCATION}}},
    }))
    .unwrap();
    Api::<IPClaim>::namespaced(world.ipam_admin(), ns)
        .create(&PostParams::default(), &claim)
        .await
        .map_err(|e| match e {
            kube::Error::Api(s) => *s,
            other => panic!("{other:?}"),
        })
}

#[tokio::test]
async fn a_world_sets_the_claim_quota_and_ends_project_namespaces_for_a_test() {
    let world = World::builder(config())
        .project_namespace("more")
        .project_namespace("gone")
        .claim_quota(1)
        .start()
        .await
        .unwrap();
    claim_in(&world, "default", "a").await.unwrap();
    let e = claim_in(&world, "more", "b").await.expect_err("over quota");
    assert_eq!(e.code, 403);
    assert!(
        e.message.contains("Insufficient quota resources available"),
        "{}",
        e.message
    );
    world.set_claim_quota(None);
    claim_in(&world, "more", "b").await.unwrap();
    assert_eq!(world.live_claims(), 2);

    world.terminate_project_namespace("more").await;
    assert_eq!(world.live_claims(), 1, "the namespace's claim went with it");
    let e = claim_in(&world, "more", "c")
        .await
        .expect_err("terminating");
    assert!(
        e.message.contains("because it is being terminated"),
        "{}",
        e.message
    );
    world.finish_project_namespace("more").await;
    let e = claim_in(&world, "more", "c").await.expect_err("gone");
    assert!(
        e.message.contains("namespace more does not exist"),
        "{}",
        e.message
    );

    world.delete_project_namespace("gone").await;
    let e = claim_in(&world, "gone", "c").await.expect_err("gone");
    assert_eq!(e.code, 403);
    world.add_project_namespace("gone");
    claim_in(&world, "gone", "c").await.unwrap();
    world.shutdown().await;
}

#[tokio::test]
async fn a_strict_world_reads_claim_delete_preconditions_and_a_default_one_does_not() {
    for strict in [false, true] {
        let world = World::builder(config())
            .ipam_strict_deletes(strict)
            .start()
            .await
            .unwrap();
        claim_in(&world, "default", "a").await.unwrap();
        let dp = DeleteParams::default().preconditions(Preconditions {
            uid: Some("not-its-uid".into()),
            resource_version: None,
        });
        let answer = world.claims().delete("a", &dp).await;
        match strict {
            false => assert!(
                answer.is_ok() && world.claim_now("a").is_none(),
                "{answer:?}"
            ),
            true => {
                assert!(
                    matches!(answer, Err(kube::Error::Api(ref s)) if s.code == 409),
                    "{answer:?}"
                );
                assert!(world.claim_now("a").is_some());
            }
        }
        world.shutdown().await;
    }
}
