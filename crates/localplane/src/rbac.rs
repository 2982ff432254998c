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

fn subject_matches(binding: &Value, a: &Attributes<'_>) -> bool {
    let Some(subjects) = binding.get("subjects").and_then(Value::as_array) else {
        return false;
    };
    subjects.iter().any(|s| {
        let kind = s.get("kind").and_then(Value::as_str).unwrap_or("");
        let name = s.get("name").and_then(Value::as_str).unwrap_or("");
        match kind {
            "User" => name == a.user,
            "Group" => a.groups.iter().any(|g| g == name),
            "ServiceAccount" => {
                let ns = s.get("namespace").and_then(Value::as_str).unwrap_or("");
                a.user == format!("system:serviceaccount:{ns}:{name}")
            }
            _ => false,
        }
    })
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

fn allows(role: Option<&Value>, a: &Attributes<'_>) -> bool {
    role.and_then(|r| r.get("rules"))
        .and_then(Value::as_array)
        .is_some_and(|rules| rules.iter().any(|r| rule_allows(r, a)))
}

/// Whether a binding in `store` grants the request.
pub(crate) fn authorize(store: &Store, a: &Attributes<'_>) -> bool {
    let crb = ResourceKey::new("rbac.authorization.k8s.io", "clusterrolebindings");
    for (_, b) in store.range(&crb, None, None) {
        if subject_matches(b, a)
            && let Some(rr) = b.get("roleRef")
            && allows(role_rules(store, rr, ""), a)
        {
            return true;
        }
    }
    if let Some(ns) = a.namespace {
        let rb = ResourceKey::new("rbac.authorization.k8s.io", "rolebindings");
        for (_, b) in store.range(&rb, Some(ns), None) {
            if subject_matches(b, a)
                && let Some(rr) = b.get("roleRef")
                && allows(role_rules(store, rr, ns), a)
            {
                return true;
            }
        }
    }
    false
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
