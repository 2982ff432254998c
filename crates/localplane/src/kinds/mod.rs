//! What the apiserver knows about its built-in kinds that a CRD would put in a schema: their
//! OpenAPI schemas (from the Kubernetes API types), how the Go decoder reads them, how a kind
//! served in two groups converts between them (Event), how each is validated, and which field
//! labels select it.

pub mod crd;
pub mod decode;
pub mod event;
pub mod gotime;
pub mod install;
pub mod lease;
pub mod protobuf;
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
    ServiceAccount,
    Secret,
    ConfigMap,
    Service,
    Deployment,
    NetworkPolicy,
    CustomResourceDefinition,
    SelfSubjectAccessReview,
    SelfSubjectRulesReview,
    SubjectAccessReview,
    SelfSubjectReview,
    TokenReview,
}

static NAMESPACE: Lazy = Lazy::new(generate::<api::core::v1::Namespace>);
static EVENT: Lazy = Lazy::new(generate::<api::core::v1::Event>);
static EVENTS_V1_EVENT: Lazy = Lazy::new(generate::<api::events::v1::Event>);
static LEASE: Lazy = Lazy::new(generate::<api::coordination::v1::Lease>);
static CLUSTER_ROLE: Lazy = Lazy::new(generate::<api::rbac::v1::ClusterRole>);
static CLUSTER_ROLE_BINDING: Lazy = Lazy::new(generate::<api::rbac::v1::ClusterRoleBinding>);
static ROLE: Lazy = Lazy::new(generate::<api::rbac::v1::Role>);
static ROLE_BINDING: Lazy = Lazy::new(generate::<api::rbac::v1::RoleBinding>);
static SERVICE_ACCOUNT: Lazy = Lazy::new(generate::<api::core::v1::ServiceAccount>);
static SECRET: Lazy = Lazy::new(generate::<api::core::v1::Secret>);
static CONFIG_MAP: Lazy = Lazy::new(generate::<api::core::v1::ConfigMap>);
static SERVICE: Lazy = Lazy::new(generate::<api::core::v1::Service>);
static DEPLOYMENT: Lazy = Lazy::new(generate::<api::apps::v1::Deployment>);
static NETWORK_POLICY: Lazy = Lazy::new(generate::<api::networking::v1::NetworkPolicy>);
static CRD: Lazy = Lazy::new(generate::<CustomResourceDefinition>);
static SSAR: Lazy = Lazy::new(generate::<api::authorization::v1::SelfSubjectAccessReview>);
static SSRR: Lazy = Lazy::new(generate::<api::authorization::v1::SelfSubjectRulesReview>);
static SAR: Lazy = Lazy::new(generate::<api::authorization::v1::SubjectAccessReview>);
static SSR: Lazy = Lazy::new(generate::<api::authentication::v1::SelfSubjectReview>);
static TR: Lazy = Lazy::new(generate::<api::authentication::v1::TokenReview>);

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
            BuiltinKind::ServiceAccount => SERVICE_ACCOUNT.get(),
            BuiltinKind::Secret => SECRET.get(),
            BuiltinKind::ConfigMap => CONFIG_MAP.get(),
            BuiltinKind::Service => SERVICE.get(),
            BuiltinKind::Deployment => DEPLOYMENT.get(),
            BuiltinKind::NetworkPolicy => NETWORK_POLICY.get(),
            BuiltinKind::CustomResourceDefinition => CRD.get(),
            BuiltinKind::SelfSubjectAccessReview => SSAR.get(),
            BuiltinKind::SelfSubjectRulesReview => SSRR.get(),
            BuiltinKind::SubjectAccessReview => SAR.get(),
            BuiltinKind::SelfSubjectReview => SSR.get(),
            BuiltinKind::TokenReview => TR.get(),
        }
    }

    /// A review: created to ask a question, answered in the response, never stored.
    pub fn is_review(self) -> bool {
        matches!(
            self,
            BuiltinKind::SelfSubjectAccessReview
                | BuiltinKind::SelfSubjectRulesReview
                | BuiltinKind::SubjectAccessReview
                | BuiltinKind::SelfSubjectReview
                | BuiltinKind::TokenReview
        )
    }

    /// Where the kind's objects are stored, when another kind's store holds them.
    pub fn storage(self) -> Option<ResourceKey> {
        match self {
            BuiltinKind::EventsV1Event => Some(ResourceKey::new("", "events")),
            _ => None,
        }
    }

    /// An object written in this kind's version, in the shape it is stored in.
    /// Whether a PUT of an object that is not there creates it (the registry strategy's
    /// `AllowCreateOnUpdate`).
    pub fn creates_on_update(self) -> bool {
        matches!(
            self,
            BuiltinKind::Event
                | BuiltinKind::EventsV1Event
                | BuiltinKind::Lease
                | BuiltinKind::ClusterRole
                | BuiltinKind::ClusterRoleBinding
                | BuiltinKind::Role
                | BuiltinKind::RoleBinding
        )
    }

    pub fn to_storage(self, obj: Value) -> Value {
        match self {
            BuiltinKind::Event => event::core_normalized(&obj),
            BuiltinKind::EventsV1Event => event::from_events_v1(&obj),
            BuiltinKind::Secret => install::secret_to_storage(obj),
            _ => obj,
        }
    }

    /// Fills in what the apiserver defaults (before validation, as its decoder does).
    pub fn apply_defaults(self, obj: &mut Value, old: Option<&Value>) {
        drop_empty_omitempty(obj);
        match self {
            BuiltinKind::Deployment => install::default_deployment(obj),
            BuiltinKind::Service => install::default_service(obj, old),
            _ => {}
        }
    }

    /// A stored object as this kind's version presents it.
    pub fn present(self, obj: &Value) -> Cow<'_, Value> {
        match self {
            BuiltinKind::EventsV1Event => Cow::Owned(event::to_events_v1(obj)),
            _ => Cow::Borrowed(obj),
        }
    }

    /// Whether the apiserver's validation of the kind requires what its schema marks required.
    /// For Events and Deployments it does not (a core Event needs no `eventTime`, an empty
    /// Deployment spec is refused field by field), and their own checks are the whole of it.
    pub fn schema_required_fields(self) -> bool {
        !matches!(
            self,
            BuiltinKind::Event | BuiltinKind::EventsV1Event | BuiltinKind::Deployment
        )
    }

    /// The kind's own validation of a create (`old` is `None`) or an update, on the stored shape.
    pub fn validate(self, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
        let api = match self {
            BuiltinKind::Event => EventApi::Core,
            BuiltinKind::EventsV1Event => EventApi::EventsV1,
            BuiltinKind::Lease => return lease::validate(obj),
            BuiltinKind::Deployment => return install::validate_deployment(obj),
            BuiltinKind::Service => return install::validate_service(obj),
            BuiltinKind::CustomResourceDefinition => return crd::validate(obj),
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

/// A built-in object passes through its Go type, whose `omitempty` maps and lists are dropped
/// when empty: `data: {}` on a ConfigMap, `labels: {}`, `finalizers: []` are not stored, as the
/// real apiserver showed. (Custom resources are stored as sent.)
fn drop_empty_omitempty(obj: &mut Value) {
    let is_empty = |v: &Value| {
        v.as_object().is_some_and(|m| m.is_empty()) || v.as_array().is_some_and(|a| a.is_empty())
    };
    if let Some(o) = obj.as_object_mut() {
        o.retain(|k, v| {
            !(matches!(k.as_str(), "data" | "binaryData" | "stringData") && is_empty(v))
        });
    }
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.retain(|k, v| {
            !(matches!(
                k.as_str(),
                "labels" | "annotations" | "finalizers" | "ownerReferences"
            ) && is_empty(v))
        });
    }
}
