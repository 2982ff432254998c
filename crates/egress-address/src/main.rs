//! `egress-address-controller`: flags in, controller out.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use egress_address::config::args::{Args, Tool};
use egress_address::connect::kubeconfig;
use egress_address::runtime::admin;
use egress_address::{Controller, Metrics, ipam, logs};

use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

fn main() -> ExitCode {
    let args = Args::parse_go_style();
    if let Some(Tool::Completions { shell }) = args.command {
        Args::completions(shell, &mut std::io::stdout());
        return ExitCode::SUCCESS;
    }
    logs::init(&args.log.options());
    // A shard's address is write-once: a misconfigured process must not reach even one shard.
    let settings = match args.settings() {
        Ok(settings) => settings,
        Err(message) => {
            error!("{message}");
            return ExitCode::from(1);
        }
    };
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(err) => {
            error!(%err, "could not start the async runtime");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(args, settings)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            error!("{err:#}");
            ExitCode::from(1)
        }
    }
}

/// The async runtime: one worker thread unless `TOKIO_WORKER_THREADS` asks for more. The
/// controller waits on the network far more than it computes; with a worker per core, a fifth of
/// its CPU went to threads waking one another (docs/architecture.md, decisions).
fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
        builder.worker_threads(1);
    }
    builder.enable_all().build()
}

async fn run(args: Args, settings: egress_address::Settings) -> anyhow::Result<()> {
    let metrics_addr = admin::parse_bind_address(&args.admin.metrics_bind_address)
        .map_err(anyhow::Error::msg)
        .context("--metrics-bind-address")?;
    let probe_addr = admin::parse_bind_address(&args.admin.health_probe_bind_address)
        .map_err(anyhow::Error::msg)
        .context("--health-probe-bind-address")?;

    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let observe = egress_address::connect::connection::counted_by(&metrics);

    let transport = args.planes.transport();
    let (cell, cell_follower) = kubeconfig::following_cell_client(
        args.planes.kubeconfig.as_deref(),
        transport,
        Some(observe.clone()),
    )
    .await
    .context("unable to start manager")?;
    let (ipam, ipam_follower) = ipam::following_ipam_client(
        args.planes.ipam_kubeconfig.as_ref(),
        &settings.platform_project,
        transport,
        Some(observe),
    )
    .await
    .context("unable to load the IPAM kubeconfig")?;

    let controller = Controller::new(settings, cell, ipam, metrics)?;
    let router = admin::router(controller.handle(), Arc::new(registry));

    let stop = CancellationToken::new();
    // Rotated credentials are picked up while running.
    for follower in cell_follower.into_iter().chain([ipam_follower]) {
        tokio::spawn(follower.run(stop.clone()));
    }
    let mut servers = Vec::new();
    let mut bound = Vec::new();
    for addr in [metrics_addr, probe_addr].into_iter().flatten() {
        if bound.contains(&addr) {
            continue;
        }
        bound.push(addr);
        let listener = admin::bind(addr).await?;
        info!(addr = %listener.local_addr()?, "serving /live, /ready and /metrics");
        let stopped = stop.clone();
        servers.push(tokio::spawn(admin::serve(
            listener,
            router.clone(),
            async move { stopped.cancelled().await },
        )));
    }

    tokio::spawn({
        let stop = stop.clone();
        async move {
            shutdown_signal().await;
            info!("received a shutdown signal");
            stop.cancel();
        }
    });
    controller.run(stop.clone().cancelled_owned()).await?;
    stop.cancel();
    for server in servers {
        let _ = server.await;
    }
    Ok(())
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
