//! The shipped grants are enough, and nothing more is used: the cell RBAC in `config/rbac` and
//! the Milo grant in `config/egress-address/milo-grant.yaml`, enforced by localplane.

use std::time::Duration;

use crate::common::*;
use egress_address::LeaderElection;
use kube::api::{DeleteParams, PostParams};
use localplane::{Identity, LocalPlane};

const CELL_USER: &str = "system:serviceaccount:system:egress-address-controller";
const IPAM_USER: &str = "system:egress-address@cloud.datumapis.com";

#[tokio::test]
async fn the_shipped_grants_cover_every_request() {
    let dir = tempfile::tempdir().unwrap();
    let root = repo_root();
    let mut b = LocalPlane::builder()
        .crd_dir(root.join("config/crd"))
        .project(PLATFORM)
        .project_namespace(CLAIM_NS)
        .namespace(SHARD_NS)
        .namespace("system")
        .identity(Identity::admin(ADMIN, ADMIN_TOKEN))
        .identity(Identity::user("cell-sa", "cell-sa-token", CELL_USER))
        .identity(Identity::user("ipam-user", "ipam-user-token", IPAM_USER))
        .rbac(true)
        .ipam(PLATFORM)
        .manifest(PLATFORM, inventory_file(dir.path()))
        .manifest(PLATFORM, root.join("config/egress-address/milo-grant.yaml"));
    for f in [
        "role.yaml",
        "role_binding.yaml",
        "leader_election_role.yaml",
        "leader_election_role_binding.yaml",
    ] {
        b = b.manifest("cell", root.join("config/rbac").join(f));
    }
    let mut lp = b
        .build()
        .unwrap()
        .serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    lp.set_kubeconfig_dir(dir.path());
    let plane = Plane { lp, dir };
    plane.ensure_kube_system();

    let mut s = settings();
    s.drift_check_interval = Duration::from_millis(300);
    s.leader_election = Some(LeaderElection {
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(200),
        ..LeaderElection::new("system")
    });
    let cell = plane.lp.http_client("cell", "cell-sa").unwrap();
    let ipam = egress_address::ipam_client(
        &plane.lp.kubeconfig_path("cell", "ipam-user").unwrap(),
        PLATFORM,
    )
    .await
    .unwrap();
    let ctl = start_controller_with(s, cell, ipam).await;

    // Claim, adopt a retained allocation, release, drift-check: every verb the controller uses.
    let name = plane.claim_name("adopted");
    let mut earlier = plane.desired_claim("adopted", "an-earlier-incarnation");
    earlier.spec.reclaim_policy = "Retain".into();
    plane
        .claims()
        .create(&PostParams::default(), &earlier)
        .await
        .unwrap();
    plane
        .claims()
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();

    plane.create_shard("fresh").await;
    plane.create_shard("adopted").await;
    addressed(&plane, "fresh").await;
    let adopted = addressed(&plane, "adopted").await;
    assert_eq!(
        adopted.spec.shard_address_ipv6_claim_ref.unwrap().kind,
        "IPAllocation"
    );
    plane
        .shards()
        .delete("fresh", &DeleteParams::default())
        .await
        .unwrap();
    eventually(10, "the release", || async {
        plane
            .claim_now(&plane.claim_name("fresh"))
            .is_none()
            .then_some(())
    })
    .await;
    // The drift check reads the adopted shard's allocation (its own verb) every interval.
    eventually(10, "a drift check", || async {
        (plane
            .lp
            .metrics()
            .count(|k| k.verb == "get" && k.resource.starts_with("ipallocations") && k.code == 200)
            >= 2)
            .then_some(())
    })
    .await;
    let refused = plane.lp.metrics().count(|k| k.code == 403 || k.code == 401);
    assert_eq!(refused, 0, "{:#?}", plane.lp.metrics().snapshot());
    assert!(
        plane
            .event_reasons("adopted")
            .await
            .contains(&"AddressAssigned".to_string())
    );
    ctl.stop().await.unwrap();
}
