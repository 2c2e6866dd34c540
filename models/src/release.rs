//! Model of release publication, crash and recovery on a local filesystem
//! (`custos_core::release::protocol` and `custos_core::release::lifecycle`):
//! staging and publication, the pending gate, recovery-directory capacity
//! and recovery at open.
//!
//! The catalog root is abstracted to what POSIX lets a crash keep or drop:
//!
//! - the staging directory of the publication in flight under `.tmp/` and
//!   its four files (`metadata.json`, `manifest.json`, `component.wasm`,
//!   `COMPLETE`), each with whether its **data** was fsynced and whether its
//!   **directory entry** was made durable by an fsync of its directory;
//! - the directories under `releases/` (one per digest, plus optionally one
//!   non-digest incomplete directory left by an earlier run), each with
//!   whether its entry in `releases/` is durable — a rename is not durable
//!   until `releases/` is fsynced;
//! - the lifecycle membership file, committed atomically and durably (a
//!   failed commit may or may not have landed);
//! - the handle's volatile state: the in-memory index, the pending gate, the
//!   recovery-directory count, what it knows of renamed and orphan
//!   directories. A crash drops all of it.
//!
//! A crash keeps what is durable; for every volatile entry it chooses
//! whether the entry survives, and for every surviving file whose data was
//! not fsynced whether its bytes survive or are torn: each choice is a
//! separate successor. Reopening clears `.tmp/`, probes every entry under
//! `releases/` with the real [`protocol::classify_entry`], verifies each
//! completed one with the real [`CompleteRecord::verify`] and asks the real
//! [`protocol::recovered_membership`] whether it is adopted or an orphan.
//!
//! One publication runs at a time (the writer mutex). Its steps come from
//! the real [`protocol::next_step`] / [`protocol::next_in`] over
//! [`protocol::steps_of`] the plan the real [`protocol::plan_publication`]
//! returns; the pending gate is the real [`Gate`]; the recovery-directory
//! slot is charged when the real [`protocol::slot_charged`] says so. The
//! environment injects a failure at any I/O step, crashes between any two
//! steps, retries (an exact retry, a changed retry under the same digest, a
//! different digest under the same reference) and reads.
//!
//! Mutants are variations the model applies around those functions: a step
//! sequence with the rename before the COMPLETE record, a step sequence
//! without the parent fsync, a gate wrapper that clears on failure, a
//! recovery wrapper that adopts orphans, a slot-charging wrapper, a
//! reconciliation sequence without the lifecycle commit, a fact lookup
//! that forgets orphans, and two shell steps left out (the component's
//! fsync, the staging directory's fsync).

use custos_core::release::complete::{self, CompleteRecord, StoredRelease};
use custos_core::release::lifecycle::{LifecycleOp, LifecycleState, Membership};
use custos_core::release::protocol::{
    self, Admission, CompleteProbe, Existing, ExistingKind, Facts, Gate, Plan, Probe,
    ProtocolError, Recovered, RecoveredStanding, Step,
};
use custos_core::release::Sha256;
use stateright::{Model, Property};

use crate::Bound;

/// The digests in play.
pub const DIGESTS: usize = 2;

/// The files of a release directory, in the order the protocol writes them.
pub const FILES: [&str; 4] = [
    "metadata.json",
    "manifest.json",
    "component.wasm",
    "COMPLETE",
];

/// The index of `COMPLETE` in [`FILES`].
const COMPLETE_FILE: usize = 3;

/// The name of the non-digest incomplete directory some initial states hold
/// under `releases/`.
pub const DEBRIS_NAME: &str = "incomplete-0";

crate::mutants! {
    /// A defect the model can be made to exhibit, each a variation around the
    /// real protocol functions.
    pub enum Mutant {
        /// The step order is permuted: the rename happens after the staging
        /// fsync but before the COMPLETE record is written (into the renamed
        /// directory, whose entries are never fsynced again).
        RenameBeforeComplete => "rename-before-complete",
        /// The fsync of `releases/` is left out of every step sequence.
        NoParentSync => "parent-fsync-skipped",
        /// The gate clears on a failure after the rename instead of keeping the
        /// digest pending.
        GateClearsOnFailure => "gate-clears-on-failure",
        /// Recovery adopts an orphan completed directory as a member.
        RecoveryAdoptsOrphan => "recovery-adopts-orphan",
        /// The recovery-directory slot is charged at adoption, not at the rename.
        SlotChargedAtAdoption => "slot-charged-at-adoption",
        /// An exact pending retry adopts without committing lifecycle
        /// membership (the reconciliation sequence leaves the commit out).
        RetrySkipsLifecycle => "retry-skips-lifecycle-commit",
        /// The publication facts forget orphan directories found at recovery:
        /// an orphan no longer reserves its reference.
        OrphanReservesNothing => "orphan-reserves-no-reference",
        /// `component.wasm` is written but not fsynced before the COMPLETE
        /// record (a shell step left out).
        PayloadFsyncSkipped => "payload-fsync-skipped",
        /// The staging directory is not fsynced before the rename: the file
        /// entries inside it are not durable.
        StageSyncSkipped => "staging-fsync-skipped",
    }
}

/// One file of a directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum File {
    /// No entry.
    Absent,
    /// Present with the publication's bytes in the page cache.
    Live {
        /// The data was fsynced.
        data: bool,
        /// The directory entry was made durable by a directory fsync.
        entry: bool,
    },
    /// Present after a crash with its unsynced bytes lost (empty or torn).
    Torn,
}

/// A release directory: in `.tmp/` while staged, under `releases/<hex>/`
/// once renamed (the same inode).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Dir {
    /// The request whose bytes its files hold.
    pub req: u8,
    /// Its entry under `releases/` is durable (fsync of `releases/`).
    pub entry: bool,
    /// Its files, in [`FILES`] order.
    pub files: [File; 4],
}

/// The handle's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Handle {
    /// Open and serving.
    Open,
    /// Crashed: the process is gone; reopen runs recovery.
    Closed,
    /// Recovery refused to open the root.
    Failed,
}

/// The publication in flight (under the writer mutex).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pub {
    /// The request published.
    pub req: u8,
    /// The plan, once admitted.
    pub plan: Option<Plan>,
    /// The last completed step.
    pub done: Option<Step>,
    /// The gate answered `Retry`: this is the exact retry of a pending one.
    pub retry: bool,
    /// This publication renamed its directory into `releases/`.
    pub renamed: bool,
    /// Its recovery-directory slot is charged.
    pub charged: bool,
}

/// What a crash does to one digest's directory under `releases/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fate {
    /// Nothing volatile: the directory (or its absence) is as it was.
    Stable,
    /// Its un-fsynced rename is lost: the directory is back in `.tmp/`.
    Dropped,
    /// The directory survives; `lost` (a bitmask over [`FILES`]) names the
    /// files whose un-fsynced entries are lost, `torn` those whose
    /// un-fsynced bytes are lost.
    Kept {
        /// Files whose entries vanish.
        lost: u8,
        /// Files whose bytes are lost.
        torn: u8,
    },
}

/// An action of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A publisher starts publishing request `req` (its first step,
    /// validation, runs).
    Start {
        /// Index into the request menu.
        req: u8,
    },
    /// The publication in flight completes its next step.
    Do(Step),
    /// The publication's next step fails. For the lifecycle commit,
    /// `landed` says whether the commit reached disk anyway.
    Fail {
        /// The step that fails.
        step: Step,
        /// The failed step's write landed (lifecycle commit only).
        landed: bool,
    },
    /// The process crashes; each digest directory meets its fate.
    Crash([Fate; DIGESTS]),
    /// The root is reopened: recovery runs.
    Recover,
    /// A reader resolves a digest.
    Read {
        /// The digest index.
        digest: u8,
    },
}

mod seen {
    pub const ACKED: u16 = 1 << 0;
    pub const RECONCILED: u16 = 1 << 1;
    pub const TMP_DEBRIS_CLEARED: u16 = 1 << 2;
    pub const ORPHAN_RECOVERED: u16 = 1 << 3;
    pub const UNAVAILABLE: u16 = 1 << 4;
    pub const ORPHAN_RESERVES: u16 = 1 << 5;
    pub const UNACKED_RECOVERED: u16 = 1 << 6;
    pub const CAPACITY: u16 = 1 << 7;
    pub const READ_AFTER_CRASH: u16 = 1 << 8;
    pub const DIGEST_CONFLICT: u16 = 1 << 9;
}

/// The global state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SysState {
    // ----- on disk -----
    /// `releases/<hex>/` per digest.
    pub releases: [Option<Dir>; DIGESTS],
    /// A non-digest incomplete directory under `releases/` (durable).
    pub debris: bool,
    /// The staging directory of the publication in flight.
    pub stage: Option<Dir>,
    /// Abandoned staging directories remain under `.tmp/`.
    pub tmp_debris: bool,
    /// The lifecycle membership file (durable on commit).
    pub lifecycle: LifecycleState,
    // ----- the handle (volatile) -----
    /// Open, crashed or failed.
    pub handle: Handle,
    /// The in-memory index: per digest, the adopted request and membership.
    pub index: [Option<(u8, Membership)>; DIGESTS],
    /// Completed directories this handle renamed and has not adopted.
    pub renamed: [Option<u8>; DIGESTS],
    /// Orphan completed directories found at recovery.
    pub orphans: [Option<u8>; DIGESTS],
    /// The pending gate.
    pub gate: Gate,
    /// Directories under `releases/` the handle has charged.
    pub used_slots: u8,
    /// The publication in flight.
    pub active: Option<Pub>,
    // ----- bounds -----
    /// Publications started.
    pub starts: u8,
    /// Failures injected.
    pub fails: u8,
    /// Crashes.
    pub crashes: u8,
    // ----- monitors -----
    /// Per digest, the request whose publication was acknowledged.
    pub acked: [Option<u8>; DIGESTS],
    /// The digest of a publication that failed after its rename and has not
    /// been adopted since (this handle's lifetime).
    pub unreconciled: Option<u8>,
    /// Outcomes reached.
    pub seen: u16,
}

/// One publication request: a digest, a reference, and the exact bytes.
#[derive(Clone, Debug)]
pub struct Request {
    /// The digest index.
    pub digest: u8,
    /// The reference index.
    pub reference: u8,
    /// `component.wasm`.
    pub component: Vec<u8>,
    /// `metadata.json`.
    pub metadata: Vec<u8>,
    /// `manifest.json` (names the reference).
    pub manifest: Vec<u8>,
    /// The COMPLETE record for those bytes.
    pub record: CompleteRecord,
    /// Its canonical encoding.
    pub record_bytes: Vec<u8>,
}

/// The model: its bound and, optionally, the defect it exhibits.
#[derive(Clone, Debug)]
pub struct ReleaseModel {
    /// The request menu publishers pick from.
    pub requests: Vec<Request>,
    /// The digests.
    pub digests: [Sha256; DIGESTS],
    /// Their directory names.
    pub names: [String; DIGESTS],
    /// Publications (including retries) that may start.
    pub max_starts: u8,
    /// Failures that may be injected.
    pub max_fails: u8,
    /// Crashes.
    pub max_crashes: u8,
    /// `max_recovery_directories`.
    pub capacity: u8,
    /// Whether an initial state holds a non-digest incomplete directory.
    pub with_debris: bool,
    /// The step sequence of a new publication.
    pub new_steps: Vec<Step>,
    /// The step sequence of a reconciliation.
    pub reconcile_steps: Vec<Step>,
    /// The defect applied, if any.
    pub mutant: Option<Mutant>,
}

fn request(digest: u8, reference: u8, variant: u8) -> Request {
    let component = format!("component {}", ["A", "B"][usize::from(digest) % 2]).into_bytes();
    let metadata = format!("{{\"descriptor\":{digest},\"variant\":{variant}}}").into_bytes();
    let manifest =
        format!("{{\"reference\":\"ref-{reference}\",\"variant\":{variant}}}").into_bytes();
    let record = CompleteRecord::for_release(&component, &metadata, &manifest);
    Request {
        digest,
        reference,
        record_bytes: record.encode(),
        component,
        metadata,
        manifest,
        record,
    }
}

fn bit(i: usize) -> u8 {
    1u8 << i
}

/// Every combination of one option per slot.
fn product<T: Copy>(options: &[Vec<T>]) -> Vec<Vec<T>> {
    let mut out: Vec<Vec<T>> = vec![Vec::new()];
    for opts in options {
        let mut next = Vec::with_capacity(out.len() * opts.len());
        for prefix in &out {
            for o in opts {
                let mut p = prefix.clone();
                p.push(*o);
                next.push(p);
            }
        }
        out = next;
    }
    out
}

impl ReleaseModel {
    fn req(&self, r: u8) -> Option<&Request> {
        self.requests.get(usize::from(r))
    }

    fn digest_of(&self, r: u8) -> usize {
        self.req(r).map_or(0, |q| usize::from(q.digest))
    }

    /// Same metadata and manifest bytes (the component is equal by digest).
    fn identical(&self, a: u8, b: u8) -> bool {
        match (self.req(a), self.req(b)) {
            (Some(x), Some(y)) => {
                x.digest == y.digest && x.metadata == y.metadata && x.manifest == y.manifest
            }
            _ => false,
        }
    }

    fn reference_of(&self, r: u8) -> Option<u8> {
        self.req(r).map(|q| q.reference)
    }

    /// The steps of `plan` as this model walks them.
    fn steps(&self, plan: Plan) -> &[Step] {
        match plan {
            Plan::New => &self.new_steps,
            Plan::Reconcile => &self.reconcile_steps,
            Plan::Noop => protocol::steps_of(Plan::Noop),
        }
    }

    /// The next step of the publication in flight.
    fn next(&self, p: &Pub) -> Option<Step> {
        match p.plan {
            None => protocol::next_step(p.done),
            Some(plan) => protocol::next_in(self.steps(plan), p.done),
        }
    }

    // ----- the wrapped decisions -----

    fn on_failure_after_rename(&self, gate: &mut Gate, d: &Sha256) {
        if self.mutant == Some(Mutant::GateClearsOnFailure) {
            gate.on_reconciled(d);
        } else {
            gate.on_failure_after_rename(d);
        }
    }

    fn slot_charged(&self, done: Option<Step>) -> bool {
        if self.mutant == Some(Mutant::SlotChargedAtAdoption) {
            matches!(done, Some(Step::Adopt))
        } else {
            protocol::slot_charged(done)
        }
    }

    fn recovered_membership(&self, lc: &LifecycleState, d: &Sha256) -> RecoveredStanding {
        match protocol::recovered_membership(lc, d) {
            RecoveredStanding::Orphan if self.mutant == Some(Mutant::RecoveryAdoptsOrphan) => {
                RecoveredStanding::Adopted(Membership::Member)
            }
            standing => standing,
        }
    }

    /// What the handle knows about a publication of request `r`.
    fn facts(&self, s: &SysState, r: u8) -> Facts {
        let d = self.digest_of(r);
        let orphans = if self.mutant == Some(Mutant::OrphanReservesNothing) {
            [None; DIGESTS]
        } else {
            s.orphans
        };
        let known = |e: usize| -> Option<(ExistingKind, u8)> {
            if let Some((q, _)) = s.index[e] {
                Some((ExistingKind::Adopted, q))
            } else if let Some(q) = s.renamed[e] {
                Some((ExistingKind::Pending, q))
            } else {
                orphans[e].map(|q| (ExistingKind::Orphan, q))
            }
        };
        let existing = known(d).map(|(kind, q)| Existing {
            kind,
            identical: self.identical(q, r),
        });
        let reference = self.reference_of(r);
        let reference_owner = (0..DIGESTS)
            .find(|e| known(*e).is_some_and(|(_, q)| self.reference_of(q) == reference))
            .map(|e| self.digests[e]);
        Facts {
            digest: self.digests[d],
            existing,
            reference_owner,
        }
    }

    // ----- reading the abstract filesystem -----

    /// The bytes a reader finds in file `f` of `dir` (`None`: no entry).
    fn file_bytes(&self, dir: &Dir, f: usize) -> Option<&[u8]> {
        let q = self.req(dir.req)?;
        match dir.files.get(f)? {
            File::Absent => None,
            File::Torn => Some(&[]),
            File::Live { .. } => Some(match f {
                0 => &q.metadata,
                1 => &q.manifest,
                2 => &q.component,
                _ => &q.record_bytes,
            }),
        }
    }

    /// The probe recovery takes of `releases/<hex>/` holding `dir`.
    fn probe<'a>(&'a self, d: usize, dir: &Dir) -> Probe<'a> {
        let complete = match self.file_bytes(dir, COMPLETE_FILE) {
            None => CompleteProbe::Missing,
            Some(b) => CompleteProbe::Decoded(complete::decode(b)),
        };
        Probe {
            name: &self.names[d],
            is_dir: true,
            complete,
        }
    }

    /// Verifies `record` against the bytes stored in `dir` (as read back)
    /// and the descriptor of the request that wrote it.
    fn verify(&self, d: usize, dir: &Dir, record: &CompleteRecord) -> bool {
        let (Some(q), Some(meta), Some(man), Some(comp)) = (
            self.req(dir.req),
            self.file_bytes(dir, 0),
            self.file_bytes(dir, 1),
            self.file_bytes(dir, 2),
        ) else {
            return false;
        };
        record
            .verify(&StoredRelease {
                directory_name: &self.names[d],
                descriptor_digest: self.digests[usize::from(q.digest)],
                descriptor_size_bytes: q.record.component_size_bytes,
                component: comp,
                metadata: meta,
                manifest: man,
            })
            .is_ok()
    }

    /// The publication's read-back of its destination (live view).
    fn verify_live(&self, d: usize, dir: &Dir) -> bool {
        match protocol::classify_entry(&self.probe(d, dir)) {
            Recovered::Completed(_, record) => self.verify(d, dir, &record),
            _ => false,
        }
    }

    /// Whether `releases/<d>/` survives any crash holding request `r`'s
    /// exact bytes: its entry and every file's entry and data are durable,
    /// and it verifies.
    fn durable_release(&self, s: &SysState, d: usize, r: u8) -> bool {
        let Some(dir) = &s.releases[d] else {
            return false;
        };
        dir.entry
            && dir.req == r
            && dir.files.iter().all(|f| {
                *f == File::Live {
                    data: true,
                    entry: true,
                }
            })
            && self.verify_live(d, dir)
    }

    /// What a reader resolves for digest `d`: an adopted, eligible release.
    pub fn resolve(&self, s: &SysState, d: usize) -> Option<u8> {
        if s.handle != Handle::Open {
            return None;
        }
        match s.index[d] {
            Some((r, m)) if m.is_eligible() => Some(r),
            _ => None,
        }
    }

    /// The entries directly under `releases/`.
    fn entries(s: &SysState) -> usize {
        usize::from(s.debris) + s.releases.iter().flatten().count()
    }

    // ----- transitions -----

    fn fates(dir: &Option<Dir>) -> Vec<Fate> {
        let Some(dir) = dir else {
            return vec![Fate::Stable];
        };
        let mut per_file: Vec<Vec<(bool, bool)>> = Vec::new(); // (lost, torn)
        let mut volatile = !dir.entry;
        for f in &dir.files {
            let mut opts = Vec::new();
            match f {
                File::Live { data, entry } => {
                    if !entry {
                        opts.push((true, false));
                    }
                    opts.push((false, false));
                    if !data {
                        opts.push((false, true));
                    }
                    volatile |= !entry || !data;
                }
                File::Absent | File::Torn => opts.push((false, false)),
            }
            per_file.push(opts);
        }
        if !volatile {
            return vec![Fate::Stable];
        }
        let mut out = Vec::new();
        if !dir.entry {
            out.push(Fate::Dropped);
        }
        for combo in product(&per_file) {
            let mut lost = 0u8;
            let mut torn = 0u8;
            for (i, (l, t)) in combo.iter().enumerate() {
                if *l {
                    lost |= bit(i);
                }
                if *t {
                    torn |= bit(i);
                }
            }
            out.push(Fate::Kept { lost, torn });
        }
        out
    }

    fn crash(&self, s: &mut SysState, fates: [Fate; DIGESTS]) {
        for (slot, fate) in s.releases.iter_mut().zip(fates) {
            match fate {
                Fate::Stable => {}
                Fate::Dropped => {
                    // Back under .tmp/: cleared at reopen.
                    *slot = None;
                    s.tmp_debris = true;
                }
                Fate::Kept { lost, torn } => {
                    if let Some(dir) = slot {
                        dir.entry = true;
                        for (i, f) in dir.files.iter_mut().enumerate() {
                            if lost & bit(i) != 0 {
                                *f = File::Absent;
                            } else if torn & bit(i) != 0 {
                                *f = File::Torn;
                            } else if matches!(f, File::Live { .. }) {
                                *f = File::Live {
                                    data: true,
                                    entry: true,
                                };
                            }
                        }
                    }
                }
            }
        }
        if s.stage.take().is_some() {
            s.tmp_debris = true;
        }
        s.handle = Handle::Closed;
        s.index = [None; DIGESTS];
        s.renamed = [None; DIGESTS];
        s.orphans = [None; DIGESTS];
        s.gate = Gate::new();
        s.used_slots = 0;
        s.active = None;
        s.unreconciled = None;
        s.crashes += 1;
    }

    /// Reopen: clear `.tmp/`, classify and verify every entry under
    /// `releases/`, rebuild the index from lifecycle membership, recount
    /// the recovery directories. The open fails on a corrupt digest
    /// directory (missing or bad COMPLETE, bytes that do not verify), on two
    /// completed directories under one reference, and on lifecycle state
    /// naming a release with no completed directory.
    fn recover(&self, s: &mut SysState) {
        let cleared_tmp = s.tmp_debris;
        s.tmp_debris = false;
        let mut used = 0u8;
        let mut ok = true;
        if s.debris {
            let probe = Probe {
                name: DEBRIS_NAME,
                is_dir: true,
                complete: CompleteProbe::Missing,
            };
            ok &= protocol::classify_entry(&probe) == Recovered::Debris;
            used += 1;
        }
        let mut completed: Vec<(usize, u8)> = Vec::new();
        for d in 0..DIGESTS {
            let Some(dir) = s.releases[d] else { continue };
            used += 1;
            match protocol::classify_entry(&self.probe(d, &dir)) {
                Recovered::Completed(digest, record)
                    if digest == self.digests[d] && self.verify(d, &dir, &record) =>
                {
                    completed.push((d, dir.req));
                }
                _ => ok = false,
            }
        }
        // Reference uniqueness over every completed directory: conflicting
        // completed mappings fail the open.
        for (i, (d, r)) in completed.iter().enumerate() {
            for (e, q) in completed.iter().skip(i + 1) {
                if d != e && self.reference_of(*r) == self.reference_of(*q) {
                    ok = false;
                }
            }
        }
        // Lifecycle state that names a release with no completed directory
        // fails the open (membership is authoritative; its content is gone).
        for (d, digest) in self.digests.iter().enumerate() {
            if s.lifecycle.membership(digest).is_some() && !completed.iter().any(|(e, _)| *e == d) {
                ok = false;
            }
        }
        if !ok {
            s.handle = Handle::Failed;
            return;
        }
        for (d, r) in completed {
            match self.recovered_membership(&s.lifecycle, &self.digests[d]) {
                RecoveredStanding::Adopted(m) => {
                    s.index[d] = Some((r, m));
                    if s.acked[d].is_none() {
                        s.seen |= seen::UNACKED_RECOVERED;
                    }
                }
                RecoveredStanding::Orphan => {
                    s.orphans[d] = Some(r);
                    s.seen |= seen::ORPHAN_RECOVERED;
                }
            }
        }
        if cleared_tmp {
            s.seen |= seen::TMP_DEBRIS_CLEARED;
        }
        s.used_slots = used;
        s.gate = Gate::new();
        s.handle = Handle::Open;
    }

    /// The publication in flight ends unacknowledged after `step` failed
    /// (or was refused).
    fn end_failed(&self, s: &mut SysState, p: &Pub, step: Step) {
        let d = self.digest_of(p.req);
        // The shell's rule, from core: which failure leaves the digest pending.
        if p.plan.is_some_and(|plan| plan.failure_leaves_pending(step)) {
            self.on_failure_after_rename(&mut s.gate, &self.digests[d]);
            s.unreconciled = Some(d as u8);
        }
        if s.stage.take().is_some() {
            s.tmp_debris = true;
        }
        s.active = None;
    }

    /// The directory the publication writes into.
    fn target<'s>(&self, s: &'s mut SysState, p: &Pub) -> Option<&'s mut Dir> {
        if p.renamed {
            s.releases[self.digest_of(p.req)].as_mut()
        } else {
            s.stage.as_mut()
        }
    }

    /// Performs `step` of the publication in flight.
    fn perform(&self, s: &mut SysState, mut p: Pub, step: Step) -> Option<()> {
        let d = self.digest_of(p.req);
        let digest = self.digests[d];
        match step {
            Step::Validate => {}
            Step::Admit => {
                if !self.admit(s, &mut p, &digest) {
                    return Some(());
                }
            }
            Step::CreateStage => {
                s.stage = Some(Dir {
                    req: p.req,
                    entry: false,
                    files: [File::Absent; 4],
                });
            }
            Step::WriteMetadata
            | Step::WriteManifest
            | Step::WriteComponent
            | Step::WriteComplete => self.write_file(s, &p, step)?,
            Step::SyncStage => {
                let dir = self.target(s, &p)?;
                for f in dir.files.iter_mut() {
                    if let File::Live { entry, .. } = f {
                        *entry = true;
                    }
                }
            }
            Step::Rename => {
                if s.releases[d].is_some() {
                    // rename(2) onto a non-empty directory fails: no
                    // destination is created.
                    self.end_failed(s, &p, step);
                    return Some(());
                }
                let mut dir = s.stage.take()?;
                dir.entry = false;
                s.releases[d] = Some(dir);
                s.gate.on_renamed(&digest);
                s.renamed[d] = Some(p.req);
                p.renamed = true;
            }
            Step::Verify => {
                let ok = s.releases[d].is_some_and(|dir| self.verify_live(d, &dir));
                if !ok {
                    self.end_failed(s, &p, step);
                    return Some(());
                }
            }
            Step::SyncReleases => {
                for dir in s.releases.iter_mut().flatten() {
                    dir.entry = true;
                }
            }
            Step::CommitLifecycle => {
                s.lifecycle.apply(LifecycleOp::Publish, &digest).ok()?;
            }
            Step::Adopt => Self::adopt(s, &p, d, &digest),
        }
        self.step_done(s, p, step, d);
        Some(())
    }

    /// A write step: the file `step` writes, written and fsynced into the
    /// publication's directory (None when there is no such directory).
    fn write_file(&self, s: &mut SysState, p: &Pub, step: Step) -> Option<()> {
        let f = match step {
            Step::WriteMetadata => 0,
            Step::WriteManifest => 1,
            Step::WriteComponent => 2,
            _ => COMPLETE_FILE,
        };
        let dir = self.target(s, p)?;
        // Written and fsynced; the entry waits for a directory fsync.
        let fsynced =
            !(step == Step::WriteComponent && self.mutant == Some(Mutant::PayloadFsyncSkipped));
        dir.files[f] = File::Live {
            data: fsynced,
            entry: false,
        };
        Some(())
    }

    /// The adoption step: release `d` becomes a member of the index under
    /// the publication's request, and is no longer renamed, orphaned or
    /// unreconciled.
    fn adopt(s: &mut SysState, p: &Pub, d: usize, digest: &Sha256) {
        s.index[d] = Some((p.req, Membership::Member));
        s.renamed[d] = None;
        s.orphans[d] = None;
        s.gate.on_reconciled(digest);
        if s.unreconciled == Some(d as u8) {
            s.unreconciled = None;
        }
    }

    /// The admission step: plans the publication through the real gate and
    /// protocol. False when the publication ends here (refused, or no slot
    /// left for a new release), with what the monitor saw.
    fn admit(&self, s: &mut SysState, p: &mut Pub, digest: &Sha256) -> bool {
        let admission = s.gate.admit(digest);
        match protocol::plan_publication(&s.gate, &self.facts(s, p.req)) {
            Err(e) => {
                match e {
                    ProtocolError::Unavailable { .. } => s.seen |= seen::UNAVAILABLE,
                    ProtocolError::DigestConflict { .. } => s.seen |= seen::DIGEST_CONFLICT,
                    ProtocolError::ReferenceConflict { owner } => {
                        if s.orphans
                            .iter()
                            .enumerate()
                            .any(|(e, o)| o.is_some() && self.digests[e] == owner)
                        {
                            s.seen |= seen::ORPHAN_RESERVES;
                        }
                    }
                }
                s.active = None;
                false
            }
            Ok(Plan::New) if s.used_slots >= self.capacity => {
                s.seen |= seen::CAPACITY;
                s.active = None;
                false
            }
            Ok(plan) => {
                p.plan = Some(plan);
                p.retry = admission == Ok(Admission::Retry);
                true
            }
        }
    }

    /// Records `step` of `p` (release `d`) as done: charges the slot when
    /// the step is the one that charges it, and acknowledges the
    /// publication after its last step.
    fn step_done(&self, s: &mut SysState, mut p: Pub, step: Step, d: usize) {
        p.done = Some(step);
        if p.plan == Some(Plan::New) && !p.charged && self.slot_charged(p.done) {
            p.charged = true;
            s.used_slots += 1;
        }
        if p.plan.is_some() && self.next(&p).is_none() {
            // The last step: the publication is acknowledged.
            let r = s.index[d].map_or(p.req, |(q, _)| q);
            s.acked[d] = Some(r);
            s.seen |= seen::ACKED;
            if p.retry {
                s.seen |= seen::RECONCILED;
            }
            s.active = None;
        } else {
            s.active = Some(p);
        }
    }
}

impl Model for ReleaseModel {
    type State = SysState;
    type Action = Action;

    fn init_states(&self) -> Vec<SysState> {
        let base = SysState {
            releases: [None; DIGESTS],
            debris: false,
            stage: None,
            tmp_debris: false,
            lifecycle: LifecycleState::default(),
            handle: Handle::Closed,
            index: [None; DIGESTS],
            renamed: [None; DIGESTS],
            orphans: [None; DIGESTS],
            gate: Gate::new(),
            used_slots: 0,
            active: None,
            starts: 0,
            fails: 0,
            crashes: 0,
            acked: [None; DIGESTS],
            unreconciled: None,
            seen: 0,
        };
        let mut out = Vec::new();
        for debris in [false, true] {
            if debris && !self.with_debris {
                continue;
            }
            let mut s = base.clone();
            s.debris = debris;
            self.recover(&mut s);
            out.push(s);
        }
        out
    }

    fn actions(&self, s: &SysState, actions: &mut Vec<Action>) {
        match s.handle {
            Handle::Failed => return,
            Handle::Closed => {
                actions.push(Action::Recover);
                return;
            }
            Handle::Open => {}
        }
        match &s.active {
            None => {
                if s.starts < self.max_starts {
                    for r in 0..self.requests.len() {
                        if let Ok(req) = u8::try_from(r) {
                            actions.push(Action::Start { req });
                        }
                    }
                }
            }
            Some(p) => {
                if let Some(step) = self.next(p) {
                    actions.push(Action::Do(step));
                    let io = !matches!(step, Step::Validate | Step::Admit);
                    if io && s.fails < self.max_fails {
                        actions.push(Action::Fail {
                            step,
                            landed: false,
                        });
                        if step == Step::CommitLifecycle {
                            actions.push(Action::Fail { step, landed: true });
                        }
                    }
                }
            }
        }
        if s.crashes < self.max_crashes {
            for a in Self::fates(&s.releases[0]) {
                for b in Self::fates(&s.releases[1]) {
                    actions.push(Action::Crash([a, b]));
                }
            }
        }
        if s.crashes > 0 && s.seen & seen::READ_AFTER_CRASH == 0 {
            for d in 0..DIGESTS {
                if s.acked[d].is_some() && self.resolve(s, d).is_some() {
                    if let Ok(digest) = u8::try_from(d) {
                        actions.push(Action::Read { digest });
                    }
                }
            }
        }
    }

    fn next_state(&self, s: &SysState, action: Action) -> Option<SysState> {
        let mut s = s.clone();
        match action {
            Action::Start { req } => {
                s.starts += 1;
                let p = Pub {
                    req,
                    plan: None,
                    done: None,
                    retry: false,
                    renamed: false,
                    charged: false,
                };
                let step = self.next(&p)?;
                self.perform(&mut s, p, step)?;
            }
            Action::Do(step) => {
                let p = s.active?;
                self.perform(&mut s, p, step)?;
            }
            Action::Fail { step, landed } => {
                let p = s.active?;
                s.fails += 1;
                if landed && step == Step::CommitLifecycle {
                    let digest = self.digests[self.digest_of(p.req)];
                    s.lifecycle.apply(LifecycleOp::Publish, &digest).ok()?;
                }
                self.end_failed(&mut s, &p, step);
            }
            Action::Crash(fates) => self.crash(&mut s, fates),
            Action::Recover => self.recover(&mut s),
            Action::Read { digest } => {
                self.resolve(&s, usize::from(digest))?;
                s.seen |= seen::READ_AFTER_CRASH;
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = safety();
        properties.extend(outcomes());
        properties
    }
}

/// The safety rules (`always`), in report order.
fn safety() -> Vec<Property<ReleaseModel>> {
    vec![
        Property::<ReleaseModel>::always(
            "an acknowledged publication is durable: present, complete and byte-identical in every image a crash can leave",
            |m, s| {
                (0..DIGESTS).all(|d| {
                    s.acked[d].is_none_or(|r| {
                        m.durable_release(s, d, r)
                            && s.lifecycle.membership(&m.digests[d]) == Some(Membership::Member)
                    })
                })
            },
        ),
        Property::<ReleaseModel>::always(
            "every acknowledged publication resolves to its exact bytes, after any crash and recovery",
            |m, s| {
                s.handle != Handle::Open
                    || (0..DIGESTS).all(|d| {
                        s.acked[d].is_none_or(|r| {
                            m.resolve(s, d).is_some_and(|q| m.identical(q, r))
                        })
                    })
            },
        ),
        Property::<ReleaseModel>::always(
            "nothing is visible whose membership is not committed or whose directory is not durable",
            |m, s| {
                (0..DIGESTS).all(|d| {
                    m.resolve(s, d).is_none_or(|r| {
                        s.lifecycle.membership(&m.digests[d]) == Some(Membership::Member)
                            && m.durable_release(s, d, r)
                    })
                })
            },
        ),
        Property::<ReleaseModel>::always(
            "recovery never fails: crashes leave only debris it tolerates",
            |_, s| s.handle != Handle::Failed,
        ),
        Property::<ReleaseModel>::always(
            "while a digest is pending after a post-rename failure, no other digest is admitted",
            |m, s| match (s.unreconciled, s.active) {
                (Some(pending), Some(p)) => {
                    p.plan.is_none() || m.digest_of(p.req) == usize::from(pending)
                }
                _ => true,
            },
        ),
        Property::<ReleaseModel>::always(
            "never two different contents under one reference",
            one_content_per_reference,
        ),
        Property::<ReleaseModel>::always(
            "the recovery-directory count equals the directories under releases/, within capacity",
            |m, s| {
                let n = ReleaseModel::entries(s);
                n <= usize::from(m.capacity)
                    && (s.handle != Handle::Open || usize::from(s.used_slots) == n)
            },
        ),
    ]
}

/// Whether every two complete directories under `releases/` that share a
/// reference hold identical contents.
fn one_content_per_reference(m: &ReleaseModel, s: &SysState) -> bool {
    let complete: Vec<u8> = s
        .releases
        .iter()
        .flatten()
        .filter(|dir| dir.files[COMPLETE_FILE] != File::Absent)
        .map(|dir| dir.req)
        .collect();
    complete.iter().enumerate().all(|(i, a)| {
        complete
            .iter()
            .skip(i + 1)
            .all(|b| m.reference_of(*a) != m.reference_of(*b) || m.identical(*a, *b))
    })
}

/// The outcomes the model must reach (`sometimes`), in report order.
fn outcomes() -> Vec<Property<ReleaseModel>> {
    vec![
        Property::<ReleaseModel>::sometimes("a publication is acknowledged", |_, s| {
            s.seen & seen::ACKED != 0
        }),
        Property::<ReleaseModel>::sometimes(
            "a post-rename failure is reconciled by an exact retry",
            |_, s| s.seen & seen::RECONCILED != 0,
        ),
        Property::<ReleaseModel>::sometimes(
            "staging debris a crash or failure left mid-publication is cleared by recovery",
            |_, s| s.seen & seen::TMP_DEBRIS_CLEARED != 0,
        ),
        Property::<ReleaseModel>::sometimes(
            "a crash leaves an orphan completed directory that recovery accounts for",
            |_, s| s.seen & seen::ORPHAN_RECOVERED != 0,
        ),
        Property::<ReleaseModel>::sometimes(
            "an orphan reserves its reference: another digest under it is refused",
            |_, s| s.seen & seen::ORPHAN_RESERVES != 0,
        ),
        Property::<ReleaseModel>::sometimes(
            "another digest is refused as unavailable while one is pending",
            |_, s| s.seen & seen::UNAVAILABLE != 0,
        ),
        Property::<ReleaseModel>::sometimes(
            "a publication whose acknowledgment failed after its commit is visible after recovery",
            |_, s| s.seen & seen::UNACKED_RECOVERED != 0,
        ),
        Property::<ReleaseModel>::sometimes(
            "different bytes under an existing digest are refused",
            |_, s| s.seen & seen::DIGEST_CONFLICT != 0,
        ),
        Property::<ReleaseModel>::sometimes(
            "a publication is refused at recovery-directory capacity",
            |_, s| s.seen & seen::CAPACITY != 0,
        ),
        Property::<ReleaseModel>::sometimes(
            "a reader resolves an acknowledged release after a crash and recovery",
            |_, s| s.seen & seen::READ_AFTER_CRASH != 0,
        ),
    ]
}

impl crate::family::MutantModel for ReleaseModel {
    type Mutant = Mutant;
    const NAME: &'static str = "release";
    const SUMMARY: &'static str = "release publication through crashes and failures: acknowledged releases survive byte-identical, nothing uncommitted is visible, recovery tolerates debris, the pending gate holds";

    fn at(bound: Bound) -> Result<Self, String> {
        // r0: digest A under ref-0; r1: digest B under ref-1; r2: digest B
        // under ref-0 (the reference of A, and other bytes than r1 under
        // B's digest); r3: digest A under ref-0 with changed metadata (a
        // changed retry under the same digest).
        let (menu, max_starts, max_fails, max_crashes): (&[(u8, u8, u8)], u8, u8, u8) = match bound
        {
            Bound::Ci => (&[(0, 0, 0), (1, 1, 0), (1, 0, 1), (0, 0, 1)], 4, 2, 2),
            Bound::Deep => (&[(0, 0, 0), (1, 1, 0), (1, 0, 1), (0, 0, 1)], 5, 3, 3),
        };
        let requests: Vec<Request> = menu.iter().map(|(d, r, v)| request(*d, *r, *v)).collect();
        let component = |d: u8| request(d, 0, 0).component;
        let digests = [Sha256::of(&component(0)), Sha256::of(&component(1))];
        let names = [digests[0].hex(), digests[1].hex()];
        Ok(ReleaseModel {
            requests,
            digests,
            names,
            max_starts,
            max_fails,
            max_crashes,
            capacity: 2,
            with_debris: true,
            new_steps: protocol::steps_of(Plan::New).to_vec(),
            reconcile_steps: protocol::steps_of(Plan::Reconcile).to_vec(),
            mutant: None,
        })
    }

    fn mutant_slot(&mut self) -> &mut Option<Mutant> {
        &mut self.mutant
    }

    /// Sets the slot and, for the mutants that reorder or drop a step of
    /// the protocol, rewrites the step lists the model runs.
    fn with_mutant(mut self, mutant: Mutant) -> Self {
        *self.mutant_slot() = Some(mutant);
        match mutant {
            Mutant::RenameBeforeComplete => {
                self.new_steps.retain(|s| *s != Step::WriteComplete);
                if let Some(i) = self.new_steps.iter().position(|s| *s == Step::Rename) {
                    self.new_steps.insert(i + 1, Step::WriteComplete);
                }
            }
            Mutant::NoParentSync => {
                self.new_steps.retain(|s| *s != Step::SyncReleases);
                self.reconcile_steps.retain(|s| *s != Step::SyncReleases);
            }
            Mutant::StageSyncSkipped => {
                self.new_steps.retain(|s| *s != Step::SyncStage);
            }
            Mutant::RetrySkipsLifecycle => {
                self.reconcile_steps.retain(|s| *s != Step::CommitLifecycle);
            }
            _ => {}
        }
        self
    }

    fn describe_bound(&self) -> String {
        format!(
            "{} digests, {} requests ({} references), {} publications incl. retries, {} injected failure(s), {} crash(es), capacity {} with and without an incomplete directory",
            DIGESTS,
            self.requests.len(),
            1 + self.requests.iter().map(|r| r.reference).max().unwrap_or(0),
            self.max_starts,
            self.max_fails,
            self.max_crashes,
            self.capacity
        )
    }
}
