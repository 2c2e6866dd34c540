//! The whole-identity migration workflow over ports:
//! [`Migration::plan`], [`Migration::migrate`] (or the same run one step
//! at a time: [`Migration::start`], then [`Migration::advance`]) and
//! [`Migration::verify`],
//! generic over the control catalog ([`ControlCatalog`] +
//! [`ControlAdmin`]), the table store ([`TableStore`]), the Artifact object
//! store ([`ObjectStore`]) and a host-injected [`ColdVerifier`]. The cli
//! wires concrete shells; an embedder wires its own.
//!
//! The driver never encodes the order: it asks [`super::next_step`],
//! gathers the evidence the step needs through the ports, and sends it to
//! [`super::decide`]. Every decision that changes the destination's
//! administration is stored by [`ControlAdmin::commit_destination`] — with
//! its effect (staging, activation) in the same transaction — before the
//! next step, so a run that stops anywhere leaves a destination the next
//! run resumes from. Once the reservation is activated the source is never
//! read again: `next_step` names no source step and `decide` refuses one,
//! and every step starts from the destination as stored, so a run another
//! host carried past activation asks for none either. (Between a step's
//! load of the destination and its source reads another host may activate
//! it: that step may still read the source, or at its plan step record the
//! departure and fence the source, once.)
//!
//! What the ports cannot know is fixed here: every table other than
//! `artifact_files` is copied uninterpreted ([`Classification::Application`]);
//! custos has no manifests, so a World's import floor is its source fence
//! epoch; it has no commands or evaluations, so quiescence is the Activity
//! catalog's emptiness, counted by the shell and passed in
//! ([`Endpoint::activity_records`]).

use thiserror::Error;

use super::artifacts::{
    content_address, declared_inventory, inspect_destination, relocate, verify_source, ObjectError,
    ObjectStore, Occurrence, RelocationError, SourceInventory,
};
use super::control::{AdminEffect, AdminError, ControlAdmin, ControlSnapshot};
use super::tables::{TableError, TableStore};
use super::{
    decide, next_step, Classification, ColdEvidence, ControlPlan, EndpointFacts, Locality,
    MigrationError, Name, Next, NormalizedUri, Outcome, Plan, Preflight, Request, Run,
    SourceObservation, State, StorageIdentity, StoredReceipt, TablePlan, VerifyMode, WorldPlan,
    PLAN_FORMAT,
};
use crate::fence::Holder;
use crate::world::{ControlCatalog, FencePurpose, WorldError, WorldStatus, WriterMode};
use crate::Millis;

/// The name of the occurrence inventory table.
pub const ARTIFACT_FILES: &str = "artifact_files";

/// The most steps one run takes before it stops as [`WorkflowError::Stuck`]
/// (a bound on a driver bug, never reached by a correct machine).
const MAX_STEPS: usize = 1 << 20;

/// One endpoint of a migration: its identity and its ports.
pub struct Endpoint<'a, C, T, O> {
    /// The storage identity.
    pub identity: StorageIdentity,
    /// The explicitly bound audit identity (`None`: unbound, refused).
    pub audit: Option<StorageIdentity>,
    /// The control catalog.
    pub control: &'a C,
    /// The table store.
    pub tables: &'a T,
    /// The Artifact object store.
    pub objects: &'a O,
    /// The Artifact root the object store serves.
    pub artifact_root: NormalizedUri,
    /// Where the catalog, control catalog and objects live.
    pub locality: Locality,
    /// Activity records of the endpoint (its execution ledger's rows).
    pub activity_records: u64,
}

/// The host-injected, destination-only cold verifier: given the plan, it
/// gathers evidence of discovery, table content and Artifact bytes from
/// fresh destination resources, and — in [`VerifyMode::ResumeAndTick`],
/// when a resumable World exists — resumes it above the imported floor and
/// commits a later tick.
///
/// Differences are evidence, not failures: a table is reported with the
/// facts a fresh read found, a World or an object that does not verify is
/// named in [`ColdEvidence::worlds_missing`] or
/// [`ColdEvidence::objects_failed`], and the machine's check names each one
/// ([`super::check_cold_as`]). A failure (`Err`) is what kept the verifier
/// from looking: a store that does not open, an I/O error.
pub trait ColdVerifier {
    /// Verifies the destination against `plan` in `mode`. In
    /// [`VerifyMode::ReadOnly`] it writes nothing, takes no fence and
    /// commits no tick, and answers [`super::Resume::NotExercised`] when
    /// the plan has a resumable World.
    fn verify(&self, plan: &Plan, mode: VerifyMode) -> Result<ColdEvidence, String>;
}

/// What a run reports as it goes, for a progress display; every method
/// has an empty default. Reporting never changes the run.
pub trait Progress {
    /// The step the run takes next.
    fn step(&self, _next: &Next) {}
    /// The plan the run follows (frozen now, or reserved earlier).
    fn planned(&self, _plan: &Plan) {}
    /// Every Artifact object is at the destination and verified:
    /// `copied` written, `reused` found verified, `bytes` read back.
    fn objects(&self, _copied: u64, _reused: u64, _bytes: u64) {}
    /// Table `index` of the plan is at the destination with `rows` rows.
    fn table(&self, _index: usize, _rows: u64) {}
    /// Whether the host asks the run to stop (an operator's SIGINT or
    /// SIGTERM). Asked at every step boundary, before the step: a run that
    /// stops there has stored every decision it took, and a retry with the
    /// same migration id resumes from the step it did not take
    /// ([`WorkflowError::Interrupted`]). Never asked inside a step.
    fn interrupted(&self) -> bool {
        false
    }
}

/// Reports nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct Quiet;

impl Progress for Quiet {}

/// Why a migration run stopped.
#[derive(Debug, Error)]
pub enum WorkflowError {
    /// The machine refused the step.
    #[error("{0}")]
    Refused(MigrationError),
    /// The control catalog refused or failed.
    #[error("control: {0}")]
    Control(WorldError),
    /// The migration administration refused or failed.
    #[error("administration: {0}")]
    Admin(AdminError),
    /// Preflight refused over an Artifact object: the machine's refusal
    /// and the object it is about.
    #[error("{refusal} ({object})")]
    Preflight {
        /// The machine's refusal.
        refusal: MigrationError,
        /// The object refusal that produced the report's count.
        object: Box<RelocationError>,
    },
    /// The table store refused or failed.
    #[error("tables: {0}")]
    Tables(TableError),
    /// Artifact relocation refused.
    #[error("artifacts: {0}")]
    Artifacts(Box<RelocationError>),
    /// An object store failed.
    #[error("objects: {0}")]
    Objects(ObjectError),
    /// The cold verifier failed.
    #[error("ColdVerificationFailed: {0}")]
    Cold(String),
    /// The plan could not be built (a name, an identity, an empty namespace).
    #[error("PlanInvalid: {0}")]
    Plan(String),
    /// The driver took more steps than any run needs.
    #[error("Stuck: no completion after {0} steps")]
    Stuck(usize),
    /// The host asked the run to stop ([`Progress::interrupted`]); it
    /// stopped before this step, with every earlier step stored. A retry
    /// with the same migration id resumes here.
    #[error("interrupted: stopped before the step {0}; every earlier step is stored")]
    Interrupted(String),
}

impl WorkflowError {
    /// The stable reason: the refusal's own, or the family's.
    pub fn reason(&self) -> String {
        match self {
            // A refusal's message starts with its stable kebab-case reason.
            WorkflowError::Refused(e) | WorkflowError::Preflight { refusal: e, .. } => {
                let m = e.to_string();
                m.split(':').next().unwrap_or_default().to_owned()
            }
            WorkflowError::Control(e) => e.reason().to_string(),
            WorkflowError::Admin(e) => e.reason().to_string(),
            WorkflowError::Tables(e) => e.reason().to_string(),
            WorkflowError::Artifacts(e) => e.reason().to_string(),
            WorkflowError::Objects(_) => "artifact-io".into(),
            WorkflowError::Cold(_) => "ColdVerificationFailed".into(),
            WorkflowError::Plan(_) => "PlanInvalid".into(),
            WorkflowError::Stuck(_) => "Stuck".into(),
            WorkflowError::Interrupted(_) => "interrupted".into(),
        }
    }

    /// The failure's [`Class`](crate::Class), what the caller does next:
    /// a receipt or a cold verification that does not verify, a stored
    /// evidence row or a table that does not match, an object that does
    /// not verify are `CorruptArtifact`; a backend's own failure (the
    /// control catalog's, the administration's, the table store's, an
    /// object store's, a run that does not finish) is `Internal`; an
    /// interrupted run is `Unavailable` (a retry resumes it); every other
    /// refusal of the machine, of preflight, of the plan, of the control
    /// catalog or of the table store is `FailedPrecondition`.
    pub fn class(&self) -> crate::Class {
        use super::control::AdminError;
        use super::tables::TableError;
        use crate::world::WorldError;
        use crate::Class;
        match self {
            WorkflowError::Refused(
                MigrationError::ColdVerificationFailed(_) | MigrationError::ReceiptMismatch(_),
            )
            | WorkflowError::Admin(AdminError::StoredEvidence { .. })
            | WorkflowError::Cold(_) => Class::CorruptArtifact,
            WorkflowError::Refused(_)
            | WorkflowError::Preflight { .. }
            | WorkflowError::Plan(_)
            | WorkflowError::Tables(TableError::NotFound { .. } | TableError::Invalid { .. }) => {
                Class::FailedPrecondition
            }
            WorkflowError::Control(WorldError::BackendFault { .. })
            | WorkflowError::Admin(AdminError::Backend { .. })
            | WorkflowError::Tables(TableError::Backend { .. })
            | WorkflowError::Objects(_)
            | WorkflowError::Stuck(_) => Class::Internal,
            WorkflowError::Control(_) | WorkflowError::Admin(_) => Class::FailedPrecondition,
            WorkflowError::Tables(_) => Class::CorruptArtifact,
            WorkflowError::Artifacts(r) => r.class(),
            WorkflowError::Interrupted(_) => Class::Unavailable,
        }
    }
}

type Res<T> = Result<T, WorkflowError>;

/// Preflight's object findings: unreadable source objects, conflicting
/// destination objects, the refusal behind a count, the verified inventory.
type Findings = (u64, u64, Option<Box<RelocationError>>, Option<Checked>);

/// What one run remembers between steps so that nothing is read twice.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Memo {
    /// Preflight's verified inventory, for the plan.
    checked: Option<Checked>,
    /// Each table's facts as the copy's own fresh read of the destination
    /// found them after its commit, for the verification step of the same
    /// run (a retry reads the destination again).
    read: std::collections::BTreeMap<usize, super::TableFacts>,
}

/// The source's Artifact rows and their verified inventory, as preflight
/// found them at one `artifact_files` snapshot (0: none), kept for the
/// plan of the same run so that the objects are read once.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Checked {
    snapshot: u64,
    occurrences: Vec<Occurrence>,
    inventory: SourceInventory,
}

/// One run of a migration between its steps ([`Migration::start`],
/// [`Migration::advance`]): the machine's state as this run knows it, the
/// plan it holds or froze, and what it read that a later step of the same
/// run reuses rather than reads again. A plain value: a model checker
/// keeps it in its state; a crash loses it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Stepping {
    state: State,
    /// The plan the caller gave [`Migration::start`], if any.
    held: Option<Plan>,
    plan: Option<Plan>,
    occurrences: Option<Vec<Occurrence>>,
    memo: Memo,
}

impl Stepping {
    /// The machine's state as this run knows it: its run and the
    /// destination's administration it last stored or loaded.
    pub fn state(&self) -> &State {
        &self.state
    }
}

/// A migration between two endpoints.
pub struct Migration<'a, C, T, O, V> {
    /// The source.
    pub source: Endpoint<'a, C, T, O>,
    /// The destination.
    pub destination: Endpoint<'a, C, T, O>,
    /// The migration id.
    pub migration_id: Name,
    /// The fence holder planning takes at the source.
    pub holder: Holder,
    /// The cold verifier.
    pub cold: &'a V,
    /// The software version the receipt names.
    pub version: Name,
    /// The caller's clock.
    pub clock: &'a dyn Fn() -> Millis,
    /// Where progress is reported ([`Quiet`]: nowhere).
    pub progress: &'a dyn Progress,
    /// The operator acknowledged that this migration makes a second live
    /// copy of a source that already departed elsewhere
    /// ([`super::departure::depart`]).
    pub second_copy: bool,
}

fn name(s: &str) -> Res<Name> {
    Name::new(s).map_err(|e| WorkflowError::Plan(format!("{s:?}: {e}")))
}

impl<C, T, O, V> Migration<'_, C, T, O, V>
where
    C: ControlCatalog + ControlAdmin,
    T: TableStore,
    O: ObjectStore,
    V: ColdVerifier,
{
    /// The source's `artifact_files` rows at `snapshot`.
    fn occurrences(&self, snapshot: u64) -> Res<Vec<Occurrence>> {
        self.source
            .tables
            .occurrences(&name(ARTIFACT_FILES)?, snapshot)
            .map_err(WorkflowError::Tables)
    }

    /// Preflight alone: observes both endpoints and lets the
    /// machine decide, writing nothing anywhere. Answers the report the
    /// machine admitted.
    pub fn validate(&self) -> Res<Preflight> {
        let destination = self
            .destination
            .control
            .load_destination()
            .map_err(WorkflowError::Admin)?;
        let state = State {
            run: self.run(None),
            destination,
        };
        let (report, problem, _) = self.preflight()?;
        decide(
            &state,
            &Request::Validate {
                report: report.clone(),
            },
        )
        .map_err(|e| preflight_refusal(WorkflowError::Refused(e), problem))?;
        Ok(report)
    }

    /// Preflight ([`Migration::validate`]), then fences every active
    /// source World under the migration holder and freezes the plan: the
    /// control snapshot (taken after the fences), the Worlds with their
    /// fence epochs, every table through the catalog at its current
    /// snapshot, and the verified Artifact inventory. A refusal of
    /// preflight fences nothing.
    pub fn plan(&self) -> Res<Plan> {
        self.validate()?;
        self.depart(self.second_copy)?;
        self.freeze(None)
    }

    /// A fresh run of this migration, `held` the plan digest the caller
    /// holds.
    fn run(&self, held: Option<super::Digest>) -> Run {
        let mut run = Run::new(self.migration_id.clone(), held);
        run.second_copy = self.second_copy;
        run
    }

    /// Records this migration's departure at the source before any source
    /// fence is taken ([`super::departure::depart`]), by compare-and-swap:
    /// a planner that raced another re-reads the record and is refused by
    /// the rule (or finds its own). A retry of a recorded departure writes
    /// nothing.
    fn depart(&self, second_copy: bool) -> Res<()> {
        let c = self.source.control;
        for _ in 0..3 {
            let stored = c.load_departures().map_err(WorkflowError::Admin)?;
            let next = super::departure::depart(
                &stored,
                &self.migration_id,
                &self.destination.identity,
                second_copy,
            )
            .map_err(WorkflowError::Refused)?;
            let Some(next) = next else { return Ok(()) };
            match c.commit_departures(&stored, &next) {
                Ok(()) => return Ok(()),
                Err(AdminError::Moved { .. }) => continue,
                Err(e) => return Err(WorkflowError::Admin(e)),
            }
        }
        Err(WorkflowError::Admin(AdminError::Moved {
            detail: "the source's departure record kept changing; retry".into(),
        }))
    }

    /// Marks this migration's departure moved at the source, once its
    /// receipt is complete: administrative evidence beside the source's
    /// records, never a read the migration depends on. Best effort — the
    /// destination is the recovery authority, the source may be gone — and
    /// it never creates anything: a source whose record is absent or
    /// unreadable is left as it is. Answers whether the mark was stored.
    pub fn mark_moved(&self) -> bool {
        let c = self.source.control;
        let Ok(stored) = c.load_departures() else {
            return false;
        };
        match super::departure::arrived(&stored, &self.migration_id, &self.destination.identity) {
            Some(next) => c.commit_departures(&stored, &next).is_ok(),
            None => false,
        }
    }

    /// Fences and freezes (after the machine admitted preflight), reusing
    /// preflight's verified inventory when `artifact_files` is still at
    /// the snapshot preflight read.
    fn freeze(&self, checked: Option<Checked>) -> Res<Plan> {
        let c = self.source.control;
        for w in c.discover_worlds().map_err(WorkflowError::Control)? {
            if w.status == WorldStatus::Active {
                c.acquire_fence(&w.identity.world_id, &self.holder, FencePurpose::Migration)
                    .map_err(WorkflowError::Control)?;
            }
        }
        let snapshot = c.export_snapshot().map_err(WorkflowError::Admin)?;
        let worlds = plan_worlds(&snapshot)?;
        let tables = self
            .source
            .tables
            .namespace()
            .map_err(WorkflowError::Tables)?;
        // An identity without an `artifact_files` table has no Artifacts.
        let files = tables
            .iter()
            .find(|(n, _)| n.as_str() == ARTIFACT_FILES)
            .map_or(0, |(_, f)| f.snapshot);
        let Checked {
            occurrences,
            inventory,
            ..
        } = match checked.filter(|c| c.snapshot == files) {
            Some(c) => c,
            None => self.check_source(files)?,
        };
        let relocated = self.relocated(&occurrences)?;
        let mut plans = Vec::new();
        for (n, facts) in tables {
            let (classification, digest) = if n.as_str() == ARTIFACT_FILES {
                let d = self
                    .source
                    .tables
                    .relocated_digest(&n, facts.snapshot, &relocated)
                    .map_err(WorkflowError::Tables)?;
                (Classification::ArtifactFiles, d)
            } else {
                (Classification::Application, facts.content_digest)
            };
            plans.push(TablePlan {
                name: n,
                classification,
                source: facts,
                destination_content_digest: digest,
            });
        }
        let plan = Plan {
            format: PLAN_FORMAT,
            migration_id: self.migration_id.clone(),
            source: self.source.identity.clone(),
            destination: self.destination.identity.clone(),
            source_artifact_root: self.source.artifact_root.clone(),
            destination_artifact_root: self.destination.artifact_root.clone(),
            control: ControlPlan {
                snapshot_digest: snapshot.digest(),
                records: snapshot.records(),
            },
            worlds,
            tables: plans,
            artifacts: inventory.artifact_plan(),
            second_copy: self.second_copy,
        };
        plan.check()
            .map_err(|e| WorkflowError::Plan(e.to_string()))?;
        Ok(plan)
    }

    /// The occurrences with `object_uri` moved to the destination root.
    fn relocated(&self, occurrences: &[Occurrence]) -> Res<Vec<Occurrence>> {
        occurrences
            .iter()
            .map(|o| {
                content_address(&self.destination.artifact_root, &o.sha256)
                    .map(|uri| o.relocated(uri))
                    .map_err(|p| WorkflowError::Plan(format!("destination root: {p:?}")))
            })
            .collect()
    }

    /// The source's rows at `artifact_files` snapshot `files` (0: none)
    /// and their inventory, every object read in full against every row.
    fn check_source(&self, files: u64) -> Res<Checked> {
        let occurrences = if files == 0 {
            Vec::new()
        } else {
            self.occurrences(files)?
        };
        let inventory = verify_source(
            &occurrences,
            self.source.objects,
            &self.source.artifact_root,
            &self.destination.artifact_root,
        )
        .map_err(WorkflowError::Artifacts)?;
        Ok(Checked {
            snapshot: files,
            occurrences,
            inventory,
        })
    }

    /// Verifies the source's Artifact objects against every row and
    /// inspects their destination addresses, writing nothing. The machine
    /// decides what a problem means ([`Request::Validate`]): this answers
    /// the counts its report carries — `(unreadable source objects,
    /// conflicting destination objects)`, each 0 or 1 because verification
    /// stops at the first refusal — that refusal, which names the object
    /// and the rule, and the verified inventory for the plan.
    fn preflight_objects(&self) -> Res<Findings> {
        let name = name(ARTIFACT_FILES)?;
        let files = self
            .source
            .tables
            .inspect(&name)
            .map_err(WorkflowError::Tables)?
            .map_or(0, |f| f.snapshot);
        let checked = match self.check_source(files) {
            Ok(c) => c,
            Err(WorkflowError::Artifacts(e)) => return Ok((1, 0, Some(e), None)),
            Err(e) => return Err(e),
        };
        match inspect_destination(
            &checked.inventory,
            self.destination.objects,
            &self.destination.artifact_root,
        ) {
            Ok(_) => Ok((0, 0, None, Some(checked))),
            Err(e) => Ok((0, 1, Some(e), None)),
        }
    }

    /// What preflight observes, the object refusal behind a
    /// non-zero object count, and the verified inventory.
    fn preflight(&self) -> Res<(Preflight, Option<Box<RelocationError>>, Option<Checked>)> {
        let (unreadable_objects, conflicting_destination_objects, problem, checked) =
            self.preflight_objects()?;
        let facts = |e: &Endpoint<'_, C, T, O>| EndpointFacts {
            identity: e.identity.clone(),
            catalog: e.locality,
            control: e.locality,
            objects: e.locality,
            audit: e.audit.clone(),
            activity_records: e.activity_records,
        };
        let d = &self.destination;
        let destination_tables = d.tables.namespace().map_err(WorkflowError::Tables)?.len();
        let destination_control_records = d
            .control
            .export_snapshot()
            .map_err(WorkflowError::Admin)?
            .records();
        let source_tables = self
            .source
            .tables
            .namespace()
            .map_err(WorkflowError::Tables)?
            .len();
        let source_control_records = self
            .source
            .control
            .export_snapshot()
            .map_err(WorkflowError::Admin)?
            .records();
        let departures = self
            .source
            .control
            .load_departures()
            .map_err(WorkflowError::Admin)?;
        let report = Preflight {
            departures,
            source: facts(&self.source),
            destination: facts(d),
            unsettled_commands: 0,
            running_evaluations: 0,
            unreadable_objects,
            source_tables: source_tables as u64,
            source_control_records,
            destination_tables: destination_tables as u64,
            destination_control_records,
            conflicting_destination_objects,
        };
        Ok((report, problem, checked))
    }

    /// What the source holds now, for the recheck before activation: the
    /// control snapshot, every table's snapshot id, the inventory the
    /// pinned `artifact_files` rows declare (their objects were verified at
    /// planning and every copy read back; they are not re-read), and the
    /// World epochs.
    fn observe(&self, plan: &Plan) -> Res<SourceObservation> {
        let c = self.source.control;
        let snapshot = c.export_snapshot().map_err(WorkflowError::Admin)?;
        let tables = self
            .source
            .tables
            .snapshots()
            .map_err(WorkflowError::Tables)?;
        let occurrences = match plan
            .tables
            .iter()
            .find(|t| t.classification == Classification::ArtifactFiles)
        {
            Some(t) => self.occurrences(t.source.snapshot)?,
            None => Vec::new(),
        };
        let inventory = declared_inventory(
            &occurrences,
            &self.source.artifact_root,
            &self.destination.artifact_root,
        )
        .map_err(WorkflowError::Artifacts)?;
        let world_epochs = plan_worlds(&snapshot)?
            .into_iter()
            .map(|w| (w.world, w.source_epoch))
            .collect();
        Ok(SourceObservation {
            control_digest: snapshot.digest(),
            tables,
            inventory_digest: inventory.artifact_plan().inventory_digest(),
            world_epochs,
        })
    }

    /// Sends `req`, stores the destination's next administration (with
    /// `effect`) when it changed, and answers the outcome.
    fn send(&self, state: &mut State, req: &Request, effect: AdminEffect<'_>) -> Res<Outcome> {
        let d = decide(state, req).map_err(WorkflowError::Refused)?;
        if d.next.destination != state.destination {
            self.destination
                .control
                .commit_destination(&state.destination, &d.next.destination, effect)
                .map_err(WorkflowError::Admin)?;
        }
        *state = d.next;
        Ok(d.outcome)
    }

    /// Runs the migration to its receipt: plans afresh (fencing the
    /// source) unless `held` is the plan of an earlier run, copies,
    /// verifies, rechecks, stages, activates, cold-verifies and completes.
    /// A completed migration answers its stored receipt, running nothing.
    ///
    /// It is [`Migration::start`] and then [`Migration::advance`] until a
    /// receipt: the same step function a caller (or a model checker) can
    /// take one step at a time.
    pub fn migrate(&self, held: Option<&Plan>) -> Res<StoredReceipt> {
        let mut run = self.start(held)?;
        for _ in 0..MAX_STEPS {
            if let Some(receipt) = self.advance(&mut run)? {
                return Ok(receipt);
            }
        }
        Err(WorkflowError::Stuck(MAX_STEPS))
    }

    /// Starts a run: loads the destination's stored administration (the
    /// recovery authority) and what this run remembers between steps.
    /// `held` is the plan of an earlier run the caller holds, if any.
    /// Nothing is written.
    pub fn start(&self, held: Option<&Plan>) -> Res<Stepping> {
        let stored = self
            .destination
            .control
            .load_destination()
            .map_err(WorkflowError::Admin)?;
        Ok(self.start_from(held, stored))
    }

    /// A run of `held` (if any) from the destination's administration
    /// `stored`.
    fn start_from(&self, held: Option<&Plan>, stored: super::Destination) -> Stepping {
        let held_digest = held.map(Plan::digest).or_else(|| {
            stored
                .reservation
                .as_ref()
                .filter(|r| r.plan.migration_id == self.migration_id)
                .map(|r| r.plan_digest)
        });
        // A second copy acknowledged once (a held plan, or the reservation
        // being resumed) stays acknowledged for the retries that follow.
        let acknowledged = held.is_some_and(|p| p.second_copy)
            || stored
                .reservation
                .as_ref()
                .is_some_and(|r| r.plan.migration_id == self.migration_id && r.plan.second_copy);
        let mut run = self.run(held_digest);
        run.second_copy |= acknowledged;
        Stepping {
            state: State {
                run,
                destination: stored,
            },
            held: held.cloned(),
            plan: held.cloned(),
            occurrences: None,
            memo: Memo::default(),
        }
    }

    /// Takes one step of `run`: asks the machine for the next step
    /// ([`next_step`]), gathers its evidence through the ports, lets the
    /// machine decide and stores the destination's next administration.
    /// Answers the receipt once the machine names none (marking the
    /// source's departure moved), else `None`. A failure leaves `run` as
    /// far as the destination's stored administration goes; a caller that
    /// lost it starts again ([`Migration::start`]) and resumes from the
    /// destination.
    pub fn advance(&self, run: &mut Stepping) -> Res<Option<StoredReceipt>> {
        // The destination is the recovery authority, and another host may
        // run the same migration (or another migration may take the
        // destination): each step starts from what is stored there now.
        // When that is not what this run last stored or loaded, someone
        // else moved it, and this run starts again from it exactly as a
        // new `migrate` with the same held plan would — nothing this run
        // decided on the older view (validation, a frozen plan, reads it
        // remembers) is kept. So a run that another carried past its
        // recheck asks for no source step, and a destination another
        // migration touched is validated again.
        let stored = self
            .destination
            .control
            .load_destination()
            .map_err(WorkflowError::Admin)?;
        if stored != run.state.destination {
            *run = self.start_from(run.held.clone().as_ref(), stored);
        }
        let next = next_step(&run.state).map_err(WorkflowError::Refused)?;
        if let Next::Done(receipt) = next {
            self.mark_moved();
            return Ok(Some(*receipt));
        }
        if self.progress.interrupted() {
            let known = Self::own(&run.state).map(|r| &r.plan).or(run.plan.as_ref());
            return Err(WorkflowError::Interrupted(next.step(known).name().into()));
        }
        self.progress.step(&next);
        let Stepping {
            state,
            plan,
            occurrences,
            memo,
            ..
        } = run;
        self.step(state, next, plan, occurrences, memo)?;
        Ok(None)
    }

    /// This migration's reservation at the destination, if it has one
    /// (another migration's abandoned reservation is not: the machine lets
    /// this one replace it).
    fn own(state: &State) -> Option<&super::Reservation> {
        state
            .destination
            .reservation
            .as_ref()
            .filter(|r| r.plan.migration_id == state.run.migration_id)
    }

    /// The reserved plan, or the one this run froze.
    fn current_plan(state: &State, plan: &Option<Plan>) -> Res<Plan> {
        Self::own(state)
            .map(|r| r.plan.clone())
            .or_else(|| plan.clone())
            .ok_or_else(|| WorkflowError::Plan("no plan at this step".into()))
    }

    /// `Plan`: the source records the departure, then the plan (the
    /// caller's, checked against the source; the reservation's; or a new
    /// one) is frozen.
    fn plan_step(&self, state: &mut State, plan: &mut Option<Plan>, memo: &mut Memo) -> Res<()> {
        // The source records this departure before its fences are
        // taken: a second home is refused before anything moves.
        self.depart(state.run.second_copy)?;
        let p = match plan.take() {
            // A plan the caller holds (a plan file) must still be
            // the source's, checked before anything is reserved: a
            // hand-edited or outdated plan would otherwise reserve
            // the destination and then be invalidated there.
            Some(p) if Self::own(state).is_none() => {
                let seen = self.observe(&p)?;
                if super::drifted(&p, &seen) {
                    return Err(WorkflowError::Refused(MigrationError::PlanStale));
                }
                p
            }
            Some(p) => p,
            // A reservation here is this run's own: the machine
            // names no step but refuses another migration's
            // (`next_step`, `OtherMigration`). Its plan is the one
            // to freeze again.
            None => match Self::own(state) {
                Some(r) => r.plan.clone(),
                None => self.freeze(memo.checked.take())?,
            },
        };
        self.send(
            state,
            &Request::Freeze { plan: p.clone() },
            AdminEffect::None,
        )?;
        self.progress.planned(&p);
        *plan = Some(p);
        Ok(())
    }

    /// `VerifyTable`: the copy's read-back (or a fresh read) is checked
    /// against the plan.
    fn verify_table(
        &self,
        state: &mut State,
        plan: &Option<Plan>,
        index: usize,
        memo: &mut Memo,
    ) -> Res<()> {
        let p = Self::current_plan(state, plan)?;
        let t = p
            .tables
            .get(index)
            .ok_or_else(|| WorkflowError::Plan("table index".into()))?;
        let read_back = match memo.read.remove(&index) {
            Some(f) => f,
            None => match self.destination.tables.inspect(&t.name) {
                Ok(Some(f)) => f,
                Ok(None) => self
                    .destination
                    .tables
                    .evidence_at(&t.name, 0)
                    .map_err(WorkflowError::Tables)?,
                Err(e) => return Err(WorkflowError::Tables(e)),
            },
        };
        let req = Request::VerifyTable {
            name: t.name.clone(),
            read_back,
        };
        self.send(state, &req, AdminEffect::None)?;
        Ok(())
    }

    fn step(
        &self,
        state: &mut State,
        next: Next,
        plan: &mut Option<Plan>,
        occurrences: &mut Option<Vec<Occurrence>>,
        memo: &mut Memo,
    ) -> Res<()> {
        let none = AdminEffect::None;
        match next {
            Next::Validate => {
                let (report, problem, found) = self.preflight()?;
                self.send(state, &Request::Validate { report }, none)
                    .map_err(|e| preflight_refusal(e, problem))?;
                memo.checked = found;
            }
            Next::Plan => self.plan_step(state, plan, memo)?,
            Next::Reserve => {
                let p = Self::current_plan(state, plan)?;
                let now = (self.clock)();
                self.send(state, &Request::Reserve { plan: p, now }, none)?;
            }
            Next::CopyObject { .. } => self.copy_objects(state, occurrences)?,
            Next::CopyTable { index } => {
                self.copy_table(state, index, occurrences, &mut memo.read)?;
            }
            Next::VerifyTable { index } => self.verify_table(state, plan, index, memo)?,
            Next::Recheck => {
                let p = Self::current_plan(state, plan)?;
                let observed = self.observe(&p)?;
                self.send(state, &Request::Recheck { observed }, none)?;
            }
            Next::StageControl => {
                let snapshot = self
                    .source
                    .control
                    .export_snapshot()
                    .map_err(WorkflowError::Admin)?;
                self.stage(state, &snapshot)?;
            }
            Next::Activate => {
                self.send(state, &Request::Activate, AdminEffect::Activate)?;
            }
            Next::ColdVerify => {
                let p = Self::current_plan(state, plan)?;
                // The migration's own cold verification resumes: a
                // completed migration proves its World writable.
                let evidence = self
                    .cold
                    .verify(&p, VerifyMode::ResumeAndTick)
                    .map_err(WorkflowError::Cold)?;
                self.send(state, &Request::ColdVerify { evidence }, none)?;
            }
            Next::Complete => {
                let req = Request::Complete {
                    version: self.version.clone(),
                    now: (self.clock)(),
                };
                self.send(state, &req, none)?;
            }
            Next::Done(_) => {}
        }
        Ok(())
    }

    /// Stages the control snapshot: the machine answers the floors, stored
    /// with the bundle in one transaction.
    fn stage(&self, state: &mut State, snapshot: &ControlSnapshot) -> Res<()> {
        let req = Request::StageControl {
            snapshot_digest: snapshot.digest(),
        };
        let d = decide(state, &req).map_err(WorkflowError::Refused)?;
        let Outcome::Staged { floors } = &d.outcome else {
            return Err(WorkflowError::Plan("staging answered no floors".into()));
        };
        let effect = AdminEffect::Stage { snapshot, floors };
        self.destination
            .control
            .commit_destination(&state.destination, &d.next.destination, effect)
            .map_err(WorkflowError::Admin)?;
        *state = d.next;
        Ok(())
    }

    /// The plan's occurrences (read once per run from the pinned source).
    fn plan_occurrences<'o>(
        &self,
        state: &State,
        cache: &'o mut Option<Vec<Occurrence>>,
    ) -> Res<&'o [Occurrence]> {
        if cache.is_none() {
            let p = Self::current_plan(state, &None)?;
            let rows = match p
                .tables
                .iter()
                .find(|t| t.classification == Classification::ArtifactFiles)
            {
                Some(t) => self.occurrences(t.source.snapshot)?,
                None => Vec::new(),
            };
            *cache = Some(rows);
        }
        Ok(cache.as_deref().unwrap_or_default())
    }

    /// Relocates every object (each copied once, read back and verified,
    /// verified ones reused), then reports each object's read-back.
    fn copy_objects(&self, state: &mut State, cache: &mut Option<Vec<Occurrence>>) -> Res<()> {
        let rows = self.plan_occurrences(state, cache)?.to_vec();
        let done = relocate(
            &rows,
            self.source.objects,
            &self.source.artifact_root,
            self.destination.objects,
            &self.destination.artifact_root,
        )
        .map_err(WorkflowError::Artifacts)?;
        self.progress
            .objects(done.copied, done.reused, done.verified_bytes);
        // Relocation read every copied object back and verified every reused
        // one in full: its verified facts are each object's read-back.
        let p = Self::current_plan(state, &None)?;
        for o in &p.artifacts.objects {
            let found = done.objects.iter().find(|f| f.sha256 == o.sha256).copied();
            let req = Request::Object {
                sha256: o.sha256,
                found,
            };
            self.send(state, &req, AdminEffect::None)?;
        }
        Ok(())
    }

    /// Inspects destination table `index`, appends when the machine says
    /// so, and reports the reply; an ambiguous reply is inspected next.
    fn copy_table(
        &self,
        state: &mut State,
        index: usize,
        cache: &mut Option<Vec<Occurrence>>,
        read: &mut std::collections::BTreeMap<usize, super::TableFacts>,
    ) -> Res<()> {
        let p = Self::current_plan(state, &None)?;
        let t = p
            .tables
            .get(index)
            .ok_or_else(|| WorkflowError::Plan("table index".into()))?
            .clone();
        let found = self
            .destination
            .tables
            .inspect(&t.name)
            .map_err(WorkflowError::Tables)?;
        let req = Request::Table {
            name: t.name.clone(),
            found,
        };
        if self.send(state, &req, AdminEffect::None)? != Outcome::Append {
            // Matching content found: recorded (or already recorded).
            self.progress.table(index, t.source.rows);
            return Ok(());
        }
        let relocated = if t.classification == Classification::ArtifactFiles {
            let rows = self.plan_occurrences(state, cache)?.to_vec();
            Some(self.relocated(&rows)?)
        } else {
            None
        };
        let reply = self
            .destination
            .tables
            .copy_from(self.source.tables, &t, relocated.as_deref())
            .map_err(WorkflowError::Tables)?;
        if let super::CommitReply::Committed(f) = &reply {
            read.insert(index, *f);
        }
        let req = Request::TableCommitted {
            name: t.name.clone(),
            reply,
        };
        // An ambiguous reply is inspected at the next step, which reports
        // the table once it is found: each table is reported once.
        if self.send(state, &req, AdminEffect::None)? != Outcome::InspectFirst {
            self.progress.table(index, t.source.rows);
        }
        Ok(())
    }

    /// Re-verifies a completed migration's receipt against the destination
    /// in `mode` ([`verify_receipt`]); the source is not read.
    pub fn verify(&self, receipt: &StoredReceipt, mode: VerifyMode) -> Res<ColdEvidence> {
        verify_receipt(self.destination.control, self.cold, receipt, mode)
    }
}

/// Re-verifies a completed migration's receipt later, from the destination
/// alone: the destination's administration must hold exactly this receipt
/// on a completed reservation of the plan it names
/// ([`super::held_receipt`]), and fresh cold evidence for that plan, in
/// `mode`, must show no difference ([`super::check_cold_as`]). Reads the
/// administration only; in [`VerifyMode::ReadOnly`] nothing is written
/// anywhere, provided the verifier keeps to its mode.
pub fn verify_receipt<A: ControlAdmin, V: ColdVerifier>(
    destination: &A,
    cold: &V,
    receipt: &StoredReceipt,
    mode: VerifyMode,
) -> Res<ColdEvidence> {
    let stored = destination
        .load_destination()
        .map_err(WorkflowError::Admin)?;
    let r = super::held_receipt(&stored, receipt).map_err(WorkflowError::Refused)?;
    let evidence = cold.verify(&r.plan, mode).map_err(WorkflowError::Cold)?;
    super::check_cold_as(r, &evidence, mode).map_err(WorkflowError::Refused)?;
    Ok(evidence)
}

/// A preflight refusal over an object carries the object's own refusal.
fn preflight_refusal(e: WorkflowError, problem: Option<Box<RelocationError>>) -> WorkflowError {
    match (e, problem) {
        (WorkflowError::Refused(refusal), Some(object))
            if matches!(
                refusal,
                MigrationError::ArtifactUnreadable(_) | MigrationError::DestinationNotEmpty
            ) =>
        {
            WorkflowError::Preflight { refusal, object }
        }
        (e, _) => e,
    }
}

/// The plan's Worlds: every active World of the snapshot, with its fence
/// epoch (the migration's, after planning) and whether it is resumable.
fn plan_worlds(snapshot: &ControlSnapshot) -> Res<Vec<WorldPlan>> {
    let mut out = Vec::new();
    for w in &snapshot.worlds {
        if w.status != WorldStatus::Active {
            continue;
        }
        let epoch = snapshot
            .fences
            .iter()
            .find(|f| f.world_id == w.identity.world_id)
            .map_or(0, |f| f.issued);
        out.push(WorldPlan {
            world: name(&w.identity.world_id)?,
            source_epoch: epoch,
            manifest_writer_epochs: Vec::new(),
            resumable: w.writer_mode == WriterMode::Resumable,
        });
    }
    out.sort_by(|a, b| a.world.cmp(&b.world));
    Ok(out)
}

pub mod abandon;
mod cold;

pub use cold::{resume_for, resume_world, verify_objects, PortsColdVerifier, COLD_HOLDER};

#[cfg(test)]
mod tests;
