//! Go-style flags and durations as an operator writes them: the controller's own normalisation
//! (`config::goflags::normalize`), its clap parser (`Args::try_parse_go_style`), the settings'
//! validation (`Args::settings`) and the duration parser (`config::duration::parse_duration`).

#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use clap::CommandFactory;
use egress_address::config::args::Args;
use egress_address::config::duration::parse_duration;
use egress_address::config::goflags::normalize;
use libfuzzer_sys::fuzz_target;

/// The controller's command as clap builds it, built once: building it (with clap's debug
/// assertions, on under `-a`) is most of what an input costs, and `normalize` clones the command
/// it is given and builds the clone, which for a built command is a no-op.
fn command() -> &'static clap::Command {
    static COMMAND: OnceLock<clap::Command> = OnceLock::new();
    COMMAND.get_or_init(|| {
        let mut command = Args::command();
        command.build();
        command
    })
}

/// Every long flag of the controller, as clap knows it.
fn flags() -> &'static [String] {
    static FLAGS: OnceLock<Vec<String>> = OnceLock::new();
    FLAGS.get_or_init(|| {
        command()
            .get_arguments()
            .filter_map(|a| a.get_long().map(str::to_string))
            .collect()
    })
}

const VALUES: &[&str] = &[
    "dfw",
    "datum-platform",
    "egress",
    "default",
    "true",
    "false",
    "0",
    "1",
    "-1",
    "5s",
    "500ms",
    "1m30s",
    "1h",
    "0.5s",
    ":8080",
    "127.0.0.1:0",
    "[::1]:9443",
    "json",
    "console",
    "debug",
    "info",
    "error",
    "iso8601",
    "epoch",
    "",
    "=",
    "-x",
    "--",
    "/etc/ipam/kubeconfig",
    "99999999999",
    "1e3s",
    "1.5.5s",
    "3.4028236e38h",
];

/// A duration as someone might write one: number and unit pieces, or any text.
fn duration(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    if u.ratio(1, 4)? {
        return String::arbitrary(u);
    }
    let mut text = String::new();
    for _ in 0..u.int_in_range(1..=4)? {
        match u.int_in_range(0..=3)? {
            0 => text.push_str(&u64::arbitrary(u)?.to_string()),
            1 => text.push_str(&u16::arbitrary(u)?.to_string()),
            2 => text.push_str(&format!("{}.{}", u8::arbitrary(u)?, u32::arbitrary(u)?)),
            _ => text.push_str(&"9".repeat(u.int_in_range(1..=400)?)),
        }
        text.push_str(u.choose(&["ms", "s", "m", "h", "", "us", "ns", "."])?);
    }
    Ok(text)
}

fn arg(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    Ok(match u.int_in_range(0..=5)? {
        0 => String::arbitrary(u)?,
        1 => u.choose(VALUES)?.to_string(),
        2 => duration(u)?,
        _ => {
            let dashes = *u.choose(&["-", "--", "---", ""])?;
            let flag = u.choose(flags())?;
            match u.int_in_range(0..=2)? {
                0 => format!("{dashes}{flag}"),
                1 => format!("{dashes}{flag}={}", u.choose(VALUES)?),
                _ => format!("{dashes}{flag}={}", duration(u)?),
            }
        }
    })
}

fuzz_target!(|data: &[u8]| {
    fuzzing::alloc::held_to(fuzzing::alloc::CELL, data.len(), || {
        let mut u = Unstructured::new(data);
        let Ok(durations) = (0..u.int_in_range(0..=4).unwrap_or(0))
            .map(|_| duration(&mut u))
            .collect::<arbitrary::Result<Vec<_>>>()
        else {
            return;
        };
        for text in &durations {
            if let Ok(d) = parse_duration(text) {
                // A parsed duration is what it says in at least one unit the parser knows.
                assert!(d <= Duration::MAX);
            }
        }
        let mut args = vec![egress_address::config::args::BINARY.to_string()];
        while !u.is_empty() && args.len() < 24 {
            match arg(&mut u) {
                Ok(a) => args.push(a),
                Err(_) => break,
            }
        }
        let normalized = normalize(args.clone(), command());
        assert!(
            normalized.len() <= args.len(),
            "normalising never adds an argument"
        );
        if let Ok(parsed) = Args::try_parse_go_style(args) {
            if let Ok(settings) = parsed.settings() {
                assert!(
                    settings.validate().is_ok(),
                    "settings() returns validated settings"
                );
            }
        }
    })
});
