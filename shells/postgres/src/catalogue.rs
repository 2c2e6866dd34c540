//! The catalogue on PostgreSQL: `custos_core::catalogue` (registrations,
//! names, visibility, subtitles, workspace defaults, recent folders,
//! custody, deletion marks and delegates) persisted in one PostgreSQL
//! schema, shared by every host that opens the same [`Target`].
//!
//! [`PgCatalogue`] implements the [`Catalogue`] port and holds no rule of its
//! own; it mirrors the SQLite shell (`custos_sqlite::catalogue`). Every
//! [`Catalogue::apply`] is one [`Conn::write`] transaction that
//!
//! 1. locks the catalogue's one head row (`catalogue_head`, holding the
//!    revision and the recent-folder sequence) with `SELECT … FOR UPDATE`,
//! 2. loads the rows of the request's [`footprint`] into a partial
//!    [`CatalogueState`],
//! 3. calls [`catalogue::decide`], and
//! 4. applies the decision's effects in order, one statement each
//!    (`crate::effects`),
//!
//! and commits. A refusal rolls back: nothing is written. Every read is one
//! [`Conn::read`] transaction (one REPEATABLE READ snapshot) that loads the
//! rows it needs and calls the same pure read the memory backend calls.
//!
//! ## Concurrency: explicit row locks
//!
//! Writers take an explicit row lock on the head row, first, because it
//! totally orders every writer of the catalogue: a writer that got the lock
//! runs its later READ COMMITTED statements after every earlier writer
//! committed, so the footprint it loads is current (the delegate limit, a
//! creation key, a custody row cannot be decided on a stale read), and with
//! one lock always taken first no two writers can deadlock. No
//! session-level advisory lock is involved (the only advisory lock is the
//! transaction-scoped one that guards schema creation in
//! [`Component::prepare`]). The head row is created with the schema.
//!
//! ## Time
//!
//! The catalogue makes no decision on time. The `now` of a `Reserve`, an
//! `ImportSession` or a `ClaimDelegate` is caller data — a recorded
//! timestamp (`created_at_ms`, `last_contact_ms`), not an expiry — and is
//! stored as given, exactly as the SQLite shell stores it; the server's
//! clock is not read.
//!
//! ## Schema
//!
//! One [`Component`] named [`COMPONENT`], its version recorded in
//! `custos_versions`, created by [`PgCatalogue::open`] (a newer stored
//! version is refused before anything is written):
//!
//! | version | creates |
//! |---|---|
//! | 1 | `catalogue_head`, `catalogue_sessions`, `catalogue_workspace_defaults`, `catalogue_session_names`, `catalogue_session_archives`, `catalogue_session_subtitles`, `catalogue_recent_folders`, `catalogue_session_moves`, `catalogue_session_deletions`, `catalogue_delegate_sessions` |
//! | 2 | the access plane ([`crate::access`]): `access_principals`, `access_credentials`, `access_claims`, `access_memberships` |
//! | 3 | `catalogue_deleted`: the remembered deletions (session id, the revision its deletion made; at most `DELETED_KEPT`) a retried `Delete` is answered from |
//!
//! Version 1 holds what SQLite catalogue version 4 holds. Every text column
//! is `COLLATE "C"`, so pages order and continue by bytes, as the core's
//! maps do.
//!
//! ## Rows decode totally
//!
//! A stored value that breaks its grammar fails the read with
//! [`CatalogueError::Invalid`] naming the table, row and column (a profile,
//! an executor, a pool, a workspace, a state word, a move row, a delegate
//! row, a negative `bigint`, a text longer than its grammar's byte bound, a
//! missing head row) — never read as absent — except a subtitle, which
//! reads as none, as in the SQLite shell. A write whose footprint holds
//! such a row is refused the same way, writing nothing. A `u64` above
//! `i64::MAX` (a timestamp, say) cannot be stored in a `bigint`: the write
//! is refused with `Invalid`, nothing written.
//!
//! ## Reading without writing
//!
//! [`PgCatalogue::open_read_only`] never creates, migrates or writes: it
//! refuses with [`OpenError::NotReadable`] a schema that holds no catalogue
//! of [`CATALOGUE_VERSION`] (a missing schema included, which stays
//! missing), its reads are READ ONLY transactions, and its
//! [`Catalogue::apply`] is refused with `BackendFault` before the server is
//! asked anything.
//!
//! ## Errors
//!
//! A lost or refused connection, or a server shutting down, is
//! [`CatalogueError::Unavailable`] (a write in flight may have applied;
//! what a retry of each request is answered is `docs/retries.md`); other
//! server failures are
//! `BackendFault`. No error and no `Debug` output shows the connection URL
//! or its password.

pub use crate::open::{OpenError, Refusal};
#[cfg(doc)]
use custos_core::catalogue::Catalogue;
use std::fmt;

use crate::cols::cells;
use custos_core::catalogue::rows::{
    CatalogueRows, Defaults, Delegates, Load, RowsCatalogue, RowsRead, Sessions,
};
use custos_core::catalogue::{
    self, footprint, CatalogueError, CatalogueState, Footprint, Outcome, Request, StoredDelegate,
    StoredSession,
};
use postgres::Row;

use crate::conn::Tx as Transaction;

use crate::conn::Conn;
use crate::conn::{db, next_got, Component, Failure, Stmt, TxError, Want};
use crate::effects::EffectError;
use crate::Target;

/// The component name recorded in `custos_versions` (and every table's
/// prefix).
pub const COMPONENT: &str = "catalogue";

/// The catalogue schema version this build writes and reads.
pub const CATALOGUE_VERSION: i64 = 3;

pub use custos_core::columns::MAX_WORD_LEN;

/// The schema steps; step `i` takes version `i` to `i + 1`.
pub const STEPS: &[&str] = &[
    "
CREATE TABLE catalogue_head (
    singleton integer PRIMARY KEY CHECK (singleton = 1),
    revision bigint NOT NULL,
    recent_seq bigint NOT NULL
);
INSERT INTO catalogue_head (singleton, revision, recent_seq) VALUES (1, 0, 0);
CREATE TABLE catalogue_sessions (
    session_id text COLLATE \"C\" PRIMARY KEY,
    creation_key text COLLATE \"C\" NOT NULL UNIQUE,
    name text COLLATE \"C\" NOT NULL,
    workspace text COLLATE \"C\" NOT NULL,
    profile text COLLATE \"C\" NOT NULL DEFAULT '',
    model text COLLATE \"C\" NOT NULL DEFAULT '',
    executor text COLLATE \"C\" NOT NULL DEFAULT '',
    pool text COLLATE \"C\" NOT NULL DEFAULT '',
    created_at_ms bigint NOT NULL,
    state text COLLATE \"C\" NOT NULL
);
CREATE TABLE catalogue_workspace_defaults (
    workspace text COLLATE \"C\" PRIMARY KEY,
    session_id text COLLATE \"C\" NOT NULL REFERENCES catalogue_sessions (session_id)
);
CREATE INDEX catalogue_workspace_defaults_session ON catalogue_workspace_defaults (session_id);
CREATE TABLE catalogue_session_names (
    session_id text COLLATE \"C\" PRIMARY KEY REFERENCES catalogue_sessions (session_id),
    name text COLLATE \"C\" NOT NULL
);
CREATE TABLE catalogue_session_archives (
    session_id text COLLATE \"C\" PRIMARY KEY REFERENCES catalogue_sessions (session_id)
);
CREATE TABLE catalogue_session_subtitles (
    session_id text COLLATE \"C\" PRIMARY KEY REFERENCES catalogue_sessions (session_id),
    subtitle text COLLATE \"C\" NOT NULL
);
CREATE TABLE catalogue_recent_folders (
    id bigint PRIMARY KEY,
    path text COLLATE \"C\" NOT NULL UNIQUE
);
CREATE TABLE catalogue_session_moves (
    session_id text COLLATE \"C\" PRIMARY KEY REFERENCES catalogue_sessions (session_id),
    op text COLLATE \"C\" NOT NULL,
    peer text COLLATE \"C\" NOT NULL,
    state text COLLATE \"C\" NOT NULL
);
CREATE INDEX catalogue_session_moves_state ON catalogue_session_moves (state);
CREATE TABLE catalogue_session_deletions (
    session_id text COLLATE \"C\" PRIMARY KEY REFERENCES catalogue_sessions (session_id)
);
CREATE TABLE catalogue_delegate_sessions (
    spawner text COLLATE \"C\" NOT NULL,
    parent_session text COLLATE \"C\" NOT NULL,
    session_id text COLLATE \"C\" NOT NULL UNIQUE REFERENCES catalogue_sessions (session_id),
    last_contact_ms bigint NOT NULL,
    PRIMARY KEY (spawner, parent_session)
);
",
    crate::access::STEP_ACCESS,
    "
CREATE TABLE catalogue_deleted (
    session_id text COLLATE \"C\" PRIMARY KEY,
    revision bigint NOT NULL CHECK (revision >= 0)
);
",
];

/// The catalogue's versioned schema.
pub const SCHEMA: Component = Component {
    name: COMPONENT,
    steps: STEPS,
};

/// A catalogue in one PostgreSQL schema, through one reconnecting
/// connection. `Send + Sync`; calls on one handle are serialized by its
/// connection.
pub struct PgCatalogue {
    pub(crate) conn: Conn,
    pub(crate) read_only: bool,
}

impl fmt::Debug for PgCatalogue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgCatalogue")
            .field("conn", &self.conn)
            .field("read_only", &self.read_only)
            .finish()
    }
}

impl PgCatalogue {
    /// Connects to `target` and creates (or migrates) the catalogue's
    /// tables in its schema. A newer stored version is refused with
    /// [`OpenError::UnsupportedVersion`] before anything is written.
    pub fn open(target: Target) -> Result<PgCatalogue, OpenError> {
        let conn = Conn::open(target)?;
        SCHEMA.prepare(&conn)?;
        Ok(PgCatalogue {
            conn,
            read_only: false,
        })
    }

    /// Connects to `target` for reading only: never creates, migrates or
    /// writes anything; a schema without a catalogue of
    /// [`CATALOGUE_VERSION`] (a missing one included) is refused with
    /// [`OpenError::NotReadable`]. The handle's [`Catalogue::apply`] is
    /// refused with `BackendFault`, nothing touched.
    pub fn open_read_only(target: Target) -> Result<PgCatalogue, OpenError> {
        let conn = Conn::open(target)?;
        let schema = conn.target().schema().to_owned();
        let found =
            conn.read(|tx| stored_version(tx, &schema))
                .map_err(|e: TxError<()>| match e {
                    TxError::Failure(Failure::Unavailable(reason)) => {
                        OpenError::Unavailable { reason }
                    }
                    TxError::Failure(f) => OpenError::Fault {
                        reason: f.to_string(),
                    },
                    TxError::Refused(()) => OpenError::Fault {
                        reason: "version probe refused".to_owned(),
                    },
                })?;
        match found {
            Some(v) if v == CATALOGUE_VERSION => Ok(PgCatalogue {
                conn,
                read_only: true,
            }),
            Some(v) => Err(OpenError::NotReadable {
                schema,
                rule: Refusal::Version {
                    what: "catalogue",
                    found: v,
                    supported: CATALOGUE_VERSION,
                },
            }),
            None => Err(OpenError::NotReadable {
                schema,
                rule: Refusal::NotStored { what: "catalogue" },
            }),
        }
    }

    /// The PostgreSQL schema holding the catalogue.
    pub fn schema(&self) -> &str {
        self.conn.target().schema()
    }

    /// Whether this handle was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The backend's process id of the handle's connection (tests terminate
    /// it to exercise reconnection).
    pub fn backend_pid(&self) -> Result<i32, CatalogueError> {
        self.conn.backend_pid().map_err(failure)
    }
}

/// The catalogue's stored version in `schema`, `None` when the schema holds
/// no version table or no catalogue row. Reads only.
fn stored_version(tx: &mut Transaction<'_>, schema: &str) -> Result<Option<i64>, TxError<()>> {
    let exists: bool = tx
        .query_one(
            "SELECT to_regclass(quote_ident($1) || '.custos_versions') IS NOT NULL",
            &[&schema],
        )
        .and_then(|r| r.try_get(0))
        .map_err(db("catalogue-probe"))?;
    if !exists {
        return Ok(None);
    }
    let row = tx
        .query_opt(
            "SELECT version FROM custos_versions WHERE component = $1",
            &[&COMPONENT],
        )
        .map_err(db("catalogue-version"))?;
    match row {
        None => Ok(None),
        Some(r) => Ok(Some(r.try_get(0).map_err(db("catalogue-version"))?)),
    }
}

// ------------------------------------------------------------------ errors

type Res<T> = Result<T, CatalogueError>;
type Tx<T> = Result<T, TxError<CatalogueError>>;

/// A server failure as the port's error.
fn failure(f: Failure) -> CatalogueError {
    match f {
        Failure::Unavailable(reason) => CatalogueError::Unavailable { reason },
        Failure::Corrupt(detail) => CatalogueError::Invalid {
            what: "stored row",
            detail,
        },
        other => CatalogueError::BackendFault {
            reason: other.to_string(),
        },
    }
}

fn finish<T>(r: Tx<T>) -> Res<T> {
    r.map_err(|e| e.settle(failure))
}

fn refuse(e: CatalogueError) -> TxError<CatalogueError> {
    TxError::Refused(e)
}

fn bad(what: &'static str, detail: impl Into<String>) -> TxError<CatalogueError> {
    refuse(CatalogueError::Invalid {
        what,
        detail: detail.into(),
    })
}

fn pg(op: &'static str) -> impl Fn(postgres::Error) -> TxError<CatalogueError> {
    move |e| TxError::Failure(db(op)(e))
}

// ------------------------------------------------------------------ decode

fn raw_session(r: &Row) -> Tx<StoredSession> {
    Ok(StoredSession::read(&mut cells(r, "catalogue_sessions"))?)
}

/// The session rows `where_` selects, as a pipeline statement.
pub(crate) fn sessions_sql(where_: &str) -> String {
    format!("{} {where_}", StoredSession::SELECT)
}

/// Session rows (of [`sessions_sql`]) into `state`.
pub(crate) fn put_sessions(state: &mut CatalogueState, rows: &[Row]) -> Tx<()> {
    for r in rows {
        state.put_stored_session(raw_session(r)?).map_err(refuse)?;
    }
    Ok(())
}

/// Decodes the head row into `state` (revision and recent sequence); a
/// missing head row is `Invalid`, never read as revision 0.
fn head(state: &mut CatalogueState, row: Option<&Row>) -> Tx<()> {
    let r = row.ok_or_else(|| bad("stored row", "catalogue_head: the head row is missing"))?;
    let mut c = cells(r, "catalogue_head");
    c.at("1");
    state.revision = c.unsigned(0, "revision")?;
    state.recent_seq = c.unsigned(1, "recent_seq")?;
    Ok(())
}

/// Reads the head row (no lock: reads).
pub(crate) fn load_meta(tx: &mut Transaction<'_>, state: &mut CatalogueState) -> Tx<()> {
    let row = tx
        .query_opt(
            "SELECT revision, recent_seq FROM catalogue_head WHERE singleton = 1",
            &[],
        )
        .map_err(pg("load-head"))?;
    head(state, row.as_ref())
}

/// The head-row lock statement, reading the schema's version beside it.
pub(crate) fn lock_sql() -> String {
    format!(
        "SELECT revision, recent_seq, {} FROM catalogue_head WHERE singleton = 1 FOR UPDATE",
        SCHEMA.version_column()
    )
}

/// The head row the lock statement read, into `state`; the schema at this
/// build's version.
pub(crate) fn decode_locked(state: &mut CatalogueState, row: Option<&Row>) -> Tx<()> {
    if let Some(r) = row {
        let version: Option<i64> = r.try_get(2).map_err(pg("lock-head"))?;
        SCHEMA.check_written(version).map_err(TxError::Failure)?;
    }
    head(state, row)
}

fn delegates_sql(where_: &str) -> String {
    format!(
        "SELECT spawner, parent_session, session_id, last_contact_ms
         FROM catalogue_delegate_sessions {where_}"
    )
}

fn put_delegates(state: &mut CatalogueState, rows: &[Row]) -> Tx<()> {
    let mut stored = Vec::with_capacity(rows.len());
    for r in rows {
        stored.push(StoredDelegate::read(&mut cells(
            r,
            "catalogue_delegate_sessions",
        ))?);
    }
    state.put_stored_delegates(stored).map_err(refuse)
}

fn defaults_sql(where_: &str) -> String {
    format!("SELECT workspace, session_id FROM catalogue_workspace_defaults {where_}")
}

fn put_defaults(state: &mut CatalogueState, rows: &[Row]) -> Tx<()> {
    for r in rows {
        let (ws, id) = catalogue::read_default(&mut cells(r, "catalogue_workspace_defaults"))?;
        state.put_stored_default(ws, id).map_err(refuse)?;
    }
    Ok(())
}

const RECENT_SQL: &str = "SELECT id, path FROM catalogue_recent_folders";

fn put_recent(state: &mut CatalogueState, rows: &[Row]) -> Tx<()> {
    for r in rows {
        let (id, path) = catalogue::read_recent(&mut cells(r, "catalogue_recent_folders"))?;
        state.put_stored_recent(id, path).map_err(refuse)?;
    }
    Ok(())
}

/// The remembered deletions (a retried `Delete` is answered from them).
const DELETED_SQL: &str = "SELECT session_id, revision FROM catalogue_deleted";

fn put_deleted(state: &mut CatalogueState, rows: &[Row]) -> Tx<()> {
    for r in rows {
        let (id, rev) = catalogue::read_deleted(&mut cells(r, "catalogue_deleted"))?;
        state.put_stored_deletion(id, rev).map_err(refuse)?;
    }
    Ok(())
}

/// Where a row set goes.
#[derive(Clone, Copy)]
enum Part {
    Sessions,
    Defaults,
    Recent,
    Deleted,
    Delegates,
}

/// The statement of one [`Load`] and where its rows go: the one SQL text
/// a read sends alone and a write pipelines behind its head lock.
fn statement(load: Load<'_>) -> (Part, Stmt) {
    let rows = |sql: String| Stmt::new(Want::Rows, sql);
    let text = |v: &str| v.to_owned();
    match load {
        Load::Sessions(which) => (
            Part::Sessions,
            match which {
                Sessions::Id(id) => rows(sessions_sql("WHERE s.session_id = $1")).arg(text(id)),
                Sessions::CreationKey(k) => {
                    rows(sessions_sql("WHERE s.creation_key = $1")).arg(text(k))
                }
                Sessions::Page {
                    archived,
                    after,
                    fetch,
                } => rows(sessions_sql(
                    "WHERE (a.session_id IS NOT NULL) = $1
                       AND ($2::text IS NULL OR s.session_id > $2::text)
                     ORDER BY s.session_id LIMIT $3",
                ))
                .arg(archived)
                .arg(after.map(str::to_owned))
                .arg(i64::try_from(fetch).unwrap_or(i64::MAX)),
                Sessions::Moving => rows(sessions_sql("WHERE m.state = 'moving'")),
                Sessions::Deleting => rows(sessions_sql("WHERE d.session_id IS NOT NULL")),
            },
        ),
        Load::Defaults(Defaults::Workspace(ws)) => (
            Part::Defaults,
            rows(defaults_sql("WHERE workspace = $1")).arg(text(ws)),
        ),
        Load::Defaults(Defaults::Naming(id)) => (
            Part::Defaults,
            rows(defaults_sql("WHERE session_id = $1")).arg(text(id)),
        ),
        Load::Recent => (Part::Recent, rows(RECENT_SQL.to_owned())),
        Load::Deleted => (Part::Deleted, rows(DELETED_SQL.to_owned())),
        Load::Delegates(which) => (
            Part::Delegates,
            match which {
                Delegates::Pair(sp, pa) => {
                    rows(delegates_sql("WHERE spawner = $1 AND parent_session = $2"))
                        .arg(text(sp))
                        .arg(text(pa))
                }
                Delegates::Spawner(sp) => rows(delegates_sql("WHERE spawner = $1")).arg(text(sp)),
                Delegates::Session(id) => {
                    rows(delegates_sql("WHERE session_id = $1")).arg(text(id))
                }
            },
        ),
    }
}

/// Rows of `part` into `s`.
fn put(part: Part, s: &mut CatalogueState, rows: &[Row]) -> Tx<()> {
    match part {
        Part::Sessions => put_sessions(s, rows),
        Part::Defaults => put_defaults(s, rows),
        Part::Recent => put_recent(s, rows),
        Part::Deleted => put_deleted(s, rows),
        Part::Delegates => put_delegates(s, rows),
    }
}

/// Locks the head and loads the rows of `fp` into `s`, in one round trip:
/// the lock first, every read after it (the server runs them in order).
fn lock_and_load(tx: &mut Transaction<'_>, s: &mut CatalogueState, fp: &Footprint) -> Tx<()> {
    let mut stmts = vec![Stmt::new(Want::Opt, lock_sql())];
    let mut parts = Vec::new();
    for load in fp.loads() {
        let (part, st) = statement(load);
        stmts.push(st);
        parts.push(part);
    }
    let got = tx.run(&stmts).map_err(pg("load"))?;
    let mut got = got.into_iter();
    let mut next = || next_got(&mut got, "load").map_err(TxError::Failure);
    decode_locked(s, next()?.opt("lock-head")?.as_ref())?;
    for part in parts {
        put(part, s, &next()?.rows("load")?)?;
    }
    Ok(())
}

/// Core's refusals as this shell's transaction error (what `?` on a read's
/// answer gives). A server failure is never built as a `CatalogueError`
/// and passed through here: it is `TxError::Failure` from the start.
impl From<CatalogueError> for TxError<CatalogueError> {
    fn from(e: CatalogueError) -> Self {
        TxError::Refused(e)
    }
}

/// The catalogue's rows in one read: one statement per [`Load`].
struct Rows<'a, 'b>(&'a mut Transaction<'b>);

impl CatalogueRows for Rows<'_, '_> {
    type Error = TxError<CatalogueError>;

    fn head(&mut self, s: &mut CatalogueState) -> Tx<()> {
        load_meta(self.0, s)
    }

    fn load(&mut self, load: Load<'_>, s: &mut CatalogueState) -> Tx<()> {
        let (part, st) = statement(load);
        let got = self.0.run(&[st]).map_err(pg("load"))?;
        let mut got = got.into_iter();
        let rows = next_got(&mut got, "load")
            .map_err(TxError::Failure)?
            .rows("load")?;
        put(part, s, &rows)
    }
}

// ------------------------------------------------------------------ the port

impl RowsCatalogue for PgCatalogue {
    type RowsError = TxError<CatalogueError>;

    fn write(&self, req: &Request) -> Res<Outcome> {
        if self.read_only {
            return Err(CatalogueError::BackendFault {
                reason: format!(
                    "the catalogue in schema {} is open read-only: apply refused",
                    self.schema()
                ),
            });
        }
        let fp = footprint(req);
        finish(self.conn.decide(|tx| {
            // The head-row lock first: it orders every writer.
            // One round trip: the lock and the whole footprint.
            let mut before = CatalogueState::default();
            lock_and_load(tx, &mut before, &fp)?;
            let d = catalogue::decide(&before, req).map_err(refuse)?;
            // Every effect travels with the COMMIT.
            let mut stmts = Vec::new();
            for e in &d.effects {
                stmts.extend(crate::effects::apply(e).map_err(|EffectError(what, v)| {
                    bad(what, format!("{v} exceeds a bigint; it cannot be stored"))
                })?);
            }
            Ok((d.outcome, stmts))
        }))
    }

    fn read_rows<T>(&self, f: &mut RowsRead<'_, T, TxError<CatalogueError>>) -> Res<T> {
        finish(self.conn.read(|tx| f(&mut Rows(tx))))
    }
}
