//! [`IcebergStore`] as core's table-store port
//! ([`custos_core::migration::tables::TableStore`]): evidence through the
//! Iceberg catalog, copies through [`IcebergStore::copy_table`] and
//! [`IcebergStore::copy_relocated_artifact_files`] (one guarded commit that
//! lands only in a still-empty table, a fresh-read verification), a lost
//! commit reply answered as [`CommitReply::Ambiguous`].
//!
//! Snapshot identities: Iceberg's are positive `i64`s, the port's `u64`s
//! with 0 for "no snapshot" (an empty table); a negative one is refused.

use custos_core::migration::artifacts::Occurrence;
use custos_core::migration::tables::{check_relocated, TableError, TableStore};
use custos_core::migration::{CommitReply, Digest, Name, TableFacts, TablePlan};

use crate::artifacts::ARTIFACT_FILES;
use crate::error::IcebergError;
use crate::evidence::TableEvidence;
use crate::store::IcebergStore;
use crate::transfer::{CopyOutcome, Fault};

fn table_err(e: IcebergError) -> TableError {
    match e {
        IcebergError::TableNotFound { table_id, .. } => TableError::NotFound {
            table: table_id,
            detail: "no such table".into(),
        },
        IcebergError::DestinationConflict { table, detail } => {
            TableError::DestinationConflict { table, detail }
        }
        IcebergError::SourceDrift { table, detail } => TableError::SourceDrift { table, detail },
        IcebergError::VerifyMismatch { table, detail } => {
            TableError::VerifyMismatch { table, detail }
        }
        other => TableError::Backend {
            reason: other.to_string(),
        },
    }
}

fn facts(e: &TableEvidence) -> Result<TableFacts, TableError> {
    let snapshot = match e.snapshot {
        None => 0,
        Some(s) => u64::try_from(s).map_err(|_| TableError::Backend {
            reason: format!("table {}: negative snapshot id {s}", e.name),
        })?,
    };
    Ok(TableFacts {
        snapshot,
        schema_fingerprint: e.schema_fingerprint,
        metadata_fingerprint: e.metadata_fingerprint,
        rows: e.content.rows,
        content_digest: e.content.digest,
    })
}

fn snapshot_id(table: &Name, snapshot: u64) -> Result<Option<i64>, TableError> {
    if snapshot == 0 {
        return Ok(None);
    }
    i64::try_from(snapshot)
        .map(Some)
        .map_err(|_| TableError::NotFound {
            table: table.as_str().to_owned(),
            detail: format!("no snapshot {snapshot}"),
        })
}

fn artifact_files(table: &Name) -> Result<(), TableError> {
    if table.as_str() == ARTIFACT_FILES {
        Ok(())
    } else {
        Err(TableError::Invalid {
            table: table.as_str().to_owned(),
            detail: "occurrences live only in artifact_files".into(),
        })
    }
}

impl IcebergStore {
    fn evidence_pinned(&self, table: &Name, snapshot: u64) -> Result<TableEvidence, TableError> {
        let id = snapshot_id(table, snapshot)?;
        let e = self.table_evidence(table.as_str(), id).map_err(table_err)?;
        if e.snapshot != id {
            return Err(TableError::NotFound {
                table: table.as_str().to_owned(),
                detail: format!(
                    "snapshot {snapshot} is not readable (read {:?})",
                    e.snapshot
                ),
            });
        }
        Ok(e)
    }
}

impl TableStore for IcebergStore {
    fn namespace(&self) -> Result<Vec<(Name, TableFacts)>, TableError> {
        let mut out = Vec::new();
        for e in self.namespace_evidence().map_err(table_err)? {
            let name = Name::new(e.name.as_str()).map_err(|x| TableError::Backend {
                reason: format!("table name {:?}: {x}", e.name),
            })?;
            out.push((name, facts(&e)?));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    fn evidence_at(&self, table: &Name, snapshot: u64) -> Result<TableFacts, TableError> {
        facts(&self.evidence_pinned(table, snapshot)?)
    }

    fn inspect(&self, table: &Name) -> Result<Option<TableFacts>, TableError> {
        let names = self.list_tables().map_err(table_err)?;
        if !names.iter().any(|n| n == table.as_str()) {
            return Ok(None);
        }
        let e = self
            .table_evidence(table.as_str(), None)
            .map_err(table_err)?;
        if e.snapshot.is_none() {
            return Ok(None);
        }
        facts(&e).map(Some)
    }

    fn snapshots(&self) -> Result<Vec<(Name, u64)>, TableError> {
        let mut out = Vec::new();
        for (n, id) in self.namespace_snapshots().map_err(table_err)? {
            let name = Name::new(n.as_str()).map_err(|x| TableError::Backend {
                reason: format!("table name {n:?}: {x}"),
            })?;
            let snapshot = match id {
                None => 0,
                Some(s) => u64::try_from(s).map_err(|_| TableError::Backend {
                    reason: format!("table {n}: negative snapshot id {s}"),
                })?,
            };
            out.push((name, snapshot));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    fn occurrences(&self, table: &Name, snapshot: u64) -> Result<Vec<Occurrence>, TableError> {
        artifact_files(table)?;
        self.read_occurrences(snapshot_id(table, snapshot)?)
            .map_err(table_err)
    }

    fn relocated_digest(
        &self,
        table: &Name,
        snapshot: u64,
        relocated: &[Occurrence],
    ) -> Result<Digest, TableError> {
        let source = self.occurrences(table, snapshot)?;
        check_relocated(table, &source, relocated)?;
        Ok(self
            .relocated_evidence(relocated)
            .map_err(table_err)?
            .content
            .digest)
    }

    fn copy_from(
        &self,
        source: &Self,
        plan: &TablePlan,
        relocated: Option<&[Occurrence]>,
    ) -> Result<CommitReply, TableError> {
        let name = &plan.name;
        let pinned = source.evidence_pinned(name, plan.source.snapshot)?;
        if facts(&pinned)? != plan.source {
            return Err(TableError::SourceDrift {
                table: name.as_str().to_owned(),
                detail: "the pinned source snapshot is not the plan's evidence".into(),
            });
        }
        let copied = match relocated {
            Some(rows) => {
                artifact_files(name)?;
                let src = source.occurrences(name, plan.source.snapshot)?;
                check_relocated(name, &src, rows)?;
                self.copy_relocated_artifact_files(source, &pinned, rows, Fault::None)
                    .map(|(o, _)| o)
            }
            None => self.copy_table(source, &pinned, Fault::None),
        };
        let evidence = match copied {
            Ok(CopyOutcome::Copied(e) | CopyOutcome::Converged(e)) => e,
            Err(IcebergError::CommitInDoubt { .. }) => return Ok(CommitReply::Ambiguous),
            Err(e) => return Err(table_err(e)),
        };
        let read = facts(&evidence)?;
        if let Some(what) = read.difference(plan) {
            return Err(TableError::VerifyMismatch {
                table: name.as_str().to_owned(),
                detail: format!("a fresh read differs from the plan in its {what}"),
            });
        }
        Ok(CommitReply::Committed(read))
    }
}
