//! Events: one store served as core `v1` and as `events.k8s.io/v1`, converted between the two as
//! the apiserver converts them, validated as its event strategy does, selected by the fields it
//! indexes.
//!
//! Objects are stored in the core `v1` shape, with the fields Go always prints (`source`,
//! `involvedObject`, the timestamps as `null` when unset, `reportingComponent` and
//! `reportingInstance` as `""`), so a core read returns the stored object as is.

use serde_json::{Map, Value, json};

use crate::error::FieldError;

/// The API version a request speaks: validation and field names depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventApi {
    Core,
    EventsV1,
}

const REPORTING_INSTANCE_LIMIT: usize = 128;
const ACTION_LIMIT: usize = 128;
const REASON_LIMIT: usize = 128;
const NOTE_LIMIT: usize = 1024;

fn s<'a>(o: &'a Value, k: &str) -> &'a str {
    o.get(k).and_then(Value::as_str).unwrap_or("")
}

fn non_null(o: &Value, k: &str) -> Option<Value> {
    o.get(k).filter(|v| !v.is_null()).cloned()
}

/// Sets `k` to `v` unless it is Go's zero value for a field marked `omitempty`.
fn put_omitempty(m: &mut Map<String, Value>, k: &str, v: Option<Value>) {
    match v {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() => {}
        Some(Value::Number(n)) if n.as_i64() == Some(0) => {}
        Some(v) => {
            m.insert(k.into(), v);
        }
    }
}

fn head(o: &Value, api_version: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("apiVersion".into(), json!(api_version));
    m.insert("kind".into(), json!("Event"));
    m.insert(
        "metadata".into(),
        o.get("metadata").cloned().unwrap_or_else(|| json!({})),
    );
    m
}

/// The stored (core `v1`) shape of a core `v1` Event.
pub fn core_normalized(o: &Value) -> Value {
    let mut m = head(o, "v1");
    m.insert(
        "involvedObject".into(),
        non_null(o, "involvedObject").unwrap_or_else(|| json!({})),
    );
    m.insert(
        "source".into(),
        non_null(o, "source").unwrap_or_else(|| json!({})),
    );
    for k in ["firstTimestamp", "lastTimestamp", "eventTime"] {
        m.insert(k.into(), o.get(k).cloned().unwrap_or(Value::Null));
    }
    for k in ["reportingComponent", "reportingInstance"] {
        m.insert(k.into(), json!(s(o, k)));
    }
    for k in [
        "reason", "message", "count", "type", "series", "action", "related",
    ] {
        put_omitempty(&mut m, k, o.get(k).cloned());
    }
    Value::Object(m)
}

/// An `events.k8s.io/v1` Event in the stored (core `v1`) shape.
pub fn from_events_v1(o: &Value) -> Value {
    let mut core = json!({
        "metadata": o.get("metadata").cloned().unwrap_or_else(|| json!({})),
    });
    let c = core.as_object_mut().expect("an object");
    let map = [
        ("regarding", "involvedObject"),
        ("deprecatedSource", "source"),
        ("deprecatedFirstTimestamp", "firstTimestamp"),
        ("deprecatedLastTimestamp", "lastTimestamp"),
        ("deprecatedCount", "count"),
        ("note", "message"),
        ("reportingController", "reportingComponent"),
        ("reportingInstance", "reportingInstance"),
        ("eventTime", "eventTime"),
        ("series", "series"),
        ("action", "action"),
        ("reason", "reason"),
        ("related", "related"),
        ("type", "type"),
    ];
    for (from, to) in map {
        if let Some(v) = non_null(o, from) {
            c.insert(to.into(), v);
        }
    }
    core_normalized(&core)
}

/// A stored Event as `events.k8s.io/v1` presents it.
pub fn to_events_v1(core: &Value) -> Value {
    let mut m = head(core, "events.k8s.io/v1");
    m.insert(
        "eventTime".into(),
        core.get("eventTime").cloned().unwrap_or(Value::Null),
    );
    m.insert(
        "regarding".into(),
        non_null(core, "involvedObject").unwrap_or_else(|| json!({})),
    );
    m.insert(
        "deprecatedSource".into(),
        non_null(core, "source").unwrap_or_else(|| json!({})),
    );
    for (from, to) in [
        ("firstTimestamp", "deprecatedFirstTimestamp"),
        ("lastTimestamp", "deprecatedLastTimestamp"),
    ] {
        m.insert(to.into(), core.get(from).cloned().unwrap_or(Value::Null));
    }
    for (from, to) in [
        ("series", "series"),
        ("reportingComponent", "reportingController"),
        ("reportingInstance", "reportingInstance"),
        ("action", "action"),
        ("reason", "reason"),
        ("related", "related"),
        ("message", "note"),
        ("type", "type"),
        ("count", "deprecatedCount"),
    ] {
        put_omitempty(&mut m, to, core.get(from).cloned());
    }
    Value::Object(m)
}

/// Go's `time.Time.String()` of an RFC 3339 timestamp, in UTC (the apiserver's zone).
fn go_time_string(v: Option<&Value>) -> String {
    let ts = v
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<jiff::Timestamp>().ok());
    let Some(ts) = ts else {
        return "0001-01-01 00:00:00 +0000 UTC".into();
    };
    let mut out = ts.strftime("%Y-%m-%d %H:%M:%S").to_string();
    let nanos = ts.subsec_nanosecond();
    if nanos != 0 {
        let frac = format!("{nanos:09}");
        out.push('.');
        out.push_str(frac.trim_end_matches('0'));
    }
    out.push_str(" +0000 UTC");
    out
}

/// Go's `%#v` of a `core.ObjectReference`.
fn go_object_reference(v: Option<&Value>) -> String {
    let r = v.cloned().unwrap_or_else(|| json!({}));
    format!(
        "core.ObjectReference{{Kind:{:?}, Namespace:{:?}, Name:{:?}, UID:{:?}, APIVersion:{:?}, ResourceVersion:{:?}, FieldPath:{:?}}}",
        s(&r, "kind"),
        s(&r, "namespace"),
        s(&r, "name"),
        s(&r, "uid"),
        s(&r, "apiVersion"),
        s(&r, "resourceVersion"),
        s(&r, "fieldPath")
    )
}

fn instant(v: Option<&Value>) -> Option<i128> {
    v.and_then(Value::as_str)
        .and_then(|s| s.parse::<jiff::Timestamp>().ok())
        .map(|t| t.as_nanosecond())
}

fn immutable(field: &str, rendered: String) -> FieldError {
    FieldError {
        kind: crate::error::FieldErrorKind::Invalid,
        field: field.into(),
        value: Some(rendered),
        detail: "field is immutable".into(),
    }
}

fn has_time(o: &Value, k: &str) -> bool {
    o.get(k).is_some_and(|v| !v.is_null())
}

/// What every Event must satisfy, in either API (the apiserver's `legacyValidateEvent`).
fn legacy(e: &Value, api: EventApi) -> Vec<FieldError> {
    let mut errs = vec![];
    let ns = crate::meta::str_at(e, "/metadata/namespace");
    let io_ns = crate::meta::str_at(e, "/involvedObject/namespace");
    let mismatch = || {
        FieldError::invalid(
            "involvedObject.namespace",
            &json!(io_ns),
            "does not match event.namespace",
        )
    };
    if !has_time(e, "eventTime") {
        if io_ns.is_empty() {
            if !ns.is_empty() && ns != "default" {
                errs.push(mismatch());
            }
        } else if ns != io_ns {
            errs.push(mismatch());
        }
        return errs;
    }
    if io_ns.is_empty() && ns != "default" && ns != "kube-system" {
        errs.push(mismatch());
    }
    let controller_field = match api {
        EventApi::Core => "reportingComponent",
        EventApi::EventsV1 => "reportingController",
    };
    let controller = s(e, "reportingComponent");
    if controller.is_empty() {
        errs.push(FieldError::required(controller_field, ""));
    }
    for msg in crate::meta::qualified_name_errors(controller) {
        errs.push(FieldError::invalid(
            controller_field,
            &json!(controller),
            msg,
        ));
    }
    let too_long = |field: &str, limit: usize| {
        FieldError::invalid(
            field,
            &json!(""),
            format!("can have at most {limit} characters"),
        )
    };
    let instance = s(e, "reportingInstance");
    if instance.is_empty() {
        errs.push(FieldError::required("reportingInstance", ""));
    }
    if instance.len() > REPORTING_INSTANCE_LIMIT {
        errs.push(too_long("reportingInstance", REPORTING_INSTANCE_LIMIT));
    }
    let action = s(e, "action");
    if action.is_empty() {
        errs.push(FieldError::required("action", ""));
    }
    if action.len() > ACTION_LIMIT {
        errs.push(too_long("action", ACTION_LIMIT));
    }
    let reason = s(e, "reason");
    if reason.is_empty() {
        errs.push(FieldError::required("reason", ""));
    }
    if reason.len() > REASON_LIMIT {
        errs.push(too_long("reason", REASON_LIMIT));
    }
    if s(e, "message").len() > NOTE_LIMIT {
        errs.push(too_long("message", NOTE_LIMIT));
    }
    errs
}

fn series(e: &Value) -> Vec<FieldError> {
    let Some(series) = e.get("series").filter(|v| !v.is_null()) else {
        return vec![];
    };
    let mut errs = vec![];
    if series.get("count").and_then(Value::as_i64).unwrap_or(0) < 2 {
        errs.push(FieldError::invalid(
            "series.count",
            &json!(""),
            "should be at least 2",
        ));
    }
    if !has_time(series, "lastObservedTime") {
        errs.push(FieldError::required("series.lastObservedTime", ""));
    }
    errs
}

/// The event strategy's create validation, on the stored shape.
pub fn validate_create(e: &Value, api: EventApi) -> Vec<FieldError> {
    let mut errs = legacy(e, api);
    if api == EventApi::Core {
        return errs;
    }
    errs.extend(series(e));
    if !has_time(e, "eventTime") {
        errs.push(FieldError::required("eventTime", ""));
    }
    let ty = s(e, "type");
    if ty != "Normal" && ty != "Warning" {
        errs.push(FieldError::invalid(
            "type",
            &json!(""),
            format!("has invalid value: {ty}"),
        ));
    }
    for (field, set) in [
        ("firstTimestamp", has_time(e, "firstTimestamp")),
        ("lastTimestamp", has_time(e, "lastTimestamp")),
        (
            "count",
            e.get("count").and_then(Value::as_i64).unwrap_or(0) != 0,
        ),
        (
            "source",
            !s(e.get("source").unwrap_or(&Value::Null), "component").is_empty()
                || !s(e.get("source").unwrap_or(&Value::Null), "host").is_empty(),
        ),
    ] {
        if set {
            errs.push(FieldError::invalid(field, &json!(""), "needs to be unset"));
        }
    }
    errs
}

/// The event strategy's update validation, on the stored shapes.
pub fn validate_update(new: &Value, old: &Value, api: EventApi) -> Vec<FieldError> {
    let mut errs = legacy(new, api);
    if api == EventApi::Core {
        return errs;
    }
    if new.get("series") != old.get("series") {
        errs.extend(series(new));
    }
    let string_field = |field: &str, key: &str| {
        (s(new, key) != s(old, key)).then(|| immutable(field, format!("{:?}", s(new, key))))
    };
    let time_field = |field: &str, key: &str| {
        (instant(new.get(key)) != instant(old.get(key)))
            .then(|| immutable(field, go_time_string(new.get(key))))
    };
    let reference = |field: &str, key: &str| {
        let norm = |o: &Value| o.get(key).filter(|v| !v.is_null()).cloned();
        (norm(new) != norm(old)).then(|| {
            let rendered = match new.get(key).filter(|v| !v.is_null()) {
                Some(v) => go_object_reference(Some(v)),
                None if key == "related" => "null".into(),
                None => go_object_reference(None),
            };
            immutable(field, rendered)
        })
    };
    let source = {
        let get = |o: &Value, k: &str| s(o.get("source").unwrap_or(&Value::Null), k).to_string();
        let (c, h) = (get(new, "component"), get(new, "host"));
        (c != get(old, "component") || h != get(old, "host")).then(|| {
            immutable(
                "source",
                format!("core.EventSource{{Component:{c:?}, Host:{h:?}}}"),
            )
        })
    };
    let count = {
        let n = |o: &Value| o.get("count").and_then(Value::as_i64).unwrap_or(0);
        (n(new) != n(old)).then(|| immutable("count", n(new).to_string()))
    };
    // Changes below a microsecond are tolerated: clients that serialise with nanoseconds and
    // those that truncate must be able to update the same event.
    let event_time = {
        let micros = |o: &Value| instant(o.get("eventTime")).map(|n| n.div_euclid(1000));
        (micros(new) != micros(old))
            .then(|| immutable("eventTime", go_time_string(new.get("eventTime"))))
    };
    errs.extend(
        [
            reference("involvedObject", "involvedObject"),
            string_field("reason", "reason"),
            string_field("message", "message"),
            source,
            time_field("firstTimestamp", "firstTimestamp"),
            time_field("lastTimestamp", "lastTimestamp"),
            count,
            string_field("reason", "reason"),
            string_field("type", "type"),
            event_time,
            string_field("action", "action"),
            reference("related", "related"),
            string_field("reportingController", "reportingComponent"),
            string_field("reportingInstance", "reportingInstance"),
        ]
        .into_iter()
        .flatten(),
    );
    errs
}

/// The field labels core `v1` Events are selected by.
pub fn core_label(label: &str) -> Option<&'static str> {
    const LABELS: &[&str] = &[
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
        "metadata.namespace",
        "metadata.name",
    ];
    LABELS.iter().find(|l| **l == label).copied()
}

/// The field labels `events.k8s.io/v1` Events are selected by, as the core labels they mean.
pub fn events_v1_label(label: &str) -> Option<&'static str> {
    Some(match label {
        "reason" => "reason",
        "regarding.kind" => "involvedObject.kind",
        "regarding.namespace" => "involvedObject.namespace",
        "regarding.name" => "involvedObject.name",
        "regarding.uid" => "involvedObject.uid",
        "regarding.apiVersion" => "involvedObject.apiVersion",
        "regarding.resourceVersion" => "involvedObject.resourceVersion",
        "regarding.fieldPath" => "involvedObject.fieldPath",
        "reportingController" => "reportingComponent",
        "type" => "type",
        "metadata.namespace" => "metadata.namespace",
        "metadata.name" => "metadata.name",
        _ => return None,
    })
}

/// A core field label's value in a stored Event.
pub fn field_value(e: &Value, label: &str) -> String {
    if let Some(f) = label.strip_prefix("involvedObject.") {
        return s(e.get("involvedObject").unwrap_or(&Value::Null), f).to_string();
    }
    match label {
        "metadata.name" => crate::meta::str_at(e, "/metadata/name").into(),
        "metadata.namespace" => crate::meta::str_at(e, "/metadata/namespace").into(),
        "source" => {
            let component = crate::meta::str_at(e, "/source/component");
            if component.is_empty() {
                s(e, "reportingComponent").into()
            } else {
                component.into()
            }
        }
        other => s(e, other).into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn controller_event() -> Value {
        json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "s1.1", "namespace": "ns1"},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "regarding": {"kind": "EgressShard", "namespace": "ns1", "name": "s1", "uid": "u1",
                          "apiVersion": "network.datumapis.com/v1alpha1"},
            "reason": "AddressAssigned", "action": "Assign", "note": "assigned",
            "reportingController": "egress-address", "reportingInstance": "pod-1",
            "type": "Normal",
        })
    }

    #[test]
    fn events_v1_and_core_convert_both_ways() {
        let core = from_events_v1(&controller_event());
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["message"], "assigned");
        assert_eq!(core["involvedObject"]["name"], "s1");
        assert_eq!(core["reportingComponent"], "egress-address");
        assert_eq!(core["source"], json!({}));
        assert_eq!(core["firstTimestamp"], Value::Null);
        let back = to_events_v1(&core);
        let mut want = controller_event();
        want["deprecatedSource"] = json!({});
        want["deprecatedFirstTimestamp"] = Value::Null;
        want["deprecatedLastTimestamp"] = Value::Null;
        assert_eq!(back, want);
    }

    #[test]
    fn events_v1_creates_are_strict_and_core_ones_are_not() {
        let bare = from_events_v1(&json!({"metadata": {"name": "e", "namespace": "default"},
            "eventTime": "2026-01-01T00:00:00.000000Z", "type": "Bogus"}));
        let msgs: Vec<String> = validate_create(&bare, EventApi::EventsV1)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(msgs[0], "reportingController: Required value");
        assert!(
            msgs.contains(
                &r#"reportingController: Invalid value: "": name part must be non-empty"#
                    .to_string()
            ),
            "{msgs:?}"
        );
        assert!(msgs.contains(&"action: Required value".to_string()));
        assert!(msgs.contains(&"reason: Required value".to_string()));
        assert!(msgs.contains(&r#"type: Invalid value: "": has invalid value: Bogus"#.to_string()));
        let core_msgs = validate_create(&bare, EventApi::Core);
        assert_eq!(
            core_msgs[0].to_string(),
            "reportingComponent: Required value"
        );
        assert!(!core_msgs.iter().any(|e| e.field == "type"));
        let old_style = core_normalized(&json!({"metadata": {"name": "e", "namespace": "ns1"},
            "involvedObject": {"namespace": "ns1"}, "type": "Bogus"}));
        assert!(validate_create(&old_style, EventApi::Core).is_empty());
        assert_eq!(
            validate_create(&from_events_v1(&controller_event()), EventApi::EventsV1),
            vec![]
        );
    }

    #[test]
    fn updates_keep_events_immutable_and_series_valid() {
        let old = from_events_v1(&controller_event());
        let mut series = controller_event();
        series["series"] = json!({"count": 2, "lastObservedTime": "2026-01-01T00:00:01.000000Z"});
        assert_eq!(
            validate_update(&from_events_v1(&series), &old, EventApi::EventsV1),
            vec![]
        );
        series["series"]["count"] = json!(1);
        series["note"] = json!("changed");
        let msgs: Vec<String> = validate_update(&from_events_v1(&series), &old, EventApi::EventsV1)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            msgs,
            [
                r#"series.count: Invalid value: "": should be at least 2"#,
                r#"message: Invalid value: "changed": field is immutable"#
            ]
        );
        let mut moved = controller_event();
        moved["eventTime"] = json!("2026-01-01T00:00:00.5Z");
        let msgs = validate_update(&from_events_v1(&moved), &old, EventApi::EventsV1);
        assert_eq!(
            msgs[0].to_string(),
            "eventTime: Invalid value: 2026-01-01 00:00:00.5 +0000 UTC: field is immutable"
        );
    }

    #[test]
    fn selectors_read_the_core_shape() {
        let core = from_events_v1(&controller_event());
        assert_eq!(field_value(&core, "involvedObject.kind"), "EgressShard");
        assert_eq!(field_value(&core, "source"), "egress-address");
        assert_eq!(events_v1_label("regarding.uid"), Some("involvedObject.uid"));
        assert_eq!(events_v1_label("source"), None);
        assert_eq!(core_label("source"), Some("source"));
    }
}
