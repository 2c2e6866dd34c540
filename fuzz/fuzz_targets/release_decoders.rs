//! Arbitrary bytes into every release decoder (COMPLETE, manifest,
//! metadata, lifecycle record, page token); the contract of
//! `custos_core::release::check_decoders` must hold.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(v) = custos_core::release::check_decoders(data) {
        panic!("{v}");
    }
});
