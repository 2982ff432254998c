//! `egress-address`: the operator's tool around the controller.

mod audit;
mod demo;
mod table;
mod verdict;

use std::process::ExitCode;

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
    /// Run localplane, the real IPAM inventory and the real controller on loopback, address shards,
    /// and show which address went where.
    Demo(demo::DemoArgs),
    /// Print the EgressShard CRD as YAML (the source of config/crd/).
    Crd,
    /// For every shard in the cell, read the IPAM record its ref names and judge the attribution.
    /// Exits 1 when anything is inconsistent.
    Audit(audit::AuditArgs),
    /// Benchmark the controller against localplane (docs/benchmarks.md).
    Bench(egress_address_cli::bench::BenchArgs),
    /// Run the controller under injected faults and kills, then check the invariants.
    Chaos(egress_address_cli::bench::chaos::ChaosArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    match Cli::parse().command {
        Command::Crd => {
            print!(
                "{}",
                egress_api::crd::to_yaml(&egress_api::crd::egress_shard_crd())
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(args) => egress_address_cli::bench::run(args)
            .await
            .map(|()| ExitCode::SUCCESS),
        Command::Chaos(args) => egress_address_cli::bench::chaos::main(args)
            .await
            .map(|()| ExitCode::SUCCESS),
        Command::Demo(args) => {
            init_logging();
            Ok(if demo::run(&args).await? {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Audit(args) => Ok(if audit::run(&args).await? {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }),
    }
}

/// The demo prints its own progress; the controller's logs go to stderr at warn unless RUST_LOG
/// says otherwise.
fn init_logging() {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // The in-process controller logs from its tasks; a closed stderr must not panic them.
        .log_internal_errors(false)
        .try_init();
}
