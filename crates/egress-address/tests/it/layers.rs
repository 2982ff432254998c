//! The folders are the architecture, and imports point one way: read from the source, each
//! top-level module imports only the layers below its own, and within a folder no two files
//! import each other round a loop. A new import that points up fails here, naming it.
//!
//! An import is judged by the module that defines what it names: a name the crate root re-exports
//! (`crate::Metrics`, `crate::Settings`) is the module it comes from (`metrics`, `config`), read
//! from lib.rs's `pub use` lines, and an item lib.rs defines itself is the crate root, above every
//! layer, which no module may import.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top to bottom; a module imports only from layers below its own. The modules of one layer
/// are independent of each other: none imports another of its layer (two that must are not one
/// layer; put one below the other).
const LAYERS: &[&[&str]] = &[
    &["admin"],
    &["runtime"],
    &["reconcile"],
    &["error", "shard"],
    &["ipam"],
    &["config"],
    &["connect"],
    &["logs", "metrics", "kube_status"],
    &["sync", "version"],
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

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The names a use tree brings in, each with its path (`a::{b::C, D as E}` gives `a::b::C` named
/// `C` and `a::D` named `E`); `self` in a group names the group's own path.
fn flatten(tree: &str) -> Vec<(Vec<String>, String)> {
    fn walk(prefix: &[String], tree: &str, out: &mut Vec<(Vec<String>, String)>) {
        let tree = tree.trim();
        if tree.is_empty() {
            return;
        }
        if let Some(open) = tree.find('{') {
            let mut path = prefix.to_vec();
            path.extend(segments(&tree[..open]));
            let close = tree.rfind('}').unwrap_or(tree.len());
            for item in split_top(&tree[open + 1..close]) {
                walk(&path, item, out);
            }
            return;
        }
        let (path, alias) = match tree.split_once(" as ") {
            Some((path, alias)) => (path, Some(alias.trim().to_string())),
            None => (tree, None),
        };
        let mut full = prefix.to_vec();
        full.extend(segments(path));
        if full.last().is_some_and(|s| s == "self") {
            full.pop();
        }
        let name = alias.unwrap_or_else(|| full.last().cloned().unwrap_or_default());
        out.push((full, name));
    }
    let mut out = Vec::new();
    for item in split_top(tree) {
        walk(&[], item, &mut out);
    }
    out
}

fn segments(path: &str) -> Vec<String> {
    path.split("::")
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// `items` split at its commas outside braces.
fn split_top(items: &str) -> Vec<&str> {
    let (mut out, mut depth, mut from) = (Vec::new(), 0usize, 0);
    for (i, c) in items.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(&items[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    out.push(&items[from..]);
    out
}

/// The paths in `code` that start at `prefix` (`crate::`, or a run of `super::`), each as the
/// number of `super::` it starts with (0 for `crate::`) and the first segment after it, one per
/// name of a group (`crate::{config::Settings, ipam}` gives `config` and `ipam`).
fn paths(code: &str, prefix: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(found) = code[at..].find(prefix) {
        let start = at + found;
        at = start + prefix.len();
        let preceded = code[..start]
            .chars()
            .last()
            .is_some_and(|c| is_word(c) || c == ':');
        if preceded {
            continue;
        }
        let mut ups = usize::from(prefix == "super::");
        while code[at..].starts_with("super::") {
            ups += 1;
            at += "super::".len();
        }
        let rest = &code[at..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let end = group
                .char_indices()
                .find(|&(_, c)| {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    depth == 0
                })
                .map_or(group.len(), |(i, _)| i);
            for (path, _) in flatten(&group[..end]) {
                if let Some(first) = path.first() {
                    out.push((ups, first.clone()));
                }
            }
        } else {
            let first: String = rest.chars().take_while(|&c| is_word(c)).collect();
            if !first.is_empty() {
                out.push((ups, first));
            }
        }
    }
    out
}

/// What the crate root holds, read from lib.rs.
struct Root {
    /// The modules it declares.
    modules: BTreeSet<String>,
    /// Each name it re-exports, and the module the name comes from.
    reexports: BTreeMap<String, String>,
    /// The items it defines itself (functions, constants, types).
    items: BTreeSet<String>,
}

fn root() -> Root {
    parse_root(&std::fs::read_to_string(src().join("lib.rs")).unwrap())
}

/// What the crate root holds, from the text of a lib.rs.
fn parse_root(lib: &str) -> Root {
    let code = lib
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut root = Root {
        modules: BTreeSet::new(),
        reexports: BTreeMap::new(),
        items: BTreeSet::new(),
    };
    for statement in code.split_inclusive([';', '}']) {
        let words: Vec<&str> = statement
            .split(|c: char| !is_word(c) && c != '!')
            .filter(|w| !w.is_empty())
            .collect();
        // `pub use a::{B, c::D};`, `pub(crate) use ...`, `use ...`.
        if let Some(use_at) = words.iter().position(|w| *w == "use")
            && words[..use_at]
                .iter()
                .all(|w| matches!(*w, "pub" | "crate"))
        {
            let tree = statement[statement.find("use ").unwrap() + 4..]
                .trim()
                .trim_end_matches(';');
            for (path, name) in flatten(tree) {
                let path: Vec<String> = path
                    .into_iter()
                    .skip_while(|s| s == "crate" || s == "self")
                    .collect();
                let module = path.first().cloned().unwrap_or_default();
                assert!(
                    !name.contains('*'),
                    "lib.rs re-exports a glob ({tree}): name what it re-exports, so that \
                     layers.rs can tell which module each name is"
                );
                root.reexports.insert(name, module);
            }
            continue;
        }
        for (i, word) in words.iter().enumerate() {
            let Some(name) = words.get(i + 1) else { break };
            match *word {
                "mod" => {
                    root.modules.insert(name.to_string());
                }
                "fn" | "const" | "static" | "struct" | "enum" | "trait" | "type" | "union"
                    if !matches!(*name, "fn" | "unsafe" | "async" | "extern") =>
                {
                    root.items.insert(name.to_string());
                }
                "macro_rules!" => {
                    root.items.insert(name.to_string());
                }
                _ => {}
            }
        }
    }
    root
}

/// Where a name reached from the crate root is defined: in a module, or in lib.rs itself (the
/// crate root, above every layer).
enum Place {
    Module(String),
    Root,
    Unknown,
}

impl Root {
    fn place(&self, name: &str) -> Place {
        if self.modules.contains(name) {
            Place::Module(name.to_string())
        } else if let Some(module) = self.reexports.get(name) {
            Place::Module(module.clone())
        } else if self.items.contains(name) {
            Place::Root
        } else {
            Place::Unknown
        }
    }
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

/// How many `super::` reach the crate root from a file: one from `x.rs` and `x/mod.rs`, two
/// from `x/y.rs` and `x/y/mod.rs`, and so on.
fn depth(path: &Path) -> usize {
    let rel = path.strip_prefix(src()).unwrap();
    let parts = rel.iter().count();
    if rel.file_name().is_some_and(|f| f == "mod.rs") {
        parts - 1
    } else {
        parts
    }
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// Every name a file reaches from the crate root: by `crate::`, or by as many `super::` as
/// lead up to it.
fn from_root(path: &Path) -> BTreeSet<String> {
    let code = code(path);
    let depth = depth(path);
    paths(&code, "crate::")
        .into_iter()
        .chain(
            paths(&code, "super::")
                .into_iter()
                .filter(|(ups, _)| *ups >= depth),
        )
        .map(|(_, name)| name)
        .collect()
}

/// What is wrong with the imports of the files under `src`, one line each.
fn wrong_imports() -> Vec<String> {
    let root = root();
    let mut paths = Vec::new();
    files(&src(), &mut paths);
    paths.sort();
    let mut wrong = Vec::new();
    for path in &paths {
        let (module, _) = module_of(path);
        if matches!(module.as_str(), "lib" | "main") {
            continue;
        }
        let file = path.strip_prefix(src()).unwrap().display();
        let Some(own) = layer_of(&module) else {
            wrong.push(format!(
                "{module} is in no layer: add it to LAYERS and to lib.rs's picture"
            ));
            continue;
        };
        for name in from_root(path) {
            let target = match root.place(&name) {
                Place::Module(target) => target,
                Place::Root => {
                    wrong.push(format!(
                        "{file} imports {name}, an item of lib.rs: the crate root is above every \
                         layer; move {name} into a module of the layer it belongs to"
                    ));
                    continue;
                }
                Place::Unknown => {
                    wrong.push(format!(
                        "{file} names crate::{name}, which is no module, no re-export and no \
                         item of lib.rs that this test can find"
                    ));
                    continue;
                }
            };
            if target == module {
                continue;
            }
            let via = if target == name {
                String::new()
            } else {
                format!(" (through the crate root's re-export of {name})")
            };
            match layer_of(&target) {
                Some(layer) if layer > own => {}
                Some(layer) if layer == own => wrong.push(format!(
                    "{file} imports {target}{via}, which is on {module}'s layer: the modules of \
                     a layer are independent; put one below the other in LAYERS"
                )),
                Some(_) => wrong.push(format!(
                    "{file} imports {target}{via}, which is above {module}"
                )),
                None => wrong.push(format!(
                    "{file} imports {target}{via}, which is in no layer: add it to LAYERS"
                )),
            }
        }
    }
    wrong
}

#[test]
fn every_import_points_down_the_layers() {
    let wrong = wrong_imports();
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_imports_are_read_as_the_compiler_reads_them() {
    let root = root();
    // lib.rs's re-exports are their modules, and what it defines itself is the root.
    assert!(matches!(root.place("Metrics"), Place::Module(m) if m == "metrics"));
    assert!(matches!(root.place("Settings"), Place::Module(m) if m == "config"));
    assert!(matches!(root.place("run"), Place::Module(m) if m == "runtime"));
    assert!(matches!(root.place("runtime"), Place::Module(m) if m == "runtime"));
    let lib = parse_root(
        "pub fn lock() {}\npub const VERSION: &str = \"1\";\npub use a::{b::C, D as E};\nmod m;",
    );
    assert!(lib.items.contains("lock") && lib.items.contains("VERSION"));
    assert_eq!(lib.reexports.get("C").map(String::as_str), Some("a"));
    assert_eq!(lib.reexports.get("E").map(String::as_str), Some("a"));
    assert!(lib.modules.contains("m"));
    // Paths: groups, nested groups, and `super::` runs.
    let code = "use crate::{config::{Settings, args}, Metrics};\nlet x = crate::lock(&m);\n\
                use super::super::ShardKey;\nuse super::queue::X;\nfoo::crate::no;";
    let found = paths(code, "crate::");
    assert_eq!(
        found,
        [
            (0, "config".to_string()),
            (0, "config".to_string()),
            (0, "Metrics".to_string()),
            (0, "lock".to_string())
        ]
    );
    assert_eq!(
        paths(code, "super::"),
        [(2, "ShardKey".to_string()), (1, "queue".to_string())]
    );
}

#[test]
fn the_picture_in_lib_rs_is_the_layers() {
    let text = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let start = text
        .find("//! ```text\n")
        .expect("lib.rs has a picture of the layers");
    let picture = &text[start + "//! ```text\n".len()..];
    let picture = &picture[..picture.find("//! ```").unwrap()];
    let drawn: Vec<Vec<String>> = picture
        .lines()
        .map(|l| l.trim_start_matches("//!").trim())
        .filter(|l| *l != "↓")
        .map(|l| {
            let end = l
                .find('(')
                .into_iter()
                .chain(l.find("  "))
                .min()
                .unwrap_or(l.len());
            l[..end].split(',').map(|n| n.trim().to_string()).collect()
        })
        .collect();
    let layers: Vec<Vec<String>> = LAYERS
        .iter()
        .map(|l| l.iter().map(|m| m.to_string()).collect())
        .collect();
    assert_eq!(drawn, layers, "lib.rs's picture and LAYERS differ");
}

#[test]
fn no_two_files_of_a_folder_import_each_other_round_a_loop() {
    let mut paths = Vec::new();
    files(&src(), &mut paths);
    let mut edges: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    let mut folders: BTreeMap<String, Root> = BTreeMap::new();
    for path in &paths {
        let (module, file) = module_of(path);
        let Some(file) = file else { continue };
        let code = code(path);
        let mut to: BTreeSet<String> = self::paths(&code, "super::")
            .into_iter()
            .filter(|(ups, _)| *ups == 1)
            .map(|(_, name)| name)
            .collect();
        // The same folder reached from the crate root.
        let own = format!("crate::{module}::");
        to.extend(self::paths(&code, &own).into_iter().map(|(_, name)| name));
        // A name the folder's mod.rs re-exports is the file it comes from.
        let folder = folders.entry(module.clone()).or_insert_with(|| {
            parse_root(
                &std::fs::read_to_string(src().join(&module).join("mod.rs")).unwrap_or_default(),
            )
        });
        let mut to: BTreeSet<String> = to
            .into_iter()
            .map(|name| folder.reexports.get(&name).cloned().unwrap_or(name))
            .collect();
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
