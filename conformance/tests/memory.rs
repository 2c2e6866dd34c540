//! The whole storage suite against the memory backend in custos-core.

use custos_core::storage::MemoryStorage;

// Nothing in the memory store is durable: its "reopen" is a second handle
// over the first one's state.
custos_conformance::storage_suite!(memory, MemoryStorage::new, reopen: || {
    let first = MemoryStorage::new();
    move || first.reopen()
});

/// The runtime table agrees with the macro and names at least 40 cases.
#[test]
fn table_matches_the_case_list() {
    use custos_conformance::storage::{storage_cases, STORAGE_CASES};
    let table = storage_cases::<MemoryStorage>();
    custos_conformance::assert_table_lists(&table, STORAGE_CASES);
    assert!(table.len() >= 40, "only {} cases", table.len());
    // The table runs: every case passes through it too.
    custos_conformance::assert_every_case_passes(
        "memory",
        "conformance cases",
        &table,
        STORAGE_CASES,
        &MemoryStorage::new,
    );
}

/// The plan check refuses the two forbidden plan shapes and accepts an
/// index search.
#[test]
fn plan_check_rejects_temp_btree_and_entries_scan() {
    use custos_conformance::storage::check_branch_plan;
    let s = |v: &[&str]| v.iter().map(|l| (*l).to_owned()).collect::<Vec<_>>();
    assert!(check_branch_plan(&s(&[
        "SEARCH branch_entries USING INDEX ix_be (leaf=?)",
        "SEARCH entries USING INDEX sqlite_autoindex_entries_1 (id=?)"
    ]))
    .is_ok());
    assert!(check_branch_plan(&s(&["SCAN entries"])).is_err());
    assert!(check_branch_plan(&s(&["|--SCAN entries USING INDEX ix_entry_seq"])).is_err());
    assert!(check_branch_plan(&s(&[
        "SEARCH branch_entries USING INDEX ix_be (leaf=?)",
        "`--USE TEMP B-TREE FOR ORDER BY"
    ]))
    .is_err());
    assert!(check_branch_plan(&s(&["SCAN entries_fts"])).is_ok());
    assert!(check_branch_plan(&[]).is_err());
}
