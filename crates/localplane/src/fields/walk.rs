//! Walks over objects by their type: the set of fields a value holds, what changed between two
//! versions, the merge a server-side apply makes, and removing a set of fields.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::path::{Pe, render};
use super::set::FieldSet;
use super::types::{Expect, ListRel, Ty};

/// Errors found while typing a value, each `<path>: <message>` as structured-merge-diff words
/// them.
pub type TypeErrors = Vec<String>;

/// Renders type errors as one message: the single error, or `errors:` and one per line.
pub fn type_errors_message(errs: &TypeErrors) -> String {
    match errs.as_slice() {
        [one] => one.clone(),
        many => format!("errors:\n  {}", many.join("\n  ")),
    }
}

/// Whether a node of this type, holding this value, is owned as a whole.
fn is_leaf(v: &Value, ty: Ty<'_>) -> bool {
    match v {
        Value::Object(_) => ty.map_atomic(),
        Value::Array(_) => matches!(ty.list(), ListRel::Atomic),
        _ => true,
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "map",
    }
}

/// Checks that a value has the shape its type expects (null fits anything).
fn check_shape(v: &Value, ty: Ty<'_>) -> Result<(), String> {
    if v.is_null() {
        return Ok(());
    }
    let ok = match ty.expects() {
        Expect::Any => true,
        Expect::Map => v.is_object(),
        Expect::List => v.is_array(),
        Expect::String => v.is_string(),
        Expect::Numeric => v.is_number(),
        Expect::Boolean => v.is_boolean(),
    };
    if ok {
        return Ok(());
    }
    Err(match ty.expects() {
        Expect::Map => format!("expected map, got {}", type_name(v)),
        Expect::List => format!("expected list, got {}", type_name(v)),
        Expect::String => format!("expected string, got {v}"),
        Expect::Numeric => format!("expected numeric (int or float), got {}", type_name(v)),
        Expect::Boolean => format!("expected boolean, got {v}"),
        Expect::Any => unreachable!("checked above"),
    })
}

/// The fields a value sets, as an apply configuration claims them. Strict: fields the type does
/// not declare, values of the wrong shape, list items without their keys and duplicate items
/// are errors.
pub fn to_set(v: &Value, ty: Ty<'_>) -> Result<FieldSet, TypeErrors> {
    let mut errs = Vec::new();
    let set = set_below(v, ty, &mut Vec::new(), &mut errs, true);
    if errs.is_empty() { Ok(set) } else { Err(errs) }
}

/// The same over a stored object: what cannot be typed is treated as untyped, never an error.
pub fn to_set_lenient(v: &Value, ty: Ty<'_>) -> FieldSet {
    set_below(v, ty, &mut Vec::new(), &mut Vec::new(), false)
}

fn set_below(
    v: &Value,
    ty: Ty<'_>,
    path: &mut Vec<Pe>,
    errs: &mut TypeErrors,
    strict: bool,
) -> FieldSet {
    let mut out = FieldSet::default();
    if strict && let Err(e) = check_shape(v, ty) {
        errs.push(format!("{}: {e}", render(path)));
        return out;
    }
    if is_leaf(v, ty) {
        return out;
    }
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                let pe = Pe::field(k);
                let child_ty = match ty.field(k) {
                    Some(t) => t,
                    None if strict => {
                        path.push(pe);
                        errs.push(format!("{}: field not declared in schema", render(path)));
                        path.pop();
                        continue;
                    }
                    None => Ty::Deduced,
                };
                path.push(pe.clone());
                let below = set_below(child, child_ty, path, errs, strict);
                path.pop();
                let empty_map = child.as_object().is_some_and(Map::is_empty);
                if is_leaf(child, child_ty) || empty_map || !ty.declared(k) {
                    out.insert_member(pe.clone());
                }
                out.insert_child(pe, below);
            }
        }
        Value::Array(items) => {
            let rel = ty.list();
            let item_ty = ty.item();
            let mut seen = BTreeSet::new();
            for item in items {
                let pe = match ty.item_pe(&rel, item) {
                    Ok(pe) => pe,
                    Err(e) => {
                        if strict {
                            errs.push(format!("{}: {e}", render(path)));
                        }
                        continue;
                    }
                };
                if !seen.insert(pe.clone()) {
                    if strict {
                        errs.push(format!("{}: duplicate entries for key {pe}", render(path)));
                    }
                    continue;
                }
                path.push(pe.clone());
                let below = set_below(item, item_ty, path, errs, strict);
                path.pop();
                out.insert_member(pe.clone());
                out.insert_child(pe, below);
            }
        }
        _ => {}
    }
    out
}

/// What a write did, field by field.
#[derive(Debug, Default)]
pub struct Comparison {
    pub added: FieldSet,
    pub modified: FieldSet,
    pub removed: FieldSet,
}

impl Comparison {
    /// The fields the write set: added or changed.
    pub fn changed(&self) -> FieldSet {
        self.added.union(&self.modified)
    }

    /// Drops whole top-level fields the caller's filter rejects (the fields a write to one
    /// endpoint cannot set).
    pub fn retain_top(&mut self, keep: impl Fn(&Pe) -> bool + Copy) {
        self.added.retain_top(keep);
        self.modified.retain_top(keep);
        self.removed.retain_top(keep);
    }
}

/// Compares two versions of an object (`old` absent for a create's empty object).
pub fn compare(old: &Value, new: &Value, ty: Ty<'_>) -> Comparison {
    let mut c = Comparison::default();
    compare_node(Some(old), Some(new), ty, &mut Vec::new(), &mut c);
    c
}

fn items_by_pe<'v>(items: &'v [Value], ty: Ty<'_>, rel: &ListRel<'_>) -> Vec<(Pe, &'v Value)> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        // An item that cannot be keyed (a stored object may hold one) is known by position.
        let pe = ty.item_pe(rel, item).unwrap_or(Pe::Index(i));
        if seen.insert(pe.clone()) {
            out.push((pe, item));
        }
    }
    out
}

fn compare_node(
    old: Option<&Value>,
    new: Option<&Value>,
    ty: Ty<'_>,
    path: &mut Vec<Pe>,
    c: &mut Comparison,
) {
    let container = |v: Option<&Value>| match v {
        Some(Value::Object(m)) => !m.is_empty() && !ty.map_atomic(),
        Some(Value::Array(a)) => !a.is_empty() && !matches!(ty.list(), ListRel::Atomic),
        _ => false,
    };
    let same_kind = matches!(
        (old, new),
        (Some(Value::Object(_)), Some(Value::Object(_)))
            | (Some(Value::Array(_)), Some(Value::Array(_)))
            | (None, Some(_))
            | (Some(_), None)
    );
    let descend = same_kind && (container(old) || container(new));
    if !descend {
        match (old, new) {
            (None, Some(_)) => c.added.insert(path),
            (Some(_), None) => c.removed.insert(path),
            (Some(a), Some(b)) if a != b => c.modified.insert(path),
            _ => {}
        }
        return;
    }
    match (old, new) {
        (Some(Value::Object(_)), _) | (_, Some(Value::Object(_))) => {
            let (om, nm) = (
                old.and_then(Value::as_object),
                new.and_then(Value::as_object),
            );
            let keys: BTreeSet<&String> = om
                .into_iter()
                .flat_map(|m| m.keys())
                .chain(nm.into_iter().flat_map(|m| m.keys()))
                .collect();
            for k in keys {
                let child_ty = ty.field(k).unwrap_or(Ty::Deduced);
                path.push(Pe::field(k));
                compare_node(
                    om.and_then(|m| m.get(k)),
                    nm.and_then(|m| m.get(k)),
                    child_ty,
                    path,
                    c,
                );
                path.pop();
            }
        }
        _ => {
            let rel = ty.list();
            let item_ty = ty.item();
            let empty: Vec<Value> = vec![];
            let oa = old.and_then(Value::as_array).unwrap_or(&empty);
            let na = new.and_then(Value::as_array).unwrap_or(&empty);
            let oi = items_by_pe(oa, ty, &rel);
            let ni = items_by_pe(na, ty, &rel);
            let om: BTreeMap<&Pe, &Value> = oi.iter().map(|(p, v)| (p, *v)).collect();
            let nm: BTreeMap<&Pe, &Value> = ni.iter().map(|(p, v)| (p, *v)).collect();
            let pes: BTreeSet<&Pe> = om.keys().chain(nm.keys()).copied().collect();
            for pe in pes {
                path.push(pe.clone());
                compare_node(om.get(pe).copied(), nm.get(pe).copied(), item_ty, path, c);
                path.pop();
            }
        }
    }
    // A container that appeared or disappeared is itself added or removed.
    match (old, new) {
        (None, Some(_)) => c.added.insert(path),
        (Some(_), None) => c.removed.insert(path),
        _ => {}
    }
}

/// What a server-side apply makes of the live object and the applied configuration: the
/// configuration's values win, granular maps merge field by field, list maps and sets merge
/// item by item (keeping the configuration's order for the items it names), atomic values are
/// replaced.
pub fn merge(live: Option<&Value>, config: Option<&Value>, ty: Ty<'_>) -> Option<Value> {
    let (l, r) = match (live, config) {
        (None, None) => return None,
        (Some(l), None) => return Some(l.clone()),
        (None, Some(r)) => return Some(r.clone()),
        (Some(l), Some(r)) => (l, r),
    };
    match (l, r) {
        (Value::Object(lm), Value::Object(rm)) => {
            if ty.map_atomic() || (lm.is_empty() && rm.is_empty()) {
                return Some(r.clone());
            }
            let mut out = Map::new();
            for (k, lv) in lm {
                let child_ty = ty.field(k).unwrap_or(Ty::Deduced);
                if let Some(v) = merge(Some(lv), rm.get(k), child_ty) {
                    out.insert(k.clone(), v);
                }
            }
            for (k, rv) in rm {
                if !lm.contains_key(k) {
                    out.insert(k.clone(), rv.clone());
                }
            }
            Some(Value::Object(out))
        }
        (Value::Array(la), Value::Array(ra)) => {
            let rel = ty.list();
            if matches!(rel, ListRel::Atomic) || (la.is_empty() && ra.is_empty()) {
                return Some(r.clone());
            }
            Some(Value::Array(merge_list(la, ra, ty, &rel)))
        }
        // An explicit null does not clear a granular container.
        (Value::Object(_) | Value::Array(_), Value::Null) if !is_leaf(l, ty) => Some(l.clone()),
        _ => Some(r.clone()),
    }
}

/// Merges two associative lists. Items only the live list has keep their place; items the
/// configuration names come in the configuration's order, each where the live list first
/// reaches one of them.
fn merge_list(la: &[Value], ra: &[Value], ty: Ty<'_>, rel: &ListRel<'_>) -> Vec<Value> {
    let item_ty = ty.item();
    let lhs = items_by_pe(la, ty, rel);
    let rhs = items_by_pe(ra, ty, rel);
    let in_lhs: BTreeMap<&Pe, &Value> = lhs.iter().map(|(p, v)| (p, *v)).collect();
    let in_rhs: BTreeMap<&Pe, &Value> = rhs.iter().map(|(p, v)| (p, *v)).collect();
    // The configuration's items that the live list also has, in the configuration's order.
    let mut shared = rhs
        .iter()
        .map(|(p, _)| p)
        .filter(|p| in_lhs.contains_key(p))
        .peekable();
    let mut merged_rhs: BTreeSet<&Pe> = BTreeSet::new();
    let mut out = Vec::with_capacity(lhs.len().max(rhs.len()));
    let (mut li, mut ri) = (0, 0);
    let push = |out: &mut Vec<Value>, l: Option<&Value>, r: Option<&Value>| {
        if let Some(v) = merge(l, r, item_ty) {
            out.push(v);
        }
    };
    while li < lhs.len() || ri < rhs.len() {
        if li < lhs.len() && ri < rhs.len() {
            let pe = &lhs[li].0;
            if *pe == rhs[ri].0 {
                merged_rhs.insert(pe);
                push(&mut out, Some(lhs[li].1), Some(rhs[ri].1));
                li += 1;
                ri += 1;
                shared.next();
                continue;
            }
            if in_rhs.contains_key(pe) && shared.peek().is_some_and(|s| *s != pe) {
                // A shared item, but not the one due next.
                li += 1;
                continue;
            }
        }
        if li < lhs.len() {
            let pe = &lhs[li].0;
            if !in_rhs.contains_key(pe) {
                push(&mut out, Some(lhs[li].1), None);
                li += 1;
                continue;
            }
            if merged_rhs.contains(pe) {
                li += 1;
                continue;
            }
        }
        if ri < rhs.len() {
            let pe = &rhs[ri].0;
            merged_rhs.insert(pe);
            push(&mut out, in_lhs.get(pe).copied(), Some(rhs[ri].1));
            ri += 1;
            if shared.peek().is_some_and(|s| *s == pe) {
                shared.next();
            }
        }
    }
    out
}

/// The value without the fields in `set` (a member removes its whole subtree). A container
/// that loses everything it held goes too.
pub fn remove(v: &Value, set: &FieldSet, ty: Ty<'_>) -> Value {
    if set.is_empty() || is_leaf(v, ty) {
        return v.clone();
    }
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, child) in m {
                let pe = Pe::field(k);
                if set.is_member(&pe) {
                    continue;
                }
                match set.child(&pe) {
                    Some(sub) => {
                        let child_ty = ty.field(k).unwrap_or(Ty::Deduced);
                        let kept = remove(child, sub, child_ty);
                        if !emptied(child, &kept) {
                            out.insert(k.clone(), kept);
                        }
                    }
                    None => {
                        out.insert(k.clone(), child.clone());
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => {
            let rel = ty.list();
            let item_ty = ty.item();
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let pe = ty.item_pe(&rel, item).unwrap_or(Pe::Index(i));
                if set.is_member(&pe) {
                    continue;
                }
                match set.child(&pe) {
                    Some(sub) => {
                        let kept = remove(item, sub, item_ty);
                        if !emptied(item, &kept) {
                            out.push(kept);
                        }
                    }
                    None => out.push(item.clone()),
                }
            }
            Value::Array(out)
        }
        _ => v.clone(),
    }
}

fn emptied(before: &Value, after: &Value) -> bool {
    let empty = |v: &Value| match v {
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    };
    empty(after) && !empty(before)
}

/// The set, with every declared (struct) field that has members below it made a member itself,
/// so that removing the set removes such a field once nothing below it is left.
pub fn with_named_fields(set: &FieldSet, ty: Ty<'_>) -> FieldSet {
    let mut out = FieldSet::default();
    for m in set.members() {
        out.insert_member(m.clone());
    }
    for (pe, child) in set.children() {
        let child_ty = match pe {
            Pe::Field(name) => {
                if ty.declared(name) {
                    out.insert_member(pe.clone());
                }
                ty.field(name).unwrap_or(Ty::Deduced)
            }
            _ => ty.item(),
        };
        out.insert_child(pe.clone(), with_named_fields(child, child_ty));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "properties": {
                        "size": {"type": "integer"},
                        "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
                        "items": {
                            "type": "array",
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["name"],
                            "items": {"type": "object", "properties": {"name": {"type": "string"}, "v": {"type": "integer"}}}
                        },
                        "whole": {"type": "array", "items": {"type": "string"}},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                    }
                }
            }
        })
    }

    fn keys(set: &FieldSet) -> Vec<String> {
        set.paths().iter().map(|p| render(p)).collect()
    }

    #[test]
    fn an_apply_configuration_owns_what_it_sets() {
        let s = schema();
        let cfg = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a", "labels": {"l": "1"}},
            "spec": {"size": 1, "tags": ["a"], "items": [{"name": "x", "v": 1}], "whole": ["q"], "free": {"a": {"b": 1}}}});
        let set = to_set(&cfg, Ty::root(Some(&s))).unwrap();
        assert_eq!(
            set.to_fields_v1(),
            json!({
                "f:apiVersion": {}, "f:kind": {},
                "f:metadata": {"f:name": {}, "f:labels": {"f:l": {}}},
                "f:spec": {
                    "f:size": {}, "f:tags": {"v:\"a\"": {}}, "f:whole": {},
                    "f:items": {"k:{\"name\":\"x\"}": {".": {}, "f:name": {}, "f:v": {}}},
                    "f:free": {"f:a": {".": {}, "f:b": {}}},
                }
            })
        );
        let errs = to_set(
            &json!({"spec": {"bogus": 1, "size": "x"}}),
            Ty::root(Some(&s)),
        )
        .unwrap_err();
        assert_eq!(
            errs,
            vec![
                ".spec.bogus: field not declared in schema".to_string(),
                r#".spec.size: expected numeric (int or float), got string"#.to_string()
            ]
        );
        let dup = to_set(
            &json!({"spec": {"items": [{"name": "x"}, {"name": "x"}]}}),
            Ty::root(Some(&s)),
        )
        .unwrap_err();
        assert_eq!(
            dup,
            vec![r#".spec.items: duplicate entries for key [name="x"]"#.to_string()]
        );
    }

    #[test]
    fn a_comparison_names_containers_that_appear() {
        let s = schema();
        let c = compare(
            &json!({"spec": {"size": 1, "items": [{"name": "x", "v": 1}]}}),
            &json!({"spec": {"size": 2, "items": [{"name": "x", "v": 1}, {"name": "y", "v": 2}]}, "metadata": {"labels": {"a": "b"}}}),
            Ty::root(Some(&s)),
        );
        assert_eq!(keys(&c.modified), vec![".spec.size"]);
        assert_eq!(
            keys(&c.added),
            vec![
                ".metadata",
                ".metadata.labels",
                ".metadata.labels.a",
                r#".spec.items[name="y"]"#,
                r#".spec.items[name="y"].name"#,
                r#".spec.items[name="y"].v"#,
            ]
        );
        assert!(c.removed.is_empty());
    }

    #[test]
    fn merge_keeps_live_items_and_the_configurations_order() {
        let s = schema();
        let ty = Ty::root(Some(&s));
        let live = json!({"spec": {"size": 1, "items": [{"name": "a", "v": 1}, {"name": "b", "v": 2}, {"name": "c"}], "tags": ["x"], "whole": ["1", "2"]}});
        let cfg = json!({"spec": {"items": [{"name": "c", "v": 3}, {"name": "a"}, {"name": "d"}], "tags": ["y"], "whole": ["3"]}});
        let m = merge(Some(&live), Some(&cfg), ty).unwrap();
        let names: Vec<&str> = m["spec"]["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["b", "c", "a", "d"]);
        assert_eq!(m["spec"]["items"][1]["v"], 3);
        assert_eq!(
            m["spec"]["items"][2]["v"], 1,
            "a field the config leaves out stays"
        );
        assert_eq!(m["spec"]["tags"], json!(["x", "y"]));
        assert_eq!(
            m["spec"]["whole"],
            json!(["3"]),
            "an atomic list is replaced"
        );
        assert_eq!(m["spec"]["size"], 1);
    }

    #[test]
    fn remove_drops_members_and_what_they_empty() {
        let s = schema();
        let ty = Ty::root(Some(&s));
        let v = json!({"spec": {"size": 1, "items": [{"name": "a", "v": 1}, {"name": "b"}], "tags": ["x", "y"]}});
        let mut set = FieldSet::default();
        set.insert(&[
            Pe::field("spec"),
            Pe::field("items"),
            Pe::Key(vec![("name".into(), json!("a"))]),
        ]);
        set.insert(&[Pe::field("spec"), Pe::field("tags"), Pe::Value(json!("x"))]);
        set.insert(&[Pe::field("spec"), Pe::field("tags"), Pe::Value(json!("y"))]);
        let out = remove(&v, &set, ty);
        assert_eq!(out, json!({"spec": {"size": 1, "items": [{"name": "b"}]}}));
        let named = with_named_fields(&set, ty);
        assert!(named.has(&[Pe::field("spec")]));
        assert!(named.has(&[Pe::field("spec"), Pe::field("tags")]));
    }
}
