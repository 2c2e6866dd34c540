//! Model of the execution ledger (`custos_core::ledger`).
//!
//! One session, two planned calls per incarnation, incarnations 1 and 2.
//! The actors:
//!
//! - the **runtime** of the current executor process: it asks the ledger to
//!   admit a call by putting a `Run` (the admit request, carrying its attach
//!   token) on the wire, runs the program on `Fresh`, and finishes it. It may
//!   **restart inside one open** (`RuntimeRestart`): it forgets what it was
//!   running and keeps its attach token; the calls it was running stay
//!   `admitted` until the node actor settles them (`MarkUnknown`);
//! - the **executor process** may die and a new one start
//!   (`ProcessRestart`): the new opener runs `open` (restart recovery) and
//!   attaches with a new token in its start-up step;
//! - the **recovery process** puts `query_or_fence` requests on the wire
//!   (`Fence`), the host puts `stop_or_fence` (`Stop`) and `ack` (`Ack`);
//!   the host closes, releases and reopens the scope.
//!
//! The wire is a set: a `Run` once sent may be delivered any number of
//! times, at any later point — in any order, duplicated, late (after the
//! process that sent it died, after the key was acknowledged, after a
//! fence overtook it). `Stop`, `Ack` and fences carry nothing of their
//! sender's state (no token), so a duplicating wire for them is the same as
//! letting them arrive at any step, for any key of this or an earlier
//! incarnation, any number of times: they are actions, not wire entries,
//! which keeps the wire (and the state space) small.
//!
//! Replies can be lost (`Lose`): the ledger decides and writes, and the
//! runtime never hears. Each `Run` carries the admission's own request id
//! (its key, its process and its runtime generation: a restarted runtime
//! asks anew), and the runtime acts only on the first reply to a request
//! it is still awaiting — a real client matches a reply to its outstanding
//! request. So a lost `Fresh` followed by a redelivery of the same `Run` is
//! a retry, and the rule "a retried admission gets its own answer" is
//! checked: while nothing else wrote the key since the lost reply, and
//! the scope kept its incarnation and attach token and did not close, the
//! retry must be answered `Fresh` (a close begun since included), and
//! acting on it must not start the key twice. Every request goes through
//! [`custos_core::ledger::step_with`] over the real [`ledger::decide`]; a
//! mutant wraps `decide`. A monitor records what the ledger answered and
//! the properties read the record.

use custos_core::ledger::{
    self, Admission, Answer, AttachToken, CallState, CloseOutcome, Decision, Effect, Fencing, Key,
    LedgerError, LedgerState, Limits, Lookup, OpId, Request, RequestId, RowState, ScopeState,
    SessionId, Stopping, Tool, View, WorkspaceId,
};
use stateright::{Model, Property};

use crate::Bound;

/// Calls planned per incarnation.
pub const OPS: u8 = 1;
/// Keys: `0..OPS` are incarnation 1's calls, `OPS..KEYS` incarnation 2's.
const KEYS: u8 = 2 * OPS;
/// The highest incarnation explored (the scope starts at 1).
pub const MAX_INCARNATION: u8 = 2;

/// The limits the model runs under: a reservation (4) fits an empty
/// ledger (5) but not beside an unacknowledged outcome (3) — one left
/// behind by a released scope, or a fence, which skips the budget.
pub const MODEL_LIMITS: Limits = Limits {
    max_unclean_scopes: 1,
    max_ledger_bytes: 5,
    reservation_bytes: 4,
};

crate::mutants! {
    /// A known way to get the ledger wrong, each a wrapped decision.
    pub enum Mutant {
        /// `ack` deletes the row and writes no tombstone.
        AckWithoutTombstone => "ack-deletes-row-without-tombstone",
        /// `stop_or_fence` inserts nothing for a missing key.
        StopDoesNotFence => "stop-or-fence-inserts-nothing-for-missing-key",
        /// `query_or_fence` answers `Fenced` but does not settle the missing row.
        FenceDoesNotSettle => "query-or-fence-does-not-settle-missing-row",
        /// `admit` skips the attach-token comparison.
        AdmitSkipsToken => "admit-skips-attach-token-comparison",
        /// `admit` does not keep the admission's request id on the row.
        AdmitForgetsRequest => "admit-forgets-its-request-id",
        /// A retry is recognised by the attach token alone, not the request
        /// id: a restarted runtime's new admission of a running key is
        /// answered `Fresh`.
        RetryByTokenAlone => "retry-recognised-by-token-alone",
        /// A retried admission is recognised in a closed scope too.
        RetryInClosedScope => "retry-fresh-in-closed-scope",
        /// `open` leaves `admitted` rows `admitted`.
        OpenLeavesAdmitted => "open-leaves-admitted-rows-admitted",
    }
}

impl Mutant {
    fn decide(self) -> ledger::Decide {
        match self {
            Mutant::AckWithoutTombstone => ack_without_tombstone,
            Mutant::StopDoesNotFence => stop_does_not_fence,
            Mutant::FenceDoesNotSettle => fence_does_not_settle,
            Mutant::AdmitSkipsToken => admit_skips_token,
            Mutant::AdmitForgetsRequest => admit_forgets_request,
            Mutant::RetryByTokenAlone => retry_by_token_alone,
            Mutant::RetryInClosedScope => retry_in_closed_scope,
            Mutant::OpenLeavesAdmitted => open_leaves_admitted,
        }
    }
}

fn ack_without_tombstone(v: &View, l: &Limits, r: &Request) -> Result<Decision, LedgerError> {
    let mut d = ledger::decide(v, l, r)?;
    d.effects.retain(|e| !matches!(e, Effect::PutAck(_)));
    Ok(d)
}

fn stop_does_not_fence(v: &View, l: &Limits, r: &Request) -> Result<Decision, LedgerError> {
    let mut d = ledger::decide(v, l, r)?;
    if d.answer == Answer::Stopping(Stopping::Barred) {
        d.effects.clear();
    }
    Ok(d)
}

fn fence_does_not_settle(v: &View, l: &Limits, r: &Request) -> Result<Decision, LedgerError> {
    let mut d = ledger::decide(v, l, r)?;
    if d.answer == Answer::Fencing(Fencing::Fenced) {
        d.effects.clear();
    }
    Ok(d)
}

fn admit_skips_token(v: &View, l: &Limits, r: &Request) -> Result<Decision, LedgerError> {
    match (r, &v.scope) {
        (
            Request::Admit {
                key, tool, request, ..
            },
            Some(scope),
        ) => ledger::decide(
            v,
            l,
            &Request::Admit {
                key: key.clone(),
                tool: tool.clone(),
                token: scope.attach_token.clone(),
                request: request.clone(),
            },
        ),
        _ => ledger::decide(v, l, r),
    }
}

fn admit_forgets_request(v: &View, l: &Limits, r: &Request) -> Result<Decision, LedgerError> {
    let mut d = ledger::decide(v, l, r)?;
    for e in &mut d.effects {
        if let Effect::PutCall(
            _,
            ledger::CallRow {
                state: RowState::Admitted { request, .. },
                ..
            },
        ) = e
        {
            *request = None;
        }
    }
    Ok(d)
}

fn retry_by_token_alone(v: &View, l: &Limits, r: &Request) -> Result<Decision, LedgerError> {
    if let (Request::Admit { token, .. }, Some(scope), Some(row)) = (r, &v.scope, &v.call) {
        if scope.attach_token == *token
            && scope.state == ScopeState::Open
            && matches!(row.state, RowState::Admitted { .. })
        {
            return Ok(Decision {
                answer: Answer::Admission(Admission::Fresh),
                effects: Vec::new(),
            });
        }
    }
    ledger::decide(v, l, r)
}

fn retry_in_closed_scope(v: &View, l: &Limits, r: &Request) -> Result<Decision, LedgerError> {
    if let (
        Request::Admit {
            token,
            request: Some(id),
            ..
        },
        Some(scope),
        Some(row),
    ) = (r, &v.scope, &v.call)
    {
        let own = matches!(&row.state, RowState::Admitted { request: Some(q), .. } if q == id);
        if own && scope.attach_token == *token && matches!(scope.state, ScopeState::Closed(_)) {
            return Ok(Decision {
                answer: Answer::Admission(Admission::Fresh),
                effects: Vec::new(),
            });
        }
    }
    ledger::decide(v, l, r)
}

fn open_leaves_admitted(v: &View, l: &Limits, r: &Request) -> Result<Decision, LedgerError> {
    let mut d = ledger::decide(v, l, r)?;
    if *r == Request::Open {
        d.effects.clear();
    }
    Ok(d)
}

/// A request on the wire. `key` indexes the model's calls: `0..OPS` in
/// incarnation 1, `OPS` in incarnation 2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Msg {
    /// The runtime of process `epoch` asks to admit `key` (its attach token
    /// is the process's).
    Run {
        /// The call.
        key: u8,
        /// The sending process.
        epoch: u8,
        /// The sending runtime's generation within the process (its
        /// restarts so far): with the key and the process, the admission's
        /// request id.
        generation: u8,
    },
    /// `stop_or_fence(key)` from the host.
    Stop(u8),
    /// `query_or_fence(key)` from the recovery process.
    Fence(u8),
    /// `ack(key)` from the host.
    Ack(u8),
}

/// An action of an actor or of the environment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Put a request on the wire.
    Send(Msg),
    /// The wire delivers a request (again, perhaps).
    Deliver(Msg),
    /// The wire delivers a request and loses the ledger's reply.
    Lose(Msg),
    /// `stop_or_fence(key)` from the host, for a key of this or an earlier
    /// incarnation.
    Stop(u8),
    /// `query_or_fence(key)` from the recovery process.
    Fence(u8),
    /// `ack(key)` from the host.
    Ack(u8),
    /// The runtime finishes the program of `key`.
    Finish(u8),
    /// The node actor settles `key`, lost by a runtime restart, as unknown.
    MarkUnknown(u8),
    /// The runtime restarts inside the open: it forgets its running calls
    /// and keeps its attach token.
    RuntimeRestart,
    /// The executor process dies; a new one opens the ledger (recovery) and
    /// attaches with a new token.
    ProcessRestart,
    /// The host begins closing the scope.
    BeginClose,
    /// The host finishes closing the scope.
    FinishClose,
    /// An operator releases the scope.
    Release,
    /// The host attaches at incarnation + 1.
    Reopen,
}

/// Bits of [`SysState::broken`].
mod rule {
    pub const ONCE: u8 = 1 << 0;
    pub const STALE: u8 = 1 << 1;
    pub const BARRED: u8 = 1 << 2;
    pub const BUDGET: u8 = 1 << 3;
    pub const REOPEN: u8 = 1 << 4;
    pub const RECOVERY: u8 = 1 << 5;
    pub const RETRY: u8 = 1 << 6;
    pub const CLOSED: u8 = 1 << 7;
}

/// The global state: the ledger, the actors and the monitor.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SysState {
    /// The ledger, as stored.
    pub ledger: LedgerState,
    /// The current executor process (its attach token is `p<epoch>`).
    pub epoch: u8,
    /// The incarnation the host works in.
    pub incarnation: u8,
    /// Keys the current runtime is running (bits).
    pub running: u8,
    /// Runtime restarts so far.
    pub runtime_restarts: u8,
    /// Requests sent (the wire never forgets one).
    pub wire: Vec<Msg>,
    /// Keys whose `Run` the current runtime sent and has had no reply to
    /// (bits).
    pub awaiting: u8,
    /// Monitor: keys whose admission was answered `Fresh` with the reply
    /// lost, and which nothing has written since (bits).
    pub lost_fresh: u8,
    /// Monitor: keys that were ever `Fresh` (bits).
    pub started: u8,
    /// Monitor: keys a stop or fence barred (bits).
    pub barred: u8,
    /// Monitor: rules seen broken (bits of `rule`).
    pub broken: u8,
}

/// The model: its bound and, optionally, the defect it exhibits.
#[derive(Clone, Debug)]
pub struct LedgerModel {
    /// At most this many process restarts.
    pub max_process_restarts: u8,
    /// At most this many runtime restarts.
    pub max_runtime_restarts: u8,
    /// The defect applied, if any.
    pub mutant: Option<Mutant>,
    names: Names,
}

#[derive(Clone, Debug)]
struct Names {
    session: SessionId,
    workspace: WorkspaceId,
    tool: Tool,
    ops: Vec<OpId>,
    tokens: Vec<AttachToken>,
}

fn bit(key: u8) -> u8 {
    1 << key
}

impl LedgerModel {
    fn key(&self, k: u8) -> Key {
        Key {
            session: self.names.session.clone(),
            op: self.names.ops[usize::from(k.checked_rem(OPS).unwrap_or(0))].clone(),
            step: 0,
            source_index: 0,
            incarnation: if k < OPS { 1 } else { 2 },
        }
    }

    fn token(&self, epoch: u8) -> AttachToken {
        self.names.tokens[usize::from(epoch) % self.names.tokens.len()].clone()
    }

    /// Runs one request through the (possibly mutated) ledger and the
    /// monitor's generic checks.
    fn run(&self, s: &mut SysState, req: &Request) -> Result<Answer, LedgerError> {
        let decide = self
            .mutant
            .map_or(ledger::decide as ledger::Decide, Mutant::decide);
        let before_bytes = s.ledger.ledger_bytes();
        let before_scope = s.ledger.scopes.get(&self.names.session).cloned();
        let (answer, next) = ledger::step_with(decide, &s.ledger, &MODEL_LIMITS, req)?;
        // A lost `Fresh` is owed to its retry while nothing else wrote its
        // key, and the scope kept its incarnation and attach token.
        // A closed scope is finished: the debt ends there too.
        let owner = |st: &LedgerState| {
            st.scopes.get(&self.names.session).map(|sc| {
                (
                    sc.incarnation,
                    sc.attach_token.clone(),
                    matches!(sc.state, ScopeState::Closed(_)),
                )
            })
        };
        if owner(&s.ledger) != owner(&next) {
            s.lost_fresh = 0;
        }
        for k in 0..KEYS {
            let key = self.key(k);
            if s.ledger.calls.get(&key) != next.calls.get(&key)
                || s.ledger.acks.contains(&key) != next.acks.contains(&key)
            {
                s.lost_fresh &= !bit(k);
            }
        }
        if matches!(
            answer,
            Answer::Admission(Admission::Fresh) | Answer::Finished
        ) && next.ledger_bytes() > MODEL_LIMITS.max_ledger_bytes
            && next.ledger_bytes() > before_bytes
        {
            s.broken |= rule::BUDGET;
        }
        if let (Some(old), Some(new)) = (&before_scope, next.scopes.get(&self.names.session)) {
            if new.incarnation != old.incarnation
                && (old.state != ScopeState::Closed(CloseOutcome::AllRetired)
                    || old.incarnation + 1 != new.incarnation)
            {
                s.broken |= rule::REOPEN;
            }
        }
        s.ledger = next;
        Ok(answer)
    }

    /// The process restarts: a new epoch opens the ledger (checking that
    /// recovery left no call of the dead process admitted) and reattaches.
    fn process_restart(&self, s: &mut SysState) {
        s.running = 0;
        s.awaiting = 0;
        s.lost_fresh = 0;
        s.epoch += 1;
        let _ = self.run(s, &Request::Open);
        // Restart recovery: nothing of the dead process is admitted.
        if s.ledger
            .calls
            .values()
            .any(|r| matches!(r.state, RowState::Admitted { .. }))
        {
            s.broken |= rule::RECOVERY;
        }
        let inc = s.incarnation;
        let _ = self.attach(s, inc);
    }

    /// The admission's own request id: its key, process and runtime
    /// generation.
    fn request(&self, key: u8, epoch: u8, generation: u8) -> RequestId {
        valid(RequestId::new(format!("k{key}e{epoch}g{generation}")))
    }

    /// The wire delivers `Run`; the reply reaches the runtime unless
    /// `lost`, and the runtime acts on it only if it is still awaiting that
    /// request.
    fn deliver_run(&self, s: &mut SysState, key: u8, epoch: u8, generation: u8, lost: bool) {
        let req = Request::Admit {
            key: self.key(key),
            tool: self.names.tool.clone(),
            token: self.token(epoch),
            request: Some(self.request(key, epoch, generation)),
        };
        let closed = matches!(self.scope_state(s), Some(ScopeState::Closed(_)));
        let fresh = matches!(self.run(s, &req), Ok(Answer::Admission(Admission::Fresh)));
        if fresh && closed {
            s.broken |= rule::CLOSED;
        }
        if fresh && epoch != s.epoch {
            s.broken |= rule::STALE;
        }
        if fresh && s.barred & bit(key) != 0 {
            s.broken |= rule::BARRED;
        }
        let awaited =
            epoch == s.epoch && generation == s.runtime_restarts && s.awaiting & bit(key) != 0;
        if !awaited {
            return; // the reply goes to nobody
        }
        if lost {
            if fresh {
                s.lost_fresh |= bit(key);
            }
            return;
        }
        s.awaiting &= !bit(key);
        if s.lost_fresh & bit(key) != 0 && !fresh {
            s.broken |= rule::RETRY;
        }
        s.lost_fresh &= !bit(key);
        if fresh {
            if s.started & bit(key) != 0 {
                s.broken |= rule::ONCE;
            }
            s.started |= bit(key);
            s.running |= bit(key);
        }
    }

    fn deliver(&self, s: &mut SysState, m: Msg) {
        match m {
            Msg::Run {
                key,
                epoch,
                generation,
            } => self.deliver_run(s, key, epoch, generation, false),
            Msg::Stop(key) => {
                let req = Request::StopOrFence {
                    key: self.key(key),
                    tool: self.names.tool.clone(),
                };
                match self.run(s, &req) {
                    Ok(Answer::Stopping(Stopping::Stopped)) => {
                        s.barred |= bit(key);
                        s.running &= !bit(key);
                    }
                    Ok(Answer::Stopping(Stopping::Barred)) => {
                        s.barred |= bit(key);
                    }
                    _ => {}
                }
            }
            Msg::Fence(key) => {
                let req = Request::QueryOrFence {
                    key: self.key(key),
                    outcome: b"dns".to_vec(),
                };
                if let Ok(Answer::Fencing(Fencing::Fenced)) = self.run(s, &req) {
                    s.barred |= bit(key);
                }
            }
            Msg::Ack(key) => {
                let _ = self.run(s, &Request::Ack { key: self.key(key) });
            }
        }
    }

    fn attach(&self, s: &mut SysState, incarnation: u8) -> Result<Answer, LedgerError> {
        let req = Request::Attach {
            session: self.names.session.clone(),
            workspace: self.names.workspace.clone(),
            incarnation: u64::from(incarnation),
            token: self.token(s.epoch),
        };
        self.run(s, &req)
    }

    /// What `req` would answer on `s`, through the model's decision.
    fn would(&self, s: &SysState, req: &Request) -> Result<Answer, LedgerError> {
        let decide = self
            .mutant
            .map_or(ledger::decide as ledger::Decide, Mutant::decide);
        ledger::step_with(decide, &s.ledger, &MODEL_LIMITS, req).map(|(a, _)| a)
    }

    /// What the runtime of process `epoch` would be answered admitting the
    /// current incarnation's first call.
    fn would_admit(&self, s: &SysState, epoch: u8) -> Result<Admission, LedgerError> {
        let req = Request::Admit {
            key: self.key(self.first_key(s)),
            tool: self.names.tool.clone(),
            token: self.token(epoch),
            request: None,
        };
        match self.would(s, &req)? {
            Answer::Admission(a) => Ok(a),
            other => Err(LedgerError::BackendFault {
                reason: format!("{other:?}"),
            }),
        }
    }

    fn first_key(&self, s: &SysState) -> u8 {
        if s.incarnation == 1 {
            0
        } else {
            OPS
        }
    }

    fn stop(&self, s: &SysState) -> Request {
        Request::StopOrFence {
            key: self.key(self.first_key(s)),
            tool: self.names.tool.clone(),
        }
    }

    fn fence(&self, s: &SysState) -> Request {
        Request::QueryOrFence {
            key: self.key(self.first_key(s)),
            outcome: b"dns".to_vec(),
        }
    }

    fn scope_state(&self, s: &SysState) -> Option<ScopeState> {
        s.ledger.scopes.get(&self.names.session).map(|sc| sc.state)
    }

    fn current_keys(&self, s: &SysState) -> impl Iterator<Item = u8> {
        if s.incarnation == 1 {
            0..OPS
        } else {
            OPS..KEYS
        }
    }
}

/// Puts `m` on the wire (once: the wire is a set); the runtime now awaits
/// a `Run`'s reply.
fn send(s: &mut SysState, m: Msg) -> Option<()> {
    let i = s.wire.binary_search(&m).err()?;
    s.wire.insert(i, m);
    if let Msg::Run { key, .. } = m {
        s.awaiting |= bit(key);
    }
    Some(())
}

/// A name from a literal the model knows is valid.
#[allow(clippy::expect_used)]
fn valid<T>(name: Result<T, LedgerError>) -> T {
    name.expect("the model's name literals are valid")
}

impl Model for LedgerModel {
    type State = SysState;
    type Action = Action;

    fn init_states(&self) -> Vec<SysState> {
        let mut s = SysState {
            ledger: LedgerState::default(),
            epoch: 0,
            incarnation: 1,
            running: 0,
            runtime_restarts: 0,
            wire: Vec::new(),
            awaiting: 0,
            lost_fresh: 0,
            started: 0,
            barred: 0,
            broken: 0,
        };
        // The first opener: recovery over an empty ledger, then attach.
        let _ = self.run(&mut s, &Request::Open);
        let _ = self.attach(&mut s, 1);
        vec![s]
    }

    fn actions(&self, s: &SysState, actions: &mut Vec<Action>) {
        if s.broken != 0 {
            return; // a counterexample ends where a rule first breaks
        }
        let open = self.scope_state(s) == Some(ScopeState::Open);
        let known = if s.incarnation == 1 { OPS } else { KEYS };
        for k in 0..known {
            actions.push(Action::Stop(k));
            actions.push(Action::Fence(k));
            actions.push(Action::Ack(k));
        }
        for k in self.current_keys(s) {
            let run = Msg::Run {
                key: k,
                epoch: s.epoch,
                generation: s.runtime_restarts,
            };
            if open && s.wire.binary_search(&run).is_err() {
                actions.push(Action::Send(run));
            }
            if s.running & bit(k) != 0 {
                actions.push(Action::Finish(k));
            } else if matches!(
                s.ledger.calls.get(&self.key(k)).map(|r| &r.state),
                Some(RowState::Admitted { .. })
            ) {
                actions.push(Action::MarkUnknown(k));
            }
        }
        for m in &s.wire {
            actions.push(Action::Deliver(*m));
            if let Msg::Run {
                key,
                epoch,
                generation,
            } = *m
            {
                if epoch == s.epoch
                    && generation == s.runtime_restarts
                    && s.awaiting & bit(key) != 0
                {
                    actions.push(Action::Lose(*m));
                }
            }
        }
        if s.runtime_restarts < self.max_runtime_restarts {
            actions.push(Action::RuntimeRestart);
        }
        if s.epoch < self.max_process_restarts {
            actions.push(Action::ProcessRestart);
        }
        match self.scope_state(s) {
            Some(ScopeState::Open) => actions.push(Action::BeginClose),
            Some(ScopeState::Closing) => {
                actions.push(Action::FinishClose);
                actions.push(Action::Release);
            }
            Some(ScopeState::Closed(CloseOutcome::UnknownCleanup(_))) => {
                actions.push(Action::Release)
            }
            _ => {}
        }
        if s.incarnation < MAX_INCARNATION {
            actions.push(Action::Reopen);
        }
    }

    fn next_state(&self, s: &SysState, action: Action) -> Option<SysState> {
        let mut s = s.clone();
        match action {
            Action::Send(m) => send(&mut s, m)?,
            Action::Deliver(m) => self.deliver(&mut s, m),
            Action::Lose(m) => {
                if let Msg::Run {
                    key,
                    epoch,
                    generation,
                } = m
                {
                    self.deliver_run(&mut s, key, epoch, generation, true);
                }
            }
            Action::Stop(k) => self.deliver(&mut s, Msg::Stop(k)),
            Action::Fence(k) => self.deliver(&mut s, Msg::Fence(k)),
            Action::Ack(k) => self.deliver(&mut s, Msg::Ack(k)),
            Action::Finish(k) => {
                s.running &= !bit(k);
                let req = Request::Finish {
                    key: self.key(k),
                    outcome: b"ok!".to_vec(),
                };
                let _ = self.run(&mut s, &req);
            }
            Action::MarkUnknown(k) => {
                let _ = self.run(&mut s, &Request::MarkUnknown { key: self.key(k) });
            }
            Action::RuntimeRestart => {
                s.running = 0;
                s.awaiting = 0;
                s.lost_fresh = 0;
                s.runtime_restarts += 1;
            }
            Action::ProcessRestart => self.process_restart(&mut s),
            Action::BeginClose => {
                let req = Request::BeginClose {
                    session: self.names.session.clone(),
                    incarnation: u64::from(s.incarnation),
                };
                self.run(&mut s, &req).ok()?;
            }
            Action::FinishClose => {
                let req = Request::FinishClose {
                    session: self.names.session.clone(),
                    incarnation: u64::from(s.incarnation),
                };
                self.run(&mut s, &req).ok()?;
            }
            Action::Release => {
                let req = Request::Release {
                    session: self.names.session.clone(),
                    now: 0,
                };
                self.run(&mut s, &req).ok()?;
            }
            Action::Reopen => {
                // Tried from any state: the ledger must refuse all but a
                // reopen from AllRetired at exactly incarnation + 1.
                let inc = s.incarnation + 1;
                if self.attach(&mut s, inc).is_ok() {
                    s.incarnation = inc;
                    s.running = 0;
                } else {
                    return None;
                }
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = rules();
        properties.extend(answers());
        properties
    }
}

/// The ledger's rules (`always`), in report order.
fn rules() -> Vec<Property<LedgerModel>> {
    vec![
        Property::<LedgerModel>::always(
            "a key admitted once in an incarnation never starts again in it",
            |_, s| s.broken & rule::ONCE == 0,
        ),
        Property::<LedgerModel>::always("a stale runtime's Run is refused", |_, s| {
            s.broken & rule::STALE == 0
        }),
        Property::<LedgerModel>::always(
            "nothing runs after a stop or fence barred its key",
            |_, s| s.broken & rule::BARRED == 0,
        ),
        Property::<LedgerModel>::always(
            "an admit or finish never takes the ledger past its byte budget",
            |_, s| s.broken & rule::BUDGET == 0,
        ),
        Property::<LedgerModel>::always(
            "reopen only from Closed(AllRetired) at incarnation + 1",
            |_, s| s.broken & rule::REOPEN == 0,
        ),
        Property::<LedgerModel>::always(
            "after restart recovery no call of a dead process is admitted",
            |_, s| s.broken & rule::RECOVERY == 0,
        ),
        Property::<LedgerModel>::always(
            "a retried admission whose reply was lost gets its own Fresh",
            |_, s| s.broken & rule::RETRY == 0,
        ),
        Property::<LedgerModel>::always("no admission is Fresh in a closed scope", |_, s| {
            s.broken & rule::CLOSED == 0
        }),
    ]
}

/// The answers the model must reach (`sometimes`), in report order.
///
/// Answers are reached by asking the real decision, on a reachable state,
/// what a request the model could send next would answer: the transition
/// exists, and keeping a record of past answers in the state would multiply
/// the state space.
fn answers() -> Vec<Property<LedgerModel>> {
    let mut answers = admit_and_stop_answers();
    answers.extend(lookup_and_close_answers());
    answers
}

/// The answers of admit, stop_or_fence and query_or_fence, in report order.
fn admit_and_stop_answers() -> Vec<Property<LedgerModel>> {
    vec![
        Property::<LedgerModel>::sometimes("admit answers Fresh", |m, s| {
            m.would_admit(s, s.epoch) == Ok(Admission::Fresh)
        }),
        Property::<LedgerModel>::sometimes(
            "an admission's reply is lost and its retry is awaited",
            |_, s| s.lost_fresh != 0,
        ),
        Property::<LedgerModel>::sometimes("a closed scope holds an admitted call", |m, s| {
            matches!(m.scope_state(s), Some(ScopeState::Closed(_)))
                && s.ledger
                    .calls
                    .values()
                    .any(|r| matches!(r.state, RowState::Admitted { .. }))
        }),
        Property::<LedgerModel>::sometimes("admit answers Existing(Acked)", |m, s| {
            m.would_admit(s, s.epoch) == Ok(Admission::Existing(CallState::Acked))
        }),
        Property::<LedgerModel>::sometimes(
            "a stale runtime's Run is refused StaleToken",
            |m, s| {
                s.epoch > 0
                    && s.wire.contains(&Msg::Run {
                        key: m.first_key(s),
                        epoch: 0,
                        generation: 0,
                    })
                    && m.would_admit(s, 0) == Err(LedgerError::StaleToken)
            },
        ),
        Property::<LedgerModel>::sometimes("admit is refused BudgetExhausted", |m, s| {
            matches!(
                m.would_admit(s, s.epoch),
                Err(LedgerError::BudgetExhausted { .. })
            )
        }),
        Property::<LedgerModel>::sometimes("stop_or_fence answers Stopped", |m, s| {
            m.would(s, &m.stop(s)) == Ok(Answer::Stopping(Stopping::Stopped))
        }),
        Property::<LedgerModel>::sometimes("stop_or_fence answers Barred", |m, s| {
            m.would(s, &m.stop(s)) == Ok(Answer::Stopping(Stopping::Barred))
        }),
        Property::<LedgerModel>::sometimes("stop_or_fence answers Untouched", |m, s| {
            matches!(
                m.would(s, &m.stop(s)),
                Ok(Answer::Stopping(Stopping::Untouched(_)))
            )
        }),
        Property::<LedgerModel>::sometimes("query_or_fence answers Fenced", |m, s| {
            m.would(s, &m.fence(s)) == Ok(Answer::Fencing(Fencing::Fenced))
        }),
        Property::<LedgerModel>::sometimes("query_or_fence answers Standing", |m, s| {
            matches!(
                m.would(s, &m.fence(s)),
                Ok(Answer::Fencing(Fencing::Standing(_)))
            )
        }),
    ]
}

/// The answers of query, unacked, ack, close, release, reopen and open, in
/// report order.
fn lookup_and_close_answers() -> Vec<Property<LedgerModel>> {
    vec![
        Property::<LedgerModel>::sometimes("query answers Missing", |m, s| {
            m.would(
                s,
                &Request::Query {
                    key: m.key(m.first_key(s)),
                },
            ) == Ok(Answer::Lookup(Lookup::Missing))
        }),
        Property::<LedgerModel>::sometimes("query answers Found(Terminal)", |m, s| {
            matches!(
                m.would(
                    s,
                    &Request::Query {
                        key: m.key(m.first_key(s))
                    }
                ),
                Ok(Answer::Lookup(Lookup::Found(CallState::Terminal(_))))
            )
        }),
        Property::<LedgerModel>::sometimes("unacked lists a key", |m, s| {
            matches!(
                m.would(s, &Request::Unacked { session: m.names.session.clone() }),
                Ok(Answer::Unacked(u)) if !u.terminal.is_empty() || !u.unknown.is_empty()
            )
        }),
        Property::<LedgerModel>::sometimes("ack left a tombstone", |_, s| {
            !s.ledger.acks.is_empty()
        }),
        Property::<LedgerModel>::sometimes("finish_close recorded AllRetired", |m, s| {
            m.scope_state(s) == Some(ScopeState::Closed(CloseOutcome::AllRetired))
        }),
        Property::<LedgerModel>::sometimes("finish_close recorded UnknownCleanup", |m, s| {
            matches!(
                m.scope_state(s),
                Some(ScopeState::Closed(CloseOutcome::UnknownCleanup(_)))
            )
        }),
        Property::<LedgerModel>::sometimes("an operator released the scope", |_, s| {
            !s.ledger.releases.is_empty()
        }),
        Property::<LedgerModel>::sometimes("the scope reopened", |_, s| s.incarnation == 2),
        Property::<LedgerModel>::sometimes("open would recover an admitted call", |m, s| {
            s.epoch < m.max_process_restarts
                && matches!(m.would(s, &Request::Open), Ok(Answer::Recovered(n)) if n > 0)
        }),
    ]
}

impl crate::family::MutantModel for LedgerModel {
    type Mutant = Mutant;
    const NAME: &'static str = "ledger";
    const SUMMARY: &'static str = "execution ledger: no key runs twice under late, duplicated and reordered Run/Stop/Ack/fence, restarts and reopen";

    fn at(bound: Bound) -> Result<Self, String> {
        let (max_process_restarts, max_runtime_restarts) = match bound {
            Bound::Ci => (1, 1),
            Bound::Deep => (2, 1),
        };
        let names = Names {
            session: valid(SessionId::new("s")),
            workspace: valid(WorkspaceId::new("w")),
            tool: valid(Tool::new("program")),
            ops: (0..OPS)
                .filter_map(|i| OpId::new(format!("o{i}")).ok())
                .collect(),
            tokens: (0..=max_process_restarts)
                .filter_map(|i| AttachToken::new(format!("p{i}")).ok())
                .collect(),
        };
        Ok(LedgerModel {
            max_process_restarts,
            max_runtime_restarts,
            mutant: None,
            names,
        })
    }

    fn mutant_slot(&mut self) -> &mut Option<Mutant> {
        &mut self.mutant
    }

    fn describe_bound(&self) -> String {
        format!(
            "1 session, {OPS} call(s) x incarnations 1..={MAX_INCARNATION}, process restarts <= {}, runtime restarts <= {}, budget {} / reservation {}",
            self.max_process_restarts,
            self.max_runtime_restarts,
            MODEL_LIMITS.max_ledger_bytes,
            MODEL_LIMITS.reservation_bytes
        )
    }
}
