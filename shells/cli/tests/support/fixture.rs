//! A multi-plane storage identity for the migration tests and benchmark
//! (spec 001 §10's integration contract): several Iceberg tables — a
//! World's signature table, an unknown application table, an empty table,
//! a typed Artifact index — `artifact_files` over objects in the Artifact
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
use custos_iceberg::IcebergStore;
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
