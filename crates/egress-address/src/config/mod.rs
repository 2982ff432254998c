//! How the controller is configured: flags ([`args`]), the settings they become and their one
//! validation ([`settings`]), clients from kubeconfig files ([`kubeconfig`]) that follow their file
//! and bound their answers ([`connection`]).

pub mod args;
pub mod connection;
pub mod duration;
pub mod kubeconfig;
pub mod settings;

pub use settings::{Backoff, LeaderElection, Settings};
