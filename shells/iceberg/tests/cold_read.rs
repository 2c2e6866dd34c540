//! Cold reads on a real Iceberg warehouse (SQLite SQL catalog, local
//! files): a miss creates nothing, rows round-trip with projection and a
//! row limit, and a table changed out of band fails closed with
//! `CatalogSchemaMismatch` and no rows.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Float64Array, Int64Array, RecordBatch, StructArray};
use arrow::datatypes::DataType;
use custos_core::identity::StorageIdentity;
use custos_core::schema::{Field, LogicalType, Schema};
use custos_core::world::Signature;
use custos_iceberg::{IcebergError, IcebergStore};
use iceberg::spec::{PrimitiveType, Type};
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, NamespaceIdent, TableIdent};

fn schema() -> Schema {
    Schema::new(vec![
        Field::new(
            "entity",
            LogicalType::Int {
                bits: 64,
                signed: true,
            },
            false,
        ),
        Field::new(
            "Position",
            LogicalType::Struct(vec![
                Field::new("x", LogicalType::Float { bits: 64 }, true),
                Field::new("y", LogicalType::Float { bits: 64 }, true),
            ]),
            true,
        ),
        Field::new(
            "Score",
            LogicalType::Int {
                bits: 64,
                signed: true,
            },
            true,
        ),
    ])
}

fn comps() -> Vec<String> {
    vec!["Position".into(), "Score".into()]
}

/// `n` rows starting at entity `from`: Position = (e, -e), Score = 10 e.
fn batch(store: &IcebergStore, table_id: &str, from: i64, n: i64) -> RecordBatch {
    let arrow = store.table_arrow_schema(table_id).unwrap();
    let ids: Vec<i64> = (from..from + n).collect();
    let DataType::Struct(pos_fields) = arrow.field(1).data_type().clone() else {
        panic!("Position is a struct: {arrow:?}")
    };
    let xs: ArrayRef = Arc::new(Float64Array::from(
        ids.iter().map(|&e| e as f64).collect::<Vec<_>>(),
    ));
    let ys: ArrayRef = Arc::new(Float64Array::from(
        ids.iter().map(|&e| -(e as f64)).collect::<Vec<_>>(),
    ));
    let pos = StructArray::new(pos_fields, vec![xs, ys], None);
    let score = Int64Array::from(ids.iter().map(|&e| e * 10).collect::<Vec<_>>());
    RecordBatch::try_new(
        arrow,
        vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(pos),
            Arc::new(score),
        ],
    )
    .unwrap()
}

fn id(dir: &Path, ns: &str) -> StorageIdentity {
    StorageIdentity::new(dir.to_str().unwrap(), ns, "iceberg").unwrap()
}

/// Every file under `dir` with its bytes (directories as empty entries).
fn tree(dir: &Path) -> BTreeMap<String, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let key = p.strip_prefix(dir).unwrap().display().to_string();
            if p.is_dir() {
                out.insert(key, None);
                stack.push(p);
            } else {
                out.insert(key, Some(std::fs::read(&p).unwrap()));
            }
        }
    }
    out
}

/// The Iceberg catalog database's tables and rows, read through SQLite.
fn catalog_rows(db: &Path) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use sqlx::Row;
        let opts = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(db)
            .read_only(true);
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .connect_with(opts)
            .await
            .unwrap();
        let mut out = vec![];
        let tables: Vec<String> =
            sqlx::query("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
                .fetch_all(&pool)
                .await
                .unwrap()
                .iter()
                .map(|r| r.get::<String, _>(0))
                .collect();
        for t in tables {
            out.push(format!("table {t}"));
            for r in sqlx::query(&format!("SELECT * FROM \"{t}\""))
                .fetch_all(&pool)
                .await
                .unwrap()
            {
                let cells: Vec<String> = (0..r.len())
                    .map(|i| {
                        r.try_get::<Option<String>, _>(i)
                            .ok()
                            .flatten()
                            .unwrap_or_default()
                    })
                    .collect();
                out.push(format!("  {}", cells.join(" | ")));
            }
        }
        pool.close().await;
        out
    })
}

fn written(dir: &Path) -> Signature {
    let store = IcebergStore::open_writable(&id(dir, "ns")).unwrap();
    let sig = store.create_table(comps(), schema()).unwrap();
    let b1 = batch(&store, &sig.table_id, 0, 5);
    let b2 = batch(&store, &sig.table_id, 5, 7);
    assert_eq!(store.append(&sig.table_id, &[b1]).unwrap(), 5);
    assert_eq!(store.append(&sig.table_id, &[b2]).unwrap(), 7);
    sig
}

fn ints(b: &RecordBatch, col: &str) -> Vec<i64> {
    let a = b.column_by_name(col).unwrap();
    let a = a.as_any().downcast_ref::<Int64Array>().unwrap();
    (0..a.len()).map(|i| a.value(i)).collect()
}

#[test]
fn a_miss_on_an_empty_directory_creates_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let before = tree(dir.path());
    let e = IcebergStore::open_readonly(&id(dir.path(), "ns")).unwrap_err();
    assert!(matches!(e, IcebergError::CatalogNotFound { .. }), "{e}");
    assert_eq!(e.reason(), "NotFound");
    assert_eq!(tree(dir.path()), before);
    assert!(before.is_empty());
}

#[test]
fn a_miss_creates_no_namespace_table_or_file() {
    let dir = tempfile::tempdir().unwrap();
    let sig = written(dir.path());
    let db = dir.path().join(custos_iceberg::store::ICEBERG_CATALOG_FILE);
    let files_before = tree(dir.path());
    let rows_before = catalog_rows(&db);
    assert!(
        rows_before.iter().any(|r| r.contains(&sig.table_id)),
        "{rows_before:?}"
    );

    // A missing namespace: nothing listed, every read a typed miss.
    let other = IcebergStore::open_readonly(&id(dir.path(), "other")).unwrap();
    assert!(other.list_tables().unwrap().is_empty());
    for e in [
        other.existing_table_schema(&sig.table_id).unwrap_err(),
        other
            .existing_table_batches(&sig, &comps(), 100)
            .unwrap_err(),
    ] {
        assert!(matches!(e, IcebergError::TableNotFound { .. }), "{e}");
    }
    drop(other);
    // A missing table in an existing namespace.
    let ns = IcebergStore::open_readonly(&id(dir.path(), "ns")).unwrap();
    let mut ghost = Signature::new(vec!["Ghost".into()], schema(), "t_ghost");
    ghost.table_id = custos_iceberg::table_identity(&ghost.components, &ghost.fingerprint);
    let e = ns.existing_table_batches(&ghost, &[], 100).unwrap_err();
    assert!(matches!(e, IcebergError::TableNotFound { .. }), "{e}");
    assert_eq!(ns.list_tables().unwrap(), vec![sig.table_id.clone()]);
    drop(ns);

    assert_eq!(catalog_rows(&db), rows_before, "catalog rows changed");
    let files_after = tree(dir.path());
    assert_eq!(
        files_after.keys().collect::<Vec<_>>(),
        files_before.keys().collect::<Vec<_>>(),
        "files or directories appeared"
    );
    assert!(files_after == files_before, "a file's bytes changed");
    assert!(!dir.path().join("other").exists());
}

#[test]
fn rows_round_trip_projected_and_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let sig = written(dir.path());
    let store = IcebergStore::open_readonly(&id(dir.path(), "ns")).unwrap();
    assert_eq!(
        store
            .existing_table_schema(&sig.table_id)
            .unwrap()
            .fingerprint(),
        sig.fingerprint
    );

    let all = store.existing_table_batches(&sig, &comps(), 1000).unwrap();
    assert_eq!(all.rows, 12);
    assert!(!all.truncated);
    let mut got: Vec<(i64, i64)> = all
        .batches
        .iter()
        .flat_map(|b| ints(b, "entity").into_iter().zip(ints(b, "Score")))
        .collect();
    got.sort();
    assert_eq!(got, (0..12).map(|e| (e, e * 10)).collect::<Vec<_>>());

    // Only the key column and the requested component come back.
    let score = store
        .existing_table_batches(&sig, &["Score".into()], 1000)
        .unwrap();
    assert_eq!(score.columns, vec!["entity".to_string(), "Score".into()]);
    for b in &score.batches {
        let names: Vec<_> = b
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, vec!["entity".to_string(), "Score".into()]);
    }
    let pos = store
        .existing_table_batches(&sig, &["Position".into()], 1000)
        .unwrap();
    let b = &pos.batches[0];
    assert!(b.column_by_name("Score").is_none());
    let p = b
        .column_by_name("Position")
        .unwrap()
        .as_any()
        .downcast_ref::<StructArray>()
        .unwrap();
    let xs = p.column(0).as_any().downcast_ref::<Float64Array>().unwrap();
    let ents = ints(b, "entity");
    for (i, e) in ents.iter().enumerate() {
        assert_eq!(xs.value(i), *e as f64);
    }

    // The row limit bounds what is returned, and says so.
    let few = store.existing_table_batches(&sig, &comps(), 3).unwrap();
    assert_eq!(few.rows, 3);
    assert_eq!(
        few.batches.iter().map(RecordBatch::num_rows).sum::<usize>(),
        3
    );
    assert!(few.truncated);
    let exact = store.existing_table_batches(&sig, &comps(), 12).unwrap();
    assert_eq!(exact.rows, 12);
    assert!(
        !exact.truncated,
        "a limit equal to the row count is not a truncation"
    );

    // A component the descriptor lacks is a typed error, not an empty read.
    let e = store
        .existing_table_batches(&sig, &["Velocity".into()], 10)
        .unwrap_err();
    assert_eq!(e.reason(), "InvalidDescriptor");
    // A store opened read-only refuses writes.
    assert_eq!(
        store.append(&sig.table_id, &[]).unwrap_err().reason(),
        "ReadOnly"
    );
}

#[test]
fn a_schema_changed_out_of_band_fails_closed_with_no_rows() {
    let dir = tempfile::tempdir().unwrap();
    let sig = written(dir.path());
    {
        // Out-of-band: add a column through the Iceberg catalog.
        let store = IcebergStore::open_writable(&id(dir.path(), "ns")).unwrap();
        let catalog = store.iceberg_catalog();
        store
            .run(async {
                let ident = TableIdent::new(NamespaceIdent::new("ns".into()), sig.table_id.clone());
                let table = catalog.load_table(&ident).await.unwrap();
                let tx = Transaction::new(&table);
                let tx = tx
                    .update_schema()
                    .add_column(iceberg::transaction::AddColumn::optional(
                        "injected",
                        Type::Primitive(PrimitiveType::Int),
                    ))
                    .apply(tx)
                    .unwrap();
                tx.commit(catalog).await.unwrap();
                Ok(())
            })
            .unwrap();
    }
    let store = IcebergStore::open_readonly(&id(dir.path(), "ns")).unwrap();
    let e = store
        .existing_table_batches(&sig, &comps(), 1000)
        .unwrap_err();
    match &e {
        IcebergError::CatalogSchemaMismatch {
            table_id,
            expected,
            actual,
        } => {
            assert_eq!(table_id, &sig.table_id);
            assert_eq!(expected, &sig.fingerprint);
            assert_ne!(actual, expected);
        }
        other => panic!("expected CatalogSchemaMismatch, got {other}"),
    }
    assert!(e.to_string().starts_with("CatalogSchemaMismatch"), "{e}");
    println!("fail-closed: {e}");

    // A descriptor that disagrees with an untouched table also fails closed.
    let dir2 = tempfile::tempdir().unwrap();
    let sig2 = written(dir2.path());
    let mut retyped = schema();
    retyped.fields[2].ty = LogicalType::Float { bits: 64 };
    let lying = Signature::new(comps(), retyped, sig2.table_id.clone());
    let store2 = IcebergStore::open_readonly(&id(dir2.path(), "ns")).unwrap();
    assert_eq!(
        store2
            .existing_table_batches(&lying, &comps(), 1000)
            .unwrap_err()
            .reason(),
        "CatalogSchemaMismatch"
    );
    // A record whose fingerprint is not its descriptor's is refused before any I/O.
    let mut drifted = sig2.clone();
    drifted.fingerprint = "00".repeat(32);
    assert_eq!(
        store2
            .existing_table_batches(&drifted, &comps(), 1000)
            .unwrap_err()
            .reason(),
        "InvalidDescriptor"
    );
}

#[test]
fn remote_identities_are_refused() {
    let id = StorageIdentity::new("s3://bucket/w", "ns", "iceberg").unwrap();
    assert_eq!(
        IcebergStore::open_readonly(&id).unwrap_err().reason(),
        "UnsupportedIdentity"
    );
}
