//! Model of the whole-identity migration workflow (`custos_core::migration`).
//!
//! The state is [`custos_testkit::simulate::Sim`]: the destination's
//! durable migration administration (the real machine's `Destination`), the
//! destination's data plane (objects, landed table appends, staged control,
//! discovery, a World fence), the source (a World fence, a drift generation),
//! the plan the caller holds, two driver processes, and a monitor.
//!
//! A driver asks the real [`custos_core::migration::next_step`] what to do,
//! performs the step's I/O against the simulated endpoints, and reports the
//! evidence to the real [`custos_core::migration::decide`]. The adversary:
//!
//! - crashes a driver between steps, or inside a step after its I/O and
//!   before its record, or after its record and before the reply — at every
//!   step; a restarted driver keeps only what is durable (the destination,
//!   the source fences, and the plan the caller holds);
//! - loses replies; makes a table commit ambiguous whether or not it landed;
//! - starts a second driver retrying the caller's plan, concurrently;
//! - has a driver with a different plan under the same id, or a different
//!   migration id, try to validate, plan and reserve;
//! - drifts the source (a writer acquires a fence and commits) before the
//!   recheck.
//!
//! A mutant wraps `next_step` and/or `decide` (see [`Mutant`]).

use custos_core::migration::{
    self, import_floors, CommitReply, Decision, MigrationError, Next, Outcome, Request,
    StagedControl, State, Status, TableState, STEPS,
};
use custos_testkit::simulate::{rule, seen, Budget, Fixture, Machine, Sim, SimOp};
use stateright::{Model, Property};

use crate::family::MutantModel;
use crate::Bound;

crate::mutants! {
    /// A defect the model can be made to exhibit, each a wrapped decision.
    pub enum Mutant {
        /// World discovery is activated before control is staged.
        ActivateBeforeStaging => "activation-before-control-staging",
        /// `artifact_files` is copied before its objects are verified.
        ArtifactFilesBeforeObjects => "artifact-files-before-objects-verify",
        /// The source recheck is skipped.
        RecheckSkipped => "source-recheck-skipped",
        /// A retry after completion recomputes the receipt.
        ReceiptRecomputed => "receipt-recomputed-after-completion",
        /// Fence floors are the source's current epoch only, ignoring manifest
        /// writer epochs.
        FloorFromSourceOnly => "fence-floor-from-source-epoch-only",
        /// After an ambiguous table commit the table is appended again without
        /// inspecting the destination.
        BlindReappend => "blind-reappend-after-ambiguous-commit",
    }
}

impl Mutant {
    /// The machine a driver consults under this mutant.
    pub fn machine(self) -> Machine {
        match self {
            Mutant::ActivateBeforeStaging => Machine {
                decide: decide_activate_early,
                next: next_activate_early,
            },
            Mutant::ArtifactFilesBeforeObjects => Machine {
                decide: decide_files_early,
                next: next_files_early,
            },
            Mutant::RecheckSkipped => Machine {
                decide: decide_skip_recheck,
                next: next_skip_recheck,
            },
            Mutant::ReceiptRecomputed => Machine {
                decide: decide_recompute,
                next: next_recompute,
            },
            Mutant::FloorFromSourceOnly => Machine {
                decide: decide_floor_source_only,
                next: migration::next_step,
            },
            Mutant::BlindReappend => Machine {
                decide: decide_blind,
                next: migration::next_step,
            },
        }
    }
}

type Verdict = Result<Decision, MigrationError>;

fn next_activate_early(s: &State) -> Result<Next, MigrationError> {
    let n = migration::next_step(s)?;
    Ok(if n == Next::StageControl {
        Next::Activate
    } else {
        n
    })
}

fn decide_activate_early(s: &State, req: &Request) -> Verdict {
    let unstaged = s
        .destination
        .reservation
        .as_ref()
        .is_some_and(|r| r.control.is_none() && r.status == Status::Reserved);
    if *req == Request::Activate && unstaged {
        // Decide as if staged, persist without the staged bundle.
        let mut view = s.clone();
        if let Some(r) = view.destination.reservation.as_mut() {
            r.control = Some(StagedControl {
                snapshot_digest: r.plan.control.snapshot_digest,
                floors: import_floors(&r.plan),
            });
        }
        let mut d = migration::decide(&view, req)?;
        if let Some(r) = d.next.destination.reservation.as_mut() {
            r.control = None;
        }
        return Ok(d);
    }
    migration::decide(s, req)
}

fn next_files_early(s: &State) -> Result<Next, MigrationError> {
    let n = migration::next_step(s)?;
    if let (Next::CopyObject { .. }, Some(r)) = (&n, &s.destination.reservation) {
        if let Some(af) = r.plan.artifact_files() {
            if matches!(
                r.tables.get(af),
                Some(TableState::Pending | TableState::InDoubt)
            ) {
                return Ok(Next::CopyTable { index: af });
            }
        }
    }
    Ok(n)
}

fn decide_files_early(s: &State, req: &Request) -> Verdict {
    let name = match req {
        Request::Table { name, .. } | Request::TableCommitted { name, .. } => name,
        _ => return migration::decide(s, req),
    };
    let Some(r) = &s.destination.reservation else {
        return migration::decide(s, req);
    };
    let Some(af) = r.plan.artifact_files() else {
        return migration::decide(s, req);
    };
    if r.plan.tables.get(af).map(|t| &t.name) != Some(name) || r.objects.iter().all(|v| *v) {
        return migration::decide(s, req);
    }
    // Decide as if every object and every other table were done; persist the
    // real object and table progress.
    let mut view = s.clone();
    if let Some(v) = view.destination.reservation.as_mut() {
        v.objects.iter_mut().for_each(|o| *o = true);
        for (j, t) in v.tables.iter_mut().enumerate() {
            if j != af {
                *t = TableState::Committed(v.plan.tables[j].source);
            }
        }
    }
    let mut d = migration::decide(&view, req)?;
    if let Some(v) = d.next.destination.reservation.as_mut() {
        v.objects.clone_from(&r.objects);
        for (j, t) in v.tables.iter_mut().enumerate() {
            if j != af {
                *t = r.tables[j];
            }
        }
    }
    Ok(d)
}

fn next_skip_recheck(s: &State) -> Result<Next, MigrationError> {
    let n = migration::next_step(s)?;
    Ok(if n == Next::Recheck {
        Next::StageControl
    } else {
        n
    })
}

fn decide_skip_recheck(s: &State, req: &Request) -> Verdict {
    let unchecked = s
        .destination
        .reservation
        .as_ref()
        .is_some_and(|r| r.source_stability.is_none());
    if matches!(req, Request::StageControl { .. }) && unchecked {
        let mut view = s.clone();
        if let Some(r) = view.destination.reservation.as_mut() {
            r.source_stability = Some(migration::Digest::default());
        }
        return migration::decide(&view, req);
    }
    migration::decide(s, req)
}

fn next_recompute(s: &State) -> Result<Next, MigrationError> {
    match migration::next_step(s) {
        Ok(Next::Done(_)) => Ok(Next::Complete),
        other => other,
    }
}

fn decide_recompute(s: &State, req: &Request) -> Verdict {
    let completed = s
        .destination
        .reservation
        .as_ref()
        .is_some_and(|r| r.status == Status::Completed);
    if matches!(req, Request::Complete { .. }) && completed {
        let mut view = s.clone();
        if let Some(r) = view.destination.reservation.as_mut() {
            r.status = Status::Activated;
            r.receipt = None;
        }
        return migration::decide(&view, req);
    }
    migration::decide(s, req)
}

fn decide_floor_source_only(s: &State, req: &Request) -> Verdict {
    let mut d = migration::decide(s, req)?;
    if let (Outcome::Staged { floors }, Some(r)) = (&mut d.outcome, &s.destination.reservation) {
        for (f, w) in floors.iter_mut().zip(&r.plan.worlds) {
            f.floor = w.source_epoch;
        }
        if let Some(c) = d
            .next
            .destination
            .reservation
            .as_mut()
            .and_then(|r| r.control.as_mut())
        {
            c.floors.clone_from(floors);
        }
    }
    Ok(d)
}

fn decide_blind(s: &State, req: &Request) -> Verdict {
    let d = migration::decide(s, req)?;
    if matches!(
        req,
        Request::TableCommitted {
            reply: CommitReply::Ambiguous,
            ..
        }
    ) && d.outcome == Outcome::InspectFirst
    {
        return Ok(Decision {
            outcome: Outcome::Append,
            next: d.next,
        });
    }
    Ok(d)
}

/// The model: the fixture, the adversary's budget, and optionally a mutant.
#[derive(Clone, Debug)]
pub struct MigrationModel {
    /// The identity migrated.
    pub fixture: Fixture,
    /// The adversary's budget.
    pub budget: Budget,
    /// The defect applied, if any.
    pub mutant: Option<Mutant>,
}

impl MigrationModel {
    /// The machine a driver consults: the real one, or the mutant's.
    fn machine(&self) -> Machine {
        self.mutant.map_or(Machine::REAL, Mutant::machine)
    }
}

impl Model for MigrationModel {
    type State = Sim;
    type Action = SimOp;

    fn init_states(&self) -> Vec<Sim> {
        vec![Sim::new(&self.fixture)]
    }

    fn actions(&self, s: &Sim, actions: &mut Vec<SimOp>) {
        s.enabled(&self.machine(), &self.budget, actions);
    }

    fn next_state(&self, s: &Sim, action: SimOp) -> Option<Sim> {
        let mut next = s.clone();
        next.apply(&self.fixture, &self.machine(), action)
            .then_some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut p = safety();
        p.extend(reachable());
        p
    }
}

/// The safety rules (`always`), in report order.
fn safety() -> Vec<Property<MigrationModel>> {
    vec![
        Property::<MigrationModel>::always(
            "no destination World is discoverable before every table, artifact and control bundle is verified and the source recheck passed",
            |_, s| s.broken & rule::EARLY_DISCOVERY == 0,
        ),
        Property::<MigrationModel>::always(
            "a success receipt exists only after activation and cold verification",
            |_, s| s.broken & rule::RECEIPT_EARLY == 0,
        ),
        Property::<MigrationModel>::always("after ACTIVATED no step reads the source", |_, s| {
            s.broken & rule::SOURCE_READ == 0
        }),
        Property::<MigrationModel>::always("the receipt never changes once completed", |_, s| {
            s.broken & rule::RECEIPT_CHANGED == 0
        }),
        Property::<MigrationModel>::always(
            "every imported fence floor >= the source's epochs, and the first resume is strictly above it",
            |_, s| s.broken & rule::FLOOR_LOW == 0,
        ),
        Property::<MigrationModel>::always("a partial identity is never reported successful", |_, s| {
            s.broken & rule::PARTIAL_SUCCESS == 0
        }),
        Property::<MigrationModel>::always(
            "artifact_files lands only after every referenced object verifies",
            |_, s| s.broken & rule::FILES_BEFORE_OBJECTS == 0,
        ),
        Property::<MigrationModel>::always(
            "no destination table is appended twice (never a blind append)",
            |_, s| s.broken & rule::DOUBLE_APPEND == 0,
        ),
        Property::<MigrationModel>::always("cold verification never runs after completion", |_, s| {
            s.broken & rule::COLD_AFTER_COMPLETE == 0
        }),
        Property::<MigrationModel>::always(
            "the reservation's status always carries the evidence it implies",
            |_, s| s.broken & rule::STATUS_WITHOUT_EVIDENCE == 0,
        ),
    ]
}

/// The outcomes the model must reach (`sometimes`), in report order.
fn reachable() -> Vec<Property<MigrationModel>> {
    vec![
        Property::<MigrationModel>::sometimes(CRASH_NAMES[0], completes_after::<0>),
        Property::<MigrationModel>::sometimes(CRASH_NAMES[1], completes_after::<1>),
        Property::<MigrationModel>::sometimes(CRASH_NAMES[2], completes_after::<2>),
        Property::<MigrationModel>::sometimes(CRASH_NAMES[3], completes_after::<3>),
        Property::<MigrationModel>::sometimes(CRASH_NAMES[4], completes_after::<4>),
        Property::<MigrationModel>::sometimes(CRASH_NAMES[5], completes_after::<5>),
        Property::<MigrationModel>::sometimes(CRASH_NAMES[6], completes_after::<6>),
        Property::<MigrationModel>::sometimes(CRASH_NAMES[7], completes_after::<7>),
        Property::<MigrationModel>::sometimes(CRASH_NAMES[8], completes_after::<8>),
        Property::<MigrationModel>::sometimes(CRASH_NAMES[9], completes_after::<9>),
        Property::<MigrationModel>::sometimes(CRASH_NAMES[10], completes_after::<10>),
        Property::<MigrationModel>::sometimes(CRASH_NAMES[11], completes_after::<11>),
        Property::<MigrationModel>::sometimes("a drifted source aborts activation", |_, s| {
            s.seen & seen::DRIFT_ABORTED != 0 && !s.dest_discoverable
        }),
        Property::<MigrationModel>::sometimes("a retry returns the stored receipt", |_, s| {
            s.seen & seen::RETRY_RECEIPT != 0
        }),
        Property::<MigrationModel>::sometimes(
            "an ambiguous commit that landed converges on inspection",
            |_, s| s.seen & seen::AMBIGUOUS_CONVERGED != 0,
        ),
        Property::<MigrationModel>::sometimes(
            "an ambiguous commit that did not land is appended after inspection",
            |_, s| s.seen & seen::AMBIGUOUS_RETRIED != 0,
        ),
        Property::<MigrationModel>::sometimes(
            "a different plan or migration is refused",
            |_, s| s.seen & seen::OTHER_REFUSED != 0,
        ),
        Property::<MigrationModel>::sometimes("a second driver resumes the same plan", |_, s| {
            s.seen & seen::SECOND_RESUMED != 0
        }),
        Property::<MigrationModel>::sometimes(
            "a verified object left by a crash is reused",
            |_, s| s.seen & seen::OBJECT_REUSED != 0,
        ),
    ]
}

/// "completes after a crash at <step>", one per step.
const CRASH_NAMES: [&str; 12] = [
    "completes after a crash at validate",
    "completes after a crash at plan",
    "completes after a crash at reserve",
    "completes after a crash at copy-artifacts",
    "completes after a crash at copy-tables",
    "completes after a crash at copy-artifact-files",
    "completes after a crash at verify-tables",
    "completes after a crash at recheck-source",
    "completes after a crash at stage-control",
    "completes after a crash at activate",
    "completes after a crash at cold-verify",
    "completes after a crash at complete",
];

fn completes_after<const I: usize>(_: &MigrationModel, s: &Sim) -> bool {
    s.completed_after_crash_at(STEPS[I])
}

impl MutantModel for MigrationModel {
    type Mutant = Mutant;
    const NAME: &'static str = "migration";
    const SUMMARY: &'static str = "whole-identity migration: ordered steps, retry convergence, fence floors and receipts under crashes at every step, lost and ambiguous replies, a second driver, another plan and source drift";

    fn at(bound: Bound) -> Result<Self, String> {
        let fixture = Fixture::new().map_err(|e| format!("fixture invalid: {e}"))?;
        let budget = match bound {
            Bound::Ci => Budget {
                crashes: 1,
                faults: 1,
                drifts: 1,
                second_driver: true,
                intruder: true,
                lose_everywhere: false,
            },
            Bound::Deep => Budget {
                crashes: 2,
                faults: 1,
                drifts: 1,
                second_driver: true,
                intruder: true,
                lose_everywhere: true,
            },
        };
        Ok(MigrationModel {
            fixture,
            budget,
            mutant: None,
        })
    }

    fn mutant_slot(&mut self) -> &mut Option<Mutant> {
        &mut self.mutant
    }

    fn describe_bound(&self) -> String {
        let b = &self.budget;
        format!(
            "1 object, 2 tables, 1 world, 2 drivers + intruder; crashes <= {}, lost replies/ambiguous commits <= {}, drifts <= {}, lost replies {}",
            b.crashes,
            b.faults,
            b.drifts,
            if b.lose_everywhere { "at every step" } else { "at plan/reserve/complete" }
        )
    }
}
