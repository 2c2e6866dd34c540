//! The session catalogue: registrations, display names, visibility,
//! subtitles, workspace defaults, recent folders, custody, deletion marks and
//! delegates.
//!
//! The catalogue is daemon metadata in its own database. It never opens a
//! conversation. Its stored state is [`CatalogueState`]; every write is one
//! [`Request`] decided by [`decide`] into a [`Decision`] (the outcome and the
//! state to persist in the same transaction); every read is a pure function
//! of the state (`CatalogueState::get`, `page`, …). A shell loads the rows a
//! request reads ([`footprint`]) into a partial state, decides, and applies
//! the decision's [`Effect`]s in order, one statement each, so the shell
//! holds no rule, no diff and no ordering of its own.
//!
//! Rules, in brief:
//! - `reserve` is idempotent by creation key: a retry answers the original
//!   registration; a retry that differs in name, workspace, profile, model,
//!   executor (unless pooled), or pool is `Conflict`.
//! - Name grammars ([`is_profile_name`], [`is_model_key`],
//!   [`is_workspace_name`], [`is_executor_name`], [`is_pool_name`]) refuse
//!   with `Invalid`. A local session's workspace is an absolute path; a
//!   registered (executor or pooled) session's workspace is a name.
//! - The revision moves on registration, names, visibility, profile,
//!   executor, subtitle, workspace defaults and custody changes, and only
//!   when a row changes. Deletion marks, delegate claims and recent folders
//!   do not move it (no listing shows them).
//! - [`Catalogue`] is the port; [`MemoryCatalogue`] the memory backend.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::Millis;
use access::{
    Access, AccessError, AccessOutcome, AccessRequest, AccessState, Authority, Authorization,
    ClaimDigest, Digest, ListingPage, MembershipPage, SessionMemberPage, SigninPage,
};
use custody::{Custody, CustodyError, MoveOp, Peer};

pub mod access;
pub mod custody;
pub mod effect;
pub mod rows;
mod stored;
mod text;

pub use effect::Effect;
pub use stored::{read_default, read_deleted, read_recent, StoredDelegate};

pub use text::{
    display_name, invisible, is_creation_key, is_executor_name, is_local_workspace, is_model_key,
    is_pool_name, is_profile_name, is_session_id, is_subtitle, is_workspace_name,
    subtitle_from_prompt, CREATION_KEY_LIMIT, DISPLAY_NAME_LIMIT, LOCAL_WORKSPACE_LIMIT,
    MODEL_KEY_LIMIT, PROFILE_NAME_LIMIT, SESSION_ID_LIMIT, SUBTITLE_LIMIT, WORKSPACE_NAME_LIMIT,
};

/// How many recent folders the catalogue keeps.
pub const RECENT_FOLDER_LIMIT: usize = 10;
/// The most rows a page returns.
pub const LISTING_LIMIT: usize = 100;

/// Why a catalogue request was refused. Nothing changes on a refusal.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error, Serialize, Deserialize)]
pub enum CatalogueError {
    /// A value outside its grammar — in a request, or stored.
    #[error("Invalid: {what}: {detail}")]
    Invalid {
        /// Which value.
        what: &'static str,
        /// Why.
        detail: String,
    },
    /// The request disagrees with what is stored.
    #[error("Conflict: {detail}")]
    Conflict {
        /// Why.
        detail: String,
    },
    /// The catalogue holds no such session.
    #[error("NotFound: no session {session_id:?}")]
    NotFound {
        /// The session asked for.
        session_id: String,
    },
    /// The backend failed (I/O, SQLite); the request may not have applied.
    #[error("BackendFault: {reason}")]
    BackendFault {
        /// What failed.
        reason: String,
    },
    /// The backend could not be reached
    /// ([`Class::Unavailable`](crate::Class::Unavailable)): retry the same request.
    #[error("Unavailable: {reason}")]
    Unavailable {
        /// What failed (never a credential).
        reason: String,
    },
}

/// A stored column that breaks its rule is `Invalid` ("stored row"),
/// naming the table, the row and the column.
impl From<crate::columns::ColumnError> for CatalogueError {
    fn from(e: crate::columns::ColumnError) -> Self {
        CatalogueError::Invalid {
            what: "stored row",
            detail: e.to_string(),
        }
    }
}

impl CatalogueError {
    /// The failure's [`Class`](crate::Class): what the caller does next
    /// (a request the stored state does not allow is `StateConflict`).
    pub fn class(&self) -> crate::Class {
        use crate::Class;
        match self {
            CatalogueError::Invalid { .. } => Class::InvalidArgument,
            CatalogueError::Conflict { .. } => Class::StateConflict,
            CatalogueError::NotFound { .. } => Class::NotFound,
            CatalogueError::BackendFault { .. } => Class::Internal,
            CatalogueError::Unavailable { .. } => Class::Unavailable,
        }
    }
}

crate::reasons! {
    /// The stable reason string: `Invalid`, `Conflict`, `NotFound` or
    /// `BackendFault`.
    CatalogueError { Invalid, Conflict, NotFound, BackendFault, Unavailable }
}

impl CatalogueError {
    fn from_custody(e: CustodyError, session_id: &str) -> Self {
        match e {
            CustodyError::Conflict { request, stored } => CatalogueError::Conflict {
                detail: format!("custody: {request} on {stored}"),
            },
            CustodyError::NotFound => CatalogueError::NotFound {
                session_id: session_id.to_owned(),
            },
            CustodyError::Invalid { what, value } => CatalogueError::Invalid {
                what,
                detail: format!("{value:?}"),
            },
        }
    }
}

fn invalid(what: &'static str, value: &str) -> CatalogueError {
    CatalogueError::Invalid {
        what,
        detail: format!("{value:?} breaks the grammar"),
    }
}

fn conflict(detail: impl Into<String>) -> CatalogueError {
    CatalogueError::Conflict {
        detail: detail.into(),
    }
}

fn not_found(id: &str) -> CatalogueError {
    CatalogueError::NotFound {
        session_id: id.to_owned(),
    }
}

/// Initialization state of a registration's conversation file — not
/// runtime liveness.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum InitState {
    /// Reserved: identity taken, file not yet initialized.
    Reserved,
    /// Saved: the file is initialized.
    Saved,
}

/// The visibility overlay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Visibility {
    /// Listed in owner pages.
    Active,
    /// Listed only in archived pages.
    Archived,
}

/// Whether a deletion has begun.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Deletion {
    /// No mark.
    NotDeleting,
    /// Marked: a restarted daemon finishes the deletion.
    Deleting,
}

/// The creation request: what `reserve` compares on a retry.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Creation {
    /// The caller's idempotency key.
    pub creation_key: String,
    /// The creation name (display reads join the override).
    pub name: String,
    /// An absolute path (local) or a registered workspace name.
    pub workspace: String,
    /// The model profile, `None` for the default roles.
    pub profile: Option<String>,
    /// The `[models.<key>]` the `main` role was pinned to.
    pub model: Option<String>,
    /// The executor a registered workspace lives on; `None` for local (and,
    /// until `seed_executor`, for pooled) sessions.
    pub executor: Option<String>,
    /// The pool the session was created in.
    pub pool: Option<String>,
}

impl Creation {
    /// A local creation with no profile, model, executor or pool.
    pub fn local(creation_key: &str, name: &str, workspace: &str) -> Self {
        Creation {
            creation_key: creation_key.to_owned(),
            name: name.to_owned(),
            workspace: workspace.to_owned(),
            profile: None,
            model: None,
            executor: None,
            pool: None,
        }
    }

    /// Whether the workspace is registered (executor or pool), not local.
    pub fn is_registered(&self) -> bool {
        self.executor.is_some() || self.pool.is_some()
    }

    /// Checks every grammar and the local/registered split.
    pub fn validate(&self) -> Result<(), CatalogueError> {
        if !is_creation_key(&self.creation_key) {
            return Err(invalid("creation key", &self.creation_key));
        }
        display_name(&self.name)?;
        check_opt(&self.profile, "profile", is_profile_name)?;
        check_opt(&self.model, "model key", is_model_key)?;
        check_opt(&self.executor, "executor name", is_executor_name)?;
        check_opt(&self.pool, "pool name", is_pool_name)?;
        if self.pool.is_some() && self.executor.is_some() {
            return Err(CatalogueError::Invalid {
                what: "executor",
                detail: "a pooled session's executor is seeded after its first attach".into(),
            });
        }
        let ok = if self.is_registered() {
            is_workspace_name(&self.workspace)
        } else {
            is_local_workspace(&self.workspace)
        };
        if !ok {
            return Err(invalid(
                if self.is_registered() {
                    "registered workspace name"
                } else {
                    "local workspace path"
                },
                &self.workspace,
            ));
        }
        Ok(())
    }

    /// Whether a retry with `retry` repeats this creation: name, workspace,
    /// profile, model and pool equal, and the executor too unless pooled.
    fn repeats(&self, retry: &Creation) -> bool {
        self.name == retry.name
            && self.workspace == retry.workspace
            && self.profile == retry.profile
            && self.model == retry.model
            && self.pool == retry.pool
            && (self.pool.is_some() || self.executor == retry.executor)
    }
}

fn check_opt(
    v: &Option<String>,
    what: &'static str,
    ok: fn(&str) -> bool,
) -> Result<(), CatalogueError> {
    match v {
        Some(s) if !ok(s) => Err(invalid(what, s)),
        _ => Ok(()),
    }
}

/// One stored session: the registration row and its side rows.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SessionRow {
    /// The creation row (`profile` and `executor` as last written).
    pub creation: Creation,
    /// When it was reserved, on the caller's clock.
    pub created_at_ms: Millis,
    /// File initialization state.
    pub state: InitState,
    /// The display-name override.
    pub name_override: Option<String>,
    /// The visibility overlay.
    pub visibility: Visibility,
    /// The subtitle, written once.
    pub subtitle: Option<String>,
    /// Who serves the session, as this catalogue records it.
    pub custody: Custody,
    /// The deletion mark.
    pub deleting: bool,
}

/// One stored session row as a backend reads it, before any rule of the
/// catalogue is checked: its texts (each already bounded by its column's
/// limit before it was copied), its flags, and the custody row if any.
/// Absent optional creation fields are empty strings, as they are stored.
/// [`StoredSession::decode`] is the one check every backend runs on a
/// loaded row.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoredSession {
    /// The session id.
    pub id: String,
    /// The creation key.
    pub creation_key: String,
    /// The display name.
    pub name: String,
    /// The workspace.
    pub workspace: String,
    /// The profile (empty: none).
    pub profile: String,
    /// The model (empty: none).
    pub model: String,
    /// The executor (empty: none).
    pub executor: String,
    /// The pool (empty: none).
    pub pool: String,
    /// When it was reserved.
    pub created_at_ms: Millis,
    /// The file initialization state as stored (`reserved` or `saved`).
    pub state: String,
    /// The display-name override.
    pub name_override: Option<String>,
    /// The archive mark.
    pub archived: bool,
    /// The subtitle.
    pub subtitle: Option<String>,
    /// The custody row: state, move op, peer.
    pub move_row: Option<(String, String, String)>,
    /// The deletion mark.
    pub deleting: bool,
}

impl StoredSession {
    /// The session's id and row, every grammar checked: the id, the
    /// creation's shape (a pooled row may carry its seeded executor, which
    /// must be an executor name), the initialization state, the name
    /// override and the custody row. A row that breaks one is
    /// [`CatalogueError::Invalid`] naming what and the session. A stored
    /// subtitle that breaks its rule reads as none (it was written once and
    /// is only shown).
    pub fn decode(self) -> Result<(String, SessionRow), CatalogueError> {
        let bad = |what: &'static str, detail: String| CatalogueError::Invalid { what, detail };
        let id = self.id;
        if !is_session_id(&id) {
            return Err(bad("stored session id", format!("{id:?}")));
        }
        let some = |s: String| (!s.is_empty()).then_some(s);
        let creation = Creation {
            creation_key: self.creation_key,
            name: self.name,
            workspace: self.workspace,
            profile: some(self.profile),
            model: some(self.model),
            executor: some(self.executor),
            pool: some(self.pool),
        };
        let mut shape = creation.clone();
        if shape.pool.is_some() {
            if let Some(e) = shape.executor.take() {
                if !is_executor_name(&e) {
                    return Err(bad("stored executor", format!("{e:?} in {id}")));
                }
            }
        }
        let restate = |e: CatalogueError, what_is: &str| match e {
            CatalogueError::Invalid { what, detail } => {
                bad(what, format!("stored {what_is}in {id}: {detail}"))
            }
            other => other,
        };
        shape.validate().map_err(|e| restate(e, ""))?;
        let state = match self.state.as_str() {
            "reserved" => InitState::Reserved,
            "saved" => InitState::Saved,
            other => return Err(bad("stored state", format!("{other:?} in {id}"))),
        };
        if let Some(n) = &self.name_override {
            display_name(n).map_err(|e| restate(e, "name override "))?;
        }
        let custody = match &self.move_row {
            None => Custody::Resident,
            Some((state, op, peer)) => Custody::from_row(state, op, peer)
                .map_err(|e| bad("stored move row", format!("{e} in {id}")))?,
        };
        let row = SessionRow {
            creation,
            created_at_ms: self.created_at_ms,
            state,
            name_override: self.name_override,
            visibility: if self.archived {
                Visibility::Archived
            } else {
                Visibility::Active
            },
            subtitle: self.subtitle.filter(|s| is_subtitle(s)),
            custody,
            deleting: self.deleting,
        };
        Ok((id, row))
    }
}

/// A registration as read.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Registration {
    /// The session id.
    pub session_id: String,
    /// The creation row. `name` is the display name (the override when one
    /// is set) from `get` and the pages, the creation name from
    /// `by_request_key` and `reserve`.
    pub creation: Creation,
    /// When it was reserved.
    pub created_at_ms: Millis,
    /// File initialization state.
    pub state: InitState,
    /// The visibility overlay.
    pub visibility: Visibility,
    /// The subtitle (`None` from `by_request_key` and `reserve`).
    pub subtitle: Option<String>,
}

/// A recent folder. `id` orders recency (larger is newer).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Recent {
    /// The sequence number; a repeated remember retires it.
    pub id: u64,
    /// The folder (a local workspace path).
    pub path: String,
}

/// A delegate row.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Delegate {
    /// The remote orchestrator whose subagents run in the delegate.
    pub spawner: String,
    /// The spawner's session the delegate serves.
    pub parent_session: String,
    /// The delegate session.
    pub session_id: String,
    /// The last claim's clock reading.
    pub last_contact_ms: Millis,
}

/// The stored delegate row, keyed by `(spawner, parent_session)`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DelegateRow {
    /// The delegate session.
    pub session_id: String,
    /// The last claim's clock reading.
    pub last_contact_ms: Millis,
}

/// A move still in `Moving`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Move {
    /// The session.
    pub session_id: String,
    /// The move's op.
    pub op: MoveOp,
    /// Where it goes.
    pub to: Peer,
}

/// A bounded page of registrations.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page {
    /// At most the asked limit, ascending by session id.
    pub registrations: Vec<Registration>,
    /// Whether another page exists.
    pub more: bool,
    /// The catalogue revision the page was read at.
    pub revision: u64,
}

/// The stored state of a catalogue: exactly what a shell persists. A shell
/// may hold a partial copy (the rows of one request's [`footprint`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CatalogueState {
    /// The revision.
    pub revision: u64,
    /// Sessions by id.
    pub sessions: BTreeMap<String, SessionRow>,
    /// Workspace defaults: workspace → session id.
    pub workspace_defaults: BTreeMap<String, String>,
    /// Recent folders, any order (reads sort newest first).
    pub recent: BTreeSet<Recent>,
    /// The highest recent-folder sequence ever issued.
    pub recent_seq: u64,
    /// Delegates by `(spawner, parent_session)`.
    #[serde(with = "crate::pairs")]
    pub delegates: BTreeMap<(String, String), DelegateRow>,
    /// The access plane (principals, credentials, claims, memberships).
    #[serde(default)]
    pub access: AccessState,
    /// The most recently deleted sessions (at most [`DELETED_KEPT`]), each
    /// with the revision its deletion made: a `Delete` retried after a lost
    /// reply finds its own deletion here and is answered as it was.
    #[serde(default)]
    pub deleted: BTreeMap<String, u64>,
}

/// How many deleted sessions the catalogue remembers for a retried
/// `Delete` (the oldest, by revision, is forgotten first).
pub const DELETED_KEPT: usize = 256;

/// A write request. Every outside input is here, including `now`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Request {
    /// Reserve a registration, idempotent by creation key.
    Reserve {
        /// The id to use when the key is new (a retry's id is ignored).
        session_id: String,
        /// The creation request.
        creation: Creation,
        /// The caller's clock.
        now: Millis,
    },
    /// The conversation file is initialized: `Reserved → Saved`.
    Confirm {
        /// The session.
        session_id: String,
    },
    /// Write a display-name override.
    Rename {
        /// The session.
        session_id: String,
        /// The new display name ([`display_name`]).
        name: String,
    },
    /// Change the visibility overlay.
    SetVisibility {
        /// The session.
        session_id: String,
        /// The new visibility.
        visibility: Visibility,
    },
    /// Replace the profile (a live profile switch).
    SetProfile {
        /// The session.
        session_id: String,
        /// The new profile, `None` for the default roles.
        profile: Option<String>,
    },
    /// Set a pooled session's executor once, after its first attach.
    SeedExecutor {
        /// The session.
        session_id: String,
        /// The executor chosen.
        executor: String,
    },
    /// Write the subtitle once, reduced by [`subtitle_from_prompt`].
    SeedSubtitle {
        /// The session.
        session_id: String,
        /// The prompt.
        prompt: String,
    },
    /// Set a local workspace's default session.
    SetWorkspaceDefault {
        /// The workspace (local path).
        workspace: String,
        /// A session registered in that workspace.
        session_id: String,
    },
    /// Remember a folder as the newest.
    RememberFolder {
        /// The folder (a local workspace path).
        path: String,
    },
    /// Forget a recent folder by id.
    ForgetFolder {
        /// The id.
        id: u64,
    },
    /// Custody, source side: begin a move.
    BeginMove {
        /// The session.
        session_id: String,
        /// The move's op.
        op: MoveOp,
        /// The destination.
        to: Peer,
    },
    /// Custody, source side: finish a move.
    FinishMove {
        /// The session.
        session_id: String,
        /// The move's op.
        op: MoveOp,
    },
    /// Custody, source side: abort a move early.
    AbortMove {
        /// The session.
        session_id: String,
        /// The move's op.
        op: MoveOp,
    },
    /// Custody, target side: take a session in. A never-seen session is
    /// reserved, confirmed and marked `Imported` in one transaction; a
    /// returning one keeps its registration and changes only its move row.
    ImportSession {
        /// The session.
        session_id: String,
        /// Its creation request (used only when the session is new here).
        creation: Creation,
        /// The move's op.
        op: MoveOp,
        /// The source.
        from: Peer,
        /// The caller's clock.
        now: Millis,
    },
    /// Mark a deletion as begun.
    MarkDeleting {
        /// The session.
        session_id: String,
    },
    /// Remove a deletion mark.
    UnmarkDeleting {
        /// The session.
        session_id: String,
    },
    /// Answer or record the delegate of `(spawner, parent_session)`.
    ClaimDelegate {
        /// The remote orchestrator.
        spawner: String,
        /// The spawner's session.
        parent_session: String,
        /// The delegate session to record when the pair is new.
        session_id: String,
        /// The caller's clock (the contact time).
        now: Millis,
        /// The most rows the spawner may hold (`max_sessions`).
        limit: u32,
    },
    /// Remove a session and every side row. Refused while `Moving` or `Moved`.
    Delete {
        /// The session.
        session_id: String,
    },
}

/// The result of a delegate claim.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Claim {
    /// The pair was recorded for the session.
    Claimed(Delegate),
    /// The pair already named this session; its contact time moved.
    Existing(Delegate),
    /// The spawner already holds `limit` rows; nothing was written.
    AtLimit {
        /// Rows the spawner holds.
        held: u32,
    },
}

/// What a successful request did. `changed` is whether any row changed.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Outcome {
    /// `Reserve`: the registration (creation name, no subtitle).
    Reserved {
        /// The registration, new or original.
        registration: Registration,
        /// Whether this call created it.
        created: bool,
    },
    /// A write that answers only whether it changed a row.
    Done {
        /// Whether a row changed.
        changed: bool,
    },
    /// `SeedSubtitle`: the subtitle that stands.
    Subtitle {
        /// The stored subtitle (`None` when the prompt was blank and none stood).
        subtitle: Option<String>,
        /// Whether this call wrote it.
        changed: bool,
    },
    /// `RememberFolder`: the new row.
    Remembered(Recent),
    /// A custody transition: the custody after it.
    Custody {
        /// The custody.
        custody: Custody,
        /// Whether a row changed.
        changed: bool,
    },
    /// `ClaimDelegate`.
    Delegate(Claim),
}

/// A decision: the outcome and the row writes to apply in the same
/// transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// What happened.
    pub outcome: Outcome,
    /// The rows to write, in order ([`effect`]); empty when nothing changed.
    pub effects: Vec<Effect>,
    /// The decided state: the loaded state with `effects` applied. Equal to
    /// the input when nothing changed.
    pub next: CatalogueState,
}

/// The rows a request reads, for a shell that loads a partial state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Sessions by id, with every side row.
    pub sessions: Vec<String>,
    /// Sessions by creation key.
    pub creation_key: Option<String>,
    /// Workspace defaults by workspace.
    pub defaults: Vec<String>,
    /// Workspace defaults naming a session.
    pub defaults_naming: Option<String>,
    /// Every recent folder and the sequence.
    pub recent: bool,
    /// The delegate row of a pair.
    pub delegate_pair: Option<(String, String)>,
    /// Every delegate row of a spawner.
    pub delegates_of_spawner: Option<String>,
    /// The delegate row naming a session.
    pub delegate_of: Option<String>,
    /// Every remembered deletion ([`CatalogueState::deleted`]).
    pub deleted: bool,
}

impl Footprint {
    /// The rows of `full` this footprint names, with the meta row (revision
    /// and recent-folder sequence): what a shell loads before it decides,
    /// written once as the reference a backend's loader is compared with.
    /// The access plane is not loaded (a catalogue request never reads it; a
    /// session's removal takes its memberships by the backend's own rule).
    pub fn partial(&self, full: &CatalogueState) -> CatalogueState {
        let mut s = CatalogueState {
            revision: full.revision,
            recent_seq: full.recent_seq,
            ..CatalogueState::default()
        };
        let mut session = |id: &String| {
            if let Some(r) = full.sessions.get(id) {
                s.sessions.insert(id.clone(), r.clone());
            }
        };
        self.sessions.iter().for_each(&mut session);
        if let Some(k) = &self.creation_key {
            full.sessions
                .iter()
                .filter(|(_, r)| &r.creation.creation_key == k)
                .for_each(|(id, _)| session(id));
        }
        for (ws, id) in &full.workspace_defaults {
            if self.defaults.contains(ws) || self.defaults_naming.as_ref() == Some(id) {
                s.workspace_defaults.insert(ws.clone(), id.clone());
            }
        }
        if self.recent {
            s.recent.clone_from(&full.recent);
        }
        if self.deleted {
            s.deleted.clone_from(&full.deleted);
        }
        for ((sp, pa), d) in &full.delegates {
            let pair = self.delegate_pair.as_ref() == Some(&(sp.clone(), pa.clone()));
            let of_spawner = self.delegates_of_spawner.as_ref() == Some(sp);
            let of_session = self.delegate_of.as_ref() == Some(&d.session_id);
            if pair || of_spawner || of_session {
                s.delegates.insert((sp.clone(), pa.clone()), d.clone());
            }
        }
        s
    }
}

/// The rows [`decide`] reads for `req`. `decide` on a state holding at least
/// these rows answers as it would on the whole state.
pub fn footprint(req: &Request) -> Footprint {
    let one = |id: &String| Footprint {
        sessions: vec![id.clone()],
        ..Footprint::default()
    };
    match req {
        Request::Reserve {
            session_id,
            creation,
            ..
        }
        | Request::ImportSession {
            session_id,
            creation,
            ..
        } => Footprint {
            sessions: vec![session_id.clone()],
            creation_key: Some(creation.creation_key.clone()),
            ..Footprint::default()
        },
        Request::SetVisibility { session_id, .. } => Footprint {
            sessions: vec![session_id.clone()],
            defaults_naming: Some(session_id.clone()),
            delegate_of: Some(session_id.clone()),
            ..Footprint::default()
        },
        Request::Delete { session_id } => Footprint {
            sessions: vec![session_id.clone()],
            defaults_naming: Some(session_id.clone()),
            delegate_of: Some(session_id.clone()),
            deleted: true,
            ..Footprint::default()
        },
        Request::SetWorkspaceDefault {
            workspace,
            session_id,
        } => Footprint {
            sessions: vec![session_id.clone()],
            defaults: vec![workspace.clone()],
            ..Footprint::default()
        },
        Request::RememberFolder { .. } | Request::ForgetFolder { .. } => Footprint {
            recent: true,
            ..Footprint::default()
        },
        Request::ClaimDelegate {
            spawner,
            parent_session,
            session_id,
            ..
        } => Footprint {
            sessions: vec![session_id.clone()],
            delegate_pair: Some((spawner.clone(), parent_session.clone())),
            delegates_of_spawner: Some(spawner.clone()),
            delegate_of: Some(session_id.clone()),
            ..Footprint::default()
        },
        Request::Confirm { session_id }
        | Request::Rename { session_id, .. }
        | Request::SetProfile { session_id, .. }
        | Request::SeedExecutor { session_id, .. }
        | Request::SeedSubtitle { session_id, .. }
        | Request::BeginMove { session_id, .. }
        | Request::FinishMove { session_id, .. }
        | Request::AbortMove { session_id, .. }
        | Request::MarkDeleting { session_id }
        | Request::UnmarkDeleting { session_id } => one(session_id),
    }
}

fn check_session_id(id: &str) -> Result<(), CatalogueError> {
    if is_session_id(id) {
        Ok(())
    } else {
        Err(invalid("session id", id))
    }
}

/// Decides one request against the stored (possibly partial) state. Total
/// and deterministic.
pub fn decide(state: &CatalogueState, req: &Request) -> Result<Decision, CatalogueError> {
    let mut next = state.clone();
    let outcome = apply(&mut next, req)?;
    Ok(Decision {
        outcome,
        effects: effect::effects(state, &next),
        next,
    })
}

fn row_mut<'a>(s: &'a mut CatalogueState, id: &str) -> Result<&'a mut SessionRow, CatalogueError> {
    check_session_id(id)?;
    s.sessions.get_mut(id).ok_or_else(|| not_found(id))
}

fn done(s: &mut CatalogueState, changed: bool) -> Outcome {
    if changed {
        s.revision += 1;
    }
    Outcome::Done { changed }
}

/// Applies one request to `s` (a copy [`decide`] discards on a refusal).
/// One function per request below; this is only the dispatch.
fn apply(s: &mut CatalogueState, req: &Request) -> Result<Outcome, CatalogueError> {
    match req {
        Request::Reserve {
            session_id,
            creation,
            now,
        } => reserve(s, session_id, creation, *now),
        Request::Confirm { session_id } => confirm(s, session_id),
        Request::Rename { session_id, name } => rename(s, session_id, name),
        Request::SetVisibility {
            session_id,
            visibility,
        } => set_visibility(s, session_id, *visibility),
        Request::SetProfile {
            session_id,
            profile,
        } => set_profile(s, session_id, profile),
        Request::SeedExecutor {
            session_id,
            executor,
        } => seed_executor(s, session_id, executor),
        Request::SeedSubtitle { session_id, prompt } => seed_subtitle(s, session_id, prompt),
        Request::SetWorkspaceDefault {
            workspace,
            session_id,
        } => set_workspace_default(s, workspace, session_id),
        Request::RememberFolder { path } => remember_folder(s, path),
        Request::ForgetFolder { id } => Ok(forget_folder(s, *id)),
        Request::BeginMove { session_id, op, to } => {
            let req = custody::Request::BeginMove {
                op: op.clone(),
                to: to.clone(),
            };
            transition(s, session_id, &req)
        }
        Request::FinishMove { session_id, op } => {
            let req = custody::Request::FinishMove { op: op.clone() };
            transition(s, session_id, &req)
        }
        Request::AbortMove { session_id, op } => {
            let req = custody::Request::AbortMove { op: op.clone() };
            transition(s, session_id, &req)
        }
        Request::ImportSession {
            session_id,
            creation,
            op,
            from,
            now,
        } => import_session(s, session_id, creation, op, from, *now),
        Request::MarkDeleting { session_id } => mark_deleting(s, session_id, true),
        Request::UnmarkDeleting { session_id } => mark_deleting(s, session_id, false),
        Request::ClaimDelegate {
            spawner,
            parent_session,
            session_id,
            now,
            limit,
        } => claim_delegate(s, spawner, parent_session, session_id, *now, *limit),
        Request::Delete { session_id } => delete(s, session_id),
    }
}

/// `Reserve`: a new creation key registers the session `Reserved`,
/// `Active`, `Resident`; a known key answers its original registration when
/// the retry repeats it, else `Conflict`; a taken session id is `Conflict`.
fn reserve(
    s: &mut CatalogueState,
    session_id: &str,
    creation: &Creation,
    now: Millis,
) -> Result<Outcome, CatalogueError> {
    check_session_id(session_id)?;
    creation.validate()?;
    if let Some((id, row)) = s.by_key(&creation.creation_key) {
        if !row.creation.repeats(creation) {
            return Err(conflict(format!(
                "creation key {:?} is registered as {id} with another request",
                creation.creation_key
            )));
        }
        return Ok(Outcome::Reserved {
            registration: creation_view(id, row),
            created: false,
        });
    }
    if s.sessions.contains_key(session_id) {
        return Err(conflict(format!("session id {session_id} is taken")));
    }
    let row = new_row(creation, now, InitState::Reserved, Custody::Resident);
    let registration = creation_view(session_id, &row);
    s.sessions.insert(session_id.to_owned(), row);
    s.revision += 1;
    Ok(Outcome::Reserved {
        registration,
        created: true,
    })
}

/// A new session row: active, no override, no subtitle, no deletion mark.
fn new_row(creation: &Creation, now: Millis, state: InitState, custody: Custody) -> SessionRow {
    SessionRow {
        creation: creation.clone(),
        created_at_ms: now,
        state,
        name_override: None,
        visibility: Visibility::Active,
        subtitle: None,
        custody,
        deleting: false,
    }
}

/// `Confirm`: `Reserved → Saved` (a `Saved` row is unchanged).
fn confirm(s: &mut CatalogueState, session_id: &str) -> Result<Outcome, CatalogueError> {
    let row = row_mut(s, session_id)?;
    let changed = row.state == InitState::Reserved;
    row.state = InitState::Saved;
    Ok(done(s, changed))
}

/// `Rename`: writes the display-name override.
fn rename(s: &mut CatalogueState, session_id: &str, name: &str) -> Result<Outcome, CatalogueError> {
    display_name(name)?;
    let row = row_mut(s, session_id)?;
    let changed = row.name_override.as_deref() != Some(name);
    row.name_override = Some(name.to_owned());
    Ok(done(s, changed))
}

/// `SetVisibility`: an archived session is also no workspace's default.
fn set_visibility(
    s: &mut CatalogueState,
    session_id: &str,
    visibility: Visibility,
) -> Result<Outcome, CatalogueError> {
    let row = row_mut(s, session_id)?;
    let changed = row.visibility != visibility;
    row.visibility = visibility;
    if visibility == Visibility::Archived {
        // An archived session is no workspace's default.
        s.workspace_defaults.retain(|_, v| v != session_id);
    }
    Ok(done(s, changed))
}

/// `SetProfile`: replaces the profile.
fn set_profile(
    s: &mut CatalogueState,
    session_id: &str,
    profile: &Option<String>,
) -> Result<Outcome, CatalogueError> {
    check_opt(profile, "profile", is_profile_name)?;
    let row = row_mut(s, session_id)?;
    let changed = row.creation.profile != *profile;
    row.creation.profile = profile.clone();
    Ok(done(s, changed))
}

/// `SeedExecutor`: sets a pooled session's executor once; the same
/// executor again is unchanged, another one is `Conflict`.
fn seed_executor(
    s: &mut CatalogueState,
    session_id: &str,
    executor: &str,
) -> Result<Outcome, CatalogueError> {
    if !is_executor_name(executor) {
        return Err(invalid("executor name", executor));
    }
    let row = row_mut(s, session_id)?;
    if row.creation.pool.is_none() {
        return Err(conflict("only a pooled session's executor is seeded"));
    }
    match &row.creation.executor {
        Some(e) if e == executor => Ok(done(s, false)),
        Some(e) => Err(conflict(format!("the executor is already {e}"))),
        None => {
            row.creation.executor = Some(executor.to_owned());
            Ok(done(s, true))
        }
    }
}

/// `SeedSubtitle`: writes the subtitle reduced from `prompt` once; a
/// standing subtitle is answered unchanged.
fn seed_subtitle(
    s: &mut CatalogueState,
    session_id: &str,
    prompt: &str,
) -> Result<Outcome, CatalogueError> {
    let row = row_mut(s, session_id)?;
    if row.subtitle.is_some() {
        return Ok(Outcome::Subtitle {
            subtitle: row.subtitle.clone(),
            changed: false,
        });
    }
    let subtitle = subtitle_from_prompt(prompt);
    let changed = subtitle.is_some();
    row.subtitle = subtitle.clone();
    if changed {
        s.revision += 1;
    }
    Ok(Outcome::Subtitle { subtitle, changed })
}

/// `SetWorkspaceDefault`: only a local, unarchived session of that
/// workspace may be its default (a registered workspace has none).
fn set_workspace_default(
    s: &mut CatalogueState,
    workspace: &str,
    session_id: &str,
) -> Result<Outcome, CatalogueError> {
    let row = row_mut(s, session_id)?;
    if row.creation.is_registered() {
        return Err(conflict(
            "a registered workspace has no default: two executors may register the same name",
        ));
    }
    if row.creation.workspace != workspace {
        return Err(conflict(format!(
            "session {session_id} is not in workspace {workspace:?}"
        )));
    }
    if row.visibility == Visibility::Archived {
        return Err(conflict(format!("session {session_id} is archived")));
    }
    let changed = s.workspace_defaults.get(workspace).map(String::as_str) != Some(session_id);
    s.workspace_defaults
        .insert(workspace.to_owned(), session_id.to_owned());
    Ok(done(s, changed))
}

/// `RememberFolder`: the folder becomes the newest under a fresh sequence
/// number (an older row of the same path is retired); at most
/// [`RECENT_FOLDER_LIMIT`] rows stay. Does not move the revision.
fn remember_folder(s: &mut CatalogueState, path: &str) -> Result<Outcome, CatalogueError> {
    if !is_local_workspace(path) {
        return Err(invalid("folder", path));
    }
    let seq = s
        .recent_seq
        .checked_add(1)
        .ok_or_else(|| CatalogueError::Conflict {
            detail: "the recent-folder sequence is exhausted".into(),
        })?;
    s.recent.retain(|r| r.path != path);
    let recent = Recent {
        id: seq,
        path: path.to_owned(),
    };
    s.recent.insert(recent.clone());
    s.recent_seq = seq;
    while s.recent.len() > RECENT_FOLDER_LIMIT {
        s.recent.pop_first();
    }
    Ok(Outcome::Remembered(recent))
}

/// `ForgetFolder`: removes the row with that id, if any. Does not move the
/// revision.
fn forget_folder(s: &mut CatalogueState, id: u64) -> Outcome {
    let before = s.recent.len();
    s.recent.retain(|r| r.id != id);
    Outcome::Done {
        changed: s.recent.len() != before,
    }
}

/// `ImportSession`: a known session takes the custody transition alone; a
/// never-seen one is registered `Saved` with the custody
/// [`custody::decide`] gives an absent row (`Imported`), unless its
/// creation key is registered here under another id.
fn import_session(
    s: &mut CatalogueState,
    session_id: &str,
    creation: &Creation,
    op: &MoveOp,
    from: &Peer,
    now: Millis,
) -> Result<Outcome, CatalogueError> {
    check_session_id(session_id)?;
    let req = custody::Request::ImportSession {
        op: op.clone(),
        from: from.clone(),
    };
    if s.sessions.contains_key(session_id) {
        return transition(s, session_id, &req);
    }
    creation.validate()?;
    if let Some((id, _)) = s.by_key(&creation.creation_key) {
        return Err(conflict(format!(
            "creation key {:?} is registered here as {id}",
            creation.creation_key
        )));
    }
    let d = custody::decide(None, &req).map_err(|e| CatalogueError::from_custody(e, session_id))?;
    let row = new_row(creation, now, InitState::Saved, d.custody.clone());
    s.sessions.insert(session_id.to_owned(), row);
    s.revision += 1;
    Ok(Outcome::Custody {
        custody: d.custody,
        changed: true,
    })
}

/// `MarkDeleting` (`deleting = true`) and `UnmarkDeleting` (`false`): sets
/// the deletion mark. Does not move the revision.
fn mark_deleting(
    s: &mut CatalogueState,
    session_id: &str,
    deleting: bool,
) -> Result<Outcome, CatalogueError> {
    let row = row_mut(s, session_id)?;
    let changed = row.deleting != deleting;
    row.deleting = deleting;
    Ok(Outcome::Done { changed })
}

/// `ClaimDelegate`: a recorded pair naming this session moves its contact
/// time (`Existing`); a pair bound to another session, or a session that is
/// already another pair's delegate, is `Conflict`; a new pair is recorded
/// (`Claimed`) unless the spawner already holds `limit` rows (`AtLimit`,
/// nothing written). Does not move the revision.
fn claim_delegate(
    s: &mut CatalogueState,
    spawner: &str,
    parent_session: &str,
    session_id: &str,
    now: Millis,
    limit: u32,
) -> Result<Outcome, CatalogueError> {
    check_pair(spawner, parent_session)?;
    check_session_id(session_id)?;
    if !s.sessions.contains_key(session_id) {
        return Err(not_found(session_id));
    }
    let delegate = Delegate {
        spawner: spawner.to_owned(),
        parent_session: parent_session.to_owned(),
        session_id: session_id.to_owned(),
        last_contact_ms: now,
    };
    let key = (spawner.to_owned(), parent_session.to_owned());
    if let Some(row) = s.delegates.get_mut(&key) {
        if row.session_id != session_id {
            return Err(conflict(format!(
                "({spawner}, {parent_session}) is bound to session {}",
                row.session_id
            )));
        }
        row.last_contact_ms = now;
        return Ok(Outcome::Delegate(Claim::Existing(delegate)));
    }
    if let Some(d) = s.delegate_of(session_id) {
        return Err(conflict(format!(
            "session {session_id} is the delegate of ({}, {})",
            d.spawner, d.parent_session
        )));
    }
    let held = s.delegates_held(spawner);
    if held >= limit {
        return Ok(Outcome::Delegate(Claim::AtLimit { held }));
    }
    s.delegates.insert(
        key,
        DelegateRow {
            session_id: session_id.to_owned(),
            last_contact_ms: now,
        },
    );
    Ok(Outcome::Delegate(Claim::Claimed(delegate)))
}

/// `Delete`: removes the session with its delegate row and workspace
/// defaults, when custody allows it (not `Moving` or `Moved`), and
/// remembers the deletion. A `Delete` of a session that is gone and
/// remembered is a retry of that deletion (its reply lost) and succeeds as
/// it did — `Done`, with `changed: false` since it writes nothing — where
/// one that was never there, or was forgotten ([`DELETED_KEPT`]), is
/// `NotFound`.
fn delete(s: &mut CatalogueState, session_id: &str) -> Result<Outcome, CatalogueError> {
    if !s.sessions.contains_key(session_id) && s.deleted.contains_key(session_id) {
        // `changed` says what this call wrote: nothing.
        return Ok(Outcome::Done { changed: false });
    }
    let row = row_mut(s, session_id)?;
    custody::decide(Some(&row.custody), &custody::Request::Delete)
        .map_err(|e| CatalogueError::from_custody(e, session_id))?;
    // The delegate row goes first, which frees the slot.
    s.delegates.retain(|_, d| d.session_id != session_id);
    s.workspace_defaults.retain(|_, v| v != session_id);
    crate::catalogue::access::forget_session(&mut s.access, session_id);
    s.sessions.remove(session_id);
    s.revision += 1;
    s.deleted.insert(session_id.to_owned(), s.revision);
    while s.deleted.len() > DELETED_KEPT {
        let oldest = s
            .deleted
            .iter()
            .min_by_key(|(id, rev)| (**rev, (*id).clone()))
            .map(|(id, _)| id.clone());
        match oldest {
            Some(id) => s.deleted.remove(&id),
            None => break,
        };
    }
    Ok(Outcome::Done { changed: true })
}

/// Whether `(spawner, parent_session)` is a well-formed delegate pair: an
/// orchestrator name and a session id.
pub fn is_delegate_pair(spawner: &str, parent_session: &str) -> bool {
    custody::is_orchestrator_name(spawner) && is_session_id(parent_session)
}

fn check_pair(spawner: &str, parent: &str) -> Result<(), CatalogueError> {
    if !custody::is_orchestrator_name(spawner) {
        return Err(invalid("spawner", spawner));
    }
    check_session_id(parent).map_err(|_| invalid("parent session", parent))
}

fn transition(
    s: &mut CatalogueState,
    session_id: &str,
    req: &custody::Request,
) -> Result<Outcome, CatalogueError> {
    let row = row_mut(s, session_id)?;
    let d = custody::decide(Some(&row.custody), req)
        .map_err(|e| CatalogueError::from_custody(e, session_id))?;
    row.custody = d.custody.clone();
    if d.changed {
        s.revision += 1;
    }
    Ok(Outcome::Custody {
        custody: d.custody,
        changed: d.changed,
    })
}

fn creation_view(id: &str, row: &SessionRow) -> Registration {
    Registration {
        session_id: id.to_owned(),
        creation: row.creation.clone(),
        created_at_ms: row.created_at_ms,
        state: row.state,
        visibility: row.visibility,
        subtitle: None,
    }
}

fn display_view(id: &str, row: &SessionRow) -> Registration {
    let mut r = creation_view(id, row);
    if let Some(n) = &row.name_override {
        r.creation.name = n.clone();
    }
    r.subtitle = row.subtitle.clone();
    r
}

impl CatalogueState {
    fn by_key(&self, key: &str) -> Option<(&String, &SessionRow)> {
        self.sessions
            .iter()
            .find(|(_, r)| r.creation.creation_key == key)
    }

    /// A registration with its display name and subtitle.
    pub fn get(&self, session_id: &str) -> Option<Registration> {
        self.sessions
            .get(session_id)
            .map(|r| display_view(session_id, r))
    }

    /// The original registration of a creation key (creation name, no
    /// subtitle), found before a retry allocates anything.
    pub fn by_request_key(&self, key: &str) -> Option<Registration> {
        self.by_key(key).map(|(id, r)| creation_view(id, r))
    }

    /// Registrations of `visibility` after the `after` id, ascending, at most
    /// `limit` (capped at [`LISTING_LIMIT`]). Archived rows are excluded from
    /// active pages before the limit.
    pub fn page(&self, visibility: Visibility, after: Option<&str>, limit: usize) -> Page {
        let limit = limit.min(LISTING_LIMIT);
        let mut rows = self
            .sessions
            .iter()
            .filter(|(id, r)| r.visibility == visibility && after.is_none_or(|a| id.as_str() > a))
            .map(|(id, r)| display_view(id, r));
        let registrations: Vec<Registration> = rows.by_ref().take(limit).collect();
        let more = rows.next().is_some();
        Page {
            registrations,
            more,
            revision: self.revision,
        }
    }

    /// A workspace's default session. A default naming a missing session,
    /// one in another workspace, or an archived one is `Invalid`.
    pub fn workspace_default(&self, workspace: &str) -> Result<Option<String>, CatalogueError> {
        let Some(id) = self.workspace_defaults.get(workspace) else {
            return Ok(None);
        };
        match self.sessions.get(id) {
            Some(r) if r.creation.workspace == workspace && r.visibility == Visibility::Active => {
                Ok(Some(id.clone()))
            }
            _ => Err(CatalogueError::Invalid {
                what: "workspace default",
                detail: format!("{workspace:?} names a dangling or foreign session {id}"),
            }),
        }
    }

    /// Recent folders, newest first.
    pub fn recent_folders(&self) -> Vec<Recent> {
        self.recent.iter().rev().cloned().collect()
    }

    /// Who serves a session, as this catalogue records it.
    pub fn custody(&self, session_id: &str) -> Result<Custody, CatalogueError> {
        self.sessions
            .get(session_id)
            .map(|r| r.custody.clone())
            .ok_or_else(|| not_found(session_id))
    }

    /// Every move still in `Moving`, which a restart resumes.
    pub fn moving(&self) -> Vec<Move> {
        self.sessions
            .iter()
            .filter_map(|(id, r)| match &r.custody {
                Custody::Moving { op, to } => Some(Move {
                    session_id: id.clone(),
                    op: op.clone(),
                    to: to.clone(),
                }),
                _ => None,
            })
            .collect()
    }

    /// A session's deletion mark.
    pub fn deletion(&self, session_id: &str) -> Result<Deletion, CatalogueError> {
        match self.sessions.get(session_id) {
            Some(r) if r.deleting => Ok(Deletion::Deleting),
            Some(_) => Ok(Deletion::NotDeleting),
            None => Err(not_found(session_id)),
        }
    }

    /// Every marked session.
    pub fn deleting(&self) -> Vec<String> {
        self.sessions
            .iter()
            .filter(|(_, r)| r.deleting)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The delegate of a pair. A malformed pair is `Invalid` before anything
    /// else is read.
    pub fn delegate_for(
        &self,
        spawner: &str,
        parent_session: &str,
    ) -> Result<Option<Delegate>, CatalogueError> {
        check_pair(spawner, parent_session)?;
        Ok(self
            .delegates
            .get(&(spawner.to_owned(), parent_session.to_owned()))
            .map(|d| Delegate {
                spawner: spawner.to_owned(),
                parent_session: parent_session.to_owned(),
                session_id: d.session_id.clone(),
                last_contact_ms: d.last_contact_ms,
            }))
    }

    /// The pair a session is the delegate of, if any.
    pub fn delegate_of(&self, session_id: &str) -> Option<Delegate> {
        self.delegates
            .iter()
            .find(|(_, d)| d.session_id == session_id)
            .map(|((sp, pa), d)| Delegate {
                spawner: sp.clone(),
                parent_session: pa.clone(),
                session_id: d.session_id.clone(),
                last_contact_ms: d.last_contact_ms,
            })
    }

    /// How many delegate rows a spawner holds.
    pub fn delegates_held(&self, spawner: &str) -> u32 {
        let n = self.delegates.keys().filter(|(s, _)| s == spawner).count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }
}

/// The catalogue port: what a backend implements and the conformance suites
/// (`catalogue_suite!`, `custody_suite!`) test.
pub trait Catalogue {
    /// Decides and persists one write request atomically.
    fn apply(&self, req: &Request) -> Result<Outcome, CatalogueError>;
    /// A registration with its display name and subtitle.
    fn get(&self, session_id: &str) -> Result<Option<Registration>, CatalogueError>;
    /// The original registration of a creation key.
    fn by_request_key(&self, key: &str) -> Result<Option<Registration>, CatalogueError>;
    /// A bounded page ([`CatalogueState::page`]).
    fn page(
        &self,
        visibility: Visibility,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page, CatalogueError>;
    /// A workspace's default session.
    fn workspace_default(&self, workspace: &str) -> Result<Option<String>, CatalogueError>;
    /// Recent folders, newest first.
    fn recent_folders(&self) -> Result<Vec<Recent>, CatalogueError>;
    /// A session's custody.
    fn custody(&self, session_id: &str) -> Result<Custody, CatalogueError>;
    /// Moves still in `Moving`.
    fn moving(&self) -> Result<Vec<Move>, CatalogueError>;
    /// A session's deletion mark.
    fn deletion(&self, session_id: &str) -> Result<Deletion, CatalogueError>;
    /// Every marked session.
    fn deleting(&self) -> Result<Vec<String>, CatalogueError>;
    /// The delegate of a pair.
    fn delegate_for(
        &self,
        spawner: &str,
        parent_session: &str,
    ) -> Result<Option<Delegate>, CatalogueError>;
    /// The pair a session is the delegate of.
    fn delegate_of(&self, session_id: &str) -> Result<Option<Delegate>, CatalogueError>;
    /// How many delegate rows a spawner holds.
    fn delegates_held(&self, spawner: &str) -> Result<u32, CatalogueError>;
    /// The catalogue revision.
    fn revision(&self) -> Result<u64, CatalogueError>;
}

/// The memory backend: the pure state behind a mutex.
///
/// Nothing in it is durable. [`MemoryCatalogue::reopen`] stands in for a
/// process reopening a file: a second handle over the same state.
#[derive(Debug, Default)]
pub struct MemoryCatalogue {
    state: std::sync::Arc<Mutex<CatalogueState>>,
}

impl MemoryCatalogue {
    /// An empty catalogue.
    pub fn new() -> Self {
        MemoryCatalogue::default()
    }

    /// A second handle over this catalogue's state: the memory backend's
    /// stand-in for reopening a file. It keeps the state across the
    /// "reopen" and survives no process exit.
    #[must_use]
    pub fn reopen(&self) -> Self {
        MemoryCatalogue {
            state: std::sync::Arc::clone(&self.state),
        }
    }

    /// A copy of the whole state.
    pub fn snapshot(&self) -> Result<CatalogueState, CatalogueError> {
        self.read(Clone::clone)
    }

    fn read<T>(&self, f: impl FnOnce(&CatalogueState) -> T) -> Result<T, CatalogueError> {
        let g = self
            .state
            .lock()
            .map_err(|_| CatalogueError::BackendFault {
                reason: "memory catalogue mutex poisoned".into(),
            })?;
        Ok(f(&g))
    }
}

impl Catalogue for MemoryCatalogue {
    fn apply(&self, req: &Request) -> Result<Outcome, CatalogueError> {
        let mut g = self
            .state
            .lock()
            .map_err(|_| CatalogueError::BackendFault {
                reason: "memory catalogue mutex poisoned".into(),
            })?;
        let d = decide(&g, req)?;
        effect::apply_all(&mut g, &d.effects);
        Ok(d.outcome)
    }
    fn get(&self, session_id: &str) -> Result<Option<Registration>, CatalogueError> {
        self.read(|s| s.get(session_id))
    }
    fn by_request_key(&self, key: &str) -> Result<Option<Registration>, CatalogueError> {
        self.read(|s| s.by_request_key(key))
    }
    fn page(
        &self,
        visibility: Visibility,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page, CatalogueError> {
        self.read(|s| s.page(visibility, after, limit))
    }
    fn workspace_default(&self, workspace: &str) -> Result<Option<String>, CatalogueError> {
        self.read(|s| s.workspace_default(workspace))?
    }
    fn recent_folders(&self) -> Result<Vec<Recent>, CatalogueError> {
        self.read(CatalogueState::recent_folders)
    }
    fn custody(&self, session_id: &str) -> Result<Custody, CatalogueError> {
        self.read(|s| s.custody(session_id))?
    }
    fn moving(&self) -> Result<Vec<Move>, CatalogueError> {
        self.read(CatalogueState::moving)
    }
    fn deletion(&self, session_id: &str) -> Result<Deletion, CatalogueError> {
        self.read(|s| s.deletion(session_id))?
    }
    fn deleting(&self) -> Result<Vec<String>, CatalogueError> {
        self.read(CatalogueState::deleting)
    }
    fn delegate_for(
        &self,
        spawner: &str,
        parent_session: &str,
    ) -> Result<Option<Delegate>, CatalogueError> {
        self.read(|s| s.delegate_for(spawner, parent_session))?
    }
    fn delegate_of(&self, session_id: &str) -> Result<Option<Delegate>, CatalogueError> {
        self.read(|s| s.delegate_of(session_id))
    }
    fn delegates_held(&self, spawner: &str) -> Result<u32, CatalogueError> {
        self.read(|s| s.delegates_held(spawner))
    }
    fn revision(&self) -> Result<u64, CatalogueError> {
        self.read(|s| s.revision)
    }
}

impl MemoryCatalogue {
    fn access_read<T>(&self, f: impl FnOnce(&CatalogueState) -> T) -> Result<T, AccessError> {
        let g = self.state.lock().map_err(|_| AccessError::BackendFault {
            reason: "memory catalogue mutex poisoned".into(),
        })?;
        Ok(f(&g))
    }
}

impl Access for MemoryCatalogue {
    fn apply_access(&self, req: &AccessRequest) -> Result<AccessOutcome, AccessError> {
        let mut g = self.state.lock().map_err(|_| AccessError::BackendFault {
            reason: "memory catalogue mutex poisoned".into(),
        })?;
        let d = access::decide(&g, req)?;
        for e in &d.effects {
            access::effect::apply(&mut g, e);
        }
        Ok(d.outcome)
    }
    fn owner(&self) -> Result<Option<(String, Option<String>)>, AccessError> {
        self.access_read(|s| s.access.owner())
    }
    fn authenticate(&self, digest: &Digest, now_ms: u64) -> Result<Option<Authority>, AccessError> {
        self.access_read(|s| s.access.authenticate(digest, now_ms))
    }
    fn authorization(
        &self,
        digest: &Digest,
        session_id: &str,
        now_ms: u64,
    ) -> Result<Option<Authorization>, AccessError> {
        self.access_read(|s| s.authorization(digest, session_id, now_ms))
    }
    fn claim_known(&self, claim: &ClaimDigest) -> Result<bool, AccessError> {
        self.access_read(|s| s.access.claim_known(claim))
    }
    fn principals_page(
        &self,
        after: Option<&str>,
        limit: usize,
        now_ms: u64,
    ) -> Result<ListingPage, AccessError> {
        self.access_read(|s| s.access.principals_page(after, limit, now_ms))
    }
    fn memberships_page(
        &self,
        principal: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<MembershipPage, AccessError> {
        self.access_read(|s| s.memberships_page(principal, after, limit))?
    }
    fn session_members_page(
        &self,
        session_id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<SessionMemberPage, AccessError> {
        self.access_read(|s| s.session_members_page(session_id, after, limit))?
    }
    fn signins_page(
        &self,
        principal: &str,
        after: Option<&str>,
        limit: usize,
        now_ms: u64,
    ) -> Result<SigninPage, AccessError> {
        self.access_read(|s| s.access.signins_page(principal, after, limit, now_ms))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deletions_are_remembered_up_to_their_bound_and_the_oldest_is_forgotten() {
        let mut s = CatalogueState::default();
        let n = DELETED_KEPT + 1;
        for i in 0..n {
            let id = format!("s{i}");
            let reserve = Request::Reserve {
                session_id: id.clone(),
                creation: Creation::local(&format!("k{i}"), "name", "/w"),
                now: 1,
            };
            s = decide(&s, &reserve).unwrap().next;
            s = decide(&s, &Request::Delete { session_id: id })
                .unwrap()
                .next;
        }
        assert_eq!(s.deleted.len(), DELETED_KEPT);
        let retry = |s: &CatalogueState, id: &str| {
            decide(
                s,
                &Request::Delete {
                    session_id: id.into(),
                },
            )
            .map(|d| (d.outcome, d.effects.is_empty()))
        };
        // The newest is remembered: its retry is answered and writes nothing.
        assert_eq!(
            retry(&s, &format!("s{}", n - 1)),
            Ok((Outcome::Done { changed: false }, true))
        );
        // The oldest was forgotten: its retry is NotFound.
        assert!(matches!(
            retry(&s, "s0"),
            Err(CatalogueError::NotFound { .. })
        ));
    }

    #[test]
    fn a_stored_session_decodes_only_when_every_grammar_holds() {
        let good = StoredSession {
            id: "s-1".into(),
            creation_key: "k1".into(),
            name: "name".into(),
            workspace: "ws".into(),
            executor: "exec".into(),
            pool: "pool".into(),
            created_at_ms: 7,
            state: "saved".into(),
            name_override: Some("shown".into()),
            archived: true,
            subtitle: Some("a\nb".into()),
            move_row: None,
            ..StoredSession::default()
        };
        let (id, row) = good.clone().decode().unwrap();
        assert_eq!(id, "s-1");
        // A pooled row keeps its seeded executor; absent fields are empty.
        assert_eq!(row.creation.executor.as_deref(), Some("exec"));
        assert_eq!(row.creation.profile, None);
        assert_eq!(row.state, InitState::Saved);
        assert_eq!(row.visibility, Visibility::Archived);
        assert_eq!(row.custody, Custody::Resident);
        // A subtitle that breaks its rule reads as none; nothing else does.
        let subtitle = StoredSession {
            subtitle: Some("\u{200b}".into()),
            ..good.clone()
        };
        assert_eq!(subtitle.decode().unwrap().1.subtitle, None);
        let refused = |s: StoredSession, what: &str| match s.decode() {
            Err(CatalogueError::Invalid { what: w, detail }) => {
                assert!(w.contains(what), "{w}: {detail}");
                assert!(
                    detail.contains("s-1") || w == "stored session id",
                    "{detail}"
                );
            }
            other => panic!("{other:?}"),
        };
        refused(
            StoredSession {
                id: "s/1".into(),
                ..good.clone()
            },
            "session id",
        );
        refused(
            StoredSession {
                state: "made".into(),
                ..good.clone()
            },
            "state",
        );
        refused(
            StoredSession {
                executor: "bad name".into(),
                ..good.clone()
            },
            "executor",
        );
        refused(
            StoredSession {
                pool: String::new(),
                workspace: "relative".into(),
                executor: String::new(),
                ..good.clone()
            },
            "workspace",
        );
        refused(
            StoredSession {
                move_row: Some(("flying".into(), "op".into(), "peer".into())),
                ..good.clone()
            },
            "move row",
        );
        refused(
            StoredSession {
                name_override: Some(String::new()),
                ..good
            },
            "",
        );
    }

    fn reserve(id: &str, key: &str) -> Request {
        Request::Reserve {
            session_id: id.into(),
            creation: Creation::local(key, "name", "/w"),
            now: 1,
        }
    }

    #[test]
    fn reserve_is_idempotent_and_retries_that_differ_conflict() {
        let s = CatalogueState::default();
        let d = decide(&s, &reserve("s1", "k1")).unwrap();
        assert_eq!(d.next.revision, 1);
        let again = decide(&d.next, &reserve("s2", "k1")).unwrap();
        assert_eq!(again.next, d.next);
        match again.outcome {
            Outcome::Reserved {
                registration,
                created,
            } => {
                assert!(!created);
                assert_eq!(registration.session_id, "s1");
            }
            other => panic!("{other:?}"),
        }
        let mut other = Creation::local("k1", "name", "/w");
        other.profile = Some("fast".into());
        let e = decide(
            &d.next,
            &Request::Reserve {
                session_id: "s3".into(),
                creation: other,
                now: 2,
            },
        )
        .unwrap_err();
        assert_eq!(e.reason(), "Conflict");
    }

    #[test]
    fn footprint_of_a_partial_state_answers_alike() {
        // A state missing rows outside the footprint decides the same way.
        let mut full = CatalogueState::default();
        for (id, key) in [("a", "ka"), ("b", "kb"), ("c", "kc")] {
            full = decide(&full, &reserve(id, key)).unwrap().next;
        }
        let req = Request::Rename {
            session_id: "b".into(),
            name: "B".into(),
        };
        let fp = footprint(&req);
        let mut part = CatalogueState {
            revision: full.revision,
            ..CatalogueState::default()
        };
        for id in &fp.sessions {
            if let Some(r) = full.sessions.get(id) {
                part.sessions.insert(id.clone(), r.clone());
            }
        }
        let a = decide(&full, &req).unwrap();
        let b = decide(&part, &req).unwrap();
        assert_eq!(a.outcome, b.outcome);
        assert_eq!(a.next.sessions.get("b"), b.next.sessions.get("b"));
        assert_eq!(a.next.revision, b.next.revision);
    }

    /// A request from a small alphabet of sessions, spawners and folders,
    /// so that streams collide on the same rows.
    fn arb_request() -> impl proptest::strategy::Strategy<Value = Request> {
        use proptest::prelude::*;
        let id = || (0u8..4).prop_map(|i| format!("s{i}"));
        prop_oneof![
            (id(), 0u8..3, 0u64..50).prop_map(|(session_id, k, now)| Request::Reserve {
                session_id,
                creation: Creation::local(&format!("k{k}"), "name", "/w"),
                now,
            }),
            id().prop_map(|session_id| Request::Confirm { session_id }),
            (id(), "[a-z ]{0,8}")
                .prop_map(|(session_id, name)| Request::Rename { session_id, name }),
            (id(), any::<bool>()).prop_map(|(session_id, archived)| Request::SetVisibility {
                session_id,
                visibility: if archived {
                    Visibility::Archived
                } else {
                    Visibility::Active
                },
            }),
            (id(), "[a-z]{1,6}")
                .prop_map(|(session_id, prompt)| Request::SeedSubtitle { session_id, prompt }),
            id().prop_map(|session_id| Request::SetWorkspaceDefault {
                workspace: "/w".into(),
                session_id,
            }),
            (0u8..3).prop_map(|f| Request::RememberFolder {
                path: format!("/f{f}")
            }),
            (0u64..4).prop_map(|id| Request::ForgetFolder { id }),
            id().prop_map(|session_id| Request::MarkDeleting { session_id }),
            id().prop_map(|session_id| Request::UnmarkDeleting { session_id }),
            (0u8..2, 0u8..2, id(), 0u64..50).prop_map(|(s, p, session_id, now)| {
                Request::ClaimDelegate {
                    spawner: format!("spawner-{s}"),
                    parent_session: format!("s{p}"),
                    session_id,
                    now,
                    limit: 2,
                }
            }),
            id().prop_map(|session_id| Request::Delete { session_id }),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// A decision taken over the rows a request loads, its effects
        /// applied to the whole stored state, leaves the state a decision
        /// over the whole state reaches: what a SQL backend does (load a
        /// footprint, apply effects to its tables) is what the memory
        /// backend does. Each decision's effects also turn its own loaded
        /// rows into its `next`.
        #[test]
        fn effects_over_a_footprint_reach_the_whole_decision(
            reqs in proptest::collection::vec(arb_request(), 0..60),
        ) {
            let mut full = CatalogueState::default();
            for req in &reqs {
                let part = footprint(req).partial(&full);
                match (decide(&full, req), decide(&part, req)) {
                    (Ok(w), Ok(p)) => {
                        proptest::prop_assert_eq!(&w.outcome, &p.outcome);
                        let mut own = part.clone();
                        effect::apply_all(&mut own, &p.effects);
                        proptest::prop_assert_eq!(&own, &p.next);
                        let mut applied = full.clone();
                        effect::apply_all(&mut applied, &p.effects);
                        proptest::prop_assert_eq!(&applied, &w.next, "{:?}", req);
                        full = applied;
                    }
                    (Err(w), Err(p)) => proptest::prop_assert_eq!(w, p),
                    (w, p) => proptest::prop_assert!(false, "{:?}: {:?} vs {:?}", req, w, p),
                }
            }
        }

        /// Every state a stream of requests reaches has a written form
        /// (delegates keyed by pairs, access maps keyed by digests) that
        /// JSON and a binary format give back unchanged.
        #[test]
        fn every_reached_state_round_trips(
            reqs in proptest::collection::vec(arb_request(), 0..60),
        ) {
            let mut state = CatalogueState::default();
            for req in &reqs {
                if let Ok(d) = decide(&state, req) {
                    state = d.next;
                }
                proptest::prop_assert_eq!(crate::pairs::round_trips(&state), Ok(()));
            }
        }
    }
}
