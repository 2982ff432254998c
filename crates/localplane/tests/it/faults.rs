//! The faults behind real races, over real HTTP with kube-rs against Milo IPAM: a write applied
//! whose answer was lost (a 500, a reset connection, no answer at all), a commit that lands after
//! the client gave up, and preconditions in strict mode. What a claim DELETE's two steps and
//! their faults do is in `ipam_release`.

use std::time::Duration;

use egress_api::ipam::IPClaim;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, ResourceExt};
use localplane::{FaultOutcomes, LocalPlane, Running};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{
    ADMIN_TOKEN, PLATFORM, api_err, claim, flat, ipam_builder, raw, serve, set_faults, start_ipam,
};

fn claims(c: Client) -> Api<IPClaim> {
    Api::namespaced(c, "default")
}

/// A client that gives up on an answer after `ms`.
fn impatient(lp: &Running, ms: u64) -> Client {
    let mut cfg = lp.http_config(PLATFORM, "admin");
    cfg.read_timeout = Some(Duration::from_millis(ms));
    Client::try_from(cfg).unwrap()
}

/// The platform plane with a flat IPv6 class, and a client for it.
async fn ipam() -> (Running, Client) {
    let lp = start_ipam().await;
    let c = lp.http_client(PLATFORM, "admin").unwrap();
    flat(&c, "2001:db8::/64", json!({"defaultPrefixLength": 128})).await;
    (lp, c)
}

fn flat_claim(name: &str) -> IPClaim {
    claim(name, json!({"className": "flat"}))
}

fn bound(c: &IPClaim) -> bool {
    c.status.as_ref().is_some_and(|s| s.phase == "Bound")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_create_applied_then_failed_leaves_the_claim_bound() {
    let (lp, c) = ipam().await;
    for outcome in ["status", "reset", "hang"] {
        let name = format!("lost-{outcome}");
        let mut rule = json!({"verb": "create", "resource": "ipclaims", "errorRate": 1,
            "when": "afterApply", "outcome": outcome});
        if outcome == "status" {
            rule["code"] = json!(500);
        }
        set_faults(&lp, json!([rule])).await;
        let e = claims(impatient(&lp, 1000))
            .create(&PostParams::default(), &flat_claim(&name))
            .await
            .expect_err("the answer is lost");
        match outcome {
            "status" => assert_eq!(api_err(e).code, 500),
            _ => assert!(
                !matches!(e, kube::Error::Api(_)),
                "{outcome}: no HTTP answer, got {e:?}"
            ),
        }
        lp.faults().clear();
        let stored = claims(c.clone()).get(&name).await.unwrap();
        assert!(bound(&stored), "{outcome}: the claim committed and bound");
    }
    assert_eq!(
        lp.metrics().injected_faults().after_apply,
        FaultOutcomes {
            status: 1,
            reset: 1,
            hang: 1
        }
    );
    let (_, _, body) = raw(
        "GET",
        &format!("{}/localplane/metrics", lp.base_url()),
        None,
        &[],
        "",
    )
    .await;
    let m: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        m["injectedFaults"]["afterApply"],
        json!({"status": 1, "reset": 1, "hang": 1})
    );
    let unanswered = lp.metrics().count(|k| k.verb == "create" && k.code == 0);
    assert_eq!(unanswered, 2, "the reset and the hang went unanswered");
    lp.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reset_is_an_rst_with_no_http_answer() {
    let (lp, c) = ipam().await;
    set_faults(
        &lp,
        json!([{"verb": "create", "errorRate": 1, "when": "afterApply", "outcome": "reset"}]),
    )
    .await;
    let body = serde_json::to_string(&flat_claim("raw")).unwrap();
    let path = format!(
        "{}/apis/ipam.miloapis.com/v1alpha1/namespaces/default/ipclaims",
        LocalPlane::plane_path(PLATFORM)
    );
    let mut tcp = tokio::net::TcpStream::connect(lp.addr()).await.unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        lp.addr(),
        body.len()
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let read = tcp.read_to_end(&mut answer).await;
    assert_eq!(
        read.map_err(|e| e.kind()),
        Err(std::io::ErrorKind::ConnectionReset),
        "answered: {:?}",
        String::from_utf8_lossy(&answer)
    );
    assert!(answer.is_empty(), "not a byte of HTTP came back");
    lp.faults().clear();
    assert!(bound(&claims(c).get("raw").await.unwrap()));
    lp.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_delayed_delete_lands_after_the_client_timed_out() {
    let (lp, c) = ipam().await;
    let api = claims(c.clone());
    let uid = api
        .create(&PostParams::default(), &flat_claim("late"))
        .await
        .unwrap()
        .uid()
        .unwrap();
    set_faults(
        &lp,
        json!([{"verb": "delete", "resource": "ipclaims.ipam.miloapis.com", "commitDelayMs": 1500}]),
    )
    .await;
    let e = claims(impatient(&lp, 200))
        .delete("late", &DeleteParams::default())
        .await
        .expect_err("the client gives up before the commit");
    assert!(!matches!(e, kube::Error::Api(_)), "{e:?}");
    assert!(
        api.get_opt("late").await.unwrap().is_some(),
        "not deleted when the client gave up"
    );
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(api.clone(), "late", conditions::is_deleted(&uid)),
    )
    .await
    .expect("the delete lands")
    .unwrap();
    lp.faults().clear();
    // IPAM released the address with it: the next claim gets the same one.
    let again = api
        .create(&PostParams::default(), &flat_claim("next"))
        .await
        .unwrap();
    assert_eq!(again.status.unwrap().allocated_cidr, "2001:db8::/128");
    assert_eq!(lp.metrics().injected_faults().delayed_commits, 1);
    lp.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn in_strict_mode_a_resource_version_precondition_is_checked_too() {
    // Milo reads no preconditions on a claim DELETE; strict mode reads them as the generic
    // registry does (the late uid case is in `ipam_release`).
    let lp = serve(ipam_builder().ipam_strict_deletes(true)).await;
    let c = lp.http_client(PLATFORM, "admin").unwrap();
    flat(&c, "2001:db8::/64", json!({"defaultPrefixLength": 128})).await;
    let api = claims(c);
    let made = api
        .create(&PostParams::default(), &flat_claim("x"))
        .await
        .unwrap();
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: None,
            resource_version: Some("1".into()),
        }),
        ..DeleteParams::default()
    };
    let e = api_err(api.delete("x", &dp).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    // Applied as it arrived, so refused by the registry's BeforeDelete in its words.
    assert_eq!(
        e.message,
        format!(
            "Operation cannot be fulfilled on IPClaim.ipam.miloapis.com \"x\": the ResourceVersion \
             in the precondition (1) does not match the ResourceVersion in record ({}). The object \
             might have been modified",
            made.resource_version().unwrap()
        )
    );
    assert!(api.get_opt("x").await.unwrap().is_some());
    lp.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn fault_rules_are_read_and_refused_over_http() {
    let lp = start_ipam().await;
    let url = format!("{}/localplane/faults", lp.base_url());
    let yaml = "seed: 3\nrules:\n  - {verb: delete, resource: ipclaims, commitDelayMs: 5000, commitDelayRate: 0.5}\n  \
                - {verb: create, errorRate: 1, when: afterApply, outcome: hang}\n";
    let (code, _, body) = raw("POST", &url, None, &[], yaml).await;
    assert_eq!(code, 200, "{body}");
    let (_, _, body) = raw("GET", &url, None, &[], "").await;
    let cfg: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(cfg["rules"][0]["commitDelayMs"], 5000);
    assert_eq!(cfg["rules"][1]["when"], "afterApply");
    assert_eq!(cfg["rules"][1]["outcome"], "hang");

    let (code, _, body) = raw(
        "POST",
        &url,
        None,
        &[],
        r#"{"rules": [{"errorRate": 1, "outcome": "reset", "code": 503}]}"#,
    )
    .await;
    assert_eq!(code, 400, "{body}");
    let e: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(e["reason"], "BadRequest");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .starts_with("invalid fault config: rules[0]: code"),
        "{body}"
    );
    assert_eq!(
        lp.faults().get().rules.len(),
        2,
        "a refused config leaves the old one"
    );
    lp.shutdown().await;
}
