//! Every next step the demo prints runs as printed: the demo is started as the README starts it
//! (from the repository's root), and each command it prints is pasted into a shell there, in
//! order, against the demo's cell, with nothing added to its environment.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::common::{LAB, kubectl, one_fleet_at_a_time_blocking, root, tool};

/// How long a demo of a few shards may take to print its next steps (a fresh build of the tool
/// included).
const DEMO_DEADLINE: Duration = Duration::from_secs(300);
/// How long one pasted command may take.
const STEP_DEADLINE: Duration = Duration::from_secs(60);

/// One printed step: the comment above it, and the command.
#[derive(Debug)]
struct Step {
    why: String,
    command: String,
}

/// The lines a child prints, as they come, read on a thread of their own.
fn lines_of(out: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The steps of the block between "Try, in another terminal" and "Press Ctrl-C".
fn steps(printed: &[String]) -> Vec<Step> {
    let start = printed
        .iter()
        .position(|l| l.contains("Try, in another terminal"))
        .expect("the demo prints its next steps");
    let mut steps = Vec::new();
    let mut why = String::new();
    for line in &printed[start + 1..] {
        let line = line.trim();
        if line.starts_with("Press Ctrl-C") {
            break;
        }
        if let Some(comment) = line.strip_prefix("# ") {
            why = comment.to_string();
        } else if !line.is_empty() {
            steps.push(Step {
                why: std::mem::take(&mut why),
                command: line.to_string(),
            });
        }
    }
    steps
}

fn stop(child: &mut Child, signal: &str) {
    let _ = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status();
}

fn paste(command: &str) -> Command {
    let mut cmd = Command::new("bash");
    cmd.args(["-c", command]).current_dir(root());
    cmd
}

/// A step that keeps running (a watch): it must print the shards and still be running.
fn runs_on(step: &Step) {
    let mut child = paste(&step.command)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(child.stdout.take().unwrap());
    let first = lines.recv_timeout(STEP_DEADLINE);
    let shard = loop {
        match lines.recv_timeout(STEP_DEADLINE) {
            Ok(line) if line.starts_with("shard-") => break Ok(line),
            Ok(_) => continue,
            Err(e) => break Err(e),
        }
    };
    let still_running = child.try_wait().unwrap().is_none();
    stop(&mut child, "-TERM");
    let out = child.wait_with_output().unwrap();
    assert!(
        shard.is_ok() && still_running,
        "`{}` ({}): first line {first:?}, stderr {}",
        step.command,
        step.why,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A step that ends: it must exit 0, or, where the demo says the server refuses it, exit non-zero
/// with the server's reason.
fn ends(step: &Step) {
    let child = paste(&step.command)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let id = child.id();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(STEP_DEADLINE) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &id.to_string()])
                .status();
            panic!("`{}` ({}) did not end", step.command, step.why);
        }
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    let shown = format!(
        "`{}` ({}): {}\nstdout:\n{}\nstderr:\n{stderr}",
        step.command,
        step.why,
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
    if step.why.contains("refused") {
        assert!(!out.status.success(), "{shown}");
        assert!(stderr.contains("is invalid"), "{shown}");
    } else {
        assert!(out.status.success(), "{shown}");
    }
}

#[test]
fn every_next_step_the_demo_prints_runs_as_printed() {
    let _turn = one_fleet_at_a_time_blocking();
    // What the steps name must be where the project puts it: kubectl by .ci/install-kubectl, the
    // tool beside the lab (built here if stale, as the demo itself would).
    let kubectl = kubectl();
    let tool = tool();
    let mut demo = Command::new(LAB)
        .args(["demo", "--shards", "3"])
        .current_dir(root())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the demo starts");
    let lines = lines_of(demo.stdout.take().unwrap());
    let mut printed = Vec::new();
    let ready = loop {
        match lines.recv_timeout(DEMO_DEADLINE) {
            Ok(line) => {
                let done = line.starts_with("Press Ctrl-C");
                printed.push(line);
                if done {
                    break true;
                }
            }
            Err(_) => break false,
        }
    };
    if !ready {
        stop(&mut demo, "-KILL");
        panic!("the demo printed no next steps:\n{}", printed.join("\n"));
    }
    let steps = steps(&printed);
    let commands: Vec<&str> = steps.iter().map(|s| s.command.as_str()).collect();
    assert!(steps.len() >= 7, "{commands:#?}");
    // The project's kubectl and the tool, by the paths they have from here.
    let typed = |p: &std::path::Path| {
        p.strip_prefix(root())
            .map(|r| r.display().to_string())
            .unwrap_or_else(|_| p.display().to_string())
    };
    assert!(
        commands.iter().any(|c| c.starts_with(".venv/bin/kubectl ")),
        "{commands:#?} (kubectl at {})",
        kubectl.display()
    );
    let audit = format!("{} audit ", typed(&tool));
    assert!(
        commands.iter().any(|c| c.starts_with(&audit)),
        "no `{audit}...` in {commands:#?}"
    );

    for step in &steps {
        if step.command.contains(" -w") {
            runs_on(step);
        } else {
            ends(step);
        }
    }

    stop(&mut demo, "-INT");
    let status = demo.wait().unwrap();
    assert!(status.success(), "the demo stopped with {status}");
}
