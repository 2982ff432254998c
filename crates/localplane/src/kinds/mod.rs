//! What the apiserver knows about its built-in kinds that a CRD would put in a schema: their
//! OpenAPI schemas (from the Kubernetes API types), how the Go decoder reads them, how a kind
//! served in two groups converts between them (Event), how each is validated, and which field
//! labels select it.

pub mod decode;
pub mod event;
pub mod gotime;
pub mod lease;
pub mod schemas;

use std::borrow::Cow;
use std::sync::Arc;

use k8s_openapi::api;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

use crate::error::FieldError;
use crate::hooks::ResourceKey;
use crate::selector::FieldSet;
use event::EventApi;
use schemas::{BuiltinSchema, Lazy, generate};

/// A built-in kind with behaviour of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuiltinKind {
    Namespace,
    /// Core `v1` Event.
    Event,
    /// `events.k8s.io/v1` Event: the same objects as [`BuiltinKind::Event`], converted.
    EventsV1Event,
    Lease,
    ClusterRole,
    ClusterRoleBinding,
    Role,
    RoleBinding,
}

static NAMESPACE: Lazy = Lazy::new(generate::<api::core::v1::Namespace>);
static EVENT: Lazy = Lazy::new(generate::<api::core::v1::Event>);
static EVENTS_V1_EVENT: Lazy = Lazy::new(generate::<api::events::v1::Event>);
static LEASE: Lazy = Lazy::new(generate::<api::coordination::v1::Lease>);
static CLUSTER_ROLE: Lazy = Lazy::new(generate::<api::rbac::v1::ClusterRole>);
static CLUSTER_ROLE_BINDING: Lazy = Lazy::new(generate::<api::rbac::v1::ClusterRoleBinding>);
static ROLE: Lazy = Lazy::new(generate::<api::rbac::v1::Role>);
static ROLE_BINDING: Lazy = Lazy::new(generate::<api::rbac::v1::RoleBinding>);
#[allow(dead_code)]
static CRD: Lazy = Lazy::new(generate::<CustomResourceDefinition>);

impl BuiltinKind {
    /// The kind's OpenAPI schema (generated on first use, once per process).
    pub fn schema(self) -> Arc<BuiltinSchema> {
        match self {
            BuiltinKind::Namespace => NAMESPACE.get(),
            BuiltinKind::Event => EVENT.get(),
            BuiltinKind::EventsV1Event => EVENTS_V1_EVENT.get(),
            BuiltinKind::Lease => LEASE.get(),
            BuiltinKind::ClusterRole => CLUSTER_ROLE.get(),
            BuiltinKind::ClusterRoleBinding => CLUSTER_ROLE_BINDING.get(),
            BuiltinKind::Role => ROLE.get(),
            BuiltinKind::RoleBinding => ROLE_BINDING.get(),
        }
    }

    /// Where the kind's objects are stored, when another kind's store holds them.
    pub fn storage(self) -> Option<ResourceKey> {
        match self {
            BuiltinKind::EventsV1Event => Some(ResourceKey::new("", "events")),
            _ => None,
        }
    }

    /// An object written in this kind's version, in the shape it is stored in.
    pub fn to_storage(self, obj: Value) -> Value {
        match self {
            BuiltinKind::Event => event::core_normalized(&obj),
            BuiltinKind::EventsV1Event => event::from_events_v1(&obj),
            _ => obj,
        }
    }

    /// A stored object as this kind's version presents it.
    pub fn present(self, obj: &Value) -> Cow<'_, Value> {
        match self {
            BuiltinKind::EventsV1Event => Cow::Owned(event::to_events_v1(obj)),
            _ => Cow::Borrowed(obj),
        }
    }

    /// Whether the apiserver validates the kind's required fields as its schema marks them. An
    /// Event's schema marks fields required that its validation does not (a core Event needs no
    /// `eventTime`); its own checks below are the whole of it.
    pub fn schema_required_fields(self) -> bool {
        !matches!(self, BuiltinKind::Event | BuiltinKind::EventsV1Event)
    }

    /// The kind's own validation of a create (`old` is `None`) or an update, on the stored shape.
    pub fn validate(self, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
        let api = match self {
            BuiltinKind::Event => EventApi::Core,
            BuiltinKind::EventsV1Event => EventApi::EventsV1,
            BuiltinKind::Lease => return lease::validate(obj),
            _ => return vec![],
        };
        match old {
            None => event::validate_create(obj, api),
            Some(old) => event::validate_update(obj, old, api),
        }
    }

    /// The field labels a list or watch of the kind may select on.
    pub fn field_set(self) -> FieldSet {
        match self {
            BuiltinKind::Event => FieldSet {
                label: event::core_label,
                value: event::field_value,
            },
            BuiltinKind::EventsV1Event => FieldSet {
                label: event::events_v1_label,
                value: event::field_value,
            },
            _ => crate::selector::METADATA_FIELDS,
        }
    }
}
