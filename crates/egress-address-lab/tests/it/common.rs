//! Shared by the modules: the real kubectl and the kustomizations it builds, the shipped YAML,
//! the `egress-address-lab` binary and the operator's tool, and taking turns at running controllers.

use std::path::{Path, PathBuf};
use std::process::Command;

pub use localplane::testing::workspace_root as root;
use serde_json::Value;
use tokio::sync::{Mutex, MutexGuard};

/// The `egress-address-lab` binary this test binary was built with.
pub const LAB: &str = env!("CARGO_BIN_EXE_egress-address-lab");

/// The operator's tool, `egress-address`, of this profile. A package of its own, which links
/// nothing of the lab, so cargo gives its path only to its own tests: `cargo test --workspace`
/// builds it beside this binary's profile; run alone, this package's tests build it first when it
/// is missing or older than its source.
pub fn tool() -> PathBuf {
    static TOOL: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    TOOL.get_or_init(|| {
        let found = egress_address_lab::fleet::locate_binary("egress-address").ok();
        if found.as_deref().is_none_or(older_than_source) {
            egress_address_lab::fleet::built_for_cli("egress-address-cli", "egress-address")
                .expect("building the egress-address tool");
        }
        egress_address_lab::fleet::locate_binary("egress-address").expect("the egress-address tool")
    })
    .clone()
}

/// Whether `bin` is older than any source file of the tool or the controller library.
fn older_than_source(bin: &Path) -> bool {
    fn newest(dir: &Path) -> std::time::SystemTime {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| {
                let path = e.path();
                if path.is_dir() {
                    newest(&path)
                } else {
                    e.metadata()
                        .and_then(|m| m.modified())
                        .unwrap_or(std::time::UNIX_EPOCH)
                }
            })
            .max()
            .unwrap_or(std::time::UNIX_EPOCH)
    }
    let built = std::fs::metadata(bin)
        .and_then(|m| m.modified())
        .unwrap_or(std::time::UNIX_EPOCH);
    [
        "crates/egress-address-cli",
        "crates/egress-address/src",
        "crates/api/src",
    ]
    .iter()
    .any(|dir| newest(&root().join(dir)) > built)
}

static FLEET: Mutex<()> = Mutex::const_new(());

/// Held by each test that runs controllers, for as long as they run.
pub async fn one_fleet_at_a_time() -> MutexGuard<'static, ()> {
    FLEET.lock().await
}

/// [`one_fleet_at_a_time`] for a test outside a runtime.
pub fn one_fleet_at_a_time_blocking() -> MutexGuard<'static, ()> {
    FLEET.blocking_lock()
}

/// The kubectl 1.37 that `.ci/install-kubectl` puts in `.venv` (or `$KUBECTL`); a test fails
/// without it.
pub fn kubectl() -> PathBuf {
    localplane::testing::judges::kubectl()
}

/// `kubectl kustomize <dir>`, as JSON documents.
pub fn kustomize(kubectl: &Path, dir: &str) -> Vec<Value> {
    let out = Command::new(kubectl)
        .arg("kustomize")
        .arg(root().join(dir))
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kustomize {dir} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_saphyr::from_multiple::<Value>(&String::from_utf8_lossy(&out.stdout))
        .expect("kustomize prints YAML")
        .into_iter()
        .filter(|d| d.is_object())
        .collect()
}

/// The YAML documents of a file, as JSON.
pub fn documents(path: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(root().join(path)).unwrap();
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap()
        .into_iter()
        .filter(|d| d.is_object())
        .collect()
}

/// The text of a `## ` section of docs/operations.md, up to the next `## `.
pub fn runbook_section(heading: &str) -> String {
    let text = std::fs::read_to_string(root().join("docs/operations.md")).unwrap();
    let start = text
        .find(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("docs/operations.md has no section \"## {heading}\""));
    let body = &text[start + 1..];
    let end = body[3..].find("\n## ").map_or(body.len(), |i| i + 4);
    body[..end].to_string()
}

/// The fenced blocks of `lang` in `text`, each with the fence's own indentation taken off (the
/// runbook's blocks sit inside numbered list items), and the line each starts on.
pub fn fenced_blocks(text: &str, lang: &str) -> Vec<(usize, String)> {
    let mut blocks = vec![];
    let mut open: Option<(usize, usize, String)> = None;
    for (n, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start().len();
        let trimmed = line.trim_start();
        match &mut open {
            None if trimmed == format!("```{lang}") => open = Some((n, indent, String::new())),
            Some((start, _, body)) if trimmed == "```" => {
                blocks.push((*start, std::mem::take(body)));
                open = None;
            }
            Some((_, fence_indent, body)) => {
                body.push_str(line.get(*fence_indent..).unwrap_or("").trim_end());
                body.push('\n');
            }
            None => {}
        }
    }
    assert!(open.is_none(), "an unclosed ```{lang} block");
    blocks
}
