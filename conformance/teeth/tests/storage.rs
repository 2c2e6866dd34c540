//! The suite has teeth: broken backends (mutants wrapping the memory backend)
//! must each fail the case written for their defect, while passing an
//! unrelated case.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // test-only mutant backends

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

use custos_conformance::storage as suite;
use custos_core::storage::{
    BranchScan, Commit, CommitError, CommitReceipt, Entry, EntryHead, EntryScan, KeyPrefix,
    MemoryStorage, Namespace, RecordId, Register, RegisterKey, Stats, Storage, StorageError,
    UsageRow, UsageScan, Write,
};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Defect {
    IgnoresExpectations,
    ReadsAfterClose,
    FiltersBeforeStop,
    StatsDrift,
    PanicsWhenClosed,
    BurnsSeqOnRefusal,
    DuplicateIdOverwrites,
}

struct Mutant {
    defect: Defect,
    inner: MemoryStorage,
    shadow: MemoryStorage,
    closed: AtomicBool,
}

impl Mutant {
    fn new(defect: Defect) -> Self {
        Mutant {
            defect,
            inner: MemoryStorage::new(),
            shadow: MemoryStorage::new(),
            closed: AtomicBool::new(false),
        }
    }
    fn reads(&self) -> &MemoryStorage {
        if self.defect == Defect::ReadsAfterClose && self.closed.load(Ordering::SeqCst) {
            &self.shadow
        } else {
            &self.inner
        }
    }
}

impl Storage for Mutant {
    fn commit(&self, c: &Commit) -> Result<CommitReceipt, CommitError> {
        match self.defect {
            Defect::IgnoresExpectations => {
                let mut c = c.clone();
                c.expectations.clear();
                self.inner.commit(&c)
            }
            Defect::PanicsWhenClosed if self.closed.load(Ordering::SeqCst) => {
                panic!("mutant: commit on a closed handle")
            }
            Defect::BurnsSeqOnRefusal => {
                let r = self.inner.commit(c);
                if r.is_err() {
                    let _ = self
                        .inner
                        .commit(&Commit::at(0).write(Write::DeleteRegister {
                            namespace: Namespace::new("burn").unwrap(),
                            key: RegisterKey::new("burn").unwrap(),
                        }));
                }
                r
            }
            Defect::DuplicateIdOverwrites => {
                // Drops writes whose id exists, then commits the rest.
                let mut c = c.clone();
                c.writes.retain(|w| match w {
                    Write::InsertEntry { id, .. } | Write::InsertUsage { id, .. } => {
                        self.inner.get_entries(std::slice::from_ref(id)).unwrap()[0].is_none()
                    }
                    _ => true,
                });
                self.inner.commit(&c)
            }
            _ => {
                let r = self.inner.commit(c);
                if r.is_ok() && self.defect == Defect::ReadsAfterClose {
                    let _ = self.shadow.commit(c);
                }
                r
            }
        }
    }
    fn get_entries(&self, ids: &[RecordId]) -> Result<Vec<Option<Entry>>, StorageError> {
        self.reads().get_entries(ids)
    }
    fn get_register(
        &self,
        n: &Namespace,
        k: &RegisterKey,
    ) -> Result<Option<Register>, StorageError> {
        self.reads().get_register(n, k)
    }
    fn list_registers(&self, n: &Namespace, p: &KeyPrefix) -> Result<Vec<Register>, StorageError> {
        self.reads().list_registers(n, p)
    }
    fn scan_branch(&self, q: &BranchScan) -> Result<Vec<Entry>, StorageError> {
        if self.defect == Defect::FiltersBeforeStop {
            let mut walk = q.clone();
            walk.stop_at_kinds.clear();
            walk.limit = None;
            walk.cursor = None;
            let mut out = Vec::new();
            for e in self.reads().scan_branch(&walk)? {
                let stop = q.stops_at(&e.kind);
                if q.keeps_seq(e.seq) {
                    out.push(e);
                }
                if stop {
                    break;
                }
            }
            out.truncate(q.limit.unwrap_or(usize::MAX));
            return Ok(out);
        }
        self.reads().scan_branch(q)
    }
    fn scan_entries(&self, q: &EntryScan) -> Result<Vec<Entry>, StorageError> {
        self.reads().scan_entries(q)
    }
    fn scan_entry_heads(&self, q: &EntryScan) -> Result<Vec<EntryHead>, StorageError> {
        self.reads().scan_entry_heads(q)
    }
    fn scan_usage(&self, q: &UsageScan) -> Result<Vec<UsageRow>, StorageError> {
        self.reads().scan_usage(q)
    }
    fn stats(&self) -> Result<Stats, StorageError> {
        let mut s = self.reads().stats()?;
        if self.defect == Defect::StatsDrift && s.usage_rows > 3 {
            s.totals.cost_micros += 1;
        }
        Ok(s)
    }
    fn close(&self) -> Result<(), StorageError> {
        self.closed.store(true, Ordering::SeqCst);
        match self.defect {
            Defect::ReadsAfterClose | Defect::PanicsWhenClosed => Ok(()),
            _ => self.inner.close(),
        }
    }
}

fn fails(case: fn(&dyn Fn() -> Mutant), defect: Defect) -> bool {
    let factory = move || Mutant::new(defect);
    catch_unwind(AssertUnwindSafe(|| case(&factory))).is_err()
}

fn case(name: &str) -> fn(&dyn Fn() -> Mutant) {
    suite::storage_cases::<Mutant>()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| f)
        .unwrap_or_else(|| panic!("no case {name}"))
}

#[test]
fn every_mutant_is_caught_by_its_case_and_only_breaks_what_it_breaks() {
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let table = [
        (Defect::IgnoresExpectations, "refused_cas_applies_nothing"),
        (Defect::ReadsAfterClose, "closed_reads_answer_handle_closed"),
        (
            Defect::FiltersBeforeStop,
            "branch_scan_stop_is_resolved_before_filtering",
        ),
        (Defect::StatsDrift, "stats_equal_ledger_after_every_commit"),
        (Defect::PanicsWhenClosed, "closed_commit_answers_faulted"),
        (Defect::BurnsSeqOnRefusal, "failed_commit_consumes_no_seq"),
        (
            Defect::DuplicateIdOverwrites,
            "duplicate_entry_id_is_corruption",
        ),
    ];
    let mut report = Vec::new();
    for (defect, killer) in table {
        let killed = fails(case(killer), defect);
        // An unrelated case still passes, so the mutant is a near miss.
        let control = fails(case("list_registers_isolates_namespaces"), defect);
        report.push((defect, killed, control));
    }
    std::panic::set_hook(prev);
    for (defect, killed, control) in &report {
        assert!(killed, "{defect:?} survived its case");
        assert!(!control, "{defect:?} broke the control case");
    }
}
