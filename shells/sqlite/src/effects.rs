//! The catalogue's and the access plane's effects as SQLite statements: one
//! statement per [`Effect`] (a session's removal: one per side table, then
//! its row; its memberships cascade). The order, the diff and every rule
//! are core's; this module only names the tables.

use custos_core::catalogue::access::effect::Effect as AccessEffect;
use custos_core::catalogue::access::{ClaimDigest, ClaimRow, ClaimState, CredentialRow, Sha256};
use custos_core::catalogue::{Effect, InitState, StoredSession, Visibility};
use rusqlite::{params, ToSql, Transaction};

use crate::codec::u64_to_sql;

fn exec(tx: &Transaction<'_>, sql: &str, args: &[&dyn ToSql]) -> rusqlite::Result<()> {
    tx.prepare_cached(sql)?.execute(args)?;
    Ok(())
}

fn opt_i64(v: Option<u64>) -> Option<i64> {
    v.map(u64_to_sql)
}

/// Sets (`Some`) or removes (`None`) a session's row in a side table with
/// one value column.
fn side_value(
    tx: &Transaction<'_>,
    table: &str,
    column: &str,
    id: &str,
    v: Option<&str>,
) -> rusqlite::Result<()> {
    match v {
        Some(v) => exec(
            tx,
            &format!("INSERT OR REPLACE INTO {table} (session_id, {column}) VALUES (?1, ?2)"),
            params![id, v],
        ),
        None => exec(
            tx,
            &format!("DELETE FROM {table} WHERE session_id = ?1"),
            params![id],
        ),
    }
}

/// Sets or removes a session's row in a marker table (no value column).
fn side_mark(tx: &Transaction<'_>, table: &str, id: &str, on: bool) -> rusqlite::Result<()> {
    let sql = if on {
        format!("INSERT OR IGNORE INTO {table} (session_id) VALUES (?1)")
    } else {
        format!("DELETE FROM {table} WHERE session_id = ?1")
    };
    exec(tx, &sql, params![id])
}

/// Applies one catalogue effect.
pub(crate) fn apply(tx: &Transaction<'_>, e: &Effect) -> rusqlite::Result<()> {
    match e {
        Effect::SetRevision(r) => exec(
            tx,
            "UPDATE catalogue_meta SET revision = ?1 WHERE singleton = 1",
            params![u64_to_sql(*r)],
        ),
        Effect::SetRecentSeq(q) => exec(
            tx,
            "UPDATE catalogue_meta SET recent_seq = ?1 WHERE singleton = 1",
            params![u64_to_sql(*q)],
        ),
        Effect::Access(a) => apply_access(tx, a),
        Effect::DeleteDefault(ws) => exec(
            tx,
            "DELETE FROM catalogue_workspace_defaults WHERE workspace = ?1",
            params![ws],
        ),
        Effect::DeleteDelegate(sp, pa) => exec(
            tx,
            "DELETE FROM catalogue_delegate_sessions WHERE spawner = ?1 AND parent_session = ?2",
            params![sp, pa],
        ),
        Effect::PutDefault { workspace, session } => exec(
            tx,
            "INSERT OR REPLACE INTO catalogue_workspace_defaults (workspace, session_id) VALUES (?1, ?2)",
            params![workspace, session],
        ),
        Effect::PutDelegate {
            spawner,
            parent_session,
            row,
        } => exec(
            tx,
            "INSERT OR REPLACE INTO catalogue_delegate_sessions (spawner, parent_session, session_id, last_contact_ms)
             VALUES (?1, ?2, ?3, ?4)",
            params![spawner, parent_session, row.session_id, u64_to_sql(row.last_contact_ms)],
        ),
        Effect::DeleteRecent(id) => exec(
            tx,
            "DELETE FROM catalogue_recent_folders WHERE id = ?1",
            params![u64_to_sql(*id)],
        ),
        Effect::PutRecent(r) => exec(
            tx,
            "INSERT INTO catalogue_recent_folders (id, path) VALUES (?1, ?2)",
            params![u64_to_sql(r.id), r.path],
        ),
        Effect::PutDeleted(id, rev) => exec(
            tx,
            "INSERT OR REPLACE INTO catalogue_deleted (session_id, revision) VALUES (?1, ?2)",
            params![id, u64_to_sql(*rev)],
        ),
        Effect::ForgetDeleted(id) => exec(
            tx,
            "DELETE FROM catalogue_deleted WHERE session_id = ?1",
            params![id],
        ),
        session => apply_session(tx, session),
    }
}

/// Applies one effect on a session's rows (the registration and its side
/// rows); any other effect is [`apply`]'s.
fn apply_session(tx: &Transaction<'_>, e: &Effect) -> rusqlite::Result<()> {
    match e {
        Effect::DeleteSession(id) => {
            for t in StoredSession::SIDE_TABLES {
                side_mark(tx, t, id, false)?;
            }
            exec(
                tx,
                "DELETE FROM catalogue_sessions WHERE session_id = ?1",
                params![id],
            )
        }
        Effect::PutRegistration {
            id,
            creation: c,
            created_at_ms,
            state,
        } => {
            let s = |o: &Option<String>| o.clone().unwrap_or_default();
            exec(
                tx,
                "INSERT INTO catalogue_sessions (session_id, creation_key, name, workspace, created_at_ms, state, profile, model, executor, pool)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
                 ON CONFLICT (session_id) DO UPDATE SET creation_key = ?2, name = ?3, workspace = ?4,
                     created_at_ms = ?5, state = ?6, profile = ?7, model = ?8, executor = ?9, pool = ?10",
                params![
                    id,
                    c.creation_key,
                    c.name,
                    c.workspace,
                    u64_to_sql(*created_at_ms),
                    match state {
                        InitState::Reserved => "reserved",
                        InitState::Saved => "saved",
                    },
                    s(&c.profile),
                    s(&c.model),
                    s(&c.executor),
                    s(&c.pool)
                ],
            )
        }
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
                "INSERT OR REPLACE INTO catalogue_session_moves (session_id, op, peer, state) VALUES (?1, ?2, ?3, ?4)",
                params![id, op.as_str(), peer.as_str(), word],
            ),
            _ => side_mark(tx, "catalogue_session_moves", id, false),
        },
        Effect::SetDeleting(id, on) => side_mark(tx, "catalogue_session_deletions", id, *on),
        _ => Ok(()),
    }
}

/// Applies one access effect.
pub(crate) fn apply_access(tx: &Transaction<'_>, e: &AccessEffect) -> rusqlite::Result<()> {
    match e {
        AccessEffect::SetRevision(r) => exec(
            tx,
            "UPDATE catalogue_meta SET revision = ?1 WHERE singleton = 1",
            params![u64_to_sql(*r)],
        ),
        AccessEffect::DeleteMembership { principal, session } => exec(
            tx,
            "DELETE FROM access_memberships WHERE principal_id = ?1 AND session_id = ?2",
            params![principal, session],
        ),
        AccessEffect::DeleteClaim(k) => exec(
            tx,
            "DELETE FROM access_claims WHERE claim = ?1",
            params![k.sha().hex()],
        ),
        AccessEffect::DeleteCredential(k) => exec(
            tx,
            "DELETE FROM access_credentials WHERE digest = ?1",
            params![k.hex()],
        ),
        AccessEffect::DeletePrincipal(k) => exec(
            tx,
            "DELETE FROM access_principals WHERE principal_id = ?1",
            params![k],
        ),
        AccessEffect::PutPrincipal(id, p) => exec(
            tx,
            "INSERT INTO access_principals (principal_id, kind, name, created_at_ms) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (principal_id) DO UPDATE SET kind = ?2, name = ?3, created_at_ms = ?4",
            params![id, p.kind.as_str(), p.name, u64_to_sql(p.created_at_ms)],
        ),
        AccessEffect::PutCredential(sha, c) => put_credential(tx, sha, c),
        AccessEffect::PutClaim(claim, c) => put_claim(tx, claim, c),
        AccessEffect::PutMembership {
            principal,
            session,
            role,
        } => exec(
            tx,
            "INSERT INTO access_memberships (principal_id, session_id, role) VALUES (?1, ?2, ?3)
             ON CONFLICT (principal_id, session_id) DO UPDATE SET role = ?3",
            params![principal, session, role.as_str()],
        ),
    }
}

fn put_credential(tx: &Transaction<'_>, sha: &Sha256, c: &CredentialRow) -> rusqlite::Result<()> {
    exec(
        tx,
        "INSERT INTO access_credentials (digest, kind, principal_id, state, issued_at_ms,
         claimed_at_ms, last_resumed_ms, expires_at_ms, issued_by)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
     ON CONFLICT (digest) DO UPDATE SET kind = ?2, principal_id = ?3, state = ?4,
         issued_at_ms = ?5, claimed_at_ms = ?6, last_resumed_ms = ?7, expires_at_ms = ?8,
         issued_by = ?9",
        params![
            sha.hex(),
            c.kind.as_str(),
            c.principal,
            c.state.as_str(),
            u64_to_sql(c.issued_at_ms),
            opt_i64(c.claimed_at_ms),
            opt_i64(c.last_resumed_ms),
            opt_i64(c.expires_at_ms),
            c.issued_by
        ],
    )
}

fn put_claim(tx: &Transaction<'_>, claim: &ClaimDigest, c: &ClaimRow) -> rusqlite::Result<()> {
    let (state, digest, kind, at) = match &c.state {
        ClaimState::Open => ("open", None, None, None),
        ClaimState::Void => ("void", None, None, None),
        ClaimState::Claimed { digest, at_ms } => (
            "claimed",
            Some(digest.sha().hex()),
            Some(digest.kind().as_str()),
            Some(u64_to_sql(*at_ms)),
        ),
    };
    exec(
        tx,
        "INSERT INTO access_claims (claim, principal_id, expires_at_ms, state, bound_digest,
             bound_kind, claimed_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (claim) DO UPDATE SET principal_id = ?2, expires_at_ms = ?3, state = ?4,
             bound_digest = ?5, bound_kind = ?6, claimed_at_ms = ?7",
        params![
            claim.sha().hex(),
            c.principal,
            u64_to_sql(c.expires_at_ms),
            state,
            digest,
            kind,
            at
        ],
    )
}
