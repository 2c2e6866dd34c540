//! The control-catalog conformance suite against the memory backend
//! (`custos_core::control_memory::MemoryControlCatalog`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_core::control_memory::MemoryControlCatalog;

// Nothing in the memory catalog is durable: its "reopen" is a second handle
// over the first one's state.
custos_conformance::control_catalog_suite!(memory_control, MemoryControlCatalog::new, reopen: || {
    let first = MemoryControlCatalog::new();
    move || first.reopen()
});
custos_conformance::control_admin_suite!(memory_admin, MemoryControlCatalog::new, reopen: || {
    let first = MemoryControlCatalog::new();
    move || first.reopen()
});

#[test]
fn control_case_table_names_every_case() {
    println!(
        "memory: {} control-catalog cases",
        custos_conformance::control::CONTROL_CATALOG_CASES.len()
    );
    assert!(custos_conformance::control::CONTROL_CATALOG_CASES.len() >= 18);
}
