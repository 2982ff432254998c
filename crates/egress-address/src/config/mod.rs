//! How the controller is configured: flags ([`args`], also in Go's syntax: [`goflags`]) and the
//! settings they become, with their one validation ([`settings`]). Pure: nothing here reaches a
//! server (clients are made in `crate::connect`).

pub mod args;
pub mod duration;
pub mod goflags;
pub mod settings;

pub use settings::{Backoff, Invalid, LeaderElection, Settings};
