//! The snapshot suite has teeth: broken backends — wrappers over the
//! memory backend, each with one bug a backend author might write — must
//! each fail at least one case (and the case written for their bug).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::panic::{catch_unwind, AssertUnwindSafe};

use custos_conformance::snapshot::{snapshot_cases, SNAPSHOT_CASES};
use custos_core::snapshot::{
    CellHeader, CutView, Descriptor, Head, KeyRange, SnapshotError, SnapshotSource,
    MAX_CAPTURE_CELLS,
};
use custos_core::storage::{
    BranchScan, Commit, CommitError, CommitReceipt, Entry, EntryHead, EntryScan, KeyPrefix,
    MemoryStorage, Namespace, RecordId, Register, RegisterKey, Seq, Stats, Storage, StorageError,
    UsageRow, UsageScan,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bug {
    /// The header window takes `limit` rows from the start of the
    /// namespace, then applies the cursor and prefix.
    LimitBeforeCursor,
    /// Descriptor pages ignore the cut: rows at or above the high-water.
    LeaksAboveTheCut,
    /// A header window silently caps at the budget (returns 1,024 when
    /// asked for 1,025): the capture is truncated instead of refused.
    TruncatesInsteadOfRefusing,
    /// The lineage probe ignores `below` (looks the id up anywhere).
    ProbeIgnoresBelow,
    /// Exact lookups go through a prefix window (`key LIKE 'k%'`-style)
    /// and answer its first row.
    ExactByPrefixScan,
}

struct Broken {
    bug: Bug,
    inner: MemoryStorage,
}

impl Storage for Broken {
    fn commit(&self, c: &Commit) -> Result<CommitReceipt, CommitError> {
        self.inner.commit(c)
    }
    fn get_entries(&self, ids: &[RecordId]) -> Result<Vec<Option<Entry>>, StorageError> {
        self.inner.get_entries(ids)
    }
    fn get_register(
        &self,
        n: &Namespace,
        k: &RegisterKey,
    ) -> Result<Option<Register>, StorageError> {
        self.inner.get_register(n, k)
    }
    fn list_registers(&self, n: &Namespace, p: &KeyPrefix) -> Result<Vec<Register>, StorageError> {
        self.inner.list_registers(n, p)
    }
    fn scan_branch(&self, q: &BranchScan) -> Result<Vec<Entry>, StorageError> {
        self.inner.scan_branch(q)
    }
    fn scan_entries(&self, q: &EntryScan) -> Result<Vec<Entry>, StorageError> {
        self.inner.scan_entries(q)
    }
    fn scan_entry_heads(&self, q: &EntryScan) -> Result<Vec<EntryHead>, StorageError> {
        self.inner.scan_entry_heads(q)
    }
    fn scan_usage(&self, q: &UsageScan) -> Result<Vec<UsageRow>, StorageError> {
        self.inner.scan_usage(q)
    }
    fn stats(&self) -> Result<Stats, StorageError> {
        self.inner.stats()
    }
    fn close(&self) -> Result<(), StorageError> {
        self.inner.close()
    }
}

struct BrokenView<'v> {
    bug: Bug,
    view: &'v dyn CutView,
}

impl CutView for BrokenView<'_> {
    fn head(&self) -> Result<Head, StorageError> {
        self.view.head()
    }
    fn header(&self, n: &Namespace, k: &RegisterKey) -> Result<Option<CellHeader>, StorageError> {
        if self.bug == Bug::ExactByPrefixScan {
            let range = KeyRange::prefix(&KeyPrefix::new(k.as_str()).unwrap());
            return Ok(self.view.headers(n, &range, 1)?.into_iter().next());
        }
        self.view.header(n, k)
    }
    fn headers(
        &self,
        n: &Namespace,
        range: &KeyRange,
        limit: usize,
    ) -> Result<Vec<CellHeader>, StorageError> {
        match self.bug {
            Bug::LimitBeforeCursor => {
                let from_start = KeyRange {
                    start: String::new(),
                    start_inclusive: true,
                    end: range.end.clone(),
                };
                let mut v = self.view.headers(n, &from_start, limit)?;
                v.retain(|h| range.contains(h.key.as_str()));
                Ok(v)
            }
            Bug::TruncatesInsteadOfRefusing => {
                self.view.headers(n, range, limit.min(MAX_CAPTURE_CELLS))
            }
            _ => self.view.headers(n, range, limit),
        }
    }
    fn cells(
        &self,
        n: &Namespace,
        k: &[RegisterKey],
    ) -> Result<Vec<Option<Register>>, StorageError> {
        self.view.cells(n, k)
    }
}

impl SnapshotSource for Broken {
    fn with_cut<T>(
        &self,
        body: impl FnOnce(&dyn CutView) -> Result<T, SnapshotError>,
    ) -> Result<T, SnapshotError> {
        let bug = self.bug;
        self.inner.with_cut(|view| body(&BrokenView { bug, view }))
    }
    fn descriptors(
        &self,
        after: Option<Seq>,
        below: Seq,
        limit: usize,
    ) -> Result<Vec<Descriptor>, StorageError> {
        let below = if self.bug == Bug::LeaksAboveTheCut {
            Seq::MAX
        } else {
            below
        };
        self.inner.descriptors(after, below, limit)
    }
    fn entry_head(&self, id: &RecordId, below: Seq) -> Result<Option<Descriptor>, StorageError> {
        let below = if self.bug == Bug::ProbeIgnoresBelow {
            Seq::MAX
        } else {
            below
        };
        self.inner.entry_head(id, below)
    }
    fn fragment_bytes(
        &self,
        head: &Descriptor,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>, StorageError> {
        self.inner.fragment_bytes(head, offset, len)
    }
}

fn failing(bug: Bug) -> Vec<&'static str> {
    let mut failed = Vec::new();
    for (name, case) in snapshot_cases::<Broken>() {
        let factory = move || Broken {
            bug,
            inner: MemoryStorage::new(),
        };
        if catch_unwind(AssertUnwindSafe(|| case(&factory))).is_err() {
            failed.push(name);
        }
    }
    failed
}

#[test]
fn every_broken_backend_fails_its_case() {
    let want = [
        (Bug::LimitBeforeCursor, "key_page_bounds_limit_and_cursor"),
        (Bug::LeaksAboveTheCut, "each_page_is_a_fresh_cut"),
        (
            Bug::TruncatesInsteadOfRefusing,
            "capture_over_cell_budget_is_refused_before_values",
        ),
        (
            Bug::ProbeIgnoresBelow,
            "lineage_corrupt_parent_link_ends_the_walk",
        ),
        (
            Bug::ExactByPrefixScan,
            "capture_exact_keys_probe_the_index_and_omit_missing",
        ),
    ];
    let mut report = Vec::new();
    for (bug, case) in want {
        assert!(SNAPSHOT_CASES.contains(&case));
        let failed = failing(bug);
        println!(
            "{bug:?}: fails {} of {} cases: {failed:?}",
            failed.len(),
            SNAPSHOT_CASES.len()
        );
        assert!(!failed.is_empty(), "{bug:?} passes the whole suite");
        assert!(
            failed.len() < SNAPSHOT_CASES.len(),
            "{bug:?} fails everything"
        );
        if !failed.contains(&case) {
            report.push(format!("{bug:?} did not fail {case} (failed {failed:?})"));
        }
    }
    assert!(report.is_empty(), "{report:#?}");
}
