//! The IPAM rules against an in-memory plane that behaves like the real one at the seam: hooks run
//! inside a transaction, and a refusal rolls back every write the hook made.

use std::collections::{BTreeMap, HashMap};

use kube::core::Status;
use serde_json::{Value, json};

use super::IpamHooks;
use super::digest::allocation_name;
use crate::hooks::{Caller, PlaneTxn, ResourceKey, StorageHooks};

type Objects = HashMap<String, BTreeMap<(String, String), Value>>;

#[derive(Default)]
struct Store {
    objs: Objects,
    rv: u64,
}

/// A transaction over [`Store`] with an undo log, as the plane gives a hook.
struct Txn<'a> {
    store: &'a mut Store,
    undo: Vec<(String, (String, String), Option<Value>)>,
}

impl Txn<'_> {
    fn rollback(self) {
        for (plural, k, prev) in self.undo.into_iter().rev() {
            let m = self.store.objs.entry(plural).or_default();
            match prev {
                Some(v) => {
                    m.insert(k, v);
                }
                None => {
                    m.remove(&k);
                }
            }
        }
    }
}

fn ns_name(v: &Value) -> (String, String) {
    (
        v.pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        v.pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
    )
}

impl PlaneTxn for Txn<'_> {
    fn get(&self, res: &ResourceKey, namespace: Option<&str>, name: &str) -> Option<Value> {
        let k = (namespace.unwrap_or("").to_string(), name.to_string());
        self.store.objs.get(&res.plural)?.get(&k).cloned()
    }

    fn list(&self, res: &ResourceKey, namespace: Option<&str>) -> Vec<Value> {
        let Some(m) = self.store.objs.get(&res.plural) else {
            return Vec::new();
        };
        m.iter()
            .filter(|((ns, _), _)| namespace.is_none_or(|want| want == ns))
            .map(|(_, v)| v.clone())
            .collect()
    }

    fn put(&mut self, res: &ResourceKey, mut obj: Value) -> Value {
        let k = ns_name(&obj);
        self.store.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(self.store.rv.to_string());
        if obj["metadata"]["uid"].is_null() {
            obj["metadata"]["uid"] = json!(format!("uid-{}", self.store.rv));
        }
        let prev = self
            .store
            .objs
            .entry(res.plural.clone())
            .or_default()
            .insert(k.clone(), obj.clone());
        self.undo.push((res.plural.clone(), k, prev));
        obj
    }

    fn remove(&mut self, res: &ResourceKey, namespace: Option<&str>, name: &str) -> Option<Value> {
        let k = (namespace.unwrap_or("").to_string(), name.to_string());
        let prev = self.store.objs.get_mut(&res.plural)?.remove(&k);
        if prev.is_some() {
            self.undo.push((res.plural.clone(), k, prev.clone()));
        }
        prev
    }
}

const PLATFORM: &str = "platform";

/// One project plane: a store plus the IPAM hooks, driven the way the plane drives them.
struct Plane {
    store: Store,
    hooks: IpamHooks,
    caller: Caller,
}

fn res(plural: &str) -> ResourceKey {
    ResourceKey::new("ipam.miloapis.com", plural)
}

fn caller(project: Option<&str>) -> Caller {
    Caller {
        user: "tester".into(),
        groups: vec![],
        project: project.map(str::to_string),
    }
}

impl Plane {
    fn new() -> Self {
        Self::for_project(PLATFORM)
    }

    fn for_project(project: &str) -> Self {
        Self {
            store: Store::default(),
            hooks: IpamHooks::new(project, PLATFORM),
            caller: caller(Some(project)),
        }
    }

    fn transact(
        &mut self,
        f: impl FnOnce(&IpamHooks, &mut Txn<'_>, &Caller) -> Result<Option<(String, Value)>, Status>,
    ) -> Result<Value, Status> {
        let mut txn = Txn {
            store: &mut self.store,
            undo: Vec::new(),
        };
        match f(&self.hooks, &mut txn, &self.caller) {
            Ok(Some((plural, obj))) => Ok(txn.put(&res(&plural), obj)),
            Ok(None) => Ok(Value::Null),
            Err(e) => {
                txn.rollback();
                Err(e)
            }
        }
    }

    fn create(&mut self, plural: &str, mut obj: Value) -> Result<Value, Status> {
        let plural = plural.to_string();
        self.transact(|h, txn, c| {
            h.before_create(txn, c, &res(&plural), &mut obj)?;
            if txn
                .get(
                    &res(&plural),
                    obj["metadata"]["namespace"].as_str(),
                    obj["metadata"]["name"].as_str().unwrap(),
                )
                .is_some()
            {
                return Err(Status::failure("already exists", "AlreadyExists").with_code(409));
            }
            Ok(Some((plural, obj)))
        })
    }

    fn update(&mut self, plural: &str, mut new: Value) -> Result<Value, Status> {
        let plural = plural.to_string();
        self.transact(|h, txn, c| {
            let old = txn
                .get(
                    &res(&plural),
                    new["metadata"]["namespace"].as_str(),
                    new["metadata"]["name"].as_str().unwrap(),
                )
                .expect("exists");
            new["metadata"]["uid"] = old["metadata"]["uid"].clone();
            h.before_update(txn, c, &res(&plural), &old, &mut new)?;
            Ok(Some((plural, new)))
        })
    }

    fn delete(&mut self, plural: &str, ns: Option<&str>, name: &str) -> Result<(), Status> {
        let plural = plural.to_string();
        self.transact(|h, txn, c| {
            let obj = txn.get(&res(&plural), ns, name).expect("exists");
            h.before_delete(txn, c, &res(&plural), &obj)?;
            txn.remove(&res(&plural), ns, name);
            Ok(None)
        })
        .map(|_| ())
    }

    /// A create the hook accepts but the plane then fails (and rolls back), which the hook never
    /// hears about.
    fn create_then_fail(&mut self, plural: &str, mut obj: Value) {
        let plural = plural.to_string();
        let r = self.transact(|h, txn, c| {
            h.before_create(txn, c, &res(&plural), &mut obj)?;
            Err(Status::failure("storage failed", "InternalError").with_code(500))
        });
        assert_eq!(r.unwrap_err().code, 500);
    }

    fn get(&self, plural: &str, ns: Option<&str>, name: &str) -> Option<Value> {
        self.store
            .objs
            .get(plural)?
            .get(&(ns.unwrap_or("").to_string(), name.to_string()))
            .cloned()
    }

    fn count(&self, plural: &str) -> usize {
        self.store.objs.get(plural).map_or(0, BTreeMap::len)
    }
}

fn pool(name: &str, cidr: &str, family: &str, classes: &[&str]) -> Value {
    json!({
        "apiVersion": "ipam.miloapis.com/v1alpha1", "kind": "IPPool",
        "metadata": {"name": name},
        "spec": {"cidr": cidr, "ipFamily": family, "classNames": classes},
    })
}

fn class(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "ipam.miloapis.com/v1alpha1", "kind": "IPClass",
        "metadata": {"name": name},
        "spec": spec,
    })
}

fn claim(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "ipam.miloapis.com/v1alpha1", "kind": "IPClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    })
}

fn location(name: &str) -> Value {
    json!({"location": {"apiGroup": "networking.datumapis.com", "kind": "Location", "name": name}})
}

fn shard_claim(name: &str, loc: &str) -> Value {
    claim(
        name,
        json!({
            "className": "datum-egress-shard-address-ipv6", "ipFamily": "IPv6", "prefixLength": 128,
            "target": "Block", "reclaimPolicy": "Delete", "scope": location(loc),
        }),
    )
}

/// The inventory of `config/ipam/egress-shard-ipv6.yaml`, with a prefix filled in.
fn egress_inventory(p: &mut Plane, cidr: &str) {
    let mut root = pool(
        "datum-egress-shard-ipv6-root",
        cidr,
        "IPv6",
        &["datum-egress-shard-ipv6"],
    );
    root["spec"]["visibility"] = json!("shared");
    root["spec"]["allocation"] =
        json!({"minPrefixLength": 48, "maxPrefixLength": 48, "strategy": "FirstFit"});
    p.create("ippools", root).unwrap();
    p.create(
        "ipclasses",
        class(
            "datum-egress-shard-ipv6",
            json!({
                "ipFamily": "IPv6", "poolPer": ["location"], "uniqueWithin": [],
                "allowedPrefixLengths": {"min": 48, "max": 48}, "defaultPrefixLength": 48,
                "routing": {"external": "Aggregate"}, "reclaimPolicy": "Retain",
            }),
        ),
    )
    .unwrap();
    p.create(
        "ipclasses",
        class(
            "datum-egress-shard-address-ipv6",
            json!({
                "ipFamily": "IPv6", "parentClassName": "datum-egress-shard-ipv6", "uniqueWithin": [],
                "allowedPrefixLengths": {"min": 128, "max": 128}, "defaultPrefixLength": 128,
                "reclaimPolicy": "Delete", "routing": {"internal": "Host"},
            }),
        ),
    )
    .unwrap();
}

/// A flat class drawing straight from one pool.
fn flat(p: &mut Plane, cidr: &str, class_spec: Value) {
    let fam = if cidr.contains(':') { "IPv6" } else { "IPv4" };
    p.create("ippools", pool("flat-pool", cidr, fam, &["flat"]))
        .unwrap();
    let mut spec = class_spec;
    spec["ipFamily"] = json!(fam);
    p.create("ipclasses", class("flat", spec)).unwrap();
}

fn cause_types(s: &Status) -> Vec<(String, String, String)> {
    s.details
        .as_ref()
        .map(|d| {
            d.causes
                .iter()
                .map(|c| (c.reason.clone(), c.message.clone(), c.field.clone()))
                .collect()
        })
        .unwrap_or_default()
}

fn has_cause(s: &Status, reason: &str) -> bool {
    cause_types(s).iter().any(|(r, _, _)| r == reason)
}

fn cidr_of(v: &Value) -> String {
    v["status"]["allocatedCIDR"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

// ---------------------------------------------------------------- pools

#[test]
fn a_root_pool_without_a_cidr_is_refused_with_a_clear_message() {
    let mut p = Plane::new();
    let e = p
        .create("ippools", pool("root", "", "IPv6", &[]))
        .unwrap_err();
    assert_eq!(e.code, 422);
    assert_eq!(e.reason, "Invalid");
    assert!(
        e.message.contains("cidr is required for root pools"),
        "{}",
        e.message
    );
    assert!(
        cause_types(&e)
            .iter()
            .any(|(r, _, f)| r == "FieldValueRequired" && f == "spec.cidr")
    );
    assert_eq!(p.count("ippools"), 0);
}

#[test]
fn a_root_pool_is_ready_with_capacity_as_decimal_strings() {
    let mut p = Plane::new();
    let v = p
        .create("ippools", pool("root", "2001:db8::1/40", "IPv6", &[]))
        .unwrap();
    assert_eq!(v["status"]["phase"], "Ready");
    assert_eq!(v["status"]["allocatedCIDR"], "2001:db8::/40");
    assert_eq!(v["status"]["ipFamily"], "IPv6");
    assert_eq!(v["status"]["capacity"]["total"], (1u128 << 88).to_string());
    assert_eq!(v["status"]["capacity"]["allocated"], "0");
    assert_eq!(v["status"]["utilizationPercent"], 0.0);
    assert_eq!(v["spec"]["allocation"]["strategy"], "FirstFit");
    assert_eq!(
        v["status"]["conditions"][0]["reason"],
        "AllocationSucceeded"
    );
}

#[test]
fn pool_validation_rules() {
    let mut p = Plane::new();
    let e = p
        .create("ippools", pool("bad", "2001:db8::/400", "IPv6", &[]))
        .unwrap_err();
    assert!(e.message.contains("invalid CIDR"), "{}", e.message);
    let e = p
        .create("ippools", pool("nofam", "10.0.0.0/8", "", &[]))
        .unwrap_err();
    assert!(
        e.message.contains("ipFamily is required for root pools"),
        "{}",
        e.message
    );
    let e = p
        .create("ippools", pool("mismatch", "10.0.0.0/8", "IPv6", &[]))
        .unwrap_err();
    assert_eq!(e.code, 422);
    let mut minmax = pool("minmax", "10.0.0.0/8", "IPv4", &[]);
    minmax["spec"]["allocation"] = json!({"minPrefixLength": 30, "maxPrefixLength": 24});
    let e = p.create("ippools", minmax).unwrap_err();
    assert!(
        e.message.contains("must not exceed maxPrefixLength"),
        "{}",
        e.message
    );

    p.create("ippools", pool("parent", "10.0.0.0/16", "IPv4", &[]))
        .unwrap();
    let child = |spec: Value| json!({"metadata": {"name": "child"}, "spec": spec});
    let e = p
        .create("ippools", child(json!({"parentPoolRef": {"name": "parent"}, "cidr": "10.0.0.0/24", "prefixLength": 24})))
        .unwrap_err();
    assert!(cause_types(&e).iter().any(|(_, _, f)| f == "spec.cidr"));
    let e = p
        .create(
            "ippools",
            child(json!({"parentPoolRef": {"name": "parent"}})),
        )
        .unwrap_err();
    assert!(
        e.message
            .contains("prefixLength is required for child pools"),
        "{}",
        e.message
    );
    let e = p
        .create(
            "ippools",
            child(json!({"parentPoolRef": {"name": "nope"}, "prefixLength": 24})),
        )
        .unwrap_err();
    assert_eq!(e.code, 400);
    let e = p
        .create("ippools", pool("overlap", "10.0.128.0/17", "IPv4", &[]))
        .unwrap_err();
    assert_eq!(e.code, 409);
    assert!(
        e.message.contains("overlaps root IPPool \"parent\""),
        "{}",
        e.message
    );
}

#[test]
fn a_child_pool_is_carved_lowest_first_and_blocks_deleting_its_parent() {
    let mut p = Plane::new();
    p.create("ippools", pool("parent", "10.0.0.0/16", "IPv4", &[]))
        .unwrap();
    let child = |name: &str| json!({"metadata": {"name": name}, "spec": {"parentPoolRef": {"name": "parent"}, "prefixLength": 24}});
    let a = p.create("ippools", child("a")).unwrap();
    let b = p.create("ippools", child("b")).unwrap();
    assert_eq!(cidr_of(&a), "10.0.0.0/24");
    assert_eq!(cidr_of(&b), "10.0.1.0/24");
    assert_eq!(a["status"]["ipFamily"], "IPv4");
    assert_eq!(
        a["status"]["conditions"][0]["message"],
        "CIDR 10.0.0.0/24 allocated from parent"
    );
    let parent = p.get("ippools", None, "parent").unwrap();
    assert_eq!(parent["status"]["capacity"]["allocated"], "512");
    let e = p.delete("ippools", None, "parent").unwrap_err();
    assert_eq!(e.code, 409);
    assert!(
        e.message.contains("2 active allocation(s)"),
        "{}",
        e.message
    );
    p.delete("ippools", None, "a").unwrap();
    assert_eq!(
        cidr_of(&p.create("ippools", child("c")).unwrap()),
        "10.0.0.0/24"
    );
}

#[test]
fn pool_immutable_fields_are_refused_on_update() {
    let mut p = Plane::new();
    let v = p
        .create("ippools", pool("root", "10.0.0.0/16", "IPv4", &[]))
        .unwrap();
    for (field, value) in [
        ("cidr", json!("10.1.0.0/16")),
        ("ipFamily", json!("IPv6")),
        ("parentPoolRef", json!({"name": "x"})),
        ("prefixLength", json!(24)),
        ("reservations", json!({"leading": 1})),
    ] {
        let mut n = v.clone();
        n["spec"][field] = value;
        let e = p.update("ippools", n).unwrap_err();
        assert_eq!(e.code, 422, "{field}");
        let causes = cause_types(&e);
        assert!(
            causes
                .iter()
                .any(|(r, _, f)| r == "FieldValueForbidden" && f == &format!("spec.{field}")),
            "{field}: {causes:?}"
        );
    }
    let mut n = v.clone();
    n["spec"]["classNames"] = json!(["other"]);
    n["status"]["allocatedCIDR"] = json!("192.168.0.0/16");
    let stored = p.update("ippools", n).unwrap();
    assert_eq!(stored["spec"]["classNames"], json!(["other"]));
    assert_eq!(cidr_of(&stored), "10.0.0.0/16");
}

#[test]
fn reservations_are_never_handed_out() {
    let mut p = Plane::new();
    let mut root = pool("flat-pool", "10.0.0.0/30", "IPv4", &["flat"]);
    root["spec"]["reservations"] = json!({"leading": 1, "trailing": 1});
    let v = p.create("ippools", root).unwrap();
    assert_eq!(v["status"]["capacity"]["allocated"], "2");
    p.create(
        "ipclasses",
        class(
            "flat",
            json!({"ipFamily": "IPv4", "defaultPrefixLength": 32}),
        ),
    )
    .unwrap();
    let a = p
        .create("ipclaims", claim("a", json!({"className": "flat"})))
        .unwrap();
    let b = p
        .create("ipclaims", claim("b", json!({"className": "flat"})))
        .unwrap();
    assert_eq!(cidr_of(&a), "10.0.0.1/32");
    assert_eq!(cidr_of(&b), "10.0.0.2/32");
    assert_eq!(
        p.create("ipclaims", claim("c", json!({"className": "flat"})))
            .unwrap_err()
            .code,
        507
    );
    // Reservations alone do not keep a pool alive.
    p.delete("ipclaims", Some("default"), "a").unwrap();
    p.delete("ipclaims", Some("default"), "b").unwrap();
    p.delete("ippools", None, "flat-pool").unwrap();
}

// ---------------------------------------------------------------- classes

#[test]
fn class_validation_rules() {
    let mut p = Plane::new();
    let e = p
        .create("ipclasses", class("c", json!({"defaultPrefixLength": 128})))
        .unwrap_err();
    assert_eq!(e.code, 422);
    assert!(
        e.message
            .contains("ipFamily is required: a class hands out one address family, and dual-stack is two classes"),
        "{}",
        e.message
    );
    let e = p
        .create(
            "ipclasses",
            class(
                "c",
                json!({"ipFamily": "IPv4", "allowedPrefixLengths": {"min": 24, "max": 64}}),
            ),
        )
        .unwrap_err();
    assert!(e.message.contains("does not fit IPv4"), "{}", e.message);
    let e = p
        .create(
            "ipclasses",
            class(
                "c",
                json!({"ipFamily": "IPv6", "allowedPrefixLengths": {"min": 64, "max": 48}}),
            ),
        )
        .unwrap_err();
    assert!(e.message.contains("must not exceed"), "{}", e.message);
    let e = p
        .create(
            "ipclasses",
            class(
                "c",
                json!({"ipFamily": "IPv6", "allowedPrefixLengths": {"min": 64, "max": 96}, "defaultPrefixLength": 128}),
            ),
        )
        .unwrap_err();
    assert!(
        e.message.contains("outside allowedPrefixLengths"),
        "{}",
        e.message
    );
    let e = p
        .create(
            "ipclasses",
            class(
                "c",
                json!({"ipFamily": "IPv6", "parentClassName": "missing"}),
            ),
        )
        .unwrap_err();
    assert!(
        e.message.contains("parent class \"missing\" not found"),
        "{}",
        e.message
    );
    p.create(
        "ipclasses",
        class("v4", json!({"ipFamily": "IPv4", "defaultPrefixLength": 24})),
    )
    .unwrap();
    let e = p
        .create(
            "ipclasses",
            class("c", json!({"ipFamily": "IPv6", "parentClassName": "v4"})),
        )
        .unwrap_err();
    assert!(e.message.contains("a chain is one family"), "{}", e.message);
    let e = p
        .create(
            "ipclasses",
            class(
                "c",
                json!({"ipFamily": "IPv4", "parentClassName": "v4", "defaultPrefixLength": 16}),
            ),
        )
        .unwrap_err();
    assert!(e.message.contains("not smaller than"), "{}", e.message);
    let e = p
        .create(
            "ipclasses",
            class("c", json!({"ipFamily": "IPv4", "poolPer": ["a", "a"]})),
        )
        .unwrap_err();
    assert!(e.message.contains("duplicate role"), "{}", e.message);
    let e = p
        .create(
            "ipclasses",
            class(
                "c",
                json!({"ipFamily": "IPv4", "reservations": {"leading": 1}}),
            ),
        )
        .unwrap_err();
    assert!(e.message.contains("need poolPer"), "{}", e.message);

    let mut d1 = class("d1", json!({"ipFamily": "IPv4"}));
    d1["metadata"]["annotations"] = json!({"ipam.miloapis.com/is-default-class": "true"});
    p.create("ipclasses", d1.clone()).unwrap();
    d1["metadata"]["name"] = json!("d2");
    let e = p.create("ipclasses", d1).unwrap_err();
    assert!(e.message.contains("already the default"), "{}", e.message);
}

#[test]
fn class_defaults_and_required_roles() {
    let mut p = Plane::new();
    egress_inventory(&mut p, "2001:db8::/40");
    let leaf = p
        .get("ipclasses", None, "datum-egress-shard-address-ipv6")
        .unwrap();
    assert_eq!(leaf["status"]["phase"], "Ready");
    assert_eq!(leaf["status"]["requiredScopeRoles"], json!(["location"]));
    assert_eq!(leaf["spec"]["strategy"], "FirstFit");
    assert_eq!(
        leaf["spec"]["routing"],
        json!({"internal": "Host", "external": "None"})
    );
}

#[test]
fn class_immutable_fields_are_refused_on_update() {
    let mut p = Plane::new();
    egress_inventory(&mut p, "2001:db8::/40");
    let v = p
        .get("ipclasses", None, "datum-egress-shard-address-ipv6")
        .unwrap();
    for (field, value) in [
        ("ipFamily", json!("IPv4")),
        ("parentClassName", json!("")),
        ("uniqueWithin", json!(["network"])),
        ("poolPer", json!(["network"])),
        ("provisioner", json!("other")),
    ] {
        let mut n = v.clone();
        n["spec"][field] = value;
        let e = p.update("ipclasses", n).unwrap_err();
        assert_eq!(e.code, 422, "{field}");
        assert!(
            cause_types(&e)
                .iter()
                .any(|(r, _, f)| r == "FieldValueForbidden" && f == &format!("spec.{field}")),
            "{field}: {:?}",
            cause_types(&e)
        );
    }
    let mut n = v.clone();
    n["spec"]["reclaimPolicy"] = json!("Retain");
    p.update("ipclasses", n).unwrap();
}

// ---------------------------------------------------------------- claims

#[test]
fn a_claim_binds_synchronously_through_the_cascade() {
    let mut p = Plane::new();
    egress_inventory(&mut p, "2001:db8::/40");
    let mut c = shard_claim("egress-shard-ipv6.ns.node-a", "dfw");
    c["spec"]["ownerRef"] = json!({"apiGroup": "x", "kind": "Y", "name": "z", "namespace": "w"});
    let v = p.create("ipclaims", c).unwrap();
    assert_eq!(v["status"]["phase"], "Bound");
    assert_eq!(cidr_of(&v), "2001:db8::/128");
    assert!(v["status"].get("address").is_none());
    assert_eq!(
        v["spec"]["ownerRef"],
        json!({"apiGroup": "resourcemanager.miloapis.com", "kind": "Project", "name": PLATFORM})
    );
    let alloc_name = allocation_name("default", "egress-shard-ipv6.ns.node-a");
    assert_eq!(v["status"]["boundAllocationRef"]["name"], alloc_name);

    // The per-location pool, named and labelled per the service, carved from the root.
    let pool_name = v["status"]["poolRef"]["name"].as_str().unwrap().to_string();
    assert!(
        pool_name.starts_with("datum-egress-shard-ipv6-dfw-"),
        "{pool_name}"
    );
    assert_eq!(pool_name.len(), "datum-egress-shard-ipv6-dfw-".len() + 8);
    let child = p.get("ippools", None, &pool_name).unwrap();
    assert_eq!(child["status"]["phase"], "Ready");
    assert_eq!(cidr_of(&child), "2001:db8::/48");
    assert_eq!(
        child["metadata"]["labels"]["ipam.miloapis.com/provisioned-by-class"],
        "datum-egress-shard-ipv6"
    );
    assert!(child["metadata"]["labels"]["ipam.miloapis.com/scope-digest"].is_string());
    assert_eq!(
        child["spec"]["parentPoolRef"]["name"],
        "datum-egress-shard-ipv6-root"
    );
    assert_eq!(child["status"]["capacity"]["allocated"], "1");
    let root = p
        .get("ippools", None, "datum-egress-shard-ipv6-root")
        .unwrap();
    assert_eq!(
        root["status"]["capacity"]["allocated"],
        (1u128 << 80).to_string()
    );

    let a = p
        .get("ipallocations", Some("default"), &alloc_name)
        .unwrap();
    assert_eq!(a["spec"]["claimRef"]["name"], "egress-shard-ipv6.ns.node-a");
    assert_eq!(a["spec"]["reclaimPolicy"], "Delete");
    assert_eq!(a["spec"]["purpose"], "Claim");
    assert_eq!(a["spec"]["poolRef"]["name"], pool_name);
    assert_eq!(a["spec"]["ownerRef"]["name"], PLATFORM);
    assert_eq!(cidr_of(&a), "2001:db8::/128");

    let second = p.create("ipclaims", shard_claim("b", "dfw")).unwrap();
    assert_eq!(cidr_of(&second), "2001:db8::1/128");
    let other = p.create("ipclaims", shard_claim("c", "ord")).unwrap();
    assert_eq!(cidr_of(&other), "2001:db8:1::/128");
    assert_eq!(p.count("ippools"), 3);
}

#[test]
fn addresses_are_unique_within_the_class_space() {
    let mut p = Plane::new();
    flat(
        &mut p,
        "10.0.0.0/24",
        json!({"defaultPrefixLength": 32, "uniqueWithin": ["network"]}),
    );
    let net = |n: &str| json!({"network": {"apiGroup": "networking.datumapis.com", "kind": "Network", "name": n}});
    let a = p
        .create(
            "ipclaims",
            claim("a", json!({"className": "flat", "scope": net("one")})),
        )
        .unwrap();
    let b = p
        .create(
            "ipclaims",
            claim("b", json!({"className": "flat", "scope": net("two")})),
        )
        .unwrap();
    let c = p
        .create(
            "ipclaims",
            claim("c", json!({"className": "flat", "scope": net("one")})),
        )
        .unwrap();
    assert_eq!(cidr_of(&a), "10.0.0.0/32");
    assert_eq!(cidr_of(&b), "10.0.0.0/32");
    assert_eq!(cidr_of(&c), "10.0.0.1/32");
    // The same address held in two spaces counts once.
    let pool = p.get("ippools", None, "flat-pool").unwrap();
    assert_eq!(pool["status"]["capacity"]["allocated"], "2");
}

#[test]
fn an_empty_unique_within_is_one_platform_wide_space() {
    let mut p = Plane::new();
    flat(&mut p, "10.0.0.0/24", json!({"defaultPrefixLength": 32}));
    let net = |n: &str| json!({"network": {"apiGroup": "g", "kind": "Network", "name": n}});
    let a = p
        .create(
            "ipclaims",
            claim("a", json!({"className": "flat", "scope": net("one")})),
        )
        .unwrap();
    let b = p
        .create(
            "ipclaims",
            claim("b", json!({"className": "flat", "scope": net("two")})),
        )
        .unwrap();
    assert_ne!(cidr_of(&a), cidr_of(&b));
}

#[test]
fn delete_policy_frees_the_address_for_the_next_claim() {
    let mut p = Plane::new();
    egress_inventory(&mut p, "2001:db8::/40");
    let a = p.create("ipclaims", shard_claim("a", "dfw")).unwrap();
    p.create("ipclaims", shard_claim("b", "dfw")).unwrap();
    p.delete("ipclaims", Some("default"), "a").unwrap();
    assert!(
        p.get(
            "ipallocations",
            Some("default"),
            &allocation_name("default", "a")
        )
        .is_none()
    );
    let c = p.create("ipclaims", shard_claim("c", "dfw")).unwrap();
    assert_eq!(cidr_of(&c), cidr_of(&a));
    // A same-named claim after a Delete release is an ordinary new claim.
    p.create("ipclaims", shard_claim("a", "dfw")).unwrap();
}

#[test]
fn reclaim_policy_is_fixed_at_bind_time() {
    let mut p = Plane::new();
    flat(
        &mut p,
        "10.0.0.0/24",
        json!({"defaultPrefixLength": 32, "reclaimPolicy": "Retain"}),
    );
    let v = p
        .create("ipclaims", claim("a", json!({"className": "flat"})))
        .unwrap();
    let alloc = allocation_name("default", "a");
    assert_eq!(
        p.get("ipallocations", Some("default"), &alloc).unwrap()["spec"]["reclaimPolicy"],
        "Retain"
    );
    // Changing the claim's policy afterwards changes nothing on delete.
    let mut n = v.clone();
    n["spec"]["reclaimPolicy"] = json!("Delete");
    p.update("ipclaims", n).unwrap();
    p.delete("ipclaims", Some("default"), "a").unwrap();
    assert!(p.get("ipallocations", Some("default"), &alloc).is_some());
    // The claim's own policy wins over the class's.
    p.create(
        "ipclaims",
        claim("b", json!({"className": "flat", "reclaimPolicy": "Delete"})),
    )
    .unwrap();
    let b = allocation_name("default", "b");
    assert_eq!(
        p.get("ipallocations", Some("default"), &b).unwrap()["spec"]["reclaimPolicy"],
        "Delete"
    );
}

#[test]
fn retain_keeps_the_address_and_refuses_the_same_name() {
    let mut p = Plane::new();
    flat(&mut p, "10.0.0.0/24", json!({"defaultPrefixLength": 32}));
    let a = p
        .create(
            "ipclaims",
            claim("a", json!({"className": "flat", "reclaimPolicy": "Retain"})),
        )
        .unwrap();
    p.delete("ipclaims", Some("default"), "a").unwrap();
    let alloc_name = allocation_name("default", "a");
    let alloc = p
        .get("ipallocations", Some("default"), &alloc_name)
        .unwrap();
    assert!(alloc["spec"].get("claimRef").is_none());
    assert_eq!(cidr_of(&alloc), cidr_of(&a));
    let cond = &alloc["status"]["conditions"][0];
    assert_eq!(
        (
            cond["type"].as_str(),
            cond["status"].as_str(),
            cond["reason"].as_str()
        ),
        (Some("Bound"), Some("False"), Some("Retained"))
    );
    assert_eq!(
        p.get("ippools", None, "flat-pool").unwrap()["status"]["capacity"]["allocated"],
        "1"
    );

    let e = p
        .create(
            "ipclaims",
            claim("a", json!({"className": "flat", "reclaimPolicy": "Retain"})),
        )
        .unwrap_err();
    assert_eq!(e.code, 409);
    assert_eq!(e.reason, "Conflict");
    assert_eq!(
        e.message,
        format!(
            "Operation cannot be fulfilled on ipclaims.ipam.miloapis.com \"a\": an allocation under this identity \
             already exists: IPAllocation \"{alloc_name}\", retained by an earlier claim of the same name; delete it \
             to reuse the name"
        )
    );
    let d = e.details.as_ref().unwrap();
    assert_eq!(
        (d.name.as_str(), d.group.as_str(), d.kind.as_str()),
        ("a", "ipam.miloapis.com", "ipclaims")
    );
    assert_eq!(
        cause_types(&e),
        vec![(
            "AllocationRetained".to_string(),
            alloc_name.clone(),
            String::new()
        )]
    );
    assert!(p.get("ipclaims", Some("default"), "a").is_none());

    // Another name gets another address; freeing the retained allocation returns its address.
    let b = p
        .create("ipclaims", claim("b", json!({"className": "flat"})))
        .unwrap();
    assert_ne!(cidr_of(&b), cidr_of(&a));
    p.delete("ipallocations", Some("default"), &alloc_name)
        .unwrap();
    let c = p
        .create("ipclaims", claim("c", json!({"className": "flat"})))
        .unwrap();
    assert_eq!(cidr_of(&c), cidr_of(&a));
    p.create("ipclaims", claim("a", json!({"className": "flat"})))
        .unwrap();
}

#[test]
fn allocations_cannot_be_created_edited_or_deleted_while_bound() {
    let mut p = Plane::new();
    flat(&mut p, "10.0.0.0/24", json!({"defaultPrefixLength": 32}));
    p.create("ipclaims", claim("a", json!({"className": "flat"})))
        .unwrap();
    let name = allocation_name("default", "a");
    let e = p
        .delete("ipallocations", Some("default"), &name)
        .unwrap_err();
    assert_eq!(e.code, 409);
    assert!(
        e.message
            .contains("this allocation is bound to IPClaim \"a\""),
        "{}",
        e.message
    );
    let mut a = p.get("ipallocations", Some("default"), &name).unwrap();
    a["spec"]["reclaimPolicy"] = json!("Retain");
    assert_eq!(p.update("ipallocations", a).unwrap_err().code, 422);
    let mut forged = p.get("ipallocations", Some("default"), &name).unwrap();
    forged["metadata"]["name"] = json!("alloc-forged");
    let e = p.create("ipallocations", forged).unwrap_err();
    assert_eq!(e.code, 405);
}

#[test]
fn exhaustion_is_507_naming_the_pool() {
    let mut p = Plane::new();
    flat(&mut p, "10.0.0.0/31", json!({"defaultPrefixLength": 32}));
    p.create("ipclaims", claim("a", json!({"className": "flat"})))
        .unwrap();
    p.create("ipclaims", claim("b", json!({"className": "flat"})))
        .unwrap();
    let e = p
        .create("ipclaims", claim("c", json!({"className": "flat"})))
        .unwrap_err();
    assert_eq!(e.code, 507);
    assert_eq!(e.reason, "InsufficientStorage");
    let d = e.details.as_ref().unwrap();
    assert_eq!(
        (d.name.as_str(), d.group.as_str(), d.kind.as_str()),
        ("flat-pool", "ipam.miloapis.com", "ippools")
    );
    assert!(has_cause(&e, "Exhausted"));
    assert!(p.get("ipclaims", Some("default"), "c").is_none());
    assert!(
        p.get(
            "ipallocations",
            Some("default"),
            &allocation_name("default", "c")
        )
        .is_none()
    );
}

#[test]
fn an_ancestor_running_out_is_507_and_provisions_nothing() {
    let mut p = Plane::new();
    egress_inventory(&mut p, "2001:db8::/47");
    p.create("ipclaims", shard_claim("a", "dfw")).unwrap();
    p.create("ipclaims", shard_claim("b", "ord")).unwrap();
    let e = p.create("ipclaims", shard_claim("c", "sjc")).unwrap_err();
    assert_eq!(e.code, 507);
    assert!(has_cause(&e, "Exhausted"));
    assert_eq!(p.count("ippools"), 3);
    // The refused claim's carve was rolled back with it, so the index still agrees.
    p.delete("ipclaims", Some("default"), "b").unwrap();
}

#[test]
fn refusals_carry_ipam_reasons() {
    let mut p = Plane::new();
    egress_inventory(&mut p, "2001:db8::/40");

    let e = p
        .create(
            "ipclaims",
            claim("x", json!({"className": "nope", "ipFamily": "IPv6"})),
        )
        .unwrap_err();
    assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
    assert!(has_cause(&e, "ClassNotFound"));
    assert!(e.message.contains("ipam: class not found: \"nope\""));

    let e = p
        .create("ipclaims", claim("x", json!({"ipFamily": "IPv4"})))
        .unwrap_err();
    assert!(has_cause(&e, "NoDefaultClass"));

    // A /128 with no family is bounded as IPv4 before the class is read.
    let e = p
        .create("ipclaims", claim("x", json!({"className": "datum-egress-shard-address-ipv6", "prefixLength": 128, "scope": location("dfw")})))
        .unwrap_err();
    assert_eq!(e.code, 400);
    assert!(has_cause(&e, "PrefixLengthRejected"));
    assert!(e.message.contains("exceeds 32 for IPv4"), "{}", e.message);
    let e = p
        .create("ipclaims", claim("x", json!({"className": "datum-egress-shard-address-ipv6", "ipFamily": "IPv6", "prefixLength": 64, "scope": location("dfw")})))
        .unwrap_err();
    assert!(has_cause(&e, "PrefixLengthRejected"));
    assert!(e.message.contains("outside class"), "{}", e.message);

    let e = p
        .create(
            "ipclaims",
            claim(
                "x",
                json!({"className": "datum-egress-shard-address-ipv6", "ipFamily": "IPv6"}),
            ),
        )
        .unwrap_err();
    assert_eq!(e.code, 400);
    assert_eq!(
        cause_types(&e)
            .iter()
            .map(|(r, _, f)| (r.as_str(), f.as_str()))
            .collect::<Vec<_>>(),
        vec![("ScopeRolesMissing", "spec.scope.location")]
    );

    p.create(
        "ipclasses",
        class(
            "unoffered",
            json!({"ipFamily": "IPv6", "defaultPrefixLength": 128}),
        ),
    )
    .unwrap();
    let e = p
        .create(
            "ipclaims",
            claim("x", json!({"className": "unoffered", "ipFamily": "IPv6"})),
        )
        .unwrap_err();
    assert_eq!(e.code, 400);
    assert!(has_cause(&e, "NoOfferingPool"));

    // Container classes only provision.
    let e = p
        .create("ipclaims", claim("x", json!({"className": "datum-egress-shard-ipv6", "ipFamily": "IPv6", "scope": location("dfw")})))
        .unwrap_err();
    assert_eq!(e.code, 403);

    p.create("ipclaims", shard_claim("live", "dfw")).unwrap();
    let e = p
        .create("ipclaims", shard_claim("live", "dfw"))
        .unwrap_err();
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(has_cause(&e, "ClaimExists"));

    let e = p.create("ipclaims", claim("x", json!({}))).unwrap_err();
    assert_eq!(e.code, 422);
    assert_eq!(p.count("ipclaims"), 1);
    assert_eq!(p.count("ipallocations"), 1);
}

#[test]
fn scope_roles_missing_has_one_cause_per_role() {
    let mut p = Plane::new();
    flat(
        &mut p,
        "10.0.0.0/24",
        json!({"defaultPrefixLength": 32, "uniqueWithin": ["network", "location"]}),
    );
    let e = p
        .create("ipclaims", claim("x", json!({"className": "flat"})))
        .unwrap_err();
    let fields: Vec<_> = cause_types(&e)
        .into_iter()
        .map(|(r, _, f)| (r, f))
        .collect();
    assert_eq!(
        fields,
        vec![
            (
                "ScopeRolesMissing".to_string(),
                "spec.scope.location".to_string()
            ),
            (
                "ScopeRolesMissing".to_string(),
                "spec.scope.network".to_string()
            )
        ]
    );
    assert!(
        e.message.contains("roles \"location\", \"network\""),
        "{}",
        e.message
    );
}

#[test]
fn a_write_without_a_project_is_refused() {
    let mut p = Plane::new();
    p.caller = caller(None);
    let e = p
        .create("ippools", pool("root", "10.0.0.0/8", "IPv4", &[]))
        .unwrap_err();
    assert_eq!(e.code, 400);
    assert!(has_cause(&e, "NoProjectScope"));
    let e = p
        .create("ipclaims", claim("x", json!({"ipFamily": "IPv4"})))
        .unwrap_err();
    assert!(has_cause(&e, "NoProjectScope"));
}

#[test]
fn another_project_may_claim_only_consumer_facing_classes() {
    let mut p = Plane::for_project("tenant");
    flat(&mut p, "10.0.0.0/24", json!({"defaultPrefixLength": 32}));
    assert_eq!(
        p.create("ipclaims", claim("x", json!({"className": "flat"})))
            .unwrap_err()
            .code,
        403
    );
    let mut c = p.get("ipclasses", None, "flat").unwrap();
    c["spec"]["visibility"] = json!("consumer");
    p.update("ipclasses", c).unwrap();
    let v = p
        .create("ipclaims", claim("x", json!({"className": "flat"})))
        .unwrap();
    assert_eq!(v["spec"]["ownerRef"]["name"], "tenant");
}

#[test]
fn a_requested_address_is_honoured_or_refused() {
    let mut p = Plane::new();
    flat(&mut p, "10.0.0.0/24", json!({"defaultPrefixLength": 32}));
    let v = p
        .create(
            "ipclaims",
            claim("a", json!({"className": "flat", "address": "10.0.0.7"})),
        )
        .unwrap();
    assert_eq!(cidr_of(&v), "10.0.0.7/32");
    let e = p
        .create(
            "ipclaims",
            claim("b", json!({"className": "flat", "address": "10.0.0.7"})),
        )
        .unwrap_err();
    assert_eq!(e.code, 409);
    let e = p
        .create(
            "ipclaims",
            claim("b", json!({"className": "flat", "address": "10.9.0.7"})),
        )
        .unwrap_err();
    assert_eq!(e.code, 400);
    let e = p
        .create(
            "ipclaims",
            claim("b", json!({"className": "flat", "address": "bogus"})),
        )
        .unwrap_err();
    assert_eq!(e.code, 400);
}

#[test]
fn claim_immutable_fields_are_refused_on_update() {
    let mut p = Plane::new();
    egress_inventory(&mut p, "2001:db8::/40");
    let v = p.create("ipclaims", shard_claim("a", "dfw")).unwrap();
    for (field, value) in [
        ("className", json!("other")),
        ("ipFamily", json!("IPv4")),
        ("prefixLength", json!(64)),
        ("address", json!("2001:db8::9")),
        ("scope", location("ord")),
    ] {
        let mut n = v.clone();
        n["spec"][field] = value;
        let e = p.update("ipclaims", n).unwrap_err();
        assert_eq!(e.code, 422, "{field}");
        assert!(
            e.message.contains(&format!("spec.{field} is immutable")),
            "{}",
            e.message
        );
    }
}

#[test]
fn a_rollback_the_hook_never_saw_is_noticed() {
    let mut p = Plane::new();
    flat(&mut p, "10.0.0.0/24", json!({"defaultPrefixLength": 32}));
    let a = p
        .create("ipclaims", claim("a", json!({"className": "flat"})))
        .unwrap();
    // The plane fails after the hook bound "b" and rolls back; the index must not keep the
    // address as taken, nor (worse) keep a release that was rolled back.
    p.create_then_fail("ipclaims", claim("b", json!({"className": "flat"})));
    let b = p
        .create("ipclaims", claim("b", json!({"className": "flat"})))
        .unwrap();
    assert_eq!(cidr_of(&b), "10.0.0.1/32");
    let r = p.transact(|h, txn, c| {
        let obj = txn.get(&res("ipclaims"), Some("default"), "a").unwrap();
        h.before_delete(txn, c, &res("ipclaims"), &obj)?;
        Err(Status::failure("storage failed", "InternalError").with_code(500))
    });
    assert!(r.is_err());
    let c = p
        .create("ipclaims", claim("c", json!({"className": "flat"})))
        .unwrap();
    assert_ne!(cidr_of(&c), cidr_of(&a));
    assert_eq!(cidr_of(&c), "10.0.0.2/32");
}

#[test]
fn a_fresh_hook_rebuilds_its_index_from_the_store() {
    let mut p = Plane::new();
    egress_inventory(&mut p, "2001:db8::/40");
    p.create("ipclaims", shard_claim("a", "dfw")).unwrap();
    p.create("ipclaims", shard_claim("b", "ord")).unwrap();
    // As after a restart: same objects, new hooks.
    p.hooks = IpamHooks::new(PLATFORM, PLATFORM);
    assert_eq!(
        cidr_of(&p.create("ipclaims", shard_claim("c", "dfw")).unwrap()),
        "2001:db8::1/128"
    );
    assert_eq!(
        cidr_of(&p.create("ipclaims", shard_claim("d", "sjc")).unwrap()),
        "2001:db8:2::/128"
    );
}

#[test]
fn a_hundred_thousand_live_allocations_in_one_pool() {
    let mut p = Plane::new();
    flat(&mut p, "2001:db8::/64", json!({"defaultPrefixLength": 128}));
    const N: u32 = 100_000;
    let nth = |i: u32| {
        format!(
            "{}/128",
            std::net::Ipv6Addr::from(0x2001_0db8_u128 << 96 | u128::from(i))
        )
    };
    for i in 0..N {
        let v = p
            .create(
                "ipclaims",
                claim(&format!("c{i}"), json!({"className": "flat"})),
            )
            .unwrap();
        if i % 25_000 == 1 {
            assert_eq!(cidr_of(&v), nth(i));
        }
    }
    p.delete("ipclaims", Some("default"), "c4242").unwrap();
    let v = p
        .create("ipclaims", claim("again", json!({"className": "flat"})))
        .unwrap();
    assert_eq!(cidr_of(&v), nth(4242));
    let pool = p.get("ippools", None, "flat-pool").unwrap();
    assert_eq!(pool["status"]["capacity"]["allocated"], N.to_string());
}

#[test]
fn the_planes_own_admin_writes_act_for_its_project() {
    let mut p = Plane::new();
    p.caller = Caller {
        user: "system:admin".into(),
        groups: vec!["system:masters".into()],
        project: None,
    };
    flat(&mut p, "10.0.0.0/24", json!({"defaultPrefixLength": 32}));
    let v = p
        .create("ipclaims", claim("a", json!({"className": "flat"})))
        .unwrap();
    assert_eq!(v["spec"]["ownerRef"]["name"], PLATFORM);

    // A plane of no project (the cell) refuses even the admin.
    p.hooks = IpamHooks::unscoped(PLATFORM);
    let e = p
        .create("ipclaims", claim("b", json!({"className": "flat"})))
        .unwrap_err();
    assert!(has_cause(&e, "NoProjectScope"));
}
