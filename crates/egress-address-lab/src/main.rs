//! `egress-address-lab`: the lab around the controller (see [`egress_address_lab::cli`]).

use std::process::ExitCode;

use clap::Parser;
use egress_address_lab::cli::Cli;

#[tokio::main]
async fn main() -> ExitCode {
    Cli::parse().run().await
}
