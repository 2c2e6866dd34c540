//! The logical schema of an archetype table and its fingerprint.
//!
//! Core keeps its own small logical type enum so that it stays free of
//! Arrow; the Iceberg shell maps Arrow types onto [`LogicalType`]. The
//! [`fingerprint`] is SHA-256 over field names and **normalized** logical
//! types, in order, nested types included:
//!
//! - nullability is ignored (Iceberg forces fields nullable on round-trip);
//! - offset-width variants are ignored: `utf8`/`large_utf8`,
//!   `binary`/`large_binary`, `list`/`large_list`;
//! - a rename, a reorder, an added or removed column and a retype (an
//!   integer width, signedness, float width, timestamp unit or zone, a
//!   nested field's name or type) all change it.
//!
//! Schemas never evolve in place, so a fingerprint mismatch between the
//! catalog record and the physical table means corruption or out-of-band
//! interference; readers fail closed with `CatalogSchemaMismatch`.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::hex::encode as hex;

/// A timestamp's unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TimeUnit {
    /// Seconds.
    Second,
    /// Milliseconds.
    Millisecond,
    /// Microseconds.
    Microsecond,
    /// Nanoseconds.
    Nanosecond,
}

/// A logical column type.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum LogicalType {
    /// Booleans.
    Bool,
    /// Integers of `bits` (8, 16, 32, 64), signed or not.
    Int {
        /// Width in bits.
        bits: u8,
        /// Whether signed.
        signed: bool,
    },
    /// Floats of `bits` (16, 32, 64).
    Float {
        /// Width in bits.
        bits: u8,
    },
    /// UTF-8 text; `large` is the 64-bit-offset variant (ignored by the fingerprint).
    Utf8 {
        /// 64-bit offsets.
        large: bool,
    },
    /// Bytes; `large` is the 64-bit-offset variant (ignored by the fingerprint).
    Binary {
        /// 64-bit offsets.
        large: bool,
    },
    /// Days since the epoch.
    Date,
    /// A timestamp with a unit and an optional zone.
    Timestamp {
        /// The unit.
        unit: TimeUnit,
        /// The zone, if any.
        tz: Option<String>,
    },
    /// A list; `large` is the 64-bit-offset variant (ignored by the fingerprint).
    List {
        /// 64-bit offsets.
        large: bool,
        /// The item field (its name is part of the shape, its nullability is not).
        item: Box<Field>,
    },
    /// A struct of named fields, in order.
    Struct(Vec<Field>),
    /// A decimal of `precision` digits, `scale` of them after the point.
    Decimal {
        /// Total digits.
        precision: u8,
        /// Digits after the point (negative: powers of ten before it).
        scale: i8,
    },
    /// A time of day with a unit.
    Time {
        /// The unit.
        unit: TimeUnit,
    },
    /// Bytes of one fixed width (an Iceberg `uuid` is 16, a `fixed[L]` is L).
    FixedBinary {
        /// The width in bytes.
        len: i32,
    },
    /// A map: every entry a key field and a value field (their names are
    /// part of the shape, their nullability is not).
    Map {
        /// The key field.
        key: Box<Field>,
        /// The value field.
        value: Box<Field>,
    },
}

/// A named, typed field.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Field {
    /// The field name.
    pub name: String,
    /// Its logical type.
    pub ty: LogicalType,
    /// Whether it may hold nulls (ignored by the fingerprint).
    pub nullable: bool,
}

impl Field {
    /// A field.
    pub fn new(name: impl Into<String>, ty: LogicalType, nullable: bool) -> Self {
        Field {
            name: name.into(),
            ty,
            nullable,
        }
    }
}

/// A table schema: fields in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Schema {
    /// The top-level fields, in order.
    pub fields: Vec<Field>,
}

impl Schema {
    /// A schema of `fields`.
    pub fn new(fields: Vec<Field>) -> Self {
        Schema { fields }
    }

    /// The schema's [`fingerprint`].
    pub fn fingerprint(&self) -> String {
        fingerprint(self)
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_field(out: &mut Vec<u8>, f: &Field) {
    put_str(out, &f.name);
    put_type(out, &f.ty);
}

fn put_type(out: &mut Vec<u8>, ty: &LogicalType) {
    match ty {
        LogicalType::Bool => out.push(1),
        LogicalType::Int { bits, signed } => out.extend_from_slice(&[2, *bits, u8::from(*signed)]),
        LogicalType::Float { bits } => out.extend_from_slice(&[3, *bits]),
        LogicalType::Utf8 { .. } => out.push(4),
        LogicalType::Binary { .. } => out.push(5),
        LogicalType::Date => out.push(6),
        LogicalType::Timestamp { unit, tz } => {
            out.extend_from_slice(&[7, unit_byte(unit)]);
            match tz {
                None => out.push(0),
                Some(z) => {
                    out.push(1);
                    put_str(out, z);
                }
            }
        }
        LogicalType::List { item, .. } => {
            out.push(8);
            put_field(out, item);
        }
        LogicalType::Struct(fields) => {
            out.push(9);
            put_fields(out, fields);
        }
        LogicalType::Decimal { precision, scale } => {
            out.extend_from_slice(&[10, *precision, scale.to_be_bytes()[0]]);
        }
        LogicalType::Time { unit } => out.extend_from_slice(&[11, unit_byte(unit)]),
        LogicalType::FixedBinary { len } => {
            out.push(12);
            out.extend_from_slice(&len.to_be_bytes());
        }
        LogicalType::Map { key, value } => {
            out.push(13);
            put_field(out, key);
            put_field(out, value);
        }
    }
}

fn unit_byte(unit: &TimeUnit) -> u8 {
    match unit {
        TimeUnit::Second => 0,
        TimeUnit::Millisecond => 1,
        TimeUnit::Microsecond => 2,
        TimeUnit::Nanosecond => 3,
    }
}

fn put_fields(out: &mut Vec<u8>, fields: &[Field]) {
    out.extend_from_slice(&(fields.len() as u64).to_be_bytes());
    for f in fields {
        put_field(out, f);
    }
}

/// The canonical bytes [`fingerprint`] hashes: a version tag, then every
/// field's length-prefixed name and normalized type, in order.
pub fn canonical_bytes(schema: &Schema) -> Vec<u8> {
    let mut out = b"custos-schema/v1".to_vec();
    put_fields(&mut out, &schema.fields);
    out
}

/// SHA-256 of [`canonical_bytes`], lower-case hex.
pub fn fingerprint(schema: &Schema) -> String {
    hex(Sha256::digest(canonical_bytes(schema)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn leaf() -> impl Strategy<Value = LogicalType> {
        prop_oneof![
            Just(LogicalType::Bool),
            (prop::sample::select(vec![8u8, 16, 32, 64]), any::<bool>())
                .prop_map(|(bits, signed)| LogicalType::Int { bits, signed }),
            prop::sample::select(vec![16u8, 32, 64]).prop_map(|bits| LogicalType::Float { bits }),
            any::<bool>().prop_map(|large| LogicalType::Utf8 { large }),
            any::<bool>().prop_map(|large| LogicalType::Binary { large }),
            Just(LogicalType::Date),
            (
                prop::sample::select(vec![
                    TimeUnit::Second,
                    TimeUnit::Millisecond,
                    TimeUnit::Microsecond,
                    TimeUnit::Nanosecond
                ]),
                prop::option::of("[A-Z][a-z]{1,5}")
            )
                .prop_map(|(unit, tz)| LogicalType::Timestamp { unit, tz }),
            (1u8..38, -2i8..10)
                .prop_map(|(precision, scale)| LogicalType::Decimal { precision, scale }),
            prop::sample::select(vec![TimeUnit::Second, TimeUnit::Microsecond])
                .prop_map(|unit| LogicalType::Time { unit }),
            (1i32..40).prop_map(|len| LogicalType::FixedBinary { len }),
        ]
    }

    fn ty() -> impl Strategy<Value = LogicalType> {
        leaf().prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                (any::<bool>(), "[a-z]{1,4}", inner.clone(), any::<bool>()).prop_map(
                    |(large, name, t, n)| LogicalType::List {
                        large,
                        item: Box::new(Field::new(name, t, n)),
                    }
                ),
                (inner.clone(), inner.clone(), any::<bool>()).prop_map(|(k, v, n)| {
                    LogicalType::Map {
                        key: Box::new(Field::new("key", k, false)),
                        value: Box::new(Field::new("value", v, n)),
                    }
                }),
                prop::collection::vec(("[a-z]{1,4}", inner, any::<bool>()), 1..4).prop_map(|fs| {
                    LogicalType::Struct(
                        fs.into_iter()
                            .map(|(n, t, b)| Field::new(n, t, b))
                            .collect(),
                    )
                }),
            ]
        })
    }

    /// Schemas with distinct top-level names.
    fn schema() -> impl Strategy<Value = Schema> {
        prop::collection::btree_map("[a-z]{1,6}", (ty(), any::<bool>()), 1..6)
            .prop_map(|m| {
                Schema::new(
                    m.into_iter()
                        .map(|(n, (t, b))| Field::new(n, t, b))
                        .collect(),
                )
            })
            .prop_shuffle_fields()
    }

    trait ShuffleFields {
        fn prop_shuffle_fields(self) -> BoxedStrategy<Schema>;
    }
    impl<S: Strategy<Value = Schema> + 'static> ShuffleFields for S {
        fn prop_shuffle_fields(self) -> BoxedStrategy<Schema> {
            self.prop_flat_map(|s| Just(s.fields).prop_shuffle().prop_map(Schema::new))
                .boxed()
        }
    }

    fn map_types(ty: &mut LogicalType, f: &mut dyn FnMut(&mut LogicalType)) {
        f(ty);
        match ty {
            LogicalType::List { item, .. } => {
                map_types(&mut item.ty, f);
            }
            LogicalType::Map { key, value } => {
                map_types(&mut key.ty, f);
                map_types(&mut value.ty, f);
            }
            LogicalType::Struct(fs) => {
                for fl in fs {
                    map_types(&mut fl.ty, f);
                }
            }
            _ => {}
        }
    }

    fn flip_nested_nulls(ty: &mut LogicalType) {
        match ty {
            LogicalType::List { item, .. } => {
                item.nullable = !item.nullable;
                flip_nested_nulls(&mut item.ty);
            }
            LogicalType::Map { key, value } => {
                for f in [key, value] {
                    f.nullable = !f.nullable;
                    flip_nested_nulls(&mut f.ty);
                }
            }
            LogicalType::Struct(fs) => {
                for f in fs {
                    f.nullable = !f.nullable;
                    flip_nested_nulls(&mut f.ty);
                }
            }
            _ => {}
        }
    }

    /// A type with a different normalized shape.
    fn retyped(t: &LogicalType) -> LogicalType {
        match t {
            LogicalType::Bool => LogicalType::Utf8 { large: false },
            _ => LogicalType::Bool,
        }
    }

    proptest! {
        #[test]
        fn fingerprint_is_deterministic(s in schema()) {
            prop_assert_eq!(fingerprint(&s), fingerprint(&s.clone()));
            prop_assert_eq!(fingerprint(&s).len(), 64);
        }

        #[test]
        fn nullability_is_ignored_at_every_depth(s in schema(), flips in prop::collection::vec(any::<bool>(), 6)) {
            let mut t = s.clone();
            for (f, flip) in t.fields.iter_mut().zip(flips) {
                if flip { f.nullable = !f.nullable; }
                flip_nested_nulls(&mut f.ty);
            }
            prop_assert_eq!(fingerprint(&s), fingerprint(&t));
        }

        #[test]
        fn width_variants_are_ignored_at_every_depth(s in schema()) {
            let mut t = s.clone();
            for f in &mut t.fields {
                map_types(&mut f.ty, &mut |ty| match ty {
                    LogicalType::Utf8 { large } | LogicalType::Binary { large } | LogicalType::List { large, .. } => *large = !*large,
                    _ => {}
                });
            }
            prop_assert_eq!(fingerprint(&s), fingerprint(&t));
        }

        #[test]
        fn a_rename_changes_it(s in schema(), i in any::<prop::sample::Index>()) {
            let mut t = s.clone();
            let k = i.index(t.fields.len());
            t.fields[k].name.push('_');
            prop_assert_ne!(fingerprint(&s), fingerprint(&t));
        }

        #[test]
        fn a_reorder_changes_it(s in schema(), i in any::<prop::sample::Index>(), j in any::<prop::sample::Index>()) {
            prop_assume!(s.fields.len() > 1);
            let (a, b) = (i.index(s.fields.len()), j.index(s.fields.len()));
            prop_assume!(a != b);
            let mut t = s.clone();
            t.fields.swap(a, b);
            prop_assert_ne!(fingerprint(&s), fingerprint(&t));
        }

        #[test]
        fn an_added_column_changes_it(s in schema(), t0 in ty(), i in any::<prop::sample::Index>()) {
            let mut t = s.clone();
            let at = i.index(t.fields.len() + 1);
            t.fields.insert(at, Field::new("added_column", t0, true));
            prop_assert_ne!(fingerprint(&s), fingerprint(&t));
        }

        #[test]
        fn a_removed_column_changes_it(s in schema(), i in any::<prop::sample::Index>()) {
            let mut t = s.clone();
            t.fields.remove(i.index(t.fields.len()));
            prop_assert_ne!(fingerprint(&s), fingerprint(&t));
        }

        #[test]
        fn a_retype_changes_it(s in schema(), i in any::<prop::sample::Index>()) {
            let mut t = s.clone();
            let k = i.index(t.fields.len());
            t.fields[k].ty = retyped(&t.fields[k].ty);
            prop_assert_ne!(fingerprint(&s), fingerprint(&t));
        }

        #[test]
        fn nested_shapes_are_included(name in "[a-z]{1,4}", t0 in leaf()) {
            let inner = |n: &str, t: LogicalType| Schema::new(vec![Field::new(
                "c",
                LogicalType::Struct(vec![Field::new(n, t, true)]),
                true,
            )]);
            let base = inner(&name, t0.clone());
            prop_assert_ne!(fingerprint(&base), fingerprint(&inner(&format!("{name}_"), t0.clone())));
            prop_assert_ne!(fingerprint(&base), fingerprint(&inner(&name, retyped(&t0))));
            let list = |t: LogicalType| Schema::new(vec![Field::new(
                "c",
                LogicalType::List { large: false, item: Box::new(Field::new("item", t, true)) },
                true,
            )]);
            prop_assert_ne!(fingerprint(&list(t0.clone())), fingerprint(&list(retyped(&t0))));
            prop_assert_ne!(fingerprint(&list(t0.clone())), fingerprint(&base));
        }
    }

    #[test]
    fn integer_width_and_sign_are_retypes() {
        let s = |bits, signed| {
            Schema::new(vec![Field::new(
                "x",
                LogicalType::Int { bits, signed },
                false,
            )])
        };
        assert_ne!(fingerprint(&s(32, true)), fingerprint(&s(64, true)));
        assert_ne!(fingerprint(&s(64, true)), fingerprint(&s(64, false)));
    }
}
