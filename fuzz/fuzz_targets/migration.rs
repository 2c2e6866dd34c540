//! Arbitrary migration environments — driver steps under faults, crashes,
//! restarts, a second driver, another plan, source drift, and forced
//! out-of-order steps of a confused driver — through the real migration
//! machine (`custos_testkit::simulate`); every rule of
//! `custos_testkit::simulate::rule` must hold
//! (`custos_testkit::streams::migration::check_migration_stream`).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(v) = custos_testkit::streams::migration::check_migration_bytes(data) {
        panic!("{v}");
    }
});
