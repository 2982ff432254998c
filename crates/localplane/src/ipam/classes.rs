//! IPClass: the operator's catalog. Validated on write (family, prefix lengths, the parent chain,
//! one default per family); the fields that shape address spaces and pool identity are immutable.

use std::collections::BTreeSet;

use egress_api::ipam::{
    FAMILY_IPV4, FAMILY_IPV6, IPClass, IPClassSpec, RECLAIM_DELETE, RECLAIM_RETAIN,
};
use serde_json::{Value, json};

use super::ctx::Ctx;
use super::errors::{self, FieldError, Result};
use super::source::{self, Definition, MAX_CHAIN_DEPTH};
use super::store::{self, ANNOTATION_DEFAULT_CLASS, CLASSES, key, name_of, typed};

const KIND: &str = "IPClass";

pub fn family_bits(family: &str) -> i32 {
    if family == FAMILY_IPV4 { 32 } else { 128 }
}

/// The block size a class hands out when a claim names none: its default, else a range of one.
pub fn block_len(spec: &IPClassSpec) -> Option<i32> {
    spec.default_prefix_length.or_else(|| {
        let r = spec.allowed_prefix_lengths.as_ref()?;
        (r.min.is_some() && r.min == r.max).then_some(r.min?)
    })
}

pub fn is_default(class: &IPClass) -> bool {
    class
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_DEFAULT_CLASS))
        .is_some_and(|v| v == "true")
}

fn validate_roles(field: &str, roles: &[String], errs: &mut Vec<FieldError>) {
    let mut seen = BTreeSet::new();
    for (i, r) in roles.iter().enumerate() {
        if r.is_empty() {
            errs.push(FieldError::invalid(
                &format!("spec.{field}[{i}]"),
                "a scope role must not be empty",
            ));
        } else if !seen.insert(r) {
            errs.push(FieldError::invalid(
                &format!("spec.{field}[{i}]"),
                format!("duplicate role {r:?}"),
            ));
        }
    }
}

fn validate_own(name: &str, class: &IPClass, errs: &mut Vec<FieldError>) {
    let s = &class.spec;
    match s.ip_family.as_str() {
        "" => errs.push(FieldError::required(
            "spec.ipFamily",
            "ipFamily is required: a class hands out one address family, and dual-stack is two classes",
        )),
        FAMILY_IPV4 | FAMILY_IPV6 => {}
        other => errs.push(FieldError::not_supported(
            "spec.ipFamily",
            format!("{other:?}: supported values: \"IPv4\", \"IPv6\""),
        )),
    }
    if s.parent_class_name == name {
        errs.push(FieldError::invalid(
            "spec.parentClassName",
            "a class may not be its own parent",
        ));
    }
    validate_roles("poolPer", &s.pool_per, errs);
    validate_roles("uniqueWithin", &s.unique_within, errs);

    let bits = family_bits(&s.ip_family);
    let fam = if s.ip_family.is_empty() {
        FAMILY_IPV6
    } else {
        s.ip_family.as_str()
    };
    let fits = |field: &str, v: Option<i32>, errs: &mut Vec<FieldError>| {
        if let Some(v) = v
            && !(0..=bits).contains(&v)
        {
            errs.push(FieldError::invalid(
                field,
                format!("{v} does not fit {fam}: must be in [0, {bits}]"),
            ));
        }
    };
    let range = s.allowed_prefix_lengths.clone().unwrap_or_default();
    fits("spec.allowedPrefixLengths.min", range.min, errs);
    fits("spec.allowedPrefixLengths.max", range.max, errs);
    fits("spec.defaultPrefixLength", s.default_prefix_length, errs);
    if let (Some(min), Some(max)) = (range.min, range.max)
        && min > max
    {
        errs.push(FieldError::invalid(
            "spec.allowedPrefixLengths",
            format!("min {min} must not exceed max {max}"),
        ));
    }
    if let Some(d) = s.default_prefix_length
        && (range.min.is_some_and(|m| d < m) || range.max.is_some_and(|m| d > m))
    {
        errs.push(FieldError::invalid(
            "spec.defaultPrefixLength",
            format!(
                "{d} lies outside allowedPrefixLengths [{}, {}]",
                range.min.map_or("-".into(), |v| v.to_string()),
                range.max.map_or("-".into(), |v| v.to_string())
            ),
        ));
    }
    if s.reservations.is_some() && s.pool_per.is_empty() {
        errs.push(FieldError::forbidden(
            "spec.reservations",
            "reservations apply to the pools a class provisions, so they need poolPer",
        ));
    }
    for (field, v, allowed) in [
        (
            "reclaimPolicy",
            &s.reclaim_policy,
            &["", RECLAIM_DELETE, RECLAIM_RETAIN][..],
        ),
        (
            "strategy",
            &s.strategy,
            &["", "FirstFit", "LeastUtilized"][..],
        ),
        ("visibility", &s.visibility, &super::pools::VISIBILITIES[..]),
    ] {
        if !allowed.contains(&v.as_str()) {
            errs.push(FieldError::not_supported(
                &format!("spec.{field}"),
                format!("{v:?}"),
            ));
        }
    }
    if let Some(r) = &s.routing {
        if !["", "None", "Host"].contains(&r.internal.as_str()) {
            errs.push(FieldError::not_supported(
                "spec.routing.internal",
                format!("{:?}", r.internal),
            ));
        }
        if !["", "None", "Aggregate"].contains(&r.external.as_str()) {
            errs.push(FieldError::not_supported(
                "spec.routing.external",
                format!("{:?}", r.external),
            ));
        }
    }
    if let Some(v) = class
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_DEFAULT_CLASS))
        && v != "true"
        && v != "false"
    {
        errs.push(FieldError::invalid(
            &format!("metadata.annotations[{ANNOTATION_DEFAULT_CLASS}]"),
            format!("{v:?}: must be \"true\" or \"false\""),
        ));
    }
}

/// Rules that read the rest of the catalog: the parent chain and the default marker.
fn validate_catalog(
    ctx: &Ctx<'_, '_>,
    name: &str,
    class: &IPClass,
    errs: &mut Vec<FieldError>,
) -> Result<()> {
    let s = &class.spec;
    if !s.parent_class_name.is_empty() && s.parent_class_name != name {
        // A parent may be a reference; it is checked as the class it resolves to.
        match source::resolve(ctx, &s.parent_class_name).ok().flatten() {
            None => errs.push(FieldError::invalid(
                "spec.parentClassName",
                format!("parent class {:?} not found", s.parent_class_name),
            )),
            Some(Definition {
                class: parent,
                project,
                ..
            }) => {
                if parent.spec.ip_family != s.ip_family {
                    errs.push(FieldError::invalid(
                        "spec.parentClassName",
                        format!(
                            "parent class {:?} hands out {} and this class {}; a chain is one family",
                            s.parent_class_name, parent.spec.ip_family, s.ip_family
                        ),
                    ));
                }
                if let (Some(mine), Some(theirs)) = (block_len(s), block_len(&parent.spec))
                    && mine <= theirs
                {
                    errs.push(FieldError::invalid(
                        "spec.defaultPrefixLength",
                        format!(
                            "a /{mine} is not smaller than the /{theirs} of parent class {:?}; a child's block is \
                             carved from its parent's",
                            s.parent_class_name
                        ),
                    ));
                }
                let mut depth = 1;
                // A chain that goes on in another project is that project's to keep acyclic.
                let mut next = if project.is_none() {
                    parent.spec.parent_class_name.clone()
                } else {
                    String::new()
                };
                while !next.is_empty() {
                    depth += 1;
                    if next == name {
                        errs.push(FieldError::invalid(
                            "spec.parentClassName",
                            "the class chain has a cycle",
                        ));
                        break;
                    }
                    if depth > MAX_CHAIN_DEPTH {
                        errs.push(FieldError::invalid(
                            "spec.parentClassName",
                            format!("the class chain is deeper than {MAX_CHAIN_DEPTH}"),
                        ));
                        break;
                    }
                    next = source::resolve(ctx, &next)
                        .ok()
                        .flatten()
                        .filter(|d| d.project.is_none())
                        .map(|d| d.class.spec.parent_class_name)
                        .unwrap_or_default();
                }
            }
        }
    }
    if is_default(class) {
        for other in ctx.txn.list(&key(CLASSES), None) {
            let o: IPClass = typed(&other)?;
            if name_of(&other) != name && o.spec.ip_family == s.ip_family && is_default(&o) {
                errs.push(FieldError::invalid(
                    &format!("metadata.annotations[{ANNOTATION_DEFAULT_CLASS}]"),
                    format!(
                        "class {:?} is already the default for {}",
                        name_of(&other),
                        s.ip_family
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Own `uniqueWithin` plus every `poolPer` up the chain: what a claim's scope must carry.
fn required_roles(ctx: &Ctx<'_, '_>, class: &IPClass) -> Result<Vec<String>> {
    let mut roles: BTreeSet<String> = class.spec.unique_within.iter().cloned().collect();
    roles.extend(class.spec.pool_per.iter().cloned());
    let mut next = class.spec.parent_class_name.clone();
    for _ in 0..MAX_CHAIN_DEPTH {
        if next.is_empty() {
            break;
        }
        let Some(d) = source::resolve(ctx, &next).ok().flatten() else {
            break;
        };
        roles.extend(d.class.spec.pool_per.iter().cloned());
        if d.project.is_some() {
            break;
        }
        next = d.class.spec.parent_class_name;
    }
    Ok(roles.into_iter().collect())
}

pub fn create(ctx: &mut Ctx<'_, '_>, obj: &mut Value) -> Result<()> {
    let name = name_of(obj).to_string();
    let class: IPClass = typed(obj)?;
    let mut errs = Vec::new();
    if source::source_of(obj).is_some() {
        // A reference takes no defaults: they would be policy of its own.
        source::validate_reference(obj, &class, &mut errs);
        errors::check(KIND, &name, errs)?;
        obj["status"] = json!({"phase": "Ready"});
        return Ok(());
    }
    validate_own(&name, &class, &mut errs);
    validate_catalog(ctx, &name, &class, &mut errs)?;
    errors::check(KIND, &name, errs)?;

    let spec = &mut obj["spec"];
    for (field, default) in [("strategy", "FirstFit"), ("reclaimPolicy", RECLAIM_DELETE)] {
        if spec[field].as_str().unwrap_or("").is_empty() {
            spec[field] = json!(default);
        }
    }
    for field in ["internal", "external"] {
        if spec["routing"][field].as_str().unwrap_or("").is_empty() {
            spec["routing"][field] = json!("None");
        }
    }
    obj["status"] = json!({
        "phase": "Ready",
        "requiredScopeRoles": required_roles(ctx, &class)?,
    });
    Ok(())
}

pub fn update(ctx: &mut Ctx<'_, '_>, old: &Value, new: &mut Value) -> Result<()> {
    let name = name_of(new).to_string();
    let o: IPClass = typed(old)?;
    let n: IPClass = typed(new)?;
    let mut errs = Vec::new();
    let source = source::source_of(new);
    if source::source_of(old) != source {
        errs.push(FieldError::immutable(
            "source",
            "it decides which class, pools and address space every claim of this class allocates under",
        ));
    }
    if source.is_some() {
        source::validate_reference(new, &n, &mut errs);
        return errors::check(KIND, &name, errs);
    }
    errs.extend(FieldError::immutables(
        &store::to_json(&o.spec),
        &store::to_json(&n.spec),
        [
            (
                "ipFamily",
                "pools and allocations of this class are of this family",
            ),
            (
                "parentClassName",
                "this class's pools were carved from the parent's",
            ),
            (
                "uniqueWithin",
                "it defines the address spaces existing allocations live in",
            ),
            (
                "poolPer",
                "it defines the identity of the pools this class has provisioned",
            ),
            (
                "provisioner",
                "the pools of this class were provisioned by it",
            ),
        ],
    ));
    validate_own(&name, &n, &mut errs);
    if errs.is_empty() {
        validate_catalog(ctx, &name, &n, &mut errs)?;
    }
    errors::check(KIND, &name, errs)?;
    if !new["status"].is_object() {
        new["status"] = json!({});
    }
    new["status"]["requiredScopeRoles"] = json!(required_roles(ctx, &n)?);
    Ok(())
}
