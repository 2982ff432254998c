//! The library half of the `egress-address` tool: what its subcommands and integration tests share.

pub mod bench;
