//! Test components built from text: WIT worlds (through a dummy core module
//! and the component encoder) and component text (`wat`). Nothing binary is
//! checked in.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use wit_component::{ComponentEncoder, StringEncoding};
use wit_parser::{ManglingAndAbi, Resolve};

/// The component for `world` in the WIT package text `wit`.
pub fn component_from_wit(wit: &str, world: &str) -> Vec<u8> {
    let mut resolve = Resolve::default();
    let pkg = resolve.push_str("test.wit", wit).expect("WIT parses");
    let world = resolve
        .select_world(&[pkg], Some(world))
        .expect("world exists");
    let mut module = wit_component::dummy_module(&resolve, world, ManglingAndAbi::Standard32);
    wit_component::embed_component_metadata(&mut module, &resolve, world, StringEncoding::UTF8)
        .expect("metadata embeds");
    ComponentEncoder::default()
        .validate(true)
        .module(&module)
        .expect("module accepted")
        .encode()
        .expect("component encodes")
}

/// A WIT package with one exported interface of several functions whose
/// types nest records, variants, lists of options of results, tuples, enums,
/// flags and a resource.
pub const NESTED_WIT: &str = r#"
package custos:demo@0.1.0;

interface api {
    record point { x: s32, y: s32 }
    variant shape { circle(f64), rect(tuple<point, point>), empty }
    enum colour { red, green, blue }
    flags perms { read, write, exec }
    resource blob {
        constructor(size: u32);
        len: func() -> u64;
    }

    area: func(s: shape) -> f64;
    scan: func(items: list<option<result<point, string>>>, limit: u8) -> tuple<u32, list<string>>;
    paint: func(c: colour, p: perms, ok: bool, ch: char) -> result<_, string>;
    nothing: func();
    consume: func(b: own<blob>) -> result<u64>;
}

world service {
    export api;
    export version: func() -> string;
}
"#;

/// The component exporting [`NESTED_WIT`]'s `service` world.
pub fn nested_component() -> Vec<u8> {
    component_from_wit(NESTED_WIT, "service")
}

/// A world whose single top-level function takes `depth` nested lists
/// around a `u32` (its parameter type has depth `depth + 1`).
pub fn deep_component(depth: usize) -> Vec<u8> {
    let mut ty = "u32".to_string();
    for _ in 0..depth {
        ty = format!("list<{ty}>");
    }
    let wit = format!("package custos:deep;\nworld deep {{\n export f: func(x: {ty});\n}}\n");
    component_from_wit(&wit, "deep")
}

/// A world whose function takes `8^levels` leaves through shared tuple
/// types: a tiny component with an exponentially large expanded type.
pub fn wide_component(levels: usize) -> Vec<u8> {
    let mut wit = String::from("package custos:wide;\ninterface t {\n type t0 = u8;\n");
    for i in 1..=levels {
        let p = format!("t{}", i - 1);
        wit.push_str(&format!(
            " type t{i} = tuple<{p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}>;\n"
        ));
    }
    wit.push_str(&format!(
        " f: func(x: t{levels});\n}}\nworld wide {{\n export t;\n}}\n"
    ));
    component_from_wit(&wit, "wide")
}

/// A plain world with a couple of top-level functions and two interfaces.
pub const PLAIN_WIT: &str = r#"
package custos:plain;

interface counter {
    incr: func(by: u64) -> u64;
    reset: func();
}

interface names {
    greet: func(first: string, last: string, times: u8) -> list<string>;
}

world plain {
    export counter;
    export names;
    export run: func(args: list<string>) -> s32;
    export ping: func();
}
"#;

/// The component exporting [`PLAIN_WIT`]'s world.
pub fn plain_component() -> Vec<u8> {
    component_from_wit(PLAIN_WIT, "plain")
}

/// Component text with one lifted top-level function `add: func(a: u32,
/// b: u32) -> u32`, written by hand.
pub const ADD_WAT: &str = r#"
(component
  (core module $m
    (func (export "add") (param i32 i32) (result i32)
      local.get 0 local.get 1 i32.add))
  (core instance $i (instantiate $m))
  (func $add (param "a" u32) (param "b" u32) (result u32)
    (canon lift (core func $i "add")))
  (export "add" (func $add)))
"#;

/// The component of [`ADD_WAT`].
pub fn add_component() -> Vec<u8> {
    wat::parse_str(ADD_WAT).expect("component text parses")
}

/// The top-level section ends of `bytes` (after the header and after each
/// top-level section): the prefix lengths that are complete components.
pub fn section_boundaries(bytes: &[u8]) -> Vec<usize> {
    let mut out = vec![8];
    let mut depth = 0usize;
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        let payload = payload.expect("valid component parses");
        match &payload {
            wasmparser::Payload::Version { .. } => depth += 1,
            wasmparser::Payload::End(_) => depth -= 1,
            _ => {}
        }
        // A nested module/component section is reported at depth 1 before
        // its own payloads (whose Version bumps the depth).
        if depth == 1 {
            if let Some((_, range)) = payload.as_section() {
                out.push(range.end);
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}
