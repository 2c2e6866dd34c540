//! The branch walk of a row backend, written once.
//!
//! A row backend (SQLite, PostgreSQL, a user's) keeps a branch index so
//! that the walk from a leaf to its root reads only the branch: entries
//! are placed in *segments*, each a run of positions `0..` along one line
//! of descent; a segment that starts at a fork (or at a root) names its
//! parent segment and the parent's position in it (`None, None` for a
//! root's segment). A backend answers two questions — a page of a
//! segment's rows at or below a position, highest first, and a segment's
//! parent link — and [`BranchWalk`] does the rest: it pages lazily
//! (nothing past what the caller pulls is read), and checks what the
//! index promises as it goes: positions are consecutive, seqs strictly
//! decrease towards the root, a parent segment is older than its child
//! and its position is not negative. A broken promise is
//! [`StorageError::Corrupt`] naming the segment, and ends the walk.

use std::collections::VecDeque;

use super::{Kind, RecordId, Seq, StorageError};

/// How many rows a walk asks for at a time.
pub const BRANCH_PAGE: usize = 64;

/// One branch-index row: an entry's seq and kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BranchHead {
    /// The entry's seq.
    pub seq: Seq,
    /// The entry's kind.
    pub kind: Kind,
}

/// A page of a segment's rows: `(pos, head)`, highest position first.
pub type Page = Vec<(i64, BranchHead)>;

/// A segment's parent link as stored: `(parent_segment, parent_pos)`,
/// both `None` for a root's segment.
pub type ParentLink = (Option<i64>, Option<i64>);

/// What a walk asks its backend.
pub trait BranchRows {
    /// The rows of `segment` at positions `<= upper`, highest position
    /// first, at most `limit` of them: `(pos, head)`.
    fn page(&mut self, segment: i64, upper: i64, limit: usize) -> Result<Page, StorageError>;

    /// `segment`'s parent link `(parent_segment, parent_pos)` as stored;
    /// `None` when the segment has no meta row.
    fn parent(&mut self, segment: i64) -> Result<Option<ParentLink>, StorageError>;
}

/// The walk from a leaf to its root, as branch-index heads, a page at a
/// time.
pub struct BranchWalk<R> {
    rows: R,
    /// `(segment, highest pos still to read)`; `None` once past the root.
    at: Option<(i64, i64)>,
    buf: VecDeque<BranchHead>,
    last_seq: Option<Seq>,
    pending_err: Option<StorageError>,
}

fn corrupt(detail: String) -> StorageError {
    StorageError::Corrupt { detail }
}

impl<R: BranchRows> BranchWalk<R> {
    /// Starts at the leaf `leaf`, whose place the backend looked up:
    /// `Ok(Some((segment, pos)))`; `Ok(None)`, no such entry (the walk's
    /// one item is `UnknownEntry`); or the lookup's failure (its one item).
    pub fn start(
        rows: R,
        leaf: &RecordId,
        place: Result<Option<(i64, i64)>, StorageError>,
    ) -> Self {
        let mut w = BranchWalk {
            rows,
            at: None,
            buf: VecDeque::new(),
            last_seq: None,
            pending_err: None,
        };
        match place {
            Ok(Some(at)) => w.at = Some(at),
            Ok(None) => w.pending_err = Some(StorageError::UnknownEntry { id: leaf.clone() }),
            Err(e) => w.pending_err = Some(e),
        }
        w
    }

    /// The backend the walk reads through.
    pub fn rows(&mut self) -> &mut R {
        &mut self.rows
    }

    fn fill(&mut self) -> Result<(), StorageError> {
        let Some((segment, upper)) = self.at else {
            return Ok(());
        };
        let rows = self.rows.page(segment, upper, BRANCH_PAGE)?;
        if rows.is_empty() {
            return Err(corrupt(format!(
                "branch segment {segment} has no position {upper}"
            )));
        }
        let mut expect = upper;
        for (pos, head) in rows {
            if pos != expect {
                return Err(corrupt(format!(
                    "branch segment {segment} has no position {expect}"
                )));
            }
            if self.last_seq.is_some_and(|l| head.seq >= l) {
                return Err(corrupt(format!(
                    "branch segment {segment} position {pos}: seq does not decrease"
                )));
            }
            self.last_seq = Some(head.seq);
            expect = expect
                .checked_sub(1)
                .ok_or_else(|| corrupt(format!("branch segment {segment}: position underflow")))?;
            self.buf.push_back(head);
        }
        if expect >= 0 {
            self.at = Some((segment, expect));
            return Ok(());
        }
        // The segment is exhausted: hop to its parent segment.
        let hop = self
            .rows
            .parent(segment)?
            .ok_or_else(|| corrupt(format!("branch segment {segment} has no meta row")))?;
        self.at = match hop {
            (None, None) => None,
            (Some(ps), Some(pp)) if ps < segment && pp >= 0 => Some((ps, pp)),
            _ => {
                return Err(corrupt(format!(
                    "branch segment {segment} has a malformed parent link"
                )))
            }
        };
        Ok(())
    }
}

impl<R: BranchRows> Iterator for BranchWalk<R> {
    type Item = Result<BranchHead, StorageError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.pending_err.take() {
            self.at = None;
            self.buf.clear();
            return Some(Err(e));
        }
        loop {
            if let Some(h) = self.buf.pop_front() {
                return Some(Ok(h));
            }
            self.at?;
            if let Err(e) = self.fill() {
                // Heads of the page that broke are not handed out after
                // the error: the walk ends at it.
                self.at = None;
                self.buf.clear();
                return Some(Err(e));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Segments in memory: rows by (segment, pos) and parent links.
    #[derive(Default)]
    struct Rows {
        entries: BTreeMap<(i64, i64), Seq>,
        meta: BTreeMap<i64, ParentLink>,
        pages: usize,
    }

    impl BranchRows for &mut Rows {
        fn page(&mut self, segment: i64, upper: i64, limit: usize) -> Result<Page, StorageError> {
            self.pages += 1;
            Ok(self
                .entries
                .range((segment, i64::MIN)..=(segment, upper))
                .rev()
                .take(limit)
                .map(|(&(_, pos), &seq)| {
                    (
                        pos,
                        BranchHead {
                            seq,
                            kind: Kind::new("k").unwrap_or_else(|_| unreachable!()),
                        },
                    )
                })
                .collect())
        }

        fn parent(&mut self, segment: i64) -> Result<Option<ParentLink>, StorageError> {
            Ok(self.meta.get(&segment).copied())
        }
    }

    fn leaf() -> RecordId {
        RecordId::new("leaf").unwrap_or_else(|_| unreachable!())
    }

    /// A root segment 1 of `n` entries (seqs 1..=n) and a fork, segment 2,
    /// from position `fork` of segment 1, of two entries.
    fn forked(n: i64, fork: i64) -> Rows {
        let mut r = Rows::default();
        for pos in 0..n {
            r.entries
                .insert((1, pos), u64::try_from(pos + 1).unwrap_or(0));
        }
        r.entries.insert((2, 0), 1_000);
        r.entries.insert((2, 1), 1_001);
        r.meta.insert(1, (None, None));
        r.meta.insert(2, (Some(1), Some(fork)));
        r
    }

    fn seqs(rows: &mut Rows, at: (i64, i64)) -> Vec<Result<Seq, StorageError>> {
        BranchWalk::start(rows, &leaf(), Ok(Some(at)))
            .map(|h| h.map(|h| h.seq))
            .collect()
    }

    #[test]
    fn a_walk_follows_the_branch_to_its_root_a_page_at_a_time() {
        let mut rows = forked(200, 149);
        let got: Vec<Seq> = seqs(&mut rows, (2, 1)).into_iter().flatten().collect();
        let mut want = vec![1_001, 1_000];
        want.extend((1..=150).rev());
        assert_eq!(got, want);
        // Two pages of the fork's segment is one (two rows), then 150 rows
        // of the root's in pages of 64: 3.
        assert_eq!(rows.pages, 4);
        // Nothing past what is pulled is read.
        let mut rows = forked(200, 149);
        let first: Vec<_> = BranchWalk::start(&mut rows, &leaf(), Ok(Some((2, 1))))
            .take(1)
            .collect();
        assert_eq!(first.len(), 1);
        assert_eq!(rows.pages, 1);
    }

    #[test]
    fn a_broken_index_is_corrupt_and_ends_the_walk() {
        let corrupt_last = |mut rows: Rows, at| {
            let got = seqs(&mut rows, at);
            // The error is the walk's last item: nothing after it.
            assert!(
                matches!(got.last(), Some(Err(StorageError::Corrupt { .. }))),
                "{got:?}"
            );
            assert_eq!(got.iter().filter(|h| h.is_err()).count(), 1, "{got:?}");
        };
        // A gap in positions.
        let mut r = forked(10, 5);
        r.entries.remove(&(1, 3));
        corrupt_last(r, (2, 1));
        // Seqs that do not decrease.
        let mut r = forked(10, 5);
        r.entries.insert((1, 5), 5_000);
        corrupt_last(r, (2, 1));
        // A parent that is not older, a missing meta row, a half link.
        for link in [Some((Some(3), Some(0))), None, Some((Some(1), None))] {
            let mut r = forked(10, 5);
            match link {
                Some(l) => r.meta.insert(2, l),
                None => r.meta.remove(&2),
            };
            corrupt_last(r, (2, 1));
        }
        // A start past the segment's end.
        corrupt_last(forked(10, 5), (1, 50));
        // An unknown leaf is its own one item.
        let mut r = forked(10, 5);
        let got: Vec<_> = BranchWalk::start(&mut r, &leaf(), Ok(None)).collect();
        assert!(matches!(
            got.as_slice(),
            [Err(StorageError::UnknownEntry { .. })]
        ));
    }
}
