//! How the controller is configured: flags ([`args`]), the settings they become and their one
//! validation ([`settings`]), and clients from kubeconfig files ([`kubeconfig`]).

pub mod args;
pub mod duration;
pub mod kubeconfig;
pub mod settings;

pub use settings::{Backoff, LeaderElection, Settings};
