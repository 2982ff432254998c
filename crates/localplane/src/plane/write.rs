//! Writes: admission (pruning, defaults, schema and CEL), create, update and patch, and the
//! plane's own writes (namespaces, seeded objects) through the same path.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Plane, PlaneState, crds};
use crate::error::{ApiError, FieldError, FieldErrorKind};
use crate::fields;
use crate::hooks::Caller;
use crate::kinds::{self, BuiltinKind};
use crate::meta;
use crate::resources::ResourceDef;
use crate::schema;
use crate::store::{Store, Txn, namespaces_key};

/// Where a write lands: the kind, the version the client spoke, the namespace, and whether it
/// addresses the `/status` subresource.
#[derive(Clone, Copy)]
pub(crate) struct Target<'a> {
    pub def: &'a Arc<ResourceDef>,
    pub version: &'a str,
    pub ns: Option<&'a str>,
    pub status: bool,
}

/// `fieldValidation`: what becomes of fields the kind does not have.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum FieldValidation {
    /// Dropped silently.
    Ignore,
    /// Dropped, with a `Warning` header naming each (the apiserver's default).
    #[default]
    Warn,
    /// Refused with 400.
    Strict,
}

/// Options every write takes from its query string.
#[derive(Debug, Clone, Default)]
pub(crate) struct WriteOpts {
    pub dry_run: bool,
    pub field_validation: FieldValidation,
    /// `fieldManager`: who the write is recorded under in `managedFields`.
    pub field_manager: Option<String>,
    /// `force` as sent (only an apply may send it).
    pub force: Option<String>,
    /// The client's User-Agent: the manager when `fieldManager` is not given.
    pub user_agent: String,
    /// Set only by a server-side apply, which computed the object's managedFields itself
    /// (requests leave it false).
    pub applied: bool,
}

/// The managedFields a create of `obj` by `opts`'s manager records, without storing anything
/// (a review is answered with them).
pub(crate) fn created_fields(
    def: &ResourceDef,
    version: &str,
    obj: &Value,
    opts: &WriteOpts,
) -> Result<Option<Value>, ApiError> {
    let manager = opts.manager();
    fields::Writer {
        def,
        version,
        status: false,
        manager: &manager,
    }
    .update(None, obj, None)
}

impl WriteOpts {
    fn manager(&self) -> String {
        fields::manager_name(self.field_manager.as_deref(), &self.user_agent)
    }

    /// The plane's own writes, recorded under `manager`.
    fn internal(manager: &str) -> WriteOpts {
        WriteOpts {
            field_manager: Some(manager.to_string()),
            ..Default::default()
        }
    }
}

/// A write's outcome: the object as stored (or as it would be, for a dry run) and the warnings
/// the response carries.
#[derive(Debug)]
pub(crate) struct Written {
    pub obj: Value,
    pub warnings: Vec<String>,
}

/// Which request a body came with: the apiserver words decode failures differently for a body
/// it decodes (create, update) and for the result of a patch; and a strict refusal of unknown
/// fields differently for a JSON or merge patch (a 422 quoting the patched object) and for a
/// strategic merge or apply patch (a 400).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    Object,
    Patched,
    StrategicOrApplied,
}

/// The patch types. The server takes `Strategic` for built-in kinds only, as the apiserver does.
#[derive(Debug, Clone)]
pub(crate) enum PatchKind {
    Json,
    Merge,
    Strategic,
    Apply,
}

/// The identity of the plane's own writes (namespaces it creates, manifests it loads).
fn admin_caller() -> Caller {
    Caller {
        user: "system:admin".into(),
        groups: vec!["system:masters".into()],
        project: None,
    }
}

/// Decodes a request body as the apiserver's decoder would, in the version the client spoke:
/// a built-in kind's types are checked (a wrong type or an unparseable time fails the request)
/// and, for every kind, fields it does not have are dropped, refused or warned about as
/// `fieldValidation` says. Returns the warnings.
fn decode(
    def: &ResourceDef,
    version: &str,
    obj: &mut Value,
    opts: &WriteOpts,
    body: Body,
) -> Result<Vec<String>, ApiError> {
    // The whole patched object is what failed to decode, so a patch's refusal quotes it.
    let patched = (body != Body::Object).then(|| obj.to_string());
    let cannot_decode = |msg: String| match &patched {
        None => ApiError::bad_request(format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: {msg}",
            kind = def.kind
        )),
        Some(text) => ApiError::invalid(
            "",
            "",
            "",
            &[FieldError::invalid("patch", &json!(text), msg)],
        ),
    };
    let dropped = match def.builtin {
        Some(b) => {
            let schema = b.schema();
            kinds::decode::decode(&schema.inlined, obj).map_err(cannot_decode)?;
            schema::prune(&schema.inlined, obj)
        }
        None => match def.version(version).and_then(|v| v.schema.as_deref()) {
            Some(s) => schema::prune(s, obj),
            None => vec![],
        },
    };
    let unknown: Vec<String> = dropped
        .iter()
        .map(|d| format!("unknown field {d:?}"))
        .collect();
    match opts.field_validation {
        _ if unknown.is_empty() => Ok(vec![]),
        FieldValidation::Ignore => Ok(vec![]),
        FieldValidation::Warn => Ok(unknown),
        FieldValidation::Strict => {
            let msg = format!("strict decoding error: {}", unknown.join(", "));
            Err(match body {
                Body::Object | Body::Patched => cannot_decode(msg),
                Body::StrategicOrApplied => ApiError::bad_request(msg),
            })
        }
    }
}

/// Validates an object (stored shape) as the apiserver would before storing it: for a custom
/// resource, its schema's defaults, constraints and CEL rules (`old` enables transition rules);
/// for a built-in, the required fields and enums its schema marks and the kind's own rules.
fn validate(
    def: &ResourceDef,
    version: &str,
    obj: &mut Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    let name = meta::str_at(obj, "/metadata/name").to_string();
    let errs = match def.builtin {
        Some(b) => {
            b.apply_defaults(obj, old);
            let mut errs = vec![];
            if b.schema_required_fields() {
                errs = schema::validate_structure(&b.schema().inlined, obj);
            }
            errs.extend(b.validate(obj, old));
            errs
        }
        None => {
            let Some(v) = def.version(version) else {
                return Ok(());
            };
            let Some(schema_v) = v.schema.as_deref() else {
                return Ok(());
            };
            *obj = schema::apply_defaults(schema_v, obj);
            let mut errs = schema::validate_structure(schema_v, obj);
            if let Some(c) = v.compiled.as_deref()
                && has_cel_rules(schema_v)
            {
                // As the custom resource strategy does: an object without the shape its rules
                // were written for is not evaluated, and says so; other errors do not stop them.
                if errs.iter().any(|e| blocks_cel(e.kind)) {
                    errs.push(FieldError::invalid(
                        "<nil>",
                        &Value::Null,
                        "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
                    ));
                } else {
                    errs.extend(schema::validate_cel(c, obj, old));
                }
            }
            errs
        }
    };
    if errs.is_empty() {
        return Ok(());
    }
    // An events.k8s.io Event is validated as the core Event it is stored as: the refusal
    // names the kind without a group, as the real apiserver's does.
    let group = if def.builtin == Some(BuiltinKind::EventsV1Event) {
        ""
    } else {
        def.group.as_str()
    };
    Err(ApiError::invalid(group, &def.kind, &name, &errs))
}

/// The structural errors after which the apiserver does not evaluate a CRD's CEL rules.
fn blocks_cel(kind: FieldErrorKind) -> bool {
    matches!(
        kind,
        FieldErrorKind::NotSupported
            | FieldErrorKind::Required
            | FieldErrorKind::TooLong
            | FieldErrorKind::TooMany
            | FieldErrorKind::TypeInvalid
    )
}

/// Whether a schema holds any `x-kubernetes-validations` rule.
fn has_cel_rules(schema: &Value) -> bool {
    match schema {
        Value::Object(m) => m.iter().any(|(k, v)| {
            (k == "x-kubernetes-validations" && v.as_array().is_some_and(|a| !a.is_empty()))
                || has_cel_rules(v)
        }),
        Value::Array(items) => items.iter().any(has_cel_rules),
        _ => false,
    }
}

/// Fills in or checks `apiVersion` and `kind` against the kind and version the URL names.
fn check_type_meta(def: &ResourceDef, version: &str, obj: &mut Value) -> Result<(), ApiError> {
    let Some(o) = obj.as_object_mut() else {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    };
    let want_av = def.api_version(version);
    match o.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => {
            o.insert("apiVersion".into(), json!(want_av));
        }
        Some(av) if av != want_av => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({want_av})"
            )));
        }
        _ => {}
    }
    match o.get("kind").and_then(Value::as_str) {
        None | Some("") => {
            o.insert("kind".into(), json!(def.kind));
        }
        // A custom resource's kind is checked as a field, and the refusal names the kind sent.
        Some(k) if k != def.kind && def.custom => {
            let name = o
                .get("metadata")
                .and_then(|m| m.get("name"))
                .and_then(Value::as_str)
                .unwrap_or("");
            return Err(ApiError::invalid(
                &def.group,
                k,
                name,
                &[FieldError::invalid(
                    "kind",
                    &json!(k),
                    format!("must be {}", def.kind),
                )],
            ));
        }
        Some(k) if k != def.kind => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                def.kind
            )));
        }
        _ => {}
    }
    Ok(())
}

impl Plane {
    /// Creates a namespace if it does not exist.
    pub fn ensure_namespace(&self, name: &str) {
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        let def = self
            .def(&namespaces_key())
            .expect("namespaces are built in");
        let target = Target {
            def: &def,
            version: "v1",
            ns: None,
            status: false,
        };
        match self.create(
            target,
            obj,
            &admin_caller(),
            &WriteOpts::internal("kube-apiserver"),
        ) {
            Ok(_) => {}
            Err(e) if e.0.reason == "AlreadyExists" => {}
            Err(e) => tracing::warn!(?e, "creating namespace {name}"),
        }
    }

    /// Creates or replaces an object as the admin would, through validation and hooks (for
    /// seeding RBAC, namespaces and fixtures). The kind is found from `apiVersion` and `kind`.
    pub fn apply_object(&self, obj: Value) -> Result<Value, ApiError> {
        let api_version = meta::str_at(&obj, "/apiVersion").to_string();
        let kind = meta::str_at(&obj, "/kind").to_string();
        let (group, version) = match api_version.rsplit_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (String::new(), api_version.clone()),
        };
        let def = self
            .read()
            .registry
            .all()
            .find(|d| d.group == group && d.kind == kind && d.version(&version).is_some())
            .cloned()
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "no kind {kind:?} is registered for version {api_version:?}"
                ))
            })?;
        let ns = def
            .namespaced
            .then(|| meta::str_at(&obj, "/metadata/namespace").to_string());
        let ns = ns
            .as_deref()
            .map(|n| if n.is_empty() { "default" } else { n });
        let name = meta::str_at(&obj, "/metadata/name").to_string();
        let caller = admin_caller();
        let opts = WriteOpts::internal("localplane");
        let exists = self
            .read()
            .store
            .get(&def.key(), ns.unwrap_or(""), &name)
            .is_some();
        let target = Target {
            def: &def,
            version: &version,
            ns,
            status: false,
        };
        if exists {
            let mut obj = obj;
            meta::meta_mut(&mut obj).remove("resourceVersion");
            self.update_inner(target, &name, obj, &caller, &opts, false)
                .map(|w| w.obj)
        } else {
            self.create(target, obj, &caller, &opts).map(|w| w.obj)
        }
    }

    /// POST: decodes, validates and stores a new object, running the kind's hooks in the same
    /// transaction.
    pub(crate) fn create(
        &self,
        t: Target<'_>,
        mut obj: Value,
        caller: &Caller,
        opts: &WriteOpts,
    ) -> Result<Written, ApiError> {
        let Target {
            def, version, ns, ..
        } = t;
        fields::check_options("CreateOptions", opts.field_manager.as_deref(), None, false)?;
        check_type_meta(def, version, &mut obj)?;
        let warnings = decode(def, version, &mut obj, opts, Body::Object)?;
        let mut obj = def.to_storage(obj);
        let body_ns = meta::str_at(&obj, "/metadata/namespace").to_string();
        if let Some(ns) = ns
            && !body_ns.is_empty()
            && body_ns != ns
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let sent_managed = {
            let m = meta::meta_mut(&mut obj);
            match ns {
                Some(ns) => {
                    m.insert("namespace".into(), json!(ns));
                }
                None => {
                    m.remove("namespace");
                }
            }
            for f in [
                "uid",
                "resourceVersion",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "selfLink",
            ] {
                m.remove(f);
            }
            if opts.applied {
                None
            } else {
                m.remove("managedFields")
            }
        };
        let generate = meta::str_at(&obj, "/metadata/generateName").to_string();
        let mut name = meta::str_at(&obj, "/metadata/name").to_string();
        if name.is_empty() && !generate.is_empty() {
            name = format!("{generate}{}", meta::name_suffix());
            meta::meta_mut(&mut obj).insert("name".into(), json!(name));
        }
        if name.is_empty() {
            return Err(ApiError::invalid(
                &def.group,
                &def.kind,
                "",
                &[FieldError::required(
                    "metadata.name",
                    "name or generateName is required",
                )],
            ));
        }
        let is_ns = def.key() == namespaces_key();
        let name_errs = if def.group == "rbac.authorization.k8s.io" {
            meta::validate_path_segment_name(&name)
        } else {
            meta::validate_name(&name, is_ns)
        };
        if !name_errs.is_empty() {
            return Err(ApiError::invalid(&def.group, &def.kind, &name, &name_errs));
        }
        if def.has_status()
            && let Some(o) = obj.as_object_mut()
        {
            o.remove("status");
        }
        if is_ns {
            obj["status"] = json!({"phase": "Active"});
            let m = meta::meta_mut(&mut obj);
            let labels = m.entry("labels").or_insert_with(|| json!({}));
            if let Some(l) = labels.as_object_mut() {
                l.insert("kubernetes.io/metadata.name".into(), json!(name));
            }
        }
        {
            let m = meta::meta_mut(&mut obj);
            m.insert("uid".into(), json!(meta::new_uid()));
            m.insert("creationTimestamp".into(), json!(meta::now_rfc3339()));
            if def.tracks_generation() {
                m.insert("generation".into(), json!(1));
            }
        }
        validate(def, version, &mut obj, None)?;
        if !opts.applied {
            let manager = opts.manager();
            let writer = fields::Writer {
                def,
                version,
                status: false,
                manager: &manager,
            };
            match writer.update(None, &obj, sent_managed.as_ref())? {
                Some(list) => {
                    meta::meta_mut(&mut obj).insert("managedFields".into(), list);
                }
                None => {
                    meta::meta_mut(&mut obj).remove("managedFields");
                }
            }
        }
        // The namespace's own finalizer (the namespace controller removes it once the namespace
        // is empty) is set by the create strategy, after the field manager: nobody owns it.
        if is_ns && obj.pointer("/spec/finalizers").is_none() {
            obj["spec"]["finalizers"] = json!(["kubernetes"]);
        }
        let serves = if crds::is_crd(def) {
            kinds::crd::established(&mut obj);
            Some(crds::served_def(&obj)?)
        } else {
            None
        };
        let key = def.key();
        let hooks = self.hooks_for(&key);
        let mut guard = self.write();
        let st = &mut *guard;
        // Milo's quota admission runs before IPAM's own checks; a dry run claims no share.
        if !opts.dry_run {
            self.check_quota(&st.store, &key, &name)?;
        }
        let hook_checks_namespace = hooks.iter().any(|h| h.checks_namespace(&key));
        if let Some(ns) = ns.filter(|_| !hook_checks_namespace) {
            match st.store.get(&namespaces_key(), "", ns) {
                None => return Err(ApiError::namespace_not_found(ns)),
                Some(n) if n.pointer("/metadata/deletionTimestamp").is_some() => {
                    return Err(ApiError::forbidden(
                        &def.group,
                        &def.plural,
                        &name,
                        &format!(
                            "unable to create new content in namespace {ns} because it is being terminated"
                        ),
                    ));
                }
                _ => {}
            }
        }
        // A hooked resource hears about a duplicate name first: the service it stands for
        // answers a duplicate in its own words (Milo IPAM: 409 with cause ClaimExists). The
        // generic check still runs after the hooks, and dropping the uncommitted txn undoes
        // whatever they wrote.
        let exists = |store: &Store| store.get(&key, ns.unwrap_or(""), &name).is_some();
        if hooks.is_empty() && exists(&st.store) {
            return Err(ApiError::already_exists(&def.group, &def.plural, &name));
        }
        let mut txn = Txn::new(&mut st.store, &st.registry);
        for h in &hooks {
            h.before_create(&mut txn, caller, &key, &mut obj)
                .map_err(ApiError::from)?;
        }
        if txn.get(&key, ns.unwrap_or(""), &name).is_some() {
            return Err(ApiError::already_exists(&def.group, &def.plural, &name));
        }
        let stored = txn.write(&key, obj);
        let mut out = (*stored).clone();
        if opts.dry_run {
            // A dry run stops short of storage, where a resourceVersion would be assigned.
            meta::meta_mut(&mut out).remove("resourceVersion");
        } else {
            txn.commit();
            if let Some(served) = serves {
                st.registry.insert(served);
            }
        }
        Ok(Written {
            obj: def.present(version, &out).into_owned(),
            warnings,
        })
    }

    /// PUT: the body replaces the object, guarded by its resourceVersion.
    pub(crate) fn update(
        &self,
        t: Target<'_>,
        name: &str,
        obj: Value,
        caller: &Caller,
        opts: &WriteOpts,
    ) -> Result<Written, ApiError> {
        self.update_inner(t, name, obj, caller, opts, t.def.custom)
    }

    /// PUT with the resourceVersion optional (`require_rv` false), as the plane's own
    /// `apply_object` writes.
    pub(super) fn update_inner(
        &self,
        t: Target<'_>,
        name: &str,
        mut obj: Value,
        caller: &Caller,
        opts: &WriteOpts,
        require_rv: bool,
    ) -> Result<Written, ApiError> {
        let Target {
            def, version, ns, ..
        } = t;
        fields::check_options("UpdateOptions", opts.field_manager.as_deref(), None, false)?;
        check_type_meta(def, version, &mut obj)?;
        let body_name = meta::str_at(&obj, "/metadata/name");
        if body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let body_rv = meta::str_at(&obj, "/metadata/resourceVersion").to_string();
        // A missing object is not found before its resourceVersion is asked for.
        if body_rv.is_empty()
            && require_rv
            && self
                .read()
                .store
                .get(&def.key(), ns.unwrap_or(""), name)
                .is_none()
        {
            return Err(ApiError::not_found(&def.group, &def.plural, name));
        }
        if body_rv.is_empty() && require_rv {
            // Worded as the custom resource storage words it: by plural, the value an integer.
            return Err(ApiError::invalid(
                &def.group,
                &def.plural,
                name,
                &[FieldError::invalid(
                    "metadata.resourceVersion",
                    &json!(0),
                    "must be specified for an update",
                )],
            ));
        }
        let warnings = decode(def, version, &mut obj, opts, Body::Object)?;
        let obj = def.to_storage(obj);
        let mut guard = self.write();
        let old = guard
            .store
            .get(&def.key(), ns.unwrap_or(""), name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&def.group, &def.plural, name))?;
        if !body_rv.is_empty() && body_rv != meta::str_at(&old, "/metadata/resourceVersion") {
            return Err(ApiError::stale(&def.group, &def.plural, name));
        }
        self.finish_update(&mut guard, t, old, obj, caller, opts, warnings)
    }

    /// PATCH in any of the four patch types, applied to the object as the request's version
    /// presents it; a server-side apply of an absent object creates it (the flag says so: the
    /// apiserver answers such an apply 201).
    pub(crate) fn patch(
        &self,
        t: Target<'_>,
        name: &str,
        kind: PatchKind,
        body: &[u8],
        caller: &Caller,
        opts: &WriteOpts,
    ) -> Result<(Written, bool), ApiError> {
        let Target {
            def,
            version,
            ns,
            status,
        } = t;
        let apply = matches!(kind, PatchKind::Apply);
        fields::check_options(
            "PatchOptions",
            opts.field_manager.as_deref(),
            opts.force.as_deref(),
            apply,
        )?;
        let parse_err = |e: String| ApiError::bad_request(format!("error decoding patch: {e}"));
        let patch_value: Value = match kind {
            PatchKind::Apply => {
                let yaml_err =
                    |e: String| ApiError::bad_request(format!("error decoding YAML: {e}"));
                let text = std::str::from_utf8(body).map_err(|e| yaml_err(e.to_string()))?;
                let v: Value = serde_saphyr::from_str(text).map_err(|e| yaml_err(e.to_string()))?;
                if !v.is_object() {
                    return Err(yaml_err(
                        "the applied configuration must be an object".into(),
                    ));
                }
                v
            }
            _ => serde_json::from_slice(body).map_err(|e| parse_err(e.to_string()))?,
        };
        let manager = opts.manager();
        let applier = fields::Writer {
            def,
            version,
            status,
            manager: &manager,
        };
        let force = opts.force.as_deref() == Some("true");
        let applied_opts = WriteOpts {
            applied: true,
            ..opts.clone()
        };
        let mut guard = self.write();
        let old = guard.store.get(&def.key(), ns.unwrap_or(""), name).cloned();
        let Some(old) = old else {
            if apply && !status {
                drop(guard);
                if meta::str_at(&patch_value, "/metadata/name") != name {
                    return Err(ApiError::bad_request(format!(
                        "the name of the object ({}) does not match the name on the URL ({name})",
                        meta::str_at(&patch_value, "/metadata/name")
                    )));
                }
                let (mut obj, _) = applier.apply(None, &patch_value, force)?;
                meta::meta_mut(&mut obj).remove("resourceVersion");
                return self
                    .create(t, obj, caller, &applied_opts)
                    .map(|v| (v, true));
            }
            return Err(ApiError::not_found(&def.group, &def.plural, name));
        };
        let mut new = def.present(version, &old).into_owned();
        match kind {
            PatchKind::Apply => {
                new = applier.apply(Some(&new), &patch_value, force)?.0;
            }
            PatchKind::Json => {
                let mut ops: json_patch::Patch =
                    serde_json::from_value(patch_value).map_err(|e| parse_err(e.to_string()))?;
                // The apiserver's JSON patch library lets `test` of an absent path against null
                // succeed; kube's finalizer helper relies on it when adding the first finalizer.
                ops.0.retain(|op| match op {
                    json_patch::PatchOperation::Test(t) => {
                        !(t.value.is_null() && new.pointer(t.path.as_str()).is_none())
                    }
                    _ => true,
                });
                json_patch::patch(&mut new, &ops).map_err(|e| {
                    if matches!(e.kind, json_patch::PatchErrorKind::TestFailed) {
                        // A failed `test` is answered with the generic 422 and empty details,
                        // as the real apiserver showed.
                        ApiError::new(
                            422,
                            "Invalid",
                            "the server rejected our request due to an error in our request",
                        )
                        .with_details("", "", "")
                    } else {
                        ApiError::new(422, "Invalid", e.to_string())
                    }
                })?;
            }
            PatchKind::Merge => {
                if !patch_value.is_object() {
                    return Err(parse_err("the patch must be a JSON object".into()));
                }
                json_patch::merge(&mut new, &patch_value);
            }
            PatchKind::Strategic => {
                let Value::Object(patch) = patch_value else {
                    return Err(parse_err("the patch must be a JSON object".into()));
                };
                new = fields::strategic_merge(def, version, new, patch)?;
            }
        }
        let new_rv = meta::str_at(&new, "/metadata/resourceVersion");
        if !new_rv.is_empty() && new_rv != meta::str_at(&old, "/metadata/resourceVersion") {
            return Err(ApiError::stale(&def.group, &def.plural, name));
        }
        if meta::str_at(&new, "/metadata/name") != name {
            return Err(ApiError::bad_request(
                "metadata.name cannot be changed by a patch",
            ));
        }
        let opts = if apply { &applied_opts } else { opts };
        check_type_meta(def, version, &mut new)?;
        let body = match kind {
            PatchKind::Json | PatchKind::Merge => Body::Patched,
            _ => Body::StrategicOrApplied,
        };
        let warnings = decode(def, version, &mut new, opts, body)?;
        let new = def.to_storage(new);
        self.finish_update(&mut guard, t, old, new, caller, opts, warnings)
            .map(|w| (w, false))
    }

    /// The shared tail of PUT and PATCH, under the write lock, on the stored shape: status
    /// separation, immutable metadata, validation, generation, hooks, and removal once a
    /// deleting object's last finalizer is gone.
    #[allow(clippy::too_many_arguments)]
    fn finish_update(
        &self,
        st: &mut PlaneState,
        t: Target<'_>,
        old: Arc<Value>,
        mut new: Value,
        caller: &Caller,
        opts: &WriteOpts,
        warnings: Vec<String>,
    ) -> Result<Written, ApiError> {
        let Target {
            def,
            version,
            status: status_sub,
            ..
        } = t;
        let name = meta::str_at(&old, "/metadata/name").to_string();
        // What the request's object says managedFields are (an apply: what it computed),
        // before the status subresource's view replaces the rest of the object.
        let sent_managed = new.pointer("/metadata/managedFields").cloned();
        if def.has_status() {
            let keep_from_new = if status_sub {
                let status = new.get("status").cloned();
                new = (*old).clone();
                status
            } else {
                old.get("status").cloned()
            };
            let o = new.as_object_mut().expect("checked to be an object");
            match keep_from_new {
                Some(s) => {
                    o.insert("status".into(), s);
                }
                None => {
                    o.remove("status");
                }
            }
        }
        {
            let m = meta::meta_mut(&mut new);
            for f in [
                "name",
                "namespace",
                "uid",
                "creationTimestamp",
                "generation",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "resourceVersion",
            ] {
                match old.pointer(&format!("/metadata/{f}")) {
                    Some(v) => {
                        m.insert(f.into(), v.clone());
                    }
                    None => {
                        m.remove(f);
                    }
                }
            }
            m.remove("managedFields");
        }
        let manager = opts.manager();
        let deleting = old.pointer("/metadata/deletionTimestamp").is_some();
        if deleting {
            let old_f = meta::finalizers(&old);
            let added: Vec<String> = meta::finalizers(&new)
                .into_iter()
                .filter(|f| !old_f.contains(f))
                .collect();
            if !added.is_empty() {
                let quoted: Vec<String> = added.iter().map(|f| format!("{f:?}")).collect();
                return Err(ApiError::invalid(
                    &def.group,
                    &def.kind,
                    &name,
                    &[FieldError::forbidden(
                        "metadata.finalizers",
                        format!(
                            "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                            quoted.join(", ")
                        ),
                    )],
                ));
            }
        }
        validate(def, version, &mut new, Some(&old))?;
        let serves = if crds::is_crd(def) {
            if new.get("spec") != old.get("spec") {
                kinds::crd::established(&mut new);
            }
            Some(crds::served_def(&new)?)
        } else {
            None
        };
        if def.tracks_generation() && meta::spec_changed(&old, &new, def.has_status()) {
            let g = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            meta::meta_mut(&mut new).insert("generation".into(), json!(g + 1));
        }
        let managed = if opts.applied {
            sent_managed
        } else {
            let writer = fields::Writer {
                def,
                version,
                status: status_sub,
                manager: &manager,
            };
            writer.update(Some(&old), &new, sent_managed.as_ref())?
        };
        if let Some(list) = managed {
            meta::meta_mut(&mut new).insert("managedFields".into(), list);
        }
        let finished = deleting && meta::finalizers(&new).is_empty();
        if !finished
            && meta::same_content(&old, &new)
            && old.pointer("/metadata/managedFields") == new.pointer("/metadata/managedFields")
        {
            return Ok(Written {
                obj: def.present(version, &old).into_owned(),
                warnings,
            });
        }
        let key = def.key();
        let hooks = self.hooks_for(&key);
        let mut txn = Txn::new(&mut st.store, &st.registry);
        for h in &hooks {
            h.before_update(&mut txn, caller, &key, &old, &mut new)
                .map_err(ApiError::from)?;
        }
        let out = if finished {
            for h in &hooks {
                h.before_delete(&mut txn, caller, &key, &new)
                    .map_err(ApiError::from)?;
            }
            if serves.is_some() {
                crds::remove_objects(&mut txn, &new);
            }
            txn.delete(&key, new)
        } else {
            txn.write(&key, new)
        };
        let mut out = (*out).clone();
        if opts.dry_run {
            // A dry run answers with what would be stored, still at the stored version.
            let rv = meta::str_at(&old, "/metadata/resourceVersion").to_string();
            meta::meta_mut(&mut out).insert("resourceVersion".into(), json!(rv));
        } else {
            txn.commit();
            match serves {
                Some(_) if finished => {
                    st.registry.remove(&crds::served_key(&out));
                }
                Some(served) => st.registry.insert(served),
                None => {}
            }
        }
        Ok(Written {
            obj: def.present(version, &out).into_owned(),
            warnings,
        })
    }
}
