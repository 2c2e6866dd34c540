//! The ledger conformance suite against the memory backend (the oracle).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use custos_core::ledger::MemoryLedger;

custos_conformance::ledger_suite!(memory, MemoryLedger::new);

/// The runtime table names the same cases, and every one passes through it.
#[test]
fn every_ledger_case_passes_through_the_table() {
    let table = custos_conformance::ledger::ledger_cases::<MemoryLedger>();
    assert_eq!(table.len(), custos_conformance::ledger::LEDGER_CASES.len());
    for (name, case) in &table {
        let ok = std::panic::catch_unwind(|| case(&MemoryLedger::new)).is_ok();
        assert!(ok, "{name} failed");
    }
    println!(
        "memory: {} of {} ledger conformance cases pass",
        table.len(),
        table.len()
    );
}
