//! The `process_*` series every Prometheus client exports, read from `/proc/self` at scrape time.
//!
//! Values are read when `/metrics` is asked for, never cached: a scrape sees the process as it
//! is. Where `/proc` is missing (not Linux) or a file cannot be read, that series is left out of
//! the scrape rather than reported as zero.

use std::fmt;
use std::path::Path;
use std::sync::OnceLock;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// `AT_PAGESZ` and `AT_CLKTCK` in the auxiliary vector the kernel hands every process.
const AT_PAGESZ: usize = 6;
const AT_CLKTCK: usize = 17;

/// The fields of `/proc/<pid>/stat` the series need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// User plus system time, in clock ticks.
    pub cpu_ticks: u64,
    /// Start, in clock ticks after boot.
    pub start_ticks: u64,
    pub virtual_bytes: u64,
    pub resident_pages: u64,
}

/// Reads `/proc/<pid>/stat`. The command name sits in parentheses and may itself hold spaces
/// and parentheses, so fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `fields[0]` is field 3 of proc(5) (the state).
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        cpu_ticks: field(14)? + field(15)?,
        start_ticks: field(22)?,
        virtual_bytes: field(23)?,
        resident_pages: field(24)?,
    })
}

/// The soft limit on open files from `/proc/<pid>/limits`; `None` when unlimited.
pub fn parse_max_open_files(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Boot time in seconds since the epoch, from `/proc/stat`.
pub fn parse_boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// One entry of the auxiliary vector (`/proc/self/auxv`: native-endian word pairs).
pub fn auxv_entry(bytes: &[u8], wanted: usize) -> Option<usize> {
    const WORD: usize = std::mem::size_of::<usize>();
    bytes.chunks_exact(2 * WORD).find_map(|pair| {
        let key = usize::from_ne_bytes(pair[..WORD].try_into().ok()?);
        let value = usize::from_ne_bytes(pair[WORD..].try_into().ok()?);
        (key == wanted).then_some(value)
    })
}

/// Clock ticks per second and the page size, as the kernel told this process; the values Linux
/// uses almost everywhere when the vector cannot be read.
fn ticks_and_page() -> (u64, u64) {
    static KERNEL: OnceLock<(u64, u64)> = OnceLock::new();
    *KERNEL.get_or_init(|| {
        let auxv = std::fs::read("/proc/self/auxv").unwrap_or_default();
        let get = |key, fallback| {
            auxv_entry(&auxv, key)
                .filter(|v| *v > 0)
                .map_or(fallback, |v| v as u64)
        };
        (get(AT_CLKTCK, 100), get(AT_PAGESZ, 4096))
    })
}

/// One scrape's worth of readings.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Reading {
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<u64>,
    pub virtual_bytes: Option<u64>,
    pub start_time_seconds: Option<f64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
}

/// Reads the process under `proc` (`/proc` in production).
pub fn read(proc: &Path) -> Reading {
    let text = |name: &str| std::fs::read_to_string(proc.join(name)).ok();
    let (ticks, page) = ticks_and_page();
    let stat = text("self/stat").as_deref().and_then(parse_stat);
    let boot = text("stat").as_deref().and_then(parse_boot_time);
    Reading {
        cpu_seconds: stat.map(|s| s.cpu_ticks as f64 / ticks as f64),
        resident_bytes: stat.map(|s| s.resident_pages.saturating_mul(page)),
        virtual_bytes: stat.map(|s| s.virtual_bytes),
        start_time_seconds: stat
            .zip(boot)
            .map(|(s, boot)| boot as f64 + s.start_ticks as f64 / ticks as f64),
        open_fds: std::fs::read_dir(proc.join("self/fd"))
            .ok()
            .map(|dir| dir.count() as u64),
        max_fds: text("self/limits")
            .as_deref()
            .and_then(parse_max_open_files),
    }
}

/// Registered once per registry; reads `/proc` on every scrape.
#[derive(Debug, Default)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let r = read(Path::new("/proc"));
        if let Some(v) = r.cpu_seconds {
            let c = ConstCounter::new(v);
            c.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                c.metric_type(),
            )?)?;
        }
        let gauges = [
            (
                "process_open_fds",
                "Number of open file descriptors.",
                r.open_fds.map(|v| v as f64),
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                r.max_fds.map(|v| v as f64),
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                r.virtual_bytes.map(|v| v as f64),
            ),
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                r.resident_bytes.map(|v| v as f64),
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                r.start_time_seconds,
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(v) = value {
                let g = ConstGauge::new(v);
                g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        // A command name with a space and a parenthesis of its own.
        let line = "4242 (egress (x) ctl) S 1 4242 4242 0 -1 4194560 2000 0 0 0 150 50 0 0 20 0 9 0 123456 987654321 3000 18446744073709551615 1 1 0 0 0 0 0 4096 17410 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                cpu_ticks: 200,
                start_ticks: 123456,
                virtual_bytes: 987654321,
                resident_pages: 3000,
            })
        );
        assert_eq!(parse_stat("4242 (truncated) S 1 2"), None);
        assert_eq!(parse_stat("no parenthesis at all"), None);
    }

    #[test]
    fn limits_boot_time_and_auxv_are_read() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \nMax cpu time              unlimited            unlimited            seconds   \nMax open files            1024                 524288               files     \n";
        assert_eq!(parse_max_open_files(limits), Some(1024));
        assert_eq!(
            parse_max_open_files(&limits.replace("1024 ", "unlimited ")),
            None
        );
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nbtime 1700000000\nprocesses 9\n"),
            Some(1_700_000_000)
        );
        let mut auxv = Vec::new();
        for (k, v) in [
            (3usize, 64usize),
            (AT_CLKTCK, 250),
            (AT_PAGESZ, 16384),
            (0, 0),
        ] {
            auxv.extend_from_slice(&k.to_ne_bytes());
            auxv.extend_from_slice(&v.to_ne_bytes());
        }
        assert_eq!(auxv_entry(&auxv, AT_CLKTCK), Some(250));
        assert_eq!(auxv_entry(&auxv, AT_PAGESZ), Some(16384));
        assert_eq!(auxv_entry(&auxv, 99), None);
    }

    fn now_seconds() -> f64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_reads_as_alive() {
        let r = read(Path::new("/proc"));
        assert!(r.resident_bytes.unwrap() > 1 << 20, "{r:?}");
        assert!(r.virtual_bytes.unwrap() >= r.resident_bytes.unwrap());
        assert!(r.open_fds.unwrap() >= 3, "{r:?}");
        assert!(r.max_fds.is_some_and(|m| m >= r.open_fds.unwrap()));
        assert!(r.cpu_seconds.unwrap() >= 0.0);
        let start = r.start_time_seconds.unwrap();
        // Started within the last day, and not in the future.
        assert!(start <= now_seconds() + 1.0 && start > now_seconds() - 86_400.0);
    }

    #[test]
    fn a_missing_proc_leaves_every_series_out() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()), Reading::default());
    }
}
