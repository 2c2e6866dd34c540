//! The catalogue's and the access plane's effects as PostgreSQL statements:
//! one statement per [`Effect`] (a session's removal: one per side table,
//! then its row; its memberships cascade). The order, the diff and every
//! rule are core's; this module only names the tables.

use custos_core::catalogue::access::effect::Effect as AccessEffect;
use custos_core::catalogue::access::{ClaimDigest, ClaimRow, ClaimState, CredentialRow, Sha};
use custos_core::catalogue::{Creation, Effect, InitState, Visibility};
use custos_core::Millis;
use postgres::types::ToSql;

use crate::conn::Tx;

/// Why an effect was not applied.
pub(crate) enum EffectError {
    /// The server refused or failed the statement.
    Db(postgres::Error),
    /// A number past a `bigint`: `(what, value)`. Nothing was written.
    TooBig(&'static str, u64),
}

impl From<postgres::Error> for EffectError {
    fn from(e: postgres::Error) -> Self {
        EffectError::Db(e)
    }
}

type Res = Result<(), EffectError>;

fn exec(tx: &mut Tx<'_>, sql: &str, args: &[&(dyn ToSql + Sync)]) -> Res {
    tx.execute(sql, args)?;
    Ok(())
}

fn big(what: &'static str, v: u64) -> Result<i64, EffectError> {
    i64::try_from(v).map_err(|_| EffectError::TooBig(what, v))
}

fn opt_big(what: &'static str, v: Option<u64>) -> Result<Option<i64>, EffectError> {
    v.map(|v| big(what, v)).transpose()
}

/// A session's side tables, each keyed by `session_id`.
const SIDE_TABLES: [&str; 5] = [
    "catalogue_session_names",
    "catalogue_session_archives",
    "catalogue_session_subtitles",
    "catalogue_session_moves",
    "catalogue_session_deletions",
];

/// Sets (`Some`) or removes (`None`) a session's row in a side table with
/// one value column.
fn side_value(tx: &mut Tx<'_>, table: &str, column: &str, id: &str, v: Option<&str>) -> Res {
    match v {
        Some(v) => exec(
            tx,
            &format!(
                "INSERT INTO {table} (session_id, {column}) VALUES ($1, $2)
                 ON CONFLICT (session_id) DO UPDATE SET {column} = EXCLUDED.{column}"
            ),
            &[&id, &v],
        ),
        None => exec(
            tx,
            &format!("DELETE FROM {table} WHERE session_id = $1"),
            &[&id],
        ),
    }
}

/// Sets or removes a session's row in a marker table (no value column).
fn side_mark(tx: &mut Tx<'_>, table: &str, id: &str, on: bool) -> Res {
    let sql = if on {
        format!("INSERT INTO {table} (session_id) VALUES ($1) ON CONFLICT DO NOTHING")
    } else {
        format!("DELETE FROM {table} WHERE session_id = $1")
    };
    exec(tx, &sql, &[&id])
}

/// Applies one catalogue effect.
pub(crate) fn apply(tx: &mut Tx<'_>, e: &Effect) -> Res {
    match e {
        Effect::SetRevision(r) => exec(
            tx,
            "UPDATE catalogue_head SET revision = $1 WHERE singleton = 1",
            &[&big("revision", *r)?],
        ),
        Effect::SetRecentSeq(q) => exec(
            tx,
            "UPDATE catalogue_head SET recent_seq = $1 WHERE singleton = 1",
            &[&big("recent sequence", *q)?],
        ),
        Effect::Access(a) => apply_access(tx, a),
        Effect::DeleteDefault(ws) => exec(
            tx,
            "DELETE FROM catalogue_workspace_defaults WHERE workspace = $1",
            &[ws],
        ),
        Effect::DeleteDelegate(sp, pa) => exec(
            tx,
            "DELETE FROM catalogue_delegate_sessions WHERE spawner = $1 AND parent_session = $2",
            &[sp, pa],
        ),
        Effect::PutDefault { workspace, session } => exec(
            tx,
            "INSERT INTO catalogue_workspace_defaults (workspace, session_id) VALUES ($1, $2)
             ON CONFLICT (workspace) DO UPDATE SET session_id = EXCLUDED.session_id",
            &[workspace, session],
        ),
        Effect::PutDelegate {
            spawner,
            parent_session,
            row,
        } => exec(
            tx,
            "INSERT INTO catalogue_delegate_sessions
                 (spawner, parent_session, session_id, last_contact_ms)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (spawner, parent_session) DO UPDATE SET
                 session_id = EXCLUDED.session_id, last_contact_ms = EXCLUDED.last_contact_ms",
            &[
                spawner,
                parent_session,
                &row.session_id,
                &big("last_contact_ms", row.last_contact_ms)?,
            ],
        ),
        Effect::DeleteRecent(id) => exec(
            tx,
            "DELETE FROM catalogue_recent_folders WHERE id = $1",
            &[&big("recent id", *id)?],
        ),
        Effect::PutRecent(r) => exec(
            tx,
            "INSERT INTO catalogue_recent_folders (id, path) VALUES ($1, $2)",
            &[&big("recent id", r.id)?, &r.path],
        ),
        Effect::PutDeleted(id, rev) => exec(
            tx,
            "INSERT INTO catalogue_deleted (session_id, revision) VALUES ($1, $2)
             ON CONFLICT (session_id) DO UPDATE SET revision = EXCLUDED.revision",
            &[id, &big("deletion revision", *rev)?],
        ),
        Effect::ForgetDeleted(id) => exec(
            tx,
            "DELETE FROM catalogue_deleted WHERE session_id = $1",
            &[id],
        ),
        session => apply_session(tx, session),
    }
}

/// Applies one effect on a session's rows (the registration and its side
/// rows); any other effect is [`apply`]'s.
fn apply_session(tx: &mut Tx<'_>, e: &Effect) -> Res {
    match e {
        Effect::DeleteSession(id) => {
            for t in SIDE_TABLES {
                side_mark(tx, t, id, false)?;
            }
            exec(
                tx,
                "DELETE FROM catalogue_sessions WHERE session_id = $1",
                &[id],
            )
        }
        Effect::PutRegistration {
            id,
            creation,
            created_at_ms,
            state,
        } => put_registration(tx, id, creation, *created_at_ms, *state),
        Effect::SetName(id, v) => {
            side_value(tx, "catalogue_session_names", "name", id, v.as_deref())
        }
        Effect::SetVisibility(id, v) => side_mark(
            tx,
            "catalogue_session_archives",
            id,
            *v == Visibility::Archived,
        ),
        Effect::SetSubtitle(id, v) => side_value(
            tx,
            "catalogue_session_subtitles",
            "subtitle",
            id,
            v.as_deref(),
        ),
        Effect::SetCustody(id, c) => match (c.state_word(), c.row()) {
            (Some(word), Some((op, peer))) => exec(
                tx,
                "INSERT INTO catalogue_session_moves (session_id, op, peer, state)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT (session_id) DO UPDATE SET op = EXCLUDED.op,
                     peer = EXCLUDED.peer, state = EXCLUDED.state",
                &[id, &op.as_str(), &peer.as_str(), &word],
            ),
            _ => side_mark(tx, "catalogue_session_moves", id, false),
        },
        Effect::SetDeleting(id, on) => side_mark(tx, "catalogue_session_deletions", id, *on),
        _ => Ok(()),
    }
}

/// Inserts or replaces a session's registration row.
fn put_registration(
    tx: &mut Tx<'_>,
    id: &str,
    c: &Creation,
    created_at_ms: Millis,
    state: InitState,
) -> Res {
    let s = |o: &Option<String>| o.clone().unwrap_or_default();
    let state = match state {
        InitState::Reserved => "reserved",
        InitState::Saved => "saved",
    };
    exec(
        tx,
        "INSERT INTO catalogue_sessions (session_id, creation_key, name, workspace, created_at_ms,
                                                 state, profile, model, executor, pool)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
                 ON CONFLICT (session_id) DO UPDATE SET creation_key = EXCLUDED.creation_key,
                     name = EXCLUDED.name, workspace = EXCLUDED.workspace,
                     created_at_ms = EXCLUDED.created_at_ms, state = EXCLUDED.state,
                     profile = EXCLUDED.profile, model = EXCLUDED.model,
                     executor = EXCLUDED.executor, pool = EXCLUDED.pool",
        &[
            &id,
            &c.creation_key,
            &c.name,
            &c.workspace,
            &big("created_at_ms", created_at_ms)?,
            &state,
            &s(&c.profile),
            &s(&c.model),
            &s(&c.executor),
            &s(&c.pool),
        ],
    )
}

/// Applies one access effect.
pub(crate) fn apply_access(tx: &mut Tx<'_>, e: &AccessEffect) -> Res {
    match e {
        AccessEffect::SetRevision(r) => exec(
            tx,
            "UPDATE catalogue_head SET revision = $1 WHERE singleton = 1",
            &[&big("revision", *r)?],
        ),
        AccessEffect::DeleteMembership { principal, session } => exec(
            tx,
            "DELETE FROM access_memberships WHERE principal_id = $1 AND session_id = $2",
            &[principal, session],
        ),
        AccessEffect::DeleteClaim(k) => exec(
            tx,
            "DELETE FROM access_claims WHERE claim = $1",
            &[&k.sha().to_hex()],
        ),
        AccessEffect::DeleteCredential(k) => exec(
            tx,
            "DELETE FROM access_credentials WHERE digest = $1",
            &[&k.to_hex()],
        ),
        AccessEffect::DeletePrincipal(k) => exec(
            tx,
            "DELETE FROM access_principals WHERE principal_id = $1",
            &[k],
        ),
        AccessEffect::PutPrincipal(id, p) => exec(
            tx,
            "INSERT INTO access_principals (principal_id, kind, name, created_at_ms)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (principal_id) DO UPDATE SET kind = EXCLUDED.kind,
                 name = EXCLUDED.name, created_at_ms = EXCLUDED.created_at_ms",
            &[
                id,
                &p.kind.as_str(),
                &p.name,
                &big("principal created_at_ms", p.created_at_ms)?,
            ],
        ),
        AccessEffect::PutCredential(sha, c) => put_credential(tx, sha, c),
        AccessEffect::PutClaim(claim, c) => put_claim(tx, claim, c),
        AccessEffect::PutMembership {
            principal,
            session,
            role,
        } => exec(
            tx,
            "INSERT INTO access_memberships (principal_id, session_id, role)
             VALUES ($1, $2, $3)
             ON CONFLICT (principal_id, session_id) DO UPDATE SET role = EXCLUDED.role",
            &[principal, session, &role.as_str()],
        ),
    }
}

fn put_credential(tx: &mut Tx<'_>, sha: &Sha, c: &CredentialRow) -> Res {
    exec(
        tx,
        "INSERT INTO access_credentials (digest, kind, principal_id, state, issued_at_ms,
         claimed_at_ms, last_resumed_ms, expires_at_ms, issued_by)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
     ON CONFLICT (digest) DO UPDATE SET kind = EXCLUDED.kind,
         principal_id = EXCLUDED.principal_id, state = EXCLUDED.state,
         issued_at_ms = EXCLUDED.issued_at_ms, claimed_at_ms = EXCLUDED.claimed_at_ms,
         last_resumed_ms = EXCLUDED.last_resumed_ms, expires_at_ms = EXCLUDED.expires_at_ms,
         issued_by = EXCLUDED.issued_by",
        &[
            &sha.to_hex(),
            &c.kind.as_str(),
            &c.principal,
            &c.state.as_str(),
            &big("credential issued_at_ms", c.issued_at_ms)?,
            &opt_big("credential claimed_at_ms", c.claimed_at_ms)?,
            &opt_big("credential last_resumed_ms", c.last_resumed_ms)?,
            &opt_big("credential expires_at_ms", c.expires_at_ms)?,
            &c.issued_by,
        ],
    )
}

fn put_claim(tx: &mut Tx<'_>, claim: &ClaimDigest, c: &ClaimRow) -> Res {
    let (word, bound_digest, bound_kind, at) = match &c.state {
        ClaimState::Open => ("open", None, None, None),
        ClaimState::Void => ("void", None, None, None),
        ClaimState::Claimed { digest, at_ms } => (
            "claimed",
            Some(digest.sha().to_hex()),
            Some(digest.kind().as_str()),
            Some(*at_ms),
        ),
    };
    exec(
        tx,
        "INSERT INTO access_claims (claim, principal_id, expires_at_ms, state, bound_digest,
             bound_kind, claimed_at_ms)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (claim) DO UPDATE SET principal_id = EXCLUDED.principal_id,
             expires_at_ms = EXCLUDED.expires_at_ms, state = EXCLUDED.state,
             bound_digest = EXCLUDED.bound_digest, bound_kind = EXCLUDED.bound_kind,
             claimed_at_ms = EXCLUDED.claimed_at_ms",
        &[
            &claim.sha().to_hex(),
            &c.principal,
            &big("claim expires_at_ms", c.expires_at_ms)?,
            &word,
            &bound_digest,
            &bound_kind,
            &opt_big("claim claimed_at_ms", at)?,
        ],
    )
}
