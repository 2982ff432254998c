//! The operator's tool as a process, where no cell is needed: its completions, its CRD, and its
//! usage errors. The tests that run it against a cell are the lab's
//! (crates/egress-address-lab/tests/it/audit.rs, fleet_audit.rs).

use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_egress-address");

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        // The flags' environment fallbacks must not come from whoever runs the tests.
        .env_remove("IPAM_KUBECONFIG")
        .env_remove("CELL_KUBECONFIG")
        .output()
        .expect("the binary runs")
}

#[test]
fn bash_completes_the_subcommands_and_their_flags() {
    let out = run(&["completions", "bash"]);
    assert!(out.status.success(), "{out:?}");
    let script = String::from_utf8(out.stdout).unwrap();
    assert!(script.contains("complete -F"), "a bash completion script");
    for word in [
        "audit",
        "crd",
        "completions",
        "--orphaned-claims",
        "--release-orphaned-claims",
    ] {
        assert!(script.contains(word), "{word} is not completed:\n{script}");
    }
    // The values of -o are offered too.
    assert!(script.contains("table json yaml"), "{script}");
    // The lab's commands are not the operator's.
    for word in ["demo", "bench", "chaos", "conformance"] {
        assert!(!script.contains(word), "{word} is completed:\n{script}");
    }
}

#[test]
fn every_shell_gets_a_script_and_an_unknown_one_is_refused() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = run(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {out:?}");
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(
            script.contains("egress-address") && script.contains("orphaned-claims"),
            "{shell}:\n{script}"
        );
    }
    let out = run(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("tcsh"));
}

#[test]
fn crd_prints_the_shipped_crd() {
    let out = run(&["crd"]);
    assert!(out.status.success(), "{out:?}");
    let shipped = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../config/crd/network.datumapis.com_egressshards.yaml"),
    )
    .unwrap();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        shipped,
        "config/crd is stale: regenerate it with `cargo run --bin egress-address -- crd > config/crd/network.datumapis.com_egressshards.yaml`"
    );
}

#[test]
fn audit_without_an_ipam_kubeconfig_is_a_usage_error_naming_it() {
    let out = run(&["audit"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--ipam-kubeconfig"),
        "{out:?}"
    );
}

#[test]
fn the_lab_commands_are_not_the_operators() {
    for lab in ["demo", "bench", "chaos", "conformance"] {
        let out = run(&[lab]);
        assert_eq!(out.status.code(), Some(2), "{lab}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("unrecognized subcommand"),
            "{lab}: {out:?}"
        );
    }
}

/// What an operator installs links nothing of the lab: `cargo tree` of this package, its
/// dev-dependencies included, names neither localplane nor the real-cell harness.
#[test]
fn the_tool_depends_on_nothing_of_the_lab() {
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--locked",
            "--offline",
            "--prefix",
            "none",
            "-e",
            "all",
        ])
        .args(["-p", env!("CARGO_PKG_NAME")])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(out.status.success(), "{out:?}");
    let tree = String::from_utf8(out.stdout).unwrap();
    assert!(tree.contains("egress-address v"), "{tree}");
    for lab in ["localplane v", "realcell v", "egress-address-lab v"] {
        assert!(!tree.contains(lab), "the tool depends on {lab}:\n{tree}");
    }
}
