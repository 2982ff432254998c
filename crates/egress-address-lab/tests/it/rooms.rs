//! Rooms of a size a person reads: no source file outside tests and localplane (a stand-in that
//! mirrors the apiserver's own large files) passes 800 lines. A file that grows past it is split
//! by responsibility, the way `metrics/` and `conformance/shapes/` were.

use std::path::{Path, PathBuf};

use crate::common::root;

const MOST_LINES: usize = 800;

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            if name != "tests" && name != "target" {
                sources(&path, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            out.push(path);
        }
    }
}

#[test]
fn no_source_file_outside_tests_and_localplane_passes_800_lines() {
    let mut files = Vec::new();
    for krate in std::fs::read_dir(root().join("crates")).unwrap() {
        let krate = krate.unwrap().path();
        if krate.ends_with("localplane") {
            continue;
        }
        sources(&krate.join("src"), &mut files);
    }
    assert!(files.len() > 100, "the sources were found: {}", files.len());
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f).unwrap().lines().count();
            (lines > MOST_LINES).then(|| format!("{} ({lines} lines)", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "over {MOST_LINES} lines: {long:#?}");
}
