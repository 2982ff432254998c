//! `metav1.Status` error bodies, shaped like apimachinery's `errors.New*` constructors.
//!
//! kube 5 classifies errors on `reason` only, so every constructor here sets the reason the real
//! apiserver would, and the messages follow apimachinery's wording so that tests and humans reading
//! kubectl output see what they would see against a real cluster.

use kube::core::Status;
use kube::core::response::{StatusCause, StatusDetails, StatusSummary};
use serde_json::{Value, json};

/// A request failure, answered with a `metav1.Status` body whose `code` is the HTTP status.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError(pub Status);

/// The group-qualified resource name apimachinery prints (`egressshards.network.datumapis.com`,
/// or just `namespaces` for the core group).
pub fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

impl ApiError {
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError(Status {
            status: Some(StatusSummary::Failure),
            code,
            message: message.into(),
            metadata: None,
            reason: reason.to_string(),
            details: None,
        })
    }

    /// The same refusal with `details` naming `name`, `group` and `kind` (all empty: `{}`).
    pub fn with_details(self, name: &str, group: &str, kind: &str) -> Self {
        self.details(name, group, kind)
    }

    fn details(mut self, name: &str, group: &str, kind: &str) -> Self {
        self.0.details = Some(StatusDetails {
            name: name.to_string(),
            group: group.to_string(),
            kind: kind.to_string(),
            uid: String::new(),
            causes: vec![],
            retry_after_seconds: 0,
        });
        self
    }

    pub fn not_found(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(group, plural)),
        )
        .details(name, group, plural)
    }

    /// Namespace-lifecycle admission's refusal: clients tell it apart from a missing object by
    /// `details.kind == "namespaces"`.
    pub fn namespace_not_found(ns: &str) -> Self {
        Self::not_found("", "namespaces", ns)
    }

    pub fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(group, plural)),
        )
        .details(name, group, plural)
    }

    pub fn conflict(group: &str, plural: &str, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified(group, plural)
            ),
        )
        .details(name, group, plural)
    }

    pub fn stale(group: &str, plural: &str, name: &str) -> Self {
        Self::conflict(
            group,
            plural,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 with one cause per field error; `kind` is the Kind (not the plural), as apimachinery's
    /// `NewInvalid` takes a GroupKind.
    pub fn invalid(group: &str, kind: &str, name: &str, errs: &[FieldError]) -> Self {
        let qualified_kind = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let rendered: Vec<String> = errs.iter().map(FieldError::to_string).collect();
        let joined = if rendered.len() == 1 {
            rendered[0].clone()
        } else {
            format!("[{}]", rendered.join(", "))
        };
        let mut e = Self::new(
            422,
            "Invalid",
            format!("{qualified_kind} \"{name}\" is invalid: {joined}"),
        )
        .details(name, group, kind);
        if let Some(d) = e.0.details.as_mut() {
            d.causes = errs
                .iter()
                .map(|f| StatusCause {
                    reason: f.kind.reason().to_string(),
                    message: f.body(),
                    field: f.field.clone(),
                })
                .collect();
        }
        e
    }

    pub fn forbidden(group: &str, plural: &str, name: &str, why: &str) -> Self {
        let what = qualified(group, plural);
        let message = if what.is_empty() {
            // A non-resource request (`/api`, `/healthz`): apimachinery's wording for an empty
            // GroupResource.
            format!("forbidden: {why}")
        } else if name.is_empty() {
            format!("{what} is forbidden: {why}")
        } else {
            format!("{what} \"{name}\" is forbidden: {why}")
        };
        Self::new(403, "Forbidden", message).details(name, group, plural)
    }

    /// What the apiserver answers a strategic merge patch with a list of lists: its patch handler
    /// wraps the library's error in `NewGenericServerResponse(422, ...)`, which keeps only the
    /// code's generic message and an empty `details`.
    pub fn unprocessable_patch() -> Self {
        Self::new(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
        )
        .details("", "", "")
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    /// A body in a media type the endpoint does not take; `accepted` are those it does.
    pub fn unsupported_media_type(accepted: &[&str]) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                accepted.join(", ")
            ),
        )
    }

    /// go-restful's refusal of a body its route does not consume, as the apiserver passes it on:
    /// the HTTP status line as the message, empty details.
    pub fn route_unsupported_media_type() -> Self {
        Self::new(415, "UnsupportedMediaType", "415: Unsupported Media Type")
            .with_details("", "", "")
    }

    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// The reason apimachinery associates with a bare HTTP code (used for injected faults).
    pub fn from_code(code: u16, message: impl Into<String>) -> Self {
        let reason = match code {
            400 => "BadRequest",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "NotFound",
            405 => "MethodNotAllowed",
            409 => "Conflict",
            410 => "Expired",
            422 => "Invalid",
            429 => "TooManyRequests",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "InternalError",
        };
        Self::new(code, reason, message)
    }

    pub fn code(&self) -> u16 {
        self.0.code
    }

    /// The Status as the wire carries it (with `kind`/`apiVersion`, which kube's type omits).
    pub fn to_json(&self) -> Value {
        status_json(&self.0)
    }
}

/// Serialises a Status with the TypeMeta and empty metadata the apiserver always sends.
pub fn status_json(s: &Status) -> Value {
    let mut v = serde_json::to_value(s).unwrap_or_else(|_| json!({}));
    if let Some(m) = v.as_object_mut() {
        m.insert("kind".into(), json!("Status"));
        m.insert("apiVersion".into(), json!("v1"));
        m.entry("metadata").or_insert_with(|| json!({}));
    }
    v
}

impl From<Status> for ApiError {
    fn from(s: Status) -> Self {
        ApiError(s)
    }
}

/// The `field.ErrorType`s this server produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldErrorKind {
    Invalid,
    TypeInvalid,
    Required,
    NotSupported,
    Forbidden,
    TooMany,
    TooLong,
    Duplicate,
}

impl FieldErrorKind {
    pub fn reason(self) -> &'static str {
        match self {
            FieldErrorKind::Invalid => "FieldValueInvalid",
            FieldErrorKind::TypeInvalid => "FieldValueTypeInvalid",
            FieldErrorKind::Required => "FieldValueRequired",
            FieldErrorKind::NotSupported => "FieldValueNotSupported",
            FieldErrorKind::Forbidden => "FieldValueForbidden",
            FieldErrorKind::TooMany => "FieldValueTooMany",
            FieldErrorKind::TooLong => "FieldValueTooLong",
            FieldErrorKind::Duplicate => "FieldValueDuplicate",
        }
    }

    /// The kind a CEL rule's `reason` names (the apiserver accepts exactly these four).
    pub fn from_rule_reason(reason: Option<&str>) -> Self {
        match reason {
            Some("FieldValueForbidden") => FieldErrorKind::Forbidden,
            Some("FieldValueRequired") => FieldErrorKind::Required,
            Some("FieldValueDuplicate") => FieldErrorKind::Duplicate,
            _ => FieldErrorKind::Invalid,
        }
    }
}

/// One `field.Error`: rendered as `<field>: <body>` like apimachinery does.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    pub kind: FieldErrorKind,
    pub field: String,
    /// The offending value, already rendered the way apimachinery prints it (`"x"`, `5`), or
    /// `None` for kinds that print no value.
    pub value: Option<String>,
    pub detail: String,
}

impl FieldError {
    pub fn invalid(field: impl Into<String>, value: &Value, detail: impl Into<String>) -> Self {
        FieldError {
            kind: FieldErrorKind::Invalid,
            field: field.into(),
            value: Some(render_value(value)),
            detail: detail.into(),
        }
    }

    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldError {
            kind: FieldErrorKind::Required,
            field: field.into(),
            value: None,
            detail: detail.into(),
        }
    }

    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldError {
            kind: FieldErrorKind::Forbidden,
            field: field.into(),
            value: None,
            detail: detail.into(),
        }
    }

    /// The message without the field prefix (what a Status cause carries).
    pub fn body(&self) -> String {
        let head = match self.kind {
            FieldErrorKind::Invalid | FieldErrorKind::TypeInvalid => "Invalid value",
            FieldErrorKind::Required => "Required value",
            FieldErrorKind::NotSupported => "Unsupported value",
            FieldErrorKind::Forbidden => "Forbidden",
            FieldErrorKind::TooMany => "Too many",
            FieldErrorKind::TooLong => "Too long",
            FieldErrorKind::Duplicate => "Duplicate value",
        };
        let mut s = head.to_string();
        if let Some(v) = &self.value {
            s.push_str(": ");
            s.push_str(v);
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}", self.body())
        } else {
            write!(f, "{}: {}", self.field, self.body())
        }
    }
}

/// Renders a value like Go's `%#v`/`%q` does in field errors: strings quoted, scalars bare,
/// composites as JSON.
pub fn render_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Null => "null".into(),
        other => other.to_string(),
    }
}
