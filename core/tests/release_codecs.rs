//! Property tests of the release catalog's decoders: every decoder is total
//! on arbitrary bytes and accepts only what its encoder produces; generated
//! contracts round-trip through the metadata codec exactly when their type
//! structure is within bounds, and the read-side shape check (over parsed
//! JSON) agrees with the typed one.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_core::release::bounds::{MAX_TYPE_DEPTH, MAX_TYPE_NODES};
use custos_core::release::complete;
use custos_core::release::contract::{
    shape_of_json, Case, Contract, Field, Function, Interface, Param, ValType,
};
use custos_core::release::lifecycle::Outcome;
use custos_core::release::manifest::Manifest;
use custos_core::release::metadata::{Descriptor, MetadataError, ReleaseMetadata};
use custos_core::release::page::PageToken;
use custos_core::release::Sha256;
use proptest::prelude::*;

fn val_type() -> impl Strategy<Value = ValType> {
    let leaf = prop_oneof![
        Just(ValType::Bool),
        Just(ValType::U32),
        Just(ValType::String),
        "[a-z]{1,4}".prop_map(ValType::Own),
    ];
    leaf.prop_recursive(40, 200, 4, |inner| {
        prop_oneof![
            inner.clone().prop_map(|t| ValType::List(Box::new(t))),
            inner.clone().prop_map(|t| ValType::Option(Box::new(t))),
            (
                proptest::option::of(inner.clone()),
                proptest::option::of(inner.clone())
            )
                .prop_map(|(ok, err)| ValType::Result {
                    ok: ok.map(Box::new),
                    err: err.map(Box::new),
                }),
            proptest::collection::vec(inner.clone(), 0..4).prop_map(ValType::Tuple),
            proptest::collection::vec(inner.clone(), 0..3).prop_map(|ts| ValType::Record(
                ts.into_iter()
                    .enumerate()
                    .map(|(i, ty)| Field {
                        name: format!("f{i}"),
                        ty
                    })
                    .collect()
            )),
            proptest::collection::vec(proptest::option::of(inner), 0..3).prop_map(|ts| {
                ValType::Variant(
                    ts.into_iter()
                        .enumerate()
                        .map(|(i, ty)| Case {
                            name: format!("c{i}"),
                            ty,
                        })
                        .collect(),
                )
            }),
        ]
    })
}

fn metadata(params: Vec<ValType>, results: Vec<ValType>) -> ReleaseMetadata {
    let manifest = Manifest {
        name: "gen".into(),
        version: "1".into(),
        tenant: None,
        service: None,
        component_digest: Sha256::of(b"c"),
        exports: vec!["api".into()],
    };
    ReleaseMetadata {
        descriptor: Descriptor::for_release(&manifest, 1),
        contract: Contract {
            interfaces: vec![Interface {
                docs: None,
                name: "api".into(),
                functions: vec![Function {
                    docs: None,
                    name: "f".into(),
                    params: params
                        .into_iter()
                        .enumerate()
                        .map(|(i, ty)| Param {
                            name: format!("p{i}"),
                            ty,
                        })
                        .collect(),
                    results,
                }],
            }],
        },
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn decoders_are_total_and_accept_only_canonical_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        if let Ok(m) = Manifest::decode_canonical(&bytes, 1 << 20) {
            prop_assert_eq!(m.canonical(), bytes.clone());
        }
        let _ = Manifest::parse(&bytes, 1 << 20);
        if let Ok(m) = ReleaseMetadata::decode(&bytes, 1 << 20) {
            prop_assert_eq!(m.encode().unwrap(), bytes.clone());
        }
        if let Ok(o) = Outcome::decode(&bytes) {
            prop_assert_eq!(o.encode(), bytes.clone());
        }
        let _ = PageToken::decode(&String::from_utf8_lossy(&bytes));
        prop_assert!(complete::check_decoder(&bytes).is_ok());
        prop_assert!(custos_core::release::check_decoders(&bytes).is_ok());
    }

    #[test]
    fn generated_contracts_round_trip_iff_within_bounds(
        params in proptest::collection::vec(val_type(), 0..3),
        results in proptest::collection::vec(val_type(), 0..2),
    ) {
        let m = metadata(params, results);
        let shape = m.contract.shape();
        let json = serde_json::to_value(&m.contract).unwrap();
        prop_assert_eq!(shape_of_json(&json), shape);
        let within = shape.depth <= MAX_TYPE_DEPTH && shape.nodes <= MAX_TYPE_NODES;
        match m.encode_checked(1 << 24) {
            Ok(bytes) => {
                prop_assert!(within);
                prop_assert_eq!(ReleaseMetadata::decode(&bytes, 1 << 24).unwrap(), m);
            }
            Err(MetadataError::Contract(_)) => prop_assert!(!within),
            Err(e) => prop_assert!(false, "unexpected {}", e),
        }
    }
}
