//! Arbitrary lease request streams; every invariant of
//! `custos_core::drive::lease_stream` must hold.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(v) = custos_core::drive::lease_bytes(data) {
        panic!("{v}");
    }
});
