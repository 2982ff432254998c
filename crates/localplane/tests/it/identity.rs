//! Who a request acts as: impersonation under RBAC, and the reviews that answer access
//! questions, over raw HTTP (kubectl drives the same paths in `kubectl.rs`).

use crate::common::*;
use serde_json::{Value, json};

async fn send(
    lp: &localplane::Running,
    token: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Value,
) -> (u16, Value) {
    let mut h = vec![("content-type", "application/json")];
    h.extend_from_slice(headers);
    let (code, _, text) = raw(
        method,
        &format!("{}{path}", lp.base_url()),
        Some(token),
        &h,
        &if body.is_null() {
            String::new()
        } else {
            body.to_string()
        },
    )
    .await;
    (
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// A GET with no body, which most of these requests are.
async fn get(
    lp: &localplane::Running,
    token: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    send(lp, token, "GET", path, headers, Value::Null).await
}

/// Lets the plain user read leases in ns1, and grants what `extra` names cluster-wide.
async fn grant(lp: &localplane::Running, extra: Value) {
    for (path, obj) in [
        (
            "/apis/rbac.authorization.k8s.io/v1/namespaces/ns1/roles",
            json!({
            "metadata": {"name": "lease-reader"},
            "rules": [{"verbs": ["get", "list"], "apiGroups": ["coordination.k8s.io"], "resources": ["leases"]}]}),
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/namespaces/ns1/rolebindings",
            json!({
            "metadata": {"name": "lease-reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "lease-reader"},
            "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": USER_NAME}]}),
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            json!({
            "metadata": {"name": "extra"}, "rules": extra}),
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            json!({
            "metadata": {"name": "extra"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "extra"},
            "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": USER_NAME}]}),
        ),
    ] {
        let (code, s) = send(lp, ADMIN_TOKEN, "POST", path, &[], obj).await;
        assert_eq!(code, 201, "{s}");
    }
}

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/ns1/leases";

#[tokio::test]
async fn impersonation_needs_the_impersonate_verb_and_then_acts_as_the_other_user() {
    let lp = serve(builder().rbac(true)).await;
    grant(&lp, json!([])).await;
    // The user may read leases itself, but may not act as anyone else.
    let (code, _) = get(&lp, USER_TOKEN, LEASES, &[]).await;
    assert_eq!(code, 200);
    // kube-apiserver 1.37 tries the constrained mode that applies first (may the user do this
    // request while impersonating a user, a ServiceAccount, a node?), then the legacy
    // `impersonate` verb, and answers the first refusal. Every wording below is the real
    // server's, read from it.
    let refused_as = |who: &'static str| {
        let lp = &lp;
        async move {
            let (code, s) = get(lp, USER_TOKEN, LEASES, &[("impersonate-user", who)]).await;
            assert_eq!(code, 403, "{s}");
            assert_eq!(
                s["details"],
                json!({"group": "coordination.k8s.io", "kind": "leases"})
            );
            s["message"].as_str().unwrap().to_string()
        }
    };
    let on = |mode: &str| {
        format!(
            r#"leases.coordination.k8s.io is forbidden: User "{USER_NAME}" cannot impersonate-on:{mode}:list resource "leases" in API group "coordination.k8s.io" in the namespace "ns1""#
        )
    };
    assert_eq!(refused_as("bob").await, on("user-info"));
    assert_eq!(
        refused_as("system:serviceaccount:ns1:robot").await,
        on("serviceaccount")
    );
    assert_eq!(refused_as("system:node:n1").await, on("arbitrary-node"));
    // A node asked for with a group has no constrained mode: the legacy refusal is the answer.
    let (code, s) = get(
        &lp,
        USER_TOKEN,
        LEASES,
        &[
            ("impersonate-user", "system:node:n1"),
            ("impersonate-group", "g"),
        ],
    )
    .await;
    assert_eq!(code, 403, "{s}");
    assert_eq!(
        s["message"],
        format!(
            r#"users "system:node:n1" is forbidden: User "{USER_NAME}" cannot impersonate resource "users" in API group "" at the cluster scope"#
        )
    );
    assert_eq!(
        s["details"],
        json!({"name": "system:node:n1", "kind": "users"})
    );
    // A non-resource request is refused by its path.
    let (code, s) = get(&lp, USER_TOKEN, "/api", &[("impersonate-user", "bob")]).await;
    assert_eq!(code, 403, "{s}");
    assert_eq!(
        s["message"],
        format!(r#"forbidden: User "{USER_NAME}" cannot impersonate-on:user-info:get path "/api""#)
    );
    // A group without a user is malformed, whoever asks.
    let (code, s) = get(&lp, ADMIN_TOKEN, LEASES, &[("impersonate-group", "team")]).await;
    assert_eq!(code, 400, "{s}");
    assert_eq!(
        s["message"],
        "requested [{Group  team    }] without impersonating a user"
    );

    // An admin acts as the user, and gets exactly the user's access.
    let (code, _) = get(&lp, ADMIN_TOKEN, LEASES, &[("impersonate-user", USER_NAME)]).await;
    assert_eq!(code, 200);
    let (code, s) = get(
        &lp,
        ADMIN_TOKEN,
        "/apis/coordination.k8s.io/v1/namespaces/default/leases",
        &[("impersonate-user", USER_NAME)],
    )
    .await;
    assert_eq!(code, 403, "{s}");
    assert_eq!(
        s["message"],
        format!(
            r#"leases.coordination.k8s.io is forbidden: User "{USER_NAME}" cannot list resource "leases" in API group "coordination.k8s.io" in the namespace "default""#
        )
    );
    // Impersonating a group the grant names gives that group's access (and system:masters, all).
    let (code, _) = get(
        &lp,
        ADMIN_TOKEN,
        "/apis/coordination.k8s.io/v1/namespaces/default/leases",
        &[
            ("impersonate-user", "carol"),
            ("impersonate-group", "system:masters"),
        ],
    )
    .await;
    assert_eq!(code, 200);
    lp.shutdown().await;
}

#[tokio::test]
async fn a_user_granted_impersonate_acts_as_whom_the_grant_names() {
    let lp = serve(builder().rbac(true)).await;
    grant(&lp, json!([{"verbs": ["impersonate"], "apiGroups": [""], "resources": ["users"], "resourceNames": ["bob"]}])).await;
    let (code, s) = send(
        &lp,
        USER_TOKEN,
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        &[("impersonate-user", "bob")],
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
    )
    .await;
    assert_eq!(code, 201, "{s}");
    assert_eq!(
        s["status"]["userInfo"],
        json!({"username": "bob", "groups": ["system:authenticated"]})
    );
    // bob has no grant of his own: the user acting as bob cannot read what the user could.
    let (code, _) = get(&lp, USER_TOKEN, LEASES, &[("impersonate-user", "bob")]).await;
    assert_eq!(code, 403);
    let (code, _) = get(&lp, USER_TOKEN, LEASES, &[("impersonate-user", "eve")]).await;
    assert_eq!(code, 403);
    lp.shutdown().await;
}

#[tokio::test]
async fn constrained_impersonation_grants_act_only_on_what_they_name() {
    let lp = serve(builder().rbac(true)).await;
    grant(
        &lp,
        json!([
            {"verbs": ["impersonate-on:user-info:list"], "apiGroups": ["coordination.k8s.io"], "resources": ["leases"]},
            {"verbs": ["impersonate:user-info"], "apiGroups": ["authentication.k8s.io"], "resources": ["users"], "resourceNames": ["bob"]}
        ]),
    )
    .await;
    let as_bob = |extra: &'static [(&'static str, &'static str)], path: &'static str| {
        let lp = &lp;
        async move {
            let mut headers = vec![("impersonate-user", "bob")];
            headers.extend_from_slice(extra);
            let (code, s) = get(lp, USER_TOKEN, path, &headers).await;
            assert_eq!(code, 403, "{s}");
            s["message"].as_str().unwrap().to_string()
        }
    };
    // Allowed to list leases as bob: bob's own access decides, and bob has none.
    assert_eq!(
        as_bob(&[], LEASES).await,
        r#"leases.coordination.k8s.io is forbidden: User "bob" cannot list resource "leases" in API group "coordination.k8s.io" in the namespace "ns1""#
    );
    // A group the grant does not name, and system:masters, which no grant can name.
    assert_eq!(
        as_bob(&[("impersonate-group", "team")], LEASES).await,
        format!(
            r#"groups.authentication.k8s.io "team" is forbidden: User "{USER_NAME}" cannot impersonate:user-info resource "groups" in API group "authentication.k8s.io" at the cluster scope"#
        )
    );
    assert_eq!(
        as_bob(&[("impersonate-group", "system:masters")], LEASES).await,
        format!(
            r#"groups.authentication.k8s.io "system:masters" is forbidden: User "{USER_NAME}" cannot impersonate:user-info resource "groups" in API group "authentication.k8s.io" at the cluster scope: impersonating the system:masters group is not allowed"#
        )
    );
    // Another verb than the one granted.
    assert_eq!(
        as_bob(&[], "/apis/coordination.k8s.io/v1/namespaces/ns1/leases/x").await,
        format!(
            r#"leases.coordination.k8s.io "x" is forbidden: User "{USER_NAME}" cannot impersonate-on:user-info:get resource "leases" in API group "coordination.k8s.io" in the namespace "ns1""#
        )
    );
    // A node impersonated in its constrained mode is in system:nodes alone.
    let (code, s) = send(
        &lp,
        ADMIN_TOKEN,
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        &[("impersonate-user", "system:node:n1")],
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
    )
    .await;
    assert_eq!(code, 201, "{s}");
    assert_eq!(
        s["status"]["userInfo"],
        json!({"username": "system:node:n1", "groups": ["system:nodes", "system:authenticated"]})
    );
    lp.shutdown().await;
}

#[tokio::test]
async fn access_reviews_answer_from_the_stored_rbac() {
    let lp = serve(builder().rbac(true)).await;
    grant(&lp, json!([{"verbs": ["create"], "apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"]},
                      {"verbs": ["get"], "nonResourceURLs": ["/healthz", "/metrics/*"]}])).await;
    let ssar = |ns: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"namespace": ns, "verb": "list", "group": "coordination.k8s.io", "resource": "leases"}}})
    };
    let path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    let (code, s) = send(&lp, USER_TOKEN, "POST", path, &[], ssar("ns1")).await;
    assert_eq!(code, 201, "{s}");
    assert_eq!(s["kind"], "SelfSubjectAccessReview");
    assert_eq!(
        s["status"],
        json!({"allowed": true, "reason": format!(r#"RBAC: allowed by RoleBinding "lease-reader/ns1" of Role "lease-reader" to User "{USER_NAME}""#)})
    );
    let (_, s) = send(&lp, USER_TOKEN, "POST", path, &[], ssar("default")).await;
    assert_eq!(s["status"], json!({"allowed": false}));
    let nonres = |p: &str| json!({"spec": {"nonResourceAttributes": {"path": p, "verb": "get"}}});
    let (_, s) = send(&lp, USER_TOKEN, "POST", path, &[], nonres("/metrics/cell")).await;
    assert_eq!(s["status"]["allowed"], true, "{s}");
    let (_, s) = send(&lp, USER_TOKEN, "POST", path, &[], nonres("/version")).await;
    assert_eq!(s["status"]["allowed"], false, "{s}");
    let (code, s) = send(&lp, USER_TOKEN, "POST", path, &[], json!({"spec": {}})).await;
    assert_eq!(code, 422, "{s}");
    assert_eq!(
        s["message"],
        r#".authorization.k8s.io "" is invalid: spec: Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified"#
    );

    // About someone else: needs the grant (the user has it; nobody else does).
    let sar = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": "bob", "groups": ["team"], "resourceAttributes": {"namespace": "ns1", "verb": "get", "group": "coordination.k8s.io", "resource": "leases"}}});
    let sar_path = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    let (code, s) = send(&lp, USER_TOKEN, "POST", sar_path, &[], sar.clone()).await;
    assert_eq!(code, 201, "{s}");
    assert_eq!(s["status"], json!({"allowed": false}));
    let mut as_user = sar.clone();
    as_user["spec"]["user"] = json!(USER_NAME);
    let (_, s) = send(&lp, USER_TOKEN, "POST", sar_path, &[], as_user).await;
    assert_eq!(s["status"]["allowed"], true);
    let (code, s) = send(
        &lp,
        USER_TOKEN,
        "POST",
        sar_path,
        &[("impersonate-user", USER_NAME), ("impersonate-group", "x")],
        sar.clone(),
    )
    .await;
    assert_eq!(code, 403, "impersonating needs its own grant: {s}");

    // The rules the user holds in a namespace.
    let (code, s) = send(
        &lp,
        USER_TOKEN,
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
        &[],
        json!({"spec": {"namespace": "ns1"}}),
    )
    .await;
    assert_eq!(code, 201, "{s}");
    let rules = s["status"]["resourceRules"].as_array().unwrap();
    assert!(rules.contains(&json!({"verbs": ["get", "list"], "apiGroups": ["coordination.k8s.io"], "resources": ["leases"]})), "{s}");
    assert!(rules.contains(&json!({"verbs": ["create"], "apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"]})), "{s}");
    // ...and what every authenticated user may do (bootstrap policy's system:basic-user).
    let basic = json!({"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
        "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]});
    assert!(rules.contains(&basic), "{s}");
    assert_eq!(
        s["status"]["nonResourceRules"],
        json!([{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/metrics/*"]}])
    );
    assert_eq!(s["status"]["incomplete"], false);

    // Reviews are asked, never stored or listed.
    let (code, _) = get(&lp, ADMIN_TOKEN, path, &[]).await;
    assert_eq!(code, 405);
    lp.shutdown().await;
}

#[tokio::test]
async fn token_reviews_say_who_a_token_is_to_whoever_may_ask() {
    let lp = serve(builder().rbac(true)).await;
    let path = "/apis/authentication.k8s.io/v1/tokenreviews";
    let review = |token: &str, audiences: Value| {
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
               "spec": {"token": token, "audiences": audiences}})
    };
    // Asking who someone else is needs the grant, as a SubjectAccessReview does.
    let (code, s) = send(
        &lp,
        USER_TOKEN,
        "POST",
        path,
        &[],
        review(ADMIN_TOKEN, json!(null)),
    )
    .await;
    assert_eq!(code, 403, "{s}");
    assert_eq!(
        s["message"],
        format!(
            r#"tokenreviews.authentication.k8s.io is forbidden: User "{USER_NAME}" cannot create resource "tokenreviews" in API group "authentication.k8s.io" at the cluster scope"#
        )
    );
    grant(&lp, json!([{"verbs": ["create"], "apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"]}])).await;

    let (code, s) = send(
        &lp,
        USER_TOKEN,
        "POST",
        path,
        &[],
        review(ADMIN_TOKEN, json!(null)),
    )
    .await;
    assert_eq!(code, 201, "{s}");
    assert_eq!(s["kind"], "TokenReview");
    assert_eq!(
        s["spec"]["token"], ADMIN_TOKEN,
        "the request comes back, with its status"
    );
    assert_eq!(
        s["status"],
        json!({"authenticated": true,
               "user": {"username": ADMIN, "groups": ["system:masters", "system:authenticated"]},
               "audiences": ["https://kubernetes.default.svc.cluster.local"]})
    );
    // A token nobody has: `authenticated` left out (false) and an empty user, as Go encodes it.
    let (code, s) = send(
        &lp,
        USER_TOKEN,
        "POST",
        path,
        &[],
        review("nobody-has-this", json!(null)),
    )
    .await;
    assert_eq!(code, 201, "{s}");
    assert_eq!(
        s["status"],
        json!({"user": {}, "error": "invalid bearer token"})
    );
    // Static tokens hold for the API audiences only.
    let (_, s) = send(
        &lp,
        USER_TOKEN,
        "POST",
        path,
        &[],
        review(USER_TOKEN, json!(["https://elsewhere"])),
    )
    .await;
    assert_eq!(
        s["status"],
        json!({"user": {}, "error": "invalid bearer token"})
    );
    let (_, s) = send(
        &lp,
        USER_TOKEN,
        "POST",
        path,
        &[],
        review(
            USER_TOKEN,
            json!([
                "https://elsewhere",
                "https://kubernetes.default.svc.cluster.local"
            ]),
        ),
    )
    .await;
    assert_eq!(s["status"]["authenticated"], true, "{s}");
    assert_eq!(s["status"]["user"]["username"], USER_NAME);
    assert_eq!(
        s["status"]["audiences"],
        json!(["https://kubernetes.default.svc.cluster.local"])
    );
    // No token: refused before anything is looked up, in the apiserver's words.
    let (code, s) = send(&lp, USER_TOKEN, "POST", path, &[], review("", json!(null))).await;
    assert_eq!(code, 400, "{s}");
    assert_eq!(
        s["message"],
        "token is required for TokenReview in authentication"
    );
    // Cluster-scoped, and only ever created.
    let (code, _) = send(
        &lp,
        ADMIN_TOKEN,
        "POST",
        "/apis/authentication.k8s.io/v1/namespaces/ns1/tokenreviews",
        &[],
        review(USER_TOKEN, json!(null)),
    )
    .await;
    assert_eq!(code, 404);
    let (code, _) = get(&lp, ADMIN_TOKEN, path, &[]).await;
    assert_eq!(code, 405);

    // kube-rs's typed client reads the answer, as a server delegating to the cluster does.
    let client = lp.http_client("cell", USER).unwrap();
    let api: kube::Api<k8s_openapi::api::authentication::v1::TokenReview> = kube::Api::all(client);
    let asked = k8s_openapi::api::authentication::v1::TokenReview {
        spec: k8s_openapi::api::authentication::v1::TokenReviewSpec {
            token: Some(ADMIN_TOKEN.into()),
            audiences: None,
        },
        ..Default::default()
    };
    let answered = api.create(&Default::default(), &asked).await.unwrap();
    let status = answered.status.unwrap();
    assert_eq!(status.authenticated, Some(true));
    assert_eq!(status.user.unwrap().username.as_deref(), Some(ADMIN));
    lp.shutdown().await;
}

#[tokio::test]
async fn a_token_review_and_an_access_review_answer_what_a_metrics_endpoint_asks() {
    // What a server that delegates to the cluster does for one request: who is the token, and
    // may that user `get` the non-resource path it asked for.
    let lp = serve(builder().rbac(true)).await;
    grant(&lp, json!([
        {"verbs": ["create"], "apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"]},
        {"verbs": ["create"], "apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"]},
        {"verbs": ["get"], "nonResourceURLs": ["/metrics"]}
    ])).await;
    let (_, who) = send(
        &lp,
        USER_TOKEN,
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        &[],
        json!({"spec": {"token": USER_TOKEN}}),
    )
    .await;
    let user = &who["status"]["user"];
    let may = |path: &str, verb: &str| {
        json!({"spec": {"user": user["username"], "groups": user["groups"],
                        "nonResourceAttributes": {"path": path, "verb": verb}}})
    };
    let sar = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    let (code, s) = send(&lp, USER_TOKEN, "POST", sar, &[], may("/metrics", "get")).await;
    assert_eq!(code, 201, "{s}");
    assert_eq!(
        s["status"],
        json!({"allowed": true, "reason": format!(r#"RBAC: allowed by ClusterRoleBinding "extra" of ClusterRole "extra" to User "{USER_NAME}""#)})
    );
    let (_, s) = send(&lp, USER_TOKEN, "POST", sar, &[], may("/metrics", "post")).await;
    assert_eq!(s["status"], json!({"allowed": false}));
    let (_, s) = send(
        &lp,
        USER_TOKEN,
        "POST",
        sar,
        &[],
        may("/metrics/extra", "get"),
    )
    .await;
    assert_eq!(
        s["status"],
        json!({"allowed": false}),
        "an exact URL grants no deeper path"
    );
    // The groups the review reported take part: a grant to system:authenticated holds for a
    // user only through them.
    for (path, obj) in [
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            json!({"metadata": {"name": "version-reader"},
                   "rules": [{"verbs": ["get"], "nonResourceURLs": ["/version"]}]}),
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            json!({"metadata": {"name": "version-reader"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "version-reader"},
                   "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:authenticated"}]}),
        ),
    ] {
        let (code, s) = send(&lp, ADMIN_TOKEN, "POST", path, &[], obj).await;
        assert_eq!(code, 201, "{s}");
    }
    let (_, s) = send(&lp, USER_TOKEN, "POST", sar, &[], may("/version", "get")).await;
    assert_eq!(s["status"]["allowed"], true, "{s}");
    let (_, s) = send(
        &lp,
        USER_TOKEN,
        "POST",
        sar,
        &[],
        json!({"spec": {"user": user["username"],
                        "nonResourceAttributes": {"path": "/version", "verb": "get"}}}),
    )
    .await;
    assert_eq!(s["status"], json!({"allowed": false}));
    lp.shutdown().await;
}
