//! localplane: a local stand-in for a cell's Kubernetes API server and for Milo project control
//! planes, served over real HTTP on loopback. A test and demo tool, not a product.
//!
//! It behaves like kube-apiserver for what this project does, closely enough that kube-rs
//! (`Api`, `watcher`, `Controller`) and kubectl cannot tell the difference:
//!
//! * kinds from CRDs (YAML files, [`CustomResourceDefinition`](k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition)
//!   values, or CRD objects written through the API at runtime: stored, listed, established and
//!   served from the same write on; deleting one stops serving its kind and removes its objects);
//! * built-in Namespace, Lease, Event, the RBAC kinds, and what an install applies
//!   (ServiceAccount, Secret, ConfigMap, Service, `apps/v1` Deployment, NetworkPolicy), with the schemas of the
//!   Kubernetes API types: decoded as the apiserver's Go decoder does (a wrong type, a timestamp
//!   that is not a `metav1.Time`/`MicroTime`, bad base64 are a 400), unknown fields warned about
//!   (`fieldValidation=Warn`, the default), dropped (`Ignore`) or refused (`Strict`), the
//!   defaults `kubectl get` shows, validated as the apiserver validates Events (both versions),
//!   Leases, Deployments, Services and CRDs, and printed with its columns;
//! * Events as one store served as core `v1` and `events.k8s.io/v1`, converted as the apiserver
//!   converts them, selected by the same field labels (`involvedObject.*`, `reason`, `type`,
//!   `reportingComponent`, `source`; `regarding.*`, `reportingController`), so `kubectl describe`
//!   and `kubectl events` show what a controller publishes through either;
//! * get/list (label selectors parsed, and refused, as `labels.Parse` does; field selectors;
//!   `limit`/`continue`), create, PUT, merge/JSON patch, strategic merge patch of built-in kinds
//!   (below), dry runs (answered as the storage layer would store, without a resourceVersion on
//!   a create, using none up), server-side apply with field ownership (below), delete with
//!   finalizers and with `DeleteOptions.preconditions` (`uid`, `resourceVersion`), and
//!   `deletecollection` (below);
//! * server-managed metadata (uid, creationTimestamp, one monotonic resourceVersion per plane,
//!   generation on spec changes), 409 on stale resourceVersions, status subresource separation,
//!   unchanged writes as no-ops;
//! * watches with bookmarks, timeouts, metadata-only and Table output, streaming lists
//!   (`sendInitialEvents`, which kubectl 1.37 uses), and 410 Expired (as a 200 with an ERROR
//!   event) for resourceVersions older than the bounded history;
//! * CRD validation: pruning, defaulting, OpenAPI constraints, list-map keys and
//!   `x-kubernetes-validations` (CEL, with transition rules), refused with 422 Status bodies
//!   worded like the apiserver's;
//! * discovery, OpenAPI v3 (for `kubectl apply`/`explain`) and v2 (JSON, or the protobuf client-go
//!   asks for when re-applying a custom resource), Table responses from printer columns;
//! * a cell that looks like one: namespace `kube-system` exists from the start, and its uid
//!   ([`LocalPlane::cell_uid`]), the cell's identity, is random per localplane and cannot change
//!   (`default`, `kube-system` and `kube-public` may not be deleted, as namespace-lifecycle
//!   admission refuses);
//! * Milo project planes under `/apis/resourcemanager.miloapis.com/v1alpha1/projects/{p}/control-plane`
//!   (an unknown project is a plain-text 404, as Milo answers), with Milo IPAM on them
//!   ([`ipam`]; the `localplane` binary serves it on every project it serves): an IPClaim
//!   DELETE in Milo's two writes, reading no preconditions (below); a claim into a missing or
//!   terminating namespace refused with Milo's 403; a class of one project referring to a class
//!   of another (`spec.source`), claims of it binding from that project's pools; and Milo's
//!   quota on live objects of a
//!   resource per project ([`Plane::set_quota`], [`LocalPlaneBuilder::quota`],
//!   `/localplane/quotas`), refused with 403 `Insufficient quota resources available. ...`;
//! * bearer-token identities and RBAC from stored roles and bindings; impersonation
//!   (`Impersonate-User`/`-Group`/`-Uid`/`-Extra-*`, kubectl's `--as`) checked as 1.37 checks it,
//!   constrained impersonation (`impersonate-on:<mode>:<verb>`, `impersonate:<mode>`) before the
//!   legacy `impersonate` grants, and refused in the apiserver's words; the reviews
//!   `kubectl auth can-i` (`--list`) and `kubectl auth whoami` create (SelfSubjectAccessReview,
//!   SubjectAccessReview, SelfSubjectRulesReview, SelfSubjectReview), answered from the stored
//!   RBAC, with every authenticated user allowed to review itself as bootstrap policy allows;
//!   and TokenReview (who a bearer token is, with the API audiences), which a server that
//!   delegates its authentication to the cluster (a secure metrics endpoint) sends;
//! * request bodies in JSON, YAML, and protobuf for the built-in kinds kubectl's typed commands
//!   send that way (`create namespace|role|rolebinding|clusterrole|clusterrolebinding|secret|
//!   configmap|serviceaccount`, and the reviews of `auth can-i` and `auth whoami`): client-go
//!   never falls back from protobuf to JSON (only from CBOR), so refusing it would break them;
//!   other types (a TokenReview or SubjectAccessReview in protobuf, which no client here sends)
//!   are a 415;
//! * request counters; fault injection, including the faults behind real races (below).
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
//! # Field ownership and server-side apply
//!
//! Every create, update, patch and apply records `metadata.managedFields` as the apiserver's
//! field manager does: one entry per manager (the `fieldManager` parameter, else the
//! User-Agent up to its first `/`; kube-rs sends none, so its entries are `unknown`'s), with
//! `operation` `Update` or `Apply`, `apiVersion`, `time` (moved only when the manager changed
//! something), `fieldsType: FieldsV1`, the `FieldsV1` set, and `subresource: status` for status
//! writes; at most ten `Update` entries, older ones merged into `ancient-changes`. An apply
//! merges by the schema's list-map keys and sets (`x-kubernetes-list-type`,
//! `x-kubernetes-list-map-keys`, key defaults; for built-in kinds the markers of their Go types,
//! such as `containers` and `env` by `name`), refuses to change another manager's fields with
//! the apiserver's 409 (`Apply failed with N conflicts: ...`, causes of type
//! `FieldManagerConflict`) unless `force=true`, and removes what an applier stops applying when
//! no other manager owns it. `managedFields` sent in a request replace the stored ones, an
//! empty list (or one empty entry) clears them, unreadable ones are ignored, and in an apply
//! they are refused (400). Metadata-only and Table responses carry them, as the apiserver's do.
//!
//! # Strategic merge patch
//!
//! A strategic merge patch (`application/strategic-merge-patch+json`, what `kubectl patch`,
//! `edit`, `set`, `label` and client-side `apply` send for built-in kinds) is applied as
//! apimachinery's `strategicpatch` applies it on the server, by the `patchStrategy` and
//! `patchMergeKey` tags of the Go types, kept in the same table as the ownership markers above:
//! maps merge and `null` deletes a key; a list tagged `merge` merges, objects by their merge key
//! (a pod template's containers, init containers and volumes by `name`, a container's `env` by
//! `name`, `ports` by `containerPort`, `volumeMounts` by `mountPath`; a Service's ports by
//! `port`; `ownerReferences` by `uid`; conditions by `type`), scalars (`finalizers`) as a union;
//! any other list (`tolerations`, `args`, RBAC rules and subjects) is replaced. The directives
//! `$patch: replace|delete` (in a map or a list item; `merge` is refused as the library refuses
//! it), `$retainKeys`, `$deleteFromPrimitiveList/<field>` and `$setElementOrder/<field>` are
//! honoured, and the merged list ends in the order the library gives it. A malformed directive is
//! a 400, a list of lists a 422 (in the generic words the apiserver gives it), and what else the
//! library reports (a list item without its merge key) a 500 in its words, as the apiserver
//! passes them on. Custom resources take no
//! strategic merge: 415, `the body of the request was in an unknown format - accepted media
//! types include: application/json-patch+json, application/merge-patch+json,
//! application/apply-patch+yaml`. A strategic patch records managedFields as any update does
//! (operation `Update`).
//!
//! # Lists
//!
//! `resourceVersion` with `resourceVersionMatch` (`NotOlderThan`, `Exact`, unset: exact for a
//! paged list) as the apiserver validates and serves them: a version the plane has not reached
//! waits as the watch cache waits (3 s), then gets 504 `Too large resource version` with
//! `retryAfterSeconds`; an `Exact` read older than history is 410. `continue` pages are read at
//! the first page's resourceVersion, rebuilt from history (kept at least five minutes, the
//! apiserver's compaction interval, and at least the watch window); an expired token is 410 with
//! a token in the Status that continues at the newest state; pages of an unselected list carry
//! `remainingItemCount`. `deletecollection` deletes what a list with the same selectors returns,
//! each object as its own DELETE would (preconditions, finalizers, hooks, events), and answers
//! with that list (IPClaims: as their first write left them, as Milo answers). A watch with a selector sees an object that stops matching as DELETED in the
//! state it last saw, and one that starts matching as ADDED.
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
//! delete is applied, under the plane's lock, on every path, but for a kind whose service reads
//! none: Milo's IPClaim (`AllocatingREST.Delete` consults `DeleteOptions` only for dry run), whose
//! DELETE removes whatever claim holds the name when it is processed, however late it lands. It
//! does so in two writes, as Milo does: the claim is written `Releasing` (a MODIFIED event, the
//! rest of it unchanged) and committed, then released (its allocation freed or retained) and
//! removed (DELETED); the answer is 200 with the claim as the first write left it. A release that
//! fails leaves it `Releasing`, with its address and allocation, and answers 500 `release
//! allocation after 3 attempts: ...`; a later DELETE runs both writes again. Finalizers do not
//! hold a claim: Milo's delete never reads them.
//! [`LocalPlaneBuilder::ipam_strict_deletes`] makes claim DELETEs read preconditions (at both
//! writes); it is stricter than Milo, so it is the default of nothing.
//!
//! A mismatch is 409, reason `Conflict`. A delete applied as it arrives is refused as the
//! registry's `BeforeDelete` refuses it: details `{name, group, kind: <Kind>}`, message
//! `Operation cannot be fulfilled on <Kind>.<group> "<name>": the UID in the precondition (<want>)
//! does not match the UID in record (<have>). The object might have been deleted and then
//! recreated` (`ResourceVersion` likewise, `... might have been modified`). A delete whose commit
//! lands late (below) is checked then, not when it arrived, so it cannot remove a same-named
//! object created in between; that mismatch is the storage layer's: details kind the plural,
//! message `... on <plural>.<group> "<name>": Precondition failed: UID in precondition: <want>,
//! UID in object meta: <have>`.
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
//!   still waiting gets the real answer afterwards;
//! * on a DELETE deleted in two writes (Milo's IPClaim), a failed release step (`when: release`
//!   with `errorRate`: the claim stays `Releasing`, the answer is Milo's 500 unless `outcome`
//!   withholds it) or a late one (`releaseDelayMs`, with probability `releaseDelayRate`), which
//!   lands even if the client gave up.
//!
//! ```yaml
//! seed: 7
//! rules:
//!   - {verb: create, resource: ipclaims, errorRate: 0.2, when: afterApply, outcome: reset}
//!   - {plane: platform, verb: delete, resource: ipclaims, commitDelayMs: 5000}
//!   - {verb: delete, resource: ipclaims, errorRate: 0.1, when: release}
//!   - {verb: delete, resource: ipclaims, releaseDelayMs: 2000, releaseDelayRate: 0.5}
//! ```
//!
//! Every kind injected is counted ([`Metrics::injected_faults`], by plane in
//! [`Metrics::injected_faults_by_plane`], and `injectedFaults` in
//! `GET /localplane/metrics`); a request answered with nothing is counted with `code` 0. A
//! configuration with a rate outside [0, 1], an unknown field, or (on a rule that can fail) a
//! code outside 400–599 or a `code` on a `reset` or `hang`, a release fault on a rule whose verb
//! is not `delete`, or a `code` on a `when: release` rule is refused with a message naming it.
//!
//! # Admin endpoints (unauthenticated, loopback only)
//!
//! * `GET /localplane/metrics`: `{"total": N, "requests": [{plane, verb, resource, code, count}],
//!   "injectedFaults": {"beforeApply": {status, reset, hang}, "afterApply": {..},
//!   "delayedCommits": N, "failedReleases": {..}, "delayedReleases": N}}`; `DELETE` resets.
//! * `GET|POST|DELETE /localplane/faults`: read, replace (a [`FaultConfig`] as JSON or YAML), clear.
//! * `GET /localplane/quotas/{project}`: the project's quotas, `{project, quotas: [{resource,
//!   limit, used}]}`; `PUT|POST /localplane/quotas/{project}/{resource}` with `{"limit": N}` sets
//!   one (`resource` as `ipclaims.ipam.miloapis.com`), `DELETE` lifts it.
//! * `POST /localplane/compact/{plane}`: drop a plane's watch history (resumed watches get 410
//!   and relist).
//!
//! # Differences from a real apiserver
//!
//! No garbage collection of owner references, no conversion between CRD versions (nor of
//! managedFields sets between versions), no CEL cost limits or validation ratcheting, no
//! protobuf responses (and protobuf requests only for the kinds above). The ownership markers of
//! built-in kinds cover the kinds served; a struct they do not list is treated as untyped, and
//! Events are owned in the shape they are stored in. Server-side apply does not upgrade
//! client-side apply's `last-applied-configuration` ownership. A watch from a resourceVersion
//! the plane has not reached does not wait for it. Bootstrap RBAC policy is not served (a rules
//! review lists only the stored roles and the self reviews), constrained impersonation's
//! `associated-node` mode (a ServiceAccount acting as its pod's node) never applies (identities
//! carry no extras), nor does the apiserver's memory of which mode last worked for a caller, and
//! identities carry no uid. `egress-address-lab conformance`
//! compares localplane with the real kube-apiserver request shape by request shape; its
//! explained differences are in docs/testing.md. The cell has no `kube-public`
//! or `kube-node-lease` namespaces, and `kube-system` holds nothing.
//!
//! Built-in kinds are validated as far as this project's traffic and installs reach: Events,
//! Leases, CRDs in full; Deployments and Services for what an install sends (required fields,
//! selector and template, ports, type); other kinds by the fields their schemas mark required.
//! No controller manager runs: a Deployment gets no pods or status, a Service a made-up cluster
//! IP. A CRD is established in the write that creates it (no `NamesAccepted` conflicts).
//!
//! Where IPAM's model differs from the service's, [`ipam`] says so, and docs/testing.md lists
//! every difference from the line production runs.

// Layering. Imports between modules point down this list and never up, so no two modules (and
// no two files) import each other; the order is the `localplane` line of docs/architecture.md's
// `layers` block, which a test reads with the source (crates/egress-address-lab/tests/it/layers.rs).
//
//   testing/    the one test world (World, WorldBuilder) the repository's tests, bench, chaos and
//               demo share
//   ipam/       Milo IPAM as StorageHooks; the builder's `ipam()`
//   app/        LocalPlane, its builder, serving it (Running)
//   proxy       the fault proxy in front of another API server
//   server/     HTTP: routing, impersonation, one function per verb and the faults it gets, the
//               reviews, responses, listening (and dropping a connection unanswered)
//   admin       /localplane/* endpoints
//   shared      the planes, identities, counters and faults a server shares
//   watch       watch streams
//   plane/      one control plane: mod (registry, hooks), read, write, delete, release
//               (two-step deletes), quota, tally, group (planes whose writes reach into
//               each other)
//   fields/     field ownership (managedFields, server-side apply) and strategic merge
//               patch, over one table of the built-in kinds' field markers
//   rbac, table, openapi_v2, discovery
//   openapi     the OpenAPI v3 documents (v2 is built from them)
//   store       objects, resourceVersions, history, transactions
//   resources   the kinds a plane serves
//   kinds/      what the apiserver knows of its built-in kinds: schemas, decoding, conversion,
//               validation, field labels
//   schema, selector
//   kubeconfig
//   config
//   metrics     request and injected-fault counters
//   faults, meta
//   error, hooks, locks, tls                                       (leaves)
//
// Where new behaviour goes: a new verb or request parameter in server/resource.rs; a new rule for
// what a write does to stored objects in plane/write.rs or plane/delete.rs; what a built-in kind
// is (its decoding, defaults, validation, conversion) in kinds/; a resource with its
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
mod fields;
mod hooks;
pub mod ipam;
mod kinds;
mod kubeconfig;
mod locks;
mod meta;
mod metrics;
mod openapi;
mod openapi_v2;
mod plane;
mod proxy;
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
pub use proxy::{FaultProxy, Upstream};
pub use resources::{load_crd_dir, parse_crds};
pub use server::PROJECT_PREFIX;
pub use tls::TlsMaterial;
