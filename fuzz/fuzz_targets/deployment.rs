//! Arbitrary bytes as one deployment manifest document and as a stream of
//! deployment-catalog requests; every rule of
//! `custos_testkit::streams::deployment::check_deployment_stream` must hold.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(v) = custos_testkit::streams::deployment::check_deployment_bytes(data) {
        panic!("{v}");
    }
});
