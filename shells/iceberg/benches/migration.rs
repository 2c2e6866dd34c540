//! Migration's table plane against physical baselines measured in the same
//! run (prints; no assertion):
//!
//! 1. the content digest over a 1,000,000-row mixed-type table (int64,
//!    float64, text, bool, list<int32>, struct<int32, int32>, nulls) against
//!    raw SHA-256 over the very Arrow buffers those rows live in;
//! 2. `copy_table` of a 200,000-row table (evidence of the pinned source
//!    snapshot streamed while writing, one guarded commit, a fresh-read
//!    verification) against reading the source's Parquet data files and
//!    writing the same rows into one new Parquet file with no evidence.
//!
//! `cargo bench -p custos-iceberg --bench migration`

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{
    Array, ArrayData, ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array, ListArray,
    RecordBatch, StringArray, StructArray,
};
use arrow::datatypes::{DataType, Field, Fields, Int32Type, Schema};
use custos_core::identity::StorageIdentity;
use custos_core::migration::content::schema_fingerprint;
use custos_iceberg::evidence::content_of;
use custos_iceberg::logical::arrow_schema_to_logical;
use custos_iceberg::{CopyOutcome, Fault, IcebergStore};
use sha2::{Digest as _, Sha256};

const ROWS: usize = 1_000_000;
const BATCH: usize = 8192;
const COPY_ROWS: i64 = 200_000;

fn arrow_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("score", DataType::Float64, true),
        Field::new("label", DataType::Utf8, true),
        Field::new("flag", DataType::Boolean, true),
        Field::new(
            "tags",
            DataType::List(Arc::new(Field::new("element", DataType::Int32, true))),
            true,
        ),
        Field::new(
            "point",
            DataType::Struct(Fields::from(vec![
                Field::new("x", DataType::Int32, true),
                Field::new("y", DataType::Int32, true),
            ])),
            true,
        ),
    ]))
}

fn batch(schema: &Arc<Schema>, from: usize, n: usize) -> RecordBatch {
    let ids: Vec<i64> = (from..from + n).map(|i| i as i64).collect();
    let score: ArrayRef = Arc::new(Float64Array::from(
        ids.iter()
            .map(|i| (i % 11 != 0).then_some(*i as f64 * 0.5))
            .collect::<Vec<_>>(),
    ));
    let label: ArrayRef = Arc::new(StringArray::from(
        ids.iter()
            .map(|i| (i % 13 != 0).then(|| format!("label-{:08}-{}", i * 7919 % 100_000, i % 5)))
            .collect::<Vec<_>>(),
    ));
    let flag: ArrayRef = Arc::new(BooleanArray::from(
        ids.iter().map(|i| Some(i % 3 == 0)).collect::<Vec<_>>(),
    ));
    let DataType::List(item) = schema.field(4).data_type().clone() else {
        panic!("list")
    };
    let (_, offsets, values, nulls) = ListArray::from_iter_primitive::<Int32Type, _, _>(
        ids.iter()
            .map(|i| Some((0..(i % 4) as i32).map(Some).collect::<Vec<_>>())),
    )
    .into_parts();
    let tags: ArrayRef = Arc::new(ListArray::new(item, offsets, values, nulls));
    let DataType::Struct(pf) = schema.field(5).data_type().clone() else {
        panic!("struct")
    };
    let xs: ArrayRef = Arc::new(Int32Array::from(
        ids.iter().map(|i| Some(*i as i32)).collect::<Vec<_>>(),
    ));
    let ys: ArrayRef = Arc::new(Int32Array::from(
        ids.iter().map(|i| Some(-(*i as i32))).collect::<Vec<_>>(),
    ));
    let point: ArrayRef = Arc::new(StructArray::new(pf, vec![xs, ys], None));
    RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from(ids)),
            score,
            label,
            flag,
            tags,
            point,
        ],
    )
    .unwrap()
}

/// Feeds every buffer (validity bitmaps included) of `data` and its
/// children to `h`; returns the bytes hashed.
fn hash_buffers(h: &mut Sha256, data: &ArrayData) -> usize {
    let mut n = 0;
    if let Some(nulls) = data.nulls() {
        h.update(nulls.buffer().as_slice());
        n += nulls.buffer().len();
    }
    for b in data.buffers() {
        h.update(b.as_slice());
        n += b.len();
    }
    for c in data.child_data() {
        n += hash_buffers(h, c);
    }
    n
}

fn best_of<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut best = Duration::MAX;
    let mut out = None;
    for _ in 0..runs {
        let t = Instant::now();
        let v = f();
        best = best.min(t.elapsed());
        out = Some(v);
    }
    (best, out.unwrap())
}

fn digest_bench() {
    let schema = arrow_schema();
    let batches: Vec<RecordBatch> = (0..ROWS)
        .step_by(BATCH)
        .map(|from| batch(&schema, from, BATCH.min(ROWS - from)))
        .collect();
    let fp = schema_fingerprint(&arrow_schema_to_logical(&schema).unwrap());
    let (raw, bytes) = best_of(3, || {
        let mut h = Sha256::new();
        let mut n = 0;
        for b in &batches {
            for c in b.columns() {
                n += hash_buffers(&mut h, &c.to_data());
            }
        }
        std::hint::black_box(h.finalize());
        n
    });
    let (ours, content) = best_of(3, || content_of(fp, &batches).unwrap());
    assert_eq!(content.rows, ROWS as u64);
    println!(
        "content digest, {ROWS} mixed rows ({bytes} Arrow buffer bytes): {:.1} ms ({:.0} ns/row, \
         {:.0} MB/s); raw SHA-256 over the same buffers {:.1} ms ({:.0} MB/s); ratio raw/digest = {:.2}",
        ours.as_secs_f64() * 1e3,
        ours.as_secs_f64() * 1e9 / ROWS as f64,
        bytes as f64 / ours.as_secs_f64() / 1e6,
        raw.as_secs_f64() * 1e3,
        bytes as f64 / raw.as_secs_f64() / 1e6,
        raw.as_secs_f64() / ours.as_secs_f64(),
    );
}

fn copy_bench() {
    let tmp = tempfile::tempdir().unwrap();
    let id = |p: &str| {
        StorageIdentity::new(tmp.path().join(p).to_str().unwrap(), "bench", "iceberg").unwrap()
    };
    let src = IcebergStore::open_writable(&id("src")).unwrap();
    let schema = arrow_schema_to_logical(&arrow_schema()).unwrap();
    let sig = src.create_table(vec!["bench".into()], schema).unwrap();
    let arrow = src.table_arrow_schema(&sig.table_id).unwrap();
    let batches: Vec<RecordBatch> = (0..COPY_ROWS as usize)
        .step_by(BATCH)
        .map(|from| batch(&arrow, from, BATCH.min(COPY_ROWS as usize - from)))
        .collect();
    src.append(&sig.table_id, &batches).unwrap();
    let plan = src.table_evidence(&sig.table_id, None).unwrap();
    // Raw: read the source's Parquet files, write the rows to one new file.
    let data_dir = tmp.path().join("src");
    let files: Vec<_> = walk(&data_dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .collect();
    let (raw, raw_rows) = best_of(3, || {
        let out = tmp.path().join("raw.parquet");
        let mut rows = 0;
        let f = std::fs::File::create(&out).unwrap();
        let mut w: Option<parquet::arrow::ArrowWriter<std::fs::File>> = None;
        for p in &files {
            let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                std::fs::File::open(p).unwrap(),
            )
            .unwrap()
            .build()
            .unwrap();
            for b in r {
                let b = b.unwrap();
                rows += b.num_rows();
                let w = w.get_or_insert_with(|| {
                    parquet::arrow::ArrowWriter::try_new(f.try_clone().unwrap(), b.schema(), None)
                        .unwrap()
                });
                w.write(&b).unwrap();
            }
        }
        w.unwrap().close().unwrap();
        f.sync_all().unwrap();
        rows
    });
    assert_eq!(raw_rows as i64, COPY_ROWS);
    let mut n = 0;
    let (ours, _) = best_of(3, || {
        n += 1;
        let dst = IcebergStore::open_writable(&id(&format!("dst{n}"))).unwrap();
        let out = dst.copy_table(&src, &plan, Fault::None).unwrap();
        assert!(matches!(out, CopyOutcome::Copied(_)));
    });
    println!(
        "table copy, {COPY_ROWS} rows ({} source files): copy_table {:.1} ms (evidence while \
         writing, one guarded commit, fresh-read verification); raw Parquet read + write {:.1} ms; \
         ratio raw/copy = {:.2}",
        files.len(),
        ours.as_secs_f64() * 1e3,
        raw.as_secs_f64() * 1e3,
        raw.as_secs_f64() / ours.as_secs_f64(),
    );
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

fn main() {
    digest_bench();
    copy_bench();
}
