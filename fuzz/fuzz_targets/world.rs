//! Arbitrary control-catalog request streams over two worlds; every rule of
//! `custos_core::drive_world::world_stream` must hold.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(v) = custos_core::drive_world::world_bytes(data) {
        panic!("{v}");
    }
});
