//! Reading a kube error the way both planes answer.
//!
//! kube's own `is_*` helpers match on `reason` only, and a gateway's non-JSON answer arrives with
//! a made-up reason, so the HTTP `code` is the fallback everywhere.

/// NotFound, by reason or by code.
pub fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.reason == "NotFound" || s.code == 404)
}

/// A resourceVersion, precondition or name conflict, by reason or by code.
pub fn is_conflict(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.reason == "Conflict" || s.code == 409)
}

/// A create that found the name taken.
pub fn is_already_exists(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.reason == "AlreadyExists")
}

/// A refused credential (401) or a denied request (403), by reason or by code.
pub fn is_unauthorized(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s)
        if matches!(s.reason.as_str(), "Unauthorized" | "Forbidden") || matches!(s.code, 401 | 403))
}

/// The write-once rules (or any validation) refused the object: retrying cannot help.
pub fn is_invalid(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 422 || s.reason == "Invalid")
}

/// The HTTP code of an API error, or 0 when no answer arrived.
pub fn status_code(err: &kube::Error) -> u16 {
    match err {
        kube::Error::Api(s) => s.code,
        _ => 0,
    }
}

/// Whether the server answered at all (any HTTP status), as opposed to a connection that failed,
/// timed out or was cut: only an answer says anything about the request's outcome.
pub fn answered(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(_))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn wire(json: &str) -> kube::Error {
        let status: Status = serde_json::from_str(json).expect("a Status body");
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn codes_stand_in_for_missing_reasons() {
        assert!(is_not_found(&wire(r#"{"code":404}"#)));
        assert!(is_not_found(&wire(
            r#"{"code":404,"reason":"Failed to parse error data","message":"404 page not found"}"#
        )));
        assert!(is_conflict(&wire(r#"{"code":409}"#)));
        assert!(is_unauthorized(&wire(r#"{"code":401}"#)));
        assert!(is_unauthorized(&wire(
            r#"{"code":403,"reason":"Forbidden"}"#
        )));
        assert!(is_invalid(&wire(r#"{"code":422}"#)));
        assert!(is_already_exists(&wire(
            r#"{"code":409,"reason":"AlreadyExists"}"#
        )));
        assert!(!is_already_exists(&wire(
            r#"{"code":409,"reason":"Conflict"}"#
        )));
    }

    #[test]
    fn transport_errors_have_code_zero_and_no_answer() {
        let err = kube::Error::LinesCodecMaxLineLengthExceeded;
        assert_eq!(status_code(&err), 0);
        assert!(!answered(&err));
        assert!(answered(&wire(r#"{"code":500}"#)));
    }
}
