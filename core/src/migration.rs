//! The whole-identity migration workflow as a pure machine.
//!
//! The workflow is twelve [`Step`]s, in this order ([`STEPS`]):
//!
//! 1. [`Step::Validate`] — local-v1 endpoints, source quiescence, Activity
//!    emptiness, destination emptiness (or this plan's own reservation);
//! 2. [`Step::Plan`] — source fences acquired, the immutable plan frozen;
//! 3. [`Step::Reserve`] — `(migration_id, plan_digest)` reserved at the
//!    destination;
//! 4. [`Step::CopyArtifacts`] — every referenced object copied and read back;
//! 5. [`Step::CopyTables`] — every table but `artifact_files` copied;
//! 6. [`Step::CopyArtifactFiles`] — the relocated `artifact_files` copied;
//! 7. [`Step::VerifyTables`] — every destination table read back and verified;
//! 8. [`Step::RecheckSource`] — the source recaptured and compared with the
//!    frozen plan (drift invalidates the plan);
//! 9. [`Step::StageControl`] — control state and writer-fence floors staged;
//! 10. [`Step::Activate`] — destination World discovery activated;
//! 11. [`Step::ColdVerify`] — destination-only cold verification;
//! 12. [`Step::Complete`] — the receipt durably completed.
//!
//! **State.** [`State`] pairs the driver's volatile [`Run`] (rebuilt empty
//! after a restart, except for the plan the caller holds) with the
//! destination's durable [`Destination`] administration (the reservation,
//! per-item evidence, status, stored receipt) — the part a shell persists.
//!
//! **Driving.** The driver asks [`next_step`] what to do, performs the I/O
//! (reading the source or the destination, copying) and reports what it
//! observed in a [`Request`]. [`decide`] answers whether the request is the
//! legal next step (recording its evidence), an idempotent repeat (matching
//! evidence already recorded), or a refusal ([`MigrationError`]); a refusal
//! changes nothing. Each request carries the evidence its step requires:
//! the preflight report, the plan, an inspection of the destination before
//! any write, the commit reply, a fresh read-back, the source recapture, the
//! cold evidence.
//!
//! **Retry convergence.** Matching destination evidence is skipped, missing
//! work completed, conflicting work refused. An ambiguous table commit leaves
//! the table *in doubt*: nothing may be appended until a fresh inspection
//! shows it absent. Once the reservation is [`Status::Activated`] the
//! destination is the only recovery authority: [`next_step`] never asks for a
//! source read and [`decide`] refuses one. A completed reservation returns the
//! exact stored receipt and never runs cold verification again.

pub mod artifacts;
pub mod content;
pub mod control;
mod data;
pub mod departure;
pub mod metadata;
pub mod tables;

/// What a local destination directory holds, listed by the shell that
/// owns the directory (reads only), for [`check_destination_listing`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DestinationListing {
    /// The storage uri's directory, as a refusal shows it.
    pub root: String,
    /// Each name at its top level, and whether it is one of this storage
    /// identity's own (the table store's catalog file and its journal
    /// siblings, the namespace directory).
    pub top: Vec<(String, bool)>,
    /// The namespace directory, as shown, when it exists.
    pub namespace: Option<String>,
    /// Whether a catalog a migration creates (the table store's, or the
    /// control catalog) exists.
    pub catalogs: bool,
    /// Whether the namespace directory holds nothing but the Artifact root.
    pub namespace_only_artifacts: bool,
    /// The Artifact root, as shown, and why a writing open would refuse it
    /// (`None`: absent, empty or an Artifact store, so it is adopted).
    pub artifacts_refused: Option<(String, String)>,
}

/// Whether a migration may write into a local destination directory: only
/// when it holds nothing but this storage identity's own files. At its top
/// level only the table store's catalog file (and its siblings) and the
/// namespace directory; the namespace directory only beside a catalog a run
/// created, or holding at most the Artifact root (a run killed before its
/// first catalog: a retry goes on); an Artifact root only when a writing
/// open would adopt it. Anything else is
/// [`MigrationError::DestinationForeign`], naming what was found.
pub fn check_destination_listing(l: &DestinationListing) -> Result<(), MigrationError> {
    if let Some((name, _)) = l.top.iter().find(|(_, own)| !own) {
        return Err(MigrationError::DestinationForeign(format!(
            "{} holds {name:?}, which is not this storage identity's",
            l.root
        )));
    }
    if let Some(ns) = &l.namespace {
        if !l.catalogs && !l.namespace_only_artifacts {
            return Err(MigrationError::DestinationForeign(format!(
                "{ns} exists without a catalog a migration created"
            )));
        }
    }
    if let Some((root, why)) = &l.artifacts_refused {
        return Err(MigrationError::DestinationForeign(format!(
            "the Artifact root {root} holds files and is not an Artifact store ({why})"
        )));
    }
    Ok(())
}
pub mod verify;
pub mod workflow;

pub use data::*;
pub use verify::{check_cold, check_cold_as, held_receipt, VerifyMode};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::fence::Epoch;
use crate::Millis;

/// A step of the workflow, in the required order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    /// Validate endpoints, quiescence, Activity and destination emptiness.
    Validate,
    /// Acquire source fences and freeze the immutable plan.
    Plan,
    /// Reserve `(migration_id, plan_digest)` at the destination.
    Reserve,
    /// Copy and read back every referenced Artifact object.
    CopyArtifacts,
    /// Copy every table except `artifact_files`.
    CopyTables,
    /// Copy the relocated `artifact_files`.
    CopyArtifactFiles,
    /// Read back and verify every destination table.
    VerifyTables,
    /// Recheck the source against the frozen plan.
    RecheckSource,
    /// Stage control state and writer-fence floors.
    StageControl,
    /// Activate destination World discovery.
    Activate,
    /// Verify from destination-only resources.
    ColdVerify,
    /// Durably complete the receipt.
    Complete,
}

/// Every step, in order.
pub const STEPS: [Step; 12] = [
    Step::Validate,
    Step::Plan,
    Step::Reserve,
    Step::CopyArtifacts,
    Step::CopyTables,
    Step::CopyArtifactFiles,
    Step::VerifyTables,
    Step::RecheckSource,
    Step::StageControl,
    Step::Activate,
    Step::ColdVerify,
    Step::Complete,
];

impl Step {
    /// The step's stable name.
    pub fn name(self) -> &'static str {
        match self {
            Step::Validate => "validate",
            Step::Plan => "plan",
            Step::Reserve => "reserve",
            Step::CopyArtifacts => "copy-artifacts",
            Step::CopyTables => "copy-tables",
            Step::CopyArtifactFiles => "copy-artifact-files",
            Step::VerifyTables => "verify-tables",
            Step::RecheckSource => "recheck-source",
            Step::StageControl => "stage-control",
            Step::Activate => "activate",
            Step::ColdVerify => "cold-verify",
            Step::Complete => "complete",
        }
    }

    /// The step's position, 0-based.
    pub fn index(self) -> usize {
        self as usize
    }

    /// Whether performing the step reads the source endpoint.
    pub fn reads_source(self) -> bool {
        matches!(
            self,
            Step::Validate
                | Step::Plan
                | Step::CopyArtifacts
                | Step::CopyTables
                | Step::CopyArtifactFiles
                | Step::RecheckSource
        )
    }
}

/// The driver's volatile run. A restarted driver starts from [`Run::new`]
/// with the plan digest the caller holds, if any.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Run {
    /// The migration this run drives.
    pub migration_id: Name,
    /// The plan this run drives: held by the caller on a retry, or frozen
    /// in this run.
    #[serde(with = "crate::digest::bare::option")]
    pub plan: Option<Digest>,
    /// Preflight passed in this run.
    pub validated: bool,
    /// The plan was presented (frozen, or re-presented on a retry).
    pub frozen: bool,
    /// The reservation was made or resumed in this run.
    pub reserved: bool,
    /// The operator acknowledged that this migration makes a second live
    /// copy of a source that already departed elsewhere
    /// ([`departure::depart`]).
    pub second_copy: bool,
}

impl Run {
    /// A fresh run of `migration_id`; `held` is the digest of the plan the
    /// caller holds from an earlier run, if any.
    pub fn new(migration_id: Name, held: Option<Digest>) -> Self {
        Run {
            migration_id,
            plan: held,
            validated: false,
            frozen: false,
            reserved: false,
            second_copy: false,
        }
    }
}

/// The reservation's lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Reserved; copying, verifying, staging.
    Reserved,
    /// Worlds activated: the destination is the recovery authority.
    Activated,
    /// The receipt is durably stored.
    Completed,
    /// The source drifted at the recheck: the plan is dead.
    Invalidated,
    /// Abandoned before activation ([`abandon`]): nothing of it was ever
    /// discoverable, its copies are removed, its id never resumes here, and
    /// another migration may take the destination in its place.
    Abandoned,
}

/// The durable progress of one table at the destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TableState {
    /// Nothing written.
    Pending,
    /// An append was authorized; its outcome is unknown until a fresh
    /// inspection.
    InDoubt,
    /// Committed with this evidence.
    Committed(TableFacts),
    /// Read back fresh and verified with this evidence.
    Verified(TableFacts),
}

/// A World's imported writer-fence floor.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct WorldFloor {
    /// The World.
    pub world: Name,
    /// The floor: at least the source epoch and every manifest writer epoch.
    pub floor: Epoch,
}

/// The staged control bundle.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct StagedControl {
    /// The staged snapshot's digest.
    #[serde(with = "crate::digest::bare")]
    pub snapshot_digest: Digest,
    /// Floors, one per World in plan order.
    pub floors: Vec<WorldFloor>,
}

/// The destination's durable reservation of one migration.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Reservation {
    /// The exact reserved plan (rehydrated after activation).
    pub plan: Plan,
    /// Its digest.
    #[serde(with = "crate::digest::bare")]
    pub plan_digest: Digest,
    /// When it was reserved.
    pub reserved_at: Millis,
    /// Lifecycle.
    pub status: Status,
    /// Per object of `plan.artifacts.objects`: read back and verified.
    pub objects: Vec<bool>,
    /// Per table of `plan.tables`.
    pub tables: Vec<TableState>,
    /// The source-stability digest, once the recheck passed.
    #[serde(with = "crate::digest::bare::option")]
    pub source_stability: Option<Digest>,
    /// The staged control bundle.
    pub control: Option<StagedControl>,
    /// Cold-verification evidence and its digest (the digest stored as its
    /// bare 64 hex digits, as every migration digest is).
    #[serde(with = "cold_pair")]
    pub cold: Option<(ColdEvidence, Digest)>,
    /// The completed receipt.
    pub receipt: Option<StoredReceipt>,
}

/// Serde for [`Reservation::cold`]: `null`, or `[evidence, "<64 hex>"]`.
mod cold_pair {
    use super::{ColdEvidence, Digest};
    use serde::{Deserialize, Serialize};

    #[derive(Serialize, Deserialize)]
    struct Bare(#[serde(with = "crate::digest::bare")] Digest);

    pub fn serialize<S: serde::Serializer>(
        v: &Option<(ColdEvidence, Digest)>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        v.as_ref().map(|(e, d)| (e, Bare(*d))).serialize(s)
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<(ColdEvidence, Digest)>, D::Error> {
        Ok(Option::<(ColdEvidence, Bare)>::deserialize(d)?.map(|(e, b)| (e, b.0)))
    }
}

impl Reservation {
    fn table_done(&self, i: usize) -> bool {
        matches!(
            self.tables.get(i),
            Some(TableState::Committed(_) | TableState::Verified(_))
        )
    }
}

/// The destination's migration administration: at most one reservation.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Destination {
    /// The reservation, if any.
    pub reservation: Option<Reservation>,
}

/// The machine's state: a run and the destination it drives.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct State {
    /// The driver's volatile run.
    pub run: Run,
    /// The destination's durable administration.
    pub destination: Destination,
}

/// Where an endpoint's catalog, control or object authority lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Locality {
    /// A local SQLite file or local directory (local v1).
    Local,
    /// Anything remote (deferred; refused).
    Remote,
}

/// What preflight observed about one endpoint.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EndpointFacts {
    /// The storage identity.
    pub identity: StorageIdentity,
    /// The Iceberg catalog.
    pub catalog: Locality,
    /// The control catalog.
    pub control: Locality,
    /// The Artifact object store.
    pub objects: Locality,
    /// The explicitly bound audit storage identity; `None` when unbound.
    pub audit: Option<StorageIdentity>,
    /// Activity admissions, attempts and provider operations, of any state.
    pub activity_records: u64,
}

/// The preflight report a driver presents at [`Step::Validate`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Preflight {
    /// The source endpoint.
    pub source: EndpointFacts,
    /// The destination endpoint.
    pub destination: EndpointFacts,
    /// Unsettled source commands.
    pub unsettled_commands: u64,
    /// Running evaluation leases at the source.
    pub running_evaluations: u64,
    /// Unreadable or corrupt indexed source Artifact objects.
    pub unreadable_objects: u64,
    /// Source tables in the namespace.
    pub source_tables: u64,
    /// Source control records (Worlds, signatures, fences).
    pub source_control_records: u64,
    /// Destination tables in the namespace.
    pub destination_tables: u64,
    /// Destination control records (Worlds, signatures, …), excluding
    /// migration reservation and staging rows.
    pub destination_control_records: u64,
    /// Pre-existing destination objects whose bytes do not verify.
    pub conflicting_destination_objects: u64,
    /// The source's departure record: every migration that planned to
    /// move it, and where ([`departure`]).
    pub departures: departure::Departures,
}

/// The commit reply a driver got for a table append.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum CommitReply {
    /// The commit succeeded with this evidence.
    Committed(TableFacts),
    /// The outcome is unknown (timeout, lost reply, crash of the catalog).
    Ambiguous,
}

/// What the recheck recaptured at the source.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SourceObservation {
    /// The recaptured control snapshot digest.
    #[serde(with = "crate::digest::bare")]
    pub control_digest: Digest,
    /// Every table's current snapshot, sorted by name.
    pub tables: Vec<(Name, u64)>,
    /// The recaptured Artifact inventory digest.
    #[serde(with = "crate::digest::bare")]
    pub inventory_digest: Digest,
    /// Every World's current source fence epoch, sorted by name.
    pub world_epochs: Vec<(Name, Epoch)>,
}

/// What the driver should do next, from [`next_step`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Next {
    /// Run preflight and send [`Request::Validate`].
    Validate,
    /// Acquire source fences and freeze a plan (or re-present the held one):
    /// send [`Request::Freeze`].
    Plan,
    /// Send [`Request::Reserve`].
    Reserve,
    /// Inspect the destination content address of object `index` and send
    /// [`Request::Object`].
    CopyObject {
        /// Index into the plan's objects.
        index: usize,
    },
    /// Inspect destination table `index` (a table in doubt included) and
    /// send [`Request::Table`].
    CopyTable {
        /// Index into the plan's tables.
        index: usize,
    },
    /// Read destination table `index` back fresh: [`Request::VerifyTable`].
    VerifyTable {
        /// Index into the plan's tables.
        index: usize,
    },
    /// Recapture the source: [`Request::Recheck`].
    Recheck,
    /// Send [`Request::StageControl`].
    StageControl,
    /// Send [`Request::Activate`].
    Activate,
    /// Run destination-only cold verification: [`Request::ColdVerify`].
    ColdVerify,
    /// Send [`Request::Complete`].
    Complete,
    /// The migration is complete: here is the exact stored receipt.
    Done(Box<StoredReceipt>),
}

impl Next {
    /// The workflow step this belongs to, given the plan (for tables). A
    /// finished migration belongs to [`Step::Complete`].
    pub fn step(&self, plan: Option<&Plan>) -> Step {
        match self {
            Next::Validate => Step::Validate,
            Next::Plan => Step::Plan,
            Next::Reserve => Step::Reserve,
            Next::CopyObject { .. } => Step::CopyArtifacts,
            Next::CopyTable { index } => table_step(plan, *index),
            Next::VerifyTable { .. } => Step::VerifyTables,
            Next::Recheck => Step::RecheckSource,
            Next::StageControl => Step::StageControl,
            Next::Activate => Step::Activate,
            Next::ColdVerify => Step::ColdVerify,
            Next::Complete | Next::Done(_) => Step::Complete,
        }
    }
}

fn table_step(plan: Option<&Plan>, index: usize) -> Step {
    match plan.and_then(|p| p.tables.get(index)) {
        Some(t) if t.classification == Classification::ArtifactFiles => Step::CopyArtifactFiles,
        _ => Step::CopyTables,
    }
}

/// A request from the driver, with the evidence its step requires.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Request {
    /// Step 1: the preflight report.
    Validate {
        /// What preflight observed.
        report: Preflight,
    },
    /// Step 2: the plan frozen after the source fences were acquired (or the
    /// held plan, on a retry).
    Freeze {
        /// The plan.
        plan: Plan,
    },
    /// Step 3: reserve (or resume) the plan at the destination.
    Reserve {
        /// The plan.
        plan: Plan,
        /// The caller's clock.
        now: Millis,
    },
    /// Step 4: what the destination content address of `sha256` holds —
    /// `None` when absent; `Some` is a full read (of a pre-existing object,
    /// or the read-back after copying).
    Object {
        /// The object.
        #[serde(with = "crate::digest::bare")]
        sha256: Digest,
        /// The verified facts of the bytes found, if any.
        found: Option<ObjectFacts>,
    },
    /// Steps 5–6: a fresh inspection of destination table `name` — `None`
    /// when it holds nothing. Required before every append.
    Table {
        /// The table.
        name: Name,
        /// The evidence found, if any.
        found: Option<TableFacts>,
    },
    /// Steps 5–6: the reply to an authorized append.
    TableCommitted {
        /// The table.
        name: Name,
        /// The reply.
        reply: CommitReply,
    },
    /// Step 7: a fresh read-back of destination table `name`.
    VerifyTable {
        /// The table.
        name: Name,
        /// The evidence read.
        read_back: TableFacts,
    },
    /// Step 8: the source recaptured.
    Recheck {
        /// What was observed.
        observed: SourceObservation,
    },
    /// Step 9: stage the control bundle whose snapshot has this digest.
    StageControl {
        /// The staged snapshot's digest.
        #[serde(with = "crate::digest::bare")]
        snapshot_digest: Digest,
    },
    /// Step 10: activate World discovery.
    Activate,
    /// Step 11: destination-only cold-verification evidence.
    ColdVerify {
        /// The evidence.
        evidence: ColdEvidence,
    },
    /// Step 12: complete the receipt.
    Complete {
        /// The software version.
        version: Name,
        /// The caller's clock.
        now: Millis,
    },
}

impl Request {
    /// The step this request belongs to (tables resolved against `plan`).
    pub fn step(&self, plan: Option<&Plan>) -> Step {
        match self {
            Request::Validate { .. } => Step::Validate,
            Request::Freeze { .. } => Step::Plan,
            Request::Reserve { .. } => Step::Reserve,
            Request::Object { .. } => Step::CopyArtifacts,
            Request::Table { name, .. } | Request::TableCommitted { name, .. } => {
                match plan.and_then(|p| p.tables.iter().position(|t| t.name == *name)) {
                    Some(i) => table_step(plan, i),
                    None => Step::CopyTables,
                }
            }
            Request::VerifyTable { .. } => Step::VerifyTables,
            Request::Recheck { .. } => Step::RecheckSource,
            Request::StageControl { .. } => Step::StageControl,
            Request::Activate => Step::Activate,
            Request::ColdVerify { .. } => Step::ColdVerify,
            Request::Complete { .. } => Step::Complete,
        }
    }
}

/// What a successful request did.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Outcome {
    /// Preflight passed.
    Validated,
    /// The plan is accepted for this run.
    Frozen {
        /// Its digest.
        #[serde(with = "crate::digest::bare")]
        plan_digest: Digest,
    },
    /// The plan is reserved; `resumed` when the reservation already existed.
    Reserved {
        /// An existing matching reservation was resumed.
        resumed: bool,
    },
    /// The object is absent: copy it from the source, read it back in full,
    /// and send [`Request::Object`] again with the read-back.
    CopyObject,
    /// The table is absent: append it in one atomic commit, then send
    /// [`Request::TableCommitted`].
    Append,
    /// The commit outcome is unknown: inspect the destination table before
    /// anything else ([`Request::Table`]). Never append blindly.
    InspectFirst,
    /// Evidence recorded.
    Recorded,
    /// Matching evidence was already recorded: an idempotent repeat.
    AlreadyRecorded,
    /// The source drifted: the plan is invalidated and activation aborted.
    Invalidated,
    /// Control staged: import these floors into the destination fences.
    Staged {
        /// The floors, one per World.
        floors: Vec<WorldFloor>,
    },
    /// World discovery is active.
    Activated,
    /// Cold verification recorded.
    ColdVerified {
        /// The evidence digest.
        #[serde(with = "crate::digest::bare")]
        evidence_digest: Digest,
    },
    /// The receipt is durably complete. On a repeat it is the exact stored
    /// receipt.
    Completed {
        /// The receipt.
        receipt: Box<StoredReceipt>,
        /// Whether it was already stored.
        repeated: bool,
    },
}

/// A decision: the outcome and the state to persist (the destination part in
/// the same transaction; the run part in the driver).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Decision {
    /// What happened.
    pub outcome: Outcome,
    /// The next state.
    pub next: State,
}

/// Why a migration request was refused. Nothing changes on a refusal.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Error, Serialize, Deserialize)]
pub enum MigrationError {
    /// An endpoint outside the local v1 profile (remote catalog, control,
    /// object store, or non-file storage URI).
    #[error("endpoint-outside-local-v1: {0}")]
    OutsideLocalV1(String),
    /// An endpoint whose audit storage is not bound to its own identity.
    #[error(
        "audit-identity-unbound: the {0} endpoint must bind its audit storage to its own identity"
    )]
    AuditUnbound(String),
    /// Source and destination are the same storage identity.
    #[error("identical-storage-identity")]
    IdenticalIdentity,
    /// A plan given to a run (a plan file) that does not match the source
    /// as it stands — edited by hand, or the source moved since it was
    /// planned: refused before anything is reserved.
    #[error("plan-stale: the given plan does not match the source as it is now (edited, or the source moved since it was planned); plan again")]
    PlanStale,
    /// The source holds no control record and no table: a wrong path (or
    /// an identity with nothing to move), never migrated as an empty
    /// identity.
    #[error("source-not-found: the source holds no control catalog records and no tables in its namespace")]
    SourceNotFound,
    /// One endpoint's storage lies inside the other's (`--dest S/inner`,
    /// `--dest S/default/inner`, or the source inside the destination):
    /// one would copy into, or be copied from, the other's own files.
    #[error("nested-storage-identity: the {0} lies inside the other endpoint's storage")]
    NestedIdentity(String),
    /// Unsettled commands or a running evaluation lease.
    #[error("source-not-quiescent: {unsettled_commands} unsettled commands, {running_evaluations} running evaluations")]
    NotQuiescent {
        /// Unsettled commands.
        unsettled_commands: u64,
        /// Running evaluation leases.
        running_evaluations: u64,
    },
    /// Any Activity record at either endpoint.
    #[error("activity-history-present: {source_records} source and {destination_records} destination Activity records")]
    ActivityPresent {
        /// Source records.
        source_records: u64,
        /// Destination records.
        destination_records: u64,
    },
    /// An unreadable or corrupt indexed source Artifact object.
    #[error("artifact-unreadable: {0} indexed objects do not verify")]
    ArtifactUnreadable(u64),
    /// A populated destination that is not this plan's reservation.
    #[error("destination-not-empty")]
    DestinationNotEmpty,
    /// A local destination directory holds what is not this storage
    /// identity's ([`check_destination_listing`]): a directory given by
    /// mistake is never written into.
    #[error("destination-not-empty: {0}; choose an empty or new directory")]
    DestinationForeign(String),
    /// A destination object whose bytes conflict with its content address.
    #[error("destination-object-conflict: {d0_hex}", d0_hex = .0.hex())]
    ObjectConflict(#[serde(with = "crate::digest::bare")] Digest),
    /// A request that is not the legal next step.
    #[error("out-of-order: expected {expected:?}, got {got:?}")]
    OutOfOrder {
        /// The legal next step.
        expected: Step,
        /// The request's step.
        got: Step,
    },
    /// A plan that breaks a structural rule.
    #[error("plan-invalid: {0}")]
    PlanInvalid(DataError),
    /// A plan whose digest differs from the one reserved (or held) for
    /// this migration id.
    #[error("plan-changed: migration {0} is reserved with a different plan")]
    PlanChanged(Name),
    /// The destination is reserved by a different migration.
    #[error("other-migration: the destination is reserved by migration {0}")]
    OtherMigration(Name),
    /// The plan was invalidated by source drift.
    #[error("plan-invalidated: the source drifted from the frozen plan")]
    PlanInvalidated,
    /// An object or table the plan does not list.
    #[error("unknown-item: {0}")]
    UnknownItem(String),
    /// A destination table whose evidence conflicts with the plan.
    #[error("table-conflict: {0}")]
    TableConflict(Name),
    /// A commit reply for a table with no authorized append.
    #[error("unexpected-commit: {0} has no append in doubt")]
    UnexpectedCommit(Name),
    /// A source read after the reservation recorded ACTIVATED.
    #[error("destination-is-recovery-authority: no source read after activation")]
    SourceClosed,
    /// Staged control content that conflicts with the plan.
    #[error("control-conflict: staged control differs from the plan")]
    ControlConflict,
    /// Cold-verification evidence that does not prove the plan: every
    /// difference, each naming its World, table and evidence, or object.
    #[error("cold-verification-failed: {0}")]
    ColdVerificationFailed(verify::ColdFailure),
    /// A receipt the destination does not hold as a completed migration's
    /// (a later verification's binding, [`verify::held_receipt`]).
    #[error("receipt-mismatch: {0}")]
    ReceiptMismatch(verify::ReceiptMismatch),
    /// Missing, non-canonical, digest-invalid or plan-mismatched receipt.
    #[error("receipt-invalid: {0}")]
    ReceiptInvalid(String),
    /// The migration is complete; nothing more may run.
    #[error("already-completed")]
    AlreadyCompleted,
    /// The source already departed to another destination (planned there,
    /// or moved): a second migration would make a second live home of its
    /// Worlds. Refused unless the operator acknowledges a second copy.
    #[error("source-migrated: the source is already {leg} to {destination} by migration {migration_id}; a second migration would make a second live copy of its Worlds (acknowledge it with --second-copy, or abandon that migration first)")]
    SourceMigrated {
        /// The first departure's migration.
        migration_id: Name,
        /// Its destination's uri.
        destination: String,
        /// Where it stands (`planned`, `moved`).
        leg: String,
    },
    /// This migration was abandoned: it never resumes.
    #[error(
        "migration-abandoned: migration {0} was abandoned; plan again under a new migration id"
    )]
    MigrationAbandoned(Name),
    /// Abandon asked of a migration that reached activation: the
    /// destination is a live home.
    #[error("abandon-after-activation: migration {0} is activated at its destination; it cannot be abandoned")]
    AbandonAfterActivation(Name),
    /// Abandon asked of a destination that holds no reservation of this
    /// migration.
    #[error("nothing-to-abandon: the destination holds no reservation of migration {0}")]
    NothingToAbandon(Name),
    /// A plan whose second-copy acknowledgement is not the run's.
    #[error("second-copy-mismatch: the plan and the run disagree on --second-copy")]
    SecondCopyMismatch,
}

impl MigrationError {
    /// The failure's [`Class`](crate::Class): what the caller does next
    /// (a receipt or a cold verification that does not verify is `CorruptArtifact`; a source that moved since the plan is `StateConflict`).
    pub fn class(&self) -> crate::Class {
        use crate::Class;
        match self {
            MigrationError::OutsideLocalV1(..) => Class::Unsupported,
            MigrationError::AuditUnbound(..) => Class::InvalidArgument,
            MigrationError::IdenticalIdentity => Class::InvalidArgument,
            MigrationError::PlanStale => Class::StateConflict,
            MigrationError::SourceNotFound => Class::NotFound,
            MigrationError::NestedIdentity(..) => Class::InvalidArgument,
            MigrationError::NotQuiescent { .. } => Class::Unavailable,
            MigrationError::ActivityPresent { .. } => Class::FailedPrecondition,
            MigrationError::ArtifactUnreadable(..) => Class::CorruptArtifact,
            MigrationError::DestinationNotEmpty => Class::FailedPrecondition,
            MigrationError::DestinationForeign(..) => Class::FailedPrecondition,
            MigrationError::ObjectConflict(..) => Class::AlreadyExists,
            MigrationError::OutOfOrder { .. } => Class::FailedPrecondition,
            MigrationError::PlanInvalid(..) => Class::InvalidArgument,
            MigrationError::PlanChanged(..) => Class::StateConflict,
            MigrationError::OtherMigration(..) => Class::FailedPrecondition,
            MigrationError::PlanInvalidated => Class::StateConflict,
            MigrationError::UnknownItem(..) => Class::InvalidArgument,
            MigrationError::TableConflict(..) => Class::AlreadyExists,
            MigrationError::UnexpectedCommit(..) => Class::FailedPrecondition,
            MigrationError::SourceClosed => Class::FailedPrecondition,
            MigrationError::ControlConflict => Class::StateConflict,
            MigrationError::ColdVerificationFailed(..) => Class::CorruptArtifact,
            MigrationError::ReceiptMismatch(..) => Class::CorruptArtifact,
            MigrationError::ReceiptInvalid(..) => Class::InvalidArgument,
            MigrationError::AlreadyCompleted => Class::FailedPrecondition,
            MigrationError::SourceMigrated { .. } => Class::FailedPrecondition,
            MigrationError::MigrationAbandoned(..) => Class::FailedPrecondition,
            MigrationError::AbandonAfterActivation(..) => Class::FailedPrecondition,
            MigrationError::NothingToAbandon(..) => Class::NotFound,
            MigrationError::SecondCopyMismatch => Class::InvalidArgument,
        }
    }
}

fn out_of_order(expected: Step, got: Step) -> MigrationError {
    MigrationError::OutOfOrder { expected, got }
}

/// The reservation this run may act on: refuses a reservation of another
/// migration or of another plan.
fn own_reservation(state: &State) -> Result<Option<&Reservation>, MigrationError> {
    let Some(r) = &state.destination.reservation else {
        return Ok(None);
    };
    if r.plan.migration_id != state.run.migration_id {
        // Another migration's abandoned reservation holds nothing: the
        // destination is this migration's to take.
        if r.status == Status::Abandoned {
            return Ok(None);
        }
        return Err(MigrationError::OtherMigration(r.plan.migration_id.clone()));
    }
    if r.status == Status::Abandoned {
        return Err(MigrationError::MigrationAbandoned(
            r.plan.migration_id.clone(),
        ));
    }
    if state.run.plan != Some(r.plan_digest) {
        return Err(MigrationError::PlanChanged(r.plan.migration_id.clone()));
    }
    Ok(Some(r))
}

/// Checks a stored receipt before returning it: present, digest-valid and
/// bound to the reserved plan.
fn stored_receipt(r: &Reservation) -> Result<StoredReceipt, MigrationError> {
    let stored = r
        .receipt
        .as_ref()
        .ok_or_else(|| MigrationError::ReceiptInvalid("missing".into()))?;
    stored
        .verify()
        .map_err(|e| MigrationError::ReceiptInvalid(e.to_string()))?;
    if stored.receipt.plan_digest != r.plan_digest {
        return Err(MigrationError::ReceiptInvalid("plan mismatch".into()));
    }
    Ok(stored.clone())
}

/// What the driver must do next. Total and deterministic. After activation it
/// never names a step that reads the source; after completion it returns the
/// exact stored receipt.
pub fn next_step(state: &State) -> Result<Next, MigrationError> {
    let run = &state.run;
    let r = own_reservation(state)?;
    if let Some(r) = r {
        match r.status {
            Status::Completed => return stored_receipt(r).map(|s| Next::Done(Box::new(s))),
            Status::Invalidated => return Err(MigrationError::PlanInvalidated),
            Status::Abandoned => {
                return Err(MigrationError::MigrationAbandoned(
                    r.plan.migration_id.clone(),
                ))
            }
            Status::Activated => {
                return Ok(if r.cold.is_none() {
                    Next::ColdVerify
                } else {
                    Next::Complete
                })
            }
            Status::Reserved => {}
        }
    }
    if !run.validated {
        return Ok(Next::Validate);
    }
    if !run.frozen {
        return Ok(Next::Plan);
    }
    let Some(r) = r.filter(|_| run.reserved) else {
        return Ok(Next::Reserve);
    };
    Ok(progress(r))
}

/// The first incomplete destination step of a `Reserved` reservation.
fn progress(r: &Reservation) -> Next {
    if let Some(index) = r.objects.iter().position(|v| !*v) {
        return Next::CopyObject { index };
    }
    let files = r.plan.artifact_files();
    if let Some(index) = (0..r.tables.len()).find(|i| Some(*i) != files && !r.table_done(*i)) {
        return Next::CopyTable { index };
    }
    if let Some(index) = files.filter(|i| !r.table_done(*i)) {
        return Next::CopyTable { index };
    }
    if let Some(index) = r
        .tables
        .iter()
        .position(|t| !matches!(t, TableState::Verified(_)))
    {
        return Next::VerifyTable { index };
    }
    if r.source_stability.is_none() {
        return Next::Recheck;
    }
    if r.control.is_none() {
        return Next::StageControl;
    }
    Next::Activate
}

/// The step [`next_step`] would name, for ordering refusals.
fn expected_step(state: &State) -> Step {
    let plan = state.destination.reservation.as_ref().map(|r| &r.plan);
    match next_step(state) {
        Ok(n) => n.step(plan),
        Err(_) => Step::Validate,
    }
}

/// Abandons migration `migration_id` at `destination`: its reservation
/// exists and never reached activation (reserved, or invalidated by
/// drift). Answers the administration to store by compare-and-swap — the
/// reservation [`Status::Abandoned`], nothing staged — or `None` when it is
/// abandoned already (a retry). Before activation no World of it is
/// discoverable, so removing what it copied loses nothing; once activated
/// the destination is a live home and is never abandoned
/// ([`MigrationError::AbandonAfterActivation`]).
///
/// The stored [`Status::Abandoned`] is the authority, written first: from
/// then on no driver of this id reserves, copies or activates here again
/// ([`MigrationError::MigrationAbandoned`]), whatever it held in memory,
/// and so the source's departure can be marked abandoned
/// ([`departure::abandon`]) and the copies removed afterwards, each step
/// safe to repeat after a crash. Another migration may then take the
/// destination (its reservation replaces the abandoned one).
pub fn abandon(
    destination: &Destination,
    migration_id: &Name,
) -> Result<Option<Destination>, MigrationError> {
    match &destination.reservation {
        None => Err(MigrationError::NothingToAbandon(migration_id.clone())),
        Some(r) if r.plan.migration_id != *migration_id => {
            Err(MigrationError::OtherMigration(r.plan.migration_id.clone()))
        }
        Some(r) => match r.status {
            Status::Abandoned => Ok(None),
            Status::Reserved | Status::Invalidated => {
                let mut next = r.clone();
                next.status = Status::Abandoned;
                next.control = None;
                Ok(Some(Destination {
                    reservation: Some(next),
                }))
            }
            Status::Activated | Status::Completed => {
                Err(MigrationError::AbandonAfterActivation(migration_id.clone()))
            }
        },
    }
}

/// Decides one request. Total and deterministic: a refusal is a value.
pub fn decide(state: &State, req: &Request) -> Result<Decision, MigrationError> {
    // A reservation of another migration or plan refuses everything but the
    // run-local steps, which refuse it themselves.
    let own = own_reservation(state);
    let status = state.destination.reservation.as_ref().map(|r| r.status);
    let plan = state.destination.reservation.as_ref().map(|r| &r.plan);
    let step = req.step(plan);
    if let (Ok(Some(_)), Some(Status::Activated | Status::Completed)) = (&own, status) {
        if step.reads_source() {
            return Err(MigrationError::SourceClosed);
        }
    }
    match req {
        Request::Validate { report } => validate(state, report),
        Request::Freeze { plan } => freeze(state, plan),
        Request::Reserve { plan, now } => reserve(state, plan, *now),
        _ => {
            let r = own?.ok_or_else(|| out_of_order(expected_step(state), step))?;
            match r.status {
                Status::Invalidated => return Err(MigrationError::PlanInvalidated),
                Status::Abandoned => {
                    return Err(MigrationError::MigrationAbandoned(
                        r.plan.migration_id.clone(),
                    ))
                }
                Status::Completed => {
                    return match req {
                        Request::Complete { .. } => Ok(Decision {
                            outcome: Outcome::Completed {
                                receipt: Box::new(stored_receipt(r)?),
                                repeated: true,
                            },
                            next: state.clone(),
                        }),
                        _ => Err(MigrationError::AlreadyCompleted),
                    }
                }
                Status::Reserved | Status::Activated => {}
            }
            if !state.run.reserved && r.status == Status::Reserved {
                return Err(out_of_order(expected_step(state), step));
            }
            destination_step(state, r, req, step)
        }
    }
}

fn with_run(state: &State, f: impl FnOnce(&mut Run), outcome: Outcome) -> Decision {
    let mut next = state.clone();
    f(&mut next.run);
    Decision { outcome, next }
}

/// The preflight facts that refuse on their own, in order: locality and
/// audit binding per side, identical or nested identities, an empty
/// source, unsettled work, activity, unreadable objects.
fn check_preflight_facts(p: &Preflight) -> Result<(), MigrationError> {
    for (side, e) in [("source", &p.source), ("destination", &p.destination)] {
        if e.catalog != Locality::Local
            || e.control != Locality::Local
            || e.objects != Locality::Local
            || !e.identity.uri().is_local_file()
        {
            return Err(MigrationError::OutsideLocalV1(side.into()));
        }
        if e.audit.as_ref() != Some(&e.identity) {
            return Err(MigrationError::AuditUnbound(side.into()));
        }
    }
    if p.source.identity == p.destination.identity {
        return Err(MigrationError::IdenticalIdentity);
    }
    if p.source_tables == 0 && p.source_control_records == 0 {
        return Err(MigrationError::SourceNotFound);
    }
    let (src, dst) = (p.source.identity.uri(), p.destination.identity.uri());
    if src != dst && src.contains(dst) {
        return Err(MigrationError::NestedIdentity("destination".into()));
    }
    if src != dst && dst.contains(src) {
        return Err(MigrationError::NestedIdentity("source".into()));
    }
    if p.unsettled_commands > 0 || p.running_evaluations > 0 {
        return Err(MigrationError::NotQuiescent {
            unsettled_commands: p.unsettled_commands,
            running_evaluations: p.running_evaluations,
        });
    }
    if p.source.activity_records > 0 || p.destination.activity_records > 0 {
        return Err(MigrationError::ActivityPresent {
            source_records: p.source.activity_records,
            destination_records: p.destination.activity_records,
        });
    }
    if p.unreadable_objects > 0 {
        return Err(MigrationError::ArtifactUnreadable(p.unreadable_objects));
    }
    Ok(())
}

fn validate(state: &State, p: &Preflight) -> Result<Decision, MigrationError> {
    if state.run.validated {
        return Ok(Decision {
            outcome: Outcome::AlreadyRecorded,
            next: state.clone(),
        });
    }
    check_preflight_facts(p)?;
    // A populated destination is admitted only as this plan's reservation.
    let reserved = own_reservation(state)?;
    if reserved.is_none()
        && (p.destination_tables > 0
            || p.destination_control_records > 0
            || p.conflicting_destination_objects > 0)
    {
        return Err(MigrationError::DestinationNotEmpty);
    }
    match reserved.map(|r| r.status) {
        Some(Status::Invalidated) => return Err(MigrationError::PlanInvalidated),
        Some(Status::Activated | Status::Completed) => return Err(MigrationError::SourceClosed),
        Some(Status::Abandoned) => {
            return Err(MigrationError::MigrationAbandoned(
                state.run.migration_id.clone(),
            ))
        }
        Some(Status::Reserved) | None => {}
    }
    // One live home per World: the source's departures admit this one.
    departure::depart(
        &p.departures,
        &state.run.migration_id,
        &p.destination.identity,
        state.run.second_copy,
    )?;
    Ok(with_run(state, |r| r.validated = true, Outcome::Validated))
}

fn check_plan(state: &State, plan: &Plan) -> Result<Digest, MigrationError> {
    plan.check().map_err(MigrationError::PlanInvalid)?;
    if plan.migration_id != state.run.migration_id {
        return Err(MigrationError::OtherMigration(plan.migration_id.clone()));
    }
    if plan.second_copy != state.run.second_copy {
        return Err(MigrationError::SecondCopyMismatch);
    }
    let digest = plan.digest();
    if state.run.plan.is_some_and(|d| d != digest) {
        return Err(MigrationError::PlanChanged(plan.migration_id.clone()));
    }
    Ok(digest)
}

fn freeze(state: &State, plan: &Plan) -> Result<Decision, MigrationError> {
    if !state.run.validated {
        return Err(out_of_order(Step::Validate, Step::Plan));
    }
    let digest = check_plan(state, plan)?;
    if state.run.frozen {
        return Ok(Decision {
            outcome: Outcome::AlreadyRecorded,
            next: state.clone(),
        });
    }
    Ok(with_run(
        state,
        |r| {
            r.plan = Some(digest);
            r.frozen = true;
        },
        Outcome::Frozen {
            plan_digest: digest,
        },
    ))
}

fn reserve(state: &State, plan: &Plan, now: Millis) -> Result<Decision, MigrationError> {
    if !state.run.frozen {
        return Err(out_of_order(expected_step(state), Step::Reserve));
    }
    let digest = check_plan(state, plan)?;
    // Another migration's abandoned reservation is replaced.
    let current = own_reservation(state)?;
    match current {
        Some(r) if r.plan.migration_id != plan.migration_id => {
            Err(MigrationError::OtherMigration(r.plan.migration_id.clone()))
        }
        Some(r) if r.plan_digest != digest => {
            Err(MigrationError::PlanChanged(r.plan.migration_id.clone()))
        }
        Some(r) if r.status == Status::Invalidated => Err(MigrationError::PlanInvalidated),
        Some(_) => Ok(with_run(
            state,
            |r| r.reserved = true,
            Outcome::Reserved { resumed: true },
        )),
        None => {
            let mut next = state.clone();
            next.run.reserved = true;
            next.destination.reservation = Some(Reservation {
                objects: vec![false; plan.artifacts.objects.len()],
                tables: vec![TableState::Pending; plan.tables.len()],
                plan: plan.clone(),
                plan_digest: digest,
                reserved_at: now,
                status: Status::Reserved,
                source_stability: None,
                control: None,
                cold: None,
                receipt: None,
            });
            Ok(Decision {
                outcome: Outcome::Reserved { resumed: false },
                next,
            })
        }
    }
}

/// Applies `f` to the reservation of a clone of `state`.
fn with_reservation(state: &State, outcome: Outcome, f: impl FnOnce(&mut Reservation)) -> Decision {
    let mut next = state.clone();
    if let Some(r) = next.destination.reservation.as_mut() {
        f(r);
    }
    Decision { outcome, next }
}

fn repeat(state: &State) -> Decision {
    Decision {
        outcome: Outcome::AlreadyRecorded,
        next: state.clone(),
    }
}

/// A request of a destination step, against the caller's own reservation.
/// Items of an earlier step are idempotent repeats (checked against the
/// recorded evidence); a later step is out of order. One function per
/// request below; this is only the dispatch.
fn destination_step(
    state: &State,
    r: &Reservation,
    req: &Request,
    step: Step,
) -> Result<Decision, MigrationError> {
    let expected = if r.status == Status::Reserved {
        progress(r).step(Some(&r.plan))
    } else if r.cold.is_none() {
        Step::ColdVerify
    } else {
        Step::Complete
    };
    if step > expected {
        return Err(out_of_order(expected, step));
    }
    let at = At { expected, step };
    match req {
        Request::Object { sha256, found } => object_found(state, r, sha256, found.as_ref()),
        Request::Table { name, found } => table_found(state, r, name, found.as_ref()),
        Request::TableCommitted { name, reply } => table_committed(state, r, name, reply),
        Request::VerifyTable { name, read_back } => verify_table(state, r, name, read_back),
        Request::Recheck { observed } => recheck(state, r, observed),
        Request::StageControl { snapshot_digest } => stage_control(state, r, snapshot_digest),
        Request::Activate => activate(state, r),
        Request::ColdVerify { evidence } => cold_verify(state, r, at, evidence),
        Request::Complete { version, now } => complete(state, r, at, version, *now),
        Request::Validate { .. } | Request::Freeze { .. } | Request::Reserve { .. } => {
            Err(out_of_order(expected, step))
        }
    }
}

/// Where a destination request stands: the step the reservation expects
/// and the request's own (never later than `expected`).
#[derive(Clone, Copy)]
struct At {
    expected: Step,
    step: Step,
}

impl At {
    /// The refusal of a request that comes too early.
    fn out_of_order(self) -> MigrationError {
        out_of_order(self.expected, self.step)
    }
}

/// `Object`: what the destination holds at the object's content address.
/// The planned object present is recorded (or repeats its record); absent,
/// the caller is told to copy it; anything else, or an absent object
/// already recorded, is `ObjectConflict`.
fn object_found(
    state: &State,
    r: &Reservation,
    sha256: &Digest,
    found: Option<&ObjectFacts>,
) -> Result<Decision, MigrationError> {
    let i = r
        .plan
        .artifacts
        .objects
        .iter()
        .position(|o| o.sha256 == *sha256)
        .ok_or_else(|| MigrationError::UnknownItem(sha256.hex()))?;
    let planned = r.plan.artifacts.objects.get(i);
    let recorded = r.objects.get(i) == Some(&true);
    match found {
        Some(f) if Some(f) == planned => {
            if recorded {
                Ok(repeat(state))
            } else {
                Ok(with_reservation(state, Outcome::Recorded, |r| {
                    if let Some(v) = r.objects.get_mut(i) {
                        *v = true;
                    }
                }))
            }
        }
        Some(_) => Err(MigrationError::ObjectConflict(*sha256)),
        None if recorded => Err(MigrationError::ObjectConflict(*sha256)),
        None => Ok(Decision {
            outcome: Outcome::CopyObject,
            next: state.clone(),
        }),
    }
}

/// `Table`: what a fresh read of the destination table finds. Matching
/// content is recorded `Committed` (convergence after a crash or an
/// ambiguous commit) or repeats its record; an absent table authorizes one
/// append, durably `InDoubt` first; anything else is `TableConflict`. The
/// `artifact_files` table waits for every object: its request's step,
/// `CopyArtifactFiles`, is later than `CopyArtifacts`, which the reservation
/// expects while any object is missing ([`progress`]), so the dispatch
/// refuses it out of order before this is reached.
fn table_found(
    state: &State,
    r: &Reservation,
    name: &Name,
    found: Option<&TableFacts>,
) -> Result<Decision, MigrationError> {
    let (i, t) = table(r, name)?;
    let current = r.tables.get(i).copied().unwrap_or(TableState::Pending);
    match (found, current) {
        (Some(f), TableState::Committed(c) | TableState::Verified(c)) => {
            if t.destination_matches(f) && f.snapshot == c.snapshot {
                Ok(repeat(state))
            } else {
                Err(MigrationError::TableConflict(name.clone()))
            }
        }
        (None, TableState::Committed(_) | TableState::Verified(_)) => {
            Err(MigrationError::TableConflict(name.clone()))
        }
        (Some(f), TableState::Pending | TableState::InDoubt) => {
            if t.destination_matches(f) {
                // Matching content converges (after a crash or an
                // ambiguous commit).
                Ok(set_table(
                    state,
                    i,
                    Outcome::Recorded,
                    TableState::Committed(*f),
                ))
            } else {
                Err(MigrationError::TableConflict(name.clone()))
            }
        }
        (None, TableState::Pending | TableState::InDoubt) => {
            // Absent: authorize one append, durably in doubt first.
            Ok(set_table(state, i, Outcome::Append, TableState::InDoubt))
        }
    }
}

/// `TableCommitted`: the append's reply. A committed reply of matching
/// content records the table; an ambiguous one asks for an inspection
/// first; a repeat of the recorded commit is a repeat; anything else is
/// `UnexpectedCommit`.
fn table_committed(
    state: &State,
    r: &Reservation,
    name: &Name,
    reply: &CommitReply,
) -> Result<Decision, MigrationError> {
    let (i, t) = table(r, name)?;
    let current = r.tables.get(i).copied().unwrap_or(TableState::Pending);
    match (reply, current) {
        (CommitReply::Committed(f), TableState::InDoubt) => {
            if !t.destination_matches(f) {
                return Err(MigrationError::TableConflict(name.clone()));
            }
            Ok(set_table(
                state,
                i,
                Outcome::Recorded,
                TableState::Committed(*f),
            ))
        }
        (CommitReply::Ambiguous, TableState::InDoubt) => Ok(Decision {
            outcome: Outcome::InspectFirst,
            next: state.clone(),
        }),
        (CommitReply::Committed(f), TableState::Committed(c) | TableState::Verified(c))
            if *f == c =>
        {
            Ok(repeat(state))
        }
        _ => Err(MigrationError::UnexpectedCommit(name.clone())),
    }
}

/// `VerifyTable`: a read-back equal to the committed facts (and matching
/// the plan) records the table `Verified`; once verified, at this step or
/// as a repeat of it, only the verified facts repeat; anything else is
/// `TableConflict`.
fn verify_table(
    state: &State,
    r: &Reservation,
    name: &Name,
    read_back: &TableFacts,
) -> Result<Decision, MigrationError> {
    let (i, t) = table(r, name)?;
    match r.tables.get(i) {
        Some(TableState::Verified(v)) if v == read_back => Ok(repeat(state)),
        Some(TableState::Committed(c) | TableState::Verified(c))
            if c == read_back && t.destination_matches(read_back) =>
        {
            Ok(set_table(
                state,
                i,
                Outcome::Recorded,
                TableState::Verified(*read_back),
            ))
        }
        _ => Err(MigrationError::TableConflict(name.clone())),
    }
}

/// `Recheck`: the recaptured source. Once recorded, only the same evidence
/// repeats (other evidence means the plan no longer stands); a drifted
/// source invalidates the plan; a stable one records its digest. Without
/// recorded evidence this is never a repeat: [`decide`] refuses a recheck
/// against an invalidated reservation, and against an activated or
/// completed one (it reads the source), so the reservation is `Reserved`;
/// a reserved one without the evidence expects this step or an earlier one
/// ([`progress`]), and [`destination_step`] refuses a step later than the
/// expected one.
fn recheck(
    state: &State,
    r: &Reservation,
    observed: &SourceObservation,
) -> Result<Decision, MigrationError> {
    let digest = evidence_digest(observed);
    if let Some(d) = r.source_stability {
        return if d == digest {
            Ok(repeat(state))
        } else {
            Err(MigrationError::PlanInvalidated)
        };
    }
    if drifted(&r.plan, observed) {
        return Ok(with_reservation(state, Outcome::Invalidated, |r| {
            r.status = Status::Invalidated;
        }));
    }
    Ok(with_reservation(state, Outcome::Recorded, |r| {
        r.source_stability = Some(digest);
    }))
}

/// `StageControl`: the plan's control snapshot is staged with the
/// [`import_floors`] the answer names; a repeat of the same staging answers
/// the same floors; another snapshot is `ControlConflict`.
fn stage_control(
    state: &State,
    r: &Reservation,
    snapshot_digest: &Digest,
) -> Result<Decision, MigrationError> {
    if *snapshot_digest != r.plan.control.snapshot_digest {
        return Err(MigrationError::ControlConflict);
    }
    let floors = import_floors(&r.plan);
    if let Some(c) = &r.control {
        return if c.snapshot_digest == *snapshot_digest && c.floors == floors {
            Ok(Decision {
                outcome: Outcome::Staged { floors },
                next: state.clone(),
            })
        } else {
            Err(MigrationError::ControlConflict)
        };
    }
    let staged = StagedControl {
        snapshot_digest: *snapshot_digest,
        floors: floors.clone(),
    };
    Ok(with_reservation(state, Outcome::Staged { floors }, |r| {
        r.control = Some(staged)
    }))
}

/// `Activate`: the World becomes discoverable at the destination.
fn activate(state: &State, r: &Reservation) -> Result<Decision, MigrationError> {
    if r.status == Status::Activated {
        return Ok(repeat(state));
    }
    Ok(with_reservation(state, Outcome::Activated, |r| {
        r.status = Status::Activated;
    }))
}

/// `ColdVerify`, after activation: checked evidence is recorded with its
/// digest; the first recorded evidence stands (a re-run after a lost reply
/// may carry a still-higher resume epoch).
fn cold_verify(
    state: &State,
    r: &Reservation,
    at: At,
    evidence: &ColdEvidence,
) -> Result<Decision, MigrationError> {
    if r.status != Status::Activated {
        return Err(at.out_of_order());
    }
    check_cold(r, evidence)?;
    let digest = evidence_digest(evidence);
    if r.cold.is_some() {
        // A re-run after a lost reply may carry a still-higher resume
        // epoch: the first recorded evidence stands.
        return Ok(repeat(state));
    }
    let e = evidence.clone();
    Ok(with_reservation(
        state,
        Outcome::ColdVerified {
            evidence_digest: digest,
        },
        |r| r.cold = Some((e, digest)),
    ))
}

/// `Complete`, after activation: the receipt is built, sealed and stored;
/// the migration is `Completed`.
fn complete(
    state: &State,
    r: &Reservation,
    at: At,
    version: &Name,
    now: Millis,
) -> Result<Decision, MigrationError> {
    if r.status != Status::Activated {
        return Err(at.out_of_order());
    }
    let receipt = build_receipt(r, version, now)?;
    let stored = StoredReceipt::seal(receipt);
    let s = stored.clone();
    Ok(with_reservation(
        state,
        Outcome::Completed {
            receipt: Box::new(stored),
            repeated: false,
        },
        |r| {
            r.status = Status::Completed;
            r.receipt = Some(s);
        },
    ))
}

/// Records table `i` as `to`, answering `outcome`.
fn set_table(state: &State, i: usize, outcome: Outcome, to: TableState) -> Decision {
    with_reservation(state, outcome, |r| {
        if let Some(s) = r.tables.get_mut(i) {
            *s = to;
        }
    })
}

fn table<'a>(r: &'a Reservation, name: &Name) -> Result<(usize, &'a TablePlan), MigrationError> {
    r.plan
        .tables
        .iter()
        .enumerate()
        .find(|(_, t)| t.name == *name)
        .ok_or_else(|| MigrationError::UnknownItem(name.to_string()))
}

/// The floors to import: for each World, `fence::import_floor_for` of its
/// source epoch and every manifest writer epoch.
pub fn import_floors(plan: &Plan) -> Vec<WorldFloor> {
    plan.worlds
        .iter()
        .map(|w| WorldFloor {
            world: w.world.clone(),
            floor: w.import_floor(),
        })
        .collect()
}

/// Whether the recaptured source differs from the frozen plan in anything
/// but nothing: control, any table snapshot, the inventory, or any World's
/// fence epoch (the migration's own acquisition is in the plan already).
pub fn drifted(plan: &Plan, o: &SourceObservation) -> bool {
    let tables = plan.tables.iter().map(|t| (&t.name, t.source.snapshot));
    let worlds = plan.worlds.iter().map(|w| (&w.world, w.source_epoch));
    o.control_digest != plan.control.snapshot_digest
        || o.inventory_digest != plan.artifacts.inventory_digest()
        || !tables.eq(o.tables.iter().map(|(n, s)| (n, *s)))
        || !worlds.eq(o.world_epochs.iter().map(|(n, e)| (n, *e)))
}

fn build_receipt(r: &Reservation, version: &Name, now: Millis) -> Result<Receipt, MigrationError> {
    let (cold, cold_digest) = r
        .cold
        .as_ref()
        .ok_or_else(|| out_of_order(Step::ColdVerify, Step::Complete))?;
    let stability = r
        .source_stability
        .ok_or_else(|| out_of_order(Step::RecheckSource, Step::Complete))?;
    let control = r
        .control
        .as_ref()
        .ok_or_else(|| out_of_order(Step::StageControl, Step::Complete))?;
    let mut tables = Vec::with_capacity(r.plan.tables.len());
    for (t, s) in r.plan.tables.iter().zip(&r.tables) {
        let TableState::Verified(d) = s else {
            return Err(out_of_order(Step::VerifyTables, Step::Complete));
        };
        tables.push(TableReceipt {
            name: t.name.clone(),
            classification: t.classification,
            source_snapshot: t.source.snapshot,
            destination_snapshot: d.snapshot,
            schema_fingerprint: t.source.schema_fingerprint,
            metadata_fingerprint: t.source.metadata_fingerprint,
            rows: t.source.rows,
            source_content_digest: t.source.content_digest,
            destination_content_digest: d.content_digest,
        });
    }
    Ok(Receipt {
        format: RECEIPT_FORMAT,
        migration_id: r.plan.migration_id.clone(),
        version: version.clone(),
        started_at: r.reserved_at,
        completed_at: now,
        source_fingerprint: r.plan.source.fingerprint(),
        destination_fingerprint: r.plan.destination.fingerprint(),
        plan_digest: r.plan_digest,
        source_stability_digest: stability,
        tables,
        artifacts: ArtifactReceipt {
            occurrences: r.plan.artifacts.occurrences,
            objects: r.plan.artifacts.objects.len() as u64,
            verified_bytes: r.plan.artifacts.total_bytes(),
            inventory_digest: r.plan.artifacts.inventory_digest(),
        },
        control: ControlReceipt {
            records: r.plan.control.records,
            worlds: r.plan.worlds.len() as u64,
            fence_floors: control.floors.len() as u64,
            snapshot_digest: control.snapshot_digest,
            activation: Activation::Activated,
        },
        activity_disposition: ActivityDisposition::EmptyV1,
        second_copy: r.plan.second_copy,
        cold_verification: ColdReceipt {
            evidence_digest: *cold_digest,
            resume: cold.resume.clone(),
        },
    })
}
