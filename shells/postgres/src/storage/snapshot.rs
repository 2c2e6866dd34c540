//! The snapshot port ([`SnapshotSource`]) on [`PgStorage`]: the steps
//! only; every bound and rule is `custos_core::snapshot`'s.
//!
//! - A cut is one `REPEATABLE READ, READ ONLY` transaction
//!   ([`crate::conn::Conn::read`]): the head row, header windows and cell
//!   lookups of one capture or key page see one snapshot, and the
//!   transaction ends before the reader answers. Nothing here writes.
//! - Headers select `key, seq, octet_length(value)`: PostgreSQL answers a
//!   `bytea`'s length from its TOAST header without detoasting it, so a
//!   window is accounted before any value is transferred.
//! - An exact header is one probe of the `(session, namespace, key)`
//!   primary key; a window is that index's range `key >= start` (or
//!   `> start`) `AND key < end` (`COLLATE "C"`: byte order, as the core's
//!   successor assumes), the end computed in Rust, open above when the
//!   prefix has none, `LIMIT` applied to the range. Prefixes stay literal.
//! - Descriptor pages are a range of the `(session, seq)` primary key; the
//!   lineage step is one probe of the `(session, id)` unique index;
//!   a fragment is `substring` of one row found by its primary key. (The
//!   seq is selected as text: `ORDER BY` names the table column, never
//!   the text alias, which would sort `10` before `9`.)
//!
//! [`SnapshotSource::explain_snapshot`] answers `EXPLAIN (COSTS OFF)` with
//! `enable_seqscan` and `enable_sort` off, as the branch-scan check does
//! (see the parent module: it shows an index path exists for every
//! statement, not what the planner picks on a tiny table).

use std::cell::RefCell;
use std::collections::BTreeMap;

use custos_core::snapshot::{
    CellHeader, CutView, Descriptor, Head, KeyRange, SnapshotError, SnapshotSource, SnapshotStep,
};
use custos_core::storage::{Namespace, RecordId, Register, RegisterKey, Seq, StorageError};
use postgres::types::ToSql;

use super::codec::{self, num, ENTRIES, REGISTERS, SESSIONS};
use super::{storage_error, PgStorage};
use crate::cols::cells;
use crate::conn::{db, Failure, Tx, TxError};
use custos_core::storage::stored::record_id;

const HEADER_SQL: &str = "SELECT key, seq::text, octet_length(value)::bigint FROM storage_registers
     WHERE session = $1 AND namespace = $2 AND key = $3";
const HEADERS_FROM_TO: &str = "SELECT key, seq::text, octet_length(value)::bigint
     FROM storage_registers WHERE session = $1 AND namespace = $2 AND key >= $3 AND key < $4
     ORDER BY key LIMIT $5";
const HEADERS_AFTER_TO: &str = "SELECT key, seq::text, octet_length(value)::bigint
     FROM storage_registers WHERE session = $1 AND namespace = $2 AND key > $3 AND key < $4
     ORDER BY key LIMIT $5";
const HEADERS_FROM: &str = "SELECT key, seq::text, octet_length(value)::bigint
     FROM storage_registers WHERE session = $1 AND namespace = $2 AND key >= $3
     ORDER BY key LIMIT $4";
const HEADERS_AFTER: &str = "SELECT key, seq::text, octet_length(value)::bigint
     FROM storage_registers WHERE session = $1 AND namespace = $2 AND key > $3
     ORDER BY key LIMIT $4";
/// The registers `$3` (keys) of namespace `$2` of session `$1`, each found
/// by one probe of the primary key (see
/// [`REGISTERS_FOOTPRINT_SQL`](super::REGISTERS_FOOTPRINT_SQL)).
pub const CELLS_SQL: &str = "SELECT c.* FROM unnest($3::text[]) AS f(key)
     CROSS JOIN LATERAL (
         SELECT key, value, seq::text FROM storage_registers
         WHERE session = $1 AND namespace = $2 AND key = f.key LIMIT 1) c";
const DESCRIPTORS_SQL: &str = "SELECT seq::text, id, parent, kind, ts::text,
     octet_length(payload)::bigint FROM storage_entries
     WHERE session = $1 AND seq >= $2::text::numeric AND seq < $3::text::numeric
     ORDER BY storage_entries.seq LIMIT $4";
const ENTRY_HEAD_SQL: &str = "SELECT seq::text, id, parent, kind, ts::text,
     octet_length(payload)::bigint FROM storage_entries
     WHERE session = $1 AND id = $2 AND seq < $3::text::numeric";
const FRAGMENT_SQL: &str = "SELECT id, octet_length(payload)::bigint,
     substring(payload from ($3::bigint)::int for ($4::bigint)::int)
     FROM storage_entries WHERE session = $1 AND seq = $2::text::numeric";

fn decode_header(row: &postgres::Row) -> Result<CellHeader, Failure> {
    Ok(CellHeader::read(&mut cells(row, REGISTERS))?)
}

fn decode_descriptor(row: &postgres::Row) -> Result<Descriptor, Failure> {
    Ok(Descriptor::read(&mut cells(row, ENTRIES))?)
}

fn sql_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// One cut: the read transaction, borrowed by every step.
struct View<'a, 't> {
    tx: RefCell<&'a mut Tx<'t>>,
    session: &'a str,
}

impl View<'_, '_> {
    fn query(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        op: &'static str,
    ) -> Result<Vec<postgres::Row>, Failure> {
        self.tx.borrow_mut().query(sql, params).map_err(db(op))
    }
}

impl CutView for View<'_, '_> {
    fn head(&self) -> Result<Head, StorageError> {
        let sql = format!(
            "SELECT {} FROM storage_sessions WHERE session = $1",
            codec::HEAD_COLS
        );
        let rows = self
            .query(&sql, &[&self.session], "snapshot-head")
            .map_err(storage_error)?;
        let row = rows.first().ok_or_else(|| StorageError::Corrupt {
            detail: format!(
                "{SESSIONS}: the head row of session {:?} is missing",
                self.session
            ),
        })?;
        let (next_seq, stats) = codec::decode_head(row, self.session).map_err(storage_error)?;
        Ok(Head { next_seq, stats })
    }

    fn header(
        &self,
        namespace: &Namespace,
        key: &RegisterKey,
    ) -> Result<Option<CellHeader>, StorageError> {
        let rows = self
            .query(
                HEADER_SQL,
                &[&self.session, &namespace.as_str(), &key.as_str()],
                "snapshot-header",
            )
            .map_err(storage_error)?;
        rows.first()
            .map(decode_header)
            .transpose()
            .map_err(storage_error)
    }

    fn headers(
        &self,
        namespace: &Namespace,
        range: &KeyRange,
        limit: usize,
    ) -> Result<Vec<CellHeader>, StorageError> {
        let (ns, start, lim) = (namespace.as_str(), range.start.as_str(), sql_limit(limit));
        let op = "snapshot-headers";
        let rows = match (&range.end, range.start_inclusive) {
            (Some(end), incl) => {
                let sql = if incl {
                    HEADERS_FROM_TO
                } else {
                    HEADERS_AFTER_TO
                };
                self.query(sql, &[&self.session, &ns, &start, &end.as_str(), &lim], op)
            }
            (None, incl) => {
                let sql = if incl { HEADERS_FROM } else { HEADERS_AFTER };
                self.query(sql, &[&self.session, &ns, &start, &lim], op)
            }
        }
        .map_err(storage_error)?;
        rows.iter()
            .map(decode_header)
            .collect::<Result<_, _>>()
            .map_err(storage_error)
    }

    fn cells(
        &self,
        namespace: &Namespace,
        keys: &[RegisterKey],
    ) -> Result<Vec<Option<Register>>, StorageError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let wanted = super::each_once(keys.iter().map(RegisterKey::as_str));
        let rows = self
            .query(
                CELLS_SQL,
                &[&self.session, &namespace.as_str(), &wanted],
                "snapshot-cells",
            )
            .map_err(storage_error)?;
        let mut found = BTreeMap::new();
        for row in &rows {
            let mut c = cells(row, REGISTERS);
            let key = Register::read_key(&mut c)?;
            let r = Register::read(&c, namespace, key, 1)?;
            found.insert(r.key.clone(), r);
        }
        Ok(keys.iter().map(|k| found.remove(k)).collect())
    }
}

impl SnapshotSource for PgStorage {
    fn with_cut<T>(
        &self,
        body: impl FnOnce(&dyn CutView) -> Result<T, SnapshotError>,
    ) -> Result<T, SnapshotError> {
        let mut out = None;
        self.read(|tx| {
            let view = View {
                tx: RefCell::new(tx),
                session: &self.session,
            };
            out = Some(body(&view));
            Ok(())
        })?;
        out.unwrap_or_else(|| {
            Err(SnapshotError::Storage(StorageError::BackendFault {
                reason: "postgres-snapshot: the cut ran no body".to_owned(),
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
            let rows = tx
                .query(
                    DESCRIPTORS_SQL,
                    &[&self.session, &num(lo), &num(below), &sql_limit(limit)],
                )
                .map_err(db("snapshot-descriptors"))?;
            Ok(rows
                .iter()
                .map(decode_descriptor)
                .collect::<Result<_, _>>()?)
        })
    }

    fn entry_head(&self, id: &RecordId, below: Seq) -> Result<Option<Descriptor>, StorageError> {
        self.read(|tx| {
            let row = tx
                .query_opt(ENTRY_HEAD_SQL, &[&self.session, &id.as_str(), &num(below)])
                .map_err(db("snapshot-entry-head"))?;
            Ok(row.as_ref().map(decode_descriptor).transpose()?)
        })
    }

    fn fragment_bytes(
        &self,
        head: &Descriptor,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>, StorageError> {
        let from = i64::try_from(offset).ok().and_then(|o| o.checked_add(1));
        let (Some(from), Ok(n)) = (from, i64::try_from(len)) else {
            return Err(StorageError::OutOfBounds(
                custos_core::storage::BoundError::PayloadTooLarge { len },
            ));
        };
        self.read(|tx| {
            let row = tx
                .query_opt(FRAGMENT_SQL, &[&self.session, &num(head.seq), &from, &n])
                .map_err(db("snapshot-fragment"))?;
            let mismatch = || {
                TxError::Refused(StorageError::Corrupt {
                    detail: format!("{ENTRIES} row seq {} is not entry {}", head.seq, head.id),
                })
            };
            let row = row.ok_or_else(mismatch)?;
            let c = cells(&row, ENTRIES);
            let (id, size) = (
                record_id(&c, 0, "id")?,
                c.count(1, "octet_length(payload)")?,
            );
            if id != head.id || size != head.size {
                return Err(mismatch());
            }
            let bytes: &[u8] = codec::get(&row, 2, ENTRIES, "payload")?;
            if bytes.len() > len {
                return Err(mismatch());
            }
            Ok(bytes.to_vec())
        })
    }

    fn explain_snapshot(&self, step: SnapshotStep) -> Result<Option<Vec<String>>, StorageError> {
        let s: &str = &self.session;
        let (n, k, l, lim, seq, one) = ("n", "k", "l", 10i64, num(1), 1i64);
        let keys = vec!["k"];
        let statements: Vec<(&str, Vec<&(dyn ToSql + Sync)>)> = match step {
            SnapshotStep::Head => return Ok(None),
            SnapshotStep::ExactHeader => vec![(HEADER_SQL, vec![&s, &n, &k])],
            SnapshotStep::BoundedHeaders => vec![
                (HEADERS_FROM_TO, vec![&s, &n, &k, &l, &lim]),
                (HEADERS_AFTER_TO, vec![&s, &n, &k, &l, &lim]),
            ],
            SnapshotStep::OpenHeaders => vec![
                (HEADERS_FROM, vec![&s, &n, &k, &lim]),
                (HEADERS_AFTER, vec![&s, &n, &k, &lim]),
            ],
            SnapshotStep::Cells => vec![(CELLS_SQL, vec![&s, &n, &keys])],
            SnapshotStep::Descriptors => vec![(DESCRIPTORS_SQL, vec![&s, &seq, &seq, &lim])],
            SnapshotStep::EntryHead => vec![(ENTRY_HEAD_SQL, vec![&s, &k, &seq])],
            SnapshotStep::Fragment => vec![(FRAGMENT_SQL, vec![&s, &seq, &one, &one])],
        };
        self.read(|tx| {
            tx.batch_execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_sort = off")
                .map_err(db("explain"))?;
            let mut out = Vec::new();
            for (sql, params) in &statements {
                let rows = tx
                    .query_uncached(&format!("EXPLAIN (COSTS OFF) {sql}"), params)
                    .map_err(db("explain"))?;
                for row in &rows {
                    out.push(
                        codec::text(row, 0, "explain", "QUERY PLAN", codec::MAX_TEXT_LEN)?
                            .to_owned(),
                    );
                }
            }
            Ok(Some(out))
        })
    }
}
