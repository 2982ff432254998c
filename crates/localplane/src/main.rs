//! `localplane`: serve a local Kubernetes/Milo API on loopback for tests and demos.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use localplane::{Config, FaultConfig, Identity, LocalPlane};

#[derive(Parser, Debug)]
#[command(
    version,
    about = "A local stand-in for a cell's Kubernetes API and Milo project control planes"
)]
struct Args {
    /// Address to listen on (loopback only).
    #[arg(long, env = "LOCALPLANE_LISTEN", default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Directory of CRD YAML files served on the cell (repeatable).
    #[arg(long = "crd-dir", env = "LOCALPLANE_CRD_DIR", value_delimiter = ',')]
    crd_dirs: Vec<PathBuf>,
    /// Directory of CRD YAML files served on every project plane (repeatable).
    #[arg(
        long = "project-crd-dir",
        env = "LOCALPLANE_PROJECT_CRD_DIR",
        value_delimiter = ','
    )]
    project_crd_dirs: Vec<PathBuf>,
    /// Configuration file (YAML): identities, projects, namespaces, manifests, faults.
    #[arg(long, env = "LOCALPLANE_CONFIG")]
    config: Option<PathBuf>,
    /// Milo projects to serve (repeatable). Each serves Milo IPAM (`ipam.miloapis.com`).
    #[arg(long = "project", env = "LOCALPLANE_PROJECTS", value_delimiter = ',')]
    projects: Vec<String>,
    /// The project whose plane holds IPAM's class catalog (default: the first project).
    #[arg(long, env = "LOCALPLANE_IPAM_PLATFORM_PROJECT")]
    ipam_platform_project: Option<String>,
    /// Enforce RBAC for non-admin identities.
    #[arg(long, env = "LOCALPLANE_RBAC")]
    rbac: bool,
    /// Directory to write one kubeconfig per plane and identity into.
    #[arg(long, env = "LOCALPLANE_KUBECONFIG_DIR")]
    kubeconfig_dir: Option<PathBuf>,
    /// Seed for fault injection.
    #[arg(long, env = "LOCALPLANE_SEED")]
    seed: Option<u64>,
    /// Fault config file (YAML/JSON, the body `POST /localplane/faults` takes).
    #[arg(long, env = "LOCALPLANE_FAULTS")]
    faults: Option<PathBuf>,
    /// Cut every watch stream after this many seconds.
    #[arg(long, env = "LOCALPLANE_WATCH_CUT_AFTER")]
    watch_cut_after: Option<f64>,
    /// Events kept per plane for resuming watches.
    #[arg(long, env = "LOCALPLANE_WATCH_HISTORY")]
    watch_history: Option<usize>,
    /// Serve plain HTTP instead of HTTPS (kubectl then sends no bearer tokens).
    #[arg(long, env = "LOCALPLANE_PLAIN_HTTP")]
    plain_http: bool,
    /// Admin token when no identities are configured.
    #[arg(long, env = "LOCALPLANE_ADMIN_TOKEN")]
    admin_token: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        // An unwritable log (a closed pipe) must not panic the task that logged.
        .log_internal_errors(false)
        .init();
    let args = Args::parse();
    anyhow::ensure!(
        args.listen.ip().is_loopback(),
        "localplane only listens on loopback, not {}",
        args.listen
    );
    let mut cfg = match &args.config {
        Some(p) => Config::from_file(p)?,
        None => Config::default(),
    };
    cfg.crd_dirs.extend(args.crd_dirs);
    cfg.project_crd_dirs.extend(args.project_crd_dirs);
    cfg.projects.extend(args.projects);
    // Every project plane serves IPAM, as Milo's do; the catalog lives on one of them.
    if let Some(p) = args.ipam_platform_project {
        cfg.ipam_platform_project = Some(p);
    }
    if cfg.ipam_platform_project.is_none() {
        cfg.ipam_platform_project = cfg.projects.first().cloned();
    }
    cfg.rbac |= args.rbac;
    if let Some(p) = &args.faults {
        cfg.faults = serde_saphyr::from_str::<FaultConfig>(&std::fs::read_to_string(p)?)?;
    }
    if let Some(s) = args.seed {
        cfg.faults.seed = Some(s);
    }
    if let Some(c) = args.watch_cut_after {
        cfg.faults.watch_cut_after_seconds = Some(c);
    }
    if let Some(h) = args.watch_history {
        cfg.watch_history = Some(h);
    }
    if cfg.identities.is_empty()
        && let Some(t) = args.admin_token
    {
        cfg.identities.push(Identity::admin("admin", &t));
    }
    let lp = LocalPlane::builder().config(cfg).build()?;
    let mut running = if args.plain_http {
        lp.serve(args.listen).await?
    } else {
        lp.serve_tls(args.listen).await?
    };
    if let Some(d) = args.kubeconfig_dir {
        running.set_kubeconfig_dir(d);
    }
    for p in running.write_kubeconfigs()? {
        tracing::info!(kubeconfig = %p.display());
    }
    tracing::info!(url = %running.base_url(), "localplane serving");
    tokio::signal::ctrl_c().await?;
    running.shutdown().await;
    Ok(())
}
