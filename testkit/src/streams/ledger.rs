//! The ledger's stream checker: small closed operations (derivable
//! with `arbitrary` behind the `arbitrary` feature) turned into real
//! requests, run through [`custos_core::ledger::step`], with invariants checked after
//! every step that are stated independently of how the ledger decides. The
//! fuzz target (`fuzz/fuzz_targets/ledger.rs`), the property tests and the
//! corpus replay all run [`check_ledger_stream`].

use std::collections::BTreeSet;

use super::{violation, Violation};
use custos_core::ledger::{
    decide, step_with, Admission, Answer, AttachToken, CloseOutcome, Decide, Key, LedgerError,
    LedgerState, Limits, OpId, Request, RowState, ScopeState, SessionId, Tool, WorkspaceId,
};

/// One step of a ledger request stream. Indices are reduced modulo small
/// pools (3 sessions, 3 ops, 3 tokens, 2 workspaces, 2 tools, incarnations
/// 0..4), so streams collide on keys often.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum LedgerOp {
    /// Restart recovery.
    Open,
    /// `attach`.
    Attach {
        /// Session index.
        session: u8,
        /// Workspace index.
        workspace: u8,
        /// Incarnation.
        incarnation: u8,
        /// Token index.
        token: u8,
    },
    /// `admit` of tool `tool`.
    Admit {
        /// Session index.
        session: u8,
        /// Op index.
        op: u8,
        /// Incarnation.
        incarnation: u8,
        /// Token index.
        token: u8,
        /// Tool index.
        tool: u8,
    },
    /// `finish` with an outcome of `len` bytes.
    Finish {
        /// Session index.
        session: u8,
        /// Op index.
        op: u8,
        /// Incarnation.
        incarnation: u8,
        /// Outcome length.
        len: u8,
    },
    /// `mark_unknown`.
    MarkUnknown {
        /// Session index.
        session: u8,
        /// Op index.
        op: u8,
        /// Incarnation.
        incarnation: u8,
    },
    /// `query`.
    Query {
        /// Session index.
        session: u8,
        /// Op index.
        op: u8,
        /// Incarnation.
        incarnation: u8,
    },
    /// `query_or_fence`.
    QueryOrFence {
        /// Session index.
        session: u8,
        /// Op index.
        op: u8,
        /// Incarnation.
        incarnation: u8,
    },
    /// `stop_or_fence` for tool `tool`.
    StopOrFence {
        /// Session index.
        session: u8,
        /// Op index.
        op: u8,
        /// Incarnation.
        incarnation: u8,
        /// Tool index.
        tool: u8,
    },
    /// `ack`.
    Ack {
        /// Session index.
        session: u8,
        /// Op index.
        op: u8,
        /// Incarnation.
        incarnation: u8,
    },
    /// `begin_close`.
    BeginClose {
        /// Session index.
        session: u8,
        /// Incarnation.
        incarnation: u8,
    },
    /// `finish_close`.
    FinishClose {
        /// Session index.
        session: u8,
        /// Incarnation.
        incarnation: u8,
    },
    /// `release`.
    Release {
        /// Session index.
        session: u8,
    },
    /// `unacked`.
    Unacked {
        /// Session index.
        session: u8,
    },
    /// `admitted` for tool `tool`.
    Admitted {
        /// Session index.
        session: u8,
        /// Tool index.
        tool: u8,
    },
}

/// The limits the checker runs under: small, so the bounds are reached.
pub const STREAM_LIMITS: Limits = Limits {
    max_unclean_scopes: 2,
    max_ledger_bytes: 40,
    reservation_bytes: 16,
};

struct Names {
    sessions: Vec<SessionId>,
    workspaces: Vec<WorkspaceId>,
    ops: Vec<OpId>,
    tokens: Vec<AttachToken>,
    tools: Vec<Tool>,
}

impl Names {
    fn new() -> Result<Self, LedgerError> {
        Ok(Names {
            sessions: ["s0", "s1", "s2"]
                .iter()
                .map(|n| SessionId::new(*n))
                .collect::<Result<_, _>>()?,
            workspaces: ["w0", "w1"]
                .iter()
                .map(|n| WorkspaceId::new(*n))
                .collect::<Result<_, _>>()?,
            ops: ["o0", "o1", "o2"]
                .iter()
                .map(|n| OpId::new(*n))
                .collect::<Result<_, _>>()?,
            tokens: ["t0", "t1", "t2"]
                .iter()
                .map(|n| AttachToken::new(*n))
                .collect::<Result<_, _>>()?,
            tools: ["program", "tool-call"]
                .iter()
                .map(|n| Tool::new(*n))
                .collect::<Result<_, _>>()?,
        })
    }

    fn session(&self, i: u8) -> SessionId {
        self.sessions[usize::from(i) % self.sessions.len()].clone()
    }

    fn key(&self, session: u8, op: u8, incarnation: u8) -> Key {
        Key {
            session: self.session(session),
            op: self.ops[usize::from(op) % self.ops.len()].clone(),
            step: 0,
            source_index: 0,
            incarnation: u64::from(incarnation % 4),
        }
    }

    fn tool(&self, i: u8) -> Tool {
        self.tools[usize::from(i) % self.tools.len()].clone()
    }

    fn request(&self, op: LedgerOp, now: u64) -> Request {
        match op {
            LedgerOp::Open => Request::Open,
            LedgerOp::Attach {
                session,
                workspace,
                incarnation,
                token,
            } => Request::Attach {
                session: self.session(session),
                workspace: self.workspaces[usize::from(workspace) % 2].clone(),
                incarnation: u64::from(incarnation % 4),
                token: self.tokens[usize::from(token) % 3].clone(),
            },
            LedgerOp::BeginClose {
                session,
                incarnation,
            } => Request::BeginClose {
                session: self.session(session),
                incarnation: u64::from(incarnation % 4),
            },
            LedgerOp::FinishClose {
                session,
                incarnation,
            } => Request::FinishClose {
                session: self.session(session),
                incarnation: u64::from(incarnation % 4),
            },
            LedgerOp::Release { session } => Request::Release {
                session: self.session(session),
                now,
            },
            LedgerOp::Unacked { session } => Request::Unacked {
                session: self.session(session),
            },
            LedgerOp::Admitted { session, tool } => Request::Admitted {
                session: self.session(session),
                tool: self.tool(tool),
            },
            keyed => self.keyed_request(keyed, now),
        }
    }

    /// The requests on one call's key. (Any other operation handed here
    /// goes back to [`Self::request`], which answers it itself.)
    fn keyed_request(&self, op: LedgerOp, now: u64) -> Request {
        match op {
            LedgerOp::Admit {
                session,
                op,
                incarnation,
                token,
                tool,
            } => Request::Admit {
                key: self.key(session, op, incarnation),
                tool: self.tool(tool),
                token: self.tokens[usize::from(token) % 3].clone(),
                request: None,
            },
            LedgerOp::Finish {
                session,
                op,
                incarnation,
                len,
            } => Request::Finish {
                key: self.key(session, op, incarnation),
                outcome: vec![b'x'; usize::from(len % 20)],
            },
            LedgerOp::MarkUnknown {
                session,
                op,
                incarnation,
            } => Request::MarkUnknown {
                key: self.key(session, op, incarnation),
            },
            LedgerOp::Query {
                session,
                op,
                incarnation,
            } => Request::Query {
                key: self.key(session, op, incarnation),
            },
            LedgerOp::QueryOrFence {
                session,
                op,
                incarnation,
            } => Request::QueryOrFence {
                key: self.key(session, op, incarnation),
                outcome: b"did-not-start".to_vec(),
            },
            LedgerOp::StopOrFence {
                session,
                op,
                incarnation,
                tool,
            } => Request::StopOrFence {
                key: self.key(session, op, incarnation),
                tool: self.tool(tool),
            },
            LedgerOp::Ack {
                session,
                op,
                incarnation,
            } => Request::Ack {
                key: self.key(session, op, incarnation),
            },
            other @ (LedgerOp::Open
            | LedgerOp::Attach { .. }
            | LedgerOp::BeginClose { .. }
            | LedgerOp::FinishClose { .. }
            | LedgerOp::Release { .. }
            | LedgerOp::Unacked { .. }
            | LedgerOp::Admitted { .. }) => self.request(other, now),
        }
    }
}

/// The real requests a stream stands for (the `n`th request carries
/// `now = n`): for differential tests of a backend against [`custos_core::ledger::step`].
pub fn requests(ops: &[LedgerOp]) -> Result<Vec<Request>, Violation> {
    let names = Names::new().map_err(|e| violation("names-valid", 0, e.to_string()))?;
    Ok(ops
        .iter()
        .enumerate()
        .map(|(n, op)| names.request(*op, n as u64))
        .collect())
}

/// Runs a ledger request stream under [`STREAM_LIMITS`] and checks, after
/// every step:
///
/// - **once**: a key that ever had a row or tombstone is never `Fresh`
///   (so a key is admitted at most once, and never after a fence, a bar or
///   an ack);
/// - **by value**: `Fresh` only for the stored scope's incarnation and
///   attach token, on an `Open` scope;
/// - **budget**: a `Fresh` or a `finish` never grows the held bytes past
///   `max_ledger_bytes` (fences are exempt, so the sum may already be over);
/// - **slots**: after an `attach`, at most `max_unclean_scopes` unclean
///   scopes;
/// - **reopen**: a scope's incarnation changes only from `Closed(AllRetired)`
///   to exactly `+ 1`;
/// - **recovery**: after `open` no row is `admitted`;
/// - reads and refusals write nothing; rows and tombstones are disjoint;
///   every stored terminal outcome matches its digest and size.
pub fn check_ledger_stream(ops: &[LedgerOp]) -> Result<(), Violation> {
    check_ledger_stream_with(decide, ops)
}

/// [`check_ledger_stream`] over any decision function with [`decide`]'s
/// signature — how the tests show the checker catches a broken ledger.
pub fn check_ledger_stream_with(decide: Decide, ops: &[LedgerOp]) -> Result<(), Violation> {
    let names = Names::new().map_err(|e| violation("names-valid", 0, e.to_string()))?;
    let limits = STREAM_LIMITS;
    let mut state = LedgerState::default();
    let mut ever: BTreeSet<Key> = BTreeSet::new();
    for (step, op) in ops.iter().enumerate() {
        let req = names.request(*op, step as u64);
        let before = state.clone();
        let Ok((answer, next)) = step_with(decide, &before, &limits, &req) else {
            continue; // a refusal persists nothing
        };
        if !req.writes() && next != before {
            return Err(violation(
                "reads-write-nothing",
                step,
                format!("{req:?} changed the ledger"),
            ));
        }
        check_answer(step, &req, &answer, &before, &next, &ever)?;
        check_bounds(step, &limits, &answer, &before, &next)?;
        check_rows(step, &before, &next)?;
        ever.extend(next.calls.keys().cloned());
        ever.extend(next.acks.iter().cloned());
        state = next;
    }
    Ok(())
}

/// **once** and **by value** for a `Fresh` admission; **recovery** for
/// `open`.
fn check_answer(
    step: usize,
    req: &Request,
    answer: &Answer,
    before: &LedgerState,
    next: &LedgerState,
    ever: &BTreeSet<Key>,
) -> Result<(), Violation> {
    match (req, answer) {
        (Request::Admit { key, token, .. }, Answer::Admission(Admission::Fresh)) => {
            if ever.contains(key) {
                return Err(violation(
                    "a-key-is-admitted-at-most-once",
                    step,
                    format!("{key:?} admitted Fresh again"),
                ));
            }
            let ok = before.scopes.get(&key.session).is_some_and(|s| {
                s.state == ScopeState::Open
                    && s.incarnation == key.incarnation
                    && s.attach_token == *token
            });
            if !ok {
                return Err(violation(
                    "fresh-only-for-the-current-token-and-incarnation",
                    step,
                    format!(
                        "{key:?} with {token} over {:?}",
                        before.scopes.get(&key.session)
                    ),
                ));
            }
        }
        (Request::Open, _)
            if next
                .calls
                .values()
                .any(|r| matches!(r.state, RowState::Admitted { .. })) =>
        {
            return Err(violation(
                "open-leaves-nothing-admitted",
                step,
                String::new(),
            ));
        }
        _ => {}
    }
    Ok(())
}

/// **budget** after a `Fresh` or a `finish`; **slots** after an `attach`.
fn check_bounds(
    step: usize,
    limits: &Limits,
    answer: &Answer,
    before: &LedgerState,
    next: &LedgerState,
) -> Result<(), Violation> {
    if matches!(
        answer,
        Answer::Admission(Admission::Fresh) | Answer::Finished
    ) && next.ledger_bytes() > limits.max_ledger_bytes
        && next.ledger_bytes() > before.ledger_bytes()
    {
        return Err(violation(
            "budget-never-exceeded-by-admit-or-finish",
            step,
            format!("{} > {}", next.ledger_bytes(), limits.max_ledger_bytes),
        ));
    }
    if matches!(answer, Answer::Attached(_)) && next.unclean_scopes() > limits.max_unclean_scopes {
        return Err(violation(
            "unclean-scopes-bounded",
            step,
            format!("{} unclean", next.unclean_scopes()),
        ));
    }
    Ok(())
}

/// **reopen**, and the rows' integrity: rows and tombstones disjoint, every
/// terminal outcome matching its digest and size.
fn check_rows(step: usize, before: &LedgerState, next: &LedgerState) -> Result<(), Violation> {
    for (session, s) in &next.scopes {
        if let Some(old) = before.scopes.get(session) {
            if s.incarnation != old.incarnation
                && (old.state != ScopeState::Closed(CloseOutcome::AllRetired)
                    || old.incarnation.checked_add(1) != Some(s.incarnation))
            {
                return Err(violation(
                    "reopen-only-from-all-retired-at-plus-one",
                    step,
                    format!("{old:?} -> {s:?}"),
                ));
            }
        }
    }
    if let Some(k) = next.acks.iter().find(|k| next.calls.contains_key(*k)) {
        return Err(violation(
            "rows-and-tombstones-disjoint",
            step,
            format!("{k:?}"),
        ));
    }
    if let Some((k, _)) = next.calls.iter().find(|(k, r)| r.read(k).is_err()) {
        return Err(violation(
            "terminal-outcomes-match-their-digest",
            step,
            format!("{k:?}"),
        ));
    }
    Ok(())
}

/// Decodes `data` as an operation stream (with `arbitrary`) and runs
/// [`check_ledger_stream`]. Undecodable tails are ignored: every input is a
/// stream.
#[cfg(feature = "arbitrary")]
pub fn check_ledger_bytes(data: &[u8]) -> Result<(), Violation> {
    /// Streams longer than this are truncated: bounded work per input.
    const MAX_OPS: usize = 2048;
    check_ledger_stream(&super::decode_ops::<LedgerOp>(data, MAX_OPS))
}
