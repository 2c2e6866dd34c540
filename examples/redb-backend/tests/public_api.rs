//! The example uses custos's public API only: no item declared right after
//! `#[doc(hidden)]` in custos-core or custos-conformance (a hidden item may
//! change or go away in any release) is named as a path segment in this
//! crate's `src/`.
//!
//! The scanner is a small lexer, not a Rust parser: it blanks comments and
//! string and character literals, splits the rest into tokens, and reads
//! the item after each `#[doc(hidden)]` attribute. The synthetic checks at
//! the bottom show it finds what it must (so the real check can fail).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, in a stable order.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Skips a raw string starting at `i` (`r"…"`, `r#"…"#`, …): the index
/// after it, or `None` when `i` starts no raw string.
fn raw_string_end(c: &[char], i: usize) -> Option<usize> {
    let mut j = i + 1;
    while c.get(j) == Some(&'#') {
        j += 1;
    }
    if c.get(j) != Some(&'"') {
        return None;
    }
    let hashes = j - i - 1;
    j += 1;
    while j < c.len() {
        if c[j] == '"' && (1..=hashes).all(|k| c.get(j + k) == Some(&'#')) {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
    Some(c.len())
}

/// The index after the literal or comment starting at `i`, if one does.
fn skip_literal(c: &[char], i: usize) -> Option<usize> {
    let ident_before = i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_');
    match (c[i], c.get(i + 1).copied()) {
        ('/', Some('/')) => Some((i..c.len()).find(|&j| c[j] == '\n').unwrap_or(c.len())),
        ('/', Some('*')) => {
            let (mut depth, mut j) = (0usize, i);
            while j < c.len() {
                if c[j] == '/' && c.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if c[j] == '*' && c.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        return Some(j);
                    }
                } else {
                    j += 1;
                }
            }
            Some(c.len())
        }
        ('"', _) => {
            let mut j = i + 1;
            while j < c.len() && c[j] != '"' {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            Some((j + 1).min(c.len()))
        }
        ('r', _) if !ident_before => raw_string_end(c, i),
        ('b', Some('r')) if !ident_before => raw_string_end(c, i + 1),
        ('\'', Some('\\')) => Some(
            (i + 2..c.len())
                .find(|&j| c[j] == '\'')
                .map_or(c.len(), |j| j + 1),
        ),
        ('\'', Some(_)) if c.get(i + 2) == Some(&'\'') => Some(i + 3),
        _ => None,
    }
}

/// `src` with every comment and string or character literal blanked
/// (newlines kept), so text inside them is never read as code.
fn strip(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < c.len() {
        match skip_literal(&c, i) {
            Some(end) => {
                out.extend(
                    c[i..end]
                        .iter()
                        .map(|&ch| if ch == '\n' { '\n' } else { ' ' }),
                );
                i = end;
            }
            None => {
                out.push(c[i]);
                i += 1;
            }
        }
    }
    out
}

/// Identifiers (and numbers) as one token each, `::` as one token, any
/// other non-space character alone.
fn tokens(code: &str) -> Vec<String> {
    let c: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        if c[i].is_alphanumeric() || c[i] == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push(c[start..i].iter().collect());
        } else if c[i] == ':' && c.get(i + 1) == Some(&':') {
            out.push("::".to_owned());
            i += 2;
        } else {
            if !c[i].is_whitespace() {
                out.push(c[i].to_string());
            }
            i += 1;
        }
    }
    out
}

fn is_ident(t: &str) -> bool {
    t.chars()
        .next()
        .is_some_and(|ch| ch.is_alphabetic() || ch == '_')
}

/// The end (exclusive) of the bracket group opening at `t[i]`.
fn group_end(t: &[String], i: usize) -> usize {
    let mut depth = 0usize;
    for (j, tok) in t.iter().enumerate().skip(i) {
        match tok.as_str() {
            "[" | "(" | "{" => depth += 1,
            "]" | ")" | "}" => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return j + 1;
                }
            }
            _ => {}
        }
    }
    t.len()
}

/// The names a `use` tree starting at `t[i]` brings in (its leaves, or
/// their aliases), up to its `;`.
fn use_leaves(t: &[String], mut i: usize, out: &mut BTreeSet<String>) {
    while i < t.len() && t[i] != ";" {
        let tok = &t[i];
        let next = t.get(i + 1).map(String::as_str);
        if is_ident(tok) && !matches!(tok.as_str(), "self" | "super" | "crate" | "as") {
            let alias_follows = next == Some("as");
            if next != Some("::") && !alias_follows {
                out.insert(tok.clone());
            }
        }
        i += 1;
    }
}

const ITEM_KEYWORDS: &[&str] = &[
    "fn", "struct", "enum", "trait", "type", "const", "static", "mod", "union", "crate",
];

/// The names declared by the item (or field, or variant) starting at
/// `t[i]`, after its `#[doc(hidden)]`: other attributes, visibility and
/// qualifiers are skipped. An `impl` declares no name.
fn item_names(t: &[String], mut i: usize, out: &mut BTreeSet<String>) {
    loop {
        match t.get(i).map(String::as_str) {
            Some("#") if t.get(i + 1).is_some_and(|x| x == "[") => i = group_end(t, i + 1),
            Some("pub") if t.get(i + 1).is_some_and(|x| x == "(") => i = group_end(t, i + 1),
            Some("pub" | "unsafe" | "async" | "extern" | "default" | "auto" | "mut") => i += 1,
            Some("const") if t.get(i + 1).is_some_and(|x| x == "fn" || x == "unsafe") => i += 1,
            _ => break,
        }
    }
    let Some(head) = t.get(i) else { return };
    match head.as_str() {
        "macro_rules" => {
            if let Some(name) = t.get(i + 2).filter(|n| is_ident(n)) {
                out.insert(name.clone());
            }
        }
        "use" => use_leaves(t, i + 1, out),
        "impl" => {}
        kw if ITEM_KEYWORDS.contains(&kw) => {
            let name = t[i + 1..].iter().find(|n| is_ident(n) && *n != "mut");
            if let Some(name) = name {
                out.insert(name.clone());
            }
        }
        // A field (`name: T`) or an enum variant.
        field if is_ident(field) => {
            out.insert(field.to_owned());
        }
        _ => {}
    }
}

/// The names of every item declared right after `#[doc(hidden)]` (also
/// inside `cfg_attr`) in `src`; a file whose inner `#![doc(hidden)]` hides
/// it hides its module, `module`.
fn hidden_items(src: &str, module: &str) -> BTreeSet<String> {
    let t = tokens(&strip(src));
    let mut out = BTreeSet::new();
    let mut i = 0;
    while i < t.len() {
        let inner = t.get(i + 1).is_some_and(|x| x == "!");
        let open = if inner { i + 2 } else { i + 1 };
        if t[i] != "#" || t.get(open).is_none_or(|x| x != "[") {
            i += 1;
            continue;
        }
        let end = group_end(&t, open);
        let attr = &t[open..end];
        let hides = attr
            .windows(4)
            .any(|w| w[0] == "doc" && w[1] == "(" && w[2] == "hidden" && w[3] == ")");
        if hides && inner {
            out.insert(module.to_owned());
        } else if hides {
            item_names(&t, end, &mut out);
        }
        i = end;
    }
    out
}

/// Every identifier `src` names as a path segment: in a `use` tree, next
/// to `::`, or as a macro invoked with `!`.
fn path_segments(src: &str) -> BTreeSet<String> {
    let t = tokens(&strip(src));
    let mut out = BTreeSet::new();
    let mut i = 0;
    while i < t.len() {
        if t[i] == "use" {
            let end = (i..t.len()).find(|&j| t[j] == ";").unwrap_or(t.len());
            out.extend(t[i + 1..end].iter().filter(|x| is_ident(x)).cloned());
            i = end;
            continue;
        }
        let prev = i.checked_sub(1).map(|p| t[p].as_str());
        let next = t.get(i + 1).map(String::as_str);
        let bang_macro = next == Some("!") && t.get(i + 2).is_none_or(|x| x != "=");
        if is_ident(&t[i]) && (prev == Some("::") || next == Some("::") || bang_macro) {
            out.insert(t[i].clone());
        }
        i += 1;
    }
    out
}

/// The module a file is, for an inner `#![doc(hidden)]`.
fn module_name(path: &Path) -> String {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
    match stem.as_deref() {
        Some("mod") => path
            .parent()
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        Some(s) => s.to_owned(),
        None => String::new(),
    }
}

/// Every hidden item of the crates rooted at `dirs`.
fn hidden_in(dirs: &[PathBuf]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for dir in dirs {
        for file in rust_files(dir) {
            let src = std::fs::read_to_string(&file).unwrap();
            out.extend(hidden_items(&src, &module_name(&file)));
        }
    }
    out
}

/// `(file, name)` for every hidden name a source names as a path segment.
fn violations(hidden: &BTreeSet<String>, sources: &[(String, String)]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (file, src) in sources {
        for name in path_segments(src).intersection(hidden) {
            out.push((file.clone(), name.clone()));
        }
    }
    out
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn the_example_names_no_hidden_custos_item() {
    let root = workspace();
    let hidden = hidden_in(&[root.join("core/src"), root.join("conformance/src")]);
    // The walk really read the crates: a hidden item known to exist is found.
    assert!(hidden.contains("__with_ledger_cases"), "{hidden:?}");
    assert!(hidden.contains("__emit_tests"), "{hidden:?}");
    let own = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let sources: Vec<(String, String)> = rust_files(&own)
        .into_iter()
        .map(|f| {
            let src = std::fs::read_to_string(&f).unwrap();
            (f.display().to_string(), src)
        })
        .collect();
    assert!(sources.len() >= 3, "the example's src/ was not read");
    let found = violations(&hidden, &sources);
    assert!(found.is_empty(), "hidden custos items named: {found:?}");
    println!(
        "{} hidden items in custos-core and custos-conformance; none named in {} files",
        hidden.len(),
        sources.len()
    );
}

const SYNTHETIC_CRATE: &str = r##"
//! A comment naming `#[doc(hidden)] pub fn in_a_comment()` hides nothing.
/// Nor does a doc comment: #[doc(hidden)] pub struct InADocComment;
const TEXT: &str = "#[doc(hidden)] pub fn in_a_string() {}";
const RAW: &str = r#"#[doc(hidden)] pub fn in_a_raw_string() {}"#;
const QUOTE: char = '"';
#[doc(hidden)]
#[macro_export]
macro_rules! __secret { () => {} }
pub struct Visible<'a>(&'a str);
#[doc(hidden)] pub(crate) const fn hidden_const_fn() {}
#[doc(hidden)]
pub struct Hidden;
#[cfg_attr(test, doc(hidden))]
pub enum AlsoHidden { A }
#[doc(hidden)] pub use inner::{Reexported, Original as Alias};
pub struct Fields { #[doc(hidden)] pub hidden_field: u8, pub shown: u8 }
#[doc(hidden)]
impl Visible<'_> {}
"##;

#[test]
fn the_scanner_finds_hidden_items_and_only_them() {
    let found = hidden_items(SYNTHETIC_CRATE, "synthetic");
    let want: BTreeSet<String> = [
        "__secret",
        "hidden_const_fn",
        "Hidden",
        "AlsoHidden",
        "Reexported",
        "Alias",
        "hidden_field",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(found, want);
    let inner = "#![doc(hidden)]\npub fn f() {}";
    assert_eq!(
        hidden_items(inner, "secret_module"),
        BTreeSet::from(["secret_module".to_owned()])
    );
}

#[test]
fn the_check_fails_on_a_source_naming_a_hidden_item() {
    let hidden = hidden_items(SYNTHETIC_CRATE, "synthetic");
    let bad = [
        ("use.rs", "use synthetic::{Visible, Hidden};"),
        ("path.rs", "fn f() { synthetic::hidden_const_fn(); }"),
        ("macro.rs", "synthetic::__secret!();"),
        ("bare_macro.rs", "fn f() { __secret!(); }"),
    ];
    for (file, src) in bad {
        let found = violations(&hidden, &[(file.to_owned(), src.to_owned())]);
        assert_eq!(found.len(), 1, "{file}: {found:?}");
    }
    let good = [
        ("comment.rs", "// synthetic::Hidden\nfn f() {}"),
        ("string.rs", r#"const S: &str = "synthetic::Hidden";"#),
        (
            "visible.rs",
            "use synthetic::Visible; fn f(x: u8, y: u8) -> bool { x != y }",
        ),
    ];
    for (file, src) in good {
        let found = violations(&hidden, &[(file.to_owned(), src.to_owned())]);
        assert!(found.is_empty(), "{file}: {found:?}");
    }
}
