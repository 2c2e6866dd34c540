//! The control catalog of worlds persisted in SQLite.
//!
//! [`SqliteControlCatalog`] implements `custos_core::world::ControlCatalog`.
//! It holds no rule: every write is one `BEGIN IMMEDIATE` transaction that
//! loads the touched world's row and signatures into a
//! [`WorldSlot`], calls [`world::decide`], and applies its effects (the
//! World row, the fence, new signatures) in the same transaction. Every read is one deferred transaction. Rows decode
//! totally: an unknown status, a malformed descriptor, or a stored
//! fingerprint that is not its schema's fails the read with `Invalid`; a
//! missing writer mode (a legacy row) reads as `resumable`, an unknown one
//! is kept exactly as read.
//!
//! Connection policy as every database of this shell: busy timeout and
//! `synchronous=FULL` read back, then the version check in one
//! `BEGIN IMMEDIATE` transaction (a newer or unknown version, or another
//! application's file, is refused with the file byte-untouched), then WAL
//! and foreign keys, read back. `PRAGMA application_id` is
//! [`CONTROL_APPLICATION_ID`] (`"CuCt"`), `user_version`
//! [`CONTROL_VERSION`].
//!
//! Location: [`catalog_path`] resolves `custos_core::identity::catalog_location`
//! with the remote directory from `CUSTOS_CATALOG_DIR`, else
//! `~/.custos/catalogs` ([`default_catalog_dir`]).
//!
//! The tick head is advisory: [`record_tick_head`] logs a failure loudly
//! (`tracing::error!`) and never fails its caller.
//!
//! ## Reading without writing
//!
//! [`SqliteControlCatalog::open_read_only`] is the open of every read-only
//! caller (`custos catalog discover|show`): it never creates, migrates or
//! writes — not even the journal mode — and refuses with
//! [`OpenError::NotReadable`] (naming the file and the rule) a file that is
//! zero-length, empty, not SQLite, another application's, or not of
//! [`CONTROL_VERSION`], leaving it byte-identical. Its reads are one
//! deferred transaction each and never wait for a writer: a writer holding
//! an uncommitted `BEGIN IMMEDIATE` transaction is invisible to them. A
//! read-only handle refuses [`ControlCatalog::apply`] without touching the
//! file. How the file and its directory stay unchanged (no `-wal` / `-shm`
//! is created beside a quiescent catalog), and what a read-only filesystem
//! allows: [`crate::readonly`].
//!
//! ## A hot journal
//!
//! A catalog in rollback-journal mode (a file another tool made or
//! switched away from WAL) whose writer was interrupted mid-transaction
//! has a hot `-journal` beside it, and possibly half-written pages in it.
//! A read-only open cannot roll that back and refuses with
//! [`OpenError::RecoveryNeeded`] (naming the file and the journal),
//! writing nothing. Every writing open ([`SqliteControlCatalog::open`])
//! rolls it back in its first transaction and proceeds — then, as always,
//! switches the file to WAL. [`SqliteControlCatalog::recover`] rolls it
//! back and does nothing else: the journal mode and the version stay as
//! they were.
//!
//! ## Writer fences
//!
//! Version 2 adds `control_fences`: one row per fenced world (highest
//! issued epoch, highest imported floor, holder), loaded into the slot with
//! the world and written back in the same `BEGIN IMMEDIATE` transaction as
//! the decision that changed it — an acquire, or a tick commit's admission
//! (which changes nothing in the fence) — so two racing acquirers get
//! distinct epochs and a stale writer's tick is refused against the state
//! it would overwrite. A version-1 file is migrated by the first writing
//! open; a read-only handle reads it as version 1, every world unfenced.
//!
//! ## Bounded rows
//!
//! Every row is read by core's readers (`StoredWorld::read`,
//! `StoredSignature::read`, `StoredFence::read`): every stored text is
//! checked against its bound before it is copied or decoded — identity
//! columns against `world::MAX_ID_LEN`, status and writer mode against
//! [`MAX_WORD_LEN`], the holder against `fence::MAX_HOLDER_LEN`, the
//! signature's schema and component JSON against
//! [`MAX_SIGNATURE_JSON_LEN`] — and a value beyond it fails the read with
//! `Invalid` naming the table, row and column.

use std::path::{Path, PathBuf};
use std::time::Duration;

use custos_core::fence::{Epoch, Holder, WorldFence};
use custos_core::identity::{catalog_location, StorageIdentity};
use custos_core::world::{
    self,
    codec::{self, StoredFence, StoredSignature, StoredWorld},
    ControlCatalog, Effect, Outcome, Request, SignatureRecord, WorldError, WorldInfo, WorldRecord,
    WorldSlot,
};
use rusqlite::{params, Connection, OptionalExtension, Row, Transaction, TransactionBehavior};

mod admin;

use crate::codec::cells;
use crate::config::{self, OpenError, DEFAULT_BUSY_TIMEOUT};
use crate::fault::Fault;
pub use crate::readonly::Recovery;
use crate::readonly::{Expect, Handle, ReadOnly};

/// The control-catalog version this build writes (and the newest it reads).
pub const CONTROL_VERSION: i64 = 3;

/// The oldest control-catalog version a read-only open reads (version 1 has
/// no fences: every world reads as never fenced).
pub const CONTROL_OLDEST_READABLE: i64 = 1;

/// `PRAGMA application_id` of a custos control catalog (`"CuCt"` in ASCII).
pub const CONTROL_APPLICATION_ID: i64 = 0x4375_4374;

/// The schema of version 1.
pub const SCHEMA_V1: &str = "
CREATE TABLE control_worlds (
    world_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    run_id TEXT,
    parent_world_id TEXT,
    writer_mode TEXT,
    status TEXT NOT NULL,
    tick_head INTEGER NOT NULL
) STRICT;
CREATE TABLE control_signatures (
    world_id TEXT NOT NULL REFERENCES control_worlds (world_id),
    table_id TEXT NOT NULL,
    components TEXT NOT NULL,
    schema TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    PRIMARY KEY (world_id, table_id)
) STRICT;
";

/// Version 2: one writer-fence row per fenced world (the fence machine's
/// `WorldFence`): the highest epoch issued here, the
/// highest imported floor, and who acquired the issued epoch; and the
/// migration administration (the `admin` module): at most one
/// reservation (its canonical bytes, and the canonical receipt with its
/// digest once completed) and the control bundle staged for it.
pub const SCHEMA_V2: &str = "
CREATE TABLE control_fences (
    world_id TEXT PRIMARY KEY REFERENCES control_worlds (world_id),
    issued INTEGER NOT NULL CHECK (issued >= 0),
    floor INTEGER NOT NULL CHECK (floor >= 0),
    holder TEXT
) STRICT;
CREATE TABLE control_migrations (
    migration_id TEXT PRIMARY KEY,
    plan_digest TEXT NOT NULL,
    reservation BLOB NOT NULL,
    receipt BLOB,
    receipt_digest TEXT
) STRICT;
CREATE TABLE control_staged (
    migration_id TEXT PRIMARY KEY REFERENCES control_migrations (migration_id),
    bundle BLOB NOT NULL
) STRICT;
";

/// Version 3: the source-side departure record (the `admin` module,
/// `custos_core::migration::departure`): one row holding the canonical
/// bytes of every migration that planned to move this endpoint, replaced
/// by compare-and-swap in one `BEGIN IMMEDIATE` transaction.
pub const SCHEMA_V3: &str = "
CREATE TABLE control_departures (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    departures BLOB NOT NULL
) STRICT;
";

pub use custos_core::columns::MAX_WORD_LEN;
pub use custos_core::world::codec::MAX_SIGNATURE_JSON_LEN;

/// What the read-only open reads.
const EXPECT: Expect = Expect {
    kind: "a control catalog",
    application_id: CONTROL_APPLICATION_ID,
    oldest: CONTROL_OLDEST_READABLE,
    newest: CONTROL_VERSION,
};

/// The environment variable naming the directory of remote identities'
/// catalogs.
pub const CATALOG_DIR_ENV: &str = "CUSTOS_CATALOG_DIR";

/// `CUSTOS_CATALOG_DIR` if set and non-empty, else `$HOME/.custos/catalogs`.
pub fn default_catalog_dir() -> Option<PathBuf> {
    match std::env::var_os(CATALOG_DIR_ENV) {
        Some(d) if !d.is_empty() => Some(PathBuf::from(d)),
        _ => std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(|h| PathBuf::from(h).join(".custos").join("catalogs")),
    }
}

/// The catalog file of `id`; `None` when a remote identity needs a catalog
/// directory and none can be resolved.
pub fn catalog_path(id: &StorageIdentity) -> Option<PathBuf> {
    let dir = if id.is_local() {
        String::new()
    } else {
        default_catalog_dir()?.to_string_lossy().into_owned()
    };
    Some(PathBuf::from(catalog_location(id, &dir)))
}

/// Records an advisory tick head. A failure is logged loudly and never
/// reaches the caller: the tick's data-plane writes already succeeded.
pub fn record_tick_head<C: ControlCatalog + ?Sized>(catalog: &C, world_id: &str, tick: u64) {
    let req = Request::AdvanceTick {
        world_id: world_id.to_owned(),
        tick,
    };
    if let Err(e) = catalog.apply(&req) {
        tracing::error!(
            world_id,
            tick,
            reason = e.reason(),
            error = %e,
            "control catalog: advisory tick-head update failed; the tick stands"
        );
    }
}

/// A control catalog database.
#[derive(Debug)]
pub struct SqliteControlCatalog {
    h: Handle,
}

type Res<T> = Result<T, WorldError>;

/// The control catalog's kind, as its handle names it.
const KIND: &str = "control catalog";

fn db(op: &'static str) -> impl FnOnce(rusqlite::Error) -> WorldError {
    move |e| WorldError::BackendFault {
        reason: Fault::Db(op, e).reason(),
    }
}

impl SqliteControlCatalog {
    /// Opens (creating when missing) the catalog at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, OpenError> {
        Self::open_with(path, DEFAULT_BUSY_TIMEOUT)
    }

    /// Opens the catalog of `id` at its [`catalog_path`], creating the
    /// catalog (and, for a local identity, its namespace directory).
    pub fn open_for(id: &StorageIdentity) -> Result<Self, OpenError> {
        let path = catalog_path(id).ok_or_else(|| OpenError::UnopenablePath {
            path: PathBuf::new(),
            reason: format!("no catalog directory: set {CATALOG_DIR_ENV} or HOME"),
        })?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| OpenError::UnopenablePath {
                path: parent.to_path_buf(),
                reason: e.to_string(),
            })?;
        }
        Self::open(path)
    }

    /// Opens the catalog at `path` in refuse-before-write order (see the
    /// module documentation).
    pub fn open_with(path: impl AsRef<Path>, busy: Duration) -> Result<Self, OpenError> {
        let h = Handle::write(path.as_ref(), busy, migrate, KIND)?;
        Ok(SqliteControlCatalog { h })
    }

    /// Opens the existing catalog at `path` for reading only, with the
    /// default busy timeout (see "Reading without writing" in the module
    /// documentation). Never creates, migrates or writes; a file that is not
    /// a control catalog of [`CONTROL_VERSION`] is
    /// [`OpenError::NotReadable`], a path that is not a regular file
    /// [`OpenError::UnopenablePath`].
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Self, OpenError> {
        Self::open_read_only_with(path, DEFAULT_BUSY_TIMEOUT)
    }

    /// [`SqliteControlCatalog::open_read_only`] with a busy timeout (which
    /// only a rollback-journal file's committing writer can make a read
    /// wait for; a WAL reader never waits for a writer).
    pub fn open_read_only_with(path: impl AsRef<Path>, busy: Duration) -> Result<Self, OpenError> {
        let path = path.as_ref().to_path_buf();
        let mut ro = ReadOnly::open(&path, Some(EXPECT), busy)?;
        // A file with this kind's identity and version but without its
        // tables is a damaged control catalog, not a fault to retry.
        let missing = ro
            .read(|tx| {
                tx.query_row(
                    "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN \
                 ('control_worlds', 'control_signatures')",
                    [],
                    |r| r.get::<_, i64>(0),
                )
            })?
            .map_err(|e| OpenError::Sqlite {
                op: "read the schema",
                message: e.to_string(),
            })?;
        if missing != 2 {
            return Err(OpenError::Corrupt {
                detail: format!(
                    "{} has a control catalog's identity and version but not its tables",
                    path.display()
                ),
            });
        }
        Ok(SqliteControlCatalog {
            h: Handle::read(ro, path, KIND),
        })
    }

    /// Rolls back the hot journal an interrupted writer left beside the
    /// existing control catalog at `path`, and changes nothing else (see
    /// "A hot journal" in the module documentation): no journal-mode change,
    /// no migration. A catalog without a hot journal is left byte-identical
    /// ([`Recovery::rolled_back`] is then false). Never creates the file;
    /// refuses, untouched, a path that is not a writable regular file
    /// ([`OpenError::UnopenablePath`]) and a file that is zero-length, not
    /// SQLite or another application's ([`OpenError::NotReadable`]). Read
    /// the recovered catalog with [`SqliteControlCatalog::open_read_only`].
    pub fn recover(path: impl AsRef<Path>) -> Result<Recovery, OpenError> {
        crate::readonly::recover(path.as_ref(), &EXPECT, DEFAULT_BUSY_TIMEOUT)
    }

    /// Whether this handle was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.h.is_read_only()
    }

    /// A fresh catalog in a new temp file, deleted when dropped. For tests.
    pub fn open_temp() -> Result<Self, OpenError> {
        let h = Self::open(config::temp_db_path("control"))?.h;
        Ok(SqliteControlCatalog { h: h.into_temp() })
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
            .transact(behavior, f, |reason| WorldError::BackendFault { reason })
    }
}

/// The migration steps; their count is [`CONTROL_VERSION`] (checked by the
/// array type).
const CONTROL_STEPS: [&str; CONTROL_VERSION as usize] = [SCHEMA_V1, SCHEMA_V2, SCHEMA_V3];

/// [`config::migrate_identified`] with this catalog's identity and steps.
fn migrate(conn: &mut Connection) -> Result<(), OpenError> {
    config::migrate_identified(conn, CONTROL_APPLICATION_ID, &CONTROL_STEPS)
}

// ------------------------------------------------------------------ rows

const WORLD_SELECT: &str = "SELECT world_id, name, run_id, parent_world_id, writer_mode, status, tick_head FROM control_worlds";
const SIG_SELECT: &str =
    "SELECT world_id, table_id, components, schema, fingerprint FROM control_signatures";

/// One `control_worlds` row, every text bounded before it is copied.
fn raw_world(r: &Row<'_>) -> rusqlite::Result<Res<StoredWorld>> {
    Ok(StoredWorld::read(&mut cells(r, "control_worlds")).map_err(WorldError::from))
}

/// One `control_signatures` row, every text bounded before it is copied.
fn raw_sig(r: &Row<'_>) -> rusqlite::Result<Res<StoredSignature>> {
    Ok(StoredSignature::read(&mut cells(r, "control_signatures")).map_err(WorldError::from))
}

/// Whether the file has the fence table (a version-1 file read through a
/// read-only handle does not: it was never migrated).
fn has_fences(tx: &Transaction<'_>) -> Res<bool> {
    tx.prepare_cached(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'control_fences'",
    )
    .map_err(db("load-fence"))?
    .query_row([], |r| r.get::<_, i64>(0))
    .map(|n| n > 0)
    .map_err(db("load-fence"))
}

/// The world's fence row, decoded totally (default when there is none).
fn load_fence(tx: &Transaction<'_>, world_id: &str) -> Res<WorldFence> {
    if !has_fences(tx)? {
        return Ok(WorldFence::default());
    }
    tx.prepare_cached("SELECT issued, floor, holder FROM control_fences WHERE world_id = ?1")
        .map_err(db("load-fence"))?
        .query_row([world_id], |r| {
            Ok(StoredFence::read(&mut cells(r, "control_fences"), world_id)
                .map_err(WorldError::from)
                .and_then(|f| f.decode(world_id)))
        })
        .optional()
        .map_err(db("load-fence"))?
        .transpose()
        .map(Option::unwrap_or_default)
}

fn write_fence(tx: &Transaction<'_>, world_id: &str, f: &WorldFence) -> Res<()> {
    let int = |what: &'static str, v: Epoch| {
        i64::try_from(v).map_err(|_| WorldError::Invalid {
            what,
            detail: format!("world {world_id}: epoch {v} exceeds what SQLite stores"),
        })
    };
    tx.prepare_cached(
        "INSERT INTO control_fences (world_id, issued, floor, holder) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (world_id) DO UPDATE SET issued = excluded.issued, floor = excluded.floor, holder = excluded.holder",
    )
    .map_err(db("write-fence"))?
    .execute(params![
        world_id,
        int("issued", f.issued)?,
        int("floor", f.floor)?,
        f.holder.as_ref().map(Holder::as_str)
    ])
    .map_err(db("write-fence"))?;
    Ok(())
}

fn load_slot(tx: &Transaction<'_>, world_id: &str) -> Res<WorldSlot> {
    let record = tx
        .prepare_cached(&format!("{WORLD_SELECT} WHERE world_id = ?1"))
        .map_err(db("load-world"))?
        .query_row([world_id], raw_world)
        .optional()
        .map_err(db("load-world"))?
        .transpose()?
        .map(StoredWorld::decode)
        .transpose()?;
    let mut stmt = tx
        .prepare_cached(&format!(
            "{SIG_SELECT} WHERE world_id = ?1 ORDER BY table_id"
        ))
        .map_err(db("load-signatures"))?;
    let raws = stmt
        .query_map([world_id], raw_sig)
        .map_err(db("load-signatures"))?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(db("load-signatures"))?;
    let signatures = raws
        .into_iter()
        .map(|r| r?.decode().map(|s| s.signature))
        .collect::<Res<Vec<_>>>()?;
    let fence = load_fence(tx, world_id)?;
    Ok(WorldSlot {
        record,
        signatures,
        fence,
    })
}

/// Applies one of a decision's effects: one statement each.
pub(super) fn apply_effect(tx: &Transaction<'_>, e: &Effect) -> Res<()> {
    match e {
        Effect::PutWorld(r) => {
            let tick = i64::try_from(r.tick_head).map_err(|_| WorldError::Invalid {
                what: "tick_head",
                detail: r.tick_head.to_string(),
            })?;
            tx.prepare_cached(
                "INSERT INTO control_worlds (world_id, name, run_id, parent_world_id, writer_mode, status, tick_head)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (world_id) DO UPDATE SET status = excluded.status, tick_head = excluded.tick_head",
            )
            .map_err(db("write-world"))?
            .execute(params![
                r.identity.world_id,
                r.identity.name,
                r.identity.run_id,
                r.identity.parent_world_id,
                r.writer_mode.as_str(),
                r.status.as_str(),
                tick
            ])
            .map_err(db("write-world"))?;
        }
        Effect::PutFence { world_id, fence } => write_fence(tx, world_id, fence)?,
        Effect::PutSignature {
            world_id,
            signature: s,
        } => {
            tx.prepare_cached(
                "INSERT INTO control_signatures (world_id, table_id, components, schema, fingerprint)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .map_err(db("write-signature"))?
            .execute(params![
                world_id,
                s.table_id,
                codec::components_to_json(&s.components)?,
                codec::schema_to_json(&s.schema)?,
                s.fingerprint
            ])
            .map_err(db("write-signature"))?;
        }
    }
    Ok(())
}

impl ControlCatalog for SqliteControlCatalog {
    fn apply(&self, req: &Request) -> Result<Outcome, WorldError> {
        self.with(TransactionBehavior::Immediate, |tx| {
            let slot = load_slot(tx, req.world_id())?;
            let d = world::decide(&slot, req)?;
            for e in &d.effects {
                apply_effect(tx, e)?;
            }
            Ok(d.outcome)
        })
    }

    fn discover_worlds(&self) -> Result<Vec<WorldRecord>, WorldError> {
        self.with(TransactionBehavior::Deferred, |tx| {
            let mut stmt = tx
                .prepare_cached(&format!("{WORLD_SELECT} ORDER BY world_id"))
                .map_err(db("discover"))?;
            let raws = stmt
                .query_map([], raw_world)
                .map_err(db("discover"))?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(db("discover"))?;
            raws.into_iter().map(|r| r?.decode()).collect()
        })
    }

    fn open_world_readonly(&self, world_id: &str) -> Result<WorldInfo, WorldError> {
        self.with(TransactionBehavior::Deferred, |tx| {
            load_slot(tx, world_id)?.into_info(world_id)
        })
    }

    fn list_signatures(&self) -> Result<Vec<SignatureRecord>, WorldError> {
        self.with(TransactionBehavior::Deferred, |tx| {
            let mut stmt = tx
                .prepare_cached(&format!("{SIG_SELECT} ORDER BY world_id, table_id"))
                .map_err(db("list-signatures"))?;
            let raws = stmt
                .query_map([], raw_sig)
                .map_err(db("list-signatures"))?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(db("list-signatures"))?;
            raws.into_iter().map(|r| r?.decode()).collect()
        })
    }
}
