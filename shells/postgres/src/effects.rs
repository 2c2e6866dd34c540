//! The catalogue's and the access plane's effects as PostgreSQL statements:
//! one statement per [`Effect`] (a session's removal: one per side table,
//! then its row; its memberships cascade), returned in order with owned
//! parameters so the port sends them with the `COMMIT` in one round trip
//! ([`crate::conn::Conn::decide`]). The order, the diff and every rule are
//! core's; this module only names the tables.

use custos_core::catalogue::access::effect::Effect as AccessEffect;
use custos_core::catalogue::access::{ClaimDigest, ClaimRow, ClaimState, CredentialRow, Sha256};
use custos_core::catalogue::{Creation, Effect, InitState, StoredSession, Visibility};
use custos_core::Millis;
use postgres::types::ToSql;

use crate::conn::{Stmt, Want};

/// Why an effect cannot be sent: a number past a `bigint`, `(what,
/// value)`. Nothing was written.
pub(crate) struct EffectError(pub(crate) &'static str, pub(crate) u64);

/// One owned parameter.
type Arg = Box<dyn ToSql + Sync + Send>;

/// An owned parameter.
fn o<T: ToSql + Sync + Send + 'static>(v: T) -> Arg {
    Box::new(v)
}

type Res = Result<Vec<Stmt>, EffectError>;

/// One statement.
fn exec(sql: impl Into<std::borrow::Cow<'static, str>>, args: Vec<Arg>) -> Res {
    Ok(vec![Stmt::new(Want::Count, sql).args(args)])
}

fn big(what: &'static str, v: u64) -> Result<i64, EffectError> {
    i64::try_from(v).map_err(|_| EffectError(what, v))
}

fn opt_big(what: &'static str, v: Option<u64>) -> Result<Option<i64>, EffectError> {
    v.map(|v| big(what, v)).transpose()
}

/// Sets (`Some`) or removes (`None`) a session's row in a side table with
/// one value column.
fn side_value(table: &str, column: &str, id: &str, v: Option<&str>) -> Res {
    match v {
        Some(v) => exec(
            format!(
                "INSERT INTO {table} (session_id, {column}) VALUES ($1, $2)
                 ON CONFLICT (session_id) DO UPDATE SET {column} = EXCLUDED.{column}"
            ),
            vec![o(id.to_owned()), o(v.to_owned())],
        ),
        None => exec(
            format!("DELETE FROM {table} WHERE session_id = $1"),
            vec![o(id.to_owned())],
        ),
    }
}

/// Sets or removes a session's row in a marker table (no value column).
fn side_mark(table: &str, id: &str, on: bool) -> Res {
    let sql = if on {
        format!("INSERT INTO {table} (session_id) VALUES ($1) ON CONFLICT DO NOTHING")
    } else {
        format!("DELETE FROM {table} WHERE session_id = $1")
    };
    exec(sql, vec![o(id.to_owned())])
}

/// The statements of one catalogue effect.
pub(crate) fn apply(e: &Effect) -> Res {
    match e {
        Effect::SetRevision(r) => exec(
            "UPDATE catalogue_head SET revision = $1 WHERE singleton = 1",
            vec![o(big("revision", *r)?)],
        ),
        Effect::SetRecentSeq(q) => exec(
            "UPDATE catalogue_head SET recent_seq = $1 WHERE singleton = 1",
            vec![o(big("recent sequence", *q)?)],
        ),
        Effect::Access(a) => apply_access(a),
        Effect::DeleteDefault(ws) => exec(
            "DELETE FROM catalogue_workspace_defaults WHERE workspace = $1",
            vec![o(ws.clone())],
        ),
        Effect::DeleteDelegate(sp, pa) => exec(
            "DELETE FROM catalogue_delegate_sessions WHERE spawner = $1 AND parent_session = $2",
            vec![o(sp.clone()), o(pa.clone())],
        ),
        Effect::PutDefault { workspace, session } => exec(
            "INSERT INTO catalogue_workspace_defaults (workspace, session_id) VALUES ($1, $2)
             ON CONFLICT (workspace) DO UPDATE SET session_id = EXCLUDED.session_id",
            vec![o(workspace.clone()), o(session.clone())],
        ),
        Effect::PutDelegate {
            spawner,
            parent_session,
            row,
        } => exec(
            "INSERT INTO catalogue_delegate_sessions
                 (spawner, parent_session, session_id, last_contact_ms)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (spawner, parent_session) DO UPDATE SET
                 session_id = EXCLUDED.session_id, last_contact_ms = EXCLUDED.last_contact_ms",
            vec![
                o(spawner.clone()),
                o(parent_session.clone()),
                o(row.session_id.clone()),
                o(big("last_contact_ms", row.last_contact_ms)?),
            ],
        ),
        Effect::DeleteRecent(id) => exec(
            "DELETE FROM catalogue_recent_folders WHERE id = $1",
            vec![o(big("recent id", *id)?)],
        ),
        Effect::PutRecent(r) => exec(
            "INSERT INTO catalogue_recent_folders (id, path) VALUES ($1, $2)",
            vec![o(big("recent id", r.id)?), o(r.path.clone())],
        ),
        Effect::PutDeleted(id, rev) => exec(
            "INSERT INTO catalogue_deleted (session_id, revision) VALUES ($1, $2)
             ON CONFLICT (session_id) DO UPDATE SET revision = EXCLUDED.revision",
            vec![o(id.clone()), o(big("deletion revision", *rev)?)],
        ),
        Effect::ForgetDeleted(id) => exec(
            "DELETE FROM catalogue_deleted WHERE session_id = $1",
            vec![o(id.clone())],
        ),
        session => apply_session(session),
    }
}

/// The statements of one effect on a session's rows (the registration and
/// its side rows); any other effect is [`apply`]'s.
fn apply_session(e: &Effect) -> Res {
    match e {
        Effect::DeleteSession(id) => {
            let mut out = Vec::new();
            for t in StoredSession::SIDE_TABLES {
                out.extend(side_mark(t, id, false)?);
            }
            out.extend(exec(
                "DELETE FROM catalogue_sessions WHERE session_id = $1",
                vec![o(id.clone())],
            )?);
            Ok(out)
        }
        Effect::PutRegistration {
            id,
            creation,
            created_at_ms,
            state,
        } => put_registration(id, creation, *created_at_ms, *state),
        Effect::SetName(id, v) => side_value("catalogue_session_names", "name", id, v.as_deref()),
        Effect::SetVisibility(id, v) => {
            side_mark("catalogue_session_archives", id, *v == Visibility::Archived)
        }
        Effect::SetSubtitle(id, v) => {
            side_value("catalogue_session_subtitles", "subtitle", id, v.as_deref())
        }
        Effect::SetCustody(id, c) => match (c.state_word(), c.row()) {
            (Some(word), Some((op, peer))) => exec(
                "INSERT INTO catalogue_session_moves (session_id, op, peer, state)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT (session_id) DO UPDATE SET op = EXCLUDED.op,
                     peer = EXCLUDED.peer, state = EXCLUDED.state",
                vec![
                    o(id.clone()),
                    o(op.as_str().to_owned()),
                    o(peer.as_str().to_owned()),
                    o(word.to_owned()),
                ],
            ),
            _ => side_mark("catalogue_session_moves", id, false),
        },
        Effect::SetDeleting(id, on) => side_mark("catalogue_session_deletions", id, *on),
        _ => Ok(Vec::new()),
    }
}

/// Inserts or replaces a session's registration row.
fn put_registration(id: &str, c: &Creation, created_at_ms: Millis, state: InitState) -> Res {
    let s = |o: &Option<String>| o.clone().unwrap_or_default();
    let state = match state {
        InitState::Reserved => "reserved",
        InitState::Saved => "saved",
    };
    exec(
        "INSERT INTO catalogue_sessions (session_id, creation_key, name, workspace, created_at_ms,
                                                 state, profile, model, executor, pool)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
                 ON CONFLICT (session_id) DO UPDATE SET creation_key = EXCLUDED.creation_key,
                     name = EXCLUDED.name, workspace = EXCLUDED.workspace,
                     created_at_ms = EXCLUDED.created_at_ms, state = EXCLUDED.state,
                     profile = EXCLUDED.profile, model = EXCLUDED.model,
                     executor = EXCLUDED.executor, pool = EXCLUDED.pool",
        vec![
            o(id.to_owned()),
            o(c.creation_key.clone()),
            o(c.name.clone()),
            o(c.workspace.clone()),
            o(big("created_at_ms", created_at_ms)?),
            o(state.to_owned()),
            o(s(&c.profile)),
            o(s(&c.model)),
            o(s(&c.executor)),
            o(s(&c.pool)),
        ],
    )
}

/// The statements of one access effect.
pub(crate) fn apply_access(e: &AccessEffect) -> Res {
    match e {
        AccessEffect::SetRevision(r) => exec(
            "UPDATE catalogue_head SET revision = $1 WHERE singleton = 1",
            vec![o(big("revision", *r)?)],
        ),
        AccessEffect::DeleteMembership { principal, session } => exec(
            "DELETE FROM access_memberships WHERE principal_id = $1 AND session_id = $2",
            vec![o(principal.clone()), o(session.clone())],
        ),
        AccessEffect::DeleteClaim(k) => exec(
            "DELETE FROM access_claims WHERE claim = $1",
            vec![o(k.sha().hex())],
        ),
        AccessEffect::DeleteCredential(k) => exec(
            "DELETE FROM access_credentials WHERE digest = $1",
            vec![o(k.hex())],
        ),
        AccessEffect::DeletePrincipal(k) => exec(
            "DELETE FROM access_principals WHERE principal_id = $1",
            vec![o(k.clone())],
        ),
        AccessEffect::PutPrincipal(id, p) => exec(
            "INSERT INTO access_principals (principal_id, kind, name, created_at_ms)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (principal_id) DO UPDATE SET kind = EXCLUDED.kind,
                 name = EXCLUDED.name, created_at_ms = EXCLUDED.created_at_ms",
            vec![
                o(id.clone()),
                o(p.kind.as_str().to_owned()),
                o(p.name.clone()),
                o(big("principal created_at_ms", p.created_at_ms)?),
            ],
        ),
        AccessEffect::PutCredential(sha, c) => put_credential(sha, c),
        AccessEffect::PutClaim(claim, c) => put_claim(claim, c),
        AccessEffect::PutMembership {
            principal,
            session,
            role,
        } => exec(
            "INSERT INTO access_memberships (principal_id, session_id, role)
             VALUES ($1, $2, $3)
             ON CONFLICT (principal_id, session_id) DO UPDATE SET role = EXCLUDED.role",
            vec![
                o(principal.clone()),
                o(session.clone()),
                o(role.as_str().to_owned()),
            ],
        ),
    }
}

fn put_credential(sha: &Sha256, c: &CredentialRow) -> Res {
    exec(
        "INSERT INTO access_credentials (digest, kind, principal_id, state, issued_at_ms,
         claimed_at_ms, last_resumed_ms, expires_at_ms, issued_by)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
     ON CONFLICT (digest) DO UPDATE SET kind = EXCLUDED.kind,
         principal_id = EXCLUDED.principal_id, state = EXCLUDED.state,
         issued_at_ms = EXCLUDED.issued_at_ms, claimed_at_ms = EXCLUDED.claimed_at_ms,
         last_resumed_ms = EXCLUDED.last_resumed_ms, expires_at_ms = EXCLUDED.expires_at_ms,
         issued_by = EXCLUDED.issued_by",
        vec![
            o(sha.hex()),
            o(c.kind.as_str().to_owned()),
            o(c.principal.clone()),
            o(c.state.as_str().to_owned()),
            o(big("credential issued_at_ms", c.issued_at_ms)?),
            o(opt_big("credential claimed_at_ms", c.claimed_at_ms)?),
            o(opt_big("credential last_resumed_ms", c.last_resumed_ms)?),
            o(opt_big("credential expires_at_ms", c.expires_at_ms)?),
            o(c.issued_by.clone()),
        ],
    )
}

fn put_claim(claim: &ClaimDigest, c: &ClaimRow) -> Res {
    let (word, bound_digest, bound_kind, at) = match &c.state {
        ClaimState::Open => ("open", None, None, None),
        ClaimState::Void => ("void", None, None, None),
        ClaimState::Claimed { digest, at_ms } => (
            "claimed",
            Some(digest.sha().hex()),
            Some(digest.kind().as_str().to_owned()),
            Some(*at_ms),
        ),
    };
    exec(
        "INSERT INTO access_claims (claim, principal_id, expires_at_ms, state, bound_digest,
             bound_kind, claimed_at_ms)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (claim) DO UPDATE SET principal_id = EXCLUDED.principal_id,
             expires_at_ms = EXCLUDED.expires_at_ms, state = EXCLUDED.state,
             bound_digest = EXCLUDED.bound_digest, bound_kind = EXCLUDED.bound_kind,
             claimed_at_ms = EXCLUDED.claimed_at_ms",
        vec![
            o(claim.sha().hex()),
            o(c.principal.clone()),
            o(big("claim expires_at_ms", c.expires_at_ms)?),
            o(word.to_owned()),
            o(bound_digest),
            o(bound_kind),
            o(opt_big("claim claimed_at_ms", at)?),
        ],
    )
}
