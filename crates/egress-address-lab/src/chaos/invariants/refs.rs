//! Every ref names an IPAM record holding exactly the shard's address, made for that shard
//! incarnation of that cell.

use super::*;

/// The record a shard's ref names: kind and name.
pub(super) fn ref_of(shard: &Value) -> Option<(String, String)> {
    let r = &shard["spec"]["shardAddressIPv6ClaimRef"];
    Some((
        r["kind"].as_str()?.to_string(),
        r["name"].as_str()?.to_string(),
    ))
}

/// What is wrong with an addressed shard's ref, if anything, judged against `records`: the
/// record it names must exist in the platform project's claim namespace, hold exactly this
/// address (so nothing was written from an unbound claim), and a claim must have been made for
/// this incarnation of the shard by this cell. `Err` when the record is missing (a sample cannot
/// tell a claim made since the records were read from one that is gone).
pub(super) fn ref_problem(
    cell_id: &str,
    shard: &Value,
    records: &Records,
) -> Result<Option<String>, String> {
    let r = &shard["spec"]["shardAddressIPv6ClaimRef"];
    if r.is_null() {
        return Ok(Some("addressed without a claim ref".into()));
    }
    let kind = r["kind"].as_str().unwrap_or("");
    if !matches!(kind, "IPClaim" | "IPAllocation") {
        return Ok(Some(format!("ref kind {kind:?}")));
    }
    if r["project"].as_str() != Some(PLATFORM_PROJECT) {
        return Ok(Some(format!("ref project {}", r["project"])));
    }
    if r["namespace"].as_str() != Some(CLAIM_NAMESPACE) {
        return Ok(Some(format!("ref namespace {}", r["namespace"])));
    }
    let rname = r["name"].as_str().unwrap_or("");
    let record = match records.get(kind, rname) {
        Some(rec) if !gone(Some(rec)) => rec,
        _ => return Err(format!("{kind} {rname} does not exist")),
    };
    let addr = shard["spec"]["shardAddressIPv6"].as_str().unwrap_or("");
    let cidr = record["status"]["allocatedCIDR"].as_str().unwrap_or("");
    match (address_of(cidr), addr.parse::<Ipv6Addr>()) {
        (Some(held), Ok(carried)) if held == carried => {}
        _ => {
            return Ok(Some(format!(
                "carries {addr} but {kind} {rname} holds {cidr:?}"
            )));
        }
    }
    if kind == "IPClaim" {
        let marks = (
            annotation(record, ANNOTATION_SHARD_NAMESPACE),
            annotation(record, ANNOTATION_SHARD_NAME),
            annotation(record, ANNOTATION_CELL),
            annotation(record, ANNOTATION_SHARD_UID),
        );
        let want = (
            Some(NAMESPACE),
            Some(name_of(shard)),
            Some(cell_id),
            Some(uid_of(shard)),
        );
        if marks != want {
            return Ok(Some(format!(
                "claim {rname} was made for another shard, cell or incarnation: {}",
                record["metadata"]["annotations"]
            )));
        }
    }
    Ok(None)
}

pub(super) fn made_for(record: &Value, kind: &str, cell_id: &str, shard_uid: &str) -> bool {
    kind != "IPClaim"
        || (annotation(record, ANNOTATION_CELL) == Some(cell_id)
            && annotation(record, ANNOTATION_SHARD_UID) == Some(shard_uid))
}
