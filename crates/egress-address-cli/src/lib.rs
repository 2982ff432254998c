//! `egress-address`, the operator's tool. Imports point one way, down this list:
//!
//! ```text
//! cli     (the command line, exit codes)
//!  ↓
//! audit   (which address went where, orphaned claims and their release; audit/verdict and
//!  ↓       audit/fleet are pure judgements, tested without a server)
//! table   (text tables)
//! ```
//!
//! It links the controller's library for everything it judges and releases by (naming, the
//! release path, the IPAM client), and nothing of the lab: the demo, bench, chaos and
//! conformance are `egress-address-lab` (crates/egress-address-lab), which also holds the tests
//! that run this tool against a cell.

pub mod audit;
pub mod cli;
pub mod table;
