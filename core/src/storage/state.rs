//! [`StoreState`]: the whole session store as pure data.
//!
//! Every mutation is a pure function over it ([`StoreState::commit`] is
//! [`decide`] followed by [`StoreState::apply`]), so the conformance suite and
//! the property tests drive the model with no process involved. The memory
//! backend is this type behind a mutex.
//!
//! The serialized form is a [`StoreRecord`] (the rows a shell persists);
//! decoding rebuilds the indexes and refuses any record that breaks an
//! invariant, so a decoded state is always one a sequence of commits could
//! have produced.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::commit::{
    decide, Commit, CommitContext, CommitError, CommitReceipt, Effect, Footprint, LastCommit,
    RecordKind, KEPT_COMMITS,
};
use super::query::{BranchScan, EntryScan, UsageScan};
use super::types::{
    BoundError, Entry, EntryHead, KeyPrefix, Namespace, RecordId, Register, RegisterKey, Seq,
    Stats, UsageRow, MAX_GET_ENTRIES,
};
use super::StorageError;

/// The session store: entries with a children index and a seq index,
/// registers, the usage ledger, the stats projection and the next seq.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "StoreRecord", into = "StoreRecord")]
pub struct StoreState {
    entries: BTreeMap<RecordId, Entry>,
    entry_seqs: BTreeMap<Seq, RecordId>,
    children: BTreeMap<RecordId, Vec<RecordId>>,
    registers: BTreeMap<Namespace, BTreeMap<RegisterKey, Register>>,
    usage: BTreeMap<RecordId, UsageRow>,
    usage_seqs: BTreeMap<Seq, RecordId>,
    stats: Stats,
    next_seq: Seq,
    kept: Vec<LastCommit>,
}

impl Default for StoreState {
    fn default() -> Self {
        StoreState::new()
    }
}

/// The persisted form of a [`StoreState`]: its rows, in ascending seq, plus
/// the maintained stats and next seq.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StoreRecord {
    /// Every entry, ascending seq.
    pub entries: Vec<Entry>,
    /// Every usage row, ascending seq.
    pub usage: Vec<UsageRow>,
    /// Every register cell, by namespace then key.
    pub registers: Vec<Register>,
    /// The maintained stats projection.
    pub stats: Stats,
    /// The next seq.
    pub next_seq: Seq,
    /// The kept identified commits, oldest first (see `storage::commit`'s
    /// "Retries").
    #[serde(default)]
    pub kept_commits: Vec<LastCommit>,
}

/// A broken store invariant, found while decoding or checking a state.
/// Stable reason strings are the variant names.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error, Serialize, Deserialize)]
pub enum StateError {
    /// Two records share an id.
    #[error("DuplicateId: id {0} names two records")]
    DuplicateId(RecordId),
    /// Two rows share a seq.
    #[error("DuplicateSeq: seq {0} is carried by two rows")]
    DuplicateSeq(Seq),
    /// A row carries a seq at or above the next seq (or seq 0).
    #[error("SeqOutOfRange: seq {seq} is not in 1..{next_seq}")]
    SeqOutOfRange {
        /// The row's seq.
        seq: Seq,
        /// The store's next seq.
        next_seq: Seq,
    },
    /// An entry's parent is not an entry with a lower seq.
    #[error("BrokenParent: entry {id}'s parent {parent} is not an earlier entry")]
    BrokenParent {
        /// The child.
        id: RecordId,
        /// Its parent.
        parent: RecordId,
    },
    /// The stats projection differs from the ledger sum.
    #[error("StatsMismatch: stats {stored:?} differ from the ledger sum {ledger:?}")]
    StatsMismatch {
        /// The maintained projection.
        stored: Stats,
        /// The ledger sum (`None` when it overflows).
        ledger: Option<Stats>,
    },
    /// An index disagrees with the rows.
    #[error("IndexMismatch: {0}")]
    IndexMismatch(String),
}

crate::reasons! {
    /// The stable reason string (the variant name).
    StateError {
        DuplicateId,
        DuplicateSeq,
        SeqOutOfRange,
        BrokenParent,
        StatsMismatch,
        IndexMismatch,
    }
}

impl From<StoreState> for StoreRecord {
    fn from(s: StoreState) -> Self {
        s.record()
    }
}

impl TryFrom<StoreRecord> for StoreState {
    type Error = StateError;
    fn try_from(r: StoreRecord) -> Result<Self, Self::Error> {
        let mut s = StoreState::new();
        s.next_seq = r.next_seq;
        s.stats = r.stats;
        check_kept(&r.kept_commits)?;
        s.kept = r.kept_commits;
        let mut seqs: BTreeMap<Seq, ()> = BTreeMap::new();
        let mut claim_seq = |seq: Seq| -> Result<(), StateError> {
            if seq == 0 || seq >= r.next_seq {
                return Err(StateError::SeqOutOfRange {
                    seq,
                    next_seq: r.next_seq,
                });
            }
            if seqs.insert(seq, ()).is_some() {
                return Err(StateError::DuplicateSeq(seq));
            }
            Ok(())
        };
        let mut entries = r.entries;
        entries.sort_by_key(|e| e.seq);
        for e in entries {
            claim_seq(e.seq)?;
            if s.entries.contains_key(&e.id) {
                return Err(StateError::DuplicateId(e.id));
            }
            if let Some(p) = &e.parent {
                // Sorted by seq: a parent present now has a lower seq.
                if !s.entries.contains_key(p) {
                    return Err(StateError::BrokenParent {
                        id: e.id.clone(),
                        parent: p.clone(),
                    });
                }
            }
            s.insert_entry(e);
        }
        for u in r.usage {
            claim_seq(u.seq)?;
            if s.entries.contains_key(&u.id) || s.usage.contains_key(&u.id) {
                return Err(StateError::DuplicateId(u.id));
            }
            s.usage_seqs.insert(u.seq, u.id.clone());
            s.usage.insert(u.id.clone(), u);
        }
        for reg in r.registers {
            claim_seq(reg.seq)?;
            let cells = s.registers.entry(reg.namespace.clone()).or_default();
            if cells.contains_key(&reg.key) {
                return Err(StateError::IndexMismatch(format!(
                    "register {}/{} appears twice",
                    reg.namespace, reg.key
                )));
            }
            cells.insert(reg.key.clone(), reg);
        }
        let ledger = Stats::of(s.usage.values());
        if ledger != Some(s.stats) {
            return Err(StateError::StatsMismatch {
                stored: s.stats,
                ledger,
            });
        }
        Ok(s)
    }
}

/// The kept commits of a record: at most [`KEPT_COMMITS`], each id once.
fn check_kept(kept: &[LastCommit]) -> Result<(), StateError> {
    if kept.len() > KEPT_COMMITS {
        return Err(StateError::IndexMismatch(format!(
            "{} kept commits, over the bound of {KEPT_COMMITS}",
            kept.len()
        )));
    }
    let mut ids = std::collections::BTreeSet::new();
    match kept.iter().find(|k| !ids.insert(k.id.clone())) {
        Some(k) => Err(StateError::IndexMismatch(format!(
            "commit {} is kept twice",
            k.id
        ))),
        None => Ok(()),
    }
}

impl StoreState {
    /// An empty store; the first seq it assigns is 1.
    pub fn new() -> Self {
        StoreState {
            entries: BTreeMap::new(),
            entry_seqs: BTreeMap::new(),
            children: BTreeMap::new(),
            registers: BTreeMap::new(),
            usage: BTreeMap::new(),
            usage_seqs: BTreeMap::new(),
            stats: Stats::default(),
            next_seq: 1,
            kept: Vec::new(),
        }
    }

    /// The persisted form.
    pub fn record(&self) -> StoreRecord {
        StoreRecord {
            entries: self
                .entry_seqs
                .values()
                .filter_map(|id| self.entries.get(id).cloned())
                .collect(),
            usage: self
                .usage_seqs
                .values()
                .filter_map(|id| self.usage.get(id).cloned())
                .collect(),
            registers: self
                .registers
                .values()
                .flat_map(|m| m.values().cloned())
                .collect(),
            stats: self.stats,
            next_seq: self.next_seq,
            kept_commits: self.kept.clone(),
        }
    }

    /// Checks every invariant: ids unique across entries and usage, seqs
    /// unique and below `next_seq`, parents earlier entries, indexes
    /// consistent, stats equal to the ledger sum.
    pub fn check_invariants(&self) -> Result<(), StateError> {
        let rebuilt = StoreState::try_from(self.record())?;
        if rebuilt != *self {
            return Err(StateError::IndexMismatch(
                "the indexes differ from those rebuilt from the rows".to_owned(),
            ));
        }
        Ok(())
    }

    fn insert_entry(&mut self, e: Entry) {
        if let Some(p) = &e.parent {
            self.children
                .entry(p.clone())
                .or_default()
                .push(e.id.clone());
        }
        self.entry_seqs.insert(e.seq, e.id.clone());
        self.entries.insert(e.id.clone(), e);
    }

    /// The cells of one namespace, by key (for the snapshot reader).
    pub(crate) fn register_cells(
        &self,
        namespace: &Namespace,
    ) -> Option<&BTreeMap<RegisterKey, Register>> {
        self.registers.get(namespace)
    }

    /// The entry ids by seq (for the snapshot reader).
    pub(crate) fn entry_seq_index(&self) -> &BTreeMap<Seq, RecordId> {
        &self.entry_seqs
    }

    /// The next seq the store may assign.
    pub fn next_seq(&self) -> Seq {
        self.next_seq
    }

    /// The stats projection.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// How many entries the store holds.
    pub fn entry_count(&self) -> usize {
        self.entries.len()
    }

    /// One entry by id.
    pub fn entry(&self, id: &RecordId) -> Option<&Entry> {
        self.entries.get(id)
    }

    /// One usage row by id.
    pub fn usage_row(&self, id: &RecordId) -> Option<&UsageRow> {
        self.usage.get(id)
    }

    /// The children of an entry, in insertion (ascending seq) order.
    pub fn children(&self, id: &RecordId) -> &[RecordId] {
        self.children.get(id).map_or(&[], Vec::as_slice)
    }

    /// The facts a commit with this footprint is decided against.
    pub fn context_for(&self, fp: &Footprint) -> CommitContext {
        let mut ctx = CommitContext {
            next_seq: self.next_seq,
            stats: self.stats,
            last: fp
                .commit
                .as_ref()
                .and_then(|id| self.kept.iter().find(|k| &k.id == id).cloned()),
            ..CommitContext::default()
        };
        for id in &fp.ids {
            if self.entries.contains_key(id) {
                ctx.ids.insert(id.clone(), RecordKind::Entry);
            } else if self.usage.contains_key(id) {
                ctx.ids.insert(id.clone(), RecordKind::Usage);
            }
        }
        for (ns, keys) in &fp.registers {
            if let Some(cells) = self.registers.get(ns) {
                for k in keys {
                    if let Some(r) = cells.get(k) {
                        ctx.registers
                            .entry(ns.clone())
                            .or_default()
                            .insert(k.clone(), r.seq);
                    }
                }
            }
        }
        ctx
    }

    /// Applies an accepted decision's effects, in order. They must come
    /// from [`decide`] over a context of this very state;
    /// [`StoreState::commit`] guarantees that. The oracle of every
    /// backend's application.
    pub fn apply(&mut self, effects: Vec<Effect>) {
        for e in effects {
            self.apply_effect(e);
        }
    }

    /// Applies one effect.
    fn apply_effect(&mut self, e: Effect) {
        match e {
            Effect::InsertEntry(e) => self.insert_entry(e),
            Effect::InsertUsage(u) => {
                self.usage_seqs.insert(u.seq, u.id.clone());
                self.usage.insert(u.id.clone(), u);
            }
            Effect::SetRegister(r) => {
                self.registers
                    .entry(r.namespace.clone())
                    .or_default()
                    .insert(r.key.clone(), r);
            }
            Effect::DeleteRegister { namespace, key, .. } => {
                if let Some(cells) = self.registers.get_mut(&namespace) {
                    cells.remove(&key);
                    if cells.is_empty() {
                        self.registers.remove(&namespace);
                    }
                }
            }
            Effect::Head { next_seq, stats } => {
                self.stats = stats;
                self.next_seq = next_seq;
            }
            Effect::KeepCommit(k) => {
                self.kept.retain(|x| x.id != k.id);
                self.kept.push(k);
                while self.kept.len() > KEPT_COMMITS {
                    self.kept.remove(0);
                }
            }
        }
    }

    /// Decides and applies one commit: all or none.
    pub fn commit(&mut self, commit: &Commit) -> Result<CommitReceipt, CommitError> {
        let ctx = self.context_for(&commit.footprint());
        let d = decide(&ctx, commit)?;
        self.apply(d.effects);
        Ok(d.receipt)
    }

    /// Entries by id, aligned with `ids` (`None` for an unknown id).
    pub fn get_entries(&self, ids: &[RecordId]) -> Result<Vec<Option<Entry>>, StorageError> {
        if ids.len() > MAX_GET_ENTRIES {
            return Err(BoundError::TooManyIds { count: ids.len() }.into());
        }
        Ok(ids.iter().map(|id| self.entries.get(id).cloned()).collect())
    }

    /// One register cell.
    pub fn get_register(&self, namespace: &Namespace, key: &RegisterKey) -> Option<Register> {
        self.registers
            .get(namespace)
            .and_then(|m| m.get(key))
            .cloned()
    }

    /// The cells of a namespace whose keys start with `prefix`, ascending by key.
    pub fn list_registers(&self, namespace: &Namespace, prefix: &KeyPrefix) -> Vec<Register> {
        let Some(cells) = self.registers.get(namespace) else {
            return Vec::new();
        };
        cells
            .iter()
            .skip_while(|(k, _)| k.as_str() < prefix.as_str())
            .take_while(|(k, _)| prefix.matches(k))
            .map(|(_, r)| r.clone())
            .collect()
    }

    /// The unfiltered walk from `leaf` to the root. A missing leaf is
    /// [`StorageError::UnknownEntry`]; a parent link to a missing or
    /// not-earlier entry is [`StorageError::Corrupt`] (so a corrupt link ends
    /// in an error, never a loop).
    pub fn walk<'a>(
        &'a self,
        leaf: &RecordId,
    ) -> impl Iterator<Item = Result<Entry, StorageError>> + 'a {
        let first = match self.entries.get(leaf) {
            Some(e) => Ok(e),
            None => Err(StorageError::UnknownEntry { id: leaf.clone() }),
        };
        let mut next: Option<Result<&'a Entry, StorageError>> = Some(first);
        std::iter::from_fn(move || {
            let current = next.take()?;
            match current {
                Err(e) => Some(Err(e)),
                Ok(entry) => {
                    if let Some(p) = &entry.parent {
                        next = Some(match self.entries.get(p) {
                            Some(pe) if pe.seq < entry.seq => Ok(pe),
                            _ => Err(StorageError::Corrupt {
                                detail: format!(
                                    "entry {}'s parent {} is not an earlier entry",
                                    entry.id, p
                                ),
                            }),
                        });
                    }
                    Some(Ok(entry.clone()))
                }
            }
        })
    }

    /// A branch scan (see [`BranchScan`]).
    pub fn scan_branch(&self, q: &BranchScan) -> Result<Vec<Entry>, StorageError> {
        q.refine(self.walk(&q.leaf))
    }

    /// An entry seq-range scan, ascending.
    pub fn scan_entries(&self, q: &EntryScan) -> Vec<Entry> {
        self.entry_range(q)
            .filter_map(|id| self.entries.get(id).cloned())
            .collect()
    }

    /// [`StoreState::scan_entries`] projected to heads; no payload is copied.
    pub fn scan_entry_heads(&self, q: &EntryScan) -> Vec<EntryHead> {
        self.entry_range(q)
            .filter_map(|id| self.entries.get(id).map(Entry::head))
            .collect()
    }

    fn entry_range<'a>(&'a self, q: &EntryScan) -> impl Iterator<Item = &'a RecordId> + 'a {
        let (after, through, limit) = (q.after, q.through, q.limit);
        let start = after.map_or(0, |a| a.saturating_add(1));
        let empty = after == Some(Seq::MAX) || through.is_some_and(|t| t < start);
        self.entry_seqs
            .range(start..)
            .take_while(move |(s, _)| !empty && through.is_none_or(|t| **s <= t))
            .take(limit.unwrap_or(usize::MAX))
            .map(|(_, id)| id)
    }

    /// A usage seq-range scan, ascending.
    pub fn scan_usage(&self, q: &UsageScan) -> Vec<UsageRow> {
        let start = q.after.map_or(0, |a| a.saturating_add(1));
        if q.after == Some(Seq::MAX) || q.through.is_some_and(|t| t < start) {
            return Vec::new();
        }
        self.usage_seqs
            .range(start..)
            .take_while(|(s, _)| q.through.is_none_or(|t| **s <= t))
            .take(q.limit.unwrap_or(usize::MAX))
            .filter_map(|(_, id)| self.usage.get(id).cloned())
            .collect()
    }
}
