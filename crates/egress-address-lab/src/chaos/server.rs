//! The API server that plays one cell of a chaos run (`--cell local|real`), and the harness's
//! only way to reach it: reads and creates of the run, the faults its controllers meet, and the
//! requests they were counted making.
//!
//! * **local**: a localplane world. Reads go to its store (no request, so nothing the run does
//!   disturbs the counters); its own server injects the faults. The first cell's world also
//!   serves IPAM.
//! * **real**: kube-apiserver 1.37 and etcd (`realcell`), installed as `config/` installs the
//!   controller, with a [`FaultProxy`] in front. The controllers (as their ServiceAccount) and
//!   the run's deletes go through the proxy and meet its faults; the run's reads and creates go
//!   straight to the apiserver as its admin, so they are never faulted and never counted. IPAM
//!   is a localplane world either way (Milo is not available), held by the first cell.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use egress_address::config::settings::LEASE_NAME;
use egress_api::shard::EgressShard;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use localplane::testing::{World, leases_key, shards_key};
use localplane::{FaultConfig, FaultProxy, Faults, InjectedFaults, Metrics, Upstream};
use realcell::{Identity, RealCell};
use serde_json::Value;

use super::faults::CELL_PLANE;
use crate::cell::{SYSTEM_NAMESPACE, install};

/// The namespace a chaos run's shards live in, in every cell.
pub const NAMESPACE: &str = "chaos";

/// Where localplane's controllers keep it: their namespace is unset there.
const LOCAL_LEASE_NAMESPACE: &str = "default";

pub enum CellServer {
    Local(Box<World>),
    Real(Box<RealServer>),
}

pub struct RealServer {
    real: RealCell,
    proxy: FaultProxy,
    /// The run's reads and creates, straight to the apiserver.
    admin: kube::Client,
    /// The run's deletes, through the proxy: they meet the faults as a user's would.
    admin_proxied: kube::Client,
    /// The controller's ServiceAccount, pointed at the proxy.
    controller_kubeconfig: PathBuf,
    /// IPAM's world, held by the first cell.
    ipam: Option<World>,
}

impl CellServer {
    /// A fresh real control plane with the CRD, the run's namespace and the shipped RBAC, behind
    /// a fault proxy of its own; `ipam` is held with it (the first cell holds IPAM's world).
    pub async fn real(ipam: Option<World>) -> anyhow::Result<CellServer> {
        let real = RealCell::start()
            .await
            .context("starting a real control plane")?;
        install(&real, &[NAMESPACE]).await?;
        let ca_path = real.dir().join("ca.crt");
        let ca = std::fs::read_to_string(&ca_path)
            .with_context(|| format!("reading {}", ca_path.display()))?;
        let upstream = Upstream {
            server: real.server().to_string(),
            ca_pem: Some(ca),
            plane: CELL_PLANE.into(),
        };
        let proxy = FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], 0)), upstream).await?;
        let through = |who: Identity| -> anyhow::Result<PathBuf> {
            let to = real.dir().join(format!("proxied-{}", who.file_name()));
            proxy.kubeconfig_through(&real.kubeconfig(who), &to)?;
            Ok(to)
        };
        let controller_kubeconfig = through(Identity::Controller)?;
        let admin_proxied = realcell::client_from(&through(Identity::Admin)?).await?;
        let admin = real.client(Identity::Admin).await?;
        Ok(CellServer::Real(Box::new(RealServer {
            real,
            proxy,
            admin,
            admin_proxied,
            controller_kubeconfig,
            ipam,
        })))
    }

    /// The cell's identity as its controllers read it: the UID of its `kube-system` namespace.
    pub async fn id(&self) -> anyhow::Result<String> {
        match self {
            CellServer::Local(w) => Ok(w.lp().cell_uid()),
            CellServer::Real(r) => {
                let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(r.admin.clone());
                let ns = api
                    .get("kube-system")
                    .await
                    .context("reading kube-system")?;
                ns.metadata
                    .uid
                    .context("the real cell's kube-system namespace has no uid")
            }
        }
    }

    /// The kubeconfig the cell's controllers use, and the environment they need besides.
    pub fn controller_access(&self) -> (PathBuf, Vec<(String, String)>) {
        match self {
            CellServer::Local(w) => (w.cell_kubeconfig().to_path_buf(), vec![]),
            CellServer::Real(r) => (
                r.controller_kubeconfig.clone(),
                vec![("POD_NAMESPACE".into(), SYSTEM_NAMESPACE.into())],
            ),
        }
    }

    /// A client for the run's deletes: they meet the cell's faults.
    pub fn deleter(&self) -> kube::Client {
        match self {
            CellServer::Local(w) => w.cell(),
            CellServer::Real(r) => r.admin_proxied.clone(),
        }
    }

    /// Puts `cfg` in place for the cell (and for IPAM, on the cell that holds it).
    pub fn set_faults(&self, cfg: FaultConfig) {
        match self {
            CellServer::Local(w) => w.lp().faults().set(cfg),
            CellServer::Real(r) => {
                if let Some(w) = &r.ipam {
                    w.lp().faults().set(cfg.clone());
                }
                r.proxy.faults().set(cfg);
            }
        }
    }

    pub fn clear_faults(&self) {
        self.faults().clear();
        if let CellServer::Real(r) = self
            && let Some(w) = &r.ipam
        {
            w.lp().faults().clear();
        }
    }

    fn faults(&self) -> &Faults {
        match self {
            CellServer::Local(w) => w.lp().faults(),
            CellServer::Real(r) => r.proxy.faults(),
        }
    }

    /// The requests the cell's server (localplane's, or the proxy) counted.
    pub fn cell_metrics(&self) -> &Metrics {
        match self {
            CellServer::Local(w) => w.lp().metrics(),
            CellServer::Real(r) => r.proxy.metrics(),
        }
    }

    /// The requests IPAM's world counted, on the cell that holds it.
    pub fn ipam_metrics(&self) -> Option<&Metrics> {
        match self {
            CellServer::Local(w) => Some(w.lp().metrics()),
            CellServer::Real(r) => r.ipam.as_ref().map(|w| w.lp().metrics()),
        }
    }

    /// The faults injected, by plane: the cell's as `cell`, and IPAM's on the cell that holds it.
    pub fn injected_faults(&self) -> Vec<(String, InjectedFaults)> {
        let mut out: Vec<_> = self
            .cell_metrics()
            .injected_faults_by_plane()
            .into_iter()
            .collect();
        if let CellServer::Real(r) = self
            && let Some(w) = &r.ipam
        {
            // Its own cell serves nobody in a real run.
            out.extend(
                w.lp()
                    .metrics()
                    .injected_faults_by_plane()
                    .into_iter()
                    .filter(|(plane, _)| plane != CELL_PLANE),
            );
        }
        out
    }

    /// Makes `shard` (an EgressShard as JSON) without a fault; as stored.
    pub async fn create(&self, shard: Value) -> anyhow::Result<Value> {
        match self {
            CellServer::Local(w) => w
                .lp()
                .cell()
                .apply_object(shard)
                .map_err(|e| anyhow::anyhow!("{e:?}")),
            CellServer::Real(r) => {
                let obj: DynamicObject = serde_json::from_value(shard)?;
                let made = shards(&r.admin)
                    .create(&PostParams::default(), &obj)
                    .await?;
                Ok(serde_json::to_value(made)?)
            }
        }
    }

    /// The run's shards now.
    pub async fn shards(&self) -> anyhow::Result<Vec<Value>> {
        match self {
            CellServer::Local(w) => Ok(w.lp().cell().objects(&shards_key(), Some(NAMESPACE))),
            CellServer::Real(r) => {
                let list = shards(&r.admin)
                    .list(&ListParams::default())
                    .await
                    .context("listing the real cell's shards")?;
                list.items
                    .into_iter()
                    .map(|o| serde_json::to_value(o).map_err(anyhow::Error::from))
                    .collect()
            }
        }
    }

    /// Shard `name` now.
    pub async fn shard(&self, name: &str) -> anyhow::Result<Option<Value>> {
        match self {
            CellServer::Local(w) => Ok(w.lp().cell().object(&shards_key(), Some(NAMESPACE), name)),
            CellServer::Real(r) => {
                let got = shards(&r.admin)
                    .get_opt(name)
                    .await
                    .with_context(|| format!("reading shard {name} of the real cell"))?;
                got.map(serde_json::to_value)
                    .transpose()
                    .map_err(anyhow::Error::from)
            }
        }
    }

    /// Who holds the controllers' Lease now (empty: nobody yet).
    pub async fn lease_holder(&self) -> anyhow::Result<String> {
        let lease = match self {
            CellServer::Local(w) => {
                w.lp()
                    .cell()
                    .object(&leases_key(), Some(LOCAL_LEASE_NAMESPACE), LEASE_NAME)
            }
            CellServer::Real(r) => {
                let api: Api<k8s_openapi::api::coordination::v1::Lease> =
                    Api::namespaced(r.admin.clone(), SYSTEM_NAMESPACE);
                api.get_opt(LEASE_NAME)
                    .await
                    .context("reading the real cell's Lease")?
                    .map(serde_json::to_value)
                    .transpose()?
            }
        };
        Ok(lease
            .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
            .unwrap_or_default())
    }

    /// Stops the servers; with `keep`, the files of IPAM's world (the run's logs) stay, and
    /// their folder is returned.
    pub async fn shutdown(self, keep: bool) -> Option<PathBuf> {
        let world = match self {
            CellServer::Local(w) => Some(*w),
            CellServer::Real(r) => {
                let RealServer {
                    real, proxy, ipam, ..
                } = *r;
                proxy.shutdown().await;
                if let Err(e) = real.stop().await {
                    eprintln!("chaos: stopping a real control plane: {e}");
                }
                ipam
            }
        }?;
        if keep {
            Some(world.shutdown_keeping_files().await)
        } else {
            world.shutdown().await;
            None
        }
    }
}

fn shards(client: &kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource::erase::<EgressShard>(&());
    Api::namespaced_with(client.clone(), NAMESPACE, &ar)
}
