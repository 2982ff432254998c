//! What this build is: its version and the git commit it was made from.

/// This build's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The git commit this build was made from (`unknown` outside a checkout); see build.rs.
pub const COMMIT: &str = env!("EGRESS_ADDRESS_COMMIT");
