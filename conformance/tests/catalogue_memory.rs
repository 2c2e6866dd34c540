//! The catalogue and custody conformance suites against the memory backend
//! (`custos_core::catalogue::MemoryCatalogue`, the pure state behind a mutex).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_core::catalogue::MemoryCatalogue;

custos_conformance::catalogue_suite!(memory_catalogue, MemoryCatalogue::new);
custos_conformance::custody_suite!(memory_custody, MemoryCatalogue::new);

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
