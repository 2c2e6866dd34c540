//! Table evidence for migration: a table's logical schema and
//! its fingerprint, its partition spec, sort order and owner's properties
//! and their fingerprint, row count and content digest, read from one
//! pinned snapshot, batch by batch (memory is one batch plus core's fixed
//! accumulator, whatever the row count).
//!
//! The digest itself is core's ([`custos_core::migration::content`]); this
//! module only walks Arrow arrays and feeds every cell, in schema column
//! order, through the typed [`RowWriter`] calls. Width variants the
//! schema fingerprint treats alike are fed alike (`Utf8`/`LargeUtf8`/
//! `Utf8View`, `Binary`/`LargeBinary`/`BinaryView`, `List`/`LargeList`;
//! `Date64` as whole days, as `Date32` is); dictionary- and run-end-encoded
//! columns are decoded to their values first.

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{
    DataType, Date32Type, Date64Type, Decimal128Type, Float16Type, Float32Type, Float64Type,
    Int16Type, Int32Type, Int64Type, Int8Type, Time32MillisecondType, Time32SecondType,
    Time64MicrosecondType, Time64NanosecondType, TimeUnit, TimestampMicrosecondType,
    TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType, UInt16Type, UInt32Type,
    UInt64Type, UInt8Type,
};
use custos_core::migration::content::{self, Content, RowWriter, TableDigest, Unit};
use custos_core::migration::metadata::TableMetadata;
use custos_core::migration::Digest;
use custos_core::schema::Schema;

use crate::error::IcebergError;

/// One table's evidence, as a plan binds it and a fresh read of the
/// destination must reproduce (the snapshot excepted: it is physical).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableEvidence {
    /// The table's name in its namespace.
    pub name: String,
    /// The snapshot read; `None` for a table with no snapshot (empty).
    pub snapshot: Option<i64>,
    /// The logical schema (order, names, normalized types, nullability).
    pub schema: Schema,
    /// [`content::schema_fingerprint`] of `schema`.
    pub schema_fingerprint: Digest,
    /// The table's current partition spec, sort order and owner's
    /// properties (table-level: the same whichever snapshot is read).
    pub metadata: TableMetadata,
    /// [`TableMetadata::fingerprint`] of `metadata`.
    pub metadata_fingerprint: Digest,
    /// Rows and content digest.
    pub content: Content,
}

impl TableEvidence {
    /// Same logical table: schema (with nullability), partition spec, sort
    /// order and properties, rows and digest.
    pub fn same_content(&self, other: &TableEvidence) -> bool {
        self.schema == other.schema
            && self.schema_fingerprint == other.schema_fingerprint
            && self.metadata == other.metadata
            && self.metadata_fingerprint == other.metadata_fingerprint
            && self.content == other.content
    }
}

fn unsupported(path: &At<'_>, ty: &DataType) -> IcebergError {
    IcebergError::UnsupportedType {
        path: path.to_string(),
        ty: ty.to_string(),
    }
}

/// A cell's column path, built without allocating (rendered only for an
/// error): `a.b` for a struct field, `a[]` for a list item.
struct At<'a> {
    parent: Option<&'a At<'a>>,
    name: &'a str,
}

impl std::fmt::Display for At<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(p) = self.parent {
            write!(f, "{p}")?;
            if self.name != "[]" {
                f.write_str(".")?;
            }
        }
        f.write_str(self.name)
    }
}

impl<'a> At<'a> {
    fn child(&'a self, name: &'a str) -> At<'a> {
        At {
            parent: Some(self),
            name,
        }
    }
}

fn unit(u: &TimeUnit) -> Unit {
    match u {
        TimeUnit::Second => Unit::Second,
        TimeUnit::Millisecond => Unit::Millisecond,
        TimeUnit::Microsecond => Unit::Microsecond,
        TimeUnit::Nanosecond => Unit::Nanosecond,
    }
}

const MILLIS_PER_DAY: i64 = 86_400_000;

/// Writes scalar cell `i` of `a`; `Ok(false)` when `a` is not a scalar.
fn scalar(w: &mut RowWriter, a: &dyn Array, i: usize) -> Result<bool, IcebergError> {
    match a.data_type() {
        DataType::Boolean => w.bool(a.as_boolean().value(i)),
        DataType::Int8 => w.int(a.as_primitive::<Int8Type>().value(i).into()),
        DataType::Int16 => w.int(a.as_primitive::<Int16Type>().value(i).into()),
        DataType::Int32 => w.int(a.as_primitive::<Int32Type>().value(i).into()),
        DataType::Int64 => w.int(a.as_primitive::<Int64Type>().value(i).into()),
        DataType::UInt8 => w.int(a.as_primitive::<UInt8Type>().value(i).into()),
        DataType::UInt16 => w.int(a.as_primitive::<UInt16Type>().value(i).into()),
        DataType::UInt32 => w.int(a.as_primitive::<UInt32Type>().value(i).into()),
        DataType::UInt64 => w.int(a.as_primitive::<UInt64Type>().value(i).into()),
        DataType::Float16 => w.float(a.as_primitive::<Float16Type>().value(i).to_f64()),
        DataType::Float32 => w.float(a.as_primitive::<Float32Type>().value(i).into()),
        DataType::Float64 => w.float(a.as_primitive::<Float64Type>().value(i)),
        DataType::Decimal128(_, s) => w.decimal(a.as_primitive::<Decimal128Type>().value(i), *s),
        DataType::Date32 => w.date(a.as_primitive::<Date32Type>().value(i).into()),
        DataType::Date64 => w.date(
            a.as_primitive::<Date64Type>()
                .value(i)
                .div_euclid(MILLIS_PER_DAY),
        ),
        DataType::Time32(TimeUnit::Second) => w.time(
            Unit::Second,
            a.as_primitive::<Time32SecondType>().value(i).into(),
        ),
        DataType::Time32(TimeUnit::Millisecond) => w.time(
            Unit::Millisecond,
            a.as_primitive::<Time32MillisecondType>().value(i).into(),
        ),
        DataType::Time64(TimeUnit::Microsecond) => w.time(
            Unit::Microsecond,
            a.as_primitive::<Time64MicrosecondType>().value(i),
        ),
        DataType::Time64(TimeUnit::Nanosecond) => w.time(
            Unit::Nanosecond,
            a.as_primitive::<Time64NanosecondType>().value(i),
        ),
        DataType::Timestamp(u, _) => {
            let v = match u {
                TimeUnit::Second => a.as_primitive::<TimestampSecondType>().value(i),
                TimeUnit::Millisecond => a.as_primitive::<TimestampMillisecondType>().value(i),
                TimeUnit::Microsecond => a.as_primitive::<TimestampMicrosecondType>().value(i),
                TimeUnit::Nanosecond => a.as_primitive::<TimestampNanosecondType>().value(i),
            };
            w.timestamp(unit(u), v);
        }
        DataType::Utf8 => w.utf8(a.as_string::<i32>().value(i)),
        DataType::LargeUtf8 => w.utf8(a.as_string::<i64>().value(i)),
        DataType::Utf8View => w.utf8(a.as_string_view().value(i)),
        DataType::Binary => w.binary(a.as_binary::<i32>().value(i)),
        DataType::LargeBinary => w.binary(a.as_binary::<i64>().value(i)),
        DataType::BinaryView => w.binary(a.as_binary_view().value(i)),
        DataType::FixedSizeBinary(_) => w.fixed(a.as_fixed_size_binary().value(i)),
        _ => return Ok(false),
    }
    Ok(true)
}

/// Writes cell `i` of `a` (at column path `path`).
fn cell(w: &mut RowWriter, a: &dyn Array, i: usize, path: &At<'_>) -> Result<(), IcebergError> {
    if a.is_null(i) {
        w.null();
        return Ok(());
    }
    if scalar(w, a, i)? {
        return Ok(());
    }
    match a.data_type() {
        DataType::List(_) => {
            let l = a.as_list::<i32>();
            elements(w, &l.value(i), path)
        }
        DataType::LargeList(_) => {
            let l = a.as_list::<i64>();
            elements(w, &l.value(i), path)
        }
        DataType::Struct(fields) => {
            let s = a.as_struct();
            w.begin_struct(s.num_columns() as u64);
            for (f, c) in fields.iter().zip(s.columns()) {
                cell(w, c.as_ref(), i, &path.child(f.name()))?;
            }
            w.end_struct();
            Ok(())
        }
        DataType::Map(_, _) => {
            let m = a.as_map();
            let offsets = m.value_offsets();
            let (start, end) = match (offsets.get(i), offsets.get(i + 1)) {
                (Some(s), Some(e)) => (*s as usize, *e as usize),
                _ => return Err(unsupported(path, a.data_type())),
            };
            w.begin_map((end - start) as u64);
            for j in start..end {
                cell(w, m.keys().as_ref(), j, &path.child("key"))?;
                cell(w, m.values().as_ref(), j, &path.child("value"))?;
            }
            w.end_map();
            Ok(())
        }
        other => Err(unsupported(path, other)),
    }
}

fn elements(w: &mut RowWriter, values: &ArrayRef, path: &At<'_>) -> Result<(), IcebergError> {
    w.begin_list(values.len() as u64);
    let item = path.child("[]");
    for j in 0..values.len() {
        cell(w, values.as_ref(), j, &item)?;
    }
    w.end_list();
    Ok(())
}

/// Decodes a dictionary- or run-end-encoded column to its values (the
/// logical schema already maps it to the value type).
fn decoded(column: &ArrayRef) -> Result<ArrayRef, IcebergError> {
    match column.data_type() {
        DataType::Dictionary(_, value) => arrow::compute::cast(column, value),
        DataType::RunEndEncoded(_, values) => arrow::compute::cast(column, values.data_type()),
        _ => return Ok(column.clone()),
    }
    .map_err(|e| IcebergError::UnsupportedType {
        path: String::new(),
        ty: format!("{}: {e}", column.data_type()),
    })
}

/// Rows one digest worker takes at least: below twice this a batch is
/// digested on the calling thread (a thread costs ~20 µs; a row ~0.5 µs).
const ROWS_PER_WORKER: usize = 1024;

/// Adds every row of `batch` to `digest`.
///
/// A large batch is split into contiguous row ranges digested on up to
/// [`std::thread::available_parallelism`] threads, each into its own
/// partial digest, merged afterwards ([`TableDigest::merge`]; the digest is
/// a multiset sum, so the split cannot change it). Memory grows by one
/// 2 KiB accumulator and one row buffer per thread.
pub fn add_batch(
    digest: &mut TableDigest,
    w: &mut RowWriter,
    batch: &RecordBatch,
) -> Result<(), IcebergError> {
    let schema = batch.schema();
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(decoded)
        .collect::<Result<_, _>>()?;
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    let rows = batch.num_rows();
    let workers = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(rows / ROWS_PER_WORKER)
        .max(1);
    if workers == 1 {
        return add_rows(digest, w, &columns, &names, 0..rows);
    }
    let per = rows.div_ceil(workers);
    let parts = std::thread::scope(|scope| {
        let handles: Vec<_> = (1..workers)
            .map(|k| {
                let range = k * per..((k + 1) * per).min(rows);
                let (columns, names) = (&columns, &names);
                let mut part = digest.part();
                scope.spawn(move || {
                    add_rows(&mut part, &mut RowWriter::new(), columns, names, range)?;
                    Ok::<_, IcebergError>(part)
                })
            })
            .collect();
        let mine = add_rows(digest, w, &columns, &names, 0..per.min(rows));
        let parts: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect();
        mine.map(|()| parts)
    })?;
    for part in parts {
        // Same schema by construction (`part`), so the merge cannot refuse.
        let _ = digest.merge(&part?);
    }
    Ok(())
}

/// Adds the rows `range` of decoded `columns` to `digest`.
fn add_rows(
    digest: &mut TableDigest,
    w: &mut RowWriter,
    columns: &[ArrayRef],
    names: &[&str],
    range: std::ops::Range<usize>,
) -> Result<(), IcebergError> {
    for i in range {
        w.begin_row(columns.len() as u64);
        for (c, name) in columns.iter().zip(names) {
            cell(w, c.as_ref(), i, &At { parent: None, name })?;
        }
        digest
            .add_row(w)
            .map_err(|e| IcebergError::UnsupportedType {
                path: String::new(),
                ty: e.to_string(),
            })?;
    }
    Ok(())
}

/// The content of `batches` under `schema_fingerprint` (a whole table's
/// batches, in any order and any chunking).
pub fn content_of(
    schema_fingerprint: Digest,
    batches: &[RecordBatch],
) -> Result<Content, IcebergError> {
    let mut d = TableDigest::new(schema_fingerprint);
    let mut w = RowWriter::new();
    for b in batches {
        add_batch(&mut d, &mut w, b)?;
    }
    Ok(d.finish())
}

/// The migration fingerprint of a logical schema.
pub fn fingerprint(schema: &Schema) -> Digest {
    content::schema_fingerprint(schema)
}
