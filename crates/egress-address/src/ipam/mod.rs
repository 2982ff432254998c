//! Milo IPAM, as this controller uses it: the client ([`client`]), the claim it asks for
//! ([`spec`]) and how it is named and owned ([`naming`]), the claim path ([`claim`]), the one
//! release path ([`release`]), claims whose shard is gone for good ([`orphans`]), what holds
//! an address ([`holding`]), which answers are usable addresses ([`address`]), what a refusal
//! means ([`reasons`]), and how an outage is kept from becoming a retry storm ([`breaker`]).

pub mod address;
pub mod breaker;
pub mod claim;
pub mod client;
pub mod holding;
pub mod naming;
pub mod orphans;
pub mod reasons;
pub mod release;
pub mod spec;

pub use client::{
    CircuitOpen, Deleted, Health, Ipam, following_ipam_client, get_allocation, get_claim,
    ipam_client, ipam_client_with, is_circuit_open,
};
pub use holding::{HolderKind, Holding};
