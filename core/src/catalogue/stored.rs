//! Rows as a backend reads them back, checked here once.
//!
//! A backend loads the part of a [`CatalogueState`] a request needs (its
//! [`footprint`](super::footprint)) by reading its own rows and handing each
//! one, as plain columns, to one of these methods. Every rule a stored row
//! must keep is checked here — the grammar of each identifier, one delegate
//! session per pair and one pair per delegate session — so a backend
//! decodes columns (their types and byte bounds) and nothing else. (A
//! workspace has one default by the state's shape: a later row for the
//! same workspace replaces the earlier.) A row that breaks a rule is
//! [`CatalogueError::Invalid`] naming the row, and the load it was part of is refused.

use super::{
    is_delegate_pair, is_local_workspace, is_session_id, CatalogueError, CatalogueState,
    DelegateRow, Recent, StoredSession,
};
use crate::columns::{Cells, ColumnError, Columns, MAX_WORD_LEN};
use crate::Millis;
use std::collections::BTreeMap;

/// A delegate row as stored: `(spawner, parent)` names the pair.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredDelegate {
    /// The orchestrator that spawned the delegate.
    pub spawner: String,
    /// The session it was spawned for.
    pub parent: String,
    /// The delegate session.
    pub session_id: String,
    /// The last claim's clock reading.
    pub last_contact_ms: Millis,
}

/// The bound on a stored subtitle's bytes: a subtitle is at most
/// [`SUBTITLE_LIMIT`](super::SUBTITLE_LIMIT) characters of up to four
/// bytes each.
const SUBTITLE_BYTES: usize = super::SUBTITLE_LIMIT * 4;

impl StoredSession {
    /// The SQL that selects session rows with their side rows in the order
    /// [`StoredSession::read`] reads them, over the session tables both SQL
    /// backends create (`catalogue_sessions` and its `_names`, `_archives`,
    /// `_subtitles`, `_moves` and `_deletions`); a backend appends its
    /// `WHERE`/`ORDER BY` over the alias `s`.
    pub const SELECT: &'static str = "
SELECT s.session_id, s.creation_key, s.name, s.workspace, s.profile, s.model, s.executor, s.pool,
       s.created_at_ms, s.state, n.name, a.session_id IS NOT NULL, t.subtitle,
       m.state, m.op, m.peer, d.session_id IS NOT NULL
FROM catalogue_sessions s
LEFT JOIN catalogue_session_names n ON n.session_id = s.session_id
LEFT JOIN catalogue_session_archives a ON a.session_id = s.session_id
LEFT JOIN catalogue_session_subtitles t ON t.session_id = s.session_id
LEFT JOIN catalogue_session_moves m ON m.session_id = s.session_id
LEFT JOIN catalogue_session_deletions d ON d.session_id = s.session_id
";

    /// A session's side tables in the SQL backends, each keyed by
    /// `session_id` (the ones [`StoredSession::SELECT`] joins).
    pub const SIDE_TABLES: [&'static str; 5] = [
        "catalogue_session_names",
        "catalogue_session_archives",
        "catalogue_session_subtitles",
        "catalogue_session_moves",
        "catalogue_session_deletions",
    ];

    /// A session row and its side rows from `c`, in the order
    /// `session_id, creation_key, name, workspace, profile, model,
    /// executor, pool, created_at_ms, state, name override, archived,
    /// subtitle, move state, move op, move peer, deleting`, every text
    /// bounded before it is copied; `c` names the row by its id. A
    /// subtitle that breaks its rule reads as none, one longer than any
    /// subtitle can be not even copied.
    pub fn read<C: Columns>(c: &mut Cells<C>) -> Result<Self, ColumnError> {
        use super::custody::{MOVE_OP_LIMIT, ORCHESTRATOR_NAME_LIMIT};
        use super::{
            CREATION_KEY_LIMIT, DISPLAY_NAME_LIMIT, LOCAL_WORKSPACE_LIMIT, MODEL_KEY_LIMIT,
            PROFILE_NAME_LIMIT, SESSION_ID_LIMIT,
        };
        let id = c.text(0, "session_id", SESSION_ID_LIMIT)?;
        c.at(id.as_str());
        let move_row = match c.opt_text(13, "move state", MAX_WORD_LEN)? {
            Some(s) => Some((
                s,
                c.text(14, "move op", MOVE_OP_LIMIT)?,
                c.text(15, "move peer", ORCHESTRATOR_NAME_LIMIT)?,
            )),
            None => None,
        };
        Ok(StoredSession {
            creation_key: c.text(1, "creation_key", CREATION_KEY_LIMIT)?,
            name: c.text(2, "name", DISPLAY_NAME_LIMIT)?,
            workspace: c.text(3, "workspace", LOCAL_WORKSPACE_LIMIT)?,
            profile: c.text(4, "profile", PROFILE_NAME_LIMIT)?,
            model: c.text(5, "model", MODEL_KEY_LIMIT)?,
            executor: c.text(6, "executor", PROFILE_NAME_LIMIT)?,
            pool: c.text(7, "pool", PROFILE_NAME_LIMIT)?,
            created_at_ms: c.unsigned(8, "created_at_ms")?,
            state: c.text(9, "state", MAX_WORD_LEN)?,
            name_override: c.opt_text(10, "name override", DISPLAY_NAME_LIMIT)?,
            archived: c.flag(11, "archived")?,
            subtitle: c.lenient_text(12, SUBTITLE_BYTES),
            move_row,
            deleting: c.flag(16, "deleting")?,
            id,
        })
    }
}

impl StoredDelegate {
    /// A delegate row from `c`, in the order `spawner, parent_session,
    /// session_id, last_contact_ms`; `c` names the row by its pair.
    pub fn read<C: Columns>(c: &mut Cells<C>) -> Result<Self, ColumnError> {
        use super::custody::ORCHESTRATOR_NAME_LIMIT;
        use super::SESSION_ID_LIMIT;
        let spawner = c.text(0, "spawner", ORCHESTRATOR_NAME_LIMIT)?;
        c.at(spawner.as_str());
        let parent = c.text(1, "parent_session", SESSION_ID_LIMIT)?;
        c.at(format!("({spawner}, {parent})"));
        Ok(StoredDelegate {
            session_id: c.text(2, "session_id", SESSION_ID_LIMIT)?,
            last_contact_ms: c.unsigned(3, "last_contact_ms")?,
            spawner,
            parent,
        })
    }
}

/// A workspace-default row from `c`, in the order `workspace,
/// session_id`: the workspace and the session it names.
pub fn read_default<C: Columns>(c: &mut Cells<C>) -> Result<(String, String), ColumnError> {
    let workspace = c.text(0, "workspace", super::LOCAL_WORKSPACE_LIMIT)?;
    c.at(workspace.as_str());
    let session_id = c.text(1, "session_id", super::SESSION_ID_LIMIT)?;
    Ok((workspace, session_id))
}

/// A recent-folder row from `c`, in the order `id, path`.
pub fn read_recent<C: Columns>(c: &mut Cells<C>) -> Result<(u64, String), ColumnError> {
    let id = c.unsigned(0, "id")?;
    c.at(id.to_string());
    Ok((id, c.text(1, "path", super::LOCAL_WORKSPACE_LIMIT)?))
}

/// A remembered deletion from `c`, in the order `session_id, revision`.
pub fn read_deleted<C: Columns>(c: &mut Cells<C>) -> Result<(String, u64), ColumnError> {
    let id = c.text(0, "session_id", super::SESSION_ID_LIMIT)?;
    c.at(id.as_str());
    Ok((id, c.unsigned(1, "revision")?))
}

fn bad(what: &'static str, detail: String) -> CatalogueError {
    CatalogueError::Invalid { what, detail }
}

impl CatalogueState {
    /// Adds a stored session ([`StoredSession::decode`] checks it).
    pub fn put_stored_session(&mut self, stored: StoredSession) -> Result<(), CatalogueError> {
        let (id, row) = stored.decode()?;
        self.sessions.insert(id, row);
        Ok(())
    }

    /// Adds delegate rows: each pair's grammar and its session id's, and —
    /// over these rows and the delegates already loaded — one row per pair
    /// (a repeated identical row, from two overlapping reads, is the same
    /// row) and one pair per delegate session.
    pub fn put_stored_delegates(
        &mut self,
        rows: impl IntoIterator<Item = StoredDelegate>,
    ) -> Result<(), CatalogueError> {
        const WHAT: &str = "stored delegate row";
        let mut sessions: BTreeMap<String, (String, String)> = self
            .delegates
            .iter()
            .map(|(pair, d)| (d.session_id.clone(), pair.clone()))
            .collect();
        for StoredDelegate {
            spawner,
            parent,
            session_id,
            last_contact_ms,
        } in rows
        {
            if !is_delegate_pair(&spawner, &parent) || !is_session_id(&session_id) {
                return Err(bad(
                    WHAT,
                    format!("({spawner:?}, {parent:?}) -> {session_id:?}"),
                ));
            }
            let pair = (spawner, parent);
            let row = DelegateRow {
                session_id,
                last_contact_ms,
            };
            match self.delegates.get(&pair) {
                Some(prev) if *prev == row => continue,
                Some(_) => {
                    return Err(bad(WHAT, format!("({}, {}) is duplicated", pair.0, pair.1)))
                }
                None => {}
            }
            if sessions.contains_key(&row.session_id) {
                return Err(bad(WHAT, format!("{} is duplicated", row.session_id)));
            }
            sessions.insert(row.session_id.clone(), pair.clone());
            self.delegates.insert(pair, row);
        }
        Ok(())
    }

    /// Adds a workspace's default session (the session id's grammar).
    pub fn put_stored_default(
        &mut self,
        workspace: String,
        session_id: String,
    ) -> Result<(), CatalogueError> {
        if !is_session_id(&session_id) {
            return Err(bad(
                "stored workspace default",
                format!("{workspace:?} -> {session_id:?}"),
            ));
        }
        self.workspace_defaults.insert(workspace, session_id);
        Ok(())
    }

    /// Adds a recent folder (a local workspace path).
    pub fn put_stored_recent(&mut self, id: u64, path: String) -> Result<(), CatalogueError> {
        if !is_local_workspace(&path) {
            return Err(bad("stored recent folder", format!("{path:?}")));
        }
        self.recent.insert(Recent { id, path });
        Ok(())
    }

    /// Adds a remembered deletion (a session id and the revision its
    /// deletion made).
    pub fn put_stored_deletion(
        &mut self,
        session_id: String,
        revision: u64,
    ) -> Result<(), CatalogueError> {
        if !is_session_id(&session_id) {
            return Err(bad("stored deleted session", format!("{session_id:?}")));
        }
        self.deleted.insert(session_id, revision);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid(e: Result<(), CatalogueError>) -> &'static str {
        match e {
            Err(CatalogueError::Invalid { what, .. }) => what,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn a_delegate_is_one_row_per_pair_and_one_pair_per_session() {
        let d = |spawner: &str, parent: &str, id: &str| StoredDelegate {
            spawner: spawner.into(),
            parent: parent.into(),
            session_id: id.into(),
            last_contact_ms: 5,
        };
        let mut s = CatalogueState::default();
        // The same row twice (two overlapping reads) is one row.
        let row = d("orch", "s-parent", "s-child");
        assert_eq!(s.put_stored_delegates([row.clone(), row.clone()]), Ok(()));
        assert_eq!(s.put_stored_delegates([row]), Ok(()));
        assert_eq!(s.delegates.len(), 1);
        for broken in [
            d("orch", "s-parent", "s-other"),
            d("orch", "s-second", "s-child"),
            d("not a name!", "s-parent", "s-x"),
            d("orch", "s-parent", "bad id!"),
        ] {
            let mut t = s.clone();
            assert_eq!(
                invalid(t.put_stored_delegates([broken])),
                "stored delegate row"
            );
        }
        // Within one batch too.
        let mut t = CatalogueState::default();
        assert_eq!(
            invalid(t.put_stored_delegates([d("orch", "s-a", "s-x"), d("orch", "s-b", "s-x")])),
            "stored delegate row"
        );
    }

    #[test]
    fn defaults_recent_folders_and_deletions_keep_their_grammar() {
        let mut s = CatalogueState::default();
        assert_eq!(
            invalid(s.put_stored_default("/w".into(), "bad id!".into())),
            "stored workspace default"
        );
        assert_eq!(
            invalid(s.put_stored_recent(1, "relative/path".into())),
            "stored recent folder"
        );
        assert_eq!(
            invalid(s.put_stored_deletion("bad id!".into(), 3)),
            "stored deleted session"
        );
        assert_eq!(s, CatalogueState::default());
        assert_eq!(s.put_stored_default("/w".into(), "s-1".into()), Ok(()));
        assert_eq!(s.put_stored_recent(1, "/w".into()), Ok(()));
        assert_eq!(s.put_stored_deletion("s-2".into(), 3), Ok(()));
        assert_eq!(
            s.workspace_defaults.get("/w").map(String::as_str),
            Some("s-1")
        );
        assert_eq!(s.recent.len(), 1);
        assert_eq!(s.deleted.get("s-2"), Some(&3));
    }
}
