//! The catalogue's access plane on SQLite: [`Access`] for
//! [`SqliteCatalogue`].
//!
//! It holds no rule. A write is one `BEGIN IMMEDIATE` transaction that loads
//! the rows of the request's [`access::footprint`] — exactly what
//! [`AccessFootprint::partial`] loads — into a partial [`CatalogueState`],
//! calls [`access::decide`], applies its effects in order (principals,
//! credentials, claims, memberships, the catalogue revision) and commits; a
//! refusal rolls back with nothing written. A read is one deferred
//! transaction that loads the bounded rows it needs (a page: at most
//! [`page_window`](custos_core::catalogue::access::read::page_window) rows after the cursor, by `ORDER BY … LIMIT` in SQL, then
//! the rows those name) and calls the core's pure read.
//!
//! ## Tables (catalogue version 5)
//!
//! | table | key | holds |
//! |---|---|---|
//! | `access_principals` | `principal_id` | kind (`owner`/`member`; a partial unique index makes one owner row), name, creation time |
//! | `access_credentials` | `digest` (64 lower-case hex) | kind, principal, state (`active`/`revoked`), issue, claim, resume and expiry times, issuer fingerprint |
//! | `access_claims` | `claim` (64 lower-case hex) | principal, expiry, state (`open`/`claimed`/`void`) and, when claimed, the bound digest, its kind and when (a partial unique index makes one open claim per principal) |
//! | `access_memberships` | `(principal_id, session_id)` | role (`operator`/`observer`); the session is a foreign key to `catalogue_sessions` `ON DELETE CASCADE`, so a catalogue `Delete` takes the session's memberships ([`access::forget_session`]) |
//!
//! Only digests reach the file: a plaintext token never does (the core
//! hashes it before a request exists). Times are stored bit for bit as
//! `i64`; the liveness filters compare them as `u64` with the row value
//! `(t < 0, t)`, whose order is the `u64` order.
//!
//! ## Decoding
//!
//! Decoders are total: a stored value that breaks its grammar (an unknown
//! kind, state or role, a digest that is not 64 lower-case hex, a claimed
//! claim without its bound digest, a text longer than its bound, …) fails
//! the read or write with [`AccessError::Corrupt`] naming the table and the
//! row; it is never read as "no credential" or "no role". A credential probe
//! names its kind and also loads a row whose kind is outside the grammar, so
//! a corrupt kind is reported rather than absent. The liveness filters of
//! the pages likewise pass any state but `revoked`, so a corrupt state is
//! reported. One read is an index probe that cannot see a corrupt row: the
//! owner lookup (`WHERE kind = 'owner'`, the one-owner index) misses an
//! owner row whose kind was overwritten; every other read of that row
//! (authentication, the listing, a write naming it) reports it.
//!
//! Every `CHECK` above holds on write too, so a corrupt value reaches the
//! file only around SQLite's constraints (the tests write them with
//! `PRAGMA ignore_check_constraints`).

use custos_core::catalogue::access::rows::{
    self, AccessLoad, AccessRead, AccessRows, Claims, Credentials, Memberships, Principals,
    RowsAccess,
};
#[cfg(doc)]
use custos_core::catalogue::access::Access;
use custos_core::catalogue::access::{
    self, AccessError, AccessFootprint, AccessOutcome, AccessRequest, AccessState, Authority,
    ClaimDigest, ClaimRow, CredentialRow, Digest, PrincipalRow, Role, Sha256, StoredClaim,
    StoredCredential, StoredMembership, StoredPrincipal, FINGERPRINT_LEN,
};
use custos_core::catalogue::{CatalogueError, CatalogueState};
use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, Row, ToSql, Transaction, TransactionBehavior};

use crate::catalogue::{load_sessions, SqliteCatalogue};
use crate::codec::{cells, cells_from, u64_to_sql};
use crate::fault::Fault;

/// The catalogue's migration step from version 4 to 5: the access tables.
pub(crate) const ACCESS_STEP: &str = "
CREATE TABLE access_principals (
    principal_id TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('owner', 'member')),
    name TEXT,
    created_at_ms INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE UNIQUE INDEX access_one_owner ON access_principals (kind) WHERE kind = 'owner';
CREATE TABLE access_credentials (
    digest TEXT PRIMARY KEY CHECK (length(digest) = 64 AND digest NOT GLOB '*[^0-9a-f]*'),
    kind TEXT NOT NULL CHECK (kind IN ('bearer', 'browser')),
    principal_id TEXT NOT NULL REFERENCES access_principals (principal_id),
    state TEXT NOT NULL CHECK (state IN ('active', 'revoked')),
    issued_at_ms INTEGER NOT NULL,
    claimed_at_ms INTEGER,
    last_resumed_ms INTEGER,
    expires_at_ms INTEGER,
    issued_by TEXT
) STRICT, WITHOUT ROWID;
CREATE INDEX access_credentials_principal ON access_credentials (principal_id);
CREATE TABLE access_claims (
    claim TEXT PRIMARY KEY CHECK (length(claim) = 64 AND claim NOT GLOB '*[^0-9a-f]*'),
    principal_id TEXT NOT NULL REFERENCES access_principals (principal_id),
    expires_at_ms INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('open', 'claimed', 'void')),
    bound_digest TEXT,
    bound_kind TEXT,
    claimed_at_ms INTEGER,
    CHECK ((state = 'claimed') = (bound_digest IS NOT NULL AND bound_kind IS NOT NULL
                                  AND claimed_at_ms IS NOT NULL))
) STRICT, WITHOUT ROWID;
CREATE INDEX access_claims_principal ON access_claims (principal_id);
CREATE UNIQUE INDEX access_claims_one_open ON access_claims (principal_id) WHERE state = 'open';
CREATE TABLE access_memberships (
    principal_id TEXT NOT NULL REFERENCES access_principals (principal_id),
    session_id TEXT NOT NULL REFERENCES catalogue_sessions (session_id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('operator', 'observer')),
    PRIMARY KEY (principal_id, session_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX access_memberships_session ON access_memberships (session_id, principal_id);
";

/// The authentication probe: the credential by its primary key, naming the
/// kind, and its principal beside it (one statement). A row whose stored
/// kind is outside the grammar is loaded too, so it decodes as `Corrupt`
/// instead of reading as absent.
pub const AUTHENTICATE_SQL: &str = "SELECT c.digest, c.kind, c.principal_id, c.state, \
     c.issued_at_ms, c.claimed_at_ms, c.last_resumed_ms, c.expires_at_ms, c.issued_by, \
     p.principal_id, p.kind, p.name, p.created_at_ms \
     FROM access_credentials c LEFT JOIN access_principals p ON p.principal_id = c.principal_id \
     WHERE c.digest = ?1 AND (c.kind = ?2 OR c.kind NOT IN ('bearer', 'browser'))";

const CREDENTIAL_SELECT: &str = "SELECT digest, kind, principal_id, state, issued_at_ms, \
     claimed_at_ms, last_resumed_ms, expires_at_ms, issued_by FROM access_credentials";
const PRINCIPAL_SELECT: &str =
    "SELECT principal_id, kind, name, created_at_ms FROM access_principals";
const CLAIM_SELECT: &str = "SELECT claim, principal_id, expires_at_ms, state, bound_digest, \
     bound_kind, claimed_at_ms FROM access_claims";
const MEMBERSHIP_SELECT: &str = "SELECT principal_id, session_id, role FROM access_memberships";

/// A credential not revoked and, when it expires, unexpired at `?2` (the
/// `u64` order of bit-cast times: see the module documentation). A state
/// outside the grammar passes, so it decodes as `Corrupt`.
const LIVE: &str = "state <> 'revoked' \
     AND (expires_at_ms IS NULL OR (?2 < 0, ?2) < (expires_at_ms < 0, expires_at_ms))";

type Res<T> = Result<T, AccessError>;

fn db(op: &'static str) -> impl FnOnce(rusqlite::Error) -> AccessError {
    move |e| AccessError::BackendFault {
        reason: Fault::Db(op, e).reason(),
    }
}

fn corrupt(what: &'static str, detail: impl Into<String>) -> AccessError {
    AccessError::Corrupt {
        what,
        detail: detail.into(),
    }
}

/// A catalogue failure met while loading the session rows access reads: a
/// stored session row that breaks its grammar is `Corrupt`.
fn from_catalogue(e: CatalogueError) -> AccessError {
    match e {
        CatalogueError::Invalid { what, detail } => corrupt(what, detail),
        other => AccessError::BackendFault {
            reason: other.to_string(),
        },
    }
}

// ------------------------------------------------------------------ decode

/// A principal whose columns start at `base` in the row (a join's later
/// table).
fn decode_principal_at(r: &Row<'_>, base: usize) -> Res<(String, PrincipalRow)> {
    StoredPrincipal::read(&mut cells_from(r, "access_principals", base))?.decode()
}

fn decode_principal(r: &Row<'_>) -> Res<(String, PrincipalRow)> {
    decode_principal_at(r, 0)
}

fn decode_credential(r: &Row<'_>) -> Res<(Sha256, CredentialRow)> {
    StoredCredential::read(&mut cells(r, "access_credentials"))?.decode()
}

fn decode_claim(r: &Row<'_>) -> Res<(ClaimDigest, ClaimRow)> {
    StoredClaim::read(&mut cells(r, "access_claims"))?.decode()
}

fn decode_membership(r: &Row<'_>) -> Res<((String, String), Role)> {
    StoredMembership::read(&mut cells(r, "access_memberships"))?.decode()
}

// ------------------------------------------------------------------ load

/// Runs `sql` and decodes every row.
fn rows<T>(
    tx: &Transaction<'_>,
    sql: &str,
    args: &[&dyn ToSql],
    decode: fn(&Row<'_>) -> Res<T>,
) -> Res<Vec<T>> {
    let mut st = tx.prepare_cached(sql).map_err(db("access-load"))?;
    let mut q = st.query(args).map_err(db("access-load"))?;
    let mut out = Vec::new();
    while let Some(r) = q.next().map_err(db("access-load"))? {
        out.push(decode(r)?);
    }
    Ok(out)
}

fn principals(
    tx: &Transaction<'_>,
    a: &mut AccessState,
    where_: &str,
    args: &[&dyn ToSql],
) -> Res<Vec<String>> {
    let sql = format!("{PRINCIPAL_SELECT} {where_}");
    let got = rows(tx, &sql, args, decode_principal)?;
    let ids = got.iter().map(|(id, _)| id.clone()).collect();
    a.principals.extend(got);
    Ok(ids)
}

fn credentials(
    tx: &Transaction<'_>,
    a: &mut AccessState,
    where_: &str,
    args: &[&dyn ToSql],
) -> Res<()> {
    let sql = format!("{CREDENTIAL_SELECT} {where_}");
    a.credentials
        .extend(rows(tx, &sql, args, decode_credential)?);
    Ok(())
}

fn claims(tx: &Transaction<'_>, a: &mut AccessState, where_: &str, args: &[&dyn ToSql]) -> Res<()> {
    let sql = format!("{CLAIM_SELECT} {where_}");
    a.claims.extend(rows(tx, &sql, args, decode_claim)?);
    Ok(())
}

fn memberships(
    tx: &Transaction<'_>,
    a: &mut AccessState,
    where_: &str,
    args: &[&dyn ToSql],
) -> Res<Vec<(String, String)>> {
    let sql = format!("{MEMBERSHIP_SELECT} {where_}");
    let got = rows(tx, &sql, args, decode_membership)?;
    let keys = got.iter().map(|(k, _)| k.clone()).collect();
    a.memberships.extend(got);
    Ok(keys)
}

fn session(tx: &Transaction<'_>, s: &mut CatalogueState, id: &str) -> Res<()> {
    load_sessions(tx, s, "WHERE s.session_id = ?1", &[&id]).map_err(from_catalogue)
}

fn revision(tx: &Transaction<'_>) -> Res<u64> {
    tx.query_row(
        "SELECT revision FROM catalogue_meta WHERE singleton = 1",
        [],
        |r| {
            let mut c = cells(r, "catalogue_meta");
            c.at("1");
            Ok(c.unsigned(0, "revision").map_err(AccessError::from))
        },
    )
    .map_err(db("access-load-revision"))?
}

/// The access rows in one transaction: one statement per [`AccessLoad`]
/// (a set of ids, one per id).
struct Rows<'t, 'c>(&'t Transaction<'c>);

const BY_PRINCIPAL: &str = "WHERE principal_id = ?1";

impl AccessRows for Rows<'_, '_> {
    type Error = AccessError;

    fn revision(&mut self, s: &mut CatalogueState) -> Res<()> {
        s.revision = revision(self.0)?;
        Ok(())
    }

    fn load(&mut self, load: AccessLoad<'_>, s: &mut CatalogueState) -> Res<()> {
        let tx = self.0;
        let a = &mut s.access;
        match load {
            AccessLoad::Principals(p) => load_principals(tx, a, p),
            AccessLoad::Credentials(c) => load_credentials(tx, a, c),
            AccessLoad::Claims(Claims::Claim(c)) => {
                claims(tx, a, "WHERE claim = ?1", &[&c.sha().hex()])
            }
            AccessLoad::Claims(Claims::Of(id)) => claims(tx, a, BY_PRINCIPAL, &[&id]),
            AccessLoad::Claims(Claims::Open(ids)) => ids.iter().try_for_each(|id| {
                let open = "WHERE principal_id = ?1 AND state NOT IN ('void', 'claimed')";
                claims(tx, a, open, &[id])
            }),
            AccessLoad::Memberships(m) => load_memberships(tx, a, m),
            AccessLoad::Sessions(ids) => ids.iter().try_for_each(|id| session(tx, s, id)),
        }
    }
}

fn load_principals(tx: &Transaction<'_>, a: &mut AccessState, p: Principals<'_>) -> Res<()> {
    match p {
        Principals::Owner => principals(tx, a, "WHERE kind = 'owner'", &[]),
        Principals::Id(id) => principals(tx, a, BY_PRINCIPAL, &[&id]),
        Principals::Ids(ids) => ids
            .iter()
            .try_for_each(|id| principals(tx, a, BY_PRINCIPAL, &[id]).map(drop))
            .map(|()| Vec::new()),
        Principals::Page { after, fetch } => principals(
            tx,
            a,
            "WHERE (?1 IS NULL OR principal_id > ?1) ORDER BY principal_id LIMIT ?2",
            params![after, u64_to_sql(fetch)],
        ),
    }
    .map(drop)
}

fn load_credentials(tx: &Transaction<'_>, a: &mut AccessState, c: Credentials<'_>) -> Res<()> {
    match c {
        Credentials::Hash(sha) => credentials(tx, a, "WHERE digest = ?1", &[&sha.hex()]),
        // The authentication probe: the principal comes in beside it.
        Credentials::Digest(d) => probe_into(tx, a, d),
        Credentials::Logins => credentials(tx, a, "WHERE kind = 'browser'", &[]),
        Credentials::Of(id) => credentials(tx, a, BY_PRINCIPAL, &[&id]),
        Credentials::Listed { ids, now_ms } => ids.iter().try_for_each(|id| {
            let live = format!("WHERE principal_id = ?1 AND {LIVE}");
            credentials(tx, a, &live, params![id, u64_to_sql(now_ms)])
        }),
        Credentials::Signins {
            principal,
            now_ms,
            after,
            fetch,
        } => credentials(
            tx,
            a,
            &format!(
                "WHERE principal_id = ?1 AND kind <> 'bearer' AND {LIVE}
                 AND (?3 IS NULL OR substr(digest, 1, {FINGERPRINT_LEN}) > ?3)
                 ORDER BY digest LIMIT ?4"
            ),
            params![principal, u64_to_sql(now_ms), after, u64_to_sql(fetch)],
        ),
    }
}

fn load_memberships(tx: &Transaction<'_>, a: &mut AccessState, m: Memberships<'_>) -> Res<()> {
    match m {
        Memberships::Of(id) => memberships(tx, a, BY_PRINCIPAL, &[&id]),
        Memberships::In { principal, session } => memberships(
            tx,
            a,
            "WHERE principal_id = ?1 AND session_id = ?2",
            params![principal, session],
        ),
        Memberships::OfPage {
            principal,
            after,
            fetch,
        } => memberships(
            tx,
            a,
            "WHERE principal_id = ?1 AND (?2 IS NULL OR session_id > ?2)
             ORDER BY session_id LIMIT ?3",
            params![principal, after, u64_to_sql(fetch)],
        ),
        Memberships::InPage {
            session,
            after,
            fetch,
        } => memberships(
            tx,
            a,
            "WHERE session_id = ?1 AND (?2 IS NULL OR principal_id > ?2)
             ORDER BY principal_id LIMIT ?3",
            params![session, after, u64_to_sql(fetch)],
        ),
    }
    .map(drop)
}

/// The credential row `digest` names (by hash and kind) and its
/// principal's row, read in one statement. The hash is the primary key, so
/// one row at most.
fn probe(conn: &Connection, digest: &Digest) -> Res<Option<Probed>> {
    let hex = digest.sha().hex();
    let mut st = conn
        .prepare_cached(AUTHENTICATE_SQL)
        .map_err(db("access-load"))?;
    let mut q = st
        .query(params![hex, digest.kind().as_str()])
        .map_err(db("access-load"))?;
    let Some(r) = q.next().map_err(db("access-load"))? else {
        return Ok(None);
    };
    let credential = decode_credential(r)?;
    let principal = match r.get_ref(9).map_err(db("decode"))? {
        ValueRef::Null => None,
        _ => Some(decode_principal_at(r, 9)?),
    };
    Ok(Some((credential, principal)))
}

/// A probed credential row and its principal's row, if any.
type Probed = ((Sha256, CredentialRow), Option<(String, PrincipalRow)>);

/// [`probe`] into a state being loaded.
fn probe_into(conn: &Connection, a: &mut AccessState, digest: &Digest) -> Res<()> {
    if let Some(((sha, c), principal)) = probe(conn, digest)? {
        a.credentials.insert(sha, c);
        if let Some((id, p)) = principal {
            a.principals.insert(id, p);
        }
    }
    Ok(())
}

// ------------------------------------------------------------------ the port

impl SqliteCatalogue {
    fn access_read<T>(&self, f: impl FnMut(&Transaction<'_>) -> Res<T>) -> Res<T> {
        self.access_tx(TransactionBehavior::Deferred, f)
    }

    /// The rows an access write with footprint `fp` loads, read in one
    /// deferred transaction: for tests comparing the loader with
    /// [`AccessFootprint::partial`].
    #[doc(hidden)]
    pub fn load_access_footprint(&self, fp: &AccessFootprint) -> Res<CatalogueState> {
        self.access_read(|tx| rows::load_footprint(&mut Rows(tx), fp))
    }

    /// SQLite's plan for the authentication probe ([`AUTHENTICATE_SQL`]):
    /// one line per plan row (the detail column).
    pub fn explain_authenticate(&self) -> Res<Vec<String>> {
        self.access_read(|tx| {
            let mut st = tx
                .prepare(&format!("EXPLAIN QUERY PLAN {AUTHENTICATE_SQL}"))
                .map_err(db("explain"))?;
            let mut q = st
                .query(params![rusqlite::types::Null, rusqlite::types::Null])
                .map_err(db("explain"))?;
            let mut out = Vec::new();
            while let Some(r) = q.next().map_err(db("explain"))? {
                out.push(r.get::<_, String>(3).map_err(db("explain"))?);
            }
            Ok(out)
        })
    }
}

impl RowsAccess for SqliteCatalogue {
    type AccessRowsError = AccessError;

    fn write_access(&self, req: &AccessRequest) -> Res<AccessOutcome> {
        self.access_tx(TransactionBehavior::Immediate, |tx| {
            let before = rows::load_footprint(&mut Rows(tx), &access::footprint(req))?;
            let d = access::decide(&before, req)?;
            for e in &d.effects {
                crate::effects::apply_access(tx, e).map_err(db("access-write"))?;
            }
            Ok(d.outcome)
        })
    }

    fn authenticate_probe(&self, digest: &Digest, now_ms: u64) -> Res<Option<Authority>> {
        // One statement (the credential by its primary key, its principal
        // beside it), outside any transaction of its own.
        self.access_alone(|conn| {
            let Some(((sha, c), principal)) = probe(conn, digest)? else {
                return Ok(None);
            };
            let principal = principal.as_ref().map(|(id, p)| (id.as_str(), p));
            Ok(access::authenticate_rows(
                digest,
                Some((&sha, &c)),
                principal,
                now_ms,
            ))
        })
    }

    fn read_access_rows<T>(&self, f: &mut AccessRead<'_, T, AccessError>) -> Res<T> {
        self.access_read(|tx| f(&mut Rows(tx)))
    }
}
