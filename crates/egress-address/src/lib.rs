//! The egress address controller: gives every `EgressShard` of a cell its public IPv6 address,
//! claimed from Milo IPAM, written once into the shard, and traceable to the record holding it.
//!
//! # Behaviour
//!
//! For each shard, read from a reflector cache (so an addressed shard, and an idle controller,
//! cost no requests):
//!
//! * being deleted → left alone; no claim, no release, no write;
//! * addressed and labelled → nothing;
//! * addressed (by hand, or by an older controller) without the `network.datumapis.com/egress-ipv6`
//!   label → the label only, never an invented ref;
//! * otherwise → **create** the IPClaim `egress-shard-ipv6.<ns>.<name>` (1 request; IPAM binds
//!   synchronously), then **one** conditional update (PUT with the resourceVersion read) writing
//!   `spec.shardAddressIPv6`, `spec.shardAddressIPv6ClaimRef` and the label (1 request). A
//!   failed create is followed by one read: a 409 `AllocationRetained` adopts the named
//!   IPAllocation (ref kind `IPAllocation`); any other failure (a raced writer, our own earlier
//!   claim, an older IPAM's bare 500 on a duplicate) reads the claim and uses it only if its
//!   annotations name this shard.
//! * a shard gone from the cache is confirmed gone with a live GET; on NotFound its claim is
//!   deleted by derived name. A failed read releases nothing. There is no finalizer.
//!
//! Only the leader writes (claims, shard updates, releases, events). Refusals are re-checked
//! on a fixed interval, other failures back off per shard. A periodic drift check reports
//! (never repairs) shards whose recorded holder is gone or holds another address.
//!
//! # Library API
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
//!
//! * [`Settings`] holds every knob; [`Settings::new`] applies the reference defaults.
//! * [`Controller::new`] validates the settings before anything is contacted;
//!   [`Controller::run`] runs until the shutdown future resolves; [`run`] does both.
//! * [`Handle`] exposes readiness (first full list of shards cached, no credential refused) and
//!   leadership.
//! * [`ipam_client`] builds the IPAM client from a kubeconfig, replacing its server path with the
//!   platform project's control-plane path; [`ipam::get_claim`] and [`ipam::get_allocation`] read
//!   holders (for audit tools).
//! * The pure parts: [`naming`], [`address`], [`ipam_error`], [`claim_spec`], [`decide`],
//!   [`workqueue`].
//! * [`Error`] is this crate's error, with [`Error::metric_label`].
//!
//! # Operations
//!
//! * **Readiness** (`/ready`, `/readyz`): true once the first full list of shards is cached and
//!   while neither plane refuses the credential (401/403). It does not depend on leadership: a
//!   standby with a warm cache is ready to take over. `/live` (`/healthz`) is a plain ping. The
//!   binary serves `/live`, `/ready`, `/healthz`, `/readyz` and `/metrics` (OpenMetrics) on both
//!   `--health-probe-bind-address` and `--metrics-bind-address`.
//! * **Metrics** (prefix `egress_address`): `shards{state=addressed|pending|refused|unattributable}`,
//!   `claim_outcomes_total{outcome=Bound|Adopted|Unbound|Unusable|NameCollision|<IPAM reason>}`,
//!   `reconcile_duration_seconds`, `ipam_requests_total{verb,resource,code}`,
//!   `ipam_request_duration_seconds{verb,resource}`, `leader`, `drift_total{kind=missing|different}`,
//!   `events_dropped_total` (events dropped unsent because too many were waiting),
//!   `events_waiting` (events queued for the events API),
//!   `reconcile_panics_total` (a panicking reconcile costs its shard a retry, not the worker).
//! * **Events** on shards (`events.k8s.io/v1`, see [`events::reason`]): `AddressAssigned`
//!   (Normal, names the address and holder), `ClaimPending` (Normal), `ClaimRefused` (Warning,
//!   with IPAM's reason), `UnusableAnswer`, `ClaimNameCollision`, `AssignRefused`,
//!   `AddressDrift` (Warning). A repeat of the same reason and message for a shard is held back
//!   for `event_repeat_interval`. Reconciles only queue events; a background task sends them,
//!   holding them while shards wait to be reconciled (see [`events::MAX_HOLD`]).
//! * **Leader election**: Lease `egress-address-controller.cloud.datumapis.com`; a renewal is one
//!   PUT on the lease as last written; a 409 or any failed renewal stops writes at once, and a
//!   missed renewal deadline stops them without any request. Shutdown releases the lease.
//! * **Flags** (see [`cli::Args`]): `--address-class-ipv6`, `--claim-namespace` (default
//!   `default`), `--location`, `--platform-project`, `--ipam-kubeconfig` (all required, empty
//!   counts as missing), `--kubeconfig`, `--shard-namespace`, `--leader-elect[=false]`,
//!   `--leader-election-namespace`, lease timings, `--metrics-bind-address` (`:8080`),
//!   `--health-probe-bind-address` (`:8081`), `--concurrency`, backoff, re-check, drift and
//!   event intervals, `--log-format plain|json`, `--log-level`; each has an environment variable.

pub mod address;
pub mod admin;
pub mod claim;
pub mod claim_spec;
pub mod cli;
pub mod decide;
pub mod drift;
pub mod duration;
mod error;
pub mod events;
pub mod holding;
pub mod ipam;
pub mod ipam_error;
pub mod leader;
pub mod metrics;
pub mod naming;
pub mod reconcile;
pub mod runtime;
pub mod settings;
pub mod workqueue;

pub use error::Error;
pub use holding::{HolderKind, Holding};
pub use ipam::ipam_client;
pub use metrics::Metrics;
pub use runtime::{Controller, Handle, run};
pub use settings::{LeaderElection, Settings};

use egress_api::shard::EgressShard;

/// A shard's namespace and name: the unit of work.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShardKey {
    pub namespace: String,
    pub name: String,
}

impl ShardKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    pub fn of(shard: &EgressShard) -> Self {
        Self::new(
            shard.metadata.namespace.clone().unwrap_or_default(),
            shard.metadata.name.clone().unwrap_or_default(),
        )
    }
}

impl std::fmt::Display for ShardKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}
