//! Built-in kinds as the apiserver treats them: Events in one store served in two versions,
//! Event and Lease validation, the Go decoder's refusals, unknown fields, dry runs.

use crate::common::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// An event as egress-address publishes one about a shard.
pub fn controller_event(name: &str, shard_uid: &str) -> Value {
    json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": name, "namespace": "ns1"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "regarding": {"apiVersion": "network.datumapis.com/v1alpha1", "kind": "EgressShard",
                      "namespace": "ns1", "name": "s1", "uid": shard_uid, "resourceVersion": "7"},
        "reason": "AddressAssigned", "action": "Assign", "note": "assigned 2001:db8::1",
        "reportingController": "egress-address-controller", "reportingInstance": "pod-1",
        "type": "Normal",
    })
}

fn event(v: Value) -> Event {
    serde_json::from_value(v).unwrap()
}

/// The standard cell, with the admin's view of ns1's events through both APIs that serve them.
async fn events_in_ns1() -> (localplane::Running, Api<Event>, Api<CoreEvent>) {
    let (lp, client) = serve_as_admin(builder()).await;
    let events = Api::namespaced(client.clone(), "ns1");
    let core = Api::namespaced(client, "ns1");
    (lp, events, core)
}

#[tokio::test]
async fn events_are_one_store_served_in_two_versions() {
    let (lp, events, core) = events_in_ns1().await;

    events
        .create(&PostParams::default(), &event(controller_event("e1", "u1")))
        .await
        .unwrap();
    let seen = core.get("e1").await.unwrap();
    assert_eq!(seen.message.as_deref(), Some("assigned 2001:db8::1"));
    assert_eq!(seen.involved_object.name.as_deref(), Some("s1"));
    assert_eq!(seen.involved_object.uid.as_deref(), Some("u1"));
    assert_eq!(
        seen.reporting_component.as_deref(),
        Some("egress-address-controller")
    );
    assert_eq!(seen.reporting_instance.as_deref(), Some("pod-1"));
    assert_eq!(seen.action.as_deref(), Some("Assign"));
    assert!(seen.event_time.is_some());
    assert_eq!(seen.source.as_ref().unwrap().component, None);

    let old_style: CoreEvent = serde_json::from_value(json!({
        "metadata": {"name": "e2", "namespace": "ns1"},
        "involvedObject": {"kind": "EgressShard", "namespace": "ns1", "name": "s2"},
        "reason": "Legacy", "message": "from a core client", "type": "Warning", "count": 3,
        "source": {"component": "old-controller", "host": "node-1"},
        "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:01:00Z",
    }))
    .unwrap();
    core.create(&PostParams::default(), &old_style)
        .await
        .unwrap();
    let seen = events.get("e2").await.unwrap();
    assert_eq!(seen.note.as_deref(), Some("from a core client"));
    assert_eq!(seen.regarding.as_ref().unwrap().name.as_deref(), Some("s2"));
    assert_eq!(seen.deprecated_count, Some(3));
    let source = seen.deprecated_source.unwrap();
    assert_eq!(source.component.as_deref(), Some("old-controller"));
    assert_eq!(source.host.as_deref(), Some("node-1"));
    assert!(seen.deprecated_first_timestamp.is_some());
    assert_eq!(seen.event_time, None);

    // The plane's own reads see each kind as it is served, like a GET does.
    let events_v1 = localplane::ResourceKey::new("events.k8s.io", "events");
    let seen = lp.cell().objects(&events_v1, Some("ns1"));
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0]["note"], "assigned 2001:db8::1", "{seen:?}");
    let one = lp.cell().object(&events_v1, Some("ns1"), "e2").unwrap();
    assert_eq!(one["regarding"]["name"], "s2");
    let core_key = localplane::ResourceKey::new("", "events");
    assert_eq!(
        lp.cell().object(&core_key, Some("ns1"), "e2").unwrap()["message"],
        "from a core client"
    );
    assert_eq!(
        lp.cell()
            .count_where(&events_v1, None, |e| e["note"].is_string()),
        (2, 2)
    );
    let mut tally = lp
        .cell()
        .tally(&events_v1, Some("ns1"), |e| e["regarding"]["name"] == "s1");
    assert_eq!(tally.counts(), (2, 1));
    let raw_core = core.get("e1").await.unwrap();
    assert_eq!(
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        2
    );
    assert_eq!(
        core.list(&ListParams::default()).await.unwrap().items.len(),
        2
    );

    // The controller counts a repeated event on the one it published: a merge patch of the
    // series, through events.k8s.io, which the core view sees.
    let patch = json!({"series": {"count": 2, "lastObservedTime": "2026-01-01T00:05:00.000000Z"}});
    events
        .patch("e1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let counted = core.get("e1").await.unwrap();
    assert_eq!(counted.series.unwrap().count, Some(2));
    assert_ne!(
        counted.metadata.resource_version,
        raw_core.metadata.resource_version
    );
    lp.shutdown().await;
}

#[tokio::test]
async fn events_are_selected_by_the_fields_the_apiserver_indexes() {
    let (lp, events, core) = events_in_ns1().await;
    events
        .create(&PostParams::default(), &event(controller_event("e1", "u1")))
        .await
        .unwrap();
    let mut other = controller_event("e2", "u2");
    other["regarding"]["name"] = json!("s2");
    other["reason"] = json!("ClaimPending");
    other["type"] = json!("Warning");
    events
        .create(&PostParams::default(), &event(other))
        .await
        .unwrap();

    let names = |items: Vec<String>| items;
    for (selector, want) in [
        ("involvedObject.name=s1", vec!["e1"]),
        (
            "involvedObject.kind=EgressShard,involvedObject.uid=u2",
            vec!["e2"],
        ),
        ("involvedObject.namespace=ns1", vec!["e1", "e2"]),
        (
            "involvedObject.apiVersion=network.datumapis.com/v1alpha1,involvedObject.resourceVersion=7",
            vec!["e1", "e2"],
        ),
        ("involvedObject.fieldPath=", vec!["e1", "e2"]),
        ("reason=ClaimPending", vec!["e2"]),
        ("type=Normal", vec!["e1"]),
        ("type!=Normal", vec!["e2"]),
        (
            "reportingComponent=egress-address-controller",
            vec!["e1", "e2"],
        ),
        (
            "source=egress-address-controller,metadata.name=e1",
            vec!["e1"],
        ),
    ] {
        let got = core
            .list(&ListParams::default().fields(selector))
            .await
            .unwrap_or_else(|e| panic!("{selector}: {e}"));
        let got = names(
            got.items
                .into_iter()
                .map(|e| e.metadata.name.unwrap())
                .collect(),
        );
        assert_eq!(got, want, "core {selector}");
    }
    for (selector, want) in [
        ("regarding.name=s2", vec!["e2"]),
        ("regarding.uid=u1,reason=AddressAssigned", vec!["e1"]),
        (
            "reportingController=egress-address-controller,type=Warning",
            vec!["e2"],
        ),
    ] {
        let got = events
            .list(&ListParams::default().fields(selector))
            .await
            .unwrap_or_else(|e| panic!("{selector}: {e}"));
        let got: Vec<String> = got
            .items
            .into_iter()
            .map(|e| e.metadata.name.unwrap())
            .collect();
        assert_eq!(got, want, "events.k8s.io {selector}");
    }
    // Each version accepts only its own labels, as the apiserver's label conversions do.
    for (api_is_core, selector) in [
        (false, "involvedObject.name=s1"),
        (false, "source=x"),
        (true, "regarding.name=s1"),
    ] {
        let err = if api_is_core {
            core.list(&ListParams::default().fields(selector))
                .await
                .unwrap_err()
        } else {
            events
                .list(&ListParams::default().fields(selector))
                .await
                .unwrap_err()
        };
        let s = api_err(err);
        let label = selector.split('=').next().unwrap();
        assert_eq!(s.code, 400, "{selector}");
        assert_eq!(s.message, format!("field label not supported: {label}"));
    }
    lp.shutdown().await;
}

#[tokio::test]
async fn events_print_the_apiservers_columns() {
    let (lp, client) = serve_as_admin(builder()).await;
    let events: Api<Event> = Api::namespaced(client, "ns1");
    let mut e = controller_event("e1", "u1");
    e["series"] = json!({"count": 4, "lastObservedTime": "2026-01-01T00:05:00.000000Z"});
    events
        .create(&PostParams::default(), &event(e))
        .await
        .unwrap();
    for path in [
        "/api/v1/namespaces/ns1/events",
        "/apis/events.k8s.io/v1/namespaces/ns1/events",
    ] {
        let (code, _, body) = raw(
            "GET",
            &format!("{}{path}", lp.base_url()),
            Some(ADMIN_TOKEN),
            &[("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")],
            "",
        )
        .await;
        assert_eq!(code, 200, "{body}");
        let t: Value = serde_json::from_str(&body).unwrap();
        let cols: Vec<(&str, i64)> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["name"].as_str().unwrap(), c["priority"].as_i64().unwrap()))
            .collect();
        assert_eq!(
            cols,
            [
                ("Last Seen", 0),
                ("Type", 0),
                ("Reason", 0),
                ("Object", 0),
                ("Subobject", 1),
                ("Source", 1),
                ("Message", 0),
                ("First Seen", 1),
                ("Count", 1),
                ("Name", 1)
            ],
            "{path}"
        );
        let cells = &t["rows"][0]["cells"];
        assert_eq!(cells[1], "Normal");
        assert_eq!(cells[2], "AddressAssigned");
        assert_eq!(cells[3], "egressshard/s1");
        assert_eq!(cells[5], "egress-address-controller, pod-1");
        assert_eq!(cells[6], "assigned 2001:db8::1");
        assert_eq!(cells[8], 4, "the series counts");
        assert_eq!(cells[9], "e1");
    }
    lp.shutdown().await;
}

/// POSTs `body` to `path` as the admin and returns the code and the body as JSON.
async fn post(lp: &localplane::Running, path: &str, body: &Value) -> (u16, Value) {
    let (code, _, text) = raw(
        "POST",
        &format!("{}{path}", lp.base_url()),
        Some(ADMIN_TOKEN),
        &[("content-type", "application/json")],
        &body.to_string(),
    )
    .await;
    (
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test]
async fn events_are_validated_as_the_event_strategy_does() {
    let lp = serve(builder()).await;
    let bogus = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "bad"}, "type": "Bogus"});
    let (code, s) = post(&lp, "/apis/events.k8s.io/v1/namespaces/ns1/events", &bogus).await;
    assert_eq!(code, 422, "{s}");
    assert_eq!(s["reason"], "Invalid");
    assert_eq!(s["details"]["kind"], "Event");
    // Validated as the core Event it is stored as: no group, as the real apiserver answers.
    assert_eq!(s["details"].get("group"), None);
    // Without an eventTime the event is judged as an old-style one (namespaces must agree), and
    // events.k8s.io then insists on the eventTime and a known type.
    assert_eq!(
        s["message"],
        r#"Event "bad" is invalid: [involvedObject.namespace: Invalid value: "": does not match event.namespace, eventTime: Required value, type: Invalid value: "": has invalid value: Bogus]"#
    );
    let causes: Vec<(&str, &str)> = s["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["field"].as_str().unwrap(), c["reason"].as_str().unwrap()))
        .collect();
    assert!(
        causes.contains(&("eventTime", "FieldValueRequired")),
        "{causes:?}"
    );
    assert!(
        causes.contains(&("type", "FieldValueInvalid")),
        "{causes:?}"
    );
    // With an eventTime, the rest of what an event says is required.
    let mut timed = bogus.clone();
    timed["eventTime"] = json!("2026-01-01T00:00:00.000000Z");
    timed["regarding"] = json!({"namespace": "ns1"});
    let (code, s) = post(&lp, "/apis/events.k8s.io/v1/namespaces/ns1/events", &timed).await;
    assert_eq!(code, 422, "{s}");
    let msg = s["message"].as_str().unwrap();
    for part in [
        "reportingController: Required value",
        r#"reportingController: Invalid value: "": name part must be non-empty"#,
        "reportingInstance: Required value",
        "action: Required value",
        "reason: Required value",
        r#"type: Invalid value: "": has invalid value: Bogus"#,
    ] {
        assert!(msg.contains(part), "{part} in {msg}");
    }

    // The same Event through core v1 is an old-style event: no eventTime, nothing required.
    let (code, s) = post(
        &lp,
        "/api/v1/namespaces/ns1/events",
        &json!({
        "metadata": {"name": "old"}, "type": "Bogus",
        "involvedObject": {"kind": "Node", "namespace": "ns1", "name": "n"}}),
    )
    .await;
    assert_eq!(code, 201, "{s}");
    // ...but one with an eventTime names core's field for the reporting controller.
    let (code, s) = post(
        &lp,
        "/api/v1/namespaces/ns1/events",
        &json!({
        "metadata": {"name": "new"}, "eventTime": "2026-01-01T00:00:00.000000Z",
        "involvedObject": {"namespace": "ns1"}, "reason": "R", "action": "A",
        "reportingInstance": "i"}),
    )
    .await;
    assert_eq!(code, 422, "{s}");
    assert!(
        s["message"]
            .as_str()
            .unwrap()
            .contains("reportingComponent: Required value"),
        "{s}"
    );
    // A note over 1 kB is refused.
    let mut long = controller_event("long", "u1");
    long["note"] = json!("x".repeat(1025));
    let (code, s) = post(&lp, "/apis/events.k8s.io/v1/namespaces/ns1/events", &long).await;
    assert_eq!(code, 422, "{s}");
    assert!(
        s["message"]
            .as_str()
            .unwrap()
            .contains(r#"message: Invalid value: "": can have at most 1024 characters"#),
        "{s}"
    );

    // Updates: the series must count at least 2, and what happened cannot be rewritten.
    let (code, _) = post(
        &lp,
        "/apis/events.k8s.io/v1/namespaces/ns1/events",
        &controller_event("e1", "u1"),
    )
    .await;
    assert_eq!(code, 201);
    let events: Api<Event> = Api::namespaced(lp.http_client("cell", ADMIN).unwrap(), "ns1");
    let bad_series =
        json!({"series": {"count": 1, "lastObservedTime": "2026-01-01T00:05:00.000000Z"}});
    let s = api_err(
        events
            .patch("e1", &PatchParams::default(), &Patch::Merge(&bad_series))
            .await
            .unwrap_err(),
    );
    assert_eq!(s.code, 422);
    assert_eq!(
        s.message,
        r#"Event "e1" is invalid: series.count: Invalid value: "": should be at least 2"#
    );
    let rewrite = json!({"note": "something else", "reportingController": "another"});
    let s = api_err(
        events
            .patch("e1", &PatchParams::default(), &Patch::Merge(&rewrite))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        s.message,
        r#"Event "e1" is invalid: [message: Invalid value: "something else": field is immutable, reportingController: Invalid value: "another": field is immutable]"#
    );
    let e1 = events.get("e1").await.unwrap();
    assert_eq!(
        e1.note.as_deref(),
        Some("assigned 2001:db8::1"),
        "refused writes change nothing"
    );
    lp.shutdown().await;
}

fn lease(spec: Value) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
           "metadata": {"name": "l1"}, "spec": spec})
}

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/ns1/leases";

#[tokio::test]
async fn leases_are_decoded_and_validated() {
    let lp = serve(builder()).await;
    let (code, s) = post(
        &lp,
        LEASES,
        &lease(json!({"leaseDurationSeconds": -5, "leaseTransitions": -1})),
    )
    .await;
    assert_eq!(code, 422, "{s}");
    assert_eq!(
        s["message"],
        r#"Lease.coordination.k8s.io "l1" is invalid: [spec.leaseDurationSeconds: Invalid value: -5: must be greater than 0, spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0]"#
    );
    assert_eq!(
        s["details"]["causes"][0]["field"],
        "spec.leaseDurationSeconds"
    );

    // Times are decoded as metav1.MicroTime: six fractional digits, nothing else.
    for (time, why) in [
        (
            "yesterday",
            r#"parsing time "yesterday" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "yesterday" as "2006""#,
        ),
        (
            "2026-01-01T00:00:00Z",
            r#"parsing time "2026-01-01T00:00:00Z" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "Z" as ".000000""#,
        ),
    ] {
        let (code, s) = post(&lp, LEASES, &lease(json!({"renewTime": time}))).await;
        assert_eq!(code, 400, "{s}");
        assert_eq!(s["reason"], "BadRequest");
        assert_eq!(
            s["message"],
            format!(r#"Lease in version "v1" cannot be handled as a Lease: {why}"#)
        );
    }
    let (code, s) = post(&lp, LEASES, &lease(json!({"leaseDurationSeconds": "15"}))).await;
    assert_eq!(code, 400, "{s}");
    assert_eq!(
        s["message"],
        r#"Lease in version "v1" cannot be handled as a Lease: json: cannot unmarshal string into Go struct field LeaseSpec.spec.leaseDurationSeconds of type int32"#
    );
    let leases: Api<Lease> = Api::namespaced(lp.http_client("cell", ADMIN).unwrap(), "ns1");
    assert!(
        leases.get_opt("l1").await.unwrap().is_none(),
        "nothing refused was stored"
    );

    // What the controller writes passes, and so does its renewal.
    let (code, s) = post(
        &lp,
        LEASES,
        &lease(
            json!({"holderIdentity": "pod-1", "leaseDurationSeconds": 15,
        "acquireTime": "2026-01-01T00:00:00.000000Z", "renewTime": "2026-01-01T00:00:00.000000Z",
        "leaseTransitions": 0}),
        ),
    )
    .await;
    assert_eq!(code, 201, "{s}");
    // A patch that breaks a time is refused as the apiserver refuses an undecodable patch result.
    let s = api_err(
        leases
            .patch(
                "l1",
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"renewTime": "soon"}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(s.code, 422);
    assert!(
        s.message
            .starts_with(r#" "" is invalid: patch: Invalid value: "{"#),
        "{}",
        s.message
    );
    assert!(s.message.ends_with(r#"parsing time "soon" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "soon" as "2006""#), "{}", s.message);
    let s = api_err(
        leases
            .patch(
                "l1",
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"leaseDurationSeconds": 0}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(
        s.message,
        r#"Lease.coordination.k8s.io "l1" is invalid: spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"#
    );
    let l = leases.get("l1").await.unwrap();
    assert_eq!(l.spec.unwrap().lease_duration_seconds, Some(15));
    lp.shutdown().await;
}

#[tokio::test]
async fn unknown_fields_are_warned_about_dropped_or_refused() {
    let lp = serve(builder()).await;
    let url = |q: &str| format!("{}{LEASES}{q}", lp.base_url());
    let send = |u: String, name: &'static str| async move {
        let mut body = lease(json!({"holderIdentity": "a", "bogus": 1}));
        body["metadata"]["name"] = json!(name);
        body["metadata"]["extra"] = json!("x");
        raw(
            "POST",
            &u,
            Some(ADMIN_TOKEN),
            &[("content-type", "application/json")],
            &body.to_string(),
        )
        .await
    };
    // No fieldValidation is Warn: each dropped field gets a Warning header.
    let resp = raw_with_headers(&url(""), &{
        let mut b = lease(json!({"holderIdentity": "a", "bogus": 1}));
        b["metadata"]["extra"] = json!("x");
        b
    })
    .await;
    assert_eq!(resp.0, 201, "{}", resp.2);
    assert_eq!(
        resp.1,
        [
            r#"299 - "unknown field \"metadata.extra\"""#,
            r#"299 - "unknown field \"spec.bogus\"""#
        ]
    );
    let stored: Value = serde_json::from_str(&resp.2).unwrap();
    assert!(stored["spec"].get("bogus").is_none(), "dropped");
    let (code, _, body) = send(url("?fieldValidation=Strict"), "l2").await;
    assert_eq!(code, 400, "{body}");
    let s: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        s["message"],
        r#"Lease in version "v1" cannot be handled as a Lease: strict decoding error: unknown field "metadata.extra", unknown field "spec.bogus""#
    );
    let (code, _, _) = send(url("?fieldValidation=Ignore"), "l3").await;
    assert_eq!(code, 201);
    lp.shutdown().await;
}

/// POSTs to `url` and returns the code, the `Warning` headers and the body.
async fn raw_with_headers(url: &str, body: &Value) -> (u16, Vec<String>, String) {
    use http_body_util::{BodyExt, Full};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    let client: Client<_, Full<bytes::Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let req = http::Request::post(url)
        .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
        .header("content-type", "application/json")
        .body(Full::new(bytes::Bytes::from(body.to_string())))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let warnings = resp
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    let code = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (code, warnings, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn dry_runs_answer_without_a_resource_version_and_store_nothing() {
    let lp = serve(builder()).await;
    let before = lp.cell().resource_version();
    let (code, created) = post(
        &lp,
        &format!("{LEASES}?dryRun=All"),
        &lease(json!({"holderIdentity": "a"})),
    )
    .await;
    assert_eq!(code, 201, "{created}");
    assert!(
        created["metadata"].get("resourceVersion").is_none(),
        "{created}"
    );
    assert!(created["metadata"]["uid"].is_string());
    assert!(created["metadata"]["creationTimestamp"].is_string());
    assert_eq!(
        lp.cell().resource_version(),
        before,
        "no resourceVersion was used up"
    );
    let leases: Api<Lease> = Api::namespaced(lp.http_client("cell", ADMIN).unwrap(), "ns1");
    assert!(leases.get_opt("l1").await.unwrap().is_none());

    let stored = leases
        .create(
            &PostParams::default(),
            &serde_json::from_value(lease(json!({"holderIdentity": "a"}))).unwrap(),
        )
        .await
        .unwrap();
    let dry = leases
        .patch(
            "l1",
            &PatchParams {
                dry_run: true,
                ..Default::default()
            },
            &Patch::Merge(&json!({"spec": {"holderIdentity": "b"}})),
        )
        .await
        .unwrap();
    assert_eq!(dry.spec.unwrap().holder_identity.as_deref(), Some("b"));
    assert_eq!(
        dry.metadata.resource_version,
        stored.metadata.resource_version
    );
    let now = leases.get("l1").await.unwrap();
    assert_eq!(now.spec.unwrap().holder_identity.as_deref(), Some("a"));
    lp.shutdown().await;
}

#[tokio::test]
async fn the_kinds_an_install_needs_are_defaulted_and_checked() {
    let lp = serve(builder()).await;
    let ns = "/api/v1/namespaces/ns1";
    let (code, s) = post(
        &lp,
        &format!("{ns}/secrets"),
        &json!({
        "metadata": {"name": "cred"}, "stringData": {"kubeconfig": "hi"}}),
    )
    .await;
    assert_eq!(code, 201, "{s}");
    assert_eq!(
        s["data"],
        json!({"kubeconfig": "aGk="}),
        "stringData is stored as data"
    );
    assert_eq!(s["type"], "Opaque");
    assert!(s.get("stringData").is_none());
    let (code, s) = post(
        &lp,
        &format!("{ns}/secrets"),
        &json!({
        "metadata": {"name": "bad"}, "data": {"k": "not base64!"}}),
    )
    .await;
    assert_eq!(code, 400, "{s}");
    assert_eq!(
        s["message"],
        r#"Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 3"#
    );
    let (code, s) = post(
        &lp,
        &format!("{ns}/configmaps"),
        &json!({
        "metadata": {"name": "cm"}, "data": {"a": "1"}}),
    )
    .await;
    assert_eq!(code, 201, "{s}");
    let (code, s) = post(
        &lp,
        &format!("{ns}/serviceaccounts"),
        &json!({"metadata": {"name": "sa"}}),
    )
    .await;
    assert_eq!(code, 201, "{s}");

    let (code, s) = post(&lp, &format!("{ns}/services"), &json!({
        "metadata": {"name": "svc"}, "spec": {"selector": {"app": "a"}, "ports": [{"name": "metrics", "port": 8080}]}})).await;
    assert_eq!(code, 201, "{s}");
    assert_eq!(s["spec"]["type"], "ClusterIP");
    assert_eq!(s["spec"]["ports"][0]["protocol"], "TCP");
    assert_eq!(s["spec"]["ports"][0]["targetPort"], 8080);
    assert!(s["spec"]["clusterIP"].is_string());
    let (code, s) = post(
        &lp,
        &format!("{ns}/services"),
        &json!({
        "metadata": {"name": "none"}, "spec": {"type": "Bogus"}}),
    )
    .await;
    assert_eq!(code, 422, "{s}");
    assert_eq!(
        s["message"],
        r#"Service "none" is invalid: [spec.ports: Required value, spec.type: Unsupported value: "Bogus": supported values: "ClusterIP", "ExternalName", "LoadBalancer", "NodePort"]"#
    );

    let deployment = |labels: Value, image: Value| {
        json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"app": "a"}},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [{"name": "c", "image": image}]}}}})
    };
    let deployments = "/apis/apps/v1/namespaces/ns1/deployments";
    let (code, s) = post(
        &lp,
        deployments,
        &deployment(json!({"app": "b"}), json!(null)),
    )
    .await;
    assert_eq!(code, 422, "{s}");
    assert_eq!(
        s["message"],
        r#"Deployment.apps "d" is invalid: [spec.template.metadata.labels: Invalid value: {"app":"b"}: `selector` does not match template `labels`, spec.template.spec.containers[0].image: Required value]"#
    );
    let (code, s) = post(
        &lp,
        deployments,
        &json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "d"}, "spec": {}}),
    )
    .await;
    assert_eq!(code, 422, "{s}");
    assert_eq!(
        s["message"],
        r#"Deployment.apps "d" is invalid: [spec.selector: Required value, spec.template.metadata.labels: Invalid value: null: `selector` does not match template `labels`, spec.template.spec.containers: Required value]"#
    );
    let (code, s) = post(
        &lp,
        deployments,
        &deployment(json!({"app": "a"}), json!("img:1")),
    )
    .await;
    assert_eq!(code, 201, "{s}");
    assert_eq!(s["spec"]["replicas"], 1);
    assert_eq!(s["spec"]["strategy"]["type"], "RollingUpdate");
    assert_eq!(s["status"], json!({}), "no controller gives it a status");
    lp.shutdown().await;
}
