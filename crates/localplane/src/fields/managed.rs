//! `metadata.managedFields`: one entry per manager (name, operation, and for updates the
//! apiVersion, and the subresource), and what an update or an apply does to them.

use std::collections::BTreeMap;

use kube::core::response::{StatusCause, StatusDetails};
use serde_json::{Map, Value, json};

use super::path::{Pe, render};
use super::set::FieldSet;
use super::types::Ty;
use super::walk::{self, Comparison};
use crate::error::ApiError;

/// At most this many `Update` entries are kept; older ones are merged into `ancient-changes`.
const MAX_UPDATE_MANAGERS: usize = 10;
const ANCIENT_CHANGES: &str = "ancient-changes";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    Apply,
    Update,
}

/// Who a set of fields belongs to. An applier is the same manager whatever version it applies
/// in; an updater is a different one per version.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ManagerId {
    pub manager: String,
    /// The operation as written; anything but `Apply` and `Update` is refused when stored.
    pub operation: String,
    /// Empty for appliers.
    pub api_version: String,
    pub subresource: String,
}

impl ManagerId {
    pub fn new(manager: &str, op: Operation, api_version: &str, subresource: &str) -> Self {
        ManagerId {
            manager: manager.to_string(),
            operation: match op {
                Operation::Apply => "Apply".into(),
                Operation::Update => "Update".into(),
            },
            api_version: match op {
                Operation::Apply => String::new(),
                Operation::Update => api_version.to_string(),
            },
            subresource: subresource.to_string(),
        }
    }

    fn is_update(&self) -> bool {
        self.operation != "Apply"
    }

    /// How a conflict message names the manager.
    fn describe(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            s.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if self.operation == "Update" {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }
}

#[derive(Debug, Clone)]
pub struct Entry {
    pub set: FieldSet,
    pub api_version: String,
    pub time: Option<String>,
}

/// Every manager's fields.
#[derive(Debug, Clone, Default)]
pub struct Managed(BTreeMap<ManagerId, Entry>);

/// Whether `managedFields` in a request asks to start over: an empty list, or one empty entry.
pub fn is_reset(v: &Value) -> bool {
    match v.as_array() {
        Some(a) if a.is_empty() => true,
        Some(a) if a.len() == 1 => a[0].as_object().is_some_and(Map::is_empty),
        _ => false,
    }
}

impl Managed {
    /// Reads `metadata.managedFields`. An entry that is not `FieldsV1`, or whose fields do not
    /// parse, makes the whole list unreadable.
    pub fn decode(v: Option<&Value>) -> Result<Managed, String> {
        let mut out = Managed::default();
        let Some(v) = v.filter(|v| !v.is_null()) else {
            return Ok(out);
        };
        let arr = v.as_array().ok_or("managedFields must be a list")?;
        for e in arr {
            let o = e
                .as_object()
                .ok_or("a managedFields entry must be an object")?;
            let s = |k: &str| o.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            if s("fieldsType") != "FieldsV1" {
                return Err(format!(
                    "error decoding versioned set: unexpected fieldsType {:?}",
                    s("fieldsType")
                ));
            }
            let set = FieldSet::from_fields_v1(o.get("fieldsV1").unwrap_or(&json!({})))?;
            let op = s("operation");
            let id = ManagerId {
                manager: s("manager"),
                api_version: if op == "Apply" {
                    String::new()
                } else {
                    s("apiVersion")
                },
                operation: op,
                subresource: s("subresource"),
            };
            let time = o.get("time").and_then(Value::as_str).map(normalize_time);
            out.0.insert(
                id,
                Entry {
                    set,
                    api_version: s("apiVersion"),
                    time,
                },
            );
        }
        Ok(out)
    }

    /// `metadata.managedFields` as the apiserver writes it: appliers first, then by time,
    /// manager, apiVersion and subresource; `None` when no manager owns anything.
    pub fn encode(&self) -> Option<Value> {
        let mut entries: Vec<(&ManagerId, &Entry)> =
            self.0.iter().filter(|(_, e)| !e.set.is_empty()).collect();
        if entries.is_empty() {
            return None;
        }
        entries.sort_by(|(a, ea), (b, eb)| {
            a.operation
                .cmp(&b.operation)
                .then_with(|| seconds(ea.time.as_deref()).cmp(&seconds(eb.time.as_deref())))
                .then_with(|| a.manager.cmp(&b.manager))
                .then_with(|| ea.api_version.cmp(&eb.api_version))
                .then_with(|| a.subresource.cmp(&b.subresource))
        });
        let list = entries
            .into_iter()
            .map(|(id, e)| {
                let mut m = Map::new();
                let mut put = |k: &str, v: &str| {
                    if !v.is_empty() {
                        m.insert(k.into(), json!(v));
                    }
                };
                put("manager", &id.manager);
                put("operation", &id.operation);
                put("apiVersion", &e.api_version);
                put("time", e.time.as_deref().unwrap_or(""));
                put("fieldsType", "FieldsV1");
                put("subresource", &id.subresource);
                m.insert("fieldsV1".into(), e.set.to_fields_v1());
                Value::Object(m)
            })
            .collect();
        Some(Value::Array(list))
    }

    fn drop_empty(&mut self) {
        self.0.retain(|_, e| !e.set.is_empty());
    }

    /// Merges the oldest `Update` entries into `ancient-changes` (one per apiVersion) until at
    /// most [`MAX_UPDATE_MANAGERS`] remain.
    fn cap_updaters(&mut self) {
        let mut updaters: Vec<ManagerId> =
            self.0.keys().filter(|k| k.is_update()).cloned().collect();
        if updaters.len() <= MAX_UPDATE_MANAGERS {
            return;
        }
        updaters.sort_by(|a, b| {
            seconds(self.0[a].time.as_deref())
                .cmp(&seconds(self.0[b].time.as_deref()))
                .then_with(|| a.cmp(b))
        });
        let mut count = updaters.len();
        for id in updaters {
            if count <= MAX_UPDATE_MANAGERS {
                break;
            }
            if id.manager == ANCIENT_CHANGES && id.subresource.is_empty() {
                continue;
            }
            let e = self.0.remove(&id).expect("listed above");
            let bucket = ManagerId::new(ANCIENT_CHANGES, Operation::Update, &e.api_version, "");
            match self.0.get_mut(&bucket) {
                Some(b) => {
                    b.set = b.set.union(&e.set);
                    b.time = e.time;
                    count -= 1;
                }
                None => {
                    self.0.insert(bucket, e);
                }
            }
        }
    }
}

/// Seconds since the epoch of an RFC 3339 time (0 when absent or unreadable), for ordering.
fn seconds(t: Option<&str>) -> i64 {
    t.and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .map(|t| t.as_second())
        .unwrap_or(0)
}

/// A time as `metav1.Time` writes it: UTC, whole seconds.
fn normalize_time(t: &str) -> String {
    match t.parse::<jiff::Timestamp>() {
        Ok(ts) => ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        Err(_) => t.to_string(),
    }
}

/// The paths no manager ever owns: type and server-set metadata.
fn strip_meta(set: &mut FieldSet) {
    for p in ["apiVersion", "kind", "metadata"] {
        set.remove(&[Pe::field(p)]);
    }
    for f in [
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "clusterName",
        "generation",
        "managedFields",
        "resourceVersion",
    ] {
        set.remove(&[Pe::field("metadata"), Pe::field(f)]);
    }
}

/// Which top-level fields a write through one endpoint may own: the main resource of a kind
/// with a status subresource never owns `status`, and the status subresource never owns `spec`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    pub has_status: bool,
    pub status: bool,
}

impl Endpoint {
    fn keep(self) -> impl Fn(&Pe) -> bool + Copy {
        move |pe: &Pe| {
            let name = match pe {
                Pe::Field(n) => n.as_str(),
                _ => return true,
            };
            if self.status {
                name != "spec"
            } else {
                !(self.has_status && name == "status")
            }
        }
    }

    pub fn subresource(self) -> &'static str {
        if self.status { "status" } else { "" }
    }
}

/// The fields of `other` managers a write takes (changed fields they own) or drops (removed
/// fields): shared by update and apply.
fn conflicts_with_others(
    managed: &Managed,
    me: Option<&ManagerId>,
    cmp: &Comparison,
) -> BTreeMap<ManagerId, FieldSet> {
    let changed = cmp.changed();
    let mut conflicts = BTreeMap::new();
    for (id, e) in &managed.0 {
        if Some(id) == me {
            continue;
        }
        let c = e.set.intersection(&changed);
        if !c.is_empty() {
            conflicts.insert(id.clone(), c);
        }
    }
    conflicts
}

fn take_from_others(
    managed: &mut Managed,
    me: Option<&ManagerId>,
    conflicts: &BTreeMap<ManagerId, FieldSet>,
    cmp: &Comparison,
) {
    for (id, e) in managed.0.iter_mut() {
        if Some(id) == me {
            continue;
        }
        if let Some(c) = conflicts.get(id) {
            e.set = e.set.difference(c);
        }
        e.set = e.set.difference(&cmp.removed);
    }
}

/// One write's manager: who, in which version, through which endpoint, when, over which type.
pub struct Op<'a> {
    pub ty: Ty<'a>,
    pub id: &'a ManagerId,
    pub api_version: &'a str,
    pub endpoint: Endpoint,
    pub now: &'a str,
}

/// Ownership after a create, update or non-apply patch: the fields the write set are now its
/// manager's (taken from whoever owned them), removed fields are nobody's, and the manager's
/// entry's time moves only if it set something.
pub fn record_update(mut managed: Managed, old: &Value, new: &Value, op: &Op<'_>) -> Managed {
    let mut cmp = walk::compare(old, new, op.ty);
    cmp.retain_top(op.endpoint.keep());
    // The operation is an anonymous manager first: every owner, the same-named one included,
    // gives up what it changed.
    let conflicts = conflicts_with_others(&managed, None, &cmp);
    take_from_others(&mut managed, None, &conflicts, &cmp);
    let mut mine = cmp.changed();
    strip_meta(&mut mine);
    managed.drop_empty();
    if !mine.is_empty() {
        let e = managed.0.entry(op.id.clone()).or_insert_with(|| Entry {
            set: FieldSet::default(),
            api_version: op.api_version.to_string(),
            time: None,
        });
        e.set = e.set.union(&mine);
        e.api_version = op.api_version.to_string();
        e.time = Some(op.now.to_string());
    }
    managed.cap_updaters();
    managed
}

/// An apply that failed.
pub enum ApplyError {
    /// The configuration does not fit the kind's type.
    Typed(walk::TypeErrors),
    /// It would change fields other managers own.
    Conflicts(Vec<(ManagerId, Vec<Pe>)>),
}

/// What an apply produces: the object to store (`None`: nothing would change) and the new
/// ownership.
pub struct Applied {
    pub object: Value,
    pub changed: bool,
    pub managed: Managed,
}

/// Server-side apply of `config` by the op's manager to `live` (managedFields removed): merge,
/// remove what this applier stopped applying and nobody else owns, then take ownership,
/// refusing (unless forced) to change what other managers own.
pub fn apply(
    mut managed: Managed,
    live: &Value,
    config: &Value,
    op: &Op<'_>,
    force: bool,
) -> Result<Applied, ApplyError> {
    let mut config_set = walk::to_set(config, op.ty).map_err(ApplyError::Typed)?;
    config_set.retain_top(op.endpoint.keep());
    let merged = walk::merge(Some(live), Some(config), op.ty).unwrap_or_else(|| json!({}));
    let last = managed.0.get(op.id).map(|e| e.set.clone());
    let previous_time = managed.0.get(op.id).and_then(|e| e.time.clone());
    managed.0.insert(
        op.id.clone(),
        Entry {
            set: config_set,
            api_version: op.api_version.to_string(),
            time: previous_time,
        },
    );
    let object = match &last {
        Some(last) if !last.is_empty() => prune(&merged, &managed, last, op.ty),
        _ => merged,
    };
    let mut cmp = walk::compare(live, &object, op.ty);
    cmp.retain_top(op.endpoint.keep());
    let conflicts = conflicts_with_others(&managed, Some(op.id), &cmp);
    if !force && !conflicts.is_empty() {
        return Err(ApplyError::Conflicts(
            conflicts
                .into_iter()
                .flat_map(|(m, set)| set.paths().into_iter().map(move |p| (m.clone(), p)))
                .collect(),
        ));
    }
    take_from_others(&mut managed, Some(op.id), &conflicts, &cmp);
    if let Some(e) = managed.0.get_mut(op.id) {
        strip_meta(&mut e.set);
    }
    managed.drop_empty();
    let changed = object != *live;
    if changed && let Some(e) = managed.0.get_mut(op.id) {
        e.time = Some(op.now.to_string());
    }
    Ok(Applied {
        object,
        changed,
        managed,
    })
}

/// Removes from `merged` what the applier owned last time and no manager (the applier's new
/// configuration included) owns now; what nobody ever owned stays.
fn prune(merged: &Value, managed: &Managed, last: &FieldSet, ty: Ty<'_>) -> Value {
    let named = |s: &FieldSet| walk::with_named_fields(s, ty);
    let last_named = named(last);
    let first = walk::remove(merged, &last_named, ty);
    let all_owned = managed
        .0
        .values()
        .fold(FieldSet::default(), |acc, e| acc.union(&e.set));
    let merged_set = named(&walk::to_set_lenient(merged, ty));
    let first_set = named(&walk::to_set_lenient(&first, ty));
    let unowned = merged_set.difference(&first_set.union(&named(&all_owned)));
    let second = walk::remove(merged, &unowned, ty);
    let second_set = named(&walk::to_set_lenient(&second, ty));
    let dangling = merged_set.difference(&second_set).intersection(&last_named);
    walk::remove(merged, &dangling, ty)
}

/// The 409 the apiserver answers an apply that would take fields from other managers.
pub fn conflict_error(conflicts: &[(ManagerId, Vec<Pe>)]) -> ApiError {
    let message = if let [(m, p)] = conflicts {
        format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            m.describe(),
            render(p)
        )
    } else {
        let mut by: BTreeMap<&ManagerId, Vec<String>> = BTreeMap::new();
        for (m, p) in conflicts {
            by.entry(m).or_default().push(render(p));
        }
        let mut lines = Vec::new();
        let mut managers: Vec<&&ManagerId> = by.keys().collect();
        managers.sort_by(|a, b| a.manager.cmp(&b.manager).then_with(|| a.cmp(b)));
        for m in managers {
            lines.push(format!("conflicts with {}:", m.describe()));
            for p in &by[*m] {
                lines.push(format!("- {p}"));
            }
        }
        format!(
            "Apply failed with {} conflicts: {}",
            conflicts.len(),
            lines.join("\n")
        )
    };
    let mut e = ApiError::new(409, "Conflict", message);
    e.0.details = Some(StatusDetails {
        name: String::new(),
        group: String::new(),
        kind: String::new(),
        uid: String::new(),
        causes: conflicts
            .iter()
            .map(|(m, p)| StatusCause {
                reason: "FieldManagerConflict".into(),
                message: format!("conflict with {}", m.describe()),
                field: render(p),
            })
            .collect(),
        retry_after_seconds: 0,
    });
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "a": {"type": "string"}, "b": {"type": "string"}, "c": {"type": "string"},
            "items": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "properties": {"name": {"type": "string"}, "v": {"type": "string"}}}}
        }}}})
    }

    const NOW: &str = "2026-01-01T00:00:00Z";
    const LATER: &str = "2026-01-01T00:01:00Z";

    fn ep() -> Endpoint {
        Endpoint {
            has_status: false,
            status: false,
        }
    }

    fn op<'a>(ty: Ty<'a>, id: &'a ManagerId, now: &'a str) -> Op<'a> {
        Op {
            ty,
            id,
            api_version: "x/v1",
            endpoint: ep(),
            now,
        }
    }

    fn base() -> Value {
        json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n"}})
    }

    fn with(spec: Value) -> Value {
        let mut o = base();
        o["spec"] = spec;
        o
    }

    /// An apply of `spec` that must succeed.
    fn applied(managed: &Managed, live: &Value, spec: Value, op: &Op<'_>, force: bool) -> Applied {
        apply(managed.clone(), live, &with(spec), op, force)
            .ok()
            .expect("the apply succeeds")
    }

    fn fields_of(m: &Managed, id: &ManagerId) -> Option<Value> {
        m.0.get(id).map(|e| e.set.to_fields_v1())
    }

    #[test]
    fn an_update_owns_what_it_changed_and_only_then_moves_its_time() {
        let s = schema();
        let ty = Ty::root(Some(&s));
        let creator = ManagerId::new("kubectl-create", Operation::Update, "x/v1", "");
        let m = record_update(
            Managed::default(),
            &json!({}),
            &with(json!({"a": "1", "b": "1"})),
            &op(ty, &creator, NOW),
        );
        assert_eq!(
            fields_of(&m, &creator).unwrap(),
            json!({"f:spec": {".": {}, "f:a": {}, "f:b": {}}})
        );
        let ctl = ManagerId::new("ctl", Operation::Update, "x/v1", "");
        let m = record_update(
            m,
            &with(json!({"a": "1", "b": "1"})),
            &with(json!({"a": "2", "b": "1", "c": "3"})),
            &op(ty, &ctl, LATER),
        );
        assert_eq!(
            fields_of(&m, &ctl).unwrap(),
            json!({"f:spec": {"f:a": {}, "f:c": {}}})
        );
        assert_eq!(
            fields_of(&m, &creator).unwrap(),
            json!({"f:spec": {".": {}, "f:b": {}}}),
            "the creator lost the field the controller changed"
        );
        // An unchanged write leaves every time alone.
        let again = record_update(
            m.clone(),
            &with(json!({"a": "2", "b": "1", "c": "3"})),
            &with(json!({"a": "2", "b": "1", "c": "3"})),
            &op(ty, &ctl, "2030-01-01T00:00:00Z"),
        );
        assert_eq!(again.encode(), m.encode());
        let enc = m.encode().unwrap();
        assert_eq!(enc[0]["manager"], "kubectl-create");
        assert_eq!(enc[1]["time"], LATER);
        assert_eq!(enc[1]["operation"], "Update");
        assert_eq!(enc[1]["fieldsType"], "FieldsV1");
    }

    #[test]
    fn apply_conflicts_force_and_removal_of_what_is_no_longer_applied() {
        let s = schema();
        let ty = Ty::root(Some(&s));
        let a = ManagerId::new("a", Operation::Apply, "", "");
        let b = ManagerId::new("b", Operation::Apply, "", "");
        let cfg1 = json!({"a": "1", "items": [{"name": "x", "v": "1"}, {"name": "y"}]});
        let r = applied(
            &Managed::default(),
            &json!({}),
            cfg1,
            &op(ty, &a, NOW),
            false,
        );
        assert!(r.changed);
        let live = r.object.clone();
        // b applies the same value: shared, no conflict.
        let r2 = applied(
            &r.managed,
            &live,
            json!({"a": "1"}),
            &op(ty, &b, LATER),
            false,
        );
        assert!(!r2.changed);
        assert!(
            r2.managed.0.get(&b).unwrap().time.is_none(),
            "an apply that changed nothing sets no time"
        );
        // b changes a: a conflict naming a's field.
        let Err(ApplyError::Conflicts(c)) = apply(
            r2.managed.clone(),
            &live,
            &with(json!({"a": "2"})),
            &op(ty, &b, LATER),
            false,
        ) else {
            panic!("expected a conflict");
        };
        let e = conflict_error(&c);
        assert_eq!(
            e.0.message,
            r#"Apply failed with 1 conflict: conflict with "a": .spec.a"#
        );
        assert_eq!(
            e.0.details.as_ref().unwrap().causes[0].reason,
            "FieldManagerConflict"
        );
        // Forced, b takes it.
        let forced = applied(
            &r2.managed,
            &live,
            json!({"a": "2"}),
            &op(ty, &b, LATER),
            true,
        );
        assert_eq!(forced.object["spec"]["a"], "2");
        assert!(
            !forced.managed.0[&a]
                .set
                .has(&[Pe::field("spec"), Pe::field("a")])
        );
        // a stops applying item y: removed, since nobody else owns it; x stays.
        let r3 = applied(
            &forced.managed,
            &forced.object,
            json!({"items": [{"name": "x", "v": "1"}]}),
            &op(ty, &a, LATER),
            false,
        );
        let names: Vec<&str> = r3.object["spec"]["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["x"]);
        assert_eq!(r3.object["spec"]["a"], "2", "b's field stays");
    }

    #[test]
    fn reset_markers_and_bad_entries() {
        assert!(is_reset(&json!([])));
        assert!(is_reset(&json!([{}])));
        assert!(!is_reset(&json!([{"manager": "x"}])));
        assert!(
            Managed::decode(Some(
                &json!([{"manager": "x", "operation": "Update", "fieldsV1": {}}])
            ))
            .is_err()
        );
        assert!(Managed::decode(Some(&json!([{"manager": "x", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"q:x": {}}}]))).is_err());
    }

    #[test]
    fn more_than_ten_updaters_fold_into_ancient_changes() {
        let mut m = Managed::default();
        let mut obj = with(json!({}));
        for i in 0..12 {
            let mut next = obj.clone();
            next["spec"]["items"] = json!([{"name": format!("i{i}")}]);
            next["spec"][format!("x{i}")] = json!("v");
            let id = ManagerId::new(&format!("m{i:02}"), Operation::Update, "x/v1", "");
            m = record_update(
                m,
                &obj,
                &next,
                &op(Ty::Deduced, &id, &format!("2026-01-01T00:00:{i:02}Z")),
            );
            obj = next;
        }
        let enc = m.encode().unwrap();
        let names: Vec<&str> = enc
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["manager"].as_str().unwrap())
            .collect();
        assert_eq!(names.len(), 10);
        assert!(names.contains(&ANCIENT_CHANGES), "{names:?}");
        assert!(
            !names.contains(&"m00") && !names.contains(&"m01") && !names.contains(&"m02"),
            "{names:?}"
        );
    }
}
