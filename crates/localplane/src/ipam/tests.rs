//! The IPAM rules, driven through a real project [`Plane`]: its admission, its transactions and
//! its hook seam, exactly as HTTP requests reach them, minus the HTTP.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use kube::core::Status;
use serde_json::{Value, json};

use super::digest::allocation_name;
use super::realm::Realm;
use super::{IpamHooks, crds};
use crate::hooks::{Caller, PlaneTxn, ResourceKey, StorageHooks};
use crate::locks;
use crate::plane::{DeleteOpts, Deletion, Plane, Target, WriteOpts};
use crate::testing::{causes, has_cause};

const PLATFORM: &str = "platform";
const VERSION: &str = "v1alpha1";

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

/// The plane's IPAM hooks behind a handle a test can swap, as a restart swaps them.
struct Swappable(RwLock<Arc<IpamHooks>>);

impl StorageHooks for Swappable {
    fn handles(&self, r: &ResourceKey) -> bool {
        locks::read(&self.0).handles(r)
    }
    fn before_create(
        &self,
        txn: &mut dyn PlaneTxn,
        c: &Caller,
        r: &ResourceKey,
        obj: &mut Value,
    ) -> Result<(), Status> {
        locks::read(&self.0).before_create(txn, c, r, obj)
    }
    fn before_update(
        &self,
        txn: &mut dyn PlaneTxn,
        c: &Caller,
        r: &ResourceKey,
        old: &Value,
        new: &mut Value,
    ) -> Result<(), Status> {
        locks::read(&self.0).before_update(txn, c, r, old, new)
    }
    fn before_delete(
        &self,
        txn: &mut dyn PlaneTxn,
        c: &Caller,
        r: &ResourceKey,
        obj: &Value,
    ) -> Result<(), Status> {
        locks::read(&self.0).before_delete(txn, c, r, obj)
    }
}

/// A hook registered after IPAM's that fails the next claim write when armed: the plane then
/// rolls back what IPAM did, and IPAM never hears of it.
#[derive(Default)]
struct FailNext(AtomicBool);

impl FailNext {
    fn check(&self) -> Result<(), Status> {
        if self.0.swap(false, Ordering::SeqCst) {
            return Err(Status::failure("storage failed", "InternalError").with_code(500));
        }
        Ok(())
    }
}

impl StorageHooks for FailNext {
    fn handles(&self, r: &ResourceKey) -> bool {
        *r == res("ipclaims")
    }
    fn before_create(
        &self,
        _: &mut dyn PlaneTxn,
        _: &Caller,
        _: &ResourceKey,
        _: &mut Value,
    ) -> Result<(), Status> {
        self.check()
    }
    fn before_update(
        &self,
        _: &mut dyn PlaneTxn,
        _: &Caller,
        _: &ResourceKey,
        _: &Value,
        _: &mut Value,
    ) -> Result<(), Status> {
        self.check()
    }
    fn before_delete(
        &self,
        _: &mut dyn PlaneTxn,
        _: &Caller,
        _: &ResourceKey,
        _: &Value,
    ) -> Result<(), Status> {
        self.check()
    }
}

/// One project plane serving IPAM, and the caller its requests come from.
struct Ipam {
    plane: Plane,
    caller: Caller,
    hooks: Arc<Swappable>,
    fail_next: Arc<FailNext>,
}

impl Ipam {
    fn new() -> Self {
        Self::for_project(PLATFORM)
    }

    fn for_project(project: &str) -> Self {
        Self::in_realm(project, &Realm::new())
    }

    /// A project plane of `realm`, whose classes may refer to the classes of its other planes.
    fn in_realm(project: &str, realm: &Arc<Realm>) -> Self {
        let plane = Plane::new(project, Some(project), 1000);
        plane.add_crds(crds()).expect("the IPAM CRDs load");
        let ipam = Arc::new(IpamHooks::in_realm(
            realm.clone(),
            Some(project.into()),
            PLATFORM.into(),
        ));
        realm.join(project, &plane, &ipam);
        let hooks = Arc::new(Swappable(RwLock::new(ipam)));
        let fail_next = Arc::new(FailNext::default());
        plane.add_hooks(hooks.clone());
        plane.add_hooks(fail_next.clone());
        Self {
            plane,
            caller: caller(Some(project)),
            hooks,
            fail_next,
        }
    }

    /// Replaces the IPAM hooks, as a restarted server starts with the stored objects only.
    fn restart_hooks(&self, hooks: IpamHooks) {
        *locks::write(&self.hooks.0) = Arc::new(hooks);
    }

    /// [`Ipam::restart_hooks`] for a plane of `realm`, whose new hooks the realm then reaches.
    fn restart_in(&self, realm: &Arc<Realm>) {
        let project = self.plane.project().expect("a project plane").to_string();
        let hooks = Arc::new(IpamHooks::in_realm(
            realm.clone(),
            Some(project.clone()),
            PLATFORM.into(),
        ));
        realm.join(&project, &self.plane, &hooks);
        *locks::write(&self.hooks.0) = hooks;
    }

    fn target<'a>(
        &self,
        def: &'a Arc<crate::resources::ResourceDef>,
        obj: &'a Value,
    ) -> Target<'a> {
        Target {
            def,
            version: VERSION,
            ns: obj["metadata"]["namespace"].as_str(),
            status: false,
        }
    }

    fn def(&self, plural: &str) -> Arc<crate::resources::ResourceDef> {
        self.plane.def(&res(plural)).expect("IPAM kinds are served")
    }

    fn create(&self, plural: &str, obj: Value) -> Result<Value, Status> {
        self.create_with(plural, obj, &WriteOpts::default())
    }

    fn create_with(&self, plural: &str, obj: Value, opts: &WriteOpts) -> Result<Value, Status> {
        let def = self.def(plural);
        let ns = obj.clone();
        self.plane
            .create(self.target(&def, &ns), obj, &self.caller, opts)
            .map(|w| w.obj)
            .map_err(|e| e.0)
    }

    fn update(&self, plural: &str, obj: Value) -> Result<Value, Status> {
        let def = self.def(plural);
        let at = obj.clone();
        let name = at["metadata"]["name"].as_str().unwrap_or("");
        self.plane
            .update(
                self.target(&def, &at),
                name,
                obj,
                &self.caller,
                &WriteOpts::default(),
            )
            .map(|w| w.obj)
            .map_err(|e| e.0)
    }

    fn delete(&self, plural: &str, ns: Option<&str>, name: &str) -> Result<(), Status> {
        let d = Deletion {
            def: &self.def(plural),
            ns,
            name,
            opts: &DeleteOpts::default(),
            caller: &self.caller,
        };
        self.plane.delete(d).map(|_| ()).map_err(|e| e.0)
    }

    fn get(&self, plural: &str, ns: Option<&str>, name: &str) -> Option<Value> {
        self.plane.object(&res(plural), ns, name)
    }

    fn count(&self, plural: &str) -> usize {
        self.plane.objects(&res(plural), None).len()
    }

    /// A claim that must bind.
    fn bind(&self, c: Claim) -> Value {
        let name = c.name.clone();
        self.create("ipclaims", c.into_value())
            .unwrap_or_else(|e| panic!("claim {name} was refused: {}", e.message))
    }

    /// A claim that must be refused; nothing of it may be left behind.
    fn refuse(&self, c: Claim) -> Status {
        let name = c.name.clone();
        let e = self
            .create("ipclaims", c.into_value())
            .expect_err("the claim is refused");
        assert!(
            self.claim(&name).is_none(),
            "refused claim {name} was stored"
        );
        e
    }

    fn release(&self, name: &str) {
        self.delete("ipclaims", Some("default"), name)
            .unwrap_or_else(|e| panic!("releasing {name}: {}", e.message));
    }

    fn claim(&self, name: &str) -> Option<Value> {
        self.get("ipclaims", Some("default"), name)
    }

    /// The IPAllocation a claim of this name binds to.
    fn allocation(&self, claim: &str) -> Option<Value> {
        self.get(
            "ipallocations",
            Some("default"),
            &allocation_name("default", claim),
        )
    }

    fn pool(&self, name: &str) -> Value {
        self.get("ippools", None, name).expect("the pool exists")
    }
}

/// An IPClaim in namespace `default`, built up field by field.
struct Claim {
    name: String,
    spec: Value,
}

fn claim(name: &str) -> Claim {
    Claim {
        name: name.into(),
        spec: json!({}),
    }
}

/// A claim of the flat test class ([`flat`]).
fn flat_claim(name: &str) -> Claim {
    claim(name).with("className", json!("flat"))
}

/// An egress shard's claim, as the controller makes it.
fn shard_claim(name: &str, loc: &str) -> Claim {
    claim(name)
        .with("className", json!("datum-egress-shard-address-ipv6"))
        .with("ipFamily", json!("IPv6"))
        .with("prefixLength", json!(128))
        .with("target", json!("Block"))
        .with("reclaimPolicy", json!("Delete"))
        .with("scope", location(loc))
}

impl Claim {
    fn with(mut self, field: &str, value: Value) -> Self {
        self.spec[field] = value;
        self
    }

    fn into_value(self) -> Value {
        json!({
            "apiVersion": "ipam.miloapis.com/v1alpha1", "kind": "IPClaim",
            "metadata": {"name": self.name, "namespace": "default"},
            "spec": self.spec,
        })
    }
}

fn pool(name: &str, cidr: &str, family: &str, classes: &[&str]) -> Value {
    json!({
        "apiVersion": "ipam.miloapis.com/v1alpha1", "kind": "IPPool",
        "metadata": {"name": name},
        "spec": {"cidr": cidr, "ipFamily": family, "classNames": classes},
    })
}

fn child_pool(name: &str, parent: &str, spec: Value) -> Value {
    let mut spec = spec;
    spec["parentPoolRef"] = json!({"name": parent});
    json!({"metadata": {"name": name}, "spec": spec})
}

fn class(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "ipam.miloapis.com/v1alpha1", "kind": "IPClass",
        "metadata": {"name": name},
        "spec": spec,
    })
}

fn location(name: &str) -> Value {
    json!({"location": {"apiGroup": "networking.datumapis.com", "kind": "Location", "name": name}})
}

/// The shipped `config/ipam/egress-shard-ipv6.yaml`, with the root pool's empty `cidr` filled
/// in as an operator would.
fn egress_inventory(p: &Ipam, cidr: &str) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../config/ipam/egress-shard-ipv6.yaml"
    );
    let text = std::fs::read_to_string(path).expect("config/ipam/egress-shard-ipv6.yaml");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("the inventory parses");
    for mut d in docs.into_iter().filter(Value::is_object) {
        let plural = match d["kind"].as_str() {
            Some("IPPool") => {
                d["spec"]["cidr"] = json!(cidr);
                "ippools"
            }
            Some("IPClass") => "ipclasses",
            other => panic!("unexpected kind {other:?} in the inventory"),
        };
        p.create(plural, d).unwrap();
    }
}

/// A flat class drawing straight from one pool.
fn flat(p: &Ipam, cidr: &str, class_spec: Value) {
    let fam = if cidr.contains(':') { "IPv6" } else { "IPv4" };
    p.create("ippools", pool("flat-pool", cidr, fam, &["flat"]))
        .unwrap();
    let mut spec = class_spec;
    spec["ipFamily"] = json!(fam);
    p.create("ipclasses", class("flat", spec)).unwrap();
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
    let p = Ipam::new();
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
        causes(&e)
            .iter()
            .any(|(r, _, f)| r == "FieldValueRequired" && f == "spec.cidr")
    );
    assert_eq!(p.count("ippools"), 0);
}

#[test]
fn a_root_pool_is_ready_with_capacity_as_decimal_strings() {
    let p = Ipam::new();
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
    let p = Ipam::new();
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
    let e = p
        .create(
            "ippools",
            child_pool(
                "child",
                "parent",
                json!({"cidr": "10.0.0.0/24", "prefixLength": 24}),
            ),
        )
        .unwrap_err();
    assert!(causes(&e).iter().any(|(_, _, f)| f == "spec.cidr"));
    let e = p
        .create("ippools", child_pool("child", "parent", json!({})))
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
            child_pool("child", "nope", json!({"prefixLength": 24})),
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
    let p = Ipam::new();
    p.create("ippools", pool("parent", "10.0.0.0/16", "IPv4", &[]))
        .unwrap();
    let child = |name: &str| child_pool(name, "parent", json!({"prefixLength": 24}));
    let a = p.create("ippools", child("a")).unwrap();
    let b = p.create("ippools", child("b")).unwrap();
    assert_eq!(cidr_of(&a), "10.0.0.0/24");
    assert_eq!(cidr_of(&b), "10.0.1.0/24");
    assert_eq!(a["status"]["ipFamily"], "IPv4");
    assert_eq!(
        a["status"]["conditions"][0]["message"],
        "CIDR 10.0.0.0/24 allocated from parent"
    );
    assert_eq!(p.pool("parent")["status"]["capacity"]["allocated"], "512");
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
    let p = Ipam::new();
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
        let causes = causes(&e);
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
    let p = Ipam::new();
    let mut root = pool("flat-pool", "10.0.0.0/30", "IPv4", &["flat"]);
    root["spec"]["reservations"] = json!({"leading": 1, "trailing": 1});
    let v = p.create("ippools", root).unwrap();
    assert_eq!(v["status"]["capacity"]["allocated"], "2");
    // Rows, as in Milo: no IPAllocation stands for a reservation, so no DELETE reaches one.
    assert_eq!(p.count("ipallocations"), 0);
    p.create(
        "ipclasses",
        class(
            "flat",
            json!({"ipFamily": "IPv4", "defaultPrefixLength": 32}),
        ),
    )
    .unwrap();
    assert_eq!(cidr_of(&p.bind(flat_claim("a"))), "10.0.0.1/32");
    assert_eq!(cidr_of(&p.bind(flat_claim("b"))), "10.0.0.2/32");
    assert_eq!(p.refuse(flat_claim("c")).code, 507);
    // Reservations alone do not keep a pool alive.
    p.release("a");
    p.release("b");
    p.delete("ippools", None, "flat-pool").unwrap();
}

#[test]
fn each_locations_anycast_address_is_reserved_by_the_shipped_inventory() {
    let p = Ipam::new();
    egress_inventory(&p, "2001:db8::/40");
    for (i, loc) in ["dfw", "ord", "sjc"].iter().enumerate() {
        let first = p.bind(shard_claim(&format!("first-{loc}"), loc));
        let block = std::net::Ipv6Addr::from(0x2001_0db8_u128 << 96 | (i as u128) << 80);
        assert_eq!(cidr_of(&first), format!("{block}1/128"), "{loc}");
        let pool = p.pool(first["status"]["poolRef"]["name"].as_str().unwrap());
        assert_eq!(
            pool["spec"]["reservations"],
            json!({"leading": 1, "unitPrefixLength": 128}),
            "the pool carries the class's reservations"
        );
        assert_eq!(pool["status"]["capacity"]["allocated"], "2", "{loc}");
        // Asked for by name, the anycast address is as taken as any claim's.
        let e = p.refuse(
            shard_claim(&format!("anycast-{loc}"), loc)
                .with("address", json!(format!("{block}/128"))),
        );
        assert_eq!(e.code, 409, "{}", e.message);
        assert!(
            e.message.contains("address already allocated"),
            "{}",
            e.message
        );
    }
    // Released and claimed again, the first address handed out is still ::1.
    p.release("first-dfw");
    assert_eq!(
        cidr_of(&p.bind(shard_claim("again", "dfw"))),
        "2001:db8::1/128"
    );
    // Emptied of claims, the pool still counts its reservation.
    let dfw = p.claim("again").unwrap()["status"]["poolRef"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    p.release("again");
    assert_eq!(p.pool(&dfw)["status"]["capacity"]["allocated"], "1");
}

// ---------------------------------------------------------------- classes

#[test]
fn class_validation_rules() {
    let p = Ipam::new();
    let refused = |spec: Value, want: &str| {
        let e = p.create("ipclasses", class("c", spec)).unwrap_err();
        assert_eq!(e.code, 422, "{}", e.message);
        assert!(e.message.contains(want), "{want:?} not in {}", e.message);
    };
    refused(
        json!({"defaultPrefixLength": 128}),
        "ipFamily is required: a class hands out one address family, and dual-stack is two classes",
    );
    refused(
        json!({"ipFamily": "IPv4", "allowedPrefixLengths": {"min": 24, "max": 64}}),
        "does not fit IPv4",
    );
    refused(
        json!({"ipFamily": "IPv6", "allowedPrefixLengths": {"min": 64, "max": 48}}),
        "must not exceed",
    );
    refused(
        json!({"ipFamily": "IPv6", "allowedPrefixLengths": {"min": 64, "max": 96}, "defaultPrefixLength": 128}),
        "outside allowedPrefixLengths",
    );
    refused(
        json!({"ipFamily": "IPv6", "parentClassName": "missing"}),
        "parent class \"missing\" not found",
    );
    p.create(
        "ipclasses",
        class("v4", json!({"ipFamily": "IPv4", "defaultPrefixLength": 24})),
    )
    .unwrap();
    refused(
        json!({"ipFamily": "IPv6", "parentClassName": "v4"}),
        "a chain is one family",
    );
    refused(
        json!({"ipFamily": "IPv4", "parentClassName": "v4", "defaultPrefixLength": 16}),
        "not smaller than",
    );
    refused(
        json!({"ipFamily": "IPv4", "poolPer": ["a", "a"]}),
        "duplicate role",
    );
    refused(
        json!({"ipFamily": "IPv4", "reservations": {"leading": 1}}),
        "need poolPer",
    );

    let mut d1 = class("d1", json!({"ipFamily": "IPv4"}));
    d1["metadata"]["annotations"] = json!({"ipam.miloapis.com/is-default-class": "true"});
    p.create("ipclasses", d1.clone()).unwrap();
    d1["metadata"]["name"] = json!("d2");
    let e = p.create("ipclasses", d1).unwrap_err();
    assert!(e.message.contains("already the default"), "{}", e.message);
}

#[test]
fn class_defaults_and_required_roles() {
    let p = Ipam::new();
    egress_inventory(&p, "2001:db8::/40");
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
    let p = Ipam::new();
    egress_inventory(&p, "2001:db8::/40");
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
            causes(&e)
                .iter()
                .any(|(r, _, f)| r == "FieldValueForbidden" && f == &format!("spec.{field}")),
            "{field}: {:?}",
            causes(&e)
        );
    }
    let mut n = v.clone();
    n["spec"]["reclaimPolicy"] = json!("Retain");
    p.update("ipclasses", n).unwrap();
}

// ---------------------------------------------------------------- claims

#[test]
fn a_claim_binds_synchronously_through_the_cascade() {
    let p = Ipam::new();
    egress_inventory(&p, "2001:db8::/40");
    let name = "egress-shard-ipv6.ns.node-a";
    let v = p.bind(shard_claim(name, "dfw").with(
        "ownerRef",
        json!({"apiGroup": "x", "kind": "Y", "name": "z", "namespace": "w"}),
    ));
    assert_eq!(v["status"]["phase"], "Bound");
    // The block's first address is its reserved Subnet-Router anycast address.
    assert_eq!(cidr_of(&v), "2001:db8::1/128");
    assert!(v["status"].get("address").is_none());
    assert_eq!(
        v["spec"]["ownerRef"],
        json!({"apiGroup": "resourcemanager.miloapis.com", "kind": "Project", "name": PLATFORM})
    );
    let alloc_name = allocation_name("default", name);
    assert_eq!(v["status"]["boundAllocationRef"]["name"], alloc_name);

    // The per-location pool, named and labelled per the service, carved from the root.
    let pool_name = v["status"]["poolRef"]["name"].as_str().unwrap().to_string();
    assert!(
        pool_name.starts_with("datum-egress-shard-ipv6-dfw-"),
        "{pool_name}"
    );
    assert_eq!(pool_name.len(), "datum-egress-shard-ipv6-dfw-".len() + 8);
    let child = p.pool(&pool_name);
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
    // The claim's address and the reserved anycast address.
    assert_eq!(child["status"]["capacity"]["allocated"], "2");
    assert_eq!(
        p.pool("datum-egress-shard-ipv6-root")["status"]["capacity"]["allocated"],
        (1u128 << 80).to_string()
    );

    let a = p.allocation(name).unwrap();
    assert_eq!(a["spec"]["claimRef"]["name"], name);
    assert_eq!(a["spec"]["reclaimPolicy"], "Delete");
    assert_eq!(a["spec"]["purpose"], "Claim");
    assert_eq!(a["spec"]["poolRef"]["name"], pool_name);
    assert_eq!(a["spec"]["ownerRef"]["name"], PLATFORM);
    assert_eq!(cidr_of(&a), "2001:db8::1/128");

    assert_eq!(cidr_of(&p.bind(shard_claim("b", "dfw"))), "2001:db8::2/128");
    assert_eq!(
        cidr_of(&p.bind(shard_claim("c", "ord"))),
        "2001:db8:1::1/128"
    );
    assert_eq!(p.count("ippools"), 3);
}

#[test]
fn addresses_are_unique_within_the_class_space() {
    let p = Ipam::new();
    flat(
        &p,
        "10.0.0.0/24",
        json!({"defaultPrefixLength": 32, "uniqueWithin": ["network"]}),
    );
    let net = |n: &str| json!({"network": {"apiGroup": "networking.datumapis.com", "kind": "Network", "name": n}});
    let a = p.bind(flat_claim("a").with("scope", net("one")));
    let b = p.bind(flat_claim("b").with("scope", net("two")));
    let c = p.bind(flat_claim("c").with("scope", net("one")));
    assert_eq!(cidr_of(&a), "10.0.0.0/32");
    assert_eq!(cidr_of(&b), "10.0.0.0/32");
    assert_eq!(cidr_of(&c), "10.0.0.1/32");
    // The same address held in two spaces counts once.
    assert_eq!(p.pool("flat-pool")["status"]["capacity"]["allocated"], "2");
}

#[test]
fn an_empty_unique_within_is_one_platform_wide_space() {
    let p = Ipam::new();
    flat(&p, "10.0.0.0/24", json!({"defaultPrefixLength": 32}));
    let net = |n: &str| json!({"network": {"apiGroup": "g", "kind": "Network", "name": n}});
    let a = p.bind(flat_claim("a").with("scope", net("one")));
    let b = p.bind(flat_claim("b").with("scope", net("two")));
    assert_ne!(cidr_of(&a), cidr_of(&b));
}

#[test]
fn delete_policy_frees_the_address_for_the_next_claim() {
    let p = Ipam::new();
    egress_inventory(&p, "2001:db8::/40");
    let a = p.bind(shard_claim("a", "dfw"));
    p.bind(shard_claim("b", "dfw"));
    p.release("a");
    assert!(p.allocation("a").is_none());
    let c = p.bind(shard_claim("c", "dfw"));
    assert_eq!(cidr_of(&c), cidr_of(&a));
    // A same-named claim after a Delete release is an ordinary new claim.
    p.bind(shard_claim("a", "dfw"));
}

#[test]
fn reclaim_policy_is_fixed_at_bind_time() {
    let p = Ipam::new();
    flat(
        &p,
        "10.0.0.0/24",
        json!({"defaultPrefixLength": 32, "reclaimPolicy": "Retain"}),
    );
    let v = p.bind(flat_claim("a"));
    assert_eq!(
        p.allocation("a").unwrap()["spec"]["reclaimPolicy"],
        "Retain"
    );
    // Changing the claim's policy afterwards changes nothing on delete.
    let mut n = v.clone();
    n["spec"]["reclaimPolicy"] = json!("Delete");
    p.update("ipclaims", n).unwrap();
    p.release("a");
    assert!(p.allocation("a").is_some());
    // The claim's own policy wins over the class's.
    p.bind(flat_claim("b").with("reclaimPolicy", json!("Delete")));
    assert_eq!(
        p.allocation("b").unwrap()["spec"]["reclaimPolicy"],
        "Delete"
    );
}

#[test]
fn retain_keeps_the_address_and_refuses_the_same_name() {
    let p = Ipam::new();
    flat(&p, "10.0.0.0/24", json!({"defaultPrefixLength": 32}));
    let retained = || flat_claim("a").with("reclaimPolicy", json!("Retain"));
    let a = p.bind(retained());
    p.release("a");
    let alloc_name = allocation_name("default", "a");
    let alloc = p.allocation("a").unwrap();
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
    assert_eq!(p.pool("flat-pool")["status"]["capacity"]["allocated"], "1");

    let e = p.refuse(retained());
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
        causes(&e),
        vec![(
            "AllocationRetained".to_string(),
            alloc_name.clone(),
            String::new()
        )]
    );

    // Another name gets another address; freeing the retained allocation returns its address.
    let b = p.bind(flat_claim("b"));
    assert_ne!(cidr_of(&b), cidr_of(&a));
    p.delete("ipallocations", Some("default"), &alloc_name)
        .unwrap();
    let c = p.bind(flat_claim("c"));
    assert_eq!(cidr_of(&c), cidr_of(&a));
    p.bind(flat_claim("a"));
}

#[test]
fn allocations_cannot_be_created_edited_or_deleted_while_bound() {
    let p = Ipam::new();
    flat(&p, "10.0.0.0/24", json!({"defaultPrefixLength": 32}));
    p.bind(flat_claim("a"));
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
    let mut a = p.allocation("a").unwrap();
    a["spec"]["reclaimPolicy"] = json!("Retain");
    assert_eq!(p.update("ipallocations", a).unwrap_err().code, 422);
    let mut forged = p.allocation("a").unwrap();
    forged["metadata"]["name"] = json!("alloc-forged");
    let e = p.create("ipallocations", forged).unwrap_err();
    assert_eq!(e.code, 405);
}

#[test]
fn exhaustion_is_507_naming_the_pool() {
    let p = Ipam::new();
    flat(&p, "10.0.0.0/31", json!({"defaultPrefixLength": 32}));
    p.bind(flat_claim("a"));
    p.bind(flat_claim("b"));
    let e = p.refuse(flat_claim("c"));
    assert_eq!(e.code, 507);
    assert_eq!(e.reason, "InsufficientStorage");
    let d = e.details.as_ref().unwrap();
    assert_eq!(
        (d.name.as_str(), d.group.as_str(), d.kind.as_str()),
        ("flat-pool", "ipam.miloapis.com", "ippools")
    );
    assert!(has_cause(&e, "Exhausted"));
    assert!(p.allocation("c").is_none());
}

#[test]
fn an_ancestor_running_out_is_507_and_provisions_nothing() {
    let p = Ipam::new();
    egress_inventory(&p, "2001:db8::/47");
    p.bind(shard_claim("a", "dfw"));
    p.bind(shard_claim("b", "ord"));
    let e = p.refuse(shard_claim("c", "sjc"));
    assert_eq!(e.code, 507);
    assert!(has_cause(&e, "Exhausted"));
    assert_eq!(p.count("ippools"), 3);
    // The refused claim's carve was rolled back with it, so the index still agrees.
    p.release("b");
}

#[test]
fn refusals_carry_ipam_reasons() {
    let p = Ipam::new();
    egress_inventory(&p, "2001:db8::/40");
    let leaf = || claim("x").with("className", json!("datum-egress-shard-address-ipv6"));

    let e = p.refuse(
        claim("x")
            .with("className", json!("nope"))
            .with("ipFamily", json!("IPv6")),
    );
    assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
    assert!(has_cause(&e, "ClassNotFound"));
    assert!(e.message.contains("ipam: class not found: \"nope\""));

    let e = p.refuse(claim("x").with("ipFamily", json!("IPv4")));
    assert!(has_cause(&e, "NoDefaultClass"));

    // A /128 with no family is bounded as IPv4 before the class is read.
    let e = p.refuse(
        leaf()
            .with("prefixLength", json!(128))
            .with("scope", location("dfw")),
    );
    assert_eq!(e.code, 400);
    assert!(has_cause(&e, "PrefixLengthRejected"));
    assert!(e.message.contains("exceeds 32 for IPv4"), "{}", e.message);
    let e = p.refuse(
        leaf()
            .with("ipFamily", json!("IPv6"))
            .with("prefixLength", json!(64))
            .with("scope", location("dfw")),
    );
    assert!(has_cause(&e, "PrefixLengthRejected"));
    assert!(e.message.contains("outside class"), "{}", e.message);

    let e = p.refuse(leaf().with("ipFamily", json!("IPv6")));
    assert_eq!(e.code, 400);
    assert_eq!(
        causes(&e)
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
    let e = p.refuse(
        claim("x")
            .with("className", json!("unoffered"))
            .with("ipFamily", json!("IPv6")),
    );
    assert_eq!(e.code, 400);
    assert!(has_cause(&e, "NoOfferingPool"));

    p.bind(shard_claim("live", "dfw"));
    let e = p
        .create("ipclaims", shard_claim("live", "dfw").into_value())
        .unwrap_err();
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(has_cause(&e, "ClaimExists"));

    assert_eq!(p.refuse(claim("x")).code, 422);
    assert_eq!(p.count("ipclaims"), 1);
    assert_eq!(p.count("ipallocations"), 1);
}

#[test]
fn scope_roles_missing_has_one_cause_per_role() {
    let p = Ipam::new();
    flat(
        &p,
        "10.0.0.0/24",
        json!({"defaultPrefixLength": 32, "uniqueWithin": ["network", "location"]}),
    );
    let e = p.refuse(flat_claim("x"));
    let fields: Vec<_> = causes(&e).into_iter().map(|(r, _, f)| (r, f)).collect();
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
    let mut p = Ipam::new();
    p.caller = caller(None);
    let e = p
        .create("ippools", pool("root", "10.0.0.0/8", "IPv4", &[]))
        .unwrap_err();
    assert_eq!(e.code, 400);
    assert!(has_cause(&e, "NoProjectScope"));
    let e = p.refuse(claim("x").with("ipFamily", json!("IPv4")));
    assert!(has_cause(&e, "NoProjectScope"));
}

#[test]
fn another_project_may_claim_any_class() {
    // The line production runs has no class visibility gate: a class marked for the platform
    // alone is handed to another project too.
    let p = Ipam::for_project("tenant");
    flat(
        &p,
        "10.0.0.0/24",
        json!({"defaultPrefixLength": 32, "visibility": "platform"}),
    );
    let v = p.bind(flat_claim("x"));
    assert_eq!(v["spec"]["ownerRef"]["name"], "tenant");
}

#[test]
fn a_container_class_is_claimed_as_a_class_that_provisions_nothing_below_it() {
    // 2f31bea has no container-class gate: a claim naming a class with poolPer binds from the
    // pools of its chain, and needs none of the roles its own poolPer names.
    let p = Ipam::for_project("tenant");
    egress_inventory(&p, "2001:db8::/40");
    let range = p.bind(
        claim("range")
            .with("className", json!("datum-egress-shard-ipv6"))
            .with("ipFamily", json!("IPv6"))
            .with("reclaimPolicy", json!("Delete")),
    );
    assert_eq!(cidr_of(&range), "2001:db8::/48");
    assert_eq!(
        range["status"]["poolRef"]["name"],
        "datum-egress-shard-ipv6-root"
    );
    assert_eq!(p.allocation("range").unwrap()["spec"]["purpose"], "Claim");
    // The range is taken like any block: the first location's pool is carved after it.
    assert_eq!(
        cidr_of(&p.bind(shard_claim("s", "dfw"))),
        "2001:db8:1::1/128"
    );
    p.release("range");
    assert_eq!(cidr_of(&p.bind(shard_claim("t", "ord"))), "2001:db8::1/128");

    // A container class no pool offers gets the 400 of any class nobody backs.
    p.create(
        "ipclasses",
        class(
            "holder",
            json!({"ipFamily": "IPv4", "defaultPrefixLength": 24, "poolPer": ["network"]}),
        ),
    )
    .unwrap();
    let e = p.refuse(claim("y").with("className", json!("holder")));
    assert_eq!(e.code, 400, "{}", e.message);
    assert!(has_cause(&e, "NoOfferingPool"), "{e:?}");
}

#[test]
fn a_requested_address_is_honoured_or_refused() {
    let p = Ipam::new();
    flat(&p, "10.0.0.0/24", json!({"defaultPrefixLength": 32}));
    let at = |name: &str, address: &str| flat_claim(name).with("address", json!(address));
    assert_eq!(cidr_of(&p.bind(at("a", "10.0.0.7"))), "10.0.0.7/32");
    assert_eq!(p.refuse(at("b", "10.0.0.7")).code, 409);
    assert_eq!(p.refuse(at("b", "10.9.0.7")).code, 400);
    assert_eq!(p.refuse(at("b", "bogus")).code, 400);
}

#[test]
fn claim_immutable_fields_are_refused_on_update() {
    let p = Ipam::new();
    egress_inventory(&p, "2001:db8::/40");
    let v = p.bind(shard_claim("a", "dfw"));
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
    let p = Ipam::new();
    flat(&p, "10.0.0.0/24", json!({"defaultPrefixLength": 32}));
    let a = p.bind(flat_claim("a"));
    // The plane fails after the hook bound "b" and rolls back; the index must not keep the
    // address as taken, nor (worse) keep a release that was rolled back.
    p.fail_next.0.store(true, Ordering::SeqCst);
    assert_eq!(p.refuse(flat_claim("b")).code, 500);
    assert_eq!(cidr_of(&p.bind(flat_claim("b"))), "10.0.0.1/32");
    p.fail_next.0.store(true, Ordering::SeqCst);
    let e = p.delete("ipclaims", Some("default"), "a").unwrap_err();
    assert_eq!(e.code, 500);
    assert!(p.claim("a").is_some() && p.allocation("a").is_some());
    let c = p.bind(flat_claim("c"));
    assert_ne!(cidr_of(&c), cidr_of(&a));
    assert_eq!(cidr_of(&c), "10.0.0.2/32");
}

#[test]
fn a_fresh_hook_rebuilds_its_index_from_the_store() {
    let p = Ipam::new();
    egress_inventory(&p, "2001:db8::/40");
    p.bind(shard_claim("a", "dfw"));
    p.bind(shard_claim("b", "ord"));
    p.restart_hooks(IpamHooks::new(PLATFORM, PLATFORM));
    assert_eq!(cidr_of(&p.bind(shard_claim("c", "dfw"))), "2001:db8::2/128");
    assert_eq!(
        cidr_of(&p.bind(shard_claim("d", "sjc"))),
        "2001:db8:2::1/128"
    );
}

#[test]
fn a_hundred_thousand_live_allocations_in_one_pool() {
    let p = Ipam::new();
    flat(&p, "2001:db8::/64", json!({"defaultPrefixLength": 128}));
    const N: u32 = 100_000;
    let nth = |i: u32| {
        format!(
            "{}/128",
            std::net::Ipv6Addr::from(0x2001_0db8_u128 << 96 | u128::from(i))
        )
    };
    for i in 0..N {
        let v = p.bind(flat_claim(&format!("c{i}")));
        if i % 25_000 == 1 {
            assert_eq!(cidr_of(&v), nth(i));
        }
    }
    p.release("c4242");
    assert_eq!(cidr_of(&p.bind(flat_claim("again"))), nth(4242));
    assert_eq!(
        p.pool("flat-pool")["status"]["capacity"]["allocated"],
        N.to_string()
    );
}

#[test]
fn the_planes_own_admin_writes_act_for_its_project() {
    let mut p = Ipam::new();
    p.caller = Caller {
        user: "system:admin".into(),
        groups: vec!["system:masters".into()],
        project: None,
    };
    flat(&p, "10.0.0.0/24", json!({"defaultPrefixLength": 32}));
    let v = p.bind(flat_claim("a"));
    assert_eq!(v["spec"]["ownerRef"]["name"], PLATFORM);

    // A plane of no project (the cell) refuses even the admin.
    p.restart_hooks(IpamHooks::unscoped(PLATFORM));
    let e = p.refuse(flat_claim("b"));
    assert!(has_cause(&e, "NoProjectScope"));
}

// ---------------------------------------------------------------- class references

fn reference(name: &str, project: &str, target: &str) -> Value {
    class(
        name,
        json!({"source": {"project": project, "name": target}}),
    )
}

/// The platform project with the shipped inventory and a tenant project of the same realm.
fn platform_and_tenant() -> (Arc<Realm>, Ipam, Ipam) {
    let realm = Realm::new();
    let platform = Ipam::in_realm(PLATFORM, &realm);
    let tenant = Ipam::in_realm("tenant", &realm);
    egress_inventory(&platform, "2001:db8::/40");
    (realm, platform, tenant)
}

fn allocated(p: &Ipam, pool: &Value) -> String {
    p.pool(pool.as_str().expect("a pool name"))["status"]["capacity"]["allocated"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

#[test]
fn a_class_reference_is_stored_and_claims_allocate_as_the_class_it_names() {
    let p = Ipam::new();
    egress_inventory(&p, "2001:db8::/40");
    let shard = "datum-egress-shard-address-ipv6";
    let stored = p
        .create("ipclasses", reference("shard", PLATFORM, shard))
        .unwrap();
    assert_eq!(
        stored["spec"]["source"]["name"], shard,
        "spec.source is kept"
    );
    // A reference takes no defaults: they would be policy of its own.
    assert_eq!(
        stored["spec"],
        json!({"source": {"project": PLATFORM, "name": shard}})
    );

    let a = p.bind(shard_claim("a", "dfw"));
    let b = p.bind(shard_claim("b", "dfw").with("className", json!("shard")));
    assert_eq!(cidr_of(&a), "2001:db8::1/128");
    assert_eq!(
        cidr_of(&b),
        "2001:db8::2/128",
        "one address space with the class it names"
    );
    assert_eq!(b["status"]["poolRef"], a["status"]["poolRef"]);
    assert_eq!(b["spec"]["className"], "shard");
    assert_eq!(p.allocation("b").unwrap()["spec"]["className"], shard);

    // A claim naming no class finds a default marked on a reference, by the family it resolves to.
    let mut default = reference("v6", PLATFORM, shard);
    default["metadata"]["annotations"] = json!({"ipam.miloapis.com/is-default-class": "true"});
    p.create("ipclasses", default).unwrap();
    let c = p.bind(
        claim("c")
            .with("ipFamily", json!("IPv6"))
            .with("scope", location("dfw")),
    );
    assert_eq!(cidr_of(&c), "2001:db8::3/128");
    assert!(has_cause(
        &p.refuse(claim("d").with("ipFamily", json!("IPv4"))),
        "NoDefaultClass"
    ));

    // One hop: a reference to a reference, or to nothing, is refused.
    p.create("ipclasses", reference("again", PLATFORM, "shard"))
        .unwrap();
    let e = p.refuse(shard_claim("e", "dfw").with("className", json!("again")));
    assert_eq!(e.code, 400);
    assert!(
        e.message.contains("names another reference"),
        "{}",
        e.message
    );
    p.create("ipclasses", reference("dangling", PLATFORM, "nope"))
        .unwrap();
    let e = p.refuse(shard_claim("e", "dfw").with("className", json!("dangling")));
    assert_eq!(e.code, 400);
    assert!(has_cause(&e, "ClassNotFound"), "{e:?}");
    assert!(
        e.message
            .contains("class not found: \"nope\" in project \"platform\""),
        "{}",
        e.message
    );
}

#[test]
fn a_class_reference_states_no_policy_and_is_never_repointed() {
    let p = Ipam::new();
    let e = p
        .create(
            "ipclasses",
            class(
                "r",
                json!({"source": {"project": "other", "name": "c"}, "ipFamily": "IPv4", "poolPer": ["network"]}),
            ),
        )
        .unwrap_err();
    assert_eq!(e.code, 422);
    for field in ["spec.ipFamily", "spec.poolPer"] {
        assert!(
            e.message.contains(&format!(
                "{field}: Forbidden: a class with spec.source is a reference and states no policy of its own"
            )),
            "{}",
            e.message
        );
    }
    let e = p
        .create("ipclasses", class("r", json!({"source": {}})))
        .unwrap_err();
    assert_eq!(e.code, 422);
    assert!(
        e.message
            .contains("spec.source.project: Required value: source.project is required")
    );
    assert!(
        e.message
            .contains("spec.source.name: Required value: source.name is required")
    );
    let e = p
        .create("ipclasses", reference("r", "Not_A_Project", "c"))
        .unwrap_err();
    assert_eq!(e.code, 422);
    assert!(
        e.message.contains("spec.source.project: Invalid value"),
        "{}",
        e.message
    );

    // Which class a claim allocates under is fixed: no re-pointing, no turning either way.
    let stored = p.create("ipclasses", reference("r", "other", "c")).unwrap();
    let mut n = stored.clone();
    n["spec"]["source"]["name"] = json!("d");
    let e = p.update("ipclasses", n).unwrap_err();
    assert_eq!(e.code, 422);
    assert!(
        e.message.contains("spec.source is immutable"),
        "{}",
        e.message
    );
    let def = p
        .create("ipclasses", class("def", json!({"ipFamily": "IPv4"})))
        .unwrap();
    let mut n = def.clone();
    n["spec"] = json!({"source": {"project": "other", "name": "c"}});
    let e = p.update("ipclasses", n).unwrap_err();
    assert!(
        e.message.contains("spec.source is immutable"),
        "{}",
        e.message
    );
}

#[test]
fn a_reference_to_another_projects_class_allocates_from_that_projects_pools() {
    let (_realm, platform, tenant) = platform_and_tenant();
    let shard = "datum-egress-shard-address-ipv6";
    tenant
        .create("ipclasses", reference(shard, PLATFORM, shard))
        .unwrap();

    let p1 = platform.bind(shard_claim("p1", "dfw"));
    let t1 = tenant.bind(shard_claim("t1", "dfw"));
    let dfw = p1["status"]["poolRef"]["name"].clone();
    // The platform's pool, in its one platform-wide space: the next address after the platform's.
    assert_eq!(cidr_of(&t1), "2001:db8::2/128");
    assert_eq!(t1["status"]["poolRef"]["name"], dfw);
    assert_eq!(t1["spec"]["ownerRef"]["name"], "tenant");
    assert_eq!(
        allocated(&platform, &dfw),
        "3",
        "the reservation and two claims"
    );
    // The tenant holds the claim and its allocation; the platform only the row.
    assert!(tenant.allocation("t1").is_some());
    assert_eq!(platform.count("ipallocations"), 1);
    assert!(tenant.get("ippools", None, dfw.as_str().unwrap()).is_none());
    assert_eq!(
        cidr_of(&platform.bind(shard_claim("p2", "dfw"))),
        "2001:db8::3/128"
    );

    // A first claim into a location provisions its pool in the project of the class.
    let t2 = tenant.bind(shard_claim("t2", "ord"));
    assert_eq!(cidr_of(&t2), "2001:db8:1::1/128");
    let ord = t2["status"]["poolRef"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(platform.get("ippools", None, &ord).is_some());
    assert_eq!(tenant.count("ippools"), 0);

    // A pool a tenant's claim holds a row of is not deleted under it.
    let e = platform.delete("ippools", None, &ord).unwrap_err();
    assert_eq!(e.code, 409, "{}", e.message);

    // A tenant write that is refused after IPAM bound, or a dry run, leaves the platform as it was.
    tenant.fail_next.0.store(true, Ordering::SeqCst);
    assert_eq!(tenant.refuse(shard_claim("t3", "dfw")).code, 500);
    let dry = WriteOpts {
        dry_run: true,
        ..Default::default()
    };
    let v = tenant
        .create_with("ipclaims", shard_claim("t3", "dfw").into_value(), &dry)
        .unwrap();
    assert_eq!(cidr_of(&v), "2001:db8::4/128");
    assert!(tenant.claim("t3").is_none());
    assert_eq!(allocated(&platform, &dfw), "4");
    assert_eq!(
        cidr_of(&tenant.bind(shard_claim("t3", "dfw"))),
        "2001:db8::4/128"
    );

    // Released, the row in the platform's pool is freed.
    tenant.release("t1");
    assert_eq!(allocated(&platform, &dfw), "4");
    assert_eq!(
        cidr_of(&platform.bind(shard_claim("p3", "dfw"))),
        "2001:db8::2/128"
    );
    tenant.release("t2");
    platform.delete("ippools", None, &ord).unwrap();
}

#[test]
fn a_remote_row_is_retained_force_released_and_rebuilt_where_it_is() {
    let (realm, platform, tenant) = platform_and_tenant();
    let shard = "datum-egress-shard-address-ipv6";
    tenant
        .create("ipclasses", reference(shard, PLATFORM, shard))
        .unwrap();
    let kept = tenant.bind(shard_claim("kept", "dfw").with("reclaimPolicy", json!("Retain")));
    let dfw = kept["status"]["poolRef"]["name"].clone();
    assert_eq!(cidr_of(&kept), "2001:db8::1/128");
    tenant.bind(shard_claim("live", "dfw"));

    // Retained: the tenant's allocation stays, and so does the platform's row.
    tenant.release("kept");
    let alloc = tenant.allocation("kept").unwrap();
    assert!(alloc["spec"]["claimRef"].is_null());
    assert_eq!(allocated(&platform, &dfw), "3");

    // Indexes rebuilt from each plane's store keep each row in the pool that holds it: the
    // platform still skips the tenant's addresses, and a pool of the tenant's own under the same
    // name is not taken to hold them.
    platform.restart_in(&realm);
    tenant.restart_in(&realm);
    assert_eq!(
        cidr_of(&platform.bind(shard_claim("p", "dfw"))),
        "2001:db8::3/128"
    );
    let mut own = pool(dfw.as_str().unwrap(), "2001:db8::/48", "IPv6", &["local"]);
    own["metadata"]["name"] = dfw.clone();
    tenant.create("ippools", own).unwrap();
    tenant
        .create(
            "ipclasses",
            class(
                "local",
                json!({"ipFamily": "IPv6", "defaultPrefixLength": 128}),
            ),
        )
        .unwrap();
    tenant.restart_in(&realm);
    let mine = tenant.bind(
        claim("mine")
            .with("className", json!("local"))
            .with("address", json!("2001:db8::1")),
    );
    assert_eq!(cidr_of(&mine), "2001:db8::1/128");

    // Deleting the retained allocation force-releases the platform's row.
    tenant
        .delete(
            "ipallocations",
            Some("default"),
            &allocation_name("default", "kept"),
        )
        .unwrap();
    assert_eq!(allocated(&platform, &dfw), "3", "reservation, live, p");
    assert_eq!(
        cidr_of(&platform.bind(shard_claim("q", "dfw"))),
        "2001:db8::1/128"
    );
}

#[test]
fn a_chain_through_another_projects_class_binds_from_its_roots_pools() {
    // A tenant's own leaf class under the platform's range class (through a reference): the
    // range's pool for the location is provisioned in the platform's project, as the platform's
    // own shards have it, and the leaf binds from it in their address space.
    let (_realm, platform, tenant) = platform_and_tenant();
    tenant
        .create(
            "ipclasses",
            reference("range", PLATFORM, "datum-egress-shard-ipv6"),
        )
        .unwrap();
    tenant
        .create(
            "ipclasses",
            class(
                "leaf",
                json!({"ipFamily": "IPv6", "parentClassName": "range", "defaultPrefixLength": 128}),
            ),
        )
        .unwrap();
    let mine = tenant.bind(shard_claim("x", "dfw").with("className", json!("leaf")));
    assert_eq!(cidr_of(&mine), "2001:db8::1/128");
    let theirs = platform.bind(shard_claim("y", "dfw"));
    assert_eq!(cidr_of(&theirs), "2001:db8::2/128");
    assert_eq!(mine["status"]["poolRef"], theirs["status"]["poolRef"]);
    assert_eq!(tenant.count("ippools"), 0);
    // Its poolPer roles are still required.
    let e = tenant.refuse(
        claim("z")
            .with("className", json!("leaf"))
            .with("ipFamily", json!("IPv6")),
    );
    assert!(has_cause(&e, "ScopeRolesMissing"), "{e:?}");
}
