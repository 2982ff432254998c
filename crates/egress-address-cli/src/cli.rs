//! The command line: what each subcommand takes, and what its exit code means.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use crate::audit;

#[derive(Parser)]
#[command(
    name = "egress-address",
    version,
    about = "The operator's tool for the egress address controller: audit a fleet, release orphaned claims, the CRD"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// For every shard in the cell, read the IPAM record its ref names and judge the attribution.
    /// Exits 0 when everything is consistent, 1 when anything is not, 2 when it could not run.
    Audit(audit::AuditArgs),
    /// Print the EgressShard CRD as YAML (the source of config/crd/).
    Crd,
    /// Print a completion script for a shell, e.g. `egress-address completions bash >
    /// /etc/bash_completion.d/egress-address`.
    Completions(Completions),
}

impl Cli {
    /// Runs the command; errors are printed here, so the exit code is all a caller gets.
    pub async fn run(self) -> ExitCode {
        match self.command {
            Command::Crd => {
                print!(
                    "{}",
                    egress_api::crd::to_yaml(&egress_api::crd::egress_shard_crd())
                );
                ExitCode::SUCCESS
            }
            Command::Completions(c) => c.print::<Cli>("egress-address"),
            Command::Audit(args) => ExitCode::from(audit::main(&args).await.code()),
        }
    }
}

/// `completions SHELL`, for this tool and the lab alike.
#[derive(clap::Args)]
pub struct Completions {
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

impl Completions {
    /// Writes the completion script of command line `C`, installed as `name`, to stdout.
    pub fn print<C: CommandFactory>(&self, name: &str) -> ExitCode {
        clap_complete::generate(self.shell, &mut C::command(), name, &mut std::io::stdout());
        ExitCode::SUCCESS
    }
}
