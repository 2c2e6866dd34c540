//! [`SqliteLedger`]: the execution ledger (`custos_core::ledger`) over one
//! SQLite file per executor.
//!
//! The shell holds no rule. Every request runs in one transaction —
//! `BEGIN IMMEDIATE` when [`Request::writes`], a deferred one for a read —
//! that loads exactly the request's [`Request::footprint`] into a
//! [`View`], calls [`ledger::decide`] and writes the decision's effects back
//! before it commits. So `admit` compares incarnation and attach token by
//! value inside the transaction that inserts the call row, and two
//! connections racing one key produce exactly one `Fresh`. A refusal rolls
//! back and writes nothing.
//!
//! Opening the file is restart recovery ([`Request::Open`]): every
//! `admitted` row becomes `unknown`. One opener per VM.
//!
//! ## Wire (`PRAGMA user_version` 4, `application_id` [`LEDGER_APPLICATION_ID`])
//!
//! | version | table | role |
//! |---------|-------|------|
//! | 1 | `scope(session, workspace, incarnation, state, close_outcome, attach_token)` | one row per session |
//! | 1 | `call(session, op, step, source_index, incarnation, tool, state, outcome, outcome_digest, outcome_bytes)` | one row per call key |
//! | 2 | `scope_release(session, workspace, incarnation, was, released_at_ms)` | the operator release log |
//! | 3 | `call_ack(session, op, step, source_index, incarnation)` | the acknowledgement tombstones |
//! | 4 | `call.admit_request` | the [`RequestId`] an `admitted` row was inserted by (its retry answers `Fresh` again) |
//!
//! `scope.state` is `open | closing | closed` and decodes together with
//! `close_outcome`: `NULL` for `open` and `closing`, `0` for
//! `Closed(AllRetired)`, `n > 0` for `Closed(UnknownCleanup(n))`; anything
//! else is `MalformedRow`. `call.state` is `admitted | terminal | unknown`;
//! an `admitted` row's `outcome_bytes` is its reservation, a `terminal`
//! row carries its outcome, SHA-256 and size (checked by core on every
//! read), an `unknown` row holds nothing. `u64`s are stored bit-for-bit as
//! `i64`. `scope_release.was` is `closing` or `closed:<n>`.
//!
//! Open is migrate-on-open in refuse-before-write order, the same steps as
//! the catalogue's and the control catalog's (`config::open_migrated` with
//! `config::migrate_identified`): connection policy that writes nothing
//! (busy timeout, `synchronous=FULL`, read back), then one
//! `BEGIN IMMEDIATE` transaction that reads the version and application
//! id, refuses a newer or foreign file by rolling back (the file is
//! byte-untouched), and otherwise applies the missing steps 1 → 2 → 3 → 4 and
//! the identity pragmas; only then WAL, `synchronous=FULL` and foreign keys
//! (each read back), then recovery. A version-0 file is adopted only when
//! it is empty: no application id and no schema object. Those steps fail
//! with the shell's one [`OpenError`], recovery's refusal with
//! [`OpenError::Recovery`].
//!
//! ## Reading without writing
//!
//! [`SqliteLedger::open_read_only`] opens an existing ledger without
//! creating, migrating, recovering or writing anything (not even the
//! journal mode): it answers the read requests over the rows as they stand
//! (an `admitted` row left by a crashed opener still reads `admitted`,
//! since recovery is a write), refuses every request that writes, and
//! refuses with [`OpenError::NotReadable`] a file that is not a
//! ledger of [`LEDGER_VERSION`]. Its reads never wait for a writer.
//! Details: [`crate::readonly`].
//!
//! ## Bounded rows
//!
//! Every stored text is checked against [`MAX_NAME_LEN`] (names, tokens)
//! or [`MAX_WORD_LEN`] (state words) before it is copied, an outcome
//! against [`MAX_STORED_OUTCOME_BYTES`] and a digest against its 32 bytes;
//! a longer value is `MalformedRow` naming the table, row and column.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use custos_core::ledger::{
    self, Answer, CallRow, Effect, Key, Ledger, LedgerError, Limits, Release, Request, RequestId,
    RowState, Scope, ScopeState, SessionId, StoredCall, StoredRelease, StoredScope, View,
    MAX_NAME_LEN,
};
use rusqlite::{params, Connection, OptionalExtension, Row, Transaction, TransactionBehavior};
use thiserror::Error;

use crate::codec::{cells, cells_from, u64_from_sql, u64_to_sql};
pub use crate::config::OpenError;
use crate::config::{self, DEFAULT_BUSY_TIMEOUT};
use crate::fault::Fault;
use crate::readonly::{Expect, ReadOnly};

pub use custos_core::columns::MAX_WORD_LEN;
pub use custos_core::ledger::MAX_STORED_OUTCOME_BYTES;

/// What the read-only open reads.
const EXPECT: Expect = Expect {
    kind: "an execution ledger",
    application_id: LEDGER_APPLICATION_ID,
    oldest: LEDGER_VERSION,
    newest: LEDGER_VERSION,
};

/// The ledger schema version this build writes and reads.
pub const LEDGER_VERSION: i64 = 4;

/// `PRAGMA application_id` of an execution-ledger file (`"CuEL"` in ASCII).
pub const LEDGER_APPLICATION_ID: i64 = 0x4375_454C;

/// The default busy timeout (5 s).
pub const LEDGER_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Version 1: `exec_ledger`.
pub const EXEC_LEDGER_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS scope (
    session TEXT PRIMARY KEY,
    workspace TEXT NOT NULL,
    incarnation INTEGER NOT NULL,
    state TEXT NOT NULL,
    close_outcome INTEGER,
    attach_token TEXT NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS call (
    session TEXT NOT NULL,
    op TEXT NOT NULL,
    step INTEGER NOT NULL,
    source_index INTEGER NOT NULL,
    incarnation INTEGER NOT NULL,
    tool TEXT NOT NULL,
    state TEXT NOT NULL,
    outcome BLOB,
    outcome_digest BLOB,
    outcome_bytes INTEGER NOT NULL,
    PRIMARY KEY (session, op, step, source_index, incarnation)
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS call_by_state ON call (state, session);
";

/// Version 2: `exec_ledger_releases`.
pub const EXEC_LEDGER_RELEASES_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS scope_release (
    id INTEGER PRIMARY KEY,
    session TEXT NOT NULL,
    workspace TEXT NOT NULL,
    incarnation INTEGER NOT NULL,
    was TEXT NOT NULL,
    released_at_ms INTEGER NOT NULL
) STRICT;
";

/// Version 3: `exec_ledger_acks`.
pub const EXEC_LEDGER_ACKS_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS call_ack (
    session TEXT NOT NULL,
    op TEXT NOT NULL,
    step INTEGER NOT NULL,
    source_index INTEGER NOT NULL,
    incarnation INTEGER NOT NULL,
    PRIMARY KEY (session, op, step, source_index, incarnation)
) STRICT, WITHOUT ROWID;
";

/// Version 4: `exec_ledger_admit_request` — an `admitted` row keeps the
/// [`RequestId`] of the admission that inserted it, so that its retry is
/// recognised (`NULL` for an admission without one, and for every other
/// state).
pub const EXEC_LEDGER_ADMIT_REQUEST_SCHEMA: &str = "
ALTER TABLE call ADD COLUMN admit_request TEXT;
";

/// The migration chain: the step that takes version `i` to `i + 1` is
/// `LEDGER_STEPS[i]`.
pub const LEDGER_STEPS: [&str; 4] = [
    EXEC_LEDGER_SCHEMA,
    EXEC_LEDGER_RELEASES_SCHEMA,
    EXEC_LEDGER_ACKS_SCHEMA,
    EXEC_LEDGER_ADMIT_REQUEST_SCHEMA,
];

/// The Activity catalog (execution ledger) file of `id`
/// ([`custos_core::identity::activity_location`], the remote directory as
/// for the control catalog); `None` when a remote identity needs a catalog
/// directory and none can be resolved.
pub fn activity_path(id: &custos_core::identity::StorageIdentity) -> Option<PathBuf> {
    let dir = if id.is_local() {
        String::new()
    } else {
        crate::control::default_catalog_dir()?
            .to_string_lossy()
            .into_owned()
    };
    Some(PathBuf::from(custos_core::identity::activity_location(
        id, &dir,
    )))
}

/// Why the Activity records of an identity could not be counted.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ActivityError {
    /// A remote identity and no catalog directory.
    #[error("NoCatalogDir: no directory for a remote identity's Activity catalog: set CUSTOS_CATALOG_DIR or HOME")]
    NoCatalogDir,
    /// The file is there but is not a readable execution ledger.
    #[error("ActivityUnreadable: {path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: OpenError,
    },
    /// Reading it failed.
    #[error("ActivityUnreadable: {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: LedgerError,
    },
}

impl ActivityError {
    /// The failure's [`Class`](custos_core::Class): no directory for a
    /// remote identity's catalog is `FailedPrecondition` (set one); an open
    /// or a read keeps its own class.
    pub fn class(&self) -> custos_core::Class {
        match self {
            ActivityError::NoCatalogDir => custos_core::Class::FailedPrecondition,
            ActivityError::Open { source, .. } => source.class(),
            ActivityError::Read { source, .. } => source.class(),
        }
    }
}

/// The Activity records of `id` ([`Ledger::records`]), read through a
/// read-only handle that never creates or writes: 0 when the identity has
/// no Activity catalog file; a file that is not a readable ledger fails
/// closed.
pub fn activity_records(id: &custos_core::identity::StorageIdentity) -> Result<u64, ActivityError> {
    let path = activity_path(id).ok_or(ActivityError::NoCatalogDir)?;
    if !path.exists() {
        return Ok(0);
    }
    let ledger = SqliteLedger::open_read_only(&path).map_err(|source| ActivityError::Open {
        path: path.clone(),
        source,
    })?;
    ledger
        .records()
        .map_err(|source| ActivityError::Read { path, source })
}

fn db(op: &'static str) -> impl FnOnce(rusqlite::Error) -> LedgerError {
    move |e| LedgerError::BackendFault {
        reason: Fault::Db(op, e).reason(),
    }
}

/// The execution ledger over one SQLite file. One connection, serialized
/// by a mutex (a node-level actor owns it in production).
#[derive(Debug)]
pub struct SqliteLedger {
    conn: Mutex<Option<Conn>>,
    path: PathBuf,
}

/// The handle's connection: a migrated, recovered read-write one, or a
/// read-only one.
#[derive(Debug)]
enum Conn {
    Write(Connection),
    Read(ReadOnly),
}

/// [`config::migrate_identified`] with the ledger's identity and steps.
fn migrate(conn: &mut Connection) -> Result<(), OpenError> {
    config::migrate_identified(conn, LEDGER_APPLICATION_ID, &LEDGER_STEPS)
}

impl SqliteLedger {
    /// Opens (creating when missing) the ledger at `path`, migrates it to
    /// [`LEDGER_VERSION`] and runs restart recovery.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, OpenError> {
        Self::open_with(path, LEDGER_BUSY_TIMEOUT)
    }

    /// [`SqliteLedger::open`] with a busy timeout.
    pub fn open_with(path: impl AsRef<Path>, busy: Duration) -> Result<Self, OpenError> {
        let path = path.as_ref().to_path_buf();
        let conn = config::open_migrated(&path, busy, migrate)?;
        let ledger = SqliteLedger {
            conn: Mutex::new(Some(Conn::Write(conn))),
            path,
        };
        ledger.recover().map_err(OpenError::Recovery)?;
        tracing::debug!(path = %ledger.path.display(), "execution ledger opened");
        Ok(ledger)
    }

    /// Opens the existing ledger at `path` for reading only, with the
    /// default busy timeout (see "Reading without writing" in the module
    /// documentation): no creation, migration, recovery or write.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Self, OpenError> {
        Self::open_read_only_with(path, DEFAULT_BUSY_TIMEOUT)
    }

    /// [`SqliteLedger::open_read_only`] with a busy timeout.
    pub fn open_read_only_with(path: impl AsRef<Path>, busy: Duration) -> Result<Self, OpenError> {
        let path = path.as_ref().to_path_buf();
        let ro = ReadOnly::open(&path, Some(EXPECT), busy)?;
        Ok(SqliteLedger {
            conn: Mutex::new(Some(Conn::Read(ro))),
            path,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> Result<MutexGuard<'_, Option<Conn>>, LedgerError> {
        self.conn.lock().map_err(|_| LedgerError::BackendFault {
            reason: "sqlite-ledger-poisoned".to_owned(),
        })
    }
}

fn encode_scope_state(s: ScopeState) -> (&'static str, Option<i64>) {
    let (state, outcome) = s.to_stored();
    (state, outcome.map(u64_to_sql))
}

const CALL_COLS: &str =
    "op, step, source_index, incarnation, tool, state, outcome, outcome_digest, outcome_bytes, admit_request";

/// A call row of `session`: [`CALL_COLS`] from column `base` (a session
/// column may precede them), keyed and decoded.
fn keyed_call(
    r: &Row<'_>,
    base: usize,
    session: &SessionId,
) -> Result<(Key, CallRow), LedgerError> {
    StoredCall::read_keyed(&mut cells_from(r, "call", base), session)
}

fn key_params(k: &Key) -> (String, String, i64, i64, i64) {
    (
        k.session.as_str().to_owned(),
        k.op.as_str().to_owned(),
        i64::from(k.step),
        i64::from(k.source_index),
        u64_to_sql(k.incarnation),
    )
}

/// Loads the rows `req`'s footprint names, each part by its own query.
fn load(tx: &Transaction<'_>, req: &Request) -> Result<View, LedgerError> {
    let fp = req.footprint();
    let mut v = View::default();
    if let Some(session) = &fp.scope {
        v.scope = load_scope(tx, session)?;
    }
    if let Some(k) = &fp.key {
        (v.call, v.acked) = load_call(tx, k)?;
    }
    if let Some(session) = &fp.session_calls {
        v.session_calls = load_session_calls(tx, session)?;
    }
    if fp.all_admitted {
        v.admitted = load_admitted(tx)?;
    }
    if fp.totals {
        (v.ledger_bytes, v.unclean_scopes) = load_totals(tx)?;
    }
    if fp.releases {
        v.releases = load_releases(tx)?;
    }
    Ok(v)
}

/// The scope row of `session`, if any.
fn load_scope(tx: &Transaction<'_>, session: &SessionId) -> Result<Option<Scope>, LedgerError> {
    tx.prepare_cached(
        "SELECT workspace, incarnation, state, close_outcome, attach_token FROM scope WHERE session = ?1",
    )
    .map_err(db("prepare"))?
    .query_row([session.as_str()], |r| {
        let mut c = cells(r, "scope");
        Ok(StoredScope::read(&mut c, session)
            .map_err(LedgerError::from)
            .and_then(|s| s.decode(session, &c.place())))
    })
    .optional()
    .map_err(db("load-scope"))?
    .transpose()
}

/// The call row of `k`, if any, and whether `k` has a tombstone.
fn load_call(tx: &Transaction<'_>, k: &Key) -> Result<(Option<CallRow>, bool), LedgerError> {
    let p = key_params(k);
    let at = format!("({}, {}, {}, {}, {})", p.0, p.1, p.2, p.3, p.4);
    let raw = tx
        .prepare_cached(
            "SELECT tool, state, outcome, outcome_digest, outcome_bytes, admit_request FROM call
             WHERE session = ?1 AND op = ?2 AND step = ?3 AND source_index = ?4 AND incarnation = ?5",
        )
        .map_err(db("prepare"))?
        .query_row(params![p.0, p.1, p.2, p.3, p.4], |r| {
            let mut c = cells(r, "call");
            c.at(at.as_str());
            Ok(StoredCall::read(&c, 0)
                .map_err(LedgerError::from)
                .and_then(|call| call.decode(&c.place())))
        })
        .optional()
        .map_err(db("load-call"))?
        .transpose()?;
    let call = raw;
    let acked = tx
        .prepare_cached(
            "SELECT 1 FROM call_ack
             WHERE session = ?1 AND op = ?2 AND step = ?3 AND source_index = ?4 AND incarnation = ?5",
        )
        .map_err(db("prepare"))?
        .exists(params![p.0, p.1, p.2, p.3, p.4])
        .map_err(db("load-ack"))?;
    Ok((call, acked))
}

/// The call rows of `session`, ascending by key.
fn load_session_calls(
    tx: &Transaction<'_>,
    session: &SessionId,
) -> Result<Vec<(Key, CallRow)>, LedgerError> {
    let mut stmt = tx
        .prepare_cached(&format!("SELECT {CALL_COLS} FROM call WHERE session = ?1"))
        .map_err(db("prepare"))?;
    let rows = stmt
        .query_map([session.as_str()], |r| Ok(keyed_call(r, 0, session)))
        .map_err(db("load-session-calls"))?;
    let mut calls = Vec::new();
    for row in rows {
        calls.push(row.map_err(db("load-session-calls"))??);
    }
    calls.sort();
    Ok(calls)
}

/// Every `admitted` call row, ascending by key.
fn load_admitted(tx: &Transaction<'_>) -> Result<Vec<(Key, CallRow)>, LedgerError> {
    let mut stmt = tx
        .prepare_cached(&format!(
            "SELECT session, {CALL_COLS} FROM call WHERE state = 'admitted'"
        ))
        .map_err(db("prepare"))?;
    let rows = stmt
        .query_map([], |r| {
            Ok((|| {
                let c = cells(r, "call");
                let session = c.text(0, "session", MAX_NAME_LEN)?;
                keyed_call(r, 1, &c.check("session", SessionId::new(session))?)
            })())
        })
        .map_err(db("load-admitted"))?;
    let mut admitted = Vec::new();
    for row in rows {
        admitted.push(row.map_err(db("load-admitted"))??);
    }
    admitted.sort();
    Ok(admitted)
}

/// `sum(outcome_bytes)` over `admitted` and `terminal` rows, and the number
/// of scopes that are anything but `Closed(AllRetired)`.
fn load_totals(tx: &Transaction<'_>) -> Result<(u64, u64), LedgerError> {
    let bytes: i64 = tx
        .prepare_cached(
            "SELECT COALESCE(SUM(outcome_bytes), 0) FROM call WHERE state IN ('admitted', 'terminal')",
        )
        .map_err(db("prepare"))?
        .query_row([], |r| r.get(0))
        .map_err(db("load-bytes"))?;
    let unclean: i64 = tx
        .prepare_cached(
            "SELECT count(*) FROM scope WHERE NOT (state = 'closed' AND close_outcome = 0)",
        )
        .map_err(db("prepare"))?
        .query_row([], |r| r.get(0))
        .map_err(db("load-unclean"))?;
    Ok((u64_from_sql(bytes), u64_from_sql(unclean)))
}

/// The release log, in insertion order.
fn load_releases(tx: &Transaction<'_>) -> Result<Vec<Release>, LedgerError> {
    let mut stmt = tx
        .prepare_cached(
            "SELECT id, session, workspace, incarnation, was, released_at_ms FROM scope_release ORDER BY id",
        )
        .map_err(db("prepare"))?;
    let rows = stmt
        .query_map([], |r| {
            let mut c = cells(r, "scope_release");
            Ok(StoredRelease::read(&mut c)
                .map_err(LedgerError::from)
                .and_then(|release| release.decode(&c.place())))
        })
        .map_err(db("load-releases"))?;
    let mut releases = Vec::new();
    for row in rows {
        releases.push(row.map_err(db("load-releases"))??);
    }
    Ok(releases)
}

/// Writes a scope's row (inserted, or replacing the session's).
fn put_scope(tx: &Transaction<'_>, s: &Scope) -> Result<(), LedgerError> {
    let (state, outcome) = encode_scope_state(s.state);
    tx.prepare_cached(
        "INSERT OR REPLACE INTO scope (session, workspace, incarnation, state, close_outcome, attach_token)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .map_err(db("prepare"))?
    .execute(params![
        s.session.as_str(),
        s.workspace.as_str(),
        u64_to_sql(s.incarnation),
        state,
        outcome,
        s.attach_token.as_str()
    ])
    .map_err(db("put-scope"))?;
    Ok(())
}

/// Writes a call's row (inserted, or replacing the key's).
fn put_call(tx: &Transaction<'_>, k: &Key, row: &CallRow) -> Result<(), LedgerError> {
    let p = key_params(k);
    let mut request = None;
    let (state, outcome, digest): (&str, Option<&[u8]>, Option<&[u8]>) = match &row.state {
        RowState::Admitted { request: r, .. } => {
            request = r.as_ref().map(RequestId::as_str);
            ("admitted", None, None)
        }
        RowState::Unknown => ("unknown", None, None),
        RowState::Terminal {
            outcome, digest, ..
        } => ("terminal", Some(outcome), Some(digest)),
    };
    tx.prepare_cached(
        "INSERT OR REPLACE INTO call (session, op, step, source_index, incarnation, tool, state, outcome, outcome_digest, outcome_bytes, admit_request)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )
    .map_err(db("prepare"))?
    .execute(params![
        p.0,
        p.1,
        p.2,
        p.3,
        p.4,
        row.tool.as_str(),
        state,
        outcome,
        digest,
        u64_to_sql(row.outcome_bytes()),
        request
    ])
    .map_err(db("put-call"))?;
    Ok(())
}

fn write(tx: &Transaction<'_>, effects: &[Effect]) -> Result<(), LedgerError> {
    for e in effects {
        match e {
            Effect::PutScope(s) => put_scope(tx, s)?,
            Effect::PutCall(k, row) => put_call(tx, k, row)?,
            Effect::DeleteCall(k) => {
                let p = key_params(k);
                tx.prepare_cached(
                    "DELETE FROM call
                     WHERE session = ?1 AND op = ?2 AND step = ?3 AND source_index = ?4 AND incarnation = ?5",
                )
                .map_err(db("prepare"))?
                .execute(params![p.0, p.1, p.2, p.3, p.4])
                .map_err(db("delete-call"))?;
            }
            Effect::PutAck(k) => {
                let p = key_params(k);
                tx.prepare_cached(
                    "INSERT OR IGNORE INTO call_ack (session, op, step, source_index, incarnation)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .map_err(db("prepare"))?
                .execute(params![p.0, p.1, p.2, p.3, p.4])
                .map_err(db("put-ack"))?;
            }
            Effect::ForgetAcks(s) => {
                tx.prepare_cached("DELETE FROM call_ack WHERE session = ?1")
                    .map_err(db("prepare"))?
                    .execute([s.as_str()])
                    .map_err(db("forget-acks"))?;
            }
            Effect::PutRelease(r) => {
                tx.prepare_cached(
                    "INSERT INTO scope_release (session, workspace, incarnation, was, released_at_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .map_err(db("prepare"))?
                .execute(params![
                    r.session.as_str(),
                    r.workspace.as_str(),
                    u64_to_sql(r.incarnation),
                    r.was.to_stored_text(),
                    u64_to_sql(r.released_at_ms)
                ])
                .map_err(db("put-release"))?;
            }
        }
    }
    Ok(())
}

impl Ledger for SqliteLedger {
    fn execute(&self, limits: &Limits, req: &Request) -> Result<Answer, LedgerError> {
        let mut g = self.lock()?;
        let handle = g.as_mut().ok_or(LedgerError::HandleClosed)?;
        let conn = match handle {
            Conn::Write(conn) => conn,
            Conn::Read(ro) => {
                if req.writes() {
                    return Err(LedgerError::BackendFault {
                        reason: format!(
                            "read-only: {} was opened with open_read_only; nothing was written",
                            ro.path().display()
                        ),
                    });
                }
                return ro
                    .read(|tx| {
                        let view = load(tx, req)?;
                        // A read decides no effects; one that did is refused.
                        let d = ledger::decide(&view, limits, req)?;
                        if d.effects.is_empty() {
                            Ok(d.answer)
                        } else {
                            Err(LedgerError::BackendFault {
                                reason: "read-only: a read request decided a write".to_owned(),
                            })
                        }
                    })
                    .map_err(|e| LedgerError::BackendFault {
                        reason: e.to_string(),
                    })?;
            }
        };
        let behavior = if req.writes() {
            TransactionBehavior::Immediate
        } else {
            TransactionBehavior::Deferred
        };
        let tx = conn
            .transaction_with_behavior(behavior)
            .map_err(db("begin"))?;
        let view = load(&tx, req)?;
        // A refusal drops `tx`: rolled back, nothing written.
        let d = ledger::decide(&view, limits, req)?;
        if !d.effects.is_empty() {
            write(&tx, &d.effects)?;
        }
        tx.commit().map_err(db("commit"))?;
        Ok(d.answer)
    }

    fn close(&self) -> Result<(), LedgerError> {
        let mut g = self.lock()?;
        match g.take() {
            Some(Conn::Write(conn)) => conn.close().map_err(|(_, e)| db("close")(e))?,
            Some(Conn::Read(ro)) => drop(ro),
            None => {}
        }
        Ok(())
    }

    fn records(&self) -> Result<u64, LedgerError> {
        let count = |tx: &rusqlite::Transaction<'_>| -> Result<u64, LedgerError> {
            let n: i64 = tx
                .query_row(
                    "SELECT (SELECT count(*) FROM scope) + (SELECT count(*) FROM call)
                          + (SELECT count(*) FROM call_ack) + (SELECT count(*) FROM scope_release)",
                    [],
                    |r| r.get(0),
                )
                .map_err(db("count-records"))?;
            Ok(u64::try_from(n).unwrap_or(0))
        };
        let mut g = self.lock()?;
        match g.as_mut().ok_or(LedgerError::HandleClosed)? {
            Conn::Write(conn) => {
                let tx = conn
                    .transaction_with_behavior(TransactionBehavior::Deferred)
                    .map_err(db("begin"))?;
                count(&tx)
            }
            Conn::Read(ro) => ro
                .read(|tx| count(tx))
                .map_err(|e| LedgerError::BackendFault {
                    reason: e.to_string(),
                })?,
        }
    }
}
