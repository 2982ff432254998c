//! The 403s Milo answers a claim CREATE with that are not about the credential, over real HTTP:
//! a namespace that is missing or terminating (IPAM's namespace liveness check, with its
//! ten-second memory of a live namespace), and Milo's quota on live claims, set on the builder
//! and at runtime through `/localplane/quotas`.

use std::time::Duration;

use egress_api::ipam::{IPClaim, IPPool};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::Status;
use kube::runtime::wait::await_condition;
use localplane::Running;
use serde_json::{Value, json};

use crate::common::{PLATFORM, api_err, flat, ipam_builder, raw, serve, set_faults};

const QUOTA_WORDS: &str = "Insufficient quota resources available. Review your quota usage and \
                           reach out to support if you need additional resources.";

async fn ipam(b: localplane::LocalPlaneBuilder) -> (Running, Client) {
    let lp = serve(b).await;
    let c = lp.http_client(PLATFORM, "admin").unwrap();
    flat(&c, "2001:db8::/64", json!({"defaultPrefixLength": 128})).await;
    (lp, c)
}

fn claim_in(ns: &str, name: &str) -> IPClaim {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"className": "flat"},
    }))
    .unwrap()
}

async fn create(c: &Client, ns: &str, name: &str) -> Result<IPClaim, Status> {
    Api::<IPClaim>::namespaced(c.clone(), ns)
        .create(&PostParams::default(), &claim_in(ns, name))
        .await
        .map_err(api_err)
}

fn details(s: &Status) -> (String, String, String) {
    let d = s
        .details
        .clone()
        .expect("the refusal names what it refused");
    (d.name, d.group, d.kind)
}

async fn allocated(c: &Client) -> String {
    let pool = Api::<IPPool>::all(c.clone())
        .get("flat-pool")
        .await
        .unwrap();
    pool.status.and_then(|s| s.capacity).unwrap().allocated
}

/// Deletes namespace `name` (made if missing) while a finalizer holds it: it stays Terminating.
async fn terminate(c: &Client, name: &str) {
    let api: Api<Namespace> = Api::all(c.clone());
    if api.get_opt(name).await.unwrap().is_none() {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        api.create(&PostParams::default(), &ns).await.unwrap();
    }
    let hold = json!({"metadata": {"finalizers": ["example.com/hold"]}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&hold))
        .await
        .unwrap();
    api.delete(name, &DeleteParams::default()).await.unwrap();
    let now = api.get(name).await.unwrap();
    assert_eq!(now.status.unwrap().phase.as_deref(), Some("Terminating"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_into_a_missing_or_terminating_namespace_is_forbidden_in_milos_words() {
    let (lp, c) = ipam(ipam_builder()).await;
    let missing = create(&c, "nowhere", "x").await.expect_err("refused");
    assert_eq!((missing.code, missing.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        missing.message,
        "ipclaims.ipam.miloapis.com is forbidden: namespace nowhere does not exist: an address bound \
         into it would have nothing to collect it"
    );
    assert_eq!(
        details(&missing),
        ("".into(), "ipam.miloapis.com".into(), "ipclaims".into())
    );

    terminate(&c, "doomed").await;
    let doomed = create(&c, "doomed", "x").await.expect_err("refused");
    assert_eq!((doomed.code, doomed.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        doomed.message,
        "ipclaims.ipam.miloapis.com is forbidden: unable to create new content in namespace doomed \
         because it is being terminated: an address bound into a terminating namespace would outlive \
         everything that could release it"
    );
    assert_eq!(
        details(&doomed),
        ("".into(), "ipam.miloapis.com".into(), "ipclaims".into())
    );
    assert_eq!(allocated(&c).await, "0", "nothing was bound");

    // Other kinds on the project plane keep kube-apiserver's answers.
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "cm"}})).unwrap();
    let e = api_err(
        Api::<ConfigMap>::namespaced(c.clone(), "nowhere")
            .create(&PostParams::default(), &cm)
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (e.code, e.message.as_str()),
        (404, "namespaces \"nowhere\" not found")
    );
    // The claim namespace works as ever.
    assert_eq!(
        create(&c, "default", "x")
            .await
            .unwrap()
            .status
            .unwrap()
            .phase,
        "Bound"
    );
    lp.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_namespace_found_live_is_taken_as_live_for_a_while_as_milo_remembers_it() {
    let (lp, c) = ipam(ipam_builder()).await;
    let api: Api<Namespace> = Api::all(c.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "brief"}})).unwrap();
    api.create(&PostParams::default(), &ns).await.unwrap();
    create(&c, "brief", "a").await.expect("a live namespace");
    // The namespace goes terminating (its claim is released with it); Milo still holds the
    // answer it got a moment ago, so a claim is admitted there, as Milo admits it.
    terminate(&c, "brief").await;
    let admitted = create(&c, "brief", "b")
        .await
        .expect("admitted on the remembered answer");
    assert_eq!(admitted.status.unwrap().phase, "Bound");
    // Once that memory is gone (ten seconds in Milo), the namespace is looked up again.
    lp.project(PLATFORM).unwrap().forget_lookups();
    let e = create(&c, "brief", "c").await.expect_err("refused");
    assert_eq!(e.code, 403);
    assert!(
        e.message.contains("because it is being terminated"),
        "{}",
        e.message
    );
    lp.shutdown().await;
}

async fn admin(lp: &Running, method: &str, path: &str, body: &str) -> (u16, Value) {
    let url = format!("{}/localplane/{path}", lp.base_url());
    let (code, _, text) = raw(method, &url, None, &[], body).await;
    (
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_past_the_quota_is_forbidden_and_releasing_gives_its_share_back() {
    let (lp, c) = ipam(ipam_builder()).await;
    let res = "quotas/platform/ipclaims.ipam.miloapis.com";
    let (code, body) = admin(&lp, "PUT", res, r#"{"limit": 2}"#).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        body,
        json!({"resource": "ipclaims.ipam.miloapis.com", "limit": 2, "used": 0})
    );
    for name in ["a", "b"] {
        create(&c, "default", name).await.unwrap();
    }
    let e = create(&c, "default", "c").await.expect_err("over quota");
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        e.message,
        format!("ipclaims.ipam.miloapis.com \"c\" is forbidden: {QUOTA_WORDS}")
    );
    assert_eq!(
        details(&e),
        ("c".into(), "ipam.miloapis.com".into(), "ipclaims".into())
    );
    assert_eq!(allocated(&c).await, "2", "nothing was bound for it");
    let (_, listed) = admin(&lp, "GET", "quotas/platform", "").await;
    assert_eq!(
        listed,
        json!({"project": "platform", "quotas": [
            {"resource": "ipclaims.ipam.miloapis.com", "limit": 2, "used": 2}]})
    );

    // A claim Releasing still counts; gone, it gives its share back.
    set_faults(
        &lp,
        json!([{"verb": "delete", "resource": "ipclaims", "releaseDelayMs": 1500}]),
    )
    .await;
    let claims: Api<IPClaim> = Api::namespaced(c.clone(), "default");
    let releasing = {
        let claims = claims.clone();
        tokio::spawn(async move { claims.delete("a", &DeleteParams::default()).await })
    };
    // The claim's watch says when the first write has landed.
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(claims.clone(), "a", |c: Option<&IPClaim>| {
            c.and_then(|c| c.status.as_ref())
                .is_some_and(|s| s.phase == "Releasing")
        }),
    )
    .await
    .expect("the claim is seen Releasing")
    .unwrap();
    let e = create(&c, "default", "c")
        .await
        .expect_err("Releasing counts");
    assert_eq!(e.code, 403);
    releasing.await.unwrap().unwrap();
    create(&c, "default", "c")
        .await
        .expect("the share came back");

    // Lifted, it refuses nothing.
    let (code, body) = admin(&lp, "DELETE", res, "").await;
    assert_eq!((code, &body["limit"]), (200, &Value::Null), "{body}");
    create(&c, "default", "d").await.unwrap();
    lp.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_quota_set_on_the_builder_holds_from_the_start_and_bad_ones_are_named() {
    let (lp, c) = ipam(ipam_builder().quota(PLATFORM, "ipclaims.ipam.miloapis.com", 1)).await;
    create(&c, "default", "a").await.unwrap();
    let e = create(&c, "default", "b").await.expect_err("over quota");
    assert_eq!(e.code, 403);
    // Another project has no quota.
    assert_eq!(
        lp.project("tenant")
            .unwrap()
            .quota(&localplane::ResourceKey::new(
                "ipam.miloapis.com",
                "ipclaims"
            )),
        None
    );

    for (method, path, body, code, words) in [
        (
            "PUT",
            "quotas/platform/ipclaims.ipam.miloapis.com",
            r#"{"limit": -1}"#,
            400,
            "invalid quota: limit: -1 is not a whole number of objects",
        ),
        (
            "PUT",
            "quotas/platform/ipclaims.ipam.miloapis.com",
            r#"{"max": 3}"#,
            400,
            "invalid quota: limit: required",
        ),
        (
            "PUT",
            "quotas/platform/widgets.example.com",
            r#"{"limit": 1}"#,
            404,
            "project \"platform\" serves no resource widgets.example.com",
        ),
        (
            "PUT",
            "quotas/platform/IPClaims",
            r#"{"limit": 1}"#,
            400,
            "is not a resource",
        ),
        (
            "PUT",
            "quotas/nobody/ipclaims.ipam.miloapis.com",
            r#"{"limit": 1}"#,
            404,
            "no project \"nobody\"",
        ),
        ("GET", "quotas/cell", "", 400, "quotas are Milo's"),
    ] {
        let (got, answer) = admin(&lp, method, path, body).await;
        assert_eq!(got, code, "{method} {path}: {answer}");
        let message = answer["message"].as_str().unwrap_or_default();
        assert!(message.contains(words), "{method} {path}: {message}");
    }
    assert_eq!(
        lp.project(PLATFORM)
            .unwrap()
            .quota(&localplane::ResourceKey::new(
                "ipam.miloapis.com",
                "ipclaims"
            )),
        Some(1),
        "a refused quota write leaves the quota as it was"
    );
    lp.shutdown().await;

    let e = ipam_builder()
        .quota(PLATFORM, "ipclaimz.ipam.miloapis.com", 1)
        .build()
        .err()
        .expect("a quota on a kind the project does not serve");
    assert!(
        e.to_string().contains(
            "quota of project \"platform\": it serves no resource ipclaimz.ipam.miloapis.com"
        ),
        "{e}"
    );
}
