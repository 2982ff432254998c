//! Records the git commit the controller is built from as `EGRESS_ADDRESS_COMMIT`, for
//! `--version` and `egress_address_build_info`.
//!
//! A build outside a git checkout (a source tarball, an image build that copies no `.git`) says
//! `unknown` rather than failing. Cargo re-runs this script only when HEAD moves: it watches
//! `HEAD` and the file of the branch it names (in a worktree both live in git's own directories,
//! which `git rev-parse --git-path` resolves), and `packed-refs`.
//! `EGRESS_ADDRESS_COMMIT` set in the environment wins, for builds that know better.

use std::path::PathBuf;
use std::process::Command;

const OVERRIDE: &str = "EGRESS_ADDRESS_COMMIT";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed={OVERRIDE}");
    let commit = match std::env::var(OVERRIDE) {
        Ok(given) if !given.trim().is_empty() => given.trim().to_string(),
        _ => {
            watch_head();
            git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".to_string())
        }
    };
    println!("cargo:rustc-env={OVERRIDE}={commit}");
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!text.is_empty()).then_some(text)
}

/// Asks cargo to re-run when HEAD or the branch it points to moves. Only paths that exist are
/// named: cargo treats a missing one as always changed, which would rebuild on every run.
fn watch_head() {
    let Some(head) = git(&["rev-parse", "--path-format=absolute", "--git-path", "HEAD"]) else {
        return;
    };
    watch(PathBuf::from(head));
    let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) else {
        // A detached HEAD holds the commit itself.
        return;
    };
    for name in [branch.as_str(), "packed-refs"] {
        if let Some(path) = git(&["rev-parse", "--path-format=absolute", "--git-path", name]) {
            let path = PathBuf::from(path);
            // A packed branch gets its own file at its next commit: watch where it will appear.
            match (path.exists(), path.parent()) {
                (false, Some(dir)) if name == branch => watch(dir.to_path_buf()),
                _ => watch(path),
            }
        }
    }
}

fn watch(path: PathBuf) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}
