//! Read-only opens: a database is read without creating, migrating or
//! writing anything, and without waiting behind a writer.
//!
//! A read-only open (`ReadOnly::open`):
//!
//! - never creates the file (a path that is not a regular file is
//!   [`OpenError::UnopenablePath`]), never migrates, never sets a journal
//!   mode or any pragma that writes (only the busy timeout and
//!   `query_only`, which are connection state), and opens with
//!   `SQLITE_OPEN_READ_ONLY` (URI `mode=ro`);
//! - with an expectation (`Expect`), refuses with
//!   [`OpenError::NotReadable`] — naming the file and the rule
//!   ([`Refusal`]) — a zero-length file, a file without SQLite's header, an
//!   empty or unidentified database, another application's database, or a
//!   `user_version` outside what the read path reads;
//! - runs every read in one deferred transaction. In WAL mode that is a
//!   snapshot of the last commit: a writer holding `BEGIN IMMEDIATE` (or an
//!   uncommitted write) neither delays the read nor shows in it.
//!
//! ## Two ways to read, and why
//!
//! SQLite reads a WAL-mode database through its `-wal` and `-shm` files,
//! and a `mode=ro` connection **creates** both when they are missing and the
//! directory is writable — and, unable to checkpoint, leaves them behind
//! when it closes. A writer that closed cleanly removed them, so a plain
//! `mode=ro` read of a quiescent catalog would change its directory. So:
//!
//! - **Quiescent** — no `-wal` and no `-journal` beside the file: nothing
//!   can be pending outside the file itself, and it is read with
//!   `immutable=1` (no locks, no `-wal`, no `-shm`; nothing is created).
//!   `immutable` is only sound while nobody writes, so each read is
//!   bracketed by a `Stamp` of the file (device, inode, length, mtime,
//!   ctime, its 100-byte header, whether `-wal` / `-journal` exist): a read
//!   whose stamp moved is discarded and retried on a fresh connection,
//!   which, once a writer's `-wal` exists, is a live one. The residual
//!   assumption is that a write to the file moves its mtime or ctime (a
//!   checkpoint writes the file; a filesystem whose timestamps do not move
//!   on write would defeat the check).
//! - **Live** — a `-wal` or `-journal` exists (a writer is, or was, at
//!   work): a plain `mode=ro` connection that takes part in SQLite's
//!   locking, reading through the writer's existing `-wal` and `-shm`, so it
//!   creates nothing in the usual case. Two cases do create files, as any
//!   SQLite reader would: a `-wal` without its `-shm` (SQLite needs a
//!   wal-index and creates `-shm`), and a writer that closes in the instant
//!   between the check and the open (its files are gone, SQLite recreates
//!   them).
//!
//! A quiescent read that keeps seeing the file move (two attempts) falls
//! back to a live connection: correctness first.
//!
//! ## A hot journal
//!
//! A database in rollback-journal mode (not WAL: e.g. made or switched by
//! another tool) whose writer was interrupted mid-transaction keeps a hot
//! `-journal` beside it: the original content of every page its
//! transaction overwrote, while the file may already hold the new,
//! uncommitted pages. SQLite rolls a hot journal back on
//! the next read by a connection that can write, under an exclusive lock;
//! a read-only connection cannot, and SQLite refuses its read
//! (`SQLITE_READONLY_ROLLBACK`, "attempt to write a readonly database").
//! Such a read fails with [`OpenError::RecoveryNeeded`] naming the file and
//! its journal, whether at the open or at a later read (each read
//! transaction first reads the header cookie, so it is the read's own
//! failure), and nothing is written. Every writing open recovers the file
//! as a side effect of its first read;
//! [`crate::control::SqliteControlCatalog::recover`] does only that. Tested
//! on a real hot journal (a writer SIGKILLed after its uncommitted pages
//! spilled into the file) in `tests/hot_journal.rs`.
//!
//! ## Read-only filesystems
//!
//! On a read-only filesystem, or with a read-only directory: a quiescent
//! file reads as above (it needs nothing but read access). A live file
//! reads if its `-wal` and `-shm` both exist and are readable (SQLite opens
//! `-shm` read-only and reads the WAL directly); if `-shm` is missing the
//! open fails with [`OpenError::Sqlite`] (`SQLITE_CANTOPEN`) — SQLite cannot
//! read a WAL database without a wal-index it can create or read.
//!
//! What is tested (`tests/readonly.rs` of this crate, and the cli's
//! `tests/catalog.rs` through the binary): the file's SHA-256, its `-wal`'s
//! SHA-256 and the directory listing are identical before and after every
//! read on a zero-length file, on foreign, empty, non-SQLite and
//! newer-version files, on a quiescent catalog and on a catalog whose
//! writer holds an uncommitted `BEGIN IMMEDIATE` transaction (read at once,
//! committed state only); a file of mode 0444 in a directory of mode 0555
//! reads the same. What is not: the tests run as root, whom permission
//! bits do not stop, and mount nothing, so a genuinely read-only filesystem
//! (`EROFS`) and a permission-denied `-shm` are documented above from
//! SQLite's behaviour, not exercised.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags, Transaction, TransactionBehavior};

use crate::config::{with_suffix, OpenError, Refusal};
use crate::fault::Fault;

/// What a read path reads: the kind's name (with its article, for
/// messages), its `application_id` and the `user_version`s it can read.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Expect {
    /// `"a control catalog"`, `"a catalogue"`, ….
    pub(crate) kind: &'static str,
    /// The kind's `application_id`.
    pub(crate) application_id: i64,
    /// The lowest readable `user_version`.
    pub(crate) oldest: i64,
    /// The highest readable `user_version`.
    pub(crate) newest: i64,
}

/// SQLite's 16-byte file header prefix.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// How many quiescent attempts a read makes before it falls back to a
/// live connection.
const QUIESCENT_ATTEMPTS: usize = 2;

/// What a quiescent (`immutable`) read relies on not moving.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    id: (u64, u64),
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    header: Vec<u8>,
    wal: bool,
    journal: bool,
}

impl Stamp {
    /// Takes the stamp of `path` (a regular file), reading at most its
    /// first 100 bytes.
    pub(crate) fn take(path: &Path) -> Result<Stamp, OpenError> {
        use std::io::Read;
        let unopenable = |reason: String| OpenError::UnopenablePath {
            path: path.to_path_buf(),
            reason,
        };
        let meta = std::fs::metadata(path).map_err(|e| unopenable(e.to_string()))?;
        if !meta.is_file() {
            return Err(unopenable("not a regular file".to_owned()));
        }
        let mut header = Vec::with_capacity(100);
        std::fs::File::open(path)
            .and_then(|f| f.take(100).read_to_end(&mut header))
            .map_err(|e| unopenable(e.to_string()))?;
        let (id, mtime, ctime) = times(&meta);
        Ok(Stamp {
            id,
            len: meta.len(),
            mtime,
            ctime,
            header,
            wal: exists(&with_suffix(path, "-wal"))?,
            journal: exists(&with_suffix(path, "-journal"))?,
        })
    }

    /// Whether nothing can be pending outside the file itself.
    fn quiescent(&self) -> bool {
        !self.wal && !self.journal
    }
}

#[cfg(unix)]
fn times(meta: &std::fs::Metadata) -> ((u64, u64), (i64, i64), (i64, i64)) {
    use std::os::unix::fs::MetadataExt;
    (
        (meta.dev(), meta.ino()),
        (meta.mtime(), meta.mtime_nsec()),
        (meta.ctime(), meta.ctime_nsec()),
    )
}

#[cfg(not(unix))]
fn times(meta: &std::fs::Metadata) -> ((u64, u64), (i64, i64), (i64, i64)) {
    let nanos = |t: std::io::Result<std::time::SystemTime>| {
        t.ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or((0, 0), |d| {
                (
                    i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                    i64::from(d.subsec_nanos()),
                )
            })
    };
    ((0, 0), nanos(meta.modified()), nanos(meta.created()))
}

fn exists(path: &Path) -> Result<bool, OpenError> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(OpenError::UnopenablePath {
            path: path.to_path_buf(),
            reason: e.to_string(),
        }),
    }
}

/// `path` as an SQLite `file:` URI with `query` (every byte outside the
/// unreserved set and `/` percent-encoded).
fn uri(path: &Path, query: &str) -> String {
    #[cfg(unix)]
    let bytes: Vec<u8> = {
        use std::os::unix::ffi::OsStrExt;
        path.as_os_str().as_bytes().to_vec()
    };
    #[cfg(not(unix))]
    let bytes: Vec<u8> = path.to_string_lossy().as_bytes().to_vec();
    let mut out = String::from("file:");
    for b in bytes {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out.push('?');
    out.push_str(query);
    out
}

/// How the current connection reads.
enum Mode {
    /// `immutable=1`, valid while the file's stamp stays this one.
    Quiescent(Stamp),
    /// `mode=ro` with SQLite's locking.
    Live,
}

/// A catalog handle's connection: a migrated read-write one, or a
/// read-only one. The control catalog and the catalogue share it.
#[derive(Debug)]
pub(crate) enum Conn {
    /// Opened by `open`: reads and writes.
    Write(Connection),
    /// Opened by `open_read_only`: reads only.
    Read(ReadOnly),
}

impl Conn {
    /// Runs `f`, a read answered by one statement: on a read-write
    /// connection without a transaction of its own (in autocommit mode one
    /// statement is atomic and sees one snapshot, and `BEGIN` and `COMMIT`
    /// would double its cost); on a read-only connection inside the read
    /// transaction its checks need.
    pub(crate) fn read_alone<T, E>(
        &mut self,
        mut f: impl FnMut(&Connection) -> Result<T, E>,
        fault: impl Fn(String) -> E,
    ) -> Result<T, E> {
        match self {
            Conn::Write(conn) => f(conn),
            Conn::Read(ro) => ro.read(|tx| f(tx)).map_err(|e| fault(e.to_string()))?,
        }
    }

    /// Runs `f` in one transaction of `behavior` and commits it. A
    /// read-only connection runs only deferred (read) transactions: any
    /// other is refused before anything runs, and nothing is written.
    /// Every failure outside `f` (begin, commit, a read-only file no longer
    /// readable) is `fault` of its reason; `f`'s own error is passed on.
    pub(crate) fn transact<T, E>(
        &mut self,
        behavior: TransactionBehavior,
        mut f: impl FnMut(&Transaction<'_>) -> Result<T, E>,
        fault: impl Fn(String) -> E,
    ) -> Result<T, E> {
        match self {
            Conn::Write(conn) => {
                let tx = conn
                    .transaction_with_behavior(behavior)
                    .map_err(|e| fault(Fault::Db("begin", e).reason()))?;
                let out = f(&tx)?;
                tx.commit()
                    .map_err(|e| fault(Fault::Db("commit", e).reason()))?;
                Ok(out)
            }
            Conn::Read(ro) => {
                if !matches!(behavior, TransactionBehavior::Deferred) {
                    return Err(fault(format!(
                        "read-only: {} was opened with open_read_only; nothing was written",
                        ro.path().display()
                    )));
                }
                ro.read(f).map_err(|e| fault(e.to_string()))?
            }
        }
    }
}

/// A catalog file's handle: its connection behind a mutex, its path, and
/// whether it is a test's temp file (removed with its siblings when the
/// handle drops). The catalogue and the control catalog are each one.
#[derive(Debug)]
pub(crate) struct Handle {
    conn: Mutex<Conn>,
    path: PathBuf,
    temp: bool,
    /// The catalog's kind, for the message of a poisoned mutex.
    kind: &'static str,
}

impl Handle {
    /// The read-write handle of the catalog at `path`, opened and migrated
    /// by [`config::open_migrated`](crate::config::open_migrated).
    pub(crate) fn write(
        path: &Path,
        busy: Duration,
        migrate: fn(&mut Connection) -> Result<(), OpenError>,
        kind: &'static str,
    ) -> Result<Self, OpenError> {
        let conn = crate::config::open_migrated(path, busy, migrate)?;
        Ok(Handle::new(Conn::Write(conn), path.to_path_buf(), kind))
    }

    /// The read-only handle over `ro`, opened at `path`.
    pub(crate) fn read(ro: ReadOnly, path: PathBuf, kind: &'static str) -> Self {
        Handle::new(Conn::Read(ro), path, kind)
    }

    fn new(conn: Conn, path: PathBuf, kind: &'static str) -> Self {
        Handle {
            conn: Mutex::new(conn),
            path,
            temp: false,
            kind,
        }
    }

    /// This handle, its file removed when it drops.
    pub(crate) fn into_temp(mut self) -> Self {
        self.temp = true;
        self
    }

    /// The database file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the handle was opened read-only.
    pub(crate) fn is_read_only(&self) -> bool {
        matches!(self.conn.lock().as_deref(), Ok(Conn::Read(_)))
    }

    /// [`Conn::transact`] on the handle's connection.
    pub(crate) fn transact<T, E>(
        &self,
        behavior: TransactionBehavior,
        f: impl FnMut(&Transaction<'_>) -> Result<T, E>,
        fault: impl Fn(String) -> E,
    ) -> Result<T, E> {
        self.lock(&fault)?.transact(behavior, f, fault)
    }

    /// [`Conn::read_alone`] on the handle's connection.
    pub(crate) fn read_alone<T, E>(
        &self,
        f: impl FnMut(&Connection) -> Result<T, E>,
        fault: impl Fn(String) -> E,
    ) -> Result<T, E> {
        self.lock(&fault)?.read_alone(f, fault)
    }

    fn lock<E>(&self, fault: &impl Fn(String) -> E) -> Result<MutexGuard<'_, Conn>, E> {
        self.conn
            .lock()
            .map_err(|_| fault(format!("{} connection mutex poisoned", self.kind)))
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        if self.temp {
            crate::config::remove_temp_db(&self.path);
        }
    }
}

/// A read-only connection (see the module documentation).
pub(crate) struct ReadOnly {
    conn: Connection,
    mode: Mode,
    path: PathBuf,
    busy: Duration,
    expect: Option<Expect>,
}

impl std::fmt::Debug for ReadOnly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadOnly")
            .field("path", &self.path)
            .field(
                "mode",
                &match self.mode {
                    Mode::Quiescent(_) => "quiescent",
                    Mode::Live => "live",
                },
            )
            .finish_non_exhaustive()
    }
}

impl ReadOnly {
    /// Opens `path` read-only. With `expect`, the file is refused unless it
    /// is a database of that kind in a readable version; without, any file
    /// SQLite can read is opened (for raw inspection).
    pub(crate) fn open(
        path: &Path,
        expect: Option<Expect>,
        busy: Duration,
    ) -> Result<ReadOnly, OpenError> {
        let stamp = Stamp::take(path)?;
        if let Some(e) = &expect {
            prefilter(path, e, &stamp)?;
        }
        let (conn, mode) = connect(path, stamp, busy, false)?;
        let mut ro = ReadOnly {
            conn,
            mode,
            path: path.to_path_buf(),
            busy,
            expect,
        };
        if let Some(e) = expect {
            let path = ro.path.clone();
            ro.read(|tx| check(&path, &e, tx))??;
        }
        Ok(ro)
    }

    /// The file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` in one deferred read transaction over a consistent committed
    /// state. The outer error is the read's own failure (the file vanished,
    /// SQLite could not begin, a reopened file is no longer readable); the
    /// inner result is `f`'s. `f` may run more than once: a quiescent read
    /// whose file moved underneath it is discarded and run again.
    pub(crate) fn read<T, E>(
        &mut self,
        mut f: impl FnMut(&Transaction<'_>) -> Result<T, E>,
    ) -> Result<Result<T, E>, OpenError> {
        let mut attempts = 0;
        loop {
            let before = match &self.mode {
                Mode::Live => None,
                Mode::Quiescent(at_open) => {
                    let now = Stamp::take(&self.path)?;
                    if now != *at_open {
                        attempts += 1;
                        self.reconnect(now, attempts >= QUIESCENT_ATTEMPTS)?;
                        continue;
                    }
                    Some(now)
                }
            };
            let out = self.once(&mut f)?;
            let Some(before) = before else {
                return Ok(out);
            };
            let after = Stamp::take(&self.path)?;
            if after == before {
                return Ok(out);
            }
            // The file moved during the read: discard what was read.
            attempts += 1;
            self.reconnect(after, attempts >= QUIESCENT_ATTEMPTS)?;
        }
    }

    fn once<T, E>(
        &mut self,
        f: &mut impl FnMut(&Transaction<'_>) -> Result<T, E>,
    ) -> Result<Result<T, E>, OpenError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .map_err(|e| not_a_database(&self.path, self.expect.as_ref(), "begin-read", e))?;
        // The first read of the transaction takes SQLite's read lock, and
        // with it meets a hot journal left since the last read: reading the
        // header cookie first makes that the read's own typed failure
        // ([`OpenError::RecoveryNeeded`]) rather than an error inside `f`.
        tx.query_row("PRAGMA schema_version", [], |r| r.get::<_, i64>(0))
            .map_err(|e| not_a_database(&self.path, self.expect.as_ref(), "begin-read", e))?;
        let out = f(&tx);
        // Ending a read transaction writes nothing; a failure to end it is
        // the read's failure only when the read itself succeeded.
        let ended = tx
            .commit()
            .map_err(|e| OpenError::from(Fault::Db("end-read", e)));
        match (out, ended) {
            (Ok(v), Ok(())) => Ok(Ok(v)),
            (Ok(_), Err(e)) => Err(e),
            (Err(e), _) => Ok(Err(e)),
        }
    }

    /// Replaces the connection after the file moved, re-checking what it is.
    fn reconnect(&mut self, stamp: Stamp, force_live: bool) -> Result<(), OpenError> {
        if let Some(e) = &self.expect {
            prefilter(&self.path, e, &stamp)?;
        }
        let (conn, mode) = connect(&self.path, stamp, self.busy, force_live)?;
        self.conn = conn;
        self.mode = mode;
        if let Some(e) = self.expect {
            let path = self.path.clone();
            // A live connection needs no stamp; a quiescent one is checked
            // by the read that follows.
            self.once(&mut |tx: &Transaction<'_>| check(&path, &e, tx))??;
        }
        Ok(())
    }
}

/// What a recovery found and did
/// ([`crate::control::SqliteControlCatalog::recover`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// The database file.
    pub path: PathBuf,
    /// Its rollback journal (`<path>-journal`).
    pub journal: PathBuf,
    /// Whether a journal that looked hot (present, its first byte not zero)
    /// was beside the file before the writing read and is gone after it:
    /// SQLite rolled the interrupted transaction back. (A writer of
    /// another process that committed in between would read the same; the
    /// file is at a committed state either way.)
    pub rolled_back: bool,
}

/// Whether `journal` looks hot from its bytes alone: it exists, is not
/// empty and its first byte is not zero (SQLite also requires that no
/// connection holds the write lock, which only SQLite can tell).
fn looks_hot(journal: &Path) -> Result<bool, OpenError> {
    use std::io::Read;
    let mut first = [0u8; 1];
    match std::fs::File::open(journal) {
        Ok(mut f) => match f.read(&mut first) {
            Ok(n) => Ok(n == 1 && first[0] != 0),
            Err(e) => Err(OpenError::UnopenablePath {
                path: journal.to_path_buf(),
                reason: e.to_string(),
            }),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(OpenError::UnopenablePath {
            path: journal.to_path_buf(),
            reason: e.to_string(),
        }),
    }
}

/// The application id in a database file's header (bytes 68..72).
fn header_application_id(header: &[u8]) -> Option<i64> {
    let bytes: [u8; 4] = header.get(68..72)?.try_into().ok()?;
    Some(i64::from(i32::from_be_bytes(bytes)))
}

/// Rolls back a hot journal beside the existing database at `path`, and
/// does nothing else: one read through a writing connection (never
/// creating the file), which is where SQLite rolls a hot journal back under
/// an exclusive lock; no journal-mode change, no migration, no other write.
/// A file without a hot journal is read and left byte-identical.
///
/// Refused before anything is opened, the file byte-identical and its
/// journal kept: a path that is not a regular file
/// ([`OpenError::UnopenablePath`]), and — [`OpenError::NotReadable`] — a
/// zero-length file, a file without SQLite's header, or one whose header
/// names another application than `expect`'s. A header naming no
/// application (an interrupted creation, whose rollback leaves an empty
/// file) is recovered; what the file holds afterwards is for a read-only
/// open to say.
pub(crate) fn recover(path: &Path, e: &Expect, busy: Duration) -> Result<Recovery, OpenError> {
    let stamp = Stamp::take(path)?;
    if stamp.len == 0 {
        return Err(refused(path, e, Refusal::ZeroLength));
    }
    prefilter(path, e, &stamp)?;
    match header_application_id(&stamp.header) {
        Some(app) if app != 0 && app != e.application_id => {
            return Err(refused(
                path,
                e,
                Refusal::ForeignApplication {
                    found: app,
                    expected: e.application_id,
                },
            ))
        }
        Some(_) => {}
        None => return Err(refused(path, e, Refusal::NotSqlite)),
    }
    let journal = with_suffix(path, "-journal");
    let hot = looks_hot(&journal)?;
    let mut conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(Fault::db("open-recover"))?;
    // SQLite quietly opens a file it may not write read-only; that
    // connection could not roll the journal back.
    if conn
        .is_readonly(rusqlite::DatabaseName::Main)
        .map_err(Fault::db("open-recover"))?
    {
        return Err(OpenError::UnopenablePath {
            path: path.to_path_buf(),
            reason: "not writable: rolling a journal back writes the file".to_owned(),
        });
    }
    crate::config::configure(&conn, busy)?;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Deferred)
        .map_err(Fault::db("recover-begin"))?;
    tx.query_row("PRAGMA schema_version", [], |r| r.get::<_, i64>(0))
        .map_err(|err| not_a_database(path, Some(e), "recover-read", err))?;
    tx.commit().map_err(Fault::db("recover-end"))?;
    conn.close()
        .map_err(|(_, err)| OpenError::from(Fault::Db("recover-close", err)))?;
    let gone = !exists(&journal)?;
    Ok(Recovery {
        path: path.to_path_buf(),
        journal,
        rolled_back: hot && gone,
    })
}

/// Opens the connection the stamp calls for.
fn connect(
    path: &Path,
    stamp: Stamp,
    busy: Duration,
    force_live: bool,
) -> Result<(Connection, Mode), OpenError> {
    let (query, mode) = if stamp.quiescent() && !force_live {
        ("mode=ro&immutable=1", Mode::Quiescent(stamp))
    } else {
        ("mode=ro", Mode::Live)
    };
    let conn = Connection::open_with_flags(
        uri(path, query),
        OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(Fault::db("open-read-only"))?;
    conn.busy_timeout(busy).map_err(Fault::db("busy-timeout"))?;
    let got: i64 = conn
        .query_row("PRAGMA busy_timeout", [], |r| r.get(0))
        .map_err(Fault::db("busy-timeout"))?;
    let wanted = i64::try_from(busy.as_millis())
        .unwrap_or(i64::MAX)
        .min(i64::from(i32::MAX));
    if got != wanted {
        return Err(OpenError::PragmaDeclined {
            pragma: "busy_timeout",
            wanted: wanted.to_string(),
            got: got.to_string(),
        });
    }
    conn.execute_batch("PRAGMA query_only = ON")
        .map_err(Fault::db("query-only"))?;
    let q: i64 = conn
        .query_row("PRAGMA query_only", [], |r| r.get(0))
        .map_err(Fault::db("query-only"))?;
    if q != 1 {
        return Err(OpenError::PragmaDeclined {
            pragma: "query_only",
            wanted: "1".to_owned(),
            got: q.to_string(),
        });
    }
    conn.set_prepared_statement_cache_capacity(32);
    Ok((conn, mode))
}

fn refused(path: &Path, e: &Expect, rule: Refusal) -> OpenError {
    OpenError::NotReadable {
        path: path.to_path_buf(),
        kind: e.kind,
        rule,
    }
}

/// What the file's own bytes already refuse, before SQLite opens it. Only a
/// quiescent file's header is authoritative (a live one's may lag its WAL),
/// so the version is left to [`check`]; zero length and a foreign header
/// are refused either way.
fn prefilter(path: &Path, e: &Expect, stamp: &Stamp) -> Result<(), OpenError> {
    if stamp.len == 0 && stamp.quiescent() {
        return Err(refused(path, e, Refusal::ZeroLength));
    }
    if stamp.len > 0 && !stamp.header.starts_with(SQLITE_MAGIC) {
        return Err(refused(path, e, Refusal::NotSqlite));
    }
    Ok(())
}

/// Whether SQLite refused a read because a hot rollback journal needs a
/// connection that can write (`SQLITE_READONLY_ROLLBACK`).
fn needs_rollback(err: &rusqlite::Error) -> bool {
    err.sqlite_error()
        .is_some_and(|e| e.extended_code == rusqlite::ffi::SQLITE_READONLY_ROLLBACK)
}

/// `SQLITE_NOTADB` on a file that was expected to be a database is the
/// [`Refusal::NotSqlite`] rule; a hot journal a read-only connection may
/// not roll back is [`OpenError::RecoveryNeeded`]; anything else is
/// SQLite's failure.
fn not_a_database(
    path: &Path,
    expect: Option<&Expect>,
    op: &'static str,
    err: rusqlite::Error,
) -> OpenError {
    if needs_rollback(&err) {
        return OpenError::RecoveryNeeded {
            path: path.to_path_buf(),
            journal: with_suffix(path, "-journal"),
        };
    }
    match expect {
        Some(e) if err.sqlite_error_code() == Some(ErrorCode::NotADatabase) => {
            refused(path, e, Refusal::NotSqlite)
        }
        _ => OpenError::from(Fault::Db(op, err)),
    }
}

/// The authoritative identity check, inside a read transaction.
fn check(path: &Path, e: &Expect, tx: &Transaction<'_>) -> Result<(), OpenError> {
    let read = |sql: &str, op: &'static str| -> Result<i64, OpenError> {
        tx.query_row(sql, [], |r| r.get(0))
            .map_err(|err| not_a_database(path, Some(e), op, err))
    };
    let app = read("PRAGMA application_id", "read-application-id")?;
    let version = read("PRAGMA user_version", "read-version")?;
    if app == 0 && version == 0 {
        let objects = read("SELECT count(*) FROM sqlite_master", "read-schema")?;
        let rule = if objects == 0 {
            Refusal::Empty
        } else {
            Refusal::Unidentified { objects }
        };
        return Err(refused(path, e, rule));
    }
    if app != e.application_id {
        return Err(refused(
            path,
            e,
            Refusal::ForeignApplication {
                found: app,
                expected: e.application_id,
            },
        ));
    }
    if !(e.oldest..=e.newest).contains(&version) {
        return Err(refused(
            path,
            e,
            Refusal::Version {
                found: version,
                oldest: e.oldest,
                newest: e.newest,
            },
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_percent_encode_what_sqlite_would_parse() {
        assert_eq!(
            uri(Path::new("/a b/c?d#e%f.db"), "mode=ro"),
            "file:/a%20b/c%3Fd%23e%25f.db?mode=ro"
        );
        assert_eq!(uri(Path::new("rel/x.db"), "q"), "file:rel/x.db?q");
    }
}
