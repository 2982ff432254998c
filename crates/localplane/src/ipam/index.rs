//! The allocation index: which blocks of each pool are taken, per address space, so that finding
//! the lowest free aligned block never scans the allocations.
//!
//! Each pool keeps binary tries over its range. A trie node stands for one aligned block and
//! counts the allocations of exactly that block; it also caches the shallowest fully free block
//! beneath it and how many addresses beneath it are covered. First-fit is then one root-to-leaf
//! walk (at most 128 steps) whatever the number of allocations, and a freed block is found again
//! because the cache is recomputed along the freed path.
//!
//! A claim may overlap claims of *other* address spaces but nothing else, while a pool carve or a
//! reservation must avoid everything. So a pool has one trie per address space (its claims plus
//! the shared rows) and one trie of every row (for carves and for capacity, which counts an
//! address held in two spaces once).

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// An aligned CIDR block. IPv4 addresses live in the low 32 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Block {
    pub start: u128,
    pub len: u8,
    pub v6: bool,
}

impl Block {
    /// Parses a CIDR, dropping host bits (the service stores the canonical form).
    pub fn parse(s: &str) -> Result<Self, String> {
        let net: IpNet = s.trim().parse().map_err(|e| format!("{s:?}: {e}"))?;
        let net = net.trunc();
        Ok(match net {
            IpNet::V4(n) => Self {
                start: u128::from(u32::from(n.network())),
                len: n.prefix_len(),
                v6: false,
            },
            IpNet::V6(n) => Self {
                start: u128::from(n.network()),
                len: n.prefix_len(),
                v6: true,
            },
        })
    }

    pub fn width(&self) -> u8 {
        if self.v6 { 128 } else { 32 }
    }

    pub fn family(&self) -> &'static str {
        if self.v6 {
            egress_api::ipam::FAMILY_IPV6
        } else {
            egress_api::ipam::FAMILY_IPV4
        }
    }

    /// Number of addresses; a whole IPv6 space saturates, which only blurs its capacity figure.
    pub fn size(&self) -> u128 {
        size_of(self.width() - self.len)
    }

    pub fn last(&self) -> u128 {
        self.start.saturating_add(self.size() - 1)
    }

    pub fn contains(&self, other: &Block) -> bool {
        self.v6 == other.v6
            && other.len >= self.len
            && other.start >= self.start
            && other.last() <= self.last()
    }

    pub fn overlaps(&self, other: &Block) -> bool {
        self.v6 == other.v6 && self.start <= other.last() && other.start <= self.last()
    }

    fn addr(&self) -> IpAddr {
        if self.v6 {
            IpAddr::V6(Ipv6Addr::from(self.start))
        } else {
            IpAddr::V4(Ipv4Addr::from(self.start as u32))
        }
    }
}

impl fmt::Display for Block {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr(), self.len)
    }
}

/// `2^bits` addresses, saturating at `u128::MAX` for a full IPv6 space.
fn size_of(bits: u8) -> u128 {
    1u128.checked_shl(u32::from(bits)).unwrap_or(u128::MAX)
}

const NIL: u32 = u32::MAX;
const NONE: u8 = u8::MAX;

#[derive(Clone, Debug)]
struct Node {
    child: [u32; 2],
    /// Allocations of exactly this block (claims of different spaces may coincide in `all`).
    count: u32,
    /// Relative depth of the shallowest fully free block in this subtree, or NONE.
    best: u8,
    /// Addresses in this subtree held by at least one allocation.
    covered: u128,
}

impl Node {
    fn fresh(depth: u8) -> Self {
        Self {
            child: [NIL, NIL],
            count: 0,
            best: depth,
            covered: 0,
        }
    }
}

/// A counted set of aligned blocks inside one root block.
#[derive(Clone, Debug)]
pub struct Trie {
    root: Block,
    nodes: Vec<Node>,
    spare: Vec<u32>,
}

impl Trie {
    pub fn new(root: Block) -> Self {
        Self {
            root,
            nodes: vec![Node::fresh(0)],
            spare: Vec::new(),
        }
    }

    fn depth_bits(&self) -> u8 {
        self.root.width() - self.root.len
    }

    fn node_size(&self, depth: u8) -> u128 {
        size_of(self.depth_bits() - depth)
    }

    fn bit(&self, block: &Block, depth: u8) -> usize {
        let shift = self.depth_bits() - depth - 1;
        ((block.start >> shift) & 1) as usize
    }

    fn alloc_node(&mut self, depth: u8) -> u32 {
        if let Some(i) = self.spare.pop() {
            self.nodes[i as usize] = Node::fresh(depth);
            i
        } else {
            self.nodes.push(Node::fresh(depth));
            (self.nodes.len() - 1) as u32
        }
    }

    fn recompute(&mut self, idx: u32, depth: u8) {
        let size = self.node_size(depth);
        let [l, r] = self.nodes[idx as usize].child;
        let child = |c: u32| -> (u8, u128) {
            if c == NIL {
                (depth + 1, 0)
            } else {
                let n = &self.nodes[c as usize];
                (n.best, n.covered)
            }
        };
        let (best, covered) = if self.nodes[idx as usize].count > 0 {
            (NONE, size)
        } else if l == NIL && r == NIL {
            (depth, 0)
        } else {
            let (lb, lc) = child(l);
            let (rb, rc) = child(r);
            (lb.min(rb), lc.saturating_add(rc))
        };
        let n = &mut self.nodes[idx as usize];
        n.best = best;
        n.covered = covered;
    }

    /// Path from the root to `block`'s node, creating nodes when `create`.
    fn path(&mut self, block: &Block, create: bool) -> Option<Vec<(u32, u8)>> {
        debug_assert!(self.root.contains(block));
        let target = block.len - self.root.len;
        let mut path = Vec::with_capacity(target as usize + 1);
        let mut idx = 0u32;
        path.push((0, 0));
        for depth in 0..target {
            let bit = self.bit(block, depth);
            let mut next = self.nodes[idx as usize].child[bit];
            if next == NIL {
                if !create {
                    return None;
                }
                next = self.alloc_node(depth + 1);
                self.nodes[idx as usize].child[bit] = next;
            }
            idx = next;
            path.push((idx, depth + 1));
        }
        Some(path)
    }

    pub fn insert(&mut self, block: &Block) {
        let path = self.path(block, true).expect("created");
        let (leaf, _) = *path.last().expect("root");
        self.nodes[leaf as usize].count += 1;
        for &(idx, depth) in path.iter().rev() {
            self.recompute(idx, depth);
        }
    }

    /// Removes one allocation of `block`; false when it was not there.
    pub fn remove(&mut self, block: &Block) -> bool {
        let Some(path) = self.path(block, false) else {
            return false;
        };
        let (leaf, _) = *path.last().expect("root");
        if self.nodes[leaf as usize].count == 0 {
            return false;
        }
        self.nodes[leaf as usize].count -= 1;
        for i in (0..path.len()).rev() {
            let (idx, depth) = path[i];
            self.recompute(idx, depth);
            let n = &self.nodes[idx as usize];
            // Dropping empty nodes keeps "no child" meaning "fully free", which `find` relies on.
            if i > 0 && n.count == 0 && n.child == [NIL, NIL] {
                let (parent, _) = path[i - 1];
                let bit = self.bit(block, depth - 1);
                self.nodes[parent as usize].child[bit] = NIL;
                self.spare.push(idx);
            }
        }
        true
    }

    /// The lowest free aligned block of prefix length `len`.
    pub fn find(&self, len: u8) -> Option<Block> {
        if len < self.root.len || len > self.root.width() {
            return None;
        }
        let target = len - self.root.len;
        if self.nodes[0].best > target {
            return None;
        }
        let (mut idx, mut depth, mut start) = (0u32, 0u8, self.root.start);
        let found = |start| Block {
            start,
            len,
            v6: self.root.v6,
        };
        loop {
            let n = &self.nodes[idx as usize];
            if n.count == 0 && n.child == [NIL, NIL] {
                return Some(found(start));
            }
            let half = self.node_size(depth + 1);
            let mut next = None;
            for (side, &c) in n.child.iter().enumerate() {
                let child_start = start + half * side as u128;
                if c == NIL {
                    return Some(found(child_start));
                }
                if self.nodes[c as usize].best <= target {
                    next = Some((c, child_start));
                    break;
                }
            }
            let (c, s) = next?;
            idx = c;
            start = s;
            depth += 1;
        }
    }

    /// Whether no allocation overlaps `block`.
    pub fn is_free(&self, block: &Block) -> bool {
        if !self.root.contains(block) {
            return false;
        }
        let target = block.len - self.root.len;
        let mut idx = 0u32;
        for depth in 0..=target {
            let n = &self.nodes[idx as usize];
            if n.count > 0 {
                return false;
            }
            if depth == target {
                return n.covered == 0;
            }
            let next = n.child[self.bit(block, depth)];
            if next == NIL {
                return true;
            }
            idx = next;
        }
        true
    }

    /// Addresses held by at least one allocation.
    pub fn covered(&self) -> u128 {
        self.nodes[0].covered
    }

    /// Prefix length of the largest free aligned block, if any is free.
    pub fn largest_free(&self) -> Option<u8> {
        let b = self.nodes[0].best;
        (b != NONE).then(|| self.root.len + b)
    }

    fn is_empty(&self) -> bool {
        self.nodes[0].count == 0 && self.nodes[0].child == [NIL, NIL]
    }
}

/// What an allocation row holds space for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowKind {
    /// A claim's block; blocks only claims of the same address space.
    Claim,
    /// A pool's reserved leading/trailing block; blocks everything.
    Reservation,
    /// A child pool's range; blocks everything.
    Carve,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub block: Block,
    pub kind: RowKind,
    /// Address-space digest (claims only).
    pub digest: String,
}

/// Whether the index's view of a pool matches the stored pool object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sync {
    /// The resourceVersion of the pool object as last written alongside an index change. A pool
    /// write that is later rolled back leaves the stored version different, which is how a
    /// rollback the hook did not see is detected.
    Rv(String),
    /// The pool object is being written by the request itself, so its version is not known yet;
    /// the index is right and the first version seen afterwards is adopted.
    AcceptNext,
}

#[derive(Clone, Debug)]
pub struct PoolIndex {
    pub block: Block,
    all: Trie,
    spaces: HashMap<String, Trie>,
    shared: HashMap<String, Block>,
    rows: HashMap<String, Row>,
    pub sync: Sync,
}

impl PoolIndex {
    pub fn new(block: Block, sync: Sync) -> Self {
        Self {
            block,
            all: Trie::new(block),
            spaces: HashMap::new(),
            shared: HashMap::new(),
            rows: HashMap::new(),
            sync,
        }
    }

    fn seeded_space(&self) -> Trie {
        let mut t = Trie::new(self.block);
        for b in self.shared.values() {
            t.insert(b);
        }
        t
    }

    pub fn insert_row(&mut self, key: String, row: Row) {
        self.all.insert(&row.block);
        if row.kind == RowKind::Claim {
            if !self.spaces.contains_key(&row.digest) {
                let t = self.seeded_space();
                self.spaces.insert(row.digest.clone(), t);
            }
            self.spaces
                .get_mut(&row.digest)
                .expect("seeded")
                .insert(&row.block);
        } else {
            for t in self.spaces.values_mut() {
                t.insert(&row.block);
            }
            self.shared.insert(key.clone(), row.block);
        }
        self.rows.insert(key, row);
    }

    fn remove_row(&mut self, key: &str) -> Option<Row> {
        let row = self.rows.remove(key)?;
        self.all.remove(&row.block);
        if row.kind == RowKind::Claim {
            if let Some(t) = self.spaces.get_mut(&row.digest) {
                t.remove(&row.block);
                if self.shared.is_empty() && t.is_empty() {
                    self.spaces.remove(&row.digest);
                }
            }
        } else {
            self.shared.remove(key);
            for t in self.spaces.values_mut() {
                t.remove(&row.block);
            }
        }
        Some(row)
    }

    pub fn row(&self, key: &str) -> Option<&Row> {
        self.rows.get(key)
    }

    /// Lowest free block of `len` for a claim in address space `digest`.
    pub fn find_for_claim(&self, digest: &str, len: u8) -> Option<Block> {
        match self.spaces.get(digest) {
            Some(t) => t.find(len),
            None if self.shared.is_empty() => Trie::new(self.block).find(len),
            None => self.seeded_space().find(len),
        }
    }

    /// Lowest block of `len` free in every address space (for carves and reservations).
    pub fn find_exclusive(&self, len: u8) -> Option<Block> {
        self.all.find(len)
    }

    /// Whether `block` is free for a claim in `digest`.
    pub fn is_free_for_claim(&self, digest: &str, block: &Block) -> bool {
        match self.spaces.get(digest) {
            Some(t) => t.is_free(block),
            None => self.seeded_space().is_free(block),
        }
    }

    /// Largest free prefix for a claim in `digest`, for exhaustion messages.
    pub fn largest_free_for_claim(&self, digest: &str) -> Option<u8> {
        match self.spaces.get(digest) {
            Some(t) => t.largest_free(),
            None => self.seeded_space().largest_free(),
        }
    }

    /// Rows other than reservations: what keeps a pool from being deleted.
    pub fn active_rows(&self) -> usize {
        self.rows.len()
            - self
                .rows
                .values()
                .filter(|r| r.kind == RowKind::Reservation)
                .count()
    }

    pub fn capacity(&self) -> Capacity {
        let total = self.block.size();
        let allocated = self.all.covered();
        Capacity {
            total,
            allocated,
            available: total.saturating_sub(allocated),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacity {
    pub total: u128,
    pub allocated: u128,
    pub available: u128,
}

impl Capacity {
    /// Percent in use, at the service's four decimals.
    pub fn utilization_percent(&self) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        let pct = self.allocated as f64 / self.total as f64 * 100.0;
        (pct * 10_000.0).round() / 10_000.0
    }
}

/// Every pool of one plane.
#[derive(Clone, Debug, Default)]
pub struct Index {
    pub built: bool,
    pub pools: HashMap<String, PoolIndex>,
}

enum Undo {
    Inserted {
        pool: String,
        key: String,
    },
    Removed {
        pool: String,
        key: String,
        row: Row,
    },
    PoolSet {
        name: String,
        prev: Option<PoolIndex>,
    },
    Sync {
        pool: String,
        prev: Sync,
    },
}

/// Changes to the index made during one request, undone if the request is refused so the index
/// keeps matching the store the plane rolls back.
pub struct IndexTxn<'a> {
    ix: &'a mut Index,
    undo: Vec<Undo>,
}

impl<'a> IndexTxn<'a> {
    pub fn new(ix: &'a mut Index) -> Self {
        Self {
            ix,
            undo: Vec::new(),
        }
    }

    pub fn index(&self) -> &Index {
        self.ix
    }

    pub fn pool(&self, name: &str) -> Option<&PoolIndex> {
        self.ix.pools.get(name)
    }

    /// Replaces the whole index; only valid before this request changed anything.
    pub fn replace(&mut self, ix: Index) {
        assert!(
            self.undo.is_empty(),
            "rebuild after changes in the same request"
        );
        *self.ix = ix;
    }

    /// Records a fact about the store rather than a change by this request (never undone).
    pub fn adopt_sync(&mut self, pool: &str, rv: String) {
        if let Some(p) = self.ix.pools.get_mut(pool) {
            p.sync = Sync::Rv(rv);
        }
    }

    pub fn set_sync(&mut self, pool: &str, sync: Sync) {
        if let Some(p) = self.ix.pools.get_mut(pool) {
            let prev = std::mem::replace(&mut p.sync, sync);
            self.undo.push(Undo::Sync {
                pool: pool.to_string(),
                prev,
            });
        }
    }

    pub fn set_pool(&mut self, name: &str, pool: Option<PoolIndex>) {
        let prev = match pool {
            Some(p) => self.ix.pools.insert(name.to_string(), p),
            None => self.ix.pools.remove(name),
        };
        self.undo.push(Undo::PoolSet {
            name: name.to_string(),
            prev,
        });
    }

    pub fn insert(&mut self, pool: &str, key: &str, row: Row) {
        // A stale row under the same key would otherwise be leaked forever.
        self.remove(pool, key);
        let p = self.ix.pools.get_mut(pool).expect("indexed pool");
        p.insert_row(key.to_string(), row);
        self.undo.push(Undo::Inserted {
            pool: pool.to_string(),
            key: key.to_string(),
        });
    }

    pub fn remove(&mut self, pool: &str, key: &str) -> Option<Row> {
        let row = self.ix.pools.get_mut(pool)?.remove_row(key)?;
        self.undo.push(Undo::Removed {
            pool: pool.to_string(),
            key: key.to_string(),
            row: row.clone(),
        });
        Some(row)
    }

    pub fn rollback(mut self) {
        while let Some(u) = self.undo.pop() {
            match u {
                Undo::Inserted { pool, key } => {
                    if let Some(p) = self.ix.pools.get_mut(&pool) {
                        p.remove_row(&key);
                    }
                }
                Undo::Removed { pool, key, row } => {
                    if let Some(p) = self.ix.pools.get_mut(&pool) {
                        p.insert_row(key, row);
                    }
                }
                Undo::PoolSet { name, prev } => match prev {
                    Some(p) => {
                        self.ix.pools.insert(name, p);
                    }
                    None => {
                        self.ix.pools.remove(&name);
                    }
                },
                Undo::Sync { pool, prev } => {
                    if let Some(p) = self.ix.pools.get_mut(&pool) {
                        p.sync = prev;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Block {
        Block::parse(s).unwrap()
    }

    #[test]
    fn first_fit_is_lowest_aligned_and_reuses_freed_blocks() {
        let mut t = Trie::new(b("2001:db8::/120"));
        let first = t.find(128).unwrap();
        assert_eq!(first.to_string(), "2001:db8::/128");
        t.insert(&first);
        let second = t.find(128).unwrap();
        assert_eq!(second.to_string(), "2001:db8::1/128");
        t.insert(&second);
        // A /126 must skip the partly used first /126.
        assert_eq!(t.find(126).unwrap().to_string(), "2001:db8::4/126");
        assert!(t.remove(&first));
        assert_eq!(t.find(128).unwrap(), first);
        assert_eq!(t.covered(), 1);
        assert!(!t.remove(&first));
    }

    #[test]
    fn a_full_trie_finds_nothing_and_counts_everything() {
        let mut t = Trie::new(b("10.0.0.0/30"));
        for _ in 0..4 {
            let x = t.find(32).unwrap();
            t.insert(&x);
        }
        assert_eq!(t.find(32), None);
        assert_eq!(t.covered(), 4);
        assert_eq!(t.largest_free(), None);
        t.remove(&b("10.0.0.2/32"));
        assert_eq!(t.find(32).unwrap().to_string(), "10.0.0.2/32");
        assert_eq!(t.find(31), None);
    }

    #[test]
    fn overlapping_counted_blocks_cover_once() {
        let mut t = Trie::new(b("10.0.0.0/24"));
        t.insert(&b("10.0.0.0/25"));
        t.insert(&b("10.0.0.1/32"));
        assert_eq!(t.covered(), 128);
        t.remove(&b("10.0.0.0/25"));
        assert_eq!(t.covered(), 1);
        assert_eq!(t.find(32).unwrap().to_string(), "10.0.0.0/32");
    }

    #[test]
    fn claims_in_other_spaces_overlap_but_carves_do_not() {
        let mut p = PoolIndex::new(b("10.0.0.0/24"), Sync::AcceptNext);
        let claim = |blk: &str, d: &str| Row {
            block: b(blk),
            kind: RowKind::Claim,
            digest: d.into(),
        };
        p.insert_row("a".into(), claim("10.0.0.0/32", "net-a"));
        assert_eq!(
            p.find_for_claim("net-b", 32).unwrap().to_string(),
            "10.0.0.0/32"
        );
        assert_eq!(
            p.find_for_claim("net-a", 32).unwrap().to_string(),
            "10.0.0.1/32"
        );
        assert_eq!(p.find_exclusive(30).unwrap().to_string(), "10.0.0.4/30");
        p.insert_row(
            "carve".into(),
            Row {
                block: b("10.0.0.4/30"),
                kind: RowKind::Carve,
                digest: String::new(),
            },
        );
        p.insert_row("b".into(), claim("10.0.0.1/32", "net-b"));
        assert_eq!(
            p.find_for_claim("net-b", 30).unwrap().to_string(),
            "10.0.0.8/30"
        );
        assert_eq!(p.capacity().allocated, 6);
        assert_eq!(p.active_rows(), 3);
        p.remove_row("carve");
        assert_eq!(
            p.find_for_claim("net-c", 30).unwrap().to_string(),
            "10.0.0.0/30"
        );
    }

    #[test]
    fn rollback_restores_rows_and_pools() {
        let mut ix = Index::default();
        ix.pools.insert(
            "p".into(),
            PoolIndex::new(b("10.0.0.0/24"), Sync::Rv("1".into())),
        );
        let row = Row {
            block: b("10.0.0.0/32"),
            kind: RowKind::Claim,
            digest: "d".into(),
        };
        {
            let mut tx = IndexTxn::new(&mut ix);
            tx.insert("p", "k", row.clone());
            tx.set_sync("p", Sync::Rv("2".into()));
            tx.set_pool(
                "q",
                Some(PoolIndex::new(b("10.1.0.0/24"), Sync::AcceptNext)),
            );
            tx.rollback();
        }
        assert!(ix.pools["p"].row("k").is_none());
        assert_eq!(ix.pools["p"].sync, Sync::Rv("1".into()));
        assert!(!ix.pools.contains_key("q"));
        assert_eq!(ix.pools["p"].find_for_claim("d", 32), Some(row.block));
    }

    #[test]
    fn a_hundred_thousand_allocations_stay_first_fit() {
        let mut p = PoolIndex::new(b("2001:db8::/64"), Sync::AcceptNext);
        for i in 0..100_000u32 {
            let blk = p.find_for_claim("d", 128).unwrap();
            assert_eq!(blk.start - p.block.start, u128::from(i));
            p.insert_row(
                format!("k{i}"),
                Row {
                    block: blk,
                    kind: RowKind::Claim,
                    digest: "d".into(),
                },
            );
        }
        p.remove_row("k4242");
        assert_eq!(
            p.find_for_claim("d", 128).unwrap().start - p.block.start,
            4242
        );
        assert_eq!(p.capacity().allocated, 99_999);
    }
}
