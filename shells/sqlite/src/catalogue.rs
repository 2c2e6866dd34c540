//! The catalogue database: `custos_core::catalogue` persisted in SQLite.
//!
//! [`SqliteCatalogue`] implements the [`Catalogue`] port. It holds no rule:
//! every write is one `BEGIN IMMEDIATE` transaction that loads the rows of the
//! request's [`footprint`] into a partial [`CatalogueState`], calls
//! [`catalogue::decide`], and applies its effects in order, one statement
//! each (`crate::effects`). Every
//! read is one deferred transaction that loads the rows it needs and calls
//! the same pure read the memory backend calls. Rows decode totally: a
//! stored value that breaks its grammar fails the read with `Invalid` (a
//! profile, an executor, a pool, a workspace, a move row, a delegate row),
//! except a subtitle, which reads as none.
//!
//! ## Versions
//!
//! `PRAGMA application_id` is [`CATALOGUE_APPLICATION_ID`] (`"CuCa"`);
//! `PRAGMA user_version` is [`CATALOGUE_VERSION`]. Open applies every step
//! an older catalogue lacks, then moves the version, in one transaction; a
//! newer or unknown version, or another application's file, is refused with
//! the file byte-untouched (the check runs before anything is written,
//! journal mode included).
//!
//! | version | adds |
//! |---|---|
//! | 1 | `catalogue_meta` (revision, recent-folder sequence), `catalogue_sessions`, `catalogue_workspace_defaults` |
//! | 2 | `catalogue_session_names`, `catalogue_session_archives`, `catalogue_session_subtitles`, `catalogue_recent_folders` |
//! | 3 | `profile`, `model`, `executor`, `pool` columns (`NOT NULL DEFAULT ''`: a v2 row reads back local, no profile) |
//! | 4 | `catalogue_session_moves`, `catalogue_session_deletions`, `catalogue_delegate_sessions` |
//!
//! | 5 | the access plane ([`crate::access`]): `access_principals` (one owner: a partial unique index), `access_credentials`, `access_claims` (one open claim per principal: a partial unique index), `access_memberships` (cascading on a catalogue session's delete) |
//!
//! The access plane arrives in one step: its three parts (claims, credential
//! kinds with their issue and resume times, credential expiry and issuer)
//! land in one build, so no catalogue was ever written holding a part of
//! it, and one step keeps every access table's constraints in one place.
//!
//! | 6 | `catalogue_deleted` (session id, the revision its deletion made): the remembered deletions, at most `DELETED_KEPT`, that a retried `Delete` is answered from |
//!
//! ## Reading without writing
//!
//! [`SqliteCatalogue::open_read_only`] never creates, migrates or writes
//! (not even the journal mode); it refuses with [`OpenError::NotReadable`]
//! a file that is not a catalogue of [`CATALOGUE_VERSION`], and its reads
//! never wait for a writer. A read-only handle refuses
//! [`Catalogue::apply`] without touching the file. [`identity`] reads the
//! two pragmas the same way. Details: [`crate::readonly`].
//!
//! ## Bounded rows
//!
//! Every stored text is checked against the byte bound of its grammar
//! (session id, creation key, display name, workspace, profile, model key,
//! orchestrator name, move op; a state word against [`MAX_WORD_LEN`])
//! before it is copied, and a longer one fails the read with `Invalid`
//! naming the table, row and column. A subtitle longer than any subtitle
//! can be reads as none, as a subtitle that breaks its rule always has.

#[cfg(doc)]
use custos_core::catalogue::Catalogue;
use std::path::Path;
use std::time::Duration;

use custos_core::catalogue::access::AccessError;
use custos_core::catalogue::rows::{
    self, CatalogueRows, Defaults, Delegates, Load, RowsCatalogue, RowsRead, Sessions,
};
use custos_core::catalogue::{
    self, footprint, CatalogueError, CatalogueState, Outcome, Request, StoredDelegate,
    StoredSession,
};
use rusqlite::{Connection, Row, Transaction, TransactionBehavior};

use crate::codec::cells;
use crate::config::{self, OpenError, DEFAULT_BUSY_TIMEOUT};
use crate::fault::Fault;
use crate::readonly::{Expect, Handle, ReadOnly};

pub use custos_core::columns::MAX_WORD_LEN;

/// What the read-only open reads.
const EXPECT: Expect = Expect {
    kind: "a catalogue",
    application_id: CATALOGUE_APPLICATION_ID,
    oldest: CATALOGUE_VERSION,
    newest: CATALOGUE_VERSION,
};

/// The catalogue version this build writes and reads.
pub const CATALOGUE_VERSION: i64 = 6;

/// `PRAGMA application_id` of a custos catalogue (`"CuCa"` in ASCII).
pub const CATALOGUE_APPLICATION_ID: i64 = 0x4375_4361;

/// The migration steps; step `i` takes version `i` to `i + 1`.
pub const STEPS: [&str; CATALOGUE_VERSION as usize] = [
    "
CREATE TABLE catalogue_meta (
    singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
    revision INTEGER NOT NULL,
    recent_seq INTEGER NOT NULL
) STRICT;
INSERT INTO catalogue_meta (singleton, revision, recent_seq) VALUES (1, 0, 0);
CREATE TABLE catalogue_sessions (
    session_id TEXT PRIMARY KEY,
    creation_key TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    workspace TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    state TEXT NOT NULL
) STRICT;
CREATE TABLE catalogue_workspace_defaults (
    workspace TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES catalogue_sessions (session_id)
) STRICT;
CREATE INDEX catalogue_workspace_defaults_session ON catalogue_workspace_defaults (session_id);
",
    "
CREATE TABLE catalogue_session_names (
    session_id TEXT PRIMARY KEY REFERENCES catalogue_sessions (session_id),
    name TEXT NOT NULL
) STRICT;
CREATE TABLE catalogue_session_archives (
    session_id TEXT PRIMARY KEY REFERENCES catalogue_sessions (session_id)
) STRICT;
CREATE TABLE catalogue_session_subtitles (
    session_id TEXT PRIMARY KEY REFERENCES catalogue_sessions (session_id),
    subtitle TEXT NOT NULL
) STRICT;
CREATE TABLE catalogue_recent_folders (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL UNIQUE
) STRICT;
",
    "
ALTER TABLE catalogue_sessions ADD COLUMN profile TEXT NOT NULL DEFAULT '';
ALTER TABLE catalogue_sessions ADD COLUMN model TEXT NOT NULL DEFAULT '' CHECK (length(CAST(model AS BLOB)) <= 64);
ALTER TABLE catalogue_sessions ADD COLUMN executor TEXT NOT NULL DEFAULT '';
ALTER TABLE catalogue_sessions ADD COLUMN pool TEXT NOT NULL DEFAULT '';
",
    "
CREATE TABLE catalogue_session_moves (
    session_id TEXT PRIMARY KEY REFERENCES catalogue_sessions (session_id),
    op TEXT NOT NULL,
    peer TEXT NOT NULL,
    state TEXT NOT NULL
) STRICT;
CREATE INDEX catalogue_session_moves_state ON catalogue_session_moves (state);
CREATE TABLE catalogue_session_deletions (
    session_id TEXT PRIMARY KEY REFERENCES catalogue_sessions (session_id)
) STRICT;
CREATE TABLE catalogue_delegate_sessions (
    spawner TEXT NOT NULL,
    parent_session TEXT NOT NULL,
    session_id TEXT NOT NULL UNIQUE REFERENCES catalogue_sessions (session_id),
    last_contact_ms INTEGER NOT NULL,
    PRIMARY KEY (spawner, parent_session)
) STRICT;
",
    crate::access::ACCESS_STEP,
    "
CREATE TABLE catalogue_deleted (
    session_id TEXT PRIMARY KEY,
    revision INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
",
];

/// A catalogue database.
#[derive(Debug)]
pub struct SqliteCatalogue {
    h: Handle,
}

type Res<T> = Result<T, CatalogueError>;

/// The catalogue's kind, as its handle names it.
const KIND: &str = "catalogue";

fn fault(f: Fault) -> CatalogueError {
    CatalogueError::BackendFault { reason: f.reason() }
}

fn db(op: &'static str) -> impl FnOnce(rusqlite::Error) -> CatalogueError {
    move |e| fault(Fault::Db(op, e))
}

impl SqliteCatalogue {
    /// Opens (creating when missing) the catalogue at `path` with the default
    /// busy timeout.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, OpenError> {
        Self::open_with(path, DEFAULT_BUSY_TIMEOUT)
    }

    /// Opens the catalogue in refuse-before-write order: connection policy
    /// that writes nothing (busy timeout, `synchronous=FULL`, read back);
    /// one `BEGIN IMMEDIATE` transaction reads `user_version` and
    /// `application_id`, refuses (rolling back, the file untouched) or
    /// applies every missing step and moves the version; then WAL and
    /// foreign keys, each read back.
    pub fn open_with(path: impl AsRef<Path>, busy: Duration) -> Result<Self, OpenError> {
        let h = Handle::write(path.as_ref(), busy, migrate, KIND)?;
        Ok(SqliteCatalogue { h })
    }

    /// Opens the existing catalogue at `path` for reading only (see
    /// "Reading without writing" in the module documentation) with the
    /// default busy timeout.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Self, OpenError> {
        Self::open_read_only_with(path, DEFAULT_BUSY_TIMEOUT)
    }

    /// [`SqliteCatalogue::open_read_only`] with a busy timeout.
    pub fn open_read_only_with(path: impl AsRef<Path>, busy: Duration) -> Result<Self, OpenError> {
        let path = path.as_ref().to_path_buf();
        let ro = ReadOnly::open(&path, Some(EXPECT), busy)?;
        Ok(SqliteCatalogue {
            h: Handle::read(ro, path, KIND),
        })
    }

    /// Opens a fresh catalogue in a new file under the system temp
    /// directory, deleted (with its siblings) when dropped. For tests.
    pub fn open_temp() -> Result<Self, OpenError> {
        let h = Self::open(config::temp_db_path("catalogue"))?.h;
        Ok(SqliteCatalogue { h: h.into_temp() })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        self.h.path()
    }

    fn with<T>(
        &self,
        behavior: TransactionBehavior,
        f: impl FnMut(&Transaction<'_>) -> Res<T>,
    ) -> Res<T> {
        self.h
            .transact(behavior, f, |reason| CatalogueError::BackendFault {
                reason,
            })
    }

    /// Runs `f`, an access read answered by one statement, without a
    /// transaction of its own where the connection allows
    /// ([`Handle::read_alone`]).
    pub(crate) fn access_alone<T>(
        &self,
        f: impl FnMut(&Connection) -> Result<T, AccessError>,
    ) -> Result<T, AccessError> {
        self.h
            .read_alone(f, |reason| AccessError::BackendFault { reason })
    }

    /// One transaction of `behavior` on the catalogue's connection, with
    /// the access plane's error type.
    pub(crate) fn access_tx<T>(
        &self,
        behavior: TransactionBehavior,
        f: impl FnMut(&Transaction<'_>) -> Result<T, AccessError>,
    ) -> Result<T, AccessError> {
        self.h
            .transact(behavior, f, |reason| AccessError::BackendFault { reason })
    }
}

/// [`config::migrate_identified`] with this catalog's identity and steps.
fn migrate(conn: &mut Connection) -> Result<(), OpenError> {
    config::migrate_identified(conn, CATALOGUE_APPLICATION_ID, &STEPS)
}

// ------------------------------------------------------------------ decode

fn raw_session(r: &Row<'_>) -> rusqlite::Result<Res<StoredSession>> {
    Ok(StoredSession::read(&mut cells(r, "catalogue_sessions")).map_err(CatalogueError::from))
}

pub(crate) fn load_sessions(
    tx: &Transaction<'_>,
    state: &mut CatalogueState,
    where_: &str,
    args: &[&dyn rusqlite::ToSql],
) -> Res<()> {
    let sql = format!("{} {where_}", StoredSession::SELECT);
    let mut st = tx.prepare_cached(&sql).map_err(db("load-sessions"))?;
    let rows = st
        .query_map(args, raw_session)
        .map_err(db("load-sessions"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(db("load-sessions"))?;
    for raw in rows {
        state.put_stored_session(raw?)?;
    }
    Ok(())
}

/// The head row (revision and recent sequence) into `state`.
fn load_meta(tx: &Transaction<'_>, state: &mut CatalogueState) -> Res<()> {
    let (rev, seq) = tx
        .query_row(
            "SELECT revision, recent_seq FROM catalogue_meta WHERE singleton = 1",
            [],
            |r| {
                let mut c = cells(r, "catalogue_meta");
                c.at("1");
                Ok((|| -> Res<(u64, u64)> {
                    Ok((c.unsigned(0, "revision")?, c.unsigned(1, "recent_seq")?))
                })())
            },
        )
        .map_err(db("load-meta"))??;
    state.revision = rev;
    state.recent_seq = seq;
    Ok(())
}

fn load_delegates(
    tx: &Transaction<'_>,
    state: &mut CatalogueState,
    where_: &str,
    args: &[&dyn rusqlite::ToSql],
) -> Res<()> {
    let sql = format!(
        "SELECT spawner, parent_session, session_id, last_contact_ms FROM catalogue_delegate_sessions {where_}"
    );
    let mut st = tx.prepare_cached(&sql).map_err(db("load-delegates"))?;
    let rows = st
        .query_map(args, |r| {
            Ok(
                StoredDelegate::read(&mut cells(r, "catalogue_delegate_sessions"))
                    .map_err(CatalogueError::from),
            )
        })
        .map_err(db("load-delegates"))?
        .collect::<Result<Vec<Res<_>>, _>>()
        .map_err(db("load-delegates"))?
        .into_iter()
        .collect::<Res<Vec<_>>>()?;
    state.put_stored_delegates(rows)
}

fn load_defaults(
    tx: &Transaction<'_>,
    state: &mut CatalogueState,
    where_: &str,
    args: &[&dyn rusqlite::ToSql],
) -> Res<()> {
    let sql = format!("SELECT workspace, session_id FROM catalogue_workspace_defaults {where_}");
    let mut st = tx.prepare_cached(&sql).map_err(db("load-defaults"))?;
    let rows = st
        .query_map(args, |r| {
            let mut c = cells(r, "catalogue_workspace_defaults");
            Ok(catalogue::read_default(&mut c).map_err(CatalogueError::from))
        })
        .map_err(db("load-defaults"))?
        .collect::<Result<Vec<Res<_>>, _>>()
        .map_err(db("load-defaults"))?;
    for row in rows {
        let (ws, id) = row?;
        state.put_stored_default(ws, id)?;
    }
    Ok(())
}

fn load_recent(tx: &Transaction<'_>, state: &mut CatalogueState) -> Res<()> {
    let mut st = tx
        .prepare_cached("SELECT id, path FROM catalogue_recent_folders")
        .map_err(db("load-recent"))?;
    let rows = st
        .query_map([], |r| {
            let mut c = cells(r, "catalogue_recent_folders");
            Ok(catalogue::read_recent(&mut c).map_err(CatalogueError::from))
        })
        .map_err(db("load-recent"))?
        .collect::<Result<Vec<Res<_>>, _>>()
        .map_err(db("load-recent"))?;
    for row in rows {
        let (id, path) = row?;
        state.put_stored_recent(id, path)?;
    }
    Ok(())
}

fn load_deleted(tx: &Transaction<'_>, state: &mut CatalogueState) -> Res<()> {
    let mut st = tx
        .prepare_cached("SELECT session_id, revision FROM catalogue_deleted")
        .map_err(db("load-deleted"))?;
    let rows = st
        .query_map([], |r| {
            let mut c = cells(r, "catalogue_deleted");
            Ok(catalogue::read_deleted(&mut c).map_err(CatalogueError::from))
        })
        .map_err(db("load-deleted"))?
        .collect::<Result<Vec<Res<_>>, _>>()
        .map_err(db("load-deleted"))?;
    for row in rows {
        let (id, rev) = row?;
        state.put_stored_deletion(id, rev)?;
    }
    Ok(())
}

/// The catalogue's rows in one transaction: one statement per [`Load`].
struct Rows<'t, 'c>(&'t Transaction<'c>);

impl CatalogueRows for Rows<'_, '_> {
    type Error = CatalogueError;

    fn head(&mut self, s: &mut CatalogueState) -> Res<()> {
        load_meta(self.0, s)
    }

    fn load(&mut self, load: Load<'_>, s: &mut CatalogueState) -> Res<()> {
        let tx = self.0;
        match load {
            Load::Sessions(Sessions::Id(id)) => {
                load_sessions(tx, s, "WHERE s.session_id = ?1", &[&id])
            }
            Load::Sessions(Sessions::CreationKey(k)) => {
                load_sessions(tx, s, "WHERE s.creation_key = ?1", &[&k])
            }
            Load::Sessions(Sessions::Page {
                archived,
                after,
                fetch,
            }) => load_sessions(
                tx,
                s,
                "WHERE (a.session_id IS NOT NULL) = ?1 AND (?2 IS NULL OR s.session_id > ?2)
                 ORDER BY s.session_id LIMIT ?3",
                &[&archived, &after, &i64::try_from(fetch).unwrap_or(i64::MAX)],
            ),
            Load::Sessions(Sessions::Moving) => {
                load_sessions(tx, s, "WHERE m.state = 'moving'", &[])
            }
            Load::Sessions(Sessions::Deleting) => {
                load_sessions(tx, s, "WHERE d.session_id IS NOT NULL", &[])
            }
            Load::Defaults(Defaults::Workspace(ws)) => {
                load_defaults(tx, s, "WHERE workspace = ?1", &[&ws])
            }
            Load::Defaults(Defaults::Naming(id)) => {
                load_defaults(tx, s, "WHERE session_id = ?1", &[&id])
            }
            Load::Recent => load_recent(tx, s),
            Load::Deleted => load_deleted(tx, s),
            Load::Delegates(Delegates::Pair(sp, pa)) => load_delegates(
                tx,
                s,
                "WHERE spawner = ?1 AND parent_session = ?2",
                &[&sp, &pa],
            ),
            Load::Delegates(Delegates::Spawner(sp)) => {
                load_delegates(tx, s, "WHERE spawner = ?1", &[&sp])
            }
            Load::Delegates(Delegates::Session(id)) => {
                load_delegates(tx, s, "WHERE session_id = ?1", &[&id])
            }
        }
    }
}

// ------------------------------------------------------------------ the port

impl RowsCatalogue for SqliteCatalogue {
    type RowsError = CatalogueError;

    fn write(&self, req: &Request) -> Res<Outcome> {
        self.with(TransactionBehavior::Immediate, |tx| {
            let before = rows::load_footprint(&mut Rows(tx), &footprint(req))?;
            let d = catalogue::decide(&before, req)?;
            for e in &d.effects {
                crate::effects::apply(tx, e).map_err(db("write"))?;
            }
            Ok(d.outcome)
        })
    }

    fn read_rows<T>(&self, f: &mut RowsRead<'_, T, CatalogueError>) -> Res<T> {
        self.with(TransactionBehavior::Deferred, |tx| f(&mut Rows(tx)))
    }
}

/// Reads `(user_version, application_id)` of a catalogue file without
/// opening it as a catalogue (for tests and inspection): read-only, never
/// creating the file or anything beside it ([`crate::readonly`]).
pub fn identity(path: &Path) -> Result<(i64, i64), OpenError> {
    let mut ro = ReadOnly::open(path, None, DEFAULT_BUSY_TIMEOUT)?;
    ro.read(|tx| {
        let v: i64 = tx
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(Fault::db("read-version"))?;
        let a: i64 = tx
            .query_row("PRAGMA application_id", [], |r| r.get(0))
            .map_err(Fault::db("read-application-id"))?;
        Ok::<_, Fault>((v, a))
    })?
    .map_err(OpenError::from)
}
