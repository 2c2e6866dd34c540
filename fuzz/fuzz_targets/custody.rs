//! Arbitrary custody request streams over three catalogues; every rule of
//! `custos_testkit::streams::custody::check_custody_stream` must hold.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(v) = custos_testkit::streams::custody::check_custody_bytes(data) {
        panic!("{v}");
    }
});
