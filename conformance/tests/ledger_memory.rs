//! The ledger conformance suite against the memory backend (the oracle).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use custos_core::ledger::MemoryLedger;

// Nothing in the memory ledger is durable: its "reopen" is a second handle
// over the first one's maps, recovered as an open is.
custos_conformance::ledger_suite!(memory, MemoryLedger::new, reopen: || {
    let first = MemoryLedger::new();
    move || first.reopen().unwrap()
});

/// The runtime table names the same cases, and every one passes through it.
#[test]
fn every_ledger_case_passes_through_the_table() {
    use custos_conformance::ledger::{ledger_cases, LEDGER_CASES};
    let table = ledger_cases::<MemoryLedger>();
    custos_conformance::assert_every_case_passes(
        "memory",
        "ledger conformance cases",
        &table,
        LEDGER_CASES,
        &MemoryLedger::new,
    );
}

/// A ledger that counts only unsettled history as Activity (scopes and
/// admitted calls, not terminal ones): `every_row_is_an_activity_record`
/// catches it, an unrelated case does not.
#[test]
fn a_ledger_that_forgets_settled_history_is_caught() {
    use custos_core::ledger::{Answer, Ledger, LedgerError, Limits, Request, RowState};
    struct ForgetsSettled(MemoryLedger);
    impl Ledger for ForgetsSettled {
        fn execute(&self, limits: &Limits, req: &Request) -> Result<Answer, LedgerError> {
            self.0.execute(limits, req)
        }
        fn close(&self) -> Result<(), LedgerError> {
            self.0.close()
        }
        fn records(&self) -> Result<u64, LedgerError> {
            self.0.records()?;
            let s = self.0.snapshot()?;
            let live = s
                .calls
                .values()
                .filter(|c| matches!(c.state, RowState::Admitted { .. }))
                .count();
            Ok((s.scopes.len() + live) as u64)
        }
    }
    let mutant = || ForgetsSettled(MemoryLedger::new());
    let caught = std::panic::catch_unwind(|| {
        custos_conformance::ledger::every_row_is_an_activity_record(mutant)
    })
    .is_err();
    assert!(caught, "a ledger forgetting settled history passed");
    custos_conformance::ledger::fresh_ledger_is_empty(mutant);
}
