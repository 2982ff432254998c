//! The `egress-address` tool. Imports point one way, down this list:
//!
//! ```text
//! cli                       the command line, exit codes
//!  ↓
//! demo  audit/  bench/  chaos/   one folder or file per command (audit/verdict is a pure
//!                                judgement, tested without a server; chaos/invariants judges
//!                                from store reads, tested on worlds with violations planted)
//!  ↓
//! fleet  cell  table        controller processes against the test world; which server is
//!                           the cell (and the real one's install); text tables
//! ```
//!
//! The world itself (localplane with a cell, the platform project, IPAM and the shipped
//! inventory) is `localplane::testing`, shared with the controller's tests.

pub mod audit;
pub mod bench;
pub mod cell;
pub mod chaos;
pub mod cli;
pub mod conformance;
pub mod demo;
pub mod fleet;
mod table;
