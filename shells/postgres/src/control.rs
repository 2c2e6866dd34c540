//! The control catalog of worlds with writer fences, persisted in
//! PostgreSQL.
//!
//! [`PgControlCatalog`] implements `custos_core::world::ControlCatalog` and
//! mirrors the SQLite shell's control catalog (`custos_sqlite::control`):
//! it holds no rule. Every write is one [`Conn::write`] transaction that
//! loads the touched world's row, signatures and fence into a
//! [`WorldSlot`], calls [`world::decide`], and applies its effects (the
//! World row, the fence, new signatures) in the same transaction. Every read is one [`Conn::read`] transaction (one
//! REPEATABLE READ snapshot). Rows decode totally: an unknown status, a
//! negative integer, a malformed descriptor, a stored fingerprint that is
//! not its schema's, or a text beyond its bound fails the read with
//! `Invalid` naming the table, the row and the column — never a panic,
//! never read as absent. A missing writer mode (a legacy row) reads as
//! `resumable`, an unknown one is kept exactly as read.
//!
//! ## One catalog per schema
//!
//! A catalog lives in the target's PostgreSQL schema, as the component
//! [`CONTROL`] (`control_*` tables, its version in `custos_versions`),
//! created or migrated by [`PgControlCatalog::open`] before the handle is
//! returned; a newer stored version is refused with nothing written.
//!
//! ## Concurrency: explicit row locks
//!
//! Every writing transaction first takes `SELECT … FOR UPDATE` on the
//! catalog's single head row (`control_head`, inserted when the schema is
//! created), then loads the footprint, decides and writes. Explicit row
//! locks, because: the lock totally orders every writer of the catalog (two
//! racing registrations of one world, or two racing fence acquires, are
//! decided one after the other: distinct epochs, one created row); READ
//! COMMITTED takes a fresh snapshot per statement, so every statement after
//! the lock sees each earlier writer's commit; it is a single lock always
//! taken first, so writers cannot deadlock; and it is released by commit or
//! rollback, or by the server when a connection dies — no session-level
//! advisory lock decides anything. A lost reply to COMMIT is `Unavailable`:
//! the request may have applied, and retrying it converges (registration,
//! retirement and signatures are idempotent; a retried acquire issues a
//! still-higher epoch, which stales the lost one).
//!
//! ## Reading without writing
//!
//! [`PgControlCatalog::open_read_only`] is the open of every read-only
//! caller (`custos catalog discover|show`): it never creates the schema,
//! migrates or writes. A missing schema, a schema without the component's
//! tables, or a catalog of another version is refused with
//! [`OpenError::NotReadable`] naming the schema and the rule
//! ([`Refusal`]); the check is one read-only transaction. A read-only
//! handle refuses [`ControlCatalog::apply`] before any statement is sent.
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
//!
//! ## Migration administration
//!
//! The `admin` submodule implements
//! `custos_core::migration::control::ControlAdmin` on the same handle (the
//! `control_migrations` and `control_staged` tables), its commits under
//! the same head-row lock.
//!
//! The advisory tick head needs nothing here: `custos_sqlite::control::
//! record_tick_head` is generic over `ControlCatalog` and works on this
//! port as is.

pub use crate::open::{OpenError, Refusal};

use custos_core::fence::{Holder, WorldFence};
use custos_core::world::{
    self,
    codec::{self, StoredFence, StoredSignature, StoredWorld},
    ControlCatalog, Effect, Outcome, Request, SignatureRecord, WorldError, WorldInfo, WorldRecord,
    WorldSlot,
};
use postgres::Row;

use crate::cols::cells;

use crate::conn::Tx;

mod admin;

use crate::conn::{db, next_got, Component, Failure, Stmt, TxError, Want};
use crate::{conn::Conn, Target};

/// The component's name in `custos_versions` (its tables are `control_*`).
pub const COMPONENT_NAME: &str = "control";

/// What a read-only open looks for, as its refusals name it.
const WHAT: &str = "control catalog";

/// Version 1 (the first step): the catalog's head row (the lock every
/// write takes first), worlds, signatures, one writer-fence row per fenced
/// world, and the migration administration's tables (at most one
/// reservation, and the control bundle staged for it). Identity columns
/// are `COLLATE "C"`: their order is the byte order the port promises.
pub const SCHEMA_V1: &str = r#"
CREATE TABLE control_head (
    id smallint PRIMARY KEY CHECK (id = 1)
);
INSERT INTO control_head (id) VALUES (1);
CREATE TABLE control_worlds (
    world_id text COLLATE "C" PRIMARY KEY,
    name text NOT NULL,
    run_id text,
    parent_world_id text,
    writer_mode text,
    status text NOT NULL,
    tick_head bigint NOT NULL
);
CREATE TABLE control_signatures (
    world_id text COLLATE "C" NOT NULL REFERENCES control_worlds (world_id),
    table_id text COLLATE "C" NOT NULL,
    components text NOT NULL,
    schema text NOT NULL,
    fingerprint text NOT NULL,
    PRIMARY KEY (world_id, table_id)
);
CREATE TABLE control_fences (
    world_id text COLLATE "C" PRIMARY KEY REFERENCES control_worlds (world_id),
    issued bigint NOT NULL CHECK (issued >= 0),
    floor bigint NOT NULL CHECK (floor >= 0),
    holder text
);
CREATE TABLE control_migrations (
    migration_id text COLLATE "C" PRIMARY KEY,
    plan_digest text NOT NULL,
    reservation bytea NOT NULL,
    receipt bytea,
    receipt_digest text
);
CREATE TABLE control_staged (
    migration_id text COLLATE "C" PRIMARY KEY REFERENCES control_migrations (migration_id),
    bundle bytea NOT NULL
);
"#;

/// Version 2: the source-side departure record (every migration that
/// planned to move this endpoint, `custos_core::migration::departure`):
/// one row of canonical bytes, replaced by compare-and-swap under the head
/// lock.
pub const SCHEMA_V2: &str = r#"
CREATE TABLE control_departures (
    id smallint PRIMARY KEY CHECK (id = 0),
    departures bytea NOT NULL
);
"#;

/// The control catalog's versioned schema: `steps[0]` is version 1.
pub const CONTROL: Component = Component {
    name: COMPONENT_NAME,
    steps: &[SCHEMA_V1, SCHEMA_V2],
};

/// The control-catalog version this build writes and reads.
pub const CONTROL_VERSION: i64 = 2;

/// The tables a catalog of [`CONTROL_VERSION`] holds (what a read-only
/// open checks).
pub const CONTROL_TABLES: &[&str] = &[
    "control_head",
    "control_worlds",
    "control_signatures",
    "control_fences",
    "control_migrations",
    "control_staged",
    "control_departures",
];

pub use custos_core::columns::MAX_WORD_LEN;
pub use custos_core::world::codec::MAX_SIGNATURE_JSON_LEN;
/// A control catalog in one PostgreSQL schema (see the module
/// documentation). `Debug` shows the endpoint and schema, never the URL.
#[derive(Debug)]
pub struct PgControlCatalog {
    conn: Conn,
    read_only: bool,
}

type Res<T> = Result<T, WorldError>;
type TxRes<T> = Result<T, TxError<WorldError>>;

impl From<WorldError> for TxError<WorldError> {
    fn from(e: WorldError) -> Self {
        TxError::Refused(e)
    }
}

/// A server failure as the port's error: `Unavailable` stays unavailable
/// (the outcome of a write in flight is unknown), a stored value that
/// breaks an invariant is `Invalid`, anything else a `BackendFault`.
fn world_failure(f: Failure) -> WorldError {
    match f {
        Failure::Unavailable(reason) => WorldError::Unavailable { reason },
        Failure::Corrupt(detail) => WorldError::Invalid {
            what: "stored row",
            detail,
        },
        other => WorldError::BackendFault {
            reason: other.to_string(),
        },
    }
}

fn settle<T>(r: TxRes<T>) -> Res<T> {
    r.map_err(|e| e.settle(world_failure))
}

impl PgControlCatalog {
    /// Opens the control catalog in `target`'s schema, creating the schema
    /// and its tables when missing or migrating them; a newer stored
    /// version is [`OpenError::UnsupportedVersion`] with nothing written.
    pub fn open(target: Target) -> Result<Self, OpenError> {
        let conn = Conn::open(target)?;
        CONTROL.prepare(&conn)?;
        Ok(PgControlCatalog {
            conn,
            read_only: false,
        })
    }

    /// Opens the existing control catalog in `target`'s schema for reading
    /// only: never creates the schema, migrates or writes. A missing
    /// schema, a schema without a control catalog, a catalog of another
    /// version or one missing a table is [`OpenError::NotReadable`].
    pub fn open_read_only(target: Target) -> Result<Self, OpenError> {
        let conn = Conn::open(target)?;
        let schema = conn.target().schema().to_owned();
        let refusal = conn
            .read(|tx| readability(tx, &schema))
            .map_err(|e| match e {
                TxError::Failure(f) => OpenError::from(f),
                TxError::Refused(never) => match never {},
            })?;
        if let Some(rule) = refusal {
            return Err(OpenError::NotReadable { schema, rule });
        }
        Ok(PgControlCatalog {
            conn,
            read_only: true,
        })
    }

    /// Whether this handle was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The PostgreSQL schema holding the catalog.
    pub fn schema(&self) -> &str {
        self.conn.target().schema()
    }

    /// The server's process id serving this handle's connection (tests
    /// terminate it to exercise reconnection).
    pub fn backend_pid(&self) -> Result<i32, WorldError> {
        self.conn.backend_pid().map_err(world_failure)
    }
}

/// Why the schema cannot be read as a control catalog, if it cannot.
fn readability(
    tx: &mut Tx<'_>,
    schema: &str,
) -> Result<Option<Refusal>, TxError<std::convert::Infallible>> {
    let exists: bool = tx
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)",
            &[&schema],
        )
        .and_then(|r| r.try_get(0))
        .map_err(db("probe-schema"))?;
    if !exists {
        return Ok(Some(Refusal::MissingSchema));
    }
    let table = |tx: &mut Tx<'_>, name: &str| -> Result<bool, Failure> {
        tx.query_one(
            "SELECT to_regclass(quote_ident($1) || '.' || quote_ident($2)) IS NOT NULL",
            &[&schema, &name],
        )
        .and_then(|r| r.try_get(0))
        .map_err(db("probe-table"))
    };
    if !table(tx, "custos_versions")? {
        return Ok(Some(Refusal::NotStored { what: WHAT }));
    }
    let found: Option<i64> = tx
        .query_opt(
            "SELECT version FROM custos_versions WHERE component = $1",
            &[&COMPONENT_NAME],
        )
        .map_err(db("probe-version"))?
        .map(|r| r.try_get(0))
        .transpose()
        .map_err(db("probe-version"))?;
    let Some(found) = found else {
        return Ok(Some(Refusal::NotStored { what: WHAT }));
    };
    if found != CONTROL_VERSION {
        return Ok(Some(Refusal::Version {
            what: WHAT,
            found,
            supported: CONTROL_VERSION,
        }));
    }
    for t in CONTROL_TABLES {
        if !table(tx, t)? {
            return Ok(Some(Refusal::MissingTable {
                what: WHAT,
                table: t,
            }));
        }
    }
    Ok(None)
}

// ------------------------------------------------------------------ rows

const WORLD_SELECT: &str = "SELECT world_id, name, run_id, parent_world_id, writer_mode, status, tick_head FROM control_worlds";
const SIG_SELECT: &str =
    "SELECT world_id, table_id, components, schema, fingerprint FROM control_signatures";

fn invalid(what: &'static str, detail: String) -> WorldError {
    WorldError::Invalid { what, detail }
}

/// One `control_worlds` row, decoded totally.
fn decode_world(r: &Row) -> Res<WorldRecord> {
    StoredWorld::read(&mut cells(r, "control_worlds"))?.decode()
}

/// One `control_signatures` row, decoded totally and validated (the
/// fingerprint must be its schema's).
fn decode_sig(r: &Row) -> Res<SignatureRecord> {
    StoredSignature::read(&mut cells(r, "control_signatures"))?.decode()
}

/// The world's fence row, decoded totally (default when there is none).
const FENCE_SQL: &str = "SELECT issued, floor, holder FROM control_fences WHERE world_id = $1";

/// A world's fence row (absent: the default fence).
fn decode_fence(row: Option<&postgres::Row>, world_id: &str) -> TxRes<WorldFence> {
    let Some(r) = row else {
        return Ok(WorldFence::default());
    };
    Ok(StoredFence::read(&mut cells(r, "control_fences"), world_id)?.decode(world_id)?)
}

fn load_slot(tx: &mut Tx<'_>, world_id: &str) -> TxRes<WorldSlot> {
    load_slot_locked(tx, world_id, false)
}

/// A world's slot — its record, signatures and fence — read in one round
/// trip; behind the catalog's head-row lock when `lock` (the server runs
/// the reads after it).
fn load_slot_locked(tx: &mut Tx<'_>, world_id: &str, lock: bool) -> TxRes<WorldSlot> {
    let mut stmts = Vec::new();
    if lock {
        stmts.push(Stmt::new(Want::Opt, lock_sql()));
    }
    stmts.push(
        Stmt::new(Want::Opt, format!("{WORLD_SELECT} WHERE world_id = $1"))
            .arg(world_id.to_owned()),
    );
    stmts.push(
        Stmt::new(
            Want::Rows,
            format!("{SIG_SELECT} WHERE world_id = $1 ORDER BY table_id COLLATE \"C\""),
        )
        .arg(world_id.to_owned()),
    );
    stmts.push(Stmt::new(Want::Opt, FENCE_SQL).arg(world_id.to_owned()));
    let got = tx.run(&stmts).map_err(db("load-world"))?;
    let mut got = got.into_iter();
    let mut next = || next_got(&mut got, "load-world").map_err(TxError::Failure);
    if lock {
        check_lock(next()?.opt("lock-head")?.as_ref())?;
    }
    let record = next()?
        .opt("load-world")?
        .map(|r| decode_world(&r))
        .transpose()?;
    let signatures = next()?
        .rows("load-signatures")?
        .iter()
        .map(|r| decode_sig(r).map(|s| s.signature))
        .collect::<Res<Vec<_>>>()?;
    let fence = decode_fence(next()?.opt("load-fence")?.as_ref(), world_id)?;
    Ok(WorldSlot {
        record,
        signatures,
        fence,
    })
}

/// A `u64` as a stored `bigint`; beyond `i64::MAX` is `Invalid`.
fn int(what: &'static str, world_id: &str, v: u64) -> Res<i64> {
    i64::try_from(v).map_err(|_| {
        invalid(
            what,
            format!("world {world_id}: {v} exceeds what a bigint stores"),
        )
    })
}

fn write_fence(tx: &mut Tx<'_>, world_id: &str, f: &WorldFence) -> TxRes<()> {
    let issued = int("issued", world_id, f.issued)?;
    let floor = int("floor", world_id, f.floor)?;
    let holder = f.holder.as_ref().map(Holder::as_str);
    tx.execute(
        "INSERT INTO control_fences (world_id, issued, floor, holder) VALUES ($1, $2, $3, $4)
         ON CONFLICT (world_id) DO UPDATE SET issued = EXCLUDED.issued, floor = EXCLUDED.floor, holder = EXCLUDED.holder",
        &[&world_id, &issued, &floor, &holder],
    )
    .map_err(db("write-fence"))?;
    Ok(())
}

fn write_world(tx: &mut Tx<'_>, r: &WorldRecord) -> TxRes<()> {
    let id = &r.identity;
    let tick = int("tick_head", &id.world_id, r.tick_head)?;
    tx.execute(
        "INSERT INTO control_worlds (world_id, name, run_id, parent_world_id, writer_mode, status, tick_head)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (world_id) DO UPDATE SET status = EXCLUDED.status, tick_head = EXCLUDED.tick_head",
        &[
            &id.world_id,
            &id.name,
            &id.run_id,
            &id.parent_world_id,
            &r.writer_mode.as_str(),
            &r.status.as_str(),
            &tick,
        ],
    )
    .map_err(db("write-world"))?;
    Ok(())
}

/// Applies one of a decision's effects: one statement each.
pub(super) fn apply_effect(tx: &mut Tx<'_>, e: &Effect) -> TxRes<()> {
    match e {
        Effect::PutWorld(r) => write_world(tx, r),
        Effect::PutFence { world_id, fence } => write_fence(tx, world_id, fence),
        Effect::PutSignature {
            world_id,
            signature: s,
        } => {
            let components = codec::components_to_json(&s.components)?;
            let schema = codec::schema_to_json(&s.schema)?;
            tx.execute(
                "INSERT INTO control_signatures (world_id, table_id, components, schema, fingerprint)
                 VALUES ($1, $2, $3, $4, $5)",
                &[world_id, &s.table_id, &components, &schema, &s.fingerprint],
            )
            .map_err(db("write-signature"))?;
            Ok(())
        }
    }
}

/// Takes the catalog's head-row lock: the first statement of every write.
fn lock_head(tx: &mut Tx<'_>) -> TxRes<()> {
    let locked = tx.query_opt(&lock_sql(), &[]).map_err(db("lock-head"))?;
    check_lock(locked.as_ref())
}

/// The head-row lock statement, reading the schema's version beside it.
fn lock_sql() -> String {
    format!(
        "SELECT id, {} FROM control_head WHERE id = 1 FOR UPDATE",
        CONTROL.version_column()
    )
}

/// The head row the lock statement read: present, at this build's version.
fn check_lock(locked: Option<&postgres::Row>) -> TxRes<()> {
    if let Some(r) = locked {
        let version: Option<i64> = r.try_get(1).map_err(db("lock-head"))?;
        CONTROL.check_written(version).map_err(TxError::Failure)?;
    }
    if locked.is_none() {
        return Err(invalid(
            "control_head",
            "control_head row 1 is missing: the catalog's lock row was deleted".into(),
        )
        .into());
    }
    Ok(())
}

impl PgControlCatalog {
    fn refuse_read_only(&self) -> Res<()> {
        if self.read_only {
            return Err(WorldError::BackendFault {
                reason: format!(
                    "read-only: the control catalog in schema {} was opened with open_read_only; nothing was written",
                    self.schema()
                ),
            });
        }
        Ok(())
    }
}

impl ControlCatalog for PgControlCatalog {
    fn apply(&self, req: &Request) -> Result<Outcome, WorldError> {
        self.refuse_read_only()?;
        settle(self.conn.write(|tx| {
            // One round trip: the lock and the world's slot.
            let slot = load_slot_locked(tx, req.world_id(), true)?;
            let d = world::decide(&slot, req)?;
            for e in &d.effects {
                apply_effect(tx, e)?;
            }
            Ok(d.outcome)
        }))
    }

    fn discover_worlds(&self) -> Result<Vec<WorldRecord>, WorldError> {
        settle(self.conn.read(|tx| {
            let rows = tx
                .query(
                    &format!("{WORLD_SELECT} ORDER BY world_id COLLATE \"C\""),
                    &[],
                )
                .map_err(db("discover"))?;
            Ok(rows.iter().map(decode_world).collect::<Res<Vec<_>>>()?)
        }))
    }

    fn open_world_readonly(&self, world_id: &str) -> Result<WorldInfo, WorldError> {
        settle(
            self.conn
                .read(|tx| Ok(load_slot(tx, world_id)?.into_info(world_id)?)),
        )
    }

    fn list_signatures(&self) -> Result<Vec<SignatureRecord>, WorldError> {
        settle(self.conn.read(|tx| {
            let rows = tx
                .query(
                    &format!(
                        "{SIG_SELECT} ORDER BY world_id COLLATE \"C\", table_id COLLATE \"C\""
                    ),
                    &[],
                )
                .map_err(db("list-signatures"))?;
            Ok(rows.iter().map(decode_sig).collect::<Res<Vec<_>>>()?)
        }))
    }
}
