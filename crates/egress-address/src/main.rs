//! `egress-address-controller`: flags in, controller out.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use egress_address::admin::{self, auth::MetricsAuth, tls::CertSource, tls::ServingCert};
use egress_address::config::args::{Args, Tool};
use egress_address::connect::kubeconfig;
use egress_address::{Controller, Handle, Metrics, ipam, logs};

use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

fn main() -> ExitCode {
    large_allocations_apart();
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

/// Serves every allocation of 128 KiB or more (a page of the shard list, a growing hash table) from
/// its own mapping, returned to the system when freed. glibc raises that threshold to the size of
/// each such block freed, after which the next ones come from the heap, where the small records
/// of 100,000 shards settle between them and keep the heap from shrinking: a controller
/// restarted over 100,000 shards peaked at 164.3 MiB so and at 122.7 MiB with the threshold kept
/// (docs/architecture.md, decisions).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn large_allocations_apart() {
    // SAFETY: mallopt only sets a parameter of glibc's allocator, before any other thread runs.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn large_allocations_apart() {}

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
    let secure = args.admin.metrics_secure;
    let cert_files = args
        .admin
        .metrics_cert_files()
        .map_err(anyhow::Error::msg)?;
    if secure && metrics_addr.is_some() && metrics_addr == probe_addr {
        anyhow::bail!(
            "--metrics-bind-address and --health-probe-bind-address must differ with --metrics-secure: \
             the kubelet's probes carry no credential, and /metrics needs one"
        );
    }
    // Before anything is contacted: a certificate that does not load stops the start.
    let serving = if secure {
        let source = CertSource::from_flags(cert_files, std::env::var("HOSTNAME").ok());
        Some(ServingCert::load(&source).context("the metrics server's certificate")?)
    } else {
        None
    };

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

    let reviewer = cell.clone();
    let controller = Controller::new(settings, cell, ipam, metrics)?;
    let handle = controller.handle();
    let registry = Arc::new(registry);

    let stop = CancellationToken::new();
    // Rotated credentials are picked up while running.
    for follower in cell_follower.into_iter().chain([ipam_follower]) {
        tokio::spawn(follower.run(stop.clone()));
    }
    let secure = serving.map(|(serving, follower)| {
        tokio::spawn(follower.run(stop.clone()));
        (
            serving,
            MetricsAuth::new(reviewer, handle.metrics().clone()),
        )
    });
    let servers = serve_admin(metrics_addr, probe_addr, secure, &handle, registry, &stop).await?;

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

/// Binds the admin addresses and serves them until `stop`. With `secure` (the certificate and
/// the reviewer of `--metrics-secure`), the metrics address serves `/metrics` over HTTPS to those
/// the cell vouches for, and the probe address only the health routes; without, both serve every
/// route in the clear.
async fn serve_admin(
    metrics_addr: Option<SocketAddr>,
    probe_addr: Option<SocketAddr>,
    secure: Option<(Arc<ServingCert>, MetricsAuth)>,
    handle: &Handle,
    registry: Arc<Registry>,
    stop: &CancellationToken,
) -> anyhow::Result<Vec<JoinHandle<Result<(), egress_address::Error>>>> {
    let stopped = || {
        let stop = stop.clone();
        async move { stop.cancelled().await }
    };
    let mut servers = Vec::new();
    let Some((serving, auth)) = secure else {
        let router = admin::router(handle.clone(), registry);
        let mut bound = Vec::new();
        for addr in [metrics_addr, probe_addr].into_iter().flatten() {
            if bound.contains(&addr) {
                continue;
            }
            bound.push(addr);
            let listener = admin::bind(addr).await?;
            info!(addr = %listener.local_addr()?, "serving /live, /ready and /metrics");
            servers.push(tokio::spawn(admin::serve(
                listener,
                router.clone(),
                stopped(),
            )));
        }
        return Ok(servers);
    };
    if let Some(addr) = metrics_addr {
        let listener = admin::bind(addr).await?;
        info!(
            addr = %listener.local_addr()?,
            certificate_sha256 = %serving.fingerprint(),
            "serving /metrics over HTTPS, to callers the cell authenticates and allows to get /metrics"
        );
        let router = admin::auth::router(Arc::new(auth), registry);
        servers.push(tokio::spawn(admin::tls::serve(
            listener,
            router,
            serving.server_config()?,
            stopped(),
        )));
    }
    if let Some(addr) = probe_addr {
        let listener = admin::bind(addr).await?;
        info!(addr = %listener.local_addr()?, "serving /live and /ready");
        let router = admin::probe_router(handle.clone());
        servers.push(tokio::spawn(admin::serve(listener, router, stopped())));
    }
    Ok(servers)
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
