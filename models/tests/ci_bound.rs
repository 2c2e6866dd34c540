//! The real models hold every property exhaustively to their CI bound, and
//! every mutant yields a counterexample.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_models::{registry, Bound};

fn check(name: &str) {
    let model = registry()
        .into_iter()
        .find(|m| m.name() == name)
        .expect("model is registered");
    let report = model.check(Bound::Ci, 2);
    assert!(
        report.exhaustive,
        "{name}: search did not run to exhaustion"
    );
    assert!(report.unique_states > 1, "{name}: explored nothing");
    for p in &report.properties {
        assert!(
            p.held,
            "{name}: property `{}` ({}) failed: {p:?}",
            p.name, p.kind
        );
    }
    assert!(
        report.properties.iter().any(|p| p.kind == "sometimes"),
        "{name}: no sometimes property, the model could pass vacuously"
    );
    assert!(
        !report.mutants.is_empty(),
        "{name}: a model without mutants proves nothing"
    );
    for m in &report.mutants {
        assert!(m.killed, "{name}: mutant `{}` survived", m.name);
        assert!(
            m.counterexample_len.unwrap_or(0) > 0,
            "{name}: mutant `{}` has an empty counterexample",
            m.name
        );
    }
}

#[test]
fn lease_model_holds_and_kills_every_mutant() {
    check("lease");
}

#[test]
fn fence_model_holds_and_kills_every_mutant() {
    check("fence");
}

#[test]
fn ledger_model_holds_and_kills_every_mutant() {
    check("ledger");
}

#[test]
fn registry_names_are_unique() {
    let names: Vec<_> = registry().iter().map(|m| m.name()).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(names.len(), sorted.len());
}

#[test]
fn migration_model_holds_and_kills_every_mutant() {
    check("migration");
}

#[test]
fn custody_model_holds_and_kills_every_mutant() {
    check("custody");
}

#[test]
fn world_model_holds_and_kills_every_mutant() {
    check("world");
}

#[test]
fn release_model_holds_and_kills_every_mutant() {
    check("release");
}
