//! The table store of the data plane: the port a migration
//! reads a namespace's tables through and copies them with, and
//! [`MemoryTableStore`], its memory implementation.
//!
//! **Evidence.** A table's [`TableFacts`] are read from one pinned snapshot:
//! the snapshot identity (0 for a table with none: empty), the migration
//! schema fingerprint, the metadata fingerprint (partition spec, sort order
//! and owner's properties: [`super::metadata`]), the row count and the
//! content digest ([`super::content`]). The namespace is enumerated through
//! the store's catalog, never from a hard-coded list.
//!
//! **Copy.** [`TableStore::copy_from`] reads the plan's pinned source
//! snapshot — refusing with [`TableError::SourceDrift`] when it no longer
//! reads as the plan's evidence — and writes the destination in one commit
//! that lands only while the destination table is still empty. The
//! destination table is created with the source's schema, partition spec,
//! sort order and owner's properties; an existing empty destination table
//! with another schema or metadata is [`TableError::DestinationConflict`]. A
//! destination that already holds the plan's content converges (no second
//! append); other content is [`TableError::DestinationConflict`]. The
//! answer is a [`CommitReply`]: `Committed` with the evidence of a fresh
//! read that reproduces the plan ([`TableError::VerifyMismatch`]
//! otherwise), or `Ambiguous` when the commit's reply was lost (the driver
//! inspects before anything else). `artifact_files` is copied with its
//! relocated rows, each of which may differ from its source row only in
//! `object_uri` ([`super::artifacts::Occurrence::is_relocation_of`]).

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::artifacts::Occurrence;
use super::content::{RowWriter, TableDigest, Unit};
use super::metadata::TableMetadata;
use super::{CommitReply, Digest, Name, TableFacts, TablePlan};

/// Why a table-store operation was refused or failed. A refusal found
/// before a commit leaves the destination untouched.
#[derive(Clone, Debug, PartialEq, Eq, Error, Serialize, Deserialize)]
pub enum TableError {
    /// No such table (or no such snapshot of it).
    #[error("NotFound: table {table}: {detail}")]
    NotFound {
        /// The table.
        table: String,
        /// What is missing.
        detail: String,
    },
    /// The destination table holds other content.
    #[error("DestinationConflict: table {table}: {detail}")]
    DestinationConflict {
        /// The table.
        table: String,
        /// What it holds.
        detail: String,
    },
    /// The pinned source no longer reads as the plan's evidence.
    #[error("SourceDrift: table {table}: {detail}")]
    SourceDrift {
        /// The table.
        table: String,
        /// What differs.
        detail: String,
    },
    /// A fresh read of the destination did not reproduce the plan.
    #[error("VerifyMismatch: table {table}: {detail}")]
    VerifyMismatch {
        /// The table.
        table: String,
        /// What differs.
        detail: String,
    },
    /// A malformed request (a relocated row that changes more than its
    /// `object_uri`, relocated rows for another table).
    #[error("Invalid: table {table}: {detail}")]
    Invalid {
        /// The table.
        table: String,
        /// Why.
        detail: String,
    },
    /// The backend failed.
    #[error("BackendFault: {reason}")]
    Backend {
        /// What failed.
        reason: String,
    },
}

impl TableError {
    /// The failure's [`Class`](crate::Class): what the caller does next
    /// (a copy that does not verify is `CorruptArtifact`, a source that moved `StateConflict`).
    pub fn class(&self) -> crate::Class {
        use crate::Class;
        match self {
            TableError::NotFound { .. } => Class::NotFound,
            TableError::DestinationConflict { .. } => Class::AlreadyExists,
            TableError::SourceDrift { .. } => Class::StateConflict,
            TableError::VerifyMismatch { .. } => Class::CorruptArtifact,
            TableError::Invalid { .. } => Class::InvalidArgument,
            TableError::Backend { .. } => Class::Internal,
        }
    }
}

crate::reasons! {
    /// The stable reason string.
    TableError {
        NotFound,
        DestinationConflict,
        SourceDrift,
        VerifyMismatch,
        Invalid,
        Backend => "BackendFault",
    }
}

/// The table store port (see the module documentation).
pub trait TableStore {
    /// Every table of the namespace, by name, with the evidence of its
    /// current snapshot, enumerated through the catalog.
    fn namespace(&self) -> Result<Vec<(Name, TableFacts)>, TableError>;

    /// The evidence of `table` at `snapshot` (0: the table has none).
    fn evidence_at(&self, table: &Name, snapshot: u64) -> Result<TableFacts, TableError>;

    /// A fresh inspection of `table`: `None` when it is absent or has no
    /// snapshot.
    fn inspect(&self, table: &Name) -> Result<Option<TableFacts>, TableError>;

    /// Every table of the namespace with its current snapshot id (0: no
    /// snapshot), sorted by name — what a recheck compares. The default
    /// reads [`TableStore::namespace`]; a store whose snapshots are
    /// immutable answers from metadata without reading rows.
    fn snapshots(&self) -> Result<Vec<(Name, u64)>, TableError> {
        Ok(self
            .namespace()?
            .into_iter()
            .map(|(n, f)| (n, f.snapshot))
            .collect())
    }

    /// The occurrence rows of the `artifact_files` table `table` at
    /// `snapshot`, decoded totally.
    fn occurrences(&self, table: &Name, snapshot: u64) -> Result<Vec<Occurrence>, TableError>;

    /// The content digest `table` would have at the destination holding
    /// `relocated` instead of its rows at `snapshot` (its schema kept): the
    /// plan's `destination_content_digest` for `artifact_files`.
    fn relocated_digest(
        &self,
        table: &Name,
        snapshot: u64,
        relocated: &[Occurrence],
    ) -> Result<Digest, TableError>;

    /// Copies `plan`'s pinned table from `source` (see the module
    /// documentation); `relocated` holds the relocated rows of
    /// `artifact_files`, `None` for every other table.
    fn copy_from(
        &self,
        source: &Self,
        plan: &TablePlan,
        relocated: Option<&[Occurrence]>,
    ) -> Result<CommitReply, TableError>
    where
        Self: Sized;
}

/// Checks relocated rows against the source rows: the same count, and each
/// a relocation of its source row (only `object_uri` differs).
pub fn check_relocated(
    table: &Name,
    source: &[Occurrence],
    relocated: &[Occurrence],
) -> Result<(), TableError> {
    let invalid = |detail: String| TableError::Invalid {
        table: table.as_str().to_owned(),
        detail,
    };
    if source.len() != relocated.len() {
        return Err(invalid(format!(
            "{} relocated rows for {} source rows",
            relocated.len(),
            source.len()
        )));
    }
    for (i, (s, r)) in source.iter().zip(relocated).enumerate() {
        if !r.is_relocation_of(s) {
            return Err(invalid(format!(
                "relocated row {i} ({}) changes more than object_uri",
                s.artifact_id
            )));
        }
    }
    Ok(())
}

/// Writes an occurrence as the canonical row of the memory store's
/// `artifact_files` (twelve cells in the occurrence's field order).
pub fn occurrence_row(w: &mut RowWriter, o: &Occurrence) {
    w.begin_row(12);
    w.utf8(o.artifact_id.as_str());
    w.timestamp(Unit::Microsecond, o.ingested_at);
    w.utf8(&o.source_uri);
    w.utf8(&o.logical_path);
    w.utf8(o.world.as_str());
    match &o.run {
        Some(r) => w.utf8(r.as_str()),
        None => w.null(),
    }
    match o.tick {
        Some(t) => w.int(i128::from(t)),
        None => w.null(),
    }
    w.utf8(&o.sha256.hex());
    w.int(i128::from(o.xxh3_64));
    w.int(i128::from(o.size));
    w.utf8(&o.media_type);
    w.utf8(o.object_uri.as_str());
}

/// The rows of one snapshot of a memory table.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum MemoryRows {
    /// Opaque rows, as canonical row bytes ([`RowWriter`]).
    Canonical(Vec<Vec<u8>>),
    /// `artifact_files` rows.
    Occurrences(Vec<Occurrence>),
}

/// What a [`MemoryTableStore`] holds, as a plain value
/// ([`MemoryTableStore::image`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TableImage {
    tables: BTreeMap<Name, MemoryTable>,
    next_snapshot: u64,
}

impl TableImage {
    /// How many appends landed in `table` (0 for a table it lacks).
    pub fn appends(&self, table: &Name) -> usize {
        self.tables.get(table).map_or(0, |t| t.snapshots.len())
    }

    /// The rows of `table`'s latest snapshot, if it has one.
    pub fn latest(&self, table: &Name) -> Option<&MemoryRows> {
        self.tables
            .get(table)
            .and_then(|t| t.snapshots.last())
            .map(|(_, rows)| rows)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct MemoryTable {
    schema: Digest,
    /// The metadata fingerprint ([`TableMetadata::fingerprint`]).
    metadata: Digest,
    /// Snapshots, oldest first: `(id, rows)`.
    snapshots: Vec<(u64, MemoryRows)>,
}

/// A table store in memory: tables of opaque canonical rows (or
/// occurrences), each append a new snapshot; the oracle the table-store
/// conformance suite runs beside Iceberg.
#[derive(Debug, Default)]
pub struct MemoryTableStore {
    tables: Mutex<BTreeMap<Name, MemoryTable>>,
    next_snapshot: Mutex<u64>,
    lose_next_reply: Mutex<bool>,
}

fn digest_of(schema: Digest, rows: &MemoryRows) -> Result<(u64, Digest), TableError> {
    let mut d = TableDigest::new(schema);
    match rows {
        MemoryRows::Canonical(rows) => rows.iter().for_each(|r| d.add_canonical(r)),
        MemoryRows::Occurrences(rows) => {
            let mut w = RowWriter::new();
            for o in rows {
                occurrence_row(&mut w, o);
                d.add_row(&mut w).map_err(|e| TableError::Backend {
                    reason: e.to_string(),
                })?;
            }
        }
    }
    let c = d.finish();
    Ok((c.rows, c.digest))
}

impl MemoryTableStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> Result<MutexGuard<'_, BTreeMap<Name, MemoryTable>>, TableError> {
        self.tables.lock().map_err(|_| TableError::Backend {
            reason: "memory table store mutex poisoned".into(),
        })
    }

    /// Creates `table` (empty, no snapshot) with `schema` as its migration
    /// schema fingerprint, unpartitioned, unsorted and without properties;
    /// an existing table is left as it is.
    pub fn create(&self, table: &Name, schema: Digest) -> Result<(), TableError> {
        self.create_with(table, schema, &TableMetadata::default())
    }

    /// Creates `table` (empty, no snapshot) with `schema` as its migration
    /// schema fingerprint and `metadata` as its partition spec, sort order
    /// and properties; an existing table is left as it is.
    pub fn create_with(
        &self,
        table: &Name,
        schema: Digest,
        metadata: &TableMetadata,
    ) -> Result<(), TableError> {
        let metadata = metadata.fingerprint();
        self.lock()?
            .entry(table.clone())
            .or_insert_with(|| MemoryTable {
                schema,
                metadata,
                snapshots: Vec::new(),
            });
        Ok(())
    }

    /// Removes `table` with its snapshots; answers whether it was there.
    pub fn remove(&self, table: &Name) -> Result<bool, TableError> {
        Ok(self.lock()?.remove(table).is_some())
    }

    /// Appends `rows` to `table` (the previous snapshot's rows and these) as
    /// a new snapshot; answers its id.
    pub fn append(&self, table: &Name, rows: MemoryRows) -> Result<u64, TableError> {
        let id = {
            let mut n = self.next_snapshot.lock().map_err(|_| TableError::Backend {
                reason: "memory table store mutex poisoned".into(),
            })?;
            *n += 1;
            *n
        };
        let mut tables = self.lock()?;
        let t = tables
            .get_mut(table)
            .ok_or_else(|| not_found(table, "no such table"))?;
        let merged = match (t.snapshots.last().map(|(_, r)| r.clone()), rows) {
            (None, rows) => rows,
            (Some(MemoryRows::Canonical(mut a)), MemoryRows::Canonical(b)) => {
                a.extend(b);
                MemoryRows::Canonical(a)
            }
            (Some(MemoryRows::Occurrences(mut a)), MemoryRows::Occurrences(b)) => {
                a.extend(b);
                MemoryRows::Occurrences(a)
            }
            _ => {
                return Err(TableError::Invalid {
                    table: table.as_str().to_owned(),
                    detail: "rows of another kind".into(),
                })
            }
        };
        t.snapshots.push((id, merged));
        Ok(id)
    }

    /// Everything it holds: each table's fingerprints and snapshots, and
    /// the next snapshot id. A plain value (a model checker keeps it in its
    /// state and builds the store again with
    /// [`MemoryTableStore::from_image`]); a lost reply armed is not part
    /// of it.
    pub fn image(&self) -> Result<TableImage, TableError> {
        let tables = self.lock()?.clone();
        let next_snapshot = *self.next_snapshot.lock().map_err(|_| TableError::Backend {
            reason: "memory table store mutex poisoned".into(),
        })?;
        Ok(TableImage {
            tables,
            next_snapshot,
        })
    }

    /// A store holding `image` ([`MemoryTableStore::image`]).
    pub fn from_image(image: TableImage) -> Self {
        MemoryTableStore {
            tables: Mutex::new(image.tables),
            next_snapshot: Mutex::new(image.next_snapshot),
            lose_next_reply: Mutex::new(false),
        }
    }

    /// Makes the next commit's reply lost: the commit lands, the answer is
    /// `Ambiguous` (fault injection for drivers' tests).
    pub fn lose_next_reply(&self) {
        if let Ok(mut l) = self.lose_next_reply.lock() {
            *l = true;
        }
    }

    /// Snapshots of `table` (how many appends landed).
    pub fn snapshot_count(&self, table: &Name) -> Result<usize, TableError> {
        Ok(self.lock()?.get(table).map_or(0, |t| t.snapshots.len()))
    }

    /// The table's `(schema, metadata)` fingerprints and its rows at
    /// `snapshot` (`None` for 0).
    fn rows_at(
        &self,
        table: &Name,
        snapshot: u64,
    ) -> Result<(Shape, Option<MemoryRows>), TableError> {
        let tables = self.lock()?;
        let t = tables
            .get(table)
            .ok_or_else(|| not_found(table, "no such table"))?;
        let shape = (t.schema, t.metadata);
        if snapshot == 0 {
            return Ok((shape, None));
        }
        let rows = t
            .snapshots
            .iter()
            .find(|(id, _)| *id == snapshot)
            .map(|(_, r)| r.clone())
            .ok_or_else(|| not_found(table, &format!("no snapshot {snapshot}")))?;
        Ok((shape, Some(rows)))
    }
}

fn not_found(table: &Name, detail: &str) -> TableError {
    TableError::NotFound {
        table: table.as_str().to_owned(),
        detail: detail.to_owned(),
    }
}

/// A memory table's schema and metadata fingerprints.
type Shape = (Digest, Digest);

fn facts(
    (schema, metadata): Shape,
    snapshot: u64,
    rows: Option<&MemoryRows>,
) -> Result<TableFacts, TableError> {
    let (n, digest) = match rows {
        Some(r) => digest_of(schema, r)?,
        None => digest_of(schema, &MemoryRows::Canonical(Vec::new()))?,
    };
    Ok(TableFacts {
        snapshot,
        schema_fingerprint: schema,
        metadata_fingerprint: metadata,
        rows: n,
        content_digest: digest,
    })
}

impl TableStore for MemoryTableStore {
    fn namespace(&self) -> Result<Vec<(Name, TableFacts)>, TableError> {
        let tables = self.lock()?;
        tables
            .iter()
            .map(|(name, t)| {
                let last = t.snapshots.last();
                let f = facts(
                    (t.schema, t.metadata),
                    last.map_or(0, |(id, _)| *id),
                    last.map(|(_, r)| r),
                )?;
                Ok((name.clone(), f))
            })
            .collect()
    }

    fn evidence_at(&self, table: &Name, snapshot: u64) -> Result<TableFacts, TableError> {
        let (shape, rows) = self.rows_at(table, snapshot)?;
        facts(shape, snapshot, rows.as_ref())
    }

    fn inspect(&self, table: &Name) -> Result<Option<TableFacts>, TableError> {
        let tables = self.lock()?;
        let Some(t) = tables.get(table) else {
            return Ok(None);
        };
        match t.snapshots.last() {
            None => Ok(None),
            Some((id, rows)) => facts((t.schema, t.metadata), *id, Some(rows)).map(Some),
        }
    }

    fn occurrences(&self, table: &Name, snapshot: u64) -> Result<Vec<Occurrence>, TableError> {
        match self.rows_at(table, snapshot)?.1 {
            None => Ok(Vec::new()),
            Some(MemoryRows::Occurrences(rows)) => Ok(rows),
            Some(MemoryRows::Canonical(_)) => Err(TableError::Invalid {
                table: table.as_str().to_owned(),
                detail: "not an artifact_files table".into(),
            }),
        }
    }

    fn relocated_digest(
        &self,
        table: &Name,
        snapshot: u64,
        relocated: &[Occurrence],
    ) -> Result<Digest, TableError> {
        let source = self.occurrences(table, snapshot)?;
        check_relocated(table, &source, relocated)?;
        let ((schema, _), _) = self.rows_at(table, snapshot)?;
        Ok(digest_of(schema, &MemoryRows::Occurrences(relocated.to_vec()))?.1)
    }

    fn copy_from(
        &self,
        source: &Self,
        plan: &TablePlan,
        relocated: Option<&[Occurrence]>,
    ) -> Result<CommitReply, TableError> {
        let name = &plan.name;
        let (shape, rows) = source.rows_at(name, plan.source.snapshot)?;
        let pinned = facts(shape, plan.source.snapshot, rows.as_ref())?;
        if pinned != plan.source {
            return Err(TableError::SourceDrift {
                table: name.as_str().to_owned(),
                detail: format!(
                    "the pinned snapshot reads {pinned:?}, the plan says {:?}",
                    plan.source
                ),
            });
        }
        let rows = relocated_rows(name, rows, relocated)?;
        // Check and append under one lock: the commit lands only while the
        // table is still empty.
        {
            let mut tables = self.lock()?;
            if let Some(t) = tables.get(name).filter(|t| (t.schema, t.metadata) != shape) {
                return Err(TableError::DestinationConflict {
                    table: name.as_str().to_owned(),
                    detail: format!(
                        "an existing table of schema {} and metadata {} is not the source's",
                        t.schema.hex(),
                        t.metadata.hex()
                    ),
                });
            }
            if let Some((id, held)) = tables.get(name).and_then(|t| t.snapshots.last()) {
                let found = facts(shape, *id, Some(held))?;
                return if plan.destination_matches(&found) {
                    Ok(CommitReply::Committed(found))
                } else {
                    Err(TableError::DestinationConflict {
                        table: name.as_str().to_owned(),
                        detail: format!("holds {} rows of other content", found.rows),
                    })
                };
            }
            let t = tables.entry(name.clone()).or_insert_with(|| MemoryTable {
                schema: shape.0,
                metadata: shape.1,
                snapshots: Vec::new(),
            });
            if let Some(rows) = rows {
                let mut n = self.next_snapshot.lock().map_err(|_| TableError::Backend {
                    reason: "memory table store mutex poisoned".into(),
                })?;
                *n += 1;
                t.snapshots.push((*n, rows));
            }
        }
        let lost = self
            .lose_next_reply
            .lock()
            .map(|mut l| std::mem::take(&mut *l))
            .unwrap_or(false);
        if lost {
            return Ok(CommitReply::Ambiguous);
        }
        let read = match self.inspect(name)? {
            Some(f) => f,
            None => self.evidence_at(name, 0)?,
        };
        if !plan.destination_matches(&read) {
            return Err(TableError::VerifyMismatch {
                table: name.as_str().to_owned(),
                detail: format!("a fresh read gives {read:?}"),
            });
        }
        Ok(CommitReply::Committed(read))
    }
}

/// The rows a copy writes: the source's, or for the occurrence inventory
/// the relocated rows (checked against the source's).
fn relocated_rows(
    name: &Name,
    rows: Option<MemoryRows>,
    relocated: Option<&[Occurrence]>,
) -> Result<Option<MemoryRows>, TableError> {
    match (rows, relocated) {
        (Some(MemoryRows::Occurrences(src)), Some(rel)) => {
            check_relocated(name, &src, rel)?;
            Ok(Some(MemoryRows::Occurrences(rel.to_vec())))
        }
        (None, Some([])) => Ok(None),
        (_, Some(_)) => Err(TableError::Invalid {
            table: name.as_str().to_owned(),
            detail: "relocated rows for a table without occurrences".into(),
        }),
        (rows, None) => Ok(rows),
    }
}

#[cfg(test)]
mod tests;
