//! What structured-merge-diff and strategic merge patch need to know about a kind: which maps
//! are granular or atomic, which lists are atomic, sets or maps keyed by some fields, which
//! struct fields are declared, and how a strategic merge patch merges a field (its Go type's
//! `patchStrategy` and `patchMergeKey`). A custom resource answers from its CRD's OpenAPI schema;
//! ObjectMeta and the built-in kinds answer from the markers of their Go types, written down here
//! as the annotations the apiserver's OpenAPI carries for them (`x-kubernetes-list-type`,
//! `x-kubernetes-patch-strategy`, ...). Anything not described is "deduced": maps granular, lists
//! atomic (and, to a strategic merge patch, maps merged, lists replaced).

use std::sync::OnceLock;

use serde_json::{Map, Value, json};

use super::path::Pe;

/// How a list's items are owned.
pub enum ListRel<'s> {
    /// The list is one value.
    Atomic,
    /// Items are scalars, each owned alone (`v:` keys).
    Set,
    /// Items are objects identified by these fields (`k:` keys); the item schema gives key
    /// defaults.
    Map(Vec<&'s str>),
}

/// The type of one node of an object.
#[derive(Clone, Copy, Debug)]
pub enum Ty<'s> {
    /// An OpenAPI v3 schema node.
    Schema(&'s Value),
    /// The root of a kind: `apiVersion`, `kind` and ObjectMeta, then its schema.
    Root(&'s Value),
    /// No schema: maps are granular and their fields undeclared, lists atomic.
    Deduced,
}

/// What a node's type accepts, for telling a client its value has the wrong shape.
#[derive(Debug, PartialEq, Eq)]
pub enum Expect {
    Map,
    List,
    String,
    Numeric,
    Boolean,
    Any,
}

fn flag(s: &Value, k: &str) -> bool {
    s.get(k).and_then(Value::as_bool).unwrap_or(false)
}

fn open_node() -> &'static Value {
    static OPEN: OnceLock<Value> = OnceLock::new();
    OPEN.get_or_init(open)
}

fn string_node() -> &'static Value {
    static S: OnceLock<Value> = OnceLock::new();
    S.get_or_init(|| json!({"type": "string"}))
}

impl<'s> Ty<'s> {
    /// The root type of a kind with this schema (`None`: a schemaless built-in we know nothing
    /// about).
    pub fn root(schema: Option<&'s Value>) -> Ty<'s> {
        Ty::Root(schema.unwrap_or_else(|| open_node()))
    }

    fn node(self) -> Option<&'s Value> {
        match self {
            Ty::Schema(s) | Ty::Root(s) => Some(s),
            Ty::Deduced => None,
        }
    }

    fn root_like(self) -> bool {
        match self {
            Ty::Root(_) => true,
            Ty::Schema(s) => flag(s, "x-kubernetes-embedded-resource"),
            Ty::Deduced => false,
        }
    }

    pub fn map_atomic(self) -> bool {
        self.node()
            .and_then(|s| s.get("x-kubernetes-map-type"))
            .and_then(Value::as_str)
            == Some("atomic")
    }

    /// The type of a field; `None` when the schema declares no such field and has no type for
    /// undeclared ones.
    pub fn field(self, name: &str) -> Option<Ty<'s>> {
        let Some(s) = self.node() else {
            return Some(Ty::Deduced);
        };
        if self.root_like() {
            match name {
                "metadata" => return Some(Ty::Schema(object_meta())),
                "apiVersion" | "kind" => return Some(Ty::Schema(string_node())),
                _ => {}
            }
        }
        if let Some(p) = s.get("properties").and_then(|p| p.get(name)) {
            return Some(Ty::Schema(p));
        }
        match s.get("additionalProperties") {
            Some(ap @ Value::Object(_)) => return Some(Ty::Schema(ap)),
            Some(Value::Bool(true)) => return Some(Ty::Deduced),
            _ => {}
        }
        if flag(s, "x-kubernetes-preserve-unknown-fields") {
            return Some(Ty::Deduced);
        }
        None
    }

    /// Whether `name` is a declared (struct) field rather than a key of a map.
    pub fn declared(self, name: &str) -> bool {
        let Some(s) = self.node() else {
            return false;
        };
        (self.root_like() && matches!(name, "metadata" | "apiVersion" | "kind"))
            || s.get("properties").and_then(|p| p.get(name)).is_some()
    }

    pub fn list(self) -> ListRel<'s> {
        let Some(s) = self.node() else {
            return ListRel::Atomic;
        };
        match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => ListRel::Set,
            Some("map") => ListRel::Map(
                s.get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default(),
            ),
            _ => ListRel::Atomic,
        }
    }

    pub fn item(self) -> Ty<'s> {
        match self.node().and_then(|s| s.get("items")) {
            Some(i) => Ty::Schema(i),
            None => Ty::Deduced,
        }
    }

    /// The default a list-map key field has when an item omits it.
    pub fn key_default(self, key: &str) -> Option<&'s Value> {
        self.node()?.get("properties")?.get(key)?.get("default")
    }

    /// How a strategic merge patch merges this field: `merge` or `replace` (its Go tag's
    /// `patchStrategy` less `retainKeys`, which only tells clients to send `$retainKeys`), or
    /// `None` when the tag names neither.
    pub fn patch_strategy(self) -> Option<&'s str> {
        self.node()?
            .get("x-kubernetes-patch-strategy")?
            .as_str()?
            .split(',')
            .find(|s| *s != "retainKeys")
    }

    /// The field a strategic merge patch matches this list's items by (`patchMergeKey`).
    pub fn patch_merge_key(self) -> Option<&'s str> {
        self.node()?.get("x-kubernetes-patch-merge-key")?.as_str()
    }

    pub fn expects(self) -> Expect {
        let Some(s) = self.node() else {
            return Expect::Any;
        };
        if flag(s, "x-kubernetes-int-or-string") {
            return Expect::Any;
        }
        match s.get("type").and_then(Value::as_str) {
            Some("object") => Expect::Map,
            Some("array") => Expect::List,
            Some("string") => Expect::String,
            Some("integer") | Some("number") => Expect::Numeric,
            Some("boolean") => Expect::Boolean,
            _ if self.root_like() => Expect::Map,
            _ => Expect::Any,
        }
    }

    /// The path element of a list item, or why the item cannot be in this list.
    pub fn item_pe(self, rel: &ListRel<'_>, item: &Value) -> Result<Pe, String> {
        match rel {
            ListRel::Atomic => Err("an atomic list has no items of its own".into()),
            ListRel::Set => {
                if item.is_object() || item.is_array() {
                    Err("associative list without keys has an element that's a map type".into())
                } else {
                    Ok(Pe::Value(item.clone()))
                }
            }
            ListRel::Map(keys) => {
                let Some(m) = item.as_object() else {
                    return Err("associative list with keys may not have non-map elements".into());
                };
                let item_ty = self.item();
                let mut fields = Vec::with_capacity(keys.len());
                for k in keys {
                    match m.get(*k).or_else(|| item_ty.key_default(k)) {
                        Some(v) => fields.push((k.to_string(), v.clone())),
                        None => {
                            return Err(format!(
                                "associative list with keys has an element that omits key field {k:?} (and doesn't have default value)"
                            ));
                        }
                    }
                }
                fields.sort_by(|a, b| a.0.cmp(&b.0));
                Ok(Pe::Key(fields))
            }
        }
    }
}

// Schema building blocks for the types below.

fn open() -> Value {
    json!({"x-kubernetes-preserve-unknown-fields": true})
}

/// A struct with these declared fields (anything else is deduced).
fn st(fields: &[(&str, Value)]) -> Value {
    let props: Map<String, Value> = fields
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": props})
}

/// A struct of scalar (or deduced) fields.
fn leaves(names: &[&str]) -> Value {
    let f: Vec<(&str, Value)> = names.iter().map(|n| (*n, open())).collect();
    st(&f)
}

fn atomic_struct() -> Value {
    json!({"type": "object", "x-kubernetes-map-type": "atomic", "x-kubernetes-preserve-unknown-fields": true})
}

fn string_map() -> Value {
    json!({"type": "object", "additionalProperties": {"type": "string"}})
}

fn atomic_string_map() -> Value {
    json!({"type": "object", "x-kubernetes-map-type": "atomic", "additionalProperties": {"type": "string"}})
}

fn atomic_list() -> Value {
    json!({"type": "array", "x-kubernetes-list-type": "atomic"})
}

fn set_list() -> Value {
    json!({"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}})
}

fn list_map(keys: &[&str], item: Value) -> Value {
    json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": keys, "items": item})
}

/// A field whose Go tag says `patchStrategy:"<strategy>"`.
fn patched(strategy: &str, mut node: Value) -> Value {
    node["x-kubernetes-patch-strategy"] = json!(strategy);
    node
}

/// A list a strategic merge patch merges item by item, matching them by `key`
/// (`patchStrategy:"merge" patchMergeKey:"<key>"`). The key may differ from the list-map keys
/// server-side apply uses: a container's ports merge by `containerPort` alone.
fn merged_by(key: &str, node: Value) -> Value {
    let mut node = patched("merge", node);
    node["x-kubernetes-patch-merge-key"] = json!(key);
    node
}

/// ObjectMeta as the apiserver types it, for every kind's `metadata` (and a pod template's).
pub fn object_meta() -> &'static Value {
    static META: OnceLock<Value> = OnceLock::new();
    META.get_or_init(|| {
        let mut m = leaves(crate::meta::OBJECT_META_SCALARS);
        let props = m["properties"]
            .as_object_mut()
            .expect("st builds properties");
        props.insert("labels".into(), string_map());
        props.insert("annotations".into(), string_map());
        props.insert("finalizers".into(), patched("merge", set_list()));
        props.insert(
            "ownerReferences".into(),
            merged_by("uid", list_map(&["uid"], atomic_struct())),
        );
        props.insert("managedFields".into(), atomic_list());
        if let Some(o) = m.as_object_mut() {
            o.remove("x-kubernetes-preserve-unknown-fields");
        }
        m
    })
}

fn conditions() -> Value {
    let list = list_map(
        &["type"],
        leaves(&[
            "type",
            "status",
            "observedGeneration",
            "lastUpdateTime",
            "lastTransitionTime",
            "reason",
            "message",
        ]),
    );
    merged_by("type", list)
}

fn container() -> Value {
    let port = {
        let mut p = leaves(&["containerPort", "protocol", "name", "hostPort", "hostIP"]);
        p["properties"]["protocol"]["default"] = json!("TCP");
        p
    };
    st(&[
        ("name", open()),
        ("image", open()),
        ("command", atomic_list()),
        ("args", atomic_list()),
        ("workingDir", open()),
        (
            "ports",
            merged_by(
                "containerPort",
                list_map(&["containerPort", "protocol"], port),
            ),
        ),
        ("envFrom", atomic_list()),
        (
            "env",
            merged_by(
                "name",
                list_map(
                    &["name"],
                    st(&[("name", open()), ("value", open()), ("valueFrom", open())]),
                ),
            ),
        ),
        (
            "resources",
            st(&[
                ("limits", open()),
                ("requests", open()),
                ("claims", list_map(&["name"], leaves(&["name", "request"]))),
            ]),
        ),
        ("resizePolicy", atomic_list()),
        ("restartPolicy", open()),
        ("restartPolicyRules", atomic_list()),
        (
            "volumeMounts",
            merged_by(
                "mountPath",
                list_map(
                    &["mountPath"],
                    leaves(&[
                        "name",
                        "readOnly",
                        "recursiveReadOnly",
                        "mountPath",
                        "subPath",
                        "mountPropagation",
                        "subPathExpr",
                    ]),
                ),
            ),
        ),
        (
            "volumeDevices",
            merged_by(
                "devicePath",
                list_map(&["devicePath"], leaves(&["name", "devicePath"])),
            ),
        ),
        ("livenessProbe", open()),
        ("readinessProbe", open()),
        ("startupProbe", open()),
        ("lifecycle", open()),
        ("terminationMessagePath", open()),
        ("terminationMessagePolicy", open()),
        ("imagePullPolicy", open()),
        ("securityContext", open()),
        ("stdin", open()),
        ("stdinOnce", open()),
        ("tty", open()),
    ])
}

fn pod_spec() -> Value {
    let named = || merged_by("name", list_map(&["name"], atomic_struct()));
    let containers = || merged_by("name", list_map(&["name"], container()));
    // `patchStrategy:"merge,retainKeys"`: clients send `$retainKeys` so that a volume changing
    // its source drops the old one.
    let retained_by_name = || {
        let mut l = merged_by("name", list_map(&["name"], open()));
        l["x-kubernetes-patch-strategy"] = json!("merge,retainKeys");
        l
    };
    let mut f: Vec<(&str, Value)> = [
        "restartPolicy",
        "terminationGracePeriodSeconds",
        "activeDeadlineSeconds",
        "dnsPolicy",
        "serviceAccountName",
        "serviceAccount",
        "automountServiceAccountToken",
        "nodeName",
        "hostNetwork",
        "hostPID",
        "hostIPC",
        "shareProcessNamespace",
        "securityContext",
        "hostname",
        "subdomain",
        "affinity",
        "schedulerName",
        "priorityClassName",
        "priority",
        "dnsConfig",
        "runtimeClassName",
        "enableServiceLinks",
        "preemptionPolicy",
        "overhead",
        "setHostnameAsFQDN",
        "os",
        "hostUsers",
        "resources",
        "hostnameOverride",
    ]
    .iter()
    .map(|n| (*n, open()))
    .collect();
    f.extend([
        ("volumes", retained_by_name()),
        ("initContainers", containers()),
        ("containers", containers()),
        ("ephemeralContainers", containers()),
        ("nodeSelector", atomic_string_map()),
        ("imagePullSecrets", named()),
        ("tolerations", atomic_list()),
        ("hostAliases", merged_by("ip", list_map(&["ip"], open()))),
        ("readinessGates", atomic_list()),
        (
            "topologySpreadConstraints",
            merged_by(
                "topologyKey",
                list_map(&["topologyKey", "whenUnsatisfiable"], open()),
            ),
        ),
        (
            "schedulingGates",
            merged_by("name", list_map(&["name"], open())),
        ),
        ("resourceClaims", retained_by_name()),
    ]);
    st(&f)
}

fn deployment() -> Value {
    st(&[
        (
            "spec",
            st(&[
                ("replicas", open()),
                ("selector", atomic_struct()),
                (
                    "template",
                    st(&[("metadata", object_meta().clone()), ("spec", pod_spec())]),
                ),
                (
                    "strategy",
                    patched(
                        "retainKeys",
                        st(&[
                            ("type", open()),
                            ("rollingUpdate", leaves(&["maxUnavailable", "maxSurge"])),
                        ]),
                    ),
                ),
                ("minReadySeconds", open()),
                ("revisionHistoryLimit", open()),
                ("paused", open()),
                ("progressDeadlineSeconds", open()),
            ]),
        ),
        (
            "status",
            st(&[
                ("observedGeneration", open()),
                ("replicas", open()),
                ("updatedReplicas", open()),
                ("readyReplicas", open()),
                ("availableReplicas", open()),
                ("unavailableReplicas", open()),
                ("terminatingReplicas", open()),
                ("conditions", conditions()),
                ("collisionCount", open()),
            ]),
        ),
    ])
}

fn service() -> Value {
    let mut port = leaves(&[
        "name",
        "protocol",
        "appProtocol",
        "port",
        "targetPort",
        "nodePort",
    ]);
    port["properties"]["protocol"]["default"] = json!("TCP");
    let mut spec: Vec<(&str, Value)> = [
        "clusterIP",
        "type",
        "sessionAffinity",
        "loadBalancerIP",
        "externalName",
        "externalTrafficPolicy",
        "healthCheckNodePort",
        "publishNotReadyAddresses",
        "sessionAffinityConfig",
        "ipFamilyPolicy",
        "allocateLoadBalancerNodePorts",
        "loadBalancerClass",
        "internalTrafficPolicy",
        "trafficDistribution",
    ]
    .iter()
    .map(|n| (*n, open()))
    .collect();
    spec.extend([
        (
            "ports",
            merged_by("port", list_map(&["port", "protocol"], port)),
        ),
        ("selector", atomic_string_map()),
        ("clusterIPs", atomic_list()),
        ("externalIPs", atomic_list()),
        ("loadBalancerSourceRanges", atomic_list()),
        ("ipFamilies", atomic_list()),
    ]);
    st(&[
        ("spec", st(&spec)),
        (
            "status",
            st(&[
                ("loadBalancer", st(&[("ingress", atomic_list())])),
                ("conditions", conditions()),
            ]),
        ),
    ])
}

fn builtins() -> &'static [((&'static str, &'static str), Value)] {
    static B: OnceLock<Vec<((&'static str, &'static str), Value)>> = OnceLock::new();
    B.get_or_init(|| {
        let source = || leaves(&["component", "host"]);
        let series = || leaves(&["count", "lastObservedTime"]);
        let binding = || st(&[("subjects", atomic_list()), ("roleRef", atomic_struct())]);
        vec![
            (
                ("", "Namespace"),
                st(&[
                    ("spec", st(&[("finalizers", atomic_list())])),
                    (
                        "status",
                        st(&[("phase", open()), ("conditions", conditions())]),
                    ),
                ]),
            ),
            (
                ("coordination.k8s.io", "Lease"),
                st(&[(
                    "spec",
                    leaves(&[
                        "holderIdentity",
                        "leaseDurationSeconds",
                        "acquireTime",
                        "renewTime",
                        "leaseTransitions",
                        "strategy",
                        "preferredHolder",
                    ]),
                )]),
            ),
            (
                ("", "Event"),
                st(&[
                    ("involvedObject", atomic_struct()),
                    ("reason", open()),
                    ("message", open()),
                    ("source", source()),
                    ("firstTimestamp", open()),
                    ("lastTimestamp", open()),
                    ("count", open()),
                    ("type", open()),
                    ("eventTime", open()),
                    ("series", series()),
                    ("action", open()),
                    ("related", atomic_struct()),
                    ("reportingComponent", open()),
                    ("reportingInstance", open()),
                ]),
            ),
            (
                ("events.k8s.io", "Event"),
                st(&[
                    ("eventTime", open()),
                    ("series", series()),
                    ("reportingController", open()),
                    ("reportingInstance", open()),
                    ("action", open()),
                    ("reason", open()),
                    ("regarding", atomic_struct()),
                    ("related", atomic_struct()),
                    ("note", open()),
                    ("type", open()),
                    ("deprecatedSource", source()),
                    ("deprecatedFirstTimestamp", open()),
                    ("deprecatedLastTimestamp", open()),
                    ("deprecatedCount", open()),
                ]),
            ),
            (
                ("rbac.authorization.k8s.io", "Role"),
                st(&[("rules", atomic_list())]),
            ),
            (
                ("rbac.authorization.k8s.io", "ClusterRole"),
                st(&[
                    ("rules", atomic_list()),
                    (
                        "aggregationRule",
                        st(&[("clusterRoleSelectors", atomic_list())]),
                    ),
                ]),
            ),
            (("rbac.authorization.k8s.io", "RoleBinding"), binding()),
            (
                ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
                binding(),
            ),
            (
                ("", "ServiceAccount"),
                st(&[
                    (
                        "secrets",
                        merged_by("name", list_map(&["name"], atomic_struct())),
                    ),
                    ("imagePullSecrets", atomic_list()),
                    ("automountServiceAccountToken", open()),
                ]),
            ),
            (
                ("", "Secret"),
                st(&[
                    ("data", string_map()),
                    ("stringData", string_map()),
                    ("type", open()),
                    ("immutable", open()),
                ]),
            ),
            (
                ("", "ConfigMap"),
                st(&[
                    ("data", string_map()),
                    ("binaryData", string_map()),
                    ("immutable", open()),
                ]),
            ),
            (("", "Service"), service()),
            (("apps", "Deployment"), deployment()),
            (
                ("networking.k8s.io", "NetworkPolicy"),
                st(&[(
                    "spec",
                    st(&[
                        ("podSelector", atomic_struct()),
                        ("ingress", atomic_list()),
                        ("egress", atomic_list()),
                        ("policyTypes", atomic_list()),
                    ]),
                )]),
            ),
        ]
    })
}

/// The field markers of a built-in kind, if this table knows it.
pub fn builtin_schema(group: &str, kind: &str) -> Option<&'static Value> {
    builtins()
        .iter()
        .find(|((g, k), _)| *g == group && *k == kind)
        .map(|(_, s)| s)
}

/// What the apiserver compares a create against: the kind's empty object. A Go type's struct
/// fields are present (as `{}`) even when empty, so a create does not own them as a whole; a
/// custom resource's empty object has nothing.
pub fn zero_object(group: &str, kind: &str) -> Value {
    match (group, kind) {
        ("", "Namespace") => json!({"spec": {}, "status": {}}),
        ("coordination.k8s.io", "Lease") => json!({"spec": {}}),
        ("", "Event") => json!({"involvedObject": {}, "source": {}}),
        ("events.k8s.io", "Event") => json!({"regarding": {}, "deprecatedSource": {}}),
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => {
            json!({"roleRef": {}})
        }
        ("", "Service") => json!({"spec": {}, "status": {"loadBalancer": {}}}),
        ("networking.k8s.io", "NetworkPolicy") => json!({"spec": {"podSelector": {}}}),
        ("authorization.k8s.io", "SelfSubjectAccessReview" | "SubjectAccessReview") => {
            json!({"spec": {}, "status": {}})
        }
        ("authentication.k8s.io", "TokenReview") => json!({"spec": {}, "status": {"user": {}}}),
        // A pod spec's `containers` is not `omitempty`: it is there (null) before a create
        // adds its items, so the create owns the items, not the list.
        ("apps", "Deployment") => json!({
            "spec": {"template": {"metadata": {}, "spec": {"containers": []}}, "strategy": {}},
            "status": {},
        }),
        _ => json!({}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fields::walk;

    #[test]
    fn a_deployments_containers_and_env_merge_by_name() {
        let ty = Ty::root(builtin_schema("apps", "Deployment"));
        let live = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}], "ports": [{"containerPort": 80}]},
            {"name": "sidecar", "image": "side:1"},
        ]}}}});
        let config = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "app", "env": [{"name": "B", "value": "2"}], "ports": [{"containerPort": 80, "protocol": "TCP", "name": "http"}]},
        ]}}}});
        let merged = walk::merge(Some(&live), Some(&config), ty).unwrap();
        let containers = &merged["spec"]["template"]["spec"]["containers"];
        assert_eq!(
            containers[1]["name"], "sidecar",
            "a container by another name stays"
        );
        assert_eq!(containers[0]["image"], "app:1");
        assert_eq!(
            containers[0]["env"],
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])
        );
        assert_eq!(
            containers[0]["ports"],
            json!([{"containerPort": 80, "protocol": "TCP", "name": "http"}]),
            "a port without its protocol is the TCP one"
        );
        let set = walk::to_set(&config, ty).unwrap().to_fields_v1();
        assert_eq!(
            set["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"app\"}"]["f:env"],
            json!({"k:{\"name\":\"B\"}": {".": {}, "f:name": {}, "f:value": {}}})
        );
        // Declared struct fields are not owned as a whole by an apply, so no `.` on them.
        assert!(set["f:spec"].get(".").is_none());
        assert!(set["f:spec"]["f:template"].get(".").is_none());
    }

    #[test]
    fn object_meta_owns_finalizers_as_a_set_and_owner_references_by_uid() {
        let ty = Ty::root(None);
        let set = walk::to_set(
            &json!({"metadata": {"finalizers": ["a"], "ownerReferences": [{"uid": "u1", "kind": "K", "name": "n", "apiVersion": "v1"}]}}),
            ty,
        )
        .unwrap()
        .to_fields_v1();
        assert_eq!(
            set["f:metadata"],
            json!({"f:finalizers": {"v:\"a\"": {}}, "f:ownerReferences": {"k:{\"uid\":\"u1\"}": {}}})
        );
    }
}
