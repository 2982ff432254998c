//! `egress-address-lab demo`: the whole system on one machine.
//!
//! localplane serves a cell and the platform project on loopback; the real IPAM inventory from
//! `config/ipam/` is applied with a documentation prefix; shards are created over HTTP; the real
//! controller (in this process, talking HTTP with the same kubeconfigs an operator would use)
//! addresses them; then a table shows which address went where. Progress is shown on a terminal
//! only: piped into a file or a CI log, the output is the lines and the table, nothing redrawn.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use egress_address::{Controller, LeaderElection, Metrics, Settings};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use kube::api::PostParams;
use localplane::testing::{
    ADDRESS_CLASS, ADMIN, CLAIM_NAMESPACE, LOCATION, PLATFORM_PROJECT, SHARD_NAMESPACE, World,
    is_addressed, shard_object, shards_key,
};
use prometheus_client::registry::Registry;

pub use crate::cell::CellKind;

#[derive(clap::Args, Debug, Clone)]
pub struct DemoArgs {
    /// How many shards to create.
    #[arg(long, default_value_t = 8)]
    pub shards: usize,
    /// Exit after the table (non-zero if any shard was not addressed) instead of serving on.
    #[arg(long)]
    pub once: bool,
    /// How long to wait for every shard to be addressed.
    #[arg(long, default_value = "60s", value_parser = humantime_secs)]
    pub timeout: Duration,
    /// The root prefix filled into the inventory (a /40 of the documentation range).
    #[arg(long, default_value = "2001:db8::/40")]
    pub root_cidr: String,
    /// Reconcile concurrency of the controller.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// The cell: localplane (starts in a second), or the real kube-apiserver and etcd built from
    /// Go modules by testcluster/ (built on first use; needs Go). IPAM is localplane's either way.
    #[arg(long, value_enum, default_value_t = CellKind::Local)]
    pub cell: CellKind,
}

fn humantime_secs(s: &str) -> Result<Duration, String> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 60s or 2m"))?;
    match unit {
        "" | "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        _ => Err(format!("{s:?} is not a duration like 60s or 2m")),
    }
}

/// One row of the result table.
#[derive(Debug, Clone)]
pub struct Row {
    pub name: String,
    pub address: String,
    pub holder: String,
    pub time_to_address: Option<Duration>,
}

/// Runs the demo; returns whether every shard got an address.
pub async fn run(args: &DemoArgs) -> Result<bool> {
    let mut out = std::io::stdout();
    writeln!(
        out,
        "Starting localplane (a cell and Milo project {PLATFORM_PROJECT:?}) on loopback..."
    )?;
    let world = crate::fleet::world()
        .root_cidr(&args.root_cidr)
        .tls(true)
        .start()
        .await
        .context("starting localplane")?;
    writeln!(out, "  API server: {}", world.lp().base_url())?;
    writeln!(
        out,
        "  applied config/ipam/egress-shard-ipv6.yaml with root cidr {}",
        args.root_cidr
    )?;

    let real = match args.cell {
        CellKind::Local => None,
        CellKind::Real => Some(start_real_cell(&mut out).await?),
    };
    let cell = match &real {
        Some(real) => real.client(realcell::Identity::Admin).await?,
        None => kube::Client::try_from(kube_config(world.cell_kubeconfig()).await?)?,
    };
    let shards: kube::Api<egress_api::shard::EgressShard> =
        kube::Api::namespaced(cell.clone(), SHARD_NAMESPACE);
    let ipam = egress_address::ipam_client(world.ipam_kubeconfig(), PLATFORM_PROJECT).await?;
    let mut settings = Settings::new(ADDRESS_CLASS, LOCATION, PLATFORM_PROJECT);
    settings.claim_namespace = CLAIM_NAMESPACE.to_string();
    settings.concurrency = args.concurrency.max(1);
    settings.leader_election = Some(LeaderElection::new("default"));
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let controller = Controller::new(settings, cell.clone(), ipam, metrics)?;
    let handle = controller.handle();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(controller.run(async move {
        let _ = stop_rx.await;
    }));

    let names: Vec<String> = (0..args.shards).map(|i| format!("shard-{i:04}")).collect();
    let mut created: BTreeMap<String, Instant> = BTreeMap::new();
    writeln!(
        out,
        "Creating {} EgressShards in namespace {SHARD_NAMESPACE:?}...",
        names.len()
    )?;
    for name in &names {
        let shard = serde_json::from_value(shard_object(SHARD_NAMESPACE, name))?;
        shards
            .create(&PostParams::default(), &shard)
            .await
            .with_context(|| format!("creating shard {name}"))?;
        created.insert(name.clone(), Instant::now());
    }

    let start = Instant::now();
    let mut addressed_at: BTreeMap<String, Duration> = BTreeMap::new();
    let bar = progress_bar(names.len());
    loop {
        for s in shards_now(&world, real.is_some().then_some(&shards)).await? {
            let name = s["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if is_addressed(&s) && !addressed_at.contains_key(&name) {
                let since = created.get(&name).map(|t| t.elapsed()).unwrap_or_default();
                addressed_at.insert(name, since);
            }
        }
        bar.set_position(addressed_at.len() as u64);
        bar.set_message(if handle.is_leader() {
            ""
        } else {
            " (waiting for the lease)"
        });
        if addressed_at.len() >= names.len() || start.elapsed() > args.timeout {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bar.finish_and_clear();
    writeln!(
        out,
        "{} of {} shards addressed in {} ms.",
        addressed_at.len(),
        names.len(),
        start.elapsed().as_millis()
    )?;

    let now = shards_now(&world, real.is_some().then_some(&shards)).await?;
    let rows = rows(&now, &names, &addressed_at);
    print_rows(&mut out, &rows)?;
    let ok = rows.iter().all(|r| r.time_to_address.is_some());
    if !ok {
        writeln!(
            out,
            "Some shards got no address within {:?}; see the events: kubectl get events -n {SHARD_NAMESPACE}",
            args.timeout
        )?;
    }

    if !args.once {
        let cell_admin = match &real {
            Some(real) => real.kubeconfig(realcell::Identity::Admin),
            None => world.lp().kubeconfig_path("cell", ADMIN)?,
        };
        let ipam_admin = world.lp().kubeconfig_path(PLATFORM_PROJECT, ADMIN)?;
        let steps = NextSteps {
            kubectl: project_kubectl(),
            tool: crate::fleet::tool_command(),
            cell: cell_admin,
            ipam: ipam_admin,
        };
        steps.print(&mut out)?;
        tokio::signal::ctrl_c().await.ok();
        println!("\nStopping.");
    }
    let _ = stop_tx.send(());
    match tokio::time::timeout(Duration::from_secs(10), task).await {
        Ok(Ok(Err(e))) => eprintln!("controller stopped with an error: {e}"),
        Ok(Err(e)) => eprintln!("controller task failed: {e}"),
        _ => {}
    }
    world.shutdown().await;
    if let Some(real) = real {
        real.stop().await?;
    }
    Ok(ok)
}

/// Starts the real control plane (building it first if needed), installs the CRD and the shard
/// namespace, and says which server it is.
async fn start_real_cell(out: &mut impl Write) -> Result<realcell::RealCell> {
    writeln!(
        out,
        "Starting the real control plane (kube-apiserver and etcd from testcluster/; the first start builds it)..."
    )?;
    let real = realcell::RealCell::start()
        .await
        .context("starting the real control plane")?;
    let admin = real.client(realcell::Identity::Admin).await?;
    let version = admin.apiserver_version().await?;
    writeln!(
        out,
        "  API server: {} (kube-apiserver {}, ready in {} ms)",
        real.server(),
        version.git_version,
        real.started_in().as_millis()
    )?;
    let crd = realcell::workspace_root().join("config/crd/network.datumapis.com_egressshards.yaml");
    real.install_crds(&crd).await?;
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": SHARD_NAMESPACE}}))?;
    kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(admin)
        .create(&PostParams::default(), &ns)
        .await
        .context("creating the shard namespace")?;
    writeln!(
        out,
        "  installed config/crd and namespace {SHARD_NAMESPACE:?}"
    )?;
    Ok(real)
}

/// The shards as the cell holds them now: from localplane's store (no request), or listed from
/// the real API server.
async fn shards_now(
    world: &World,
    real: Option<&kube::Api<egress_api::shard::EgressShard>>,
) -> Result<Vec<serde_json::Value>> {
    match real {
        None => Ok(world
            .lp()
            .cell()
            .objects(&shards_key(), Some(SHARD_NAMESPACE))),
        Some(api) => Ok(api
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .map(serde_json::to_value)
            .collect::<Result<_, _>>()?),
    }
}

async fn kube_config(path: &Path) -> Result<kube::Config> {
    let kc = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?)
}

/// A bar of addressed shards, drawn on stdout only when it is a terminal (indicatif hides it
/// otherwise, so a log gets no carriage returns).
fn progress_bar(total: usize) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stdout());
    bar.set_style(
        ProgressStyle::with_template("[{bar:40}] {pos}/{len} addressed{msg}")
            .expect("the template is valid")
            .progress_chars("##."),
    );
    bar
}

fn rows(
    now: &[serde_json::Value],
    names: &[String],
    addressed_at: &BTreeMap<String, Duration>,
) -> Vec<Row> {
    names
        .iter()
        .map(|name| {
            let s = now
                .iter()
                .find(|s| s["metadata"]["name"] == name.as_str())
                .cloned()
                .unwrap_or_default();
            let r = &s["spec"]["shardAddressIPv6ClaimRef"];
            Row {
                name: name.clone(),
                address: s["spec"]["shardAddressIPv6"]
                    .as_str()
                    .unwrap_or("-")
                    .to_string(),
                holder: match (r["kind"].as_str(), r["name"].as_str()) {
                    (Some(k), Some(n)) => format!("{k}/{n}"),
                    _ => "-".to_string(),
                },
                time_to_address: addressed_at.get(name).copied(),
            }
        })
        .collect()
}

fn print_rows(out: &mut impl Write, rows: &[Row]) -> std::io::Result<()> {
    let cells: Vec<[String; 4]> = rows
        .iter()
        .map(|r| {
            [
                r.name.clone(),
                r.address.clone(),
                r.holder.clone(),
                r.time_to_address
                    .map(|d| format!("{} ms", d.as_millis()))
                    .unwrap_or_else(|| "not addressed".into()),
            ]
        })
        .collect();
    egress_address_cli::table::write(
        out,
        &["SHARD", "ADDRESS", "HOLDER", "TIME TO ADDRESS"],
        &cells,
    )
}

/// What the demo prints as next steps, each a command that runs as printed from the directory the
/// demo was started in (crates/egress-address-lab/tests/it/hints.rs runs every one).
struct NextSteps {
    /// kubectl where the project puts it (`.venv/bin/kubectl`, by `bash .ci/install-kubectl`).
    kubectl: String,
    /// The operator's tool: beside this binary, else how to run it (`fleet::tool_command`).
    tool: String,
    cell: std::path::PathBuf,
    ipam: std::path::PathBuf,
}

impl NextSteps {
    fn print(&self, out: &mut impl Write) -> std::io::Result<()> {
        let (k, t) = (&self.kubectl, &self.tool);
        let (c, i) = (self.cell.display(), self.ipam.display());
        writeln!(
            out,
            "
The controller keeps running. Try, in another terminal (kubectl is the project's, put there by `bash .ci/install-kubectl`):

  # the shards, and their addresses as the controller wrote them
  {k} --kubeconfig {c} -n {SHARD_NAMESPACE} get egressshards -o custom-columns=NAME:.metadata.name,ADDRESS:.spec.shardAddressIPv6,HOLDER:.spec.shardAddressIPv6ClaimRef.name
  # watch them change (Ctrl-C ends the watch)
  {k} --kubeconfig {c} -n {SHARD_NAMESPACE} get egressshards -w
  # a new shard gets an address within moments
  printf 'apiVersion: network.datumapis.com/v1alpha1\\nkind: EgressShard\\nmetadata: {{name: extra, namespace: {SHARD_NAMESPACE}}}\\nspec: {{targetRef: {{kind: Node, name: node-extra}}}}\\n' | {k} --kubeconfig {c} apply -f -
  # deleting a shard releases its claim
  {k} --kubeconfig {c} -n {SHARD_NAMESPACE} delete egressshard shard-0000
  # the claims in the platform project
  {k} --kubeconfig {i} -n {CLAIM_NAMESPACE} get ipclaims
  # an address is write-once: this is refused by the API server
  {k} --kubeconfig {c} -n {SHARD_NAMESPACE} patch egressshard shard-0001 --type merge -p '{{\"spec\":{{\"shardAddressIPv6\":\"2001:db8::dead\"}}}}'
  # which address went where (the operator's tool)
  {t} audit --cell-kubeconfig {c} --ipam-kubeconfig {i}

Press Ctrl-C to stop."
        )
    }
}

/// kubectl where `bash .ci/install-kubectl` puts it; `kubectl` from PATH before that has run.
fn project_kubectl() -> String {
    let path = localplane::testing::workspace_root().join(".venv/bin/kubectl");
    if path.is_file() {
        crate::fleet::as_typed(&path)
    } else {
        "kubectl".to_string()
    }
}
