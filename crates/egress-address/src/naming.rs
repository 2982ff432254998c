//! How a shard's claim is named and marked, so that every later lookup is a GET by derived name.

use egress_api::ipam::IPClaim;
use sha2::{Digest, Sha256};

/// Prefix of every claim this controller creates.
pub const CLAIM_NAME_PREFIX: &str = "egress-shard-ipv6";
/// Claim annotation naming the shard's namespace.
pub const ANNOTATION_SHARD_NAMESPACE: &str = "cloud.datumapis.com/egress-shard-namespace";
/// Claim annotation naming the shard.
pub const ANNOTATION_SHARD_NAME: &str = "cloud.datumapis.com/egress-shard-name";
/// The longest object name the API accepts.
pub const MAX_CLAIM_NAME_LENGTH: usize = 253;
/// Hex characters of the sha256 kept in a shortened name.
const HASH_HEX_CHARS: usize = 16;

/// The IPClaim name for a shard: `egress-shard-ipv6.<namespace>.<name>`.
///
/// A namespace is a DNS label and holds no dot, so the split is unambiguous. Past 253 characters
/// the name keeps its first 236 characters and ends in `.` plus 16 hex characters of
/// sha256(`namespace/name`), so two long names sharing a prefix still differ.
pub fn claim_name(shard_namespace: &str, shard_name: &str) -> String {
    let base = format!("{CLAIM_NAME_PREFIX}.{shard_namespace}.{shard_name}");
    if base.len() <= MAX_CLAIM_NAME_LENGTH {
        return base;
    }
    let digest = Sha256::digest(format!("{shard_namespace}/{shard_name}").as_bytes());
    let hash = &hex::encode(digest)[..HASH_HEX_CHARS];
    let keep = MAX_CLAIM_NAME_LENGTH - HASH_HEX_CHARS - 1;
    // Object names are ASCII (DNS subdomains), so a byte cut is a character cut.
    format!("{}.{hash}", &base[..keep])
}

/// Whether a claim's annotations name exactly this shard. A shortened name or a second cell
/// writing into the same claim namespace can produce the same name for another shard; only the
/// annotations say whose claim it is.
pub fn claim_names_shard(claim: &IPClaim, shard_namespace: &str, shard_name: &str) -> bool {
    let Some(annotations) = claim.metadata.annotations.as_ref() else {
        return false;
    };
    annotations
        .get(ANNOTATION_SHARD_NAMESPACE)
        .map(String::as_str)
        == Some(shard_namespace)
        && annotations.get(ANNOTATION_SHARD_NAME).map(String::as_str) == Some(shard_name)
}

/// The shard a claim's annotations name, as `namespace/name`, for error messages.
pub fn claim_holder(claim: &IPClaim) -> String {
    let get = |key: &str| {
        claim
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key).cloned())
            .unwrap_or_else(|| "<none>".to_string())
    };
    format!(
        "{}/{}",
        get(ANNOTATION_SHARD_NAMESPACE),
        get(ANNOTATION_SHARD_NAME)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn short_names_are_the_dotted_base() {
        assert_eq!(
            claim_name("galactic-system", "worker-8b4e1647-dfw"),
            "egress-shard-ipv6.galactic-system.worker-8b4e1647-dfw"
        );
    }

    #[test]
    fn dashes_and_dots_do_not_collide_across_the_namespace_boundary() {
        assert_ne!(claim_name("a-b", "c"), claim_name("a", "b-c"));
    }

    #[test]
    fn exactly_253_characters_is_kept_whole() {
        let ns = "ns";
        let fixed = CLAIM_NAME_PREFIX.len() + 1 + ns.len() + 1;
        let name = "n".repeat(MAX_CLAIM_NAME_LENGTH - fixed);
        let got = claim_name(ns, &name);
        assert_eq!(got.len(), 253);
        assert_eq!(got, format!("egress-shard-ipv6.ns.{name}"));
    }

    #[test]
    fn long_names_end_in_a_hash_of_namespace_and_name() {
        let name = "x".repeat(300);
        let got = claim_name("galactic-system", &name);
        assert_eq!(got.len(), 253);
        let digest = hex::encode(Sha256::digest(format!("galactic-system/{name}").as_bytes()));
        assert!(got.ends_with(&format!(".{}", &digest[..16])), "{got}");
        let base = format!("egress-shard-ipv6.galactic-system.{name}");
        assert_eq!(&got[..236], &base[..236]);
    }

    #[test]
    fn long_names_sharing_a_prefix_differ() {
        let a = format!("{}a", "x".repeat(300));
        let b = format!("{}b", "x".repeat(300));
        assert_ne!(claim_name("ns", &a), claim_name("ns", &b));
    }

    fn claim_with(annotations: Option<BTreeMap<String, String>>) -> IPClaim {
        let mut claim = IPClaim::new("c", Default::default());
        claim.metadata.annotations = annotations;
        claim
    }

    #[test]
    fn a_claim_names_a_shard_only_by_both_annotations() {
        let both = BTreeMap::from([
            (ANNOTATION_SHARD_NAMESPACE.to_string(), "ns".to_string()),
            (ANNOTATION_SHARD_NAME.to_string(), "s".to_string()),
        ]);
        assert!(claim_names_shard(
            &claim_with(Some(both.clone())),
            "ns",
            "s"
        ));
        assert!(!claim_names_shard(
            &claim_with(Some(both.clone())),
            "ns",
            "t"
        ));
        assert!(!claim_names_shard(&claim_with(Some(both)), "other", "s"));
        let only_name = BTreeMap::from([(ANNOTATION_SHARD_NAME.to_string(), "s".to_string())]);
        assert!(!claim_names_shard(&claim_with(Some(only_name)), "ns", "s"));
        assert!(!claim_names_shard(&claim_with(None), "ns", "s"));
        assert_eq!(claim_holder(&claim_with(None)), "<none>/<none>");
    }
}
