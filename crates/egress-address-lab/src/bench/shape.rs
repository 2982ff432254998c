//! What the bench's shards look like. A cell's shards are not the bare objects a test makes: a
//! data plane or kubectl creates them with labels and annotations (kubectl's
//! `last-applied-configuration` copies the whole object), the data plane writes their status, and
//! the API server records who set which field in `managedFields`, two or three entries by the time
//! the controller has written its address. Production-shaped shards carry all of that, so the
//! controller's cache, its watch stream and its writes are measured at their real size.
//!
//! localplane records `managedFields` itself, but a shard seeded straight into the store would
//! carry only localplane's own entry and no status (a create drops it), so the bench shapes them
//! with a storage hook on the cell that runs after localplane's own bookkeeping: every create gets
//! the creator's entry and the data plane's status entry; every update keeps the entries it found
//! and adds or refreshes one for the writer, naming the fields that changed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use clap::ValueEnum;
use kube::core::Status;
use serde_json::{Map, Value, json};

use localplane::testing::{CLAIM_NAMESPACE, World, claims_key, shard_object, shards_key};
use localplane::{Caller, PlaneTxn, ResourceKey, StorageHooks};

/// The shards a bench seeds and creates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Objects {
    /// As a cell has them: labels, annotations (kubectl's last-applied configuration among them),
    /// a status written by the data plane, and `managedFields` recorded on every write.
    #[default]
    Production,
    /// Name, namespace and target only, and no `managedFields` (the earlier benchmarks' shards).
    Bare,
}

impl Objects {
    pub fn as_str(self) -> &'static str {
        match self {
            Objects::Production => "production-shaped",
            Objects::Bare => "bare",
        }
    }
}

/// The manager kubectl's client-side apply records.
pub const KUBECTL: &str = "kubectl-client-side-apply";
/// The manager the data plane's status writes are recorded under.
pub const DATA_PLANE: &str = "egress-dataplane";

/// Prepares `world`'s cell for `objects`: production shapes get the `managedFields` recorder.
pub fn prepare(world: &World, objects: Objects) {
    if objects == Objects::Production {
        world.lp().cell().add_hooks(Arc::new(ManagedFields));
    }
}

/// Shard `name` of `namespace` as `objects` says, as JSON for a create.
pub fn shard(namespace: &str, name: &str, objects: Objects) -> Value {
    let mut s = shard_object(namespace, name);
    if objects == Objects::Bare {
        return s;
    }
    // A stable small number per name, for the values that differ between shards of a cell.
    let n = name
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(b.into()));
    let node = format!("node-{name}");
    s["metadata"]["labels"] = json!({
        "app.kubernetes.io/name": "egress-shard",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/part-of": "datum-network",
        "app.kubernetes.io/managed-by": DATA_PLANE,
        "app.kubernetes.io/version": "v0.14.2",
        "network.datumapis.com/egress-pool": format!("pool-{}", n % 8),
        "network.datumapis.com/egress-cell": "dfw-cell-3",
        "topology.kubernetes.io/region": "us-south",
        "topology.kubernetes.io/zone": format!("us-south-{}", ["a", "b", "c"][(n % 3) as usize]),
        "kubernetes.io/hostname": node,
    });
    let annotations = json!({
        "network.datumapis.com/dataplane-config-hash": format!("{:016x}{:016x}{:016x}{:016x}", n, n.rotate_left(7), n.rotate_left(13), n.rotate_left(21)),
        "network.datumapis.com/node-uid": format!("{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}", n, n % 0xffff, n % 0xfff, (n >> 3) % 0xfff, u64::from(n) * 7919),
        "network.datumapis.com/created-by": "egress-dataplane/reconcile-node",
        "network.datumapis.com/drain-policy": "{\"gracePeriodSeconds\":600,\"maxConcurrentFlows\":100000}",
    });
    // kubectl records the object as applied: everything the author wrote, without itself.
    let mut applied = json!({
        "apiVersion": s["apiVersion"],
        "kind": s["kind"],
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": s["metadata"]["labels"],
            "annotations": annotations,
        },
        "spec": s["spec"],
    });
    applied["spec"]["drain"] = json!(false);
    s["spec"]["drain"] = json!(false);
    let mut all = annotations;
    all["kubectl.kubernetes.io/last-applied-configuration"] = json!(format!("{applied}\n"));
    s["metadata"]["annotations"] = all;
    s
}

/// Seeds shards `<prefix>-<i>` for `i` in `range` straight into the cell's store (no request),
/// shaped as `objects` says.
pub fn seed(
    world: &World,
    namespace: &str,
    prefix: &str,
    range: std::ops::Range<usize>,
    objects: Objects,
) {
    let cell = world.lp().cell();
    cell.ensure_namespace(namespace);
    for i in range {
        cell.apply_object(shard(namespace, &format!("{prefix}-{i}"), objects))
            .expect("a generated shard is valid");
    }
}

/// The status the data plane writes for a shard it created (no address yet: nothing to program).
pub(crate) fn data_plane_status(obj: &Value, time: &str) -> Value {
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let n = name
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(b.into()));
    json!({
        "observedGeneration": 1,
        "shardSID": format!("fd00:5:{:x}:{:x}::1", n >> 16, n & 0xffff),
        "conditions": [{
            "type": "Programmed",
            "status": "False",
            "reason": "AddressUnassigned",
            "message": "waiting for the egress address controller to assign shardAddressIPv6",
            "observedGeneration": 1,
            "lastTransitionTime": time,
        }],
    })
}

/// Records `managedFields` on the cell's shards as the API server would (see the module
/// documentation).
struct ManagedFields;

/// Now, as the API server writes a managed field's time (whole seconds).
fn apiserver_time() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

impl StorageHooks for ManagedFields {
    fn handles(&self, res: &ResourceKey) -> bool {
        *res == shards_key()
    }

    fn before_create(
        &self,
        _: &mut dyn PlaneTxn,
        _: &Caller,
        _: &ResourceKey,
        obj: &mut Value,
    ) -> Result<(), Status> {
        let time = apiserver_time();
        let api_version = obj["apiVersion"].clone();
        let created = json!({
            "apiVersion": api_version,
            "fieldsType": "FieldsV1",
            "fieldsV1": fields_of(&Value::Null, &json!({
                "metadata": {
                    "labels": obj["metadata"]["labels"],
                    "annotations": obj["metadata"]["annotations"],
                },
                "spec": obj["spec"],
            })),
            "manager": KUBECTL,
            "operation": "Update",
            "time": time,
        });
        let status = data_plane_status(obj, &time);
        let status_entry = json!({
            "apiVersion": api_version,
            "fieldsType": "FieldsV1",
            "fieldsV1": fields_of(&Value::Null, &json!({"status": status})),
            "manager": DATA_PLANE,
            "operation": "Update",
            "subresource": "status",
            "time": time,
        });
        obj["status"] = status;
        obj["metadata"]["managedFields"] = json!([created, status_entry]);
        Ok(())
    }

    fn before_update(
        &self,
        _: &mut dyn PlaneTxn,
        caller: &Caller,
        _: &ResourceKey,
        old: &Value,
        new: &mut Value,
    ) -> Result<(), Status> {
        let mut entries = old["metadata"]["managedFields"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let changed = fields_of(
            &json!({"metadata": {"labels": old["metadata"]["labels"], "annotations": old["metadata"]["annotations"]}, "spec": old["spec"]}),
            &json!({"metadata": {"labels": new["metadata"]["labels"], "annotations": new["metadata"]["annotations"]}, "spec": new["spec"]}),
        );
        if changed.as_object().is_some_and(|m| !m.is_empty()) {
            let manager = caller.user.clone();
            entries.retain(|e| e["manager"] != manager.as_str() || e.get("subresource").is_some());
            entries.push(json!({
                "apiVersion": new["apiVersion"],
                "fieldsType": "FieldsV1",
                "fieldsV1": changed,
                "manager": manager,
                "operation": "Update",
                "time": apiserver_time(),
            }));
        }
        new["metadata"]["managedFields"] = Value::Array(entries);
        Ok(())
    }
}

/// The `FieldsV1` of what `new` sets that `old` does not (every field of `new` when `old` is
/// null): `f:<name>` per field, `.` for a map that is itself new.
fn fields_of(old: &Value, new: &Value) -> Value {
    let mut out = Map::new();
    let Some(n) = new.as_object() else {
        return Value::Object(out);
    };
    let o = old.as_object();
    if o.is_none() && !n.is_empty() {
        out.insert(".".into(), json!({}));
    }
    for (k, v) in n {
        let before = o.and_then(|o| o.get(k)).unwrap_or(&Value::Null);
        if before == v {
            continue;
        }
        let inner = if v.is_object() {
            fields_of(before, v)
        } else {
            json!({})
        };
        out.insert(format!("f:{k}"), inner);
    }
    Value::Object(out)
}

/// When each shard of a cell was created and when it was first seen addressed, recorded by a
/// storage hook as the writes commit (in the server, under its lock), so a bench can tell how
/// long each shard waited without watching anything over HTTP; and when each was deleted, so the
/// wait for its claim's release starts at the same kind of record as the claim's removal
/// ([`Releases`]) ends it.
#[derive(Default)]
pub struct Timeline {
    times: Mutex<HashMap<String, (Instant, Option<Instant>)>>,
    deleted: Mutex<HashMap<String, Instant>>,
}

impl Timeline {
    /// A timeline recording the cell's shards of `namespace` from now on.
    pub fn record(world: &World, namespace: &str) -> Arc<Timeline> {
        let timeline = Arc::new(Timeline::default());
        world.lp().cell().add_hooks(Arc::new(TimelineHook {
            timeline: timeline.clone(),
            namespace: namespace.to_string(),
        }));
        timeline
    }

    /// For every shard created since recording began: how long from its create to its address
    /// (`None` while it has none).
    pub fn waits(&self) -> Vec<(String, Option<std::time::Duration>)> {
        crate::bench::lock(&self.times)
            .iter()
            .map(|(name, (created, addressed))| {
                (name.clone(), addressed.map(|a| a.duration_since(*created)))
            })
            .collect()
    }

    /// When shard `name` was removed, if it was.
    pub fn deleted(&self, name: &str) -> Option<Instant> {
        crate::bench::lock(&self.deleted).get(name).copied()
    }
}

struct TimelineHook {
    timeline: Arc<Timeline>,
    namespace: String,
}

impl TimelineHook {
    fn ours<'a>(&self, obj: &'a Value) -> Option<&'a str> {
        (obj["metadata"]["namespace"] == self.namespace.as_str())
            .then(|| obj["metadata"]["name"].as_str())
            .flatten()
    }
}

impl StorageHooks for TimelineHook {
    fn handles(&self, res: &ResourceKey) -> bool {
        *res == shards_key()
    }

    fn before_create(
        &self,
        _: &mut dyn PlaneTxn,
        _: &Caller,
        _: &ResourceKey,
        obj: &mut Value,
    ) -> Result<(), Status> {
        if let Some(name) = self.ours(obj) {
            crate::bench::lock(&self.timeline.times)
                .insert(name.to_string(), (Instant::now(), None));
        }
        Ok(())
    }

    fn before_update(
        &self,
        _: &mut dyn PlaneTxn,
        _: &Caller,
        _: &ResourceKey,
        old: &Value,
        new: &mut Value,
    ) -> Result<(), Status> {
        let addressed = localplane::testing::is_addressed;
        if !addressed(old)
            && addressed(new)
            && let Some(name) = self.ours(new)
            && let Some((_, at)) = crate::bench::lock(&self.timeline.times).get_mut(name)
        {
            at.get_or_insert_with(Instant::now);
        }
        Ok(())
    }

    fn before_delete(
        &self,
        txn: &mut dyn PlaneTxn,
        _: &Caller,
        _: &ResourceKey,
        obj: &Value,
    ) -> Result<(), Status> {
        if let Some(name) = self.ours(obj) {
            let name = name.to_string();
            let timeline = self.timeline.clone();
            // A later hook may still refuse the delete: only a removal that lands is a deletion.
            txn.after_commit(Box::new(move || {
                crate::bench::lock(&timeline.deleted).insert(name, Instant::now());
            }));
        }
        Ok(())
    }
}

/// When each IPClaim of the claim namespace was removed from IPAM (the second step of its
/// delete, the one that frees the address), recorded as the removal commits, as [`Timeline`]
/// records the cell's writes. IPAM is localplane's on either cell, so this holds for both.
pub struct Releases {
    times: Mutex<HashMap<String, Instant>>,
    /// Bumped at every removal, for a waiter to wake on instead of polling the map.
    removed: tokio::sync::watch::Sender<u64>,
}

impl Releases {
    /// Releases recorded on `world`'s IPAM from now on.
    pub fn record(world: &World) -> Arc<Releases> {
        let releases = Arc::new(Releases {
            times: Mutex::new(HashMap::new()),
            removed: tokio::sync::watch::Sender::new(0),
        });
        world.add_platform_hook(Arc::new(ReleaseHook(releases.clone())));
        releases
    }

    /// When claim `name` was removed, if it was.
    pub fn at(&self, name: &str) -> Option<Instant> {
        crate::bench::lock(&self.times).get(name).copied()
    }

    /// Waits until every claim of `names` is removed, or `within` has passed; whether they all
    /// were.
    pub async fn wait_for(&self, names: &[String], within: std::time::Duration) -> bool {
        let mut removed = self.removed.subscribe();
        let all = || names.iter().all(|n| self.at(n).is_some());
        let waited = tokio::time::timeout(within, async {
            while !all() {
                if removed.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        waited.is_ok() && all()
    }
}

struct ReleaseHook(Arc<Releases>);

impl StorageHooks for ReleaseHook {
    fn handles(&self, res: &ResourceKey) -> bool {
        *res == claims_key()
    }

    fn before_delete(
        &self,
        txn: &mut dyn PlaneTxn,
        _: &Caller,
        _: &ResourceKey,
        obj: &Value,
    ) -> Result<(), Status> {
        if obj["metadata"]["namespace"] != CLAIM_NAMESPACE {
            return Ok(());
        }
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let releases = self.0.clone();
        txn.after_commit(Box::new(move || {
            crate::bench::lock(&releases.times).insert(name, Instant::now());
            releases.removed.send_modify(|n| *n += 1);
        }));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use egress_api::shard::EgressShard;
    use kube::Api;
    use kube::api::PostParams;

    #[test]
    fn fields_name_what_changed() {
        assert_eq!(
            fields_of(&Value::Null, &json!({"spec": {"a": 1, "b": {"c": 2}}})),
            json!({".": {}, "f:spec": {".": {}, "f:a": {}, "f:b": {".": {}, "f:c": {}}}})
        );
        assert_eq!(
            fields_of(
                &json!({"spec": {"a": 1, "b": 2}, "metadata": {"labels": {"x": "1"}}}),
                &json!({"spec": {"a": 1, "b": 3}, "metadata": {"labels": {"x": "1", "y": "2"}}})
            ),
            json!({"f:spec": {"f:b": {}}, "f:metadata": {"f:labels": {"f:y": {}}}})
        );
    }

    #[tokio::test]
    async fn the_cell_records_managed_fields_as_an_api_server_would() {
        let w = crate::fleet::world().start().await.unwrap();
        prepare(&w, Objects::Production);
        seed(&w, "ns", "s", 0..1, Objects::Production);
        let stored = w
            .lp()
            .cell()
            .object(&shards_key(), Some("ns"), "s-0")
            .unwrap();
        let managers = |o: &Value| -> Vec<String> {
            o["metadata"]["managedFields"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["manager"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(managers(&stored), [KUBECTL, DATA_PLANE]);
        assert_eq!(stored["status"]["conditions"][0]["type"], "Programmed");
        // An update without managedFields (as the controller sends it) keeps the entries and
        // adds the writer's, naming only what it changed.
        let mut update = stored.clone();
        update["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("managedFields");
        update["spec"]["shardAddressIPv6"] = json!("2001:db8::1");
        let api: Api<EgressShard> =
            Api::namespaced(w.client("cell", localplane::testing::CONTROLLER), "ns");
        api.replace(
            "s-0",
            &PostParams::default(),
            &serde_json::from_value(update).unwrap(),
        )
        .await
        .unwrap();
        let after = w
            .lp()
            .cell()
            .object(&shards_key(), Some("ns"), "s-0")
            .unwrap();
        assert_eq!(
            managers(&after),
            [KUBECTL, DATA_PLANE, localplane::testing::CONTROLLER]
        );
        assert_eq!(
            after["metadata"]["managedFields"][2]["fieldsV1"],
            json!({"f:spec": {"f:shardAddressIPv6": {}}})
        );
        w.shutdown().await;
    }

    #[test]
    fn a_production_shard_is_several_times_a_bare_one() {
        let bare = shard("ns", "shard-1", Objects::Bare).to_string().len();
        let prod = shard("ns", "shard-1", Objects::Production);
        let applied =
            prod["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
                .as_str()
                .unwrap();
        let applied: Value = serde_json::from_str(applied).unwrap();
        assert_eq!(applied["metadata"]["labels"], prod["metadata"]["labels"]);
        assert!(prod.to_string().len() > 5 * bare, "{prod}");
    }
}
