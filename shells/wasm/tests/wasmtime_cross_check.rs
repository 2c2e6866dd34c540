//! Cross-checks (feature `wasmtime` only): the engine's own view of each test
//! component — `component_type().exports(&engine)` — agrees with the
//! wasmparser extraction on exported names and function parameter/result
//! counts; the pinned validation features agree with what the engine
//! compiles; and the preparation stamp is engine-scoped and deterministic.

#![cfg(feature = "wasmtime")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;

use common::*;
use custos_core::release::Sha256;
use custos_wasm::prepare::{PrepareError, Preparer, ENGINE_MAJOR};
use custos_wasm::{canonical_bytes, digest, inspect, Contract, InspectError};
use wasmtime::component::types::ComponentItem;

/// (interface, function) -> (params, results). A top-level function is an
/// interface named after it (core's form).
type Shape = BTreeMap<(String, String), (usize, usize)>;

fn engine_shape(engine: &wasmtime::Engine, bytes: &[u8]) -> (Vec<String>, Shape) {
    let c = wasmtime::component::Component::from_binary(engine, bytes).unwrap();
    let mut names = Vec::new();
    let mut shape = Shape::new();
    for (name, ext) in c.component_type().exports(engine) {
        match ext.ty {
            ComponentItem::ComponentFunc(f) => {
                names.push(name.to_string());
                shape.insert(
                    (name.to_string(), name.to_string()),
                    (f.params().len(), f.results().len()),
                );
            }
            ComponentItem::ComponentInstance(i) => {
                names.push(name.to_string());
                for (inner, ext) in i.exports(engine) {
                    if let ComponentItem::ComponentFunc(f) = ext.ty {
                        shape.insert(
                            (name.to_string(), inner.to_string()),
                            (f.params().len(), f.results().len()),
                        );
                    }
                }
            }
            _ => {}
        }
    }
    (names, shape)
}

fn parser_shape(c: &Contract) -> (Vec<String>, Shape) {
    let shape = c
        .interfaces
        .iter()
        .flat_map(|i| {
            i.functions.iter().map(|f| {
                (
                    (i.name.clone(), f.name.clone()),
                    (f.params.len(), f.results.len()),
                )
            })
        })
        .collect();
    (c.export_names(), shape)
}

#[test]
fn engine_and_parser_agree_on_exports_and_arity() {
    let engine = wasmtime::Engine::default();
    let components = [
        ("nested", nested_component()),
        ("plain", plain_component()),
        ("add", add_component()),
        ("wide-3", wide_component(3)),
        ("deep-20", deep_component(20)),
    ];
    let mut functions = 0;
    for (what, bytes) in components {
        let contract = inspect(&bytes).unwrap();
        let (mut en, es) = engine_shape(&engine, &bytes);
        let (mut pn, ps) = parser_shape(&contract);
        en.sort();
        pn.sort();
        assert_eq!(en, pn, "{what}: export names");
        assert_eq!(es, ps, "{what}: functions and arity");
        assert!(!ps.is_empty(), "{what}: no function compared");
        functions += ps.len();
    }
    assert!(functions >= 15, "{functions}");
}

/// One core-module construct per feature, inside a component.
fn probe(body: &str) -> Vec<u8> {
    wat::parse_str(format!("(component (core module {body}))")).unwrap()
}

#[test]
fn pinned_features_agree_with_the_engine() {
    let engine = wasmtime::Engine::default();
    let probes: Vec<(&str, Vec<u8>)> = vec![
        ("mvp", probe("(func (result i32) i32.const 1)")),
        ("simd", probe("(func (result v128) v128.const i64x2 0 0)")),
        (
            "relaxed simd",
            probe(
                "(func (param v128 v128 v128) (result v128) \
                 local.get 0 local.get 1 local.get 2 f32x4.relaxed_madd)",
            ),
        ),
        ("multi memory", probe("(memory 1) (memory 1)")),
        ("memory64", probe("(memory i64 1)")),
        ("tail call", probe("(func $f (result i32) return_call $f)")),
        (
            "bulk memory",
            probe("(memory 1) (func i32.const 0 i32.const 0 i32.const 0 memory.fill)"),
        ),
        (
            "reference types (funcref table)",
            probe("(table 1 funcref)"),
        ),
        (
            "function references",
            probe("(type $t (func)) (func (param (ref $t)))"),
        ),
        (
            "extended const",
            probe("(global i32 (i32.add (i32.const 1) (i32.const 2)))"),
        ),
        ("gc struct", probe("(type (struct (field i32)))")),
        ("gc types (externref)", probe("(func (param externref))")),
        ("threads (shared memory)", probe("(memory 1 1 shared)")),
        ("exceptions (tag)", probe("(tag (param i32))")),
        (
            "component async (future)",
            wat::parse_str("(component (type (future u32)))").unwrap(),
        ),
    ];
    let mut disagreements = Vec::new();
    let mut accepted = 0;
    for (what, bytes) in &probes {
        let parser = inspect(bytes).is_ok();
        let engine_ok = wasmtime::component::Component::from_binary(&engine, bytes).is_ok();
        accepted += usize::from(parser);
        if parser != engine_ok {
            disagreements.push(format!("{what}: parser {parser}, engine {engine_ok}"));
        }
    }
    assert!(disagreements.is_empty(), "{disagreements:#?}");
    assert!(accepted >= 8 && accepted < probes.len(), "{accepted}");
}

#[test]
fn preparation_stamp_is_engine_scoped_and_deterministic() {
    let preparer = Preparer::new().unwrap();
    let bytes = nested_component();
    let a = preparer.prepare(&bytes).unwrap();
    let b = Preparer::new().unwrap().prepare(&bytes).unwrap();
    assert_eq!(a.stamp, b.stamp, "same engine config, same bytes");
    assert_eq!(a.stamp.engine, format!("wasmtime-{ENGINE_MAJOR}"));
    assert_eq!(a.stamp.component_digest, Sha256::of(&bytes));
    assert_eq!(a.stamp.contract_digest, digest(&inspect(&bytes).unwrap()));
    assert_eq!(a.stamp.type_depth, a.contract.shape().depth);
    assert_eq!(
        a.stamp.contract_bytes,
        canonical_bytes(&a.contract).len() as u64
    );
    let fp = a.stamp.fingerprint();
    assert_eq!(fp.digest, a.stamp.digest().0);
    assert_eq!(fp.type_depth, 5);

    // Other bytes, other stamp.
    let other = preparer.prepare(&plain_component()).unwrap();
    assert_ne!(other.stamp.component_digest, a.stamp.component_digest);
    assert_ne!(other.stamp.digest(), a.stamp.digest());

    // Another engine configuration, another engine digest and stamp.
    let mut config = wasmtime::Config::new();
    config.cranelift_opt_level(wasmtime::OptLevel::None);
    let unopt = Preparer::with_config(&config).unwrap();
    assert_ne!(unopt.engine_digest(), preparer.engine_digest());
    let c = unopt.prepare(&bytes).unwrap();
    assert_eq!(c.stamp.component_digest, a.stamp.component_digest);
    assert_ne!(c.stamp.digest(), a.stamp.digest());
}

#[test]
fn preparation_refuses_what_publication_refuses() {
    let preparer = Preparer::new().unwrap();
    let module = wat::parse_str("(module)").unwrap();
    assert!(matches!(
        preparer.prepare(&module),
        Err(PrepareError::Inspect(InspectError::CoreModule))
    ));
    assert!(matches!(
        preparer.prepare(&deep_component(40)),
        Err(PrepareError::Inspect(InspectError::TooComplex { .. }))
    ));
    let bytes = add_component();
    assert!(matches!(
        preparer.prepare(&bytes[..bytes.len() - 3]),
        Err(PrepareError::Inspect(_))
    ));
}
