//! The inputs of a release as `custos releases publish` takes them: a
//! component exporting `add` and its contract.

#![allow(dead_code)]

/// The contract of [`component`]: one exported function `add`.
pub const CONTRACT: &str = r#"{"interfaces":[{"name":"add","functions":[{"name":"add","params":[{"name":"a","ty":"u32"},{"name":"b","ty":"u32"}],"results":["u32"]}]}]}"#;

/// Component `n`: with the `wasm` feature a real component (the Wasm
/// inspector validates it and extracts [`CONTRACT`]); without it, bytes
/// with the Wasm magic (all the trusted-local inspector checks).
pub fn component(n: u8) -> Vec<u8> {
    #[cfg(feature = "wasm")]
    let bytes = wat::parse_str(format!(
        r#"(component
  (core module $m
    (func (export "add") (param i32 i32) (result i32)
      local.get 0 local.get 1 i32.add i32.const {n} i32.add))
  (core instance $i (instantiate $m))
  (func $add (param "a" u32) (param "b" u32) (result u32)
    (canon lift (core func $i "add")))
  (export "add" (func $add)))"#
    ))
    .unwrap();
    #[cfg(not(feature = "wasm"))]
    let bytes = {
        let mut c = b"\0asm\x0d\0\x01\0".to_vec();
        c.extend(std::iter::repeat_n(n, 100));
        c
    };
    bytes
}
