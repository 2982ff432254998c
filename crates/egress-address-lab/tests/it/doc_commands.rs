//! Every command line of the operator's tool and the lab that the README and the docs give runs as
//! written: it names a binary the workspace builds, by a path or a `cargo run` that reaches it,
//! and its subcommand, flags and values parse. (The demo's printed next steps are run for real
//! by `hints.rs`; running each documented bench or chaos here would take hours.)
//!
//! A line with a placeholder (`A`, `...`, `[--cell real]`, `<each>`, `a|b`) shows a form, not a
//! command, and is left out; so is a line naming a file this machine does not have.

use std::collections::BTreeMap;

use clap::Parser;

use crate::common::root;

/// A documented command line: where it is, which binary, its arguments.
#[derive(Debug)]
struct Documented {
    at: String,
    binary: String,
    args: Vec<String>,
}

/// The documents a newcomer or an operator reads.
fn documents() -> Vec<std::path::PathBuf> {
    let mut docs = vec![root().join("README.md"), root().join("DEVELOPERS.md")];
    let mut more: Vec<_> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    more.sort();
    docs.extend(more);
    docs
}

/// The candidate command lines of a document: each line of a fenced block (`true`), and each
/// inline code span (`false`), with `B=...` variables of a block put in.
fn candidates(text: &str) -> Vec<(usize, String, bool)> {
    let mut out = Vec::new();
    let mut in_block = false;
    let mut vars: BTreeMap<String, String> = BTreeMap::new();
    // A block's line ending in `\` goes on on the next.
    let mut continued = String::new();
    for (n, line) in text.lines().enumerate() {
        let joined;
        let trimmed = if in_block && !continued.is_empty() {
            joined = std::mem::take(&mut continued) + " " + line.trim();
            joined.as_str()
        } else {
            line.trim()
        };
        if in_block && let Some(open) = trimmed.strip_suffix('\\') {
            continued = open.trim_end().to_string();
            continue;
        }
        if trimmed.starts_with("```") {
            in_block = !in_block;
            vars.clear();
            continue;
        }
        if in_block {
            if let Some((name, value)) = trimmed.split_once('=')
                && !name.is_empty()
                && name.chars().all(|c| c.is_ascii_uppercase())
            {
                vars.insert(format!("${name}"), value.to_string());
                continue;
            }
            let mut line = trimmed.to_string();
            for (name, value) in &vars {
                line = line.replace(name, value);
            }
            out.push((n + 1, line, true));
        } else {
            for (i, span) in trimmed.split('`').enumerate() {
                if i % 2 == 1 {
                    out.push((n + 1, span.to_string(), false));
                }
            }
        }
    }
    out
}

/// Shell words of the command part of a line (up to a pipe, redirection, `;` or comment), or
/// nothing when it holds a placeholder.
fn words(line: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, '|' | '>' | ';' | '#' | '&') => break,
            (None, c) if c.is_whitespace() => {
                if any || !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
                any = false;
            }
            (None, c) => word.push(c),
        }
    }
    if any || !word.is_empty() {
        words.push(word);
    }
    let placeholder = |w: &String| {
        w.contains("...")
            || w.contains('[')
            || w.contains('<')
            || w.contains('\\')
            || w.contains('…')
            || matches!(w.as_str(), "A" | "B" | "I" | "CELL" | "IPAM" | "NS" | "ID")
    };
    (!words.iter().any(placeholder)).then_some(words)
}

/// The binary a command line runs, and its arguments: `cargo run [--release] --bin X -- ARGS`,
/// `target/<profile>/X ARGS`, or, on a line of its own in a block, `X ARGS` for an installed
/// `egress-address` or `egress-address-lab` (inline, a bare name is prose naming a command).
fn command(words: &[String], in_block: bool) -> Option<(String, Vec<String>)> {
    const OURS: [&str; 2] = ["egress-address", "egress-address-lab"];
    let first = words.first()?;
    if first == "cargo" && words.get(1).is_some_and(|w| w == "run") {
        let bin = words.iter().position(|w| w == "--bin")?;
        let name = words.get(bin + 1)?.clone();
        let rest = match words.iter().position(|w| w == "--") {
            Some(dash) => words[dash + 1..].to_vec(),
            None => vec![],
        };
        return OURS.contains(&name.as_str()).then_some((name, rest));
    }
    let name = match first
        .strip_prefix("target/release/")
        .or_else(|| first.strip_prefix("target/debug/"))
    {
        Some(name) => name,
        None if in_block => first,
        None => return None,
    };
    OURS.contains(&name)
        .then(|| (name.to_string(), words[1..].to_vec()))
}

fn documented() -> Vec<Documented> {
    let mut out = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let name = doc.strip_prefix(root()).unwrap().display().to_string();
        for (line, candidate, in_block) in candidates(&text) {
            let Some(words) = words(&candidate) else {
                continue;
            };
            // A binary's name alone is prose naming it.
            let Some((binary, args)) = command(&words, in_block).filter(|(_, a)| !a.is_empty())
            else {
                continue;
            };
            out.push(Documented {
                at: format!("{name}:{line}"),
                binary,
                args,
            });
        }
    }
    out
}

/// Whether the arguments name a file that is not here (an operator's kubeconfig, another
/// checkout's binary): the line is right, this machine is not the operator's.
fn names_a_missing_file(args: &[String]) -> bool {
    args.iter().any(|a| {
        let value = a.split_once('=').map_or(a.as_str(), |(_, v)| v);
        (value.ends_with(".kubeconfig") || value.starts_with("../")) && !root().join(value).exists()
    })
}

#[test]
fn every_documented_command_of_the_tool_and_the_lab_parses() {
    let all = documented();
    let mut wrong = Vec::new();
    let mut parsed = 0;
    for d in &all {
        let argv = std::iter::once(d.binary.clone()).chain(d.args.iter().cloned());
        let result = match d.binary.as_str() {
            "egress-address" => egress_address_cli::cli::Cli::try_parse_from(argv).map(drop),
            _ => egress_address_lab::cli::Cli::try_parse_from(argv).map(drop),
        };
        match result {
            Ok(()) => parsed += 1,
            Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => parsed += 1,
            Err(e) if e.kind() == clap::error::ErrorKind::DisplayVersion => parsed += 1,
            // Flags whose value the doc leaves to the reader (`--cell-kubeconfig` of an
            // operator's own file) are checked by name only: the error is about a missing value.
            Err(_) if names_a_missing_file(&d.args) => parsed += 1,
            Err(e) => wrong.push(format!(
                "{}: `{} {}`: {}",
                d.at,
                d.binary,
                d.args.join(" "),
                e.render()
            )),
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // The README's demo, the tool's audit and crd, the benchmarks, chaos and conformance at least.
    assert!(parsed >= 15, "only {parsed} command lines found: {all:#?}");
    for needed in ["demo", "audit", "crd", "bench", "chaos", "conformance"] {
        assert!(
            all.iter()
                .any(|d| d.args.first().is_some_and(|a| a == needed)),
            "no documented `{needed}`"
        );
    }
}

#[test]
fn the_reader_finds_commands_and_leaves_forms_out() {
    let text = "Run `cargo run --release --bin egress-address-lab -- demo --once`.\n\
                ```sh\nB=target/release/egress-address-lab\n$B bench churn   # note\n```\n\
                Form: `egress-address audit --cell-kubeconfig A`.\n";
    let found: Vec<_> = candidates(text)
        .into_iter()
        .filter_map(|(_, c, in_block)| Some((words(&c)?, in_block)))
        .filter_map(|(w, in_block)| command(&w, in_block))
        .collect();
    assert_eq!(
        found,
        [
            (
                "egress-address-lab".to_string(),
                vec!["demo".to_string(), "--once".to_string()]
            ),
            (
                "egress-address-lab".to_string(),
                vec!["bench".to_string(), "churn".to_string()]
            ),
        ]
    );
}
