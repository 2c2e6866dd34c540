//! The control-catalog suite's fence cases have teeth: broken backends
//! (mutants wrapping the memory backend, each a mistake a real backend
//! could make) must each fail the case written for their defect, and pass
//! an unrelated case.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // test-only mutant backends

use std::panic::{catch_unwind, AssertUnwindSafe};

use custos_conformance::control as suite;
use custos_core::world::{
    ControlCatalog, FencePurpose, MemoryControlCatalog, Outcome, Request, SignatureRecord,
    WorldError, WorldInfo, WorldRecord,
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
}

struct Mutant {
    defect: Defect,
    inner: MemoryControlCatalog,
}

impl ControlCatalog for Mutant {
    fn apply(&self, req: &Request) -> Result<Outcome, WorldError> {
        let mut req = req.clone();
        match (&mut req, self.defect) {
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
                let info = self.inner.open_world_readonly(world_id)?;
                return Ok(Outcome::FenceAcquired {
                    epoch: info.fence.issued + 1,
                    staled: info.fence.current(),
                });
            }
            (Request::AcquireFence { .. }, Defect::SharesEpochsAcrossWorlds) => {
                // Every acquire anywhere advances every world's counter.
                let out = self.inner.apply(&req)?;
                for w in self.inner.discover_worlds()? {
                    let other = Request::AcquireFence {
                        world_id: w.identity.world_id.clone(),
                        holder: custos_core::fence::Holder::new("shared").unwrap(),
                        purpose: FencePurpose::Migration,
                    };
                    if w.identity.world_id != req.world_id() {
                        let _ = self.inner.apply(&other);
                    }
                }
                return Ok(out);
            }
            _ => {}
        }
        self.inner.apply(&req)
    }
    fn discover_worlds(&self) -> Result<Vec<WorldRecord>, WorldError> {
        self.inner.discover_worlds()
    }
    fn open_world_readonly(&self, world_id: &str) -> Result<WorldInfo, WorldError> {
        self.inner.open_world_readonly(world_id)
    }
    fn list_signatures(&self) -> Result<Vec<SignatureRecord>, WorldError> {
        self.inner.list_signatures()
    }
}

type Case = fn(&dyn Fn() -> Mutant);

/// Serializes the two tests' panic-hook swaps (the hook is process-wide).
static HOOK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn fails(case: Case, defect: Defect) -> bool {
    let factory = move || Mutant {
        defect,
        inner: MemoryControlCatalog::new(),
    };
    catch_unwind(AssertUnwindSafe(|| case(&factory))).is_err()
}

#[test]
fn every_fence_mutant_is_caught_by_its_case_and_only_breaks_what_it_breaks() {
    let table: [(Defect, &str, Case); 4] = [
        (
            Defect::ResumesAnyMode,
            "resume_of_a_non_resumable_world_fences_nothing",
            |f| suite::resume_of_a_non_resumable_world_fences_nothing(f),
        ),
        (
            Defect::AdmitsStaleEpochs,
            "a_stale_writer_commits_nothing",
            |f| suite::a_stale_writer_commits_nothing(f),
        ),
        (
            Defect::LosesTheFence,
            "resume_acquires_strictly_higher_epochs",
            |f| suite::resume_acquires_strictly_higher_epochs(f),
        ),
        (
            Defect::SharesEpochsAcrossWorlds,
            "fences_are_per_world",
            |f| suite::fences_are_per_world(f),
        ),
    ];
    let unrelated: Case = |f| suite::signatures_round_trip_and_list(f);
    let _hook = HOOK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let report: Vec<_> = table
        .iter()
        .map(|(defect, name, case)| {
            (
                *defect,
                *name,
                fails(*case, *defect),
                fails(unrelated, *defect),
            )
        })
        .collect();
    std::panic::set_hook(prev);
    for (defect, name, killed, broke_unrelated) in report {
        println!("{defect:?}: caught by {name}: {killed}");
        assert!(killed, "{defect:?} survived {name}");
        assert!(!broke_unrelated, "{defect:?} broke an unrelated case");
    }
}

// ------------------------------------------------- the administrative suite

use custos_conformance::control_admin as admin_suite;
use custos_core::migration::control::{AdminEffect, AdminError, ControlAdmin, ControlSnapshot};
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
}

struct AdminMutant {
    defect: AdminDefect,
    inner: MemoryControlCatalog,
}

impl ControlCatalog for AdminMutant {
    fn apply(&self, req: &Request) -> Result<Outcome, WorldError> {
        self.inner.apply(req)
    }
    fn discover_worlds(&self) -> Result<Vec<WorldRecord>, WorldError> {
        self.inner.discover_worlds()
    }
    fn open_world_readonly(&self, world_id: &str) -> Result<WorldInfo, WorldError> {
        self.inner.open_world_readonly(world_id)
    }
    fn list_signatures(&self) -> Result<Vec<SignatureRecord>, WorldError> {
        self.inner.list_signatures()
    }
}

impl ControlAdmin for AdminMutant {
    fn export_snapshot(&self) -> Result<ControlSnapshot, AdminError> {
        let mut s = self.inner.export_snapshot()?;
        if self.defect == AdminDefect::LeaksAdministration {
            if let Some(r) = self.inner.load_destination()?.reservation {
                s.worlds.push(custos_conformance::control::record(
                    &format!("~reservation-{}", r.plan.migration_id),
                    custos_core::world::WriterMode::CleanupOnly,
                ));
            }
        }
        Ok(s)
    }
    fn load_destination(&self) -> Result<Destination, AdminError> {
        self.inner.load_destination()
    }
    fn commit_destination(
        &self,
        expected: &Destination,
        next: &Destination,
        effect: AdminEffect<'_>,
    ) -> Result<(), AdminError> {
        let expected = if self.defect == AdminDefect::NoCompareAndSwap {
            self.inner.load_destination()?
        } else {
            expected.clone()
        };
        self.inner.commit_destination(&expected, next, effect)?;
        match (self.defect, effect) {
            (AdminDefect::ImportsTheHolder, AdminEffect::Activate) => {
                for w in self.inner.discover_worlds().unwrap() {
                    let _ = self.inner.apply(&Request::AcquireFence {
                        world_id: w.identity.world_id,
                        holder: custos_core::fence::Holder::new("migration").unwrap(),
                        purpose: FencePurpose::Migration,
                    });
                }
            }
            (AdminDefect::ImportsAtStaging, AdminEffect::Stage { snapshot, .. }) => {
                for w in &snapshot.worlds {
                    let mut active = w.clone();
                    active.status = custos_core::world::WorldStatus::Active;
                    let _ = self.inner.register(&active);
                }
            }
            _ => {}
        }
        Ok(())
    }
    fn stored_receipt(&self) -> Result<Option<Vec<u8>>, AdminError> {
        if self.defect == AdminDefect::ForgetsReceipt {
            return Ok(None);
        }
        self.inner.stored_receipt()
    }
}

type AdminCase = fn(&dyn Fn() -> AdminMutant);

fn admin_fails(case: AdminCase, defect: AdminDefect) -> bool {
    let factory = move || AdminMutant {
        defect,
        inner: MemoryControlCatalog::new(),
    };
    catch_unwind(AssertUnwindSafe(|| case(&factory))).is_err()
}

#[test]
fn every_administration_mutant_is_caught_by_its_case_and_only_breaks_what_it_breaks() {
    let export: AdminCase = |f| admin_suite::export_is_exact_and_excludes_administration(f);
    let cas: AdminCase = |f| admin_suite::commits_are_compare_and_swap(f);
    let table: [(AdminDefect, &str, AdminCase, AdminCase); 5] = [
        (
            AdminDefect::NoCompareAndSwap,
            "commits_are_compare_and_swap",
            cas,
            export,
        ),
        (
            AdminDefect::ForgetsReceipt,
            "a_completed_receipt_reads_back_byte_identical",
            |f| admin_suite::a_completed_receipt_reads_back_byte_identical(f),
            cas,
        ),
        (
            AdminDefect::ImportsTheHolder,
            "activation_imports_exact_records_and_floors",
            |f| admin_suite::activation_imports_exact_records_and_floors(f),
            cas,
        ),
        (
            AdminDefect::LeaksAdministration,
            "export_is_exact_and_excludes_administration",
            export,
            cas,
        ),
        (
            AdminDefect::ImportsAtStaging,
            "staging_is_invisible_idempotent_and_exclusive",
            |f| admin_suite::staging_is_invisible_idempotent_and_exclusive(f),
            cas,
        ),
    ];
    let _hook = HOOK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let report: Vec<_> = table
        .iter()
        .map(|(d, name, case, unrelated)| {
            (
                *d,
                *name,
                admin_fails(*case, *d),
                admin_fails(*unrelated, *d),
            )
        })
        .collect();
    std::panic::set_hook(prev);
    for (defect, name, killed, broke_unrelated) in report {
        println!("{defect:?}: caught by {name}: {killed}");
        assert!(killed, "{defect:?} survived {name}");
        assert!(!broke_unrelated, "{defect:?} broke an unrelated case");
    }
}
