//! Allocation held per input: every target runs each input inside [`held_to`], which fails the
//! input (a panic, so libFuzzer keeps it as a crash) if the heap the input made live at once (the
//! peak of live bytes, less what was live before it) exceeds
//!
//! ```text
//! cap + 16 × input length
//! ```
//!
//! `cap` is the bound docs/architecture.md states for the answers the target's decoders read:
//! 1 MiB for IPAM's (`MAX_IPAM_ANSWER`: `ipam_answer`, `ipam_claim`), 32 MiB for the cell's
//! (`MAX_CELL_ANSWER`: the others; `flags`, `durations` and `kubeconfig` read local input and are
//! held to the cell's). The cap pays for what any input costs whatever its length: the runtime,
//! the client stack, the statics built on the first input (50 to 370 KB measured). The length
//! term pays for the body, held in about three copies while it is decoded (the fake server's, its
//! chunks, the bounded client's), and the values decoded from it. 16 is what the largest
//! realistic bodies measured need, with room: an IPAM list of 562 recorded claims, 988,646 bytes,
//! made 5.7 times its length live; a page of 4,394 recorded shards, 3,704,274 bytes, 10.3 times
//! in `list_page` (decoded twice there, lean and full), 3.8 through the controller's client
//! alone. So a small input can never force a large allocation: past the cap, an input may cost
//! only a fixed multiple of itself.
//!
//! libFuzzer's `-malloc_limit_mb` holds each single allocation to the cap, and `-rss_limit_mb`
//! cannot be set near the caps under ASan (its own footprint is some 400 MB): neither sees an
//! input that builds many allocations, each under the cap, that together exceed it.
//!
//! Counted are the Rust heap allocations of every thread (the tokio runtime and its blocking
//! pool included), so work an input starts on another thread counts too; libFuzzer's own
//! allocations (C++) are not counted. `EGRESS_FUZZ_ALLOC=1` prints every input's length and the
//! bytes it made live at once, to measure a target again (docs/reliability.md holds the figures).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// How many times its length an input may make live beyond the cap (see the module's
/// documentation).
pub const AMPLIFICATION: usize = 16;

/// The counting allocator: linked into every target through this library.
pub struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn shrank(by: usize) {
    LIVE.fetch_sub(by, Ordering::Relaxed);
}

// SAFETY: every call is passed on to `System` unchanged; only the counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        // A failed realloc leaves the old block as it was.
        if !p.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                shrank(layout.size() - new_size);
            }
        }
        p
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// A bound from docs/architecture.md, named as the panic names it.
#[derive(Debug, Clone, Copy)]
pub struct Cap {
    pub name: &'static str,
    pub bytes: usize,
}

/// An answer from IPAM is read up to 1 MiB.
pub const IPAM: Cap = Cap {
    name: "an IPAM answer's 1 MiB (MAX_IPAM_ANSWER)",
    bytes: egress_address::connect::connection::MAX_IPAM_ANSWER,
};

/// One from the cell up to 32 MiB.
pub const CELL: Cap = Cap {
    name: "a cell answer's 32 MiB (MAX_CELL_ANSWER)",
    bytes: egress_address::connect::connection::MAX_CELL_ANSWER,
};

/// The Rust heap bytes live now, in every thread.
pub fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Runs `work`, the handling of one input of `input_len` bytes, and panics if the heap it made
/// live at once (its peak, less what was live before it) exceeds `cap + AMPLIFICATION ×
/// input_len`.
pub fn held_to<R>(cap: Cap, input_len: usize, work: impl FnOnce() -> R) -> R {
    // Read before the input's peak starts, so that reading it is not counted.
    static REPORT: OnceLock<bool> = OnceLock::new();
    let report = *REPORT.get_or_init(|| std::env::var_os("EGRESS_FUZZ_ALLOC").is_some());
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let out = work();
    let added = PEAK.load(Ordering::Relaxed).saturating_sub(before);
    if report {
        eprintln!("alloc: input {input_len} bytes, peak added {added} bytes");
    }
    let bound = cap
        .bytes
        .saturating_add(AMPLIFICATION.saturating_mul(input_len));
    assert!(
        added <= bound,
        "an input of {input_len} bytes made {added} bytes live at once, past the {bound} allowed: \
         {} plus {AMPLIFICATION} times the input's length",
        cap.name
    );
    out
}
