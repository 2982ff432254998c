//! The controller against localplane over real HTTP: one test binary, one module per concern.

mod binary;
mod common;
mod compaction;
mod events;
mod invariants;
mod lapse;
mod metrics_auth;
mod milo;
mod observe;
mod operations;
mod orphans;
mod properties;
mod rbac;
mod real_cell;
mod real_invariants;
mod reconcile;
mod relay;
mod runtime;
