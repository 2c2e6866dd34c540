//! The catalogue's and the access plane's row writes: what a decision hands a
//! backend to apply, in order, inside the deciding transaction.
//!
//! A decision ([`super::decide`], [`super::access::decide`]) is taken over
//! the rows a request loads; [`effects`] names every row it changes, one
//! [`Effect`] per row (or per side row of a session), in the order a backend
//! with foreign keys and partial unique indexes can apply them one at a time:
//!
//! 1. the meta row's revision and recent-folder sequence;
//! 2. removals, children before parents: the access plane's
//!    ([`access::effect::removals`]), workspace defaults, delegates, then
//!    sessions (a session's removal takes its side rows and its memberships
//!    with it);
//! 3. writes, parents before children: the access plane's
//!    ([`access::effect::writes`]), sessions (the registration row, then
//!    each side row that differs), workspace defaults, delegates;
//! 4. recent folders: retired ones removed, then new ones inserted;
//! 5. remembered deletions: forgotten ones removed, then new ones put.
//!
//! A backend therefore keeps no diff and no ordering rule of its own: it
//! maps each effect to one statement. The memory backend applies them to its
//! maps with [`apply`], and a property test holds that applying a decision's
//! effects to the state it was taken over gives the state it decided.

use serde::{Deserialize, Serialize};

use super::access::{self, effect as access_effect};
use super::custody::Custody;
use super::{CatalogueState, Creation, DelegateRow, InitState, Recent, SessionRow, Visibility};
use crate::Millis;

/// One row write of the catalogue or the access plane.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Effect {
    /// Set the catalogue revision.
    SetRevision(u64),
    /// Set the highest recent-folder sequence ever issued.
    SetRecentSeq(u64),
    /// A row of the access plane.
    Access(access_effect::Effect),
    /// Remove a workspace's default.
    DeleteDefault(String),
    /// Remove the delegate row of `(spawner, parent_session)`.
    DeleteDelegate(String, String),
    /// Remove a session: its registration, every side row and every
    /// membership naming it.
    DeleteSession(String),
    /// Insert or replace a session's registration row (its side rows
    /// untouched; a new session has none until the effects that follow).
    PutRegistration {
        /// The session.
        id: String,
        /// The creation row.
        creation: Creation,
        /// When it was reserved.
        created_at_ms: Millis,
        /// File initialization state.
        state: InitState,
    },
    /// Set (`Some`) or remove (`None`) a session's display-name override.
    SetName(String, Option<String>),
    /// Mark (`Archived`) or unmark (`Active`) a session archived.
    SetVisibility(String, Visibility),
    /// Set or remove a session's subtitle.
    SetSubtitle(String, Option<String>),
    /// Set a session's move row (`Resident`: remove it).
    SetCustody(String, Custody),
    /// Set or clear a session's deletion mark.
    SetDeleting(String, bool),
    /// Insert or replace a workspace's default session.
    PutDefault {
        /// The workspace.
        workspace: String,
        /// Its default session.
        session: String,
    },
    /// Insert or replace the delegate row of `(spawner, parent_session)`.
    /// A session is the delegate of one pair at most: a decision never puts
    /// a session another pair's row names (`ClaimDelegate` refuses it), so
    /// a backend may keep `session_id` unique.
    PutDelegate {
        /// The spawner.
        spawner: String,
        /// The spawner's session.
        parent_session: String,
        /// The row.
        row: DelegateRow,
    },
    /// Remove a recent folder.
    DeleteRecent(u64),
    /// Insert a recent folder.
    PutRecent(Recent),
    /// Remember a deleted session with the revision its deletion made.
    PutDeleted(String, u64),
    /// Forget a remembered deletion.
    ForgetDeleted(String),
}

/// The effects that turn `before` (the rows a request loaded) into `next`
/// (the state it decided), in the order a backend applies them (the module
/// docs give the order and why).
pub fn effects(before: &CatalogueState, next: &CatalogueState) -> Vec<Effect> {
    let mut out = Vec::new();
    if before.revision != next.revision {
        out.push(Effect::SetRevision(next.revision));
    }
    if before.recent_seq != next.recent_seq {
        out.push(Effect::SetRecentSeq(next.recent_seq));
    }
    removals(before, next, &mut out);
    access_writes(before, next, &mut out);
    for (id, row) in &next.sessions {
        let prev = before.sessions.get(id);
        if prev != Some(row) {
            session_writes(id, prev, row, &mut out);
        }
    }
    for (ws, id) in &next.workspace_defaults {
        if before.workspace_defaults.get(ws) != Some(id) {
            out.push(Effect::PutDefault {
                workspace: ws.clone(),
                session: id.clone(),
            });
        }
    }
    for ((sp, pa), d) in &next.delegates {
        if before.delegates.get(&(sp.clone(), pa.clone())) != Some(d) {
            out.push(Effect::PutDelegate {
                spawner: sp.clone(),
                parent_session: pa.clone(),
                row: d.clone(),
            });
        }
    }
    for r in before.recent.difference(&next.recent) {
        out.push(Effect::DeleteRecent(r.id));
    }
    for r in next.recent.difference(&before.recent) {
        out.push(Effect::PutRecent(r.clone()));
    }
    for id in before.deleted.keys() {
        if !next.deleted.contains_key(id) {
            out.push(Effect::ForgetDeleted(id.clone()));
        }
    }
    for (id, rev) in &next.deleted {
        if before.deleted.get(id) != Some(rev) {
            out.push(Effect::PutDeleted(id.clone(), *rev));
        }
    }
    out
}

fn removals(before: &CatalogueState, next: &CatalogueState, out: &mut Vec<Effect>) {
    let mut a = Vec::new();
    access_effect::removals(before, next, &mut a);
    out.extend(a.into_iter().map(Effect::Access));
    for ws in before.workspace_defaults.keys() {
        if !next.workspace_defaults.contains_key(ws) {
            out.push(Effect::DeleteDefault(ws.clone()));
        }
    }
    for (sp, pa) in before.delegates.keys() {
        if !next.delegates.contains_key(&(sp.clone(), pa.clone())) {
            out.push(Effect::DeleteDelegate(sp.clone(), pa.clone()));
        }
    }
    for id in before.sessions.keys() {
        if !next.sessions.contains_key(id) {
            out.push(Effect::DeleteSession(id.clone()));
        }
    }
}

fn access_writes(before: &CatalogueState, next: &CatalogueState, out: &mut Vec<Effect>) {
    let mut a = Vec::new();
    access_effect::writes(before, next, &mut a);
    out.extend(a.into_iter().map(Effect::Access));
}

/// A session's writes: the registration row and each side row that differs
/// from `prev` (every one for a new session).
fn session_writes(id: &str, prev: Option<&SessionRow>, r: &SessionRow, out: &mut Vec<Effect>) {
    let id = || id.to_owned();
    if prev.map(|b| (&b.creation, b.created_at_ms, b.state))
        != Some((&r.creation, r.created_at_ms, r.state))
    {
        out.push(Effect::PutRegistration {
            id: id(),
            creation: r.creation.clone(),
            created_at_ms: r.created_at_ms,
            state: r.state,
        });
    }
    if prev.map(|b| &b.name_override) != Some(&r.name_override) {
        out.push(Effect::SetName(id(), r.name_override.clone()));
    }
    if prev.map(|b| b.visibility) != Some(r.visibility) {
        out.push(Effect::SetVisibility(id(), r.visibility));
    }
    if prev.map(|b| &b.subtitle) != Some(&r.subtitle) {
        out.push(Effect::SetSubtitle(id(), r.subtitle.clone()));
    }
    if prev.map(|b| &b.custody) != Some(&r.custody) {
        out.push(Effect::SetCustody(id(), r.custody.clone()));
    }
    if prev.map(|b| b.deleting) != Some(r.deleting) {
        out.push(Effect::SetDeleting(id(), r.deleting));
    }
}

/// Applies one effect to a state, as a backend applies it to its rows: the
/// memory backend's writer, and the oracle the SQL backends are compared
/// with. A side-row effect on an absent session does nothing (a foreign key
/// would refuse it; [`effects`] never emits one).
pub fn apply(s: &mut CatalogueState, e: &Effect) {
    match e {
        Effect::SetRevision(r) => s.revision = *r,
        Effect::SetRecentSeq(q) => s.recent_seq = *q,
        Effect::Access(a) => access_effect::apply(s, a),
        Effect::DeleteDefault(ws) => {
            s.workspace_defaults.remove(ws);
        }
        Effect::DeleteDelegate(sp, pa) => {
            s.delegates.remove(&(sp.clone(), pa.clone()));
        }
        Effect::DeleteSession(id) => {
            s.sessions.remove(id);
            access::forget_session(&mut s.access, id);
        }
        Effect::PutRegistration {
            id,
            creation,
            created_at_ms,
            state,
        } => put_registration(s, id, creation, *created_at_ms, *state),
        Effect::PutDefault { workspace, session } => {
            s.workspace_defaults
                .insert(workspace.clone(), session.clone());
        }
        Effect::PutDelegate {
            spawner,
            parent_session,
            row,
        } => {
            s.delegates
                .insert((spawner.clone(), parent_session.clone()), row.clone());
        }
        Effect::DeleteRecent(id) => s.recent.retain(|r| r.id != *id),
        Effect::PutRecent(r) => {
            s.recent.insert(r.clone());
        }
        Effect::PutDeleted(id, rev) => {
            s.deleted.insert(id.clone(), *rev);
        }
        Effect::ForgetDeleted(id) => {
            s.deleted.remove(id);
        }
        side => apply_side(s, side),
    }
}

fn put_registration(
    s: &mut CatalogueState,
    id: &str,
    creation: &Creation,
    created_at_ms: Millis,
    state: InitState,
) {
    match s.sessions.get_mut(id) {
        Some(row) => {
            row.creation = creation.clone();
            row.created_at_ms = created_at_ms;
            row.state = state;
        }
        None => {
            s.sessions.insert(
                id.to_owned(),
                SessionRow {
                    creation: creation.clone(),
                    created_at_ms,
                    state,
                    name_override: None,
                    visibility: Visibility::Active,
                    subtitle: None,
                    custody: Custody::Resident,
                    deleting: false,
                },
            );
        }
    }
}

fn apply_side(s: &mut CatalogueState, e: &Effect) {
    let id = match e {
        Effect::SetName(id, _)
        | Effect::SetVisibility(id, _)
        | Effect::SetSubtitle(id, _)
        | Effect::SetCustody(id, _)
        | Effect::SetDeleting(id, _) => id,
        _ => return,
    };
    let Some(r) = s.sessions.get_mut(id) else {
        return;
    };
    match e {
        Effect::SetName(_, v) => r.name_override.clone_from(v),
        Effect::SetVisibility(_, v) => r.visibility = *v,
        Effect::SetSubtitle(_, v) => r.subtitle.clone_from(v),
        Effect::SetCustody(_, v) => r.custody = v.clone(),
        Effect::SetDeleting(_, v) => r.deleting = *v,
        _ => {}
    }
}

/// Applies effects in order ([`apply`] each).
pub fn apply_all(s: &mut CatalogueState, effects: &[Effect]) {
    for e in effects {
        apply(s, e);
    }
}
