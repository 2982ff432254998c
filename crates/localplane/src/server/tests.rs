//! Each injected outcome, driven in-process through the router with a kube client: what the
//! client sees, what the plane holds afterwards, and how the faults are counted.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use kube::runtime::wait::await_condition;
use serde_json::json;

use crate::faults::{FaultConfig, FaultOutcomes, InjectedFaults};
use crate::{LocalPlane, RequestKey};

fn lease(name: &str) -> Lease {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"holderIdentity": "a"}}))
        .unwrap()
}

/// A cell whose lease creates meet `rule`, and an in-process client for its leases.
fn cell_with(rule: serde_json::Value) -> (LocalPlane, Api<Lease>) {
    let cfg: FaultConfig = serde_json::from_value(json!({"seed": 1, "rules": [rule]})).unwrap();
    let lp = LocalPlane::builder().faults(cfg).build().unwrap();
    let api = Api::namespaced(lp.client("cell", "admin"), "default");
    (lp, api)
}

fn stored(lp: &LocalPlane, name: &str) -> bool {
    lp.cell()
        .object(
            &crate::ResourceKey::new("coordination.k8s.io", "leases"),
            Some("default"),
            name,
        )
        .is_some()
}

/// Requests to create a lease, by the code they were answered with (0: no answer).
fn creates(lp: &LocalPlane, code: u16) -> u64 {
    lp.metrics().count(|k: &RequestKey| {
        k.verb == "create" && k.resource == "leases.coordination.k8s.io" && k.code == code
    })
}

#[tokio::test]
async fn a_status_before_apply_stores_nothing() {
    let (lp, api) = cell_with(json!({"verb": "create", "errorRate": 1, "code": 500}));
    let e = api.create(&PostParams::default(), &lease("a")).await;
    assert!(
        matches!(e, Err(kube::Error::Api(ref s)) if s.code == 500),
        "{e:?}"
    );
    assert!(!stored(&lp, "a"));
    assert_eq!(
        lp.metrics().injected_faults(),
        InjectedFaults {
            before_apply: FaultOutcomes {
                status: 1,
                ..Default::default()
            },
            ..Default::default()
        }
    );
    assert_eq!(creates(&lp, 500), 1);
}

#[tokio::test]
async fn a_status_after_apply_keeps_the_write() {
    let (lp, api) =
        cell_with(json!({"verb": "create", "errorRate": 1, "code": 500, "when": "afterApply"}));
    let e = api.create(&PostParams::default(), &lease("a")).await;
    let Err(kube::Error::Api(s)) = e else {
        panic!("expected a 500, got {e:?}")
    };
    assert_eq!(s.code, 500);
    assert!(
        s.message.contains("after the request was applied"),
        "{}",
        s.message
    );
    assert!(
        stored(&lp, "a"),
        "the create committed before its answer was replaced"
    );
    assert_eq!(lp.metrics().injected_faults().after_apply.status, 1);
}

#[tokio::test]
async fn a_reset_answers_nothing_readable() {
    for (when, kept) in [("beforeApply", false), ("afterApply", true)] {
        let (lp, api) =
            cell_with(json!({"verb": "create", "errorRate": 1, "when": when, "outcome": "reset"}));
        let e = api
            .create(&PostParams::default(), &lease("a"))
            .await
            .expect_err("no answer");
        assert!(!matches!(e, kube::Error::Api(_)), "{when}: {e:?}");
        assert_eq!(stored(&lp, "a"), kept, "{when}");
        let i = lp.metrics().injected_faults();
        assert_eq!(i.before_apply.reset + i.after_apply.reset, 1, "{when}");
        assert_eq!(creates(&lp, 0), 1, "{when}: counted as unanswered");
    }
}

#[tokio::test]
async fn a_hang_answers_nothing_until_localplane_stops() {
    let (lp, api) = cell_with(
        json!({"verb": "create", "errorRate": 1, "when": "afterApply", "outcome": "hang"}),
    );
    let call = tokio::spawn(async move { api.create(&PostParams::default(), &lease("a")).await });
    while lp.metrics().injected_faults().after_apply.hang == 0 {
        tokio::task::yield_now().await;
    }
    assert!(stored(&lp, "a"));
    assert!(!call.is_finished(), "a hung request is not answered");
    assert_eq!(creates(&lp, 0), 1);
    lp.stop();
    let e = call.await.unwrap();
    assert!(
        e.is_err() && !matches!(e, Err(kube::Error::Api(_))),
        "{e:?}"
    );
}

#[tokio::test]
async fn a_delayed_commit_lands_after_the_client_gave_up() {
    let (lp, api) = cell_with(json!({"verb": "create", "commitDelayMs": 2000}));
    let gave_up = tokio::time::timeout(
        Duration::from_millis(100),
        api.create(&PostParams::default(), &lease("a")),
    )
    .await;
    assert!(gave_up.is_err(), "the answer waits for the commit");
    assert!(!stored(&lp, "a"), "not committed yet");
    assert_eq!(lp.metrics().injected_faults().delayed_commits, 1);
    tokio::time::timeout(
        Duration::from_secs(20),
        await_condition(api, "a", |l: Option<&Lease>| l.is_some()),
    )
    .await
    .expect("the commit lands")
    .unwrap();
    assert_eq!(creates(&lp, 201), 1, "counted when it landed");
}

#[tokio::test]
async fn a_client_that_waits_gets_the_real_answer_of_a_delayed_commit() {
    let (lp, api) = cell_with(json!({"verb": "delete", "commitDelayMs": 50}));
    api.create(&PostParams::default(), &lease("a"))
        .await
        .unwrap();
    api.delete("a", &Default::default()).await.unwrap();
    assert!(!stored(&lp, "a"), "answered only once it committed");
    let e = api.delete("a", &Default::default()).await;
    assert!(
        matches!(e, Err(kube::Error::Api(ref s)) if s.code == 404),
        "{e:?}"
    );
    assert_eq!(lp.metrics().injected_faults().delayed_commits, 2);
}
