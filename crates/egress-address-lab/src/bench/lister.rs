//! The "ideal lister": the floor under a restart. A process of its own that lists the same
//! shards from the same server with the controller's page size (kube-runtime's watcher pages by
//! 500), decodes each page with the controller's own lean decoder and keeps what the
//! controller's cache keeps of a shard, then exits. A restarted controller does that and more
//! (its lease, its metrics, its queue, the watch that follows); timed the same way, from spawn to
//! the point where it holds every shard, the two are comparable (`bench growth`'s restart line).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use egress_address::shard::CachedShard;
use egress_address::shard::watched::WatchedShard;
use kube::Api;
use kube::api::ListParams;

use crate::fleet;

/// The page size of kube-runtime's watcher, which the controller's shard watch uses.
pub const PAGE: u32 = 500;

/// `egress-address-lab bench ideal-lister`: the lister as a process of its own (see [`time`]).
#[derive(clap::Args, Debug, Clone)]
pub struct ListerArgs {
    /// Kubeconfig of the cell holding the shards.
    #[arg(long)]
    pub cell_kubeconfig: PathBuf,
    /// Shards per page.
    #[arg(long, default_value_t = PAGE)]
    pub page_size: u32,
}

/// The body of `egress-address-lab bench ideal-lister`: lists every shard and prints how many it
/// keeps.
pub async fn lister(args: &ListerArgs) -> anyhow::Result<()> {
    let kubeconfig = kube::config::Kubeconfig::read_from(&args.cell_kubeconfig)
        .with_context(|| format!("reading {}", args.cell_kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .with_context(|| format!("loading {}", args.cell_kubeconfig.display()))?;
    let api: Api<WatchedShard> = Api::all(kube::Client::try_from(config)?);
    let kept = list_all(&api, args.page_size).await?;
    println!("{}", kept.len());
    Ok(())
}

/// Every shard, page by page, as the cache keeps them.
async fn list_all(api: &Api<WatchedShard>, page_size: u32) -> anyhow::Result<Vec<CachedShard>> {
    let mut kept = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut params = ListParams::default().limit(page_size);
        if let Some(t) = token.take() {
            params = params.continue_token(&t);
        }
        let page = api.list(&params).await.context("listing the shards")?;
        kept.extend(page.items.into_iter().map(|w| w.0));
        match page.metadata.continue_ {
            Some(next) if !next.is_empty() => token = Some(next),
            _ => return Ok(kept),
        }
    }
}

/// Runs the lister as a process over the cell of `cell_kubeconfig`, on one runtime thread as
/// the controller runs by default, and answers its wall time from spawn to exit and how many
/// shards it kept.
pub async fn time(cell_kubeconfig: &Path, timeout: Duration) -> anyhow::Result<(Duration, usize)> {
    let bin = fleet::locate_binary("egress-address-lab")?;
    let started = Instant::now();
    let child = tokio::process::Command::new(&bin)
        .args(["bench", "ideal-lister", "--cell-kubeconfig"])
        .arg(cell_kubeconfig)
        .env("TOKIO_WORKER_THREADS", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let out = tokio::time::timeout(timeout, child.wait_with_output())
        .await
        .context("the ideal lister did not finish")??;
    let wall = started.elapsed();
    if !out.status.success() {
        bail!("the ideal lister exited with {}", out.status);
    }
    let kept = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .context("the ideal lister's count")?;
    Ok((wall, kept))
}
