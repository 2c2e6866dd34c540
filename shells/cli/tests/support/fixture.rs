//! A multi-plane storage identity for the migration tests and benchmark,
//! one that exercises every durable plane: several Iceberg tables — a
//! World's signature table, an unknown application table, two empty tables
//! (one without a snapshot, one with a snapshot that holds no row), a typed
//! Artifact index — `artifact_files` over objects in the Artifact
//! root (some referenced twice), and two Worlds in the SQLite control
//! catalog, one resumable with a writer's fence and a tick head, one
//! destroyed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use custos_core::fence::Holder;
use custos_core::identity::StorageIdentity;
use custos_core::migration::artifacts::OccurrenceMeta;
use custos_core::migration::Name;
use custos_core::schema::{Field, LogicalType, Schema};
use custos_core::world::{
    ControlCatalog, FencePurpose, Request, WorldIdentity, WorldRecord, WriterMode,
};
use custos_fs::artifacts::ArtifactStore;
use custos_fs::RealFs;
use custos_iceberg::arrow::array::{
    ArrayRef, Int64Array, LargeBinaryArray, RecordBatch, StringArray,
};
use custos_iceberg::iceberg::spec::{
    NestedField, NullOrder, PrimitiveType, Schema as IcebergSchema, Transform, Type,
    UnboundPartitionSpec,
};
use custos_iceberg::iceberg::transaction::{ApplyTransactionAction, Transaction};
use custos_iceberg::iceberg::{Catalog, NamespaceIdent, TableCreation, TableIdent};
use custos_iceberg::{IcebergError, IcebergStore};
use custos_sqlite::control::SqliteControlCatalog;

/// The resumable World.
pub const LIVE: &str = "w-live";
/// The destroyed World.
pub const GONE: &str = "w-gone";
/// The live World's tick head at the source.
pub const TICK: u64 = 5;

/// How big a fixture is.
#[derive(Clone, Copy, Debug)]
pub struct Size {
    /// Rows of the signature table and of the application table.
    pub rows: i64,
    /// Bytes of payload per row.
    pub row_bytes: usize,
    /// Distinct Artifact objects.
    pub objects: usize,
    /// Bytes per object.
    pub object_bytes: usize,
}

impl Size {
    /// A small fixture for the tests.
    pub const SMALL: Size = Size {
        rows: 300,
        row_bytes: 16,
        objects: 4,
        object_bytes: 3000,
    };
}

/// A built fixture.
pub struct Fixture {
    /// The storage uri (a directory).
    pub uri: PathBuf,
    /// The identity.
    pub id: StorageIdentity,
    /// The Artifact root.
    pub artifacts: PathBuf,
    /// The signature table's id.
    pub table_id: String,
    /// Total bytes written (table payloads and objects).
    pub bytes: u64,
}

/// Deterministic bytes (xorshift) that do not compress.
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn int() -> LogicalType {
    LogicalType::Int {
        bits: 64,
        signed: true,
    }
}

fn payload_schema(component: &str) -> Schema {
    Schema::new(vec![
        Field::new("entity", int(), false),
        Field::new(component, int(), true),
        Field::new("payload", LogicalType::Binary { large: false }, true),
    ])
}

/// Appends `size.rows` rows (entities from 0, payload salted by `salt`) to
/// the fixture-shaped table `table_id`; answers the payload bytes written.
pub fn append_rows(store: &IcebergStore, table_id: &str, size: Size, salt: u64) -> u64 {
    let arrow = store.table_arrow_schema(table_id).unwrap();
    let mut written = 0;
    let mut from = 0;
    while from < size.rows {
        let n = (size.rows - from).min(50_000);
        let ids: Vec<i64> = (from..from + n).collect();
        let payload: Vec<Vec<u8>> = ids
            .iter()
            .map(|&e| noise(salt ^ e as u64, size.row_bytes))
            .collect();
        let batch = RecordBatch::try_new(
            arrow.clone(),
            vec![
                Arc::new(Int64Array::from(ids.clone())) as ArrayRef,
                Arc::new(Int64Array::from(
                    ids.iter().map(|e| e * 7).collect::<Vec<_>>(),
                )),
                Arc::new(LargeBinaryArray::from_iter_values(payload.iter())),
            ],
        )
        .unwrap();
        store.append(table_id, &[batch]).unwrap();
        written += n as u64 * size.row_bytes as u64;
        from += n;
    }
    written
}

/// Commits a snapshot without a data file to `table_id` (Iceberg's
/// snapshot-properties-only append).
fn commit_empty_snapshot(store: &IcebergStore, table_id: &str) {
    store
        .run(async {
            let c = store.iceberg_catalog();
            let t = c
                .load_table(&TableIdent::new(
                    NamespaceIdent::new("default".into()),
                    table_id.into(),
                ))
                .await
                .map_err(ice("load"))?;
            let tx = Transaction::new(&t);
            let tx = tx
                .fast_append()
                .set_snapshot_properties(
                    [("custos.fixture".to_string(), "emptied".to_string())].into(),
                )
                .apply(tx)
                .map_err(ice("stage"))?;
            tx.commit(c).await.map_err(ice("commit an empty snapshot"))
        })
        .unwrap();
}

/// Builds the fixture at `uri` (namespace `default`, backend `iceberg`).
pub fn build(uri: &Path, size: Size) -> Fixture {
    let id = StorageIdentity::new(uri.to_str().unwrap(), "default", "iceberg").unwrap();
    let control = SqliteControlCatalog::open_for(&id).unwrap();
    let store = IcebergStore::open_writable(&id).unwrap();
    // The live World's signature table, with rows.
    let sig = store
        .create_table(vec!["Score".into()], payload_schema("Score"))
        .unwrap();
    let mut bytes = append_rows(&store, &sig.table_id, size, 1);
    let live = WorldRecord::active(WorldIdentity::new(LIVE, "live"), WriterMode::Resumable);
    control.register(&live).unwrap();
    control
        .apply(&Request::RegisterSignature {
            world_id: LIVE.into(),
            signature: sig.clone(),
        })
        .unwrap();
    let writer = Holder::new("fixture-writer").unwrap();
    let (epoch, _) = control
        .acquire_fence(LIVE, &writer, FencePurpose::Resume)
        .unwrap();
    control.commit_tick(LIVE, epoch, TICK).unwrap();
    // An unknown application table and an empty one.
    let app = store
        .create_table(vec!["Telemetry".into()], payload_schema("Telemetry"))
        .unwrap();
    bytes += append_rows(&store, &app.table_id, size, 2);
    store
        .create_table(vec!["Unused".into()], payload_schema("Unused"))
        .unwrap();
    // An empty table with a snapshot: its writer committed one that holds
    // no row (as a table emptied by a delete has).
    let drained = store
        .create_table(vec!["Drained".into()], payload_schema("Drained"))
        .unwrap();
    commit_empty_snapshot(&store, &drained.table_id);
    // A destroyed World.
    let gone = WorldRecord::active(WorldIdentity::new(GONE, "gone"), WriterMode::Resumable);
    control.register(&gone).unwrap();
    control.retire(&gone).unwrap();
    // Artifacts: objects, artifact_files (the first object twice), and a
    // typed index naming each artifact.
    let artifacts = uri.join("default").join(".custos-artifacts");
    let objects = ArtifactStore::open(RealFs, &artifacts).unwrap();
    store.create_artifact_files().unwrap();
    let mut rows = Vec::new();
    for i in 0..=size.objects {
        let object = noise(1000 + (i % size.objects) as u64, size.object_bytes);
        if i < size.objects {
            bytes += object.len() as u64;
        }
        let meta = OccurrenceMeta {
            artifact_id: Name::new(format!("a{i}")).unwrap(),
            ingested_at: 1_764_000_000_000_000 + i as i64,
            source_uri: format!("camera://{i}"),
            logical_path: format!("frames/{i}.raw"),
            world: Name::new(LIVE).unwrap(),
            run: None,
            tick: Some(i as u64),
            media_type: "application/octet-stream".into(),
        };
        rows.push(objects.ingest(&object, meta).unwrap());
    }
    store.append_occurrences(&rows).unwrap();
    let index = store
        .create_table(
            vec!["FrameIndex".into()],
            Schema::new(vec![
                Field::new("artifact_id", LogicalType::Utf8 { large: false }, false),
                Field::new("FrameIndex", int(), true),
            ]),
        )
        .unwrap();
    let arrow = store.table_arrow_schema(&index.table_id).unwrap();
    let ids: Vec<String> = rows.iter().map(|r| r.artifact_id.to_string()).collect();
    let batch = RecordBatch::try_new(
        arrow,
        vec![
            Arc::new(StringArray::from(ids)) as ArrayRef,
            Arc::new(Int64Array::from((0..rows.len() as i64).collect::<Vec<_>>())),
        ],
    )
    .unwrap();
    store.append(&index.table_id, &[batch]).unwrap();
    Fixture {
        uri: uri.to_path_buf(),
        id,
        artifacts,
        table_id: sig.table_id,
        bytes,
    }
}

/// The application table [`add_partitioned_table`] makes.
pub const PARTITIONED: &str = "Readings";

/// The owner's properties of [`PARTITIONED`].
pub const PARTITIONED_PROPERTIES: [(&str, &str); 2] =
    [("owner", "field-team"), ("app.retention-days", "30")];

fn ice(op: &'static str) -> impl FnOnce(custos_iceberg::iceberg::Error) -> IcebergError {
    move |e| IcebergError::Iceberg {
        op,
        source: Box::new(e),
    }
}

/// Adds [`PARTITIONED`] to the identity at `uri`: an application table
/// partitioned by `region` (identity), sorted by `key` descending (nulls
/// last), with [`PARTITIONED_PROPERTIES`], and `rows` rows over three
/// regions. A partitioning the owner chose: a migration must keep it.
pub fn add_partitioned_table(uri: &Path, rows: i64) {
    let id = StorageIdentity::new(uri.to_str().unwrap(), "default", "iceberg").unwrap();
    let store = IcebergStore::open_writable(&id).unwrap();
    let schema = IcebergSchema::builder()
        .with_fields(vec![
            NestedField::required(1, "key", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::optional(2, "region", Type::Primitive(PrimitiveType::String)).into(),
            NestedField::optional(3, "value", Type::Primitive(PrimitiveType::Long)).into(),
        ])
        .build()
        .unwrap();
    let spec = UnboundPartitionSpec::builder()
        .add_partition_field(2, "region", Transform::Identity)
        .unwrap()
        .build();
    let ns = NamespaceIdent::new("default".into());
    store
        .run(async {
            let c = store.iceberg_catalog();
            let t = c
                .create_table(
                    &ns,
                    TableCreation::builder()
                        .name(PARTITIONED.into())
                        .schema(schema)
                        .partition_spec(spec)
                        .properties(
                            PARTITIONED_PROPERTIES.map(|(k, v)| (k.to_string(), v.to_string())),
                        )
                        .build(),
                )
                .await
                .map_err(ice("create"))?;
            let tx = Transaction::new(&t);
            let tx = tx
                .replace_sort_order()
                .desc("key", NullOrder::Last)
                .apply(tx)
                .map_err(ice("sort"))?;
            tx.commit(c).await.map_err(ice("commit the sort order"))?;
            c.load_table(&TableIdent::new(ns.clone(), PARTITIONED.into()))
                .await
                .map_err(ice("load"))
        })
        .unwrap();
    let batch = partitioned_rows(&store, rows);
    store.append(PARTITIONED, &[batch]).unwrap();
}

/// The `rows` rows of [`PARTITIONED`], as a batch of `store`'s table of
/// that name (keys from 0, three regions in turn).
pub fn partitioned_rows(store: &IcebergStore, rows: i64) -> RecordBatch {
    let arrow = store.table_arrow_schema(PARTITIONED).unwrap();
    let keys: Vec<i64> = (0..rows).collect();
    let regions = ["north", "south", "west"];
    RecordBatch::try_new(
        arrow,
        vec![
            Arc::new(Int64Array::from(keys.clone())) as ArrayRef,
            Arc::new(StringArray::from(
                keys.iter()
                    .map(|k| regions[*k as usize % regions.len()])
                    .collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from(
                keys.iter().map(|k| k * 11).collect::<Vec<_>>(),
            )),
        ],
    )
    .unwrap()
}
