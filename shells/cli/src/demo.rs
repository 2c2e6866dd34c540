//! `custos demo <dir>`: a complete sample to try every command on, made
//! with custos's own code paths (the control catalog's requests, the
//! Iceberg store's writer steps, the Artifact store's ingest, the release
//! and deployment repositories) — no hand-built file.
//!
//! Under `<dir>` (nonexistent or empty; anything else is refused with 4 and
//! nothing is written):
//!
//! - `store/` — a storage identity (namespace `default`, backend
//!   `iceberg`): a SQLite control catalog with a resumable World
//!   ([`LIVE`], ticks 1 to [`TICKS`] under a writer's fence, two
//!   signatures) and a destroyed one ([`GONE`]); Iceberg tables with
//!   nullable columns, a nested struct column, duplicate rows (a second
//!   append repeats rows of the first) and an empty table; an Artifact root
//!   whose objects `artifact_files` names (one of them twice) and a typed
//!   index of them.
//! - `releases/` — a release catalog holding two versions of a real Wasm
//!   component (assembled from [`COMPONENT_WAT`], shipped in the binary),
//!   published for tenant `acme`, service `greeter`, their contract
//!   extracted by the inspector.
//! - `deployments/` — a deployment catalog: `blue` (weight 90) on the
//!   first version and `green` (weight 10) on the second.
//! - `inputs/` — the files a user passes to the writing commands: a third
//!   version's component, manifest and contract, and a deployment
//!   manifest that moves `green` to it.
//!
//! A marker file ([`INCOMPLETE`]) exists while the sample is being made:
//! if the command fails part way, the marker says the directory is not a
//! complete sample (remove it and run again). Progress is one line per
//! stage on stderr (a bar on a terminal); stdout gets the commands to try
//! next.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use custos_core::fence::Holder;
use custos_core::identity::StorageIdentity;
use custos_core::migration::artifacts::OccurrenceMeta;
use custos_core::migration::Name;
use custos_core::release::bounds::Bounds;
use custos_core::release::Sha256;
use custos_core::schema::{Field, LogicalType, Schema};
use custos_core::world::{
    ControlCatalog, FencePurpose, Request as WorldRequest, WorldIdentity, WorldRecord, WriterMode,
};
use custos_fs::artifacts::ArtifactStore;
use custos_fs::deployment::{DeploymentRepository, ReleaseCatalog};
use custos_fs::release::ReleaseRepository;
use custos_fs::{Access, RealFs};
use custos_iceberg::arrow::array::{
    ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray, StructArray,
};
use custos_iceberg::arrow::buffer::NullBuffer;
use custos_iceberg::arrow::datatypes::DataType;
use custos_iceberg::IcebergStore;
use custos_sqlite::control::SqliteControlCatalog;

use crate::out::Out;
use crate::progress::Stages;
use crate::releases::{inspector, refused, Failure};

/// The resumable World.
pub const LIVE: &str = "world-live";
/// The destroyed World.
pub const GONE: &str = "world-gone";
/// The live World's tick head.
pub const TICKS: u64 = 5;
/// The tenant every release and deployment belongs to.
pub const TENANT: &str = "acme";
/// The service of the releases and deployments.
pub const SERVICE: &str = "greeter";
/// The marker that exists while a sample is being made.
pub const INCOMPLETE: &str = ".custos-demo-incomplete";

/// The component the releases carry, in the WebAssembly text format:
/// `add(a, b)` answers `a + b + VERSION` (the placeholder is replaced by
/// the version's minor number, so each version is a different component).
pub const COMPONENT_WAT: &str = r#"(component
  (core module $m
    (func (export "add") (param i32 i32) (result i32)
      local.get 0 local.get 1 i32.add i32.const VERSION i32.add))
  (core instance $i (instantiate $m))
  (func $add (param "a" u32) (param "b" u32) (result u32)
    (canon lift (core func $i "add")))
  (export "add" (func $add)))"#;

/// Makes the sample under `dir` and prints what to try next.
pub fn run(dir: &Path) -> ExitCode {
    crate::out::run(|out| match make(out, dir) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(Failure::Output(e)) => Err(e),
        Err(Failure::Refused(code, msg)) => {
            crate::out::err(format_args!("custos demo: {msg}"));
            Ok(ExitCode::from(code))
        }
    })
}

/// A failure of one step, as a fault naming the step.
fn fault<E: std::fmt::Display>(step: &'static str) -> impl FnOnce(E) -> Failure {
    move |e| refused(1, format!("{step}: {e}"))
}

/// `dir` made ready: created when absent, refused when it holds anything
/// or is not a directory; answered absolute.
fn prepare(dir: &Path) -> Result<PathBuf, Failure> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(refused(
                    4,
                    format!(
                        "AlreadyExists: {} is not empty; the demo writes only into a new or empty directory",
                        dir.display()
                    ),
                ));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(fault("cannot create the directory"))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory || dir.is_file() => {
            return Err(refused(
                2,
                format!("InvalidArgument: {} is not a directory", dir.display()),
            ));
        }
        Err(e) => {
            return Err(refused(
                1,
                format!("cannot read the directory {}: {e}", dir.display()),
            ))
        }
    }
    std::fs::canonicalize(dir).map_err(fault("cannot resolve the directory"))
}

fn make(out: &mut Out, dir: &Path) -> Result<(), Failure> {
    let dir = prepare(dir)?;
    let marker = dir.join(INCOMPLETE);
    // Created exclusively: of two demos started at once into one empty
    // directory, only the first to create it goes on.
    let mut file = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&marker)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(refused(
                4,
                format!(
                    "AlreadyExists: {} is not empty (another custos demo is making a sample there)",
                    dir.display()
                ),
            ))
        }
        Err(e) => return Err(fault("cannot write the marker")(e)),
    };
    std::io::Write::write_all(
        &mut file,
        b"custos demo did not finish here: remove this directory and run it again\n",
    )
    .map_err(fault("cannot write the marker"))?;
    drop(file);
    let mut stages = Stages::new("demo", 5);
    stages.stage("control catalog: two worlds, ticks and signatures");
    let store = dir.join("store");
    let id = StorageIdentity::new(store.to_string_lossy().as_ref(), "default", "iceberg")
        .map_err(fault("the storage identity"))?;
    let iceberg = IcebergStore::open_writable(&id).map_err(fault("open the Iceberg store"))?;
    let control = SqliteControlCatalog::open_for(&id).map_err(fault("open the control catalog"))?;
    worlds(&control, &iceberg)?;
    stages.stage("Iceberg tables: nested, nullable, duplicate rows, an empty table");
    tables(&iceberg)?;
    stages.stage("Artifact objects and artifact_files");
    artifacts(&iceberg, &id)?;
    drop(control);
    drop(iceberg);
    stages.stage("release catalog: two versions of a Wasm component");
    let digests = releases(&dir)?;
    stages.stage("deployment catalog: blue (weight 90) and green (weight 10)");
    deployments(&dir, &digests)?;
    std::fs::remove_file(&marker).map_err(fault("cannot remove the marker"))?;
    stages.finish();
    crate::out::committed();
    next_steps(out, &dir, &digests)
}

fn int() -> LogicalType {
    LogicalType::Int {
        bits: 64,
        signed: true,
    }
}

/// The live World's first signature table: scores, some missing.
fn score_schema() -> Schema {
    Schema::new(vec![
        Field::new("entity", int(), false),
        Field::new("Score", int(), true),
        Field::new("label", LogicalType::Utf8 { large: false }, true),
    ])
}

/// The live World's second signature table: a nested, nullable position.
fn position_schema() -> Schema {
    let float = LogicalType::Float { bits: 64 };
    Schema::new(vec![
        Field::new("entity", int(), false),
        Field::new(
            "Position",
            LogicalType::Struct(vec![
                Field::new("x", float.clone(), false),
                Field::new("y", float, false),
            ]),
            true,
        ),
    ])
}

fn worlds(control: &SqliteControlCatalog, iceberg: &IcebergStore) -> Result<(), Failure> {
    let live = WorldRecord::active(WorldIdentity::new(LIVE, "live"), WriterMode::Resumable);
    control.register(&live).map_err(fault("register a world"))?;
    for (component, schema) in [("Score", score_schema()), ("Position", position_schema())] {
        let signature = iceberg
            .create_table(vec![component.into()], schema)
            .map_err(fault("create a table"))?;
        control
            .apply(&WorldRequest::RegisterSignature {
                world_id: LIVE.into(),
                signature,
            })
            .map_err(fault("register a signature"))?;
    }
    let writer = Holder::new("demo-writer").map_err(fault("a holder"))?;
    let (epoch, _) = control
        .acquire_fence(LIVE, &writer, FencePurpose::Resume)
        .map_err(fault("acquire a writer fence"))?;
    for tick in 1..=TICKS {
        control
            .commit_tick(LIVE, epoch, tick)
            .map_err(fault("commit a tick"))?;
    }
    let gone = WorldRecord::active(WorldIdentity::new(GONE, "gone"), WriterMode::Resumable);
    control.register(&gone).map_err(fault("register a world"))?;
    control.retire(&gone).map_err(fault("destroy a world"))?;
    Ok(())
}

/// Rows `from..to` of the score table: every seventh score and every
/// fifth label missing.
fn score_rows(
    iceberg: &IcebergStore,
    table: &str,
    from: i64,
    to: i64,
) -> Result<RecordBatch, Failure> {
    let arrow = iceberg
        .table_arrow_schema(table)
        .map_err(fault("read a table's schema"))?;
    let ids: Vec<i64> = (from..to).collect();
    let scores: Vec<Option<i64>> = ids.iter().map(|e| (e % 7 != 3).then_some(e * 10)).collect();
    let labels: Vec<Option<String>> = ids
        .iter()
        .map(|e| (e % 5 != 0).then(|| format!("player-{e}")))
        .collect();
    RecordBatch::try_new(
        arrow,
        vec![
            Arc::new(Int64Array::from(ids)) as ArrayRef,
            Arc::new(Int64Array::from(scores)),
            Arc::new(StringArray::from(labels)),
        ],
    )
    .map_err(fault("build the score rows"))
}

/// Rows of the position table: every fourth position missing.
fn position_rows(iceberg: &IcebergStore, table: &str, rows: i64) -> Result<RecordBatch, Failure> {
    let arrow = iceberg
        .table_arrow_schema(table)
        .map_err(fault("read a table's schema"))?;
    let DataType::Struct(fields) = arrow.field(1).data_type().clone() else {
        return Err(refused(1, "the position column is not a struct"));
    };
    let ids: Vec<i64> = (0..rows).collect();
    let xs = Float64Array::from(ids.iter().map(|e| *e as f64 * 1.5).collect::<Vec<_>>());
    let ys = Float64Array::from(ids.iter().map(|e| -(*e as f64)).collect::<Vec<_>>());
    let present = NullBuffer::from(ids.iter().map(|e| e % 4 != 2).collect::<Vec<_>>());
    let position = StructArray::try_new(
        fields,
        vec![Arc::new(xs) as ArrayRef, Arc::new(ys) as ArrayRef],
        Some(present),
    )
    .map_err(fault("build the positions"))?;
    RecordBatch::try_new(
        arrow,
        vec![
            Arc::new(Int64Array::from(ids)) as ArrayRef,
            Arc::new(position),
        ],
    )
    .map_err(fault("build the position rows"))
}

fn tables(iceberg: &IcebergStore) -> Result<(), Failure> {
    let score = iceberg
        .create_table(vec!["Score".into()], score_schema())
        .map_err(fault("create a table"))?;
    let batch = score_rows(iceberg, &score.table_id, 0, 120)?;
    iceberg
        .append(&score.table_id, &[batch])
        .map_err(fault("append rows"))?;
    // A second append repeats rows 40..50 exactly: duplicate rows.
    let again = score_rows(iceberg, &score.table_id, 40, 50)?;
    iceberg
        .append(&score.table_id, &[again])
        .map_err(fault("append rows"))?;
    let position = iceberg
        .create_table(vec!["Position".into()], position_schema())
        .map_err(fault("create a table"))?;
    let batch = position_rows(iceberg, &position.table_id, 80)?;
    iceberg
        .append(&position.table_id, &[batch])
        .map_err(fault("append rows"))?;
    // A table with no row and no snapshot.
    iceberg
        .create_table(
            vec!["Inventory".into()],
            Schema::new(vec![
                Field::new("entity", int(), false),
                Field::new("Inventory", LogicalType::Utf8 { large: false }, true),
            ]),
        )
        .map_err(fault("create a table"))?;
    Ok(())
}

/// Deterministic bytes for object `i`.
fn object(i: u64) -> Vec<u8> {
    let mut x = (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..2048)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn artifacts(iceberg: &IcebergStore, id: &StorageIdentity) -> Result<(), Failure> {
    let root = Path::new(id.location())
        .join(id.namespace())
        .join(".custos-artifacts");
    let objects = ArtifactStore::open(RealFs, &root).map_err(fault("open the Artifact root"))?;
    iceberg
        .create_artifact_files()
        .map_err(fault("create artifact_files"))?;
    let world = Name::new(LIVE).map_err(fault("a world name"))?;
    let mut rows = Vec::new();
    // Four frames over three objects: frame 3 holds frame 0's bytes.
    for i in 0..4u64 {
        let meta = OccurrenceMeta {
            artifact_id: Name::new(format!("frame-{i}")).map_err(fault("an artifact id"))?,
            ingested_at: 1_764_000_000_000_000 + i as i64,
            source_uri: format!("camera://demo/{i}"),
            logical_path: format!("frames/{i}.raw"),
            world: world.clone(),
            run: None,
            tick: Some(i + 1),
            media_type: "application/octet-stream".into(),
        };
        rows.push(
            objects
                .ingest(&object(i % 3), meta)
                .map_err(fault("ingest an object"))?,
        );
    }
    iceberg
        .append_occurrences(&rows)
        .map_err(fault("append to artifact_files"))?;
    let index = iceberg
        .create_table(
            vec!["FrameIndex".into()],
            Schema::new(vec![
                Field::new("artifact_id", LogicalType::Utf8 { large: false }, false),
                Field::new("FrameIndex", int(), true),
            ]),
        )
        .map_err(fault("create a table"))?;
    let arrow = iceberg
        .table_arrow_schema(&index.table_id)
        .map_err(fault("read a table's schema"))?;
    let ids: Vec<String> = rows.iter().map(|r| r.artifact_id.to_string()).collect();
    let batch = RecordBatch::try_new(
        arrow,
        vec![
            Arc::new(StringArray::from(ids)) as ArrayRef,
            Arc::new(Int64Array::from((0..rows.len() as i64).collect::<Vec<_>>())),
        ],
    )
    .map_err(fault("build the index rows"))?;
    iceberg
        .append(&index.table_id, &[batch])
        .map_err(fault("append rows"))?;
    Ok(())
}

/// The component of version `1.<minor>.0`.
fn component(minor: u8) -> Result<Vec<u8>, Failure> {
    wat::parse_str(COMPONENT_WAT.replace("VERSION", &minor.to_string()))
        .map_err(fault("assemble the component"))
}

fn release_manifest(minor: u8, digest: &Sha256) -> String {
    format!(
        "{{\n  \"name\": \"{SERVICE}\",\n  \"version\": \"1.{minor}.0\",\n  \"tenant\": \"{TENANT}\",\n  \"service\": \"{SERVICE}\",\n  \"component_digest\": \"{digest}\",\n  \"exports\": [\"add\"]\n}}\n"
    )
}

fn deployment_manifest(id: &str, release: &Sha256, weight: u32) -> String {
    format!(
        "{{\n  \"id\": \"{id}\",\n  \"tenant\": \"{TENANT}\",\n  \"service\": \"{SERVICE}\",\n  \"release\": \"{release}\",\n  \"route_weight\": {weight},\n  \"labels\": {{\"team\": \"games\"}}\n}}\n"
    )
}

fn write(path: &Path, bytes: impl AsRef<[u8]>) -> Result<(), Failure> {
    std::fs::write(path, bytes)
        .map_err(|e| refused(1, format!("cannot write {}: {e}", path.display())))
}

/// The digests of versions 1.0.0 and 1.1.0 (published) and 1.2.0 (left in
/// `inputs/` for the user to publish).
struct Digests {
    v0: Sha256,
    v1: Sha256,
    v2: Sha256,
}

fn releases(dir: &Path) -> Result<Digests, Failure> {
    let inputs = dir.join("inputs");
    std::fs::create_dir(&inputs).map_err(fault("cannot create inputs/"))?;
    let repo = ReleaseRepository::open_as(
        Access::Write,
        RealFs,
        &dir.join("releases"),
        Bounds::default(),
        inspector(),
    )
    .map_err(fault("open the release catalog"))?;
    let mut digests = Vec::new();
    for minor in 0..3u8 {
        let bytes = component(minor)?;
        let digest = Sha256::of(&bytes);
        let manifest = release_manifest(minor, &digest);
        // The contract the inspector extracts, as `releases publish` takes it.
        let contract = inspector()
            .inspect(&bytes)
            .map_err(fault("inspect the component"))?
            .unwrap_or_default();
        if minor == 2 {
            // Left for the user: `custos releases publish` with these.
            let contract =
                serde_json::to_string_pretty(&contract).map_err(fault("encode the contract"))?;
            write(&inputs.join("greeter-1.2.0.wasm"), &bytes)?;
            write(&inputs.join("greeter-1.2.0.json"), &manifest)?;
            write(&inputs.join("greeter.contract.json"), contract + "\n")?;
        } else {
            repo.publish(manifest.as_bytes(), bytes, contract)
                .map_err(fault("publish a release"))?;
        }
        digests.push(digest);
    }
    match digests[..] {
        [v0, v1, v2] => Ok(Digests { v0, v1, v2 }),
        _ => Err(refused(1, "three versions were not made")),
    }
}

fn deployments(dir: &Path, digests: &Digests) -> Result<(), Failure> {
    use custos_core::deployment::manifest::DeploymentManifest;
    use custos_core::deployment::route::ReleaseSource;
    use custos_core::deployment::state::Mutation;

    let rel = ReleaseRepository::open_as(
        Access::Read,
        RealFs,
        &dir.join("releases"),
        Bounds::default(),
        inspector(),
    )
    .map_err(fault("open the release catalog"))?;
    let source: Arc<dyn ReleaseSource + Send + Sync> = Arc::new(ReleaseCatalog(Arc::new(rel)));
    let repo = DeploymentRepository::open(RealFs, &dir.join("deployments"), source, Access::Write)
        .map_err(fault("open the deployment catalog"))?;
    for (id, release, weight) in [("blue", &digests.v0, 90), ("green", &digests.v1, 10)] {
        let text = deployment_manifest(id, release, weight);
        let manifest =
            DeploymentManifest::decode(text.as_bytes()).map_err(fault("a deployment manifest"))?;
        repo.mutate(crate::deployments::request(
            TENANT,
            Mutation::Apply {
                manifest: Box::new(manifest),
                expected: None,
            },
        ))
        .map_err(fault("apply a deployment"))?;
    }
    write(
        &dir.join("inputs").join("green-1.2.0.json"),
        deployment_manifest("green", &digests.v2, 10),
    )
}

fn next_steps(out: &mut Out, dir: &Path, digests: &Digests) -> Result<(), Failure> {
    let d = dir.display();
    let v0 = &digests.v0;
    let lines = [
        format!("made a sample under {d}: store/ (a storage identity), releases/, deployments/, inputs/"),
        String::new(),
        "Try next:".to_owned(),
        format!("  custos catalog discover {d}/store"),
        format!("  custos catalog show {d}/store {LIVE}"),
        format!("  custos releases list {d}/releases --tenant {TENANT}"),
        format!("  custos releases show {d}/releases {v0} --tenant {TENANT}"),
        format!("  custos releases publish {d}/releases --manifest {d}/inputs/greeter-1.2.0.json --component {d}/inputs/greeter-1.2.0.wasm --contract {d}/inputs/greeter.contract.json"),
        format!("  custos releases verify {d}/releases"),
        format!("  custos deployments list {d}/deployments --releases {d}/releases --tenant {TENANT}"),
        format!("  custos deployments resolve {d}/deployments --releases {d}/releases --tenant {TENANT} --service {SERVICE} --contract add --function add --routing-key player-7"),
        format!("  custos deployments apply {d}/deployments --releases {d}/releases --tenant {TENANT} --manifest {d}/inputs/green-1.2.0.json"),
        format!("  custos migrate plan --source {d}/store --dest {d}/moved --migration-id first-move"),
        format!("  custos migrate run --source {d}/store --dest {d}/moved --migration-id first-move --receipt {d}/receipt.json"),
        format!("  custos migrate verify --dest {d}/moved --receipt {d}/receipt.json"),
        "  custos check --model fence --mutant acquire-ignores-floor".to_owned(),
    ];
    for line in lines {
        out.line(line)?;
    }
    Ok(())
}
