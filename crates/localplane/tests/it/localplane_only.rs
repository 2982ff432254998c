//! kube-rs against what only localplane has, so these tests have no real twin: its request
//! counters and fault injection (the chaos runs' and the bench's instruments), its tallies (the
//! change-driven counts the bench and chaos wait on) and its Milo project planes (served by Milo,
//! not by a kube-apiserver). Everything about Kubernetes behaviour itself is in
//! `kube_conformance.rs`, which runs on both servers.

use std::time::Duration;

use crate::common::*;
use crate::kube_conformance::{shard, widget, widgets};
use egress_api::shard::EgressShard;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

/// The admin's EgressShards in namespace `ns` of the cell.
fn admin_shards(lp: &localplane::Running, ns: &str) -> Api<EgressShard> {
    Api::namespaced(lp.http_client("cell", ADMIN).unwrap(), ns)
}

#[tokio::test]
async fn project_planes_are_separate_and_unknown_projects_404() {
    let lp = serve(builder()).await;
    let cell = widgets(lp.http_client("cell", ADMIN).unwrap(), "default");
    let p1 = widgets(lp.http_client("p1", ADMIN).unwrap(), "default");
    p1.create(&PostParams::default(), &widget("w", json!({"size": 1})))
        .await
        .unwrap();
    assert!(cell.get_opt("w").await.unwrap().is_none());
    assert!(p1.get_opt("w").await.unwrap().is_some());
    assert!(
        lp.project("p1")
            .unwrap()
            .object(
                &localplane::ResourceKey::new("example.localplane.dev", "widgets"),
                Some("default"),
                "w"
            )
            .is_some()
    );

    let url = format!(
        "{}/apis/resourcemanager.miloapis.com/v1alpha1/projects/ghost/control-plane/api/v1/namespaces",
        lp.base_url()
    );
    let (code, ct, body) = raw("GET", &url, Some(ADMIN_TOKEN), &[], "").await;
    assert_eq!(code, 404);
    assert!(ct.starts_with("text/plain"), "{ct}");
    assert_eq!(body, "404 page not found\n");

    // kube sees that as a 404 it cannot classify, like against Milo.
    let ghost = lp.add_project("ghost");
    drop(ghost);
    assert!(lp.remove_project("ghost"));
    let err = api_err(
        widgets(lp.http_client("ghost", ADMIN).unwrap(), "default")
            .get("w")
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 404);
    assert!(!err.is_not_found());

    // In-process clients see the same planes.
    let inproc = widgets(lp.client("p1", ADMIN), "default");
    assert!(inproc.get_opt("w").await.unwrap().is_some());
    lp.shutdown().await;
}

#[tokio::test]
async fn counters_and_fault_injection() {
    let lp = serve(builder()).await;
    let api = admin_shards(&lp, "ns1");
    api.create(&PostParams::default(), &shard("a"))
        .await
        .unwrap();
    api.get("a").await.unwrap();
    let gets = lp.metrics().count(|k| {
        k.plane == "cell"
            && k.verb == "get"
            && k.resource == "egressshards.network.datumapis.com"
            && k.code == 200
    });
    assert_eq!(gets, 1);

    // Faults set over HTTP: every get fails with 500 (not retried by kube's client).
    let base = lp.base_url();
    let cfg = r#"{"seed": 1, "rules": [{"verb": "get", "resource": "egressshards", "errorRate": 1.0, "code": 500}]}"#;
    let (code, _, _) = raw("POST", &format!("{base}/localplane/faults"), None, &[], cfg).await;
    assert_eq!(code, 200);
    let err = api_err(api.get("a").await.unwrap_err());
    assert_eq!((err.code, err.reason.as_str()), (500, "InternalError"));
    assert!(
        api.list(&ListParams::default()).await.is_ok(),
        "other verbs are untouched"
    );
    lp.faults().clear();
    api.get("a").await.unwrap();

    let (_, _, body) = raw("GET", &format!("{base}/localplane/metrics"), None, &[], "").await;
    let m: Value = serde_json::from_str(&body).unwrap();
    assert!(m["total"].as_u64().unwrap() >= 5);
    assert!(
        m["requests"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["code"] == 500 && r["verb"] == "get")
    );
    lp.shutdown().await;
}

#[tokio::test]
async fn a_tally_wait_wakes_at_the_change_that_completes_it() {
    let (lp, client) = serve_as_admin(builder()).await;
    let ns1: Api<EgressShard> = Api::namespaced(client, "ns1");
    let key = localplane::ResourceKey::new("network.datumapis.com", "egressshards");
    let mut tally = lp.cell().tally(&key, Some("ns1"), |_| true);
    // Already true: answered at once, whatever the bound.
    assert_eq!(
        tally
            .wait_for(Duration::from_secs(600), |all, _| all == 0)
            .await,
        (0, 0)
    );
    let writer = tokio::spawn(async move {
        for name in ["a", "b"] {
            ns1.create(&PostParams::default(), &shard(name))
                .await
                .unwrap();
        }
    });
    // Far longer than the creates take: only the second create ends this wait with two counted
    // (a wait that missed a change would run out the bound and count fewer).
    let counts = tally
        .wait_for(Duration::from_secs(30), |all, _| all == 2)
        .await;
    assert_eq!(counts, (2, 2));
    writer.await.unwrap();
    // Nothing changes: the bound ends the wait, with the counts as they are.
    assert_eq!(
        tally
            .wait_for(Duration::from_millis(20), |all, _| all == 3)
            .await,
        (2, 2)
    );
    lp.shutdown().await;
}

#[tokio::test]
async fn tallies_follow_writes_made_over_http() {
    let (lp, client) = serve_as_admin(builder().namespace("ns2")).await;
    let ns1: Api<EgressShard> = Api::namespaced(client.clone(), "ns1");
    let ns2: Api<EgressShard> = Api::namespaced(client, "ns2");
    let pp = PostParams::default();
    ns1.create(&pp, &shard("before")).await.unwrap();
    let key = localplane::ResourceKey::new("network.datumapis.com", "egressshards");
    let has_sid = |v: &Value| {
        v["spec"]["shardSID"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
    };
    let mut tally = lp.cell().tally(&key, Some("ns1"), has_sid);
    assert_eq!(tally.counts(), (1, 0), "what existed is counted at once");

    let mut with_sid = shard("after");
    with_sid.spec.shard_sid = "2001:db8::1".into();
    ns1.create(&pp, &with_sid).await.unwrap();
    ns2.create(&pp, &with_sid).await.unwrap();
    assert_eq!(tally.counts(), (2, 1), "another namespace is not counted");

    let mut before = ns1.get("before").await.unwrap();
    before.spec.shard_sid = "2001:db8::2".into();
    ns1.replace("before", &pp, &before).await.unwrap();
    assert_eq!(
        tally.counts(),
        (2, 2),
        "an update that starts matching counts"
    );
    ns1.delete("after", &Default::default()).await.unwrap();
    assert_eq!(tally.counts(), (1, 1), "a deleted object is not counted");
    assert_eq!(
        lp.cell().count_where(&key, Some("ns1"), has_sid),
        tally.counts(),
        "the live tally agrees with a scan"
    );
    assert_eq!(lp.cell().count_where(&key, None, has_sid), (2, 2));
    lp.shutdown().await;
}

/// localplane's watch window is a number of events a test sets (`watch_history`); the real
/// server's watch cache sizes its own, so a window of two has no real twin. Compaction, which
/// both have, is in `kube_conformance::raw_watch_semantics`.
#[tokio::test]
async fn a_watch_from_beyond_the_window_is_told_410_and_one_within_it_replays() {
    let lp = serve(builder().watch_history(2)).await;
    let api = admin_shards(&lp, "ns1");
    let mut rvs = vec![];
    for n in ["a", "b", "c", "d"] {
        let s = api.create(&PostParams::default(), &shard(n)).await.unwrap();
        rvs.push(s.resource_version().unwrap());
    }
    let watch = |rv: &str| {
        format!(
            "{}/apis/network.datumapis.com/v1alpha1/namespaces/ns1/egressshards?watch=true&timeoutSeconds=1&resourceVersion={rv}",
            lp.base_url()
        )
    };
    let events = |body: String| -> Vec<Value> {
        body.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    // The window holds c and d: from a's version, b is missed.
    let (code, _, body) = raw("GET", &watch(&rvs[0]), Some(ADMIN_TOKEN), &[], "").await;
    assert_eq!(code, 200);
    let got = events(body);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["type"], "ERROR");
    assert_eq!(got[0]["object"]["code"], 410);
    assert_eq!(got[0]["object"]["reason"], "Expired");
    // From b's version, c and d replay.
    let (_, _, body) = raw("GET", &watch(&rvs[1]), Some(ADMIN_TOKEN), &[], "").await;
    let replayed: Vec<String> = events(body.clone())
        .iter()
        .map(|e| format!("{} {}", e["type"], e["object"]["metadata"]["name"]))
        .collect();
    assert_eq!(replayed, [r#""ADDED" "c""#, r#""ADDED" "d""#], "{body}");
    lp.shutdown().await;
}
