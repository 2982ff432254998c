//! The names and digests IPAM derives from identities. Clients compare them (an allocation's name
//! is read back out of a refusal; scope digests are compared for equality), so the encodings are
//! the service's own, pinned by the vectors in the tests.

use egress_api::ipam::Scope;
use sha2::{Digest, Sha256};

/// `alloc-` + the first 8 bytes of SHA-256 over `<namespace>/<claim>`, in lowercase hex.
pub fn allocation_name(namespace: &str, claim: &str) -> String {
    let sum = Sha256::digest(format!("{namespace}/{claim}").as_bytes());
    format!("alloc-{}", hex::encode(&sum[..8]))
}

/// Every field as `<len>:<bytes>` with no separator, so no field can run into the next.
struct Encoder(Sha256);

impl Encoder {
    fn new(version: &str) -> Self {
        let mut e = Self(Sha256::new());
        e.field(version);
        e
    }
    fn field(&mut self, value: &str) {
        self.0.update(format!("{}:", value.len()).as_bytes());
        self.0.update(value.as_bytes());
    }
    fn finish(self) -> String {
        hex::encode(self.0.finalize())
    }
}

/// The address-space digest: claims with equal digests may not overlap in a pool. The tenant is
/// written per role, so an empty scope is one space shared by every project.
pub fn address_space(tenant: &str, scope: &Scope) -> String {
    let mut e = Encoder::new("ipam.scope.v3");
    e.field(&scope.len().to_string());
    // BTreeMap iteration is already sorted by role.
    for (role, r) in scope {
        e.field(role);
        e.field(tenant);
        e.field(&r.api_group);
        e.field(&r.kind);
        e.field(&r.name);
        e.field(&r.uid);
    }
    e.finish()
}

/// A pool's identity digest (`IPPool.status.scopeDigest`).
pub fn pool(tenant: &str, scope: &Scope) -> String {
    let mut e = Encoder::new("ipam.scope.v2");
    e.field(tenant);
    e.field(&scope.len().to_string());
    for (role, r) in scope {
        e.field(role);
        e.field(&r.api_group);
        e.field(&r.kind);
        e.field(&r.name);
        e.field(&r.uid);
    }
    e.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use egress_api::ipam::ScopeRef;

    fn network() -> Scope {
        Scope::from([(
            "network".to_string(),
            ScopeRef {
                api_group: "networking.datumapis.com".into(),
                kind: "Network".into(),
                name: "default".into(),
                uid: String::new(),
            },
        )])
    }

    #[test]
    fn allocation_names_match_the_service() {
        assert_eq!(
            allocation_name("default", "claim-1"),
            "alloc-571e39a74f813477"
        );
        assert_eq!(
            allocation_name("default", "eth0-f-ipv4"),
            "alloc-b187c9404165d5a1"
        );
        assert_eq!(allocation_name("ns-1", "claim-a"), "alloc-2c010f5e729224c9");
    }

    #[test]
    fn address_space_digests_match_the_service() {
        assert_eq!(
            address_space("anything", &Scope::new()),
            "c86bbfc3761caa942844f05f5a8379f15cdd300f512a9d5b5baaa787c4695c42"
        );
        assert_eq!(
            address_space("acme", &network()),
            "a1c019b0c1fe09ed014c4c8087861cb7428c138e5f97300f30a5a9ffdc3c7f5b"
        );
    }

    #[test]
    fn pool_digests_match_the_service() {
        assert_eq!(
            pool("", &Scope::new()),
            "6139457f3fc41de42d41d373bf75cc032c63fbedb7def334f08f8b40803793d9"
        );
        assert_eq!(
            pool("acme", &network()),
            "b7c4607c6c8b6e1b65319ee84c43dd7c062005421d3baadb1f36b4eb75cbdb6b"
        );
    }
}
