//! Durable discovery across processes, on real files: a world written by
//! one process is discoverable and readable from any later process pointed
//! at the same storage identity.
//!
//! This binary has no libtest harness: run without a role it orchestrates,
//! re-invoking itself as child processes that share nothing but the
//! storage identity (uri, namespace, backend) passed in the environment:
//!
//! 1. **writer** — creates a world in the SQLite control catalog (located
//!    by `catalog_location` for the identity), registers its signature,
//!    writes rows to Iceberg, registers and destroys a second world, exits;
//! 2. **reader** — discovers the worlds, opens the world read-only, plans
//!    the query from the catalog alone and reads the rows cold, reporting
//!    what it read as one JSON line; the orchestrator checks the rows and
//!    that the read created or changed no file;
//! 3. **corrupter** — adds a column to the table through the Iceberg
//!    catalog, out of band;
//! 4. **reader** again — now fails closed with `CatalogSchemaMismatch` and
//!    no rows.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/worlds.rs"]
mod worlds;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use custos_core::identity::StorageIdentity;
use custos_core::schema::{Field, LogicalType, Schema};
use custos_core::world::{
    ControlCatalog, Request, WorldIdentity, WorldRecord, WorldStatus, WriterMode,
};
use custos_iceberg::arrow::array::{
    Array, ArrayRef, Float64Array, Int64Array, RecordBatch, StructArray,
};
use custos_iceberg::arrow::datatypes::DataType;
use custos_iceberg::iceberg::spec::{PrimitiveType, Type};
use custos_iceberg::iceberg::transaction::{AddColumn, ApplyTransactionAction, Transaction};
use custos_iceberg::iceberg::{Catalog, NamespaceIdent, TableIdent};
use custos_iceberg::{query_components, IcebergStore, Source};
use custos_sqlite::control::{catalog_path, SqliteControlCatalog};

use worlds::{entity, int64};

const ROLE: &str = "CUSTOS_E2E_ROLE";
const URI: &str = "CUSTOS_E2E_URI";
const NAMESPACE: &str = "CUSTOS_E2E_NAMESPACE";
const BACKEND: &str = "CUSTOS_E2E_BACKEND";
const WORLD: &str = "world-e2e";
const GONE: &str = "world-gone";
/// Rows per batch and batches per append, written by the writer.
const BATCHES: [(i64, i64); 3] = [(0, 1000), (1000, 1000), (2000, 500)];
const ROWS: i64 = 2500;

fn identity() -> StorageIdentity {
    let get = |k| std::env::var(k).unwrap_or_else(|_| panic!("{k} is set for a child"));
    StorageIdentity::new(&get(URI), &get(NAMESPACE), &get(BACKEND)).unwrap()
}

fn schema() -> Schema {
    Schema::new(vec![
        entity(),
        Field::new(
            "Position",
            LogicalType::Struct(vec![
                Field::new("x", LogicalType::Float { bits: 64 }, true),
                Field::new("y", LogicalType::Float { bits: 64 }, true),
            ]),
            true,
        ),
        Field::new("Score", int64(), true),
    ])
}

fn batch(store: &IcebergStore, table_id: &str, from: i64, n: i64) -> RecordBatch {
    let arrow = store.table_arrow_schema(table_id).unwrap();
    let ids: Vec<i64> = (from..from + n).collect();
    let DataType::Struct(pos_fields) = arrow.field(1).data_type().clone() else {
        panic!("Position is a struct")
    };
    let xs: ArrayRef = Arc::new(Float64Array::from(
        ids.iter().map(|&e| e as f64).collect::<Vec<_>>(),
    ));
    let ys: ArrayRef = Arc::new(Float64Array::from(
        ids.iter().map(|&e| -(e as f64)).collect::<Vec<_>>(),
    ));
    let score = Int64Array::from(ids.iter().map(|&e| e * 10).collect::<Vec<_>>());
    RecordBatch::try_new(
        arrow,
        vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(StructArray::new(pos_fields, vec![xs, ys], None)),
            Arc::new(score),
        ],
    )
    .unwrap()
}

fn writer() {
    let id = identity();
    let control = SqliteControlCatalog::open_for(&id).unwrap();
    let store = IcebergStore::open_writable(&id).unwrap();
    let sig = store
        .create_table(vec!["Position".into(), "Score".into()], schema())
        .unwrap();
    let world = WorldRecord::active(
        WorldIdentity {
            world_id: WORLD.into(),
            name: "two-process world".into(),
            run_id: Some("run-1".into()),
            parent_world_id: None,
        },
        WriterMode::Resumable,
    );
    control.register(&world).unwrap();
    control
        .apply(&Request::RegisterSignature {
            world_id: WORLD.into(),
            signature: sig.clone(),
        })
        .unwrap();
    let mut written = 0;
    for (from, n) in BATCHES {
        written += store
            .append(&sig.table_id, &[batch(&store, &sig.table_id, from, n)])
            .unwrap();
    }
    control
        .apply(&Request::AdvanceTick {
            world_id: WORLD.into(),
            tick: 3,
        })
        .unwrap();
    let gone = WorldRecord::active(WorldIdentity::new(GONE, "retired"), WriterMode::CleanupOnly);
    control.register(&gone).unwrap();
    control.retire(&gone).unwrap();
    println!(
        "writer (pid {}): world {WORLD} registered in {}, table {} ({} appends), {written} rows written",
        std::process::id(),
        control.path().display(),
        sig.table_id,
        BATCHES.len()
    );
}

fn reader() {
    let id = identity();
    let path = catalog_path(&id).unwrap();
    assert!(
        path.is_file(),
        "the reader finds the catalog at {}",
        path.display()
    );
    let control = SqliteControlCatalog::open(&path).unwrap();
    let worlds: BTreeMap<String, WorldStatus> = control
        .discover_worlds()
        .unwrap()
        .into_iter()
        .map(|w| (w.identity.world_id, w.status))
        .collect();
    let info = control.open_world_readonly(WORLD).unwrap();
    let requested = vec!["Score".to_string()];
    let plan = query_components(&requested, &[], &control);
    assert!(
        plan.degraded.is_none() && plan.skipped.is_empty(),
        "{plan:?}"
    );
    assert_eq!(plan.tables.len(), 1, "{plan:?}");
    let table = &plan.tables[0];
    assert_eq!(
        table.source,
        Source::Catalog {
            worlds: vec![WORLD.into()]
        }
    );
    assert_eq!(&table.signature, &info.signatures[0]);
    let store = IcebergStore::open_readonly(&id).unwrap();
    let report = match store.existing_table_batches(&table.signature, &requested, 1_000_000) {
        Ok(read) => {
            let mut entities = vec![];
            let mut score_sum = 0i64;
            for b in &read.batches {
                let e = b.column_by_name("entity").unwrap();
                let e = e.as_any().downcast_ref::<Int64Array>().unwrap();
                let s = b.column_by_name("Score").unwrap();
                let s = s.as_any().downcast_ref::<Int64Array>().unwrap();
                for i in 0..b.num_rows() {
                    entities.push(e.value(i));
                    assert_eq!(s.value(i), e.value(i) * 10, "row {i}");
                    score_sum += s.value(i);
                }
                assert!(b.column_by_name("Position").is_none(), "projected away");
            }
            entities.sort();
            serde_json::json!({
                "worlds": worlds,
                "tick_head": info.record.tick_head,
                "table": table.signature.table_id,
                "columns": read.columns,
                "rows": read.rows,
                "truncated": read.truncated,
                "entities_exact": entities == (0..ROWS).collect::<Vec<_>>(),
                "score_sum": score_sum,
                "error": null,
            })
        }
        Err(e) => serde_json::json!({
            "worlds": worlds,
            "table": table.signature.table_id,
            "rows": 0,
            "error": { "reason": e.reason(), "message": e.to_string() },
        }),
    };
    println!("{report}");
}

fn corrupter() {
    let id = identity();
    let store = IcebergStore::open_writable(&id).unwrap();
    let table_id = store.list_tables().unwrap().pop().unwrap();
    let catalog = store.iceberg_catalog();
    let ns = NamespaceIdent::new(id.namespace().to_owned());
    store
        .run(async {
            let table = catalog
                .load_table(&TableIdent::new(ns, table_id.clone()))
                .await
                .unwrap();
            let tx = Transaction::new(&table);
            let tx = tx
                .update_schema()
                .add_column(AddColumn::optional(
                    "injected",
                    Type::Primitive(PrimitiveType::Int),
                ))
                .apply(tx)
                .unwrap();
            tx.commit(catalog).await.unwrap();
            Ok(())
        })
        .unwrap();
    println!(
        "corrupter (pid {}): added column `injected` to {table_id} through the Iceberg catalog",
        std::process::id()
    );
}

/// Runs this binary as `role` with the identity in its environment.
fn child(role: &str, uri: &Path) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .env(ROLE, role)
        .env(URI, uri)
        .env(NAMESPACE, "game")
        .env(BACKEND, "iceberg")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{role} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Every path under `dir` with its bytes, the control catalog's own files
/// as paths only (SQLite may rewrite its header on open).
fn tree(dir: &Path) -> BTreeMap<String, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let key = p.strip_prefix(dir).unwrap().display().to_string();
            if p.is_dir() {
                stack.push(p);
                out.insert(key, None);
            } else if key.contains(".custos-catalog-") {
                out.insert(key, None);
            } else {
                out.insert(key, Some(std::fs::read(&p).unwrap()));
            }
        }
    }
    out
}

fn orchestrate() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("store");

    let w = child("writer", &uri);
    print!("{w}");
    assert!(w.contains(&format!("{ROWS} rows written")), "{w}");

    let before = tree(dir.path());
    let r = child("reader", &uri);
    let v: serde_json::Value = serde_json::from_str(r.trim()).unwrap();
    println!("reader (cold): {v}");
    assert_eq!(v["error"], serde_json::Value::Null, "{v}");
    assert_eq!(v["rows"], ROWS);
    assert_eq!(v["truncated"], false);
    assert_eq!(v["entities_exact"], true);
    assert_eq!(v["score_sum"], (0..ROWS).map(|e| e * 10).sum::<i64>());
    assert_eq!(v["columns"], serde_json::json!(["entity", "Score"]));
    assert_eq!(v["tick_head"], 3);
    assert_eq!(v["worlds"][WORLD], "active");
    assert_eq!(
        v["worlds"][GONE], "destroyed",
        "destroyed worlds stay discoverable"
    );
    assert!(
        tree(dir.path()) == before,
        "the cold read created or changed a file"
    );

    let c = child("corrupter", &uri);
    print!("{c}");

    let r = child("reader", &uri);
    let v: serde_json::Value = serde_json::from_str(r.trim()).unwrap();
    println!("reader after the out-of-band change: {v}");
    assert_eq!(v["rows"], 0);
    assert_eq!(v["error"]["reason"], "CatalogSchemaMismatch", "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.starts_with("CatalogSchemaMismatch: table t_"), "{msg}");
    println!("discovery_e2e: ok");
}

fn main() {
    match std::env::var(ROLE).as_deref() {
        Ok("writer") => writer(),
        Ok("reader") => reader(),
        Ok("corrupter") => corrupter(),
        Ok(other) => panic!("unknown role {other:?}"),
        Err(_) => orchestrate(),
    }
}
