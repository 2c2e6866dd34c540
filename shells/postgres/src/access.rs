//! The access plane on PostgreSQL: `custos_core::catalogue::access` (principals,
//! credentials, claims, browser logins and per-session memberships) stored
//! beside the catalogue, in the same schema, and implemented on
//! [`PgCatalogue`] as the [`Access`] port. No rule of its own: every write
//! is decided by [`access::decide`], every read answered by the core's pure
//! read of a partial state.
//!
//! ## Writes
//!
//! [`Access::apply_access`] is one [`Conn::write`](crate::conn::Conn::write)
//! transaction that
//!
//! 1. locks the catalogue's head row (`catalogue_head … FOR UPDATE`) — the
//!    lock every catalogue writer takes first, so access and catalogue
//!    writers are one total order (a membership can never be written for a
//!    session a concurrent `Delete` is removing, and two bootstraps of the
//!    owner are decided one after the other);
//! 2. loads the request's [`access::footprint`] exactly as
//!    [`AccessFootprint::partial`] loads it from a whole state: the owner
//!    row when asked; the named principals, each with all its credentials,
//!    claims and memberships; the credential rows of the footprint's
//!    hashes; the claim rows of its claims; then the principals those
//!    credentials and claims name, with their rows; the catalogue session
//!    rows of its sessions; every browser credential for `all_logins`; and
//!    the catalogue revision;
//! 3. calls [`access::decide`], and
//! 4. applies the decision's effects in order, one statement each (the
//!    revision, which a membership change moves, among them),
//!
//! and commits. A refusal rolls back: nothing written.
//!
//! ## Reads
//!
//! Each read is one REPEATABLE READ, READ ONLY transaction that loads only
//! bounded rows: a primary-key probe (`authenticate` is
//! `WHERE digest = $1 AND kind = $2`), or for a page at most
//! [`page_window`](custos_core::catalogue::access::read::page_window) rows after the cursor (`ORDER BY … LIMIT`) and then the
//! rows those name. A page of principals loads, of each listed principal,
//! only its credentials not revoked and not expired and its claims neither
//! claimed nor void — the rows the listing's summary reads; a row whose
//! state or expiry breaks its grammar is loaded too, so it fails the read
//! rather than vanishing.
//!
//! ## Stored form
//!
//! Digests and claim digests are 64 lower-case hex digits; kinds, states
//! and roles their `as_str` spellings; timestamps `bigint` (a `u64` above
//! `i64::MAX` refuses the write with `Invalid`, nothing written). Only the
//! hashes core computed are stored — never a token. Every text column is
//! `COLLATE "C"`, so pages order and continue by bytes, as core's maps do.
//! Decoders are total: a stored value that breaks its grammar (an unknown
//! kind, state or role, bad hex, a claimed claim without its bound digest,
//! a negative `bigint`, a malformed principal or session id, an untrimmed
//! name) fails the read with [`AccessError::Corrupt`] naming the table, row
//! and column — never read as "no credential" or "no role".
//!
//! ## Schema (catalogue version 2)
//!
//! [`STEP_ACCESS`] is the catalogue component's second step:
//!
//! | table | key | constraints |
//! |---|---|---|
//! | `access_principals` | `principal_id` | `kind` is `owner` or `member`; one `owner` row at most (a partial unique index) |
//! | `access_credentials` | `digest` | `kind` is `bearer` or `browser` (every lookup names it, so a kind must never be unreadable); `principal_id` references a principal; indexed by principal |
//! | `access_claims` | `claim` | `principal_id` references a principal; one `open` claim per principal at most (a partial unique index) |
//! | `access_memberships` | `(principal_id, session_id)` | `session_id` references `catalogue_sessions` `ON DELETE CASCADE` (a deleted session takes its memberships, as `access::forget_session` does); `role` is `operator` or `observer`; indexed by session |

use custos_core::catalogue::access::rows::{
    self, AccessLoad, AccessRead, AccessRows, Claims, Credentials, Memberships, Principals,
    RowsAccess,
};
use custos_core::catalogue::access::{
    self, AccessError, AccessOutcome, AccessRequest, AccessState, Authority, ClaimDigest, ClaimRow,
    CredentialRow, Digest, PrincipalRow, Role, Sha256, StoredClaim, StoredCredential,
    StoredMembership, StoredPrincipal,
};
#[cfg(doc)]
use custos_core::catalogue::access::{Access, AccessFootprint};
use custos_core::catalogue::{CatalogueError, CatalogueState};
use postgres::Row;

use crate::cols::{cells, cells_from};

use crate::catalogue::{
    decode_locked, load_meta, lock_sql, put_sessions, sessions_sql, PgCatalogue,
};
use crate::conn::{
    db, decode_clock, next_got, server_now, AccessClock, Failure, Stmt, Tx as Transaction, TxError,
    Want, CLOCK_SQL,
};
use crate::effects::EffectError;

/// The catalogue schema step that creates the access tables (version 1 →
/// 2). Applied by [`crate::catalogue::SCHEMA`] under its advisory lock, in
/// the transaction that records the new version.
pub const STEP_ACCESS: &str = "
CREATE TABLE access_principals (
    principal_id text COLLATE \"C\" PRIMARY KEY,
    kind text COLLATE \"C\" NOT NULL CHECK (kind IN ('owner', 'member')),
    name text COLLATE \"C\",
    created_at_ms bigint NOT NULL
);
CREATE UNIQUE INDEX access_principals_one_owner ON access_principals ((kind)) WHERE kind = 'owner';
CREATE TABLE access_credentials (
    digest text COLLATE \"C\" PRIMARY KEY,
    kind text COLLATE \"C\" NOT NULL CHECK (kind IN ('bearer', 'browser')),
    principal_id text COLLATE \"C\" NOT NULL REFERENCES access_principals (principal_id),
    state text COLLATE \"C\" NOT NULL,
    issued_at_ms bigint NOT NULL,
    claimed_at_ms bigint,
    last_resumed_ms bigint,
    expires_at_ms bigint,
    issued_by text COLLATE \"C\"
);
CREATE INDEX access_credentials_principal ON access_credentials (principal_id);
CREATE TABLE access_claims (
    claim text COLLATE \"C\" PRIMARY KEY,
    principal_id text COLLATE \"C\" NOT NULL REFERENCES access_principals (principal_id),
    expires_at_ms bigint NOT NULL,
    state text COLLATE \"C\" NOT NULL,
    bound_digest text COLLATE \"C\",
    bound_kind text COLLATE \"C\",
    claimed_at_ms bigint
);
CREATE INDEX access_claims_principal ON access_claims (principal_id);
CREATE UNIQUE INDEX access_claims_one_open ON access_claims (principal_id) WHERE state = 'open';
CREATE TABLE access_memberships (
    principal_id text COLLATE \"C\" NOT NULL REFERENCES access_principals (principal_id),
    session_id text COLLATE \"C\" NOT NULL
        REFERENCES catalogue_sessions (session_id) ON DELETE CASCADE,
    role text COLLATE \"C\" NOT NULL CHECK (role IN ('operator', 'observer')),
    PRIMARY KEY (principal_id, session_id)
);
CREATE INDEX access_memberships_session ON access_memberships (session_id, principal_id);
";

/// The access tables, in dependency order (parents first).
pub const TABLES: [&str; 4] = [
    "access_principals",
    "access_credentials",
    "access_claims",
    "access_memberships",
];

// ------------------------------------------------------------------ errors

type Res<T> = Result<T, AccessError>;
type Tx<T> = Result<T, TxError<AccessError>>;

fn failure(f: Failure) -> AccessError {
    match f {
        Failure::Unavailable(reason) => AccessError::Unavailable { reason },
        Failure::Corrupt(detail) => AccessError::Corrupt {
            what: "stored row",
            detail,
        },
        other => AccessError::BackendFault {
            reason: other.to_string(),
        },
    }
}

fn finish<T>(r: Tx<T>) -> Res<T> {
    r.map_err(|e| e.settle(failure))
}

fn pg(op: &'static str) -> impl Fn(postgres::Error) -> TxError<AccessError> {
    move |e| TxError::Failure(db(op)(e))
}

fn corrupt(detail: String) -> TxError<AccessError> {
    TxError::Refused(AccessError::Corrupt {
        what: "stored row",
        detail,
    })
}

/// A catalogue loader's result as an access one: a catalogue row that
/// breaks its grammar is `Corrupt`.
fn cat<T>(r: Result<T, TxError<CatalogueError>>) -> Tx<T> {
    r.map_err(|e| match e {
        TxError::Failure(f) => TxError::Failure(f),
        TxError::Refused(CatalogueError::Invalid { what, detail }) => {
            TxError::Refused(AccessError::Corrupt { what, detail })
        }
        TxError::Refused(CatalogueError::Unavailable { reason }) => {
            TxError::Refused(AccessError::Unavailable { reason })
        }
        TxError::Refused(other) => TxError::Refused(AccessError::BackendFault {
            reason: other.to_string(),
        }),
    })
}

/// A read's `now` as a `bigint` bound: a `now` beyond `i64::MAX` is later
/// than every storable expiry, as `i64::MAX` is.
fn now_bound(now_ms: u64) -> i64 {
    i64::try_from(now_ms).unwrap_or(i64::MAX)
}

// ------------------------------------------------------------------ decode

const PRINCIPAL_SELECT: &str =
    "SELECT principal_id, kind, name, created_at_ms FROM access_principals";

fn decode_principal(r: &Row) -> Tx<(String, PrincipalRow)> {
    decode_principal_at(r, 0)
}

/// A principal whose columns start at `base` in the row.
fn decode_principal_at(r: &Row, base: usize) -> Tx<(String, PrincipalRow)> {
    let mut c = cells_from(r, "access_principals", base);
    Ok(StoredPrincipal::read(&mut c)?.decode()?)
}

const CREDENTIAL_SELECT: &str = "SELECT digest, kind, principal_id, state, issued_at_ms,
    claimed_at_ms, last_resumed_ms, expires_at_ms, issued_by FROM access_credentials";

/// The columns [`CREDENTIAL_SELECT`] reads.
const CREDENTIAL_COLUMNS: usize = 9;

/// Authentication's one statement: the credential by its primary key and
/// its principal beside it. A row whose stored kind is outside the grammar
/// is read too, so it decodes as corrupt (as `Credentials::Digest` reads).
const AUTHENTICATE_SQL: &str = "SELECT c.digest, c.kind, c.principal_id, c.state,
    c.issued_at_ms, c.claimed_at_ms, c.last_resumed_ms, c.expires_at_ms, c.issued_by,
    p.principal_id, p.kind, p.name, p.created_at_ms,
    (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint
    FROM access_credentials c LEFT JOIN access_principals p ON p.principal_id = c.principal_id
    WHERE c.digest = $1 AND (c.kind = $2 OR c.kind NOT IN ('bearer', 'browser'))";

/// The server's clock in milliseconds, read in column `col`.
fn clock_at(r: &Row, col: usize) -> Tx<u64> {
    let ms: i64 = r
        .try_get(col)
        .map_err(|e| corrupt(format!("server clock: {e}")))?;
    u64::try_from(ms).map_err(|_| corrupt(format!("server clock before 1970: {ms}")))
}

/// The column of [`AUTHENTICATE_SQL`] holding the server's clock.
const AUTHENTICATE_CLOCK_COLUMN: usize = CREDENTIAL_COLUMNS + 4;

fn decode_credential(r: &Row) -> Tx<(Sha256, CredentialRow)> {
    Ok(StoredCredential::read(&mut cells(r, "access_credentials"))?.decode()?)
}

const CLAIM_SELECT: &str = "SELECT claim, principal_id, expires_at_ms, state, bound_digest,
    bound_kind, claimed_at_ms FROM access_claims";

fn decode_claim(r: &Row) -> Tx<(ClaimDigest, ClaimRow)> {
    Ok(StoredClaim::read(&mut cells(r, "access_claims"))?.decode()?)
}

const MEMBERSHIP_SELECT: &str = "SELECT principal_id, session_id, role FROM access_memberships";

fn decode_membership(r: &Row) -> Tx<((String, String), Role)> {
    Ok(StoredMembership::read(&mut cells(r, "access_memberships"))?.decode()?)
}

/// One access table's rows in a pipeline: what selects them and where
/// they go.
#[derive(Clone, Copy)]
enum Table {
    Principals,
    Credentials,
    Claims,
    Memberships,
}

impl Table {
    fn select(self, where_: &str) -> String {
        let select = match self {
            Table::Principals => PRINCIPAL_SELECT,
            Table::Credentials => CREDENTIAL_SELECT,
            Table::Claims => CLAIM_SELECT,
            Table::Memberships => MEMBERSHIP_SELECT,
        };
        format!("{select} {where_}")
    }

    fn put(self, a: &mut AccessState, rows: &[Row]) -> Tx<()> {
        for r in rows {
            match self {
                Table::Principals => {
                    let (id, p) = decode_principal(r)?;
                    a.principals.insert(id, p);
                }
                Table::Credentials => {
                    let (sha, c) = decode_credential(r)?;
                    a.credentials.insert(sha, c);
                }
                Table::Claims => {
                    let (k, c) = decode_claim(r)?;
                    a.claims.insert(k, c);
                }
                Table::Memberships => {
                    let (k, role) = decode_membership(r)?;
                    a.memberships.insert(k, role);
                }
            }
        }
        Ok(())
    }
}

/// Where a row set goes.
#[derive(Clone, Copy)]
enum Dest {
    Access(Table),
    Sessions,
}

/// Credentials neither revoked nor expired (a grammar-breaking state or
/// expiry included, so it fails the decode): the rows a listing reads.
const NOT_DEAD: &str = "state <> 'revoked'
    AND (expires_at_ms IS NULL OR $2 < expires_at_ms OR expires_at_ms < 0)";

/// The statement of one [`AccessLoad`] and where its rows go: one SQL
/// text for a read alone and a write's pipeline (a set of ids is one
/// statement, `= ANY($1)`).
fn statement(load: AccessLoad<'_>) -> (Dest, Stmt) {
    let on = |t: Table, where_: &str| (Dest::Access(t), Stmt::new(Want::Rows, t.select(where_)));
    let by = "WHERE principal_id = $1";
    let text = |v: &str| v.to_owned();
    let fetch = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let (into, st) = match load {
        AccessLoad::Principals(p) => match p {
            Principals::Owner => on(Table::Principals, "WHERE kind = 'owner'"),
            Principals::Id(id) => {
                let (i, st) = on(Table::Principals, by);
                (i, st.arg(text(id)))
            }
            Principals::Ids(ids) => {
                let (i, st) = on(Table::Principals, "WHERE principal_id = ANY($1)");
                (i, st.arg(ids.to_vec()))
            }
            Principals::Page { after, fetch: n } => {
                let (i, st) = on(
                    Table::Principals,
                    "WHERE ($1::text IS NULL OR principal_id > $1::text)
                     ORDER BY principal_id LIMIT $2",
                );
                (i, st.arg(after.map(text)).arg(fetch(n)))
            }
        },
        AccessLoad::Credentials(c) => credential_statement(c),
        AccessLoad::Claims(c) => match c {
            Claims::Claim(claim) => {
                let (i, st) = on(Table::Claims, "WHERE claim = $1");
                (i, st.arg(claim.sha().hex()))
            }
            Claims::Of(id) => {
                let (i, st) = on(Table::Claims, by);
                (i, st.arg(text(id)))
            }
            Claims::Open(ids) => {
                let (i, st) = on(
                    Table::Claims,
                    "WHERE principal_id = ANY($1) AND state NOT IN ('claimed', 'void')",
                );
                (i, st.arg(ids.to_vec()))
            }
        },
        AccessLoad::Memberships(m) => membership_statement(m),
        AccessLoad::Sessions(ids) => (
            Dest::Sessions,
            Stmt::new(Want::Rows, sessions_sql("WHERE s.session_id = ANY($1)")).arg(ids.to_vec()),
        ),
    };
    (into, st)
}

fn credential_statement(c: Credentials<'_>) -> (Dest, Stmt) {
    let t = Table::Credentials;
    let on = |where_: &str| Stmt::new(Want::Rows, t.select(where_));
    let st = match c {
        Credentials::Hash(sha) => on("WHERE digest = $1").arg(sha.hex()),
        Credentials::Digest(d) => {
            on("WHERE digest = $1 AND (kind = $2 OR kind NOT IN ('bearer', 'browser'))")
                .arg(d.sha().hex())
                .arg(d.kind().as_str().to_owned())
        }
        Credentials::Logins => on("WHERE kind = 'browser'"),
        Credentials::Of(id) => on("WHERE principal_id = $1").arg(id.to_owned()),
        Credentials::Listed { ids, now_ms } => {
            on(&format!("WHERE principal_id = ANY($1) AND {NOT_DEAD}"))
                .arg(ids.to_vec())
                .arg(now_bound(now_ms))
        }
        Credentials::Signins {
            principal,
            now_ms,
            after,
            fetch,
        } => on(&format!(
            "WHERE principal_id = $1 AND kind <> 'bearer' AND {NOT_DEAD}
               AND ($3::text IS NULL OR substr(digest, 1, 16) > $3::text)
             ORDER BY digest LIMIT $4"
        ))
        .arg(principal.to_owned())
        .arg(now_bound(now_ms))
        .arg(after.map(str::to_owned))
        .arg(i64::try_from(fetch).unwrap_or(i64::MAX)),
    };
    (Dest::Access(t), st)
}

fn membership_statement(m: Memberships<'_>) -> (Dest, Stmt) {
    let t = Table::Memberships;
    let on = |where_: &str| Stmt::new(Want::Rows, t.select(where_));
    let fetch = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let st = match m {
        Memberships::Of(id) => on("WHERE principal_id = $1").arg(id.to_owned()),
        Memberships::In { principal, session } => on("WHERE principal_id = $1 AND session_id = $2")
            .arg(principal.to_owned())
            .arg(session.to_owned()),
        Memberships::OfPage {
            principal,
            after,
            fetch: n,
        } => on(
            "WHERE principal_id = $1 AND ($2::text IS NULL OR session_id > $2::text)
                 ORDER BY session_id LIMIT $3",
        )
        .arg(principal.to_owned())
        .arg(after.map(str::to_owned))
        .arg(fetch(n)),
        Memberships::InPage {
            session,
            after,
            fetch: n,
        } => on(
            "WHERE session_id = $1 AND ($2::text IS NULL OR principal_id > $2::text)
                 ORDER BY principal_id LIMIT $3",
        )
        .arg(session.to_owned())
        .arg(after.map(str::to_owned))
        .arg(fetch(n)),
    };
    (Dest::Access(t), st)
}

/// The rows of `into` into `s`.
fn put(into: Dest, s: &mut CatalogueState, rows: &[Row]) -> Tx<()> {
    match into {
        Dest::Access(t) => t.put(&mut s.access, rows),
        Dest::Sessions => cat(put_sessions(s, rows)),
    }
}

/// Core's refusals as this shell's transaction error (what `?` on a read's
/// answer gives). A server failure is never built as an `AccessError` and
/// passed through here: it is `TxError::Failure` from the start.
impl From<AccessError> for TxError<AccessError> {
    fn from(e: AccessError) -> Self {
        TxError::Refused(e)
    }
}

/// The access rows in one transaction; a batch of loads is one round trip.
/// The flag: reads judge expiries by the server's clock ([`AccessClock`]).
struct Rows<'a, 'b>(&'a mut Transaction<'b>, bool);

impl AccessRows for Rows<'_, '_> {
    type Error = TxError<AccessError>;

    fn revision(&mut self, s: &mut CatalogueState) -> Tx<()> {
        cat(load_meta(self.0, s))
    }

    fn load(&mut self, load: AccessLoad<'_>, s: &mut CatalogueState) -> Tx<()> {
        self.load_all(&[load], s)
    }

    fn load_all(&mut self, loads: &[AccessLoad<'_>], s: &mut CatalogueState) -> Tx<()> {
        if loads.is_empty() {
            return Ok(());
        }
        let (into, stmts): (Vec<Dest>, Vec<Stmt>) = loads.iter().map(|l| statement(*l)).unzip();
        let got = self.0.run(&stmts).map_err(pg("access-load"))?;
        for (rows, into) in got.into_iter().zip(into) {
            put(into, s, &rows.rows("access-load")?)?;
        }
        Ok(())
    }

    fn now(&mut self, now_ms: u64) -> Tx<u64> {
        if self.1 {
            Ok(server_now(self.0)?)
        } else {
            Ok(now_ms)
        }
    }
}

/// Locks the head (and, judging by the server's clock, reads it) and loads
/// what `AccessFootprint::partial` loads of `req`'s footprint into `s`, in
/// two round trips: the head lock, the clock and the footprint's row sets
/// ([`AccessFootprint::loads`]); then every principal they name, whole.
/// Answers the server's clock when asked for it.
fn lock_and_load(
    tx: &mut Transaction<'_>,
    s: &mut CatalogueState,
    req: &AccessRequest,
    clock: bool,
) -> Tx<Option<u64>> {
    let fp = access::footprint(req);
    let mut stmts = vec![Stmt::new(Want::Opt, lock_sql())];
    if clock {
        stmts.push(Stmt::new(Want::One, CLOCK_SQL));
    }
    let (into, loads): (Vec<Dest>, Vec<Stmt>) = fp.loads().into_iter().map(statement).unzip();
    stmts.extend(loads);
    let got = tx.run(&stmts).map_err(pg("access-load"))?;
    let mut got = got.into_iter();
    let mut next = || next_got(&mut got, "access-load").map_err(TxError::Failure);
    cat(decode_locked(s, next()?.opt("lock-head")?.as_ref()))?;
    let now = if clock {
        Some(decode_clock(&next()?.one("clock")?)?)
    } else {
        None
    };
    for into in into {
        put(into, s, &next()?.rows("access-load")?)?;
    }
    let named = fp.named(s);
    Rows(tx, false).load_all(&rows::whole(&named), s)?;
    Ok(now)
}

impl PgCatalogue {
    fn server_clock(&self) -> bool {
        self.conn.target().judges_access_by() == AccessClock::Server
    }
}

impl RowsAccess for PgCatalogue {
    type AccessRowsError = TxError<AccessError>;

    fn write_access(&self, req: &AccessRequest) -> Res<AccessOutcome> {
        if self.read_only {
            return Err(AccessError::BackendFault {
                reason: format!(
                    "the catalogue in schema {} is open read-only: apply_access refused",
                    self.schema()
                ),
            });
        }
        finish(self.conn.decide(|tx| {
            // The head-row lock first: it orders every catalogue writer.
            let mut before = CatalogueState::default();
            // Two round trips: the lock, the clock and the rows named;
            // then the principals named. Judged by the server's clock,
            // read after the lock.
            let clock = self.server_clock() && req.now_ms().is_some();
            let now = lock_and_load(tx, &mut before, req, clock)?;
            let judged;
            let req = match now {
                Some(now) => {
                    judged = req.rebased(now);
                    &judged
                }
                None => req,
            };
            let d = access::decide(&before, req).map_err(TxError::Refused)?;
            // Every effect travels with the COMMIT.
            let mut stmts = Vec::new();
            for e in &d.effects {
                stmts.extend(
                    crate::effects::apply_access(e).map_err(|EffectError(what, v)| {
                        TxError::Refused(AccessError::Invalid {
                            what,
                            detail: format!("{v} exceeds a bigint; it cannot be stored"),
                        })
                    })?,
                );
            }
            Ok((d.outcome, stmts))
        }))
    }

    fn authenticate_probe(&self, digest: &Digest, now_ms: u64) -> Res<Option<Authority>> {
        // One statement on its own (its own snapshot): one round trip.
        let rows = finish(
            self.conn
                .query_alone(
                    "authenticate",
                    AUTHENTICATE_SQL,
                    &[&digest.sha().hex(), &digest.kind().as_str()],
                )
                .map_err(TxError::from),
        )?;
        // The hash is the primary key: one row at most.
        let Some(r) = rows.first() else {
            return Ok(None);
        };
        finish((|| {
            let now = if self.server_clock() {
                clock_at(r, AUTHENTICATE_CLOCK_COLUMN)?
            } else {
                now_ms
            };
            let (sha, c) = decode_credential(r)?;
            // The joined principal, if any (nothing copied to tell).
            let principal = cells_from(r, "access_principals", CREDENTIAL_COLUMNS);
            let principal = if principal.is_null(0, "principal_id")? {
                None
            } else {
                Some(decode_principal_at(r, CREDENTIAL_COLUMNS)?)
            };
            let principal = principal.as_ref().map(|(id, p)| (id.as_str(), p));
            Ok(access::authenticate_rows(
                digest,
                Some((&sha, &c)),
                principal,
                now,
            ))
        })())
    }

    fn read_access_rows<T>(&self, f: &mut AccessRead<'_, T, TxError<AccessError>>) -> Res<T> {
        let server_clock = self.server_clock();
        finish(self.conn.read(|tx| f(&mut Rows(tx, server_clock))))
    }
}
