//! `egress-address`: the operator's tool around the controller.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "egress-address",
    version,
    about = "Demo, audit and tooling for the egress address controller"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the EgressShard CRD as YAML (the source of config/crd/).
    Crd,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Crd => {
            print!(
                "{}",
                egress_api::crd::to_yaml(&egress_api::crd::egress_shard_crd())
            );
            Ok(())
        }
    }
}
