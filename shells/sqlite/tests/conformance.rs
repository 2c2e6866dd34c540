//! The whole storage conformance suite against SQLite, one fresh file per case.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use custos_sqlite::SqliteStorage;

fn fresh() -> SqliteStorage {
    SqliteStorage::open_temp().expect("open a temp session file")
}

/// A session file in a temporary directory, opened afresh (lease
/// admission and migration check included) by every call.
fn place() -> impl Fn() -> SqliteStorage {
    let dir = std::sync::Arc::new(tempfile::tempdir().expect("a temp dir"));
    move || {
        let owner = custos_core::lease::Owner::new("conformance").expect("owner");
        SqliteStorage::open(custos_sqlite::Config::new(dir.path().join("s.db"), owner))
            .expect("open the session file")
    }
}

custos_conformance::storage_suite!(sqlite, fresh, reopen: place);

/// The runtime table names the same cases, and every one passes through it.
#[test]
fn every_case_passes_through_the_table() {
    use custos_conformance::storage::{storage_cases, STORAGE_CASES};
    let table = storage_cases::<SqliteStorage>();
    custos_conformance::assert_every_case_passes(
        "sqlite",
        "conformance cases",
        &table,
        STORAGE_CASES,
        &fresh,
    );
}

/// The plan check really sees the SQLite plan (it is not vacuous).
#[test]
fn branch_plan_is_exposed_and_uses_indexes() {
    use custos_core::storage::{branch_scan, RecordId, Storage};
    let s = fresh();
    let plan = s
        .explain_branch_scan(&branch_scan(RecordId::new("x").unwrap()))
        .unwrap()
        .expect("sqlite exposes a plan");
    println!("{}", plan.join("\n"));
    assert!(
        plan.iter().any(|l| l.contains("SEARCH branch_entries")),
        "{plan:?}"
    );
    assert!(
        plan.iter().any(|l| l.contains("SEARCH entries")),
        "{plan:?}"
    );
    custos_conformance::storage::check_branch_plan(&plan).unwrap();
}
