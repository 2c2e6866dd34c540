//! The access conformance suite against the memory backend
//! (`custos_core::catalogue::MemoryCatalogue`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_core::catalogue::MemoryCatalogue;

// Nothing in the memory catalogue is durable: its "reopen" is a second
// handle over the first one's state.
custos_conformance::access_suite!(memory_access, MemoryCatalogue::new, reopen: || {
    let first = MemoryCatalogue::new();
    move || first.reopen()
});

#[test]
fn the_access_table_names_every_case() {
    println!(
        "memory: {} access cases",
        custos_conformance::access::ACCESS_CASES.len()
    );
    assert!(custos_conformance::access::ACCESS_CASES.len() >= 28);
}
