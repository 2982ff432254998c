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

    /// May change `obj` (e.g. fill `status`) and write other objects.
    fn before_create(
        &self,
        txn: &mut dyn PlaneTxn,
        caller: &Caller,
        res: &ResourceKey,
        obj: &mut Value,
    ) -> Result<(), Status>;

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
    /// unless implemented.
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
}
