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

/// What the cell's RBAC denied (a 403), in the apiserver's words (`User "..." cannot update
/// resource "egressshards" in API group ...`); `None` for anything else.
pub fn forbidden_message(err: &kube::Error) -> Option<String> {
    match err {
        kube::Error::Api(s) if s.code == 403 || s.reason == "Forbidden" => Some(s.message.clone()),
        _ => None,
    }
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

/// Why no answer arrived, in one word an operator can act on: `certificate` (the server's
/// certificate was not trusted, or ours refused), `dns` (the name did not resolve), `refused`
/// (nothing listens), `timeout`, `reset` (the connection was cut), `too-large` (an answer past
/// the size limit), or `transport` for anything else. `None` when the server answered.
pub fn transport_cause(err: &kube::Error) -> Option<&'static str> {
    if answered(err) {
        return None;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    let mut text = String::new();
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            match io.kind() {
                std::io::ErrorKind::ConnectionRefused => return Some("refused"),
                std::io::ErrorKind::TimedOut => return Some("timeout"),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted => {
                    return Some("reset");
                }
                _ => {}
            }
        }
        text.push_str(&e.to_string().to_ascii_lowercase());
        text.push('\n');
        source = e.source();
    }
    let has = |words: &[&str]| words.iter().any(|w| text.contains(w));
    Some(if has(&["larger than"]) {
        "too-large"
    } else if has(&[
        "certificate",
        "unknownissuer",
        "tls handshake",
        "invalid peer",
        "badsignature",
    ]) {
        "certificate"
    } else if has(&[
        "dns error",
        "failed to lookup",
        "name or service not known",
        "no such host",
    ]) {
        "dns"
    } else if has(&["connection refused"]) {
        "refused"
    } else if has(&["timed out", "no answer from", "deadline"]) {
        "timeout"
    } else if has(&[
        "connection reset",
        "connection closed",
        "broken pipe",
        "incomplete message",
    ]) {
        "reset"
    } else {
        "transport"
    })
}

/// Decodes a Status body the way kube does when it answers a request with an error.
#[cfg(test)]
pub(crate) fn wire(json: &str) -> kube::Error {
    let status: kube::core::Status = serde_json::from_str(json).expect("a Status body");
    kube::Error::Api(Box::new(status))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn transport_causes_are_named_from_the_error_chain() {
        let service = |msg: &str| kube::Error::Service(msg.to_string().into());
        assert_eq!(transport_cause(&wire(r#"{"code":500}"#)), None);
        assert_eq!(
            transport_cause(&service("no answer from IPAM within 30s")),
            Some("timeout")
        );
        assert_eq!(
            transport_cause(&service(
                "client error (Connect): invalid peer certificate: UnknownIssuer"
            )),
            Some("certificate")
        );
        assert_eq!(
            transport_cause(&service(
                "client error (Connect): dns error: failed to lookup address information"
            )),
            Some("dns")
        );
        let refused = kube::Error::Service(Box::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )));
        assert_eq!(transport_cause(&refused), Some("refused"));
        assert_eq!(
            transport_cause(&service(
                "the answer was larger than 1048576 bytes and was not read"
            )),
            Some("too-large")
        );
        assert_eq!(
            transport_cause(&service("something else")),
            Some("transport")
        );
    }

    #[test]
    fn transport_errors_have_code_zero_and_no_answer() {
        let err = kube::Error::LinesCodecMaxLineLengthExceeded;
        assert_eq!(status_code(&err), 0);
        assert!(!answered(&err));
        assert!(answered(&wire(r#"{"code":500}"#)));
    }
}
