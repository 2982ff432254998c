//! The kinds an install applies beside RBAC (Deployment, Service, Secret, ConfigMap,
//! ServiceAccount): the defaults the apiserver fills in that `kubectl get` shows, and the checks
//! it makes on what an install sends. No controller runs: a Deployment never gets pods, so its
//! status stays empty, as on an apiserver whose controller manager is down.

use std::sync::atomic::{AtomicU32, Ordering};

use base64::Engine;
use serde_json::{Map, Value, json};

use crate::error::{FieldError, FieldErrorKind};

/// A label map as kube-apiserver 1.37 quotes an invalid value: as JSON, `null` when unset.
fn labels_value(m: Option<&Map<String, Value>>) -> String {
    m.map_or_else(|| "null".into(), |m| Value::Object(m.clone()).to_string())
}

/// A container's defaults: resources, termination message, and the pull policy its image's tag
/// implies (`Always` for `:latest` or no tag, else `IfNotPresent`).
fn default_container(c: &mut Map<String, Value>) {
    c.entry("resources").or_insert(json!({}));
    c.entry("terminationMessagePath")
        .or_insert(json!("/dev/termination-log"));
    c.entry("terminationMessagePolicy").or_insert(json!("File"));
    if let Some(image) = c.get("image").and_then(Value::as_str) {
        let name = image.rsplit('/').next().unwrap_or(image);
        let latest =
            !image.contains('@') && name.split_once(':').is_none_or(|(_, t)| t == "latest");
        let policy = if latest { "Always" } else { "IfNotPresent" };
        c.entry("imagePullPolicy").or_insert(json!(policy));
    }
    let ports = c.get_mut("ports").and_then(Value::as_array_mut);
    for p in ports.into_iter().flatten().filter_map(Value::as_object_mut) {
        p.entry("protocol").or_insert(json!("TCP"));
    }
}

/// Whether a label selector (`matchLabels`, `matchExpressions`) selects these labels.
fn selects(selector: &Value, labels: Option<&Map<String, Value>>) -> bool {
    let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    let exact = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .is_none_or(|m| m.iter().all(|(k, v)| get(k) == v.as_str()));
    let exprs = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .is_none_or(|es| {
            es.iter().all(|e| {
                let key = e.get("key").and_then(Value::as_str).unwrap_or("");
                let values: Vec<&str> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                match e.get("operator").and_then(Value::as_str).unwrap_or("") {
                    "In" => get(key).is_some_and(|v| values.contains(&v)),
                    "NotIn" => get(key).is_none_or(|v| !values.contains(&v)),
                    "Exists" => get(key).is_some(),
                    "DoesNotExist" => get(key).is_none(),
                    _ => false,
                }
            })
        });
    exact && exprs
}

/// The Deployment defaults `kubectl get` and `describe` show.
pub fn default_deployment(d: &mut Value) {
    // No controller writes a status, so it is the empty one the create gave it.
    if let Some(o) = d.as_object_mut() {
        o.entry("status").or_insert(json!({}));
    }
    let Some(spec) = d.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    spec.entry("replicas").or_insert(json!(1));
    spec.entry("revisionHistoryLimit").or_insert(json!(10));
    spec.entry("progressDeadlineSeconds").or_insert(json!(600));
    spec.entry("strategy").or_insert(json!({
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"},
    }));
    // An EnvVar's `value` is `omitempty`: `value: ""` is not stored (so kubectl's client-side
    // apply of a manifest holding one patches it again on every apply, as on the real server).
    let Some(pod) = spec
        .get_mut("template")
        .and_then(|t| t.get_mut("spec"))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    // The pod defaults the apiserver fills in (and records as the creator's fields).
    pod.entry("restartPolicy").or_insert(json!("Always"));
    pod.entry("terminationGracePeriodSeconds")
        .or_insert(json!(30));
    pod.entry("dnsPolicy").or_insert(json!("ClusterFirst"));
    pod.entry("securityContext").or_insert(json!({}));
    pod.entry("schedulerName")
        .or_insert(json!("default-scheduler"));
    for list in ["initContainers", "containers"] {
        let containers = pod.get_mut(list).and_then(Value::as_array_mut);
        for c in containers.into_iter().flatten() {
            if let Some(c) = c.as_object_mut() {
                default_container(c);
            }
            let env = c.get_mut("env").and_then(Value::as_array_mut);
            for e in env.into_iter().flatten().filter_map(Value::as_object_mut) {
                if e.get("value").and_then(Value::as_str) == Some("") {
                    e.remove("value");
                }
            }
        }
    }
}

pub fn validate_deployment(d: &Value) -> Vec<FieldError> {
    let mut errs = vec![];
    let Some(spec) = d.get("spec") else {
        return errs;
    };
    if let Some(r) = spec.get("replicas").and_then(Value::as_i64)
        && r < 0
    {
        errs.push(FieldError::invalid(
            "spec.replicas",
            &json!(r),
            "must be greater than or equal to 0",
        ));
    }
    let labels = spec
        .pointer("/template/metadata/labels")
        .and_then(Value::as_object);
    let mismatch = || FieldError {
        kind: FieldErrorKind::Invalid,
        field: "spec.template.metadata.labels".into(),
        value: Some(labels_value(labels)),
        detail: "`selector` does not match template `labels`".into(),
    };
    match spec.get("selector") {
        // No selector selects nothing, so no template matches it either.
        None => {
            errs.push(FieldError::required("spec.selector", ""));
            errs.push(mismatch());
        }
        Some(selector) => {
            let empty = selector
                .get("matchLabels")
                .and_then(Value::as_object)
                .is_none_or(|m| m.is_empty())
                && selector
                    .get("matchExpressions")
                    .and_then(Value::as_array)
                    .is_none_or(|a| a.is_empty());
            if empty {
                errs.push(FieldError::invalid(
                    "spec.selector",
                    &json!("{}"),
                    "empty selector is invalid for deployment",
                ));
            } else if !selects(selector, labels) {
                errs.push(mismatch());
            }
        }
    }
    let containers = spec
        .pointer("/template/spec/containers")
        .and_then(Value::as_array)
        .filter(|c| !c.is_empty());
    let Some(containers) = containers else {
        errs.push(FieldError::required("spec.template.spec.containers", ""));
        return errs;
    };
    for (i, c) in containers.iter().enumerate() {
        for field in ["name", "image"] {
            if c.get(field)
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
            {
                errs.push(FieldError::required(
                    format!("spec.template.spec.containers[{i}].{field}"),
                    "",
                ));
            }
        }
    }
    errs
}

/// The next cluster IP handed out (no service network exists; the address only has to look
/// like one, and differ between Services).
static NEXT_CLUSTER_IP: AtomicU32 = AtomicU32::new(1);

fn next_cluster_ip() -> String {
    let n = NEXT_CLUSTER_IP.fetch_add(1, Ordering::Relaxed);
    format!("10.96.{}.{}", (n >> 8) & 0xff, n & 0xff)
}

/// The Service defaults: type, session affinity, port protocols and target ports, and a cluster
/// IP for the types that get one (kept across updates).
pub fn default_service(s: &mut Value, old: Option<&Value>) {
    let Some(spec) = s.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    spec.entry("type").or_insert(json!("ClusterIP"));
    spec.entry("sessionAffinity").or_insert(json!("None"));
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            p.entry("protocol").or_insert(json!("TCP"));
            if let Some(port) = p.get("port").cloned() {
                p.entry("targetPort").or_insert(port);
            }
        }
    }
    if spec.get("type") != Some(&json!("ExternalName")) && !spec.contains_key("clusterIP") {
        let ip = old
            .and_then(|o| o.pointer("/spec/clusterIP"))
            .cloned()
            .unwrap_or_else(|| json!(next_cluster_ip()));
        spec.insert("clusterIPs".into(), json!([ip.clone()]));
        spec.insert("clusterIP".into(), ip);
        spec.entry("ipFamilies").or_insert(json!(["IPv4"]));
        spec.entry("ipFamilyPolicy").or_insert(json!("SingleStack"));
        spec.entry("internalTrafficPolicy")
            .or_insert(json!("Cluster"));
    }
}

const SERVICE_TYPES: &[&str] = &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];

pub fn validate_service(s: &Value) -> Vec<FieldError> {
    let mut errs = vec![];
    let Some(spec) = s.get("spec") else {
        return errs;
    };
    let ty = spec.get("type").and_then(Value::as_str).unwrap_or("");
    let ports = spec.get("ports").and_then(Value::as_array);
    let headless = spec.get("clusterIP").and_then(Value::as_str) == Some("None");
    if ports.is_none_or(|p| p.is_empty()) && ty != "ExternalName" && !headless {
        errs.push(FieldError::required("spec.ports", ""));
    }
    for (i, p) in ports.into_iter().flatten().enumerate() {
        if let Some(n) = p.get("port").and_then(Value::as_i64)
            && !(1..=65535).contains(&n)
        {
            errs.push(FieldError::invalid(
                format!("spec.ports[{i}].port"),
                &json!(n),
                "must be between 1 and 65535, inclusive",
            ));
        }
    }
    // The type is checked after the ports, as the apiserver orders its causes.
    if !SERVICE_TYPES.contains(&ty) {
        errs.push(FieldError {
            kind: FieldErrorKind::NotSupported,
            field: "spec.type".into(),
            value: Some(format!("{ty:?}")),
            detail:
                "supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\""
                    .into(),
        });
    }
    errs
}

/// A Secret as stored: `stringData` merged into `data` (base64), and the default type.
pub fn secret_to_storage(mut s: Value) -> Value {
    let Some(o) = s.as_object_mut() else {
        return s;
    };
    if let Some(Value::Object(strings)) = o.remove("stringData") {
        let data = o.entry("data").or_insert_with(|| json!({}));
        if let Some(d) = data.as_object_mut() {
            for (k, v) in strings {
                let text = v.as_str().unwrap_or("").as_bytes().to_vec();
                d.insert(
                    k,
                    json!(base64::engine::general_purpose::STANDARD.encode(text)),
                );
            }
        }
    }
    if o.get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        o.insert("type".into(), json!("Opaque"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_selector_must_select_the_template() {
        let d = json!({"spec": {"selector": {"matchLabels": {"app": "a"}},
            "template": {"metadata": {"labels": {"app": "b"}}, "spec": {"containers": [{"name": "c"}]}}}});
        let msgs: Vec<String> = validate_deployment(&d)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            msgs,
            [
                r#"spec.template.metadata.labels: Invalid value: {"app":"b"}: `selector` does not match template `labels`"#,
                "spec.template.spec.containers[0].image: Required value",
            ]
        );
    }

    #[test]
    fn services_get_defaults_and_need_ports() {
        let mut s = json!({"spec": {"ports": [{"port": 8080}]}});
        default_service(&mut s, None);
        assert_eq!(s["spec"]["type"], "ClusterIP");
        assert_eq!(s["spec"]["ports"][0]["targetPort"], 8080);
        assert!(
            s["spec"]["clusterIP"]
                .as_str()
                .unwrap()
                .starts_with("10.96.")
        );
        assert!(validate_service(&s).is_empty());
        let mut bare = json!({"spec": {"type": "Bogus"}});
        default_service(&mut bare, None);
        let msgs: Vec<String> = validate_service(&bare)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(msgs.len(), 2, "{msgs:?}");
        assert_eq!(msgs[0], "spec.ports: Required value");
    }

    #[test]
    fn string_data_is_stored_as_data() {
        let s = secret_to_storage(json!({"stringData": {"k": "hi"}}));
        assert_eq!(s, json!({"data": {"k": "aGk="}, "type": "Opaque"}));
    }
}
