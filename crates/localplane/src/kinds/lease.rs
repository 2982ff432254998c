//! Leases, validated as the apiserver's coordination validation does. Times that do not parse
//! never get here: the decoder refuses them first.

use serde_json::{Value, json};

use crate::error::FieldError;

/// The strategies `spec.strategy` may name.
const STRATEGIES: &[&str] = &["OldestEmulationVersion"];

pub fn validate(lease: &Value) -> Vec<FieldError> {
    let mut errs = vec![];
    let Some(spec) = lease.get("spec") else {
        return errs;
    };
    if let Some(d) = spec.get("leaseDurationSeconds").and_then(Value::as_i64)
        && d <= 0
    {
        errs.push(FieldError::invalid(
            "spec.leaseDurationSeconds",
            &json!(d),
            "must be greater than 0",
        ));
    }
    if let Some(t) = spec.get("leaseTransitions").and_then(Value::as_i64)
        && t < 0
    {
        errs.push(FieldError::invalid(
            "spec.leaseTransitions",
            &json!(t),
            "must be greater than or equal to 0",
        ));
    }
    let strategy = spec.get("strategy").and_then(Value::as_str);
    // A strategy with a `/` is someone else's to define; one without must be Kubernetes'.
    if let Some(st) = strategy
        && !st.contains('/')
        && !STRATEGIES.contains(&st)
    {
        errs.push(FieldError {
            kind: crate::error::FieldErrorKind::NotSupported,
            field: "spec.strategy".into(),
            value: Some(format!("{st:?}")),
            detail: "supported values: \"OldestEmulationVersion\"".into(),
        });
    }
    let preferred = spec
        .get("preferredHolder")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !preferred.is_empty() && strategy.is_none_or(str::is_empty) {
        errs.push(FieldError::forbidden(
            "spec.preferredHolder",
            "may only be specified if `strategy` is defined",
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_transitions_are_bounded() {
        let msgs: Vec<String> = validate(&json!({"spec": {
            "leaseDurationSeconds": -5, "leaseTransitions": -1, "preferredHolder": "b"}}))
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(
            msgs,
            [
                "spec.leaseDurationSeconds: Invalid value: -5: must be greater than 0",
                "spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0",
                "spec.preferredHolder: Forbidden: may only be specified if `strategy` is defined",
            ]
        );
        assert!(
            validate(&json!({"spec": {"leaseDurationSeconds": 15, "leaseTransitions": 0}}))
                .is_empty()
        );
    }
}
