//! The whole snapshot suite against the memory backend in custos-core.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_core::storage::MemoryStorage;

custos_conformance::snapshot_suite!(memory, MemoryStorage::new);

/// The runtime table agrees with the macro, names no case twice, and
/// every case passes through it.
#[test]
fn table_matches_the_case_list() {
    use custos_conformance::snapshot::{snapshot_cases, SNAPSHOT_CASES};
    let table = snapshot_cases::<MemoryStorage>();
    custos_conformance::assert_table_lists(&table, SNAPSHOT_CASES);
    custos_conformance::assert_every_case_passes(
        "memory",
        "snapshot cases",
        &table,
        SNAPSHOT_CASES,
        &MemoryStorage::new,
    );
}

/// The plan check refuses table scans and sorts and accepts index searches.
#[test]
fn snapshot_plan_check_has_teeth() {
    use custos_conformance::snapshot::check_snapshot_plan;
    let s = |v: &[&str]| v.iter().map(|l| (*l).to_owned()).collect::<Vec<_>>();
    assert!(check_snapshot_plan(&s(&[
        "SEARCH registers USING INDEX sqlite_autoindex_registers_1 (namespace=? AND key=?)"
    ]))
    .is_ok());
    assert!(check_snapshot_plan(&s(&["SCAN registers"])).is_err());
    assert!(check_snapshot_plan(&s(&["USE TEMP B-TREE FOR ORDER BY"])).is_err());
    assert!(check_snapshot_plan(&s(&["Seq Scan on storage_registers"])).is_err());
    assert!(check_snapshot_plan(&s(&["Sort  (cost=1)"])).is_err());
    assert!(check_snapshot_plan(&[]).is_err());
}
