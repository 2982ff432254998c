//! One control plane (the cell, or one Milo project): its kinds, its store, its hooks, and the
//! write semantics the apiserver applies to every request.

use std::collections::HashSet;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::core::Status;
use kube::core::response::{StatusDetails, StatusSummary};
use serde_json::{Value, json};

use crate::error::{ApiError, FieldError};
use crate::hooks::{Caller, ResourceKey, StorageHooks};
use crate::meta;
use crate::resources::{Registry, ResourceDef};
use crate::schema;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{EventType, ObjKey, Store, Txn, WatchEvent, namespaces_key};
use tokio::sync::broadcast;

/// A control plane served by localplane. Cheap to clone; clones share the plane.
#[derive(Clone)]
pub struct Plane(pub(crate) Arc<PlaneInner>);

pub(crate) struct PlaneInner {
    name: String,
    project: Option<String>,
    state: RwLock<PlaneState>,
    hooks: RwLock<Vec<Arc<dyn StorageHooks>>>,
}

pub(crate) struct PlaneState {
    pub registry: Registry,
    pub store: Store,
}

/// Options every write takes from its query string.
#[derive(Debug, Clone, Default)]
pub(crate) struct WriteOpts {
    pub dry_run: bool,
    /// `fieldValidation=Strict`: unknown fields are an error instead of being dropped.
    pub strict: bool,
}

#[derive(Debug, Clone)]
pub(crate) enum PatchKind {
    Json,
    Merge,
    Strategic,
    Apply,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct DeleteOpts {
    pub dry_run: bool,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

pub(crate) struct ListResult {
    pub items: Vec<Arc<Value>>,
    pub rv: u64,
    pub cont: Option<String>,
}

fn admin_caller() -> Caller {
    Caller {
        user: "system:admin".into(),
        groups: vec!["system:masters".into()],
        project: None,
    }
}

fn encode_continue(rv: u64, key: &ObjKey) -> String {
    hex::encode(json!([rv, key.0, key.1]).to_string())
}

fn decode_continue(token: &str) -> Result<(u64, ObjKey), ApiError> {
    let bad = || {
        ApiError::bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        )
    };
    let raw = hex::decode(token).map_err(|_| bad())?;
    let v: (u64, String, String) = serde_json::from_slice(&raw).map_err(|_| bad())?;
    Ok((v.0, (v.1, v.2)))
}

impl Plane {
    pub(crate) fn new(name: &str, project: Option<&str>, history: usize) -> Plane {
        let plane = Plane(Arc::new(PlaneInner {
            name: name.to_string(),
            project: project.map(str::to_string),
            state: RwLock::new(PlaneState {
                registry: Registry::with_builtins(),
                store: Store::new(history),
            }),
            hooks: RwLock::new(vec![]),
        }));
        plane.ensure_namespace("default");
        plane
    }

    /// `cell`, or the project's name.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The Milo project this plane is the control plane of (`None` for the cell).
    pub fn project(&self) -> Option<&str> {
        self.0.project.as_deref()
    }

    pub(crate) fn read(&self) -> RwLockReadGuard<'_, PlaneState> {
        self.0.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, PlaneState> {
        self.0.state.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers server-side behaviour; it runs for every resource it `handles()`, in
    /// registration order, inside the write that triggers it.
    pub fn add_hooks(&self, hooks: Arc<dyn StorageHooks>) {
        self.0
            .hooks
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(hooks);
    }

    fn hooks_for(&self, key: &ResourceKey) -> Vec<Arc<dyn StorageHooks>> {
        self.0
            .hooks
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|h| h.handles(key))
            .cloned()
            .collect()
    }

    /// Serves a CRD's kind on this plane (re-adding replaces the definition, keeping objects).
    pub fn add_crd(&self, crd: &CustomResourceDefinition) -> Result<(), String> {
        let def = ResourceDef::from_crd(crd)?;
        self.write().registry.insert(def);
        Ok(())
    }

    pub fn add_crds(
        &self,
        crds: impl IntoIterator<Item = CustomResourceDefinition>,
    ) -> Result<(), String> {
        for c in crds {
            self.add_crd(&c)?;
        }
        Ok(())
    }

    /// Creates a namespace if it does not exist.
    pub fn ensure_namespace(&self, name: &str) {
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        let def = self
            .def(&namespaces_key())
            .expect("namespaces are built in");
        match self.create(
            &def,
            "v1",
            None,
            obj,
            &admin_caller(),
            &WriteOpts::default(),
        ) {
            Ok(_) => {}
            Err(e) if e.0.reason == "AlreadyExists" => {}
            Err(e) => tracing::warn!(?e, "creating namespace {name}"),
        }
    }

    pub(crate) fn def(&self, key: &ResourceKey) -> Option<Arc<ResourceDef>> {
        self.read().registry.get(key).cloned()
    }

    /// The stored object, as a GET would return it.
    pub fn object(&self, res: &ResourceKey, namespace: Option<&str>, name: &str) -> Option<Value> {
        self.read()
            .store
            .get(res, namespace.unwrap_or(""), name)
            .map(|v| (**v).clone())
    }

    /// All stored objects of a kind (in one namespace, or all).
    pub fn objects(&self, res: &ResourceKey, namespace: Option<&str>) -> Vec<Value> {
        self.read()
            .store
            .range(res, namespace, None)
            .map(|(_, v)| (**v).clone())
            .collect()
    }

    /// How many objects of a kind there are (in one namespace, or all), and how many of them
    /// `pred` accepts. Nothing is copied, but it scans under the read lock; to poll while the
    /// plane is busy, use [`Plane::tally`].
    pub fn count_where(
        &self,
        res: &ResourceKey,
        namespace: Option<&str>,
        pred: impl Fn(&Value) -> bool,
    ) -> (usize, usize) {
        self.read()
            .store
            .range(res, namespace, None)
            .fold((0, 0), |(n, ok), (_, v)| (n + 1, ok + usize::from(pred(v))))
    }

    /// A live [`count_where`](Plane::count_where): scanned once, then kept current from the
    /// plane's change stream, so polling it costs the plane nothing.
    pub fn tally(
        &self,
        res: &ResourceKey,
        namespace: Option<&str>,
        pred: impl Fn(&Value) -> bool + Send + 'static,
    ) -> Tally {
        let mut t = Tally {
            plane: self.clone(),
            res: res.clone(),
            namespace: namespace.map(str::to_string),
            pred: Box::new(pred),
            rx: None,
            all: HashSet::new(),
            matched: HashSet::new(),
        };
        t.rescan();
        t
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
        let opts = WriteOpts::default();
        let exists = self
            .read()
            .store
            .get(&def.key(), ns.unwrap_or(""), &name)
            .is_some();
        if exists {
            let mut obj = obj;
            meta::meta_mut(&mut obj).remove("resourceVersion");
            self.update_inner(&def, &version, ns, &name, obj, false, &caller, &opts, false)
        } else {
            self.create(&def, &version, ns, obj, &caller, &opts)
        }
    }

    /// Forgets the watch history, so any watch resumed from an earlier resourceVersion is told
    /// 410 Expired and the client must relist.
    pub fn compact_history(&self) {
        self.write().store.compact();
    }

    /// The plane's current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.read().store.rv()
    }

    pub(crate) fn get(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Arc<Value>, ApiError> {
        self.read()
            .store
            .get(&def.key(), ns.unwrap_or(""), name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&def.group, &def.plural, name))
    }

    pub(crate) fn list(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        limit: Option<usize>,
        cont: Option<&str>,
    ) -> Result<ListResult, ApiError> {
        let st = self.read();
        let key = def.key();
        let (rv, after) = match cont.filter(|c| !c.is_empty()) {
            Some(c) => {
                let (rv, k) = decode_continue(c)?;
                (rv, Some(k))
            }
            None => (st.store.rv(), None),
        };
        let matches = |v: &Value| labels.matches(v) && fields.matches(v);
        if let (Some(name), None) = (fields.pinned_name(), &after) {
            // A name-pinned list (kubectl wait, get by name -w) is a lookup, not a scan.
            let items = match ns {
                Some(ns) => st.store.get(&key, ns, name).into_iter().cloned().collect(),
                None => st
                    .store
                    .range(&key, None, None)
                    .filter(|(k, _)| k.1 == name)
                    .map(|(_, v)| v.clone())
                    .collect::<Vec<_>>(),
            };
            let items = items.into_iter().filter(|v| matches(v)).collect();
            return Ok(ListResult {
                items,
                rv,
                cont: None,
            });
        }
        let limit = limit.filter(|l| *l > 0);
        let mut items = Vec::new();
        let mut cont_out = None;
        for (k, v) in st.store.range(&key, ns, after.as_ref()) {
            if !matches(v) {
                continue;
            }
            if limit.is_some_and(|l| items.len() == l) {
                let last = key_of_arc(items.last().expect("limit > 0"));
                cont_out = Some(encode_continue(rv, &last));
                let _ = k;
                break;
            }
            items.push(v.clone());
        }
        Ok(ListResult {
            items,
            rv,
            cont: cont_out,
        })
    }

    /// Prunes, defaults and validates an object as admission would, given the old object on
    /// updates (for transition rules).
    fn admit(
        def: &ResourceDef,
        version: &str,
        obj: &mut Value,
        old: Option<&Value>,
        opts: &WriteOpts,
    ) -> Result<(), ApiError> {
        let name = meta::str_at(obj, "/metadata/name").to_string();
        let Some(v) = def.version(version) else {
            return Ok(());
        };
        let Some(schema_v) = v.schema.as_deref() else {
            return Ok(());
        };
        let dropped = schema::prune(schema_v, obj);
        if opts.strict && !dropped.is_empty() {
            let list: Vec<String> = dropped
                .iter()
                .map(|d| format!("unknown field {d:?}"))
                .collect();
            return Err(ApiError::bad_request(format!(
                "strict decoding error: {}",
                list.join(", ")
            )));
        }
        *obj = schema::apply_defaults(schema_v, obj);
        let mut errs = schema::validate_structure(schema_v, obj);
        if errs.is_empty()
            && let Some(c) = v.compiled.as_deref()
        {
            errs = schema::validate_cel(c, schema_v, obj, old);
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid(&def.group, &def.kind, &name, &errs))
        }
    }

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

    pub(crate) fn create(
        &self,
        def: &Arc<ResourceDef>,
        version: &str,
        ns: Option<&str>,
        mut obj: Value,
        caller: &Caller,
        opts: &WriteOpts,
    ) -> Result<Value, ApiError> {
        Self::check_type_meta(def, version, &mut obj)?;
        let body_ns = meta::str_at(&obj, "/metadata/namespace").to_string();
        if let Some(ns) = ns
            && !body_ns.is_empty()
            && body_ns != ns
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        {
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
                "managedFields",
                "selfLink",
            ] {
                m.remove(f);
            }
        }
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
        let name_errs = meta::validate_name(&name, is_ns);
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
            m.insert("generation".into(), json!(1));
        }
        Self::admit(def, version, &mut obj, None, opts)?;
        let key = def.key();
        let hooks = self.hooks_for(&key);
        let mut guard = self.write();
        let st = &mut *guard;
        if let Some(ns) = ns {
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
        let exists =
            |store: &crate::store::Store| store.get(&key, ns.unwrap_or(""), &name).is_some();
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
        if !opts.dry_run {
            txn.commit();
        }
        Ok((*stored).clone())
    }

    /// PUT: the body replaces the object, guarded by its resourceVersion.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn update(
        &self,
        def: &Arc<ResourceDef>,
        version: &str,
        ns: Option<&str>,
        name: &str,
        obj: Value,
        status_sub: bool,
        caller: &Caller,
        opts: &WriteOpts,
    ) -> Result<Value, ApiError> {
        self.update_inner(
            def, version, ns, name, obj, status_sub, caller, opts, def.custom,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn update_inner(
        &self,
        def: &Arc<ResourceDef>,
        version: &str,
        ns: Option<&str>,
        name: &str,
        mut obj: Value,
        status_sub: bool,
        caller: &Caller,
        opts: &WriteOpts,
        require_rv: bool,
    ) -> Result<Value, ApiError> {
        Self::check_type_meta(def, version, &mut obj)?;
        let body_name = meta::str_at(&obj, "/metadata/name");
        if body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let body_rv = meta::str_at(&obj, "/metadata/resourceVersion").to_string();
        if body_rv.is_empty() && require_rv {
            return Err(ApiError::invalid(
                &def.group,
                &def.kind,
                name,
                &[FieldError::invalid(
                    "metadata.resourceVersion",
                    &json!("0x0"),
                    "must be specified for an update",
                )],
            ));
        }
        let mut guard = self.write();
        let old = guard
            .store
            .get(&def.key(), ns.unwrap_or(""), name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&def.group, &def.plural, name))?;
        if !body_rv.is_empty() && body_rv != meta::str_at(&old, "/metadata/resourceVersion") {
            return Err(ApiError::stale(&def.group, &def.plural, name));
        }
        self.finish_update(&mut guard, def, version, old, obj, status_sub, caller, opts)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn patch(
        &self,
        def: &Arc<ResourceDef>,
        version: &str,
        ns: Option<&str>,
        name: &str,
        kind: PatchKind,
        body: &[u8],
        status_sub: bool,
        caller: &Caller,
        opts: &WriteOpts,
    ) -> Result<Value, ApiError> {
        let parse_err = |e: String| ApiError::bad_request(format!("error decoding patch: {e}"));
        if matches!(kind, PatchKind::Strategic) && def.custom {
            return Err(ApiError::unsupported_media_type(
                "application/strategic-merge-patch+json",
            ));
        }
        let patch_value: Value = match kind {
            PatchKind::Apply => {
                let text = std::str::from_utf8(body).map_err(|e| parse_err(e.to_string()))?;
                serde_saphyr::from_str(text).map_err(|e| parse_err(e.to_string()))?
            }
            _ => serde_json::from_slice(body).map_err(|e| parse_err(e.to_string()))?,
        };
        let mut guard = self.write();
        let old = guard.store.get(&def.key(), ns.unwrap_or(""), name).cloned();
        let Some(old) = old else {
            if matches!(kind, PatchKind::Apply) && !status_sub {
                drop(guard);
                let mut obj = patch_value;
                if meta::str_at(&obj, "/metadata/name") != name {
                    return Err(ApiError::bad_request(format!(
                        "the name of the object ({}) does not match the name on the URL ({name})",
                        meta::str_at(&obj, "/metadata/name")
                    )));
                }
                meta::meta_mut(&mut obj).remove("resourceVersion");
                return self.create(def, version, ns, obj, caller, opts);
            }
            return Err(ApiError::not_found(&def.group, &def.plural, name));
        };
        let mut new = (*old).clone();
        match kind {
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
                json_patch::patch(&mut new, &ops)
                    .map_err(|e| ApiError::new(422, "Invalid", e.to_string()))?;
            }
            PatchKind::Merge | PatchKind::Strategic | PatchKind::Apply => {
                if !patch_value.is_object() {
                    return Err(parse_err("the patch must be a JSON object".into()));
                }
                json_patch::merge(&mut new, &patch_value);
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
        self.finish_update(&mut guard, def, version, old, new, status_sub, caller, opts)
    }

    /// The shared tail of PUT and PATCH, under the write lock: status separation, immutable
    /// metadata, admission, generation, hooks, and removal once a deleting object's last
    /// finalizer is gone.
    #[allow(clippy::too_many_arguments)]
    fn finish_update(
        &self,
        st: &mut PlaneState,
        def: &Arc<ResourceDef>,
        version: &str,
        old: Arc<Value>,
        mut new: Value,
        status_sub: bool,
        caller: &Caller,
        opts: &WriteOpts,
    ) -> Result<Value, ApiError> {
        Self::check_type_meta(def, version, &mut new)?;
        let name = meta::str_at(&old, "/metadata/name").to_string();
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
        Self::admit(def, version, &mut new, Some(&old), opts)?;
        if meta::spec_changed(&old, &new, def.has_status()) {
            let g = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            meta::meta_mut(&mut new).insert("generation".into(), json!(g + 1));
        }
        let finished = deleting && meta::finalizers(&new).is_empty();
        if !finished && meta::same_content(&old, &new) {
            return Ok((*old).clone());
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
            txn.delete(&key, new)
        } else {
            txn.write(&key, new)
        };
        if !opts.dry_run {
            txn.commit();
        }
        Ok((*out).clone())
    }

    /// DELETE: removes the object, or marks it deleting while finalizers remain. Returns the HTTP
    /// code and body (the object while it still exists, else a success Status).
    pub(crate) fn delete(
        &self,
        def: &Arc<ResourceDef>,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOpts,
        caller: &Caller,
    ) -> Result<(u16, Value), ApiError> {
        let key = def.key();
        let hooks = self.hooks_for(&key);
        let mut guard = self.write();
        let st = &mut *guard;
        let old = st
            .store
            .get(&key, ns.unwrap_or(""), name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&def.group, &def.plural, name))?;
        let uid = meta::str_at(&old, "/metadata/uid").to_string();
        if let Some(want) = opts.uid.as_deref()
            && want != uid
        {
            return Err(ApiError::conflict(
                &def.group,
                &def.plural,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"
                ),
            ));
        }
        let rv = meta::str_at(&old, "/metadata/resourceVersion").to_string();
        if let Some(want) = opts.resource_version.as_deref()
            && want != rv
        {
            return Err(ApiError::conflict(
                &def.group,
                &def.plural,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {want}, ResourceVersion in object meta: {rv}"
                ),
            ));
        }
        let mut txn = Txn::new(&mut st.store, &st.registry);
        let is_ns = key == namespaces_key();
        let out = if is_ns {
            let marked = Self::mark_deleting(&mut txn, &key, &old, true);
            Self::drain_namespace(&mut txn, name, caller, &|k| self.hooks_for(k));
            match txn.get(&key, "", name) {
                Some(still) => (200, (*still).clone()),
                None => (200, (*marked).clone()),
            }
        } else if !meta::finalizers(&old).is_empty() {
            if old.pointer("/metadata/deletionTimestamp").is_some() {
                return Ok((200, (*old).clone()));
            }
            (
                200,
                (*Self::mark_deleting(&mut txn, &key, &old, false)).clone(),
            )
        } else {
            for h in &hooks {
                h.before_delete(&mut txn, caller, &key, &old)
                    .map_err(ApiError::from)?;
            }
            txn.delete(&key, (*old).clone());
            let status = Status {
                status: Some(StatusSummary::Success),
                code: 0,
                message: String::new(),
                metadata: None,
                reason: String::new(),
                details: Some(StatusDetails {
                    name: name.to_string(),
                    group: def.group.clone(),
                    kind: def.plural.clone(),
                    uid,
                    causes: vec![],
                    retry_after_seconds: 0,
                }),
            };
            (200, crate::error::status_json(&status))
        };
        if !opts.dry_run {
            txn.commit();
        }
        Ok(out)
    }

    fn mark_deleting(txn: &mut Txn<'_>, key: &ResourceKey, old: &Value, ns: bool) -> Arc<Value> {
        let mut obj = old.clone();
        {
            let m = meta::meta_mut(&mut obj);
            m.insert("deletionTimestamp".into(), json!(meta::now_rfc3339()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            // rest.BeforeDelete bumps generation when it sets deletionTimestamp.
            if let Some(g) = m.get("generation").and_then(Value::as_i64) {
                m.insert("generation".into(), json!(g + 1));
            }
        }
        if ns {
            obj["status"] = json!({"phase": "Terminating"});
        }
        txn.write(key, obj)
    }

    /// What the namespace controller does for a deleted namespace: delete everything in it (objects
    /// with finalizers wait for them), then the namespace itself.
    fn drain_namespace(
        txn: &mut Txn<'_>,
        ns: &str,
        caller: &Caller,
        hooks_for: &dyn Fn(&ResourceKey) -> Vec<Arc<dyn StorageHooks>>,
    ) {
        let keys: Vec<ResourceKey> = txn
            .registry
            .all()
            .filter(|d| d.namespaced)
            .map(|d| d.key())
            .collect();
        for k in keys {
            let objs: Vec<Arc<Value>> = txn
                .store
                .range(&k, Some(ns), None)
                .map(|(_, v)| v.clone())
                .collect();
            let hooks = hooks_for(&k);
            for o in objs {
                if !meta::finalizers(&o).is_empty() {
                    if o.pointer("/metadata/deletionTimestamp").is_none() {
                        Self::mark_deleting(txn, &k, &o, false);
                    }
                    continue;
                }
                let refused = hooks
                    .iter()
                    .find_map(|h| h.before_delete(txn, caller, &k, &o).err());
                if let Some(s) = refused {
                    tracing::warn!(
                        ?s,
                        "a hook refused deleting an object of a deleted namespace"
                    );
                    continue;
                }
                txn.delete(&k, (*o).clone());
            }
        }
        txn.finish_namespace_if_drained(ns);
    }
}

fn key_of_arc(v: &Arc<Value>) -> ObjKey {
    (
        meta::str_at(v, "/metadata/namespace").to_string(),
        meta::str_at(v, "/metadata/name").to_string(),
    )
}

/// Objects of one kind, and those a predicate accepts, counted from a plane's change stream
/// (see [`Plane::tally`]).
pub struct Tally {
    plane: Plane,
    res: ResourceKey,
    namespace: Option<String>,
    pred: Box<dyn Fn(&Value) -> bool + Send>,
    rx: Option<broadcast::Receiver<Arc<WatchEvent>>>,
    all: HashSet<ObjKey>,
    matched: HashSet<ObjKey>,
}

impl Tally {
    /// (objects, accepted objects) as of now.
    pub fn counts(&mut self) -> (usize, usize) {
        while let Some(rx) = self.rx.as_mut() {
            match rx.try_recv() {
                Ok(e) => self.apply(&e),
                Err(broadcast::error::TryRecvError::Empty) => break,
                // Changes were missed: only a fresh scan is exact again.
                Err(broadcast::error::TryRecvError::Lagged(_)) => self.rescan(),
                // The plane is gone; what was counted last stays.
                Err(broadcast::error::TryRecvError::Closed) => self.rx = None,
            }
        }
        (self.all.len(), self.matched.len())
    }

    fn apply(&mut self, e: &WatchEvent) {
        if e.res != self.res {
            return;
        }
        let key = key_of_arc(&e.obj);
        if self.namespace.as_ref().is_some_and(|ns| *ns != key.0) {
            return;
        }
        if e.etype == EventType::Deleted {
            self.all.remove(&key);
            self.matched.remove(&key);
        } else if (self.pred)(&e.obj) {
            self.all.insert(key.clone());
            self.matched.insert(key);
        } else {
            self.matched.remove(&key);
            self.all.insert(key);
        }
    }

    /// Subscribes and scans under one read lock: writers commit (and announce) under the write
    /// lock, so no change falls between the two.
    fn rescan(&mut self) {
        let plane = self.plane.clone();
        let st = plane.read();
        self.rx = Some(st.store.subscribe());
        self.all.clear();
        self.matched.clear();
        for (key, v) in st.store.range(&self.res, self.namespace.as_deref(), None) {
            if (self.pred)(v) {
                self.matched.insert(key.clone());
            }
            self.all.insert(key.clone());
        }
    }
}
