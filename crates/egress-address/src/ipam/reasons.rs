//! Classifying an IPAM refusal as it crossed the wire.
//!
//! IPAM puts its reason in `status.details.causes[].type`, not in `reason` or the message, and
//! the HTTP `code` stands in where a gateway's answer carries no reason (see
//! [`crate::kube_status`]).

use egress_api::ipam::reasons;
use kube::core::Status;

/// The outcome of a claim refused by the project's quota.
pub const QUOTA_EXCEEDED: &str = "QuotaExceeded";
/// The outcome of a claim refused because its namespace is missing or terminating.
pub const NAMESPACE_REFUSED: &str = "NamespaceRefused";

/// What an IPAM error means for the claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IpamReason {
    /// A known IPAM refusal to allocate (`Exhausted`, `ClassNotFound`, …).
    Refused(&'static str),
    /// The claim's identity is held by a retained IPAllocation, named here.
    AllocationRetained(String),
    /// The object does not exist.
    NotFound,
    /// The name is already taken (`AlreadyExists`, IPAM's `ClaimExists`).
    AlreadyExists,
    /// The precondition (resourceVersion) did not hold.
    Conflict,
    /// The credential was not accepted (401) or not allowed (403).
    Unauthorized,
    /// Anything else: a 500, a connection error, an unknown cause type.
    Unknown,
}

impl IpamReason {
    /// Whether the answer may mean the claim's name is already taken (by our own earlier create
    /// whose answer was lost, by an earlier incarnation, or by someone else), so the claim is
    /// worth reading. An older IPAM answers a duplicate with a bare 500.
    pub fn name_may_be_taken(&self) -> bool {
        matches!(
            self,
            IpamReason::AlreadyExists | IpamReason::Conflict | IpamReason::Unknown
        )
    }

    /// A short, stable label for metrics and events.
    pub fn label(&self) -> &'static str {
        match self {
            IpamReason::Refused(r) => r,
            IpamReason::AllocationRetained(_) => reasons::ALLOCATION_RETAINED,
            IpamReason::NotFound => "NotFound",
            IpamReason::AlreadyExists => "AlreadyExists",
            IpamReason::Conflict => "Conflict",
            IpamReason::Unauthorized => "Unauthorized",
            IpamReason::Unknown => "Unknown",
        }
    }
}

/// What refused a request that IPAM answered 401 or 403.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The credential, or what it is granted: nothing IPAM is asked will work until an operator
    /// fixes it.
    Credential,
    /// The project's quota (Milo's quota admission): the next claim may pass once a release
    /// frees quota, and releases must go on.
    Quota,
    /// The claim namespace does not exist or is being terminated (IPAM's namespace check on
    /// create).
    Namespace,
}

impl Refusal {
    /// The label of `egress_address_ipam_refusals_total` and of a claim's outcome.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Credential => "credential",
            Refusal::Quota => "quota",
            Refusal::Namespace => "namespace",
        }
    }
}

/// Tells a 401/403 apart by what the Status says (reason, message, causes); `None` for anything
/// else. A 401 is always the credential. Milo's quota admission answers `... is forbidden:
/// Insufficient quota resources available...` (a cause `QuotaExceeded` in its documented form,
/// `exceeded quota` in Kubernetes' own); IPAM's namespace check, `unable to create new content in
/// namespace ...` or `namespace ... does not exist`. Anything else forbidden is the credential or
/// its grant (RBAC's `cannot create resource`, a class the grant may not use).
pub fn refusal(status: &Status) -> Option<Refusal> {
    let forbidden = status.code == 403 || (status.code == 0 && status.reason == "Forbidden");
    if status.code == 401 || (status.code == 0 && status.reason == "Unauthorized") {
        return Some(Refusal::Credential);
    }
    if !forbidden {
        return None;
    }
    let message = status.message.to_ascii_lowercase();
    let quota_cause = status
        .details
        .as_ref()
        .is_some_and(|d| d.causes.iter().any(|c| c.reason == "QuotaExceeded"));
    if quota_cause || message.contains("insufficient quota") || message.contains("exceeded quota") {
        return Some(Refusal::Quota);
    }
    let namespace = message.contains("unable to create new content in namespace")
        || (message.contains(" namespace ") && message.contains("does not exist"));
    if namespace {
        return Some(Refusal::Namespace);
    }
    Some(Refusal::Credential)
}

/// Classifies any kube error; only `Error::Api` carries a reason.
pub fn classify(err: &kube::Error) -> IpamReason {
    match err {
        kube::Error::Api(status) => classify_status(status),
        _ => IpamReason::Unknown,
    }
}

/// Classifies a `metav1.Status` body.
pub fn classify_status(status: &Status) -> IpamReason {
    let causes = status
        .details
        .as_ref()
        .map(|d| d.causes.as_slice())
        .unwrap_or_default();
    // A retained allocation is only usable with its name; a cause without one is not adoptable.
    if let Some(cause) = causes
        .iter()
        .find(|c| c.reason == reasons::ALLOCATION_RETAINED && !c.message.is_empty())
    {
        return IpamReason::AllocationRetained(cause.message.clone());
    }
    for cause in causes {
        // A live claim of the same name is the name being taken, not a refusal to allocate.
        if cause.reason == reasons::CLAIM_EXISTS {
            return IpamReason::AlreadyExists;
        }
        if let Some(known) = reasons::ALL
            .iter()
            .find(|r| **r == cause.reason && **r != reasons::ALLOCATION_RETAINED)
        {
            return IpamReason::Refused(known);
        }
    }
    // IPAM versions older than the cause taxonomy still answer exhaustion with 507.
    if status.code == 507 {
        return IpamReason::Refused(reasons::EXHAUSTED);
    }
    match refusal(status) {
        Some(Refusal::Quota) => return IpamReason::Refused(QUOTA_EXCEEDED),
        Some(Refusal::Namespace) => return IpamReason::Refused(NAMESPACE_REFUSED),
        Some(Refusal::Credential) | None => {}
    }
    match (status.reason.as_str(), status.code) {
        ("NotFound", _) | (_, 404) => IpamReason::NotFound,
        ("AlreadyExists", _) => IpamReason::AlreadyExists,
        ("Conflict", _) | (_, 409) => IpamReason::Conflict,
        ("Unauthorized" | "Forbidden", _) | (_, 401 | 403) => IpamReason::Unauthorized,
        _ => IpamReason::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube_status::wire;

    #[test]
    fn a_retained_allocation_yields_its_name() {
        let err = wire(
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
            "message":"Operation cannot be fulfilled on ipclaims.ipam.miloapis.com \"egress-shard-ipv6.ns.s\": the identity is retained",
            "reason":"Conflict","details":{"name":"egress-shard-ipv6.ns.s","group":"ipam.miloapis.com","kind":"ipclaims",
            "causes":[{"reason":"AllocationRetained","message":"alloc-3f2a1b0c9d8e7f60"}]},"code":409}"#,
        );
        assert_eq!(
            classify(&err),
            IpamReason::AllocationRetained("alloc-3f2a1b0c9d8e7f60".into())
        );
    }

    #[test]
    fn a_retained_cause_without_a_name_is_not_adoptable() {
        let err = wire(
            r#"{"status":"Failure","reason":"Conflict","code":409,
            "details":{"causes":[{"reason":"AllocationRetained","message":""}]}}"#,
        );
        assert_eq!(classify(&err), IpamReason::Conflict);
    }

    #[test]
    fn exhaustion_is_read_from_the_cause() {
        let err = wire(
            r#"{"status":"Failure","message":"IPPool \"p\" is exhausted","reason":"InsufficientStorage",
            "details":{"name":"p","group":"ipam.miloapis.com","kind":"ippools","causes":[{"reason":"Exhausted","message":"no space"}]},"code":507}"#,
        );
        assert_eq!(classify(&err), IpamReason::Refused("Exhausted"));
        assert_eq!(classify(&err).label(), "Exhausted");
    }

    #[test]
    fn a_bare_507_is_exhaustion() {
        assert_eq!(
            classify(&wire(r#"{"code":507}"#)),
            IpamReason::Refused("Exhausted")
        );
    }

    #[test]
    fn bad_requests_carry_their_cause() {
        for reason in [
            "ClassNotFound",
            "NoDefaultClass",
            "NoOfferingPool",
            "PrefixLengthRejected",
            "NoProjectScope",
        ] {
            let err = wire(&format!(
                r#"{{"status":"Failure","message":"m","reason":"BadRequest","details":{{"causes":[{{"reason":"{reason}","message":"m"}}]}},"code":400}}"#
            ));
            assert_eq!(classify(&err), IpamReason::Refused(reason), "{reason}");
        }
        let err = wire(
            r#"{"status":"Failure","reason":"BadRequest","code":400,"details":{"causes":[
            {"reason":"ScopeRolesMissing","message":"location","field":"spec.scope.location"}]}}"#,
        );
        assert_eq!(classify(&err), IpamReason::Refused("ScopeRolesMissing"));
    }

    #[test]
    fn a_live_duplicate_is_a_taken_name_not_a_refusal() {
        let err = wire(
            r#"{"status":"Failure","reason":"Conflict","code":409,"details":{"causes":[{"reason":"ClaimExists","message":"m"}]}}"#,
        );
        assert_eq!(classify(&err), IpamReason::AlreadyExists);
        assert!(classify(&err).name_may_be_taken());
        assert!(!IpamReason::Refused("Exhausted").name_may_be_taken());
        assert!(!IpamReason::NotFound.name_may_be_taken());
    }

    #[test]
    fn an_unknown_cause_is_not_guessed() {
        let err = wire(
            r#"{"status":"Failure","reason":"BadRequest","code":400,"details":{"causes":[{"reason":"SomethingNew","message":"m"}]}}"#,
        );
        assert_eq!(classify(&err), IpamReason::Unknown);
    }

    #[test]
    fn a_bare_500_from_an_older_ipam_is_unknown() {
        let err = wire(
            r#"{"status":"Failure","message":"ERROR: duplicate key value violates unique constraint \"ipclaims_pkey\" (SQLSTATE 23505)","reason":"InternalError","code":500}"#,
        );
        assert_eq!(classify(&err), IpamReason::Unknown);
    }

    #[test]
    fn codes_stand_in_for_missing_reasons() {
        assert_eq!(classify(&wire(r#"{"code":404}"#)), IpamReason::NotFound);
        assert_eq!(classify(&wire(r#"{"code":409}"#)), IpamReason::Conflict);
        assert_eq!(classify(&wire(r#"{"code":401}"#)), IpamReason::Unauthorized);
        assert_eq!(
            classify(&wire(r#"{"code":403,"reason":"Forbidden"}"#)),
            IpamReason::Unauthorized
        );
        assert_eq!(
            classify(&wire(r#"{"code":409,"reason":"AlreadyExists"}"#)),
            IpamReason::AlreadyExists
        );
        assert_eq!(classify(&wire(r#"{"code":503}"#)), IpamReason::Unknown);
    }

    #[test]
    fn a_403_is_told_apart_by_what_refused_it() {
        let quota = wire(
            r#"{"status":"Failure","reason":"Forbidden","code":403,
            "message":"ipclaims.ipam.miloapis.com \"c\" is forbidden: Insufficient quota resources available. Review your quota usage and reach out to support if you need additional resources.",
            "details":{"name":"c","group":"ipam.miloapis.com","kind":"ipclaims"}}"#,
        );
        assert_eq!(classify(&quota), IpamReason::Refused("QuotaExceeded"));
        let documented = wire(
            r#"{"status":"Failure","reason":"Forbidden","code":403,"message":"m",
            "details":{"causes":[{"reason":"QuotaExceeded","message":"quota exceeded"}]}}"#,
        );
        assert_eq!(classify(&documented), IpamReason::Refused("QuotaExceeded"));
        for message in [
            "ipclaims.ipam.miloapis.com is forbidden: unable to create new content in namespace default because it is being terminated: an address bound into a terminating namespace would outlive everything that could release it",
            "ipclaims.ipam.miloapis.com is forbidden: namespace default does not exist: an address bound into it would have nothing to collect it",
        ] {
            let err = wire(&format!(
                r#"{{"status":"Failure","reason":"Forbidden","code":403,"message":{}}}"#,
                serde_json::to_string(message).unwrap()
            ));
            assert_eq!(
                classify(&err),
                IpamReason::Refused("NamespaceRefused"),
                "{message}"
            );
        }
        let rbac = wire(
            r#"{"status":"Failure","reason":"Forbidden","code":403,
            "message":"ipclaims.ipam.miloapis.com is forbidden: User \"u\" cannot create resource \"ipclaims\" in API group \"ipam.miloapis.com\" in the namespace \"default\""}"#,
        );
        assert_eq!(classify(&rbac), IpamReason::Unauthorized);
        let kube::Error::Api(s) = &rbac else {
            unreachable!()
        };
        assert_eq!(refusal(s), Some(Refusal::Credential));
        let kube::Error::Api(s) = &quota else {
            unreachable!()
        };
        assert_eq!(refusal(s), Some(Refusal::Quota));
        assert_eq!(
            refusal(&Status {
                code: 401,
                ..Default::default()
            }),
            Some(Refusal::Credential)
        );
        assert_eq!(
            refusal(&Status {
                code: 409,
                ..Default::default()
            }),
            None
        );
    }

    #[test]
    fn transport_errors_are_unknown() {
        let err = kube::Error::LinesCodecMaxLineLengthExceeded;
        assert_eq!(classify(&err), IpamReason::Unknown);
    }
}
