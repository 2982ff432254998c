//! Legacy (unaggregated) discovery: `/api`, `/api/v1`, `/apis`, `/apis/{g}`, `/apis/{g}/{v}`.
//! kubectl asks for aggregated discovery first and falls back to these when the response is
//! plain `application/json`. (No `/version`: nothing here asks localplane for it.)

use serde_json::{Value, json};

use crate::resources::Registry;

pub fn core_versions(server: &str) -> Value {
    json!({
        "kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server}],
    })
}

fn group_json(name: &str, versions: &[String], preferred: &str) -> Value {
    let gv = |v: &str| json!({"groupVersion": format!("{name}/{v}"), "version": v});
    json!({
        "name": name,
        "versions": versions.iter().map(|v| gv(v)).collect::<Vec<_>>(),
        "preferredVersion": gv(preferred),
    })
}

fn group_versions(reg: &Registry, group: &str) -> Option<(Vec<String>, String)> {
    let groups = reg.groups();
    let defs = groups.get(group)?;
    let mut versions: Vec<String> = Vec::new();
    for d in defs {
        for v in &d.versions {
            if !versions.contains(&v.name) {
                versions.push(v.name.clone());
            }
        }
    }
    let preferred = defs[0].preferred().name.clone();
    Some((versions, preferred))
}

pub fn group_list(reg: &Registry) -> Value {
    let groups: Vec<Value> = reg
        .groups()
        .keys()
        .filter(|g| !g.is_empty())
        .filter_map(|g| group_versions(reg, g).map(|(vs, p)| group_json(g, &vs, &p)))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn group(reg: &Registry, group: &str) -> Option<Value> {
    let (vs, p) = group_versions(reg, group)?;
    let mut g = group_json(group, &vs, &p);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Some(g)
}

pub fn resource_list(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for d in reg.all().filter(|d| d.group == group) {
        let Some(v) = d.version(version) else {
            continue;
        };
        let mut r = json!({
            "name": d.plural, "singularName": d.singular, "namespaced": d.namespaced,
            "kind": d.kind, "verbs": d.verbs(),
        });
        if !d.short_names.is_empty() {
            r["shortNames"] = json!(d.short_names);
        }
        if !d.categories.is_empty() {
            r["categories"] = json!(d.categories);
        }
        resources.push(r);
        if v.status_subresource {
            resources.push(json!({
                "name": format!("{}/status", d.plural), "singularName": "", "namespaced": d.namespaced,
                "kind": d.kind, "verbs": ["get", "patch", "update"],
            }));
        }
    }
    if resources.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}
