//! Reads: one object, lists with selectors, and `limit`/`continue` pages.

use std::sync::Arc;

use serde_json::{Value, json};

use super::Plane;
use crate::error::ApiError;
use crate::hooks::ResourceKey;
use crate::resources::ResourceDef;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{ObjKey, key_of};

/// One page of a list, and the resourceVersion it was read at.
pub(crate) struct ListResult {
    pub items: Vec<Arc<Value>>,
    pub rv: u64,
    pub cont: Option<String>,
}

/// A stored object as `def` (if any) presents it.
fn present(def: Option<&ResourceDef>, v: &Value) -> Value {
    match def {
        Some(d) => d.present(&d.preferred().name, v).into_owned(),
        None => v.clone(),
    }
}

/// A `continue` token: the list's resourceVersion and the key the next page starts after.
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
    /// Where the objects of the kind served at `res` are stored, and, when that is another
    /// kind's store (events.k8s.io Events live with core ones), the kind whose view they are
    /// read through.
    pub(super) fn view(&self, res: &ResourceKey) -> (ResourceKey, Option<Arc<ResourceDef>>) {
        match self.def(res) {
            Some(def) if def.key() != *res => (def.key(), Some(def)),
            _ => (res.clone(), None),
        }
    }

    /// The stored object, as a GET of the kind served at `res` would return it.
    pub fn object(&self, res: &ResourceKey, namespace: Option<&str>, name: &str) -> Option<Value> {
        let (key, def) = self.view(res);
        let st = self.read();
        let v = st.store.get(&key, namespace.unwrap_or(""), name)?;
        Some(present(def.as_deref(), v))
    }

    /// All stored objects of a kind (in one namespace, or all), as a list of it would return
    /// them.
    pub fn objects(&self, res: &ResourceKey, namespace: Option<&str>) -> Vec<Value> {
        let (key, def) = self.view(res);
        self.read()
            .store
            .range(&key, namespace, None)
            .map(|(_, v)| present(def.as_deref(), v))
            .collect()
    }

    /// How many objects of a kind there are (in one namespace, or all), and how many of them
    /// `pred` accepts. Nothing is copied (but for a kind read through another's view), but it
    /// scans under the read lock; to poll while the plane is busy, use [`Plane::tally`].
    pub fn count_where(
        &self,
        res: &ResourceKey,
        namespace: Option<&str>,
        pred: impl Fn(&Value) -> bool,
    ) -> (usize, usize) {
        let (key, def) = self.view(res);
        self.read()
            .store
            .range(&key, namespace, None)
            .fold((0, 0), |(n, ok), (_, v)| {
                let seen = match &def {
                    Some(d) => pred(&d.present(&d.preferred().name, v)),
                    None => pred(v),
                };
                (n + 1, ok + usize::from(seen))
            })
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
            let items: Vec<Arc<Value>> = match ns {
                Some(ns) => st.store.get(&key, ns, name).into_iter().cloned().collect(),
                None => st
                    .store
                    .range(&key, None, None)
                    .filter(|(k, _)| k.1 == name)
                    .map(|(_, v)| v.clone())
                    .collect(),
            };
            let items = items.into_iter().filter(|v| matches(v)).collect();
            return Ok(ListResult {
                items,
                rv,
                cont: None,
            });
        }
        let limit = limit.filter(|l| *l > 0);
        let mut items: Vec<Arc<Value>> = Vec::new();
        let mut cont_out = None;
        for (_, v) in st.store.range(&key, ns, after.as_ref()) {
            if !matches(v) {
                continue;
            }
            if limit.is_some_and(|l| items.len() == l) {
                let last = key_of(items.last().expect("limit > 0"));
                cont_out = Some(encode_continue(rv, &last));
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
}
