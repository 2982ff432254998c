//! What the machine and its processes are doing while a bench measures: the load average, and a
//! process's CPU time and resident memory, read from `/proc`.

use std::time::Duration;

/// The 1-, 5- and 15-minute load averages (`/proc/loadavg`), as `uptime` prints them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LoadAvg(pub f64, pub f64, pub f64);

impl LoadAvg {
    pub fn now() -> Option<LoadAvg> {
        let s = std::fs::read_to_string("/proc/loadavg").ok()?;
        let mut it = s.split_whitespace().map(|v| v.parse::<f64>().ok());
        Some(LoadAvg(it.next()??, it.next()??, it.next()??))
    }
}

impl std::fmt::Display for LoadAvg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.2}, {:.2}, {:.2}", self.0, self.1, self.2)
    }
}

/// The range of the 1-minute load average over several readings: `1.8–2.6`.
pub fn load_range(loads: &[LoadAvg]) -> String {
    let one = loads.iter().map(|l| l.0);
    match (one.clone().reduce(f64::min), one.reduce(f64::max)) {
        (Some(lo), Some(hi)) if (hi - lo).abs() < 0.005 => format!("{lo:.2}"),
        (Some(lo), Some(hi)) => format!("{lo:.2}–{hi:.2}"),
        _ => "n/a".into(),
    }
}

/// CPU time (user and system, all threads) of process `pid`, or of this process for `None`.
pub fn cpu_time(pid: Option<u32>) -> Option<Duration> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/stat"),
        None => "/proc/self/stat".to_string(),
    };
    let s = std::fs::read_to_string(path).ok()?;
    // The command name (field 2) may hold spaces; the fields after it are plain numbers.
    let rest = &s[s.rfind(')')? + 2..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    // /proc reports in USER_HZ, which Linux fixes at 100 for user space.
    Some(Duration::from_millis((utime + stime) * 10))
}

/// A field of `/proc/<pid>/status` given in kB, in bytes (`VmRSS`, `VmHWM`).
pub fn status_bytes(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// Resident memory of `pid` now.
pub fn rss(pid: u32) -> Option<u64> {
    status_bytes(pid, "VmRSS")
}

pub const MIB: f64 = 1024.0 * 1024.0;

pub fn mib(b: Option<u64>) -> String {
    b.map(|b| format!("{:.1} MiB", b as f64 / MIB))
        .unwrap_or_else(|| "n/a".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_a_load_cpu_time_and_memory() {
        assert!(LoadAvg::now().is_some());
        assert!(cpu_time(None).is_some());
        let me = std::process::id();
        assert!(rss(me).is_some_and(|b| b > 1 << 20));
        assert!(status_bytes(me, "VmHWM").unwrap() >= rss(me).unwrap() / 2);
        assert_eq!(
            load_range(&[LoadAvg(1.0, 0.0, 0.0), LoadAvg(2.5, 0.0, 0.0)]),
            "1.00–2.50"
        );
    }
}
