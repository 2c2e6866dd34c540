//! Arbitrary execution-ledger request streams; every invariant of
//! `custos_testkit::streams::ledger::check_ledger_stream` must hold.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(v) = custos_testkit::streams::ledger::check_ledger_bytes(data) {
        panic!("{v}");
    }
});
