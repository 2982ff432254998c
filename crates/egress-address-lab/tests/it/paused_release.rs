//! A leader SIGSTOPped with a release in flight, its shard made again under its name and
//! claimed for by the replica that took over, then woken (#34 (b)). IPAM is localplane's in its
//! default mode, which reads no DELETE preconditions, as Milo's does: the paused leader's late
//! DELETE must remove nothing the new incarnation holds. Run on localplane and on the real
//! kube-apiserver (the cell), with the controller binaries as processes.

use egress_address_lab::cell::CellKind;
use egress_address_lab::chaos::{CellServer, SHARD_NAMESPACE};
use egress_address_lab::fleet::{self, ControllerSpec, Fleet, locate_controller};
use egress_api::ipam::CLAIM_PHASE_RELEASING;
use egress_api::shard::EgressShard;
use kube::Api;
use localplane::testing::{
    CLAIM_NAMESPACE, PLATFORM_PROJECT, claims_key, eventually, shard_object,
};
use localplane::{FaultConfig, FaultRule, Plane};
use serde_json::Value;

use crate::common::one_fleet_at_a_time;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_paused_mid_release_frees_nothing_of_the_shard_made_again_on_localplane() {
    paused_mid_release(CellKind::Local).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_paused_mid_release_frees_nothing_of_the_shard_made_again_on_the_real_cell() {
    paused_mid_release(CellKind::Real).await;
}

/// Claim DELETEs on IPAM that land 4 s after they arrived: past the controllers' 1 s request
/// timeout, past the lease, after the takeover.
fn late_claim_deletes() -> FaultConfig {
    FaultConfig {
        seed: Some(34),
        rules: vec![FaultRule {
            plane: Some("platform".into()),
            verb: Some("delete".into()),
            resource: Some("ipclaims".into()),
            commit_delay_ms: 4000,
            ..Default::default()
        }],
        watch_cut_after_seconds: None,
    }
}

async fn addressed(server: &CellServer, name: &str, uid: &str) -> Value {
    eventually(40, &format!("shard {name} ({uid}) addressed"), || async {
        let s = server.shard(name).await.ok()??;
        let has = s["spec"]["shardAddressIPv6"]
            .as_str()
            .is_some_and(|a| !a.is_empty());
        (s["metadata"]["uid"] == uid && has).then_some(s)
    })
    .await
}

async fn made(server: &CellServer, name: &str) -> String {
    let stored = server
        .create(shard_object(SHARD_NAMESPACE, name))
        .await
        .unwrap();
    stored["metadata"]["uid"].as_str().unwrap().to_string()
}

/// The claim a shard's ref names, as IPAM holds it now.
fn claim_of(platform: &Plane, shard: &Value) -> Option<Value> {
    let name = shard["spec"]["shardAddressIPv6ClaimRef"]["name"].as_str()?;
    platform.object(&claims_key(), Some(CLAIM_NAMESPACE), name)
}

async fn paused_mid_release(kind: CellKind) {
    let _turn = one_fleet_at_a_time().await;
    let bin = locate_controller(None).expect("the controller binary");
    let ipam = fleet::world().start().await.unwrap();
    let platform = ipam.lp().project(PLATFORM_PROJECT).unwrap();
    let base = ControllerSpec::new(&ipam, bin, "paused");
    let server = match kind {
        CellKind::Local => CellServer::Local(Box::new(ipam)),
        CellKind::Real => CellServer::real(Some(ipam)).await.unwrap(),
    };
    if let CellServer::Local(w) = &server {
        w.lp().cell().ensure_namespace(SHARD_NAMESPACE);
    }
    let (cell_kubeconfig, env) = server.controller_access();
    let mut fleet = Fleet::new(ControllerSpec {
        cell_kubeconfig,
        env,
        extra_args: vec![
            "--leader-election-lease-duration=3s".into(),
            "--leader-election-renew-deadline=2s".into(),
            "--leader-election-retry-period=500ms".into(),
            "--request-timeout=1s".into(),
            "--backoff-base=100ms".into(),
            "--backoff-cap=1s".into(),
        ],
        ..base
    });
    fleet.start(true).unwrap();
    fleet.start(true).unwrap();
    let leader = eventually(30, "a leader", || async {
        let holder = server.lease_holder().await.ok()?;
        fleet
            .procs
            .iter()
            .position(|p| holder == p.name || holder.starts_with(&format!("{}_", p.name)))
    })
    .await;

    let first = made(&server, "phoenix").await;
    addressed(&server, "phoenix", &first).await;

    // The leader's release of the deleted shard is on its way to a slow IPAM when it is stopped.
    server.set_faults(late_claim_deletes());
    Api::<EgressShard>::namespaced(server.deleter(), SHARD_NAMESPACE)
        .delete("phoenix", &Default::default())
        .await
        .unwrap();
    let ipam_metrics = || server.ipam_metrics().expect("the cell holds IPAM");
    eventually(20, "the leader's release in flight", || async {
        (ipam_metrics().injected_faults().delayed_commits >= 1).then_some(())
    })
    .await;
    fleet.procs[leader].pause().unwrap();

    // The other replica takes over, and the shard is made again under its name and claimed for.
    let standby = &fleet.procs[1 - leader].name;
    eventually(30, "the standby to take the lease", || async {
        let holder = server.lease_holder().await.ok()?;
        (holder == *standby || holder.starts_with(&format!("{standby}_"))).then_some(())
    })
    .await;
    let second = made(&server, "phoenix").await;
    addressed(&server, "phoenix", &second).await;

    // The stopped leader wakes; every late DELETE lands.
    fleet.procs[leader].resume().unwrap();
    eventually(30, "every delayed delete landed", || async {
        let m = ipam_metrics();
        let landed = m.count(|k| k.verb == "delete" && k.resource.starts_with("ipclaims"));
        (landed >= m.injected_faults().delayed_commits).then_some(())
    })
    .await;
    server.clear_faults();
    let newcomer = made(&server, "newcomer").await;
    let newcomer = addressed(&server, "newcomer", &newcomer).await;

    let phoenix = server.shard("phoenix").await.unwrap().unwrap();
    assert_eq!(phoenix["metadata"]["uid"], second.as_str());
    let claim = claim_of(&platform, &phoenix).unwrap_or_else(|| {
        panic!(
            "the live shard carries {} and its claim is gone: {}",
            phoenix["spec"]["shardAddressIPv6"], phoenix["spec"]["shardAddressIPv6ClaimRef"]
        )
    });
    assert_eq!(
        claim["status"]["allocatedCIDR"].as_str().unwrap(),
        format!(
            "{}/128",
            phoenix["spec"]["shardAddressIPv6"].as_str().unwrap()
        )
    );
    assert_ne!(claim["status"]["phase"], CLAIM_PHASE_RELEASING);
    assert!(claim_of(&platform, &newcomer).is_some());
    assert_ne!(
        phoenix["spec"]["shardAddressIPv6"], newcomer["spec"]["shardAddressIPv6"],
        "two live shards on one address"
    );
    fleet.kill_all().await;
    server.shutdown(false).await;
}
