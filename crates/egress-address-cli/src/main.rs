//! `egress-address`: the operator's tool beside kubectl (see [`egress_address_cli::cli`]).

use std::process::ExitCode;

use clap::Parser;
use egress_address_cli::cli::Cli;

#[tokio::main]
async fn main() -> ExitCode {
    Cli::parse().run().await
}
