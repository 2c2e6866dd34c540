//! No two sibling modules of custos-core import each other.
//!
//! The graph is read from the source: every path a module's library code
//! names through `crate::…` or `super::…` (in `use` lines and in
//! expressions alike; comments, doc comments and `#[cfg(test)]` modules
//! excluded) is an edge between the two siblings under their closest
//! common ancestor — a parent naming its child, or a child its parent, is
//! the tree itself, not an edge. A circle between siblings means neither
//! can be read, tested or moved without the other.
//!
//! [`KNOWN`] lists circles not yet broken (none today); the test fails on
//! any other circle, and on an entry of [`KNOWN`] that is no longer a
//! circle (so the list only shrinks).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Circles between siblings that remain, each with why: none. (The last,
/// world <-> migration, went when the memory backend of both ports moved
/// to `control_memory`.)
const KNOWN: &[(&str, &str, &str)] = &[];

/// The module path of a source file under `src` (`a/b.rs` and `a/b/mod.rs`
/// are `a::b`; `lib.rs` is the root).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The library code of a file: comments dropped, and everything from a
/// `#[cfg(test)]` attribute that opens a module on.
fn library_code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]")
            && lines
                .peek()
                .is_some_and(|n| n.trim_start().starts_with("mod "))
        {
            break;
        }
        if t.starts_with("//") {
            continue;
        }
        out.push_str(line.split(" //").next().unwrap_or(line));
        out.push('\n');
    }
    out
}

/// Every module path `code` of `module` names through `crate::` or
/// `super::` (the longest run of lowercase segments after it).
fn references(module: &[String], code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (prefix, base) in [
        ("crate::", Vec::new()),
        ("super::", {
            let mut p = module.to_vec();
            p.pop();
            p
        }),
    ] {
        let mut rest = code;
        while let Some(i) = rest.find(prefix) {
            let before = rest[..i].chars().last();
            rest = &rest[i + prefix.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let mut path = base.clone();
            let mut tail = rest;
            loop {
                let seg: String = tail
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                if seg.is_empty() || !tail[seg.len()..].starts_with("::") {
                    if !seg.is_empty() {
                        path.push(seg);
                    }
                    break;
                }
                path.push(seg.clone());
                tail = &tail[seg.len() + 2..];
            }
            out.push(path);
        }
    }
    out
}

fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Sibling edges: (parent path, from child, to child).
fn sibling_edges(src: &Path) -> BTreeSet<(String, String, String)> {
    let mut all = Vec::new();
    files(src, &mut all);
    let known: BTreeSet<Vec<String>> = all.iter().map(|f| module_of(src, f)).collect();
    let mut edges = BTreeSet::new();
    for f in &all {
        let module = module_of(src, f);
        if module.iter().any(|m| m == "tests") {
            continue;
        }
        let code = library_code(&std::fs::read_to_string(f).unwrap());
        for mut target in references(&module, &code) {
            // Trim to the longest prefix that is a module (an item's name
            // is not one).
            while !target.is_empty() && !known.contains(&target) {
                target.pop();
            }
            let common = module
                .iter()
                .zip(&target)
                .take_while(|(a, b)| a == b)
                .count();
            if common == module.len() || common == target.len() {
                continue; // one contains the other: the tree itself
            }
            edges.insert((
                module[..common].join("::"),
                module[common].clone(),
                target[common].clone(),
            ));
        }
    }
    edges
}

fn circles(edges: &BTreeSet<(String, String, String)>) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    let by: BTreeMap<_, _> = edges.iter().map(|e| (e.clone(), ())).collect();
    for (parent, a, b) in edges {
        if a < b && by.contains_key(&(parent.clone(), b.clone(), a.clone())) {
            let name = |m: &str| {
                if parent.is_empty() {
                    m.to_owned()
                } else {
                    format!("{parent}::{m}")
                }
            };
            out.insert((name(a), name(b)));
        }
    }
    out
}

#[test]
fn no_two_sibling_modules_import_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = circles(&sibling_edges(&src));
    let known: BTreeSet<(String, String)> = KNOWN
        .iter()
        .map(|(a, b, _)| ((*a).to_owned(), (*b).to_owned()))
        .collect();
    let new: Vec<_> = found.difference(&known).collect();
    assert!(
        new.is_empty(),
        "sibling modules that import each other: {new:?}"
    );
    let gone: Vec<_> = known.difference(&found).collect();
    assert!(
        gone.is_empty(),
        "no longer a circle, remove it from KNOWN: {gone:?}"
    );
}

#[test]
fn the_reader_finds_a_circle_and_ignores_the_tree() {
    let dir = tempfile_dir();
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("a")).unwrap();
    std::fs::write(src.join("lib.rs"), "pub mod a;\npub mod b;\npub mod c;\n").unwrap();
    std::fs::write(
        src.join("a.rs"),
        "pub mod inner;\nuse crate::b::X;\n// crate::c::Y in a comment\n",
    )
    .unwrap();
    std::fs::write(src.join("a/inner.rs"), "use super::Z;\nuse crate::a::W;\n").unwrap();
    std::fs::write(src.join("b.rs"), "fn f() { crate::a::inner::g(); }\n").unwrap();
    std::fs::write(
        src.join("c.rs"),
        "use crate::a::X;\n#[cfg(test)]\nmod tests {\n    use crate::c::Y;\n}\n",
    )
    .unwrap();
    let edges = sibling_edges(&src);
    assert!(edges.contains(&(String::new(), "a".into(), "b".into())));
    assert!(edges.contains(&(String::new(), "b".into(), "a".into())));
    assert!(
        !edges.iter().any(|(_, from, _)| from == "inner"),
        "{edges:?}"
    );
    assert_eq!(
        circles(&edges),
        BTreeSet::from([("a".to_owned(), "b".to_owned())])
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("custos-module-graph-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
