//! The control suites have teeth: broken backends (wrappers over the
//! memory backend, each with one mistake a real backend could make) must
//! each fail at least one case of the control-catalog suite (fences,
//! registration, retirement, ticks, signatures) or of the administrative
//! suite, and the honest wrapper none.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // test-only mutant backends

use std::collections::HashMap;
use std::sync::Mutex;

use custos_conformance::control::{control_catalog_cases, control_catalog_reopen_cases};
use custos_conformance::control_admin::{control_admin_cases, control_admin_reopen_cases};
use custos_core::control_memory::MemoryControlCatalog;
use custos_core::world::{
    ControlCatalog, FencePurpose, Outcome, Request, Signature, SignatureRecord, WorldError,
    WorldInfo, WorldRecord, WorldStatus,
};
use custos_teeth::{
    assert_reopen_caught, failing_cases, reopen_failing_cases, Disk, Verdicts,
    HONEST_WITHOUT_RECOVERY, LOSSES,
};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Defect {
    /// Checks the writer mode only for migrations, not for a resume.
    ResumesAnyMode,
    /// Admits a tick under any epoch (rewrites it to the current one).
    AdmitsStaleEpochs,
    /// Answers an acquire without storing it (the fence row is lost).
    LosesTheFence,
    /// Keeps one epoch counter for the whole catalog, not one per world.
    SharesEpochsAcrossWorlds,
    /// Discovery answers worlds in registration order (no `ORDER BY`).
    DiscoveryInRegistrationOrder,
    /// Discovery is ordered by a case-insensitive collation (a text
    /// column's `ORDER BY` under a locale), not byte order.
    DiscoveryInCollationOrder,
    /// The tick head stores the last tick written, not the highest.
    TickHeadLastWriteWins,
    /// Retirement matches the row by world id only and destroys it
    /// whatever identity the request carries.
    RetireMatchesOnlyTheId,
    /// Signatures of a world are read back in registration order.
    SignaturesInRegistrationOrder,
    /// The signature's fingerprint is recomputed from its schema instead
    /// of checked: a forged fingerprint is silently repaired.
    FingerprintRecomputed,
    /// One upsert path writes a registration or retirement whatever status
    /// its record carries.
    RequestStatusIgnored,
}

const DEFECTS: [Defect; 11] = [
    Defect::DiscoveryInCollationOrder,
    Defect::ResumesAnyMode,
    Defect::AdmitsStaleEpochs,
    Defect::LosesTheFence,
    Defect::SharesEpochsAcrossWorlds,
    Defect::DiscoveryInRegistrationOrder,
    Defect::TickHeadLastWriteWins,
    Defect::RetireMatchesOnlyTheId,
    Defect::SignaturesInRegistrationOrder,
    Defect::FingerprintRecomputed,
    Defect::RequestStatusIgnored,
];

struct Mutant {
    defect: Option<Defect>,
    inner: MemoryControlCatalog,
    /// World ids, and `(world, table)` signatures, in registration order.
    order: Mutex<Vec<String>>,
    /// The last tick written per world.
    last_tick: Mutex<HashMap<String, u64>>,
}

impl Mutant {
    fn new(defect: Option<Defect>) -> Self {
        Mutant {
            defect,
            inner: MemoryControlCatalog::new(),
            order: Mutex::new(Vec::new()),
            last_tick: Mutex::new(HashMap::new()),
        }
    }

    fn position(&self, key: &str) -> usize {
        let order = self.order.lock().unwrap();
        order.iter().position(|k| k == key).unwrap_or(usize::MAX)
    }

    fn remember(&self, req: &Request) {
        let key = match req {
            Request::Register { record } | Request::Retire { record } => {
                record.identity.world_id.clone()
            }
            Request::RegisterSignature {
                world_id,
                signature,
            } => format!("{world_id}/{}", signature.table_id),
            Request::AdvanceTick { world_id, tick }
            | Request::CommitTick { world_id, tick, .. } => {
                self.last_tick
                    .lock()
                    .unwrap()
                    .insert(world_id.clone(), *tick);
                return;
            }
            Request::AcquireFence { .. } => return,
        };
        let mut order = self.order.lock().unwrap();
        if !order.contains(&key) {
            order.push(key);
        }
    }

    fn shown(&self, mut r: WorldRecord) -> WorldRecord {
        if self.defect == Some(Defect::TickHeadLastWriteWins) {
            if let Some(t) = self.last_tick.lock().unwrap().get(&r.identity.world_id) {
                r.tick_head = *t;
            }
        }
        r
    }

    /// The request as the broken backend rewrites it, or its answer.
    fn rewrite(&self, req: &mut Request) -> Option<Result<Outcome, WorldError>> {
        match (req, self.defect?) {
            (Request::AcquireFence { purpose, .. }, Defect::ResumesAnyMode) => {
                *purpose = FencePurpose::Migration;
            }
            (
                Request::CommitTick {
                    world_id, epoch, ..
                },
                Defect::AdmitsStaleEpochs,
            ) => {
                if let Ok(info) = self.inner.open_world_readonly(world_id) {
                    *epoch = info.fence.current().unwrap_or(*epoch);
                }
            }
            (Request::AcquireFence { world_id, .. }, Defect::LosesTheFence) => {
                let info = match self.inner.open_world_readonly(world_id) {
                    Ok(info) => info,
                    Err(e) => return Some(Err(e)),
                };
                return Some(Ok(Outcome::FenceAcquired {
                    epoch: info.fence.issued + 1,
                    staled: info.fence.current(),
                }));
            }
            (req @ Request::AcquireFence { .. }, Defect::SharesEpochsAcrossWorlds) => {
                // Every acquire anywhere advances every world's counter.
                let out = self.inner.apply(req);
                for w in self.inner.discover_worlds().unwrap() {
                    let other = Request::AcquireFence {
                        world_id: w.identity.world_id.clone(),
                        holder: custos_core::fence::Holder::new("shared").unwrap(),
                        purpose: FencePurpose::Migration,
                    };
                    if w.identity.world_id != req.world_id() {
                        let _ = self.inner.apply(&other);
                    }
                }
                return Some(out);
            }
            (Request::Retire { record }, Defect::RetireMatchesOnlyTheId) => {
                if let Ok(info) = self.inner.open_world_readonly(&record.identity.world_id) {
                    let mut stored = info.record.destroyed();
                    stored.tick_head = stored.tick_head.max(record.tick_head);
                    *record = stored;
                }
            }
            (Request::RegisterSignature { signature, .. }, Defect::FingerprintRecomputed) => {
                *signature = Signature::new(
                    signature.components.clone(),
                    signature.schema.clone(),
                    signature.table_id.clone(),
                );
            }
            (req @ Request::Register { .. }, Defect::RequestStatusIgnored) => {
                if let Request::Register { record } = req {
                    if record.status == WorldStatus::Destroyed {
                        *req = Request::Retire {
                            record: record.clone(),
                        };
                    }
                }
            }
            (Request::Retire { record }, Defect::RequestStatusIgnored) => {
                *record = record.destroyed();
            }
            _ => {}
        }
        None
    }
}

impl ControlCatalog for Mutant {
    fn apply(&self, req: &Request) -> Result<Outcome, WorldError> {
        let mut req = req.clone();
        if let Some(answer) = self.rewrite(&mut req) {
            return answer;
        }
        let out = self.inner.apply(&req)?;
        self.remember(&req);
        if let (Outcome::TickAdvanced { .. }, Some(Defect::TickHeadLastWriteWins)) =
            (&out, self.defect)
        {
            let head = self.open_world_readonly(req.world_id())?.record.tick_head;
            return Ok(Outcome::TickAdvanced { head });
        }
        Ok(out)
    }
    fn discover_worlds(&self) -> Result<Vec<WorldRecord>, WorldError> {
        let mut found: Vec<WorldRecord> = self
            .inner
            .discover_worlds()?
            .into_iter()
            .map(|r| self.shown(r))
            .collect();
        if self.defect == Some(Defect::DiscoveryInRegistrationOrder) {
            found.sort_by_key(|r| self.position(&r.identity.world_id));
        }
        if self.defect == Some(Defect::DiscoveryInCollationOrder) {
            found.sort_by_key(|r| r.identity.world_id.to_lowercase());
        }
        Ok(found)
    }
    fn open_world_readonly(&self, world_id: &str) -> Result<WorldInfo, WorldError> {
        let mut info = self.inner.open_world_readonly(world_id)?;
        info.record = self.shown(info.record);
        if self.defect == Some(Defect::SignaturesInRegistrationOrder) {
            info.signatures
                .sort_by_key(|s| self.position(&format!("{world_id}/{}", s.table_id)));
        }
        Ok(info)
    }
    fn list_signatures(&self) -> Result<Vec<SignatureRecord>, WorldError> {
        self.inner.list_signatures()
    }
}

#[test]
fn every_broken_control_catalog_is_caught() {
    let cases = control_catalog_cases::<Mutant>();
    let honest = failing_cases(&cases, &|| Mutant::new(None));
    assert!(honest.is_empty(), "the honest wrapper fails {honest:?}");
    let failures = |d| failing_cases(&cases, &move || Mutant::new(Some(d)));
    Verdicts::of("control catalog", DEFECTS, failures).assert_all_caught(8);
}

// ------------------------------------------------- the administrative suite

use custos_core::migration::control::{AdminEffect, AdminError, ControlAdmin, ControlSnapshot};
use custos_core::migration::departure::Departures;
use custos_core::migration::Destination;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum AdminDefect {
    /// Stores the next administration whatever is stored now.
    NoCompareAndSwap,
    /// Loses the receipt column: a completed retry finds none.
    ForgetsReceipt,
    /// Imports the source's active holder: every imported world comes out
    /// fenced, an epoch above its floor.
    ImportsTheHolder,
    /// Lets reservation rows into the export.
    LeaksAdministration,
    /// Registers the staged worlds at staging, before activation.
    ImportsAtStaging,
    /// The export reads active worlds only (a "live worlds" query):
    /// destroyed worlds are lost in a migration.
    ExportsOnlyActiveWorlds,
    /// The export reads the registration columns only: tick heads come
    /// out at their default.
    ExportLosesTickHeads,
    /// The administration row is written before the effect is judged: a
    /// refused stage or activation still stores the next administration.
    RefusalStillStoresTheAdministration,
    /// A repeated stage of the same bundle is refused as another bundle.
    RestageConflicts,
    /// The receipt is stored as text with a trailing newline.
    ReceiptStoredAsText,
    /// The departure record is written whatever is stored now: two racing
    /// planners both record theirs, and a source gets two homes.
    DeparturesBlindWrite,
    /// The departure record is kept in the live tables: it shows in the
    /// export, so a later migration's snapshot carries it.
    DeparturesExported,
}

const ADMIN_DEFECTS: [AdminDefect; 12] = [
    AdminDefect::DeparturesBlindWrite,
    AdminDefect::DeparturesExported,
    AdminDefect::NoCompareAndSwap,
    AdminDefect::ForgetsReceipt,
    AdminDefect::ImportsTheHolder,
    AdminDefect::LeaksAdministration,
    AdminDefect::ImportsAtStaging,
    AdminDefect::ExportsOnlyActiveWorlds,
    AdminDefect::ExportLosesTickHeads,
    AdminDefect::RefusalStillStoresTheAdministration,
    AdminDefect::RestageConflicts,
    AdminDefect::ReceiptStoredAsText,
];

struct AdminMutant {
    defect: Option<AdminDefect>,
    inner: MemoryControlCatalog,
}

impl ControlCatalog for AdminMutant {
    fn apply(&self, req: &Request) -> Result<Outcome, WorldError> {
        self.inner.apply(req)
    }
    custos_teeth::forward_control_reads!(inner);
}

impl ControlAdmin for AdminMutant {
    custos_teeth::forward_admin_reads!(inner: load_destination, load_departures);
    fn export_snapshot(&self) -> Result<ControlSnapshot, AdminError> {
        let mut s = self.inner.export_snapshot()?;
        match self.defect {
            Some(AdminDefect::LeaksAdministration) => {
                if let Some(r) = self.inner.load_destination()?.reservation {
                    s.worlds.push(custos_conformance::control::record(
                        &format!("~reservation-{}", r.plan.migration_id),
                        custos_core::world::WriterMode::CleanupOnly,
                    ));
                }
            }
            Some(AdminDefect::ExportsOnlyActiveWorlds) => {
                s.worlds.retain(|w| w.status == WorldStatus::Active);
            }
            Some(AdminDefect::ExportLosesTickHeads) => {
                for w in &mut s.worlds {
                    w.tick_head = 0;
                }
            }
            Some(AdminDefect::DeparturesExported) => {
                for d in self.inner.load_departures()?.records {
                    s.worlds.push(custos_conformance::control::record(
                        &format!("~departed-{}", d.migration_id),
                        custos_core::world::WriterMode::CleanupOnly,
                    ));
                }
            }
            _ => {}
        }
        Ok(s)
    }
    fn commit_destination(
        &self,
        expected: &Destination,
        next: &Destination,
        effect: AdminEffect<'_>,
    ) -> Result<(), AdminError> {
        let expected = if self.defect == Some(AdminDefect::NoCompareAndSwap) {
            self.inner.load_destination()?
        } else {
            expected.clone()
        };
        if let (Some(AdminDefect::RestageConflicts), AdminEffect::Stage { .. }) =
            (self.defect, effect)
        {
            if let Some(r) = next.reservation.as_ref().filter(|_| expected == *next) {
                return Err(AdminError::StagingConflict {
                    migration_id: r.plan.migration_id.clone(),
                });
            }
        }
        if let Err(e) = self.inner.commit_destination(&expected, next, effect) {
            if self.defect == Some(AdminDefect::RefusalStillStoresTheAdministration)
                && !matches!(e, AdminError::Moved { .. })
            {
                let _ = self
                    .inner
                    .commit_destination(&expected, next, AdminEffect::None);
            }
            return Err(e);
        }
        match (self.defect, effect) {
            (Some(AdminDefect::ImportsTheHolder), AdminEffect::Activate) => {
                for w in self.inner.discover_worlds().unwrap() {
                    let _ = self.inner.apply(&Request::AcquireFence {
                        world_id: w.identity.world_id,
                        holder: custos_core::fence::Holder::new("migration").unwrap(),
                        purpose: FencePurpose::Migration,
                    });
                }
            }
            (Some(AdminDefect::ImportsAtStaging), AdminEffect::Stage { snapshot, .. }) => {
                for w in &snapshot.worlds {
                    let mut active = w.clone();
                    active.status = WorldStatus::Active;
                    let _ = self.inner.register(&active);
                }
            }
            _ => {}
        }
        Ok(())
    }
    fn commit_departures(
        &self,
        expected: &Departures,
        next: &Departures,
    ) -> Result<(), AdminError> {
        if self.defect == Some(AdminDefect::DeparturesBlindWrite) {
            let stored = self.inner.load_departures()?;
            return self.inner.commit_departures(&stored, next);
        }
        self.inner.commit_departures(expected, next)
    }
    fn stored_receipt(&self) -> Result<Option<Vec<u8>>, AdminError> {
        match self.defect {
            Some(AdminDefect::ForgetsReceipt) => Ok(None),
            Some(AdminDefect::ReceiptStoredAsText) => {
                Ok(self.inner.stored_receipt()?.map(|mut b| {
                    b.push(b'\n');
                    b
                }))
            }
            _ => self.inner.stored_receipt(),
        }
    }
}

#[test]
fn every_broken_control_administration_is_caught() {
    let cases = control_admin_cases::<AdminMutant>();
    let failures = |defect| {
        let factory = move || AdminMutant {
            defect,
            inner: MemoryControlCatalog::new(),
        };
        failing_cases(&cases, &factory)
    };
    let honest = failures(None);
    assert!(honest.is_empty(), "the honest wrapper fails {honest:?}");
    Verdicts::of("control admin", ADMIN_DEFECTS, |d| failures(Some(d))).assert_all_caught(8);
}

/// A control catalog over a [`Disk`] of acknowledged requests: each open
/// replays the disk into a fresh memory catalog, as the mode allows.
struct Durable {
    inner: MemoryControlCatalog,
    disk: std::sync::Arc<Disk<Stored>>,
}

/// An acknowledged write, as the durable wrapper's disk keeps it.
#[derive(Clone)]
enum Stored {
    Request(Request),
    Destination {
        expected: Box<Destination>,
        next: Box<Destination>,
        /// The staged snapshot and floors, for a staging commit.
        stage: Option<(ControlSnapshot, Vec<custos_core::migration::WorldFloor>)>,
        activate: bool,
    },
    Departures(Departures, Departures),
}

impl Durable {
    fn open(disk: &std::sync::Arc<Disk<Stored>>) -> Self {
        let inner = MemoryControlCatalog::new();
        for r in disk.replay() {
            let _ = match r {
                Stored::Request(r) => inner.apply(&r).map(drop).map_err(drop),
                Stored::Destination {
                    expected,
                    next,
                    stage,
                    activate,
                } => {
                    let effect = match (&stage, activate) {
                        (Some((snapshot, floors)), _) => AdminEffect::Stage { snapshot, floors },
                        (None, true) => AdminEffect::Activate,
                        (None, false) => AdminEffect::None,
                    };
                    inner
                        .commit_destination(&expected, &next, effect)
                        .map_err(drop)
                }
                Stored::Departures(expected, next) => {
                    inner.commit_departures(&expected, &next).map_err(drop)
                }
            };
        }
        Durable {
            inner,
            disk: std::sync::Arc::clone(disk),
        }
    }
}

impl ControlCatalog for Durable {
    fn apply(&self, req: &Request) -> Result<Outcome, WorldError> {
        let o = self.inner.apply(req)?;
        self.disk.record(Stored::Request(req.clone()));
        Ok(o)
    }
    custos_teeth::forward_control_reads!(inner);
}

impl ControlAdmin for Durable {
    custos_teeth::forward_admin_reads!(
        inner: export_snapshot,
        load_destination,
        load_departures,
        stored_receipt,
    );
    fn commit_destination(
        &self,
        expected: &Destination,
        next: &Destination,
        effect: AdminEffect<'_>,
    ) -> Result<(), AdminError> {
        self.inner.commit_destination(expected, next, effect)?;
        let (stage, activate) = match effect {
            AdminEffect::Stage { snapshot, floors } => {
                (Some((snapshot.clone(), floors.to_vec())), false)
            }
            AdminEffect::Activate => (None, true),
            AdminEffect::None => (None, false),
        };
        self.disk.record(Stored::Destination {
            expected: Box::new(expected.clone()),
            next: Box::new(next.clone()),
            stage,
            activate,
        });
        Ok(())
    }
    fn commit_departures(
        &self,
        expected: &Departures,
        next: &Departures,
    ) -> Result<(), AdminError> {
        self.inner.commit_departures(expected, next)?;
        self.disk
            .record(Stored::Departures(expected.clone(), next.clone()));
        Ok(())
    }
}

#[test]
fn every_control_catalog_that_loses_durability_fails_a_reopen_case() {
    // The control catalog has no open-time recovery to skip.
    let cases = control_catalog_reopen_cases();
    assert_reopen_caught(
        "control catalog reopen",
        HONEST_WITHOUT_RECOVERY,
        LOSSES,
        |mode| reopen_failing_cases(&cases, mode, Durable::open),
    );
}

#[test]
fn every_administration_that_loses_durability_fails_a_reopen_case() {
    let cases = control_admin_reopen_cases();
    assert_reopen_caught(
        "control admin reopen",
        HONEST_WITHOUT_RECOVERY,
        LOSSES,
        |mode| reopen_failing_cases(&cases, mode, Durable::open),
    );
}
