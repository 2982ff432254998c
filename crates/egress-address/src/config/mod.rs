//! How the controller is configured: flags ([`args`], also in Go's syntax: [`goflags`]), the
//! settings they become and their one validation ([`settings`]), clients from kubeconfig files
//! ([`kubeconfig`]) that follow their file, bound their answers and report every request
//! ([`connection`]).

pub mod args;
pub mod connection;
pub mod duration;
pub mod goflags;
pub mod kubeconfig;
pub mod settings;

pub use settings::{Backoff, LeaderElection, Settings};
