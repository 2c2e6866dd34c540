//! The ledger's rows as a backend stores and reads them back, written here
//! once: a call row's columns ([`StoredCall::decode`] holds every rule that
//! ties them together), a scope row's ([`StoredScope::decode`]), a release
//! row's ([`StoredRelease::decode`]) and a scope state's stored forms
//! ([`ScopeState::to_stored`], [`ScopeState::to_stored_text`] and their
//! inverses). Each row's columns are read here too (`read`, over a
//! backend's [`Columns`]): a backend writes the SELECT in the order the
//! reader names and nothing else.

use super::{
    AttachToken, CallRow, CloseOutcome, Digest, Key, LedgerError, OpId, Release, RequestId,
    RowState, Scope, ScopeState, SessionId, Tool, WorkspaceId, MAX_NAME_LEN,
};
use crate::columns::{Cells, ColumnError, Columns, MAX_WORD_LEN};

/// The bound on a stored outcome's bytes a SQL backend reads back: the
/// default ledger budget (512 MiB), the most a ledger under the default
/// limits can hold at all. The decision refuses a larger outcome
/// (`OutcomeTooLarge`) whatever the caller's [`Limits`](super::Limits), so
/// no backend stores an outcome it could not read back.
pub const MAX_STORED_OUTCOME_BYTES: usize = super::DEFAULT_MAX_LEDGER_BYTES as usize;

impl StoredScope {
    /// The scope row of `session` from `c`, in the order `workspace,
    /// incarnation, state, close_outcome, attach_token`; `c` names the row
    /// by its session.
    pub fn read<C: Columns>(c: &mut Cells<C>, session: &SessionId) -> Result<Self, ColumnError> {
        c.at(session.as_str());
        Ok(StoredScope {
            workspace: c.text(0, "workspace", MAX_NAME_LEN)?,
            incarnation: c.unsigned(1, "incarnation")?,
            state: c.text(2, "state", MAX_WORD_LEN)?,
            close_outcome: c.opt_unsigned(3, "close_outcome")?,
            attach_token: c.text(4, "attach_token", MAX_NAME_LEN)?,
        })
    }
}

impl StoredCall {
    /// A call row's own columns from `c` at `base`, in the order `tool,
    /// state, outcome, outcome_digest, outcome_bytes, admit_request`,
    /// every text and byte column bounded before it is copied.
    pub fn read<C: Columns>(c: &Cells<C>, base: usize) -> Result<Self, ColumnError> {
        Ok(StoredCall {
            tool: c.text(base, "tool", MAX_NAME_LEN)?,
            state: c.text(base + 1, "state", MAX_WORD_LEN)?,
            outcome: c.opt_blob(base + 2, "outcome", MAX_STORED_OUTCOME_BYTES)?,
            digest: c.opt_blob(base + 3, "outcome_digest", 32)?,
            bytes: c.unsigned(base + 4, "outcome_bytes")?,
            request: c.opt_text(base + 5, "admit_request", MAX_NAME_LEN)?,
        })
    }

    /// A call row of `session` with its key from `c`, in the order `op,
    /// step, source_index, incarnation`, then [`StoredCall::read`]'s;
    /// decoded, `c` naming the row by its whole key.
    pub fn read_keyed<C: Columns>(
        c: &mut Cells<C>,
        session: &SessionId,
    ) -> Result<(Key, CallRow), LedgerError> {
        c.at(format!("of {}", session.as_str()));
        let op = c.text(0, "op", MAX_NAME_LEN)?;
        let (step, source_index) = (c.small(1, "step")?, c.small(2, "source_index")?);
        let incarnation = c.unsigned(3, "incarnation")?;
        c.at(format!(
            "({}, {op}, {step}, {source_index}, {incarnation})",
            session.as_str()
        ));
        let key = Key {
            session: session.clone(),
            op: c.check("op", OpId::new(op))?,
            step,
            source_index,
            incarnation,
        };
        Ok((key, StoredCall::read(c, 4)?.decode(&c.place())?))
    }
}

impl StoredRelease {
    /// A release row from `c`, in the order `id, session, workspace,
    /// incarnation, was, released_at_ms`; `c` names the row by its id.
    pub fn read<C: Columns>(c: &mut Cells<C>) -> Result<Self, ColumnError> {
        c.at(c.int(0, "id")?.to_string());
        Ok(StoredRelease {
            session: c.text(1, "session", MAX_NAME_LEN)?,
            workspace: c.text(2, "workspace", MAX_NAME_LEN)?,
            incarnation: c.unsigned(3, "incarnation")?,
            was: c.text(4, "was", MAX_WORD_LEN)?,
            released_at_ms: c.unsigned(5, "released_at_ms")?,
        })
    }
}

fn malformed(detail: String) -> LedgerError {
    LedgerError::MalformedRow { detail }
}

/// The columns of one scope row, as stored (the session is its key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredScope {
    /// The workspace.
    pub workspace: String,
    /// The incarnation.
    pub incarnation: u64,
    /// The state word ([`ScopeState::to_stored`]).
    pub state: String,
    /// A closed scope's outcome; `None` for any other state.
    pub close_outcome: Option<u64>,
    /// The last attach's token.
    pub attach_token: String,
}

impl StoredScope {
    /// The scope of `session`: the workspace's and the token's grammar, a
    /// state word with exactly the outcome it owns. A row that breaks one
    /// is [`LedgerError::MalformedRow`] naming `at` and the column.
    pub fn decode(self, session: &SessionId, at: &str) -> Result<Scope, LedgerError> {
        let named = |e: LedgerError, col: &str| malformed(format!("{at}: column {col}: {e}"));
        let state = ScopeState::from_stored(&self.state, self.close_outcome).ok_or_else(|| {
            malformed(format!(
                "{at}: state {:?} with close_outcome {:?}",
                self.state, self.close_outcome
            ))
        })?;
        Ok(Scope {
            session: session.clone(),
            workspace: WorkspaceId::new(self.workspace).map_err(|e| named(e, "workspace"))?,
            incarnation: self.incarnation,
            state,
            attach_token: AttachToken::new(self.attach_token)
                .map_err(|e| named(e, "attach_token"))?,
        })
    }
}

/// The columns of one release-log row, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredRelease {
    /// The session.
    pub session: String,
    /// Its workspace.
    pub workspace: String,
    /// The incarnation released.
    pub incarnation: u64,
    /// The state it was released from ([`ScopeState::to_stored_text`]).
    pub was: String,
    /// The operator's clock at release.
    pub released_at_ms: u64,
}

impl StoredRelease {
    /// The release: the session's and workspace's grammar and a state
    /// text that reads back. A row that breaks one is
    /// [`LedgerError::MalformedRow`] naming `at` and the column.
    pub fn decode(self, at: &str) -> Result<Release, LedgerError> {
        let named = |e: LedgerError, col: &str| malformed(format!("{at}: column {col}: {e}"));
        let was = ScopeState::from_stored_text(&self.was)
            .ok_or_else(|| malformed(format!("{at}: column was {:?}", self.was)))?;
        Ok(Release {
            session: SessionId::new(self.session).map_err(|e| named(e, "session"))?,
            workspace: WorkspaceId::new(self.workspace).map_err(|e| named(e, "workspace"))?,
            incarnation: self.incarnation,
            was,
            released_at_ms: self.released_at_ms,
        })
    }
}

impl ScopeState {
    /// The stored form: a state word (`open`, `closing`, `closed`) and,
    /// for a closed scope only, its close outcome (0: every call retired;
    /// `n > 0`: `n` calls left terminal or unknown).
    pub fn to_stored(self) -> (&'static str, Option<u64>) {
        match self {
            ScopeState::Open => ("open", None),
            ScopeState::Closing => ("closing", None),
            ScopeState::Closed(CloseOutcome::AllRetired) => ("closed", Some(0)),
            ScopeState::Closed(CloseOutcome::UnknownCleanup(n)) => ("closed", Some(n)),
        }
    }

    /// The inverse of [`ScopeState::to_stored`]; `None` for any other
    /// combination (a word no state has, an outcome beside an open scope,
    /// a closed scope without one).
    pub fn from_stored(state: &str, outcome: Option<u64>) -> Option<ScopeState> {
        match (state, outcome) {
            ("open", None) => Some(ScopeState::Open),
            ("closing", None) => Some(ScopeState::Closing),
            ("closed", Some(0)) => Some(ScopeState::Closed(CloseOutcome::AllRetired)),
            ("closed", Some(n)) => Some(ScopeState::Closed(CloseOutcome::UnknownCleanup(n))),
            _ => None,
        }
    }

    /// The one-text form a release log keeps: the word, or `word:n` with
    /// the outcome in decimal.
    pub fn to_stored_text(self) -> String {
        match self.to_stored() {
            (state, None) => state.to_owned(),
            (state, Some(n)) => format!("{state}:{n}"),
        }
    }

    /// The inverse of [`ScopeState::to_stored_text`] (the outcome exactly
    /// as written: decimal digits, no sign).
    pub fn from_stored_text(text: &str) -> Option<ScopeState> {
        match text.split_once(':') {
            None => Self::from_stored(text, None),
            Some((state, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
                Self::from_stored(state, Some(n.parse().ok()?))
            }
            Some(_) => None,
        }
    }
}

/// The columns of one `ledger_calls` row, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredCall {
    /// The tool.
    pub tool: String,
    /// The state word: `admitted`, `terminal` or `unknown`.
    pub state: String,
    /// The outcome (a terminal row's only).
    pub outcome: Option<Vec<u8>>,
    /// The outcome's SHA-256 (a terminal row's only).
    pub digest: Option<Vec<u8>>,
    /// The reservation (admitted) or the outcome's recorded size
    /// (terminal); zero for an unknown row.
    pub bytes: u64,
    /// The admission's request id. Read only for an `admitted` row: in any
    /// other state it is ignored (a build from before request ids, running
    /// beside this one, rewrites a row's state and leaves the column as it
    /// was).
    pub request: Option<String>,
}

impl StoredCall {
    /// The row: the tool's grammar, a state word with exactly the columns
    /// it owns set, a 32-byte digest, the request id's grammar. A row that
    /// breaks one is [`LedgerError::MalformedRow`] naming `at` (the table
    /// and the row) and the column.
    pub fn decode(self, at: &str) -> Result<CallRow, LedgerError> {
        let malformed = |detail: String| LedgerError::MalformedRow { detail };
        let named = |e: LedgerError, col: &str| malformed(format!("{at}: column {col}: {e}"));
        let tool = Tool::new(self.tool).map_err(|e| named(e, "tool"))?;
        let bytes = self.bytes;
        let state = match (self.state.as_str(), self.outcome, self.digest) {
            ("admitted", None, None) => RowState::Admitted {
                reserved: bytes,
                request: self
                    .request
                    .map(|q| RequestId::new(q).map_err(|e| named(e, "admit_request")))
                    .transpose()?,
            },
            ("unknown", None, None) if bytes == 0 => RowState::Unknown,
            ("terminal", Some(outcome), Some(digest)) => {
                let digest: Digest = digest.try_into().map_err(|d: Vec<u8>| {
                    malformed(format!("{at}: column outcome_digest: {} bytes", d.len()))
                })?;
                RowState::Terminal {
                    outcome,
                    digest,
                    bytes,
                }
            }
            (s, o, d) => {
                return Err(malformed(format!(
                "{at}: column state {s:?} with outcome {} and digest {} (outcome_bytes {bytes})",
                if o.is_some() { "set" } else { "null" },
                if d.is_some() { "set" } else { "null" }
            )))
            }
        };
        Ok(CallRow { tool, state })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_and_release_rows_read_back_and_name_what_is_wrong() {
        let session = SessionId::new("s1").unwrap();
        let row = |state: &str, outcome: Option<u64>, ws: &str| StoredScope {
            workspace: ws.to_owned(),
            incarnation: 7,
            state: state.to_owned(),
            close_outcome: outcome,
            attach_token: "t1".to_owned(),
        };
        let scope = row("closed", Some(3), "w")
            .decode(&session, "scope s1")
            .unwrap();
        assert_eq!(
            scope.state,
            ScopeState::Closed(CloseOutcome::UnknownCleanup(3))
        );
        assert_eq!((scope.incarnation, scope.workspace.as_str()), (7, "w"));
        for (bad, says) in [
            (
                row("open", Some(0), "w"),
                "scope s1: state \"open\" with close_outcome Some(0)",
            ),
            (row("closed", None, "w"), "scope s1: state \"closed\""),
            (row("open", None, ""), "scope s1: column workspace"),
        ] {
            let e = bad.decode(&session, "scope s1").unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        }
        let release = |was: &str, session: &str| StoredRelease {
            session: session.to_owned(),
            workspace: "w".to_owned(),
            incarnation: 2,
            was: was.to_owned(),
            released_at_ms: 9,
        };
        let text = ScopeState::Closing.to_stored_text();
        let r = release(&text, "s1").decode("release 1").unwrap();
        assert_eq!(
            (r.was, r.incarnation, r.released_at_ms),
            (ScopeState::Closing, 2, 9)
        );
        let e = release("later", "s1")
            .decode("release 1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("release 1: column was \"later\""), "{e}");
        let e = release(&text, "")
            .decode("release 1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("release 1: column session"), "{e}");
    }

    #[test]
    fn a_scope_state_reads_back_from_its_stored_forms_and_nothing_else_does() {
        for s in [
            ScopeState::Open,
            ScopeState::Closing,
            ScopeState::Closed(CloseOutcome::AllRetired),
            ScopeState::Closed(CloseOutcome::UnknownCleanup(3)),
            ScopeState::Closed(CloseOutcome::UnknownCleanup(u64::MAX)),
        ] {
            let (w, o) = s.to_stored();
            assert_eq!(ScopeState::from_stored(w, o), Some(s));
            assert_eq!(ScopeState::from_stored_text(&s.to_stored_text()), Some(s));
        }
        for (w, o) in [
            ("open", Some(0)),
            ("closing", Some(1)),
            ("closed", None),
            ("gone", None),
        ] {
            assert_eq!(ScopeState::from_stored(w, o), None, "{w} {o:?}");
        }
        for t in [
            "closed",
            "closed:",
            "closed:-1",
            "closed:+1",
            "open:0",
            "closed:1x",
            "x:1",
        ] {
            assert_eq!(ScopeState::from_stored_text(t), None, "{t}");
        }
    }

    fn call(
        state: &str,
        outcome: Option<&[u8]>,
        digest: Option<Vec<u8>>,
        bytes: u64,
    ) -> StoredCall {
        StoredCall {
            tool: "tool".into(),
            state: state.into(),
            outcome: outcome.map(<[u8]>::to_vec),
            digest,
            bytes,
            request: Some("r-1".into()),
        }
    }

    #[test]
    fn each_state_owns_exactly_its_columns() {
        let at = "ledger_calls row k";
        let admitted = call("admitted", None, None, 7).decode(at);
        assert!(matches!(
            admitted,
            Ok(CallRow {
                state: RowState::Admitted {
                    reserved: 7,
                    request: Some(_)
                },
                ..
            })
        ));
        // A request id beside a terminal row is ignored, not refused.
        let terminal = call("terminal", Some(b"ok"), Some(vec![1; 32]), 2).decode(at);
        assert!(matches!(
            terminal,
            Ok(CallRow {
                state: RowState::Terminal { bytes: 2, .. },
                ..
            })
        ));
        assert!(matches!(
            call("unknown", None, None, 0).decode(at),
            Ok(CallRow {
                state: RowState::Unknown,
                ..
            })
        ));
        for broken in [
            call("unknown", None, None, 1),
            call("admitted", Some(b"x"), None, 0),
            call("terminal", Some(b"ok"), None, 2),
            call("terminal", Some(b"ok"), Some(vec![1; 31]), 2),
            call("running", None, None, 0),
            StoredCall {
                tool: String::new(),
                ..call("unknown", None, None, 0)
            },
            StoredCall {
                request: Some(String::new()),
                ..call("admitted", None, None, 0)
            },
        ] {
            match broken.clone().decode(at) {
                Err(LedgerError::MalformedRow { detail }) => {
                    assert!(detail.starts_with(at), "{detail}");
                }
                other => panic!("{broken:?} decoded as {other:?}"),
            }
        }
    }
}
