//! The real tools the tests are judged by, installed by the project's own scripts: kubectl 1.37
//! (with kustomize), the official Kubernetes Python client, and Prometheus's promtool.
//!
//! A missing judge fails the test that needs it, naming the script that installs it: a test that
//! passed by skipping would say the opposite of what it checked. The README's test command
//! (`.ci/test`) installs all of them first.

use std::path::PathBuf;

use super::workspace_root;

/// kubectl 1.37: `$KUBECTL`, else the repository's `.venv/bin/kubectl`. `/usr/bin/kubectl` is
/// never used: on these machines it is an unrelated, older wrapper.
pub fn kubectl() -> PathBuf {
    installed("KUBECTL", ".venv/bin/kubectl", ".ci/install-kubectl")
}

/// promtool: `$PROMTOOL`, else the repository's `.venv/bin/promtool`.
pub fn promtool() -> PathBuf {
    installed("PROMTOOL", ".venv/bin/promtool", ".ci/install-promtool")
}

/// A Python that imports the official `kubernetes` client: `$LOCALPLANE_PYTHON`, else the
/// repository's `.venv/bin/python`.
pub fn python() -> PathBuf {
    let python = installed(
        "LOCALPLANE_PYTHON",
        ".venv/bin/python",
        ".ci/install-python-client",
    );
    let imports = std::process::Command::new(&python)
        .args(["-c", "import kubernetes"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        imports,
        "{} cannot import the kubernetes client: run `bash .ci/install-python-client`",
        python.display()
    );
    python
}

/// The tool at `$env_var`, else at `default` under the repository; a failure naming `installer`
/// when neither is there.
pub fn installed(env_var: &str, default: &str, installer: &str) -> PathBuf {
    let path = std::env::var_os(env_var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(default));
    assert!(
        path.is_file(),
        "{} is not installed: run `bash {installer}` (or set {env_var}); `bash .ci/test` installs every judge",
        path.display()
    );
    path
}
