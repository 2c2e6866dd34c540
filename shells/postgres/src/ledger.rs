//! [`PgLedger`]: the execution ledger (`custos_core::ledger`) in one
//! PostgreSQL schema, shared by the hosts of one executor.
//!
//! The shell holds no rule: it mirrors `custos_sqlite::ledger`. Every
//! request runs in one transaction that loads exactly the request's
//! [`Request::footprint`] into a [`View`], calls [`ledger::decide`] and
//! writes the decision's [`Effect`]s back before it commits. A refusal
//! rolls back and writes nothing.
//!
//! ## Concurrency: explicit row locks
//!
//! One ledger per PostgreSQL schema (the [`Target`]'s). A request that
//! [`Request::writes`] runs in [`Conn::write`] (READ COMMITTED) and takes,
//! as its first statement, `SELECT … FROM ledger_head WHERE id = 1 FOR
//! UPDATE` on the ledger's one head row (inserted with the schema). Explicit
//! row locks, because:
//!
//! - the decisions read aggregates (`sum(outcome_bytes)`, the unclean-scope
//!   count) and absent rows (`admit` of a missing key), which no per-row
//!   lock or `INSERT … ON CONFLICT` could guard; one lock over the whole
//!   footprint totally orders the ledger's writers, exactly as SQLite's
//!   `BEGIN IMMEDIATE` does;
//! - under READ COMMITTED every statement after the lock sees every earlier
//!   writer's commit, so the view the decision reads is current and the
//!   decision stays true until this transaction commits (two handles
//!   racing one key produce exactly one `Fresh`);
//! - one lock, always taken first, cannot deadlock, and no serialization
//!   failure can arise (the bounded retry of [`Conn::write`] is a
//!   safeguard only);
//! - it is a row, not a session-level advisory lock: it ends with the
//!   transaction, also when the connection dies.
//!
//! A request that only reads runs in [`Conn::read`] (REPEATABLE READ, READ
//! ONLY): every query of its footprint sees one snapshot, and it never
//! waits for a writer.
//!
//! ## Restart recovery with several hosts
//!
//! [`PgLedger::open`] is restart recovery ([`Request::Open`]), as opening
//! the SQLite file is: every `admitted` row **of the whole ledger** becomes
//! `unknown`. Recovery is a per-ledger operation, not a per-host one: it
//! also fences calls another host admitted and may be running right now
//! (their `finish` is then refused `NotAdmitted { Unknown }`; nothing ever
//! starts twice, but their outcomes are lost). So when several hosts share
//! one ledger, only the process that owns the executor's restart — the one
//! that has just taken over the executor (e.g. under the executor's lease)
//! after its previous owner is known to be gone — opens it with
//! [`PgLedger::open`] (or calls [`Ledger::recover`]); every other handle
//! joins with [`PgLedger::join`], which prepares the schema exactly as
//! `open` does and recovers nothing.
//!
//! ## Time
//!
//! No ledger decision reads a clock. The one time it stores,
//! `ledger_releases.released_at_ms`, is the operator's `now` carried by
//! [`Request::Release`] and recorded as given, as on SQLite and in memory.
//!
//! ## Schema (component `ledger`, version 3)
//!
//! | table | role |
//! |-------|------|
//! | `ledger_head(id, held_bytes, negative_rows, unclean_scopes)` | the one row (`id = 1`) every writer locks first; since version 3 it also carries the totals an admission judges, kept by triggers on `ledger_calls` and `ledger_scopes` (an admission reads them with the lock instead of summing the ledger) |
//! | `ledger_scopes(session, workspace, incarnation, state, close_outcome, attach_token)` | one row per session |
//! | `ledger_calls(session, op, step, source_index, incarnation, tool, state, outcome, outcome_digest, outcome_bytes, admit_request)` | one row per call key (`admit_request`, added by version 2, is the [`RequestId`](custos_core::ledger::RequestId) an `admitted` row was inserted by) |
//! | `ledger_acks(session, op, step, source_index, incarnation)` | the acknowledgement tombstones |
//! | `ledger_releases(id, session, workspace, incarnation, was, released_at_ms)` | the operator release log, in `id` order |
//!
//! The encodings are SQLite's: `ledger_scopes.state` is
//! `open | closing | closed`, with `close_outcome` `NULL` for `open` and
//! `closing`, `0` for `Closed(AllRetired)` and `n > 0` for
//! `Closed(UnknownCleanup(n))`; `ledger_calls.state` is
//! `admitted | terminal | unknown` (an `admitted` row's `outcome_bytes` is
//! its reservation; a `terminal` row carries its outcome, SHA-256 and size,
//! checked by core on every read; an `unknown` row holds nothing);
//! `ledger_releases.was` is `closing` or `closed:<n>`.
//!
//! Unlike SQLite's bit-for-bit storage, every `u64` is stored as a
//! non-negative `bigint`: a negative stored value is `MalformedRow`, and a
//! value above `i64::MAX` (an incarnation, size or time no real ledger
//! reaches) cannot be written — the request fails `BackendFault` and
//! nothing is written. A lookup by a key whose incarnation is above
//! `i64::MAX` finds nothing, since no such row can be stored.
//!
//! ## Decoding
//!
//! Stored rows decode totally: an unknown state word, a state whose columns
//! disagree, a negative number, a `step` above `u32::MAX`, a name that is
//! not a valid name, a text longer than [`MAX_NAME_LEN`] / [`MAX_WORD_LEN`],
//! an outcome longer than [`MAX_STORED_OUTCOME_BYTES`] or a digest that is
//! not 32 bytes is [`LedgerError::MalformedRow`] naming the table, the row
//! and the column — never a panic, never read as absent.
//!
//! ## Errors
//!
//! A server that cannot be reached, a dropped connection or a server
//! shutting down is [`LedgerError::Unavailable`] (the outcome of a write in
//! flight is unknown; what a retry of each request is answered is
//! `docs/retries.md`: an admission retried without its request id is not
//! recognised as its own); any other
//! server error is [`LedgerError::BackendFault`]. Neither, nor any
//! [`OpenError`] or `Debug` output, contains the connection URL or
//! its password.

pub use crate::open::{OpenError, Refusal};
use std::fmt;
use std::sync::{RwLock, RwLockReadGuard};

use custos_core::ledger::{
    self, Answer, CallRow, Effect, Key, Ledger, LedgerError, Limits, Release, Request, RowState,
    Scope, ScopeState, SessionId, StoredCall, StoredRelease, StoredScope, View, MAX_NAME_LEN,
};
use postgres::Row;

use crate::cols::{cells, cells_from};

use crate::conn::Tx;
use thiserror::Error;

use crate::conn::{db, next_got, Component, Conn, Failure, Stmt, Target, TxError, Want};

pub use custos_core::columns::MAX_WORD_LEN;
pub use custos_core::ledger::MAX_STORED_OUTCOME_BYTES;

/// Version 1 of the `ledger` component: every table, and the head row.
pub const LEDGER_SCHEMA_V1: &str = "
CREATE TABLE ledger_head (
    id smallint PRIMARY KEY CHECK (id = 1)
);
INSERT INTO ledger_head (id) VALUES (1) ON CONFLICT DO NOTHING;
CREATE TABLE ledger_scopes (
    session text PRIMARY KEY,
    workspace text NOT NULL,
    incarnation bigint NOT NULL,
    state text NOT NULL,
    close_outcome bigint,
    attach_token text NOT NULL
);
CREATE TABLE ledger_calls (
    session text NOT NULL,
    op text NOT NULL,
    step bigint NOT NULL,
    source_index bigint NOT NULL,
    incarnation bigint NOT NULL,
    tool text NOT NULL,
    state text NOT NULL,
    outcome bytea,
    outcome_digest bytea,
    outcome_bytes bigint NOT NULL,
    PRIMARY KEY (session, op, step, source_index, incarnation)
);
CREATE INDEX ledger_calls_by_state ON ledger_calls (state, session);
CREATE TABLE ledger_acks (
    session text NOT NULL,
    op text NOT NULL,
    step bigint NOT NULL,
    source_index bigint NOT NULL,
    incarnation bigint NOT NULL,
    PRIMARY KEY (session, op, step, source_index, incarnation)
);
CREATE TABLE ledger_releases (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session text NOT NULL,
    workspace text NOT NULL,
    incarnation bigint NOT NULL,
    was text NOT NULL,
    released_at_ms bigint NOT NULL
);
";

/// Version 2: an `admitted` row keeps the [`RequestId`](custos_core::ledger::RequestId) of the admission
/// that inserted it (`NULL` without one, and in every other state), so that
/// its retry is recognised.
pub const LEDGER_SCHEMA_V2: &str = "
ALTER TABLE ledger_calls ADD COLUMN admit_request text;
";

/// Version 3: the totals an admission judges (the bytes held by admitted
/// and terminal calls, how many of those hold a negative byte count, the
/// scopes not closed clean) are kept on the head row by triggers on every
/// change of `ledger_calls` and `ledger_scopes`, instead of summed over the
/// whole ledger on every admission; the writer reads them with the head
/// row it locks. The functions keep the schema they were created in as
/// their `search_path`, so any client's change keeps them right.
pub const LEDGER_SCHEMA_V3: &str = "
ALTER TABLE ledger_head
    ADD COLUMN held_bytes numeric NOT NULL DEFAULT 0,
    ADD COLUMN negative_rows bigint NOT NULL DEFAULT 0,
    ADD COLUMN unclean_scopes bigint NOT NULL DEFAULT 0;
UPDATE ledger_head SET
    held_bytes = (SELECT COALESCE(SUM(outcome_bytes), 0) FROM ledger_calls
                  WHERE state IN ('admitted', 'terminal')),
    negative_rows = (SELECT count(*) FROM ledger_calls
                     WHERE state IN ('admitted', 'terminal') AND outcome_bytes < 0),
    unclean_scopes = (SELECT count(*) FROM ledger_scopes
                      WHERE NOT (state = 'closed' AND close_outcome IS NOT DISTINCT FROM 0));
CREATE FUNCTION ledger_calls_totals() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.state IN ('admitted', 'terminal') THEN
        UPDATE ledger_head SET held_bytes = held_bytes - OLD.outcome_bytes,
            negative_rows = negative_rows - (OLD.outcome_bytes < 0)::int;
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') AND NEW.state IN ('admitted', 'terminal') THEN
        UPDATE ledger_head SET held_bytes = held_bytes + NEW.outcome_bytes,
            negative_rows = negative_rows + (NEW.outcome_bytes < 0)::int;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER ledger_calls_totals AFTER INSERT OR UPDATE OR DELETE ON ledger_calls
    FOR EACH ROW EXECUTE FUNCTION ledger_calls_totals();
CREATE FUNCTION ledger_scopes_totals() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE')
       AND NOT (OLD.state = 'closed' AND OLD.close_outcome IS NOT DISTINCT FROM 0) THEN
        UPDATE ledger_head SET unclean_scopes = unclean_scopes - 1;
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT')
       AND NOT (NEW.state = 'closed' AND NEW.close_outcome IS NOT DISTINCT FROM 0) THEN
        UPDATE ledger_head SET unclean_scopes = unclean_scopes + 1;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER ledger_scopes_totals AFTER INSERT OR UPDATE OR DELETE ON ledger_scopes
    FOR EACH ROW EXECUTE FUNCTION ledger_scopes_totals();
";

/// The ledger's versioned schema: `steps[i]` creates version `i + 1`.
pub const LEDGER_COMPONENT: Component = Component {
    name: "ledger",
    steps: &[LEDGER_SCHEMA_V1, LEDGER_SCHEMA_V2, LEDGER_SCHEMA_V3],
};

/// The ledger schema version this build writes and reads.
pub const LEDGER_VERSION: i64 = 3;

/// A server failure as the ledger port's error.
fn failure(f: Failure) -> LedgerError {
    match f {
        Failure::Unavailable(reason) => LedgerError::Unavailable { reason },
        Failure::Corrupt(detail) => LedgerError::MalformedRow { detail },
        other => LedgerError::BackendFault {
            reason: other.to_string(),
        },
    }
}

fn tx_error(e: TxError<LedgerError>) -> LedgerError {
    e.settle(failure)
}

/// A `map_err` adapter for a statement of the transaction body.
fn sql(op: &'static str) -> impl Fn(postgres::Error) -> TxError<LedgerError> {
    let f = db(op);
    move |e| TxError::Failure(f(e))
}

fn malformed(detail: impl Into<String>) -> TxError<LedgerError> {
    TxError::Refused(LedgerError::MalformedRow {
        detail: detail.into(),
    })
}

/// The execution ledger in one PostgreSQL schema. One connection per
/// handle, serialized by a mutex; any number of handles (in any number of
/// processes and hosts) may share the schema.
pub struct PgLedger {
    /// `None` once closed. Calls share it (each runs on a connection of
    /// the pool's own); `close` takes it alone, after the calls in flight.
    conn: RwLock<Option<Conn>>,
    schema: String,
    read_only: bool,
}

impl fmt::Debug for PgLedger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgLedger")
            .field("schema", &self.schema)
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

impl PgLedger {
    /// Connects, creates or migrates the ledger's schema ([`LEDGER_COMPONENT`];
    /// a newer stored version is refused with nothing written) and runs
    /// restart recovery over the whole ledger (see "Restart recovery with
    /// several hosts" in the module documentation).
    pub fn open(target: Target) -> Result<PgLedger, OpenError> {
        let ledger = PgLedger::join(target)?;
        ledger.recover().map_err(OpenError::Recovery)?;
        tracing::debug!(schema = %ledger.schema, "execution ledger opened");
        Ok(ledger)
    }

    /// [`PgLedger::open`] without restart recovery: for a handle joining a
    /// ledger whose recovery belongs to another process (the executor's
    /// owner). Creates or migrates the schema as `open` does.
    pub fn join(target: Target) -> Result<PgLedger, OpenError> {
        let schema = target.schema().to_owned();
        let conn = Conn::open(target)?;
        LEDGER_COMPONENT.prepare(&conn)?;
        Ok(PgLedger {
            conn: RwLock::new(Some(conn)),
            schema,
            read_only: false,
        })
    }

    /// Opens an existing ledger for reading only: no schema creation,
    /// migration, recovery or write. A schema without a ledger of
    /// [`LEDGER_VERSION`] is [`OpenError::NotReadable`]. Read requests
    /// answer over the rows as they stand (an `admitted` row left by a
    /// crashed host still reads `admitted`); every request that writes is
    /// refused `BackendFault` without touching the server.
    pub fn open_read_only(target: Target) -> Result<PgLedger, OpenError> {
        match PgLedger::open_existing(target)? {
            Existing::Ledger(l) => Ok(*l),
            Existing::None { schema } => Err(OpenError::NotReadable {
                schema,
                rule: Refusal::NotStored {
                    what: "execution ledger",
                },
            }),
        }
    }

    /// A read-only handle when the schema holds a ledger of
    /// [`LEDGER_VERSION`], [`Existing::None`] when it holds no ledger at
    /// all, `NotReadable` for another version. Writes nothing.
    fn open_existing(target: Target) -> Result<Existing, OpenError> {
        let schema = target.schema().to_owned();
        let conn = Conn::open(target)?;
        let found = conn
            .read(|tx| stored_version(tx, &schema))
            .map_err(|e| match e {
                TxError::Failure(f) => OpenError::from(f),
                TxError::Refused(never) => match never {},
            })?;
        match found {
            Some(v) if v == LEDGER_VERSION => Ok(Existing::Ledger(Box::new(PgLedger {
                conn: RwLock::new(Some(conn)),
                schema,
                read_only: true,
            }))),
            Some(v) => Err(OpenError::NotReadable {
                schema,
                rule: Refusal::Version {
                    what: "execution ledger",
                    found: v,
                    supported: LEDGER_VERSION,
                },
            }),
            None => Ok(Existing::None { schema }),
        }
    }

    /// The PostgreSQL schema holding the ledger.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// Whether the handle was opened with [`PgLedger::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The server process id of the handle's connection (tests terminate
    /// it with `pg_terminate_backend` to drop the connection).
    pub fn backend_pid(&self) -> Result<i32, LedgerError> {
        let g = self.lock()?;
        g.as_ref()
            .ok_or(LedgerError::HandleClosed)?
            .backend_pid()
            .map_err(failure)
    }

    fn lock(&self) -> Result<RwLockReadGuard<'_, Option<Conn>>, LedgerError> {
        self.conn.read().map_err(|_| LedgerError::BackendFault {
            reason: "postgres-ledger-poisoned".to_owned(),
        })
    }
}

/// What [`PgLedger::open_existing`] found.
enum Existing {
    /// A read-only handle on a ledger of [`LEDGER_VERSION`].
    Ledger(Box<PgLedger>),
    /// No ledger in the schema (no schema, no version table or no `ledger`
    /// version row).
    None {
        /// The PostgreSQL schema.
        schema: String,
    },
}

/// Why the Activity records of a target could not be counted.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ActivityError {
    /// The schema holds something that is not a readable ledger of
    /// [`LEDGER_VERSION`], or the server failed.
    #[error("ActivityUnreadable: {0}")]
    Open(OpenError),
    /// Counting failed.
    #[error("ActivityUnreadable: schema {schema}: {source}")]
    Read {
        /// The PostgreSQL schema.
        schema: String,
        /// Why.
        source: LedgerError,
    },
}

impl ActivityError {
    /// The failure's [`Class`](custos_core::Class): an open or a read
    /// keeps its own class.
    pub fn class(&self) -> custos_core::Class {
        match self {
            ActivityError::Open(e) => e.class(),
            ActivityError::Read { source, .. } => source.class(),
        }
    }
}

/// The Activity records ([`Ledger::records`]) of the ledger in `target`'s
/// schema, read through a read-only handle that never creates or writes:
/// 0 when the schema holds no ledger (or does not exist); a ledger of
/// another version fails closed. The PostgreSQL face of
/// `custos_sqlite::ledger::activity_records`.
pub fn activity_records(target: Target) -> Result<u64, ActivityError> {
    match PgLedger::open_existing(target).map_err(ActivityError::Open)? {
        Existing::None { .. } => Ok(0),
        Existing::Ledger(l) => l.records().map_err(|source| ActivityError::Read {
            schema: l.schema.clone(),
            source,
        }),
    }
}

/// The ledger version recorded in `schema`, `None` without one (no schema,
/// no version table or no `ledger` row). Reads only.
fn stored_version(
    tx: &mut Tx<'_>,
    schema: &str,
) -> Result<Option<i64>, TxError<std::convert::Infallible>> {
    let exists: bool = tx
        .query_one(
            "SELECT to_regclass(quote_ident($1) || '.custos_versions') IS NOT NULL",
            &[&schema],
        )
        .and_then(|r| r.try_get(0))
        .map_err(db("ledger-probe"))?;
    if !exists {
        return Ok(None);
    }
    let row = tx
        .query_opt(
            "SELECT version FROM custos_versions WHERE component = $1",
            &[&LEDGER_COMPONENT.name],
        )
        .map_err(db("ledger-version"))?;
    Ok(row
        .map(|r| r.try_get::<_, i64>(0))
        .transpose()
        .map_err(db("ledger-version"))?)
}

fn encode_scope_state(s: ScopeState) -> Result<(&'static str, Option<i64>), LedgerError> {
    let (state, outcome) = s.to_stored();
    Ok((
        state,
        outcome
            .map(|n| encode_u64("close_outcome", n))
            .transpose()?,
    ))
}

/// A scope state as a release row's one text; refused, like the scope
/// row's, when its close outcome exceeds `bigint`.
fn encode_was(s: ScopeState) -> Result<String, LedgerError> {
    encode_scope_state(s)?;
    Ok(s.to_stored_text())
}

/// A `u64` as a stored `bigint`; above `i64::MAX` is not storable.
fn encode_u64(what: &str, v: u64) -> Result<i64, LedgerError> {
    i64::try_from(v).map_err(|_| LedgerError::BackendFault {
        reason: format!("postgres-encode: {what} {v} exceeds bigint; nothing was written"),
    })
}

/// The key of a call as bound parameters: `None` when it cannot be stored
/// (an incarnation above `i64::MAX`), so no row of it exists.
/// A call key's five columns as parameters.
type KeyParams<'k> = (&'k str, &'k str, i64, i64, i64);

fn key_params(k: &Key) -> Option<KeyParams<'_>> {
    Some((
        k.session.as_str(),
        k.op.as_str(),
        i64::from(k.step),
        i64::from(k.source_index),
        i64::try_from(k.incarnation).ok()?,
    ))
}

fn key_params_for_write(k: &Key) -> Result<KeyParams<'_>, LedgerError> {
    key_params(k).ok_or_else(|| LedgerError::BackendFault {
        reason: format!(
            "postgres-encode: incarnation {} exceeds bigint; nothing was written",
            k.incarnation
        ),
    })
}

/// A call row named by its key.
fn at_key(k: &Key) -> String {
    format!(
        "({}, {}, {}, {}, {})",
        k.session, k.op, k.step, k.source_index, k.incarnation
    )
}

/// Loads the rows `req`'s footprint names, each part by its own query.
fn load(tx: &mut Tx<'_>, req: &Request, lock: bool) -> Result<View, TxError<LedgerError>> {
    // Every statement of the footprint in one pipeline, behind the head
    // lock when writing: the server runs them in order, so each read
    // starts after the lock is held and sees every earlier writer's rows.
    let fp = req.footprint();
    let key = fp.key.as_ref().and_then(|k| key_params(k).map(|p| (k, p)));
    let stmts = load_stmts(&fp, key.as_ref().map(|(_, p)| p), lock);
    let got = tx.run(&stmts).map_err(sql("load"))?;
    let mut got = got.into_iter();
    let mut next = || next_got(&mut got, "load").map_err(TxError::Failure);
    let head = if lock {
        Some(check_lock(next()?.opt("lock-head")?)?)
    } else {
        None
    };
    let mut v = View::default();
    if let Some(session) = &fp.scope {
        v.scope = next()?
            .opt("load-scope")?
            .map(|r| decode_scope(&r, session))
            .transpose()?;
    }
    if let Some((k, _)) = &key {
        let at = at_key(k);
        v.call = next()?
            .opt("load-call")?
            .map(|r| {
                let mut c = cells(&r, "ledger_calls");
                c.at(at.as_str());
                let call = StoredCall::read(&c, 0)?;
                call.decode(&c.place()).map_err(TxError::Refused)
            })
            .transpose()?;
        v.acked = next()?.opt("load-ack")?.is_some();
    }
    if fp.session_calls.is_some() {
        v.session_calls = decode_calls(&next()?.rows("load-session-calls")?)?;
    }
    if fp.all_admitted {
        v.admitted = decode_calls(&next()?.rows("load-admitted")?)?;
    }
    if fp.totals {
        (v.ledger_bytes, v.unclean_scopes) = match &head {
            Some(row) => decode_totals(row, 2)?,
            None => decode_totals(&next()?.one("load-totals")?, 0)?,
        };
    }
    if fp.releases {
        v.releases = decode_releases(&next()?.rows("load-releases")?)?;
    }
    Ok(v)
}

/// The statements of a footprint's load, in the order [`load`] decodes
/// them.
fn load_stmts(
    fp: &custos_core::ledger::Footprint,
    key: Option<&KeyParams<'_>>,
    lock: bool,
) -> Vec<Stmt> {
    let mut stmts = Vec::new();
    if lock {
        stmts.push(Stmt::new(Want::Opt, lock_sql()));
    }
    if let Some(session) = &fp.scope {
        stmts.push(
            Stmt::new(
                Want::Opt,
                "SELECT workspace, incarnation, state, close_outcome, attach_token
                 FROM ledger_scopes WHERE session = $1",
            )
            .arg(session.as_str().to_owned()),
        );
    }
    if let Some(p) = key {
        for sql in [CALL_SQL, ACK_SQL] {
            stmts.push(
                Stmt::new(Want::Opt, sql)
                    .arg(p.0.to_owned())
                    .arg(p.1.to_owned())
                    .arg(p.2)
                    .arg(p.3)
                    .arg(p.4),
            );
        }
    }
    if let Some(session) = &fp.session_calls {
        stmts.push(Stmt::new(Want::Rows, CALLS_OF_SESSION_SQL).arg(session.as_str().to_owned()));
    }
    if fp.all_admitted {
        stmts.push(Stmt::new(Want::Rows, ADMITTED_SQL));
    }
    if fp.totals && !lock {
        // A writer reads them with the head row it locks.
        stmts.push(Stmt::new(Want::One, TOTALS_SQL));
    }
    if fp.releases {
        stmts.push(Stmt::new(Want::Rows, RELEASES_SQL));
    }
    stmts
}

const CALL_SQL: &str = "SELECT tool, state, outcome, outcome_digest, outcome_bytes, admit_request
    FROM ledger_calls
    WHERE session = $1 AND op = $2 AND step = $3 AND source_index = $4 AND incarnation = $5";

const ACK_SQL: &str = "SELECT 1 FROM ledger_acks
    WHERE session = $1 AND op = $2 AND step = $3 AND source_index = $4 AND incarnation = $5";

const CALLS_OF_SESSION_SQL: &str = "SELECT session, op, step, source_index, incarnation,
    tool, state, outcome, outcome_digest, outcome_bytes, admit_request
    FROM ledger_calls WHERE session = $1";

const ADMITTED_SQL: &str = "SELECT session, op, step, source_index, incarnation,
    tool, state, outcome, outcome_digest, outcome_bytes, admit_request
    FROM ledger_calls WHERE state = 'admitted'";

/// The totals kept on the head row (version 3), for a read.
const TOTALS_SQL: &str = "SELECT held_bytes::bigint, negative_rows, unclean_scopes
    FROM ledger_head WHERE id = 1";

const RELEASES_SQL: &str = "SELECT id, session, workspace, incarnation, was, released_at_ms
    FROM ledger_releases ORDER BY id";

/// The scope row of `session`.
fn decode_scope(r: &Row, session: &SessionId) -> Result<Scope, TxError<LedgerError>> {
    let mut c = cells(r, "ledger_scopes");
    let stored = StoredScope::read(&mut c, session)?;
    stored.decode(session, &c.place()).map_err(TxError::Refused)
}

/// Call rows with their keys, ascending by key.
fn decode_calls(rows: &[Row]) -> Result<Vec<(Key, CallRow)>, TxError<LedgerError>> {
    let mut calls = Vec::with_capacity(rows.len());
    for r in rows {
        let c = cells(r, "ledger_calls");
        let session = c.text(0, "session", MAX_NAME_LEN)?;
        let session = c.check("session", SessionId::new(session))?;
        let mut call = cells_from(r, "ledger_calls", 1);
        calls.push(StoredCall::read_keyed(&mut call, &session).map_err(TxError::Refused)?);
    }
    calls.sort();
    Ok(calls)
}

/// The bytes held by `admitted` and `terminal` rows, and the number of
/// scopes that are anything but `Closed(AllRetired)` (a malformed closed
/// scope counts as unclean): the head row's totals from column `base`
/// (held bytes, rows holding a negative count, unclean scopes).
fn decode_totals(r: &Row, base: usize) -> Result<(u64, u64), TxError<LedgerError>> {
    let negative: i64 = r.try_get(base + 1).map_err(sql("load-totals"))?;
    if negative != 0 {
        return Err(malformed(format!(
            "ledger_calls: column outcome_bytes: {negative} rows hold a negative value"
        )));
    }
    let mut c = cells(r, "ledger_head");
    c.at("1");
    Ok((
        c.unsigned(base, "held_bytes")?,
        c.unsigned(base + 2, "unclean_scopes")?,
    ))
}

/// The release log, in insertion order.
fn decode_releases(rows: &[Row]) -> Result<Vec<Release>, TxError<LedgerError>> {
    let mut releases = Vec::with_capacity(rows.len());
    for r in rows {
        let mut c = cells(r, "ledger_releases");
        let stored = StoredRelease::read(&mut c)?;
        releases.push(stored.decode(&c.place()).map_err(TxError::Refused)?);
    }
    Ok(releases)
}

/// The ledger's one head-row lock, the first statement of every writing
/// transaction: the statement, reading the schema's version beside it.
fn lock_sql() -> String {
    format!(
        "SELECT id, {}, held_bytes::bigint, negative_rows, unclean_scopes
         FROM ledger_head WHERE id = 1 FOR UPDATE",
        LEDGER_COMPONENT.version_column()
    )
}

/// The head row the lock statement read: present, and the schema at this
/// build's version.
fn check_lock(row: Option<Row>) -> Result<Row, TxError<LedgerError>> {
    let row = row.ok_or_else(|| malformed("ledger_head: the head row (id = 1) is missing"))?;
    let version: Option<i64> = row.try_get(1).map_err(sql("lock-head"))?;
    LEDGER_COMPONENT
        .check_written(version)
        .map_err(TxError::Failure)?;
    Ok(row)
}

/// A scope's row (inserted, or replacing the session's).
fn put_scope(s: &Scope) -> Result<Stmt, LedgerError> {
    let (state, outcome) = encode_scope_state(s.state)?;
    let inc = encode_u64("incarnation", s.incarnation)?;
    Ok(Stmt::new(
        Want::Count,
        "INSERT INTO ledger_scopes (session, workspace, incarnation, state, close_outcome, attach_token)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (session) DO UPDATE SET workspace = EXCLUDED.workspace,
             incarnation = EXCLUDED.incarnation, state = EXCLUDED.state,
             close_outcome = EXCLUDED.close_outcome, attach_token = EXCLUDED.attach_token",
    )
    .arg(s.session.as_str().to_owned())
    .arg(s.workspace.as_str().to_owned())
    .arg(inc)
    .arg(state.to_owned())
    .arg(outcome)
    .arg(s.attach_token.as_str().to_owned()))
}

/// A call row's state columns: state, outcome, digest, admit request.
type CallCols = (
    &'static str,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Option<String>,
);

/// A call's row (inserted, or replacing the key's).
fn put_call(k: &Key, row: &CallRow) -> Result<Stmt, LedgerError> {
    let (state, outcome, digest, request): CallCols = match &row.state {
        RowState::Admitted { request: r, .. } => (
            "admitted",
            None,
            None,
            r.as_ref().map(|q| q.as_str().to_owned()),
        ),
        RowState::Unknown => ("unknown", None, None, None),
        RowState::Terminal {
            outcome, digest, ..
        } => (
            "terminal",
            Some(outcome.clone()),
            Some(digest.to_vec()),
            None,
        ),
    };
    let bytes = encode_u64("outcome_bytes", row.outcome_bytes())?;
    Ok(keyed(
        Stmt::new(
            Want::Count,
            "INSERT INTO ledger_calls (session, op, step, source_index, incarnation, tool, state, outcome, outcome_digest, outcome_bytes, admit_request)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
             ON CONFLICT (session, op, step, source_index, incarnation) DO UPDATE SET
                 tool = EXCLUDED.tool, state = EXCLUDED.state, outcome = EXCLUDED.outcome,
                 outcome_digest = EXCLUDED.outcome_digest, outcome_bytes = EXCLUDED.outcome_bytes,
                 admit_request = EXCLUDED.admit_request",
        ),
        k,
    )?
    .arg(row.tool.as_str().to_owned())
    .arg(state.to_owned())
    .arg(outcome)
    .arg(digest)
    .arg(bytes)
    .arg(request))
}

/// `stmt` with a call key's five columns as its first parameters.
fn keyed(stmt: Stmt, k: &Key) -> Result<Stmt, LedgerError> {
    let p = key_params_for_write(k)?;
    Ok(stmt
        .arg(p.0.to_owned())
        .arg(p.1.to_owned())
        .arg(p.2)
        .arg(p.3)
        .arg(p.4))
}

/// The statement that applies one effect.
fn effect_stmt(e: &Effect) -> Result<Stmt, LedgerError> {
    Ok(match e {
        Effect::PutScope(s) => put_scope(s)?,
        Effect::PutCall(k, row) => put_call(k, row)?,
        Effect::DeleteCall(k) => keyed(
            Stmt::new(
                Want::Count,
                "DELETE FROM ledger_calls
                 WHERE session = $1 AND op = $2 AND step = $3 AND source_index = $4 AND incarnation = $5",
            ),
            k,
        )?,
        Effect::PutAck(k) => keyed(
            Stmt::new(
                Want::Count,
                "INSERT INTO ledger_acks (session, op, step, source_index, incarnation)
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
            ),
            k,
        )?,
        Effect::ForgetAcks(s) => Stmt::new(Want::Count, "DELETE FROM ledger_acks WHERE session = $1")
            .arg(s.as_str().to_owned()),
        Effect::PutRelease(r) => Stmt::new(
            Want::Count,
            "INSERT INTO ledger_releases (session, workspace, incarnation, was, released_at_ms)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .arg(r.session.as_str().to_owned())
        .arg(r.workspace.as_str().to_owned())
        .arg(encode_u64("incarnation", r.incarnation)?)
        .arg(encode_was(r.was)?)
        .arg(encode_u64("released_at_ms", r.released_at_ms)?),
    })
}

/// The statements applying a decision's effects, in order (sent with the
/// `COMMIT`, [`Conn::decide`]). An effect that cannot be encoded refuses
/// the whole decision before anything is sent.
fn effect_stmts(effects: &[Effect]) -> Result<Vec<Stmt>, TxError<LedgerError>> {
    effects
        .iter()
        .map(effect_stmt)
        .collect::<Result<Vec<_>, _>>()
        .map_err(TxError::Refused)
}

impl Ledger for PgLedger {
    fn execute(&self, limits: &Limits, req: &Request) -> Result<Answer, LedgerError> {
        let g = self.lock()?;
        let conn = g.as_ref().ok_or(LedgerError::HandleClosed)?;
        if !req.writes() {
            return conn
                .read(|tx| {
                    let view = load(tx, req, false)?;
                    let d = ledger::decide(&view, limits, req).map_err(TxError::Refused)?;
                    // A read decides no effects; one that did is refused.
                    if d.effects.is_empty() {
                        Ok(d.answer)
                    } else {
                        Err(TxError::Refused(LedgerError::BackendFault {
                            reason: "a read request decided a write; nothing was written"
                                .to_owned(),
                        }))
                    }
                })
                .map_err(tx_error);
        }
        if self.read_only {
            return Err(LedgerError::BackendFault {
                reason: format!(
                    "read-only: the ledger in schema {} was opened with open_read_only; nothing was written",
                    self.schema
                ),
            });
        }
        // Two round trips: the lock and the footprint; the effects with
        // the COMMIT.
        conn.decide(|tx| {
            let view = load(tx, req, true)?;
            // A refusal rolls the transaction back: nothing written.
            let d = ledger::decide(&view, limits, req).map_err(TxError::Refused)?;
            Ok((d.answer, effect_stmts(&d.effects)?))
        })
        .map_err(tx_error)
    }

    fn close(&self) -> Result<(), LedgerError> {
        // Dropping the client ends the session.
        let mut g = self.conn.write().map_err(|_| LedgerError::BackendFault {
            reason: "postgres-ledger-poisoned".to_owned(),
        })?;
        drop(g.take());
        Ok(())
    }

    fn records(&self) -> Result<u64, LedgerError> {
        let g = self.lock()?;
        let conn = g.as_ref().ok_or(LedgerError::HandleClosed)?;
        conn.read(|tx| {
            let r = tx
                .query_one(
                    "SELECT (SELECT count(*) FROM ledger_scopes) + (SELECT count(*) FROM ledger_calls)
                          + (SELECT count(*) FROM ledger_acks) + (SELECT count(*) FROM ledger_releases)",
                    &[],
                )
                .map_err(sql("count-records"))?;
            Ok(cells(&r, "ledger tables").unsigned(0, "count(*)")?)
        })
        .map_err(tx_error)
    }
}
