//! The reviews that answer identity questions, evaluated against the plane's stored RBAC:
//! SelfSubjectAccessReview and SubjectAccessReview (`kubectl auth can-i`), SelfSubjectRulesReview
//! (`kubectl auth can-i --list`) and SelfSubjectReview (`kubectl auth whoami`), and the
//! TokenReview a server that delegates authentication to the cluster sends (who a bearer token
//! is). A review is never stored: the answer is the request with its `status` filled in.
//!
//! Asking about oneself needs no grant: a cluster's bootstrap policy lets every authenticated user
//! create the self reviews (`system:basic-user`), and localplane behaves as if that binding
//! existed. Asking about someone else (SubjectAccessReview) needs `create` on
//! `subjectaccessreviews`, checked like any other request, and so does a TokenReview (`create`
//! on `tokenreviews`; a cluster grants both in `system:auth-delegator`).

use serde_json::{Value, json};

use super::impersonate::Subject;
use crate::error::{ApiError, FieldError};
use crate::kinds::BuiltinKind;
use crate::plane::Plane;
use crate::rbac;
use crate::resources::ResourceDef;
use crate::shared::Shared;

/// What the apiserver's own tokens are for (`--api-audiences`, which defaults to the service
/// account issuer, as a kind cluster sets it). A TokenReview that names no audience is checked
/// against these.
pub(crate) const API_AUDIENCES: [&str; 1] = ["https://kubernetes.default.svc.cluster.local"];

/// The rules every authenticated user has from `system:basic-user`.
fn basic_user_rules() -> Vec<Value> {
    vec![
        json!({"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
               "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]}),
        json!({"verbs": ["create"], "apiGroups": ["authentication.k8s.io"],
               "resources": ["selfsubjectreviews"]}),
    ]
}

fn is_self_review(def: &ResourceDef) -> bool {
    matches!(
        def.builtin,
        Some(
            BuiltinKind::SelfSubjectAccessReview
                | BuiltinKind::SelfSubjectRulesReview
                | BuiltinKind::SelfSubjectReview
        )
    )
}

/// Whether the request needs no RBAC grant (a review of oneself).
pub(crate) fn needs_no_grant(def: &ResourceDef) -> bool {
    is_self_review(def)
}

/// Whether `who` may do what `spec`'s attributes describe, and why, as the authorizer answers.
fn access(plane: &Plane, rbac_on: bool, who: &Subject, spec: &Value) -> (bool, String) {
    if !rbac_on || who.privileged {
        return (true, String::new());
    }
    let st = plane.read();
    if let Some(ra) = spec.get("resourceAttributes") {
        let s = |k: &str| ra.get(k).and_then(Value::as_str).unwrap_or("");
        let opt = |k: &str| Some(s(k)).filter(|v| !v.is_empty());
        let attrs = rbac::Attributes {
            user: &who.user,
            groups: &who.groups,
            verb: s("verb"),
            group: s("group"),
            resource: s("resource"),
            subresource: opt("subresource"),
            namespace: opt("namespace"),
            name: opt("name"),
        };
        let basic = basic_user_rules()
            .iter()
            .any(|r| attrs.verb == "create" && rule_names(r, attrs.group, attrs.resource));
        if basic {
            return (
                true,
                "RBAC: allowed by ClusterRoleBinding \"system:basic-user\" of ClusterRole \"system:basic-user\" to Group \"system:authenticated\"".into(),
            );
        }
        return match rbac::allowed(&st.store, &attrs) {
            Some(why) => (true, why),
            None => (false, String::new()),
        };
    }
    let nr = spec
        .get("nonResourceAttributes")
        .cloned()
        .unwrap_or(Value::Null);
    let s = |k: &str| nr.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    match rbac::allowed_path(&st.store, &who.user, &who.groups, &s("verb"), &s("path")) {
        Some(why) => (true, why),
        None => (false, String::new()),
    }
}

fn rule_names(rule: &Value, group: &str, resource: &str) -> bool {
    let has = |k: &str, x: &str| {
        rule.get(k)
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|v| v == x))
    };
    has("apiGroups", group) && has("resources", resource)
}

fn invalid(def: &ResourceDef, errs: &[FieldError]) -> ApiError {
    ApiError::invalid(&def.group, &def.kind, "", errs)
}

/// Exactly one of `resourceAttributes` and `nonResourceAttributes`, as kube-apiserver 1.37
/// words a review with neither or both: the whole spec is invalid, its value the internal
/// non-resource attributes (nil, or the Go struct's fields by their Go names), and the storage
/// names no kind (the decoded object's TypeMeta is empty).
fn check_attributes(def: &ResourceDef, spec: &Value) -> Result<(), ApiError> {
    let r = spec.get("resourceAttributes").is_some_and(|v| !v.is_null());
    let n = spec.get("nonResourceAttributes").filter(|v| !v.is_null());
    if r != n.is_some() {
        return Ok(());
    }
    let value = match n {
        None => Value::Null,
        Some(n) => {
            let s = |k: &str| n.get(k).and_then(Value::as_str).unwrap_or("");
            json!({"Path": s("path"), "Verb": s("verb")})
        }
    };
    Err(ApiError::invalid(
        &def.group,
        "",
        "",
        &[FieldError::invalid(
            "spec",
            &value,
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )],
    ))
}

/// Who `spec.token` is, as the apiserver's TokenReview storage answers: a 400 for no token; for a
/// token no identity has, `authenticated` left out (false), an empty `user` (as Go encodes the
/// struct) and the authenticator's error. localplane's tokens are static, and the apiserver's static tokens are audience-agnostic:
/// they hold for the API audiences, so a review naming only other audiences is not authenticated.
fn token_review(shared: &Shared, spec: &Value) -> Result<Value, ApiError> {
    let token = spec.get("token").and_then(Value::as_str).unwrap_or("");
    if token.is_empty() {
        return Err(ApiError::bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    let asked: Vec<&str> = spec
        .get("audiences")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let audiences: Vec<&str> = if asked.is_empty() {
        API_AUDIENCES.to_vec()
    } else {
        asked
            .into_iter()
            .filter(|a| API_AUDIENCES.contains(a))
            .collect()
    };
    let identity = shared.authenticate(token).filter(|_| !audiences.is_empty());
    Ok(match identity {
        // The token authenticator's own words for a token it does not hold (or not for these
        // audiences).
        None => json!({"user": {}, "error": "invalid bearer token"}),
        Some(identity) => {
            let mut user =
                json!({"username": identity.user_name(), "groups": identity.all_groups()});
            if let Some(uid) = &identity.uid {
                user["uid"] = json!(uid);
            }
            json!({"authenticated": true, "user": user, "audiences": audiences})
        }
    })
}

/// Answers a review created as `who` on `plane`: the request, with its status.
pub(crate) fn answer(
    def: &ResourceDef,
    plane: &Plane,
    rbac_on: bool,
    who: &Subject,
    shared: &Shared,
    mut review: Value,
) -> Result<Value, ApiError> {
    let spec = review.get("spec").cloned().unwrap_or_else(|| json!({}));
    let status = match def.builtin {
        Some(BuiltinKind::TokenReview) => token_review(shared, &spec)?,
        Some(BuiltinKind::SelfSubjectAccessReview) => {
            check_attributes(def, &spec)?;
            let (allowed, reason) = access(plane, rbac_on, who, &spec);
            status(allowed, reason)
        }
        Some(BuiltinKind::SubjectAccessReview) => {
            check_attributes(def, &spec)?;
            let s = |k: &str| {
                spec.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            let groups: Vec<String> = spec
                .get("groups")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|g| g.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            if s("user").is_empty() && groups.is_empty() {
                return Err(invalid(
                    def,
                    &[FieldError::invalid(
                        "spec.user",
                        &json!(""),
                        "at least one of user or group must be specified",
                    )],
                ));
            }
            let asked = Subject {
                privileged: groups.iter().any(|g| g == "system:masters"),
                user: s("user"),
                groups,
                uid: s("uid"),
                extra: Default::default(),
            };
            let (allowed, reason) = access(plane, rbac_on, &asked, &spec);
            status(allowed, reason)
        }
        Some(BuiltinKind::SelfSubjectRulesReview) => {
            let ns = spec.get("namespace").and_then(Value::as_str).unwrap_or("");
            let (mut resource, non_resource) = if !rbac_on || who.privileged {
                (
                    vec![json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]})],
                    vec![json!({"verbs": ["*"], "nonResourceURLs": ["*"]})],
                )
            } else {
                rbac::rules_for(&plane.read().store, &who.user, &who.groups, ns)
            };
            resource.extend(basic_user_rules());
            json!({"resourceRules": resource, "nonResourceRules": non_resource, "incomplete": false})
        }
        Some(BuiltinKind::SelfSubjectReview) => {
            let mut user = json!({"username": who.user, "groups": who.groups});
            if !who.uid.is_empty() {
                user["uid"] = json!(who.uid);
            }
            if !who.extra.is_empty() {
                user["extra"] = json!(who.extra);
            }
            json!({"userInfo": user})
        }
        _ => return Err(ApiError::method_not_allowed("not a review")),
    };
    let o = review
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("the body of the request must be a JSON object"))?;
    o.insert("apiVersion".into(), json!(def.api_version("v1")));
    o.insert("kind".into(), json!(def.kind));
    // What each review's REST storage answers, as the real apiserver showed: a rules review is a
    // new object holding only its status; a self review a new object stamped now; an access
    // review the request as decoded (empty attributes omitted) with its status.
    match def.builtin {
        Some(BuiltinKind::SelfSubjectRulesReview) => {
            o.retain(|k, _| k == "apiVersion" || k == "kind");
            o.insert("metadata".into(), json!({}));
            o.insert("spec".into(), json!({}));
        }
        Some(BuiltinKind::SelfSubjectReview) => {
            o.insert(
                "metadata".into(),
                json!({"creationTimestamp": crate::meta::now_rfc3339()}),
            );
        }
        _ => {
            let meta = o.entry("metadata").or_insert_with(|| json!({}));
            if let Some(m) = meta.as_object_mut() {
                m.remove("creationTimestamp");
            }
            for attributes in ["resourceAttributes", "nonResourceAttributes"] {
                if let Some(a) = o
                    .get_mut("spec")
                    .and_then(|s| s.get_mut(attributes))
                    .and_then(Value::as_object_mut)
                {
                    a.retain(|_, v| v.as_str() != Some(""));
                }
            }
        }
    }
    o.insert("status".into(), status);
    Ok(review)
}

fn status(allowed: bool, reason: String) -> Value {
    let mut s = json!({"allowed": allowed});
    if !reason.is_empty() {
        s["reason"] = json!(reason);
    }
    s
}
