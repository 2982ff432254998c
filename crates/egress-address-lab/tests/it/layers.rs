//! Imports run one way, in every crate of the workspace. The rule is written once, in
//! docs/architecture.md's `layers` block (each crate's top-level modules, top to bottom); this
//! test reads it and the source, and fails naming:
//! - an import that points up a crate's layers (including through a crate-root re-export, or to
//!   an item defined in the crate root itself, which sits above every module);
//! - a top-level module in no layer;
//! - an import circle: sibling modules (files or folders of one folder, at any depth) that import
//!   each other round a loop.
//!
//! Imports are the `crate::`, `self::` and `super::` paths outside comments and unit-test
//! modules (`#[cfg(test)] mod ...` and `tests.rs` files, which may import anything).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::common::root;

/// A module path within a crate: `["chaos", "invariants"]`; empty for the crate root.
type ModPath = Vec<String>;

struct Crate {
    name: String,
    /// Every module of the crate, from its files.
    modules: BTreeSet<ModPath>,
    /// Each file's module and its code (comments and unit tests taken out).
    files: Vec<(PathBuf, ModPath, String)>,
    /// Per module, the names its own file re-exports (`pub use runtime::Controller`) and the
    /// module they come from; names the crate root defines itself map to the root (empty path).
    names: BTreeMap<ModPath, BTreeMap<String, ModPath>>,
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module a file under `src` is: `chaos/invariants/mod.rs` and `chaos/invariants.rs` are
/// `chaos::invariants`; `lib.rs` and `main.rs` the root.
fn module_of(src: &Path, path: &Path) -> ModPath {
    let rel = path.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    if parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main") {
        parts.clear();
    }
    parts
}

/// The code of a file: line comments (and doc comments) taken out, and everything from the
/// first unit-test module on.
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod "))
        {
            break;
        }
        let trimmed = line.trim_start();
        if trimmed.starts_with("//") {
            continue;
        }
        // A trailing comment, `x; // why`; `//` inside a string ("http://") is kept.
        let kept = match line.find(" // ") {
            Some(at) => &line[..at],
            None => line,
        };
        out.push_str(kept);
        out.push('\n');
    }
    out
}

/// Every path beginning with `crate::`, `self::` or `super::`, groups expanded
/// (`crate::{a::B, c}` is `crate::a::B` and `crate::c`), as segments.
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut at = 0;
    while at < code.len() {
        let rest = &code[at..];
        let Some(found) = ["crate::", "self::", "super::"]
            .iter()
            .filter_map(|p| rest.find(p))
            .min()
        else {
            break;
        };
        let start = at + found;
        let preceded_by_word = start > 0 && {
            let c = bytes[start - 1] as char;
            c.is_alphanumeric() || c == '_' || c == ':' || c == '$'
        };
        let end = path_end(code, start);
        if !preceded_by_word {
            expand(&[], &code[start..end], &mut out);
        }
        at = end.max(start + 1);
    }
    out
}

/// Where the path starting at `start` ends: after its last segment or its closing brace.
fn path_end(code: &str, start: usize) -> usize {
    let mut depth = 0usize;
    for (i, c) in code[start..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    return start + i + 1;
                }
            }
            c if depth > 0 || c.is_alphanumeric() || c == '_' || c == ':' => {}
            _ => return start + i,
        }
    }
    code.len()
}

fn expand(prefix: &[String], text: &str, out: &mut Vec<Vec<String>>) {
    let text = text.trim();
    let (head, group) = match text.find("::{") {
        Some(at) => (&text[..at], Some(&text[at + 3..])),
        None if text.starts_with('{') => ("", Some(&text[1..])),
        None => (text, None),
    };
    let mut segments = prefix.to_vec();
    segments.extend(
        head.split("::")
            .map(|s| s.split_whitespace().next().unwrap_or("").to_string())
            .filter(|s| !s.is_empty()),
    );
    let Some(group) = group else {
        out.push(segments);
        return;
    };
    let group = group.strip_suffix('}').unwrap_or(group);
    let (mut depth, mut item) = (0usize, String::new());
    for c in group.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                expand(&segments, &std::mem::take(&mut item), out);
                continue;
            }
            _ => {}
        }
        item.push(c);
    }
    expand(&segments, &item, out);
}

/// The absolute module path a path names, from the file of module `own`: `crate::` from the
/// root, `super::` up one, `self::` where it stands.
fn resolve(own: &ModPath, segments: &[String]) -> ModPath {
    let mut at: ModPath = own.clone();
    let mut rest = segments;
    if rest.first().is_some_and(|s| s == "crate") {
        at.clear();
        rest = &rest[1..];
    }
    while let Some(first) = rest.first() {
        match first.as_str() {
            "super" => {
                at.pop();
            }
            "self" => {}
            _ => break,
        }
        rest = &rest[1..];
    }
    at.extend(rest.iter().cloned());
    at
}

fn load(dir: &Path) -> Crate {
    let src = dir.join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    paths.sort();
    let name = dir.file_name().unwrap().to_string_lossy().to_string();
    let mut modules = BTreeSet::new();
    let mut files = Vec::new();
    for path in paths {
        let module = module_of(&src, &path);
        if module.last().is_some_and(|m| m == "tests") {
            continue;
        }
        modules.insert(module.clone());
        // A binary's main.rs is its own crate root, above the library's.
        if !(module.is_empty() && path.ends_with("main.rs")) {
            let text = std::fs::read_to_string(&path).unwrap();
            files.push((path, module, code(&text)));
        }
    }
    let mut names = BTreeMap::new();
    for (path, module, code) in &files {
        let own = names_of(module, code, &modules, path.ends_with("lib.rs"));
        names.insert(module.clone(), own);
    }
    Crate {
        name,
        modules,
        files,
        names,
    }
}

/// What a module's own file names for others: each `pub use` re-export, as the module it comes
/// from; for the crate root (lib.rs), also its own items, as the root itself.
fn names_of(
    module: &ModPath,
    code: &str,
    modules: &BTreeSet<ModPath>,
    is_root: bool,
) -> BTreeMap<String, ModPath> {
    let mut out = BTreeMap::new();
    for statement in code.split(';') {
        let statement = statement.trim();
        let Some(used) = statement
            .strip_prefix("pub use ")
            .or_else(|| statement.strip_prefix("pub(crate) use "))
        else {
            continue;
        };
        let mut found = Vec::new();
        expand(&[], used, &mut found);
        for segments in found {
            let Some(last) = segments.last() else {
                continue;
            };
            let exported = last.rsplit(" as ").next().unwrap_or(last).to_string();
            // A bare first segment is a child module of this one (edition 2018 paths).
            let mut from = match segments[0].as_str() {
                "crate" | "self" | "super" => resolve(module, &segments),
                _ => module
                    .iter()
                    .cloned()
                    .chain(segments.iter().cloned())
                    .collect(),
            };
            while !from.is_empty() && !modules.contains(&from) {
                from.pop();
            }
            if from.len() > module.len() || !from.starts_with(module) {
                out.insert(exported, from);
            }
        }
    }
    if is_root {
        for line in code.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let item = words
                .iter()
                .position(|w| matches!(*w, "fn" | "const" | "static" | "struct" | "enum" | "type"));
            if let Some(i) = item
                && let Some(name) = words.get(i + 1)
            {
                let name: String = name
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                out.insert(name, vec![]);
            }
        }
    }
    out
}

/// The module a resolved path reaches: a name a module re-exports stands for the module it comes
/// from (so a circle cannot hide behind a folder's re-exports); the rest of a path names an item.
fn module_reached(krate: &Crate, mut target: ModPath) -> ModPath {
    for _ in 0..8 {
        let mut at = target.clone();
        while !at.is_empty() && !krate.modules.contains(&at) {
            at.pop();
        }
        let next = target.get(at.len());
        match next.and_then(|n| krate.names.get(&at).and_then(|names| names.get(n))) {
            Some(from) => {
                let mut more = from.clone();
                more.extend(target[at.len() + 1..].iter().cloned());
                if more == target {
                    return at;
                }
                target = more;
            }
            None => return at,
        }
    }
    target
}

/// Every import of one module by another, as (from, to) module paths and the file it is in.
fn imports(krate: &Crate) -> Vec<(ModPath, ModPath, PathBuf)> {
    let mut out = Vec::new();
    for (path, own, code) in &krate.files {
        for segments in paths(code) {
            let target = module_reached(krate, resolve(own, &segments));
            out.push((own.clone(), target, path.clone()));
        }
    }
    out
}

/// The `layers` block of docs/architecture.md: per crate, its top-level modules top to bottom.
fn written_layers() -> BTreeMap<String, Vec<Vec<String>>> {
    let doc = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    let start = doc
        .find("```layers\n")
        .expect("docs/architecture.md has a ```layers block");
    let body = &doc[start + "```layers\n".len()..];
    let body = &body[..body.find("```").expect("the layers block is closed")];
    let mut out = BTreeMap::new();
    for line in body.lines().filter(|l| !l.trim().is_empty()) {
        let (krate, layers) = line
            .split_once(':')
            .unwrap_or_else(|| panic!("a layers line is `crate: a > b c > d`: {line:?}"));
        let layers = layers
            .split('>')
            .map(|l| l.split_whitespace().map(str::to_string).collect())
            .collect();
        out.insert(krate.trim().to_string(), layers);
    }
    out
}

fn crates() -> Vec<Crate> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root().join("crates"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("src").is_dir())
        .collect();
    dirs.sort();
    dirs.iter().map(|d| load(d)).collect()
}

#[test]
fn every_import_points_down_its_crates_layers() {
    let written = written_layers();
    let mut wrong = Vec::new();
    for krate in crates() {
        let Some(layers) = written.get(&krate.name) else {
            wrong.push(format!(
                "crate {} has no line in the layers block",
                krate.name
            ));
            continue;
        };
        let layer_of = |m: &str| layers.iter().position(|l| l.iter().any(|x| x == m));
        for top in krate.modules.iter().filter(|m| m.len() == 1) {
            if layer_of(&top[0]).is_none() {
                wrong.push(format!(
                    "{}: module {} is in no layer of docs/architecture.md",
                    krate.name, top[0]
                ));
            }
        }
        for named in layers.iter().flatten() {
            if !krate.modules.contains(&vec![named.clone()]) {
                wrong.push(format!(
                    "{}: the layers block names {named}, which is no module",
                    krate.name
                ));
            }
        }
        for (from, to, file) in imports(&krate) {
            if from.is_empty() || from.first() == to.first() {
                continue;
            }
            let shown = file.strip_prefix(root()).unwrap_or(&file).display();
            // A module in no layer is named above.
            let Some(own) = layer_of(&from[0]) else {
                continue;
            };
            let Some(target) = to.first() else {
                // The crate root's own items sit above every module.
                wrong.push(format!(
                    "{shown}: {} imports from the crate root, above it",
                    from[0]
                ));
                continue;
            };
            if layer_of(target).is_some_and(|layer| layer <= own) {
                wrong.push(format!(
                    "{shown}: {} imports {target}, which is not below it",
                    from[0]
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn no_sibling_modules_import_each_other_round_a_loop() {
    let mut circles = Vec::new();
    for krate in crates() {
        // For each folder, which of its children import which.
        let mut edges: BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
        for (from, to, _) in imports(&krate) {
            let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common < from.len() && common < to.len() {
                edges
                    .entry(from[..common].to_vec())
                    .or_default()
                    .entry(from[common].clone())
                    .or_default()
                    .insert(to[common].clone());
            }
        }
        for (folder, graph) in &edges {
            for start in graph.keys() {
                // Depth-first from each child: reaching it again is a circle.
                let mut stack = vec![(start.clone(), vec![start.clone()])];
                let mut seen = BTreeSet::new();
                while let Some((at, trail)) = stack.pop() {
                    for next in graph.get(&at).into_iter().flatten() {
                        if next == start {
                            circles.push(format!(
                                "{}::{}: {} -> {start}",
                                krate.name,
                                folder.join("::"),
                                trail.join(" -> ")
                            ));
                        } else if seen.insert(next.clone()) {
                            let mut t = trail.clone();
                            t.push(next.clone());
                            stack.push((next.clone(), t));
                        }
                    }
                }
            }
        }
    }
    circles.sort();
    circles.dedup();
    assert!(circles.is_empty(), "{circles:#?}");
}

/// The parser the two tests above rely on, on the forms the source uses.
#[test]
fn the_import_reader_expands_groups_and_resolves_relative_paths() {
    let code = code(
        "use crate::{a::B, c::{d, e::F}};\nuse super::g; // super::not_this\n// use crate::h;\nlet x = self::i::J;\n",
    );
    let found: Vec<String> = paths(&code).iter().map(|p| p.join("::")).collect();
    assert_eq!(
        found,
        [
            "crate::a::B",
            "crate::c::d",
            "crate::c::e::F",
            "super::g",
            "self::i::J"
        ]
    );
    let own = vec!["x".to_string(), "y".to_string()];
    assert_eq!(
        resolve(&own, &["super".into(), "g".into()]),
        vec!["x".to_string(), "g".to_string()]
    );
    assert_eq!(
        resolve(&own, &["crate".into(), "a".into()]),
        vec!["a".to_string()]
    );
}

/// The layers a crate's lib.rs draws (a ```text picture of module names, `↓` between layers), if
/// it draws them: each layer line names its modules before a `(` or a wide gap; an indented
/// line goes on describing the one above.
fn drawn_layers(lib_rs: &str) -> Option<Vec<BTreeSet<String>>> {
    let start = lib_rs.find("//! ```text\n")? + "//! ```text\n".len();
    let picture = &lib_rs[start..];
    let picture = &picture[..picture.find("//! ```")?];
    if !picture.contains('↓') {
        return None;
    }
    let mut layers = Vec::new();
    for line in picture.lines() {
        let line = line.trim_start_matches("//!");
        let line = line.strip_prefix(' ').unwrap_or(line);
        if line.trim_start().starts_with('↓') || line.starts_with(' ') || line.is_empty() {
            continue;
        }
        let end = [line.find('('), line.find("  ")]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(line.len());
        layers.push(
            line[..end]
                .split(',')
                .map(|n| n.trim().trim_end_matches('/').to_string())
                .filter(|n| !n.is_empty())
                .collect(),
        );
    }
    Some(layers)
}

#[test]
fn the_picture_a_crate_draws_of_its_layers_is_the_written_rule() {
    let written = written_layers();
    let mut drawn_any = 0;
    for dir in std::fs::read_dir(root().join("crates")).unwrap() {
        let dir = dir.unwrap().path();
        let Ok(lib) = std::fs::read_to_string(dir.join("src/lib.rs")) else {
            continue;
        };
        let Some(drawn) = drawn_layers(&lib) else {
            continue;
        };
        drawn_any += 1;
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let rule: Vec<BTreeSet<String>> = written[&name]
            .iter()
            .map(|l| l.iter().cloned().collect())
            .collect();
        assert_eq!(
            drawn, rule,
            "crates/{name}/src/lib.rs draws other layers than docs/architecture.md's block"
        );
    }
    assert!(
        drawn_any >= 3,
        "the controller, the tool and the lab draw their layers"
    );
}
