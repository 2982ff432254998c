//! The folders are the architecture, and imports point one way: read from the source, each
//! top-level module imports only the layers below its own, and within a folder no two files
//! import each other round a loop. A new import that points up fails here, naming it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top to bottom; a module imports only from layers below its own.
const LAYERS: &[&[&str]] = &[
    &["runtime"],
    &["reconcile"],
    &["error", "shard"],
    &["ipam"],
    &["config"],
    &["connect"],
    &["logs", "metrics", "kube_status"],
];

fn src() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without its unit tests, which may import anything.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// The first segment of every path that starts with `prefix` (`crate::`, `super::`), including
/// each name of a group (`crate::{config::Settings, ipam}`).
fn targets(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        let after = &rest[at + prefix.len()..];
        let preceded_by_word = rest[..at]
            .chars()
            .last()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
        if !preceded_by_word {
            if let Some(group) = after.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                for item in group[..end].split(',') {
                    out.insert(first_segment(item.trim()));
                }
            } else {
                out.insert(first_segment(after));
            }
        }
        rest = after;
    }
    out.retain(|s| !s.is_empty());
    out
}

fn first_segment(path: &str) -> String {
    path.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// The module a file is (`runtime` for `runtime/mod.rs` and `runtime/watch.rs`), and its name
/// within its folder (`watch`), for files in a folder.
fn module_of(path: &Path) -> (String, Option<String>) {
    let rel = path.strip_prefix(src()).unwrap();
    let parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    match parts.as_slice() {
        [file] => (file.clone(), None),
        [folder, file, ..] => (folder.clone(), (file != "mod").then(|| file.clone())),
        [] => unreachable!(),
    }
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

#[test]
fn every_import_points_down_the_layers() {
    let mut paths = Vec::new();
    files(&src(), &mut paths);
    let mut wrong = Vec::new();
    for path in &paths {
        let (module, _) = module_of(path);
        if matches!(module.as_str(), "lib" | "main") {
            continue;
        }
        let Some(own) = layer_of(&module) else {
            wrong.push(format!(
                "{module} is in no layer: add it to LAYERS and to lib.rs's picture"
            ));
            continue;
        };
        for target in targets(&code(path), "crate::") {
            let target = if target == "Error" {
                "error".to_string()
            } else {
                target
            };
            if target == module {
                continue;
            }
            match layer_of(&target) {
                Some(layer) if layer > own => {}
                Some(_) => wrong.push(format!(
                    "{} imports {target}, which is not below {module}",
                    path.strip_prefix(src()).unwrap().display()
                )),
                // Crate-root helpers (lock, VERSION) are not modules.
                None => {}
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn no_two_files_of_a_folder_import_each_other_round_a_loop() {
    let mut paths = Vec::new();
    files(&src(), &mut paths);
    let mut edges: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for path in &paths {
        let (module, file) = module_of(path);
        let Some(file) = file else { continue };
        let code = code(path);
        let mut to = targets(&code, "super::");
        // The same folder reached from the crate root.
        let own = format!("crate::{module}::");
        to.extend(targets(&code, &own));
        to.remove(&file);
        edges.entry((module, file)).or_default().extend(to);
    }
    let mut loops = Vec::new();
    for ((module, file), _) in edges.iter() {
        // Depth-first from each file: reaching it again is a loop.
        let mut stack: Vec<(String, Vec<String>)> = vec![(file.clone(), vec![file.clone()])];
        let mut seen = BTreeSet::new();
        while let Some((at, trail)) = stack.pop() {
            let next = edges
                .get(&(module.clone(), at.clone()))
                .cloned()
                .unwrap_or_default();
            for n in next {
                if n == *file {
                    loops.push(format!("{module}: {} -> {file}", trail.join(" -> ")));
                } else if seen.insert(n.clone()) {
                    let mut t = trail.clone();
                    t.push(n.clone());
                    stack.push((n, t));
                }
            }
        }
    }
    assert!(loops.is_empty(), "{loops:#?}");
}
