//! The shipped grants are enough, and nothing more is used: the cell RBAC in `config/rbac` and
//! the Milo grant in `config/egress-address/milo-grant.yaml`, enforced by localplane.

use std::time::Duration;

use crate::common::*;
use egress_address::LeaderElection;
use localplane::Identity;
use localplane::testing::workspace_root;

const CELL_USER: &str = "system:serviceaccount:system:egress-address-controller";
const IPAM_USER: &str = "system:egress-address@cloud.datumapis.com";

#[tokio::test]
async fn the_shipped_grants_cover_every_request() {
    let rbac = workspace_root().join("config/rbac");
    let plane = Plane::with(
        Plane::builder()
            .namespace("system")
            .identity(Identity::user("cell-sa", "cell-sa-token", CELL_USER))
            .identity(Identity::user("ipam-user", "ipam-user-token", IPAM_USER))
            .rbac(true)
            .manifest(
                PLATFORM,
                workspace_root().join("config/egress-address/milo-grant.yaml"),
            )
            .manifest("cell", rbac.join("role.yaml"))
            .manifest("cell", rbac.join("role_binding.yaml"))
            .manifest("cell", rbac.join("leader_election_role.yaml"))
            .manifest("cell", rbac.join("leader_election_role_binding.yaml")),
    )
    .await;

    let mut s = settings();
    s.drift_check_interval = Duration::from_millis(300);
    s.leader_election = Some(LeaderElection {
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(200),
        ..LeaderElection::new("system")
    });
    let cell = plane.client("cell", "cell-sa");
    let ipam = egress_address::ipam_client(&plane.kubeconfig("cell", "ipam-user"), PLATFORM)
        .await
        .unwrap();
    // Claim, adopt a retained allocation, release, drift-check: every verb the controller uses.
    // The adopted shard's incarnation made the retained allocation, so it is stored first.
    let adopted = plane.create_shard("adopted").await;
    plane
        .retain_address(&plane.desired_claim("adopted", adopted.metadata.uid.as_deref().unwrap()))
        .await;
    let ctl = start_controller_with(s, cell, ipam).await;

    plane.create_shard("fresh").await;
    addressed(&plane, "fresh").await;
    let adopted = addressed(&plane, "adopted").await;
    assert_eq!(
        adopted.spec.shard_address_ipv6_claim_ref.unwrap().kind,
        "IPAllocation"
    );
    plane.delete_shard("fresh").await;
    eventually(10, "the release", || async {
        plane
            .claim_now(&plane.claim_name("fresh"))
            .is_none()
            .then_some(())
    })
    .await;
    // The drift check reads the adopted shard's allocation (its own verb) every interval.
    eventually(10, "a drift check", || async {
        (plane.requests(|k| {
            k.verb == "get" && k.resource.starts_with("ipallocations") && k.code == 200
        }) >= 2)
            .then_some(())
    })
    .await;
    let refused = plane.requests(|k| k.code == 403 || k.code == 401);
    assert_eq!(refused, 0, "{:#?}", plane.lp().metrics().snapshot());
    assert!(
        plane
            .event_reasons("adopted")
            .await
            .contains(&"AddressAssigned".to_string())
    );
    ctl.stop().await.unwrap();
}
