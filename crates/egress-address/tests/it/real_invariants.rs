//! The invariants that need only the cell, judged with the real kube-apiserver and etcd as the
//! cell (the shared control plane with the shipped install, the controller as its
//! ServiceAccount) and localplane's IPAM stand-in: never two live shards on one address in any
//! cell, never an address no egress shard may carry, a shard recreated under its name gets its
//! own claim, and drift is reported, never rewritten.

use std::time::Duration;

use egress_address::ipam::naming::{ANNOTATION_CELL, ANNOTATION_SHARD_UID, claim_name};
use egress_api::ipam::IPClaim;
use egress_api::shard::EgressShard;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use localplane::testing::shard_object;
use realcell::Identity;

use crate::common::*;
use crate::real_cell::{addressed_on, cell_id, installed, namespace};

/// A controller as the install's ServiceAccount on the shared real cell, for `ns` only, without
/// leader election (tests of this binary run side by side, each in namespaces of its own).
async fn controller_on_real(
    ns: &str,
    ipam: &Plane,
    tune: impl FnOnce(&mut egress_address::Settings),
) -> Ctl {
    let real = installed().await;
    let mut s = settings();
    s.shard_namespace = Some(ns.into());
    tune(&mut s);
    start_counted(
        s,
        &real.kubeconfig(Identity::Controller),
        ipam.ipam_for_controller().await,
    )
    .await
}

/// The shards of `ns` on the real cell, as its admin sees them, with the namespace made.
async fn real_shards(ns: &str) -> (kube::Client, Api<EgressShard>) {
    let admin = installed().await.client(Identity::Admin).await.unwrap();
    namespace(&admin, ns).await;
    (admin.clone(), Api::namespaced(admin, ns))
}

async fn create(shards: &Api<EgressShard>, name: &str) -> EgressShard {
    let ns = shards.namespace().unwrap_or_default();
    let shard: EgressShard = serde_json::from_value(shard_object(ns, name)).unwrap();
    shards.create(&PostParams::default(), &shard).await.unwrap()
}

/// The events about shard `name` in `ns`, as events.k8s.io lists them.
async fn events(admin: &kube::Client, ns: &str, name: &str) -> Vec<Event> {
    Api::<Event>::namespaced(admin.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect()
}

/// The note of the first event about shard `name` with `reason`.
async fn note(admin: &kube::Client, ns: &str, name: &str, reason: &str) -> Option<String> {
    events(admin, ns, name)
        .await
        .into_iter()
        .find(|e| e.reason.as_deref() == Some(reason))
        .map(|e| e.note.unwrap_or_default())
}

fn annotation(claim: &IPClaim, key: &str) -> Option<String> {
    claim.metadata.annotations.as_ref()?.get(key).cloned()
}

#[tokio::test]
async fn a_real_cell_and_another_with_one_shard_name_get_two_addresses_and_keep_them() {
    // One IPAM; its own localplane cell is the second cell, the real server the first.
    let ipam = Plane::start().await;
    let (admin, shards) = real_shards(SHARD_NS).await;
    let real_cell = cell_id(&admin).await;
    assert_ne!(real_cell, ipam.cell_id());
    let on_real = controller_on_real(SHARD_NS, &ipam, |_| {}).await;
    let on_local = start_controller(&ipam, settings()).await;
    create(&shards, "twin").await;
    ipam.create_shard("twin").await;
    let in_real = addressed_on(&shards, "twin").await;
    let in_local = addressed(&ipam, "twin").await;
    assert_ne!(
        in_real.spec.shard_address_ipv6, in_local.spec.shard_address_ipv6,
        "two live shards on one address"
    );
    let real_claim = claim_name(
        &real_cell,
        SHARD_NS,
        "twin",
        in_real.metadata.uid.as_deref().unwrap(),
    );
    assert_eq!(
        in_real
            .spec
            .shard_address_ipv6_claim_ref
            .clone()
            .unwrap()
            .name,
        real_claim
    );
    let held = ipam.claim_now(&real_claim).expect("the real cell's claim");
    assert_eq!(annotation(&held, ANNOTATION_CELL), Some(real_cell.clone()));
    assert_eq!(
        annotation(&held, ANNOTATION_SHARD_UID),
        in_real.metadata.uid.clone()
    );

    // Deleting the real cell's shard releases its claim and nothing of the other cell's.
    shards
        .delete("twin", &DeleteParams::default())
        .await
        .unwrap();
    claim_released(&ipam, &real_claim, "the real cell's claim released").await;
    assert!(
        ipam.claim_now(&ipam.claim_name("twin")).is_some(),
        "the other cell's live shard lost its claim"
    );
    on_real.stop().await.unwrap();
    on_local.stop().await.unwrap();
}

#[tokio::test]
async fn on_a_real_cell_addresses_no_shard_may_carry_are_never_written() {
    const NS: &str = "real-unusable";
    let ipam = Plane::start().await;
    answer_claims_with(&ipam, "fe80::1/128");
    let (admin, shards) = real_shards(NS).await;
    let ctl = controller_on_real(NS, &ipam, |_| {}).await;
    let made = create(&shards, "odd").await;
    let why = eventually(30, "an UnusableAnswer event on the real cell", || async {
        note(&admin, NS, "odd", "UnusableAnswer").await
    })
    .await;
    assert!(why.contains("link-local"), "{why}");
    let now = shards.get("odd").await.unwrap();
    assert!(
        now.spec.shard_address_ipv6.is_empty(),
        "a link-local address written"
    );
    assert_eq!(
        now.metadata.resource_version, made.metadata.resource_version,
        "the shard was written"
    );
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn on_a_real_cell_a_shard_recreated_under_its_name_gets_its_own_claim() {
    const NS: &str = "real-phoenix";
    let ipam = Plane::start().await;
    let (admin, shards) = real_shards(NS).await;
    let cell = cell_id(&admin).await;
    let ctl = controller_on_real(NS, &ipam, |_| {}).await;
    create(&shards, "phoenix").await;
    let first = addressed_on(&shards, "phoenix").await;
    ctl.stop().await.unwrap();
    let earlier_name = claim_name(&cell, NS, "phoenix", first.metadata.uid.as_deref().unwrap());

    // Deleted and made again while no controller ran: the earlier incarnation's claim is still
    // there, under a name of its own.
    shards
        .delete("phoenix", &DeleteParams::default())
        .await
        .unwrap();
    let second = create(&shards, "phoenix").await;
    assert_ne!(first.metadata.uid, second.metadata.uid);
    let earlier = ipam.claim_now(&earlier_name).unwrap();

    let ctl = controller_on_real(NS, &ipam, |_| {}).await;
    let again = addressed_on(&shards, "phoenix").await;
    assert_eq!(again.metadata.uid, second.metadata.uid);
    let name = claim_name(&cell, NS, "phoenix", again.metadata.uid.as_deref().unwrap());
    assert_ne!(name, earlier_name);
    let now = ipam.claim_now(&name).unwrap();
    assert_eq!(annotation(&now, ANNOTATION_SHARD_UID), second.metadata.uid);
    assert_eq!(
        format!("{}/128", again.spec.shard_address_ipv6),
        now.status.clone().unwrap().allocated_cidr
    );
    assert_ne!(
        now.status.as_ref().map(|s| &s.allocated_cidr),
        earlier.status.as_ref().map(|s| &s.allocated_cidr),
        "a gone incarnation's address came back"
    );
    assert_eq!(
        ipam.claim_now(&earlier_name).unwrap().metadata.uid,
        earlier.metadata.uid,
        "the earlier incarnation's claim was touched"
    );
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn on_a_real_cell_drift_is_reported_and_never_rewritten() {
    const NS: &str = "real-drift";
    let ipam = Plane::start().await;
    let (admin, shards) = real_shards(NS).await;
    let ctl = controller_on_real(NS, &ipam, |s| {
        s.drift_check_interval = Duration::from_millis(400);
    })
    .await;
    create(&shards, "drifter").await;
    let before = addressed_on(&shards, "drifter").await;
    // Someone deletes the claim behind the controller's back.
    let claim = before
        .spec
        .shard_address_ipv6_claim_ref
        .clone()
        .unwrap()
        .name;
    ipam.claims()
        .delete(&claim, &DeleteParams::default())
        .await
        .unwrap();
    eventually(30, "an AddressDrift event on the real cell", || async {
        note(&admin, NS, "drifter", "AddressDrift").await
    })
    .await;
    assert!(ctl.sample("egress_address_drift_total", &[("kind", "missing")]) >= 1);
    let after = shards.get("drifter").await.unwrap();
    assert_eq!(after.spec, before.spec, "drift never rewrites the shard");
    assert_eq!(
        after.metadata.resource_version, before.metadata.resource_version,
        "nothing was written to the shard"
    );
    ctl.stop().await.unwrap();
}

#[tokio::test]
async fn on_a_real_cell_a_delete_landing_after_the_shard_was_recreated_frees_nothing_of_the_new_one()
 {
    const NS: &str = "real-late-delete";
    let ipam = Plane::start().await;
    let (admin, shards) = real_shards(NS).await;
    let cell = cell_id(&admin).await;
    // IPAM is slower than the controller waits: its claim DELETE times out and is retried, and
    // every copy lands after the shard came back under its name and was claimed for. Milo (and
    // localplane's stand-in by default) reads no precondition on it.
    let ctl = controller_on_real(NS, &ipam, |s| {
        s.request_timeout = Duration::from_millis(400);
    })
    .await;
    let first = create(&shards, "racer").await;
    addressed_on(&shards, "racer").await;
    ipam.set_faults(vec![localplane::FaultRule {
        plane: Some(PLATFORM.into()),
        verb: Some("delete".into()),
        resource: Some("ipclaims".into()),
        commit_delay_ms: 1500,
        ..Default::default()
    }]);
    shards
        .delete("racer", &DeleteParams::default())
        .await
        .unwrap();
    eventually(20, "a release on its way", || async {
        (ipam.lp().metrics().injected_faults().delayed_commits >= 1).then_some(())
    })
    .await;
    let second = create(&shards, "racer").await;
    let again = eventually(30, "the new shard addressed", || async {
        let s = shards.get("racer").await.ok()?;
        (s.metadata.uid == second.metadata.uid && !s.spec.shard_address_ipv6.is_empty())
            .then_some(s)
    })
    .await;
    eventually(30, "every delayed delete landed", || async {
        let m = ipam.lp().metrics();
        let landed = m.count(|k| k.verb == "delete" && k.resource.starts_with("ipclaims"));
        (landed >= m.injected_faults().delayed_commits).then_some(())
    })
    .await;
    ipam.clear_faults();
    let newcomer = create(&shards, "newcomer").await;
    let newcomer = eventually(30, "the newcomer addressed", || async {
        let s = shards.get("newcomer").await.ok()?;
        (s.metadata.uid == newcomer.metadata.uid && !s.spec.shard_address_ipv6.is_empty())
            .then_some(s)
    })
    .await;

    let name = claim_name(&cell, NS, "racer", again.metadata.uid.as_deref().unwrap());
    let claim = ipam
        .claim_now(&name)
        .expect("a late delete freed the live shard's claim");
    assert_eq!(annotation(&claim, ANNOTATION_SHARD_UID), again.metadata.uid);
    assert_eq!(
        claim.status.unwrap().allocated_cidr,
        format!("{}/128", again.spec.shard_address_ipv6)
    );
    assert_ne!(
        newcomer.spec.shard_address_ipv6, again.spec.shard_address_ipv6,
        "two live shards on one address"
    );
    assert!(
        ipam.claim_now(&claim_name(
            &cell,
            NS,
            "racer",
            first.metadata.uid.as_deref().unwrap()
        ))
        .is_none(),
        "the gone incarnation's claim was kept"
    );
    ctl.stop().await.unwrap();
}
