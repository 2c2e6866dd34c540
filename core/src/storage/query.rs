//! The three query shapes and the shared branch pipeline.
//!
//! ## Branch scan
//!
//! A branch scan walks from a leaf entry to the root by parent links and
//! answers entries leaf first (descending seq). Its refinements apply in a
//! fixed order, which every backend shares through [`BranchScan::refine`]:
//!
//! 1. **stop** — on the *unfiltered* path, the walk ends at the first entry
//!    (from the leaf, the leaf included) whose kind is in `stop_at_kinds`;
//!    that entry is kept and nothing above it is. A stop entry that the kind
//!    filter would exclude still stops the walk.
//! 2. **kind filter** — if `kinds` is set, only entries of those kinds remain.
//! 3. **cursor** — if set, only entries with `seq < cursor` remain (pass the
//!    last seq of a page to get the next page).
//! 4. **limit** — at most `limit` entries are answered.
//!
//! ## Seq-range scans
//!
//! [`EntryScan`] and [`UsageScan`] answer rows in ascending seq with
//! `after < seq <= through` (each bound optional), at most `limit` of them.
//! `after` doubles as the cursor: pass the last seq of a page.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::types::{Entry, Kind, RecordId, Seq};

/// A branch scan (see the module docs for the refinement order).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BranchScan {
    /// The entry the walk starts from.
    pub leaf: RecordId,
    /// Kinds that end the walk (inclusive). Empty: walk to the root.
    pub stop_at_kinds: BTreeSet<Kind>,
    /// Kinds to keep; `None` keeps every kind.
    pub kinds: Option<BTreeSet<Kind>>,
    /// Exclusive upper seq bound (the previous page's last seq).
    pub cursor: Option<Seq>,
    /// The most entries to answer; `None` is unbounded.
    pub limit: Option<usize>,
}

/// Starts a branch scan from `leaf` (the `branch_scan` builder).
pub fn branch_scan(leaf: RecordId) -> BranchScan {
    BranchScan {
        leaf,
        stop_at_kinds: BTreeSet::new(),
        kinds: None,
        cursor: None,
        limit: None,
    }
}

impl BranchScan {
    /// Ends the walk at the first entry of this kind (the
    /// `branch_stop_at_kind` builder); may be called for several kinds.
    pub fn stop_at_kind(mut self, kind: Kind) -> Self {
        self.stop_at_kinds.insert(kind);
        self
    }

    /// Keeps only entries of these kinds.
    pub fn kinds(mut self, kinds: impl IntoIterator<Item = Kind>) -> Self {
        self.kinds = Some(kinds.into_iter().collect());
        self
    }

    /// Keeps only entries with `seq < cursor` (the `branch_cursor` builder).
    pub fn cursor(mut self, cursor: Seq) -> Self {
        self.cursor = Some(cursor);
        self
    }

    /// Answers at most `limit` entries.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Whether the walk ends at (and keeps) this entry.
    pub fn stops_at(&self, kind: &Kind) -> bool {
        self.stop_at_kinds.contains(kind)
    }

    /// Whether the kind filter keeps this kind.
    pub fn keeps_kind(&self, kind: &Kind) -> bool {
        self.kinds.as_ref().is_none_or(|k| k.contains(kind))
    }

    /// Whether the cursor keeps this seq.
    pub fn keeps_seq(&self, seq: Seq) -> bool {
        self.cursor.is_none_or(|c| seq < c)
    }

    /// The shared pipeline: refines the unfiltered walk (leaf first) into the
    /// answer. The walk is consumed lazily: nothing past the stop or the
    /// limit is pulled, so a backend feeding pages pays only for what it
    /// answers. Errors in the walk propagate unchanged.
    pub fn refine<E>(
        &self,
        walk: impl IntoIterator<Item = Result<Entry, E>>,
    ) -> Result<Vec<Entry>, E> {
        self.refine_heads(walk, |e| (&e.kind, e.seq), Ok)
    }

    /// The same pipeline over a walk of *heads* (anything that knows its
    /// entry's kind and seq, e.g. a branch-index row): `head` reads a head's
    /// kind and seq, and `load` turns a head into its entry. `load` is called
    /// only for heads the answer keeps, so a backend never reads (or
    /// decodes) the payload of an entry that a stop, the kind filter, the
    /// cursor or the limit excludes. [`BranchScan::refine`] is this with the
    /// entry as its own head; both answer identically.
    pub fn refine_heads<H, E>(
        &self,
        walk: impl IntoIterator<Item = Result<H, E>>,
        head: impl Fn(&H) -> (&Kind, Seq),
        mut load: impl FnMut(H) -> Result<Entry, E>,
    ) -> Result<Vec<Entry>, E> {
        let mut out = Vec::new();
        for item in walk {
            // The first item is always pulled, so an unknown leaf is an
            // error even under `limit(0)`.
            let h = item?;
            if self.limit.is_some_and(|l| out.len() >= l) {
                break;
            }
            let (kind, seq) = head(&h);
            let stop = self.stops_at(kind);
            if self.keeps_kind(kind) && self.keeps_seq(seq) {
                out.push(load(h)?);
                if self.limit.is_some_and(|l| out.len() >= l) {
                    break;
                }
            }
            if stop {
                break;
            }
        }
        Ok(out)
    }
}

/// A seq-range scan over entries, ascending.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EntryScan {
    /// Exclusive lower bound (the cursor).
    pub after: Option<Seq>,
    /// Inclusive upper bound.
    pub through: Option<Seq>,
    /// The most rows to answer; `None` is unbounded.
    pub limit: Option<usize>,
}

/// An entry scan over `after < seq <= through` (the `entry_seq_range` builder).
pub fn entry_seq_range(after: Option<Seq>, through: Option<Seq>) -> EntryScan {
    EntryScan {
        after,
        through,
        limit: None,
    }
}

impl EntryScan {
    /// Every entry.
    pub fn all() -> Self {
        EntryScan::default()
    }

    /// Answers at most `limit` rows.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Whether `seq` lies in the range.
    pub fn contains(&self, seq: Seq) -> bool {
        self.after.is_none_or(|a| seq > a) && self.through.is_none_or(|t| seq <= t)
    }
}

/// A seq-range scan over the usage ledger, ascending.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct UsageScan {
    /// Exclusive lower bound (the cursor).
    pub after: Option<Seq>,
    /// Inclusive upper bound.
    pub through: Option<Seq>,
    /// The most rows to answer; `None` is unbounded.
    pub limit: Option<usize>,
}

/// A usage scan over `after < seq <= through`.
pub fn usage_seq_range(after: Option<Seq>, through: Option<Seq>) -> UsageScan {
    UsageScan {
        after,
        through,
        limit: None,
    }
}

impl UsageScan {
    /// The whole ledger.
    pub fn all() -> Self {
        UsageScan::default()
    }

    /// Answers at most `limit` rows.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Whether `seq` lies in the range.
    pub fn contains(&self, seq: Seq) -> bool {
        self.after.is_none_or(|a| seq > a) && self.through.is_none_or(|t| seq <= t)
    }
}
