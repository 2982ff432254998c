//! What the verbs work with: a request resolved to the kind it addresses ([`Call`]), the faults
//! that strike once it is applied ([`LateFaults`]), and how its answer is counted ([`Count`],
//! [`Reply`]). Both the one-write verbs (`resource.rs`) and the DELETE in two writes
//! (`release.rs`) answer through these.

use std::sync::Arc;
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::impersonate::Subject;
use super::listen::Silence;
use super::respond::Shape;
use super::routes::{Query, ResourcePath, Verb};
use crate::error::ApiError;
use crate::faults::{Failure, FaultOutcome};
use crate::hooks::Caller;
use crate::metrics::InFlight;
use crate::plane::{DeleteOpts, Deletion, FieldValidation, Plane, Target, WriteOpts};
use crate::resources::ResourceDef;
use crate::shared::Shared;

/// A request resolved to the kind it addresses.
pub(super) struct Call {
    /// Who the tokens are (a TokenReview asks).
    pub shared: Arc<Shared>,
    pub plane: Plane,
    pub def: Arc<ResourceDef>,
    pub caller: Caller,
    /// Whom the request acts as (the reviews answer about them).
    pub subject: Subject,
    pub rbac: bool,
    pub verb: Verb,
    pub path: ResourcePath,
    pub query: Query,
    pub shape: Shape,
    pub content_type: String,
    /// The client's User-Agent (the default field manager).
    pub user_agent: String,
    /// Addresses the `/status` subresource.
    pub status: bool,
    /// Applied after a commit delay rather than as it arrived.
    pub late_commit: bool,
}

impl Call {
    pub fn target(&self) -> Target<'_> {
        Target {
            def: &self.def,
            version: &self.path.version,
            ns: self.path.namespace.as_deref(),
            status: self.status,
        }
    }

    pub fn name(&self) -> &str {
        self.path.name.as_deref().unwrap_or("")
    }

    /// The `DeleteOptions` of a DELETE, with whether it lands late.
    pub fn delete_opts(&self, body: &[u8]) -> Result<DeleteOpts, ApiError> {
        let mut opts = delete_opts(body, self.write_opts().dry_run)?;
        opts.late_commit = self.late_commit;
        Ok(opts)
    }

    /// The DELETE this call makes, with its `opts`.
    pub fn deletion<'a>(&'a self, opts: &'a DeleteOpts) -> Deletion<'a> {
        Deletion {
            def: &self.def,
            ns: self.path.namespace.as_deref(),
            name: self.name(),
            opts,
            caller: &self.caller,
        }
    }

    pub fn write_opts(&self) -> WriteOpts {
        WriteOpts {
            dry_run: self.query.get("dryRun").is_some_and(|d| d == "All"),
            field_validation: match self.query.get("fieldValidation") {
                Some("Strict") => FieldValidation::Strict,
                Some("Ignore") => FieldValidation::Ignore,
                _ => FieldValidation::Warn,
            },
            field_manager: self.query.get("fieldManager").map(str::to_string),
            force: self.query.get("force").map(str::to_string),
            user_agent: self.user_agent.clone(),
            ..Default::default()
        }
    }
}

/// The `DeleteOptions` body, if any: preconditions and dry run.
fn delete_opts(body: &[u8], dry_run: bool) -> Result<DeleteOpts, ApiError> {
    let mut opts = DeleteOpts {
        dry_run,
        ..Default::default()
    };
    if body.is_empty() {
        return Ok(opts);
    }
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?;
    let precondition = |field: &str| {
        v.pointer(&format!("/preconditions/{field}"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    opts.uid = precondition("uid");
    opts.resource_version = precondition("resourceVersion");
    opts.propagation_finalizer = match v.get("propagationPolicy").and_then(Value::as_str) {
        Some("Foreground") => Some("foregroundDeletion"),
        Some("Orphan") => Some("orphan"),
        _ => None,
    };
    if v.get("dryRun")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|x| x == "All"))
    {
        opts.dry_run = true;
    }
    Ok(opts)
}

/// The faults drawn for a request that strike once it is applied.
#[derive(Debug, Default)]
pub(super) struct LateFaults {
    /// Replaces the answer once the request landed (`afterApply`).
    pub after: Option<Failure>,
    /// For a DELETE in two writes: between the first write and the release.
    pub release_delay: Duration,
    /// For a DELETE in two writes: the release fails (the object stays as the first write left
    /// it).
    pub release_failure: Option<Failure>,
}

/// How a request ends.
pub(crate) enum Reply {
    Answer(Response),
    /// An injected fault withholds the answer.
    Silence(Silence),
}

/// Counts a request once its answer is decided, wherever that happens (a delayed commit decides
/// it in a task of its own, even after the client left).
#[derive(Clone)]
pub(super) struct Count {
    pub shared: Arc<Shared>,
    pub plane: String,
    verb: Verb,
    resource: String,
    /// Dropped with the last clone, after the answer is counted.
    _in_flight: Arc<InFlight>,
}

impl Count {
    /// Starts counting a request (it is in flight until the last clone is dropped).
    pub fn begin(shared: &Arc<Shared>, plane: &str, verb: Verb, resource: String) -> Self {
        Self {
            _in_flight: Arc::new(shared.metrics.begin()),
            shared: shared.clone(),
            plane: plane.to_string(),
            verb,
            resource,
        }
    }

    pub fn answer(&self, r: Result<Response, ApiError>) -> Reply {
        let resp = r.unwrap_or_else(IntoResponse::into_response);
        self.record(resp.status().as_u16());
        Reply::Answer(resp)
    }

    /// Answers a request that was applied, unless an after-apply fault takes the answer's place.
    pub fn applied(&self, r: Result<Response, ApiError>, after: Option<Failure>) -> Reply {
        match after {
            None => self.answer(r),
            Some(f) => self.fail(f),
        }
    }

    pub fn fail(&self, f: Failure) -> Reply {
        self.shared
            .metrics
            .record_failure(&self.plane, f.when, f.outcome);
        match f.outcome {
            FaultOutcome::Status => self.answer(Err(f.status)),
            FaultOutcome::Reset => self.silence(Silence::Reset),
            FaultOutcome::Hang => self.silence(Silence::Hang),
        }
    }

    fn silence(&self, how: Silence) -> Reply {
        self.record(0);
        Reply::Silence(how)
    }

    fn record(&self, code: u16) {
        self.shared
            .record(&self.plane, self.verb.as_str(), &self.resource, code);
    }
}
