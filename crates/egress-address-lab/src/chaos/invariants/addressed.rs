//! Every live shard addressed: within a bounded time after a fault that lapses a leader's token
//! ends, and once the faults stop.

use super::*;

/// Of the shard incarnations `expected` (name -> uid), those not addressed among a cell's
/// `shards`: unaddressed, or not there as that incarnation.
pub fn unaddressed(shards: &[Value], expected: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let stored: HashMap<&str, &Value> = shards.iter().map(|s| (name_of(s), s)).collect();
    expected
        .iter()
        .filter(|(name, uid)| {
            stored
                .get(name.as_str())
                .is_none_or(|s| uid_of(s) != uid.as_str() || !is_addressed(s))
        })
        .map(|(n, u)| (n.clone(), u.clone()))
        .collect()
}

pub(super) fn each_addressed<'p, 'v>(
    planes: &'p Planes<'_>,
    cells: &'v [Vec<Value>],
) -> impl Iterator<Item = (&'p str, &'v Value)> {
    cells.iter().enumerate().flat_map(move |(i, shards)| {
        shards
            .iter()
            .filter(|s| is_addressed(s))
            .map(move |s| (planes.cells[i].label, s))
    })
}
