//! The command line: what each subcommand takes, and what its exit code means.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::{bench, chaos, conformance, demo};

#[derive(Parser)]
#[command(
    name = "egress-address-lab",
    version,
    about = "The lab around the egress address controller: demo, bench, chaos, conformance (the operator's tool is egress-address)"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run localplane, the real IPAM inventory and the real controller on loopback, address shards,
    /// and show which address went where.
    Demo(demo::DemoArgs),
    /// Benchmark the controller against localplane (docs/benchmarks.md): the matrix, or one mode.
    Bench(bench::BenchCli),
    /// Run the controller under injected faults and kills, then check the invariants.
    Chaos(chaos::ChaosArgs),
    /// Replay every request shape the controller, this tool, kubectl and the Python client make
    /// on localplane and on the real kube-apiserver, and compare the answers. Exits 0 when every
    /// difference is explained, 1 when one is not, 2 when it could not run.
    Conformance(conformance::ConformanceArgs),
    /// Print a completion script for a shell, e.g. `source <(egress-address-lab completions bash)`.
    Completions(egress_address_cli::cli::Completions),
}

impl Cli {
    /// Runs the command; errors are printed here, so the exit code is all a caller gets.
    pub async fn run(self) -> ExitCode {
        match self.command {
            Command::Completions(c) => c.print::<Cli>("egress-address-lab"),
            Command::Bench(args) => exit(bench::run(args).await.map(|()| true)),
            Command::Conformance(args) => ExitCode::from(conformance::main(&args).await),
            Command::Chaos(args) => exit(chaos::main(args).await.map(|()| true)),
            Command::Demo(args) => {
                init_logging();
                exit(demo::run(&args).await)
            }
        }
    }
}

/// 0 for success, 1 for a run that did not succeed or an error (printed as `anyhow` would).
fn exit(result: anyhow::Result<bool>) -> ExitCode {
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("Error: {e:?}");
            ExitCode::FAILURE
        }
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
