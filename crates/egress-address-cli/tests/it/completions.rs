//! Shell completions for `egress-address`, generated from its command line.

use std::process::Command;

use crate::common::BIN;

fn completions(shell: &str) -> std::process::Output {
    Command::new(BIN)
        .args(["completions", shell])
        .output()
        .expect("the binary runs")
}

#[test]
fn bash_completes_the_subcommands_and_their_flags() {
    let out = completions("bash");
    assert!(out.status.success(), "{out:?}");
    let script = String::from_utf8(out.stdout).unwrap();
    assert!(script.contains("complete -F"), "a bash completion script");
    for word in [
        "audit",
        "demo",
        "bench",
        "chaos",
        "completions",
        "--orphaned-claims",
    ] {
        assert!(script.contains(word), "{word} is not completed:\n{script}");
    }
    // The values of -o are offered too.
    assert!(script.contains("table json yaml"), "{script}");
}

#[test]
fn every_shell_gets_a_script_and_an_unknown_one_is_refused() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = completions(shell);
        assert!(out.status.success(), "{shell}: {out:?}");
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(
            script.contains("egress-address") && script.contains("orphaned-claims"),
            "{shell}:\n{script}"
        );
    }
    let out = completions("tcsh");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("tcsh"));
}
