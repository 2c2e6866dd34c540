//! The table-store conformance suite against the memory backend
//! (`custos_core::migration::tables::MemoryTableStore`), and its teeth:
//! broken stores wrapping it must each fail the case written for their
//! defect and pass an unrelated one.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::panic::{catch_unwind, AssertUnwindSafe};

use custos_conformance::tables::{self as suite, TableFixture};
use custos_core::migration::artifacts::Occurrence;
use custos_core::migration::tables::{MemoryRows, MemoryTableStore, TableError, TableStore};
use custos_core::migration::{CommitReply, Digest, Name, TableFacts, TablePlan};

fn name(s: &str) -> Name {
    Name::new(s).unwrap()
}

fn put_events(s: &MemoryTableStore, from: u32, n: u32) {
    s.create(&name("events"), Digest::of(b"events schema"))
        .unwrap();
    let rows = (from..from + n)
        .map(|i| format!("event {i}").into_bytes())
        .collect();
    s.append(&name("events"), MemoryRows::Canonical(rows))
        .unwrap();
}

fn put_occurrences(s: &MemoryTableStore, rows: &[Occurrence]) {
    s.create(
        &name("artifact_files"),
        Digest::of(b"artifact_files schema"),
    )
    .unwrap();
    s.append(
        &name("artifact_files"),
        MemoryRows::Occurrences(rows.to_vec()),
    )
    .unwrap();
}

struct Memory;

impl TableFixture for Memory {
    type Store = MemoryTableStore;
    fn fresh(&self) -> MemoryTableStore {
        MemoryTableStore::new()
    }
    fn put_events(&self, s: &MemoryTableStore, from: u32, n: u32) {
        put_events(s, from, n);
    }
    fn put_empty(&self, s: &MemoryTableStore) {
        s.create(&name("empty"), Digest::of(b"empty schema"))
            .unwrap();
    }
    fn put_occurrences(&self, s: &MemoryTableStore, rows: &[Occurrence]) {
        put_occurrences(s, rows);
    }
}

custos_conformance::table_store_suite!(memory_tables, Memory);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Defect {
    /// A retry appends again instead of converging.
    AppendsOnRetry,
    /// Copies the source's current snapshot, not the pinned one.
    CopiesTheCurrentSnapshot,
    /// Copies whatever the pinned snapshot holds, plan or not.
    IgnoresDrift,
    /// Lists only tables with a snapshot in `snapshots` (an empty table
    /// vanishes from a recheck).
    SnapshotsSkipEmptyTables,
}

struct Broken {
    defect: Defect,
    inner: MemoryTableStore,
}

impl TableStore for Broken {
    fn namespace(&self) -> Result<Vec<(Name, TableFacts)>, TableError> {
        self.inner.namespace()
    }
    fn evidence_at(&self, t: &Name, snapshot: u64) -> Result<TableFacts, TableError> {
        self.inner.evidence_at(t, snapshot)
    }
    fn inspect(&self, t: &Name) -> Result<Option<TableFacts>, TableError> {
        self.inner.inspect(t)
    }
    fn snapshots(&self) -> Result<Vec<(Name, u64)>, TableError> {
        let all = self.inner.snapshots()?;
        Ok(match self.defect {
            Defect::SnapshotsSkipEmptyTables => all.into_iter().filter(|(_, s)| *s != 0).collect(),
            _ => all,
        })
    }
    fn occurrences(&self, t: &Name, snapshot: u64) -> Result<Vec<Occurrence>, TableError> {
        self.inner.occurrences(t, snapshot)
    }
    fn relocated_digest(
        &self,
        t: &Name,
        snapshot: u64,
        relocated: &[Occurrence],
    ) -> Result<Digest, TableError> {
        self.inner.relocated_digest(t, snapshot, relocated)
    }
    fn copy_from(
        &self,
        source: &Self,
        plan: &TablePlan,
        relocated: Option<&[Occurrence]>,
    ) -> Result<CommitReply, TableError> {
        let mut plan = plan.clone();
        match self.defect {
            Defect::AppendsOnRetry if self.inner.inspect(&plan.name)?.is_some() => {
                self.inner
                    .append(&plan.name, MemoryRows::Canonical(vec![b"again".to_vec()]))?;
                return Ok(CommitReply::Committed(
                    self.inner.inspect(&plan.name)?.unwrap(),
                ));
            }
            Defect::CopiesTheCurrentSnapshot => {
                if let Some(now) = source.inner.inspect(&plan.name)? {
                    plan.source = now;
                    plan.destination_content_digest = now.content_digest;
                }
            }
            Defect::IgnoresDrift => {
                let real = source.inner.evidence_at(&plan.name, plan.source.snapshot)?;
                plan.source = real;
                plan.destination_content_digest = real.content_digest;
            }
            _ => {}
        }
        self.inner.copy_from(&source.inner, &plan, relocated)
    }
}

struct BrokenFixture(Defect);

impl TableFixture for BrokenFixture {
    type Store = Broken;
    fn fresh(&self) -> Broken {
        Broken {
            defect: self.0,
            inner: MemoryTableStore::new(),
        }
    }
    fn put_events(&self, s: &Broken, from: u32, n: u32) {
        put_events(&s.inner, from, n);
    }
    fn put_empty(&self, s: &Broken) {
        s.inner
            .create(&name("empty"), Digest::of(b"empty schema"))
            .unwrap();
    }
    fn put_occurrences(&self, s: &Broken, rows: &[Occurrence]) {
        put_occurrences(&s.inner, rows);
    }
}

type Case = fn(BrokenFixture);

#[test]
fn every_broken_table_store_is_caught_by_its_case_and_only_breaks_what_it_breaks() {
    let unrelated: Case = suite::the_namespace_lists_every_table_with_pinned_evidence;
    let table: [(Defect, &str, Case); 4] = [
        (
            Defect::AppendsOnRetry,
            "a_copy_lands_once_and_verifies",
            suite::a_copy_lands_once_and_verifies,
        ),
        (
            Defect::CopiesTheCurrentSnapshot,
            "the_pinned_snapshot_is_copied",
            suite::the_pinned_snapshot_is_copied,
        ),
        (
            Defect::IgnoresDrift,
            "a_drifted_source_is_refused_and_nothing_lands",
            suite::a_drifted_source_is_refused_and_nothing_lands,
        ),
        (
            Defect::SnapshotsSkipEmptyTables,
            "snapshots_agree_with_the_namespace",
            suite::snapshots_agree_with_the_namespace,
        ),
    ];
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let report: Vec<_> = table
        .iter()
        .map(|(d, n, case)| {
            let killed = catch_unwind(AssertUnwindSafe(|| case(BrokenFixture(*d)))).is_err();
            let broke = catch_unwind(AssertUnwindSafe(|| unrelated(BrokenFixture(*d)))).is_err();
            (*d, *n, killed, broke)
        })
        .collect();
    std::panic::set_hook(prev);
    for (d, n, killed, broke) in report {
        println!("{d:?}: caught by {n}: {killed}");
        assert!(killed, "{d:?} survived {n}");
        assert!(!broke, "{d:?} broke an unrelated case");
    }
    assert_eq!(suite::TABLE_STORE_CASES.len(), 7);
}
