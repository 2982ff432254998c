//! Shell completions for `egress-address-lab`, generated from its command line.

use std::process::Command;

use crate::common::LAB;

#[test]
fn every_shell_completes_the_lab_commands_and_an_unknown_one_is_refused() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = Command::new(LAB)
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}: {out:?}");
        let script = String::from_utf8(out.stdout).unwrap();
        for word in [
            "egress-address-lab",
            "demo",
            "bench",
            "chaos",
            "conformance",
        ] {
            assert!(
                script.contains(word),
                "{shell}: {word} is not completed:\n{script}"
            );
        }
    }
    let out = Command::new(LAB)
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("tcsh"));
}
