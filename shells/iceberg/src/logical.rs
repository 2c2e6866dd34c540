//! Arrow and Iceberg types mapped onto [`custos_core::schema::LogicalType`].
//!
//! The fingerprint a cold read compares is computed over core's logical
//! types, so the mapping from the physical (Arrow) schema is the one place
//! where "the same shape" is decided. The rules:
//!
//! - **width and encoding variants map to one logical type**: `Utf8`,
//!   `LargeUtf8` and `Utf8View` are all [`LogicalType::Utf8`] (with `large`
//!   recording the 64-bit variant, which the fingerprint ignores); likewise
//!   `Binary`/`LargeBinary`/`BinaryView`, `List`/`LargeList`/`ListView`/
//!   `LargeListView`, `Date32`/`Date64`; a dictionary- or run-end-encoded
//!   column maps to its value type;
//! - **nested types map recursively and deterministically**: a struct keeps
//!   its fields' names and order, a list keeps its item field's name;
//! - **nullability is carried, not judged**: it is copied into
//!   [`Field::nullable`] and the fingerprint ignores it;
//! - **every type an Iceberg table can hold maps**, so migration can copy
//!   an unknown application table: 128-bit decimals (precision and scale),
//!   times of day (unit), fixed-size binaries (width; Iceberg's `uuid` is
//!   16) and maps (key and value fields) included;
//! - everything else (256-bit decimals, durations, intervals, unions,
//!   fixed-size lists, the null type) is [`IcebergError::UnsupportedType`]
//!   naming the column path, never a guess.
//!
//! The opposite direction, [`schema_to_iceberg`], is what a writer uses to
//! create a table for a descriptor. Iceberg has fewer physical types than
//! Arrow, so it accepts only the logical types that survive the round trip
//! Iceberg → Arrow → logical unchanged (64- and 32-bit signed integers,
//! 32- and 64-bit floats, microsecond timestamps without a zone or in UTC
//! spelled `+00:00`, list items named `element`); anything else is refused
//! up front rather than discovered later as a fingerprint mismatch.

use arrow::datatypes::{
    DataType, Field as ArrowField, Schema as ArrowSchema, TimeUnit as ArrowUnit,
};
use custos_core::schema::{Field, LogicalType, Schema, TimeUnit};
use iceberg::spec::{ListType, NestedField, PrimitiveType, StructType, Type};

use crate::error::{ice, IcebergError};

/// The zone Iceberg's `timestamptz` reads back as.
pub const UTC_ZONE: &str = "+00:00";

/// The item field name Iceberg's lists read back with.
pub const LIST_ITEM_NAME: &str = "element";

fn unsupported(path: &str, ty: &DataType) -> IcebergError {
    IcebergError::UnsupportedType {
        path: path.to_owned(),
        ty: ty.to_string(),
    }
}

fn unit(u: &ArrowUnit) -> TimeUnit {
    match u {
        ArrowUnit::Second => TimeUnit::Second,
        ArrowUnit::Millisecond => TimeUnit::Millisecond,
        ArrowUnit::Microsecond => TimeUnit::Microsecond,
        ArrowUnit::Nanosecond => TimeUnit::Nanosecond,
    }
}

fn field_at(path: &str, f: &ArrowField) -> Result<Field, IcebergError> {
    let here = if path.is_empty() {
        f.name().clone()
    } else {
        format!("{path}.{}", f.name())
    };
    Ok(Field::new(
        f.name().clone(),
        type_at(&here, f.data_type())?,
        f.is_nullable(),
    ))
}

fn list(path: &str, large: bool, item: &ArrowField) -> Result<LogicalType, IcebergError> {
    let item_path = format!("{path}[]");
    Ok(LogicalType::List {
        large,
        item: Box::new(Field::new(
            item.name().clone(),
            type_at(&item_path, item.data_type())?,
            item.is_nullable(),
        )),
    })
}

/// A map's entries field is a struct of exactly a key and a value field.
fn map(path: &str, entries: &ArrowField) -> Result<LogicalType, IcebergError> {
    let DataType::Struct(kv) = entries.data_type() else {
        return Err(unsupported(path, entries.data_type()));
    };
    let [k, v] = kv.iter().collect::<Vec<_>>()[..] else {
        return Err(unsupported(path, entries.data_type()));
    };
    Ok(LogicalType::Map {
        key: Box::new(field_at(path, k)?),
        value: Box::new(field_at(path, v)?),
    })
}

fn type_at(path: &str, ty: &DataType) -> Result<LogicalType, IcebergError> {
    Ok(match ty {
        DataType::Boolean => LogicalType::Bool,
        DataType::Int8 => LogicalType::Int {
            bits: 8,
            signed: true,
        },
        DataType::Int16 => LogicalType::Int {
            bits: 16,
            signed: true,
        },
        DataType::Int32 => LogicalType::Int {
            bits: 32,
            signed: true,
        },
        DataType::Int64 => LogicalType::Int {
            bits: 64,
            signed: true,
        },
        DataType::UInt8 => LogicalType::Int {
            bits: 8,
            signed: false,
        },
        DataType::UInt16 => LogicalType::Int {
            bits: 16,
            signed: false,
        },
        DataType::UInt32 => LogicalType::Int {
            bits: 32,
            signed: false,
        },
        DataType::UInt64 => LogicalType::Int {
            bits: 64,
            signed: false,
        },
        DataType::Float16 => LogicalType::Float { bits: 16 },
        DataType::Float32 => LogicalType::Float { bits: 32 },
        DataType::Float64 => LogicalType::Float { bits: 64 },
        DataType::Utf8 | DataType::Utf8View => LogicalType::Utf8 { large: false },
        DataType::LargeUtf8 => LogicalType::Utf8 { large: true },
        DataType::Binary | DataType::BinaryView => LogicalType::Binary { large: false },
        DataType::LargeBinary => LogicalType::Binary { large: true },
        DataType::Date32 | DataType::Date64 => LogicalType::Date,
        DataType::Timestamp(u, tz) => LogicalType::Timestamp {
            unit: unit(u),
            tz: tz.as_ref().map(|z| z.to_string()),
        },
        DataType::List(item) | DataType::ListView(item) => list(path, false, item)?,
        DataType::LargeList(item) | DataType::LargeListView(item) => list(path, true, item)?,
        DataType::Struct(fields) => LogicalType::Struct(
            fields
                .iter()
                .map(|f| field_at(path, f))
                .collect::<Result<_, _>>()?,
        ),
        DataType::Decimal128(precision, scale) => LogicalType::Decimal {
            precision: *precision,
            scale: *scale,
        },
        DataType::Time32(u) | DataType::Time64(u) => LogicalType::Time { unit: unit(u) },
        DataType::FixedSizeBinary(len) => LogicalType::FixedBinary { len: *len },
        DataType::Map(entries, _) => map(path, entries)?,
        DataType::Dictionary(_, value) => type_at(path, value)?,
        DataType::RunEndEncoded(_, values) => type_at(path, values.data_type())?,
        other => return Err(unsupported(path, other)),
    })
}

/// Maps one Arrow type onto a logical type; `path` names the column in an
/// [`IcebergError::UnsupportedType`].
pub fn arrow_type_to_logical(path: &str, ty: &DataType) -> Result<LogicalType, IcebergError> {
    type_at(path, ty)
}

/// Maps an Arrow schema onto a logical [`Schema`] (fields in order).
pub fn arrow_schema_to_logical(schema: &ArrowSchema) -> Result<Schema, IcebergError> {
    Ok(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| field_at("", f))
            .collect::<Result<_, _>>()?,
    ))
}

/// The logical schema of an Iceberg table schema, read through Iceberg's
/// own Arrow conversion (the shape a scan returns).
pub fn iceberg_schema_to_logical(schema: &iceberg::spec::Schema) -> Result<Schema, IcebergError> {
    let arrow = iceberg::arrow::schema_to_arrow_schema(schema)
        .map_err(ice("convert the table schema to Arrow"))?;
    arrow_schema_to_logical(&arrow)
}

fn refuse(path: &str, ty: &LogicalType, why: &str) -> IcebergError {
    IcebergError::UnsupportedType {
        path: path.to_owned(),
        ty: format!("{ty:?} ({why})"),
    }
}

struct Ids(i32);

impl Ids {
    fn next(&mut self) -> i32 {
        self.0 += 1;
        self.0
    }
}

fn to_iceberg_type(path: &str, ty: &LogicalType, ids: &mut Ids) -> Result<Type, IcebergError> {
    Ok(match ty {
        LogicalType::Bool => Type::Primitive(PrimitiveType::Boolean),
        LogicalType::Int {
            bits: 32,
            signed: true,
        } => Type::Primitive(PrimitiveType::Int),
        LogicalType::Int {
            bits: 64,
            signed: true,
        } => Type::Primitive(PrimitiveType::Long),
        LogicalType::Int { .. } => {
            return Err(refuse(
                path,
                ty,
                "Iceberg stores signed 32- and 64-bit integers only",
            ))
        }
        LogicalType::Float { bits: 32 } => Type::Primitive(PrimitiveType::Float),
        LogicalType::Float { bits: 64 } => Type::Primitive(PrimitiveType::Double),
        LogicalType::Float { .. } => {
            return Err(refuse(
                path,
                ty,
                "Iceberg stores 32- and 64-bit floats only",
            ))
        }
        LogicalType::Utf8 { .. } => Type::Primitive(PrimitiveType::String),
        LogicalType::Binary { .. } => Type::Primitive(PrimitiveType::Binary),
        LogicalType::Date => Type::Primitive(PrimitiveType::Date),
        LogicalType::Timestamp {
            unit: TimeUnit::Microsecond,
            tz: None,
        } => Type::Primitive(PrimitiveType::Timestamp),
        LogicalType::Timestamp {
            unit: TimeUnit::Microsecond,
            tz: Some(z),
        } if z == UTC_ZONE => Type::Primitive(PrimitiveType::Timestamptz),
        LogicalType::Timestamp { .. } => {
            return Err(refuse(
                path,
                ty,
                "Iceberg stores microsecond timestamps without a zone or in +00:00 only",
            ))
        }
        LogicalType::List { item, .. } => to_iceberg_list(path, ty, item, ids)?,
        LogicalType::Struct(fields) => Type::Struct(StructType::new(
            fields
                .iter()
                .map(|f| to_nested(&format!("{path}.{}", f.name), f, ids))
                .collect::<Result<_, _>>()?,
        )),
        LogicalType::Decimal { .. }
        | LogicalType::Time { .. }
        | LogicalType::FixedBinary { .. }
        | LogicalType::Map { .. } => {
            return Err(refuse(
                path,
                ty,
                "a descriptor's table is created with the types the cold-read writer supports; \
                 migration copies such tables with their source schema instead",
            ))
        }
    })
}

/// The Iceberg list type of the list `ty` whose item is `item`.
fn to_iceberg_list(
    path: &str,
    ty: &LogicalType,
    item: &Field,
    ids: &mut Ids,
) -> Result<Type, IcebergError> {
    if item.name != LIST_ITEM_NAME {
        return Err(refuse(path, ty, "Iceberg names a list item `element`"));
    }
    let id = ids.next();
    let inner = to_iceberg_type(&format!("{path}[]"), &item.ty, ids)?;
    Ok(Type::List(ListType::new(
        NestedField::list_element(id, inner, !item.nullable).into(),
    )))
}

fn to_nested(
    path: &str,
    f: &Field,
    ids: &mut Ids,
) -> Result<iceberg::spec::NestedFieldRef, IcebergError> {
    let id = ids.next();
    let ty = to_iceberg_type(path, &f.ty, ids)?;
    Ok(NestedField::new(id, f.name.clone(), ty, !f.nullable).into())
}

/// The Iceberg schema a writer creates a table with for `schema`; field
/// ids are assigned depth-first from 1. Refuses the logical types that
/// would not read back unchanged (see the module documentation).
pub fn schema_to_iceberg(schema: &Schema) -> Result<iceberg::spec::Schema, IcebergError> {
    let mut ids = Ids(0);
    let fields = schema
        .fields
        .iter()
        .map(|f| to_nested(&f.name, f, &mut ids))
        .collect::<Result<Vec<_>, _>>()?;
    iceberg::spec::Schema::builder()
        .with_fields(fields)
        .build()
        .map_err(ice("build the table schema"))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::datatypes::{Field as AF, Fields, IntervalUnit};
    use custos_core::schema::fingerprint;

    use super::*;

    fn one(ty: DataType) -> Schema {
        arrow_schema_to_logical(&ArrowSchema::new(vec![AF::new("c", ty, true)])).unwrap()
    }

    #[test]
    fn width_variants_map_to_the_same_logical_type() {
        let groups = [
            vec![DataType::Utf8, DataType::LargeUtf8, DataType::Utf8View],
            vec![
                DataType::Binary,
                DataType::LargeBinary,
                DataType::BinaryView,
            ],
            vec![DataType::Date32, DataType::Date64],
            vec![
                DataType::List(Arc::new(AF::new("element", DataType::Int64, true))),
                DataType::LargeList(Arc::new(AF::new("element", DataType::Int64, false))),
                DataType::ListView(Arc::new(AF::new("element", DataType::Int64, true))),
                DataType::LargeListView(Arc::new(AF::new("element", DataType::Int64, true))),
            ],
            vec![
                DataType::Utf8,
                DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
                DataType::Dictionary(Box::new(DataType::Int8), Box::new(DataType::LargeUtf8)),
            ],
        ];
        for group in groups {
            let prints: Vec<_> = group.iter().map(|t| fingerprint(&one(t.clone()))).collect();
            assert!(
                prints.windows(2).all(|w| w[0] == w[1]),
                "{group:?} fingerprint differently"
            );
        }
        assert_eq!(
            arrow_type_to_logical("c", &DataType::LargeUtf8).unwrap(),
            LogicalType::Utf8 { large: true }
        );
        // Nullability is carried into the field, and ignored by the fingerprint.
        let a =
            arrow_schema_to_logical(&ArrowSchema::new(vec![AF::new("c", DataType::Int64, true)]))
                .unwrap();
        let b = arrow_schema_to_logical(&ArrowSchema::new(vec![AF::new(
            "c",
            DataType::Int64,
            false,
        )]))
        .unwrap();
        assert!(a.fields[0].nullable && !b.fields[0].nullable);
        assert_eq!(fingerprint(&a), fingerprint(&b));
    }

    #[test]
    fn retypes_map_to_different_logical_types() {
        let distinct = [
            DataType::Int32,
            DataType::Int64,
            DataType::UInt64,
            DataType::Float32,
            DataType::Float64,
            DataType::Boolean,
            DataType::Utf8,
            DataType::Binary,
            DataType::Date32,
            DataType::Timestamp(ArrowUnit::Microsecond, None),
            DataType::Timestamp(ArrowUnit::Nanosecond, None),
            DataType::Timestamp(ArrowUnit::Microsecond, Some("+00:00".into())),
        ];
        let prints: std::collections::BTreeSet<_> = distinct
            .iter()
            .map(|t| fingerprint(&one(t.clone())))
            .collect();
        assert_eq!(prints.len(), distinct.len());
    }

    #[test]
    fn nested_types_map_deterministically() {
        let point = DataType::Struct(Fields::from(vec![
            AF::new("x", DataType::Float64, false),
            AF::new(
                "tags",
                DataType::LargeList(Arc::new(AF::new("element", DataType::LargeUtf8, true))),
                true,
            ),
        ]));
        let got = one(point.clone());
        let want = Schema::new(vec![Field::new(
            "c",
            LogicalType::Struct(vec![
                Field::new("x", LogicalType::Float { bits: 64 }, false),
                Field::new(
                    "tags",
                    LogicalType::List {
                        large: true,
                        item: Box::new(Field::new(
                            "element",
                            LogicalType::Utf8 { large: true },
                            true,
                        )),
                    },
                    true,
                ),
            ]),
            true,
        )]);
        assert_eq!(got, want);
        assert_eq!(one(point.clone()), got, "same input, same output");
        // A nested field's name and order are part of the shape.
        let renamed = DataType::Struct(Fields::from(vec![
            AF::new("y", DataType::Float64, false),
            AF::new(
                "tags",
                DataType::List(Arc::new(AF::new("element", DataType::Utf8, true))),
                true,
            ),
        ]));
        assert_ne!(fingerprint(&one(renamed)), fingerprint(&got));
        let reordered = DataType::Struct(Fields::from(vec![
            AF::new(
                "tags",
                DataType::List(Arc::new(AF::new("element", DataType::Utf8, true))),
                true,
            ),
            AF::new("x", DataType::Float64, false),
        ]));
        assert_ne!(fingerprint(&one(reordered)), fingerprint(&got));
    }

    #[test]
    fn unsupported_types_are_a_typed_error_naming_the_path() {
        let cases = [
            DataType::Null,
            DataType::Decimal256(10, 2),
            DataType::Duration(ArrowUnit::Second),
            DataType::Interval(IntervalUnit::DayTime),
            DataType::FixedSizeList(Arc::new(AF::new("element", DataType::Int32, true)), 3),
        ];
        for ty in cases {
            match arrow_type_to_logical("c", &ty) {
                Err(IcebergError::UnsupportedType { path, .. }) => assert_eq!(path, "c"),
                other => panic!("{ty:?}: {other:?}"),
            }
        }
        let nested = DataType::Struct(Fields::from(vec![AF::new(
            "inner",
            DataType::List(Arc::new(AF::new(
                "element",
                DataType::Decimal256(5, 1),
                true,
            ))),
            true,
        )]));
        let schema = ArrowSchema::new(vec![AF::new("outer", nested, true)]);
        match arrow_schema_to_logical(&schema) {
            Err(IcebergError::UnsupportedType { path, ty }) => {
                assert_eq!(path, "outer.inner[]");
                assert!(ty.contains("Decimal256"), "{ty}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn iceberg_round_trip_keeps_the_fingerprint() {
        let schema = Schema::new(vec![
            Field::new(
                "entity",
                LogicalType::Int {
                    bits: 64,
                    signed: true,
                },
                false,
            ),
            Field::new(
                "n",
                LogicalType::Int {
                    bits: 32,
                    signed: true,
                },
                true,
            ),
            Field::new("ok", LogicalType::Bool, true),
            Field::new("f", LogicalType::Float { bits: 32 }, true),
            Field::new("name", LogicalType::Utf8 { large: false }, true),
            Field::new("blob", LogicalType::Binary { large: false }, true),
            Field::new("day", LogicalType::Date, true),
            Field::new(
                "at",
                LogicalType::Timestamp {
                    unit: TimeUnit::Microsecond,
                    tz: Some(UTC_ZONE.into()),
                },
                true,
            ),
            Field::new(
                "Position",
                LogicalType::Struct(vec![
                    Field::new("x", LogicalType::Float { bits: 64 }, true),
                    Field::new(
                        "path",
                        LogicalType::List {
                            large: false,
                            item: Box::new(Field::new(
                                "element",
                                LogicalType::Float { bits: 64 },
                                true,
                            )),
                        },
                        true,
                    ),
                ]),
                true,
            ),
        ]);
        let ice = schema_to_iceberg(&schema).unwrap();
        let back = iceberg_schema_to_logical(&ice).unwrap();
        assert_eq!(fingerprint(&back), fingerprint(&schema), "{back:?}");
    }

    #[test]
    fn types_iceberg_cannot_round_trip_are_refused_up_front() {
        for ty in [
            LogicalType::Int {
                bits: 16,
                signed: true,
            },
            LogicalType::Int {
                bits: 64,
                signed: false,
            },
            LogicalType::Float { bits: 16 },
            LogicalType::Timestamp {
                unit: TimeUnit::Millisecond,
                tz: None,
            },
            LogicalType::Timestamp {
                unit: TimeUnit::Microsecond,
                tz: Some("UTC".into()),
            },
            LogicalType::List {
                large: false,
                item: Box::new(Field::new("item", LogicalType::Bool, true)),
            },
        ] {
            let s = Schema::new(vec![Field::new("c", ty.clone(), true)]);
            assert!(
                matches!(
                    schema_to_iceberg(&s),
                    Err(IcebergError::UnsupportedType { .. })
                ),
                "{ty:?}"
            );
        }
    }
}
