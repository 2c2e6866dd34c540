//! A simulated migration environment around the real migration machine, with
//! a monitor that checks the workflow's safety rules against the *truth* of
//! the simulated source and destination.
//!
//! [`Sim`] holds the destination's durable administration (the machine's
//! [`Destination`]), the destination's data plane (objects, landed table
//! appends, staged control, discovery, a World fence), the source (a World
//! fence and a drift generation), the plan the caller holds, and two driver
//! processes. [`Sim::enabled`] lists what may happen next — a driver step
//! (optionally with a fault: lost reply, crash before or after the step's
//! record, ambiguous table commit that landed or not), a crash, a restart, a
//! second driver retrying the same plan, a driver with a different plan or
//! migration id, a source drift before the recheck — and [`Sim::apply`] runs
//! it through a [`Machine`] (the real one, or a mutant the model wraps).
//!
//! The stateright model (`custos-models`), the fuzz target, the property
//! tests and the corpus replay all run this same simulation.

use custos_core::fence::{self, Epoch, Holder, WorldFence};
use custos_core::migration::{
    self, Classification, ColdEvidence, CommitReply, ControlPlan, DataError, Decision, Destination,
    Digest, EndpointFacts, Locality, MigrationError, Name, Next, NormalizedUri, ObjectFacts,
    Outcome, Plan, Preflight, Request, Resume, Run, SourceObservation, State, Status,
    StorageIdentity, TableFacts, TablePlan, TableState, WorldPlan, PLAN_FORMAT, STEPS,
};

/// The decision function, as the simulation takes it.
pub type DecideFn = fn(&State, &Request) -> Result<Decision, MigrationError>;
/// The guidance function, as the simulation takes it.
pub type NextFn = fn(&State) -> Result<Next, MigrationError>;

/// The pair of functions a driver consults.
#[derive(Clone, Copy, Debug)]
pub struct Machine {
    /// Decides each request.
    pub decide: DecideFn,
    /// Names the next step.
    pub next: NextFn,
}

impl Machine {
    /// The real machine: [`migration::decide`] and [`migration::next_step`].
    pub const REAL: Machine = Machine {
        decide: migration::decide,
        next: migration::next_step,
    };
}

/// Objects in the fixture plan.
pub const OBJECTS: usize = 1;
/// Tables in the fixture plan (`artifact_files` and `events`).
pub const TABLES: usize = 2;
/// The source fence epoch before the migration acquires.
pub const SOURCE_EPOCH0: Epoch = 2;
/// The highest writer epoch in the World's manifests (above the source's
/// fence epoch, so a floor that ignores it is too low).
pub const MANIFEST_EPOCH: Epoch = 5;

/// The fixed identity the simulation migrates.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Fixture {
    /// The migration id the drivers run.
    pub migration: Name,
    /// Another migration's id.
    pub other_migration: Name,
    /// Source identity.
    pub source: StorageIdentity,
    /// Destination identity.
    pub destination: StorageIdentity,
    /// Source Artifact root.
    pub source_root: NormalizedUri,
    /// Destination Artifact root.
    pub destination_root: NormalizedUri,
    /// The World.
    pub world: Name,
    /// Table names, sorted: `artifact_files`, `events`.
    pub tables: [Name; TABLES],
    /// The version written into receipts.
    pub version: Name,
    /// The migration's fence holder at the source.
    pub migration_holder: Holder,
    /// A source writer (the drift).
    pub writer_holder: Holder,
    /// The cold verifier's resume holder at the destination.
    pub resume_holder: Holder,
}

fn data_err<E: std::fmt::Display>(e: E) -> DataError {
    DataError::Invalid(e.to_string())
}

impl Fixture {
    /// Builds the fixture.
    pub fn new() -> Result<Self, DataError> {
        let id = |u: &str, ns: &str| -> Result<StorageIdentity, DataError> {
            StorageIdentity::new(u, ns, "iceberg-sql").map_err(data_err)
        };
        Ok(Fixture {
            migration: Name::new("m1")?,
            other_migration: Name::new("m2")?,
            source: id("file:///srv/source/warehouse", "archetype")?,
            destination: id("file:///srv/dest/warehouse", "archetype")?,
            source_root: NormalizedUri::parse("file:///srv/source/artifacts")?,
            destination_root: NormalizedUri::parse("file:///srv/dest/artifacts")?,
            world: Name::new("world-1")?,
            tables: [Name::new("artifact_files")?, Name::new("events")?],
            version: Name::new("custos-0.1.0")?,
            migration_holder: Holder::new("migration").map_err(data_err)?,
            writer_holder: Holder::new("writer").map_err(data_err)?,
            resume_holder: Holder::new("cold-verifier").map_err(data_err)?,
        })
    }

    /// The one content object.
    pub fn object(&self, i: usize) -> ObjectFacts {
        ObjectFacts {
            sha256: Digest::of(format!("object-{i}").as_bytes()),
            xxh3_64: 0x5eed + i as u64,
            size: 1024,
        }
    }

    fn schema(&self, i: usize) -> Digest {
        Digest::of(format!("schema-{i}").as_bytes())
    }

    fn metadata(&self, i: usize) -> Digest {
        Digest::of(format!("metadata-{i}").as_bytes())
    }

    /// Source evidence of table `i` at drift generation `generation`.
    pub fn source_table(&self, i: usize, generation: u8) -> TableFacts {
        TableFacts {
            snapshot: 10 + u64::from(generation),
            schema_fingerprint: self.schema(i),
            metadata_fingerprint: self.metadata(i),
            rows: 3 + u64::from(generation),
            content_digest: Digest::of(format!("content-{i}-{generation}").as_bytes()),
        }
    }

    /// The destination content digest the plan expects for table `i`.
    pub fn relocated_digest(&self, i: usize, generation: u8) -> Digest {
        if i == 0 {
            Digest::of(format!("relocated-{i}-{generation}").as_bytes())
        } else {
            self.source_table(i, generation).content_digest
        }
    }

    /// The control snapshot digest at `generation`.
    pub fn control_digest(&self, generation: u8) -> Digest {
        Digest::of(format!("control-{generation}").as_bytes())
    }

    /// The plan frozen at source `generation` after the migration acquired
    /// `epoch`; `variant` 0 is the drivers' plan, others differ in content
    /// (same id) or id.
    pub fn plan(&self, generation: u8, epoch: Epoch, variant: u8) -> Plan {
        let tables = (0..TABLES)
            .map(|i| TablePlan {
                name: self.tables[i].clone(),
                classification: if i == 0 {
                    Classification::ArtifactFiles
                } else {
                    Classification::Storage
                },
                source: self.source_table(i, generation),
                destination_content_digest: self.relocated_digest(i, generation),
            })
            .collect();
        Plan {
            format: PLAN_FORMAT,
            migration_id: if variant == 2 {
                self.other_migration.clone()
            } else {
                self.migration.clone()
            },
            source: self.source.clone(),
            destination: self.destination.clone(),
            source_artifact_root: self.source_root.clone(),
            destination_artifact_root: self.destination_root.clone(),
            control: ControlPlan {
                snapshot_digest: self.control_digest(generation),
                records: 7 + u64::from(variant),
            },
            worlds: vec![WorldPlan {
                world: self.world.clone(),
                source_epoch: epoch,
                manifest_writer_epochs: vec![MANIFEST_EPOCH - 1, MANIFEST_EPOCH],
                resumable: true,
            }],
            tables,
            artifacts: migration::ArtifactPlan {
                occurrences: 2,
                objects: (0..OBJECTS).map(|i| self.object(i)).collect(),
            },
            second_copy: false,
        }
    }

    /// What a fresh read of destination table `i` finds when `landed`
    /// appends of the plan's content landed (generation of the plan).
    pub fn destination_table(&self, i: usize, landed: u8, generation: u8) -> TableFacts {
        let source = self.source_table(i, generation);
        match landed {
            0 => TableFacts {
                snapshot: 0,
                schema_fingerprint: source.schema_fingerprint,
                metadata_fingerprint: source.metadata_fingerprint,
                rows: 0,
                content_digest: Digest::of(b"empty"),
            },
            1 => TableFacts {
                snapshot: 100 + i as u64,
                schema_fingerprint: source.schema_fingerprint,
                metadata_fingerprint: source.metadata_fingerprint,
                rows: source.rows,
                content_digest: self.relocated_digest(i, generation),
            },
            n => TableFacts {
                snapshot: 100 + i as u64 + u64::from(n),
                schema_fingerprint: source.schema_fingerprint,
                metadata_fingerprint: source.metadata_fingerprint,
                rows: source.rows * u64::from(n),
                content_digest: Digest::of(format!("duplicated-{i}-{n}").as_bytes()),
            },
        }
    }

    fn endpoint(&self, identity: &StorageIdentity) -> EndpointFacts {
        EndpointFacts {
            identity: identity.clone(),
            catalog: Locality::Local,
            control: Locality::Local,
            objects: Locality::Local,
            audit: Some(identity.clone()),
            activity_records: 0,
        }
    }
}

/// A fault injected into one driver step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum Fault {
    /// No fault.
    None,
    /// The step's reply is lost: durable effects stay, the driver's run
    /// (and the caller's plan) do not learn of them.
    LoseReply,
    /// The driver crashes after the step's I/O, before its record.
    CrashBeforeRecord,
    /// The driver crashes after the step's record, before the reply.
    CrashAfterRecord,
    /// A table append lands but its reply is ambiguous.
    AmbiguousLanded,
    /// A table append does not land and its reply is ambiguous.
    AmbiguousLost,
}

/// A step kind a confused driver may force, out of order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum Forced {
    /// Validate.
    Validate,
    /// Plan.
    Plan,
    /// Reserve.
    Reserve,
    /// Copy the object.
    CopyObject,
    /// Copy table `i % TABLES`.
    CopyTable(u8),
    /// Verify table `i % TABLES`.
    VerifyTable(u8),
    /// Recheck.
    Recheck,
    /// Stage control.
    StageControl,
    /// Activate.
    Activate,
    /// Cold-verify.
    ColdVerify,
    /// Complete.
    Complete,
}

/// Something that happens in the environment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum SimOp {
    /// Driver `d` performs the step the machine names, under `fault`.
    Step(u8, Fault),
    /// Driver `d` performs a step of its own choosing (fuzzing only).
    Force(u8, Forced),
    /// Driver `d` crashes between steps.
    Crash(u8),
    /// Driver `d` starts (driver 1: a second driver retrying the caller's
    /// plan) or restarts after a crash.
    Start(u8),
    /// A source writer acquires a fence and commits: the source drifts.
    Drift,
    /// A driver with a different plan under the same id (`true`) or a
    /// different migration id (`false`) validates, plans and reserves.
    Intrude(bool),
}

/// Bounds on the environment's adversarial actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Budget {
    /// Crashes (between steps or inside one).
    pub crashes: u8,
    /// Lost replies and ambiguous commits.
    pub faults: u8,
    /// Source drifts.
    pub drifts: u8,
    /// Whether a second driver may retry the caller's plan.
    pub second_driver: bool,
    /// Whether a different plan or migration may try to reserve.
    pub intruder: bool,
    /// Whether lost replies are offered at every step (else only at plan,
    /// reserve and complete, where the reply carries something).
    pub lose_everywhere: bool,
}

/// A driver process.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Driver {
    /// Not running (never started, or crashed).
    Idle,
    /// Running this run.
    Running(Run),
    /// Ended: got the receipt or a refusal.
    Finished,
}

/// One driver step under way: who takes it, from which run, under which
/// fault, and whether the step was forced (a confused driver).
struct Turn<'a> {
    fx: &'a Fixture,
    m: &'a Machine,
    d: usize,
    run: Run,
    fault: Fault,
    forced: bool,
}

/// Bits of [`Sim::broken`]: rules the monitor saw broken.
pub mod rule {
    /// A World became discoverable before every table, object and control
    /// bundle verified and the (true) source matched the plan.
    pub const EARLY_DISCOVERY: u16 = 1 << 0;
    /// A success receipt without activation and cold verification.
    pub const RECEIPT_EARLY: u16 = 1 << 1;
    /// The source was read after the reservation recorded ACTIVATED.
    pub const SOURCE_READ: u16 = 1 << 2;
    /// A completed receipt changed.
    pub const RECEIPT_CHANGED: u16 = 1 << 3;
    /// An imported floor below the source's epochs, or a resume at or below.
    pub const FLOOR_LOW: u16 = 1 << 4;
    /// A partial identity reported successful.
    pub const PARTIAL_SUCCESS: u16 = 1 << 5;
    /// `artifact_files` landed before every object verified.
    pub const FILES_BEFORE_OBJECTS: u16 = 1 << 6;
    /// A table received a second append.
    pub const DOUBLE_APPEND: u16 = 1 << 7;
    /// Cold verification ran after completion.
    pub const COLD_AFTER_COMPLETE: u16 = 1 << 8;
    /// The reservation's status without the evidence it implies.
    pub const STATUS_WITHOUT_EVIDENCE: u16 = 1 << 9;

    /// Every rule with its name.
    pub const ALL: [(u16, &str); 10] = [
        (EARLY_DISCOVERY, "early-discovery"),
        (
            RECEIPT_EARLY,
            "receipt-before-activation-and-cold-verification",
        ),
        (SOURCE_READ, "source-read-after-activation"),
        (RECEIPT_CHANGED, "receipt-changed"),
        (FLOOR_LOW, "fence-floor-or-resume-too-low"),
        (PARTIAL_SUCCESS, "partial-identity-reported-successful"),
        (FILES_BEFORE_OBJECTS, "artifact-files-before-objects"),
        (DOUBLE_APPEND, "table-appended-twice"),
        (COLD_AFTER_COMPLETE, "cold-verification-after-completion"),
        (STATUS_WITHOUT_EVIDENCE, "status-without-evidence"),
    ];
}

/// Bits of [`Sim::seen`]: outcomes reached.
pub mod seen {
    /// A migration completed.
    pub const COMPLETED: u32 = 1 << 0;
    /// The recheck found drift and invalidated the plan.
    pub const DRIFT_ABORTED: u32 = 1 << 1;
    /// A retry got the exact stored receipt.
    pub const RETRY_RECEIPT: u32 = 1 << 2;
    /// An ambiguous commit that landed converged on inspection.
    pub const AMBIGUOUS_CONVERGED: u32 = 1 << 3;
    /// An ambiguous commit that did not land was appended after inspection.
    pub const AMBIGUOUS_RETRIED: u32 = 1 << 4;
    /// A different plan or migration was refused.
    pub const OTHER_REFUSED: u32 = 1 << 5;
    /// A second driver resumed the caller's plan.
    pub const SECOND_RESUMED: u32 = 1 << 6;
    /// A pre-existing verified object was reused.
    pub const OBJECT_REUSED: u32 = 1 << 7;
}

/// The simulated world.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Sim {
    /// The destination's durable migration administration.
    pub dest: Destination,
    /// Bit `i`: object `i` is at its destination content address.
    pub dest_objects: u8,
    /// Appends landed per destination table.
    pub dest_tables: [u8; TABLES],
    /// The staged control bundle is present.
    pub dest_control: bool,
    /// Destination World discovery is active.
    pub dest_discoverable: bool,
    /// The destination World's fence.
    pub dest_fence: WorldFence,
    /// The source World's fence.
    pub source_fence: WorldFence,
    /// The source's drift generation.
    pub source_gen: u8,
    /// The plan the caller holds: `(generation, epoch)`.
    pub caller_plan: Option<(u8, Epoch)>,
    /// The two drivers.
    pub drivers: [Driver; 2],
    /// The caller's clock (advances at each completion attempt).
    pub clock: u8,
    /// Crashes so far.
    pub crashes: u8,
    /// Faults so far.
    pub faults: u8,
    /// Drifts so far.
    pub drifts: u8,
    /// The intruder has acted.
    pub intruded: bool,
    /// Monitor: the digest of the first completed receipt.
    pub receipt: Option<Digest>,
    /// Monitor: rules broken (bits of [`rule`]).
    pub broken: u16,
    /// Monitor: outcomes reached (bits of [`seen`]).
    pub seen: u32,
    /// Monitor: steps at which a driver crashed (bit = step index).
    pub crashed_at: u16,
    /// Monitor: `crashed_at` when the migration first completed.
    pub completed_after: u16,
}

impl Sim {
    /// The initial world: driver 0 starts fresh.
    pub fn new(fx: &Fixture) -> Self {
        Sim {
            dest: Destination::default(),
            dest_objects: 0,
            dest_tables: [0; TABLES],
            dest_control: false,
            dest_discoverable: false,
            dest_fence: WorldFence::default(),
            source_fence: WorldFence {
                issued: SOURCE_EPOCH0,
                floor: 0,
                holder: Some(fx.writer_holder.clone()),
            },
            source_gen: 0,
            caller_plan: None,
            drivers: [
                Driver::Running(Run::new(fx.migration.clone(), None)),
                Driver::Idle,
            ],
            clock: 0,
            crashes: 0,
            faults: 0,
            drifts: 0,
            intruded: false,
            receipt: None,
            broken: 0,
            seen: 0,
            crashed_at: 0,
            completed_after: 0,
        }
    }

    fn held_digest(&self, fx: &Fixture) -> Option<Digest> {
        self.caller_plan.map(|(g, e)| fx.plan(g, e, 0).digest())
    }

    fn ours<'a>(&'a self, fx: &Fixture) -> Option<&'a migration::Reservation> {
        self.dest
            .reservation
            .as_ref()
            .filter(|r| r.plan.migration_id == fx.migration && r.plan.worlds.len() == 1)
            .filter(|r| r.plan.control.records == 7)
    }

    fn activated(&self, fx: &Fixture) -> bool {
        self.ours(fx)
            .is_some_and(|r| matches!(r.status, Status::Activated | Status::Completed))
    }

    fn state(&self, run: &Run) -> State {
        State {
            run: run.clone(),
            destination: self.dest.clone(),
        }
    }

    /// The step driver `d`'s machine would name now (for crash bookkeeping).
    fn step_of(&self, m: &Machine, d: usize) -> Option<migration::Step> {
        let Driver::Running(run) = &self.drivers[d] else {
            return None;
        };
        let plan = self.dest.reservation.as_ref().map(|r| &r.plan);
        (m.next)(&self.state(run)).ok().map(|n| n.step(plan))
    }

    /// What may happen next under `budget`.
    pub fn enabled(&self, m: &Machine, budget: &Budget, out: &mut Vec<SimOp>) {
        if self.broken != 0 {
            return; // a counterexample ends where a rule first breaks
        }
        let can_crash = self.crashes < budget.crashes;
        let can_fault = self.faults < budget.faults;
        for d in 0..2u8 {
            match &self.drivers[usize::from(d)] {
                Driver::Running(run) => {
                    let next = (m.next)(&self.state(run));
                    out.push(SimOp::Step(d, Fault::None));
                    let Ok(next) = next else { continue };
                    if matches!(next, Next::Done(_)) {
                        continue;
                    }
                    if can_crash {
                        out.push(SimOp::Crash(d));
                        out.push(SimOp::Step(d, Fault::CrashAfterRecord));
                        if matches!(
                            next,
                            Next::Plan
                                | Next::CopyObject { .. }
                                | Next::CopyTable { .. }
                                | Next::ColdVerify
                        ) {
                            out.push(SimOp::Step(d, Fault::CrashBeforeRecord));
                        }
                    }
                    if can_fault {
                        if budget.lose_everywhere
                            || matches!(next, Next::Plan | Next::Reserve | Next::Complete)
                        {
                            out.push(SimOp::Step(d, Fault::LoseReply));
                        }
                        if matches!(next, Next::CopyTable { .. }) {
                            out.push(SimOp::Step(d, Fault::AmbiguousLanded));
                            out.push(SimOp::Step(d, Fault::AmbiguousLost));
                        }
                    }
                }
                Driver::Idle => {
                    if d == 0 || (budget.second_driver && self.caller_plan.is_some()) {
                        out.push(SimOp::Start(d));
                    }
                }
                Driver::Finished => {}
            }
        }
        let rechecked = self
            .dest
            .reservation
            .as_ref()
            .is_some_and(|r| r.source_stability.is_some() || r.status != Status::Reserved);
        if self.drifts < budget.drifts && !rechecked {
            out.push(SimOp::Drift);
        }
        if budget.intruder && !self.intruded {
            out.push(SimOp::Intrude(true));
            out.push(SimOp::Intrude(false));
        }
    }

    fn crash(&mut self, m: &Machine, d: usize) {
        if let Some(step) = self.step_of(m, d) {
            self.crashed_at |= 1 << step.index();
        }
        self.drivers[d] = Driver::Idle;
        self.crashes = self.crashes.saturating_add(1);
    }

    /// Applies `op`. Returns false when the op is not possible here.
    pub fn apply(&mut self, fx: &Fixture, m: &Machine, op: SimOp) -> bool {
        match op {
            SimOp::Step(d, fault) => {
                let d = usize::from(d % 2);
                if !matches!(self.drivers[d], Driver::Running(_)) {
                    return false;
                }
                if !matches!(
                    fault,
                    Fault::None | Fault::CrashAfterRecord | Fault::CrashBeforeRecord
                ) {
                    self.faults = self.faults.saturating_add(1);
                }
                self.step(fx, m, d, fault, None);
            }
            SimOp::Force(d, forced) => {
                let d = usize::from(d % 2);
                if !matches!(self.drivers[d], Driver::Running(_)) {
                    return false;
                }
                self.step(fx, m, d, Fault::None, Some(forced));
            }
            SimOp::Crash(d) => {
                let d = usize::from(d % 2);
                if !matches!(self.drivers[d], Driver::Running(_)) {
                    return false;
                }
                self.crash(m, d);
            }
            SimOp::Start(d) => {
                let d = usize::from(d % 2);
                if !matches!(self.drivers[d], Driver::Idle)
                    || (d == 1 && self.caller_plan.is_none())
                {
                    return false;
                }
                self.drivers[d] =
                    Driver::Running(Run::new(fx.migration.clone(), self.held_digest(fx)));
            }
            SimOp::Drift => {
                let Ok(dec) = fence::decide(
                    &self.source_fence,
                    &fence::Request::Acquire {
                        holder: fx.writer_holder.clone(),
                    },
                ) else {
                    return false;
                };
                self.source_fence = dec.next;
                self.source_gen = self.source_gen.saturating_add(1);
                self.drifts = self.drifts.saturating_add(1);
            }
            SimOp::Intrude(same_id) => {
                if self.intruded {
                    return false;
                }
                self.intruded = true;
                self.intrude(fx, m, same_id);
            }
        }
        self.check_status();
        true
    }

    fn preflight(&self, fx: &Fixture) -> Preflight {
        Preflight {
            source: fx.endpoint(&fx.source),
            destination: fx.endpoint(&fx.destination),
            unsettled_commands: 0,
            running_evaluations: 0,
            unreadable_objects: 0,
            source_tables: 1,
            source_control_records: 1,
            destination_tables: self.dest_tables.iter().filter(|n| **n > 0).count() as u64,
            destination_control_records: u64::from(self.dest_control),
            conflicting_destination_objects: 0,
            departures: migration::departure::Departures::default(),
        }
    }

    fn intrude(&mut self, fx: &Fixture, m: &Machine, same_id: bool) {
        let plan = fx.plan(
            self.source_gen,
            self.source_fence.issued,
            if same_id { 1 } else { 2 },
        );
        let mut st = State {
            run: Run::new(plan.migration_id.clone(), None),
            destination: self.dest.clone(),
        };
        let reqs = [
            Request::Validate {
                report: self.preflight(fx),
            },
            Request::Freeze { plan: plan.clone() },
            Request::Reserve {
                plan,
                now: u64::from(self.clock),
            },
        ];
        for req in &reqs {
            match (m.decide)(&st, req) {
                Ok(dec) => st = dec.next,
                Err(
                    MigrationError::PlanChanged(_)
                    | MigrationError::OtherMigration(_)
                    | MigrationError::DestinationNotEmpty,
                ) => {
                    self.seen |= seen::OTHER_REFUSED;
                    return;
                }
                Err(_) => return,
            }
        }
        self.dest = st.destination;
    }

    /// The floor the monitor requires: the migration's source epoch and every
    /// manifest writer epoch (stated from the fixture, not the machine).
    fn required_floor(&self, fx: &Fixture) -> Epoch {
        self.ours(fx)
            .and_then(|r| r.plan.worlds.first())
            .map_or(MANIFEST_EPOCH, |w| w.source_epoch.max(MANIFEST_EPOCH))
    }

    fn plan_gen_epoch(&self, fx: &Fixture) -> Option<(u8, Epoch)> {
        let r = self.ours(fx)?;
        let w = r.plan.worlds.first()?;
        let generation = (r.plan.tables.get(1)?.source.snapshot.checked_sub(10))?;
        Some((u8::try_from(generation).ok()?, w.source_epoch))
    }

    fn identity_complete(&self, fx: &Fixture) -> bool {
        let Some((generation, _)) = self.plan_gen_epoch(fx) else {
            return false;
        };
        let objects = self.dest_objects.count_ones() as usize == OBJECTS;
        let tables = self.dest_tables.iter().all(|n| *n == 1)
            && self.ours(fx).is_some_and(|r| {
                r.plan.tables.iter().enumerate().all(|(i, t)| {
                    t.destination_matches(&fx.destination_table(i, self.dest_tables[i], generation))
                })
            });
        objects && tables && self.dest_control
    }

    fn check_status(&mut self) {
        let Some(r) = &self.dest.reservation else {
            return;
        };
        let ok = match r.status {
            Status::Reserved => r.receipt.is_none() && r.cold.is_none(),
            Status::Invalidated | Status::Abandoned => r.control.is_none() && r.receipt.is_none(),
            Status::Activated | Status::Completed => {
                r.objects.iter().all(|v| *v)
                    && r.tables
                        .iter()
                        .all(|t| matches!(t, TableState::Verified(_)))
                    && r.source_stability.is_some()
                    && r.control.is_some()
                    && (r.status == Status::Activated
                        || (r.cold.is_some()
                            && r.receipt.as_ref().is_some_and(|s| s.verify().is_ok())))
            }
        };
        if !ok {
            self.broken |= rule::STATUS_WITHOUT_EVIDENCE;
        }
    }

    fn source_read(&mut self, fx: &Fixture) {
        if self.activated(fx) {
            self.broken |= rule::SOURCE_READ;
        }
    }

    fn finish(&mut self, d: usize, e: &MigrationError) {
        if matches!(
            e,
            MigrationError::PlanChanged(_) | MigrationError::OtherMigration(_)
        ) {
            self.seen |= seen::OTHER_REFUSED;
        }
        self.drivers[d] = Driver::Finished;
    }

    /// Sends `req` for the turn's driver from `run`; persists the
    /// destination; returns the outcome and the run the reply would carry.
    /// A refusal ends a real driver's run (the caller sees the error) but
    /// not a forced one.
    fn send(&mut self, t: &Turn, run: &Run, req: Request) -> Option<(Outcome, Run)> {
        match (t.m.decide)(&self.state(run), &req) {
            Ok(dec) => {
                self.dest = dec.next.destination;
                Some((dec.outcome, dec.next.run))
            }
            Err(e) => {
                if !t.forced {
                    self.finish(t.d, &e);
                }
                None
            }
        }
    }

    /// Driver `d` takes one step: the one its machine names, or `forced`.
    /// Each step kind is its own function below, answering the run the
    /// driver holds afterwards (`None`: the turn ended early — a crash, a
    /// refusal, a step that cannot run); then the fault decides whether the
    /// driver crashes, loses the reply, or keeps that run.
    fn step(&mut self, fx: &Fixture, m: &Machine, d: usize, fault: Fault, forced: Option<Forced>) {
        let Driver::Running(run) = self.drivers[d].clone() else {
            return;
        };
        let plan = self.dest.reservation.as_ref().map(|r| r.plan.clone());
        let next = match forced {
            None => match (m.next)(&self.state(&run)) {
                Ok(n) => n,
                Err(e) => {
                    self.finish(d, &e);
                    return;
                }
            },
            Some(f) => forced_next(f),
        };
        let step = next.step(plan.as_ref());
        if forced.is_none() && step.reads_source() {
            self.source_read(fx);
        }
        let t = Turn {
            fx,
            m,
            d,
            run,
            fault,
            forced: forced.is_some(),
        };
        let run_after = match next {
            Next::Validate => self.validate(&t),
            Next::Plan => self.plan(&t),
            Next::Reserve => self.reserve(&t),
            Next::CopyObject { index } => self.copy_object(&t, index),
            Next::CopyTable { index } => self.copy_table(&t, index % TABLES),
            Next::VerifyTable { index } => self.verify_table(&t, index % TABLES),
            Next::Recheck => self.recheck(&t),
            Next::StageControl => self.stage_control(&t),
            Next::Activate => self.activate(&t),
            Next::ColdVerify => self.cold_verify(&t),
            Next::Complete => self.complete(&t),
            Next::Done(receipt) => {
                self.completed(fx, receipt.digest, true);
                self.drivers[d] = Driver::Finished;
                None
            }
        };
        let Some(run_after) = run_after else {
            return;
        };
        match fault {
            Fault::CrashAfterRecord => self.crash(m, d),
            Fault::LoseReply => {}
            _ => {
                if matches!(self.drivers[d], Driver::Running(_)) {
                    self.drivers[d] = Driver::Running(run_after);
                }
            }
        }
    }

    /// `Validate`: the preflight report of the simulated endpoints.
    fn validate(&mut self, t: &Turn) -> Option<Run> {
        let report = self.preflight(t.fx);
        let (_, r) = self.send(t, &t.run, Request::Validate { report })?;
        Some(r)
    }

    /// `Plan`: a fresh run acquires the migration's source fence and
    /// freezes the plan at the source's generation; a run resuming the
    /// caller's plan freezes that one. The caller holds the plan only when
    /// the reply arrives.
    fn plan(&mut self, t: &Turn) -> Option<Run> {
        let (generation, epoch) = match (t.run.plan, self.caller_plan) {
            (Some(_), Some(held)) => held,
            (Some(_), None) => return None,
            (None, _) => {
                let dec = fence::decide(
                    &self.source_fence,
                    &fence::Request::Acquire {
                        holder: t.fx.migration_holder.clone(),
                    },
                )
                .ok()?;
                self.source_fence = dec.next;
                (self.source_gen, self.source_fence.issued)
            }
        };
        if t.fault == Fault::CrashBeforeRecord {
            self.crash(t.m, t.d);
            return None;
        }
        let plan = t.fx.plan(generation, epoch, 0);
        let (_, r) = self.send(t, &t.run, Request::Freeze { plan })?;
        if !matches!(t.fault, Fault::LoseReply | Fault::CrashAfterRecord) {
            self.caller_plan = Some((generation, epoch));
        }
        Some(r)
    }

    /// `Reserve` the caller's plan (driver 1 doing it is the second driver
    /// resuming).
    fn reserve(&mut self, t: &Turn) -> Option<Run> {
        let (generation, epoch) = self.caller_plan?;
        let req = Request::Reserve {
            plan: t.fx.plan(generation, epoch, 0),
            now: u64::from(self.clock),
        };
        let (_, r) = self.send(t, &t.run, req)?;
        if t.d == 1 {
            self.seen |= seen::SECOND_RESUMED;
        }
        Some(r)
    }

    /// `CopyObject`: report what the destination holds; copy (reading the
    /// source) only when the machine asks to, then record the copy.
    fn copy_object(&mut self, t: &Turn, index: usize) -> Option<Run> {
        if index >= OBJECTS {
            return None;
        }
        let facts = t.fx.object(index);
        let present = self.dest_objects & (1 << index) != 0;
        let found = present.then_some(facts);
        let req = Request::Object {
            sha256: facts.sha256,
            found,
        };
        let (out, mut run_after) = self.send(t, &t.run, req)?;
        if present && out == Outcome::Recorded {
            self.seen |= seen::OBJECT_REUSED;
        }
        if out == Outcome::CopyObject {
            self.source_read(t.fx);
            self.dest_objects |= 1 << index;
            if t.fault == Fault::CrashBeforeRecord {
                self.crash(t.m, t.d);
                return None;
            }
            let req = Request::Object {
                sha256: facts.sha256,
                found: Some(facts),
            };
            let (_, r) = self.send(t, &run_after, req)?;
            run_after = r;
        }
        Some(run_after)
    }

    /// `CopyTable` `i`: report what a fresh read of the destination finds;
    /// append (reading the source) only while the machine answers
    /// `Append`, under the turn's fault (an ambiguous reply that landed or
    /// not, a crash before the record). The monitor counts appends.
    fn copy_table(&mut self, t: &Turn, i: usize) -> Option<Run> {
        let generation = self.plan_gen_epoch(t.fx).map_or(0, |(g, _)| g);
        let was_in_doubt = self
            .dest
            .reservation
            .as_ref()
            .and_then(|r| r.tables.get(i).copied())
            == Some(TableState::InDoubt);
        let found = (self.dest_tables[i] > 0)
            .then(|| t.fx.destination_table(i, self.dest_tables[i], generation));
        let req = Request::Table {
            name: t.fx.tables[i].clone(),
            found,
        };
        let (mut out, mut run_after) = self.send(t, &t.run, req)?;
        if was_in_doubt && found.is_some() && out == Outcome::Recorded {
            self.seen |= seen::AMBIGUOUS_CONVERGED;
        }
        if was_in_doubt && found.is_none() && out == Outcome::Append {
            self.seen |= seen::AMBIGUOUS_RETRIED;
        }
        let mut appends = 0;
        while out == Outcome::Append && appends < 3 {
            appends += 1;
            self.source_read(t.fx);
            if i == 0 && self.dest_objects.count_ones() as usize != OBJECTS {
                self.broken |= rule::FILES_BEFORE_OBJECTS;
            }
            let first = appends == 1;
            let landed = !(first && t.fault == Fault::AmbiguousLost);
            if landed {
                self.dest_tables[i] = self.dest_tables[i].saturating_add(1);
                if self.dest_tables[i] > 1 {
                    self.broken |= rule::DOUBLE_APPEND;
                }
            }
            if first && t.fault == Fault::CrashBeforeRecord {
                self.crash(t.m, t.d);
                return None;
            }
            let reply = if first && matches!(t.fault, Fault::AmbiguousLanded | Fault::AmbiguousLost)
            {
                CommitReply::Ambiguous
            } else {
                CommitReply::Committed(t.fx.destination_table(i, self.dest_tables[i], generation))
            };
            let req = Request::TableCommitted {
                name: t.fx.tables[i].clone(),
                reply,
            };
            (out, run_after) = self.send(t, &run_after, req)?;
        }
        Some(run_after)
    }

    /// `VerifyTable` `i`: the read-back of the destination table.
    fn verify_table(&mut self, t: &Turn, i: usize) -> Option<Run> {
        let generation = self.plan_gen_epoch(t.fx).map_or(0, |(g, _)| g);
        let req = Request::VerifyTable {
            name: t.fx.tables[i].clone(),
            read_back: t.fx.destination_table(i, self.dest_tables[i], generation),
        };
        let (_, r) = self.send(t, &t.run, req)?;
        Some(r)
    }

    /// `Recheck`: the source as it stands now (its generation and fence).
    fn recheck(&mut self, t: &Turn) -> Option<Run> {
        let fx = t.fx;
        let observed = SourceObservation {
            control_digest: fx.control_digest(self.source_gen),
            tables: (0..TABLES)
                .map(|i| {
                    (
                        fx.tables[i].clone(),
                        fx.source_table(i, self.source_gen).snapshot,
                    )
                })
                .collect(),
            inventory_digest: fx.plan(0, 1, 0).artifacts.inventory_digest(),
            world_epochs: vec![(fx.world.clone(), self.source_fence.issued)],
        };
        let (out, r) = self.send(t, &t.run, Request::Recheck { observed })?;
        if out == Outcome::Invalidated {
            self.seen |= seen::DRIFT_ABORTED;
        }
        Some(r)
    }

    /// `StageControl`: stage the plan's control snapshot and import the
    /// floors the machine names into the destination fence (the monitor
    /// checks each against the floor it requires).
    fn stage_control(&mut self, t: &Turn) -> Option<Run> {
        let generation = self.plan_gen_epoch(t.fx).map_or(0, |(g, _)| g);
        let req = Request::StageControl {
            snapshot_digest: t.fx.control_digest(generation),
        };
        let (out, r) = self.send(t, &t.run, req)?;
        if let Outcome::Staged { floors } = out {
            self.dest_control = true;
            let required = self.required_floor(t.fx);
            for f in floors {
                if f.floor < required {
                    self.broken |= rule::FLOOR_LOW;
                }
                if let Ok(dec) = fence::decide(
                    &self.dest_fence,
                    &fence::Request::ImportFloor { floor: f.floor },
                ) {
                    self.dest_fence = dec.next;
                }
            }
        }
        Some(r)
    }

    /// `Activate`: the World becomes discoverable; the monitor checks that
    /// every table and object was verified, the source is still the plan's
    /// and the identity is complete.
    fn activate(&mut self, t: &Turn) -> Option<Run> {
        let (out, r) = self.send(t, &t.run, Request::Activate)?;
        if out == Outcome::Activated {
            self.dest_discoverable = true;
            let verified = self.ours(t.fx).is_some_and(|r| {
                r.tables
                    .iter()
                    .all(|t| matches!(t, TableState::Verified(_)))
                    && r.objects.iter().all(|v| *v)
            });
            let stable =
                self.plan_gen_epoch(t.fx) == Some((self.source_gen, self.source_fence.issued));
            if !(verified && stable && self.identity_complete(t.fx)) {
                self.broken |= rule::EARLY_DISCOVERY;
            }
        }
        Some(r)
    }

    /// `ColdVerify`: the cold verifier discovers the World, resumes it
    /// under a fresh destination fence (which must clear the required
    /// floor), and reports what it read.
    fn cold_verify(&mut self, t: &Turn) -> Option<Run> {
        let fx = t.fx;
        // A driver the machine guides never runs the verifier after
        // completion; a confused (forced) driver may, and the machine
        // refuses its evidence.
        if !t.forced && self.ours(fx).is_some_and(|r| r.status == Status::Completed) {
            self.broken |= rule::COLD_AFTER_COMPLETE;
        }
        let generation = self.plan_gen_epoch(fx).map_or(0, |(g, _)| g);
        // The verifier can resume only a World it discovers.
        let resume = if self.dest_discoverable {
            let dec = fence::decide(
                &self.dest_fence,
                &fence::Request::Acquire {
                    holder: fx.resume_holder.clone(),
                },
            )
            .ok()?;
            self.dest_fence = dec.next;
            let epoch = self.dest_fence.issued;
            if epoch <= self.required_floor(fx) {
                self.broken |= rule::FLOOR_LOW;
            }
            Resume::Resumed {
                world: fx.world.clone(),
                epoch,
                tick: 1,
            }
        } else {
            Resume::NotApplicable
        };
        if t.fault == Fault::CrashBeforeRecord {
            self.crash(t.m, t.d);
            return None;
        }
        let evidence = ColdEvidence {
            plan_digest: self.ours(fx).map(|r| r.plan_digest).unwrap_or_default(),
            worlds_discovered: u64::from(self.dest_discoverable),
            tables: (0..TABLES)
                .map(|i| {
                    (
                        fx.tables[i].clone(),
                        fx.destination_table(i, self.dest_tables[i], generation),
                    )
                })
                .collect(),
            objects_verified: u64::from(self.dest_objects.count_ones()),
            resume,
            worlds_missing: Vec::new(),
            objects_failed: Vec::new(),
        };
        let (_, r) = self.send(t, &t.run, Request::ColdVerify { evidence })?;
        Some(r)
    }

    /// `Complete` at the caller's clock (which advances); a receipt ends
    /// the driver unless its reply is lost or it crashes after the record.
    fn complete(&mut self, t: &Turn) -> Option<Run> {
        let now = u64::from(self.clock);
        self.clock = self.clock.saturating_add(1);
        let req = Request::Complete {
            version: t.fx.version.clone(),
            now,
        };
        let (out, r) = self.send(t, &t.run, req)?;
        if let Outcome::Completed { receipt, repeated } = out {
            self.completed(t.fx, receipt.digest, repeated);
            if !matches!(t.fault, Fault::LoseReply | Fault::CrashAfterRecord) {
                self.drivers[t.d] = Driver::Finished;
            }
        }
        Some(r)
    }

    /// A receipt reached a driver: the monitor checks it is the first one
    /// (or equal to it), that it came after discovery and cold verification,
    /// and that the identity is complete.
    fn completed(&mut self, fx: &Fixture, digest: Digest, repeated: bool) {
        match self.receipt {
            Some(first) if first != digest => self.broken |= rule::RECEIPT_CHANGED,
            Some(_) => {}
            None => {
                self.receipt = Some(digest);
                self.completed_after = self.crashed_at;
            }
        }
        let cold = self.ours(fx).is_some_and(|r| r.cold.is_some());
        if !self.dest_discoverable || !cold {
            self.broken |= rule::RECEIPT_EARLY;
        }
        if !self.identity_complete(fx) {
            self.broken |= rule::PARTIAL_SUCCESS;
        }
        self.seen |= seen::COMPLETED;
        if repeated {
            self.seen |= seen::RETRY_RECEIPT;
        }
    }

    /// Whether the migration completed after a crash at `step`.
    pub fn completed_after_crash_at(&self, step: migration::Step) -> bool {
        self.seen & seen::COMPLETED != 0 && self.completed_after & (1 << step.index()) != 0
    }
}

fn forced_next(f: Forced) -> Next {
    match f {
        Forced::Validate => Next::Validate,
        Forced::Plan => Next::Plan,
        Forced::Reserve => Next::Reserve,
        Forced::CopyObject => Next::CopyObject { index: 0 },
        Forced::CopyTable(i) => Next::CopyTable {
            index: usize::from(i) % TABLES,
        },
        Forced::VerifyTable(i) => Next::VerifyTable {
            index: usize::from(i) % TABLES,
        },
        Forced::Recheck => Next::Recheck,
        Forced::StageControl => Next::StageControl,
        Forced::Activate => Next::Activate,
        Forced::ColdVerify => Next::ColdVerify,
        Forced::Complete => Next::Complete,
    }
}

/// The names of the rules in `broken`.
pub fn broken_names(broken: u16) -> Vec<&'static str> {
    rule::ALL
        .iter()
        .filter(|(bit, _)| broken & bit != 0)
        .map(|(_, n)| *n)
        .collect()
}

/// Every step name, in order (for reports).
pub fn step_names() -> Vec<&'static str> {
    STEPS.iter().map(|s| s.name()).collect()
}
