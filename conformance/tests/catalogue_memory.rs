//! The catalogue and custody conformance suites against the memory backend
//! (`custos_core::catalogue::MemoryCatalogue`, the pure state behind a mutex).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_core::catalogue::MemoryCatalogue;

// Nothing in the memory catalogue is durable: its "reopen" is a second
// handle over the first one's state.
custos_conformance::catalogue_suite!(memory_catalogue, MemoryCatalogue::new, reopen: || {
    let first = MemoryCatalogue::new();
    move || first.reopen()
});
custos_conformance::custody_suite!(memory_custody, MemoryCatalogue::new, reopen: || {
    let first = MemoryCatalogue::new();
    move || first.reopen()
});

#[test]
fn case_tables_name_every_case() {
    println!(
        "memory: {} catalogue cases, {} custody cases",
        custos_conformance::catalogue::CATALOGUE_CASES.len(),
        custos_conformance::custody::CUSTODY_CASES.len()
    );
    assert!(custos_conformance::catalogue::CATALOGUE_CASES.len() >= 20);
    assert!(custos_conformance::custody::CUSTODY_CASES.len() >= 10);
}
