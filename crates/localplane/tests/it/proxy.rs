//! The fault proxy in front of the real apiserver (`realcell`): every fault kind observable on
//! the real server's side. A write failed before apply is not stored; one applied whose answer
//! was lost is; a held write lands after its client gave up; latency delays; a watch passes
//! events through as they come and is cut; the caller's credentials reach the real RBAC.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use localplane::{FaultConfig, FaultProxy, FaultRule, Upstream};
use realcell::{Identity, RealCell};

fn rules(yaml: &str) -> Vec<FaultRule> {
    serde_saphyr::from_str(yaml).unwrap()
}

async fn client_through(proxy: &FaultProxy, cell: &RealCell, who: Identity) -> kube::Client {
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join(who.file_name());
    proxy
        .kubeconfig_through(&cell.kubeconfig(who), &path)
        .unwrap();
    let kc = kube::config::Kubeconfig::read_from(&path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}
    }))
    .unwrap()
}

async fn start(
    ns: &str,
) -> (
    &'static RealCell,
    FaultProxy,
    Api<ConfigMap>,
    Api<ConfigMap>,
) {
    let cell = RealCell::shared()
        .await
        .expect("the real control plane starts");
    let ca = std::fs::read_to_string(cell.dir().join("ca.crt")).unwrap();
    let proxy = FaultProxy::start(
        "127.0.0.1:0".parse().unwrap(),
        Upstream {
            server: cell.server().to_string(),
            ca_pem: Some(ca),
            plane: "cell".into(),
        },
    )
    .await
    .unwrap();
    let admin = cell.client(Identity::Admin).await.unwrap();
    let namespace: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": ns}})).unwrap();
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    let direct = Api::namespaced(admin, ns);
    let through = Api::namespaced(client_through(&proxy, cell, Identity::Admin).await, ns);
    (cell, proxy, direct, through)
}

fn set(proxy: &FaultProxy, yaml: &str, cut: Option<f64>) {
    proxy.faults().set(FaultConfig {
        seed: Some(1),
        rules: rules(yaml),
        watch_cut_after_seconds: cut,
    });
}

async fn stored(api: &Api<ConfigMap>, name: &str) -> bool {
    api.get_opt(name).await.unwrap().is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_write_fault_is_seen_on_the_real_server() {
    let (cell, proxy, direct, through) = start("proxy-writes").await;
    let pp = PostParams::default();

    // No faults: a write goes through, as the caller; the operator's own token meets the real
    // RBAC (it may read, not write).
    through.create(&pp, &cm("plain")).await.unwrap();
    assert!(stored(&direct, "plain").await);
    let operator: Api<ConfigMap> = Api::namespaced(
        client_through(&proxy, cell, Identity::Operator).await,
        "proxy-writes",
    );
    assert!(operator.get("plain").await.is_ok());
    match operator.create(&pp, &cm("refused")).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 403, "{s:?}"),
        other => panic!("the operator wrote through the proxy: {other:?}"),
    }

    // Before apply: the client gets the Status, or a reset, and nothing is stored.
    set(
        &proxy,
        "[{verb: create, resource: configmaps, errorRate: 1, code: 500}]",
        None,
    );
    match through.create(&pp, &cm("before-status")).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 500, "{s:?}"),
        other => panic!("{other:?}"),
    }
    assert!(!stored(&direct, "before-status").await);
    set(
        &proxy,
        "[{verb: create, resource: configmaps, errorRate: 1, outcome: reset}]",
        None,
    );
    assert!(through.create(&pp, &cm("before-reset")).await.is_err());
    assert!(!stored(&direct, "before-reset").await);

    // After apply: the real server stored it, and the client never heard.
    for (name, outcome) in [("after-status", "status"), ("after-reset", "reset")] {
        set(
            &proxy,
            &format!(
                "[{{verb: create, resource: configmaps, errorRate: 1, when: afterApply, outcome: {outcome}}}]"
            ),
            None,
        );
        let r = through.create(&pp, &cm(name)).await;
        assert!(r.is_err(), "{name}: {r:?}");
        assert!(stored(&direct, name).await, "{name} was not applied");
    }
    set(
        &proxy,
        "[{verb: create, resource: configmaps, errorRate: 1, when: afterApply, outcome: hang}]",
        None,
    );
    let hung = tokio::time::timeout(
        Duration::from_secs(2),
        through.create(&pp, &cm("after-hang")),
    )
    .await;
    assert!(hung.is_err(), "a hung answer came: {hung:?}");
    assert!(stored(&direct, "after-hang").await);

    // A held write: the client gives up after 1 s; the create lands at 3 s.
    set(
        &proxy,
        "[{verb: create, resource: configmaps, commitDelayMs: 3000}]",
        None,
    );
    let asked = Instant::now();
    let gave_up =
        tokio::time::timeout(Duration::from_secs(1), through.create(&pp, &cm("held"))).await;
    assert!(gave_up.is_err(), "the held write was answered: {gave_up:?}");
    assert!(
        !stored(&direct, "held").await,
        "the held write landed early"
    );
    // The real server's own watch says when the held write lands.
    tokio::time::timeout(
        Duration::from_secs(30),
        kube::runtime::wait::await_condition(direct.clone(), "held", |cm: Option<&ConfigMap>| {
            cm.is_some()
        }),
    )
    .await
    .expect("the held write never landed")
    .expect("watching for the held write");
    let landed = asked.elapsed();
    assert!(landed >= Duration::from_secs(3), "landed at {landed:?}");

    // Latency: a read answered no sooner than the spike.
    set(&proxy, "[{verb: get, latencyMs: 700}]", None);
    let t = Instant::now();
    through.get("plain").await.unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(700),
        "{:?}",
        t.elapsed()
    );

    let injected = proxy.metrics().injected_faults();
    assert_eq!(
        (
            injected.before_apply.status,
            injected.before_apply.reset,
            injected.after_apply.status,
            injected.after_apply.reset,
            injected.after_apply.hang,
            injected.delayed_commits,
        ),
        (1, 1, 1, 1, 1, 1),
        "{injected:?}"
    );
    assert!(
        proxy
            .metrics()
            .count(|k| k.plane == "cell" && k.verb == "create" && k.resource == "configmaps")
            >= 7
    );
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_streams_through_and_is_cut() {
    let (_cell, proxy, direct, through) = start("proxy-watch").await;
    set(&proxy, "[]", Some(4.0));
    let opened = Instant::now();
    let mut events = through
        .watch(&WatchParams::default().timeout(60), "0")
        .await
        .unwrap()
        .boxed();
    // An event made after the watch opened arrives while the stream is open: not buffered
    // until the stream ends.
    direct
        .create(&PostParams::default(), &cm("seen"))
        .await
        .unwrap();
    let mut seen_at = None;
    let mut ended = None;
    while let Some(e) = tokio::time::timeout(Duration::from_secs(30), events.next())
        .await
        .expect("the watch was neither cut nor answered within 30 s")
    {
        match e {
            Ok(WatchEvent::Added(c)) if c.metadata.name.as_deref() == Some("seen") => {
                seen_at = Some(opened.elapsed());
            }
            Ok(_) => {}
            Err(err) => {
                ended = Some((opened.elapsed(), err.to_string()));
                break;
            }
        }
    }
    let seen_at = seen_at.expect("the event never came through");
    assert!(seen_at < Duration::from_secs(4), "seen only at {seen_at:?}");
    let at = ended.map(|(at, _)| at).unwrap_or(opened.elapsed());
    assert!(
        at >= Duration::from_secs(4) && at < Duration::from_secs(30),
        "the 60 s watch ended at {at:?}, not cut at 4 s"
    );
    proxy.shutdown().await;
}
