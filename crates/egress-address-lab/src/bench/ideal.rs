//! The "ideal client": the fewest requests that can address a shard (create the claim, update the
//! shard with the bound address) and, when it watches, release a deleted shard's (one DELETE of
//! the claim), run at the same concurrency as the controller, over the same HTTP, so the
//! controller's overhead is measured against a floor rather than against nothing.
//! Like the controller, which starts cold in every run, it first learns which shards there are:
//! one list, unpaginated, over the same HTTP. (Until 2026-12 it read them from the server's
//! memory, as if from a watch it already held, which left the controller's own initial list, about
//! 0.6 s of 10,000 production-shaped shards, on one side of the ratio only.)
//!
//! The matrix runs it as a process of its own ([`spawn`], `egress-address-lab bench ideal-client`),
//! as every client of an API server is, and times it from its spawn to its last address exactly
//! as it times the controller. Run inside the bench process ([`run`]), it shares the server's
//! threads: a request and its answer can pass between client and server without either process
//! being woken by the kernel, a shortcut no real client has (2026-12: 0.3–0.5 s of a 10,000-shard
//! run at concurrency 4).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use egress_api::ipam::{IPClaim, IPClaimSpec, ScopeRef};
use egress_api::shard::{AddressClaimRef, EgressShard, LABEL_EGRESS_IPV6};
use futures::StreamExt;
use kube::Api;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};

use localplane::testing::{ADDRESS_CLASS, CLAIM_NAMESPACE, LOCATION, PLATFORM_PROJECT, address_of};

use crate::fleet;

/// `egress-address-lab bench ideal-client`: the ideal client as a process of its own (see [`spawn`]).
#[derive(clap::Args, Debug, Clone)]
pub struct ClientArgs {
    /// Kubeconfig of the cell holding the shards.
    #[arg(long)]
    pub cell_kubeconfig: PathBuf,
    /// Kubeconfig whose server is the platform project's control plane.
    #[arg(long)]
    pub ipam_kubeconfig: PathBuf,
    /// Namespace of the shards to address.
    #[arg(long)]
    pub namespace: String,
    /// Shards addressed in parallel.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
}

/// The body of `egress-address-lab bench ideal-client`.
pub async fn client(args: &ClientArgs) -> anyhow::Result<()> {
    let cell = client_from(&args.cell_kubeconfig).await?;
    let ipam = client_from(&args.ipam_kubeconfig).await?;
    address_all(
        Api::namespaced(cell, &args.namespace),
        Api::namespaced(ipam, CLAIM_NAMESPACE),
        &args.namespace,
        args.concurrency,
    )
    .await
    .map(drop)
}

async fn client_from(path: &Path) -> anyhow::Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("reading {}", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .with_context(|| format!("loading {}", path.display()))?;
    kube::Client::try_from(config).with_context(|| format!("a client from {}", path.display()))
}

/// Starts the ideal client as a process of its own over the shards of `namespace` in the cell
/// of `cell_kubeconfig`, claiming through `ipam_kubeconfig`. It exits once every shard it listed
/// is addressed. It runs on one runtime thread, as the controller does by default, so the two
/// differ in what they do, not in how their requests are scheduled.
pub fn spawn(
    cell_kubeconfig: &Path,
    ipam_kubeconfig: &Path,
    namespace: &str,
    concurrency: usize,
) -> anyhow::Result<tokio::process::Child> {
    let bin = fleet::locate_binary("egress-address-lab")?;
    tokio::process::Command::new(&bin)
        .args(["bench", "ideal-client", "--cell-kubeconfig"])
        .arg(cell_kubeconfig)
        .arg("--ipam-kubeconfig")
        .arg(ipam_kubeconfig)
        .args(["--namespace", namespace, "--concurrency"])
        .arg(concurrency.to_string())
        .env("TOKIO_WORKER_THREADS", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))
}

/// Addresses every shard of `namespace` of the cell `cell` with `concurrency` parallel tasks
/// inside this process, claiming through `claims`; the wall time.
pub async fn run(
    cell: kube::Client,
    claims: Api<IPClaim>,
    namespace: &str,
    concurrency: usize,
) -> anyhow::Result<Duration> {
    address_all(
        Api::namespaced(cell, namespace),
        claims,
        namespace,
        concurrency,
    )
    .await
}

async fn address_all(
    shards: Api<EgressShard>,
    claims: Api<IPClaim>,
    namespace: &str,
    concurrency: usize,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let listed = shards
        .list(&ListParams::default())
        .await
        .context("the ideal client listing the shards")?;
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(listed.items)
        .map(|shard| {
            let shards = shards.clone();
            let claims = claims.clone();
            async move { address_one(&shards, &claims, namespace, &shard).await }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let elapsed = start.elapsed();
    for r in results {
        r?;
    }
    Ok(elapsed)
}

/// The ideal client's claim for shard `namespace/name`: one per shard name, which is all a run
/// needs, as no name comes back once its shard is deleted.
fn claim_name(namespace: &str, name: &str) -> String {
    format!("ideal-{namespace}-{name}")
}

/// Releases what shard `namespace/name` held: the one DELETE of its claim.
async fn release_one(claims: &Api<IPClaim>, namespace: &str, name: &str) -> anyhow::Result<()> {
    let claim_name = claim_name(namespace, name);
    claims
        .delete(&claim_name, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting claim {claim_name}"))?;
    Ok(())
}

async fn address_one(
    shards: &Api<EgressShard>,
    claims: &Api<IPClaim>,
    namespace: &str,
    shard: &EgressShard,
) -> anyhow::Result<()> {
    let name = shard.metadata.name.clone().unwrap_or_default();
    let claim_name = claim_name(namespace, &name);
    let claim = IPClaim {
        metadata: ObjectMeta {
            name: Some(claim_name.clone()),
            namespace: Some(CLAIM_NAMESPACE.into()),
            ..Default::default()
        },
        spec: IPClaimSpec {
            class_name: ADDRESS_CLASS.into(),
            ip_family: egress_api::ipam::FAMILY_IPV6.into(),
            prefix_length: Some(128),
            scope: BTreeMap::from([(
                "location".to_string(),
                ScopeRef {
                    api_group: "networking.datumapis.com".into(),
                    kind: "Location".into(),
                    name: LOCATION.into(),
                    uid: String::new(),
                },
            )]),
            reclaim_policy: egress_api::ipam::RECLAIM_DELETE.into(),
            target: egress_api::ipam::TARGET_BLOCK.into(),
            ..Default::default()
        },
        status: None,
    };
    let bound = claims
        .create(&PostParams::default(), &claim)
        .await
        .with_context(|| format!("creating claim {claim_name}"))?;
    let cidr = bound.status.map(|s| s.allocated_cidr).unwrap_or_default();
    let addr = address_of(&cidr)
        .with_context(|| format!("claim {claim_name} answered {cidr:?}, not a /128"))?;
    let claim_ref = AddressClaimRef {
        api_group: egress_api::ipam::GROUP.into(),
        kind: "IPClaim".into(),
        project: PLATFORM_PROJECT.into(),
        namespace: CLAIM_NAMESPACE.into(),
        name: claim_name,
    };
    // The write the controller makes: a merge patch conditional on the version it read.
    let patch = serde_json::json!({
        "metadata": {
            "resourceVersion": shard.metadata.resource_version,
            "labels": {LABEL_EGRESS_IPV6: "true"},
        },
        "spec": {
            "shardAddressIPv6": addr.to_string(),
            "shardAddressIPv6ClaimRef": claim_ref,
        },
    });
    shards
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("updating shard {namespace}/{name}"))?;
    Ok(())
}

/// The ideal client in a cell that keeps getting new shards and losing old ones: one watch on the
/// namespace; for every shard it sees without an address the same two requests as [`run`], and
/// for every shard it sees deleted the DELETE of its claim, `concurrency` at a time (the watch
/// waits while all are busy, as a work queue would). Returns once its watch has listed the
/// namespace, with the task, which runs until aborted.
pub async fn watch(
    cell: kube::Client,
    claims: Api<IPClaim>,
    namespace: &str,
    concurrency: usize,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    use kube::runtime::watcher;

    let shards: Api<EgressShard> = Api::namespaced(cell, namespace);
    let namespace = namespace.to_string();
    let (synced_tx, synced_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
        let mut seen = std::collections::HashSet::new();
        let mut synced = Some(synced_tx);
        let mut stream = watcher(shards.clone(), watcher::Config::default()).boxed();
        while let Some(event) = stream.next().await {
            let shard = match event {
                Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) => s,
                Ok(watcher::Event::Delete(s)) => {
                    let Ok(permit) = permits.clone().acquire_owned().await else {
                        return;
                    };
                    let (claims, namespace) = (claims.clone(), namespace.clone());
                    let name = s.metadata.name.unwrap_or_default();
                    tokio::spawn(async move {
                        let _permit = permit;
                        if let Err(e) = release_one(&claims, &namespace, &name).await {
                            eprintln!("bench: the ideal client: {e:#}");
                        }
                    });
                    continue;
                }
                Ok(watcher::Event::InitDone) => {
                    if let Some(tx) = synced.take() {
                        let _ = tx.send(());
                    }
                    continue;
                }
                Ok(_) => continue,
                Err(e) => {
                    eprintln!("bench: the ideal client's watch: {e}");
                    continue;
                }
            };
            if !shard.spec.shard_address_ipv6.is_empty()
                || !seen.insert(shard.metadata.name.clone().unwrap_or_default())
            {
                continue;
            }
            let Ok(permit) = permits.clone().acquire_owned().await else {
                return;
            };
            let (shards, claims, namespace) = (shards.clone(), claims.clone(), namespace.clone());
            tokio::spawn(async move {
                let _permit = permit;
                if let Err(e) = address_one(&shards, &claims, &namespace, &shard).await {
                    eprintln!("bench: the ideal client: {e:#}");
                }
            });
        }
    });
    synced_rx
        .await
        .context("the ideal client's watch ended before it listed the shards")?;
    Ok(task)
}
