//! Handle configuration, the clock, connection policy and the open error.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use custos_core::lease::{LeaseError, Owner};
use custos_core::Millis;
use rusqlite::Connection;
use thiserror::Error;

use crate::fault::Fault;

/// A clock: milliseconds on the caller's timeline. Injected so that tests
/// (and the crash test) control lease expiry.
pub type Clock = Arc<dyn Fn() -> Millis + Send + Sync>;

/// The system clock: milliseconds since the Unix epoch (0 before it).
pub fn system_clock() -> Clock {
    Arc::new(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    })
}

/// The default lease lifetime (30 s).
pub const DEFAULT_LEASE_TTL_MS: Millis = 30_000;
/// The default busy timeout (5 s).
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How to open one session file.
#[derive(Clone)]
pub struct Config {
    /// The database file (created when missing; its parent must exist).
    pub path: PathBuf,
    /// The writer-lease owner this handle commits as.
    pub owner: Owner,
    /// The lease lifetime; every commit renews it.
    pub lease_ttl_ms: Millis,
    /// SQLite's busy timeout for this connection.
    pub busy_timeout: Duration,
    /// The clock the lease is judged by.
    pub now: Clock,
}

impl Config {
    /// A config with the default TTL, busy timeout and the system clock.
    pub fn new(path: impl Into<PathBuf>, owner: Owner) -> Self {
        Config {
            path: path.into(),
            owner,
            lease_ttl_ms: DEFAULT_LEASE_TTL_MS,
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            now: system_clock(),
        }
    }

    /// Sets the lease TTL.
    pub fn ttl(mut self, ms: Millis) -> Self {
        self.lease_ttl_ms = ms;
        self
    }

    /// Sets the clock.
    pub fn clock(mut self, now: Clock) -> Self {
        self.now = now;
        self
    }

    /// Sets the busy timeout.
    pub fn busy(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("path", &self.path)
            .field("owner", &self.owner)
            .field("lease_ttl_ms", &self.lease_ttl_ms)
            .field("busy_timeout", &self.busy_timeout)
            .finish_non_exhaustive()
    }
}

/// Why a file of this shell (a session store, catalogue, control catalog
/// or execution ledger) could not be opened. Every refusal that happens in
/// the admission transaction leaves the file byte-untouched.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum OpenError {
    /// The file's version is newer than, or not covered by, this build.
    #[error(
        "UnsupportedVersion: the file has version {found} of its kind; this build supports {supported}"
    )]
    UnsupportedVersion {
        /// The stored `user_version`.
        found: i64,
        /// The version this build writes.
        supported: i64,
    },
    /// The file is an SQLite database of another kind.
    #[error("ForeignDatabase: {detail}")]
    ForeignDatabase {
        /// What gave it away.
        detail: String,
    },
    /// The lease machine refused the open's admission. Another owner
    /// holding an unexpired lease ([`LeaseError::LeaseHeld`]) shows as the
    /// lease machine's message; any other refusal (ttl, clock, fence,
    /// owner name) under `Lease: `.
    #[error("{}", open_lease_message(.0))]
    Lease(#[from] LeaseError),
    /// The path cannot hold a database (a directory, a missing parent).
    #[error("UnopenablePath: {path}: {reason}")]
    UnopenablePath {
        /// The path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// SQLite declined a connection or journal setting.
    #[error("PragmaDeclined: PRAGMA {pragma} wanted {wanted}, SQLite answered {got}")]
    PragmaDeclined {
        /// The pragma.
        pragma: &'static str,
        /// The requested value.
        wanted: String,
        /// What SQLite reports.
        got: String,
    },
    /// The database stayed locked past the busy timeout.
    #[error("Busy: {op}: the database stayed locked past the busy timeout")]
    Busy {
        /// The step that waited.
        op: &'static str,
    },
    /// SQLite failed.
    #[error("Sqlite: {op}: {message}")]
    Sqlite {
        /// The step.
        op: &'static str,
        /// SQLite's message.
        message: String,
    },
    /// A stored row does not decode.
    #[error("Corrupt: {detail}")]
    Corrupt {
        /// What was found.
        detail: String,
    },
    /// A read-only open refused the file: it is not a database of the kind
    /// the read path reads, or not in a version it reads (see
    /// [`crate::readonly`]). Nothing was created and nothing was written.
    #[error("NotReadable: {} {}", .path.display(), .rule.describe(.kind))]
    NotReadable {
        /// The file.
        path: PathBuf,
        /// What the read path reads, with its article (`"a control catalog"`).
        kind: &'static str,
        /// The rule the file breaks.
        rule: Refusal,
    },
    /// The execution ledger's restart recovery, the last step of its
    /// writing open, failed; the file is migrated and otherwise untouched.
    #[error("Recovery: {0}")]
    Recovery(custos_core::ledger::LedgerError),
    /// A read-only open met a hot rollback journal: a writer of this
    /// rollback-journal-mode file was interrupted mid-transaction, and its
    /// half-written change must be rolled back before anything can be read.
    /// Rolling back writes, so a read-only open refuses instead; nothing was
    /// created and nothing was written. A writing open of the file rolls it
    /// back (for a control catalog without changing anything else:
    /// `SqliteControlCatalog::recover`).
    #[error(
        "RecoveryNeeded: {} cannot be read: a writer was interrupted mid-transaction and left \
         the hot rollback journal {}; a read-only open cannot roll it back and wrote nothing; \
         a writing open rolls it back to the last committed state (for a control catalog, \
         SqliteControlCatalog::recover does only that)",
        .path.display(),
        .journal.display()
    )]
    RecoveryNeeded {
        /// The database file.
        path: PathBuf,
        /// Its hot journal (`<path>-journal`).
        journal: PathBuf,
    },
}

impl OpenError {
    /// The failure's [`Class`](custos_core::Class): a file that is no
    /// catalog of this kind is `NotFound`, one of a version this build does
    /// not read (or that declines a pragma it needs) `Unsupported`, a
    /// foreign database `InvalidArgument`, a path that cannot be opened
    /// `FailedPrecondition`, a busy or leased file `Unavailable`, a
    /// catalog that needs its interrupted transaction rolled back first
    /// `FailedPrecondition`, a damaged one `CorruptArtifact`, SQLite's own
    /// failure `Internal`.
    pub fn class(&self) -> custos_core::Class {
        use custos_core::Class;
        match self {
            OpenError::NotReadable {
                rule: Refusal::Version { .. },
                ..
            }
            | OpenError::UnsupportedVersion { .. }
            | OpenError::PragmaDeclined { .. } => Class::Unsupported,
            OpenError::NotReadable { .. } => Class::NotFound,
            OpenError::ForeignDatabase { .. } => Class::InvalidArgument,
            OpenError::UnopenablePath { .. } | OpenError::RecoveryNeeded { .. } => {
                Class::FailedPrecondition
            }
            OpenError::Lease(e) => e.class(),
            OpenError::Recovery(e) => e.class(),
            OpenError::Busy { .. } => Class::Unavailable,
            OpenError::Corrupt { .. } => Class::CorruptArtifact,
            OpenError::Sqlite { .. } => Class::Internal,
        }
    }
}

/// How an open shows a lease refusal: `LeaseHeld` as the lease machine
/// says it, any other under the `Lease` reason.
fn open_lease_message(e: &LeaseError) -> String {
    match e {
        LeaseError::LeaseHeld { .. } => e.to_string(),
        other => format!("Lease: {other}"),
    }
}

/// Why a read-only open refused a file ([`OpenError::NotReadable`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The file is zero bytes long: nothing was ever committed to it.
    ZeroLength,
    /// The file does not begin with SQLite's header.
    NotSqlite,
    /// An SQLite database with no application id, no version and no schema.
    Empty,
    /// An SQLite database with no application id and no version that holds
    /// schema objects (another program's, or one whose creation never
    /// committed its identity).
    Unidentified {
        /// How many schema objects it holds.
        objects: i64,
    },
    /// Another application's database.
    ForeignApplication {
        /// Its `application_id`.
        found: i64,
        /// The `application_id` of the kind the read path reads.
        expected: i64,
    },
    /// A database of the right kind whose `user_version` the read path
    /// cannot read (newer than this build, or older than it reads).
    Version {
        /// The stored `user_version`.
        found: i64,
        /// The lowest version the read path reads.
        oldest: i64,
        /// The highest version the read path reads.
        newest: i64,
    },
}

impl Refusal {
    /// The refusal as a sentence about a file of `kind` (e.g. `"is not a
    /// control catalog: the file is empty (zero-length)"`).
    pub fn describe(&self, kind: &str) -> String {
        match self {
            Refusal::ZeroLength => format!("is not {kind}: the file is empty (zero-length)"),
            Refusal::NotSqlite => {
                format!("is not {kind}: not an SQLite database (no SQLite header)")
            }
            Refusal::Empty => format!(
                "is not {kind}: an SQLite database with no application id, no version and no schema"
            ),
            Refusal::Unidentified { objects } => format!(
                "is not {kind}: an SQLite database with no application id and no version, holding {objects} schema objects"
            ),
            Refusal::ForeignApplication { found, expected } => format!(
                "is not {kind}: application_id {found:#x} (expected {expected:#x})"
            ),
            Refusal::Version {
                found,
                oldest,
                newest,
            } if oldest == newest => {
                format!("is {kind} of version {found}; this build reads version {newest}")
            }
            Refusal::Version {
                found,
                oldest,
                newest,
            } => format!(
                "is {kind} of version {found}; this build reads versions {oldest} to {newest}"
            ),
        }
    }
}

impl From<Fault> for OpenError {
    fn from(f: Fault) -> Self {
        match f {
            Fault::Corrupt(detail) => OpenError::Corrupt { detail },
            Fault::Db(op, e) => {
                if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                    || e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseLocked)
                {
                    OpenError::Busy { op }
                } else {
                    OpenError::Sqlite {
                        op,
                        message: e.to_string(),
                    }
                }
            }
        }
    }
}

/// Refuses a path SQLite cannot hold a database at, before any open: a
/// directory, or a missing parent directory. A missing file is allowed.
pub(crate) fn refuse_unopenable(path: &Path) -> Result<(), OpenError> {
    let bad = |reason: &str| OpenError::UnopenablePath {
        path: path.to_path_buf(),
        reason: reason.to_owned(),
    };
    if path.is_dir() {
        return Err(bad("is a directory"));
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(bad("the parent directory does not exist"));
    }
    Ok(())
}

/// Connection policy that writes nothing: busy timeout and
/// `synchronous=FULL`, each read back and verified, and a statement cache.
pub(crate) fn configure(conn: &Connection, busy: Duration) -> Result<(), OpenError> {
    conn.busy_timeout(busy).map_err(Fault::db("busy-timeout"))?;
    let got: i64 = conn
        .query_row("PRAGMA busy_timeout", [], |r| r.get(0))
        .map_err(Fault::db("busy-timeout"))?;
    let wanted = i64::try_from(busy.as_millis()).unwrap_or(i64::MAX);
    if got != wanted.min(i64::from(i32::MAX)) {
        return Err(OpenError::PragmaDeclined {
            pragma: "busy_timeout",
            wanted: wanted.to_string(),
            got: got.to_string(),
        });
    }
    set_synchronous_full(conn)?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(())
}

/// `PRAGMA synchronous=FULL`, read back.
pub(crate) fn set_synchronous_full(conn: &Connection) -> Result<(), OpenError> {
    conn.execute_batch("PRAGMA synchronous = FULL")
        .map_err(Fault::db("synchronous"))?;
    let got: i64 = conn
        .query_row("PRAGMA synchronous", [], |r| r.get(0))
        .map_err(Fault::db("synchronous"))?;
    if got != 2 {
        return Err(OpenError::PragmaDeclined {
            pragma: "synchronous",
            wanted: "2 (FULL)".to_owned(),
            got: got.to_string(),
        });
    }
    Ok(())
}

/// Sets the journal mode and verifies SQLite's answer (a declined mode is an error).
pub(crate) fn set_journal_mode(conn: &Connection, mode: &'static str) -> Result<(), OpenError> {
    // Changing the journal mode needs an exclusive lock, and SQLite may answer
    // SQLITE_BUSY at once (without its busy handler) while another connection
    // still holds a shared lock — e.g. a racing opener finishing its refused
    // admission transaction. Retry with backoff for a bounded time.
    let sql = format!("PRAGMA journal_mode = {mode}");
    let mut wait = Duration::from_millis(1);
    let mut waited = Duration::ZERO;
    let got: String = loop {
        match conn.query_row(&sql, [], |r| r.get(0)) {
            Ok(got) => break got,
            Err(e)
                if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                    && waited < JOURNAL_MODE_RETRY =>
            {
                std::thread::sleep(wait);
                waited += wait;
                wait = (wait * 2).min(Duration::from_millis(50));
            }
            Err(e) => return Err(Fault::db("journal-mode")(e).into()),
        }
    };
    if !got.eq_ignore_ascii_case(mode) {
        return Err(OpenError::PragmaDeclined {
            pragma: "journal_mode",
            wanted: mode.to_owned(),
            got,
        });
    }
    Ok(())
}

/// How long a journal-mode switch retries on `SQLITE_BUSY`.
const JOURNAL_MODE_RETRY: Duration = Duration::from_secs(5);

/// A fresh, unique path under the system temp directory for a test database
/// (`custos-<kind>-<pid>-<nanos>-<n>.db`).
pub(crate) fn temp_db_path(kind: &str) -> PathBuf {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    std::env::temp_dir().join(format!(
        "custos-{kind}-{}-{nanos}-{n}.db",
        std::process::id()
    ))
}

/// `path` with `suffix` appended to its file name.
pub(crate) fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// The SQLite siblings of a database file: `-wal`, `-shm`, `-journal`.
pub fn siblings(path: &Path) -> [PathBuf; 3] {
    [
        with_suffix(path, "-wal"),
        with_suffix(path, "-shm"),
        with_suffix(path, "-journal"),
    ]
}

/// Removes a temp database and its `-wal`, `-shm` and `-journal`
/// siblings, ignoring what is already gone (a `Drop` cleanup; best effort).
pub(crate) fn remove_temp_db(path: &Path) {
    for p in std::iter::once(path.to_path_buf()).chain(siblings(path)) {
        let _ = std::fs::remove_file(p);
    }
}

/// The migrate step of a catalog-style database whose identity is
/// `application_id` and whose version is `steps.len()` (step `i` takes
/// version `i` to `i + 1`). One `BEGIN IMMEDIATE` transaction: a newer
/// version, or a file that is neither this kind nor empty, is refused with
/// nothing written; a current file writes nothing; otherwise the missing
/// steps and the identity pragmas commit together.
pub(crate) fn migrate_identified(
    conn: &mut Connection,
    application_id: i64,
    steps: &[&str],
) -> Result<(), OpenError> {
    let current = i64::try_from(steps.len()).unwrap_or(i64::MAX);
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(Fault::db("migrate-begin"))?;
    let version: i64 = tx
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(Fault::db("read-version"))?;
    let app: i64 = tx
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .map_err(Fault::db("read-application-id"))?;
    if !(0..=current).contains(&version) {
        return Err(OpenError::UnsupportedVersion {
            found: version,
            supported: current,
        });
    }
    if version == 0 {
        let tables: i64 = tx
            .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
            .map_err(Fault::db("read-schema"))?;
        if app != 0 || tables != 0 {
            return Err(OpenError::ForeignDatabase {
                detail: format!(
                    "version 0 with application_id {app:#x} and {tables} schema objects"
                ),
            });
        }
    } else if app != application_id {
        return Err(OpenError::ForeignDatabase {
            detail: format!("application_id {app:#x}, expected {application_id:#x}"),
        });
    }
    if version == current {
        return Ok(()); // nothing written; the transaction rolls back
    }
    for step in steps
        .iter()
        .skip(usize::try_from(version).unwrap_or(usize::MAX))
    {
        tx.execute_batch(step).map_err(Fault::db("migrate"))?;
    }
    tx.execute_batch(&format!(
        "PRAGMA application_id = {application_id}; PRAGMA user_version = {current};"
    ))
    .map_err(Fault::db("migrate"))?;
    tx.commit().map_err(Fault::db("migrate-commit"))?;
    Ok(())
}

/// Opens a catalog-style database in refuse-before-write order: connection
/// policy that writes nothing (busy timeout, `synchronous=FULL`, read back);
/// `migrate` — one `BEGIN IMMEDIATE` transaction that refuses a newer or
/// foreign file untouched or applies every missing step; then WAL,
/// `synchronous=FULL` again and foreign keys, each read back.
pub(crate) fn open_migrated(
    path: &Path,
    busy: Duration,
    migrate: impl FnOnce(&mut Connection) -> Result<(), OpenError>,
) -> Result<Connection, OpenError> {
    refuse_unopenable(path)?;
    let mut conn = Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE
            | rusqlite::OpenFlags::SQLITE_OPEN_CREATE
            | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(Fault::db("open"))?;
    configure(&conn, busy)?;
    migrate(&mut conn)?;
    set_journal_mode(&conn, "wal")?;
    set_synchronous_full(&conn)?;
    conn.execute_batch("PRAGMA foreign_keys = ON")
        .map_err(Fault::db("foreign-keys"))?;
    let fk: i64 = conn
        .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
        .map_err(Fault::db("foreign-keys"))?;
    if fk != 1 {
        return Err(OpenError::PragmaDeclined {
            pragma: "foreign_keys",
            wanted: "1".into(),
            got: fk.to_string(),
        });
    }
    Ok(conn)
}
