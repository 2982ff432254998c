//! `egress-address-lab`: the controller and the operator's tool on this machine, for a newcomer
//! (the demo), for a number (bench), under faults (chaos) and against the real kube-apiserver
//! (conformance). Nothing here ships: the operator's tool is `egress-address`
//! (crates/egress-address-cli), the controller `egress-address-controller`. Imports point one way,
//! down this list:
//!
//! ```text
//! cli                              (the command line, exit codes)
//!  ↓
//! bench, chaos, conformance, demo  (one folder or file per command; chaos/invariants judges
//!  ↓                                from store reads, tested on worlds with violations planted)
//! cell, fleet                      (which server is the cell, and the real one's install;
//!                                   controller processes against the test world)
//! ```
//!
//! The world itself (localplane with a cell, the platform project, IPAM and the shipped
//! inventory) is `localplane::testing`, shared with the controller's tests; text tables are the
//! tool's (`egress_address_cli::table`).

pub mod bench;
pub mod cell;
pub mod chaos;
pub mod cli;
pub mod conformance;
pub mod demo;
pub mod fleet;
