//! The release publication protocol as pure data and decisions: staging
//! and publication, the pending gate and recovery-directory capacity.
//!
//! The filesystem shell (`custos-fs`) follows this module step by step; a
//! model (`custos-models`) drives the same functions with crashes and
//! injected failures between any two steps. The rules are written once,
//! here:
//!
//! - **Step order** — [`PUBLICATION_STEPS`], walked with [`next_step`]:
//!   validate and admit (bounds, recovery-directory capacity, the gate)
//!   before anything is staged; write and fsync each payload file, then the
//!   COMPLETE record; fsync the staging directory; rename into
//!   `releases/<hex>/`; verify; fsync `releases/`; commit lifecycle
//!   membership and the bounded outcome; adopt into the in-memory index.
//!   [`Step::requires`] names the step that must have completed before
//!   each, so a driver (or a model's invariant) can check an order.
//! - **The pending gate** — [`Gate`]: after the rename, the digest is
//!   pending ([`Gate::on_renamed`]); a failure past the rename keeps it
//!   pending ([`Gate::on_failure_after_rename`]); only a successful
//!   adoption or an exact retry's reconciliation clears it
//!   ([`Gate::on_reconciled`]). While a digest is pending,
//!   [`Gate::admit`] refuses every other digest with
//!   [`ProtocolError::Unavailable`] — even a non-conflicting one, so the
//!   pending directory is never bypassed for reference uniqueness or
//!   capacity.
//! - **Planning** — [`plan_publication`]: given the gate and what the
//!   catalog already knows about the digest and the reference, a
//!   publication is [`Plan::New`], an identical no-op ([`Plan::Noop`]), a
//!   reconciliation of an existing completed directory ([`Plan::Reconcile`])
//!   or a typed refusal (conflicting digest or reference content).
//! - **Slot charging** — [`slot_charged`]: the recovery-directory slot is
//!   charged by the rename, before the parent sync and adoption, and a
//!   failure before a destination exists does not consume it.
//! - **Recovery** — [`classify_entry`] and [`recovered_membership`]: what
//!   a directory found under `releases/` at open is (completed, debris, or
//!   an open failure), and whether a completed one is a member or an
//!   orphan that only reserves its reference.
//!
//! A model's mutants are variations it applies around these functions (a
//! step order with the rename before the COMPLETE write, a skipped parent
//! fsync, a gate that clears on failure); nothing here has a switch for
//! them.

use thiserror::Error;

use super::bounds::Placement;
use super::complete::{CompleteError, CompleteRecord};
use super::lifecycle::{LifecycleState, Membership};
use super::Sha256;

/// One step of a publication, in [`PUBLICATION_STEPS`] order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Step {
    /// Validate the manifest, the component, the descriptor and the contract
    /// metadata; serialize the metadata and decode the exact bytes with the
    /// production decoder, checking equality. No I/O.
    Validate,
    /// Plan the publication ([`plan_publication`]: the gate, digest and
    /// reference conflicts) and check every bound, including the
    /// recovery-directory capacity, under the writer mutex. Still no I/O:
    /// a refusal here leaves nothing staged.
    Admit,
    /// Create the private staging directory `.tmp/<unique>`.
    CreateStage,
    /// Write and fsync `metadata.json`.
    WriteMetadata,
    /// Write and fsync the canonical `manifest.json`.
    WriteManifest,
    /// Write and fsync `component.wasm`.
    WriteComponent,
    /// Write and fsync the `COMPLETE` record — after every payload file.
    WriteComplete,
    /// fsync the staging directory.
    SyncStage,
    /// Rename the staging directory to `releases/<hex>/`. From here the
    /// digest is pending ([`Gate::on_renamed`]) and its slot is charged.
    Rename,
    /// Read the destination back and verify it in full.
    Verify,
    /// fsync `releases/`.
    SyncReleases,
    /// Durably commit lifecycle membership and the bounded operation outcome.
    CommitLifecycle,
    /// Adopt the descriptor into the in-memory index; the gate clears.
    Adopt,
}

/// The publication steps in order. A [`Plan::New`] walks all of them; a
/// [`Plan::Reconcile`] walks [`RECONCILE_STEPS`]; a [`Plan::Noop`] walks
/// [`NOOP_STEPS`].
pub const PUBLICATION_STEPS: [Step; 13] = [
    Step::Validate,
    Step::Admit,
    Step::CreateStage,
    Step::WriteMetadata,
    Step::WriteManifest,
    Step::WriteComponent,
    Step::WriteComplete,
    Step::SyncStage,
    Step::Rename,
    Step::Verify,
    Step::SyncReleases,
    Step::CommitLifecycle,
    Step::Adopt,
];

/// The steps of a reconciliation (an exact pending retry, or an explicit
/// publication of an orphan completed directory): the directory already
/// exists, so nothing is staged; it is verified, `releases/` is fsynced
/// again, membership is committed and the release adopted.
pub const RECONCILE_STEPS: [Step; 6] = [
    Step::Validate,
    Step::Admit,
    Step::Verify,
    Step::SyncReleases,
    Step::CommitLifecycle,
    Step::Adopt,
];

/// The steps of an identical republication of an adopted release: a
/// verified no-op that changes no state (it never clears a revocation).
pub const NOOP_STEPS: [Step; 3] = [Step::Validate, Step::Admit, Step::Verify];

impl Step {
    /// The stable name of the step.
    pub fn as_str(&self) -> &'static str {
        match self {
            Step::Validate => "validate",
            Step::Admit => "admit",
            Step::CreateStage => "create-stage",
            Step::WriteMetadata => "write-metadata",
            Step::WriteManifest => "write-manifest",
            Step::WriteComponent => "write-component",
            Step::WriteComplete => "write-complete",
            Step::SyncStage => "sync-stage",
            Step::Rename => "rename",
            Step::Verify => "verify",
            Step::SyncReleases => "sync-releases",
            Step::CommitLifecycle => "commit-lifecycle",
            Step::Adopt => "adopt",
        }
    }

    /// The step that must have completed before this one in a new
    /// publication (`None` for the first). Every step requires its
    /// predecessor in [`PUBLICATION_STEPS`]; the load-bearing ones are
    /// COMPLETE after the payload, the rename after the staging-directory
    /// fsync, lifecycle commit after the parent fsync, adoption last.
    pub fn requires(&self) -> Option<Step> {
        let i = PUBLICATION_STEPS.iter().position(|s| s == self)?;
        i.checked_sub(1)
            .and_then(|p| PUBLICATION_STEPS.get(p).copied())
    }

    /// Whether a failure at or after this step happens once the destination
    /// may exist: from [`Step::Verify`] on (a failed rename leaves no
    /// destination on the supported filesystems; the slot is not consumed).
    pub fn past_rename(&self) -> bool {
        *self > Step::Rename
    }
}

/// The step after `done` in a new publication (`None` before the first:
/// [`Step::Validate`]); `None` after [`Step::Adopt`].
pub fn next_step(done: Option<Step>) -> Option<Step> {
    next_in(&PUBLICATION_STEPS, done)
}

/// The step after `done` in `steps` (one of [`PUBLICATION_STEPS`],
/// [`RECONCILE_STEPS`], [`NOOP_STEPS`], or a sequence a model builds).
pub fn next_in(steps: &[Step], done: Option<Step>) -> Option<Step> {
    match done {
        None => steps.first().copied(),
        Some(d) => {
            let i = steps.iter().position(|s| *s == d)?;
            steps.get(i + 1).copied()
        }
    }
}

/// The steps a plan walks.
pub fn steps_of(plan: Plan) -> &'static [Step] {
    match plan {
        Plan::New => &PUBLICATION_STEPS,
        Plan::Reconcile => &RECONCILE_STEPS,
        Plan::Noop => &NOOP_STEPS,
    }
}

/// Checks that `performed` (the steps a shell or model actually completed,
/// in order) is a prefix of the steps of `plan`: the order is the
/// protocol's, nothing is skipped. `Err` names the first step out of order.
pub fn check_order(plan: Plan, performed: &[Step]) -> Result<(), Step> {
    let want = steps_of(plan);
    for (i, s) in performed.iter().enumerate() {
        if want.get(i) != Some(s) {
            return Err(*s);
        }
    }
    Ok(())
}

/// Whether the recovery-directory slot of a new publication is charged
/// once `done` has completed: from the rename on, and kept after any later
/// failure.
pub fn slot_charged(done: Option<Step>) -> bool {
    matches!(done, Some(s) if s >= Step::Rename)
}

/// Why the protocol refused a publication. Nothing was staged or written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Error)]
pub enum ProtocolError {
    /// Another digest's publication failed after its rename and is pending
    /// reconciliation: retry that exact release first.
    #[error("Unavailable: release-publication-pending: {pending} must be retried before another publication")]
    Unavailable {
        /// The pending digest.
        pending: Sha256,
    },
    /// A completed release with this digest exists with different
    /// metadata or manifest.
    #[error("AlreadyExists: release {digest} exists with different content")]
    DigestConflict {
        /// The digest.
        digest: Sha256,
    },
    /// The reference is held by another digest (a member, a pending
    /// release, or an orphan completed directory that reserves it).
    #[error("AlreadyExists: reference is held by release {owner}")]
    ReferenceConflict {
        /// The digest holding the reference.
        owner: Sha256,
    },
}

/// The stable reason of [`ProtocolError::Unavailable`].
pub const PUBLICATION_PENDING: &str = "release-publication-pending";

/// What the gate says about a publication of one digest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Admission {
    /// No publication is pending.
    Open,
    /// This digest is the pending one: the publication is its exact retry
    /// and must reconcile content and lifecycle membership before adoption.
    Retry,
}

/// The pending gate. Held under the writer mutex together with the catalog
/// usage; in memory only (a reopen recovers from disk and starts open).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Gate {
    /// The digest whose publication passed its rename and has not been
    /// adopted or reconciled.
    pub pending: Option<Sha256>,
}

impl Gate {
    /// An open gate.
    pub const fn new() -> Self {
        Gate { pending: None }
    }

    /// Admits a publication of `digest`: [`Admission::Open`] when nothing is
    /// pending, [`Admission::Retry`] for the pending digest itself, and
    /// [`ProtocolError::Unavailable`] for every other digest.
    pub fn admit(&self, digest: &Sha256) -> Result<Admission, ProtocolError> {
        match self.pending {
            None => Ok(Admission::Open),
            Some(p) if p == *digest => Ok(Admission::Retry),
            Some(pending) => Err(ProtocolError::Unavailable { pending }),
        }
    }

    /// The rename of `digest` succeeded: it is pending until adopted.
    pub fn on_renamed(&mut self, digest: &Sha256) {
        self.pending = Some(*digest);
    }

    /// A step past the rename failed for `digest` (verify, parent fsync,
    /// lifecycle commit, adoption): it stays pending. Never clears.
    pub fn on_failure_after_rename(&mut self, digest: &Sha256) {
        self.pending = Some(*digest);
    }

    /// `digest` was adopted (a new publication) or reconciled (an exact
    /// retry): the gate opens if it was the pending one.
    pub fn on_reconciled(&mut self, digest: &Sha256) {
        if self.pending == Some(*digest) {
            self.pending = None;
        }
    }

    /// Whether any publication is pending.
    pub fn is_pending(&self) -> bool {
        self.pending.is_some()
    }
}

/// Where an existing completed directory with the publication's digest
/// stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExistingKind {
    /// Adopted into the index (member, revoked or retired).
    Adopted,
    /// Renamed into place by this handle, not yet adopted (the gate's
    /// pending digest).
    Pending,
    /// Found completed at open with no lifecycle record: invisible, reserves
    /// its reference.
    Orphan,
}

/// A completed directory with the publication's digest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Existing {
    /// Its standing.
    pub kind: ExistingKind,
    /// Whether its metadata and manifest equal the publication's exactly
    /// (the component is equal by digest).
    pub identical: bool,
}

/// What the catalog knows that bears on one publication.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Facts {
    /// The release digest.
    pub digest: Sha256,
    /// An existing completed directory with that digest, if any.
    pub existing: Option<Existing>,
    /// The digest currently holding the publication's reference (adopted,
    /// pending or orphan), if any.
    pub reference_owner: Option<Sha256>,
}

/// What a publication will do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Plan {
    /// A new release: stage, rename, verify, sync, commit, adopt
    /// ([`PUBLICATION_STEPS`]); charges a new slot.
    New,
    /// An identical republication of an adopted release: verify and return
    /// ([`NOOP_STEPS`]); changes nothing, clears no revocation.
    Noop,
    /// The directory exists but is not adopted (an exact pending retry, or
    /// an orphan): verify, sync, commit membership, adopt
    /// ([`RECONCILE_STEPS`]); reuses its slot even at the limit.
    Reconcile,
}

impl Plan {
    /// How this plan is charged against the catalog's bounds: a new release
    /// takes a new slot; an identical republication or a reconciliation
    /// reuses the slot its directory already holds.
    pub fn placement(self) -> Placement {
        match self {
            Plan::New => Placement::New,
            Plan::Noop | Plan::Reconcile => Placement::Existing,
        }
    }

    /// Whether a failure at `step` of a publication with this plan leaves
    /// the digest pending (the gate's `on_failure_after_rename`): its
    /// destination may exist. For a new release, from the first step past
    /// the rename on ([`Step::past_rename`]); for a reconciliation, at any
    /// step (its directory already exists); for a no-op, never (it changes
    /// nothing).
    pub fn failure_leaves_pending(self, step: Step) -> bool {
        match self {
            Plan::New => step.past_rename(),
            Plan::Reconcile => true,
            Plan::Noop => false,
        }
    }
}

/// Plans a publication. The gate is asked first: while a digest is pending
/// every other digest is [`ProtocolError::Unavailable`], whatever else is
/// true. Then different content under an existing digest, or a reference
/// held by another digest, is a conflict.
pub fn plan_publication(gate: &Gate, facts: &Facts) -> Result<Plan, ProtocolError> {
    let admission = gate.admit(&facts.digest)?;
    if let Some(owner) = facts.reference_owner {
        if owner != facts.digest {
            return Err(ProtocolError::ReferenceConflict { owner });
        }
    }
    match (admission, facts.existing) {
        (_, Some(e)) if !e.identical => Err(ProtocolError::DigestConflict {
            digest: facts.digest,
        }),
        (Admission::Retry, _) => Ok(Plan::Reconcile),
        (Admission::Open, None) => Ok(Plan::New),
        (Admission::Open, Some(e)) => match e.kind {
            ExistingKind::Adopted => Ok(Plan::Noop),
            ExistingKind::Pending | ExistingKind::Orphan => Ok(Plan::Reconcile),
        },
    }
}

/// An entry found directly under `releases/` at open, as the shell probed
/// it (without reading more than the COMPLETE record).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe<'a> {
    /// The entry's name.
    pub name: &'a str,
    /// Whether it is a real directory (not a symbolic link).
    pub is_dir: bool,
    /// What its `COMPLETE` entry is.
    pub complete: CompleteProbe,
}

/// The `COMPLETE` entry of a probed directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CompleteProbe {
    /// No such entry.
    Missing,
    /// Present but not a regular file (a directory, a symbolic link).
    NotRegular,
    /// A regular file, decoded (the length was checked before reading).
    Decoded(Result<CompleteRecord, CompleteError>),
}

/// What a recovered entry is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recovered {
    /// A digest-named directory with a decoded record: verify it in full,
    /// then it is a completed release.
    Completed(Sha256, CompleteRecord),
    /// Not digest-named: invisible incomplete debris. Counts toward
    /// `max_recovery_directories`, never the index.
    Debris,
    /// A digest-named directory with a missing or bad record: the open
    /// fails (publication writes the record before the rename, so this is
    /// corruption, never silently dropped).
    Corrupt(RecoveryError),
}

/// Why recovery refused a digest-named directory. Opening fails.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RecoveryError {
    /// The record is missing.
    #[error("CorruptArtifact: release {0} has no completion record")]
    MissingComplete(Sha256),
    /// `COMPLETE` is not a regular file.
    #[error("CorruptArtifact: completion record of {0} is not a regular file")]
    CompleteNotRegular(Sha256),
    /// The record did not decode (including the legacy marker).
    #[error("{1} (release {0})")]
    BadComplete(Sha256, CompleteError),
    /// A digest-named entry that is not a directory.
    #[error("CorruptArtifact: release {0} is not a directory")]
    NotADirectory(Sha256),
    /// The record names another digest than the directory.
    #[error("CorruptArtifact: completion record of {0} names another release")]
    WrongDigest(Sha256),
}

/// Classifies an entry found under `releases/` at open.
pub fn classify_entry(probe: &Probe<'_>) -> Recovered {
    let Some(digest) = Sha256::parse_hex(probe.name) else {
        return Recovered::Debris;
    };
    if !probe.is_dir {
        return Recovered::Corrupt(RecoveryError::NotADirectory(digest));
    }
    match &probe.complete {
        CompleteProbe::Missing => Recovered::Corrupt(RecoveryError::MissingComplete(digest)),
        CompleteProbe::NotRegular => Recovered::Corrupt(RecoveryError::CompleteNotRegular(digest)),
        CompleteProbe::Decoded(Err(e)) => {
            Recovered::Corrupt(RecoveryError::BadComplete(digest, e.clone()))
        }
        CompleteProbe::Decoded(Ok(r)) if r.component_digest != digest => {
            Recovered::Corrupt(RecoveryError::WrongDigest(digest))
        }
        CompleteProbe::Decoded(Ok(r)) => Recovered::Completed(digest, *r),
    }
}

/// The standing of a verified completed directory after recovery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecoveredStanding {
    /// Named by lifecycle state: adopted with this membership.
    Adopted(Membership),
    /// Not named: no membership, invisible, but reserves its reference.
    Orphan,
}

/// Whether a verified completed directory is adopted at open: only when the
/// authoritative lifecycle state names it. A completed directory alone does
/// not authorize adoption.
pub fn recovered_membership(lifecycle: &LifecycleState, digest: &Sha256) -> RecoveredStanding {
    lifecycle
        .membership(digest)
        .map_or(RecoveredStanding::Orphan, RecoveredStanding::Adopted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release::lifecycle::LifecycleOp;

    fn d(n: u8) -> Sha256 {
        Sha256([n; 32])
    }

    #[test]
    fn steps_walk_in_order_and_complete_precedes_rename() {
        let mut walked = Vec::new();
        let mut done = None;
        while let Some(s) = next_step(done) {
            walked.push(s);
            done = Some(s);
        }
        assert_eq!(walked, PUBLICATION_STEPS);
        assert!(Step::WriteComplete < Step::Rename);
        assert_eq!(Step::Rename.requires(), Some(Step::SyncStage));
        assert_eq!(Step::WriteComplete.requires(), Some(Step::WriteComponent));
        assert_eq!(Step::Validate.requires(), None);
        assert!(!Step::Rename.past_rename() && Step::Verify.past_rename());
        assert!(!slot_charged(Some(Step::SyncStage)) && slot_charged(Some(Step::Verify)));
        assert_eq!(check_order(Plan::New, &PUBLICATION_STEPS[..5]), Ok(()));
        let skipped = [Step::Validate, Step::Admit, Step::CreateStage, Step::Rename];
        assert_eq!(check_order(Plan::New, &skipped), Err(Step::Rename));
        assert_eq!(check_order(Plan::Noop, &NOOP_STEPS), Ok(()));
        assert_eq!(
            next_in(&RECONCILE_STEPS, Some(Step::Admit)),
            Some(Step::Verify)
        );
    }

    #[test]
    fn every_step_has_its_own_stable_name() {
        let names: Vec<&str> = PUBLICATION_STEPS.iter().map(Step::as_str).collect();
        let distinct: std::collections::BTreeSet<&str> = names.iter().copied().collect();
        assert_eq!(distinct.len(), PUBLICATION_STEPS.len(), "{names:?}");
        for n in &names {
            assert!(
                !n.is_empty() && n.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'),
                "{n:?}"
            );
        }
        assert_eq!(Step::CreateStage.as_str(), "create-stage");
        assert_eq!(Step::CommitLifecycle.as_str(), "commit-lifecycle");
    }

    #[test]
    fn which_failures_leave_a_publication_pending() {
        for step in PUBLICATION_STEPS {
            assert_eq!(Plan::New.failure_leaves_pending(step), step.past_rename());
            assert!(Plan::Reconcile.failure_leaves_pending(step), "{step:?}");
            assert!(!Plan::Noop.failure_leaves_pending(step), "{step:?}");
        }
        assert!(!Plan::New.failure_leaves_pending(Step::Rename));
        assert!(Plan::New.failure_leaves_pending(Step::Verify));
    }

    #[test]
    fn a_failure_after_the_rename_leaves_the_digest_pending() {
        let mut g = Gate::new();
        assert!(!g.is_pending(), "a new gate is open");
        g.on_failure_after_rename(&d(3));
        assert_eq!(g.admit(&d(3)), Ok(Admission::Retry));
        assert!(g.admit(&d(4)).is_err());
    }

    #[test]
    fn the_gate_blocks_every_other_digest_until_reconciled() {
        let mut g = Gate::new();
        assert_eq!(g.admit(&d(1)), Ok(Admission::Open));
        g.on_renamed(&d(1));
        assert_eq!(g.pending, Some(d(1)), "a rename leaves its digest pending");
        g.on_failure_after_rename(&d(1));
        assert_eq!(
            g.admit(&d(2)),
            Err(ProtocolError::Unavailable { pending: d(1) })
        );
        assert_eq!(g.admit(&d(1)), Ok(Admission::Retry));
        g.on_reconciled(&d(2));
        assert!(g.is_pending());
        g.on_reconciled(&d(1));
        assert_eq!(g.admit(&d(2)), Ok(Admission::Open));
    }

    #[test]
    fn planning_orders_gate_then_conflicts() {
        let mut g = Gate::new();
        let fresh = Facts {
            digest: d(1),
            existing: None,
            reference_owner: None,
        };
        assert_eq!(plan_publication(&g, &fresh), Ok(Plan::New));
        let taken = Facts {
            reference_owner: Some(d(9)),
            ..fresh
        };
        assert_eq!(
            plan_publication(&g, &taken),
            Err(ProtocolError::ReferenceConflict { owner: d(9) })
        );
        let adopted = |identical| Facts {
            existing: Some(Existing {
                kind: ExistingKind::Adopted,
                identical,
            }),
            reference_owner: Some(d(1)),
            ..fresh
        };
        assert_eq!(plan_publication(&g, &adopted(true)), Ok(Plan::Noop));
        assert_eq!(
            plan_publication(&g, &adopted(false)),
            Err(ProtocolError::DigestConflict { digest: d(1) })
        );
        let orphan = Facts {
            existing: Some(Existing {
                kind: ExistingKind::Orphan,
                identical: true,
            }),
            ..fresh
        };
        assert_eq!(plan_publication(&g, &orphan), Ok(Plan::Reconcile));
        g.on_failure_after_rename(&d(9));
        // Even a non-conflicting publication is refused while d(9) pends.
        assert_eq!(
            plan_publication(&g, &fresh),
            Err(ProtocolError::Unavailable { pending: d(9) })
        );
        let retry = Facts {
            digest: d(9),
            existing: Some(Existing {
                kind: ExistingKind::Pending,
                identical: true,
            }),
            reference_owner: Some(d(9)),
        };
        assert_eq!(plan_publication(&g, &retry), Ok(Plan::Reconcile));
        let changed = Facts {
            existing: Some(Existing {
                kind: ExistingKind::Pending,
                identical: false,
            }),
            ..retry
        };
        assert_eq!(
            plan_publication(&g, &changed),
            Err(ProtocolError::DigestConflict { digest: d(9) })
        );
    }

    #[test]
    fn recovery_classifies_every_entry_kind() {
        let digest = Sha256::of(b"c");
        let name = digest.hex();
        let record = CompleteRecord::for_release(b"c", b"m", b"n");
        let probe = |n: &'static str, complete| Probe {
            name: n,
            is_dir: true,
            complete,
        };
        let name: &'static str = Box::leak(name.into_boxed_str());
        assert_eq!(
            classify_entry(&probe(name, CompleteProbe::Decoded(Ok(record)))),
            Recovered::Completed(digest, record)
        );
        assert_eq!(
            classify_entry(&probe(name, CompleteProbe::Missing)),
            Recovered::Corrupt(RecoveryError::MissingComplete(digest))
        );
        let legacy = classify_entry(&probe(
            name,
            CompleteProbe::Decoded(Err(CompleteError::LegacyMarker)),
        ));
        // The stable message, then the release it concerns.
        assert!(matches!(&legacy, Recovered::Corrupt(e)
        if e.to_string() == format!(
            "CorruptArtifact: legacy catalog completion marker is unsupported (release {digest})"
        )));
        assert_eq!(
            classify_entry(&probe("stage-7", CompleteProbe::Missing)),
            Recovered::Debris
        );
        let other = CompleteRecord::for_release(b"x", b"m", b"n");
        assert_eq!(
            classify_entry(&probe(name, CompleteProbe::Decoded(Ok(other)))),
            Recovered::Corrupt(RecoveryError::WrongDigest(digest))
        );
        let mut lc = LifecycleState::default();
        assert_eq!(
            recovered_membership(&lc, &digest),
            RecoveredStanding::Orphan
        );
        lc.apply(LifecycleOp::Publish, &digest)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            recovered_membership(&lc, &digest),
            RecoveredStanding::Adopted(Membership::Member)
        );
    }
}
