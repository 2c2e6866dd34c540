//! Arbitrary migration environments — driver steps under faults, crashes,
//! restarts, a second driver, another plan, source drift, and forced
//! out-of-order steps of a confused driver — through the real migration
//! machine; every rule of `custos_core::migration::drive::rule` must hold.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(v) = custos_core::migration::drive::migration_bytes(data) {
        panic!("{v}");
    }
});
