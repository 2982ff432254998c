//! Classifying an IPAM refusal as it crossed the wire.
//!
//! IPAM puts its reason in `status.details.causes[].type`, not in `reason` or the message. kube's
//! `is_*` helpers match on `reason` only, and a gateway's non-JSON answer arrives with a made-up
//! reason, so the HTTP `code` is the fallback everywhere.

use egress_api::ipam::reasons;
use kube::core::Status;

/// What an IPAM error means for the claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IpamReason {
    /// A known IPAM refusal (`Exhausted`, `ClassNotFound`, …), other than a retained allocation.
    Refused(&'static str),
    /// The claim's identity is held by a retained IPAllocation, named here.
    AllocationRetained(String),
    /// The object does not exist.
    NotFound,
    /// The name is already taken (an older or newer claim, or a raced writer).
    AlreadyExists,
    /// The precondition (resourceVersion) did not hold.
    Conflict,
    /// The credential was not accepted (401) or not allowed (403).
    Unauthorized,
    /// Anything else: a 500, a connection error, an unknown cause type.
    Unknown,
}

impl IpamReason {
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
    match (status.reason.as_str(), status.code) {
        ("NotFound", _) | (_, 404) => IpamReason::NotFound,
        ("AlreadyExists", _) => IpamReason::AlreadyExists,
        ("Conflict", _) | (_, 409) => IpamReason::Conflict,
        ("Unauthorized" | "Forbidden", _) | (_, 401 | 403) => IpamReason::Unauthorized,
        _ => IpamReason::Unknown,
    }
}

/// NotFound by reason or by code (see the module doc).
pub fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.reason == "NotFound" || s.code == 404)
}

/// A resourceVersion or name conflict, by reason or by code.
pub fn is_conflict(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.reason == "Conflict" || s.code == 409)
}

/// A refused credential, by reason or by code.
pub fn is_unauthorized(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if matches!(s.reason.as_str(), "Unauthorized" | "Forbidden") || matches!(s.code, 401 | 403))
}

/// The HTTP code of an API error, or 0 when no answer arrived.
pub fn status_code(err: &kube::Error) -> u16 {
    match err {
        kube::Error::Api(s) => s.code,
        _ => 0,
    }
}

/// IPAM's own words for a refusal, for events and errors.
pub fn message(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(s) if !s.message.is_empty() => s.message.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes a body the way kube does when it answers a request with an error.
    fn wire(json: &str) -> kube::Error {
        let status: Status = serde_json::from_str(json).expect("a Status body");
        kube::Error::Api(Box::new(status))
    }

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
        assert!(is_not_found(&wire(r#"{"code":404}"#)));
        assert!(is_not_found(&wire(
            r#"{"code":404,"reason":"Failed to parse error data","message":"404 page not found"}"#
        )));
        assert_eq!(classify(&wire(r#"{"code":409}"#)), IpamReason::Conflict);
        assert!(is_conflict(&wire(r#"{"code":409}"#)));
        assert_eq!(classify(&wire(r#"{"code":401}"#)), IpamReason::Unauthorized);
        assert_eq!(
            classify(&wire(r#"{"code":403,"reason":"Forbidden"}"#)),
            IpamReason::Unauthorized
        );
        assert!(is_unauthorized(&wire(r#"{"code":401}"#)));
        assert_eq!(
            classify(&wire(r#"{"code":409,"reason":"AlreadyExists"}"#)),
            IpamReason::AlreadyExists
        );
        assert_eq!(classify(&wire(r#"{"code":503}"#)), IpamReason::Unknown);
    }

    #[test]
    fn transport_errors_are_unknown_with_code_zero() {
        let err = kube::Error::LinesCodecMaxLineLengthExceeded;
        assert_eq!(classify(&err), IpamReason::Unknown);
        assert_eq!(status_code(&err), 0);
    }

    #[test]
    fn the_message_is_ipams_own() {
        let err = wire(r#"{"code":400,"message":"class \"x\" not found"}"#);
        assert_eq!(message(&err), "class \"x\" not found");
    }
}
