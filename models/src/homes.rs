//! Model of one source migrated towards two destinations
//! (`custos_core::migration::departure` and `custos_core::migration::abandon`).
//!
//! The migration model proves one migration's steps under crashes; this one
//! proves the rule that spans two of them: a source World has one live home.
//! Two drivers migrate the same source, driver `i` under its own migration
//! id to destination `i`; driver 1 may be started with the operator's
//! acknowledgement of a second copy. Each driver reads the source's
//! departure record, lets the real [`departure::depart`] decide, stores its
//! decision by compare-and-swap on the record it read (a lost race
//! re-reads and decides again), reserves its destination through the real
//! [`migration::decide`], activates it (a compare-and-swap on its own
//! reserved reservation, standing for the remaining steps, each of which
//! the machine refuses once the reservation is abandoned) and completes,
//! marking the departure moved ([`departure::arrived`]). An operator may
//! abandon either migration: the real [`migration::abandon`] stores the
//! reservation abandoned (the authority), then the real
//! [`departure::abandon`] marks the source's record — two durable writes
//! with a crash allowed between, and a retry. The host's run lock is not
//! modelled: nothing here relies on it (two hosts, or two network
//! namespaces, do not share it). The adversary interleaves everything and
//! crashes drivers and the operator at every point (a crash forgets the
//! driver's reads).
//!
//! A mutant wraps one of those real decisions (see [`Mutant`]).

use custos_core::migration::departure::{self, Departures, Leg};
use custos_core::migration::{
    self, Destination, MigrationError, Name, Plan, Request, Run, State, Status, StorageIdentity,
};
use custos_testkit::simulate::Fixture;
use stateright::{Model, Property};

use crate::family::MutantModel;
use crate::Bound;

/// Destinations (and drivers): driver `i` migrates to destination `i`.
pub const DESTS: usize = 2;

crate::mutants! {
    /// A defect the model can be made to exhibit, each a wrapped decision.
    pub enum Mutant {
        /// The departure rule admits a second live home without the
        /// operator's acknowledgement.
        SecondHomeAdmitted => "second-home-admitted-without-acknowledgement",
        /// The departure is stored whatever the source holds now (no
        /// compare-and-swap): two racing planners both record theirs.
        DepartureBlindWrite => "departure-stored-without-compare-and-swap",
        /// Abandon is decided on the migration id alone: an activated
        /// reservation is abandoned too.
        AbandonAfterActivation => "abandon-allowed-after-activation",
        /// Abandon marks the source first and the destination second: a
        /// driver can activate in between.
        AbandonMarksSourceFirst => "abandon-marks-the-source-before-the-destination",
    }
}

/// Where a driver is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Pc {
    /// Not started (or restarted after a crash).
    Idle,
    /// Read the source's record: this is the record it stores by
    /// compare-and-swap on `read`.
    Claim {
        /// The record read.
        read: Departures,
        /// The record to store.
        next: Departures,
    },
    /// The departure is recorded: reserve the destination next.
    Recorded,
    /// The destination is reserved: activate next.
    Reserved,
    /// Activated: complete next.
    Activated,
    /// Refused by a rule: stopped.
    Refused,
    /// Completed: stopped.
    Done,
}

/// The model's state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Homes {
    /// The source's departure record.
    pub source: Departures,
    /// Each destination's administration.
    pub dest: [Destination; DESTS],
    /// Each driver's place.
    pub pc: [Pc; DESTS],
    /// Driver 1 runs with the second copy acknowledged.
    pub ack: bool,
    /// Driver 1 was started (with or without acknowledgement).
    pub started: bool,
    /// The operator is abandoning migration `i`: its first write is done,
    /// the second is next.
    pub abandoning: Option<u8>,
    /// Crashes left.
    pub crashes: u8,
    /// Abandons left.
    pub abandons: u8,
    /// Monitor: an activated reservation was abandoned.
    pub home_abandoned: bool,
    /// Monitor: a driver without acknowledgement was refused by the rule.
    pub refused_seen: bool,
}

/// An action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Driver 1 is started, with or without the acknowledgement.
    Start {
        /// The operator acknowledged a second copy.
        ack: bool,
    },
    /// Driver `i` takes its next step.
    Step(u8),
    /// Driver `i` crashes (forgetting its reads).
    Crash(u8),
    /// The operator abandons migration `i` (first write).
    Abandon(u8),
    /// The operator's second write.
    Finish,
    /// The operator crashes between the two writes.
    OperatorCrash,
}

/// The model.
#[derive(Clone, Debug)]
pub struct HomesModel {
    /// Migration ids, one per driver.
    pub ids: [Name; DESTS],
    /// Destination identities.
    pub dests: [StorageIdentity; DESTS],
    /// The fixture's plan, retargeted per driver.
    pub plan: Plan,
    /// Crashes allowed.
    pub crashes: u8,
    /// Abandons allowed.
    pub abandons: u8,
    /// The defect applied, if any.
    pub mutant: Option<Mutant>,
}

fn status(d: &Destination) -> Option<Status> {
    d.reservation.as_ref().map(|r| r.status)
}

impl HomesModel {
    fn depart(
        &self,
        stored: &Departures,
        i: usize,
        ack: bool,
    ) -> Result<Option<Departures>, MigrationError> {
        let r = departure::depart(stored, &self.ids[i], &self.dests[i], ack);
        match (self.mutant, &r) {
            (Some(Mutant::SecondHomeAdmitted), Err(MigrationError::SourceMigrated { .. })) => {
                let mut next = departure::depart(stored, &self.ids[i], &self.dests[i], true)?;
                if let Some(n) = next.as_mut() {
                    for d in &mut n.records {
                        d.second_copy &= d.migration_id != self.ids[i];
                    }
                }
                Ok(next)
            }
            _ => r,
        }
    }

    /// The destination's first abandon write (the real rule, or the
    /// mutant's).
    fn abandon_rule(
        &self,
        d: &Destination,
        i: usize,
    ) -> Result<Option<Destination>, MigrationError> {
        if self.mutant == Some(Mutant::AbandonAfterActivation) {
            if let Some(r) = d.reservation.as_ref().filter(|r| {
                r.plan.migration_id == self.ids[i]
                    && matches!(r.status, Status::Activated | Status::Completed)
            }) {
                let mut next = r.clone();
                next.status = Status::Abandoned;
                next.control = None;
                return Ok(Some(Destination {
                    reservation: Some(next),
                }));
            }
        }
        migration::abandon(d, &self.ids[i])
    }

    fn ack_of(s: &Homes, i: usize) -> bool {
        i == 1 && s.ack
    }

    fn plan_of(&self, s: &Homes, i: usize) -> Plan {
        let mut p = self.plan.clone();
        p.migration_id = self.ids[i].clone();
        p.destination = self.dests[i].clone();
        p.second_copy = Self::ack_of(s, i);
        p
    }

    /// Reserves through the real machine (a fresh run that validated and
    /// froze this plan).
    fn reserve(&self, s: &mut Homes, i: usize) -> bool {
        let plan = self.plan_of(s, i);
        let mut run = Run::new(self.ids[i].clone(), Some(plan.digest()));
        run.validated = true;
        run.frozen = true;
        run.second_copy = plan.second_copy;
        let state = State {
            run,
            destination: s.dest[i].clone(),
        };
        match migration::decide(&state, &Request::Reserve { plan, now: 0 }) {
            Ok(d) => {
                s.dest[i] = d.next.destination;
                true
            }
            Err(_) => false,
        }
    }

    /// Moves driver `i`'s own reservation from `from` to `to`
    /// (compare-and-swap); `false` when it is not `from`.
    fn advance(&self, s: &mut Homes, i: usize, from: Status, to: Status) -> bool {
        match s.dest[i].reservation.as_mut() {
            Some(r) if r.plan.migration_id == self.ids[i] && r.status == from => {
                r.status = to;
                true
            }
            _ => false,
        }
    }

    fn refuse(s: &mut Homes, i: usize) {
        s.pc[i] = Pc::Refused;
        if !Self::ack_of(s, i) {
            s.refused_seen = true;
        }
    }

    fn step(&self, s: &mut Homes, i: usize) -> bool {
        match s.pc[i].clone() {
            Pc::Idle => {
                if i == 1 && !s.started {
                    return false;
                }
                match self.depart(&s.source, i, Self::ack_of(s, i)) {
                    Ok(None) => s.pc[i] = Pc::Recorded,
                    Ok(Some(next)) => {
                        s.pc[i] = Pc::Claim {
                            read: s.source.clone(),
                            next,
                        }
                    }
                    Err(_) => Self::refuse(s, i),
                }
            }
            Pc::Claim { read, next } => {
                let blind = self.mutant == Some(Mutant::DepartureBlindWrite);
                if blind || s.source == read {
                    s.source = next;
                    s.pc[i] = Pc::Recorded;
                } else {
                    s.pc[i] = Pc::Idle;
                }
            }
            Pc::Recorded => {
                if self.reserve(s, i) {
                    s.pc[i] = Pc::Reserved;
                } else {
                    Self::refuse(s, i);
                }
            }
            Pc::Reserved => {
                if self.advance(s, i, Status::Reserved, Status::Activated) {
                    s.pc[i] = Pc::Activated;
                } else {
                    Self::refuse(s, i);
                }
            }
            Pc::Activated => {
                if !self.advance(s, i, Status::Activated, Status::Completed) {
                    Self::refuse(s, i);
                    return true;
                }
                if let Some(next) = departure::arrived(&s.source, &self.ids[i], &self.dests[i]) {
                    s.source = next;
                }
                s.pc[i] = Pc::Done;
            }
            Pc::Refused | Pc::Done => return false,
        }
        true
    }

    fn mark_source(&self, s: &mut Homes, i: usize) -> bool {
        match departure::abandon(&s.source, &self.ids[i], &self.dests[i]) {
            Ok(Some(next)) => {
                s.source = next;
                true
            }
            Ok(None) => true,
            Err(_) => false,
        }
    }

    fn mark_destination(&self, s: &mut Homes, i: usize) -> Result<bool, MigrationError> {
        let before = status(&s.dest[i]);
        let next = self.abandon_rule(&s.dest[i], i)?;
        let fresh = next.is_some();
        if let Some(next) = next {
            if matches!(before, Some(Status::Activated | Status::Completed)) {
                s.home_abandoned = true;
            }
            s.dest[i] = next;
        }
        Ok(fresh)
    }

    fn abandon(&self, s: &mut Homes, i: usize) -> bool {
        if s.abandoning.is_some() {
            return false;
        }
        if self.mutant == Some(Mutant::AbandonMarksSourceFirst) {
            // The rule is consulted, but the source is written first.
            if s.abandons == 0 || self.abandon_rule(&s.dest[i], i).is_err() {
                return false;
            }
            if !self.mark_source(s, i) {
                return false;
            }
            s.abandons -= 1;
            s.abandoning = Some(i as u8);
            return true;
        }
        let retry = status(&s.dest[i]) == Some(Status::Abandoned);
        if !retry && s.abandons == 0 {
            return false;
        }
        match self.mark_destination(s, i) {
            Ok(fresh) => {
                if fresh {
                    s.abandons -= 1;
                }
                s.abandoning = Some(i as u8);
                true
            }
            Err(_) => false,
        }
    }

    fn finish(&self, s: &mut Homes) -> bool {
        let Some(i) = s.abandoning.take() else {
            return false;
        };
        let i = usize::from(i);
        if self.mutant == Some(Mutant::AbandonMarksSourceFirst) {
            // The destination's write, refused if a driver activated.
            let _ = self.mark_destination(s, i);
        } else {
            self.mark_source(s, i);
        }
        true
    }
}

/// Destinations activated (or completed).
fn homes(s: &Homes) -> Vec<usize> {
    (0..DESTS)
        .filter(|i| {
            matches!(
                status(&s.dest[*i]),
                Some(Status::Activated | Status::Completed)
            )
        })
        .collect()
}

fn abandoned_at_source(m: &HomesModel, s: &Homes, i: usize) -> bool {
    s.source
        .find(&m.ids[i], &m.dests[i])
        .is_some_and(|d| d.leg == Leg::Abandoned)
}

fn acknowledged(m: &HomesModel, s: &Homes, i: usize) -> bool {
    s.source
        .find(&m.ids[i], &m.dests[i])
        .is_some_and(|d| d.second_copy)
}

impl Model for HomesModel {
    type State = Homes;
    type Action = Action;

    fn init_states(&self) -> Vec<Homes> {
        vec![Homes {
            source: Departures::default(),
            dest: [Destination::default(), Destination::default()],
            pc: [Pc::Idle, Pc::Idle],
            ack: false,
            started: false,
            abandoning: None,
            crashes: self.crashes,
            abandons: self.abandons,
            home_abandoned: false,
            refused_seen: false,
        }]
    }

    fn actions(&self, s: &Homes, actions: &mut Vec<Action>) {
        if !s.started {
            actions.push(Action::Start { ack: false });
            actions.push(Action::Start { ack: true });
        }
        for i in 0..DESTS as u8 {
            actions.push(Action::Step(i));
            if s.crashes > 0 && !matches!(s.pc[usize::from(i)], Pc::Idle | Pc::Done | Pc::Refused) {
                actions.push(Action::Crash(i));
            }
            actions.push(Action::Abandon(i));
        }
        if s.abandoning.is_some() {
            actions.push(Action::Finish);
            if s.crashes > 0 {
                actions.push(Action::OperatorCrash);
            }
        }
    }

    fn next_state(&self, s: &Homes, action: Action) -> Option<Homes> {
        let mut n = s.clone();
        let changed = match action {
            Action::Start { ack } => {
                n.started = true;
                n.ack = ack;
                true
            }
            Action::Step(i) => self.step(&mut n, usize::from(i)),
            Action::Crash(i) => {
                n.crashes -= 1;
                n.pc[usize::from(i)] = Pc::Idle;
                true
            }
            Action::Abandon(i) => self.abandon(&mut n, usize::from(i)),
            Action::Finish => self.finish(&mut n),
            Action::OperatorCrash => {
                n.crashes -= 1;
                n.abandoning = None;
                true
            }
        };
        (changed && n != *s).then_some(n)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::<Self>::always(
                "at most one destination of a source World is activated unless a second copy was acknowledged",
                |m, s| {
                    let h = homes(s);
                    h.len() <= 1 || h.iter().any(|i| acknowledged(m, s, *i))
                },
            ),
            Property::<Self>::always(
                "an activated destination is never abandoned, nor its departure marked abandoned",
                |m, s| !s.home_abandoned && homes(s).iter().all(|i| !abandoned_at_source(m, s, *i)),
            ),
            Property::<Self>::sometimes("a second migration of a departed source is refused", |_, s| {
                s.refused_seen
            }),
            Property::<Self>::sometimes("an acknowledged second copy is made", |_, s| {
                homes(s).len() == 2
            }),
            Property::<Self>::sometimes(
                "an abandoned migration frees the source for another destination",
                |m, s| abandoned_at_source(m, s, 0) && homes(s) == vec![1] && !s.ack,
            ),
            Property::<Self>::sometimes(
                "an abandoned migration never resumes",
                |m, s| abandoned_at_source(m, s, 0) && s.pc[0] == Pc::Refused,
            ),
        ]
    }
}

impl MutantModel for HomesModel {
    type Mutant = Mutant;
    const NAME: &'static str = "migration-homes";
    const SUMMARY: &'static str = "one source, two destinations: the source's departure record admits one live home per World (a second only when acknowledged), by compare-and-swap against racing planners, and abandon never touches an activated home";

    fn at(bound: Bound) -> Result<Self, String> {
        let fx = Fixture::new().map_err(|e| format!("fixture invalid: {e}"))?;
        let d2 = migration::StorageIdentity::new(
            "file:///custos-model/destination-2",
            fx.destination.namespace(),
            fx.destination.backend(),
        )
        .map_err(|e| format!("fixture invalid: {e}"))?;
        let mut root2 = fx.plan(0, 1, 0);
        root2.destination = d2.clone();
        if root2.check().is_err() {
            return Err("fixture invalid: the second destination's plan".into());
        }
        let (crashes, abandons) = match bound {
            Bound::Ci => (1, 1),
            Bound::Deep => (2, 2),
        };
        Ok(HomesModel {
            ids: [fx.migration.clone(), fx.other_migration.clone()],
            dests: [fx.destination.clone(), d2],
            plan: fx.plan(0, 1, 0),
            crashes,
            abandons,
            mutant: None,
        })
    }

    fn mutant_slot(&mut self) -> &mut Option<Mutant> {
        &mut self.mutant
    }

    fn describe_bound(&self) -> String {
        format!(
            "1 source, {DESTS} destinations and drivers (the second with or without a second-copy acknowledgement), 1 operator; crashes <= {}, abandons <= {}",
            self.crashes, self.abandons
        )
    }
}
