//! Who a request acts as: the authenticated identity, or whom it impersonates (`Impersonate-User`,
//! `Impersonate-Group`, `Impersonate-Uid`, `Impersonate-Extra-*`: kubectl's `--as`,
//! `--as-group`, `--as-uid`), each of which the real caller must be allowed to `impersonate`,
//! checked as the apiserver's impersonation filter checks them.

use std::collections::BTreeMap;

use http::HeaderMap;

use crate::config::Identity;
use crate::error::ApiError;
use crate::plane::Plane;
use crate::rbac;

/// The user a request acts as, after impersonation.
#[derive(Debug, Clone)]
pub(crate) struct Subject {
    pub user: String,
    pub groups: Vec<String>,
    pub uid: String,
    pub extra: BTreeMap<String, Vec<String>>,
    /// In `system:masters` (or an admin identity acting as itself): RBAC does not apply.
    pub privileged: bool,
}

impl Subject {
    pub fn of(identity: &Identity) -> Subject {
        Subject {
            user: identity.user_name().to_string(),
            groups: identity.all_groups(),
            uid: identity.uid.clone().unwrap_or_default(),
            extra: BTreeMap::new(),
            privileged: identity.admin,
        }
    }
}

const MASTERS: &str = "system:masters";

/// One thing the caller asks to impersonate, as the apiserver's filter lists them.
struct Request {
    /// `ServiceAccount`, `User`, `Group`, `UserExtra` or `UID`.
    kind: &'static str,
    namespace: String,
    name: String,
    /// For `UserExtra`: the extra's key (the authorizer's subresource).
    key: String,
}

impl Request {
    /// Go's `%v` of the `v1.ObjectReference` the apiserver builds for it.
    fn go_value(&self) -> String {
        let api_version = match self.kind {
            "UserExtra" | "UID" => "authentication.k8s.io/v1",
            _ => "",
        };
        format!(
            "{{{} {} {}  {}  {}}}",
            self.kind, self.namespace, self.name, api_version, self.key
        )
    }

    /// The resource, group, namespace and subresource the `impersonate` verb is checked on.
    fn attributes(&self) -> (&'static str, &'static str, Option<&str>, Option<&str>) {
        match self.kind {
            "ServiceAccount" => ("serviceaccounts", "", Some(self.namespace.as_str()), None),
            "User" => ("users", "", None, None),
            "Group" => ("groups", "", None, None),
            "UserExtra" => (
                "userextras",
                "authentication.k8s.io",
                None,
                Some(self.key.as_str()),
            ),
            _ => ("uids", "authentication.k8s.io", None, None),
        }
    }
}

fn all(headers: &HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::to_string)
        .collect()
}

/// What the headers ask to impersonate, in the order the apiserver checks it.
fn requests(headers: &HeaderMap) -> Result<Vec<Request>, ApiError> {
    let mut out = vec![];
    let user = all(headers, "impersonate-user").into_iter().next();
    if let Some(u) = &user {
        let sa = u
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.split_once(':'))
            .filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains(':'));
        out.push(match sa {
            Some((ns, name)) => Request {
                kind: "ServiceAccount",
                namespace: ns.into(),
                name: name.into(),
                key: String::new(),
            },
            None => Request {
                kind: "User",
                namespace: String::new(),
                name: u.clone(),
                key: String::new(),
            },
        });
    }
    let mut groups_or_more = false;
    for g in all(headers, "impersonate-group") {
        groups_or_more = true;
        out.push(Request {
            kind: "Group",
            namespace: String::new(),
            name: g,
            key: String::new(),
        });
    }
    for (name, value) in headers {
        let Some(key) = name.as_str().strip_prefix("impersonate-extra-") else {
            continue;
        };
        groups_or_more = true;
        let key = percent_encoding::percent_decode_str(key)
            .decode_utf8_lossy()
            .into_owned();
        out.push(Request {
            kind: "UserExtra",
            namespace: String::new(),
            name: value.to_str().unwrap_or("").to_string(),
            key,
        });
    }
    if let Some(uid) = all(headers, "impersonate-uid").into_iter().next() {
        groups_or_more = true;
        out.push(Request {
            kind: "UID",
            namespace: String::new(),
            name: uid,
            key: String::new(),
        });
    }
    if groups_or_more && user.is_none() {
        let listed: Vec<String> = out.iter().map(Request::go_value).collect();
        return Err(ApiError::bad_request(format!(
            "requested [{}] without impersonating a user",
            listed.join(" ")
        )));
    }
    Ok(out)
}

/// What the request itself does, as the authorizer sees it. Constrained impersonation asks
/// whether the caller may do that (`impersonate-on:<mode>:<verb>`) before anything else.
pub(crate) enum Target<'a> {
    Resource {
        verb: &'static str,
        group: &'a str,
        resource: &'a str,
        subresource: Option<&'a str>,
        namespace: Option<&'a str>,
        name: Option<&'a str>,
    },
    /// A non-resource path (`/api`, `/version`), with the method as its verb.
    Path { verb: String, path: String },
}

/// The node a user name names (`system:node:<a DNS subdomain>`), as the apiserver tells a node.
fn node_name(user: &str) -> Option<&str> {
    let name = user.strip_prefix("system:node:")?;
    let label = |l: &str| {
        !l.is_empty()
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    (name.len() <= 253 && name.split('.').all(label)).then_some(name)
}

/// The constrained impersonation mode (KEP 5284) that applies to what the headers ask, tried
/// before the legacy `impersonate` checks: a node or a ServiceAccount asked for by name alone,
/// or any other user (with groups, extras, a uid or not). A node or ServiceAccount asked for
/// with more than its name has none. (`associated-node`, a ServiceAccount acting as its own
/// pod's node, needs an identity with extras; localplane's carry none.)
fn constrained_mode(asked: &[Request]) -> Option<&'static str> {
    let alone = asked.len() == 1;
    match asked.first() {
        Some(r) if r.kind == "ServiceAccount" => alone.then_some("serviceaccount"),
        Some(r) if r.kind == "User" && node_name(&r.name).is_some() => {
            alone.then_some("arbitrary-node")
        }
        Some(r) if r.kind == "User" => Some("user-info"),
        _ => None,
    }
}

/// Who asks, whether RBAC judges them, and where the grants are.
struct Judge<'a> {
    real: &'a Subject,
    plane: &'a Plane,
    checks: bool,
}

impl Judge<'_> {
    fn allows(&self, attrs: &rbac::Attributes<'_>) -> bool {
        !self.checks || rbac::authorize(&self.plane.read().store, attrs)
    }

    /// May the caller do what the request does while impersonating in `mode`?
    fn may_act_on(&self, mode: &str, target: &Target<'_>) -> Result<(), ApiError> {
        match target {
            Target::Resource {
                verb,
                group,
                resource,
                subresource,
                namespace,
                name,
            } => {
                let verb = format!("impersonate-on:{mode}:{verb}");
                let attrs = rbac::Attributes {
                    user: &self.real.user,
                    groups: &self.real.groups,
                    verb: &verb,
                    group,
                    resource,
                    subresource: *subresource,
                    namespace: *namespace,
                    name: *name,
                };
                if self.allows(&attrs) {
                    return Ok(());
                }
                Err(ApiError::forbidden(
                    group,
                    resource,
                    name.unwrap_or(""),
                    &rbac::denial(&attrs),
                ))
            }
            Target::Path { verb, path } => {
                let verb = format!("impersonate-on:{mode}:{verb}");
                let allowed = !self.checks
                    || rbac::allowed_path(
                        &self.plane.read().store,
                        &self.real.user,
                        &self.real.groups,
                        &verb,
                        path,
                    )
                    .is_some();
                if allowed {
                    return Ok(());
                }
                Err(ApiError::forbidden(
                    "",
                    "",
                    "",
                    &format!("User \"{}\" cannot {verb} path \"{path}\"", self.real.user),
                ))
            }
        }
    }

    /// May the caller impersonate each part asked for, with `verb` (`impersonate`, or
    /// `impersonate:<mode>` whose users, groups, ServiceAccounts and nodes are in
    /// `authentication.k8s.io`)? In the apiserver's order: the user, its uid, the groups, the
    /// extras.
    fn may_impersonate(&self, asked: &[Request], verb: &str) -> Result<(), ApiError> {
        let constrained = verb != "impersonate";
        let rank = |r: &&Request| match r.kind {
            "ServiceAccount" | "User" => 0,
            "UID" => 1,
            "Group" => 2,
            _ => 3,
        };
        let mut ordered: Vec<&Request> = asked.iter().collect();
        ordered.sort_by_key(rank);
        for r in ordered {
            let (mut resource, mut group, namespace, subresource) = r.attributes();
            let mut name = r.name.as_str();
            if constrained && matches!(r.kind, "ServiceAccount" | "User" | "Group") {
                group = "authentication.k8s.io";
            }
            if constrained
                && r.kind == "User"
                && let Some(node) = node_name(&r.name)
            {
                (resource, name) = ("nodes", node);
            }
            let attrs = rbac::Attributes {
                user: &self.real.user,
                groups: &self.real.groups,
                verb,
                group,
                resource,
                subresource,
                namespace,
                name: Some(name),
            };
            // Sanity checks constrained impersonation adds, which legacy keeps out for
            // compatibility: refused whatever the grants.
            let refused = match (constrained, r.kind, name) {
                (true, "Group", "") => Some("impersonating the empty string group is not allowed"),
                (true, "Group", MASTERS) => {
                    Some("impersonating the system:masters group is not allowed")
                }
                _ => None,
            };
            if let Some(why) = refused {
                return Err(ApiError::forbidden(
                    group,
                    resource,
                    name,
                    &format!("{}: {why}", rbac::denial(&attrs)),
                ));
            }
            if !self.allows(&attrs) {
                return Err(ApiError::forbidden(
                    group,
                    resource,
                    name,
                    &rbac::denial(&attrs),
                ));
            }
        }
        Ok(())
    }
}

/// Whom the request acts as. Without impersonation headers, the identity itself; with them,
/// the impersonated user, once the identity may impersonate it: first in the constrained mode
/// that applies (may it do this request as someone else, then may it impersonate each part
/// with `impersonate:<mode>`), then with the legacy `impersonate` verb on each part. When
/// both refuse, the first refusal is the answer, as kube-apiserver 1.37 answers. RBAC off
/// allows everything, as an allow-all authorizer does; so does `system:masters`, which still
/// meets constrained impersonation's own refusals (and then the legacy mode).
pub(crate) fn subject(
    identity: &Identity,
    headers: &HeaderMap,
    plane: &Plane,
    rbac_on: bool,
    target: &Target<'_>,
) -> Result<Subject, ApiError> {
    let asked = requests(headers)?;
    let real = Subject::of(identity);
    if asked.is_empty() {
        return Ok(real);
    }
    let judge = Judge {
        real: &real,
        plane,
        checks: rbac_on && !real.privileged,
    };
    let mut first_refusal = None;
    if let Some(mode) = constrained_mode(&asked) {
        let verdict = judge
            .may_act_on(mode, target)
            .and_then(|()| judge.may_impersonate(&asked, &format!("impersonate:{mode}")));
        match verdict {
            Ok(()) => return Ok(impersonated(&asked, mode == "arbitrary-node")),
            Err(e) => first_refusal = Some(e),
        }
    }
    match judge.may_impersonate(&asked, "impersonate") {
        Ok(()) => Ok(impersonated(&asked, false)),
        Err(e) => Err(first_refusal.unwrap_or(e)),
    }
}

/// The user the headers describe. A node impersonated in its constrained mode is always in
/// `system:nodes` alone; a ServiceAccount without groups asked for is in its own.
fn impersonated(asked: &[Request], as_node: bool) -> Subject {
    let groups_given = asked.iter().any(|r| r.kind == "Group");
    let mut who = Subject {
        user: String::new(),
        groups: vec![],
        uid: String::new(),
        extra: BTreeMap::new(),
        privileged: false,
    };
    for r in asked {
        match r.kind {
            "ServiceAccount" => {
                who.user = format!("system:serviceaccount:{}:{}", r.namespace, r.name);
                if !groups_given {
                    who.groups = vec![
                        "system:serviceaccounts".into(),
                        format!("system:serviceaccounts:{}", r.namespace),
                    ];
                }
            }
            "User" => who.user = r.name.clone(),
            "Group" => who.groups.push(r.name.clone()),
            "UserExtra" => who
                .extra
                .entry(r.key.clone())
                .or_default()
                .push(r.name.clone()),
            _ => who.uid = r.name.clone(),
        }
    }
    if as_node {
        who.groups = vec!["system:nodes".into()];
    }
    if who.user == "system:anonymous" {
        if !who.groups.iter().any(|g| g == "system:unauthenticated") {
            who.groups.push("system:unauthenticated".into());
        }
    } else if !who
        .groups
        .iter()
        .any(|g| g == "system:authenticated" || g == "system:unauthenticated")
    {
        who.groups.push("system:authenticated".into());
    }
    who.privileged = who.groups.iter().any(|g| g == MASTERS);
    who
}
