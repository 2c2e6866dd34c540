//! The dependency rules of the workspace, read from `cargo metadata`:
//!
//! - `custos-core` reaches no I/O crate through its normal dependencies,
//!   directly or transitively;
//! - `custos-models` depends on core, the testkit and stateright only (among
//!   workspace and checker crates);
//! - no shell depends on another shell (the cli and `custos-migrate`, the
//!   composition crates, are not shells);
//! - `custos-testkit` depends on core and proptest only, and only the
//!   verification crates (the models and the conformance suites, and the
//!   binary that runs the models) depend on it other than as a
//!   dev-dependency: no product crate's (core, shells, the migration's
//!   composition) normal closure reaches it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

const FORBIDDEN_IN_CORE: &[&str] = &[
    "rusqlite",
    "libsqlite3-sys",
    "fs2",
    "tokio",
    "iceberg",
    "iceberg-catalog-sql",
    "sqlx",
    "wasmtime",
    "wasmparser",
    "postgres",
    "tokio-postgres",
    "parquet",
    "rand",
    "stateright",
];

const SHELLS: &[&str] = &[
    "custos-sqlite",
    "custos-fs",
    "custos-iceberg",
    "custos-wasm",
    "custos-postgres",
];

struct Graph {
    /// package id -> name
    names: BTreeMap<String, String>,
    /// package id -> (dep id, is a normal (non-dev, non-build) edge)
    edges: BTreeMap<String, Vec<(String, bool)>>,
}

fn metadata() -> Graph {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.toml");
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--locked",
            "--manifest-path",
            root,
        ])
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let mut names = BTreeMap::new();
    for p in v["packages"].as_array().expect("packages") {
        names.insert(
            p["id"].as_str().unwrap().to_string(),
            p["name"].as_str().unwrap().to_string(),
        );
    }
    let mut edges = BTreeMap::new();
    for node in v["resolve"]["nodes"].as_array().expect("resolve.nodes") {
        let id = node["id"].as_str().unwrap().to_string();
        let deps = node["deps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                let normal = d["dep_kinds"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|k| k["kind"].is_null());
                (d["pkg"].as_str().unwrap().to_string(), normal)
            })
            .collect();
        edges.insert(id, deps);
    }
    Graph { names, edges }
}

impl Graph {
    fn id_of(&self, name: &str) -> String {
        self.names
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(id, _)| id.clone())
            .unwrap_or_else(|| panic!("package {name} not in the workspace graph"))
    }

    /// Names reachable from `name` over normal edges.
    fn normal_closure(&self, name: &str) -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![self.id_of(name)];
        while let Some(id) = stack.pop() {
            for (dep, normal) in self.edges.get(&id).into_iter().flatten() {
                if *normal && seen.insert(dep.clone()) {
                    stack.push(dep.clone());
                }
            }
        }
        seen.iter().map(|id| self.names[id].clone()).collect()
    }

    /// Direct dependency names of `name`, any kind.
    fn direct(&self, name: &str) -> BTreeSet<String> {
        self.edges[&self.id_of(name)]
            .iter()
            .map(|(d, _)| self.names[d].clone())
            .collect()
    }
}

#[test]
fn core_reaches_no_io_crate() {
    let g = metadata();
    let closure = g.normal_closure("custos-core");
    let bad: Vec<_> = closure
        .iter()
        .filter(|n| {
            FORBIDDEN_IN_CORE.contains(&n.as_str())
                || n.starts_with("arrow")
                || n.starts_with("wasmtime")
                || n.starts_with("custos-")
        })
        .collect();
    assert!(
        bad.is_empty(),
        "custos-core reaches forbidden crates: {bad:?}"
    );
    // And the closure is what the design allows: serde, serde_json, sha2, thiserror and their own deps.
    for allowed in ["serde", "serde_json", "sha2", "thiserror"] {
        assert!(
            closure.contains(allowed),
            "expected {allowed} in core's closure: {closure:?}"
        );
    }
    // Core's direct dependencies are exactly these: the design's four, the
    // RFC 8785 canonicalizer the deployment manifest's canonical form is
    // defined by, `twox-hash` (XXH3-64 of Artifact objects, verified on
    // relocation; no default features), `blake3` and `aes` (the migration
    // content digest's row key and lanes, custos_core::migration::content),
    // `subtle` (constant-time digest comparison, custos_core::catalogue::access; already
    // in sha2's closure), `hex` (the one lowercase-hex codec of digests and
    // page tokens, custos_core::hex), `arbitrary` (optional, for fuzzing)
    // and `schemars` (optional, feature `schema`: the JSON Schemas of
    // `custos schema`, derived from the document types; no I/O);
    // for its tests only, `proptest`, `postcard` and `ciborium` (the state
    // types' binary round trips, custos_core::pairs; CBOR for the states
    // whose absent fields are omitted) and `custos-testkit` (the stream
    // checkers its corpus replays and property tests run; a dev-dependency,
    // never in the normal closure checked above).
    let allowed: BTreeSet<String> = [
        "aes",
        "blake3",
        "hex",
        "serde",
        "serde_json",
        "serde_json_canonicalizer",
        "sha2",
        "subtle",
        "thiserror",
        "twox-hash",
        "arbitrary",
        "schemars",
        "proptest",
        "postcard",
        "ciborium",
        "custos-core",
        "custos-testkit",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let direct = g.direct("custos-core");
    let extra: Vec<_> = direct.difference(&allowed).collect();
    assert!(
        extra.is_empty(),
        "custos-core gained direct dependencies: {extra:?}"
    );
}

#[test]
fn models_depend_on_core_the_testkit_and_stateright_only() {
    let g = metadata();
    let direct = g.direct("custos-models");
    let workspace_or_checker: BTreeSet<_> = direct
        .iter()
        .filter(|n| n.starts_with("custos-") || n.as_str() == "stateright")
        .cloned()
        .collect();
    let expected: BTreeSet<String> = ["custos-core", "custos-testkit", "stateright"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(workspace_or_checker, expected);
    let io: Vec<_> = g
        .normal_closure("custos-models")
        .into_iter()
        .filter(|n| {
            ["rusqlite", "tokio", "iceberg", "wasmtime", "fs2", "sqlx"].contains(&n.as_str())
        })
        .collect();
    assert!(io.is_empty(), "custos-models reaches I/O crates: {io:?}");
}

#[test]
fn shells_do_not_depend_on_each_other() {
    let g = metadata();
    for shell in SHELLS {
        let direct = g.direct(shell);
        let others: Vec<_> = SHELLS
            .iter()
            .filter(|s| *s != shell && direct.contains(**s))
            .collect();
        assert!(
            others.is_empty(),
            "{shell} depends on other shells: {others:?}"
        );
        assert!(!direct.contains("custos"), "{shell} depends on the cli");
    }
}

#[test]
fn heavy_crates_stay_in_their_shells() {
    let g = metadata();
    for krate in ["custos-core", "custos-models", "custos-conformance"] {
        let closure = g.normal_closure(krate);
        let heavy: Vec<_> = closure
            .iter()
            .filter(|n| {
                n.starts_with("iceberg")
                    || n.starts_with("arrow")
                    || n.starts_with("wasmtime")
                    || n.as_str() == "parquet"
                    || n.starts_with("postgres")
                    || n.as_str() == "tokio-postgres"
            })
            .collect();
        assert!(heavy.is_empty(), "{krate} reaches heavy crates: {heavy:?}");
    }
}

#[test]
fn the_testkit_is_for_tests_only() {
    let g = metadata();
    // It depends on the core and proptest alone …
    let direct: BTreeSet<String> = g
        .direct("custos-testkit")
        .into_iter()
        .filter(|n| n.starts_with("custos-") || n.as_str() == "proptest")
        .collect();
    let expected: BTreeSet<String> = ["custos-core", "proptest"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    assert_eq!(direct, expected, "custos-testkit's workspace dependencies");
    // … and no product crate reaches it through its normal dependencies: a
    // library never carries test support. The verification crates may (the
    // models run the migration's simulation, the conformance suites drive a
    // backend through it), and so may the `custos` binary, whose
    // `custos check` runs the models.
    const VERIFIERS: &[&str] = &[
        "custos-testkit",
        "custos-models",
        "custos-conformance",
        "custos-teeth",
        "custos-torture",
        "custos",
    ];
    let names: Vec<String> = g.names.values().cloned().collect();
    let mut products = 0;
    for name in names.iter().filter(|n| n.starts_with("custos")) {
        if VERIFIERS.contains(&name.as_str()) {
            continue;
        }
        products += 1;
        let closure = g.normal_closure(name);
        assert!(
            !closure.contains("custos-testkit"),
            "{name} reaches custos-testkit through its normal dependencies"
        );
    }
    assert!(products >= 8, "only {products} product crates were checked");
}
