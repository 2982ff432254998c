//! Every address written is one an egress shard may carry: a public unicast /128 (the
//! documentation prefix allowed).

use super::*;

/// Why an address no egress shard may carry was written, if it was.
pub(super) fn unusable(shard: &Value) -> Option<String> {
    let text = shard["spec"]["shardAddressIPv6"].as_str().unwrap_or("");
    match text.parse::<Ipv6Addr>() {
        Err(_) => Some(format!("{text:?} is not an IPv6 address")),
        Ok(a) => not_public_unicast(a).map(|why| format!("{a} is {why}")),
    }
}
