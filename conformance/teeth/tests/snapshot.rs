//! The snapshot suite has teeth: broken backends — wrappers over the
//! memory backend, each with one bug a backend author might write — must
//! each fail at least one case, and the honest wrapper none.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_conformance::snapshot::snapshot_cases;
use custos_core::snapshot::{
    CellHeader, CutView, Descriptor, Head, KeyRange, SnapshotError, SnapshotSource,
    MAX_CAPTURE_CELLS,
};
use custos_core::storage::{
    Commit, CommitError, CommitReceipt, KeyPrefix, MemoryStorage, Namespace, RecordId, Register,
    RegisterKey, Seq, Storage, StorageError,
};
use custos_teeth::{failing_cases, Verdicts};

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
    /// Descriptor pages continue at `seq >= after`: each page repeats the
    /// previous page's last descriptor.
    DescriptorCursorInclusive,
    /// The lineage probe admits `seq <= below` (an inclusive bound).
    ProbeBelowInclusive,
    /// A header window ignores an exclusive start (the cursor key comes
    /// back on the next page).
    HeaderStartAlwaysInclusive,
    /// `cells` answers the present cells only, unaligned with the keys.
    CellsSkipMissing,
    /// A header's size is the stored row's length (key and value), not the
    /// value's.
    HeaderSizeCountsTheKey,
    /// The cut's head reports the last committed seq as its high-water
    /// (inclusive, not the next seq).
    HighWaterIsTheLastSeq,
    /// A fragment read ignores the offset and reads from the payload's
    /// start.
    FragmentIgnoresOffset,
}

const BUGS: [Bug; 12] = [
    Bug::LimitBeforeCursor,
    Bug::LeaksAboveTheCut,
    Bug::TruncatesInsteadOfRefusing,
    Bug::ProbeIgnoresBelow,
    Bug::ExactByPrefixScan,
    Bug::DescriptorCursorInclusive,
    Bug::ProbeBelowInclusive,
    Bug::HeaderStartAlwaysInclusive,
    Bug::CellsSkipMissing,
    Bug::HeaderSizeCountsTheKey,
    Bug::HighWaterIsTheLastSeq,
    Bug::FragmentIgnoresOffset,
];

struct Broken {
    bug: Option<Bug>,
    inner: MemoryStorage,
}

impl Storage for Broken {
    fn commit(&self, c: &Commit) -> Result<CommitReceipt, CommitError> {
        self.inner.commit(c)
    }
    custos_teeth::forward_storage_reads!(inner);
    fn close(&self) -> Result<(), StorageError> {
        self.inner.close()
    }
}

struct BrokenView<'v> {
    bug: Option<Bug>,
    view: &'v dyn CutView,
}

impl CutView for BrokenView<'_> {
    fn head(&self) -> Result<Head, StorageError> {
        let mut head = self.view.head()?;
        if self.bug == Some(Bug::HighWaterIsTheLastSeq) {
            head.next_seq = head.next_seq.saturating_sub(1);
        }
        Ok(head)
    }
    fn header(&self, n: &Namespace, k: &RegisterKey) -> Result<Option<CellHeader>, StorageError> {
        if self.bug == Some(Bug::ExactByPrefixScan) {
            let range = KeyRange::prefix(&KeyPrefix::new(k.as_str()).unwrap());
            return Ok(self.view.headers(n, &range, 1)?.into_iter().next());
        }
        Ok(self.view.header(n, k)?.map(|h| self.sized(h)))
    }
    fn headers(
        &self,
        n: &Namespace,
        range: &KeyRange,
        limit: usize,
    ) -> Result<Vec<CellHeader>, StorageError> {
        let mut range = range.clone();
        if self.bug == Some(Bug::HeaderStartAlwaysInclusive) {
            range.start_inclusive = true;
        }
        let range = &range;
        let headers = match self.bug {
            Some(Bug::LimitBeforeCursor) => {
                let from_start = KeyRange {
                    start: String::new(),
                    start_inclusive: true,
                    end: range.end.clone(),
                };
                let mut v = self.view.headers(n, &from_start, limit)?;
                v.retain(|h| range.contains(h.key.as_str()));
                v
            }
            Some(Bug::TruncatesInsteadOfRefusing) => {
                self.view.headers(n, range, limit.min(MAX_CAPTURE_CELLS))?
            }
            _ => self.view.headers(n, range, limit)?,
        };
        Ok(headers.into_iter().map(|h| self.sized(h)).collect())
    }
    fn cells(
        &self,
        n: &Namespace,
        k: &[RegisterKey],
    ) -> Result<Vec<Option<Register>>, StorageError> {
        let mut cells = self.view.cells(n, k)?;
        if self.bug == Some(Bug::CellsSkipMissing) {
            cells.retain(Option::is_some);
        }
        Ok(cells)
    }
}

impl BrokenView<'_> {
    fn sized(&self, mut h: CellHeader) -> CellHeader {
        if self.bug == Some(Bug::HeaderSizeCountsTheKey) {
            h.size += h.key.as_str().len() as u64;
        }
        h
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
        let below = if self.bug == Some(Bug::LeaksAboveTheCut) {
            Seq::MAX
        } else {
            below
        };
        let after = match (self.bug, after) {
            (Some(Bug::DescriptorCursorInclusive), Some(a)) => a.checked_sub(1),
            _ => after,
        };
        self.inner.descriptors(after, below, limit)
    }
    fn entry_head(&self, id: &RecordId, below: Seq) -> Result<Option<Descriptor>, StorageError> {
        let below = match self.bug {
            Some(Bug::ProbeIgnoresBelow) => Seq::MAX,
            Some(Bug::ProbeBelowInclusive) => below.saturating_add(1),
            _ => below,
        };
        self.inner.entry_head(id, below)
    }
    fn fragment_bytes(
        &self,
        head: &Descriptor,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>, StorageError> {
        let offset = if self.bug == Some(Bug::FragmentIgnoresOffset) {
            0
        } else {
            offset
        };
        self.inner.fragment_bytes(head, offset, len)
    }
}

#[test]
fn every_broken_snapshot_backend_fails_a_case() {
    let cases = snapshot_cases::<Broken>();
    let failures = |bug| {
        let factory = move || Broken {
            bug,
            inner: MemoryStorage::new(),
        };
        failing_cases(&cases, &factory)
    };
    let honest = failures(None);
    assert!(honest.is_empty(), "the honest wrapper fails {honest:?}");
    Verdicts::of("snapshot", BUGS, |bug| failures(Some(bug))).assert_all_caught(8);
}
