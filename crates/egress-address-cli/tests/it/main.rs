//! The `egress-address` tool against the test world (`localplane::testing`) and the shipped
//! manifests: one test binary, one module per concern.
//!
//! The tests that run controllers (in-process or as processes) take [`common::one_fleet_at_a_time`]
//! so that two of them never compete for this machine's cores: their deadlines are for a
//! controller with the machine to itself, as they were when each had a binary of its own.

mod audit;
mod bad_input;
mod bench;
mod chaos;
mod common;
mod completions;
mod conformance;
mod demo;
mod fleet_audit;
mod grants;
mod install;
mod manifests;
mod real_install;
