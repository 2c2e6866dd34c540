//! The snapshot suite on PostgreSQL: each case in a session of its own in
//! one shared schema (sessions are isolated), and again through the
//! runtime table, each case in a schema of its own.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_core::snapshot::{SnapshotSource, SnapshotStep};
use custos_postgres::storage::PgStorage;

mod support;
use support::{open_session, suite_target, target, unique_session};

/// A new session in the schema the suite shares.
fn fresh() -> PgStorage {
    open_session(suite_target("snapshot_suite"), unique_session())
}

/// A new session in a schema of its own.
fn fresh_schema() -> PgStorage {
    open_session(target("snapshot_case"), "only")
}

custos_conformance::snapshot_suite!(postgres, fresh);

/// The runtime table names the same cases; every one passes through it,
/// each in a schema of its own.
#[test]
fn every_snapshot_case_passes_through_the_table_in_its_own_schema() {
    use custos_conformance::snapshot::{snapshot_cases, SNAPSHOT_CASES};
    let table = snapshot_cases::<PgStorage>();
    custos_conformance::assert_every_case_passes(
        "postgres",
        "snapshot cases",
        &table,
        SNAPSHOT_CASES,
        &fresh_schema,
    );
}

/// The exact header probes the registers' primary key with every column
/// bound by equality; windows are ranges of that index.
#[test]
fn snapshot_plans_use_the_register_and_entry_indexes() {
    let s = fresh();
    let exact = s
        .explain_snapshot(SnapshotStep::ExactHeader)
        .unwrap()
        .unwrap();
    println!("{}", exact.join("\n"));
    assert!(
        exact
            .iter()
            .any(|l| l.contains("Index") && l.contains("storage_registers_pkey")),
        "{exact:?}"
    );
    assert!(
        exact
            .iter()
            .any(|l| l.contains("Index Cond") && l.contains("key = ")),
        "{exact:?}"
    );
    let bounded = s
        .explain_snapshot(SnapshotStep::BoundedHeaders)
        .unwrap()
        .unwrap();
    println!("{}", bounded.join("\n"));
    assert!(
        bounded
            .iter()
            .any(|l| l.contains("key >=") && l.contains("key <")),
        "{bounded:?}"
    );
    custos_conformance::snapshot::check_snapshot_plan(&bounded).unwrap();
}
