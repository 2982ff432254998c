//! Refusals in the shapes IPAM's clients match on: the apimachinery `Status` forms (Invalid,
//! Conflict, Forbidden) and the IPAM taxonomy, whose reason travels in `details.causes[].reason`
//! (Go's `StatusCause.Type`), never in `status.reason`.

use egress_api::ipam::{GROUP, reasons};
use kube::core::Status;
use kube::core::response::{StatusCause, StatusDetails, StatusSummary};
use serde_json::Value;

pub(crate) type Refusal = Box<Status>;
pub(crate) type Result<T> = std::result::Result<T, Refusal>;

fn status(code: u16, reason: &str, message: String, details: Option<StatusDetails>) -> Refusal {
    Box::new(Status {
        status: Some(StatusSummary::Failure),
        code,
        message,
        metadata: None,
        reason: reason.to_string(),
        details,
    })
}

fn details(name: &str, kind: &str, causes: Vec<StatusCause>) -> StatusDetails {
    StatusDetails {
        name: name.to_string(),
        group: GROUP.to_string(),
        kind: kind.to_string(),
        uid: String::new(),
        causes,
        retry_after_seconds: 0,
    }
}

fn cause(reason: &str, message: impl Into<String>, field: &str) -> StatusCause {
    StatusCause {
        reason: reason.to_string(),
        message: message.into(),
        field: field.to_string(),
    }
}

/// One field error of a 422, in apimachinery's vocabulary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FieldError {
    pub field: String,
    kind: FieldErrorKind,
    pub detail: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FieldErrorKind {
    Required,
    Invalid,
    Forbidden,
    NotSupported,
}

impl FieldErrorKind {
    fn cause_reason(self) -> &'static str {
        match self {
            Self::Required => "FieldValueRequired",
            Self::Invalid => "FieldValueInvalid",
            Self::Forbidden => "FieldValueForbidden",
            Self::NotSupported => "FieldValueNotSupported",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Required => "Required value",
            Self::Invalid => "Invalid value",
            Self::Forbidden => "Forbidden",
            Self::NotSupported => "Unsupported value",
        }
    }
}

impl FieldError {
    fn new(kind: FieldErrorKind, field: &str, detail: impl Into<String>) -> Self {
        Self {
            field: field.to_string(),
            kind,
            detail: detail.into(),
        }
    }
    pub fn required(field: &str, detail: impl Into<String>) -> Self {
        Self::new(FieldErrorKind::Required, field, detail)
    }
    pub fn invalid(field: &str, detail: impl Into<String>) -> Self {
        Self::new(FieldErrorKind::Invalid, field, detail)
    }
    pub fn forbidden(field: &str, detail: impl Into<String>) -> Self {
        Self::new(FieldErrorKind::Forbidden, field, detail)
    }
    pub fn not_supported(field: &str, detail: impl Into<String>) -> Self {
        Self::new(FieldErrorKind::NotSupported, field, detail)
    }
    /// An update that changed `spec.<field>`, which is fixed at creation for the reason `why`.
    pub fn immutable(field: &str, why: &str) -> Self {
        Self::forbidden(
            &format!("spec.{field}"),
            format!("spec.{field} is immutable: {why}"),
        )
    }
    /// An [`immutable`](Self::immutable) error for each `(field, why)` of a spec whose value an
    /// update changed from `was` to `now`: both specs as their typed form serialises, so that a
    /// field left out and one set to its empty value read alike.
    pub fn immutables<'a>(
        was: &Value,
        now: &Value,
        fields: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Vec<Self> {
        fields
            .into_iter()
            .filter(|(field, _)| was.get(field) != now.get(field))
            .map(|(field, why)| Self::immutable(field, why))
            .collect()
    }
    /// The `field: Label: detail` text apimachinery puts in the message and in the cause.
    fn render(&self) -> String {
        format!("{}: {}: {}", self.field, self.kind.label(), self.detail)
    }
}

/// 422 Invalid, as `apierrors.NewInvalid` builds it (kind is the Kind, e.g. `IPPool`).
pub(crate) fn invalid(kind: &str, name: &str, errors: Vec<FieldError>) -> Refusal {
    let rendered: Vec<String> = errors.iter().map(FieldError::render).collect();
    let list = if rendered.len() == 1 {
        rendered[0].clone()
    } else {
        format!("[{}]", rendered.join(", "))
    };
    let causes = errors
        .iter()
        .map(|e| {
            cause(
                e.kind.cause_reason(),
                format!("{}: {}", e.kind.label(), e.detail),
                &e.field,
            )
        })
        .collect();
    status(
        422,
        "Invalid",
        format!("{kind}.{GROUP} \"{name}\" is invalid: {list}"),
        Some(details(name, kind, causes)),
    )
}

/// Refuses a request when any field error was collected.
pub(crate) fn check(kind: &str, name: &str, errors: Vec<FieldError>) -> Result<()> {
    if errors.is_empty() {
        Ok(())
    } else {
        Err(invalid(kind, name, errors))
    }
}

/// 409 Conflict, as `apierrors.NewConflict` builds it (kind is the plural resource).
pub(crate) fn conflict(plural: &str, name: &str, msg: &str, causes: Vec<StatusCause>) -> Refusal {
    status(
        409,
        "Conflict",
        format!("Operation cannot be fulfilled on {plural}.{GROUP} \"{name}\": {msg}"),
        Some(details(name, plural, causes)),
    )
}

/// 409 AlreadyExists, as `apierrors.NewAlreadyExists` builds it.
pub(crate) fn already_exists(plural: &str, name: &str) -> Refusal {
    status(
        409,
        "AlreadyExists",
        format!("{plural}.{GROUP} \"{name}\" already exists"),
        Some(details(name, plural, Vec::new())),
    )
}

/// 403 Forbidden, as `apierrors.NewForbidden` builds it.
pub(crate) fn forbidden(plural: &str, name: &str, msg: &str) -> Refusal {
    let message = if name.is_empty() {
        format!("{plural}.{GROUP} is forbidden: {msg}")
    } else {
        format!("{plural}.{GROUP} \"{name}\" is forbidden: {msg}")
    };
    status(
        403,
        "Forbidden",
        message,
        Some(details(name, plural, Vec::new())),
    )
}

pub(crate) fn method_not_allowed(plural: &str, msg: &str) -> Refusal {
    status(
        405,
        "MethodNotAllowed",
        msg.to_string(),
        Some(details("", plural, Vec::new())),
    )
}

pub(crate) fn internal(msg: String) -> Refusal {
    status(
        500,
        "InternalError",
        format!("Internal error occurred: {msg}"),
        None,
    )
}

/// A plain 400 with no IPAM reason, for refusals the taxonomy has no type for.
pub(crate) fn bad_request(msg: String) -> Refusal {
    status(400, "BadRequest", msg, None)
}

/// A 400 carrying one IPAM reason whose cause message repeats the refusal.
fn ipam_bad_request(reason: &str, msg: String) -> Refusal {
    let mut d = details("", "", vec![cause(reason, msg.clone(), "")]);
    // The taxonomy's 400s concern the request, not one named object.
    d.group = String::new();
    status(400, "BadRequest", msg, Some(d))
}

pub(crate) fn class_not_found(class: &str) -> Refusal {
    ipam_bad_request(
        reasons::CLASS_NOT_FOUND,
        format!("ipam: class not found: \"{class}\""),
    )
}

/// ClassNotFound in words of its own (a reference whose class is missing).
pub(crate) fn class_not_found_as(msg: String) -> Refusal {
    ipam_bad_request(reasons::CLASS_NOT_FOUND, msg)
}

pub(crate) fn no_default_class(family: &str) -> Refusal {
    ipam_bad_request(
        reasons::NO_DEFAULT_CLASS,
        format!("ipam: no default class for address family: {family}"),
    )
}

pub(crate) fn no_offering_pool(msg: String) -> Refusal {
    ipam_bad_request(reasons::NO_OFFERING_POOL, msg)
}

pub(crate) fn prefix_length_rejected(msg: String) -> Refusal {
    ipam_bad_request(reasons::PREFIX_LENGTH_REJECTED, msg)
}

pub(crate) fn no_project_scope(plural: &str) -> Refusal {
    ipam_bad_request(
        reasons::NO_PROJECT_SCOPE,
        format!(
            "ipam: a write to {plural}.{GROUP} must be scoped to a project \
             (iam.miloapis.com/parent-name); this request carries none"
        ),
    )
}

/// 400 with one `ScopeRolesMissing` cause per role, each naming `spec.scope.<role>`.
pub(crate) fn scope_roles_missing(roles: &[String], required_by: &str) -> Refusal {
    let quoted: Vec<String> = roles.iter().map(|r| format!("\"{r}\"")).collect();
    let noun = if roles.len() == 1 { "role" } else { "roles" };
    let msg = format!(
        "scope is missing {noun} {} required by {required_by}",
        quoted.join(", ")
    );
    let causes = roles
        .iter()
        .map(|r| {
            cause(
                reasons::SCOPE_ROLES_MISSING,
                format!("scope is missing role \"{r}\" required by {required_by}"),
                &format!("spec.scope.{r}"),
            )
        })
        .collect();
    let mut d = details("", "", causes);
    d.group = String::new();
    status(400, "BadRequest", msg, Some(d))
}

/// 507 for the claim's own pool: names the pool so a client can say which one is full.
pub(crate) fn exhausted(pool: &str, detail: &str) -> Refusal {
    let msg = format!("IPPool \"{pool}\" is exhausted: {detail}");
    let causes = vec![cause(reasons::EXHAUSTED, msg.clone(), "")];
    status(
        507,
        "InsufficientStorage",
        msg,
        Some(details(pool, "ippools", causes)),
    )
}

/// 507 for an ancestor that ran out while provisioning the cascade; the taxonomy leaves the
/// pool name out here because the claimant never named (or could name) that pool.
pub(crate) fn ancestor_exhausted(pool: &str, detail: &str) -> Refusal {
    let msg = format!(
        "IPPool \"{pool}\" is exhausted while provisioning a pool for this claim: {detail}"
    );
    let causes = vec![cause(reasons::EXHAUSTED, msg.clone(), "")];
    status(
        507,
        "InsufficientStorage",
        msg,
        Some(details("", "ippools", causes)),
    )
}

pub(crate) fn claim_exists(claim: &str, detail: &str) -> Refusal {
    conflict(
        "ipclaims",
        claim,
        detail,
        vec![cause(reasons::CLAIM_EXISTS, detail, "")],
    )
}

/// The G1b refusal of a claim whose identity a retained allocation holds; the cause message is
/// the allocation name because that is what a client adopts.
pub(crate) fn allocation_retained(claim: &str, allocation: &str) -> Refusal {
    let msg = format!(
        "an allocation under this identity already exists: IPAllocation \"{allocation}\", \
         retained by an earlier claim of the same name; delete it to reuse the name"
    );
    conflict(
        "ipclaims",
        claim,
        &msg,
        vec![cause(reasons::ALLOCATION_RETAINED, allocation, "")],
    )
}
