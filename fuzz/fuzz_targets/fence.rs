//! Arbitrary fence request streams; every invariant of
//! `custos_testkit::streams::fence::check_fence_stream` must hold.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(v) = custos_testkit::streams::fence::check_fence_bytes(data) {
        panic!("{v}");
    }
});
