//! The seam between the generic API machinery and resource-specific storage behaviour.
//!
//! Most resources are plain documents: validated, stored, watched. A few (Milo IPAM's claims,
//! pools, classes and allocations) have server-side behaviour that the real service runs inside the
//! same transaction as the write: binding a claim creates an allocation, deleting a claim frees or
//! retains its address. Those resources register a [`StorageHooks`] implementation on their plane.
//! The plane calls the hook while it holds its write lock, so everything a hook does through the
//! [`PlaneTxn`] is atomic with the request that triggered it, and concurrent requests on the same
//! plane are serialised (the linearizability IPAM promises for allocation).

use kube::core::Status;
use serde_json::Value;

/// Identifies a resource kind on a plane by API group and plural name (`""` is the core group).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceKey {
    pub group: String,
    pub plural: String,
}

impl ResourceKey {
    pub fn new(group: impl Into<String>, plural: impl Into<String>) -> Self {
        Self {
            group: group.into(),
            plural: plural.into(),
        }
    }
}

/// Who is making the request, as authentication established it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Caller {
    /// The authenticated user name (e.g. `system:egress-address@cloud.datumapis.com`).
    pub user: String,
    pub groups: Vec<String>,
    /// The Milo project whose control plane the request arrived on; `None` on the cell plane.
    pub project: Option<String>,
}

/// Access to the plane's objects from inside a hook, under the plane's write lock.
///
/// Objects are full JSON documents (`apiVersion`, `kind`, `metadata`, ...). `put` assigns
/// server-managed metadata (uid and creationTimestamp on first write, a fresh resourceVersion,
/// generation) and emits the ADDED or MODIFIED watch event; `remove` emits DELETED. Writes made
/// through a transaction are discarded if the hook returns an error.
pub trait PlaneTxn {
    fn get(&self, res: &ResourceKey, namespace: Option<&str>, name: &str) -> Option<Value>;
    fn list(&self, res: &ResourceKey, namespace: Option<&str>) -> Vec<Value>;
    /// Creates or replaces an object and returns it as stored.
    fn put(&mut self, res: &ResourceKey, obj: Value) -> Value;
    /// Removes an object and returns its last state.
    fn remove(&mut self, res: &ResourceKey, namespace: Option<&str>, name: &str) -> Option<Value>;
    /// Runs `f` once the transaction has committed, still inside the write (its plane's lock,
    /// and its write group's, held); never if it is dropped (a dry run, a refusal). For what a
    /// hook does to another plane of the group only if this write lands.
    fn after_commit(&mut self, f: Box<dyn FnOnce() + Send>);
}

/// Server-side behaviour for a set of resources on one plane.
///
/// Each `before_*` runs after authentication, authorization, schema validation, defaulting and
/// CEL rules have passed, and before the request's own object is written. Returning `Err(status)`
/// answers the request with that Status (its `code` is the HTTP status) and rolls back every write
/// the hook made through `txn`.
pub trait StorageHooks: Send + Sync {
    /// Whether this hook governs the resource.
    fn handles(&self, res: &ResourceKey) -> bool;

    /// May change `obj` (e.g. fill `status`) and write other objects. Allows every create unless
    /// implemented.
    fn before_create(
        &self,
        txn: &mut dyn PlaneTxn,
        caller: &Caller,
        res: &ResourceKey,
        obj: &mut Value,
    ) -> Result<(), Status> {
        let _ = (txn, caller, res, obj);
        Ok(())
    }

    /// `new` is the object about to be stored (after the main-resource/status split was applied).
    /// Allows every update unless implemented.
    fn before_update(
        &self,
        txn: &mut dyn PlaneTxn,
        caller: &Caller,
        res: &ResourceKey,
        old: &Value,
        new: &mut Value,
    ) -> Result<(), Status> {
        let _ = (txn, caller, res, old, new);
        Ok(())
    }

    /// Runs when the object would actually be removed (no finalizers left). Allows every delete
    /// unless implemented. For a resource deleted in two steps it is the second: the release.
    fn before_delete(
        &self,
        txn: &mut dyn PlaneTxn,
        caller: &Caller,
        res: &ResourceKey,
        obj: &Value,
    ) -> Result<(), Status> {
        let _ = (txn, caller, res, obj);
        Ok(())
    }

    /// Whether a DELETE of the resource reads `DeleteOptions.preconditions`. The generic registry
    /// does; a service with a delete of its own may not (Milo's IPClaim reads none), and a stand-in
    /// that read them would protect a client the service leaves unprotected.
    fn reads_delete_preconditions(&self, res: &ResourceKey) -> bool {
        let _ = res;
        true
    }

    /// Whether the service deletes the resource in two writes, each committed on its own: first
    /// the object as [`StorageHooks::mark_for_release`] leaves it (Milo's IPClaim: `Releasing`,
    /// which GETs and watches see), then the release ([`StorageHooks::before_delete`]) and the
    /// removal. Between them the plane's lock is released, as the service's first transaction
    /// commits before its second begins.
    fn deletes_in_two_steps(&self, res: &ResourceKey) -> bool {
        let _ = res;
        false
    }

    /// The first write of a two-step delete: changes `obj` into the object the service stores
    /// before it releases anything. An error refuses the delete with nothing written.
    fn mark_for_release(
        &self,
        caller: &Caller,
        res: &ResourceKey,
        obj: &mut Value,
    ) -> Result<(), Status> {
        let _ = (caller, res, obj);
        Ok(())
    }

    /// The answer to a two-step delete whose release step failed; `why` says how (a refusal of
    /// [`StorageHooks::before_delete`], nothing left to release, an injected fault). The claim
    /// stays as the first step left it. A 500 carrying `why`, unless the service words it.
    fn release_failure(&self, res: &ResourceKey, why: &str) -> Status {
        let _ = res;
        Status::failure(why, "InternalError").with_code(500)
    }

    /// Whether the hook checks a create's namespace itself, in the service's words and at the
    /// step where the service checks it ([`StorageHooks::before_create`]); the plane then skips
    /// its own check (kube-apiserver's 404 for a missing namespace, its 403 for a terminating one).
    fn checks_namespace(&self, res: &ResourceKey) -> bool {
        let _ = res;
        false
    }

    /// Drops whatever the hook remembers from lookups outside the plane's store (Milo remembers
    /// a namespace it found live for a few seconds), as the passing of that time would.
    fn forget_lookups(&self) {}
}
