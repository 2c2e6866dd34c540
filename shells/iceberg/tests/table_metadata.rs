//! A table's partition spec, sort order and owner's properties survive a
//! migration's copy, on real Iceberg warehouses: the destination is created
//! with them (re-bound to its own field ids by column name), its rows are
//! written one set of data files per partition, and the evidence binds them
//! through the metadata fingerprint, so a destination that lost them does
//! not verify.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use custos_core::migration::metadata::{self, TableMetadata};
use custos_core::migration::tables::TableStore;
use custos_core::migration::{Classification, CommitReply, Name, TableFacts, TablePlan};
use custos_iceberg::transfer::logical_metadata;
use custos_iceberg::{CopyOutcome, Fault, IcebergStore, Inspection};
use iceberg::spec::{
    Literal, NestedField, NullOrder, PrimitiveType, Schema, Transform, Type, UnboundPartitionSpec,
};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::TableCreation;

mod support;
use support::{create, ice, id, load};

const REGIONS: [Option<&str>; 4] = [Some("eu"), Some("us"), Some("ap"), None];

fn name(s: &str) -> Name {
    Name::new(s).unwrap()
}

/// `key long (required), scratch string, region string, n int`.
fn wide_schema() -> Schema {
    Schema::builder()
        .with_fields(vec![
            NestedField::required(1, "key", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::optional(2, "scratch", Type::Primitive(PrimitiveType::String)).into(),
            NestedField::optional(3, "region", Type::Primitive(PrimitiveType::String)).into(),
            NestedField::optional(4, "n", Type::Primitive(PrimitiveType::Int)).into(),
        ])
        .build()
        .unwrap()
}

/// Commits `tx` to `store`'s catalog.
fn commit(store: &IcebergStore, tx: Transaction) {
    store
        .run(async {
            tx.commit(store.iceberg_catalog())
                .await
                .map_err(ice("commit"))
        })
        .unwrap();
}

/// Deletes column `scratch` of `table` (so the ids left are not the
/// fresh ones a copy would assign); answers the table reloaded.
fn drop_scratch(store: &IcebergStore, table: &str) -> Table {
    let t = load(store, table);
    let tx = Transaction::new(&t);
    let tx = tx
        .update_schema()
        .delete_column("scratch")
        .apply(tx)
        .unwrap();
    commit(store, tx);
    load(store, table)
}

/// Rows `from..from + n`: `region` cycles through [`REGIONS`] (nulls
/// included), `n` is `key * 3`, `key` every 7th row null in `n`.
fn rows(store: &IcebergStore, table: &str, from: i64, n: i64) -> RecordBatch {
    let schema = store.table_arrow_schema(table).unwrap();
    let keys: Vec<i64> = (from..from + n).collect();
    let region: ArrayRef = Arc::new(StringArray::from(
        keys.iter()
            .map(|k| REGIONS[(*k as usize) % REGIONS.len()])
            .collect::<Vec<_>>(),
    ));
    let ns: ArrayRef = Arc::new(Int32Array::from(
        keys.iter()
            .map(|k| (k % 7 != 0).then_some(*k as i32 * 3))
            .collect::<Vec<_>>(),
    ));
    RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(keys)), region, ns]).unwrap()
}

/// A source warehouse with `events`: partitioned by `region` (identity)
/// and `bucket[4](key)`, created with a `scratch` column that is then
/// dropped — so its field ids (key 1, region 3, n 4) are not the fresh
/// ones a new table gets (1, 2, 3) — and 400 rows in two snapshots.
fn partitioned_source(dir: &Path) -> IcebergStore {
    let store = IcebergStore::open_writable(&id(dir)).unwrap();
    let spec = UnboundPartitionSpec::builder()
        .add_partition_field(3, "region", Transform::Identity)
        .unwrap()
        .add_partition_field(1, "key_bucket", Transform::Bucket(4))
        .unwrap()
        .build();
    create(
        &store,
        TableCreation::builder()
            .name("events".into())
            .schema(wide_schema())
            .partition_spec(spec)
            .build(),
    );
    let t = drop_scratch(&store, "events");
    let s = t.metadata().current_schema();
    assert_eq!(
        (
            s.field_by_name("key").unwrap().id,
            s.field_by_name("region").unwrap().id,
            s.field_by_name("n").unwrap().id
        ),
        (1, 3, 4),
        "the source's ids are not the fresh ones"
    );
    for from in [0, 250] {
        let batch = rows(&store, "events", from, if from == 0 { 250 } else { 150 });
        store.append("events", &[batch]).unwrap();
    }
    store
}

/// A source warehouse with `sorted`: sorted by `key` descending (nulls
/// last) then `n` ascending (nulls first), with owner's properties and a
/// physical one (`write.data.path`, pointing into the source), 120 rows.
fn sorted_source(dir: &Path) -> IcebergStore {
    let store = IcebergStore::open_writable(&id(dir)).unwrap();
    create(
        &store,
        TableCreation::builder()
            .name("sorted".into())
            .schema(wide_schema())
            .properties([("owner".to_string(), "ops".to_string())])
            .build(),
    );
    let t = drop_scratch(&store, "sorted");
    let tx = Transaction::new(&t);
    let tx = tx
        .replace_sort_order()
        .desc("key", NullOrder::Last)
        .asc("n", NullOrder::First)
        .apply(tx)
        .unwrap();
    let tx = tx
        .update_table_properties()
        .set("commit.retry.num-retries".into(), "7".into())
        .set("app.retention-days".into(), "30".into())
        .set(
            "write.data.path".into(),
            format!("{}/elsewhere/sorted-data", dir.display()),
        )
        .apply(tx)
        .unwrap();
    commit(&store, tx);
    let batch = rows(&store, "sorted", 0, 120);
    store.append("sorted", &[batch]).unwrap();
    store
}

/// The plan of `table` as the workflow freezes it: the source's evidence
/// at its current snapshot.
fn plan_of(source: &IcebergStore, table: &str) -> TablePlan {
    let (_, facts) = source
        .namespace()
        .unwrap()
        .into_iter()
        .find(|(n, _)| n.as_str() == table)
        .unwrap();
    TablePlan {
        name: name(table),
        classification: Classification::Application,
        source: facts,
        destination_content_digest: facts.content_digest,
    }
}

fn committed(r: CommitReply) -> TableFacts {
    match r {
        CommitReply::Committed(f) => f,
        CommitReply::Ambiguous => panic!("an unfaulted copy answered Ambiguous"),
    }
}

/// Rows per partition value of `table`'s current snapshot, from its
/// manifests: every data file's partition value and record count.
fn rows_per_partition(store: &IcebergStore, table: &str) -> BTreeMap<String, u64> {
    let t = load(store, table);
    store
        .run(async {
            let snapshot = t.metadata().current_snapshot().unwrap().clone();
            let list = t
                .manifest_list_reader(&snapshot)
                .load()
                .await
                .map_err(ice("manifest list"))?;
            let mut out = BTreeMap::new();
            for m in list.entries() {
                let manifest = m
                    .load_manifest(t.file_io())
                    .await
                    .map_err(ice("manifest"))?;
                for e in manifest.entries() {
                    let region = match e.data_file().partition().fields().first() {
                        Some(Some(Literal::Primitive(p))) => format!("{p:?}"),
                        Some(None) => "null".into(),
                        other => panic!("no region in the partition value: {other:?}"),
                    };
                    *out.entry(region).or_insert(0) += e.record_count();
                }
            }
            Ok(out)
        })
        .unwrap()
}

/// Column names a partition spec's or sort order's source ids resolve to
/// in `t`.
fn spec_columns(t: &Table) -> Vec<(String, String, String)> {
    let s = t.metadata().current_schema();
    t.metadata()
        .default_partition_spec()
        .fields()
        .iter()
        .map(|f| {
            (
                s.name_by_field_id(f.source_id).unwrap().to_owned(),
                f.transform.to_string(),
                f.name.clone(),
            )
        })
        .collect()
}

#[test]
fn a_partitioned_table_arrives_partitioned_with_the_same_fingerprint() {
    let (s, d) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let src = partitioned_source(s.path());
    let dst = IcebergStore::open_writable(&id(d.path())).unwrap();
    let plan = plan_of(&src, "events");
    let want = TableMetadata::new(
        vec![
            metadata::PartitionField {
                source: "region".into(),
                transform: "identity".into(),
                name: "region".into(),
            },
            metadata::PartitionField {
                source: "key".into(),
                transform: "bucket[4]".into(),
                name: "key_bucket".into(),
            },
        ],
        Vec::new(),
        Vec::new(),
    );
    assert_eq!(plan.source.metadata_fingerprint, want.fingerprint());
    assert_ne!(
        plan.source.metadata_fingerprint,
        TableMetadata::default().fingerprint(),
        "partitioning is in the evidence"
    );

    let f = committed(dst.copy_from(&src, &plan, None).unwrap());
    assert!(plan.destination_matches(&f), "{f:?}");
    assert_eq!(f.metadata_fingerprint, plan.source.metadata_fingerprint);
    assert_eq!(f.rows, 400);

    // The destination's spec names the same columns with the same
    // transforms and names, under its own (fresh) field ids.
    let (st, dt) = (load(&src, "events"), load(&dst, "events"));
    assert_eq!(spec_columns(&dt), spec_columns(&st));
    assert_eq!(
        spec_columns(&dt),
        vec![
            ("region".into(), "identity".into(), "region".into()),
            ("key".into(), "bucket[4]".into(), "key_bucket".into())
        ]
    );
    let ds = dt.metadata().current_schema();
    assert_eq!(ds.field_by_name("region").unwrap().id, 2, "fresh ids");
    assert_eq!(
        logical_metadata(&dt, "events").unwrap(),
        logical_metadata(&st, "events").unwrap()
    );
    // Every row sits in a data file of its own partition.
    let per = rows_per_partition(&dst, "events");
    assert_eq!(per, rows_per_partition(&src, "events"));
    assert_eq!(per.values().sum::<u64>(), 400);
    assert_eq!(per.get("null"), Some(&100), "{per:?}");
    assert_eq!(per.len(), REGIONS.len(), "{per:?}");

    // A fresh inspection and a repeat agree; nothing more is appended.
    assert_eq!(dst.inspect(&name("events")).unwrap(), Some(f));
    assert_eq!(
        committed(dst.copy_from(&src, &plan, None).unwrap()),
        f,
        "a repeat converges"
    );
    assert_eq!(load(&dst, "events").metadata().snapshots().count(), 1);
}

#[test]
fn a_sorted_table_keeps_its_order_and_its_owners_properties() {
    let (s, d) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let src = sorted_source(s.path());
    let dst = IcebergStore::open_writable(&id(d.path())).unwrap();
    let plan = plan_of(&src, "sorted");
    let f = committed(dst.copy_from(&src, &plan, None).unwrap());
    assert!(plan.destination_matches(&f));
    assert_eq!(f.metadata_fingerprint, plan.source.metadata_fingerprint);
    assert_eq!(f.rows, 120);

    let (st, dt) = (load(&src, "sorted"), load(&dst, "sorted"));
    let order = |t: &Table| {
        let s = t.metadata().current_schema();
        t.metadata()
            .default_sort_order()
            .fields
            .iter()
            .map(|f| {
                (
                    s.name_by_field_id(f.source_id).unwrap().to_owned(),
                    f.transform.to_string(),
                    f.direction.to_string(),
                    f.null_order.to_string(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(order(&dt), order(&st));
    assert_eq!(order(&dt).len(), 2);
    assert_eq!(order(&dt)[0].0, "key");
    // Every owner's property arrives; the physical one stays behind.
    let props = dt.metadata().properties();
    for (k, v) in [
        ("owner", "ops"),
        ("commit.retry.num-retries", "7"),
        ("app.retention-days", "30"),
    ] {
        assert_eq!(props.get(k).map(String::as_str), Some(v), "{k}: {props:?}");
    }
    assert!(st.metadata().properties().contains_key("write.data.path"));
    assert!(!props.contains_key("write.data.path"), "{props:?}");
    let want = TableMetadata::new(
        vec![],
        vec![
            metadata::SortField {
                source: "key".into(),
                transform: "identity".into(),
                direction: metadata::SortDirection::Descending,
                nulls: metadata::NullOrder::Last,
            },
            metadata::SortField {
                source: "n".into(),
                transform: "identity".into(),
                direction: metadata::SortDirection::Ascending,
                nulls: metadata::NullOrder::First,
            },
        ],
        [
            ("owner", "ops"),
            ("commit.retry.num-retries", "7"),
            ("app.retention-days", "30"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    assert_eq!(logical_metadata(&dt, "sorted").unwrap(), want);
    assert_eq!(f.metadata_fingerprint, want.fingerprint());
    // The destination's data files are the destination's own.
    let dest_root = d.path().canonicalize().unwrap();
    let src_root = s.path().canonicalize().unwrap();
    let t = load(&dst, "sorted");
    let files: Vec<String> = dst
        .run(async {
            let snap = t.metadata().current_snapshot().unwrap().clone();
            let list = t
                .manifest_list_reader(&snap)
                .load()
                .await
                .map_err(ice("list"))?;
            let mut out = Vec::new();
            for m in list.entries() {
                let manifest = m
                    .load_manifest(t.file_io())
                    .await
                    .map_err(ice("manifest"))?;
                out.extend(manifest.entries().iter().map(|e| e.file_path().to_owned()));
            }
            Ok(out)
        })
        .unwrap();
    assert!(!files.is_empty());
    for p in &files {
        let p = p.trim_start_matches("file://");
        assert!(
            Path::new(p).starts_with(&dest_root) || Path::new(p).starts_with(d.path()),
            "{p} is not under the destination"
        );
        assert!(!Path::new(p).starts_with(&src_root) && !Path::new(p).starts_with(s.path()));
    }
}

#[test]
fn a_copy_that_stopped_after_creating_the_table_resumes_into_it() {
    let (s, d) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let src = partitioned_source(s.path());
    let dst = IcebergStore::open_writable(&id(d.path())).unwrap();
    let expected = src.table_evidence("events", None).unwrap();
    // The destination table is created, the commit fails: absent, retried.
    let e = dst
        .copy_table(&src, &expected, Fault::FailBeforeCommit)
        .unwrap_err();
    assert_eq!(e.reason(), "CommitInDoubt");
    assert_eq!(
        dst.inspect_destination(&expected).unwrap(),
        Inspection::Absent
    );
    let CopyOutcome::Copied(got) = dst.copy_table(&src, &expected, Fault::None).unwrap() else {
        panic!("not copied")
    };
    assert!(got.same_content(&expected));
    assert_eq!(got.metadata, expected.metadata);
}

#[test]
fn a_destination_that_lost_its_partitioning_does_not_verify() {
    let (s, d) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let src = partitioned_source(s.path());
    let plan = plan_of(&src, "events");
    // What a copy that drops the partitioning leaves: the same schema and
    // the same rows in an unpartitioned table.
    let dst = IcebergStore::open_writable(&id(d.path())).unwrap();
    let st = load(&src, "events");
    create(
        &dst,
        TableCreation::builder()
            .name("events".into())
            .schema(st.metadata().current_schema().as_ref().clone())
            .build(),
    );
    let evidence = src.table_evidence("events", None).unwrap();
    let batches: Vec<RecordBatch> = [(0, 250), (250, 150)]
        .iter()
        .map(|(from, n)| rows(&dst, "events", *from, *n))
        .collect();
    dst.append("events", &batches).unwrap();
    let found = dst.inspect(&name("events")).unwrap().unwrap();
    // Same rows and schema, other metadata: not the plan's table.
    assert_eq!(
        (found.rows, found.content_digest, found.schema_fingerprint),
        (
            plan.source.rows,
            plan.source.content_digest,
            plan.source.schema_fingerprint
        )
    );
    assert_eq!(
        found.metadata_fingerprint,
        TableMetadata::default().fingerprint()
    );
    assert!(!plan.destination_matches(&found));
    assert_eq!(
        found.difference(&plan).unwrap(),
        "metadata fingerprint (partition spec, sort order or properties)"
    );
    // A copy into it is refused, naming the table, and appends nothing.
    let e = dst.copy_from(&src, &plan, None).unwrap_err();
    assert_eq!(e.reason(), "DestinationConflict");
    assert!(e.to_string().contains("table events"), "{e}");
    assert!(matches!(
        dst.inspect_destination(&evidence).unwrap(),
        Inspection::Conflicting(_)
    ));
    assert_eq!(load(&dst, "events").metadata().snapshots().count(), 1);

    // An empty unpartitioned table waiting at the destination is refused
    // too: the copy never fills a table of another shape.
    let d2 = tempfile::tempdir().unwrap();
    let empty = IcebergStore::open_writable(&id(d2.path())).unwrap();
    create(
        &empty,
        TableCreation::builder()
            .name("events".into())
            .schema(st.metadata().current_schema().as_ref().clone())
            .build(),
    );
    let e = empty.copy_from(&src, &plan, None).unwrap_err();
    assert_eq!(e.reason(), "DestinationConflict");
    assert!(e.to_string().contains("table events"), "{e}");
    assert!(load(&empty, "events")
        .metadata()
        .current_snapshot()
        .is_none());
}

#[test]
fn source_metadata_changed_since_the_plan_is_drift_and_nothing_lands() {
    let (s, d) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let src = sorted_source(s.path());
    let plan = plan_of(&src, "sorted");
    let t = load(&src, "sorted");
    let tx = Transaction::new(&t);
    let tx = tx
        .update_table_properties()
        .set("owner".into(), "someone-else".into())
        .apply(tx)
        .unwrap();
    commit(&src, tx);
    let dst = IcebergStore::open_writable(&id(d.path())).unwrap();
    let e = dst.copy_from(&src, &plan, None).unwrap_err();
    assert_eq!(e.reason(), "SourceDrift", "{e}");
    assert!(dst.list_tables().unwrap().is_empty());
}
