//! Go `flag` syntax, as the controller this one replaces accepted it, turned into what clap
//! parses: a Deployment written for the Go binary (`-location=dfw`, `-zap-log-level debug`)
//! runs this one unchanged.
//!
//! Go's `flag` package takes one or two dashes alike, and takes the next argument as the value
//! of a flag that needs one, whatever it looks like (`-location -x` sets `-x`). So before clap
//! parses:
//! - a single-dash argument naming a long flag gets a second dash (`-h` and `-V` are clap's own
//!   short flags and stay, as does anything that names no flag, for clap to refuse);
//! - a flag that needs a value and is given none with `=` is joined with the next argument
//!   (`--location=-x`), so a value starting with a dash is never read as a flag;
//! - the first argument that is not a flag (a subcommand) and everything after `--` are left
//!   alone, as Go stops there too.

use std::collections::HashMap;
use std::ffi::OsString;

use clap::Command;

/// What the normalisation needs to know of each long flag: whether it takes the next argument
/// as its value.
fn long_flags(command: &Command) -> HashMap<String, bool> {
    let mut command = command.clone();
    command.build();
    let mut flags: HashMap<String, bool> = command
        .get_arguments()
        .filter_map(|arg| {
            let long = arg.get_long()?;
            let takes_next = arg.get_action().takes_values()
                && !arg.is_require_equals_set()
                && arg.get_num_args().is_some_and(|n| n.min_values() > 0);
            Some((long.to_string(), takes_next))
        })
        .collect();
    flags.entry("help".into()).or_insert(false);
    flags
}

/// `args` (the program name first) with Go-style flags rewritten for `command`.
pub fn normalize<I, T>(args: I, command: &Command) -> Vec<OsString>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let flags = long_flags(command);
    let mut rest = args.into_iter().map(Into::into);
    let mut out: Vec<OsString> = rest.next().into_iter().collect();
    while let Some(arg) = rest.next() {
        let Some(text) = arg.to_str().map(str::to_string) else {
            out.push(arg);
            continue;
        };
        if text == "--" || !text.starts_with('-') || text == "-" {
            // The end of the flags: a subcommand, a terminator, or stdin.
            out.push(arg);
            out.extend(rest);
            break;
        }
        let body = text.trim_start_matches('-');
        let dashes = text.len() - body.len();
        let (name, has_value) = match body.split_once('=') {
            Some((name, _)) => (name, true),
            None => (body, false),
        };
        let Some(&takes_next) = flags.get(name) else {
            out.push(arg);
            continue;
        };
        if dashes > 2 || (dashes == 1 && name.len() < 2) {
            out.push(arg);
            continue;
        }
        let long = format!("--{body}");
        match (has_value, takes_next) {
            (false, true) => match rest.next() {
                Some(value) => {
                    let mut joined = OsString::from(format!("{long}="));
                    joined.push(value);
                    out.push(joined);
                }
                None => out.push(long.into()),
            },
            _ => out.push(long.into()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, ArgAction};

    fn command() -> Command {
        Command::new("t")
            .arg(Arg::new("location").long("location"))
            .arg(
                Arg::new("leader-elect")
                    .long("leader-elect")
                    .num_args(0..=1)
                    .require_equals(true)
                    .default_missing_value("true"),
            )
            .arg(Arg::new("plain").long("plain").action(ArgAction::SetTrue))
            .arg(Arg::new("x").short('x'))
    }

    fn norm(args: &[&str]) -> Vec<String> {
        let mut full = vec!["t"];
        full.extend_from_slice(args);
        normalize(full, &command())
            .into_iter()
            .skip(1)
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn single_dash_long_flags_get_a_second_dash() {
        assert_eq!(norm(&["-location=dfw"]), ["--location=dfw"]);
        assert_eq!(norm(&["-leader-elect"]), ["--leader-elect"]);
        assert_eq!(norm(&["-leader-elect=false"]), ["--leader-elect=false"]);
        assert_eq!(norm(&["-plain"]), ["--plain"]);
        assert_eq!(norm(&["-help"]), ["--help"]);
    }

    #[test]
    fn a_value_given_apart_is_joined_whatever_it_starts_with() {
        assert_eq!(norm(&["-location", "dfw"]), ["--location=dfw"]);
        assert_eq!(norm(&["--location", "-odd"]), ["--location=-odd"]);
        assert_eq!(norm(&["-location", "--plain"]), ["--location=--plain"]);
        // A flag that takes no value leaves the next argument alone.
        assert_eq!(
            norm(&["-leader-elect", "-plain"]),
            ["--leader-elect", "--plain"]
        );
        // Missing at the end: clap names the flag that lacks it.
        assert_eq!(norm(&["-location"]), ["--location"]);
    }

    #[test]
    fn short_flags_unknown_names_and_what_follows_the_flags_stay() {
        assert_eq!(norm(&["-h"]), ["-h"]);
        assert_eq!(norm(&["-x", "1"]), ["-x", "1"]);
        assert_eq!(norm(&["-nope=1"]), ["-nope=1"]);
        assert_eq!(norm(&["---location=x"]), ["---location=x"]);
        assert_eq!(
            norm(&["-plain", "completions", "-location", "x"]),
            ["--plain", "completions", "-location", "x"]
        );
        assert_eq!(norm(&["--", "-location=x"]), ["--", "-location=x"]);
        assert_eq!(norm(&["--location=a=b"]), ["--location=a=b"]);
    }
}
