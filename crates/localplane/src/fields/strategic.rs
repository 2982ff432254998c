//! Strategic merge patch, as the apiserver applies one to a built-in kind (apimachinery's
//! `strategicpatch`, server side: parallel lists merged, nulls that match nothing ignored).
//!
//! * Maps merge key by key; `null` removes a key. A field whose Go tag says
//!   `patchStrategy:"replace"` is replaced whole.
//! * A list whose field says `patchStrategy:"merge"` merges: objects item by item, matched by the
//!   field's `patchMergeKey` (an item with a key the object lacks is added), scalars as a union.
//!   Every other list is replaced by the patch's.
//! * Directives: `$patch: replace` or `$patch: delete` in a map (the map is the patch's, or
//!   emptied) or as a list item (the list is the patch's items; the item whose key it names goes);
//!   `$retainKeys: [..]` (keys of the map not listed are cleared; the patch may set no other key);
//!   `$deleteFromPrimitiveList/<field>: [..]` (those scalars leave the list);
//!   `$setElementOrder/<field>: [..]` (the order the list's items end in).
//! * Order: the patch's items keep the patch's order (or the `$setElementOrder` list's), the
//!   object's other items theirs; an item the object did not have goes as early as it can.
//! * A value the object does not have (or has with another type) is taken from the patch with its
//!   nulls dropped and any map carrying a `$patch` directive left out.
//!
//! The markers (strategy, merge key) are [`super::types`]', the table server-side apply reads.

use serde_json::{Map, Value};

use super::types::{Expect, Ty};

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";

const BAD_PRIMITIVE_LIST: &str = "invalid patch format of primitive list";
const BAD_RETAIN_KEYS: &str = "invalid patch format of retainKeys";
const BAD_SET_ELEMENT_ORDER: &str = "invalid patch format of setElementOrder list";
const LISTS_OF_LISTS: &str = "lists of lists are not supported";

/// Why a patch could not be applied, grouped as the apiserver answers it.
#[derive(Debug, PartialEq, Eq)]
pub enum PatchError {
    /// A malformed directive: 400.
    BadRequest(String),
    /// A list of lists: 422, in the apiserver's generic words (the library's are not passed on).
    Unprocessable(String),
    /// Anything else the library reports (a missing merge key, an unknown directive): the
    /// apiserver passes the error through as it is, a 500 with no reason.
    Other(String),
}

type Result<T> = std::result::Result<T, PatchError>;
type Obj = Map<String, Value>;

/// Applies `patch` to `original` (an object of type `ty`).
pub fn apply(original: Obj, patch: Obj, ty: Ty<'_>) -> Result<Obj> {
    merge_map(original, patch, ty)
}

fn merge_map(mut original: Obj, mut patch: Obj, ty: Ty<'_>) -> Result<Obj> {
    if let Some(d) = patch.get(DIRECTIVE) {
        return match d.as_str() {
            Some("replace") => {
                patch.remove(DIRECTIVE);
                Ok(patch)
            }
            Some("delete") => Ok(Obj::new()),
            _ => Err(bad_patch_type(d, &patch)),
        };
    }
    retain_keys(&mut original, &mut patch)?;
    set_element_orders(&mut original, &mut patch, ty)?;
    for (k, pv) in patch {
        let (key, delete_list) = if k.starts_with(DELETE_FROM_PRIMITIVE_LIST) {
            let key = field_of(&k, DELETE_FROM_PRIMITIVE_LIST)
                .ok_or_else(|| PatchError::BadRequest(BAD_PRIMITIVE_LIST.into()))?;
            (key.to_string(), true)
        } else {
            (k, false)
        };
        if pv.is_null() {
            original.remove(&key);
            continue;
        }
        let field = ty.field(&key).unwrap_or(Ty::Deduced);
        match original.remove(&key) {
            None if delete_list => {}
            // A deletion list for a value of another type changes nothing.
            Some(ov) if delete_list && go_type(&ov) != go_type(&pv) => {
                original.insert(key, ov);
            }
            Some(Value::Object(om)) if pv.is_object() => {
                let merged = if field.patch_strategy() == Some("replace") {
                    into_obj(pv)
                } else {
                    merge_map(om, into_obj(pv), field)?
                };
                original.insert(key, Value::Object(merged));
            }
            Some(Value::Array(ol)) if pv.is_array() => {
                let merged = merge_list_field(ol, into_list(pv), field, delete_list)?;
                original.insert(key, Value::Array(merged));
            }
            _ => {
                // Absent, of another type, or a scalar: the patch's value, cleaned.
                let mut pv = pv;
                discard_nulls(&mut pv);
                if let Some(v) = remove_directives(pv) {
                    original.insert(key, v);
                }
            }
        }
    }
    Ok(original)
}

/// The field a `<prefix>/<field>` directive names.
fn field_of<'k>(key: &'k str, prefix: &str) -> Option<&'k str> {
    let (head, field) = key.split_once('/')?;
    (head == prefix).then_some(field)
}

/// `$retainKeys`: clears the object's keys that are not listed, after checking that the patch
/// sets nothing it does not list.
fn retain_keys(original: &mut Obj, patch: &mut Obj) -> Result<()> {
    let Some(list) = patch.remove(RETAIN_KEYS) else {
        return Ok(());
    };
    let Value::Array(list) = list else {
        return Err(PatchError::BadRequest(BAD_RETAIN_KEYS.into()));
    };
    let listed = |k: &str| list.iter().any(|v| v.as_str() == Some(k));
    for (k, v) in patch.iter() {
        if v.is_null()
            || k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
            || k.starts_with(SET_ELEMENT_ORDER)
        {
            continue;
        }
        if !listed(k) {
            return Err(PatchError::BadRequest(BAD_RETAIN_KEYS.into()));
        }
    }
    original.retain(|k, _| listed(k));
    Ok(())
}

/// `$setElementOrder/<field>`: merges the field's list (if the patch has one) and puts its items
/// in the order listed, the object's other items where they were.
fn set_element_orders(original: &mut Obj, patch: &mut Obj, ty: Ty<'_>) -> Result<()> {
    let keys: Vec<String> = patch
        .keys()
        .filter(|k| k.starts_with(SET_ELEMENT_ORDER))
        .cloned()
        .collect();
    for key in keys {
        let order = patch.remove(&key).expect("listed above");
        let Value::Array(order) = order else {
            return Err(PatchError::Other(bad_arg_type("[]interface {}", &order)));
        };
        let name = field_of(&key, SET_ELEMENT_ORDER)
            .ok_or_else(|| PatchError::BadRequest(BAD_SET_ELEMENT_ORDER.into()))?
            .to_string();
        let list_at = |m: &Obj| match m.get(&name) {
            None => Ok(None),
            Some(Value::Array(a)) => Ok(Some(a.clone())),
            Some(other) => Err(PatchError::Other(bad_arg_type("[]interface {}", other))),
        };
        let original_list = list_at(original)?;
        let patch_list = list_at(patch)?;
        let field = ty.field(&name).unwrap_or(Ty::Deduced);
        let merge_key = field.patch_merge_key().unwrap_or("");
        check_order(patch_list.as_deref().unwrap_or(&[]), &order, merge_key)?;
        let server_order = original_list.clone().unwrap_or_default();
        let patch_items = patch_list.clone().unwrap_or_default();
        let merged = match (original_list, patch_list) {
            (Some(o), None) => o,
            (None, Some(p)) => p.into_iter().filter_map(remove_directives).collect(),
            (Some(o), Some(p)) => merge_list_field(o, p, field, false)?,
            (None, None) => continue,
        };
        let (listed, others) = partition(merged, &order, merge_key)?;
        let maps = element_kind(&[&server_order, &patch_items])? == Kind::Map;
        let both = normalize_order(listed, others, &order, &server_order, merge_key, maps)?;
        original.insert(name.clone(), Value::Array(both));
        patch.remove(&name);
    }
    Ok(())
}

/// That the patch's list names its items in the order `$setElementOrder` gives.
fn check_order(patch_list: &[Value], order: &[Value], merge_key: &str) -> Result<()> {
    if order.is_empty() || patch_list.is_empty() {
        return Ok(());
    }
    let kept: Vec<&Value> = if merge_key.is_empty() {
        patch_list.iter().collect()
    } else {
        let mut kept = Vec::new();
        for v in patch_list {
            let Value::Object(m) = v else {
                return Err(PatchError::Other(bad_arg_type(
                    "map[string]interface {}",
                    v,
                )));
            };
            if m.get(DIRECTIVE).and_then(Value::as_str) != Some("delete") {
                kept.push(v);
            }
        }
        kept
    };
    let (mut p, mut o) = (0, 0);
    while p < kept.len() && o < order.len() {
        if kept[p].get(DIRECTIVE).is_some() {
            p += 1;
            continue;
        }
        if same_key(kept[p], &order[o], merge_key)? {
            p += 1;
        }
        o += 1;
    }
    if p < kept.len() && o >= order.len() {
        return Err(PatchError::Other(format!(
            "the order in patch list:\n{}\n doesn't match {SET_ELEMENT_ORDER} list:\n{}",
            go_fmt(&Value::Array(patch_list.to_vec())),
            go_fmt(&Value::Array(order.to_vec())),
        )));
    }
    Ok(())
}

/// Whether two items are the same item: equal scalars, or maps with equal merge keys.
fn same_key(left: &Value, right: &Value, merge_key: &str) -> Result<bool> {
    if merge_key.is_empty() {
        return Ok(left == right);
    }
    let key_of = |v: &Value| -> Result<Value> {
        let Value::Object(m) = v else {
            return Err(PatchError::Other(bad_arg_type(
                "map[string]interface {}",
                v,
            )));
        };
        m.get(merge_key)
            .cloned()
            .ok_or_else(|| PatchError::Other(no_merge_key(m, merge_key)))
    };
    Ok(key_of(left)? == key_of(right)?)
}

/// A list field of an object and the patch's value for it: merged if the field's strategy is
/// `merge` (or the patch's value is a deletion list), else the patch's value.
fn merge_list_field(
    original: Vec<Value>,
    patch: Vec<Value>,
    field: Ty<'_>,
    delete_list: bool,
) -> Result<Vec<Value>> {
    if field.patch_strategy() == Some("merge") || delete_list {
        merge_list(
            original,
            patch,
            field.item(),
            field.patch_merge_key().unwrap_or(""),
            delete_list,
        )
    } else {
        Ok(patch)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Map,
    Other,
}

fn merge_list(
    original: Vec<Value>,
    patch: Vec<Value>,
    item: Ty<'_>,
    merge_key: &str,
    delete_list: bool,
) -> Result<Vec<Value>> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    let kind = element_kind(&[&original, &patch])?;
    let (original, patch, merged) = if kind == Kind::Other {
        if delete_list {
            return Ok(original
                .into_iter()
                .filter(|v| !patch.contains(v))
                .collect());
        }
        let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
        for v in original.iter().chain(&patch) {
            if !merged.contains(v) {
                merged.push(v.clone());
            }
        }
        (original, patch, merged)
    } else {
        if merge_key.is_empty() {
            return Err(PatchError::Other(format!(
                "cannot merge lists without merge key for {}",
                go_kind(item)
            )));
        }
        let (original, patch) = special_items(original, patch, merge_key)?;
        let merged = merge_items(original.clone(), &patch, merge_key, item)?;
        (original, patch, merged)
    };
    let (listed, others) = partition(merged, &patch, merge_key)?;
    normalize_order(
        listed,
        others,
        &patch,
        &original,
        merge_key,
        kind == Kind::Map,
    )
}

/// The items carrying `$patch`: `delete` removes the object's items with that key, `replace`
/// makes the patch's other items the whole list. Returns the object's items and the patch's
/// plain ones.
fn special_items(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    merge_key: &str,
) -> Result<(Vec<Value>, Vec<Value>)> {
    let mut plain = Vec::with_capacity(patch.len());
    let mut replace = false;
    for v in patch {
        let Some(d) = v.get(DIRECTIVE) else {
            plain.push(v);
            continue;
        };
        match d.as_str() {
            Some("delete") => {
                let Some(key) = v.get(merge_key) else {
                    return Err(PatchError::Other(no_merge_key(as_obj(&v), merge_key)));
                };
                original.retain(|o| o.get(merge_key) != Some(key));
            }
            Some("replace") => replace = true,
            Some("merge") => {
                return Err(PatchError::Other(
                    "merging lists cannot yet be specified in the patch".into(),
                ));
            }
            _ => return Err(bad_patch_type(d, as_obj(&v))),
        }
    }
    Ok(if replace {
        (plain, Vec::new())
    } else {
        (original, plain)
    })
}

/// Merges each patch item into the object's item with the same key, or appends it.
fn merge_items(
    mut original: Vec<Value>,
    patch: &[Value],
    merge_key: &str,
    item: Ty<'_>,
) -> Result<Vec<Value>> {
    for v in patch {
        let Some(key) = v.get(merge_key) else {
            return Err(PatchError::Other(no_merge_key(as_obj(v), merge_key)));
        };
        match original.iter().position(|o| o.get(merge_key) == Some(key)) {
            Some(i) => {
                let o = std::mem::take(&mut original[i]);
                let merged = merge_map(into_obj(o), as_obj(v).clone(), item)?;
                original[i] = Value::Object(merged);
            }
            None => original.push(v.clone()),
        }
    }
    Ok(original)
}

/// Splits `merged` into the items `by` names (by merge key, or equal scalars) and the rest.
fn partition(
    merged: Vec<Value>,
    by: &[Value],
    merge_key: &str,
) -> Result<(Vec<Value>, Vec<Value>)> {
    let mut listed = Vec::with_capacity(merged.len());
    let mut others = Vec::with_capacity(merged.len());
    for v in merged {
        let present = if merge_key.is_empty() {
            by.contains(&v)
        } else {
            let Value::Object(m) = &v else {
                return Err(PatchError::Other(bad_arg_type(
                    "map[string]interface {}",
                    &v,
                )));
            };
            let Some(key) = m.get(merge_key) else {
                return Err(PatchError::Other(no_merge_key(m, merge_key)));
            };
            let mut present = false;
            for (i, b) in by.iter().enumerate() {
                let Value::Object(bm) = b else {
                    return Err(PatchError::Other(format!("value for key {i} is not a map")));
                };
                if bm.get(merge_key) == Some(key) {
                    present = true;
                    break;
                }
            }
            present
        };
        if present {
            listed.push(v);
        } else {
            others.push(v);
        }
    }
    Ok((listed, others))
}

/// Orders the patch's items as `patch_order` and the object's others as `server_order`, then
/// interleaves them: an item of the object goes before a patch item only when the object had
/// both and had it first.
fn normalize_order(
    patch_items: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    merge_key: &str,
    maps: bool,
) -> Result<Vec<Value>> {
    let right = sort_by_order(patch_items, patch_order, merge_key, maps)?;
    let left = sort_by_order(server_only, server_order, merge_key, maps)?;
    let at = |v: &Value| position(server_order, v, merge_key, maps);
    let (mut l, mut r) = (left.into_iter().peekable(), right.into_iter().peekable());
    let mut out = Vec::new();
    loop {
        let take_left = match (l.peek(), r.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(a), Some(b)) => matches!((at(a), at(b)), (Some(i), Some(j)) if i < j),
        };
        let next = if take_left { l.next() } else { r.next() };
        out.extend(next);
    }
    Ok(out)
}

/// Where an item is in `list`: by merge key for maps, by value otherwise.
fn position(list: &[Value], v: &Value, merge_key: &str, maps: bool) -> Option<usize> {
    if maps {
        let key = v.get(merge_key);
        list.iter().position(|o| o.get(merge_key) == key)
    } else {
        list.iter().position(|o| o == v)
    }
}

/// Sorts `items` by their place in `order`, items carrying `$patch: delete` last. The sort is
/// an insertion sort comparing as apimachinery's does (an item `order` lacks counts as smaller),
/// so items found nowhere land where they land there.
fn sort_by_order(
    items: Vec<Value>,
    order: &[Value],
    merge_key: &str,
    maps: bool,
) -> Result<Vec<Value>> {
    let (mut items, deleted) = if maps {
        for v in items.iter().chain(order) {
            let Value::Object(m) = v else {
                return Err(PatchError::Other(bad_arg_type(
                    "map[string]interface {}",
                    v,
                )));
            };
            if !m.contains_key(merge_key) {
                return Err(PatchError::Other(no_merge_key(m, merge_key)));
            }
        }
        items
            .into_iter()
            .partition(|v| v.get(DIRECTIVE).and_then(Value::as_str) != Some("delete"))
    } else {
        (items, Vec::new())
    };
    let less = |a: &Value, b: &Value| match (
        position(order, a, merge_key, maps),
        position(order, b, merge_key, maps),
    ) {
        (Some(i), Some(j)) => i < j,
        _ => true,
    };
    for i in 1..items.len() {
        let mut j = i;
        while j > 0 && less(&items[j], &items[j - 1]) {
            items.swap(j, j - 1);
            j -= 1;
        }
    }
    items.extend(deleted);
    Ok(items)
}

/// Whether the lists' items are maps or scalars; all must be of one type, and none a list.
fn element_kind(lists: &[&[Value]]) -> Result<Kind> {
    let mut first: Option<&Value> = None;
    for v in lists.iter().flat_map(|l| l.iter()) {
        match first {
            None => {
                if v.is_array() {
                    return Err(PatchError::Unprocessable(LISTS_OF_LISTS.into()));
                }
                first = Some(v);
            }
            Some(f) if go_type(f) != go_type(v) => {
                let all: Vec<Value> = lists.iter().map(|l| Value::Array(l.to_vec())).collect();
                return Err(PatchError::Other(format!(
                    "list element types are not identical: {}",
                    go_fmt(&Value::Array(all))
                )));
            }
            Some(_) => {}
        }
    }
    match first {
        Some(Value::Object(_)) => Ok(Kind::Map),
        Some(_) => Ok(Kind::Other),
        None => Err(PatchError::Other(
            "no elements in any of the given slices".into(),
        )),
    }
}

/// A value the object does not have, as it goes in: maps carrying `$patch` are left out.
fn remove_directives(v: Value) -> Option<Value> {
    match v {
        Value::Object(m) => {
            if m.contains_key(DIRECTIVE) {
                return None;
            }
            let kept = m
                .into_iter()
                .filter_map(|(k, v)| remove_directives(v).map(|v| (k, v)))
                .collect();
            Some(Value::Object(kept))
        }
        Value::Array(a) => Some(Value::Array(
            a.into_iter().filter_map(remove_directives).collect(),
        )),
        other => Some(other),
    }
}

/// Drops the null values of maps, at every depth.
fn discard_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, v| !v.is_null());
            m.values_mut().for_each(discard_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(discard_nulls),
        _ => {}
    }
}

/// An item of a list whose items were checked to be maps.
fn as_obj(v: &Value) -> &Obj {
    v.as_object().expect("the list's items are maps")
}

fn into_obj(v: Value) -> Obj {
    match v {
        Value::Object(m) => m,
        _ => unreachable!("checked to be a map"),
    }
}

fn into_list(v: Value) -> Vec<Value> {
    match v {
        Value::Array(a) => a,
        _ => unreachable!("checked to be a list"),
    }
}

// The library's error messages print Go values and types; these print JSON values as Go would
// after decoding them (integers as int64, other numbers as float64).

/// The Go type a decoded JSON value has.
fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.as_i64().is_some() => "int64",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// The Go kind of a list's item type, as the library names it.
fn go_kind(item: Ty<'_>) -> &'static str {
    match item.expects() {
        Expect::String => "string",
        Expect::Boolean => "bool",
        Expect::Numeric => "int64",
        Expect::List => "slice",
        Expect::Map | Expect::Any => "struct",
    }
}

/// A value as Go's `%v` prints it.
fn go_fmt(v: &Value) -> String {
    go_print(v, &|scalar| match scalar {
        Value::Null => "<nil>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => i.to_string(),
            (None, Some(f)) => go_float(f),
            (None, None) => n.to_string(),
        },
        Value::String(s) => s.clone(),
        // go_print hands over scalars only.
        other => other.to_string(),
    })
}

/// Lists and maps as Go's fmt prints them, item by item (a map's keys sorted), with `scalar`
/// for everything else: `%v` and `%s` differ only in their scalars.
fn go_print(v: &Value, scalar: &dyn Fn(&Value) -> String) -> String {
    match v {
        Value::Array(a) => {
            let items: Vec<String> = a.iter().map(|i| go_print(i, scalar)).collect();
            format!("[{}]", items.join(" "))
        }
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let items: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{k}:{}", go_print(&m[k], scalar)))
                .collect();
            format!("map[{}]", items.join(" "))
        }
        other => scalar(other),
    }
}

/// A float64 as `%v` prints it: the shortest digits, with an exponent below 1e-4 and from 1e6.
fn go_float(f: f64) -> String {
    // Rust's `{:e}` gives the same shortest digits, and the exponent exactly.
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..6).contains(&exp) {
        return format!("{f}");
    }
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exp.abs())
}

fn bad_arg_type(expected: &str, actual: &Value) -> String {
    let actual = match actual {
        Value::Null => "%!s(<nil>)",
        other => go_type(other),
    };
    format!("expected a {expected}, but received a {actual}")
}

fn no_merge_key(m: &Obj, key: &str) -> String {
    format!(
        "map: {} does not contain declared merge key: {key}",
        go_fmt(&Value::Object(m.clone()))
    )
}

fn bad_patch_type(d: &Value, m: &Obj) -> PatchError {
    PatchError::Other(format!(
        "unknown patch type: {} in map: {}",
        go_fmt_s(d),
        go_fmt(&Value::Object(m.clone()))
    ))
}

/// A value as Go's `%s` prints it (the library prints the directive so): strings as they are,
/// other scalars as a bad-verb note, lists and maps item by item.
fn go_fmt_s(v: &Value) -> String {
    go_print(v, &|scalar| match scalar {
        Value::String(s) => s.clone(),
        Value::Null => "%!s(<nil>)".into(),
        other => format!("%!s({}={})", go_type(other), go_fmt(other)),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::fields::types::builtin_schema;

    fn patch(kind: (&str, &str), original: Value, patch: Value) -> Result<Value> {
        let ty = Ty::root(builtin_schema(kind.0, kind.1));
        apply(into_obj(original), into_obj(patch), ty).map(Value::Object)
    }

    const DEPLOYMENT: (&str, &str) = ("apps", "Deployment");

    /// A Deployment whose one pod template spec is `spec`.
    fn deployment(spec: Value) -> Value {
        json!({"spec": {"template": {"spec": spec}}})
    }

    fn pod_spec(v: &Value) -> &Value {
        &v["spec"]["template"]["spec"]
    }

    /// A Deployment of [`manager`] alone, patched with `container` in its containers.
    fn patch_manager(container: Value) -> Value {
        let live = deployment(json!({"containers": [manager()]}));
        patch(
            DEPLOYMENT,
            live,
            deployment(json!({"containers": [container]})),
        )
        .unwrap()
    }

    fn manager() -> Value {
        json!({
            "name": "manager",
            "image": "img:1",
            "args": ["--a", "--b"],
            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
            "ports": [
                {"name": "metrics", "containerPort": 8080, "protocol": "TCP"},
                {"name": "health", "containerPort": 8081, "protocol": "TCP"},
            ],
        })
    }

    #[test]
    fn an_image_change_keeps_the_containers_env_ports_and_siblings() {
        let live = deployment(json!({"containers": [manager(), {"name": "side", "image": "s:1"}]}));
        // What `kubectl set image deployment/x manager=img:2` sends.
        let out = patch(
            DEPLOYMENT,
            live.clone(),
            deployment(json!({
                "$setElementOrder/containers": [{"name": "manager"}, {"name": "side"}],
                "containers": [{"name": "manager", "image": "img:2"}],
            })),
        )
        .unwrap();
        let mut want = live;
        want["spec"]["template"]["spec"]["containers"][0]["image"] = json!("img:2");
        assert_eq!(out, want);
    }

    #[test]
    fn list_items_merge_by_their_merge_key_and_new_ones_go_first() {
        let out = patch_manager(json!({
            "name": "manager",
            "env": [{"name": "B", "value": "two"}, {"name": "C", "value": "3"}],
            // A port matches by containerPort alone, whatever its protocol says.
            "ports": [{"containerPort": 8081, "name": "probe"}],
            "args": ["--c"],
        }));
        let c = &pod_spec(&out)["containers"][0];
        assert_eq!(
            c["env"],
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "two"}, {"name": "C", "value": "3"}]),
            "B keeps its place after A, which the object had first; C follows B as the patch has it"
        );
        assert_eq!(
            c["ports"],
            json!([
                {"name": "metrics", "containerPort": 8080, "protocol": "TCP"},
                {"name": "probe", "containerPort": 8081, "protocol": "TCP"},
            ])
        );
        assert_eq!(c["args"], json!(["--c"]), "args have no strategy: replaced");
        assert_eq!(c["image"], "img:1");
    }

    #[test]
    fn set_element_order_orders_the_merged_list() {
        let out = patch_manager(json!({
            "name": "manager",
            "$setElementOrder/env": [{"name": "B"}, {"name": "C"}, {"name": "A"}],
            "env": [{"name": "C", "value": "3"}],
        }));
        let names: Vec<&str> = pod_spec(&out)["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["B", "C", "A"]);

        let err = patch(
            DEPLOYMENT,
            deployment(json!({"containers": [manager()]})),
            deployment(json!({
                "$setElementOrder/containers": [{"name": "manager"}],
                "containers": [{"name": "other", "image": "o:1"}],
            })),
        )
        .unwrap_err();
        assert_eq!(
            err,
            PatchError::Other(
                "the order in patch list:\n[map[image:o:1 name:other]]\n doesn't match $setElementOrder list:\n[map[name:manager]]".into()
            )
        );
    }

    #[test]
    fn patch_directives_in_lists_delete_replace_and_refuse_merge() {
        let live = deployment(json!({"containers": [manager(), {"name": "side", "image": "s:1"}]}));
        let out = patch(
            DEPLOYMENT,
            live.clone(),
            deployment(json!({"containers": [{"name": "side", "$patch": "delete"}]})),
        )
        .unwrap();
        assert_eq!(pod_spec(&out)["containers"], json!([manager()]));

        let out = patch(
            DEPLOYMENT,
            live.clone(),
            deployment(
                json!({"containers": [{"$patch": "replace"}, {"name": "only", "image": "o:1"}]}),
            ),
        )
        .unwrap();
        assert_eq!(
            pod_spec(&out)["containers"],
            json!([{"name": "only", "image": "o:1"}])
        );

        let err = patch(
            DEPLOYMENT,
            live.clone(),
            deployment(json!({"containers": [{"$patch": "merge"}]})),
        )
        .unwrap_err();
        assert_eq!(
            err,
            PatchError::Other("merging lists cannot yet be specified in the patch".into())
        );
        let err = patch(
            DEPLOYMENT,
            live,
            deployment(json!({"containers": [{"image": "x:1"}]})),
        )
        .unwrap_err();
        assert_eq!(
            err,
            PatchError::Other(
                "map: map[image:x:1] does not contain declared merge key: name".into()
            )
        );
    }

    #[test]
    fn patch_directives_in_maps_replace_delete_and_refuse_others() {
        let live = json!({"metadata": {"labels": {"a": "1", "b": "2"}, "annotations": {"x": "y"}}});
        let out = patch(
            DEPLOYMENT,
            live.clone(),
            json!({"metadata": {"labels": {"$patch": "replace", "c": "3"}, "annotations": {"$patch": "delete"}}}),
        )
        .unwrap();
        assert_eq!(
            out["metadata"],
            json!({"labels": {"c": "3"}, "annotations": {}})
        );
        let err = patch(
            DEPLOYMENT,
            live,
            json!({"metadata": {"labels": {"$patch": "merge", "c": "3"}}}),
        )
        .unwrap_err();
        assert_eq!(
            err,
            PatchError::Other("unknown patch type: merge in map: map[$patch:merge c:3]".into())
        );
    }

    #[test]
    fn retain_keys_clears_what_it_does_not_list() {
        let live = json!({"spec": {"strategy": {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
        }}});
        // What `kubectl apply` sends when a Deployment switches to Recreate.
        let out = patch(
            DEPLOYMENT,
            live.clone(),
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
        )
        .unwrap();
        assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));
        let err = patch(
            DEPLOYMENT,
            live.clone(),
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {}}}}),
        )
        .unwrap_err();
        assert_eq!(err, PatchError::BadRequest(BAD_RETAIN_KEYS.into()));
        let err = patch(
            DEPLOYMENT,
            live,
            json!({"spec": {"strategy": {"$retainKeys": "type"}}}),
        )
        .unwrap_err();
        assert_eq!(err, PatchError::BadRequest(BAD_RETAIN_KEYS.into()));
    }

    #[test]
    fn finalizers_merge_as_a_set_and_leave_by_deletion_list() {
        let live = json!({"metadata": {"finalizers": ["a", "b"]}});
        let out = patch(
            DEPLOYMENT,
            live.clone(),
            json!({"metadata": {"finalizers": ["c", "a"]}}),
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["c", "a", "b"]));
        let out = patch(
            DEPLOYMENT,
            live.clone(),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a", "z"]}}),
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["b"]));
        let err = patch(
            DEPLOYMENT,
            live,
            json!({"metadata": {"$deleteFromPrimitiveList": ["a"]}}),
        )
        .unwrap_err();
        assert_eq!(err, PatchError::BadRequest(BAD_PRIMITIVE_LIST.into()));
        // A deletion list for a list the object lacks adds nothing.
        let out = patch(
            DEPLOYMENT,
            json!({"metadata": {}}),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
        )
        .unwrap();
        assert_eq!(out["metadata"], json!({}));
    }

    #[test]
    fn null_deletes_a_key_and_a_new_value_goes_in_clean() {
        let out = patch(
            ("", "ConfigMap"),
            json!({"data": {"a": "1", "b": "2"}}),
            json!({"data": {"a": null, "c": "3"}, "binaryData": {"k": null, "x": "eA=="}}),
        )
        .unwrap();
        assert_eq!(
            out,
            json!({"data": {"b": "2", "c": "3"}, "binaryData": {"x": "eA=="}})
        );
        // A value the object lacks loses its nulls and the maps that carry directives.
        let out = patch(
            DEPLOYMENT,
            deployment(json!({})),
            deployment(json!({"containers": [
                {"name": "a", "image": "a:1", "workingDir": null},
                {"name": "b", "$patch": "delete"},
            ]})),
        )
        .unwrap();
        assert_eq!(
            pod_spec(&out)["containers"],
            json!([{"name": "a", "image": "a:1"}])
        );
    }

    #[test]
    fn lists_without_a_strategy_are_replaced() {
        let out = patch(
            DEPLOYMENT,
            deployment(json!({"tolerations": [{"key": "a", "operator": "Exists"}]})),
            deployment(json!({"tolerations": [{"key": "b", "operator": "Exists"}]})),
        )
        .unwrap();
        assert_eq!(
            pod_spec(&out)["tolerations"],
            json!([{"key": "b", "operator": "Exists"}])
        );
        let out = patch(
            ("rbac.authorization.k8s.io", "Role"),
            json!({"rules": [{"verbs": ["get"], "resources": ["a"], "apiGroups": [""]}]}),
            json!({"rules": [{"verbs": ["list"], "resources": ["b"], "apiGroups": [""]}]}),
        )
        .unwrap();
        assert_eq!(
            out["rules"],
            json!([{"verbs": ["list"], "resources": ["b"], "apiGroups": [""]}])
        );
        let out = patch(
            ("rbac.authorization.k8s.io", "RoleBinding"),
            json!({"subjects": [{"kind": "User", "name": "a"}]}),
            json!({"subjects": [{"kind": "User", "name": "b"}]}),
        )
        .unwrap();
        assert_eq!(out["subjects"], json!([{"kind": "User", "name": "b"}]));
    }

    #[test]
    fn service_ports_merge_by_port_and_owner_references_by_uid() {
        let out = patch(
            ("", "Service"),
            json!({"spec": {"ports": [{"name": "a", "port": 80, "protocol": "TCP"}, {"name": "b", "port": 81}]}}),
            json!({"spec": {"ports": [{"port": 81, "targetPort": 9090}]}}),
        )
        .unwrap();
        assert_eq!(
            out["spec"]["ports"],
            json!([{"name": "a", "port": 80, "protocol": "TCP"}, {"name": "b", "port": 81, "targetPort": 9090}])
        );
        let owner = |uid: &str, name: &str| json!({"uid": uid, "name": name, "kind": "K", "apiVersion": "v1"});
        let out = patch(
            ("coordination.k8s.io", "Lease"),
            json!({"metadata": {"ownerReferences": [owner("u1", "one")]}, "spec": {"holderIdentity": "a"}}),
            json!({"metadata": {"ownerReferences": [owner("u2", "two")]}, "spec": {"holderIdentity": "b"}}),
        )
        .unwrap();
        assert_eq!(
            out,
            json!({"metadata": {"ownerReferences": [owner("u2", "two"), owner("u1", "one")]}, "spec": {"holderIdentity": "b"}})
        );
    }

    #[test]
    fn malformed_lists_are_refused_in_the_librarys_words() {
        let err = patch(
            ("", "ConfigMap"),
            json!({"metadata": {"finalizers": [["a"]]}}),
            json!({"metadata": {"finalizers": [["b"]]}}),
        )
        .unwrap_err();
        assert_eq!(err, PatchError::Unprocessable(LISTS_OF_LISTS.into()));
        let err = patch(
            ("", "ConfigMap"),
            json!({"metadata": {"finalizers": ["a"]}}),
            json!({"metadata": {"finalizers": [1.5]}}),
        )
        .unwrap_err();
        assert_eq!(
            err,
            PatchError::Other("list element types are not identical: [[a] [1.5]]".into())
        );
        let err = patch(
            ("", "ConfigMap"),
            json!({"metadata": {"finalizers": [{"a": 1}]}}),
            json!({"metadata": {"finalizers": [{"b": 2}]}}),
        )
        .unwrap_err();
        assert_eq!(
            err,
            PatchError::Other("cannot merge lists without merge key for string".into())
        );
    }

    #[test]
    fn go_prints_values_as_the_messages_show_them() {
        assert_eq!(
            go_fmt(&json!({"b": [1, true, null], "a": "x"})),
            "map[a:x b:[1 true <nil>]]"
        );
        assert_eq!(go_fmt(&json!(0.5)), "0.5");
        assert_eq!(go_fmt(&json!(123456.5)), "123456.5");
        assert_eq!(go_fmt(&json!(1234567.5)), "1.2345675e+06");
        assert_eq!(go_fmt(&json!(0.00001)), "1e-05");
        assert_eq!(go_fmt(&json!(0.0001)), "0.0001");
        assert_eq!(go_fmt_s(&json!(null)), "%!s(<nil>)");
        assert_eq!(
            go_fmt_s(&json!([1, "a", {"k": true}])),
            "[%!s(int64=1) a map[k:%!s(bool=true)]]"
        );
    }
}
