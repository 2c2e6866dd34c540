//! Arbitrary bytes into the component inspector; the contract of
//! `custos_wasm::check_inspector` must hold (never a panic; an accepted
//! contract is bounded, measured consistently and deterministic).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(v) = custos_wasm::check_inspector(data) {
        panic!("{v}");
    }
});
