//! Model of the production migration workflow, one step at a time
//! (`custos_core::migration::workflow`).
//!
//! The migration model proves the machine's rules under an adversarial
//! driver of its own; this one checks what runs. Its driver *is*
//! [`Migration::start`] and [`Migration::advance`], the functions
//! `Migration::migrate` loops over, over the memory ports of both
//! endpoints (control catalog and administration, table store, object
//! store) and a cold verifier that reads only the destination. The state
//! holds each store as a plain value ([`MemoryControlCatalog::image`] and
//! the like) and the run between steps ([`Stepping`]); every action builds
//! the stores from the state, takes one real step and reads them back.
//!
//! Two hosts run the same migration. The adversary crashes a host's run
//! between steps (the run is forgotten; a new one starts from the
//! destination's stored administration), loses the reply of a step's
//! administration commit after it applied, fails the commit before it
//! applies, makes a table append ambiguous (landed or not), and lets a
//! writer that did not stop commit a tick at the source until the recheck
//! records it stable. A monitor checks the truth of the stores after every
//! action: nothing is discoverable at the destination before the
//! reservation is activated with every table and object in place, no
//! table is appended twice, the source is never touched after activation
//! (but for the departure mark the completion writes), the receipt never
//! changes, imported floors cover every epoch a source writer held, a
//! discoverable World holds the source's last tick, and a receipt is
//! answered only once the destination is activated and cold-verified.
//!
//! A mutant is a broken backend around the real workflow (see [`Mutant`]).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::io::Read;
use std::sync::atomic::{AtomicU32, Ordering};

use custos_core::control_memory::{ControlImage, MemoryControlCatalog};
use custos_core::fence::Holder;
use custos_core::migration::artifacts::{
    content_address, facts_of, put_bytes, Entry, MemoryEntry, MemoryObjectStore, ObjectError,
    ObjectRead, ObjectStore, Occurrence, OccurrenceMeta,
};
use custos_core::migration::control::{AdminEffect, AdminError, ControlAdmin, ControlSnapshot};
use custos_core::migration::departure::Departures;
use custos_core::migration::tables::{
    MemoryRows, MemoryTableStore, TableError, TableImage, TableStore,
};
use custos_core::migration::workflow::{
    Endpoint, Migration, PortsColdVerifier, Quiet, Stepping, ARTIFACT_FILES,
};
use custos_core::migration::{
    next_step, CommitReply, Destination, Digest, Locality, Name, Next, NormalizedUri, ObjectFacts,
    Status, StorageIdentity, TableFacts, TablePlan,
};
use custos_core::world::{
    ControlCatalog, FencePurpose, Outcome, Request as WorldRequest, SignatureRecord, WorldError,
    WorldIdentity, WorldInfo, WorldRecord, WriterMode,
};
use stateright::{Model, Property};

use crate::family::MutantModel;
use crate::Bound;

crate::mutants! {
    /// A broken backend the model runs the real workflow over.
    pub enum Mutant {
        /// The destination's administration makes a staged bundle
        /// discoverable at once (it imports on staging).
        StagedVisible => "staged-bundle-discoverable-before-activation",
        /// The destination's administration loads an activated
        /// reservation as if the recheck had not happened (a stale read).
        StaleLoad => "destination-load-forgets-the-recheck",
        /// The destination's catalog imports every World with floor 0.
        FloorDropped => "activation-drops-the-import-floor",
        /// The destination's table store resends an append whose reply
        /// it lost, and both land.
        ResentAppend => "an-ambiguous-append-lands-twice",
        /// The source's catalog exports the control snapshot it first
        /// served (a cache): the recheck cannot see a drift.
        CachedSnapshot => "the-source-exports-a-cached-snapshot",
    }
}

/// A fault injected into one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The step's administration commit applies; its reply is lost.
    ReplyLost,
    /// The step's administration commit fails before it applies.
    CommitFails,
    /// The step's table append lands; its reply is ambiguous.
    AmbiguousLanded,
    /// The step's table append does not land; its reply is ambiguous.
    AmbiguousLost,
}

/// Hosts running the migration: two hosts may run it at once (each
/// host's run lock is its own).
pub const HOSTS: usize = 2;

/// An action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Host `i` starts a run (an operator runs `migrate`), resuming from
    /// the destination.
    Start(u8),
    /// Host `i`'s run takes its next step, under a fault or none.
    Step(u8, Option<Fault>),
    /// Host `i`'s run crashes between steps.
    Crash(u8),
    /// A writer of the source's World takes its fence and commits a tick
    /// (a writer that did not stop), before the recheck records the source
    /// stable.
    Drift,
}

/// One endpoint's stores, as values.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Side {
    /// The control catalog and the migration administration.
    pub control: ControlImage,
    /// The table store.
    pub tables: TableImage,
    /// The object store.
    pub objects: BTreeMap<Digest, MemoryEntry>,
}

/// Bits of [`RunState::broken`].
pub mod rule {
    /// A World discoverable at the destination before the reservation was
    /// activated with every table and object in place.
    pub const EARLY_DISCOVERY: u8 = 1 << 0;
    /// A destination table appended twice.
    pub const DOUBLE_APPEND: u8 = 1 << 1;
    /// The source read or written after activation (but for the
    /// completion's departure mark).
    pub const SOURCE_TOUCHED: u8 = 1 << 2;
    /// The completed receipt changed.
    pub const RECEIPT_CHANGED: u8 = 1 << 3;
    /// An imported floor below an epoch a source writer held.
    pub const FLOOR_LOW: u8 = 1 << 4;
    /// A receipt answered before activation and cold verification.
    pub const RECEIPT_EARLY: u8 = 1 << 5;
    /// A World discoverable at the destination behind the source's tick.
    pub const BEHIND_SOURCE: u8 = 1 << 6;
}

/// The model's state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RunState {
    /// The source.
    pub source: Side,
    /// The destination.
    pub dest: Side,
    /// Each host's run under way, if any.
    pub runs: [Option<Stepping>; HOSTS],
    /// Crashes left.
    pub crashes: u8,
    /// Faults left.
    pub faults: u8,
    /// Source drifts left.
    pub drifts: u8,
    /// The highest fence epoch a writer of the source's World held.
    pub writer_epoch: u64,
    /// Monitor: a writer drifted the source.
    pub drifted: bool,
    /// Monitor: the receipt's digest, once answered.
    pub receipt: Option<Digest>,
    /// Monitor: a receipt was answered after a fault or a crash.
    pub recovered: bool,
    /// Monitor: a fault or a crash happened.
    pub hurt: bool,
    /// Monitor: rules broken (bits of [`rule`]).
    pub broken: u8,
}

/// The model.
#[derive(Clone, Debug)]
pub struct RunModel {
    source: Side,
    src_id: StorageIdentity,
    dst_id: StorageIdentity,
    dst_root: NormalizedUri,
    src_root: NormalizedUri,
    crashes: u8,
    faults: u8,
    drifts: u8,
    writer_epoch: u64,
    mutant: Option<Mutant>,
}

// ---- ports over the state's images, with faults and a touch count ----

/// A control catalog and administration over a [`ControlImage`].
struct Ctl {
    inner: MemoryControlCatalog,
    /// The mutant's cache: the snapshot exported is this catalog's.
    cached: Option<MemoryControlCatalog>,
    touches: Cell<u32>,
    /// Calls on the departure record (the completion's mark).
    departures: Cell<u32>,
    fault: Cell<Option<Fault>>,
    mutant: Option<Mutant>,
}

impl Ctl {
    fn new(image: &ControlImage, mutant: Option<Mutant>, cached: Option<&ControlImage>) -> Self {
        Ctl {
            inner: MemoryControlCatalog::from_image(image.clone()),
            cached: cached.map(|c| MemoryControlCatalog::from_image(c.clone())),
            touches: Cell::new(0),
            departures: Cell::new(0),
            fault: Cell::new(None),
            mutant,
        }
    }

    fn touch(&self) {
        self.touches.set(self.touches.get().saturating_add(1));
    }
}

fn lost() -> AdminError {
    AdminError::Backend {
        reason: "the commit's reply was lost".into(),
    }
}

impl ControlCatalog for Ctl {
    fn apply(&self, req: &WorldRequest) -> Result<Outcome, WorldError> {
        self.touch();
        self.inner.apply(req)
    }
    fn discover_worlds(&self) -> Result<Vec<WorldRecord>, WorldError> {
        self.touch();
        self.inner.discover_worlds()
    }
    fn open_world_readonly(&self, world_id: &str) -> Result<WorldInfo, WorldError> {
        self.touch();
        self.inner.open_world_readonly(world_id)
    }
    fn list_signatures(&self) -> Result<Vec<SignatureRecord>, WorldError> {
        self.touch();
        self.inner.list_signatures()
    }
}

impl ControlAdmin for Ctl {
    fn export_snapshot(&self) -> Result<ControlSnapshot, AdminError> {
        self.touch();
        match &self.cached {
            Some(cache) => cache.export_snapshot(),
            None => self.inner.export_snapshot(),
        }
    }
    fn load_destination(&self) -> Result<Destination, AdminError> {
        self.touch();
        let mut d = self.inner.load_destination()?;
        if self.mutant == Some(Mutant::StaleLoad) {
            if let Some(r) = d.reservation.as_mut() {
                if r.status == Status::Activated {
                    r.status = Status::Reserved;
                    r.source_stability = None;
                }
            }
        }
        Ok(d)
    }
    fn commit_destination(
        &self,
        expected: &Destination,
        next: &Destination,
        effect: AdminEffect<'_>,
    ) -> Result<(), AdminError> {
        self.touch();
        match self.fault.take() {
            Some(Fault::CommitFails) => return Err(lost()),
            Some(Fault::ReplyLost) => {
                self.inner.commit_destination(expected, next, effect)?;
                return Err(lost());
            }
            other => self.fault.set(other),
        }
        self.inner.commit_destination(expected, next, effect)
    }
    fn stored_receipt(&self) -> Result<Option<Vec<u8>>, AdminError> {
        self.touch();
        self.inner.stored_receipt()
    }
    fn load_departures(&self) -> Result<Departures, AdminError> {
        self.touch();
        self.departures.set(self.departures.get().saturating_add(1));
        self.inner.load_departures()
    }
    fn commit_departures(
        &self,
        expected: &Departures,
        next: &Departures,
    ) -> Result<(), AdminError> {
        self.touch();
        self.departures.set(self.departures.get().saturating_add(1));
        self.inner.commit_departures(expected, next)
    }
}

/// A table store over a [`TableImage`].
struct Tables {
    inner: MemoryTableStore,
    touches: Cell<u32>,
    fault: Cell<Option<Fault>>,
    /// The mutant's backend: an append whose reply it lost is sent again.
    resends: bool,
}

impl Tables {
    fn new(image: &TableImage, resends: bool) -> Self {
        Tables {
            inner: MemoryTableStore::from_image(image.clone()),
            touches: Cell::new(0),
            fault: Cell::new(None),
            resends,
        }
    }

    fn touch(&self) {
        self.touches.set(self.touches.get().saturating_add(1));
    }
}

impl TableStore for Tables {
    fn namespace(&self) -> Result<Vec<(Name, TableFacts)>, TableError> {
        self.touch();
        self.inner.namespace()
    }
    fn evidence_at(&self, table: &Name, snapshot: u64) -> Result<TableFacts, TableError> {
        self.touch();
        self.inner.evidence_at(table, snapshot)
    }
    fn inspect(&self, table: &Name) -> Result<Option<TableFacts>, TableError> {
        self.touch();
        self.inner.inspect(table)
    }
    fn occurrences(&self, table: &Name, snapshot: u64) -> Result<Vec<Occurrence>, TableError> {
        self.touch();
        self.inner.occurrences(table, snapshot)
    }
    fn relocated_digest(
        &self,
        table: &Name,
        snapshot: u64,
        relocated: &[Occurrence],
    ) -> Result<Digest, TableError> {
        self.touch();
        self.inner.relocated_digest(table, snapshot, relocated)
    }
    fn copy_from(
        &self,
        source: &Self,
        plan: &TablePlan,
        relocated: Option<&[Occurrence]>,
    ) -> Result<CommitReply, TableError> {
        self.touch();
        source.touch();
        match self.fault.take() {
            Some(Fault::AmbiguousLost) => return Ok(CommitReply::Ambiguous),
            Some(Fault::AmbiguousLanded) if self.resends => {
                self.inner.lose_next_reply();
                let reply = self.inner.copy_from(&source.inner, plan, relocated)?;
                let rows = match relocated {
                    Some(r) => MemoryRows::Occurrences(r.to_vec()),
                    None => source
                        .inner
                        .image()?
                        .latest(&plan.name)
                        .cloned()
                        .unwrap_or(MemoryRows::Canonical(Vec::new())),
                };
                self.inner.append(&plan.name, rows)?;
                return Ok(reply);
            }
            Some(Fault::AmbiguousLanded) => self.inner.lose_next_reply(),
            other => self.fault.set(other),
        }
        self.inner.copy_from(&source.inner, plan, relocated)
    }
}

/// An object store over an image.
struct Objects {
    inner: MemoryObjectStore,
    touches: AtomicU32,
}

impl Objects {
    fn new(root: &NormalizedUri, image: &BTreeMap<Digest, MemoryEntry>) -> Self {
        Objects {
            inner: MemoryObjectStore::from_image(root.clone(), image.clone()),
            touches: AtomicU32::new(0),
        }
    }
}

impl ObjectStore for Objects {
    fn probe(&self, uri: &NormalizedUri) -> Result<Entry, ObjectError> {
        self.touches.fetch_add(1, Ordering::Relaxed);
        self.inner.probe(uri)
    }
    fn read(&self, uri: &NormalizedUri, limit: u64) -> Result<ObjectRead, ObjectError> {
        self.touches.fetch_add(1, Ordering::Relaxed);
        self.inner.read(uri, limit)
    }
    fn put_new(
        &self,
        uri: &NormalizedUri,
        bytes: &mut dyn Read,
        expect: &ObjectFacts,
    ) -> Result<(), ObjectError> {
        self.touches.fetch_add(1, Ordering::Relaxed);
        self.inner.put_new(uri, bytes, expect)
    }
}

/// The destination's cold verifier over the model's ports.
type Cold<'a> = PortsColdVerifier<'a, Ctl, Tables, Objects>;

/// One endpoint's ports, built from its images.
struct Ports {
    control: Ctl,
    tables: Tables,
    objects: Objects,
}

impl Ports {
    fn new(
        side: &Side,
        root: &NormalizedUri,
        mutant: Option<Mutant>,
        cached: Option<&ControlImage>,
    ) -> Self {
        Ports {
            control: Ctl::new(&side.control, mutant, cached),
            tables: Tables::new(&side.tables, mutant == Some(Mutant::ResentAppend)),
            objects: Objects::new(root, &side.objects),
        }
    }

    /// Calls on any port, and calls on the departure record alone.
    fn touches(&self) -> (u32, u32) {
        let all = self.control.touches.get()
            + self.tables.touches.get()
            + self.objects.touches.load(Ordering::Relaxed);
        (all, self.control.departures.get())
    }

    fn image(&self) -> Option<Side> {
        Some(Side {
            control: self.control.inner.image().ok()?,
            tables: self.tables.inner.image().ok()?,
            objects: self.objects.inner.image().ok()?,
        })
    }

    fn endpoint(
        &self,
        identity: &StorageIdentity,
        root: &NormalizedUri,
    ) -> Endpoint<'_, Ctl, Tables, Objects> {
        Endpoint {
            identity: identity.clone(),
            audit: Some(identity.clone()),
            control: &self.control,
            tables: &self.tables,
            objects: &self.objects,
            artifact_root: root.clone(),
            locality: Locality::Local,
            activity_records: 0,
        }
    }
}

fn clock() -> custos_core::Millis {
    1_764_600_000_000
}

const WORLD: &str = "w-live";
const EVENTS: &str = "events";

fn name(s: &str) -> Result<Name, String> {
    Name::new(s).map_err(|e| format!("fixture invalid: {s}: {e}"))
}

fn identity(uri: &str) -> Result<StorageIdentity, String> {
    StorageIdentity::new(uri, "app", "iceberg-sql").map_err(|e| format!("fixture invalid: {e}"))
}

/// The source: one resumable World at tick 3 (its writer's fence taken),
/// an application table of three rows, and `artifact_files` with one
/// occurrence of one object.
fn source_side(root: &NormalizedUri) -> Result<(Side, u64), String> {
    let e = |x: &dyn std::fmt::Debug| format!("fixture invalid: {x:?}");
    let control = MemoryControlCatalog::new();
    let live = WorldRecord::active(WorldIdentity::new(WORLD, "live"), WriterMode::Resumable);
    control.register(&live).map_err(|x| e(&x))?;
    let writer = Holder::new("writer").map_err(|x| e(&x))?;
    let (epoch, _) = control
        .acquire_fence(WORLD, &writer, FencePurpose::Resume)
        .map_err(|x| e(&x))?;
    control.commit_tick(WORLD, epoch, 3).map_err(|x| e(&x))?;
    let tables = MemoryTableStore::new();
    let events = name(EVENTS)?;
    tables
        .create(&events, Digest::of(b"events"))
        .map_err(|x| e(&x))?;
    let rows = (0..3).map(|i| format!("e{i}").into_bytes()).collect();
    tables
        .append(&events, MemoryRows::Canonical(rows))
        .map_err(|x| e(&x))?;
    let objects = MemoryObjectStore::new(root.clone());
    let bytes = b"frame one";
    let facts = facts_of(bytes);
    let at = content_address(root, &facts.sha256).map_err(|x| e(&x))?;
    put_bytes(&objects, &at, bytes).map_err(|x| e(&x))?;
    let meta = OccurrenceMeta {
        artifact_id: name("a0")?,
        ingested_at: 1_700_000_000_000_000,
        source_uri: "camera://0".into(),
        logical_path: "frames/0.raw".into(),
        world: name(WORLD)?,
        run: None,
        tick: Some(1),
        media_type: "application/octet-stream".into(),
    };
    let files = name(ARTIFACT_FILES)?;
    tables
        .create(&files, Digest::of(b"artifact_files"))
        .map_err(|x| e(&x))?;
    tables
        .append(
            &files,
            MemoryRows::Occurrences(vec![Occurrence::new(meta, facts, at)]),
        )
        .map_err(|x| e(&x))?;
    let side = Side {
        control: control.image().map_err(|x| e(&x))?,
        tables: tables.image().map_err(|x| e(&x))?,
        objects: objects.image().map_err(|x| e(&x))?,
    };
    Ok((side, epoch))
}

fn empty_side() -> Side {
    Side {
        control: ControlImage::default(),
        tables: TableImage::default(),
        objects: BTreeMap::new(),
    }
}

fn status(side: &Side) -> Option<Status> {
    side.control
        .destination
        .reservation
        .as_ref()
        .map(|r| r.status)
}

fn activated(side: &Side) -> bool {
    matches!(status(side), Some(Status::Activated | Status::Completed))
}

fn discoverable(side: &Side) -> bool {
    side.control.worlds.values().any(|s| s.record.is_some())
}

impl RunModel {
    /// Everything in place at the destination: each application table
    /// holds the source's rows, `artifact_files` one append, every source
    /// object is present with the source's bytes.
    fn in_place(&self, s: &RunState) -> bool {
        let (src, dst) = (&s.source.tables, &s.dest.tables);
        let Ok(events) = Name::new(EVENTS) else {
            return false;
        };
        let Ok(files) = Name::new(ARTIFACT_FILES) else {
            return false;
        };
        dst.latest(&events) == src.latest(&events)
            && dst.appends(&files) == 1
            && s.source
                .objects
                .iter()
                .all(|(d, e)| s.dest.objects.get(d) == Some(e))
    }

    /// The rules the truth of the stores must keep after every action.
    fn monitor(&self, s: &mut RunState) {
        if discoverable(&s.dest) && !(activated(&s.dest) && self.in_place(s)) {
            s.broken |= rule::EARLY_DISCOVERY;
        }
        for n in [EVENTS, ARTIFACT_FILES] {
            if Name::new(n).is_ok_and(|n| s.dest.tables.appends(&n) > 1) {
                s.broken |= rule::DOUBLE_APPEND;
            }
        }
        for (w, slot) in &s.dest.control.worlds {
            if slot.record.is_some() && slot.fence.floor < s.writer_epoch {
                s.broken |= rule::FLOOR_LOW;
            }
            let source_tick = s
                .source
                .control
                .worlds
                .get(w)
                .and_then(|src| src.record.as_ref())
                .map_or(0, |r| r.tick_head);
            if slot
                .record
                .as_ref()
                .is_some_and(|r| r.tick_head < source_tick)
            {
                s.broken |= rule::BEHIND_SOURCE;
            }
        }
    }

    /// The broken backends that act on what a step stored.
    fn corrupt(&self, before: &RunState, s: &mut RunState) {
        match self.mutant {
            Some(Mutant::StagedVisible)
                if s.dest.control.staged.is_some() && !discoverable(&s.dest) =>
            {
                s.dest.control.worlds = s.source.control.worlds.clone();
            }
            Some(Mutant::FloorDropped) if activated(&s.dest) && !activated(&before.dest) => {
                for slot in s.dest.control.worlds.values_mut() {
                    slot.fence.floor = 0;
                }
            }
            _ => {}
        }
    }

    /// Builds the ports from `s`, runs `f` over the migration, reads the
    /// stores back. `None` when a store cannot be read back.
    fn with_migration<R>(
        &self,
        s: &mut RunState,
        fault: Option<Fault>,
        f: impl FnOnce(&Migration<'_, Ctl, Tables, Objects, Cold<'_>>) -> R,
    ) -> Option<(R, (u32, u32), bool)> {
        // The mutant's cache: the source as the model began, before any
        // fence or drift.
        let cached = (self.mutant == Some(Mutant::CachedSnapshot)).then_some(&self.source.control);
        let src = Ports::new(&s.source, &self.src_root, None, cached);
        let dst = Ports::new(&s.dest, &self.dst_root, self.mutant, None);
        dst.control.fault.set(fault);
        dst.tables.fault.set(fault);
        // The cold verifier reads only the destination's ports.
        let cold = PortsColdVerifier {
            control: &dst.control,
            tables: &dst.tables,
            objects: &dst.objects,
            artifact_root: self.dst_root.clone(),
        };
        let holder = Holder::new("migration").ok()?;
        let m = Migration {
            source: src.endpoint(&self.src_id, &self.src_root),
            destination: dst.endpoint(&self.dst_id, &self.dst_root),
            migration_id: Name::new("m1").ok()?,
            holder,
            cold: &cold,
            version: Name::new("custos-model").ok()?,
            clock: &clock,
            progress: &Quiet,
            second_copy: false,
        };
        let r = f(&m);
        // A fault is used when a port took it (a step that commits
        // nothing, or appends nothing, leaves it).
        let used = fault.is_some()
            && (dst.control.fault.get().is_none() || dst.tables.fault.get().is_none());
        s.source = src.image()?;
        s.dest = dst.image()?;
        Some((r, src.touches(), used))
    }

    fn start(&self, s: &mut RunState, i: usize) -> Option<()> {
        if s.runs.get(i)?.is_some() {
            return None;
        }
        let (r, _, _) = self.with_migration(s, None, |m| m.start(None))?;
        s.runs[i] = r.ok();
        Some(())
    }

    /// A source writer takes the World's fence and commits the next tick.
    fn drift(&self, s: &mut RunState) -> Option<()> {
        let c = MemoryControlCatalog::from_image(s.source.control.clone());
        let writer = Holder::new("late-writer").ok()?;
        let (epoch, _) = c.acquire_fence(WORLD, &writer, FencePurpose::Resume).ok()?;
        let head = c.open_world_readonly(WORLD).ok()?.record.tick_head;
        c.commit_tick(WORLD, epoch, head + 1).ok()?;
        s.source.control = c.image().ok()?;
        s.writer_epoch = s.writer_epoch.max(epoch);
        s.drifts -= 1;
        s.drifted = true;
        Some(())
    }

    fn step(&self, s: &mut RunState, i: usize, fault: Option<Fault>) -> Option<()> {
        let mut run = s.runs.get_mut(i)?.take()?;
        // Once activated nothing touches the source, but for the
        // completion's mark of the departure record, made by a step that
        // finds the migration completed.
        let before = status(&s.dest);
        let (r, (touched, departures), used) =
            self.with_migration(s, fault, |m| m.advance(&mut run))?;
        if fault.is_some() && !used {
            return None; // the step is the same as one without the fault
        }
        let allowed = match before {
            Some(Status::Activated) => 0,
            Some(Status::Completed) => departures,
            _ => touched,
        };
        if touched > allowed {
            s.broken |= rule::SOURCE_TOUCHED;
        }
        match r {
            Ok(None) => s.runs[i] = Some(run),
            Ok(Some(receipt)) => {
                let digest = Digest::of(&custos_core::migration::canonical_bytes(&receipt));
                if s.receipt.is_some_and(|d| d != digest) {
                    s.broken |= rule::RECEIPT_CHANGED;
                }
                let cold = s
                    .dest
                    .control
                    .destination
                    .reservation
                    .as_ref()
                    .is_some_and(|r| r.cold.is_some());
                if status(&s.dest) != Some(Status::Completed) || !cold || !discoverable(&s.dest) {
                    s.broken |= rule::RECEIPT_EARLY;
                }
                s.receipt = Some(digest);
                s.recovered |= s.hurt;
            }
            // The run stops; the operator runs it again (Start).
            Err(_) => {}
        }
        Some(())
    }
}

impl Model for RunModel {
    type State = RunState;
    type Action = Action;

    fn init_states(&self) -> Vec<RunState> {
        vec![RunState {
            source: self.source.clone(),
            dest: empty_side(),
            runs: [None, None],
            crashes: self.crashes,
            faults: self.faults,
            drifts: self.drifts,
            writer_epoch: self.writer_epoch,
            drifted: false,
            receipt: None,
            recovered: false,
            hurt: false,
            broken: 0,
        }]
    }

    fn actions(&self, s: &RunState, actions: &mut Vec<Action>) {
        if s.broken != 0 {
            return; // a counterexample ends where a rule first breaks
        }
        // The window the recheck covers: until it records the source
        // stable (the `migration` model's bound too).
        let rechecked = s
            .dest
            .control
            .destination
            .reservation
            .as_ref()
            .is_some_and(|r| r.source_stability.is_some() || r.status != Status::Reserved);
        if s.drifts > 0 && !rechecked {
            actions.push(Action::Drift);
        }
        for (i, run) in s.runs.iter().enumerate() {
            let h = i as u8;
            let Some(run) = run else {
                // A finished migration is run again too: it answers its
                // receipt.
                actions.push(Action::Start(h));
                continue;
            };
            actions.push(Action::Step(h, None));
            let next = next_step(run.state());
            if matches!(next, Ok(Next::Done(_)) | Err(_)) {
                continue;
            }
            if s.crashes > 0 {
                actions.push(Action::Crash(h));
            }
            if s.faults > 0 {
                actions.push(Action::Step(h, Some(Fault::ReplyLost)));
                actions.push(Action::Step(h, Some(Fault::CommitFails)));
                if matches!(next, Ok(Next::CopyTable { .. })) {
                    actions.push(Action::Step(h, Some(Fault::AmbiguousLanded)));
                    actions.push(Action::Step(h, Some(Fault::AmbiguousLost)));
                }
            }
        }
    }

    fn next_state(&self, s: &RunState, action: Action) -> Option<RunState> {
        let mut n = s.clone();
        match action {
            Action::Start(i) => self.start(&mut n, usize::from(i))?,
            Action::Step(i, fault) => {
                if fault.is_some() {
                    n.faults -= 1;
                    n.hurt = true;
                }
                self.step(&mut n, usize::from(i), fault)?;
            }
            Action::Crash(i) => {
                n.crashes -= 1;
                n.hurt = true;
                *n.runs.get_mut(usize::from(i))? = None;
            }
            Action::Drift => self.drift(&mut n)?,
        }
        self.corrupt(s, &mut n);
        self.monitor(&mut n);
        (n != *s).then_some(n)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::<Self>::always(
                "nothing is discoverable at the destination before activation with every table and object in place",
                |_, s| s.broken & rule::EARLY_DISCOVERY == 0,
            ),
            Property::<Self>::always("no destination table is appended twice", |_, s| {
                s.broken & rule::DOUBLE_APPEND == 0
            }),
            Property::<Self>::always(
                "the source is never touched once the destination is activated",
                |_, s| s.broken & rule::SOURCE_TOUCHED == 0,
            ),
            Property::<Self>::always("the receipt never changes", |_, s| {
                s.broken & rule::RECEIPT_CHANGED == 0
            }),
            Property::<Self>::always(
                "an imported floor covers every epoch a source writer held",
                |_, s| s.broken & rule::FLOOR_LOW == 0,
            ),
            Property::<Self>::always(
                "a receipt is answered only once the destination is activated and cold-verified",
                |_, s| s.broken & rule::RECEIPT_EARLY == 0,
            ),
            Property::<Self>::always(
                "a World discoverable at the destination holds the source's last tick",
                |_, s| s.broken & rule::BEHIND_SOURCE == 0,
            ),
            Property::<Self>::sometimes("the migration completes", |_, s| s.receipt.is_some()),
            Property::<Self>::sometimes("a source that drifted invalidates the plan", |_, s| {
                s.drifted && status(&s.dest) == Some(Status::Invalidated)
            }),
            Property::<Self>::sometimes(
                "two hosts run the migration at once",
                |_, s| s.runs.iter().all(|r| r.as_ref().is_some_and(|r| r.state().run.reserved)),
            ),
            Property::<Self>::sometimes(
                "the migration completes after a crash or a fault",
                |_, s| s.recovered,
            ),
        ]
    }
}

impl MutantModel for RunModel {
    type Mutant = Mutant;
    const NAME: &'static str = "migration-run";
    const SUMMARY: &'static str = "the production migration workflow (start, then advance one step at a time) over memory ports, under crashes, lost replies, failed commits and ambiguous appends: nothing discoverable early, no double append, the source untouched after activation, one receipt";

    fn at(bound: Bound) -> Result<Self, String> {
        let src_root = NormalizedUri::parse("file:///src/artifacts")
            .map_err(|e| format!("fixture invalid: {e:?}"))?;
        let dst_root = NormalizedUri::parse("file:///dst/artifacts")
            .map_err(|e| format!("fixture invalid: {e:?}"))?;
        let (crashes, faults, drifts) = match bound {
            Bound::Ci => (1, 1, 1),
            Bound::Deep => (2, 2, 1),
        };
        let (source, writer_epoch) = source_side(&src_root)?;
        Ok(RunModel {
            source,
            writer_epoch,
            src_id: identity("file:///src/warehouse")?,
            dst_id: identity("file:///dst/warehouse")?,
            src_root,
            dst_root,
            crashes,
            faults,
            drifts,
            mutant: None,
        })
    }

    fn mutant_slot(&mut self) -> &mut Option<Mutant> {
        &mut self.mutant
    }

    fn describe_bound(&self) -> String {
        format!(
            "1 World, 2 tables, 1 object; {HOSTS} hosts, each restarting its run at will; crashes <= {}, faults <= {}, source drifts <= {}",
            self.crashes, self.faults, self.drifts
        )
    }
}
