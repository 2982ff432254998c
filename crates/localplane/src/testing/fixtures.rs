//! The names a world is built with, the resource keys its store is read by, and small helpers
//! every test around it uses.

use std::net::Ipv6Addr;
use std::path::PathBuf;
use std::time::Duration;

use kube::core::Status;
use serde_json::{Value, json};

use crate::faults::FaultRule;
use crate::hooks::ResourceKey;

/// The Milo project holding the IPAM catalog and the claims.
pub const PLATFORM_PROJECT: &str = "platform";
/// The namespace of the claims in the platform project.
pub const CLAIM_NAMESPACE: &str = "default";
/// The cell namespace a world creates for shards (others are made by seeding into them).
pub const SHARD_NAMESPACE: &str = "egress";
/// The location a controller serves in these worlds.
pub const LOCATION: &str = "dfw";
/// The leaf class the shipped inventory defines: one /128 per shard.
pub const ADDRESS_CLASS: &str = "datum-egress-shard-address-ipv6";
/// The root prefix filled into the inventory: a /40 of the documentation range, so nothing a world
/// hands out looks like real inventory.
pub const ROOT_CIDR: &str = "2001:db8::/40";
/// An identity that bypasses RBAC, for the test itself.
pub const ADMIN: &str = "admin";
/// The identity a world writes the controller's kubeconfigs for (it bypasses RBAC too; a test of
/// the grants adds identities bound by them).
pub const CONTROLLER: &str = "controller";
/// The shipped inventory, relative to the `config/` folder a world is built from.
pub const INVENTORY: &str = "ipam/egress-shard-ipv6.yaml";

/// The workspace this crate was built in, where `config/` lives: for the tests, benchmarks and
/// demo of this repository, which run from a checkout.
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."))
}

pub fn shards_key() -> ResourceKey {
    ResourceKey::new(egress_api::shard::GROUP, "egressshards")
}

pub fn claims_key() -> ResourceKey {
    ResourceKey::new(egress_api::ipam::GROUP, "ipclaims")
}

pub fn allocations_key() -> ResourceKey {
    ResourceKey::new(egress_api::ipam::GROUP, "ipallocations")
}

pub fn leases_key() -> ResourceKey {
    ResourceKey::new("coordination.k8s.io", "leases")
}

pub fn events_key() -> ResourceKey {
    ResourceKey::new("events.k8s.io", "events")
}

/// A new EgressShard targeting node `node-<name>`, as JSON.
pub fn shard_object(namespace: &str, name: &str) -> Value {
    json!({
        "apiVersion": "network.datumapis.com/v1alpha1",
        "kind": "EgressShard",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"targetRef": {"kind": "Node", "name": format!("node-{name}")}},
    })
}

/// Whether a stored shard carries an address.
pub fn is_addressed(shard: &Value) -> bool {
    shard["spec"]["shardAddressIPv6"]
        .as_str()
        .is_some_and(|s| !s.is_empty())
}

/// The address in an allocated CIDR, if it is a plain IPv6 /128.
pub fn address_of(cidr: &str) -> Option<Ipv6Addr> {
    let (a, len) = cidr.split_once('/')?;
    (len == "128").then_some(())?;
    a.parse().ok()
}

/// Makes a new claim's answer say `cidr` in `status.allocatedCIDR`, or (empty) unbound and
/// `Pending`: for an [`OnClaimCreate`](super::OnClaimCreate) playing an IPAM that answers
/// otherwise.
pub fn answer_claim(claim: &mut Value, cidr: &str) {
    let status = &mut claim["status"];
    if cidr.is_empty() {
        if let Some(s) = status.as_object_mut() {
            s.remove("allocatedCIDR");
        }
        status["phase"] = json!("Pending");
    } else {
        status["allocatedCIDR"] = json!(cidr);
    }
}

/// A fault that fails every matching request with `code` (`*` matches any verb or resource).
pub fn fault(plane: &str, verb: &str, resource: &str, code: u16) -> FaultRule {
    FaultRule {
        plane: Some(plane.into()),
        verb: Some(verb.into()),
        resource: Some(resource.into()),
        error_rate: 1.0,
        code: Some(code),
        ..Default::default()
    }
}

/// Polls `f` every 25 ms until it returns `Some`; panics naming `what` after `secs` seconds.
pub async fn eventually<T, F, Fut>(secs: u64, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The causes of a refusal as (reason, message, field): a test asserts on what the apiserver
/// names, which the message alone does not show.
pub fn causes(s: &Status) -> Vec<(String, String, String)> {
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

/// Whether a refusal names a cause with this reason.
pub fn has_cause(s: &Status, reason: &str) -> bool {
    causes(s).iter().any(|(r, _, _)| r == reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_slash_128_is_an_address() {
        assert_eq!(address_of("2001:db8::7/128"), "2001:db8::7".parse().ok());
        assert_eq!(address_of("2001:db8::/64"), None);
        assert_eq!(address_of("198.51.100.7/32"), None);
        assert_eq!(address_of("2001:db8::7"), None);
    }

    #[test]
    fn an_answer_is_rewritten_or_left_unbound() {
        let mut claim = json!({"status": {"allocatedCIDR": "2001:db8::1/128", "phase": "Bound"}});
        answer_claim(&mut claim, "198.51.100.7/32");
        assert_eq!(claim["status"]["allocatedCIDR"], "198.51.100.7/32");
        answer_claim(&mut claim, "");
        assert_eq!(claim["status"], json!({"phase": "Pending"}));
    }

    #[test]
    fn a_shard_is_addressed_only_with_a_non_empty_address() {
        let mut s = shard_object("ns", "a");
        assert!(!is_addressed(&s));
        s["spec"]["shardAddressIPv6"] = json!("");
        assert!(!is_addressed(&s));
        s["spec"]["shardAddressIPv6"] = json!("2001:db8::1");
        assert!(is_addressed(&s));
    }
}
