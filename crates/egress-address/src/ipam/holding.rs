//! The IPAM record that holds a shard's address.

use std::net::Ipv6Addr;

/// Holder kind of an address bound by a live claim.
pub const KIND_IPCLAIM: &str = "IPClaim";
/// Holder kind of an address adopted from a retained allocation.
pub const KIND_IPALLOCATION: &str = "IPAllocation";

/// Which kind of IPAM object holds an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HolderKind {
    IPClaim,
    IPAllocation,
}

impl HolderKind {
    pub fn as_str(self) -> &'static str {
        match self {
            HolderKind::IPClaim => KIND_IPCLAIM,
            HolderKind::IPAllocation => KIND_IPALLOCATION,
        }
    }

    /// Reads a claim ref's `kind`; anything else is not ours to check.
    pub fn parse(kind: &str) -> Option<Self> {
        match kind {
            KIND_IPCLAIM => Some(HolderKind::IPClaim),
            KIND_IPALLOCATION => Some(HolderKind::IPAllocation),
            _ => None,
        }
    }
}

impl std::fmt::Display for HolderKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An address together with the IPAM object holding it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    pub kind: HolderKind,
    pub namespace: String,
    pub name: String,
    pub address: Ipv6Addr,
}
