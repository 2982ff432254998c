//! No two live shards, in any cell, carry one address.

use super::*;

/// Addresses carried by more than one live shard across all cells: each with its holders as
/// (cell index, shard name, shard uid).
pub(super) fn shared(cells: &[Vec<Value>]) -> BTreeMap<String, Vec<(usize, String, String)>> {
    let mut by: BTreeMap<String, Vec<(usize, String, String)>> = BTreeMap::new();
    for (i, shards) in cells.iter().enumerate() {
        for s in shards.iter().filter(|s| is_addressed(s)) {
            let text = s["spec"]["shardAddressIPv6"].as_str().unwrap_or("");
            // One address has many spellings; compare what they mean.
            let key = text
                .parse::<Ipv6Addr>()
                .map_or_else(|_| text.to_string(), |a| a.to_string());
            by.entry(key)
                .or_default()
                .push((i, name_of(s).to_string(), uid_of(s).to_string()));
        }
    }
    by.retain(|_, v| v.len() > 1);
    by
}

pub(super) fn describe_shared(
    planes: &Planes<'_>,
    addr: &str,
    holders: &[(usize, String, String)],
) -> String {
    let names = holders
        .iter()
        .map(|(i, name, uid)| {
            format!(
                "cell {} {NAMESPACE}/{name} (uid {uid})",
                planes.cells[*i].label
            )
        })
        .collect::<Vec<_>>();
    format!("{addr}: {}", names.join(", "))
}
