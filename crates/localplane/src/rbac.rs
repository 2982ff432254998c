//! RBAC authorization from the ClusterRole/ClusterRoleBinding/Role/RoleBinding objects a plane
//! stores, evaluated the way the apiserver's RBAC authorizer does (no aggregation).

use serde_json::Value;

use crate::hooks::ResourceKey;
use crate::store::Store;

/// What a resource request asks to do.
pub(crate) struct Attributes<'a> {
    pub user: &'a str,
    pub groups: &'a [String],
    pub verb: &'a str,
    pub group: &'a str,
    pub resource: &'a str,
    pub subresource: Option<&'a str>,
    pub namespace: Option<&'a str>,
    pub name: Option<&'a str>,
}

fn strs(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn rule_allows(rule: &Value, a: &Attributes<'_>) -> bool {
    let has = |list: &[String], x: &str| list.iter().any(|v| v == "*" || v == x);
    let verbs = strs(rule, "verbs");
    let groups = strs(rule, "apiGroups");
    let resources = strs(rule, "resources");
    let names = strs(rule, "resourceNames");
    if !has(&verbs, a.verb) || !has(&groups, a.group) {
        return false;
    }
    let resource_ok = match a.subresource {
        None => has(&resources, a.resource),
        Some(sub) => resources
            .iter()
            .any(|r| r == "*" || *r == format!("{}/{sub}", a.resource) || *r == format!("*/{sub}")),
    };
    resource_ok && (names.is_empty() || a.name.is_some_and(|n| names.iter().any(|x| x == n)))
}

fn role_rules<'a>(store: &'a Store, role_ref: &Value, ns: &str) -> Option<&'a Value> {
    let kind = role_ref.get("kind").and_then(Value::as_str)?;
    let name = role_ref.get("name").and_then(Value::as_str)?;
    let (plural, ns) = match kind {
        "ClusterRole" => ("clusterroles", ""),
        "Role" => ("roles", ns),
        _ => return None,
    };
    store
        .get(
            &ResourceKey::new("rbac.authorization.k8s.io", plural),
            ns,
            name,
        )
        .map(|v| &**v)
}

fn rules(role: Option<&Value>) -> impl Iterator<Item = &Value> {
    role.and_then(|r| r.get("rules"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// A binding that applies to the subject, with the subject entry that names it (for the reason
/// the apiserver gives) and where its role is looked up.
struct Applicable<'a> {
    binding: &'a Value,
    subject: &'a Value,
    /// The binding's namespace (`None` for a ClusterRoleBinding).
    namespace: Option<&'a str>,
}

fn subject_of<'a>(binding: &'a Value, user: &str, groups: &[String]) -> Option<&'a Value> {
    let subjects = binding.get("subjects").and_then(Value::as_array)?;
    subjects.iter().find(|s| {
        let kind = s.get("kind").and_then(Value::as_str).unwrap_or("");
        let name = s.get("name").and_then(Value::as_str).unwrap_or("");
        match kind {
            "User" => name == user,
            "Group" => groups.iter().any(|g| g == name),
            "ServiceAccount" => {
                let ns = s.get("namespace").and_then(Value::as_str).unwrap_or("");
                user == format!("system:serviceaccount:{ns}:{name}")
            }
            _ => false,
        }
    })
}

/// The bindings that apply to a user in a namespace (cluster-wide ones first).
fn applicable<'a>(
    store: &'a Store,
    user: &str,
    groups: &[String],
    namespace: Option<&'a str>,
) -> Vec<Applicable<'a>> {
    let crb = ResourceKey::new("rbac.authorization.k8s.io", "clusterrolebindings");
    let mut out: Vec<Applicable<'a>> = store
        .range(&crb, None, None)
        .filter_map(|(_, b)| {
            subject_of(b, user, groups).map(|subject| Applicable {
                binding: b,
                subject,
                namespace: None,
            })
        })
        .collect();
    if let Some(ns) = namespace {
        let rb = ResourceKey::new("rbac.authorization.k8s.io", "rolebindings");
        out.extend(store.range(&rb, Some(ns), None).filter_map(|(_, b)| {
            subject_of(b, user, groups).map(|subject| Applicable {
                binding: b,
                subject,
                namespace: Some(ns),
            })
        }));
    }
    out
}

fn text<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

/// `RBAC: allowed by ClusterRoleBinding "b" of ClusterRole "r" to User "u"`: how the RBAC
/// authorizer explains an allowed request.
fn allowed_by(a: &Applicable<'_>) -> String {
    let b = a.binding;
    let name = crate::meta::str_at(b, "/metadata/name");
    let binding = match a.namespace {
        None => format!("ClusterRoleBinding {name:?}"),
        Some(ns) => format!("RoleBinding {:?}", format!("{name}/{ns}")),
    };
    let role = b.get("roleRef").cloned().unwrap_or(Value::Null);
    let subject = match text(a.subject, "kind") {
        "ServiceAccount" => format!(
            "ServiceAccount {:?}",
            format!(
                "{}/{}",
                text(a.subject, "name"),
                text(a.subject, "namespace")
            )
        ),
        kind => format!("{kind} {:?}", text(a.subject, "name")),
    };
    format!(
        "RBAC: allowed by {binding} of {} {:?} to {subject}",
        text(&role, "kind"),
        text(&role, "name")
    )
}

fn role_of<'a>(store: &'a Store, ap: &Applicable<'_>) -> Option<&'a Value> {
    ap.binding
        .get("roleRef")
        .and_then(|rr| role_rules(store, rr, ap.namespace.unwrap_or("")))
}

/// Why a binding in `store` grants the request, or `None` if none does.
pub(crate) fn allowed(store: &Store, a: &Attributes<'_>) -> Option<String> {
    applicable(store, a.user, a.groups, a.namespace)
        .into_iter()
        .find(|ap| rules(role_of(store, ap)).any(|r| rule_allows(r, a)))
        .map(|ap| allowed_by(&ap))
}

/// Whether a binding in `store` grants the request.
pub(crate) fn authorize(store: &Store, a: &Attributes<'_>) -> bool {
    allowed(store, a).is_some()
}

/// Why a ClusterRoleBinding grants a request for a non-resource path (`/healthz`, `/api`), or
/// `None`: `nonResourceURLs` match exactly or, ending in `*`, by prefix.
pub(crate) fn allowed_path(
    store: &Store,
    user: &str,
    groups: &[String],
    verb: &str,
    path: &str,
) -> Option<String> {
    let has = |list: &[String], x: &str| list.iter().any(|v| v == "*" || v == x);
    applicable(store, user, groups, None)
        .into_iter()
        .find(|ap| {
            rules(role_of(store, ap)).any(|r| {
                has(&strs(r, "verbs"), verb)
                    && strs(r, "nonResourceURLs").iter().any(|u| {
                        u == path || u.strip_suffix('*').is_some_and(|p| path.starts_with(p))
                    })
            })
        })
        .map(|ap| allowed_by(&ap))
}

/// Every rule that applies to a user in a namespace, resource and non-resource ones apart, as a
/// SelfSubjectRulesReview lists them.
pub(crate) fn rules_for(
    store: &Store,
    user: &str,
    groups: &[String],
    namespace: &str,
) -> (Vec<Value>, Vec<Value>) {
    let mut resource = vec![];
    let mut non_resource = vec![];
    let ns = (!namespace.is_empty()).then_some(namespace);
    for ap in applicable(store, user, groups, ns) {
        for r in rules(role_of(store, &ap)) {
            let list = |k: &str| serde_json::json!(strs(r, k));
            if !strs(r, "nonResourceURLs").is_empty() {
                non_resource.push(serde_json::json!({
                    "verbs": list("verbs"), "nonResourceURLs": list("nonResourceURLs"),
                }));
            } else {
                let mut rule = serde_json::json!({
                    "verbs": list("verbs"), "apiGroups": list("apiGroups"),
                    "resources": list("resources"),
                });
                if !strs(r, "resourceNames").is_empty() {
                    rule["resourceNames"] = list("resourceNames");
                }
                resource.push(rule);
            }
        }
    }
    (resource, non_resource)
}

/// The apiserver's wording for a denial (after `<resource> "<name>" is forbidden: `).
pub(crate) fn denial(a: &Attributes<'_>) -> String {
    let resource = match a.subresource {
        Some(s) => format!("{}/{s}", a.resource),
        None => a.resource.to_string(),
    };
    let scope = match a.namespace {
        Some(ns) => format!("in the namespace \"{ns}\""),
        None => "at the cluster scope".to_string(),
    };
    format!(
        "User \"{}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
        a.user, a.verb, a.group
    )
}
