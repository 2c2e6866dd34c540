//! Publication-time inspection: contract extraction from components built
//! from WIT and component text, the typed refusals (core module, garbage,
//! every truncation, removed engine features, type bounds), and the
//! declared-exports check.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use custos_core::release::bounds::{Bound, BoundError, MAX_TYPE_DEPTH, MAX_TYPE_NODES};
use custos_wasm::{
    canonical_bytes, check_declared_exports, check_inspector, digest, engine_features, inspect,
    Case, DeclaredExportsError, Field, InspectError, Param, ValType, Wit, REMOVED_FEATURES,
};
use wasmparser::{Validator, WasmFeatures};

fn b(t: ValType) -> Box<ValType> {
    Box::new(t)
}

fn point() -> ValType {
    ValType::Record(vec![
        Field {
            name: "x".into(),
            ty: ValType::S32,
        },
        Field {
            name: "y".into(),
            ty: ValType::S32,
        },
    ])
}

fn p(name: &str, ty: ValType) -> Param {
    Param {
        name: name.into(),
        ty,
    }
}

#[test]
fn nested_interface_is_extracted_exactly() {
    let c = inspect(&nested_component()).unwrap();
    assert_eq!(c.export_names(), ["custos:demo/api@0.1.0", "version"]);
    assert_eq!(c.interfaces.len(), 2);
    let iface = |n: &str| c.interfaces.iter().find(|i| i.name == n).unwrap();
    let api = iface("custos:demo/api@0.1.0");
    let names: Vec<_> = api.functions.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "[constructor]blob",
            "[method]blob.len",
            "area",
            "scan",
            "paint",
            "nothing",
            "consume"
        ]
    );
    let f = |n: &str| api.functions.iter().find(|f| f.name == n).unwrap();

    let shape = ValType::Variant(vec![
        Case {
            name: "circle".into(),
            ty: Some(ValType::F64),
        },
        Case {
            name: "rect".into(),
            ty: Some(ValType::Tuple(vec![point(), point()])),
        },
        Case {
            name: "empty".into(),
            ty: None,
        },
    ]);
    assert_eq!(f("area").params, [p("s", shape)]);
    assert_eq!(f("area").results, [ValType::F64]);

    let items = ValType::List(b(ValType::Option(b(ValType::Result {
        ok: Some(b(point())),
        err: Some(b(ValType::String)),
    }))));
    assert_eq!(
        f("scan").params,
        [p("items", items), p("limit", ValType::U8)]
    );
    assert_eq!(
        f("scan").results,
        [ValType::Tuple(vec![
            ValType::U32,
            ValType::List(b(ValType::String))
        ])]
    );

    assert_eq!(
        f("paint").params,
        [
            p(
                "c",
                ValType::Enum(vec!["red".into(), "green".into(), "blue".into()])
            ),
            p(
                "p",
                ValType::Flags(vec!["read".into(), "write".into(), "exec".into()])
            ),
            p("ok", ValType::Bool),
            p("ch", ValType::Char),
        ]
    );
    assert_eq!(
        f("paint").results,
        [ValType::Result {
            ok: None,
            err: Some(b(ValType::String))
        }]
    );
    assert_eq!(f("nothing").params, []);
    assert_eq!(f("nothing").results, []);

    assert_eq!(f("[constructor]blob").params, [p("size", ValType::U32)]);
    assert_eq!(
        f("[constructor]blob").results,
        [ValType::Own("blob".into())]
    );
    assert_eq!(
        f("[method]blob.len").params,
        [p("self", ValType::Borrow("blob".into()))]
    );
    assert_eq!(f("consume").params, [p("b", ValType::Own("blob".into()))]);
    assert_eq!(
        f("consume").results,
        [ValType::Result {
            ok: Some(b(ValType::U64)),
            err: None
        }]
    );

    // The top-level function: an interface named after it (core's form).
    let version = iface("version");
    assert_eq!(version.functions.len(), 1);
    assert_eq!(version.functions[0].name, "version");
    assert_eq!(version.functions[0].params, []);
    assert_eq!(version.functions[0].results, [ValType::String]);

    // scan's items are list<option<result<record{s32}>>>: depth 5.
    assert_eq!(c.shape().depth, 5);
    assert!(check_inspector(&nested_component()).is_ok());
}

#[test]
fn contract_text_reads_like_wit() {
    let c = inspect(&nested_component()).unwrap();
    let scan = c
        .interfaces
        .iter()
        .find(|i| i.name == "custos:demo/api@0.1.0")
        .unwrap()
        .functions
        .iter()
        .find(|f| f.name == "scan")
        .unwrap();
    assert_eq!(
        Wit(scan).to_string(),
        "scan: func(items: list<option<result<record { x: s32, y: s32 }, string>>>, limit: u8) \
         -> tuple<u32, list<string>>"
    );
}

#[test]
fn top_level_function_from_component_text() {
    let c = inspect(&add_component()).unwrap();
    assert_eq!(c.interfaces.len(), 1);
    assert_eq!(c.interfaces[0].name, "add");
    assert_eq!(c.interfaces[0].functions.len(), 1);
    let add = &c.interfaces[0].functions[0];
    assert_eq!(add.name, "add");
    assert_eq!(add.params, [p("a", ValType::U32), p("b", ValType::U32)]);
    assert_eq!(add.results, [ValType::U32]);
    assert_eq!(c.shape().depth, 1);
    assert_eq!(c.shape().nodes, 3);
}

#[test]
fn plain_world_interfaces_and_functions() {
    let c = inspect(&plain_component()).unwrap();
    let order: Vec<_> = c.interfaces.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(
        order,
        ["run", "ping", "custos:plain/counter", "custos:plain/names"],
        "export order (the encoder puts top-level functions first)"
    );
    assert_eq!(
        c.export_names(),
        ["custos:plain/counter", "custos:plain/names", "ping", "run"]
    );
    let run = &c.interfaces[0].functions[0];
    assert_eq!(run.params, [p("args", ValType::List(b(ValType::String)))]);
    assert_eq!(run.results, [ValType::S32]);
    assert_eq!(c.interfaces[2].functions.len(), 2);
    assert_eq!(c.interfaces[3].functions[0].params.len(), 3);
}

#[test]
fn canonical_encoding_and_digest_are_deterministic_and_discriminating() {
    let a = inspect(&nested_component()).unwrap();
    let again = inspect(&nested_component()).unwrap();
    assert_eq!(a, again);
    assert_eq!(canonical_bytes(&a), canonical_bytes(&again));
    assert_eq!(digest(&a), digest(&again));
    let other = inspect(&plain_component()).unwrap();
    assert_ne!(digest(&a), digest(&other));
    // One changed name, one dropped result: other digests.
    let mut renamed = a.clone();
    renamed.interfaces[1].functions[0].name = "versions".into();
    assert_ne!(digest(&renamed), digest(&a));
    let mut dropped = a.clone();
    dropped.interfaces[1].functions[0].results.clear();
    assert_ne!(digest(&dropped), digest(&a));
}

#[test]
fn core_module_is_refused() {
    let module = wat::parse_str("(module (func (export \"f\") (result i32) i32.const 1))").unwrap();
    assert_eq!(inspect(&module), Err(InspectError::CoreModule));
    // The dummy core module behind a WIT world is refused the same way.
    let mut resolve = wit_parser::Resolve::default();
    let pkg = resolve.push_str("t.wit", PLAIN_WIT).unwrap();
    let world = resolve.select_world(&[pkg], Some("plain")).unwrap();
    let dummy =
        wit_component::dummy_module(&resolve, world, wit_parser::ManglingAndAbi::Standard32);
    assert_eq!(inspect(&dummy), Err(InspectError::CoreModule));
    assert!(InspectError::CoreModule
        .to_string()
        .contains("core WebAssembly module, not a component"));
}

#[test]
fn garbage_is_refused() {
    for garbage in [
        &b"\x7fELF\x02\x01\x01\0\0\0\0\0"[..],
        b"hello, world",
        b"{\"format_version\":1}",
        &[0xffu8; 64][..],
    ] {
        assert_eq!(
            inspect(garbage),
            Err(InspectError::NotWasm { len: garbage.len() }),
            "{garbage:?}"
        );
    }
    assert_eq!(inspect(b""), Err(InspectError::NotWasm { len: 0 }));
    // The magic number followed by an unknown version/layer.
    let bad_version = b"\0asm\x0e\0\x02\0";
    assert!(matches!(
        inspect(bad_version),
        Err(InspectError::Invalid { .. })
    ));
    // A component header followed by a section of unknown id.
    let mut unknown = nested_component()[..8].to_vec();
    unknown.extend_from_slice(&[0x7f, 0x00]);
    assert!(matches!(
        inspect(&unknown),
        Err(InspectError::Invalid { .. })
    ));
}

#[test]
fn every_truncation_is_refused_or_a_complete_smaller_component() {
    for bytes in [nested_component(), add_component(), plain_component()] {
        let boundaries = section_boundaries(&bytes);
        let mut truncated = 0;
        let mut accepted = 0;
        for len in 0..bytes.len() {
            let prefix = &bytes[..len];
            match inspect(prefix) {
                // Only a prefix ending exactly at a top-level section
                // boundary is itself a complete component (the release digest
                // tells it from the original; the declared-exports check
                // refuses it unless only trailing custom sections were cut).
                Ok(_) => {
                    assert!(
                        boundaries.contains(&len),
                        "prefix of {len}/{} bytes accepted mid-section",
                        bytes.len()
                    );
                    assert!(check_inspector(prefix).is_ok());
                    accepted += 1;
                }
                Err(InspectError::NotWasm { len: 0 }) => assert_eq!(len, 0),
                Err(InspectError::Truncated { .. }) => truncated += 1,
                Err(InspectError::Invalid { .. }) => {}
                Err(e) => panic!("prefix {len}: unexpected refusal {e}"),
            }
        }
        assert!(accepted <= boundaries.len());
        // Nearly every cut is reported as a truncation, not as garbage.
        assert!(
            truncated * 10 >= bytes.len() * 9,
            "{truncated} truncations of {} prefixes",
            bytes.len()
        );
    }
}

/// Regression: `wasmparser` alone accepts a component cut inside a nested
/// core module at one of the module's own section boundaries (here right
/// after the nested module's header); the framing check refuses it.
#[test]
fn cut_inside_a_nested_module_is_truncated() {
    let bytes = nested_component();
    // header (8) + section id and a 2-byte size + the nested module header.
    assert_eq!(bytes[8], 1, "first section is a core module");
    let cut = &bytes[..8 + 3 + 8];
    assert!(
        Validator::new_with_features(engine_features())
            .validate_all(cut)
            .is_ok(),
        "wasmparser alone no longer accepts this cut; the framing check is still right"
    );
    assert!(matches!(inspect(cut), Err(InspectError::Truncated { .. })));
}

#[test]
fn truncation_drops_exports_the_manifest_declares() {
    let bytes = nested_component();
    let full = inspect(&bytes).unwrap();
    let declared = full.export_names();
    let last_export_section_end = {
        let mut end = 0;
        let mut depth = 0;
        for payload in wasmparser::Parser::new(0).parse_all(&bytes) {
            let payload = payload.unwrap();
            match &payload {
                wasmparser::Payload::Version { .. } => depth += 1,
                wasmparser::Payload::End(_) => depth -= 1,
                wasmparser::Payload::ComponentExportSection(s) if depth == 1 => end = s.range().end,
                _ => {}
            }
        }
        end
    };
    for len in 0..last_export_section_end {
        if let Ok(c) = inspect(&bytes[..len]) {
            assert!(
                check_declared_exports(&declared, &c).is_err(),
                "prefix {len} still exports everything declared"
            );
        }
    }
}

/// A component whose core module uses one construct of a removed feature.
fn with_core(body: &str) -> Vec<u8> {
    wat::parse_str(format!("(component (core module {body}))")).unwrap()
}

#[test]
fn removed_engine_features_are_refused() {
    assert_eq!(
        engine_features(),
        WasmFeatures::default().difference(
            WasmFeatures::GC
                | WasmFeatures::GC_TYPES
                | WasmFeatures::THREADS
                | WasmFeatures::EXCEPTIONS
                | WasmFeatures::CM_ASYNC
        )
    );
    assert!(engine_features().contains(WasmFeatures::COMPONENT_MODEL));
    // (feature needed, component using it)
    let cases: Vec<(&str, WasmFeatures, Vec<u8>)> = vec![
        (
            "gc struct type",
            WasmFeatures::GC | WasmFeatures::GC_TYPES,
            with_core("(type (struct (field i32)))"),
        ),
        (
            "gc types (externref)",
            WasmFeatures::GC_TYPES,
            with_core("(func (param externref))"),
        ),
        (
            "threads (shared memory)",
            WasmFeatures::THREADS,
            with_core("(memory 1 1 shared)"),
        ),
        (
            "exceptions (tag)",
            WasmFeatures::EXCEPTIONS,
            with_core("(tag (param i32))"),
        ),
        (
            "component async (future type)",
            WasmFeatures::CM_ASYNC,
            wat::parse_str("(component (type (future u32)))").unwrap(),
        ),
        (
            "component async (stream type)",
            WasmFeatures::CM_ASYNC,
            wat::parse_str("(component (type (stream u8)))").unwrap(),
        ),
    ];
    for (what, needed, bytes) in cases {
        assert!(
            needed.intersects(REMOVED_FEATURES),
            "{what}: not a removed feature"
        );
        let refused = inspect(&bytes);
        assert!(
            matches!(refused, Err(InspectError::Invalid { .. })),
            "{what}: {refused:?}"
        );
        // The same bytes validate once the feature is back: the refusal is
        // the feature's, not something else's.
        Validator::new_with_features(engine_features() | needed)
            .validate_all(&bytes)
            .unwrap_or_else(|e| panic!("{what}: refused even with the feature: {e}"));
    }
}

#[test]
fn type_depth_bound_is_exact() {
    // depth = nested lists + 1 for the u32 leaf.
    let at = inspect(&deep_component(MAX_TYPE_DEPTH as usize - 1)).unwrap();
    assert_eq!(at.shape().depth, MAX_TYPE_DEPTH);
    assert!(at.shape().check().is_ok());
    let over = inspect(&deep_component(MAX_TYPE_DEPTH as usize));
    assert_eq!(
        over,
        Err(InspectError::TooComplex {
            function: "f".into(),
            source: BoundError::ContractTooComplex {
                bound: Bound::TypeDepth,
                limit: u64::from(MAX_TYPE_DEPTH),
                requested: u64::from(MAX_TYPE_DEPTH) + 1,
            }
        })
    );
    assert!(over.unwrap_err().to_string().contains("max_type_depth"));
    // Far deeper still (the validator allows up to 100): same refusal.
    assert!(matches!(
        inspect(&deep_component(90)),
        Err(InspectError::TooComplex {
            source: BoundError::ContractTooComplex {
                bound: Bound::TypeDepth,
                ..
            },
            ..
        })
    ));
}

#[test]
fn aggregate_node_bound_counts_shared_types_at_every_use() {
    // 8^4 leaves + 8^3 + 8^2 + 8 + 1 tuples = 4,681 nodes: accepted.
    let small = inspect(&wide_component(4)).unwrap();
    assert_eq!(small.shape().nodes, 4_681);
    assert_eq!(small.shape().depth, 5);
    // 8^5 leaves alone exceed 16,384: refused, though the component is tiny.
    let bytes = wide_component(5);
    assert!(bytes.len() < 4096, "{} bytes", bytes.len());
    let refused = inspect(&bytes);
    assert_eq!(
        refused,
        Err(InspectError::TooComplex {
            function: "custos:wide/t#f".into(),
            source: BoundError::ContractTooComplex {
                bound: Bound::TypeNodes,
                limit: MAX_TYPE_NODES,
                requested: MAX_TYPE_NODES + 1,
            }
        })
    );
}

#[test]
fn declared_exports_must_match_exactly() {
    let c = inspect(&nested_component()).unwrap();
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        check_declared_exports(&s(&["version", "custos:demo/api@0.1.0"]), &c),
        Ok(())
    );
    // Declared but not exported.
    let e = check_declared_exports(&s(&["custos:demo/api@0.1.0", "version", "extra"]), &c);
    assert_eq!(
        e,
        Err(DeclaredExportsError::Mismatch {
            missing: s(&["extra"]),
            undeclared: vec![],
        })
    );
    assert!(e.unwrap_err().to_string().contains("\"extra\""));
    // Exported but not declared.
    assert_eq!(
        check_declared_exports(&s(&["version"]), &c),
        Err(DeclaredExportsError::Mismatch {
            missing: vec![],
            undeclared: s(&["custos:demo/api@0.1.0"]),
        })
    );
    // Both at once, and a function name inside an interface is not an export.
    assert_eq!(
        check_declared_exports(&s(&["area", "version"]), &c),
        Err(DeclaredExportsError::Mismatch {
            missing: s(&["area"]),
            undeclared: s(&["custos:demo/api@0.1.0"]),
        })
    );
    assert_eq!(
        check_declared_exports(&s(&["version", "version", "custos:demo/api@0.1.0"]), &c),
        Err(DeclaredExportsError::Duplicate {
            name: "version".into()
        })
    );
}

#[test]
fn non_contract_exports_are_refused() {
    let bytes =
        wat::parse_str(r#"(component (core module $m) (export "m" (core module $m)))"#).unwrap();
    assert_eq!(
        inspect(&bytes),
        Err(InspectError::UnsupportedExport {
            name: "m".into(),
            kind: "core module"
        })
    );
    let bytes =
        wat::parse_str(r#"(component (component $c) (export "c" (component $c)))"#).unwrap();
    assert!(matches!(
        inspect(&bytes),
        Err(InspectError::UnsupportedExport {
            kind: "component",
            ..
        })
    ));
}

#[test]
fn port_implementation_returns_the_contract_or_the_reason() {
    use custos_core::release::contract::ComponentInspector;
    let port: &dyn ComponentInspector = &custos_wasm::WasmInspector;
    let bytes = nested_component();
    assert_eq!(port.inspect(&bytes), Ok(Some(inspect(&bytes).unwrap())));
    let refused = port.inspect(b"garbage").unwrap_err();
    assert_eq!(
        refused.to_string(),
        "InvalidComponent: not WebAssembly (no `\\0asm` magic number; 7 bytes)"
    );
    let module = wat::parse_str("(module)").unwrap();
    assert!(port
        .inspect(&module)
        .unwrap_err()
        .reason
        .contains("core WebAssembly module"));
}
