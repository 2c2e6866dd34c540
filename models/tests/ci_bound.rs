//! The real models hold every property exhaustively to their CI bound, and
//! every mutant yields a counterexample. Each model's unique-state count at
//! the CI bound is pinned, so an accidental change of a state space (an
//! action lost, a field added to the state, a bound changed) fails here: a
//! deliberate change updates the figure here and in `docs/proofs/`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_models::{registry, Bound};

fn check(name: &str, unique_states: usize) {
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
    assert_eq!(
        report.unique_states, unique_states,
        "{name}: the state space at the CI bound changed"
    );
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
    check("lease", 6_842_471);
}

#[test]
fn fence_model_holds_and_kills_every_mutant() {
    check("fence", 6_937);
}

#[test]
fn ledger_model_holds_and_kills_every_mutant() {
    check("ledger", 313_168);
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
    check("migration", 52_041);
}

#[test]
fn custody_model_holds_and_kills_every_mutant() {
    check("custody", 54_065);
}

#[test]
fn world_model_holds_and_kills_every_mutant() {
    check("world", 4_328);
}

#[test]
fn release_model_holds_and_kills_every_mutant() {
    check("release", 124_917);
}

#[test]
fn deployment_model_holds_and_kills_every_mutant() {
    check("deployment", 388_295);
}

#[test]
fn access_model_holds_and_kills_every_mutant() {
    check("access", 36_407);
}

#[test]
fn migration_homes_model_holds_and_kills_every_mutant() {
    check("migration-homes", 1_009);
}

#[test]
fn migration_run_model_holds_and_kills_every_mutant() {
    check("migration-run", 267_221);
}
