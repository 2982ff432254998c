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
            uid: String::new(),
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

/// Whom the request acts as. Without impersonation headers, the identity itself; with them,
/// the impersonated user, once the identity is allowed to impersonate each part (always when
/// RBAC is off, as with an allow-all authorizer; always for an admin).
pub(crate) fn subject(
    identity: &Identity,
    headers: &HeaderMap,
    plane: &Plane,
    rbac_on: bool,
) -> Result<Subject, ApiError> {
    let asked = requests(headers)?;
    let real = Subject::of(identity);
    if asked.is_empty() {
        return Ok(real);
    }
    let groups_given = asked.iter().any(|r| r.kind == "Group");
    let mut who = Subject {
        user: String::new(),
        groups: vec![],
        uid: String::new(),
        extra: BTreeMap::new(),
        privileged: false,
    };
    for r in &asked {
        if rbac_on && !real.privileged {
            let (resource, group, namespace, subresource) = r.attributes();
            let attrs = rbac::Attributes {
                user: &real.user,
                groups: &real.groups,
                verb: "impersonate",
                group,
                resource,
                subresource,
                namespace,
                name: Some(&r.name),
            };
            if !rbac::authorize(&plane.read().store, &attrs) {
                return Err(ApiError::forbidden(
                    group,
                    resource,
                    &r.name,
                    &rbac::denial(&attrs),
                ));
            }
        }
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
    Ok(who)
}
