//! Session storage on PostgreSQL: [`PgStorage`] implements the core
//! [`Storage`] port for one **session** of a schema that holds many (see
//! [`schema`] for the tables). It mirrors the SQLite shell's store: every
//! commit loads exactly the rows its [`Commit::footprint`] names, calls
//! [`custos_core::storage::decide`] and applies its effects in the same
//! transaction; every lease step loads the head row, calls
//! [`custos_core::lease::decide`] and writes the decision back. No rule
//! lives here.
//!
//! ## Concurrency: explicit row locks
//!
//! Every writing transaction (open's admission, commit, renewal, release)
//! runs through [`Conn::write`] (READ COMMITTED) and **first** locks the
//! session's one head row in `storage_sessions` with `SELECT … FOR UPDATE`
//! (the open inserts it with `INSERT … ON CONFLICT DO NOTHING` before
//! locking, so a session is created on first use). Explicit row locks,
//! because:
//!
//! - they totally order the writers of one session — two hosts that both
//!   believe they hold the lease queue on the row, and the second decides
//!   against the state the first committed;
//! - under READ COMMITTED every statement after the lock takes a fresh
//!   snapshot, so the footprint it loads includes every earlier writer's
//!   rows (and `FOR UPDATE` itself returns the row's newest version), which
//!   SERIALIZABLE would give only with retries;
//! - one lock, always taken first, cannot deadlock; writers of different
//!   sessions never touch the same head row and do not wait for each other;
//! - ownership stays a row the lease machine decides (owner, fence, expiry
//!   in the head row), never a session-level advisory lock that a dropped
//!   connection would silently release.
//!
//! Reads run through [`Conn::read`]: one REPEATABLE READ, READ ONLY
//! snapshot per call, so a branch walk's statements all see one state.
//!
//! ## Time
//!
//! Every lease decision is judged at the server's clock
//! ([`crate::conn::server_now`]), read inside the transaction that writes
//! the decision, after the head row is locked — never the client host's
//! clock. A commit's own `ts` (stamped on its rows) is the caller's input,
//! as the core rules say.
//!
//! ## The lease
//!
//! [`PgStorage::open`] admits the writer lease with
//! [`custos_core::lease::Request::Acquire`]: another owner's unexpired
//! lease refuses the open ([`OpenError::Lease`] with
//! [`LeaseError::LeaseHeld`], nothing written); an expired one is stolen
//! with the fence bumped above the high-water mark. Every commit checks the
//! handle's `(owner, fence)` **by value** against the head row
//! ([`custos_core::lease::Request::Commit`], which also renews it); a
//! handle whose lease was stolen gets [`CommitError::Lease`]
//! (`LeaseLost`) and writes nothing. [`Storage::close`] (and drop)
//! releases the exact pair, so a new owner may open at once.
//!
//! ## Errors
//!
//! A lost connection or a server shutting down is `Unavailable` (the
//! outcome of a write in flight is unknown; what a retry of each request is
//! answered is `docs/retries.md`: a register set without an expectation or
//! a commit id applies again); a stored
//! row that does not decode is `Corrupt` (reads) or `Faulted` (commits),
//! naming the table and column; any other server failure is
//! `BackendFault` / `Faulted`. No error or `Debug` output carries the
//! connection URL or its password.
//!
//! ## The branch-scan plan check
//!
//! [`Storage::explain_branch_scan`] answers PostgreSQL's
//! `EXPLAIN (COSTS OFF)` of the four statements every branch walk runs
//! (leaf lookup, branch page, segment hop, entry fetch), bound to the
//! leaf's real place and planned with `SET LOCAL enable_seqscan = off`
//! and `enable_sort = off`. Those settings are cost penalties, not
//! prohibitions: a statement no index can answer still plans as a
//! `Seq Scan`, and one whose order no index provides still plans a `Sort`.
//! So the conformance check (no `Seq Scan on storage_entries`, no `Sort`)
//! shows that every statement has an index path that answers it in order,
//! whatever the tables' size and statistics — the same structural fact
//! SQLite's plan shows. It does **not** show what the planner picks with
//! default settings on a tiny table: there a one-page sequential scan, or
//! a bitmap scan plus a sort of a few rows, is legitimately cheaper.
//! [`PgStorage::explain_branch_scan_as_planned`] answers the plan with the
//! server's own settings; the test suite checks it on a populated,
//! vacuumed schema (200 sessions), where the walk's reads of
//! `storage_entries` and `storage_branch_entries` are index scans (the
//! branch page an index-only scan: `seq` and `kind` are in the index) and
//! nothing sorts.

pub mod schema;

mod branch;
pub use snapshot::CELLS_SQL;
mod codec;
mod snapshot;

pub use crate::open::{OpenError, Refusal};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::cols::cells;
use crate::conn::Tx;
use custos_core::lease::{self, Fence, Lease, LeaseError, LeaseState, Owner, Request};
use custos_core::storage::stored::{read_register_seq, record_id};
use custos_core::storage::types::MAX_GET_ENTRIES;
use custos_core::storage::{
    self as core_storage, BoundError, BranchScan, Commit, CommitContext, CommitDecision,
    CommitError, CommitId, CommitReceipt, Effect, Entry, EntryHead, EntryScan, Footprint,
    KeyPrefix, LastCommit, Namespace, RecordId, RecordKind, Register, RegisterKey, Seq, Stats,
    Storage, StorageError, UsageRow, UsageScan, KEPT_COMMITS, REASON_HANDLE_CLOSED,
};
use custos_core::Millis;
use postgres::types::ToSql;

use crate::conn::{
    db, decode_clock, next_got, server_now, to_i64, Conn, Failure, Stmt, Target, TxError, Want,
    CLOCK_SQL,
};
use codec::{num, ENTRIES, REGISTERS, SESSIONS, USAGE};

/// The lease lifetime a [`StorageConfig`] asks for unless told otherwise.
pub const DEFAULT_LEASE_TTL_MS: Millis = 30_000;

/// The longest session name accepted, in bytes.
pub const MAX_SESSION_LEN: usize = 128;

/// The `Faulted` / `BackendFault` reason a poisoned handle answers.
pub const REASON_POISONED: &str = "postgres-handle-poisoned";

/// What [`PgStorage::open`] opens: which schema, which session in it, and
/// the writer lease it asks for.
#[derive(Clone, Debug)]
pub struct StorageConfig {
    /// The server and schema (the URL is never displayed).
    pub target: Target,
    /// The session's name in the schema: 1..=[`MAX_SESSION_LEN`] bytes,
    /// no control characters.
    pub session: String,
    /// Who asks for the writer lease.
    pub owner: Owner,
    /// How long each grant or renewal of the lease lasts, judged at the
    /// server's clock.
    pub lease_ttl_ms: Millis,
}

impl StorageConfig {
    /// A config with the default lease ttl ([`DEFAULT_LEASE_TTL_MS`]).
    pub fn new(target: Target, session: impl Into<String>, owner: Owner) -> Self {
        StorageConfig {
            target,
            session: session.into(),
            owner,
            lease_ttl_ms: DEFAULT_LEASE_TTL_MS,
        }
    }

    /// Sets the lease ttl in milliseconds.
    pub fn ttl(mut self, ms: Millis) -> Self {
        self.lease_ttl_ms = ms;
        self
    }
}

/// A server failure as the read path's error.
pub(crate) fn storage_error(f: Failure) -> StorageError {
    match f {
        Failure::Unavailable(reason) => StorageError::Unavailable { reason },
        Failure::Corrupt(detail) => StorageError::Corrupt { detail },
        other => StorageError::BackendFault {
            reason: other.to_string(),
        },
    }
}

/// A server failure as the commit path's error.
fn commit_error(f: Failure) -> CommitError {
    match f {
        Failure::Unavailable(reason) => CommitError::Unavailable { reason },
        other => CommitError::Faulted {
            reason: other.to_string(),
        },
    }
}

/// A lease refusal on the commit path: `LeaseLost` as it is, anything
/// else (a bad ttl, a clock overflow) a fault.
fn lease_refusal(e: LeaseError) -> TxError<CommitError> {
    TxError::Refused(match e {
        lost @ LeaseError::LeaseLost { .. } => CommitError::Lease(lost),
        other => CommitError::Faulted {
            reason: format!("lease: {other}"),
        },
    })
}

fn check_session(name: &str) -> Result<(), OpenError> {
    if name.is_empty() || name.len() > MAX_SESSION_LEN || name.chars().any(char::is_control) {
        return Err(OpenError::InvalidSession { len: name.len() });
    }
    Ok(())
}

/// The session store of one session in a PostgreSQL schema. One
/// connection per handle; the writer lease is held from a successful open
/// until close (or drop).
pub struct PgStorage {
    conn: Conn,
    session: String,
    owner: Owner,
    fence: Fence,
    ttl: Millis,
    /// `Some` once closed: what the close answered.
    /// Set by `close`. Calls share it (each runs on a connection of the
    /// pool's own); `close` takes it alone, after the calls in flight.
    closed: RwLock<Option<Result<(), StorageError>>>,
}

impl std::fmt::Debug for PgStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStorage")
            .field("conn", &self.conn)
            .field("session", &self.session)
            .field("owner", &self.owner)
            .field("fence", &self.fence)
            .finish_non_exhaustive()
    }
}

impl PgStorage {
    /// Opens `config.session` in `config.target`'s schema: connects,
    /// prepares the storage component (created on first use; a newer
    /// stored version is [`OpenError::UnsupportedVersion`] with nothing
    /// written), then one admission transaction creates the session's head
    /// row if missing, locks it and acquires the writer lease at the
    /// server's clock. A refused admission rolls back: nothing written.
    pub fn open(config: StorageConfig) -> Result<PgStorage, OpenError> {
        let StorageConfig {
            target,
            session,
            owner,
            lease_ttl_ms,
        } = config;
        check_session(&session)?;
        let conn = Conn::open(target).map_err(OpenError::from)?;
        schema::COMPONENT.prepare(&conn)?;
        let lease = admit(&conn, &session, &owner, lease_ttl_ms)?;
        tracing::debug!(schema = conn.target().schema(), session = %session, owner = %owner, fence = lease.fence, "session opened");
        Ok(PgStorage {
            conn,
            session,
            owner,
            fence: lease.fence,
            ttl: lease_ttl_ms,
            closed: RwLock::new(None),
        })
    }

    /// The session's name.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// The `(owner, fence)` this handle commits under.
    pub fn lease_pair(&self) -> Result<(Owner, Fence), StorageError> {
        let _g = self.lock_read()?;
        Ok((self.owner.clone(), self.fence))
    }

    /// Renews the writer lease without committing, at the server's clock.
    /// `LeaseLost` means the handle must be reopened.
    pub fn renew_lease(&self) -> Result<Lease, CommitError> {
        self.write(|tx| {
            let (prev, _) = lock_head(tx, &self.session)?;
            let now = server_now(tx)?;
            let d = lease::decide(
                &prev,
                &Request::Renew {
                    owner: self.owner.clone(),
                    fence: self.fence,
                    now,
                    ttl: self.ttl,
                },
            )
            .map_err(lease_refusal)?;
            store_lease(tx, &self.session, &d.next)?;
            d.next.holder.ok_or_else(|| {
                TxError::Failure(Failure::Corrupt("a renewed lease has no holder".to_owned()))
            })
        })
    }

    /// [`Storage::explain_branch_scan`] with the server's own planner
    /// settings (no seq-scan penalty): what the planner really picks for
    /// the schema's current size and statistics.
    pub fn explain_branch_scan_as_planned(
        &self,
        q: &BranchScan,
    ) -> Result<Vec<String>, StorageError> {
        self.explain(q, false)
    }

    fn explain(
        &self,
        q: &BranchScan,
        penalize_seq_scan: bool,
    ) -> Result<Vec<String>, StorageError> {
        self.read(|tx| {
            if penalize_seq_scan {
                tx.batch_execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_sort = off")
                    .map_err(db("explain"))?;
            }
            Ok(branch::explain(tx, &self.session, &q.leaf)?)
        })
    }

    fn lock_read(
        &self,
    ) -> Result<RwLockReadGuard<'_, Option<Result<(), StorageError>>>, StorageError> {
        self.closed.read().map_err(|_| StorageError::BackendFault {
            reason: REASON_POISONED.to_owned(),
        })
    }

    fn lock_close(
        &self,
    ) -> Result<RwLockWriteGuard<'_, Option<Result<(), StorageError>>>, StorageError> {
        self.closed.write().map_err(|_| StorageError::BackendFault {
            reason: REASON_POISONED.to_owned(),
        })
    }

    /// Runs `body` in one write transaction (see the module docs: the body
    /// locks the head row first). A closed handle answers `Faulted`.
    fn write<T>(
        &self,
        mut body: impl FnMut(&mut Tx<'_>) -> Result<T, TxError<CommitError>>,
    ) -> Result<T, CommitError> {
        self.decide(|tx| body(tx).map(|v| (v, Vec::new())))
    }

    /// [`PgStorage::write`] for a decision whose effects travel with the
    /// `COMMIT` ([`Conn::decide`]).
    fn decide<T>(
        &self,
        body: impl FnMut(&mut Tx<'_>) -> Result<(T, Vec<Stmt>), TxError<CommitError>>,
    ) -> Result<T, CommitError> {
        let g = self.closed.read().map_err(|_| CommitError::Faulted {
            reason: REASON_POISONED.to_owned(),
        })?;
        if g.is_some() {
            return Err(CommitError::Faulted {
                reason: REASON_HANDLE_CLOSED.to_owned(),
            });
        }
        let r = self.conn.decide(body);
        drop(g);
        r.map_err(|e| e.settle(commit_error))
    }

    /// Runs `body` in one read-only snapshot. A closed handle answers
    /// `HandleClosed`.
    fn read<T>(
        &self,
        body: impl FnOnce(&mut Tx<'_>) -> Result<T, TxError<StorageError>>,
    ) -> Result<T, StorageError> {
        let g = self.lock_read()?;
        if g.is_some() {
            return Err(StorageError::HandleClosed);
        }
        let r = self.conn.read(body);
        drop(g);
        r.map_err(|e| e.settle(storage_error))
    }

    /// Admits a commit under this handle's pair at the server's clock:
    /// answers the renewed lease state to write back.
    fn admit_at(&self, prev: &LeaseState, now: Millis) -> Result<LeaseState, TxError<CommitError>> {
        let d = lease::decide(
            prev,
            &Request::Commit {
                owner: self.owner.clone(),
                fence: self.fence,
                now,
                ttl: self.ttl,
            },
        )
        .map_err(lease_refusal)?;
        Ok(d.next)
    }
}

impl Drop for PgStorage {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            tracing::warn!(error = %e, "closing a dropped PgStorage failed");
        }
    }
}

/// The admission transaction: creates the head row if missing, locks it,
/// acquires the lease at the server's clock and writes it back.
fn admit(conn: &Conn, session: &str, owner: &Owner, ttl: Millis) -> Result<Lease, OpenError> {
    let r = conn.write(|tx| {
        tx.execute(
            "INSERT INTO storage_sessions (session) VALUES ($1) ON CONFLICT (session) DO NOTHING",
            &[&session],
        )
        .map_err(db("admission"))?;
        let (prev, _) = lock_head(tx, session)?;
        let now = server_now(tx)?;
        let d = lease::decide(
            &prev,
            &Request::Acquire {
                owner: owner.clone(),
                now,
                ttl,
            },
        )
        .map_err(|e| TxError::Refused(OpenError::Lease(e)))?;
        store_lease(tx, session, &d.next)?;
        d.next.holder.ok_or_else(|| {
            TxError::Failure(Failure::Corrupt(
                "an acquired lease has no holder".to_owned(),
            ))
        })
    });
    r.map_err(|e| e.settle(Into::into))
}

// ------------------------------------------------------------- head row

/// Locks the session's head row (`FOR UPDATE`, the first statement of every
/// writing transaction after the open's insert) and decodes it.
fn lock_head(tx: &mut Tx<'_>, session: &str) -> Result<(LeaseState, (Seq, Stats)), Failure> {
    let row = tx
        .query_opt(&lock_sql(), &[&session])
        .map_err(db("lock-head"))?;
    decode_locked(row, session)
}

/// The head-row lock statement (`$1` the session), reading the schema's
/// version beside the head.
fn lock_sql() -> String {
    format!(
        "SELECT {}, {} FROM storage_sessions WHERE session = $1 FOR UPDATE",
        codec::HEAD_COLS,
        schema::COMPONENT.version_column()
    )
}

/// The head row the lock statement read, decoded; the schema at this
/// build's version.
fn decode_locked(
    row: Option<postgres::Row>,
    session: &str,
) -> Result<(LeaseState, (Seq, Stats)), Failure> {
    let row = row.ok_or_else(|| {
        Failure::Corrupt(format!(
            "{SESSIONS}: the head row of session {session:?} is missing"
        ))
    })?;
    let version: Option<i64> = row
        .try_get(row.len().saturating_sub(1))
        .map_err(db("lock-head"))?;
    schema::COMPONENT.check_written(version)?;
    Ok((
        codec::decode_lease(&row, session)?,
        codec::decode_head(&row, session)?,
    ))
}

/// The lease columns of a head row, as parameters.
struct LeaseCols<'a> {
    owner: Option<&'a str>,
    fence: Option<i64>,
    expires: Option<i64>,
    high: i64,
}

impl<'a> LeaseCols<'a> {
    fn of(next: &'a LeaseState) -> Result<Self, Failure> {
        let (owner, fence, expires) = match &next.holder {
            Some(l) => (
                Some(l.owner.as_str()),
                Some(to_i64("lease_fence", l.fence)?),
                Some(to_i64("lease_expires_at", l.expires_at)?),
            ),
            None => (None, None, None),
        };
        Ok(LeaseCols {
            owner,
            fence,
            expires,
            high: to_i64("fence_high_water", next.fence_high_water)?,
        })
    }
}

fn one_row(n: u64, session: &str) -> Result<(), Failure> {
    if n == 1 {
        Ok(())
    } else {
        Err(Failure::Corrupt(format!(
            "{SESSIONS}: the head row of session {session:?} is missing"
        )))
    }
}

/// Writes the lease state back to the (locked) head row.
fn store_lease(tx: &mut Tx<'_>, session: &str, next: &LeaseState) -> Result<(), Failure> {
    let LeaseCols {
        owner,
        fence,
        expires,
        high,
    } = LeaseCols::of(next)?;
    let n = tx
        .execute(
            "UPDATE storage_sessions SET lease_owner = $2, lease_fence = $3,
                 lease_expires_at = $4, fence_high_water = $5
             WHERE session = $1",
            &[&session, &owner, &fence, &expires, &high],
        )
        .map_err(db("store-lease"))?;
    one_row(n, session)
}

/// The statement writing the lease state, the next seq and the stats back
/// to the (locked) head row: the last of an accepted commit.
fn head_stmt(
    session: &str,
    next: &LeaseState,
    (next_seq, s): (Seq, &Stats),
) -> Result<Stmt, Failure> {
    let LeaseCols {
        owner,
        fence,
        expires,
        high,
    } = LeaseCols::of(next)?;
    Ok(Stmt::new(
        Want::Count,
        "UPDATE storage_sessions SET lease_owner = $2, lease_fence = $3,
             lease_expires_at = $4, fence_high_water = $5,
             next_seq = $6::text::numeric, usage_rows = $7::text::numeric,
             input_tokens = $8::text::numeric, output_tokens = $9::text::numeric,
             cache_read_tokens = $10::text::numeric, cache_write_tokens = $11::text::numeric,
             cost_micros = $12::text::numeric
         WHERE session = $1",
    )
    .arg(session.to_owned())
    .arg(owner.map(str::to_owned))
    .arg(fence)
    .arg(expires)
    .arg(high)
    .arg(num(next_seq))
    .arg(num(s.usage_rows))
    .arg(num(s.totals.input_tokens))
    .arg(num(s.totals.output_tokens))
    .arg(num(s.totals.cache_read_tokens))
    .arg(num(s.totals.cache_write_tokens))
    .arg(num(s.totals.cost_micros)))
}

// --------------------------------------------------------------- commit

/// The statements of [`load_commit`], in the order it decodes them.
fn commit_stmts(session: &str, fp: &Footprint, id: Option<&CommitId>) -> Vec<Stmt> {
    let mut stmts = vec![
        Stmt::new(Want::Opt, lock_sql()).arg(session.to_owned()),
        Stmt::new(Want::One, CLOCK_SQL),
    ];
    if !fp.ids.is_empty() {
        let ids: Vec<String> = fp.ids.iter().map(|i| i.as_str().to_owned()).collect();
        stmts.push(
            Stmt::new(Want::Rows, IDS_FOOTPRINT_SQL)
                .arg(session.to_owned())
                .arg(ids),
        );
    }
    if !fp.registers.is_empty() {
        let mut nss: Vec<String> = Vec::new();
        let mut keys: Vec<String> = Vec::new();
        for (ns, ks) in &fp.registers {
            for k in ks {
                nss.push(ns.as_str().to_owned());
                keys.push(k.as_str().to_owned());
            }
        }
        stmts.push(
            Stmt::new(Want::Rows, REGISTERS_FOOTPRINT_SQL)
                .arg(session.to_owned())
                .arg(nss)
                .arg(keys),
        );
    }
    if let Some(id) = id {
        stmts.push(
            Stmt::new(Want::Opt, KEPT_COMMIT_SQL)
                .arg(session.to_owned())
                .arg(id.as_str().to_owned()),
        );
    }
    stmts
}

/// A commit's read of the ids it inserts (`$1` the session, `$2` the ids):
/// which are entries, which usage rows. Each id is one probe of each
/// `(session, id)` unique index, as [`REGISTERS_FOOTPRINT_SQL`] probes its
/// key: `id = ANY($2)` was, under the generic plan of a table without
/// statistics yet, a bitmap scan of every row of the session filtered by
/// id.
pub const IDS_FOOTPRINT_SQL: &str = "SELECT f.id, e.is_entry
     FROM unnest($2::text[]) AS f(id)
     CROSS JOIN LATERAL (
         (SELECT true AS is_entry FROM storage_entries WHERE session = $1 AND id = f.id LIMIT 1)
         UNION ALL
         (SELECT false FROM storage_usage WHERE session = $1 AND id = f.id LIMIT 1)) e";

/// `keys` each once, for a per-key statement ([`ENTRIES_BY_ID_SQL`],
/// [`CELLS_SQL`]), which answers a row per key it is given.
fn each_once<'k>(keys: impl Iterator<Item = &'k str>) -> Vec<&'k str> {
    keys.collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// The entries of `$2` (ids) of session `$1`, each found by one probe of
/// the `(session, id)` index (see [`IDS_FOOTPRINT_SQL`]).
pub const ENTRIES_BY_ID_SQL: &str = "SELECT e.* FROM unnest($2::text[]) AS f(id)
     CROSS JOIN LATERAL (
         SELECT seq::text, id, parent, kind, payload, ts::text FROM storage_entries
         WHERE session = $1 AND id = f.id LIMIT 1) e";

/// A commit's read of the registers it names (`$1` the session, `$2` and
/// `$3` the namespaces and keys, pairwise). Each cell is looked up by the
/// whole primary key: a LATERAL subquery the planner cannot pull up (its
/// `LIMIT`; the key is unique anyway) is a nested loop by construction. A
/// plain join of the two, under the statement's cached generic plan, was a
/// hash join over every register of the session, so each commit read more
/// rows than the last (3,960 per lookup with 7,900 keys stored).
pub const REGISTERS_FOOTPRINT_SQL: &str = "SELECT r.namespace, r.key, r.seq::text
     FROM unnest($2::text[], $3::text[]) AS f(namespace, key)
     CROSS JOIN LATERAL (
         SELECT namespace, key, seq FROM storage_registers
         WHERE session = $1 AND namespace = f.namespace AND key = f.key
         LIMIT 1) r";

const KEPT_COMMIT_SQL: &str = "SELECT digest, seqs, next_seq::text FROM storage_kept_commits
    WHERE session = $1 AND id = $2";

/// The session's kept commit under `id`, decoded totally and bounded.
fn decode_kept_commit(row: &postgres::Row, id: &CommitId) -> Result<LastCommit, Failure> {
    Ok(LastCommit::read(
        &mut cells(row, "storage_kept_commits"),
        id,
    )?)
}

/// The statement keeping `last` after the session's kept commits and
/// forgetting the oldest beyond [`KEPT_COMMITS`], in the commit's
/// transaction.
fn keep_stmt(session: &str, last: &LastCommit) -> Stmt {
    let keep = i64::try_from(KEPT_COMMITS).unwrap_or(i64::MAX);
    Stmt::new(
        Want::Count,
        "WITH top AS (SELECT COALESCE(max(position), 0) AS p
                      FROM storage_kept_commits WHERE session = $1),
              added AS (INSERT INTO storage_kept_commits (session, id, position, digest, seqs, next_seq)
                        SELECT $1, $2, top.p + 1, $3, $4, $5::text::numeric FROM top
                        RETURNING position)
         DELETE FROM storage_kept_commits
         WHERE session = $1 AND position <= (SELECT position FROM added) - $6",
    )
    .arg(session.to_owned())
    .arg(last.id.as_str().to_owned())
    .arg(last.digest.to_vec())
    .arg(core_storage::commit::encode_seqs(&last.receipt.seqs))
    .arg(num(last.receipt.next_seq))
    .arg(keep)
}

/// Locks the head, reads the server's clock and loads exactly the commit's
/// footprint (and its kept commit, when identified), in one pipeline: the
/// server runs the reads after the lock is held.
fn load_commit(
    tx: &mut Tx<'_>,
    session: &str,
    fp: &Footprint,
    id: Option<&CommitId>,
) -> Result<(LeaseState, Millis, CommitContext), Failure> {
    let stmts = commit_stmts(session, fp, id);
    let got = tx.run(&stmts).map_err(db("load-commit"))?;
    let mut got = got.into_iter();
    let (prev, (next_seq, stats)) =
        decode_locked(next_got(&mut got, "lock-head")?.opt("lock-head")?, session)?;
    let now = decode_clock(&next_got(&mut got, "clock")?.one("clock")?)?;
    let mut ctx = CommitContext {
        next_seq,
        stats,
        ..CommitContext::default()
    };
    if !fp.ids.is_empty() {
        let rows = next_got(&mut got, "load-ids")?.rows("load-ids")?;
        for row in &rows {
            let is_entry = cells(row, ENTRIES).flag(1, "is_entry")?;
            let table = if is_entry { ENTRIES } else { USAGE };
            let id = record_id(&cells(row, table), 0, "id")?;
            if is_entry {
                ctx.ids.insert(id, RecordKind::Entry);
            } else {
                ctx.ids.entry(id).or_insert(RecordKind::Usage);
            }
        }
    }
    if !fp.registers.is_empty() {
        let rows = next_got(&mut got, "load-registers")?.rows("load-registers")?;
        for row in &rows {
            let (ns, key, seq) = read_register_seq(&mut cells(row, REGISTERS))?;
            ctx.registers.entry(ns).or_default().insert(key, seq);
        }
    }
    if let Some(id) = id {
        let row = next_got(&mut got, "load-kept-commit")?.opt("load-kept-commit")?;
        ctx.last = row.map(|r| decode_kept_commit(&r, id)).transpose()?;
    }
    Ok((prev, now, ctx))
}

/// Applies an accepted decision's effects in the commit's transaction:
/// each entry at once (it finds its branch place from the rows before it);
/// the rest — its usage rows, its register changes, the kept commit and the
/// head row with the lease — are answered as statements to send with the
/// `COMMIT` ([`Conn::decide`]). The head row is written by every accepted
/// commit (the lease's columns are on it); `ctx` gives its next seq and
/// stats when the decision moves neither. Its update needs no check of its
/// count: this transaction's lock statement read the row and holds it.
fn write_effects(
    tx: &mut Tx<'_>,
    session: &str,
    next: &LeaseState,
    ctx: &CommitContext,
    d: &CommitDecision,
) -> Result<Vec<Stmt>, Failure> {
    let mut stmts = Vec::new();
    for effect in &d.effects {
        match effect {
            Effect::InsertEntry(e) => insert_entry(tx, session, e)?,
            Effect::InsertUsage(u) => stmts.push(usage_stmt(session, u)),
            Effect::SetRegister(r) => stmts.push(set_register_stmt(session, r)),
            Effect::DeleteRegister { namespace, key, .. } => {
                stmts.push(delete_register_stmt(session, namespace, key));
            }
            // Written below, with the lease.
            Effect::Head { .. } => {}
            Effect::KeepCommit(last) => stmts.push(keep_stmt(session, last)),
        }
    }
    let head = d.head().unwrap_or((ctx.next_seq, &ctx.stats));
    stmts.push(head_stmt(session, next, head)?);
    Ok(stmts)
}

/// Inserts one entry at its place in its branch (a round trip for the
/// place, one for the rows).
fn insert_entry(tx: &mut Tx<'_>, session: &str, e: &Entry) -> Result<(), Failure> {
    let (segment, pos) = branch::link_branch(tx, session, e)?;
    tx.execute(
        "WITH b AS (
             INSERT INTO storage_branch_entries (session, segment, pos, seq, kind)
             VALUES ($1, $7, $8, $2::text::numeric, $5))
         INSERT INTO storage_entries (session, seq, id, parent, kind, payload, ts, segment, pos)
         VALUES ($1, $2::text::numeric, $3, $4, $5, $6, $9::text::numeric, $7, $8)",
        &[
            &session,
            &num(e.seq),
            &e.id.as_str(),
            &e.parent.as_ref().map(RecordId::as_str),
            &e.kind.as_str(),
            &e.payload.as_bytes(),
            &segment,
            &pos,
            &num(e.ts),
        ],
    )
    .map_err(db("insert-entry"))?;
    Ok(())
}

/// The statement inserting one usage row.
fn usage_stmt(session: &str, u: &UsageRow) -> Stmt {
    let f = &u.figures;
    Stmt::new(
        Want::Count,
        "INSERT INTO storage_usage (session, seq, id, ts, input_tokens, output_tokens,
             cache_read_tokens, cache_write_tokens, cost_micros, details)
         VALUES ($1, $2::text::numeric, $3, $4::text::numeric, $5::text::numeric,
             $6::text::numeric, $7::text::numeric, $8::text::numeric, $9::text::numeric, $10)",
    )
    .arg(session.to_owned())
    .arg(num(u.seq))
    .arg(u.id.as_str().to_owned())
    .arg(num(u.ts))
    .arg(num(f.input_tokens))
    .arg(num(f.output_tokens))
    .arg(num(f.cache_read_tokens))
    .arg(num(f.cache_write_tokens))
    .arg(num(f.cost_micros))
    .arg(u.details.as_bytes().to_vec())
}

/// The statement setting one register cell.
fn set_register_stmt(session: &str, r: &Register) -> Stmt {
    Stmt::new(
        Want::Count,
        "INSERT INTO storage_registers (session, namespace, key, value, seq)
             VALUES ($1, $2, $3, $4, $5::text::numeric)
             ON CONFLICT (session, namespace, key)
             DO UPDATE SET value = EXCLUDED.value, seq = EXCLUDED.seq",
    )
    .arg(session.to_owned())
    .arg(r.namespace.as_str().to_owned())
    .arg(r.key.as_str().to_owned())
    .arg(r.value.as_bytes().to_vec())
    .arg(num(r.seq))
}

/// The statement deleting one register cell.
fn delete_register_stmt(session: &str, namespace: &Namespace, key: &RegisterKey) -> Stmt {
    Stmt::new(
        Want::Count,
        "DELETE FROM storage_registers WHERE session = $1 AND namespace = $2 AND key = $3",
    )
    .arg(session.to_owned())
    .arg(namespace.as_str().to_owned())
    .arg(key.as_str().to_owned())
}

// ---------------------------------------------------------------- reads

/// The rows of `table` (`cols` selected) with `after < seq <= through`,
/// ascending by seq, at most `limit`. A bound that excludes nothing (no
/// `after`, no `through`) is left out of the SQL, so a full scan also
/// meets a row whose stored seq is outside the `u64` range — and fails
/// on it — instead of skipping it.
fn seq_range(
    tx: &mut Tx<'_>,
    session: &str,
    (table, cols): (&'static str, &str),
    (after, through, limit): (Option<Seq>, Option<Seq>, Option<usize>),
    op: &'static str,
) -> Result<Vec<postgres::Row>, Failure> {
    let lo = match after {
        Some(Seq::MAX) => return Ok(Vec::new()),
        Some(a) => Some(a + 1),
        None => None,
    };
    if let (Some(lo), Some(hi)) = (lo, through) {
        if hi < lo {
            return Ok(Vec::new());
        }
    }
    let lo = lo.map(num);
    let hi = through.map(num);
    let limit = sql_limit(limit);
    let mut sql = format!("SELECT {cols} FROM {table} WHERE session = $1");
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&session];
    if let Some(lo) = &lo {
        params.push(lo);
        sql.push_str(&format!(" AND seq >= ${}::text::numeric", params.len()));
    }
    if let Some(hi) = &hi {
        params.push(hi);
        sql.push_str(&format!(" AND seq <= ${}::text::numeric", params.len()));
    }
    params.push(&limit);
    sql.push_str(&format!(" ORDER BY {table}.seq LIMIT ${}", params.len()));
    tx.query(&sql, &params).map_err(db(op))
}

fn sql_limit(limit: Option<usize>) -> Option<i64> {
    limit.map(|l| i64::try_from(l).unwrap_or(i64::MAX))
}

impl Storage for PgStorage {
    fn commit(&self, commit: &Commit) -> Result<CommitReceipt, CommitError> {
        let fp = commit.footprint();
        self.decide(|tx| {
            // One round trip: the head lock, the clock and the footprint.
            let (prev, now, ctx) = load_commit(tx, &self.session, &fp, commit.id.as_ref())?;
            let next_lease = self.admit_at(&prev, now)?;
            let d = core_storage::decide(&ctx, commit).map_err(TxError::Refused)?;
            // One more: every row of the decision and the head with the
            // COMMIT (entries first find their branch place, a round trip
            // each).
            let effects = write_effects(tx, &self.session, &next_lease, &ctx, &d)?;
            Ok((d.receipt, effects))
        })
    }

    fn get_entries(&self, ids: &[RecordId]) -> Result<Vec<Option<Entry>>, StorageError> {
        if ids.len() > MAX_GET_ENTRIES {
            return Err(BoundError::TooManyIds { count: ids.len() }.into());
        }
        self.read(|tx| {
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            let wanted = each_once(ids.iter().map(RecordId::as_str));
            let rows = tx
                .query(ENTRIES_BY_ID_SQL, &[&self.session, &wanted])
                .map_err(db("get-entries"))?;
            let mut found = BTreeMap::new();
            for row in &rows {
                let e = branch::decode_entry(row)?;
                found.insert(e.id.clone(), e);
            }
            Ok(ids.iter().map(|id| found.get(id).cloned()).collect())
        })
    }

    fn get_register(
        &self,
        namespace: &Namespace,
        key: &RegisterKey,
    ) -> Result<Option<Register>, StorageError> {
        self.read(|tx| {
            let row = tx
                .query_opt(
                    "SELECT value, seq::text FROM storage_registers
                     WHERE session = $1 AND namespace = $2 AND key = $3",
                    &[&self.session, &namespace.as_str(), &key.as_str()],
                )
                .map_err(db("get-register"))?;
            let Some(row) = row else { return Ok(None) };
            let c = cells(&row, REGISTERS);
            Ok(Some(Register::read(&c, namespace, key.clone(), 0)?))
        })
    }

    fn list_registers(
        &self,
        namespace: &Namespace,
        prefix: &KeyPrefix,
    ) -> Result<Vec<Register>, StorageError> {
        self.read(|tx| {
            let base = "SELECT key, value, seq::text FROM storage_registers
                 WHERE session = $1 AND namespace = $2 AND key >= $3";
            // Keys from the prefix up to (not including) the smallest
            // string above every key that starts with it.
            let rows = match custos_core::snapshot::successor(prefix.as_str()) {
                Some(upper) => tx.query(
                    &format!("{base} AND key < $4 ORDER BY key"),
                    &[&self.session, &namespace.as_str(), &prefix.as_str(), &upper],
                ),
                None => tx.query(
                    &format!("{base} ORDER BY key"),
                    &[&self.session, &namespace.as_str(), &prefix.as_str()],
                ),
            }
            .map_err(db("list-registers"))?;
            let mut out = Vec::with_capacity(rows.len());
            for row in &rows {
                let mut c = cells(row, REGISTERS);
                let key = Register::read_key(&mut c)?;
                if !prefix.matches(&key) {
                    break;
                }
                out.push(Register::read(&c, namespace, key, 1)?);
            }
            Ok(out)
        })
    }

    fn scan_branch(&self, q: &BranchScan) -> Result<Vec<Entry>, StorageError> {
        self.read(|tx| {
            let cell = RefCell::new(tx);
            let walk = branch::walk(&cell, &self.session, &q.leaf);
            q.refine_heads(
                walk,
                |h| (&h.kind, h.seq),
                |h| branch::fetch_entry(&cell, &self.session, h),
            )
            .map_err(TxError::Refused)
        })
    }

    fn scan_entries(&self, q: &EntryScan) -> Result<Vec<Entry>, StorageError> {
        let q = (q.after, q.through, q.limit);
        let cols = (ENTRIES, branch::ENTRY_COLS);
        self.read(|tx| {
            let rows = seq_range(tx, &self.session, cols, q, "scan-entries")?;
            rows.iter()
                .map(|r| Ok(Entry::read(&mut cells(r, ENTRIES))?))
                .collect()
        })
    }

    fn scan_entry_heads(&self, q: &EntryScan) -> Result<Vec<EntryHead>, StorageError> {
        let q = (q.after, q.through, q.limit);
        let cols = (ENTRIES, "seq::text, id, parent");
        self.read(|tx| {
            let rows = seq_range(tx, &self.session, cols, q, "scan-entry-heads")?;
            rows.iter()
                .map(|r| Ok(EntryHead::read(&mut cells(r, ENTRIES))?))
                .collect()
        })
    }

    fn scan_usage(&self, q: &UsageScan) -> Result<Vec<UsageRow>, StorageError> {
        let q = (q.after, q.through, q.limit);
        let cols = (
            USAGE,
            "seq::text, id, ts::text, input_tokens::text, output_tokens::text,
             cache_read_tokens::text, cache_write_tokens::text, cost_micros::text, details",
        );
        self.read(|tx| {
            let rows = seq_range(tx, &self.session, cols, q, "scan-usage")?;
            rows.iter()
                .map(|r| Ok(UsageRow::read(&mut cells(r, USAGE))?))
                .collect()
        })
    }

    fn stats(&self) -> Result<Stats, StorageError> {
        self.read(|tx| {
            let row = tx
                .query_opt(
                    &format!(
                        "SELECT {} FROM storage_sessions WHERE session = $1",
                        codec::HEAD_COLS
                    ),
                    &[&self.session],
                )
                .map_err(db("stats"))?
                .ok_or_else(|| {
                    Failure::Corrupt(format!(
                        "{SESSIONS}: the head row of session {:?} is missing",
                        self.session
                    ))
                })?;
            Ok(codec::decode_head(&row, &self.session)?.1)
        })
    }

    fn close(&self) -> Result<(), StorageError> {
        let mut g = self.lock_close()?;
        // A close whose release was in doubt (`Unavailable`) is retried by
        // the next `close`: the handle refuses everything else from the
        // first attempt on, and releasing a lease already released is a
        // no-op, so the retry converges.
        if let Some(r) = &*g {
            if !matches!(r, Err(StorageError::Unavailable { .. })) {
                return r.clone();
            }
        }
        let released = self.conn.write(|tx| {
            let (prev, _) = lock_head(tx, &self.session)?;
            let d = lease::decide(
                &prev,
                &Request::Release {
                    owner: self.owner.clone(),
                    fence: self.fence,
                },
            )
            .map_err(TxError::Refused)?;
            if d.next != prev {
                store_lease(tx, &self.session, &d.next)?;
            }
            Ok(())
        });
        let result = match released {
            Ok(()) => Ok(()),
            Err(TxError::Refused(e)) => Err(StorageError::BackendFault {
                reason: format!("lease release refused: {e}"),
            }),
            Err(TxError::Failure(f)) => Err(storage_error(f)),
        };
        *g = Some(result.clone());
        result
    }

    fn explain_branch_scan(&self, q: &BranchScan) -> Result<Option<Vec<String>>, StorageError> {
        self.explain(q, true).map(Some)
    }
}
