//! The execution ledger: what ran, and what must never run twice.
//!
//! One ledger per executor holds **scopes** (one per session: its workspace,
//! incarnation, state and attach token) and **calls** (keyed by
//! `(session, op, step, source_index, incarnation)`). A call is admitted at
//! most once per key: the runtime asks [`Request::Admit`] before it starts a
//! program and runs it only on [`Admission::Fresh`]. Everything else here
//! exists so that no delivery order of `Run`, `Stop`, `Ack` and recovery's
//! fences can make a key start twice:
//!
//! - `admit` compares the request's incarnation **and attach token by value**
//!   against the stored scope, in the transaction that inserts the row, so a
//!   stale runtime's `Run` is refused by content whatever order the network
//!   delivered it in;
//! - `query_or_fence` settles a missing row (a `terminal` row carrying the
//!   caller's did-not-start outcome, tool [`Tool::fence`]) in the
//!   transaction that finds it; it checks the scope's incarnation, not the
//!   token, and skips the byte budget;
//! - `stop_or_fence` turns an `admitted` row of the same tool `unknown`
//!   (`Stopped`) and bars a missing key by inserting it `unknown` with no
//!   bytes (`Barred`); anything else is `Untouched`;
//! - `ack` deletes a `terminal` or `unknown` row, releases its bytes and
//!   writes a **tombstone**: the key reads as [`CallState::Acked`] and is never
//!   `Fresh` again. Tombstones hold no bytes and are dropped exactly when the
//!   scope reopens, when `finish_close` records `AllRetired`, and in
//!   `release`; a scope closed with unknown cleanup keeps them;
//! - `open` is restart recovery: every `admitted` row becomes `unknown` and
//!   nothing turns one back.
//!
//! ## Scopes
//!
//! A session has one scope; `attach` refuses a second workspace. The first
//! `attach` creates the scope `Open` at the requested incarnation; an
//! `attach` at the stored incarnation replaces the attach token of an `Open`
//! scope (this is how a restarted process takes over) and answers the
//! session's unacknowledged `terminal` and `unknown` keys, so a lost ack
//! cannot leak a row. Reopen needs `Closed(AllRetired)` and exactly
//! `incarnation + 1`; `UnknownCleanup` never reopens by itself: `release`
//! (an operator's act, recorded as a [`Release`] row) is its one exit.
//! `begin_close` moves `Open → Closing`; `finish_close` moves
//! `Closing → Closed(AllRetired)` when no `terminal` or `unknown` row of the
//! scope's incarnation is left, else `Closed(UnknownCleanup(n))` with `n` the
//! number of unretired rows. A call still `admitted` at close is the actor's
//! to settle (`finish` or `mark_unknown`); `finish_close` does not look for
//! it. At most [`Limits::max_unclean_scopes`] scopes may be anything but
//! `Closed(AllRetired)`; a clean close frees its slot at once.
//!
//! ## The byte budget
//!
//! `sum(outcome_bytes)` over `admitted` rows (their reservation,
//! [`Limits::reservation_bytes`]) and `terminal` rows (the outcome's real
//! size), plus the new reservation, must not exceed
//! [`Limits::max_ledger_bytes`]. `finish` shrinks a reservation to the
//! outcome's size (an outcome larger than its reservation is refused, so
//! `finish` never grows the sum); `ack`, `mark_unknown` and `stop_or_fence`
//! release it. Fences are exempt (one short outcome per orphaned call).
//!
//! ## Integrity
//!
//! A `terminal` row stores its outcome, the outcome's SHA-256 and its size;
//! every read of the row re-checks both ([`LedgerError::DigestMismatch`]).
//! A shell decodes its rows totally (a state that fits no variant is
//! [`LedgerError::MalformedRow`]) and leaves the digest check to core.
//!
//! ## Retries
//!
//! A caller whose request failed ambiguously (a lost reply) retries the
//! same request. [`Ledger::admit_once`] carries the admission's own
//! [`RequestId`], which the `admitted` row keeps: its retry is answered
//! `Fresh` again, writing nothing, while that row stands — the answer the
//! lost reply carried. A `finish` whose row is already `terminal` with
//! exactly its outcome (under a program's tool, never a fence's) is
//! answered `Finished`. `mark_unknown`, `begin_close`, `finish_close` and a
//! same-token `attach` were idempotent already. Once anything else moved
//! the row or the scope on, a retry is decided like any other request.
//!
//! ## Shape: footprint, view, decision, effects
//!
//! A request touches few rows, and a shell should not load a whole ledger to
//! admit one key. So, as the session store's commit does, a request first
//! names its [`Footprint`] (the scope, the one call key, the session's rows,
//! every `admitted` row, the two totals, the release log — each only when
//! the request needs it). The shell opens its transaction (`BEGIN IMMEDIATE`
//! for a write), loads exactly that into a [`View`] (plain data), calls
//! [`decide`] — pure, total, deterministic — and writes the decision's
//! [`Effect`]s back in the same transaction. A refusal writes nothing.
//!
//! The footprint is per request rather than "the scope's rows" because the
//! hot path (`admit`, `finish`, `ack`) touches one key, and the two totals
//! the rules need (`ledger_bytes`, `unclean_scopes`) are ledger-wide
//! aggregates either way; only `attach`, `finish_close`, `admitted` and
//! `unacked` read a session's rows, and only `open` reads every `admitted`
//! row. [`LedgerState`] is the whole ledger as plain data (what the memory
//! backend and the models keep); [`LedgerState::view`] loads a view from it
//! and [`LedgerState::apply`] writes effects back, and [`step`] does both
//! around [`decide`].

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use thiserror::Error;

use crate::Millis;

mod memory;
mod stored;
#[cfg(test)]
mod tests;

pub use memory::{MemoryLedger, REASON_POISONED};
pub use stored::{StoredCall, StoredRelease, StoredScope, MAX_STORED_OUTCOME_BYTES};

/// A scope's incarnation: bumped by exactly one on each reopen.
pub type Incarnation = u64;

/// A SHA-256 digest.
pub type Digest = [u8; 32];

/// The longest name (session, workspace, op, tool, token) accepted, in bytes.
pub const MAX_NAME_LEN: usize = 256;

/// The default [`Limits::max_unclean_scopes`].
pub const DEFAULT_MAX_UNCLEAN_SCOPES: u64 = 16;
/// The default [`Limits::max_ledger_bytes`]: 512 MiB.
pub const DEFAULT_MAX_LEDGER_BYTES: u64 = 512 * 1024 * 1024;
/// The default [`Limits::reservation_bytes`]: 16 MiB per live call.
pub const DEFAULT_RESERVATION_BYTES: u64 = 16 * 1024 * 1024;

/// The tool name of a row `query_or_fence` inserted.
pub const FENCE_TOOL: &str = "(fence)";

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Validates and wraps a name: 1..=[`MAX_NAME_LEN`] bytes, no
            /// control characters.
            pub fn new(name: impl Into<String>) -> Result<Self, LedgerError> {
                let name = name.into();
                if name.is_empty()
                    || name.len() > MAX_NAME_LEN
                    || name.chars().any(char::is_control)
                {
                    return Err(LedgerError::InvalidName {
                        what: $what.to_owned(),
                        len: name.len(),
                    });
                }
                Ok($name(name))
            }

            /// The name.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = LedgerError;
            fn try_from(value: String) -> Result<Self, Self::Error> {
                $name::new(value)
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> Self {
                value.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

name_type!(
    /// A session id: the scope's key.
    SessionId,
    "session"
);
name_type!(
    /// The workspace a session's scope belongs to.
    WorkspaceId,
    "workspace"
);
name_type!(
    /// The planner's operation id, part of a call [`Key`].
    OpId,
    "op"
);
name_type!(
    /// The tool a call runs (a program, a tool call, or [`FENCE_TOOL`]).
    Tool,
    "tool"
);
name_type!(
    /// The attach token of a scope: compared **by value** on every `admit`.
    AttachToken,
    "attach-token"
);
name_type!(
    /// The caller's id for one admission: chosen fresh for each call it
    /// means to start, and sent again **only** when it retries that same
    /// admission (after a lost reply, a timeout, a reconnect). The row keeps
    /// it, so the retry is recognised as the request that inserted the row
    /// and answered `Fresh` again — the answer the lost reply carried —
    /// while any other admission of the key is answered `Existing`.
    RequestId,
    "request"
);

impl Tool {
    /// The tool of a row `query_or_fence` inserted: `(fence)`.
    pub fn fence() -> Tool {
        Tool(FENCE_TOOL.to_owned())
    }
}

/// The planner's call identity.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Key {
    /// The session (and so the scope) the call belongs to.
    pub session: SessionId,
    /// The planner's op id.
    pub op: OpId,
    /// The step within the op.
    pub step: u32,
    /// The source index within the step.
    pub source_index: u32,
    /// The scope incarnation the call was planned in.
    pub incarnation: Incarnation,
}

/// How a scope ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum CloseOutcome {
    /// Every call was retired: the scope may reopen, its slot is free.
    AllRetired,
    /// `n` calls were left `terminal` or `unknown`: only `release` ends it.
    UnknownCleanup(u64),
}

/// A scope's lifecycle state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ScopeState {
    /// Attached: calls may be admitted.
    Open,
    /// `begin_close` ran: nothing new is admitted.
    Closing,
    /// `finish_close` (or `release`) ran.
    Closed(CloseOutcome),
}

impl ScopeState {
    /// Whether the scope takes an unclean slot (anything but
    /// `Closed(AllRetired)`).
    pub fn is_unclean(self) -> bool {
        self != ScopeState::Closed(CloseOutcome::AllRetired)
    }
}

/// One session's scope row.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Scope {
    /// The session.
    pub session: SessionId,
    /// Its workspace (fixed for the scope's life).
    pub workspace: WorkspaceId,
    /// The current incarnation.
    pub incarnation: Incarnation,
    /// Its state.
    pub state: ScopeState,
    /// The token of the last attach.
    pub attach_token: AttachToken,
}

/// A call row's stored state (a tombstone is not a row: see
/// [`LedgerState::acks`]).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum RowState {
    /// Started; `reserved` bytes count against the budget.
    Admitted {
        /// The reservation.
        reserved: u64,
        /// The [`RequestId`] of the admission that inserted the row, if it
        /// carried one.
        #[serde(default)]
        request: Option<RequestId>,
    },
    /// Finished (or fenced) with an outcome.
    Terminal {
        /// The outcome.
        outcome: Vec<u8>,
        /// SHA-256 of the outcome, as recorded.
        digest: Digest,
        /// The outcome's size, as recorded.
        bytes: u64,
    },
    /// Lost, stopped or barred: nobody knows or ever will know the outcome.
    Unknown,
}

/// One call row.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CallRow {
    /// The tool the call runs.
    pub tool: Tool,
    /// Its state.
    pub state: RowState,
}

impl CallRow {
    /// The bytes this row holds against the budget.
    pub fn outcome_bytes(&self) -> u64 {
        match &self.state {
            RowState::Admitted { reserved, .. } => *reserved,
            RowState::Terminal { bytes, .. } => *bytes,
            RowState::Unknown => 0,
        }
    }

    /// A terminal row for `outcome`, its digest and size computed here.
    pub fn terminal(tool: Tool, outcome: Vec<u8>) -> CallRow {
        let digest = sha256(&outcome);
        let bytes = outcome.len() as u64;
        CallRow {
            tool,
            state: RowState::Terminal {
                outcome,
                digest,
                bytes,
            },
        }
    }

    /// The row read as a [`CallState`], checking a terminal outcome against
    /// its recorded digest and size.
    pub fn read(&self, key: &Key) -> Result<CallState, LedgerError> {
        match &self.state {
            RowState::Admitted { .. } => Ok(CallState::Admitted),
            RowState::Unknown => Ok(CallState::Unknown),
            RowState::Terminal {
                outcome,
                digest,
                bytes,
            } => {
                if outcome.len() as u64 != *bytes || sha256(outcome) != *digest {
                    return Err(LedgerError::DigestMismatch { key: key.clone() });
                }
                Ok(CallState::Terminal(outcome.clone()))
            }
        }
    }
}

/// SHA-256 of `data`.
pub fn sha256(data: &[u8]) -> Digest {
    Sha256::digest(data).into()
}

/// A call's state as answered.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum CallState {
    /// Started and not settled.
    Admitted,
    /// Settled with this outcome.
    Terminal(Vec<u8>),
    /// Settled, outcome unknown.
    Unknown,
    /// Acknowledged: the row is gone, its tombstone remains.
    Acked,
}

impl CallState {
    /// The state's name, without the outcome.
    pub fn kind(&self) -> CallKind {
        match self {
            CallState::Admitted => CallKind::Admitted,
            CallState::Terminal(_) => CallKind::Terminal,
            CallState::Unknown => CallKind::Unknown,
            CallState::Acked => CallKind::Acked,
        }
    }
}

/// A [`CallState`] without its outcome (for errors).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum CallKind {
    /// `admitted`.
    Admitted,
    /// `terminal`.
    Terminal,
    /// `unknown`.
    Unknown,
    /// Acknowledged.
    Acked,
}

impl std::fmt::Display for CallKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CallKind::Admitted => "admitted",
            CallKind::Terminal => "terminal",
            CallKind::Unknown => "unknown",
            CallKind::Acked => "acked",
        })
    }
}

/// `query`'s answer.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Lookup {
    /// No row and no tombstone.
    Missing,
    /// The call's state.
    Found(CallState),
}

/// `admit`'s answer.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Admission {
    /// Inserted `admitted`: the caller may start the call, exactly once.
    Fresh,
    /// The key was already taken: never start it.
    Existing(CallState),
}

/// `query_or_fence`'s answer.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Fencing {
    /// A row (or tombstone) existed; nothing was written.
    Standing(CallState),
    /// No row existed: a `terminal` did-not-start row was inserted.
    Fenced,
}

/// `stop_or_fence`'s answer.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Stopping {
    /// An `admitted` row of the tool became `unknown`; its bytes are released.
    Stopped,
    /// No row existed: the key was inserted `unknown`, so it never starts.
    Barred,
    /// Another tool's running row, or a settled one: nothing was written.
    Untouched(CallState),
}

/// The attach reply's two key lists, also readable alone through `unacked`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Unacked {
    /// The session's `terminal` keys, ascending.
    pub terminal: Vec<Key>,
    /// The session's `unknown` keys, ascending.
    pub unknown: Vec<Key>,
}

/// `attach`'s answer.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Attached {
    /// The scope as stored after the attach.
    pub scope: Scope,
    /// The session's unacknowledged keys.
    pub unacked: Unacked,
}

/// An operator's release of an unclean scope (the `scope_release` row).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Release {
    /// The session.
    pub session: SessionId,
    /// Its workspace.
    pub workspace: WorkspaceId,
    /// The incarnation released.
    pub incarnation: Incarnation,
    /// The state it was released from.
    pub was: ScopeState,
    /// The operator's clock at release.
    pub released_at_ms: Millis,
}

/// The ledger's bounds, passed on every call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Limits {
    /// Scopes that may be anything but `Closed(AllRetired)` at once.
    pub max_unclean_scopes: u64,
    /// The byte budget.
    pub max_ledger_bytes: u64,
    /// What one admitted call reserves, and the largest outcome it may
    /// store (never more than [`MAX_STORED_OUTCOME_BYTES`], whatever this
    /// says).
    pub reservation_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_unclean_scopes: DEFAULT_MAX_UNCLEAN_SCOPES,
            max_ledger_bytes: DEFAULT_MAX_LEDGER_BYTES,
            reservation_bytes: DEFAULT_RESERVATION_BYTES,
        }
    }
}

/// A request to the ledger. Every outside input is here.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Request {
    /// Restart recovery (what opening the ledger does): every `admitted`
    /// row becomes `unknown`.
    Open,
    /// Attach a session: create, take over (replace the token) or reopen
    /// its scope.
    Attach {
        /// The session.
        session: SessionId,
        /// Its workspace.
        workspace: WorkspaceId,
        /// The incarnation the caller attaches at.
        incarnation: Incarnation,
        /// The caller's token.
        token: AttachToken,
    },
    /// Admit a call before starting it.
    Admit {
        /// The call.
        key: Key,
        /// The tool it runs.
        tool: Tool,
        /// The caller's attach token.
        token: AttachToken,
        /// The admission's own id, when the caller may retry it.
        #[serde(default)]
        request: Option<RequestId>,
    },
    /// Settle an `admitted` call with its outcome.
    Finish {
        /// The call.
        key: Key,
        /// The outcome (at most [`Limits::reservation_bytes`]).
        outcome: Vec<u8>,
    },
    /// Settle an `admitted` call as `unknown`.
    MarkUnknown {
        /// The call.
        key: Key,
    },
    /// Read a call.
    Query {
        /// The call.
        key: Key,
    },
    /// Read a call, settling a missing one as did-not-start.
    QueryOrFence {
        /// The call.
        key: Key,
        /// The did-not-start outcome written for a missing row.
        outcome: Vec<u8>,
    },
    /// The ledger half of `StopExecution`.
    StopOrFence {
        /// The call.
        key: Key,
        /// The program's tool.
        tool: Tool,
    },
    /// The keys of a session's `admitted` rows of one tool.
    Admitted {
        /// The session.
        session: SessionId,
        /// The tool.
        tool: Tool,
    },
    /// Retire a `terminal` or `unknown` row, leaving a tombstone.
    Ack {
        /// The call.
        key: Key,
    },
    /// `Open → Closing`.
    BeginClose {
        /// The session.
        session: SessionId,
        /// The caller's incarnation.
        incarnation: Incarnation,
    },
    /// `Closing → Closed(outcome)`.
    FinishClose {
        /// The session.
        session: SessionId,
        /// The caller's incarnation.
        incarnation: Incarnation,
    },
    /// An operator moves a `Closing` or `Closed(UnknownCleanup)` scope to
    /// `Closed(AllRetired)`.
    Release {
        /// The session.
        session: SessionId,
        /// The operator's clock.
        now: Millis,
    },
    /// The release log.
    Releases,
    /// A session's scope.
    Scope {
        /// The session.
        session: SessionId,
    },
    /// A session's unacknowledged keys; changes nothing.
    Unacked {
        /// The session.
        session: SessionId,
    },
}

impl Request {
    /// Whether the request may write (a shell runs it in `BEGIN IMMEDIATE`).
    pub fn writes(&self) -> bool {
        !matches!(
            self,
            Request::Query { .. }
                | Request::Admitted { .. }
                | Request::Releases
                | Request::Scope { .. }
                | Request::Unacked { .. }
        )
    }

    /// The facts the request's decision reads.
    pub fn footprint(&self) -> Footprint {
        let mut fp = Footprint::default();
        match self {
            Request::Open => fp.all_admitted = true,
            Request::Attach { session, .. } => {
                fp.scope = Some(session.clone());
                fp.session_calls = Some(session.clone());
                fp.totals = true;
            }
            Request::Admit { key, .. } => {
                fp.scope = Some(key.session.clone());
                fp.key = Some(key.clone());
                fp.totals = true;
            }
            Request::Finish { key, .. }
            | Request::MarkUnknown { key }
            | Request::Query { key }
            | Request::Ack { key } => fp.key = Some(key.clone()),
            Request::QueryOrFence { key, .. } | Request::StopOrFence { key, .. } => {
                fp.scope = Some(key.session.clone());
                fp.key = Some(key.clone());
            }
            Request::Admitted { session, .. } | Request::Unacked { session } => {
                fp.session_calls = Some(session.clone());
            }
            Request::BeginClose { session, .. }
            | Request::Release { session, .. }
            | Request::Scope { session } => fp.scope = Some(session.clone()),
            Request::FinishClose { session, .. } => {
                fp.scope = Some(session.clone());
                fp.session_calls = Some(session.clone());
            }
            Request::Releases => fp.releases = true,
        }
        fp
    }
}

/// What a request's decision reads; a shell loads exactly this.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Footprint {
    /// The scope row of this session.
    pub scope: Option<SessionId>,
    /// The call row and tombstone of this key.
    pub key: Option<Key>,
    /// Every call row of this session (all incarnations).
    pub session_calls: Option<SessionId>,
    /// Every `admitted` row of the ledger.
    pub all_admitted: bool,
    /// [`View::ledger_bytes`] and [`View::unclean_scopes`].
    pub totals: bool,
    /// The release log.
    pub releases: bool,
}

/// The facts a [`Footprint`] names, loaded by a shell (plain data).
/// Fields the footprint does not name are left empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct View {
    /// The scope row, if it exists.
    pub scope: Option<Scope>,
    /// The key's call row, if it exists.
    pub call: Option<CallRow>,
    /// Whether the key has a tombstone.
    pub acked: bool,
    /// The session's call rows, ascending by key.
    pub session_calls: Vec<(Key, CallRow)>,
    /// Every `admitted` row, ascending by key.
    pub admitted: Vec<(Key, CallRow)>,
    /// `sum(outcome_bytes)` over `admitted` and `terminal` rows.
    pub ledger_bytes: u64,
    /// Scopes that are anything but `Closed(AllRetired)`.
    pub unclean_scopes: u64,
    /// The release log, in insertion order.
    pub releases: Vec<Release>,
}

/// One row write of a decision, applied in order. Each is idempotent on
/// the row it names ([`LedgerState::apply`] is the reference).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Effect {
    /// Insert or replace the session's scope row.
    PutScope(Scope),
    /// Insert or replace a call row.
    PutCall(Key, CallRow),
    /// Delete a call row; nothing when it is absent.
    DeleteCall(Key),
    /// Write the key's tombstone: at most one per key (writing it again
    /// leaves one).
    PutAck(Key),
    /// Drop every tombstone of the session (`forget_acks`), of every
    /// incarnation; nothing when it has none.
    ForgetAcks(SessionId),
    /// Append a release record after the existing ones (the log keeps
    /// insertion order).
    PutRelease(Release),
}

/// A successful request's answer.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Answer {
    /// `open`: how many `admitted` rows became `unknown`.
    Recovered(u64),
    /// `attach`.
    Attached(Attached),
    /// `admit`.
    Admission(Admission),
    /// `finish`.
    Finished,
    /// `mark_unknown` (also when the row already was `unknown`).
    MarkedUnknown,
    /// `query`.
    Lookup(Lookup),
    /// `query_or_fence`.
    Fencing(Fencing),
    /// `stop_or_fence`.
    Stopping(Stopping),
    /// `admitted`: keys ascending.
    Admitted(Vec<Key>),
    /// `ack`: `true` when the key already had a tombstone.
    Acked {
        /// The key was already acknowledged; nothing was written.
        already: bool,
    },
    /// `begin_close`: the scope after.
    Closing(Scope),
    /// `finish_close`: how the scope ended.
    Closed(CloseOutcome),
    /// `release`: the record written.
    Released(Release),
    /// `releases`.
    Releases(Vec<Release>),
    /// `scope`.
    Scope(Option<Scope>),
    /// `unacked`.
    Unacked(Unacked),
}

/// A decision: the answer and the writes to apply in the same transaction.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Decision {
    /// What to answer.
    pub answer: Answer,
    /// What to write, in order; empty for a read.
    pub effects: Vec<Effect>,
}

/// The ledger's one closed error type. A refusal writes nothing.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error, Serialize, Deserialize)]
pub enum LedgerError {
    /// The request's incarnation is not the scope's.
    #[error("StaleIncarnation: the scope is at incarnation {stored}, the request at {requested}")]
    StaleIncarnation {
        /// The scope's incarnation.
        stored: Incarnation,
        /// The request's.
        requested: Incarnation,
    },
    /// The request's attach token is not the scope's.
    #[error("StaleToken: the attach token is not the scope's current one")]
    StaleToken,
    /// The scope is closed.
    #[error("ScopeNotOpen: the scope is {state:?}")]
    ScopeNotOpen {
        /// Its state.
        state: ScopeState,
    },
    /// The scope is closing: nothing new is admitted.
    #[error("ScopeClosing: the scope is closing")]
    ScopeClosing,
    /// Reopen of a scope closed with unknown cleanup: only `release` ends it.
    #[error("UncleanClose: the scope closed with {unretired} unretired calls; release it first")]
    UncleanClose {
        /// The unretired calls at close.
        unretired: u64,
    },
    /// `release` of an `Open` or clean scope.
    #[error("NotReleasable: a {state:?} scope is not releasable")]
    NotReleasable {
        /// Its state.
        state: ScopeState,
    },
    /// `max_unclean_scopes` scopes are already unclean.
    #[error("CapacityExhausted: {max} scopes are already open or unclean")]
    CapacityExhausted {
        /// The limit.
        max: u64,
    },
    /// The byte budget would be exceeded.
    #[error("BudgetExhausted: {used} bytes held + {requested} requested > {max}")]
    BudgetExhausted {
        /// Bytes held.
        used: u64,
        /// The new reservation.
        requested: u64,
        /// The budget.
        max: u64,
    },
    /// A terminal outcome does not match its recorded SHA-256 or size.
    #[error("DigestMismatch: the stored outcome of {key:?} does not match its digest or size")]
    DigestMismatch {
        /// The call.
        key: Key,
    },
    /// A stored row does not decode.
    #[error("MalformedRow: {detail}")]
    MalformedRow {
        /// What was found.
        detail: String,
    },
    /// No scope for the session.
    #[error("UnknownScope: no scope for session {session}")]
    UnknownScope {
        /// The session.
        session: SessionId,
    },
    /// `attach` with a workspace other than the scope's.
    #[error("WorkspaceMismatch: the scope belongs to {stored}, not {requested}")]
    WorkspaceMismatch {
        /// The scope's workspace.
        stored: WorkspaceId,
        /// The request's.
        requested: WorkspaceId,
    },
    /// `attach` above the stored incarnation that is not a legal reopen
    /// (`Closed(AllRetired)` at exactly `incarnation + 1`).
    #[error(
        "NotReopenable: a {state:?} scope at incarnation {stored} cannot reopen at {requested}"
    )]
    NotReopenable {
        /// The scope's incarnation.
        stored: Incarnation,
        /// The request's.
        requested: Incarnation,
        /// The scope's state.
        state: ScopeState,
    },
    /// No row and no tombstone for the key.
    #[error("UnknownCall: no call {key:?}")]
    UnknownCall {
        /// The call.
        key: Key,
    },
    /// `finish` / `mark_unknown` of a call that is not `admitted`.
    #[error("NotAdmitted: the call is {state}")]
    NotAdmitted {
        /// Its state.
        state: CallKind,
    },
    /// `ack` of an `admitted` call: a live run's reservation is not discarded.
    #[error("CallRunning: an admitted call cannot be acknowledged")]
    CallRunning,
    /// `finish_close` of a scope that is not closing.
    #[error("NotClosing: the scope is {state:?}")]
    NotClosing {
        /// Its state.
        state: ScopeState,
    },
    /// An outcome larger than one call's reservation, or than
    /// [`MAX_STORED_OUTCOME_BYTES`] whatever the limits.
    #[error("OutcomeTooLarge: {bytes} bytes > {max}")]
    OutcomeTooLarge {
        /// Its size.
        bytes: u64,
        /// The largest outcome this call may store.
        max: u64,
    },
    /// A name that is empty, too long or has control characters.
    #[error("InvalidName: a {what} must be 1..={max} bytes without control characters (got {len} bytes)", max = MAX_NAME_LEN)]
    InvalidName {
        /// Which name.
        what: String,
        /// Its length.
        len: usize,
    },
    /// The handle is closed.
    #[error("HandleClosed: the ledger handle is closed")]
    HandleClosed,
    /// The backend failed (I/O, busy, poisoned).
    #[error("BackendFault: {reason}")]
    BackendFault {
        /// Why.
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

/// A stored column that breaks its rule is `MalformedRow`, naming the
/// table, the row and the column.
impl From<crate::columns::ColumnError> for LedgerError {
    fn from(e: crate::columns::ColumnError) -> Self {
        LedgerError::MalformedRow {
            detail: e.to_string(),
        }
    }
}

impl LedgerError {
    /// The failure's [`Class`](crate::Class): what the caller does next
    /// (a refusal of the scope's or the call's state (stale, closing, not admitted, a closed handle) is `FailedPrecondition`; a stored row that does not decode or verify is `CorruptArtifact`).
    pub fn class(&self) -> crate::Class {
        use crate::Class;
        match self {
            LedgerError::StaleIncarnation { .. } => Class::FailedPrecondition,
            LedgerError::StaleToken => Class::FailedPrecondition,
            LedgerError::ScopeNotOpen { .. } => Class::FailedPrecondition,
            LedgerError::ScopeClosing => Class::FailedPrecondition,
            LedgerError::UncleanClose { .. } => Class::FailedPrecondition,
            LedgerError::NotReleasable { .. } => Class::FailedPrecondition,
            LedgerError::CapacityExhausted { .. } => Class::ResourceExhausted,
            LedgerError::BudgetExhausted { .. } => Class::ResourceExhausted,
            LedgerError::DigestMismatch { .. } => Class::CorruptArtifact,
            LedgerError::MalformedRow { .. } => Class::CorruptArtifact,
            LedgerError::UnknownScope { .. } => Class::NotFound,
            LedgerError::WorkspaceMismatch { .. } => Class::PermissionDenied,
            LedgerError::NotReopenable { .. } => Class::FailedPrecondition,
            LedgerError::UnknownCall { .. } => Class::NotFound,
            LedgerError::NotAdmitted { .. } => Class::FailedPrecondition,
            LedgerError::CallRunning => Class::FailedPrecondition,
            LedgerError::NotClosing { .. } => Class::FailedPrecondition,
            LedgerError::OutcomeTooLarge { .. } => Class::ResourceExhausted,
            LedgerError::InvalidName { .. } => Class::InvalidArgument,
            LedgerError::HandleClosed => Class::FailedPrecondition,
            LedgerError::BackendFault { .. } => Class::Internal,
            LedgerError::Unavailable { .. } => Class::Unavailable,
        }
    }
}

fn scope_of<'v>(view: &'v View, session: &SessionId) -> Result<&'v Scope, LedgerError> {
    view.scope
        .as_ref()
        .ok_or_else(|| LedgerError::UnknownScope {
            session: session.clone(),
        })
}

/// The session's scope, at exactly the requested incarnation.
fn scope_at<'v>(
    view: &'v View,
    session: &SessionId,
    requested: Incarnation,
) -> Result<&'v Scope, LedgerError> {
    let scope = scope_of(view, session)?;
    if scope.incarnation != requested {
        return Err(LedgerError::StaleIncarnation {
            stored: scope.incarnation,
            requested,
        });
    }
    Ok(scope)
}

fn unacked(view: &View) -> Result<Unacked, LedgerError> {
    let mut u = Unacked::default();
    for (k, row) in &view.session_calls {
        match row.read(k)? {
            CallState::Terminal(_) => u.terminal.push(k.clone()),
            CallState::Unknown => u.unknown.push(k.clone()),
            CallState::Admitted | CallState::Acked => {}
        }
    }
    Ok(u)
}

/// The key's current state from the view, if it has a row or tombstone.
fn current(view: &View, key: &Key) -> Result<Option<CallState>, LedgerError> {
    if view.acked {
        return Ok(Some(CallState::Acked));
    }
    view.call.as_ref().map(|r| r.read(key)).transpose()
}

fn done(answer: Answer, effects: Vec<Effect>) -> Result<Decision, LedgerError> {
    Ok(Decision { answer, effects })
}

/// Decides one request over the facts its [`Footprint`] names. Total and
/// deterministic; a refusal is a typed value and writes nothing.
///
/// One function per request below; this is only the dispatch.
pub fn decide(view: &View, limits: &Limits, req: &Request) -> Result<Decision, LedgerError> {
    match req {
        Request::Open => open(view),
        Request::Attach {
            session,
            workspace,
            incarnation,
            token,
        } => attach(view, limits, session, workspace, *incarnation, token),
        Request::Admit {
            key,
            tool,
            token,
            request,
        } => admit(view, limits, key, tool, token, request.as_ref()),
        Request::Finish { key, outcome } => finish(view, key, outcome),
        Request::MarkUnknown { key } => mark_unknown(view, key),
        Request::Query { key } => query(view, key),
        Request::QueryOrFence { key, outcome } => query_or_fence(view, limits, key, outcome),
        Request::StopOrFence { key, tool } => stop_or_fence(view, key, tool),
        Request::Admitted { tool, .. } => admitted(view, tool),
        Request::Ack { key } => ack(view, key),
        Request::BeginClose {
            session,
            incarnation,
        } => begin_close(view, session, *incarnation),
        Request::FinishClose {
            session,
            incarnation,
        } => finish_close(view, session, *incarnation),
        Request::Release { session, now } => release(view, session, *now),
        Request::Releases => done(Answer::Releases(view.releases.clone()), Vec::new()),
        Request::Scope { .. } => done(Answer::Scope(view.scope.clone()), Vec::new()),
        Request::Unacked { .. } => done(Answer::Unacked(unacked(view)?), Vec::new()),
    }
}

/// `open`: restart recovery. Every `admitted` row of the view becomes
/// `unknown`; the answer counts them.
fn open(view: &View) -> Result<Decision, LedgerError> {
    let effects: Vec<Effect> = view
        .admitted
        .iter()
        .filter(|(_, r)| matches!(r.state, RowState::Admitted { .. }))
        .map(|(k, r)| Effect::PutCall(k.clone(), unknown_row(&r.tool)))
        .collect();
    done(Answer::Recovered(effects.len() as u64), effects)
}

/// `attach`: creates the scope (when a slot is free), takes over an `Open`
/// scope at its own incarnation (the new token replaces the old), or
/// reopens a `Closed(AllRetired)` scope at exactly `incarnation + 1`
/// (dropping its tombstones). Every success answers the session's
/// unacknowledged keys.
fn attach(
    view: &View,
    limits: &Limits,
    session: &SessionId,
    workspace: &WorkspaceId,
    incarnation: Incarnation,
    token: &AttachToken,
) -> Result<Decision, LedgerError> {
    let open = Scope {
        session: session.clone(),
        workspace: workspace.clone(),
        incarnation,
        state: ScopeState::Open,
        attach_token: token.clone(),
    };
    let Some(s) = &view.scope else {
        free_slot(view, limits)?;
        return attached(Vec::new(), open, unacked(view)?);
    };
    if s.workspace != *workspace {
        return Err(LedgerError::WorkspaceMismatch {
            stored: s.workspace.clone(),
            requested: workspace.clone(),
        });
    }
    if incarnation < s.incarnation {
        return Err(LedgerError::StaleIncarnation {
            stored: s.incarnation,
            requested: incarnation,
        });
    }
    if incarnation == s.incarnation {
        return match s.state {
            ScopeState::Open => attached(Vec::new(), open, unacked(view)?),
            ScopeState::Closing => Err(LedgerError::ScopeClosing),
            ScopeState::Closed(_) => Err(LedgerError::ScopeNotOpen { state: s.state }),
        };
    }
    let next_incarnation = s.incarnation.checked_add(1) == Some(incarnation);
    match s.state {
        ScopeState::Closed(CloseOutcome::AllRetired) if next_incarnation => {
            free_slot(view, limits)?;
            attached(
                vec![Effect::ForgetAcks(session.clone())],
                open,
                unacked(view)?,
            )
        }
        ScopeState::Closed(CloseOutcome::UnknownCleanup(n)) if next_incarnation => {
            Err(LedgerError::UncleanClose { unretired: n })
        }
        state => Err(LedgerError::NotReopenable {
            stored: s.incarnation,
            requested: incarnation,
            state,
        }),
    }
}

/// An attach's decision: `scope` is written first, then `effects`.
fn attached(
    mut effects: Vec<Effect>,
    scope: Scope,
    unacked: Unacked,
) -> Result<Decision, LedgerError> {
    effects.insert(0, Effect::PutScope(scope.clone()));
    done(Answer::Attached(Attached { scope, unacked }), effects)
}

/// Refuses a new unclean scope when [`Limits::max_unclean_scopes`] are taken.
fn free_slot(view: &View, limits: &Limits) -> Result<(), LedgerError> {
    if view.unclean_scopes >= limits.max_unclean_scopes {
        return Err(LedgerError::CapacityExhausted {
            max: limits.max_unclean_scopes,
        });
    }
    Ok(())
}

/// `admit`: on an `Open` scope, with the scope's incarnation and attach
/// token (compared by value), inserts the key `admitted` with one
/// reservation — unless the key already has a row or tombstone, which is
/// answered instead, or the reservation would exceed the byte budget.
///
/// A retry converges: when the key's row is still `admitted`, of this tool,
/// inserted by this very [`RequestId`], the answer is `Fresh` again and
/// nothing is written — what the first attempt answered, had its reply
/// arrived, even if a close has begun since. Once anything else moved the
/// row on (a stop, recovery, a finish), the scope's token changed or the
/// scope closed, the retry is answered as any other admission is: the call
/// must not start now.
fn admit(
    view: &View,
    limits: &Limits,
    key: &Key,
    tool: &Tool,
    token: &AttachToken,
    request: Option<&RequestId>,
) -> Result<Decision, LedgerError> {
    let s = scope_at(view, &key.session, key.incarnation)?;
    // The retry is recognised before the `Closing` refusal: a close begun
    // after the first attempt does not take back the `Fresh` it answered.
    // A closed (or released) scope is finished: its retry is refused.
    if s.attach_token == *token
        && matches!(s.state, ScopeState::Open | ScopeState::Closing)
        && is_own_admission(view, tool, request)
    {
        return done(Answer::Admission(Admission::Fresh), Vec::new());
    }
    match s.state {
        ScopeState::Open => {}
        ScopeState::Closing => return Err(LedgerError::ScopeClosing),
        ScopeState::Closed(_) => return Err(LedgerError::ScopeNotOpen { state: s.state }),
    }
    if s.attach_token != *token {
        return Err(LedgerError::StaleToken);
    }
    if let Some(state) = current(view, key)? {
        return done(Answer::Admission(Admission::Existing(state)), Vec::new());
    }
    let requested = limits.reservation_bytes;
    if view
        .ledger_bytes
        .checked_add(requested)
        .is_none_or(|total| total > limits.max_ledger_bytes)
    {
        return Err(LedgerError::BudgetExhausted {
            used: view.ledger_bytes,
            requested,
            max: limits.max_ledger_bytes,
        });
    }
    let row = CallRow {
        tool: tool.clone(),
        state: RowState::Admitted {
            reserved: requested,
            request: request.cloned(),
        },
    };
    done(
        Answer::Admission(Admission::Fresh),
        vec![Effect::PutCall(key.clone(), row)],
    )
}

/// Whether the key's row is the `admitted` row this admission inserted.
fn is_own_admission(view: &View, tool: &Tool, request: Option<&RequestId>) -> bool {
    match (&view.call, request) {
        (
            Some(CallRow {
                tool: t,
                state:
                    RowState::Admitted {
                        request: Some(stored),
                        ..
                    },
            }),
            Some(id),
        ) => !view.acked && t == tool && stored == id,
        _ => false,
    }
}

/// Refuses an outcome larger than `reserved` or than
/// [`MAX_STORED_OUTCOME_BYTES`], whatever the limits: every outcome a
/// decision stores is one a backend reads back.
fn outcome_fits(outcome: &[u8], reserved: u64) -> Result<(), LedgerError> {
    let bytes = outcome.len() as u64;
    let max = reserved.min(MAX_STORED_OUTCOME_BYTES as u64);
    if bytes > max {
        return Err(LedgerError::OutcomeTooLarge { bytes, max });
    }
    Ok(())
}

/// `finish`: an `admitted` row becomes `terminal` with the outcome, which
/// may not exceed the row's reservation (so the held bytes never grow).
///
/// A retry converges: a `terminal` row of a program's tool (not a fence)
/// holding exactly this outcome is the first attempt's own write, and is
/// answered `Finished` with nothing written.
fn finish(view: &View, key: &Key, outcome: &[u8]) -> Result<Decision, LedgerError> {
    if let Some(
        row @ CallRow {
            tool,
            state: RowState::Terminal { .. },
        },
    ) = &view.call
    {
        if !view.acked
            && tool.as_str() != FENCE_TOOL
            && row.read(key)? == CallState::Terminal(outcome.to_vec())
        {
            return done(Answer::Finished, Vec::new());
        }
    }
    let Some(CallRow {
        tool,
        state: RowState::Admitted { reserved, .. },
    }) = &view.call
    else {
        return Err(not_admitted(view, key)?);
    };
    outcome_fits(outcome, *reserved)?;
    done(
        Answer::Finished,
        vec![Effect::PutCall(
            key.clone(),
            CallRow::terminal(tool.clone(), outcome.to_vec()),
        )],
    )
}

/// `mark_unknown`: an `admitted` row becomes `unknown` (releasing its
/// bytes); an `unknown` row answers the same and writes nothing.
fn mark_unknown(view: &View, key: &Key) -> Result<Decision, LedgerError> {
    match &view.call {
        Some(CallRow {
            tool,
            state: RowState::Admitted { .. },
        }) => done(
            Answer::MarkedUnknown,
            vec![Effect::PutCall(key.clone(), unknown_row(tool))],
        ),
        Some(CallRow {
            state: RowState::Unknown,
            ..
        }) => done(Answer::MarkedUnknown, Vec::new()),
        _ => Err(not_admitted(view, key)?),
    }
}

/// Why `finish` or `mark_unknown` of a key that is not `admitted` is
/// refused: its state, `Acked` for a tombstone, `UnknownCall` for nothing.
/// (Reading a `terminal` row checks its digest first.)
fn not_admitted(view: &View, key: &Key) -> Result<LedgerError, LedgerError> {
    Ok(match (&view.call, view.acked) {
        (Some(row), _) => LedgerError::NotAdmitted {
            state: row.read(key)?.kind(),
        },
        (None, true) => LedgerError::NotAdmitted {
            state: CallKind::Acked,
        },
        (None, false) => LedgerError::UnknownCall { key: key.clone() },
    })
}

/// `query`: the key's state, or `Missing`. Writes nothing.
fn query(view: &View, key: &Key) -> Result<Decision, LedgerError> {
    let lookup = match current(view, key)? {
        Some(state) => Lookup::Found(state),
        None => Lookup::Missing,
    };
    done(Answer::Lookup(lookup), Vec::new())
}

/// `query_or_fence`: at the scope's incarnation (the token is not
/// checked), answers a standing row or tombstone, or settles a missing key
/// as `terminal` with the caller's did-not-start outcome under
/// [`Tool::fence`]. Fences skip the byte budget but not the size limit.
fn query_or_fence(
    view: &View,
    limits: &Limits,
    key: &Key,
    outcome: &[u8],
) -> Result<Decision, LedgerError> {
    scope_at(view, &key.session, key.incarnation)?;
    if let Some(state) = current(view, key)? {
        return done(Answer::Fencing(Fencing::Standing(state)), Vec::new());
    }
    outcome_fits(outcome, limits.reservation_bytes)?;
    done(
        Answer::Fencing(Fencing::Fenced),
        vec![Effect::PutCall(
            key.clone(),
            CallRow::terminal(Tool::fence(), outcome.to_vec()),
        )],
    )
}

/// `stop_or_fence`: at the scope's incarnation, an `admitted` row of the
/// same tool becomes `unknown` (`Stopped`), a missing key is inserted
/// `unknown` so it never starts (`Barred`), anything else is `Untouched`.
fn stop_or_fence(view: &View, key: &Key, tool: &Tool) -> Result<Decision, LedgerError> {
    scope_at(view, &key.session, key.incarnation)?;
    match (&view.call, view.acked) {
        (_, true) => done(
            Answer::Stopping(Stopping::Untouched(CallState::Acked)),
            Vec::new(),
        ),
        (
            Some(CallRow {
                tool: t,
                state: RowState::Admitted { .. },
            }),
            false,
        ) if t == tool => done(
            Answer::Stopping(Stopping::Stopped),
            vec![Effect::PutCall(key.clone(), unknown_row(tool))],
        ),
        (Some(row), false) => done(
            Answer::Stopping(Stopping::Untouched(row.read(key)?)),
            Vec::new(),
        ),
        (None, false) => done(
            Answer::Stopping(Stopping::Barred),
            vec![Effect::PutCall(key.clone(), unknown_row(tool))],
        ),
    }
}

/// `admitted`: the keys of the session's `admitted` rows of `tool`,
/// ascending. Writes nothing.
fn admitted(view: &View, tool: &Tool) -> Result<Decision, LedgerError> {
    let keys = view
        .session_calls
        .iter()
        .filter(|(_, r)| r.tool == *tool && matches!(r.state, RowState::Admitted { .. }))
        .map(|(k, _)| k.clone())
        .collect();
    done(Answer::Admitted(keys), Vec::new())
}

/// `ack`: a `terminal` or `unknown` row is deleted and a tombstone written;
/// a key already acknowledged answers `already`; an `admitted` row is a
/// live run and is refused.
fn ack(view: &View, key: &Key) -> Result<Decision, LedgerError> {
    match (&view.call, view.acked) {
        (None, true) => done(Answer::Acked { already: true }, Vec::new()),
        (None, false) => Err(LedgerError::UnknownCall { key: key.clone() }),
        (Some(row), _) => match row.read(key)? {
            CallState::Admitted => Err(LedgerError::CallRunning),
            _ => done(
                Answer::Acked { already: false },
                vec![Effect::DeleteCall(key.clone()), Effect::PutAck(key.clone())],
            ),
        },
    }
}

/// `begin_close`: `Open → Closing` at the scope's incarnation; a `Closing`
/// scope answers itself unchanged.
fn begin_close(
    view: &View,
    session: &SessionId,
    incarnation: Incarnation,
) -> Result<Decision, LedgerError> {
    let s = scope_at(view, session, incarnation)?;
    match s.state {
        ScopeState::Open => {
            let next = Scope {
                state: ScopeState::Closing,
                ..s.clone()
            };
            done(Answer::Closing(next.clone()), vec![Effect::PutScope(next)])
        }
        ScopeState::Closing => done(Answer::Closing(s.clone()), Vec::new()),
        ScopeState::Closed(_) => Err(LedgerError::ScopeNotOpen { state: s.state }),
    }
}

/// `finish_close`: `Closing → Closed(AllRetired)` (dropping the session's
/// tombstones) when no `terminal` or `unknown` row of the scope's
/// incarnation is left, else `Closed(UnknownCleanup(n))`; a closed scope
/// answers its outcome unchanged.
fn finish_close(
    view: &View,
    session: &SessionId,
    incarnation: Incarnation,
) -> Result<Decision, LedgerError> {
    let s = scope_at(view, session, incarnation)?;
    match s.state {
        ScopeState::Open => Err(LedgerError::NotClosing { state: s.state }),
        ScopeState::Closed(outcome) => done(Answer::Closed(outcome), Vec::new()),
        ScopeState::Closing => {
            let unretired = view
                .session_calls
                .iter()
                .filter(|(k, r)| {
                    k.incarnation == s.incarnation
                        && matches!(r.state, RowState::Terminal { .. } | RowState::Unknown)
                })
                .count() as u64;
            let outcome = if unretired == 0 {
                CloseOutcome::AllRetired
            } else {
                CloseOutcome::UnknownCleanup(unretired)
            };
            let mut effects = vec![Effect::PutScope(Scope {
                state: ScopeState::Closed(outcome),
                ..s.clone()
            })];
            if outcome == CloseOutcome::AllRetired {
                effects.push(Effect::ForgetAcks(session.clone()));
            }
            done(Answer::Closed(outcome), effects)
        }
    }
}

/// `release`: an operator moves a `Closing` or `Closed(UnknownCleanup)`
/// scope to `Closed(AllRetired)`, records a [`Release`] row and drops the
/// session's tombstones.
fn release(view: &View, session: &SessionId, now: Millis) -> Result<Decision, LedgerError> {
    let s = scope_of(view, session)?;
    match s.state {
        ScopeState::Closing | ScopeState::Closed(CloseOutcome::UnknownCleanup(_)) => {
            let record = Release {
                session: session.clone(),
                workspace: s.workspace.clone(),
                incarnation: s.incarnation,
                was: s.state,
                released_at_ms: now,
            };
            done(
                Answer::Released(record.clone()),
                vec![
                    Effect::PutScope(Scope {
                        state: ScopeState::Closed(CloseOutcome::AllRetired),
                        ..s.clone()
                    }),
                    Effect::PutRelease(record),
                    Effect::ForgetAcks(session.clone()),
                ],
            )
        }
        state => Err(LedgerError::NotReleasable { state }),
    }
}

/// An `unknown` row of `tool`.
fn unknown_row(tool: &Tool) -> CallRow {
    CallRow {
        tool: tool.clone(),
        state: RowState::Unknown,
    }
}

/// The whole ledger as plain data: what the memory backend and the models
/// keep, and what a differential test compares a shell against.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LedgerState {
    /// Scopes by session.
    pub scopes: BTreeMap<SessionId, Scope>,
    /// Call rows by key.
    #[serde(with = "crate::pairs")]
    pub calls: BTreeMap<Key, CallRow>,
    /// Tombstones (`call_ack`).
    pub acks: BTreeSet<Key>,
    /// The release log (`scope_release`), in insertion order.
    pub releases: Vec<Release>,
}

impl LedgerState {
    /// Every row: scopes, call rows, tombstones and releases.
    pub fn records(&self) -> u64 {
        let n = self.scopes.len() + self.calls.len() + self.acks.len() + self.releases.len();
        u64::try_from(n).unwrap_or(u64::MAX)
    }

    /// `sum(outcome_bytes)` over `admitted` and `terminal` rows.
    pub fn ledger_bytes(&self) -> u64 {
        self.calls
            .values()
            .map(CallRow::outcome_bytes)
            .fold(0, u64::saturating_add)
    }

    /// Scopes that are anything but `Closed(AllRetired)`.
    pub fn unclean_scopes(&self) -> u64 {
        self.scopes
            .values()
            .filter(|s| s.state.is_unclean())
            .count() as u64
    }

    /// Loads the facts `fp` names.
    pub fn view(&self, fp: &Footprint) -> View {
        let mut v = View::default();
        if let Some(s) = &fp.scope {
            v.scope = self.scopes.get(s).cloned();
        }
        if let Some(k) = &fp.key {
            v.call = self.calls.get(k).cloned();
            v.acked = self.acks.contains(k);
        }
        if let Some(s) = &fp.session_calls {
            v.session_calls = self
                .calls
                .iter()
                .filter(|(k, _)| k.session == *s)
                .map(|(k, r)| (k.clone(), r.clone()))
                .collect();
        }
        if fp.all_admitted {
            v.admitted = self
                .calls
                .iter()
                .filter(|(_, r)| matches!(r.state, RowState::Admitted { .. }))
                .map(|(k, r)| (k.clone(), r.clone()))
                .collect();
        }
        if fp.totals {
            v.ledger_bytes = self.ledger_bytes();
            v.unclean_scopes = self.unclean_scopes();
        }
        if fp.releases {
            v.releases = self.releases.clone();
        }
        v
    }

    /// Applies a decision's effects in order.
    pub fn apply(&mut self, effects: &[Effect]) {
        for e in effects {
            match e {
                Effect::PutScope(s) => {
                    self.scopes.insert(s.session.clone(), s.clone());
                }
                Effect::PutCall(k, r) => {
                    self.calls.insert(k.clone(), r.clone());
                }
                Effect::DeleteCall(k) => {
                    self.calls.remove(k);
                }
                Effect::PutAck(k) => {
                    self.acks.insert(k.clone());
                }
                Effect::ForgetAcks(s) => self.acks.retain(|k| k.session != *s),
                Effect::PutRelease(r) => self.releases.push(r.clone()),
            }
        }
    }
}

/// The decision function as the memory backend, drivers and models take it.
pub type Decide = fn(&View, &Limits, &Request) -> Result<Decision, LedgerError>;

/// View → [`decide`] → apply, over a whole [`LedgerState`]: the answer and
/// the next state. A refusal returns the error and no state.
pub fn step(
    state: &LedgerState,
    limits: &Limits,
    req: &Request,
) -> Result<(Answer, LedgerState), LedgerError> {
    step_with(decide, state, limits, req)
}

/// [`step`] over any decision function with [`decide`]'s signature (how the
/// models and the driver tests apply a mutant).
pub fn step_with(
    decide: Decide,
    state: &LedgerState,
    limits: &Limits,
    req: &Request,
) -> Result<(Answer, LedgerState), LedgerError> {
    let view = state.view(&req.footprint());
    let d = decide(&view, limits, req)?;
    let mut next = state.clone();
    next.apply(&d.effects);
    Ok((d.answer, next))
}

fn unexpected(op: &str, answer: Answer) -> LedgerError {
    LedgerError::BackendFault {
        reason: format!("{op} answered {answer:?}"),
    }
}

/// The ledger port: what a backend implements. Three methods are
/// required: [`Ledger::execute`] (one transaction per request: load the
/// [`Request::footprint`], [`decide`], write the effects, commit),
/// [`Ledger::close`] and [`Ledger::records`]. [`Ledger::recover`] has a
/// default that runs [`Request::Open`] through `execute` (a backend
/// overrides it only to add its own open-time work), and every typed
/// operation is provided on top of `execute`.
pub trait Ledger {
    /// Runs one request in one transaction.
    fn execute(&self, limits: &Limits, req: &Request) -> Result<Answer, LedgerError>;

    /// Restart recovery — what `open` does: every `admitted` row becomes
    /// `unknown`. Returns how many did. One opener per VM.
    fn recover(&self) -> Result<u64, LedgerError> {
        match self.execute(&Limits::default(), &Request::Open)? {
            Answer::Recovered(n) => Ok(n),
            a => Err(unexpected("open", a)),
        }
    }

    /// Closes the handle; later calls answer [`LedgerError::HandleClosed`].
    fn close(&self) -> Result<(), LedgerError>;

    /// Every stored row — scopes, calls, tombstones, releases — of any
    /// state, settled history included ([`LedgerState::records`]). A
    /// migration refuses an identity whose Activity catalog has any.
    fn records(&self) -> Result<u64, LedgerError>;

    /// Attaches a session (see the module docs).
    fn attach(
        &self,
        limits: &Limits,
        session: &SessionId,
        workspace: &WorkspaceId,
        incarnation: Incarnation,
        token: &AttachToken,
    ) -> Result<Attached, LedgerError> {
        let req = Request::Attach {
            session: session.clone(),
            workspace: workspace.clone(),
            incarnation,
            token: token.clone(),
        };
        match self.execute(limits, &req)? {
            Answer::Attached(a) => Ok(a),
            a => Err(unexpected("attach", a)),
        }
    }

    /// Admits a call before starting it.
    fn admit(
        &self,
        limits: &Limits,
        key: &Key,
        tool: &Tool,
        token: &AttachToken,
    ) -> Result<Admission, LedgerError> {
        let req = Request::Admit {
            key: key.clone(),
            tool: tool.clone(),
            token: token.clone(),
            request: None,
        };
        match self.execute(limits, &req)? {
            Answer::Admission(a) => Ok(a),
            a => Err(unexpected("admit", a)),
        }
    }

    /// [`Ledger::admit`] carrying the admission's own [`RequestId`], so that
    /// a retry after an ambiguous failure (a lost reply, a timeout, an
    /// `Unavailable` while committing) converges: while the row it inserted
    /// is still `admitted`, the retry is answered `Fresh` again and writes
    /// nothing. Use a new id for every call meant to start; reuse it only to
    /// retry the same admission.
    fn admit_once(
        &self,
        limits: &Limits,
        key: &Key,
        tool: &Tool,
        token: &AttachToken,
        request: &RequestId,
    ) -> Result<Admission, LedgerError> {
        let req = Request::Admit {
            key: key.clone(),
            tool: tool.clone(),
            token: token.clone(),
            request: Some(request.clone()),
        };
        match self.execute(limits, &req)? {
            Answer::Admission(a) => Ok(a),
            a => Err(unexpected("admit", a)),
        }
    }

    /// Settles an admitted call with its outcome.
    fn finish(&self, limits: &Limits, key: &Key, outcome: &[u8]) -> Result<(), LedgerError> {
        let req = Request::Finish {
            key: key.clone(),
            outcome: outcome.to_vec(),
        };
        match self.execute(limits, &req)? {
            Answer::Finished => Ok(()),
            a => Err(unexpected("finish", a)),
        }
    }

    /// Settles an admitted call as unknown.
    fn mark_unknown(&self, limits: &Limits, key: &Key) -> Result<(), LedgerError> {
        match self.execute(limits, &Request::MarkUnknown { key: key.clone() })? {
            Answer::MarkedUnknown => Ok(()),
            a => Err(unexpected("mark_unknown", a)),
        }
    }

    /// Reads a call.
    fn query(&self, limits: &Limits, key: &Key) -> Result<Lookup, LedgerError> {
        match self.execute(limits, &Request::Query { key: key.clone() })? {
            Answer::Lookup(l) => Ok(l),
            a => Err(unexpected("query", a)),
        }
    }

    /// Reads a call, settling a missing one as did-not-start.
    fn query_or_fence(
        &self,
        limits: &Limits,
        key: &Key,
        outcome: &[u8],
    ) -> Result<Fencing, LedgerError> {
        let req = Request::QueryOrFence {
            key: key.clone(),
            outcome: outcome.to_vec(),
        };
        match self.execute(limits, &req)? {
            Answer::Fencing(f) => Ok(f),
            a => Err(unexpected("query_or_fence", a)),
        }
    }

    /// The ledger half of `StopExecution`.
    fn stop_or_fence(
        &self,
        limits: &Limits,
        key: &Key,
        tool: &Tool,
    ) -> Result<Stopping, LedgerError> {
        let req = Request::StopOrFence {
            key: key.clone(),
            tool: tool.clone(),
        };
        match self.execute(limits, &req)? {
            Answer::Stopping(s) => Ok(s),
            a => Err(unexpected("stop_or_fence", a)),
        }
    }

    /// The keys of the session's admitted rows of `tool`.
    fn admitted(
        &self,
        limits: &Limits,
        session: &SessionId,
        tool: &Tool,
    ) -> Result<Vec<Key>, LedgerError> {
        let req = Request::Admitted {
            session: session.clone(),
            tool: tool.clone(),
        };
        match self.execute(limits, &req)? {
            Answer::Admitted(k) => Ok(k),
            a => Err(unexpected("admitted", a)),
        }
    }

    /// Retires a settled row, leaving a tombstone. `true` when it already
    /// was acknowledged.
    fn ack(&self, limits: &Limits, key: &Key) -> Result<bool, LedgerError> {
        match self.execute(limits, &Request::Ack { key: key.clone() })? {
            Answer::Acked { already } => Ok(already),
            a => Err(unexpected("ack", a)),
        }
    }

    /// `Open → Closing`.
    fn begin_close(
        &self,
        limits: &Limits,
        session: &SessionId,
        incarnation: Incarnation,
    ) -> Result<Scope, LedgerError> {
        let req = Request::BeginClose {
            session: session.clone(),
            incarnation,
        };
        match self.execute(limits, &req)? {
            Answer::Closing(s) => Ok(s),
            a => Err(unexpected("begin_close", a)),
        }
    }

    /// `Closing → Closed(outcome)`.
    fn finish_close(
        &self,
        limits: &Limits,
        session: &SessionId,
        incarnation: Incarnation,
    ) -> Result<CloseOutcome, LedgerError> {
        let req = Request::FinishClose {
            session: session.clone(),
            incarnation,
        };
        match self.execute(limits, &req)? {
            Answer::Closed(o) => Ok(o),
            a => Err(unexpected("finish_close", a)),
        }
    }

    /// An operator's release of an unclean scope.
    fn release(
        &self,
        limits: &Limits,
        session: &SessionId,
        now: Millis,
    ) -> Result<Release, LedgerError> {
        let req = Request::Release {
            session: session.clone(),
            now,
        };
        match self.execute(limits, &req)? {
            Answer::Released(r) => Ok(r),
            a => Err(unexpected("release", a)),
        }
    }

    /// The release log.
    fn releases(&self, limits: &Limits) -> Result<Vec<Release>, LedgerError> {
        match self.execute(limits, &Request::Releases)? {
            Answer::Releases(r) => Ok(r),
            a => Err(unexpected("releases", a)),
        }
    }

    /// A session's scope.
    fn scope(&self, limits: &Limits, session: &SessionId) -> Result<Option<Scope>, LedgerError> {
        match self.execute(
            limits,
            &Request::Scope {
                session: session.clone(),
            },
        )? {
            Answer::Scope(s) => Ok(s),
            a => Err(unexpected("scope", a)),
        }
    }

    /// A session's unacknowledged keys; changes nothing (not even the token).
    fn unacked(&self, limits: &Limits, session: &SessionId) -> Result<Unacked, LedgerError> {
        match self.execute(
            limits,
            &Request::Unacked {
                session: session.clone(),
            },
        )? {
            Answer::Unacked(u) => Ok(u),
            a => Err(unexpected("unacked", a)),
        }
    }
}
