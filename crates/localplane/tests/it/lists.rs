//! Lists as the apiserver serves them: `resourceVersion` and `resourceVersionMatch`, continue
//! pages over one snapshot, `deletecollection`, and a selector watch seeing objects leave.

use futures::{StreamExt, TryStreamExt};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::core::{DynamicObject, GroupVersionKind};
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::common::*;

fn widgets(client: Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("example.localplane.dev", "v1", "Widget");
    Api::namespaced_with(client, "ns1", &ApiResource::from_gvk(&gvk))
}

fn widget(name: &str, size: i64, team: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "example.localplane.dev/v1", "kind": "Widget",
        "metadata": {"name": name, "labels": {"team": team}}, "spec": {"size": size},
    }))
    .unwrap()
}

async fn get(url: &str) -> (u16, Value) {
    let (code, _, body) = raw("GET", url, Some(ADMIN_TOKEN), &[], "").await;
    (code, serde_json::from_str(&body).unwrap())
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn resource_versions_and_their_match_rules() {
    let (lp, client) = serve_as_admin(builder()).await;
    let api = widgets(client);
    let pp = PostParams::default();
    let w1 = api.create(&pp, &widget("w1", 1, "a")).await.unwrap();
    let at = w1.resource_version().unwrap();
    api.create(&pp, &widget("w2", 2, "a")).await.unwrap();
    api.patch(
        "w1",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"size": 5}})),
    )
    .await
    .unwrap();
    let url = format!(
        "{}/apis/example.localplane.dev/v1/namespaces/ns1/widgets",
        lp.base_url()
    );

    // Exact: the list as it was then.
    let (code, then) = get(&format!(
        "{url}?resourceVersion={at}&resourceVersionMatch=Exact"
    ))
    .await;
    assert_eq!(code, 200, "{then}");
    assert_eq!(names(&then), ["w1"]);
    assert_eq!(then["items"][0]["spec"]["size"], 1);
    assert_eq!(then["metadata"]["resourceVersion"], at);
    // A paged list with a resourceVersion and no match reads exactly there too.
    let (_, legacy) = get(&format!("{url}?resourceVersion={at}&limit=10")).await;
    assert_eq!(names(&legacy), ["w1"]);
    // NotOlderThan (and no match, unpaged; and 0, any): the newest state.
    for q in [
        format!("resourceVersion={at}&resourceVersionMatch=NotOlderThan"),
        format!("resourceVersion={at}"),
        "resourceVersion=0".to_string(),
    ] {
        let (code, now) = get(&format!("{url}?{q}")).await;
        assert_eq!(code, 200);
        assert_eq!(names(&now), ["w1", "w2"], "{q}");
        assert_eq!(now["items"][0]["spec"]["size"], 5, "{q}");
    }

    // Newer than the plane: the watch cache waits, then answers with a retry hint.
    let current: u64 = lp.plane("cell").unwrap().resource_version();
    let (code, s) = get(&format!(
        "{url}?resourceVersion={}&resourceVersionMatch=NotOlderThan",
        current + 100
    ))
    .await;
    assert_eq!((code, s["reason"].as_str()), (504, Some("Timeout")), "{s}");
    assert_eq!(
        s["message"],
        format!(
            "Timeout: Too large resource version: {}, current: {current}",
            current + 100
        )
    );
    assert_eq!(s["details"]["retryAfterSeconds"], 1);
    assert_eq!(
        s["details"]["causes"],
        json!([{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}])
    );
    // A version that arrives while the list waits is served.
    let waiting = tokio::spawn({
        let url = format!(
            "{url}?resourceVersion={}&resourceVersionMatch=NotOlderThan",
            current + 1
        );
        async move { get(&url).await }
    });
    tokio::task::yield_now().await;
    api.create(&pp, &widget("w3", 3, "b")).await.unwrap();
    let (code, list) = waiting.await.unwrap();
    assert_eq!(code, 200, "{list}");
    assert_eq!(names(&list), ["w1", "w2", "w3"]);

    // Exact at a version history no longer holds: 410.
    lp.plane("cell").unwrap().compact_history();
    let (code, s) = get(&format!(
        "{url}?resourceVersion={at}&resourceVersionMatch=Exact"
    ))
    .await;
    assert_eq!((code, s["reason"].as_str()), (410, Some("Expired")));
    assert_eq!(
        s["message"],
        "The resourceVersion for the provided list is too old."
    );

    // The ListOptions the apiserver refuses.
    for (q, msg) in [
        (
            "resourceVersionMatch=Exact",
            r#"ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"#,
        ),
        (
            "resourceVersion=0&resourceVersionMatch=Exact",
            r#"ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0""#,
        ),
        (
            "resourceVersion=1&resourceVersionMatch=Newest",
            r#"ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Unsupported value: "Newest": supported values: "Exact", "NotOlderThan", """#,
        ),
    ] {
        let (code, s) = get(&format!("{url}?{q}")).await;
        assert_eq!((code, s["message"].as_str()), (422, Some(msg)), "{q}");
    }
    let (_, page) = get(&format!("{url}?limit=1")).await;
    let cont = page["metadata"]["continue"].as_str().unwrap().to_string();
    let (code, s) = get(&format!("{url}?limit=1&continue={cont}&resourceVersion=5")).await;
    assert_eq!(
        (code, s["message"].as_str()),
        (
            400,
            Some("specifying resource version is not allowed when using continue")
        )
    );
    lp.shutdown().await;
}

#[tokio::test]
async fn continue_pages_show_the_first_pages_snapshot() {
    let (lp, client) = serve_as_admin(builder()).await;
    let api = widgets(client);
    let pp = PostParams::default();
    for i in 1..=5 {
        api.create(
            &pp,
            &widget(&format!("w{i}"), i, if i % 2 == 0 { "a" } else { "b" }),
        )
        .await
        .unwrap();
    }
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(first.metadata.remaining_item_count, Some(3));
    let snapshot = first.metadata.resource_version.clone().unwrap();

    // Between pages: two objects go (one before the next page's end, one after it), one
    // changes, one arrives.
    api.delete("w3", &DeleteParams::default()).await.unwrap();
    api.delete("w5", &DeleteParams::default()).await.unwrap();
    api.patch(
        "w4",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"size": 7}})),
    )
    .await
    .unwrap();
    api.create(&pp, &widget("w6", 6, "a")).await.unwrap();

    let mut seen: Vec<(String, i64)> = first
        .items
        .iter()
        .map(|w| (w.name_any(), w.data["spec"]["size"].as_i64().unwrap()))
        .collect();
    let mut cont = first.metadata.continue_.clone();
    let mut remaining = Vec::new();
    while let Some(c) = cont.filter(|c| !c.is_empty()) {
        let page = api
            .list(&ListParams::default().limit(2).continue_token(&c))
            .await
            .unwrap();
        remaining.push(page.metadata.remaining_item_count);
        assert_eq!(
            page.metadata.resource_version.as_deref(),
            Some(snapshot.as_str())
        );
        seen.extend(
            page.items
                .iter()
                .map(|w| (w.name_any(), w.data["spec"]["size"].as_i64().unwrap())),
        );
        cont = page.metadata.continue_;
    }
    assert_eq!(
        seen,
        [
            ("w1".to_string(), 1),
            ("w2".to_string(), 2),
            ("w3".to_string(), 3),
            ("w4".to_string(), 4),
            ("w5".to_string(), 5)
        ],
        "the pages are the list as of the first page"
    );
    // Counted in the snapshot too: after w3 and w4 only w5 remains (deleted since; w6 came
    // later).
    assert_eq!(remaining, [Some(1), None]);
    // At the newest state: w1 is listed, w2, w4 and w6 remain.
    let newest = api.list(&ListParams::default().limit(1)).await.unwrap();
    assert_eq!(newest.metadata.remaining_item_count, Some(3));

    // A selected list sends no remaining count.
    let sel = api
        .list(&ListParams::default().labels("team=a").limit(1))
        .await
        .unwrap();
    assert_eq!(sel.metadata.remaining_item_count, None);
    assert!(sel.metadata.continue_.is_some());

    // A token older than history: 410, with a token that continues at the newest state.
    let page = api.list(&ListParams::default().limit(2)).await.unwrap();
    api.create(&pp, &widget("w7", 7, "b")).await.unwrap();
    lp.plane("cell").unwrap().compact_history();
    let url = format!(
        "{}/apis/example.localplane.dev/v1/namespaces/ns1/widgets?limit=2&continue={}",
        lp.base_url(),
        page.metadata.continue_.unwrap()
    );
    let (code, s) = get(&url).await;
    assert_eq!((code, s["reason"].as_str()), (410, Some("Expired")));
    assert!(
        s["message"]
            .as_str()
            .unwrap()
            .starts_with("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response"),
        "{s}"
    );
    let next = s["metadata"]["continue"].as_str().unwrap();
    let rest = api
        .list(&ListParams::default().limit(10).continue_token(next))
        .await
        .unwrap();
    let rest: Vec<String> = rest.items.iter().map(|w| w.name_any()).collect();
    assert_eq!(rest, ["w4", "w6", "w7"], "the rest, as it is now");
    let (code, s) = get(&format!(
        "{}/apis/example.localplane.dev/v1/namespaces/ns1/widgets?continue=not-a-token",
        lp.base_url()
    ))
    .await;
    assert_eq!(
        (code, s["reason"].as_str()),
        (400, Some("BadRequest")),
        "{s}"
    );
    lp.shutdown().await;
}

#[tokio::test]
async fn deletecollection_deletes_what_the_selectors_match() {
    let (lp, client) = serve_as_admin(builder().rbac(true)).await;
    let api = widgets(client.clone());
    let pp = PostParams::default();
    for (n, team) in [("w1", "a"), ("w2", "a"), ("w3", "b"), ("w4", "a")] {
        api.create(&pp, &widget(n, 1, team)).await.unwrap();
    }
    api.patch(
        "w4",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold"]}})),
    )
    .await
    .unwrap();
    let mut events = api
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    // The four creations replay first.
    for _ in 0..4 {
        events.try_next().await.unwrap();
    }

    let dry = api
        .delete_collection(
            &DeleteParams {
                dry_run: true,
                ..Default::default()
            },
            &ListParams::default().labels("team=a"),
        )
        .await
        .unwrap();
    let listed = dry.left().expect("the list of what was deleted");
    assert_eq!(listed.items.len(), 3);
    assert_eq!(
        api.list(&ListParams::default()).await.unwrap().items.len(),
        4,
        "a dry run deletes nothing"
    );

    let done = api
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("team=a"),
        )
        .await
        .unwrap()
        .left()
        .unwrap();
    let deleted: Vec<String> = done.items.iter().map(|w| w.name_any()).collect();
    assert_eq!(deleted, ["w1", "w2", "w4"]);
    let left: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|w| w.name_any())
        .collect();
    assert_eq!(left, ["w3", "w4"], "a finalizer holds w4");
    assert!(
        api.get("w4")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    let mut kinds = vec![];
    for _ in 0..3 {
        match events.try_next().await.unwrap().unwrap() {
            WatchEvent::Deleted(o) => kinds.push(format!("DELETED {}", o.name_any())),
            WatchEvent::Modified(o) => kinds.push(format!("MODIFIED {}", o.name_any())),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(kinds, ["DELETED w1", "DELETED w2", "MODIFIED w4"]);

    // A precondition no object meets is each delete's own conflict.
    let err = api_err(
        api.delete_collection(
            &DeleteParams::default().preconditions(kube::api::Preconditions {
                uid: Some("not-a-uid".into()),
                resource_version: None,
            }),
            &ListParams::default().labels("team=b"),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert!(api.get_opt("w3").await.unwrap().is_some());

    // Where the apiserver has no such route, and who may not.
    let base = lp.base_url();
    for path in [
        "/api/v1/namespaces",
        "/apis/example.localplane.dev/v1/widgets",
    ] {
        let (code, _, body) = raw(
            "DELETE",
            &format!("{base}{path}"),
            Some(ADMIN_TOKEN),
            &[],
            "",
        )
        .await;
        assert_eq!(code, 405, "{path}: {body}");
    }
    let user = widgets(lp.http_client("cell", USER).unwrap());
    let err = api_err(
        user.delete_collection(&DeleteParams::default(), &ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 403);
    assert!(
        err.message
            .contains(r#"cannot deletecollection resource "widgets""#),
        "{}",
        err.message
    );
    lp.shutdown().await;
}

#[tokio::test]
async fn a_selector_watch_sees_an_object_leave_as_it_last_saw_it() {
    let (lp, client) = serve_as_admin(builder()).await;
    let api = widgets(client);
    let w = api
        .create(&PostParams::default(), &widget("w1", 1, "a"))
        .await
        .unwrap();
    let mut events = api
        .watch(
            &WatchParams::default().labels("team=a"),
            &w.resource_version().unwrap(),
        )
        .await
        .unwrap()
        .boxed();

    // One write both changes the spec and moves the object out of the selector.
    let moved = api
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "b"}}, "spec": {"size": 9}})),
        )
        .await
        .unwrap();
    match events.try_next().await.unwrap().unwrap() {
        WatchEvent::Deleted(o) => {
            assert_eq!(o.labels()["team"], "a", "the labels the watcher last saw");
            assert_eq!(o.data["spec"]["size"], 1, "the spec the watcher last saw");
            assert_eq!(
                o.resource_version(),
                moved.resource_version(),
                "at the change"
            );
        }
        other => panic!("expected DELETED, got {other:?}"),
    }
    api.patch(
        "w1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
    )
    .await
    .unwrap();
    match events.try_next().await.unwrap().unwrap() {
        WatchEvent::Added(o) => assert_eq!(o.data["spec"]["size"], 9),
        other => panic!("expected ADDED, got {other:?}"),
    }
    lp.shutdown().await;
}

#[tokio::test]
async fn a_malformed_label_selector_is_a_bad_request() {
    let (lp, client) = serve_as_admin(builder()).await;
    let api = widgets(client);
    for (sel, msg) in [
        ("team=a=b", "found '=', expected: ',' or 'end of string'"),
        (
            "team in a",
            "unable to parse requirement: found 'a' expected: '('",
        ),
        (
            "size>big",
            "unable to parse requirement: values[0]: Invalid value: \"big\": for 'Gt', 'Lt' operators, the value must be an integer",
        ),
    ] {
        let err = api_err(
            api.list(&ListParams::default().labels(sel))
                .await
                .unwrap_err(),
        );
        assert_eq!(
            (err.code, err.reason.as_str(), err.message.as_str()),
            (400, "BadRequest", msg),
            "{sel}"
        );
        let err = api_err(
            api.watch(&WatchParams::default().labels(sel), "0")
                .await
                .err()
                .expect("a watch with it is refused too"),
        );
        assert_eq!(err.code, 400, "{sel}");
    }
    lp.shutdown().await;
}
