//! Milo IPAM, as this controller uses it: the client ([`client`]), the claim it asks for
//! ([`spec`]) and how it is named and owned ([`naming`]), the claim path ([`claim`]), what holds
//! an address ([`holding`]), which answers are usable addresses ([`address`]), and what a
//! refusal means ([`reasons`]).

pub mod address;
pub mod claim;
pub mod client;
pub mod holding;
pub mod naming;
pub mod reasons;
pub mod spec;

pub use client::{Deleted, Health, Ipam, get_allocation, get_claim, ipam_client};
pub use holding::{HolderKind, Holding};
