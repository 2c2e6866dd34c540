//! Migration's table plane on real Iceberg warehouses (SQLite SQL catalog,
//! local files): evidence of every table the catalog lists, one commit per
//! table that lands only in an empty destination, a fresh read before a
//! copy is accepted, and each ambiguous or failed commit resolved by
//! inspecting the destination — never a second append. Each fault test is
//! named after the fault it injects.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Int32Array, Int64Array, LargeStringArray, ListArray, RecordBatch,
    StringArray, StructArray,
};
use arrow::datatypes::{DataType, Field as ArrowField, Int32Type, Schema as ArrowSchema};
use custos_core::migration::content::schema_fingerprint;
use custos_iceberg::evidence::content_of;
use custos_iceberg::logical::arrow_schema_to_logical;
use custos_iceberg::{CopyOutcome, Fault, IcebergStore, Inspection, TableEvidence};
use iceberg::spec::{ListType, NestedField, PrimitiveType, Schema, StructType, Type};
use iceberg::Catalog;

mod support;
use support::{create_with, id, ident};

/// An application table no descriptor knows: a key, text, a flag, a list
/// of ints and a struct.
fn app_schema() -> Schema {
    Schema::builder()
        .with_fields(vec![
            NestedField::required(1, "key", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::optional(2, "label", Type::Primitive(PrimitiveType::String)).into(),
            NestedField::optional(3, "flag", Type::Primitive(PrimitiveType::Boolean)).into(),
            NestedField::optional(
                4,
                "tags",
                Type::List(ListType::new(
                    NestedField::list_element(6, Type::Primitive(PrimitiveType::Int), false).into(),
                )),
            )
            .into(),
            NestedField::optional(
                5,
                "point",
                Type::Struct(StructType::new(vec![
                    NestedField::optional(7, "x", Type::Primitive(PrimitiveType::Int)).into(),
                    NestedField::optional(8, "y", Type::Primitive(PrimitiveType::Int)).into(),
                ])),
            )
            .into(),
        ])
        .build()
        .unwrap()
}

fn create(store: &IcebergStore, name: &str) {
    create_with(store, name, app_schema());
}

/// Rows `from..from + n` of the application table (duplicates on purpose:
/// `label` repeats every 3 rows, nulls every 5).
fn rows(store: &IcebergStore, name: &str, from: i64, n: i64) -> RecordBatch {
    let schema = store.table_arrow_schema(name).unwrap();
    let keys: Vec<i64> = (from..from + n).collect();
    let label: ArrayRef = Arc::new(StringArray::from(
        keys.iter()
            .map(|k| (k % 5 != 0).then(|| format!("l{}", k % 3)))
            .collect::<Vec<_>>(),
    ));
    let flag: ArrayRef = Arc::new(BooleanArray::from(
        keys.iter().map(|k| Some(k % 2 == 0)).collect::<Vec<_>>(),
    ));
    let DataType::List(item) = schema.field(3).data_type().clone() else {
        panic!("tags is a list")
    };
    let tags: ArrayRef = Arc::new(
        ListArray::from_iter_primitive::<Int32Type, _, _>(
            keys.iter()
                .map(|k| Some((0..(k % 4) as i32).map(Some).collect::<Vec<_>>())),
        )
        .with_field(item),
    );
    let DataType::Struct(point_fields) = schema.field(4).data_type().clone() else {
        panic!("point is a struct")
    };
    let xs: ArrayRef = Arc::new(Int32Array::from(
        keys.iter().map(|k| Some(*k as i32)).collect::<Vec<_>>(),
    ));
    let ys: ArrayRef = Arc::new(Int32Array::from(
        keys.iter()
            .map(|k| (k % 7 != 0).then_some(-(*k as i32)))
            .collect::<Vec<_>>(),
    ));
    let point: ArrayRef = Arc::new(StructArray::new(point_fields, vec![xs, ys], None));
    RecordBatch::try_new(
        schema,
        vec![Arc::new(Int64Array::from(keys)), label, flag, tags, point],
    )
    .unwrap()
}

trait WithField {
    fn with_field(self, f: Arc<ArrowField>) -> ListArray;
}

impl WithField for ListArray {
    fn with_field(self, f: Arc<ArrowField>) -> ListArray {
        let (_, offsets, values, nulls) = self.into_parts();
        ListArray::new(f, offsets, values, nulls)
    }
}

/// A source warehouse with three tables: `events` (1,000 rows in two
/// snapshots), `empty` (no snapshot) and `notes` (10 rows).
fn source(dir: &Path) -> IcebergStore {
    let s = IcebergStore::open_writable(&id(dir)).unwrap();
    for t in ["events", "empty", "notes"] {
        create(&s, t);
    }
    s.append("events", &[rows(&s, "events", 0, 600)]).unwrap();
    s.append("events", &[rows(&s, "events", 600, 400)]).unwrap();
    s.append("notes", &[rows(&s, "notes", 0, 10)]).unwrap();
    s
}

fn snapshots(store: &IcebergStore, name: &str) -> usize {
    store
        .run(async {
            let t = store
                .iceberg_catalog()
                .load_table(&ident(name))
                .await
                .unwrap();
            Ok(t.metadata().snapshots().count())
        })
        .unwrap()
}

fn evidence(store: &IcebergStore, name: &str) -> TableEvidence {
    store
        .namespace_evidence()
        .unwrap()
        .into_iter()
        .find(|e| e.name == name)
        .unwrap()
}

#[test]
fn every_table_the_catalog_lists_is_copied_and_verified() {
    let tmp = tempfile::tempdir().unwrap();
    let src = source(&tmp.path().join("src"));
    let dst = IcebergStore::open_writable(&id(&tmp.path().join("dst"))).unwrap();
    let plan = src.namespace_evidence().unwrap();
    let names: Vec<&str> = plan.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        ["empty", "events", "notes"],
        "the catalog is the inventory"
    );
    assert_eq!(plan[1].content.rows, 1000);
    assert_eq!(plan[0].content.rows, 0);
    assert_eq!(plan[0].snapshot, None);
    for e in &plan {
        match dst.copy_table(&src, e, Fault::None).unwrap() {
            CopyOutcome::Copied(found) => assert!(found.same_content(e), "{}", e.name),
            other => panic!("{}: {other:?}", e.name),
        }
    }
    let copied = dst.namespace_evidence().unwrap();
    for (a, b) in plan.iter().zip(&copied) {
        assert!(a.same_content(b), "{} {a:?} {b:?}", a.name);
    }
    // Two source snapshots became one destination commit; the empty table
    // got none.
    assert_eq!(snapshots(&dst, "events"), 1);
    assert_eq!(snapshots(&dst, "empty"), 0);
    // A retry converges and writes nothing.
    for e in &plan {
        assert!(matches!(
            dst.copy_table(&src, e, Fault::None).unwrap(),
            CopyOutcome::Converged(_)
        ));
    }
    assert_eq!(snapshots(&dst, "events"), 1);
}

/// A table whose writer emptied it: a snapshot that holds no data file.
/// Its copy commits nothing (Iceberg refuses an append of no file; the
/// refusal was once read as an ambiguous commit and the table copied a
/// second time) and its evidence matches through the port.
#[test]
fn a_snapshot_without_rows_is_copied_without_a_commit() {
    use custos_core::migration::tables::TableStore;
    use custos_core::migration::{Classification, CommitReply, Name, TablePlan};
    use iceberg::transaction::{ApplyTransactionAction, Transaction};

    let tmp = tempfile::tempdir().unwrap();
    let src = IcebergStore::open_writable(&id(&tmp.path().join("src"))).unwrap();
    create(&src, "drained");
    src.run(async {
        let c = src.iceberg_catalog();
        let t = c.load_table(&ident("drained")).await.unwrap();
        let tx = Transaction::new(&t);
        let tx = tx
            .fast_append()
            .set_snapshot_properties([("note".to_string(), "emptied".to_string())].into())
            .apply(tx)
            .unwrap();
        tx.commit(c).await.unwrap();
        Ok(())
    })
    .unwrap();
    let e = evidence(&src, "drained");
    assert!(e.snapshot.is_some());
    assert_eq!(e.content.rows, 0);
    let dst = IcebergStore::open_writable(&id(&tmp.path().join("dst"))).unwrap();
    let CopyOutcome::Copied(found) = dst.copy_table(&src, &e, Fault::None).unwrap() else {
        panic!("copied")
    };
    assert!(found.same_content(&e));
    assert_eq!(found.snapshot, None);
    assert_eq!(snapshots(&dst, "drained"), 0);
    // Through the port: committed at once, never ambiguous.
    let facts = src.evidence_at(&Name::new("drained").unwrap(), e.snapshot.unwrap() as u64);
    let plan = TablePlan {
        name: Name::new("drained").unwrap(),
        classification: Classification::Application,
        source: facts.unwrap(),
        destination_content_digest: e.content.digest,
    };
    let other = IcebergStore::open_writable(&id(&tmp.path().join("other"))).unwrap();
    match other.copy_from(&src, &plan, None).unwrap() {
        CommitReply::Committed(f) => assert!(plan.destination_matches(&f), "{f:?}"),
        CommitReply::Ambiguous => panic!("an append of no file was attempted"),
    }
}

#[test]
fn the_pinned_snapshot_is_copied_whatever_the_source_did_since() {
    let tmp = tempfile::tempdir().unwrap();
    let src = source(&tmp.path().join("src"));
    let dst = IcebergStore::open_writable(&id(&tmp.path().join("dst"))).unwrap();
    let pinned = evidence(&src, "notes");
    src.append("notes", &[rows(&src, "notes", 10, 5)]).unwrap();
    assert_eq!(evidence(&src, "notes").content.rows, 15);
    let CopyOutcome::Copied(found) = dst.copy_table(&src, &pinned, Fault::None).unwrap() else {
        panic!("copied")
    };
    assert_eq!(found.content, pinned.content);
    assert_eq!(
        src.table_evidence("notes", pinned.snapshot)
            .unwrap()
            .content,
        pinned.content
    );
}

#[test]
fn fault_source_evidence_disagrees_is_source_drift_and_nothing_lands() {
    let tmp = tempfile::tempdir().unwrap();
    let src = source(&tmp.path().join("src"));
    let dst = IcebergStore::open_writable(&id(&tmp.path().join("dst"))).unwrap();
    let mut wrong = evidence(&src, "notes");
    wrong.content.digest.0[0] ^= 1;
    let e = dst.copy_table(&src, &wrong, Fault::None).unwrap_err();
    assert_eq!(e.reason(), "SourceDrift", "{e}");
    assert_eq!(snapshots(&dst, "notes"), 0);
}

#[test]
fn fault_lost_commit_reply_is_in_doubt_then_inspection_converges() {
    let tmp = tempfile::tempdir().unwrap();
    let src = source(&tmp.path().join("src"));
    let dst = IcebergStore::open_writable(&id(&tmp.path().join("dst"))).unwrap();
    let plan = evidence(&src, "events");
    let e = dst.copy_table(&src, &plan, Fault::LoseReply).unwrap_err();
    assert_eq!(e.reason(), "CommitInDoubt", "{e}");
    assert!(matches!(
        dst.inspect_destination(&plan).unwrap(),
        Inspection::Matching(_)
    ));
    assert!(matches!(
        dst.copy_table(&src, &plan, Fault::None).unwrap(),
        CopyOutcome::Converged(_)
    ));
    assert_eq!(snapshots(&dst, "events"), 1, "never a second append");
}

#[test]
fn fault_commit_failed_before_the_catalog_is_absent_then_retried() {
    let tmp = tempfile::tempdir().unwrap();
    let src = source(&tmp.path().join("src"));
    let dst = IcebergStore::open_writable(&id(&tmp.path().join("dst"))).unwrap();
    let plan = evidence(&src, "events");
    let e = dst
        .copy_table(&src, &plan, Fault::FailBeforeCommit)
        .unwrap_err();
    assert_eq!(e.reason(), "CommitInDoubt", "{e}");
    assert_eq!(dst.inspect_destination(&plan).unwrap(), Inspection::Absent);
    assert!(matches!(
        dst.copy_table(&src, &plan, Fault::None).unwrap(),
        CopyOutcome::Copied(_)
    ));
    assert_eq!(snapshots(&dst, "events"), 1);
}

#[test]
fn fault_concurrent_append_before_the_commit_never_lands_a_second_append() {
    let tmp = tempfile::tempdir().unwrap();
    let src = source(&tmp.path().join("src"));
    let dst = IcebergStore::open_writable(&id(&tmp.path().join("dst"))).unwrap();
    let plan = evidence(&src, "events");
    // The racing writer's rows (built against the destination's schema
    // once the copy has created the table: the schema is the source's).
    let racing = rows(&src, "events", 5000, 3);
    let e = dst
        .copy_table(&src, &plan, Fault::ConcurrentAppend(vec![racing]))
        .unwrap_err();
    assert_eq!(e.reason(), "CommitInDoubt", "{e}");
    assert_eq!(snapshots(&dst, "events"), 1, "only the racing writer's");
    assert_eq!(dst.table_evidence("events", None).unwrap().content.rows, 3);
    let Inspection::Conflicting(found) = dst.inspect_destination(&plan).unwrap() else {
        panic!("conflicting")
    };
    assert_eq!(found.content.rows, 3);
    let e = dst.copy_table(&src, &plan, Fault::None).unwrap_err();
    assert_eq!(e.reason(), "DestinationConflict", "{e}");
    assert_eq!(snapshots(&dst, "events"), 1);
}

#[test]
fn a_populated_destination_with_other_content_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let src = source(&tmp.path().join("src"));
    let dst = IcebergStore::open_writable(&id(&tmp.path().join("dst"))).unwrap();
    create(&dst, "notes");
    dst.append("notes", &[rows(&dst, "notes", 0, 9)]).unwrap();
    let plan = evidence(&src, "notes");
    let e = dst.copy_table(&src, &plan, Fault::None).unwrap_err();
    assert_eq!(e.reason(), "DestinationConflict", "{e}");
    assert_eq!(snapshots(&dst, "notes"), 1);
    assert_eq!(dst.table_evidence("notes", None).unwrap().content.rows, 9);
}

/// The same rows digest alike however Iceberg or the writer cut them into
/// batches, and in any order.
#[test]
fn evidence_is_independent_of_batches_and_row_order() {
    let tmp = tempfile::tempdir().unwrap();
    let s = IcebergStore::open_writable(&id(tmp.path())).unwrap();
    for t in ["one", "three", "reversed"] {
        create(&s, t);
    }
    s.append("one", &[rows(&s, "one", 0, 300)]).unwrap();
    s.append(
        "three",
        &[
            rows(&s, "three", 200, 100),
            rows(&s, "three", 0, 150),
            rows(&s, "three", 150, 50),
        ],
    )
    .unwrap();
    // Later rows first, in another snapshot order.
    s.append("reversed", &[rows(&s, "reversed", 150, 150)])
        .unwrap();
    s.append("reversed", &[rows(&s, "reversed", 0, 150)])
        .unwrap();
    let e = |t| s.table_evidence(t, None).unwrap();
    assert!(e("one").same_content(&e("three")));
    assert!(e("one").same_content(&e("reversed")));
    // Duplicate-sensitive through Iceberg: one more copy of a row differs.
    s.append("three", &[rows(&s, "three", 7, 1)]).unwrap();
    assert!(!e("one").same_content(&e("three")));
}

/// Width variants the fingerprint treats alike digest alike; text and
/// bytes do not.
#[test]
fn utf8_width_variants_digest_alike() {
    let small = ArrowSchema::new(vec![ArrowField::new("s", DataType::Utf8, true)]);
    let large = ArrowSchema::new(vec![ArrowField::new("s", DataType::LargeUtf8, true)]);
    let fp_small = schema_fingerprint(&arrow_schema_to_logical(&small).unwrap());
    let fp_large = schema_fingerprint(&arrow_schema_to_logical(&large).unwrap());
    assert_eq!(fp_small, fp_large);
    let a = RecordBatch::try_new(
        Arc::new(small),
        vec![Arc::new(StringArray::from(vec![
            Some("a"),
            None,
            Some("b"),
        ]))],
    )
    .unwrap();
    let b = RecordBatch::try_new(
        Arc::new(large),
        vec![Arc::new(LargeStringArray::from(vec![
            Some("b"),
            Some("a"),
            None,
        ]))],
    )
    .unwrap();
    assert_eq!(
        content_of(fp_small, std::slice::from_ref(&a)).unwrap(),
        content_of(fp_large, &[b]).unwrap()
    );
    let bin = ArrowSchema::new(vec![ArrowField::new("s", DataType::Binary, true)]);
    let fp_bin = schema_fingerprint(&arrow_schema_to_logical(&bin).unwrap());
    assert_ne!(fp_bin, fp_small);
    let c = RecordBatch::try_new(
        Arc::new(bin),
        vec![Arc::new(arrow::array::BinaryArray::from(vec![
            Some(b"a".as_slice()),
            None,
            Some(b"b".as_slice()),
        ]))],
    )
    .unwrap();
    // Even under one schema fingerprint, bytes are not text.
    assert_ne!(
        content_of(fp_small, &[a]).unwrap(),
        content_of(fp_small, &[c]).unwrap()
    );
}

/// Why the copy commits through `EmptyOnly`: Iceberg's own
/// `Transaction::commit`, built on an empty table, re-bases onto a table a
/// racing writer appended to and lands a second append. (If this ever
/// stops being true, the guard is still correct; this test then says the
/// library changed.)
#[test]
fn a_plain_iceberg_commit_re_bases_blindly_after_a_race() {
    use iceberg::spec::DataFileFormat;
    use iceberg::transaction::{ApplyTransactionAction, Transaction};
    use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
    use iceberg::writer::file_writer::location_generator::{
        DefaultFileNameGenerator, DefaultLocationGenerator,
    };
    use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
    use iceberg::writer::file_writer::ParquetWriterBuilder;
    use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
    use parquet::file::properties::WriterProperties;

    let tmp = tempfile::tempdir().unwrap();
    let s = IcebergStore::open_writable(&id(tmp.path())).unwrap();
    create(&s, "t");
    let batch = rows(&s, "t", 0, 4);
    let snapshots_after = s
        .run(async {
            let catalog = s.iceberg_catalog();
            let stale = catalog.load_table(&ident("t")).await.unwrap();
            assert!(stale.metadata().current_snapshot_id().is_none());
            let parquet = ParquetWriterBuilder::new(
                WriterProperties::default(),
                stale.metadata().current_schema().clone(),
            );
            let rolling = RollingFileWriterBuilder::new_with_default_file_size(
                parquet,
                stale.file_io().clone(),
                DefaultLocationGenerator::new(stale.metadata()).unwrap(),
                DefaultFileNameGenerator::new("stale".into(), None, DataFileFormat::Parquet),
            );
            let mut w = DataFileWriterBuilder::new(rolling)
                .build(None)
                .await
                .unwrap();
            w.write(batch.clone()).await.unwrap();
            let files = w.close().await.unwrap();
            // The racing writer lands first (through its own transaction).
            let fresh = catalog.load_table(&ident("t")).await.unwrap();
            let parquet = ParquetWriterBuilder::new(
                WriterProperties::default(),
                fresh.metadata().current_schema().clone(),
            );
            let rolling = RollingFileWriterBuilder::new_with_default_file_size(
                parquet,
                fresh.file_io().clone(),
                DefaultLocationGenerator::new(fresh.metadata()).unwrap(),
                DefaultFileNameGenerator::new("racer".into(), None, DataFileFormat::Parquet),
            );
            let mut r = DataFileWriterBuilder::new(rolling)
                .build(None)
                .await
                .unwrap();
            r.write(batch.clone()).await.unwrap();
            let racer = r.close().await.unwrap();
            let tx = Transaction::new(&fresh);
            let tx = tx.fast_append().add_data_files(racer).apply(tx).unwrap();
            tx.commit(catalog).await.unwrap();
            // The stale transaction, built when the table was empty.
            let tx = Transaction::new(&stale);
            let tx = tx.fast_append().add_data_files(files).apply(tx).unwrap();
            let t = tx.commit(catalog).await.unwrap();
            Ok(t.metadata().snapshots().count())
        })
        .unwrap();
    assert_eq!(snapshots_after, 2, "the stale append landed on top");
    assert_eq!(s.table_evidence("t", None).unwrap().content.rows, 8);
}

/// Every other Iceberg type an application table may hold: decimal, time,
/// uuid, fixed, map and date (with nulls and an empty map) — copied with
/// the source's schema and verified, uninterpreted.
#[test]
fn an_application_table_of_every_other_iceberg_type_is_copied() {
    use arrow::array::{
        Date32Array, Decimal128Array, FixedSizeBinaryArray, MapArray, Time64MicrosecondArray,
    };
    use arrow::buffer::OffsetBuffer;
    use iceberg::spec::MapType;

    let schema = Schema::builder()
        .with_fields(vec![
            NestedField::optional(
                1,
                "amount",
                Type::Primitive(PrimitiveType::Decimal {
                    precision: 10,
                    scale: 2,
                }),
            )
            .into(),
            NestedField::optional(2, "at", Type::Primitive(PrimitiveType::Time)).into(),
            NestedField::optional(3, "uid", Type::Primitive(PrimitiveType::Uuid)).into(),
            NestedField::optional(4, "blob", Type::Primitive(PrimitiveType::Fixed(4))).into(),
            NestedField::optional(
                5,
                "attrs",
                Type::Map(MapType::new(
                    NestedField::map_key_element(7, Type::Primitive(PrimitiveType::String)).into(),
                    NestedField::map_value_element(8, Type::Primitive(PrimitiveType::Long), false)
                        .into(),
                )),
            )
            .into(),
            NestedField::optional(6, "day", Type::Primitive(PrimitiveType::Date)).into(),
        ])
        .build()
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let src = IcebergStore::open_writable(&id(&tmp.path().join("src"))).unwrap();
    create_with(&src, "ledger", schema);
    let arrow = src.table_arrow_schema("ledger").unwrap();
    let DataType::Map(entries, sorted) = arrow.field(4).data_type().clone() else {
        panic!("attrs is a map: {arrow:?}")
    };
    let DataType::Struct(kv) = entries.data_type().clone() else {
        panic!("entries")
    };
    let keys: ArrayRef = Arc::new(StringArray::from(vec!["b", "a", "a"]));
    let values: ArrayRef = Arc::new(Int64Array::from(vec![Some(2), None, Some(1)]));
    let attrs = MapArray::new(
        entries,
        OffsetBuffer::new(vec![0, 2, 2, 3, 3].into()),
        StructArray::new(kv, vec![keys, values], None),
        Some(vec![true, true, true, false].into()),
        sorted,
    );
    let uid = [7u8; 16];
    let batch = RecordBatch::try_new(
        arrow,
        vec![
            Arc::new(
                Decimal128Array::from(vec![Some(12_345), None, Some(-1), Some(12_345)])
                    .with_precision_and_scale(10, 2)
                    .unwrap(),
            ),
            Arc::new(Time64MicrosecondArray::from(vec![
                Some(1),
                Some(86_399_999_999),
                None,
                Some(1),
            ])),
            Arc::new(
                FixedSizeBinaryArray::try_from_sparse_iter_with_size(
                    vec![Some(uid), None, Some([0u8; 16]), Some(uid)].into_iter(),
                    16,
                )
                .unwrap(),
            ),
            Arc::new(
                FixedSizeBinaryArray::try_from_sparse_iter_with_size(
                    vec![Some(*b"abcd"), Some(*b"\0\0\0\0"), None, Some(*b"abcd")].into_iter(),
                    4,
                )
                .unwrap(),
            ),
            Arc::new(attrs),
            Arc::new(Date32Array::from(vec![Some(0), Some(-1), None, Some(0)])),
        ],
    )
    .unwrap();
    src.append("ledger", &[batch]).unwrap();
    let plan = evidence(&src, "ledger");
    assert_eq!(plan.content.rows, 4);
    let dst = IcebergStore::open_writable(&id(&tmp.path().join("dst"))).unwrap();
    let CopyOutcome::Copied(found) = dst.copy_table(&src, &plan, Fault::None).unwrap() else {
        panic!("copied")
    };
    assert!(found.same_content(&plan));
}

/// A batch large enough to be digested on several threads (5,000 rows;
/// `ROWS_PER_WORKER` is 1,024) digests as the same rows fed one row per
/// batch, which never splits; one row changed in the last thread's range
/// changes the digest.
#[test]
fn a_batch_split_across_threads_digests_as_its_rows_one_by_one() {
    let schema = Arc::new(ArrowSchema::new(vec![ArrowField::new(
        "s",
        DataType::Utf8,
        true,
    )]));
    let fp = schema_fingerprint(&arrow_schema_to_logical(&schema).unwrap());
    let batch_of = |last: &str| {
        let mut v: Vec<Option<String>> = (0..5000)
            .map(|i| (i % 7 != 0).then(|| format!("row {i}")))
            .collect();
        v[4999] = Some(last.to_string());
        RecordBatch::try_new(schema.clone(), vec![Arc::new(StringArray::from(v))]).unwrap()
    };
    let whole = batch_of("last");
    let one_by_one: Vec<RecordBatch> = (0..whole.num_rows()).map(|i| whole.slice(i, 1)).collect();
    let split = content_of(fp, std::slice::from_ref(&whole)).unwrap();
    assert_eq!(split.rows, 5000);
    assert_eq!(split, content_of(fp, &one_by_one).unwrap());
    assert_ne!(split, content_of(fp, &[batch_of("other")]).unwrap());
}
