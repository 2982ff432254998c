//! JSON shape and CEL rules of EgressShard, evaluated locally with the same evaluator localplane
//! uses, so each rule's behaviour and exact message is pinned without a server.

use egress_api::crd::egress_shard_crd;
use egress_api::shard::*;
use serde_json::{Value, json};

fn shard(spec: Value) -> Value {
    json!({
        "apiVersion": "network.datumapis.com/v1alpha1",
        "kind": "EgressShard",
        "metadata": {"name": "node-a", "namespace": "galactic-system"},
        "spec": spec,
    })
}

fn schema() -> Value {
    let crd = egress_shard_crd();
    serde_json::to_value(
        crd.spec.versions[0]
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap(),
    )
    .unwrap()
}

/// The messages of every rule that failed, in order.
fn failures(new: &Value, old: Option<&Value>) -> Vec<String> {
    match kube::core::cel::Validator::new().validate(&schema(), new, old) {
        Ok(()) => vec![],
        Err(errors) => errors.iter().map(|e| e.message.clone()).collect(),
    }
}

fn target() -> Value {
    json!({"kind": "Node", "name": "node-a"})
}

fn claim_ref() -> Value {
    json!({"apiGroup": "ipam.miloapis.com", "kind": "IPClaim", "project": "datum-platform",
           "namespace": "default", "name": "egress-shard-ipv6.galactic-system.node-a"})
}

#[test]
fn json_field_names_match_the_go_api() {
    let spec = EgressShardSpec {
        target_ref: TargetRef {
            kind: "Node".into(),
            name: "node-a".into(),
        },
        shard_sid: "fc00::1".into(),
        shard_address_ipv6: "2001:db8::1".into(),
        shard_address_ipv6_claim_ref: Some(AddressClaimRef {
            api_group: "ipam.miloapis.com".into(),
            kind: "IPClaim".into(),
            project: "p".into(),
            namespace: "default".into(),
            name: "c".into(),
        }),
        shard_address_ipv4: "198.51.100.1".into(),
        shard_address_ipv4_claim_ref: None,
        nat64_prefix: "64:ff9b::/96".into(),
        translate_well_known_prefix: Some(true),
        drain: Some(false),
    };
    let v = serde_json::to_value(&spec).unwrap();
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "drain",
            "nat64Prefix",
            "shardAddressIPv4",
            "shardAddressIPv6",
            "shardAddressIPv6ClaimRef",
            "shardSID",
            "targetRef",
            "translateWellKnownPrefix"
        ]
    );
    let r = &v["shardAddressIPv6ClaimRef"];
    assert_eq!(r["apiGroup"], "ipam.miloapis.com");
    assert_eq!(r["project"], "p");

    let status = EgressShardStatus {
        observed_generation: Some(3),
        shard_sid: "fc00::1".into(),
        shard_address_ipv6: "2001:db8::1".into(),
        shard_address_ipv4: "198.51.100.1".into(),
        nat64_prefix: "64:ff9b::/96".into(),
        translates_well_known_prefix: Some(true),
        conditions: vec![],
    };
    let s = serde_json::to_value(&status).unwrap();
    let mut keys: Vec<&str> = s.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "nat64Prefix",
            "observedGeneration",
            "shardAddressIPv4",
            "shardAddressIPv6",
            "shardSID",
            "translatesWellKnownPrefix"
        ]
    );
}

#[test]
fn empty_fields_are_omitted() {
    let spec = EgressShardSpec {
        target_ref: TargetRef {
            kind: "Node".into(),
            name: "n".into(),
        },
        ..Default::default()
    };
    assert_eq!(
        serde_json::to_value(&spec).unwrap(),
        json!({"targetRef": {"kind": "Node", "name": "n"}})
    );
    assert_eq!(
        serde_json::to_value(EgressShardStatus::default()).unwrap(),
        json!({})
    );
}

#[test]
fn a_shard_survives_a_json_round_trip() {
    let original = shard(json!({
        "targetRef": target(),
        "shardAddressIPv6": "2001:db8::7",
        "shardAddressIPv6ClaimRef": claim_ref(),
        "drain": true,
    }));
    let typed: EgressShard = serde_json::from_value(original.clone()).unwrap();
    assert_eq!(typed.spec.shard_address_ipv6, "2001:db8::7");
    assert_eq!(typed.spec.drain, Some(true));
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(back["spec"], original["spec"]);
    assert_eq!(back["metadata"]["name"], "node-a");
}

#[test]
fn claim_ref_defaults_api_group_and_kind() {
    let r: AddressClaimRef =
        serde_json::from_value(json!({"project": "p", "namespace": "n", "name": "c"})).unwrap();
    assert_eq!(r.api_group, "ipam.miloapis.com");
    assert_eq!(r.kind, "IPClaim");
    // The schema carries the same defaults, so the API server fills them too.
    let schema = schema();
    let props =
        &schema["properties"]["spec"]["properties"]["shardAddressIPv6ClaimRef"]["properties"];
    assert_eq!(props["apiGroup"]["default"], "ipam.miloapis.com");
    assert_eq!(props["kind"]["default"], "IPClaim");
    let required =
        &schema["properties"]["spec"]["properties"]["shardAddressIPv6ClaimRef"]["required"];
    let mut required: Vec<&str> = required
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    required.sort();
    assert_eq!(required, ["name", "namespace", "project"]);
}

#[test]
fn every_label_key_is_under_the_api_group() {
    for key in LABEL_KEYS {
        assert!(key.starts_with("network.datumapis.com/"), "{key}");
    }
    assert_eq!(LABEL_EGRESS_IPV6, "network.datumapis.com/egress-ipv6");
    assert_eq!(LABEL_VALUE_FAMILY_SERVED, "true");
}

#[test]
fn crd_identity_and_printer_columns() {
    let crd = egress_shard_crd();
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("egressshards.network.datumapis.com")
    );
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(
        crd.spec.names.short_names.as_deref(),
        Some(&["egressshard".to_string()][..])
    );
    let v = &crd.spec.versions[0];
    assert!(v.subresources.as_ref().unwrap().status.is_some());
    let cols: Vec<(String, String, String)> = v
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| (c.name.clone(), c.type_.clone(), c.json_path.clone()))
        .collect();
    let want = [
        ("TARGET", "string", ".spec.targetRef.name"),
        ("SHARD-SID", "string", ".status.shardSID"),
        ("IPV6", "string", ".status.shardAddressIPv6"),
        ("IPV4", "string", ".status.shardAddressIPv4"),
        ("DRAIN", "boolean", ".spec.drain"),
        ("AGE", "date", ".metadata.creationTimestamp"),
    ];
    assert_eq!(cols.len(), want.len());
    for (got, want) in cols.iter().zip(want) {
        assert_eq!((got.0.as_str(), got.1.as_str(), got.2.as_str()), want);
    }
    let spec_required = &serde_json::to_value(&v.schema).unwrap()["openAPIV3Schema"]["properties"]
        ["spec"]["required"];
    assert_eq!(spec_required, &json!(["targetRef"]));
}

#[test]
fn a_fresh_shard_is_valid() {
    assert_eq!(
        failures(&shard(json!({"targetRef": target()})), None),
        Vec::<String>::new()
    );
}

#[test]
fn field_family_rules() {
    let cases = [
        (
            "shardSID",
            "198.51.100.1",
            "shardSID must be a valid IPv6 address",
        ),
        (
            "shardSID",
            "not-an-ip",
            "shardSID must be a valid IPv6 address",
        ),
        (
            "shardAddressIPv6",
            "198.51.100.1",
            "shardAddressIPv6 must be a valid IPv6 address",
        ),
        (
            "shardAddressIPv6",
            "2001:db8::/64",
            "shardAddressIPv6 must be a valid IPv6 address",
        ),
    ];
    for (field, value, message) in cases {
        let mut spec = json!({"targetRef": target()});
        spec[field] = json!(value);
        assert_eq!(
            failures(&shard(spec), None),
            vec![message.to_string()],
            "{field}={value}"
        );
    }
    let ok = shard(
        json!({"targetRef": target(), "shardSID": "fc00::1", "shardAddressIPv6": "2001:db8::1"}),
    );
    assert_eq!(failures(&ok, None), Vec::<String>::new());

    let v4 = shard(
        json!({"targetRef": target(), "shardAddressIPv4": "2001:db8::1", "nat64Prefix": "64:ff9b::/96"}),
    );
    assert_eq!(
        failures(&v4, None),
        vec!["shardAddressIPv4 must be a valid IPv4 address".to_string()]
    );
    let bad_prefix = shard(
        json!({"targetRef": target(), "shardAddressIPv4": "198.51.100.1", "nat64Prefix": "nope"}),
    );
    assert_eq!(
        failures(&bad_prefix, None),
        vec!["nat64Prefix must be a valid CIDR".to_string()]
    );
}

#[test]
fn ipv4_and_nat64_prefix_go_together() {
    let only_v4 = shard(json!({"targetRef": target(), "shardAddressIPv4": "198.51.100.1"}));
    assert_eq!(
        failures(&only_v4, None),
        vec!["shardAddressIPv4 and nat64Prefix must be set together".to_string()]
    );
    let only_prefix = shard(json!({"targetRef": target(), "nat64Prefix": "64:ff9b::/96"}));
    assert_eq!(
        failures(&only_prefix, None),
        vec!["shardAddressIPv4 and nat64Prefix must be set together".to_string()]
    );
    let both = shard(
        json!({"targetRef": target(), "shardAddressIPv4": "198.51.100.1", "nat64Prefix": "64:ff9b::/96"}),
    );
    assert_eq!(failures(&both, None), Vec::<String>::new());
}

#[test]
fn translating_the_well_known_prefix_needs_a_nat64_prefix() {
    let bad = shard(json!({"targetRef": target(), "translateWellKnownPrefix": true}));
    assert_eq!(
        failures(&bad, None),
        vec!["translateWellKnownPrefix requires nat64Prefix".to_string()]
    );
    let off = shard(json!({"targetRef": target(), "translateWellKnownPrefix": false}));
    assert_eq!(failures(&off, None), Vec::<String>::new());
}

#[test]
fn addresses_are_write_once() {
    let empty = shard(json!({"targetRef": target()}));
    let assigned = shard(
        json!({"targetRef": target(), "shardAddressIPv6": "2001:db8::1", "shardAddressIPv6ClaimRef": claim_ref()}),
    );
    // The first assignment and a same-value rewrite are allowed.
    assert_eq!(failures(&assigned, Some(&empty)), Vec::<String>::new());
    assert_eq!(failures(&assigned, Some(&assigned)), Vec::<String>::new());

    let changed = shard(
        json!({"targetRef": target(), "shardAddressIPv6": "2001:db8::2", "shardAddressIPv6ClaimRef": claim_ref()}),
    );
    assert_eq!(
        failures(&changed, Some(&assigned)),
        vec!["shardAddressIPv6 is immutable once assigned".to_string()]
    );

    let unassigned = shard(json!({"targetRef": target(), "shardAddressIPv6ClaimRef": claim_ref()}));
    assert_eq!(
        failures(&unassigned, Some(&assigned)),
        vec!["shardAddressIPv6 cannot be unassigned once assigned".to_string()]
    );
}

#[test]
fn the_claim_ref_is_write_once() {
    let with_ref = shard(
        json!({"targetRef": target(), "shardAddressIPv6": "2001:db8::1", "shardAddressIPv6ClaimRef": claim_ref()}),
    );
    let mut other = claim_ref();
    other["kind"] = json!("IPAllocation");
    let changed = shard(
        json!({"targetRef": target(), "shardAddressIPv6": "2001:db8::1", "shardAddressIPv6ClaimRef": other}),
    );
    assert_eq!(
        failures(&changed, Some(&with_ref)),
        vec!["shardAddressIPv6ClaimRef is immutable once assigned".to_string()]
    );
    let dropped = shard(json!({"targetRef": target(), "shardAddressIPv6": "2001:db8::1"}));
    assert_eq!(
        failures(&dropped, Some(&with_ref)),
        vec!["shardAddressIPv6ClaimRef cannot be unassigned once assigned".to_string()]
    );
    // An address without a ref (hand-assigned) and a ref without an address are both legal.
    assert_eq!(failures(&dropped, None), Vec::<String>::new());
    let ref_only = shard(json!({"targetRef": target(), "shardAddressIPv6ClaimRef": claim_ref()}));
    assert_eq!(failures(&ref_only, None), Vec::<String>::new());
}

#[test]
fn other_write_once_fields() {
    let base = json!({"targetRef": target(), "shardSID": "fc00::1", "shardAddressIPv4": "198.51.100.1",
                      "nat64Prefix": "64:ff9b::/96", "shardAddressIPv4ClaimRef": claim_ref()});
    let old = shard(base.clone());

    let mut sid = base.clone();
    sid["shardSID"] = json!("fc00::2");
    assert_eq!(
        failures(&shard(sid), Some(&old)),
        vec!["shardSID is immutable once assigned".to_string()]
    );

    let mut no_sid = base.clone();
    no_sid.as_object_mut().unwrap().remove("shardSID");
    assert_eq!(
        failures(&shard(no_sid), Some(&old)),
        vec!["shardSID cannot be unassigned once assigned".to_string()]
    );

    let mut v4 = base.clone();
    v4["shardAddressIPv4"] = json!("198.51.100.2");
    assert_eq!(
        failures(&shard(v4), Some(&old)),
        vec!["shardAddressIPv4 is immutable once assigned".to_string()]
    );

    let mut prefix = base.clone();
    prefix["nat64Prefix"] = json!("64:ff9b:1::/96");
    assert_eq!(
        failures(&shard(prefix), Some(&old)),
        vec!["nat64Prefix is immutable once assigned".to_string()]
    );

    let mut neither = base.clone();
    neither.as_object_mut().unwrap().remove("shardAddressIPv4");
    neither.as_object_mut().unwrap().remove("nat64Prefix");
    assert_eq!(
        failures(&shard(neither), Some(&old)),
        vec![
            "shardAddressIPv4 cannot be unassigned once assigned".to_string(),
            "nat64Prefix cannot be unassigned once assigned".to_string()
        ]
    );

    let mut v4_ref = base.clone();
    v4_ref["shardAddressIPv4ClaimRef"]["name"] = json!("other");
    assert_eq!(
        failures(&shard(v4_ref), Some(&old)),
        vec!["shardAddressIPv4ClaimRef is immutable once assigned".to_string()]
    );
    let mut v4_ref_gone = base;
    v4_ref_gone
        .as_object_mut()
        .unwrap()
        .remove("shardAddressIPv4ClaimRef");
    assert_eq!(
        failures(&shard(v4_ref_gone), Some(&old)),
        vec!["shardAddressIPv4ClaimRef cannot be unassigned once assigned".to_string()]
    );
}

#[test]
fn status_family_rules() {
    let mut s = shard(json!({"targetRef": target()}));
    s["status"] = json!({"shardAddressIPv6": "198.51.100.1"});
    assert_eq!(
        failures(&s, None),
        vec!["shardAddressIPv6 must be a valid IPv6 address".to_string()]
    );
    s["status"] = json!({"shardAddressIPv6": "2001:db8::1", "shardAddressIPv4": "198.51.100.1"});
    assert_eq!(failures(&s, None), Vec::<String>::new());
}

#[test]
fn the_typed_validators_agree() {
    let old: EgressShard = serde_json::from_value(shard(
        json!({"targetRef": target(), "shardAddressIPv6": "2001:db8::1"}),
    ))
    .unwrap();
    let mut new = old.clone();
    new.spec.shard_address_ipv6 = "2001:db8::2".into();
    let err = new.validate_cel_update(&old).unwrap_err();
    assert!(
        err.to_string()
            .contains("shardAddressIPv6 is immutable once assigned"),
        "{err}"
    );
    assert!(old.validate_cel().is_ok());
}
