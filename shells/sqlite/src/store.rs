//! [`SqliteStorage`]: the [`Storage`] port over one SQLite file per session.

use custos_core::storage::branch::{BranchHead, BranchRows, BranchWalk, Page, ParentLink};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use custos_core::lease::{Fence, Lease, LeaseError, LeaseState, Owner};
use custos_core::storage::types::MAX_GET_ENTRIES;
use custos_core::storage::{
    self as core_storage, BoundError, BranchScan, Commit, CommitContext, CommitError, CommitId,
    CommitReceipt, Effect, Entry, EntryHead, EntryScan, Footprint, KeyPrefix, LastCommit,
    Namespace, RecordId, RecordKind, Register, RegisterKey, Seq, Stats, Storage, StorageError,
    UsageRow, UsageScan, KEPT_COMMITS, REASON_HANDLE_CLOSED,
};
use rusqlite::{
    params, Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior,
};

use crate::codec::{self, cells, cells_from, seq_to_sql, u64_to_sql};
use crate::config::{self, Config, OpenError};
use crate::fault::Fault;
use crate::lease_rows::{self, Held, LeaseFailure};
use crate::schema::{self, APPLICATION_ID, STORAGE_VERSION};

mod snapshot;

/// The `Faulted` / `BackendFault` reason a poisoned handle answers.
pub const REASON_POISONED: &str = "sqlite-handle-poisoned";

/// The session store over one SQLite file. One connection, serialized by a
/// mutex; the writer lease is held from a successful open until close.
pub struct SqliteStorage {
    inner: Mutex<Inner>,
    path: PathBuf,
    temp: bool,
}

struct Inner {
    conn: Option<Connection>,
    closed: Option<Result<(), StorageError>>,
    held: Held,
}

impl std::fmt::Debug for SqliteStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStorage")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteStorage {
    /// Opens (creating when missing) the session file at `config.path` in
    /// refuse-before-write order:
    ///
    /// 1. connection policy that writes nothing (busy timeout,
    ///    `synchronous=FULL`, both read back);
    /// 2. one `BEGIN IMMEDIATE` **admission** transaction reads the stored
    ///    version and application id and refuses a newer or unknown version
    ///    ([`OpenError::UnsupportedVersion`]), a foreign file or a held lease
    ///    ([`LeaseError::LeaseHeld`] as [`OpenError::Lease`]) by rolling back — the file is
    ///    byte-untouched — and otherwise claims the lease through
    ///    [`custos_core::lease::decide`];
    /// 3. under the lease: schema DDL and the migration chain (each step and
    ///    its version bump in one transaction), then the WAL switch, read
    ///    back and verified.
    ///
    /// A failure after step 2 releases the claimed lease before answering.
    pub fn open(config: Config) -> Result<Self, OpenError> {
        config::refuse_unopenable(&config.path)?;
        let mut conn = Connection::open_with_flags(
            &config.path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(Fault::db("open"))?;
        config::configure(&conn, config.busy_timeout)?;
        let (version, held) = lease_rows::admit(
            &mut conn,
            &config.owner,
            config.lease_ttl_ms,
            &config.now,
            schema::check_identity,
        )?;
        if let Err(e) = finish_open(&mut conn, &held, version) {
            // Give the claim back at once rather than after the TTL.
            if let Err(re) = lease_rows::release(&mut conn, &held) {
                tracing::warn!(error = %re.reason(), "releasing the lease after a failed open failed");
            }
            return Err(e);
        }
        tracing::debug!(path = %config.path.display(), owner = %held.owner, fence = held.fence, "session opened");
        Ok(SqliteStorage {
            inner: Mutex::new(Inner {
                conn: Some(conn),
                closed: None,
                held,
            }),
            path: config.path,
            temp: false,
        })
    }

    /// Opens a fresh store in a new file under the system temp directory,
    /// deleted (with its siblings) when the handle is dropped. For tests.
    pub fn open_temp() -> Result<Self, OpenError> {
        let path = config::temp_db_path("sqlite");
        let owner = Owner::new("temp").map_err(OpenError::Lease)?;
        let mut s = SqliteStorage::open(Config::new(path, owner))?;
        s.temp = true;
        Ok(s)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The `(owner, fence)` this handle commits under.
    pub fn lease_pair(&self) -> Result<(Owner, Fence), StorageError> {
        let g = self.lock()?;
        Ok((g.held.owner.clone(), g.held.fence))
    }

    /// Branch-index diagnostics: the first `limit` segments in segment
    /// order, each with its parent place and its length (see `schema`, "The
    /// branch index"). A chain of first children is one segment; a root or
    /// a fork opens a new one. Bounded by `limit`; reads only the index.
    pub fn segments(&self, limit: usize) -> Result<Vec<Segment>, StorageError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(|tx| {
            let mut st = tx
                .prepare_cached(
                    "SELECT m.segment, m.parent_segment, m.parent_pos,
                            (SELECT count(*) FROM branch_entries b WHERE b.segment = m.segment)
                     FROM branch_meta m ORDER BY m.segment LIMIT ?1",
                )
                .map_err(Fault::db("segments"))?;
            let rows = st
                .query_map([limit], |row| {
                    Ok((|| {
                        let t = "branch_meta";
                        let parent = match (codec::opt_int(row, 1, t)?, codec::opt_int(row, 2, t)?)
                        {
                            (Some(s), Some(p)) => Some((s, p)),
                            (None, None) => None,
                            _ => {
                                return Err(Fault::Corrupt(
                                    "branch_meta: half a parent place".to_owned(),
                                ))
                            }
                        };
                        Ok::<_, Fault>(Segment {
                            segment: codec::int(row, 0, t)?,
                            parent,
                            len: codec::u64c(row, 3, "branch_entries")?,
                        })
                    })())
                })
                .map_err(Fault::db("segments"))?;
            let mut out = Vec::new();
            for r in rows {
                out.push(r.map_err(Fault::db("segments"))??);
            }
            Ok(out)
        })
    }

    /// Renews the writer lease without committing. `LeaseLost` means the
    /// handle must be reopened.
    pub fn renew_lease(&self) -> Result<Lease, CommitError> {
        self.write(|tx, held| Ok(lease_rows::renew(tx, &held.renew_request())?))
    }

    /// Records the session's identity projection (`session_id`,
    /// `parent_session_id` of the `session` row) under the lease.
    pub fn record_identity(
        &self,
        session_id: &str,
        parent: Option<&str>,
    ) -> Result<(), CommitError> {
        self.write(|tx, held| {
            let prev = lease_rows::load(tx)?;
            lease_rows::admit_commit(tx, held, &prev)?;
            tx.prepare_cached(
                "UPDATE session SET session_id = ?1, parent_session_id = ?2 WHERE singleton = 1",
            )
            .map_err(Fault::db("record-identity"))?
            .execute(params![session_id, parent])
            .map_err(Fault::db("record-identity"))?;
            Ok(())
        })
    }

    fn lock(&self) -> Result<MutexGuard<'_, Inner>, StorageError> {
        self.inner.lock().map_err(|_| StorageError::BackendFault {
            reason: REASON_POISONED.to_owned(),
        })
    }

    /// Runs `f` in a `BEGIN IMMEDIATE` transaction; commits on `Ok`.
    fn write<T>(
        &self,
        f: impl FnOnce(&Transaction<'_>, &Held) -> Result<T, WriteErr>,
    ) -> Result<T, CommitError> {
        let mut g = self.inner.lock().map_err(|_| CommitError::Faulted {
            reason: REASON_POISONED.to_owned(),
        })?;
        let Inner { conn, held, .. } = &mut *g;
        let Some(conn) = conn.as_mut() else {
            return Err(CommitError::Faulted {
                reason: REASON_HANDLE_CLOSED.to_owned(),
            });
        };
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(Fault::db("begin-immediate"))?;
        let out = f(&tx, held).map_err(CommitError::from)?;
        tx.commit().map_err(Fault::db("commit"))?;
        Ok(out)
    }

    /// Runs `f` in one deferred read transaction.
    fn read<T>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, StorageError>,
    ) -> Result<T, StorageError> {
        let mut g = self.lock()?;
        let Some(conn) = g.conn.as_mut() else {
            return Err(StorageError::HandleClosed);
        };
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .map_err(Fault::db("begin"))?;
        let out = f(&tx)?;
        tx.commit().map_err(Fault::db("end-read"))?;
        Ok(out)
    }
}

/// One branch-index segment, as [`SqliteStorage::segments`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The segment number (a parent's is always smaller than its child's).
    pub segment: i64,
    /// The `(segment, pos)` of the entry this segment forks from; `None`
    /// for a root's segment.
    pub parent: Option<(i64, i64)>,
    /// How many entries the segment holds.
    pub len: u64,
}

impl Drop for SqliteStorage {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            tracing::warn!(error = %e, "closing a dropped SqliteStorage failed");
        }
        if self.temp {
            config::remove_temp_db(&self.path);
        }
    }
}

/// A failure inside a write transaction.
pub(crate) enum WriteErr {
    Fault(Fault),
    Lease(LeaseError),
    Commit(CommitError),
}

impl From<Fault> for WriteErr {
    fn from(f: Fault) -> Self {
        WriteErr::Fault(f)
    }
}

impl From<LeaseFailure> for WriteErr {
    fn from(e: LeaseFailure) -> Self {
        match e {
            LeaseFailure::Fault(f) => WriteErr::Fault(f),
            LeaseFailure::Refused(e) => WriteErr::Lease(e),
        }
    }
}

impl From<WriteErr> for CommitError {
    fn from(e: WriteErr) -> Self {
        match e {
            WriteErr::Fault(f) => f.into(),
            WriteErr::Lease(lost @ LeaseError::LeaseLost { .. }) => CommitError::Lease(lost),
            WriteErr::Lease(other) => CommitError::Faulted {
                reason: format!("lease: {other}"),
            },
            WriteErr::Commit(c) => c,
        }
    }
}

/// Under the lease: DDL, migration chain, WAL switch, head check.
fn finish_open(conn: &mut Connection, held: &Held, mut version: i64) -> Result<(), OpenError> {
    let map = |e: LeaseFailure| match e {
        LeaseFailure::Fault(f) => OpenError::from(f),
        LeaseFailure::Refused(_) => OpenError::Lease(LeaseError::LeaseLost { held_by: None }),
    };
    if version == 0 {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(Fault::db("ddl-begin"))?;
        lease_rows::renew(&tx, &held.renew_request()).map_err(map)?;
        tx.execute_batch(schema::SCHEMA_V1)
            .map_err(Fault::db("ddl"))?;
        tx.execute_batch(schema::KEPT_COMMITS_DDL)
            .map_err(Fault::db("ddl"))?;
        tx.execute_batch(schema::WRITE_ONCE_TRIGGERS)
            .map_err(Fault::db("ddl"))?;
        tx.execute(
            "INSERT INTO session (singleton, storage_version, generation, session_id, parent_session_id,
                 next_seq, usage_rows, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_micros)
             VALUES (1, ?1, 0, NULL, NULL, ?2, 0, 0, 0, 0, 0, 0)",
            params![STORAGE_VERSION, seq_to_sql(1)],
        )
        .map_err(Fault::db("ddl"))?;
        tx.execute_batch(&format!(
            "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {STORAGE_VERSION};"
        ))
        .map_err(Fault::db("ddl"))?;
        tx.commit().map_err(Fault::db("ddl-commit"))?;
        version = STORAGE_VERSION;
    }
    while let Some(step) = schema::MIGRATIONS
        .iter()
        .find(|m| m.from_version == version)
    {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(Fault::db("migrate-begin"))?;
        lease_rows::renew(&tx, &held.renew_request()).map_err(map)?;
        tx.execute_batch(step.statements)
            .map_err(Fault::db("migrate"))?;
        version = step.from_version + 1;
        tx.execute_batch(&format!("PRAGMA user_version = {version};"))
            .map_err(Fault::db("migrate"))?;
        tx.execute(
            "UPDATE session SET storage_version = ?1 WHERE singleton = 1",
            [version],
        )
        .map_err(Fault::db("migrate"))?;
        tx.commit().map_err(Fault::db("migrate-commit"))?;
    }
    config::set_journal_mode(conn, "wal")?;
    config::set_synchronous_full(conn)?;
    let stored: i64 = conn
        .query_row(
            "SELECT storage_version FROM session WHERE singleton = 1",
            [],
            |r| r.get(0),
        )
        .map_err(Fault::db("read-session"))?;
    if stored != version {
        return Err(OpenError::Corrupt {
            detail: format!("session.storage_version {stored} differs from user_version {version}"),
        });
    }
    Ok(())
}

// ------------------------------------------------------------------ commit

/// The head columns, selected after any leading columns (see
/// [`decode_head`]).
const HEAD_COLS: &str =
    "s.next_seq, (SELECT max(seq) FROM entries), (SELECT max(seq) FROM usage_ledger),
     s.usage_rows, s.input_tokens, s.output_tokens, s.cache_read_tokens,
     s.cache_write_tokens, s.cost_micros";

/// The session head: the derived next seq (see `schema`, "The store head")
/// and the stats projection.
fn load_head(c: &Connection) -> Result<(Seq, Stats), Fault> {
    c.prepare_cached(&format!(
        "SELECT {HEAD_COLS} FROM session AS s WHERE s.singleton = 1"
    ))
    .map_err(Fault::db("load-head"))?
    .query_row([], |row| Ok(decode_head(row, 0)))
    .optional()
    .map_err(Fault::db("load-head"))?
    .ok_or_else(|| Fault::Corrupt("the session row is missing".to_owned()))?
}

/// The lease state and the session head in one statement: what a commit
/// reads before it decides.
fn load_lease_and_head(c: &Connection) -> Result<(LeaseState, (Seq, Stats)), Fault> {
    c.prepare_cached(&format!(
        "SELECT l.owner, l.fence, l.expires_at,
                COALESCE((SELECT high_water FROM lease_fence WHERE slot = 1), 0), {HEAD_COLS}
         FROM session AS s LEFT JOIN writer_lease AS l ON l.slot = 1 WHERE s.singleton = 1"
    ))
    .map_err(Fault::db("load-head"))?
    .query_row([], |row| {
        Ok((|| {
            let lease = LeaseState::read(&cells(row, "writer_lease"), 0, lease_rows::COLUMNS)?;
            Ok::<_, Fault>((lease, decode_head(row, 4)?))
        })())
    })
    .optional()
    .map_err(Fault::db("load-head"))?
    .ok_or_else(|| Fault::Corrupt("the session row is missing".to_owned()))?
}

/// Decodes [`HEAD_COLS`] starting at column `base`.
fn decode_head(row: &rusqlite::Row<'_>, base: usize) -> Result<(Seq, Stats), Fault> {
    let c = cells_from(row, "session", base);
    let floor = c.seq(0, "next_seq")?;
    let after = |col: usize, table: &'static str| -> Result<Seq, Fault> {
        match cells_from(row, table, base).opt_seq(col, "max(seq)")? {
            None => Ok(0),
            Some(v) => v
                .checked_add(1)
                .ok_or_else(|| Fault::Corrupt(format!("{table}: a row holds the largest seq"))),
        }
    };
    let next = floor
        .max(after(1, "entries")?)
        .max(after(2, "usage_ledger")?);
    Ok((next, Stats::read(&c, 3)?))
}

/// Whether the head `next_seq` and `stats` of a decision with `effects`
/// leave the `session` row as it is: the stats equal the loaded ones and an
/// inserted entry or usage row records the seq the derived head then
/// answers (`next_seq - 1`), or nothing moved.
fn head_row_unchanged(
    ctx: &CommitContext,
    next_seq: Seq,
    stats: &Stats,
    effects: &[Effect],
) -> bool {
    if *stats != ctx.stats {
        return false;
    }
    if next_seq == ctx.next_seq {
        return true;
    }
    let recorded = |seq: Seq| seq.checked_add(1) == Some(next_seq);
    effects.iter().any(|e| match e {
        Effect::InsertEntry(e) => recorded(e.seq),
        Effect::InsertUsage(u) => recorded(u.seq),
        _ => false,
    })
}

/// Loads exactly the commit's footprint into a [`CommitContext`] over the
/// head the commit read.
fn load_context(
    c: &Connection,
    (next_seq, stats): (Seq, Stats),
    fp: &Footprint,
) -> Result<CommitContext, Fault> {
    let mut ctx = CommitContext {
        next_seq,
        stats,
        ..CommitContext::default()
    };
    if !fp.ids.is_empty() {
        let mut probe = c
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM entries WHERE id = ?1),
                        EXISTS (SELECT 1 FROM usage_ledger WHERE id = ?1)",
            )
            .map_err(Fault::db("load-ids"))?;
        for id in &fp.ids {
            let (entry, usage) = probe
                .query_row([id.as_str()], |r| {
                    Ok((r.get::<_, bool>(0)?, r.get::<_, bool>(1)?))
                })
                .map_err(Fault::db("load-ids"))?;
            if entry {
                ctx.ids.insert(id.clone(), RecordKind::Entry);
            } else if usage {
                ctx.ids.insert(id.clone(), RecordKind::Usage);
            }
        }
    }
    if !fp.registers.is_empty() {
        let mut st = c
            .prepare_cached("SELECT seq FROM registers WHERE namespace = ?1 AND key = ?2")
            .map_err(Fault::db("load-registers"))?;
        for (ns, keys) in &fp.registers {
            for k in keys {
                let seq = st
                    .query_row(params![ns.as_str(), k.as_str()], |row| {
                        Ok(cells(row, "registers").seq(0, "seq"))
                    })
                    .optional()
                    .map_err(Fault::db("load-registers"))?
                    .transpose()?;
                if let Some(seq) = seq {
                    ctx.registers
                        .entry(ns.clone())
                        .or_default()
                        .insert(k.clone(), seq);
                }
            }
        }
    }
    Ok(ctx)
}

/// The kept commit under `id`, decoded totally and bounded.
fn load_kept_commit(c: &Connection, id: &CommitId) -> Result<Option<LastCommit>, Fault> {
    c.prepare_cached("SELECT digest, seqs, next_seq FROM kept_commits WHERE id = ?1")
        .map_err(Fault::db("load-kept-commit"))?
        .query_row([id.as_str()], |row| {
            Ok(LastCommit::read(&mut cells(row, "kept_commits"), id))
        })
        .optional()
        .map_err(Fault::db("load-kept-commit"))?
        .transpose()
        .map_err(Fault::from)
}

/// Keeps `last` after the kept commits, and forgets the oldest beyond
/// [`KEPT_COMMITS`], in the commit's transaction.
fn keep_commit(c: &Connection, last: &LastCommit) -> Result<(), Fault> {
    let seqs = core_storage::commit::encode_seqs(&last.receipt.seqs);
    c.prepare_cached(
        "INSERT OR REPLACE INTO kept_commits (id, position, digest, seqs, next_seq)
         VALUES (?1, (SELECT COALESCE(MAX(position), 0) + 1 FROM kept_commits), ?2, ?3, ?4)",
    )
    .map_err(Fault::db("keep-commit"))?
    .execute(params![
        last.id.as_str(),
        &last.digest[..],
        seqs,
        seq_to_sql(last.receipt.next_seq)
    ])
    .map_err(Fault::db("keep-commit"))?;
    let keep = i64::try_from(KEPT_COMMITS).unwrap_or(i64::MAX);
    c.prepare_cached(
        "DELETE FROM kept_commits WHERE position <= (SELECT MAX(position) FROM kept_commits) - ?1",
    )
    .map_err(Fault::db("keep-commit"))?
    .execute([keep])
    .map_err(Fault::db("keep-commit"))?;
    Ok(())
}

/// Applies an accepted decision's effects in order, in the commit's
/// transaction. The `session` row is written only when
/// [`head_row_unchanged`] says the derived head would not already answer
/// the decision's.
fn apply_effects(c: &Connection, ctx: &CommitContext, effects: &[Effect]) -> Result<(), Fault> {
    for effect in effects {
        match effect {
            Effect::InsertEntry(e) => insert_entry(c, e)?,
            Effect::InsertUsage(u) => insert_usage(c, u)?,
            Effect::SetRegister(r) => {
                c.prepare_cached(
                    "INSERT INTO registers (namespace, key, value, seq) VALUES (?1, ?2, ?3, ?4)
                         ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value, seq = excluded.seq",
                )
                .map_err(Fault::db("set-register"))?
                .execute(params![
                    r.namespace.as_str(),
                    r.key.as_str(),
                    r.value.as_bytes(),
                    seq_to_sql(r.seq)
                ])
                .map_err(Fault::db("set-register"))?;
            }
            Effect::DeleteRegister { namespace, key, .. } => {
                c.prepare_cached("DELETE FROM registers WHERE namespace = ?1 AND key = ?2")
                    .map_err(Fault::db("delete-register"))?
                    .execute(params![namespace.as_str(), key.as_str()])
                    .map_err(Fault::db("delete-register"))?;
            }
            Effect::Head { next_seq, stats } => {
                if !head_row_unchanged(ctx, *next_seq, stats, effects) {
                    update_head_row(c, *next_seq, stats)?;
                }
            }
            Effect::KeepCommit(last) => keep_commit(c, last)?,
        }
    }
    Ok(())
}

/// Inserts one entry, at its place in its branch.
fn insert_entry(c: &Connection, e: &Entry) -> Result<(), Fault> {
    let (segment, pos) = link_branch(c, e)?;
    c.prepare_cached(
        "INSERT INTO entries (seq, id, parent, kind, payload, ts, segment, pos)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )
    .map_err(Fault::db("insert-entry"))?
    .execute(params![
        seq_to_sql(e.seq),
        e.id.as_str(),
        e.parent.as_ref().map(RecordId::as_str),
        e.kind.as_str(),
        e.payload.as_bytes(),
        u64_to_sql(e.ts),
        segment,
        pos
    ])
    .map_err(Fault::db("insert-entry"))?;
    Ok(())
}

/// Inserts one usage row.
fn insert_usage(c: &Connection, u: &UsageRow) -> Result<(), Fault> {
    let f = &u.figures;
    c.prepare_cached(
        "INSERT INTO usage_ledger (seq, id, ts, input_tokens, output_tokens, cache_read_tokens,
             cache_write_tokens, cost_micros, details) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )
    .map_err(Fault::db("insert-usage"))?
    .execute(params![
        seq_to_sql(u.seq),
        u.id.as_str(),
        u64_to_sql(u.ts),
        u64_to_sql(f.input_tokens),
        u64_to_sql(f.output_tokens),
        u64_to_sql(f.cache_read_tokens),
        u64_to_sql(f.cache_write_tokens),
        u64_to_sql(f.cost_micros),
        u.details.as_bytes()
    ])
    .map_err(Fault::db("insert-usage"))?;
    Ok(())
}

/// Writes a decision's head (next seq and usage totals) to the `session`
/// row, which must exist.
fn update_head_row(c: &Connection, next_seq: Seq, s: &Stats) -> Result<(), Fault> {
    let n = c
        .prepare_cached(
            "UPDATE session SET next_seq = ?1, usage_rows = ?2, input_tokens = ?3, output_tokens = ?4,
                 cache_read_tokens = ?5, cache_write_tokens = ?6, cost_micros = ?7 WHERE singleton = 1",
        )
        .map_err(Fault::db("update-head"))?
        .execute(params![
            seq_to_sql(next_seq),
            u64_to_sql(s.usage_rows),
            u64_to_sql(s.totals.input_tokens),
            u64_to_sql(s.totals.output_tokens),
            u64_to_sql(s.totals.cache_read_tokens),
            u64_to_sql(s.totals.cache_write_tokens),
            u64_to_sql(s.totals.cost_micros)
        ])
        .map_err(Fault::db("update-head"))?;
    if n != 1 {
        return Err(Fault::Corrupt("the session row is missing".to_owned()));
    }
    Ok(())
}

/// Places a new entry in the branch index (see `schema` for the segments)
/// and answers its `(segment, pos)`.
fn link_branch(c: &Connection, e: &Entry) -> Result<(i64, i64), Fault> {
    let place = match &e.parent {
        None => None,
        Some(p) => {
            let row = c
                .prepare_cached(
                    "SELECT entries.segment, entries.pos, EXISTS (
                         SELECT 1 FROM branch_entries
                         WHERE branch_entries.segment = entries.segment
                           AND branch_entries.pos = entries.pos + 1)
                     FROM entries WHERE entries.id = ?1",
                )
                .map_err(Fault::db("branch-link"))?
                .query_row([p.as_str()], |row| {
                    Ok((|| {
                        Ok::<_, Fault>((
                            codec::int(row, 0, "entries")?,
                            codec::int(row, 1, "entries")?,
                            codec::int(row, 2, "branch_entries")? != 0,
                        ))
                    })())
                })
                .optional()
                .map_err(Fault::db("branch-link"))?
                .transpose()?
                .ok_or_else(|| Fault::Corrupt(format!("parent {p} is not an entry")))?;
            Some(row)
        }
    };
    let (segment, pos) = match place {
        Some((seg, pos, false)) => (
            seg,
            pos.checked_add(1).ok_or_else(|| {
                Fault::Corrupt(format!("branch segment {seg}: position overflow"))
            })?,
        ),
        parent => {
            let seg: i64 = c
                .prepare_cached("SELECT COALESCE(MAX(segment), 0) + 1 FROM branch_meta")
                .map_err(Fault::db("branch-link"))?
                .query_row([], |r| r.get(0))
                .map_err(Fault::db("branch-link"))?;
            let (ps, pp) = match parent {
                Some((s, p, _)) => (Some(s), Some(p)),
                None => (None, None),
            };
            c.prepare_cached(
                "INSERT INTO branch_meta (segment, parent_segment, parent_pos) VALUES (?1, ?2, ?3)",
            )
            .map_err(Fault::db("branch-link"))?
            .execute(params![seg, ps, pp])
            .map_err(Fault::db("branch-link"))?;
            (seg, 0)
        }
    };
    c.prepare_cached(
        "INSERT INTO branch_entries (segment, pos, seq, kind) VALUES (?1, ?2, ?3, ?4)",
    )
    .map_err(Fault::db("branch-link"))?
    .execute(params![segment, pos, seq_to_sql(e.seq), e.kind.as_str()])
    .map_err(Fault::db("branch-link"))?;
    Ok((segment, pos))
}

// -------------------------------------------------------------------- reads

const ENTRY_COLS: &str = "seq, id, parent, kind, payload, ts";

fn decode_entry(row: &rusqlite::Row<'_>) -> Result<Entry, Fault> {
    Ok(Entry::read(&mut cells(row, "entries"))?)
}

fn decode_usage(row: &rusqlite::Row<'_>) -> Result<UsageRow, Fault> {
    Ok(UsageRow::read(&mut cells(row, "usage_ledger"))?)
}

/// Collects `query_map`-style rows whose closure answers `Result<T, Fault>`.
fn collect<T>(
    st: &mut rusqlite::CachedStatement<'_>,
    params: impl rusqlite::Params,
    op: &'static str,
    decode: impl Fn(&rusqlite::Row<'_>) -> Result<T, Fault>,
) -> Result<Vec<T>, Fault> {
    let mut rows = st.query(params).map_err(Fault::db(op))?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(Fault::db(op))? {
        out.push(decode(row)?);
    }
    Ok(out)
}

/// A seq range as SQL bounds (`lo <= seq <= hi`), or `None` when empty.
fn seq_bounds(after: Option<Seq>, through: Option<Seq>) -> Option<(i64, i64)> {
    let start = match after {
        Some(Seq::MAX) => return None,
        Some(a) => a + 1,
        None => 0,
    };
    let end = through.unwrap_or(Seq::MAX);
    (end >= start).then(|| (seq_to_sql(start), seq_to_sql(end)))
}

fn sql_limit(limit: Option<usize>) -> i64 {
    limit.map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX))
}

const LEAF_SQL: &str = "SELECT entries.segment, entries.pos FROM entries WHERE entries.id = ?1";
const PAGE_SQL: &str = "SELECT branch_entries.pos, branch_entries.seq, branch_entries.kind
     FROM branch_entries
     WHERE branch_entries.segment = ?1 AND branch_entries.pos <= ?2
     ORDER BY branch_entries.pos DESC LIMIT ?3";
const HOP_SQL: &str =
    "SELECT parent_segment, parent_pos FROM branch_meta WHERE branch_meta.segment = ?1";
const FETCH_SQL: &str =
    "SELECT seq, id, parent, kind, payload, ts FROM entries WHERE entries.seq = ?1";

/// The rows a [`BranchWalk`] pages through: the file's branch index.
struct Rows<'c> {
    conn: &'c Connection,
}

/// The walk from `leaf` to its root (core's walk over these rows).
fn walk<'c>(conn: &'c Connection, leaf: &RecordId) -> BranchWalk<Rows<'c>> {
    let place = conn
        .prepare_cached(LEAF_SQL)
        .map_err(Fault::db("branch-leaf"))
        .and_then(|mut st| {
            st.query_row([leaf.as_str()], |row| {
                Ok((|| {
                    Ok::<_, Fault>((
                        codec::int(row, 0, "entries")?,
                        codec::int(row, 1, "entries")?,
                    ))
                })())
            })
            .optional()
            .map_err(Fault::db("branch-leaf"))
        })
        .and_then(Option::transpose)
        .map_err(StorageError::from);
    BranchWalk::start(Rows { conn }, leaf, place)
}

impl BranchRows for Rows<'_> {
    fn page(&mut self, segment: i64, upper: i64, limit: usize) -> Result<Page, StorageError> {
        let mut st = self
            .conn
            .prepare_cached(PAGE_SQL)
            .map_err(Fault::db("branch-page"))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        Ok(collect(
            &mut st,
            params![segment, upper, limit],
            "branch-page",
            |row| Ok(BranchHead::read(&cells(row, "branch_entries"))?),
        )?)
    }

    fn parent(&mut self, segment: i64) -> Result<Option<ParentLink>, StorageError> {
        Ok(self
            .conn
            .prepare_cached(HOP_SQL)
            .map_err(Fault::db("branch-hop"))?
            .query_row([segment], |row| {
                Ok((|| {
                    Ok::<_, Fault>((
                        codec::opt_int(row, 0, "branch_meta")?,
                        codec::opt_int(row, 1, "branch_meta")?,
                    ))
                })())
            })
            .optional()
            .map_err(Fault::db("branch-hop"))?
            .transpose()?)
    }
}

fn fetch_entry(c: &Connection, h: BranchHead) -> Result<Entry, StorageError> {
    let e = c
        .prepare_cached(FETCH_SQL)
        .map_err(Fault::db("branch-fetch"))?
        .query_row([seq_to_sql(h.seq)], |row| Ok(decode_entry(row)))
        .optional()
        .map_err(Fault::db("branch-fetch"))?
        .transpose()?
        .ok_or_else(|| {
            Fault::Corrupt(format!(
                "the branch index names seq {} which is no entry",
                h.seq
            ))
        })?;
    if e.kind != h.kind {
        return Err(Fault::Corrupt(format!(
            "entry {} disagrees with its branch-index kind",
            e.id
        ))
        .into());
    }
    Ok(e)
}

impl Storage for SqliteStorage {
    fn commit(&self, commit: &Commit) -> Result<CommitReceipt, CommitError> {
        self.write(|tx, held| {
            let (lease, head) = load_lease_and_head(tx)?;
            lease_rows::admit_commit(tx, held, &lease)?;
            let mut ctx = load_context(tx, head, &commit.footprint())?;
            if let Some(id) = &commit.id {
                ctx.last = load_kept_commit(tx, id)?;
            }
            let d = core_storage::decide(&ctx, commit).map_err(WriteErr::Commit)?;
            apply_effects(tx, &ctx, &d.effects)?;
            Ok(d.receipt)
        })
    }

    fn get_entries(&self, ids: &[RecordId]) -> Result<Vec<Option<Entry>>, StorageError> {
        if ids.len() > MAX_GET_ENTRIES {
            return Err(BoundError::TooManyIds { count: ids.len() }.into());
        }
        self.read(|tx| {
            let mut st = tx
                .prepare_cached(&format!("SELECT {ENTRY_COLS} FROM entries WHERE id = ?1"))
                .map_err(Fault::db("get-entries"))?;
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                let e = st
                    .query_row([id.as_str()], |row| Ok(decode_entry(row)))
                    .optional()
                    .map_err(Fault::db("get-entries"))?
                    .transpose()?;
                out.push(e);
            }
            Ok(out)
        })
    }

    fn get_register(
        &self,
        namespace: &Namespace,
        key: &RegisterKey,
    ) -> Result<Option<Register>, StorageError> {
        self.read(|tx| {
            Ok(tx
                .prepare_cached(
                    "SELECT value, seq FROM registers WHERE namespace = ?1 AND key = ?2",
                )
                .map_err(Fault::db("get-register"))?
                .query_row(params![namespace.as_str(), key.as_str()], |row| {
                    Ok(Register::read(
                        &cells(row, "registers"),
                        namespace,
                        key.clone(),
                        0,
                    ))
                })
                .optional()
                .map_err(Fault::db("get-register"))?
                .transpose()?)
        })
    }

    fn list_registers(
        &self,
        namespace: &Namespace,
        prefix: &KeyPrefix,
    ) -> Result<Vec<Register>, StorageError> {
        self.read(|tx| {
            let mut st = tx
                .prepare_cached(
                    "SELECT key, value, seq FROM registers WHERE namespace = ?1 AND key >= ?2 ORDER BY key",
                )
                .map_err(Fault::db("list-registers"))?;
            let mut rows = st
                .query(params![namespace.as_str(), prefix.as_str()])
                .map_err(Fault::db("list-registers"))?;
            let mut out = Vec::new();
            while let Some(row) = rows.next().map_err(Fault::db("list-registers"))? {
                let mut c = cells(row, "registers");
                let key = Register::read_key(&mut c)?;
                if !prefix.matches(&key) {
                    break;
                }
                out.push(Register::read(&c, namespace, key, 1).map_err(Fault::from)?);
            }
            Ok(out)
        })
    }

    fn scan_branch(&self, q: &BranchScan) -> Result<Vec<Entry>, StorageError> {
        self.read(|tx| {
            let walk = walk(tx, &q.leaf);
            q.refine_heads(walk, |h| (&h.kind, h.seq), |h| fetch_entry(tx, h))
        })
    }

    fn scan_entries(&self, q: &EntryScan) -> Result<Vec<Entry>, StorageError> {
        let Some((lo, hi)) = seq_bounds(q.after, q.through) else {
            return self.read(|_| Ok(Vec::new()));
        };
        self.read(|tx| {
            let mut st = tx
                .prepare_cached(&format!(
                    "SELECT {ENTRY_COLS} FROM entries WHERE seq >= ?1 AND seq <= ?2 ORDER BY seq LIMIT ?3"
                ))
                .map_err(Fault::db("scan-entries"))?;
            Ok(collect(&mut st, params![lo, hi, sql_limit(q.limit)], "scan-entries", decode_entry)?)
        })
    }

    fn scan_entry_heads(&self, q: &EntryScan) -> Result<Vec<EntryHead>, StorageError> {
        let Some((lo, hi)) = seq_bounds(q.after, q.through) else {
            return self.read(|_| Ok(Vec::new()));
        };
        self.read(|tx| {
            let mut st = tx
                .prepare_cached(
                    "SELECT seq, id, parent FROM entries WHERE seq >= ?1 AND seq <= ?2 ORDER BY seq LIMIT ?3",
                )
                .map_err(Fault::db("scan-entry-heads"))?;
            Ok(collect(&mut st, params![lo, hi, sql_limit(q.limit)], "scan-entry-heads", |row| {
                Ok(EntryHead::read(&mut cells(row, "entries"))?)
            })?)
        })
    }

    fn scan_usage(&self, q: &UsageScan) -> Result<Vec<UsageRow>, StorageError> {
        let Some((lo, hi)) = seq_bounds(q.after, q.through) else {
            return self.read(|_| Ok(Vec::new()));
        };
        self.read(|tx| {
            let mut st = tx
                .prepare_cached(
                    "SELECT seq, id, ts, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
                            cost_micros, details
                     FROM usage_ledger WHERE seq >= ?1 AND seq <= ?2 ORDER BY seq LIMIT ?3",
                )
                .map_err(Fault::db("scan-usage"))?;
            Ok(collect(&mut st, params![lo, hi, sql_limit(q.limit)], "scan-usage", decode_usage)?)
        })
    }

    fn stats(&self) -> Result<Stats, StorageError> {
        self.read(|tx| Ok(load_head(tx)?.1))
    }

    fn close(&self) -> Result<(), StorageError> {
        let mut g = self.lock()?;
        if let Some(r) = &g.closed {
            return r.clone();
        }
        let result = match g.conn.take() {
            None => Ok(()),
            Some(mut conn) => {
                let released = lease_rows::release(&mut conn, &g.held).map_err(StorageError::from);
                let closed = conn.close().map_err(|(_, e)| StorageError::BackendFault {
                    reason: format!("sqlite-close: {e}"),
                });
                released.and(closed)
            }
        };
        g.closed = Some(result.clone());
        result
    }

    fn explain_branch_scan(&self, q: &BranchScan) -> Result<Option<Vec<String>>, StorageError> {
        let _ = q; // Every branch scan runs the same four statements.
        self.read(|tx| {
            let mut out = Vec::new();
            for sql in [LEAF_SQL, PAGE_SQL, HOP_SQL, FETCH_SQL] {
                let mut st = tx
                    .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                    .map_err(Fault::db("explain"))?;
                let n = st.parameter_count();
                let nulls: Vec<rusqlite::types::Null> = vec![rusqlite::types::Null; n];
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
