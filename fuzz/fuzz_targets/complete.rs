//! Arbitrary bytes into the COMPLETE record decoder; the contract of
//! `custos_core::release::complete::check_decoder` must hold.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(v) = custos_core::release::complete::check_decoder(data) {
        panic!("{v}");
    }
});
