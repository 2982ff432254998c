//! The `egress-address` tool against the test world (`localplane::testing`) and the shipped
//! manifests: one test binary, one module per concern.
//!
//! The tests that run controllers (in-process or as processes) take [`common::one_fleet_at_a_time`]
//! so that two of them never compete for this machine's cores: their deadlines are for a
//! controller with the machine to itself, as they were when each had a binary of its own. The
//! tests that start the real control plane take it too: it picks free ports as it starts, and a
//! fleet restarting a controller on a port picked a moment before must not lose it to them (seen
//! in CI: a chaos controller exited with "Address already in use").

mod audit;
mod bad_input;
mod bench;
mod chaos;
mod common;
mod completions;
mod conformance;
mod demo;
mod doc_commands;
mod fleet_audit;
mod grants;
mod hints;
mod install;
mod layers;
mod manifests;
mod paused_release;
mod real_install;
mod rooms;
