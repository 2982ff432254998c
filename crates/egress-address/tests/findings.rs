//! The fuzzers' findings, each replayed as a plain test so the stable suite guards it without
//! the fuzzer (docs/reliability.md tells each one's story).
//!
//! A binary of its own: it counts the heap each test makes live at once, per thread, with a
//! counting allocator that the other tests should not pay for.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use egress_address::config::args::{Args, BINARY};

struct PerThread;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn moved(by: isize) {
    // `try_with`: a thread being torn down frees after its slots are gone.
    let _ = LIVE.try_with(|live| {
        live.set(live.get() + by);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(live.get())));
    });
}

// SAFETY: every call is passed on to `System` unchanged; only the counters are added.
unsafe impl GlobalAlloc for PerThread {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            moved(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        moved(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            moved(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: PerThread = PerThread;

/// The most bytes `work` made live at once on this thread, beyond what was live before it.
fn peak_of<T>(work: impl FnOnce() -> T) -> (T, usize) {
    let before = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(before));
    let out = work();
    (out, (PEAK.with(Cell::get) - before).max(0) as usize)
}

/// `flags`, 2026-12-07: a `--log-level` whose span directive held a field value with a run of 90
/// dots made the filter crate compile that value as a regular expression into a dense automaton:
/// one allocation of 32 MiB for a 395-byte fuzz input. Field values are now matched as literal
/// text. These are the arguments that input decoded to, byte for byte.
#[test]
fn a_log_filter_field_value_is_text_not_a_pattern_to_compile() {
    let nul = |n: usize| "\0".repeat(n);
    let dots = ".".repeat(90);
    let value = [
        ",,VVVVVVVVVVVV[{=Z",
        &nul(13),
        "?",
        &nul(7),
        "T",
        &nul(8),
        "7",
        &nul(7),
        &dots,
        &nul(25),
        "/",
        &nul(14),
        "1",
        &nul(34),
        "]",
        &nul(47),
        "2\u{1d}",
        &nul(2),
        "4}",
    ]
    .concat();
    let argv = [
        BINARY,
        "-log-level",
        &value,
        "---platform-project=json",
        "",
        "\0",
        "-help=\0\0[[\u{1}\0\0\0\0\0\0\0\0-election-namespac\0comp1letion4}",
        "---platform-project=json",
        "\0\0",
        "-help=\0\0[[\0completions",
        "cell-id=",
        "=",
        "5\0\0\0",
        "=",
        "",
        "",
    ];
    let (parsed, peak) = peak_of(|| Args::try_parse_go_style(argv));
    assert!(
        peak < 1 << 20,
        "parsing the flags made {peak} bytes live at once"
    );
    // The command line is refused for its stray words, after the filter was checked.
    assert!(parsed.is_err());

    let (filter, peak) = peak_of(|| egress_address::logs::filter(&value));
    assert!(
        peak < 1 << 20,
        "building the filter made {peak} bytes live at once"
    );
    let parsed = Args::try_parse_go_style([BINARY, "--log-level", &value]);
    match (filter, parsed) {
        (Ok(_), Ok(args)) => assert_eq!(args.log.log_level.as_deref(), Some(value.as_str())),
        (Err(_), Err(e)) => assert!(e.to_string().contains("not a RUST_LOG filter"), "{e}"),
        (f, p) => panic!("the flag's check and the logger disagree: {f:?} against {p:?}"),
    }
}

/// A field value in a log filter is compared as text, not as a pattern: a `.` is a dot. The span
/// and field are the reconcile's (`runtime::worker`), as docs/operations.md's example filters
/// them.
#[test]
fn a_log_filter_field_value_matches_literally() {
    use tracing_subscriber::layer::SubscriberExt;

    let seen = Arc::new(AtomicUsize::new(0));
    let counter = Counter(seen.clone());
    let filter =
        egress_address::logs::filter("[reconcile{name=a.b}]=debug").expect("a valid filter");
    let subscriber = tracing_subscriber::registry().with(filter).with(counter);
    tracing::subscriber::with_default(subscriber, || {
        for name in ["a.b", "axb"] {
            let span = tracing::error_span!("reconcile", name = %name);
            let _in = span.enter();
            tracing::debug!("inside");
        }
    });
    assert_eq!(seen.load(Ordering::Relaxed), 1);
}

/// Counts the events that pass the filter.
struct Counter(Arc<AtomicUsize>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Counter {
    fn on_event(&self, _: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}
