//! Model of session custody across catalogues (`custos_core::catalogue::custody`).
//!
//! Two or three catalogues — separate databases — each hold the session's
//! custody row (or nothing). Catalogue 0 starts with the session `Resident`.
//! One orchestrator moves the session between catalogues, again and again,
//! over a network that loses requests, loses replies, and keeps duplicate
//! copies of a call (a retry sent while the first copy is still in flight)
//! that land later. The orchestrator crashes and restarts.
//!
//! Every landing request goes through [`custos_core::catalogue::custody::decide`]; a
//! mutant wraps that call. The orchestrator's rules (when it may abort, when
//! it may finish) are stated in `docs/proofs/custody.md` and implemented by
//! [`CustodyModel::actions`]:
//!
//! - **R1** one move at a time: a move starts only when no `begin` or
//!   `import` call of an earlier move is in flight and no catalogue holds a
//!   `Moving` row (late `abort` and `finish` copies may still be in flight);
//! - **R2** retries repeat the same op; a move never changes its op;
//! - **R3** abort only before any `import` was sent (the transfer failed),
//!   or after the target answered the import with `Conflict`, and only once
//!   no `begin` copy of the move is in flight;
//! - **R4** finish only after the target answered `Imported(op)`;
//! - **R5** a restarted orchestrator waits until its crashed incarnation's
//!   calls have all landed or been lost, then resumes every `Moving` row at
//!   the import step (as if an import had been sent: it may not abort
//!   without the target's `Conflict`).

use custos_core::catalogue::custody::{self, Custody, CustodyError, MoveOp, Peer};
use stateright::{Model, Property};

use crate::Bound;

/// Room for this many catalogues; a bound uses [`CustodyModel::cats`].
pub const CATS: usize = 3;

crate::mutants! {
    /// A defect the model can be made to exhibit, each a wrapped decision.
    pub enum Mutant {
        /// `abort_move` on a `Moved` row puts the session back (`Resident`): the
        /// handler checks that a move row exists, not that it is `Moving(op)`.
        AbortAfterMoved => "abort-accepted-after-moved",
        /// `import_session` ignores the op: an `Imported` row always answers
        /// `Conflict` (a retried import is not recognized as a repeat) and a
        /// `Moved` row is always replaced.
        ImportIgnoresOp => "import-ignores-the-op",
        /// `begin_move` accepts a `Moved` session like a resident one.
        BeginOnMoved => "begin-move-on-moved",
    }
}

/// A call the orchestrator sends to one catalogue. Ops and peers are indices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Call {
    /// `begin_move(op, to)`.
    Begin {
        /// Op index.
        op: u8,
        /// Destination catalogue.
        to: u8,
    },
    /// `import_session(op, from)`.
    Import {
        /// Op index.
        op: u8,
        /// Source catalogue.
        from: u8,
    },
    /// `finish_move(op)`.
    Finish {
        /// Op index.
        op: u8,
    },
    /// `abort_move(op)`.
    Abort {
        /// Op index.
        op: u8,
    },
}

impl Call {
    fn op(self) -> u8 {
        match self {
            Call::Begin { op, .. }
            | Call::Import { op, .. }
            | Call::Finish { op }
            | Call::Abort { op } => op,
        }
    }
}

/// What the orchestrator is doing (volatile: a crash forgets it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// No move in progress.
    Idle,
    /// Sending `begin_move` to `src`.
    Begin {
        /// Op index.
        op: u8,
        /// Source.
        src: u8,
        /// Destination.
        dst: u8,
    },
    /// Sending `import_session` to `dst`.
    Import {
        /// Op index.
        op: u8,
        /// Source.
        src: u8,
        /// Destination.
        dst: u8,
        /// Whether an import may have been sent.
        sent: bool,
    },
    /// Sending `finish_move` to `src`.
    Finish {
        /// Op index.
        op: u8,
        /// Source.
        src: u8,
    },
    /// Sending `abort_move` to `src`.
    Abort {
        /// Op index.
        op: u8,
        /// Source.
        src: u8,
    },
    /// Restarted; waiting for the network to drain before resuming.
    Recover,
}

/// An action of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Start a new move from `src` to `dst` (any pair: the orchestrator may
    /// hold stale beliefs about where the session is).
    Start {
        /// Source.
        src: u8,
        /// Destination.
        dst: u8,
    },
    /// Send (or re-send) the current phase's call.
    Send,
    /// Give up before the import: the transfer failed (R3).
    GiveUp,
    /// A request lands at its catalogue; its reply reaches the orchestrator
    /// or is lost.
    Land {
        /// Index into the in-flight list.
        i: u8,
        /// Whether the reply is delivered.
        reply: bool,
    },
    /// A request is lost before it lands.
    Drop {
        /// Index into the in-flight list.
        i: u8,
    },
    /// The orchestrator crashes and restarts (R5).
    Crash,
    /// Resume the `Moving` row a scan finds (after a restart, or when idle).
    Resume,
}

mod seen {
    pub const ROUND_TRIP: u8 = 1 << 0;
    pub const EARLY_ABORT: u8 = 1 << 1;
    pub const LATE_COPY: u8 = 1 << 2;
    pub const REPEAT_ANSWERED: u8 = 1 << 3;
    pub const ONWARD: u8 = 1 << 4;
    pub const RESUMED: u8 = 1 << 5;
}

/// The global state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SysState {
    /// Each catalogue's custody row: `None` = no registration.
    pub cats: [Option<Custody>; CATS],
    /// In-flight requests `(catalogue, call)`, sorted.
    pub net: Vec<(u8, Call)>,
    /// The orchestrator.
    pub phase: Phase,
    /// Ops issued so far.
    pub ops: u8,
    /// Crashes so far.
    pub crashes: u8,
    /// Monitor: outcomes reached.
    pub seen: u8,
}

/// The model: its bound and, optionally, the defect it exhibits.
#[derive(Clone, Debug)]
pub struct CustodyModel {
    /// Catalogues in play (2 or 3).
    pub cats: u8,
    /// Moves the orchestrator may start.
    pub max_ops: u8,
    /// In-flight capacity of the network.
    pub net_cap: usize,
    /// Orchestrator crashes.
    pub max_crashes: u8,
    /// Catalogue (peer) names by index.
    pub peers: Vec<Peer>,
    /// Op names by index.
    pub op_names: Vec<MoveOp>,
    /// The defect applied, if any.
    pub mutant: Option<Mutant>,
}

impl CustodyModel {
    fn op_index(&self, op: &MoveOp) -> Option<u8> {
        self.op_names
            .iter()
            .position(|o| o == op)
            .and_then(|i| u8::try_from(i).ok())
    }

    fn peer_index(&self, p: &Peer) -> Option<u8> {
        self.peers
            .iter()
            .position(|x| x == p)
            .and_then(|i| u8::try_from(i).ok())
    }

    fn request(&self, call: Call) -> Option<custody::Request> {
        let op = |i: u8| self.op_names.get(usize::from(i)).cloned();
        let peer = |i: u8| self.peers.get(usize::from(i)).cloned();
        Some(match call {
            Call::Begin { op: o, to } => custody::Request::BeginMove {
                op: op(o)?,
                to: peer(to)?,
            },
            Call::Import { op: o, from } => custody::Request::ImportSession {
                op: op(o)?,
                from: peer(from)?,
            },
            Call::Finish { op: o } => custody::Request::FinishMove { op: op(o)? },
            Call::Abort { op: o } => custody::Request::AbortMove { op: op(o)? },
        })
    }

    /// The real decision, or the mutant's variation of it.
    fn decide(
        &self,
        stored: Option<&Custody>,
        req: &custody::Request,
    ) -> Result<custody::Decision, CustodyError> {
        let changed = |c: Custody| {
            Ok(custody::Decision {
                custody: c,
                changed: true,
            })
        };
        match (self.mutant, req, stored) {
            (
                Some(Mutant::AbortAfterMoved),
                custody::Request::AbortMove { .. },
                Some(Custody::Moved { .. }),
            ) => changed(Custody::Resident),
            (
                Some(Mutant::ImportIgnoresOp),
                custody::Request::ImportSession { .. },
                Some(Custody::Imported { .. }),
            ) => Err(CustodyError::Conflict {
                request: "import".into(),
                stored: "imported".into(),
            }),
            (
                Some(Mutant::ImportIgnoresOp),
                custody::Request::ImportSession { op, from },
                Some(Custody::Moved { .. }),
            ) => changed(Custody::Imported {
                op: op.clone(),
                from: from.clone(),
            }),
            (
                Some(Mutant::BeginOnMoved),
                custody::Request::BeginMove { op, to },
                Some(Custody::Moved { .. }),
            ) => changed(Custody::Moving {
                op: op.clone(),
                to: to.clone(),
            }),
            _ => custody::decide(stored, req),
        }
    }

    fn moving_row(&self, s: &SysState) -> Option<(u8, u8, u8)> {
        s.cats
            .iter()
            .enumerate()
            .take(usize::from(self.cats))
            .find_map(|(i, c)| match c {
                Some(Custody::Moving { op, to }) => Some((
                    u8::try_from(i).ok()?,
                    self.op_index(op)?,
                    self.peer_index(to)?,
                )),
                _ => None,
            })
    }
    /// A call copy lands at its catalogue: the (possibly mutated) decision,
    /// the monitor's notes, and — when the reply reaches the orchestrator
    /// and answers the current call — the orchestrator's next phase.
    fn land(&self, s: &mut SysState, i: u8, reply: bool) -> Option<()> {
        let (cat, call) = s.net.remove(usize::from(i));
        let c = usize::from(cat);
        let req = self.request(call)?;
        let result = self.decide(s.cats[c].as_ref(), &req);
        let current = Self::phase_op(s.phase) == Some(call.op());
        if !current {
            s.seen |= seen::LATE_COPY;
        }
        if let Ok(d) = &result {
            if !d.changed {
                s.seen |= seen::REPEAT_ANSWERED;
            }
            if d.changed {
                s.seen |= Self::transition_seen(c, s.cats[c].as_ref(), &d.custody);
                s.cats[c] = Some(d.custody.clone());
            }
        }
        if reply && current {
            s.phase = Self::answered(s.phase, call, &result);
        }
        Some(())
    }

    /// The `seen` bits of catalogue `c`'s row changing from `before` to
    /// `after`.
    fn transition_seen(c: usize, before: Option<&Custody>, after: &Custody) -> u8 {
        let mut bits = 0;
        if matches!(before, Some(Custody::Moving { .. })) && *after == Custody::Resident {
            bits |= seen::EARLY_ABORT;
        }
        if matches!(before, Some(Custody::Imported { .. }))
            && matches!(after, Custody::Moving { .. })
        {
            bits |= seen::ONWARD;
        }
        if c == 0 && matches!(after, Custody::Imported { .. }) {
            bits |= seen::ROUND_TRIP;
        }
        bits
    }

    /// The orchestrator's phase after the reply to its current `call`.
    fn answered(
        phase: Phase,
        call: Call,
        result: &Result<custody::Decision, CustodyError>,
    ) -> Phase {
        match (phase, call, result) {
            (Phase::Begin { op, src, dst }, Call::Begin { .. }, Ok(d))
                if matches!(d.custody, Custody::Moving { .. }) =>
            {
                Phase::Import {
                    op,
                    src,
                    dst,
                    sent: false,
                }
            }
            (Phase::Begin { .. }, Call::Begin { .. }, _) => Phase::Idle,
            (Phase::Import { op, src, .. }, Call::Import { .. }, Ok(d))
                if matches!(d.custody, Custody::Imported { .. }) =>
            {
                Phase::Finish { op, src }
            }
            (Phase::Import { op, src, .. }, Call::Import { .. }, Err(_)) => {
                Phase::Abort { op, src }
            }
            (Phase::Finish { .. }, Call::Finish { .. }, _)
            | (Phase::Abort { .. }, Call::Abort { .. }, _) => Phase::Idle,
            (phase, _, _) => phase,
        }
    }

    fn current_call(phase: Phase) -> Option<(u8, Call)> {
        match phase {
            Phase::Begin { op, src, dst } => Some((src, Call::Begin { op, to: dst })),
            Phase::Import { op, src, dst, .. } => Some((dst, Call::Import { op, from: src })),
            Phase::Finish { op, src } => Some((src, Call::Finish { op })),
            Phase::Abort { op, src } => Some((src, Call::Abort { op })),
            Phase::Idle | Phase::Recover => None,
        }
    }

    fn phase_op(phase: Phase) -> Option<u8> {
        match phase {
            Phase::Begin { op, .. }
            | Phase::Import { op, .. }
            | Phase::Finish { op, .. }
            | Phase::Abort { op, .. } => Some(op),
            Phase::Idle | Phase::Recover => None,
        }
    }
}

/// How many catalogues serve the session (`Resident` or `Imported`).
pub fn serving(s: &SysState) -> usize {
    s.cats.iter().flatten().filter(|c| c.serves()).count()
}

impl Model for CustodyModel {
    type State = SysState;
    type Action = Action;

    fn init_states(&self) -> Vec<SysState> {
        vec![SysState {
            cats: [Some(Custody::Resident), None, None],
            net: Vec::new(),
            phase: Phase::Idle,
            ops: 0,
            crashes: 0,
            seen: 0,
        }]
    }

    fn actions(&self, s: &SysState, actions: &mut Vec<Action>) {
        if serving(s) > 1 || (serving(s) == 0 && self.moving_row(s).is_none()) {
            return; // a counterexample ends where a rule first breaks
        }
        let drained_moves = !s
            .net
            .iter()
            .any(|(_, c)| matches!(c, Call::Begin { .. } | Call::Import { .. }));
        match s.phase {
            Phase::Idle => {
                if self.moving_row(s).is_some() {
                    if s.net.is_empty() {
                        actions.push(Action::Resume);
                    }
                } else if s.ops < self.max_ops && drained_moves {
                    for src in 0..self.cats {
                        for dst in 0..self.cats {
                            if src != dst {
                                actions.push(Action::Start { src, dst });
                            }
                        }
                    }
                }
            }
            Phase::Recover => {
                if s.net.is_empty() {
                    actions.push(Action::Resume);
                }
            }
            phase => {
                let begins_in_flight = s.net.iter().any(|(_, c)| {
                    matches!(c, Call::Begin { op, .. } if Some(*op) == Self::phase_op(phase))
                });
                let may_send = s.net.len() < self.net_cap
                    && !(matches!(phase, Phase::Abort { .. }) && begins_in_flight);
                if may_send {
                    actions.push(Action::Send);
                }
                let sent_begin = matches!(phase, Phase::Begin { .. });
                let before_import = matches!(phase, Phase::Import { sent: false, .. });
                if sent_begin || before_import {
                    actions.push(Action::GiveUp);
                }
            }
        }
        for (i, _) in s.net.iter().enumerate() {
            let Ok(i) = u8::try_from(i) else { continue };
            actions.push(Action::Land { i, reply: true });
            actions.push(Action::Land { i, reply: false });
            actions.push(Action::Drop { i });
        }
        if s.crashes < self.max_crashes && s.phase != Phase::Recover {
            actions.push(Action::Crash);
        }
    }

    fn next_state(&self, s: &SysState, action: Action) -> Option<SysState> {
        let mut s = s.clone();
        match action {
            Action::Start { src, dst } => {
                s.phase = Phase::Begin {
                    op: s.ops,
                    src,
                    dst,
                };
                s.ops += 1;
            }
            Action::Send => {
                let (cat, call) = Self::current_call(s.phase)?;
                if let Phase::Import { sent, .. } = &mut s.phase {
                    *sent = true;
                }
                s.net.push((cat, call));
                s.net.sort_unstable();
            }
            Action::GiveUp => {
                let (op, src) = match s.phase {
                    Phase::Begin { op, src, .. } | Phase::Import { op, src, .. } => (op, src),
                    _ => return None,
                };
                s.phase = Phase::Abort { op, src };
            }
            Action::Drop { i } => {
                s.net.remove(usize::from(i));
            }
            Action::Land { i, reply } => self.land(&mut s, i, reply)?,
            Action::Crash => {
                s.crashes += 1;
                s.phase = Phase::Recover;
            }
            Action::Resume => {
                s.phase = match self.moving_row(&s) {
                    Some((src, op, dst)) => {
                        s.seen |= seen::RESUMED;
                        Phase::Import {
                            op,
                            src,
                            dst,
                            sent: true,
                        }
                    }
                    None => Phase::Idle,
                };
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::<Self>::always("at most one catalogue serves the session", |_, s| {
                serving(s) <= 1
            }),
            Property::<Self>::always(
                "the session is never lost: someone serves it or a Moving row names where it goes",
                |m, s| serving(s) == 1 || m.moving_row(s).is_some(),
            ),
            Property::<Self>::sometimes(
                "a full round trip: the session comes back to its first catalogue",
                |_, s| s.seen & seen::ROUND_TRIP != 0,
            ),
            Property::<Self>::sometimes("an early abort returns the session", |_, s| {
                s.seen & seen::EARLY_ABORT != 0
            }),
            Property::<Self>::sometimes("a session moves onward from Imported", |_, s| {
                s.seen & seen::ONWARD != 0
            }),
            Property::<Self>::sometimes("a late copy of a finished move's call lands", |_, s| {
                s.seen & seen::LATE_COPY != 0
            }),
            Property::<Self>::sometimes("a repeat is answered without a write", |_, s| {
                s.seen & seen::REPEAT_ANSWERED != 0
            }),
            Property::<Self>::sometimes("a restarted orchestrator resumes a move", |_, s| {
                s.seen & seen::RESUMED != 0
            }),
        ]
    }
}

impl crate::family::MutantModel for CustodyModel {
    type Mutant = Mutant;
    const NAME: &'static str = "custody";
    const SUMMARY: &'static str = "session custody across catalogues: at most one serves it, it is never lost, through lost replies, retries, late copies and orchestrator crashes";

    fn at(bound: Bound) -> Result<Self, String> {
        let (cats, max_ops, net_cap, max_crashes) = match bound {
            Bound::Ci => (3, 3, 2, 1),
            Bound::Deep => (3, 5, 3, 2),
        };
        Ok(CustodyModel {
            cats,
            max_ops,
            net_cap,
            max_crashes,
            peers: ["cat-a", "cat-b", "cat-c"]
                .iter()
                .filter_map(|p| Peer::new(*p).ok())
                .collect(),
            op_names: (0..8)
                .filter_map(|i| MoveOp::new(format!("op-{i}")).ok())
                .collect(),
            mutant: None,
        })
    }

    fn mutant_slot(&mut self) -> &mut Option<Mutant> {
        &mut self.mutant
    }

    fn describe_bound(&self) -> String {
        format!(
            "{} catalogues, {} moves, {} requests in flight, {} orchestrator crash(es), lost requests and replies, late duplicate copies",
            self.cats, self.max_ops, self.net_cap, self.max_crashes
        )
    }
}
