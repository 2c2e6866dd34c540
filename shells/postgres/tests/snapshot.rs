//! The snapshot suite on PostgreSQL: each case in a session of its own in
//! one shared schema (sessions are isolated), and again through the
//! runtime table, each case in a schema of its own.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use custos_core::lease::Owner;
use custos_core::snapshot::{SnapshotSource, SnapshotStep};
use custos_postgres::cluster::{shared, unique_schema};
use custos_postgres::storage::{PgStorage, StorageConfig};
use custos_postgres::Target;

fn new_target(prefix: &str) -> Target {
    Target::new(shared().unwrap().url(), unique_schema(prefix)).unwrap()
}

fn shared_target() -> Target {
    static T: OnceLock<Target> = OnceLock::new();
    T.get_or_init(|| new_target("snapshot_suite")).clone()
}

fn fresh() -> PgStorage {
    static N: AtomicU64 = AtomicU64::new(0);
    let session = format!("session-{}", N.fetch_add(1, Ordering::Relaxed));
    PgStorage::open(StorageConfig::new(
        shared_target(),
        session,
        Owner::new("conformance").unwrap(),
    ))
    .expect("open a fresh session")
}

fn fresh_schema() -> PgStorage {
    PgStorage::open(StorageConfig::new(
        new_target("snapshot_case"),
        "only",
        Owner::new("conformance").unwrap(),
    ))
    .expect("open a session in a fresh schema")
}

custos_conformance::snapshot_suite!(postgres, fresh);

/// The runtime table names the same cases; every one passes through it,
/// each in a schema of its own.
#[test]
fn every_snapshot_case_passes_through_the_table_in_its_own_schema() {
    let table = custos_conformance::snapshot::snapshot_cases::<PgStorage>();
    assert_eq!(
        table.len(),
        custos_conformance::snapshot::SNAPSHOT_CASES.len()
    );
    let mut failed = Vec::new();
    for (name, case) in &table {
        if std::panic::catch_unwind(|| case(&fresh_schema)).is_err() {
            failed.push(*name);
        }
    }
    assert!(failed.is_empty(), "failed: {failed:?}");
    println!(
        "postgres: {} of {} snapshot cases pass",
        table.len(),
        table.len()
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
