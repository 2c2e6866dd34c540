//! The `artifact_files` occurrence table in Iceberg: its
//! schema, ingestion of rows for fixtures and users, a typed decoder, and
//! the relocated copy migration makes of it.
//!
//! **The table.** One row per visible Artifact occurrence
//! ([`custos_core::migration::artifacts::Occurrence`]), columns in this
//! order: `artifact_id`, `ingested_at` (timestamptz, microseconds),
//! `source_uri`, `logical_path`, `world`, `run` (optional), `tick`
//! (optional), `sha256` (64 lower-case hex), `xxh3_64` (a `long` holding
//! the hash's 64 bits, two's complement), `size`, `media_type`,
//! `object_uri`. Typed Artifact indexes are ordinary tables joined to it by
//! `artifact_id`; migration copies them like any table, before this one.
//!
//! **Relocation.** [`IcebergStore::copy_relocated_artifact_files`] writes
//! the destination `artifact_files` from the relocated rows core's
//! `relocate` returned — only `object_uri` may differ from the pinned
//! source rows, checked row by row — in the same single guarded commit as
//! any table copy, and verifies it by a fresh read against the destination
//! evidence, which is distinct from the source's (the URI change changes
//! the digest). It never ingests.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow::datatypes::{Int64Type, SchemaRef, TimestampMicrosecondType};
use custos_core::migration::artifacts::Occurrence;
use custos_core::migration::{Digest, Name, NormalizedUri};
use futures::TryStreamExt;
use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
use iceberg::table::Table;
use iceberg::{Catalog, TableCreation};

use crate::error::{ice, IcebergError};
use crate::evidence::{content_of, fingerprint, TableEvidence};
use crate::logical::iceberg_schema_to_logical;
use crate::store::IcebergStore;
use crate::transfer::{logical_metadata, scan, CopyOutcome, Fault, Inspection};

/// The occurrence table's name.
pub const ARTIFACT_FILES: &str = "artifact_files";

/// The columns of `artifact_files`, in order.
pub const COLUMNS: [&str; 12] = [
    "artifact_id",
    "ingested_at",
    "source_uri",
    "logical_path",
    "world",
    "run",
    "tick",
    "sha256",
    "xxh3_64",
    "size",
    "media_type",
    "object_uri",
];

/// The Iceberg schema of `artifact_files` (field ids 1..=12 in column
/// order; `run` and `tick` optional).
pub fn artifact_files_schema() -> Result<Schema, IcebergError> {
    let ty = |i: usize| match COLUMNS.get(i).copied() {
        Some("ingested_at") => PrimitiveType::Timestamptz,
        Some("tick" | "xxh3_64" | "size") => PrimitiveType::Long,
        _ => PrimitiveType::String,
    };
    let fields = COLUMNS
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let id = i32::try_from(i + 1).unwrap_or(i32::MAX);
            let t = Type::Primitive(ty(i));
            if matches!(*name, "run" | "tick") {
                NestedField::optional(id, *name, t).into()
            } else {
                NestedField::required(id, *name, t).into()
            }
        })
        .collect::<Vec<_>>();
    Schema::builder()
        .with_fields(fields)
        .build()
        .map_err(ice("build the artifact_files schema"))
}

fn bad(detail: impl Into<String>) -> IcebergError {
    IcebergError::InvalidDescriptor {
        table_id: ARTIFACT_FILES.to_owned(),
        detail: detail.into(),
    }
}

/// The rows as one batch of `schema` (the table's Arrow schema).
pub fn to_batch(schema: SchemaRef, rows: &[Occurrence]) -> Result<RecordBatch, IcebergError> {
    let text = |f: &dyn Fn(&Occurrence) -> Option<String>| -> ArrayRef {
        Arc::new(StringArray::from(rows.iter().map(f).collect::<Vec<_>>()))
    };
    let long = |f: &dyn Fn(&Occurrence) -> Option<i64>| -> ArrayRef {
        Arc::new(Int64Array::from(rows.iter().map(f).collect::<Vec<_>>()))
    };
    let mut sizes = Vec::with_capacity(rows.len());
    for r in rows {
        sizes.push(Some(i64::try_from(r.size).map_err(|_| {
            bad(format!(
                "artifact {} is larger than a long",
                r.artifact_id.as_str()
            ))
        })?));
    }
    let mut ticks = Vec::with_capacity(rows.len());
    for r in rows {
        ticks.push(match r.tick {
            None => None,
            Some(t) => Some(i64::try_from(t).map_err(|_| {
                bad(format!(
                    "artifact {} has a tick beyond a long",
                    r.artifact_id.as_str()
                ))
            })?),
        });
    }
    let columns: Vec<ArrayRef> = vec![
        text(&|r| Some(r.artifact_id.as_str().to_owned())),
        Arc::new(
            TimestampMicrosecondArray::from(rows.iter().map(|r| r.ingested_at).collect::<Vec<_>>())
                .with_timezone("+00:00"),
        ),
        text(&|r| Some(r.source_uri.clone())),
        text(&|r| Some(r.logical_path.clone())),
        text(&|r| Some(r.world.as_str().to_owned())),
        text(&|r| r.run.as_ref().map(|n| n.as_str().to_owned())),
        Arc::new(Int64Array::from(ticks)),
        text(&|r| Some(r.sha256.hex())),
        long(&|r| Some(i64::from_ne_bytes(r.xxh3_64.to_ne_bytes()))),
        Arc::new(Int64Array::from(sizes)),
        text(&|r| Some(r.media_type.clone())),
        text(&|r| Some(r.object_uri.as_str().to_owned())),
    ];
    RecordBatch::try_new(schema, columns).map_err(|source| IcebergError::Arrow {
        op: "build the artifact_files batch",
        source,
    })
}

/// Row `i`'s stored digest: 64 lowercase hex digits.
fn digest_at(hex: &str, i: usize) -> Result<Digest, IcebergError> {
    Digest::parse_hex(hex).ok_or_else(|| {
        let why = custos_core::migration::DataError::InvalidDigest;
        bad(format!("row {i}: {why}"))
    })
}

/// Decodes every row of `batch` (typed refusals for anything that is not
/// a valid occurrence; nothing is guessed).
pub fn from_batch(batch: &RecordBatch) -> Result<Vec<Occurrence>, IcebergError> {
    let col = |name: &str| -> Result<&ArrayRef, IcebergError> {
        batch
            .column_by_name(name)
            .ok_or_else(|| bad(format!("no column {name}")))
    };
    let text = |name: &str| -> Result<&StringArray, IcebergError> {
        col(name)?
            .as_string_opt::<i32>()
            .ok_or_else(|| bad(format!("{name} is not text")))
    };
    let long = |name: &str| -> Result<&arrow::array::PrimitiveArray<Int64Type>, IcebergError> {
        col(name)?
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| bad(format!("{name} is not a long")))
    };
    let at = col("ingested_at")?
        .as_primitive_opt::<TimestampMicrosecondType>()
        .ok_or_else(|| bad("ingested_at is not a microsecond timestamp"))?;
    let (id, src, path, world, run) = (
        text("artifact_id")?,
        text("source_uri")?,
        text("logical_path")?,
        text("world")?,
        text("run")?,
    );
    let (tick, xxh, size) = (long("tick")?, long("xxh3_64")?, long("size")?);
    let (sha, media, uri) = (text("sha256")?, text("media_type")?, text("object_uri")?);
    let name = |s: &str| Name::new(s).map_err(|e| bad(e.to_string()));
    let mut out = Vec::with_capacity(batch.num_rows());
    for i in 0..batch.num_rows() {
        let required = [id, src, path, world, sha, media, uri];
        if required.iter().any(|a| a.is_null(i))
            || at.is_null(i)
            || xxh.is_null(i)
            || size.is_null(i)
        {
            return Err(bad(format!("row {i} has a null required column")));
        }
        out.push(Occurrence {
            artifact_id: name(id.value(i))?,
            ingested_at: at.value(i),
            source_uri: src.value(i).to_owned(),
            logical_path: path.value(i).to_owned(),
            world: name(world.value(i))?,
            run: if run.is_null(i) {
                None
            } else {
                Some(name(run.value(i))?)
            },
            tick: if tick.is_null(i) {
                None
            } else {
                Some(
                    u64::try_from(tick.value(i))
                        .map_err(|_| bad(format!("row {i}: negative tick")))?,
                )
            },
            sha256: digest_at(sha.value(i), i)?,
            xxh3_64: u64::from_ne_bytes(xxh.value(i).to_ne_bytes()),
            size: u64::try_from(size.value(i))
                .map_err(|_| bad(format!("row {i}: negative size")))?,
            media_type: media.value(i).to_owned(),
            object_uri: NormalizedUri::parse(uri.value(i))
                .map_err(|e| bad(format!("row {i}: {e}")))?,
        });
    }
    Ok(out)
}

impl IcebergStore {
    /// Creates `artifact_files` when missing (ingestion's first step).
    pub fn create_artifact_files(&self) -> Result<(), IcebergError> {
        let schema = artifact_files_schema()?;
        self.run(async {
            let ident = self.ident(ARTIFACT_FILES);
            let catalog = self.iceberg_catalog();
            if !catalog
                .table_exists(&ident)
                .await
                .map_err(ice("check the table"))?
            {
                let creation = TableCreation::builder()
                    .name(ARTIFACT_FILES.to_owned())
                    .schema(schema)
                    .build();
                catalog
                    .create_table(self.namespace_ident(), creation)
                    .await
                    .map_err(ice("create artifact_files"))?;
            }
            Ok(())
        })
    }

    /// Ingests occurrence rows (fixtures and users; migration never calls
    /// it): one append.
    pub fn append_occurrences(&self, rows: &[Occurrence]) -> Result<u64, IcebergError> {
        self.create_artifact_files()?;
        let schema = self.table_arrow_schema(ARTIFACT_FILES)?;
        let batch = to_batch(schema, rows)?;
        self.append(ARTIFACT_FILES, &[batch])
    }

    /// Every occurrence of `artifact_files` at `snapshot` (or the current
    /// one), in stored order.
    pub fn read_occurrences(&self, snapshot: Option<i64>) -> Result<Vec<Occurrence>, IcebergError> {
        self.run(async {
            let table = self.load_existing(ARTIFACT_FILES).await?;
            let Some(id) = snapshot.or(table.metadata().current_snapshot_id()) else {
                return Ok(Vec::new());
            };
            let mut stream = scan(&table, id).await?;
            let mut out = Vec::new();
            while let Some(b) = stream
                .try_next()
                .await
                .map_err(ice("read artifact_files"))?
            {
                out.extend(from_batch(&b)?);
            }
            Ok(out)
        })
    }

    /// The evidence `artifact_files` of this store would have holding
    /// `relocated` (its schema kept): what a relocated destination must
    /// reproduce.
    pub fn relocated_evidence(
        &self,
        relocated: &[Occurrence],
    ) -> Result<TableEvidence, IcebergError> {
        Ok(self.relocated_parts(relocated)?.2)
    }

    /// This store's `artifact_files` schema, `relocated` as one batch of
    /// it, and that batch's evidence.
    fn relocated_parts(
        &self,
        relocated: &[Occurrence],
    ) -> Result<(Table, RecordBatch, TableEvidence), IcebergError> {
        let arrow = self.table_arrow_schema(ARTIFACT_FILES)?;
        let batch = to_batch(arrow, relocated)?;
        let table = self.run(self.load_existing(ARTIFACT_FILES))?;
        let logical = iceberg_schema_to_logical(table.metadata().current_schema())?;
        let schema_fingerprint = fingerprint(&logical);
        let metadata = logical_metadata(&table, ARTIFACT_FILES)?;
        let expected = TableEvidence {
            name: ARTIFACT_FILES.to_owned(),
            snapshot: None,
            content: content_of(schema_fingerprint, std::slice::from_ref(&batch))?,
            schema: logical,
            schema_fingerprint,
            metadata_fingerprint: metadata.fingerprint(),
            metadata,
        };
        Ok((table, batch, expected))
    }

    /// Writes this (destination) store's `artifact_files` from `relocated`,
    /// the source's rows at `source_evidence.snapshot` with only
    /// `object_uri` relocated (refused otherwise, before anything is
    /// written), in one guarded commit, and verifies it by a fresh read.
    /// Returns the destination evidence (distinct from the source's).
    pub fn copy_relocated_artifact_files(
        &self,
        source: &IcebergStore,
        source_evidence: &TableEvidence,
        relocated: &[Occurrence],
        fault: Fault,
    ) -> Result<(CopyOutcome, TableEvidence), IcebergError> {
        let drift = |detail: String| IcebergError::SourceDrift {
            table: ARTIFACT_FILES.to_owned(),
            detail,
        };
        let pinned = source.table_evidence(ARTIFACT_FILES, source_evidence.snapshot)?;
        if !pinned.same_content(source_evidence) {
            return Err(drift(
                "the pinned source snapshot is not the plan's evidence".into(),
            ));
        }
        let rows = source.read_occurrences(source_evidence.snapshot)?;
        if rows.len() != relocated.len() {
            return Err(drift(format!(
                "{} source rows, {} relocated rows",
                rows.len(),
                relocated.len()
            )));
        }
        if let Some((s, _)) = rows
            .iter()
            .zip(relocated)
            .find(|(s, r)| !r.is_relocation_of(s))
        {
            return Err(drift(format!(
                "relocated row of artifact {} changes more than object_uri",
                s.artifact_id.as_str()
            )));
        }
        let (table, batch, expected) = source.relocated_parts(relocated)?;
        match self.inspect_destination(&expected)? {
            Inspection::Matching(e) => return Ok((CopyOutcome::Converged(e), expected)),
            Inspection::Conflicting(e) => {
                return Err(IcebergError::DestinationConflict {
                    table: ARTIFACT_FILES.to_owned(),
                    detail: format!(
                        "destination artifact_files holds {} rows of digest {}",
                        e.content.rows,
                        e.content.digest.hex()
                    ),
                })
            }
            Inspection::Absent => {}
        }
        let outcome = self.commit_batches(&table, &expected, &[batch], fault)?;
        Ok((outcome, expected))
    }
}
