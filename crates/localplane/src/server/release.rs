//! A DELETE of a kind its service deletes in two writes (Milo's IPClaim), over HTTP: the first
//! write (`Releasing`), then the release step, which a fault may hold back (`releaseDelayMs`) or
//! fail (`when: release`), then the answer: 200 with the object as the first write left it, as
//! Milo answers.

use super::call::{Call, Count, LateFaults, Reply};
use super::respond::ok_json;
use crate::error::ApiError;
use crate::faults::Failure;
use crate::plane::Deletion;

/// Runs both steps of the DELETE `call` and answers it; an after-apply fault replaces the answer
/// once both landed, as for any request.
pub(super) async fn delete(count: &Count, call: &Call, body: &[u8], late: LateFaults) -> Reply {
    let opts = match call.delete_opts(body) {
        Ok(o) => o,
        Err(e) => return count.answer(Err(e)),
    };
    let marked = match call.plane.mark_for_release(call.deletion(&opts)) {
        Ok(m) => m,
        Err(e) => return count.answer(Err(e)),
    };
    if opts.dry_run {
        return count.answer(Ok(ok_json(&marked)));
    }
    if let Some(f) = late.release_failure {
        // The service words the answer; the fault says only why it failed.
        let status = call.plane.release_failure(&call.def, &f.status.0.message);
        return count.fail(Failure { status, ..f });
    }
    let released = if late.release_delay.is_zero() {
        call.plane.finish_release(call.deletion(&opts), &marked)
    } else {
        count.shared.metrics.record_delayed_release(&count.plane);
        let (plane, def, caller) = (call.plane.clone(), call.def.clone(), call.caller.clone());
        let (ns, name) = (call.path.namespace.clone(), call.name().to_string());
        let first = marked.clone();
        let delay = late.release_delay;
        // Spawned, not awaited in place: axum drops this handler when the client disconnects,
        // and the release must land anyway.
        let landing = tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let d = Deletion {
                def: &def,
                ns: ns.as_deref(),
                name: &name,
                opts: &opts,
                caller: &caller,
            };
            plane.finish_release(d, &first)
        });
        landing.await.unwrap_or_else(|e| {
            Err(ApiError::new(
                500,
                "InternalError",
                format!("a delayed release failed: {e}"),
            ))
        })
    };
    count.applied(released.map(|()| ok_json(&marked)), late.after)
}
