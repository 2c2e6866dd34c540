//! The catalogue, custody and access conformance suites against SQLite, one fresh
//! catalogue file per factory call.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_sqlite::catalogue::SqliteCatalogue;

fn fresh() -> SqliteCatalogue {
    SqliteCatalogue::open_temp().expect("open a temp catalogue")
}

/// A catalogue file in a temporary directory, opened afresh by every call.
fn place() -> impl Fn() -> SqliteCatalogue {
    let dir = tempfile::tempdir().expect("a temp dir");
    move || SqliteCatalogue::open(dir.path().join("catalogue.db")).expect("open the catalogue")
}

custos_conformance::catalogue_suite!(sqlite_catalogue, fresh, reopen: place);
custos_conformance::custody_suite!(sqlite_custody, fresh, reopen: place);
custos_conformance::access_suite!(sqlite_access, fresh, reopen: place);

#[test]
fn the_access_table_names_every_case() {
    println!(
        "sqlite: {} access cases",
        custos_conformance::access::ACCESS_CASES.len()
    );
    assert!(custos_conformance::access::ACCESS_CASES.len() >= 28);
}
