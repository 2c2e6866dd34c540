//! The catalogue, custody and access conformance suites against SQLite, one fresh
//! catalogue file per factory call.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_sqlite::catalogue::SqliteCatalogue;

fn fresh() -> SqliteCatalogue {
    SqliteCatalogue::open_temp().expect("open a temp catalogue")
}

custos_conformance::catalogue_suite!(sqlite_catalogue, fresh);
custos_conformance::custody_suite!(sqlite_custody, fresh);
custos_conformance::access_suite!(sqlite_access, fresh);

#[test]
fn the_access_table_names_every_case() {
    println!(
        "sqlite: {} access cases",
        custos_conformance::access::ACCESS_CASES.len()
    );
    assert!(custos_conformance::access::ACCESS_CASES.len() >= 28);
}
