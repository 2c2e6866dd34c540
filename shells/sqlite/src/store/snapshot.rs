//! The snapshot port ([`SnapshotSource`]) on [`SqliteStorage`]: the steps
//! only; every bound and rule is `custos_core::snapshot`'s.
//!
//! - A cut is one short **deferred** transaction (in WAL mode a read
//!   snapshot that neither waits for nor blocks the writer): the head row,
//!   header windows and cell lookups of one capture or key page all run in
//!   it, and it ends before the reader answers. Nothing here writes.
//! - Headers select `key, seq, length(value)`: SQLite answers a blob's
//!   length from its record header without reading the value, so a window
//!   is accounted before any value leaves the file.
//! - An exact header is one probe of the `(namespace, key)` primary key; a
//!   window is the index range `key >= start` (or `> start` after a
//!   cursor) `AND key < end` with the end computed in Rust (no `LIKE`, no
//!   pattern: prefixes stay literal), left open above when the prefix has
//!   no successor, and `LIMIT` applied to that range.
//! - Descriptor pages are a range of the `seq` primary key; the lineage
//!   step is one probe of the unique `id` index (`id = ? AND seq < ?`);
//!   fragments read only the asked slice through SQLite's incremental blob
//!   I/O on the entry's rowid (its seq), never the whole payload.
//!
//! The statements' plans are exposed through
//! [`SnapshotSource::explain_snapshot`] and checked by the conformance
//! suite (and, by name, by this crate's tests).

use custos_core::snapshot::{
    CellHeader, CutView, Descriptor, Head, KeyRange, SnapshotError, SnapshotSource, SnapshotStep,
};
use custos_core::storage::stored::record_id;
use custos_core::storage::{Namespace, RecordId, Register, RegisterKey, Seq, StorageError};
use rusqlite::{params, Connection, DatabaseName, OptionalExtension};

use super::{load_head, SqliteStorage};
use crate::codec::{self, cells, seq_to_sql};
use crate::fault::Fault;

const HEADER_SQL: &str =
    "SELECT key, seq, length(value) FROM registers WHERE namespace = ?1 AND key = ?2";
const HEADERS_FROM_TO: &str = "SELECT key, seq, length(value) FROM registers
     WHERE namespace = ?1 AND key >= ?2 AND key < ?3 ORDER BY key LIMIT ?4";
const HEADERS_AFTER_TO: &str = "SELECT key, seq, length(value) FROM registers
     WHERE namespace = ?1 AND key > ?2 AND key < ?3 ORDER BY key LIMIT ?4";
const HEADERS_FROM: &str = "SELECT key, seq, length(value) FROM registers
     WHERE namespace = ?1 AND key >= ?2 ORDER BY key LIMIT ?3";
const HEADERS_AFTER: &str = "SELECT key, seq, length(value) FROM registers
     WHERE namespace = ?1 AND key > ?2 ORDER BY key LIMIT ?3";
const CELL_SQL: &str = "SELECT value, seq FROM registers WHERE namespace = ?1 AND key = ?2";
const DESCRIPTORS_SQL: &str = "SELECT seq, id, parent, kind, ts, length(payload) FROM entries
     WHERE seq >= ?1 AND seq < ?2 ORDER BY seq LIMIT ?3";
const ENTRY_HEAD_SQL: &str = "SELECT seq, id, parent, kind, ts, length(payload) FROM entries
     WHERE id = ?1 AND seq < ?2";
const FRAGMENT_ROW_SQL: &str = "SELECT id, length(payload) FROM entries WHERE seq = ?1";
const HEAD_SQL: &str = "SELECT next_seq FROM session WHERE singleton = 1";

const R: &str = "registers";
const E: &str = "entries";

fn decode_header(row: &rusqlite::Row<'_>) -> Result<CellHeader, Fault> {
    Ok(CellHeader::read(&mut cells(row, R))?)
}

fn decode_descriptor(row: &rusqlite::Row<'_>) -> Result<Descriptor, Fault> {
    Ok(Descriptor::read(&mut cells(row, E))?)
}

fn sql_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// One cut: the borrowed connection inside the read transaction.
struct View<'c> {
    c: &'c Connection,
}

impl CutView for View<'_> {
    fn head(&self) -> Result<Head, StorageError> {
        let (next_seq, stats) = load_head(self.c)?;
        Ok(Head { next_seq, stats })
    }

    fn header(
        &self,
        namespace: &Namespace,
        key: &RegisterKey,
    ) -> Result<Option<CellHeader>, StorageError> {
        let found = self
            .c
            .prepare_cached(HEADER_SQL)
            .map_err(Fault::db("snapshot-header"))?
            .query_row(params![namespace.as_str(), key.as_str()], |row| {
                Ok(decode_header(row))
            })
            .optional()
            .map_err(Fault::db("snapshot-header"))?;
        Ok(found.transpose()?)
    }

    fn headers(
        &self,
        namespace: &Namespace,
        range: &KeyRange,
        limit: usize,
    ) -> Result<Vec<CellHeader>, StorageError> {
        let op = "snapshot-headers";
        let (ns, start, lim) = (namespace.as_str(), range.start.as_str(), sql_limit(limit));
        let sql = match (&range.end, range.start_inclusive) {
            (Some(_), true) => HEADERS_FROM_TO,
            (Some(_), false) => HEADERS_AFTER_TO,
            (None, true) => HEADERS_FROM,
            (None, false) => HEADERS_AFTER,
        };
        let mut st = self.c.prepare_cached(sql).map_err(Fault::db(op))?;
        let mut rows = match &range.end {
            Some(end) => st.query(params![ns, start, end, lim]),
            None => st.query(params![ns, start, lim]),
        }
        .map_err(Fault::db(op))?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(Fault::db(op))? {
            out.push(decode_header(row)?);
        }
        Ok(out)
    }

    fn cells(
        &self,
        namespace: &Namespace,
        keys: &[RegisterKey],
    ) -> Result<Vec<Option<Register>>, StorageError> {
        let op = "snapshot-cells";
        let mut st = self.c.prepare_cached(CELL_SQL).map_err(Fault::db(op))?;
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let cell = st
                .query_row(params![namespace.as_str(), key.as_str()], |row| {
                    Ok(Register::read(&cells(row, R), namespace, key.clone(), 0))
                })
                .optional()
                .map_err(Fault::db(op))?
                .transpose()?;
            out.push(cell);
        }
        Ok(out)
    }
}

impl SnapshotSource for SqliteStorage {
    fn with_cut<T>(
        &self,
        body: impl FnOnce(&dyn CutView) -> Result<T, SnapshotError>,
    ) -> Result<T, SnapshotError> {
        let mut out = None;
        self.read(|tx| {
            out = Some(body(&View { c: tx }));
            Ok(())
        })?;
        out.unwrap_or_else(|| {
            Err(SnapshotError::Storage(StorageError::BackendFault {
                reason: "sqlite-snapshot: the cut ran no body".to_owned(),
            }))
        })
    }

    fn descriptors(
        &self,
        after: Option<Seq>,
        below: Seq,
        limit: usize,
    ) -> Result<Vec<Descriptor>, StorageError> {
        let Some((lo, below)) = custos_core::snapshot::descriptor_range(after, below) else {
            return Ok(Vec::new());
        };
        self.read(|tx| {
            let op = "snapshot-descriptors";
            let mut st = tx.prepare_cached(DESCRIPTORS_SQL).map_err(Fault::db(op))?;
            let mut rows = st
                .query(params![seq_to_sql(lo), seq_to_sql(below), sql_limit(limit)])
                .map_err(Fault::db(op))?;
            let mut out = Vec::new();
            while let Some(row) = rows.next().map_err(Fault::db(op))? {
                out.push(decode_descriptor(row)?);
            }
            Ok(out)
        })
    }

    fn entry_head(&self, id: &RecordId, below: Seq) -> Result<Option<Descriptor>, StorageError> {
        self.read(|tx| {
            let op = "snapshot-entry-head";
            let found = tx
                .prepare_cached(ENTRY_HEAD_SQL)
                .map_err(Fault::db(op))?
                .query_row(params![id.as_str(), seq_to_sql(below)], |row| {
                    Ok(decode_descriptor(row))
                })
                .optional()
                .map_err(Fault::db(op))?;
            Ok(found.transpose()?)
        })
    }

    fn fragment_bytes(
        &self,
        head: &Descriptor,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>, StorageError> {
        self.read(|tx| {
            let op = "snapshot-fragment";
            let rowid = seq_to_sql(head.seq);
            let row = tx
                .prepare_cached(FRAGMENT_ROW_SQL)
                .map_err(Fault::db(op))?
                .query_row([rowid], |row| {
                    let c = cells(row, E);
                    Ok((|| {
                        Ok::<_, Fault>((record_id(&c, 0, "id")?, c.count(1, "length(payload)")?))
                    })())
                })
                .optional()
                .map_err(Fault::db(op))?
                .transpose()?;
            match row {
                Some((id, size)) if id == head.id && size == head.size => {}
                _ => {
                    return Err(StorageError::Corrupt {
                        detail: format!("entries row seq {} is not entry {}", head.seq, head.id),
                    })
                }
            }
            let start = usize::try_from(offset).map_err(|_| StorageError::Corrupt {
                detail: format!("offset {offset} does not fit this platform"),
            })?;
            let blob = tx
                .blob_open(DatabaseName::Main, E, "payload", rowid, true)
                .map_err(Fault::db(op))?;
            let mut buf = vec![0u8; len];
            blob.read_at_exact(&mut buf, start).map_err(Fault::db(op))?;
            Ok(buf)
        })
    }

    fn explain_snapshot(&self, step: SnapshotStep) -> Result<Option<Vec<String>>, StorageError> {
        let sqls: &[&str] = match step {
            SnapshotStep::Head => &[HEAD_SQL],
            SnapshotStep::ExactHeader => &[HEADER_SQL],
            SnapshotStep::BoundedHeaders => &[HEADERS_FROM_TO, HEADERS_AFTER_TO],
            SnapshotStep::OpenHeaders => &[HEADERS_FROM, HEADERS_AFTER],
            SnapshotStep::Cells => &[CELL_SQL],
            SnapshotStep::Descriptors => &[DESCRIPTORS_SQL],
            SnapshotStep::EntryHead => &[ENTRY_HEAD_SQL],
            SnapshotStep::Fragment => &[FRAGMENT_ROW_SQL],
        };
        self.read(|tx| {
            let mut out = Vec::new();
            for sql in sqls {
                let mut st = tx
                    .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                    .map_err(Fault::db("explain"))?;
                let nulls = vec![rusqlite::types::Null; st.parameter_count()];
                let mut rows = st
                    .query(rusqlite::params_from_iter(nulls))
                    .map_err(Fault::db("explain"))?;
                while let Some(row) = rows.next().map_err(Fault::db("explain"))? {
                    out.push(codec::text(row, 3, "explain", codec::MAX_TEXT_LEN)?.to_owned());
                }
            }
            Ok(Some(out))
        })
    }
}
