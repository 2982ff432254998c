//! The egress address controller: gives every `EgressShard` of a cell its public IPv6 address,
//! claimed from Milo IPAM, written once into the shard, and traceable to the record holding it.
//!
//! The folders are the architecture, and imports point one way, down this picture of the
//! `egress-address` line of docs/architecture.md's `layers` block
//! (crates/egress-address-lab/tests/it/layers.rs reads the block, this picture and the source, and
//! fails on an import that points up, or on sibling modules importing each other round a loop):
//!
//! ```text
//! admin     (/live, /ready, /metrics; who may read it, over TLS)           servers
//!    ↓
//! runtime   (watch, queue, workers, sweep, leader, events, readiness)      tasks
//!    ↓
//! reconcile (one shard: release, claim and assign, drift)                decisions with I/O
//!    ↓
//! error, shard (key, decision, per-shard memory)
//!    ↓
//! ipam      (client, claim path, naming, addresses)
//!    ↓
//! config    (flags, settings: pure)
//!    ↓
//! connect   (clients from kubeconfigs that follow their file)
//!    ↓
//! logs, metrics, kube_status                                             leaves
//!    ↓
//! sync, version (locks that outlive a panic; this build)
//! ```
//!
//! Modules of one layer import nothing of each other. The root re-exports below (`Controller`,
//! `Settings`, `Metrics`, ...) are for other crates: a module names the module that defines what
//! it imports, so that an import up the layers cannot hide behind the crate root.
//!
//! What the controller does, its flags, metrics, events and logs are in docs/architecture.md and
//! docs/operations.md; a new behaviour goes into the lowest folder that can hold it (a pure rule
//! into `shard` or `ipam`, a step of a reconcile into `reconcile`, a task into `runtime`, an
//! admin route into `admin`).
//!
//! ```no_run
//! # async fn demo(cell: kube::Client) -> Result<(), egress_address::Error> {
//! use egress_address::{Controller, Metrics, Settings, ipam_client};
//! use prometheus_client::registry::Registry;
//!
//! let settings = Settings::new("datum-egress-shard-address-ipv6", "dfw", "datum-platform");
//! let ipam = ipam_client("/etc/ipam-cluster/kubeconfig".as_ref(), &settings.platform_project).await?;
//! let mut registry = Registry::default();
//! let metrics = Metrics::register(&mut registry);
//! let controller = Controller::new(settings, cell, ipam, metrics)?;
//! let handle = controller.handle(); // is_ready(), is_leader(), wait_ready(), metrics()
//! let router = egress_address::admin::router(handle.clone(), std::sync::Arc::new(registry));
//! controller.run(async { let _ = tokio::signal::ctrl_c().await; }).await
//! # }
//! ```

pub mod admin;
pub mod config;
pub mod connect;
mod error;
pub mod ipam;
pub mod kube_status;
pub mod logs;
pub mod metrics;
pub mod reconcile;
pub mod runtime;
pub mod shard;
mod sync;
mod version;

pub use config::{LeaderElection, Settings};
pub use error::Error;
pub use ipam::ipam_client;
pub use metrics::Metrics;
pub use runtime::{Controller, Handle, run};
pub use shard::ShardKey;
pub use version::{COMMIT, VERSION};
