//! The cell's answers bounded in time, and the one read of a shard by name: what the reconcile
//! and the release path (through the orphan sweep and the audit too) read a live shard with.

use std::time::Duration;

use egress_api::shard::EgressShard;
use kube::{Api, Client};

/// `request`'s answer, or an error naming `timeout` if the cell has not answered within it: a
/// hung API server cannot hold a shard (or shutdown) forever.
pub async fn within<T>(
    timeout: Duration,
    request: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    match tokio::time::timeout(timeout, request).await {
        Ok(answer) => answer,
        Err(_) => Err(kube::Error::Service(
            format!("no answer from the cell within {timeout:?}").into(),
        )),
    }
}

/// The shard `namespace/name` as the cell has it now (`None`: the cell answers that no such
/// shard exists, with its `NotFound`), read [`within`] `timeout`.
pub async fn get_shard(
    cell: &Client,
    namespace: &str,
    name: &str,
    timeout: Duration,
) -> Result<Option<EgressShard>, kube::Error> {
    let api: Api<EgressShard> = Api::namespaced(cell.clone(), namespace);
    within(timeout, api.get_opt(name)).await
}
