//! Arbitrary control-catalog request streams over two worlds; every rule of
//! `custos_testkit::streams::world::check_world_stream` must hold.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(v) = custos_testkit::streams::world::check_world_bytes(data) {
        panic!("{v}");
    }
});
