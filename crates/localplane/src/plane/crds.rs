//! CustomResourceDefinition objects and the kinds they serve: a CRD written through the API (or
//! added at start) is validated, given its established status, and served from the same write on;
//! deleting it stops serving the kind and removes its objects, as the apiextensions apiserver's
//! cleanup finalizer does.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

use crate::error::{ApiError, FieldError};
use crate::hooks::ResourceKey;
use crate::kinds::BuiltinKind;
use crate::meta;
use crate::resources::ResourceDef;
use crate::store::Txn;

pub(super) fn is_crd(def: &ResourceDef) -> bool {
    def.builtin == Some(BuiltinKind::CustomResourceDefinition)
}

/// The kind a CRD object serves, or why it cannot be served.
pub(super) fn served_def(crd: &Value) -> Result<ResourceDef, ApiError> {
    let name = meta::str_at(crd, "/metadata/name");
    let refuse = |why: String| {
        ApiError::invalid(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            name,
            &[FieldError::invalid(
                "spec",
                &Value::String("...".into()),
                why,
            )],
        )
    };
    let typed: CustomResourceDefinition =
        serde_json::from_value(crd.clone()).map_err(|e| refuse(e.to_string()))?;
    ResourceDef::from_crd(&typed).map_err(refuse)
}

/// Where a CRD object's kind is served (and stored).
pub(super) fn served_key(crd: &Value) -> ResourceKey {
    ResourceKey::new(
        meta::str_at(crd, "/spec/group"),
        meta::str_at(crd, "/spec/names/plural"),
    )
}

/// Deletes every object of the kind a CRD serves, in the transaction that deletes the CRD.
pub(super) fn remove_objects(txn: &mut Txn<'_>, crd: &Value) {
    let key = served_key(crd);
    let objects: Vec<Value> = txn
        .store
        .range(&key, None, None)
        .map(|(_, v)| (**v).clone())
        .collect();
    for o in objects {
        txn.delete(&key, o);
    }
}
