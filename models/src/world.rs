//! Model of the uncertain-outcome protocol of a cleanup-only registration
//! and its exact retirement (`custos_core::world`).
//!
//! Two authorities — the Directory and the per-world authority — each hold
//! the world's row (or nothing), and every landing request goes through the
//! real [`custos_core::world::decide`]. The outer layer (the Worker) applies
//! a request to the Directory, then mirrors the Directory's result into the
//! per-world authority, then answers the client; each hop is a message that
//! the network may delay (any order), lose or duplicate, and an answer may
//! arrive garbled (unparsable or incomplete).
//!
//! The client issues one cleanup-only registration POST. It accepts the
//! record only on an answer in which both authorities confirm `active`. Any
//! other outcome — a non-success answer, a garbled one, no answer, or the
//! caller's cancellation — is treated as possibly committed: the client
//! retires the world exactly (the complete record, `status = destroyed`),
//! re-sending the same retirement until both authorities confirm
//! `destroyed`, and only then propagates the original outcome.
//!
//! Mutants: a wrapped decision (retiring an absent row writes no tombstone;
//! a destroyed row accepts a registration) or a protocol step left out (the
//! client propagates without reconciling; the Worker answers after only the
//! Directory confirmed).

use custos_core::world::{
    self, Decision, Outcome, Request, Retirement, WorldError, WorldIdentity, WorldRecord,
    WorldSlot, WorldStatus, WriterMode,
};
use stateright::{Model, Property};

use crate::Bound;

crate::mutants! {
    /// A defect the model can be made to exhibit.
    pub enum Mutant {
        /// Retiring an absent row answers success but writes no tombstone.
        NoTombstone => "retire-absent-writes-no-tombstone",
        /// The client propagates the original error without reconciling.
        NoReconcile => "client-propagates-without-reconciling",
        /// A destroyed row accepts a registration (becomes active again).
        DestroyedAcceptsRegistration => "destroyed-row-accepts-registration",
        /// The Worker answers once the Directory confirmed, before the per-world
        /// authority did (the mirror still runs, later).
        DirectoryOnly => "worker-returns-after-directory-only",
    }
}

/// Which request a message carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// The cleanup-only registration.
    Register,
    /// The exact retirement.
    Retire,
}

/// A message in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Msg {
    /// Client → Worker → Directory.
    ToDirectory(Kind),
    /// Worker → per-world authority, after the Directory applied.
    Mirror(Kind),
    /// Worker → client: `ok` when the confirmations the Worker waited for
    /// were all present.
    Answer(Kind, bool),
}

/// The client's phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Client {
    /// Before the POST.
    Idle,
    /// The registration POST is issued; waiting for its answer.
    Posted,
    /// The outcome was uncertain: retiring exactly.
    Retiring,
    /// Propagated success: the record is accepted.
    Accepted,
    /// Propagated the original failure.
    Failed,
}

/// An action of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The client issues the registration POST.
    Post,
    /// The caller cancels (or the transport fails) while the POST is out.
    Cancel,
    /// The client sends (or re-sends) the exact retirement.
    SendRetire,
    /// Message `i` lands; an answer may arrive garbled.
    Land {
        /// Index into the in-flight list.
        i: u8,
        /// Whether an answer is garbled.
        garbled: bool,
    },
    /// Message `i` is lost.
    Drop {
        /// Index into the in-flight list.
        i: u8,
    },
    /// Message `i` is duplicated (a retry by a lower layer).
    Duplicate {
        /// Index into the in-flight list.
        i: u8,
    },
}

mod seen {
    pub const ACCEPTED: u8 = 1 << 0;
    pub const CANCELLED: u8 = 1 << 1;
    pub const RESURRECTED: u8 = 1 << 2;
    pub const TOMBSTONED: u8 = 1 << 3;
    pub const LATE_REGISTRATION_REFUSED: u8 = 1 << 4;
}

/// The global state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SysState {
    /// The Directory's row.
    pub directory: Option<WorldRecord>,
    /// The per-world authority's row.
    pub world: Option<WorldRecord>,
    /// Messages in flight, sorted.
    pub net: Vec<Msg>,
    /// The client.
    pub client: Client,
    /// Retirements sent.
    pub retires: u8,
    /// Duplications so far.
    pub dups: u8,
    /// Monitor bits.
    pub seen: u8,
}

/// The model: its bound and, optionally, the defect it exhibits.
#[derive(Clone, Debug)]
pub struct WorldModel {
    /// Retirements the client may send.
    pub max_retires: u8,
    /// Duplications the network may make.
    pub max_dups: u8,
    /// In-flight capacity.
    pub net_cap: usize,
    /// The cleanup-only record the client registers.
    pub record: WorldRecord,
    /// The defect applied, if any.
    pub mutant: Option<Mutant>,
}

fn status(r: &Option<WorldRecord>) -> Option<WorldStatus> {
    r.as_ref().map(|r| r.status)
}

impl WorldModel {
    fn request(&self, kind: Kind) -> Request {
        match kind {
            Kind::Register => Request::Register {
                record: self.record.clone(),
            },
            Kind::Retire => Request::Retire {
                record: self.record.destroyed(),
            },
        }
    }

    /// The real decision, or the mutant's variation of it.
    fn decide(&self, stored: &Option<WorldRecord>, req: &Request) -> Result<Decision, WorldError> {
        let slot = WorldSlot {
            record: stored.clone(),
            ..WorldSlot::default()
        };
        match (self.mutant, req, stored) {
            (Some(Mutant::NoTombstone), Request::Retire { .. }, None) => Ok(Decision {
                outcome: Outcome::Retired(Retirement::Tombstoned),
                effects: Vec::new(),
                next: slot,
                changed: false,
            }),
            (Some(Mutant::DestroyedAcceptsRegistration), Request::Register { record }, Some(r))
                if r.status == WorldStatus::Destroyed =>
            {
                let next = WorldSlot {
                    record: Some(record.clone()),
                    ..WorldSlot::default()
                };
                Ok(Decision {
                    outcome: Outcome::Registered { created: true },
                    effects: world::effects(&slot, &next),
                    next,
                    changed: true,
                })
            }
            _ => world::decide(&slot, req),
        }
    }

    /// Applies `kind` at one authority; returns whether it succeeded.
    fn apply(&self, s: &mut SysState, at_directory: bool, kind: Kind) -> bool {
        let row = if at_directory {
            &mut s.directory
        } else {
            &mut s.world
        };
        let before = status(row);
        let result = self.decide(row, &self.request(kind));
        if let Ok(d) = &result {
            if d.changed {
                *row = d.next.record.clone();
            }
            if d.outcome == Outcome::Retired(Retirement::Tombstoned) {
                s.seen |= seen::TOMBSTONED;
            }
        }
        let after = status(row);
        if before == Some(WorldStatus::Destroyed) && after != Some(WorldStatus::Destroyed) {
            s.seen |= seen::RESURRECTED;
        }
        if kind == Kind::Register
            && result.is_err()
            && matches!(s.client, Client::Retiring | Client::Failed)
        {
            s.seen |= seen::LATE_REGISTRATION_REFUSED;
        }
        result.is_ok()
    }

    fn push(&self, s: &mut SysState, m: Msg) {
        s.net.push(m);
        s.net.sort_unstable();
    }

    /// The client's reaction to an uncertain outcome.
    fn uncertain(&self, s: &mut SysState) {
        s.client = if self.mutant == Some(Mutant::NoReconcile) {
            Client::Failed
        } else {
            Client::Retiring
        };
    }
}

impl Model for WorldModel {
    type State = SysState;
    type Action = Action;

    fn init_states(&self) -> Vec<SysState> {
        vec![SysState {
            directory: None,
            world: None,
            net: Vec::new(),
            client: Client::Idle,
            retires: 0,
            dups: 0,
            seen: 0,
        }]
    }

    fn actions(&self, s: &SysState, actions: &mut Vec<Action>) {
        let room = s.net.len() < self.net_cap;
        match s.client {
            Client::Idle => actions.push(Action::Post),
            Client::Posted => actions.push(Action::Cancel),
            Client::Retiring if room && s.retires < self.max_retires => {
                actions.push(Action::SendRetire)
            }
            _ => {}
        }
        for (i, _) in s.net.iter().enumerate() {
            let Ok(i) = u8::try_from(i) else { continue };
            actions.push(Action::Land { i, garbled: false });
            if matches!(s.net[usize::from(i)], Msg::Answer(..)) {
                actions.push(Action::Land { i, garbled: true });
            }
            actions.push(Action::Drop { i });
            if room && s.dups < self.max_dups {
                actions.push(Action::Duplicate { i });
            }
        }
    }

    fn next_state(&self, s: &SysState, action: Action) -> Option<SysState> {
        let mut s = s.clone();
        match action {
            Action::Post => {
                s.client = Client::Posted;
                self.push(&mut s, Msg::ToDirectory(Kind::Register));
            }
            Action::Cancel => {
                s.seen |= seen::CANCELLED;
                self.uncertain(&mut s);
            }
            Action::SendRetire => {
                s.retires += 1;
                self.push(&mut s, Msg::ToDirectory(Kind::Retire));
            }
            Action::Drop { i } => {
                s.net.remove(usize::from(i));
            }
            Action::Duplicate { i } => {
                let m = *s.net.get(usize::from(i))?;
                s.dups += 1;
                self.push(&mut s, m);
            }
            Action::Land { i, garbled } => {
                let m = s.net.remove(usize::from(i));
                match m {
                    Msg::ToDirectory(kind) => {
                        let ok = self.apply(&mut s, true, kind);
                        if ok {
                            self.push(&mut s, Msg::Mirror(kind));
                            if self.mutant == Some(Mutant::DirectoryOnly) {
                                self.push(&mut s, Msg::Answer(kind, true));
                            }
                        } else {
                            self.push(&mut s, Msg::Answer(kind, false));
                        }
                    }
                    Msg::Mirror(kind) => {
                        let ok = self.apply(&mut s, false, kind);
                        if self.mutant != Some(Mutant::DirectoryOnly) || !ok {
                            self.push(&mut s, Msg::Answer(kind, ok));
                        }
                    }
                    Msg::Answer(kind, ok) => {
                        let ok = ok && !garbled;
                        match (s.client, kind) {
                            (Client::Posted, Kind::Register) if ok => {
                                s.seen |= seen::ACCEPTED;
                                s.client = Client::Accepted;
                            }
                            (Client::Posted, Kind::Register) => self.uncertain(&mut s),
                            (Client::Retiring, Kind::Retire) if ok => s.client = Client::Failed,
                            // A stale answer, or a failed retirement: the
                            // client re-sends the same retirement.
                            _ => {}
                        }
                    }
                }
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::<Self>::always("destroyed never becomes active", |_, s| {
                s.seen & seen::RESURRECTED == 0
            }),
            Property::<Self>::always(
                "once retired, no delayed registration resurrects the writer",
                |_, s| {
                    s.client != Client::Failed
                        || (status(&s.directory) != Some(WorldStatus::Active)
                            && status(&s.world) != Some(WorldStatus::Active))
                },
            ),
            Property::<Self>::always(
                "an outcome is propagated only when both authorities confirm",
                |_, s| {
                    let both =
                        |st| status(&s.directory) == Some(st) && status(&s.world) == Some(st);
                    match s.client {
                        Client::Accepted => both(WorldStatus::Active),
                        Client::Failed => both(WorldStatus::Destroyed),
                        _ => true,
                    }
                },
            ),
            Property::<Self>::sometimes("a registration succeeds", |_, s| {
                s.client == Client::Accepted
            }),
            Property::<Self>::sometimes("a cancelled registration is retired", |_, s| {
                s.client == Client::Failed && s.seen & seen::CANCELLED != 0
            }),
            Property::<Self>::sometimes(
                "a committed registration is retired (active row destroyed)",
                |_, s| s.client == Client::Failed && s.seen & seen::TOMBSTONED == 0,
            ),
            Property::<Self>::sometimes(
                "a delayed registration lands on the tombstone and is refused",
                |_, s| {
                    s.seen & seen::LATE_REGISTRATION_REFUSED != 0 && s.seen & seen::TOMBSTONED != 0
                },
            ),
        ]
    }
}

impl crate::family::MutantModel for WorldModel {
    type Mutant = Mutant;
    const NAME: &'static str = "world";
    const SUMMARY: &'static str = "cleanup-only registration under uncertain outcomes: exact retirement with tombstones; destroyed is monotonic; outcomes only after both authorities confirm";

    fn at(bound: Bound) -> Result<Self, String> {
        let (max_retires, max_dups, net_cap) = match bound {
            Bound::Ci => (2, 2, 4),
            Bound::Deep => (3, 3, 5),
        };
        let mut identity = WorldIdentity::new("w-1", "cleanup");
        identity.run_id = Some("run-1".into());
        Ok(WorldModel {
            max_retires,
            max_dups,
            net_cap,
            record: WorldRecord::active(identity, WriterMode::CleanupOnly),
            mutant: None,
        })
    }

    fn mutant_slot(&mut self) -> &mut Option<Mutant> {
        &mut self.mutant
    }

    fn describe_bound(&self) -> String {
        format!(
            "1 cleanup-only registration, {} exact retirements, {} duplications, {} messages in flight, any delivery order, lost and garbled answers, cancellation",
            self.max_retires, self.max_dups, self.net_cap
        )
    }
}
