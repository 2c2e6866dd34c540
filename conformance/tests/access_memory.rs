//! The access conformance suite against the memory backend
//! (`custos_core::catalogue::MemoryCatalogue`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_core::catalogue::MemoryCatalogue;

custos_conformance::access_suite!(memory_access, MemoryCatalogue::new);

#[test]
fn the_access_table_names_every_case() {
    println!(
        "memory: {} access cases",
        custos_conformance::access::ACCESS_CASES.len()
    );
    assert!(custos_conformance::access::ACCESS_CASES.len() >= 28);
}
