//! localplane: a local stand-in for a cell's Kubernetes API server and for Milo project control
//! planes, served over real HTTP on loopback. A test and demo tool, not a product.
//!
//! It behaves like kube-apiserver for what this project does, closely enough that kube-rs
//! (`Api`, `watcher`, `Controller`) and kubectl cannot tell the difference:
//!
//! * kinds from CRDs (YAML files or [`CustomResourceDefinition`](k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition)
//!   values) plus built-in Namespace, Lease, Event (`v1` and `events.k8s.io/v1`) and the RBAC kinds;
//! * get/list (label and field selectors, `limit`/`continue`), create, PUT, merge/JSON patch,
//!   server-side apply as create-or-merge (no field ownership), delete with finalizers and with
//!   `DeleteOptions.preconditions` (`uid`, `resourceVersion`);
//! * server-managed metadata (uid, creationTimestamp, one monotonic resourceVersion per plane,
//!   generation on spec changes), 409 on stale resourceVersions, status subresource separation,
//!   unchanged writes as no-ops;
//! * watches with bookmarks, timeouts, metadata-only and Table output, streaming lists
//!   (`sendInitialEvents`, which kubectl 1.37 uses), and 410 Expired (as a 200 with an ERROR
//!   event) for resourceVersions older than the bounded history;
//! * CRD validation: pruning, defaulting, OpenAPI constraints and `x-kubernetes-validations` (CEL,
//!   with transition rules), refused with 422 Status bodies worded like the apiserver's;
//! * discovery, OpenAPI v3 (for `kubectl apply`/`explain`), Table responses from printer columns;
//! * a cell that looks like one: namespace `kube-system` exists from the start, and its uid
//!   ([`LocalPlane::cell_uid`]), the cell's identity, is random per localplane and cannot change
//!   (`default`, `kube-system` and `kube-public` may not be deleted, as namespace-lifecycle
//!   admission refuses);
//! * Milo project planes under `/apis/resourcemanager.miloapis.com/v1alpha1/projects/{p}/control-plane`
//!   (an unknown project is a plain-text 404, as Milo answers), with Milo IPAM on them
//!   ([`ipam`]);
//! * bearer-token identities and RBAC from stored roles and bindings; request counters; fault
//!   injection, including the faults behind real races (below).
//!
//! # Use in tests
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use localplane::{Identity, LocalPlane};
//! let lp = LocalPlane::builder()
//!     .crd_dir("config/crd")
//!     .project("platform")
//!     .identity(Identity::admin("admin", "admin-token"))
//!     .identity(Identity::user("controller", "ctrl-token", "system:egress-address"))
//!     .rbac(true)
//!     .build()?;
//! // In-process (no socket):
//! let client = lp.client("cell", "admin");
//! // Or over loopback TCP. `serve` is plain HTTP (fine for kube-rs); kubectl (client-go) sends
//! // bearer tokens only over TLS, so use `serve_tls` for it: a throwaway CA signs the serving
//! // certificate and goes into every kubeconfig.
//! let running = lp.serve_tls("127.0.0.1:0".parse()?).await?;
//! let kubeconfig = running.kubeconfig_path("platform", "controller")?;
//! let remote = running.http_client("platform", "controller")?;
//! # let _ = (client, kubeconfig, remote);
//! running.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! The repository's own tests, benchmarks and demo start one shared world instead: a cell and a
//! platform project with IPAM and the shipped inventory, identities and kubeconfigs ([`testing`]).
//!
//! # Server-side behaviour (hooks)
//!
//! Resources with behaviour beyond storage (Milo IPAM) register a [`StorageHooks`] on a plane
//! with [`Plane::add_hooks`]; for every project plane, use [`LocalPlaneBuilder::on_project`].
//! Hooks run under the plane's write lock after validation, and their writes roll back if they
//! fail.
//!
//! # DELETE preconditions
//!
//! `preconditions.uid` and `preconditions.resourceVersion` are checked against the object when the
//! delete is applied, under the plane's lock, on every path (IPAM's claim release included). A
//! delete whose commit lands late (below) is checked then, not when it arrived, so it cannot
//! remove a same-named object created in between. A mismatch is what the generic registry
//! answers: 409, reason `Conflict`, details `{name, group, kind: <plural>}`, message
//! `Operation cannot be fulfilled on <plural>.<group> "<name>": Precondition failed: UID in
//! precondition: <want>, UID in object meta: <have>` (`ResourceVersion` likewise).
//!
//! # Faults
//!
//! A [`FaultConfig`] (the builder's [`LocalPlaneBuilder::faults`], the binary's `--faults` file,
//! or `POST /localplane/faults`) holds [`FaultRule`]s selected by plane, verb and resource, drawn
//! from a seeded RNG so a run replays. A matching request can get:
//!
//! * `latencyMs` before anything else;
//! * a failure with probability `errorRate`, `when` it strikes: `beforeApply` (the default:
//!   nothing is applied) or `afterApply` (the write commits, then its answer is lost); and what
//!   the client gets, the `outcome`: `status` (the default; a Status with `code`), `reset` (the
//!   TCP connection is reset with no HTTP answer) or `hang` (no answer until the client's own
//!   timeout; localplane stopping resets it);
//! * a delayed commit: applied `commitDelayMs` after it arrived (with probability
//!   `commitDelayRate`, every time when unset), in a task the client cannot cancel; a client
//!   still waiting gets the real answer afterwards.
//!
//! ```yaml
//! seed: 7
//! rules:
//!   - {verb: create, resource: ipclaims, errorRate: 0.2, when: afterApply, outcome: reset}
//!   - {plane: platform, verb: delete, resource: ipclaims, commitDelayMs: 5000}
//! ```
//!
//! Every kind injected is counted ([`Metrics::injected_faults`], by plane in
//! [`Metrics::injected_faults_by_plane`], and `injectedFaults` in
//! `GET /localplane/metrics`); a request answered with nothing is counted with `code` 0. A
//! configuration with a rate outside [0, 1], an unknown field, or (on a rule that can fail) a
//! code outside 400–599 or a `code` on a `reset` or `hang` is refused with a message naming it.
//!
//! # Admin endpoints (unauthenticated, loopback only)
//!
//! * `GET /localplane/metrics`: `{"total": N, "requests": [{plane, verb, resource, code, count}],
//!   "injectedFaults": {"beforeApply": {status, reset, hang}, "afterApply": {..},
//!   "delayedCommits": N}}`; `DELETE` resets.
//! * `GET|POST|DELETE /localplane/faults`: read, replace (a [`FaultConfig`] as JSON or YAML), clear.
//! * `POST /localplane/projects/{name}`: add a project plane. `POST /localplane/compact/{plane}`:
//!   drop a plane's watch history (resumed watches get 410 and relist). `GET /localplane/planes`.
//!
//! # Differences from a real apiserver
//!
//! No field ownership (`managedFields`) for server-side apply, no strategic-merge list semantics
//! (strategic merge patches of built-ins are merge patches), no garbage collection of owner
//! references, no conversion between CRD versions, no CEL cost limits or validation ratcheting,
//! no `deletecollection`, no protobuf, and a `continue` token pages over current state rather
//! than a snapshot. A precondition mismatch is always worded as the storage layer words it; the
//! apiserver's earlier admission check (`the UID in the precondition (..) does not match the UID
//! in record (..)`, details kind = the Kind) is not reproduced. The cell has no `kube-public`
//! or `kube-node-lease` namespaces, and `kube-system` holds nothing.
//!
//! Where IPAM's model differs from the service's, [`ipam`] says so (reservations, for one, are
//! not visible as `IPAllocation` objects).

// Layering. Imports between modules point down this list and never up, so no two modules (and
// no two files) import each other; a folder's `mod.rs` only declares and re-exports its files.
//
//   testing/    the one test world (World, WorldBuilder) the repository's tests, bench, chaos and
//               demo share                                         -> ipam, app, plane, hooks,
//                                                                     faults, config
//   ipam/       Milo IPAM as StorageHooks; the builder's `ipam()`  -> app, plane, hooks
//   app/        LocalPlane, its builder, serving it (Running)      -> server, shared, plane, store,
//                                                                     kubeconfig, tls, ...
//   server/     HTTP: routing, one function per verb and the faults it gets, responses, listening
//               (and dropping a connection unanswered)            -> admin, shared, watch, rbac,
//                                                                     table, openapi, discovery,
//                                                                     plane, faults, ...
//   admin       /localplane/* endpoints                            -> shared, faults
//   shared      the planes, identities, counters and faults a server shares
//                                                                  -> plane, metrics, config, faults
//   watch       watch streams                                      -> plane, store, selector
//   plane/      one control plane: mod (registry, hooks), read, write, delete, tally
//                                                                  -> store, resources, schema,
//                                                                     selector, meta
//   rbac, table, openapi, discovery                                -> store, resources, meta
//   store       objects, resourceVersions, history, transactions   -> resources, meta, hooks
//   resources, schema, selector                                    -> hooks, meta, error, locks
//   kubeconfig, config                                             -> config, faults
//   metrics     request and injected-fault counters                -> faults
//   faults, meta                                                   -> error, locks
//   error, hooks, locks, tls                                       (leaves)
//
// Where new behaviour goes: a new verb or request parameter in server/resource.rs; a new rule for
// what a write does to stored objects in plane/write.rs or plane/delete.rs; a resource with its
// own server-side semantics as a StorageHooks beside ipam/; a new admin knob in admin.rs with its
// state in shared.rs; a new fault in faults.rs, applied in server/resource.rs.

// Errors are kube's `Status` (272 bytes) by value: the hook seam and kube both traffic in it, and
// boxing at every layer would buy nothing on paths that end in an HTTP response.
#![allow(clippy::result_large_err)]

mod admin;
mod app;
mod config;
mod discovery;
mod error;
mod faults;
mod hooks;
pub mod ipam;
mod kubeconfig;
mod locks;
mod meta;
mod metrics;
mod openapi;
mod plane;
mod rbac;
mod resources;
mod schema;
mod selector;
mod server;
mod shared;
mod store;
mod table;
pub mod testing;
mod tls;
mod watch;

pub use app::{LocalPlane, LocalPlaneBuilder, Running};
pub use config::{Config, DEFAULT_ADMIN_TOKEN, Identity, Manifest};
pub use error::ApiError;
pub use faults::{
    FaultConfig, FaultOutcome, FaultOutcomes, FaultRule, FaultWhen, Faults, InjectedFaults,
};
pub use hooks::{Caller, PlaneTxn, ResourceKey, StorageHooks};
pub use metrics::{Metrics, RequestCount, RequestKey};
pub use plane::{Plane, Tally};
pub use resources::{load_crd_dir, parse_crds};
pub use server::PROJECT_PREFIX;
pub use tls::TlsMaterial;
