//! The commit decision: expectations, writes, and the row effects a backend
//! applies.
//!
//! A backend answers a commit in three steps inside one write transaction:
//!
//! 1. [`Commit::footprint`] names every record id and register the commit can
//!    observe (its own ids, every parent it names, every register it expects
//!    or writes);
//! 2. the backend loads exactly those facts, plus the store's `next_seq` and
//!    stats, into a [`CommitContext`] (plain data);
//! 3. [`decide`] — pure, total, deterministic — answers a [`CommitDecision`]
//!    (the receipt, and the [`Effect`]s: the rows to insert, the register
//!    cells to set or delete, the head's next stats and `next_seq`, the
//!    commit to keep) or a [`CommitError`]. The backend applies the effects
//!    in the same transaction, as it applies every other machine's: no
//!    diff, no validation of its own. It may send independent rows
//!    together (PostgreSQL inserts each entry at once, for its branch
//!    place, and sends the rest with the `COMMIT`, the head with its lease
//!    columns last) and may leave out a head write its layout already
//!    answers (SQLite derives the next seq from the last row); neither
//!    changes the state reached. A refusal applies nothing.
//!
//! ## Seq allocation
//!
//! The store allocates seqs. Each write consumes exactly one seq — a
//! `DeleteRegister` of an absent cell included — and the writes of one commit
//! receive consecutive seqs in list order, starting at
//! `max(next_seq, seq_floor)`. `seq_floor` is an optional caller-supplied
//! minimum (used to leave deliberate gaps, e.g. to keep imported seqs); a
//! floor below `next_seq` is not an error, it is simply already met. A commit
//! with no writes (a CAS-only or empty commit) consumes no seq and changes
//! nothing. A refused commit consumes no seq. Seqs therefore strictly increase
//! and gaps are legal.
//!
//! ## Retries
//!
//! A commit whose reply was lost (the backend answered `Unavailable`) may
//! or may not have applied. A commit that carries a [`CommitId`] can be
//! retried as it is: the store keeps its last [`KEPT_COMMITS`] identified
//! commits — each id, the SHA-256 of the commit's content and its receipt —
//! written in the same transaction as the commit. A commit whose id is kept
//! and whose content is the same is answered the stored receipt and applies
//! nothing (a replay); the same id with other content is refused
//! [`CommitError::CommitIdReused`]. Any other commit is decided afresh. A
//! store has one writer (its lease), but a handle may be shared by several
//! callers, so more than one commit can be in doubt at once: each is
//! recognised until [`KEPT_COMMITS`] later identified commits have pushed
//! it out (the oldest goes first). A commit without an id keeps nothing.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::types::{
    BoundError, CommitId, Entry, Kind, Namespace, Payload, RecordId, Register, RegisterKey, Seq,
    Stats, UsageFigures, UsageRow, MAX_EXPECTATIONS_PER_COMMIT, MAX_REGISTER_VALUE_LEN,
    MAX_WRITES_PER_COMMIT,
};
use crate::lease::LeaseError;
use crate::Millis;

/// A register compare-and-set condition: the register's seq the committer
/// computed against. `expected: None` means the register must not exist.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SeqExpectation {
    /// The register's namespace.
    pub namespace: Namespace,
    /// The register's key.
    pub key: RegisterKey,
    /// The seq it must carry, or `None` for "must be absent".
    pub expected: Option<Seq>,
}

/// One write of a commit. Writes apply in list order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Write {
    /// Insert a write-once entry. Its parent must exist when this write
    /// applies (an entry inserted earlier in the same commit counts).
    InsertEntry {
        /// The new entry's id; must be unused by any entry or usage row.
        id: RecordId,
        /// Its parent entry, `None` for a root.
        parent: Option<RecordId>,
        /// Its kind.
        kind: Kind,
        /// Its payload.
        payload: Payload,
    },
    /// Insert a write-once usage-ledger row.
    InsertUsage {
        /// The new row's id; must be unused by any entry or usage row.
        id: RecordId,
        /// Its figures.
        figures: UsageFigures,
        /// Its opaque details.
        details: Payload,
    },
    /// Set (create or replace) a register cell.
    SetRegister {
        /// The namespace.
        namespace: Namespace,
        /// The key.
        key: RegisterKey,
        /// The new value, at most [`MAX_REGISTER_VALUE_LEN`] bytes.
        value: Payload,
    },
    /// Delete a register cell; deleting an absent cell is a no-op that still
    /// consumes a seq.
    DeleteRegister {
        /// The namespace.
        namespace: Namespace,
        /// The key.
        key: RegisterKey,
    },
}

/// A commit request: every input from outside, the timestamp included.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Commit {
    /// Register conditions, all evaluated against the pre-commit state
    /// before any write applies.
    pub expectations: Vec<SeqExpectation>,
    /// The writes, applied in list order.
    pub writes: Vec<Write>,
    /// The caller's clock: the `ts` stamped on every row this commit writes.
    pub ts: Millis,
    /// The lowest seq the first write may receive (see the module docs).
    pub seq_floor: Option<Seq>,
    /// The commit's own id, when the caller may retry it (see the module
    /// docs' "Retries").
    #[serde(default)]
    pub id: Option<CommitId>,
}

impl Commit {
    /// An empty commit at `ts`.
    pub fn at(ts: Millis) -> Self {
        Commit {
            ts,
            ..Commit::default()
        }
    }

    /// Gives the commit its own id, so that its retry is recognised.
    pub fn identified(mut self, id: CommitId) -> Self {
        self.id = Some(id);
        self
    }

    /// The SHA-256 of the commit's content without its id: what a retry
    /// under the same id must repeat.
    pub fn content_digest(&self) -> [u8; 32] {
        use sha2::Digest as _;
        let mut h = sha2::Sha256::new();
        // Every part, length-prefixed, in a fixed order: a total, stable
        // encoding that needs no serializer.
        let mut put = |b: &[u8]| {
            h.update((b.len() as u64).to_le_bytes());
            h.update(b);
        };
        put(&self.ts.to_le_bytes());
        put(&opt_seq_bytes(self.seq_floor));
        for e in &self.expectations {
            put(b"expect");
            put(e.namespace.as_str().as_bytes());
            put(e.key.as_str().as_bytes());
            put(&opt_seq_bytes(e.expected));
        }
        for w in &self.writes {
            match w {
                Write::InsertEntry {
                    id,
                    parent,
                    kind,
                    payload,
                } => {
                    put(b"entry");
                    put(id.as_str().as_bytes());
                    put(parent
                        .as_ref()
                        .map_or(b"\xff" as &[u8], |p| p.as_str().as_bytes()));
                    put(kind.as_str().as_bytes());
                    put(payload.as_bytes());
                }
                Write::InsertUsage {
                    id,
                    figures,
                    details,
                } => {
                    put(b"usage");
                    put(id.as_str().as_bytes());
                    put(&figures.input_tokens.to_le_bytes());
                    put(&figures.output_tokens.to_le_bytes());
                    put(&figures.cache_read_tokens.to_le_bytes());
                    put(&figures.cache_write_tokens.to_le_bytes());
                    put(&figures.cost_micros.to_le_bytes());
                    put(details.as_bytes());
                }
                Write::SetRegister {
                    namespace,
                    key,
                    value,
                } => {
                    put(b"set");
                    put(namespace.as_str().as_bytes());
                    put(key.as_str().as_bytes());
                    put(value.as_bytes());
                }
                Write::DeleteRegister { namespace, key } => {
                    put(b"delete");
                    put(namespace.as_str().as_bytes());
                    put(key.as_str().as_bytes());
                }
            }
        }
        h.finalize().into()
    }

    /// Adds an expectation.
    pub fn expect(mut self, namespace: Namespace, key: RegisterKey, expected: Option<Seq>) -> Self {
        self.expectations.push(SeqExpectation {
            namespace,
            key,
            expected,
        });
        self
    }

    /// Adds a write.
    pub fn write(mut self, write: Write) -> Self {
        self.writes.push(write);
        self
    }

    /// Sets the seq floor.
    pub fn floor(mut self, seq: Seq) -> Self {
        self.seq_floor = Some(seq);
        self
    }

    /// Every fact this commit can observe: the ids it inserts, the parents
    /// it names, and the registers it expects or writes.
    pub fn footprint(&self) -> Footprint {
        let mut fp = Footprint {
            commit: self.id.clone(),
            ..Footprint::default()
        };
        for e in &self.expectations {
            fp.registers
                .entry(e.namespace.clone())
                .or_default()
                .insert(e.key.clone());
        }
        for w in &self.writes {
            match w {
                Write::InsertEntry { id, parent, .. } => {
                    fp.ids.insert(id.clone());
                    if let Some(p) = parent {
                        fp.ids.insert(p.clone());
                    }
                }
                Write::InsertUsage { id, .. } => {
                    fp.ids.insert(id.clone());
                }
                Write::SetRegister { namespace, key, .. }
                | Write::DeleteRegister { namespace, key } => {
                    fp.registers
                        .entry(namespace.clone())
                        .or_default()
                        .insert(key.clone());
                }
            }
        }
        fp
    }
}

/// How many identified commits a store keeps for their retries (see the
/// module docs' "Retries").
pub const KEPT_COMMITS: usize = 64;

/// The ids and registers a commit can observe.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Footprint {
    /// The commit's own id: its kept commit, if the store keeps one.
    #[serde(default)]
    pub commit: Option<CommitId>,
    /// Record ids (inserted ids and named parents).
    pub ids: BTreeSet<RecordId>,
    /// Register cells, by namespace.
    pub registers: BTreeMap<Namespace, BTreeSet<RegisterKey>>,
}

/// What kind of record an id names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum RecordKind {
    /// An entry.
    Entry,
    /// A usage-ledger row.
    Usage,
}

/// The facts a commit is decided against, loaded by the backend for the
/// commit's [`Footprint`]. Ids absent from `ids` and registers absent from
/// `registers` are taken not to exist.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CommitContext {
    /// The store's next seq (the lowest seq it may assign).
    pub next_seq: Seq,
    /// The stats projection before the commit.
    pub stats: Stats,
    /// Which footprint ids exist, and as what.
    pub ids: BTreeMap<RecordId, RecordKind>,
    /// The seqs of the footprint registers that exist.
    pub registers: BTreeMap<Namespace, BTreeMap<RegisterKey, Seq>>,
    /// The kept commit under the commit's own id, if the store keeps one
    /// ([`Footprint::commit`]).
    pub last: Option<LastCommit>,
}

/// The stored form of a kept commit's receipt seqs: each seq's eight
/// little-endian bytes, in write order. Written once here so that every
/// backend stores the same bytes.
pub fn encode_seqs(seqs: &[Seq]) -> Vec<u8> {
    seqs.iter().flat_map(|s| s.to_le_bytes()).collect()
}

/// Decodes [`encode_seqs`]'s bytes, totally: `None` unless they are whole
/// seqs of at most [`MAX_WRITES_PER_COMMIT`] writes (checked before
/// anything is allocated).
pub fn decode_seqs(bytes: &[u8]) -> Option<Vec<Seq>> {
    if bytes.len() % 8 != 0 || bytes.len() > MAX_WRITES_PER_COMMIT * 8 {
        return None;
    }
    Some(
        bytes
            .chunks_exact(8)
            .map(|c| {
                let mut b = [0u8; 8];
                b.copy_from_slice(c);
                u64::from_le_bytes(b)
            })
            .collect(),
    )
}

/// An optional seq as nine fixed bytes for [`Commit::content_digest`]:
/// `None` is all `0xff`, `Some` a `0` tag and the little-endian seq.
fn opt_seq_bytes(s: Option<Seq>) -> [u8; 9] {
    s.map_or([0xff; 9], |s| {
        let mut b = [0u8; 9];
        b[1..].copy_from_slice(&s.to_le_bytes());
        b
    })
}

/// What a store keeps of an identified commit (see the module docs'
/// "Retries").
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LastCommit {
    /// The commit's id.
    pub id: CommitId,
    /// [`Commit::content_digest`] of the commit.
    pub digest: [u8; 32],
    /// What it answered.
    pub receipt: CommitReceipt,
}

impl CommitContext {
    fn register_seq(&self, ns: &Namespace, key: &RegisterKey) -> Option<Seq> {
        self.registers.get(ns).and_then(|m| m.get(key)).copied()
    }
}

/// One row-level write of an accepted commit. A backend applies a
/// decision's effects inside the transaction that loaded its context, in
/// order where they touch the same rows (see the module docs for the
/// batching the SQL backends do), and adds no rule of its own:
/// [`StoreState::apply`](super::StoreState::apply) is the oracle every
/// backend's application is compared with.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Effect {
    /// Insert this entry: its id and its seq are new to the store.
    InsertEntry(Entry),
    /// Insert this usage row: its id and its seq are new to the store.
    InsertUsage(UsageRow),
    /// Create this register cell, or replace it.
    SetRegister(Register),
    /// Delete this register cell (nothing when it is absent).
    DeleteRegister {
        /// The namespace.
        namespace: Namespace,
        /// The key.
        key: RegisterKey,
        /// The seq this delete consumed (no row records it).
        seq: Seq,
    },
    /// Write the store's head: its next seq and its usage totals (the old
    /// totals plus the commit's usage rows). Present exactly when the
    /// commit wrote something.
    Head {
        /// The store's next seq after the commit.
        next_seq: Seq,
        /// The usage totals after the commit.
        stats: Stats,
    },
    /// Keep this identified commit after the kept ones, forgetting the
    /// oldest when more than [`KEPT_COMMITS`] would be kept (a kept commit
    /// of the same id is replaced). Last of a decision's effects.
    KeepCommit(LastCommit),
}

/// What an accepted commit answers, and the writes that make it so.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CommitDecision {
    /// What the caller is told.
    pub receipt: CommitReceipt,
    /// The rows to write, in order: one per write (in write order, hence
    /// ascending seq), then the head, then the kept commit. None for a
    /// replay of a kept commit, and only the kept commit for an identified
    /// commit without writes.
    pub effects: Vec<Effect>,
}

impl CommitDecision {
    /// The head the decision writes: its next seq and stats, if it moves
    /// them.
    pub fn head(&self) -> Option<(Seq, &Stats)> {
        self.effects.iter().find_map(|e| match e {
            Effect::Head { next_seq, stats } => Some((*next_seq, stats)),
            _ => None,
        })
    }
}

/// What a successful commit answers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CommitReceipt {
    /// The seq of each write, in write order (empty for a CAS-only commit).
    pub seqs: Vec<Seq>,
    /// The store's next seq after the commit.
    pub next_seq: Seq,
}

/// Why a commit was refused. Nothing applies and no seq is consumed on any
/// refusal. Stable reason strings are the variant names ([`CommitError::reason`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error, Serialize, Deserialize)]
pub enum CommitError {
    /// A register compare-and-set condition did not hold.
    #[error("StaleExpectation: register {namespace}/{key} expected {expected:?}, found {found:?}")]
    StaleExpectation {
        /// The register's namespace.
        namespace: Namespace,
        /// The register's key.
        key: RegisterKey,
        /// What the committer expected.
        expected: Option<Seq>,
        /// What the store holds.
        found: Option<Seq>,
    },
    /// An entry names a parent that is not an entry of the store (nor one
    /// inserted earlier in the same commit).
    #[error("ParentMissing: entry {id} names parent {parent}, which is not an entry")]
    ParentMissing {
        /// The entry being inserted.
        id: RecordId,
        /// The missing parent.
        parent: RecordId,
    },
    /// A commit carrying the id of a kept commit with other content: an id
    /// names one commit.
    #[error("CommitIdReused: commit id {id} named a commit with other content")]
    CommitIdReused {
        /// The id.
        id: CommitId,
    },
    /// An entry or usage row under an id already in use: corruption, never an update.
    #[error("DuplicateId: corruption: id {id} is already used by an existing {existing:?} record")]
    DuplicateId {
        /// The reused id.
        id: RecordId,
        /// What already holds it.
        existing: RecordKind,
    },
    /// A value outside the representation bounds.
    #[error("OutOfBounds: {0}")]
    OutOfBounds(BoundError),
    /// No seq is left to assign.
    #[error("SeqExhausted: no seq is left to assign")]
    SeqExhausted,
    /// The stats projection would overflow.
    #[error("StatsOverflow: the usage-ledger sum would overflow")]
    StatsOverflow,
    /// The lease machine refused the committer's lease check, shown as it
    /// is (message and reason are the [`LeaseError`]'s, defined once in
    /// [`crate::lease`]). In practice [`LeaseError::LeaseLost`]: the
    /// committer's writer lease is gone (`held_by` names the current holder
    /// when one is recorded), and the remedy is to reopen, never to retry.
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// The backend cannot commit: the handle is closed, poisoned, or its
    /// storage failed. The reason is a stable, backend-chosen string.
    #[error("Faulted: {reason}")]
    Faulted {
        /// Why.
        reason: String,
    },
    /// The backend could not be reached
    /// ([`Class::Unavailable`](crate::Class::Unavailable)): retry the same request.
    #[error("Unavailable: {reason}")]
    Unavailable {
        /// What failed (never a credential).
        reason: String,
    },
}

crate::reasons! {
    /// The stable reason string (the variant name).
    CommitError {
        StaleExpectation,
        CommitIdReused,
        ParentMissing,
        DuplicateId,
        OutOfBounds,
        SeqExhausted,
        StatsOverflow,
        Lease(e) => e.reason(),
        Faulted,
        Unavailable,
    }
}

impl From<BoundError> for CommitError {
    fn from(value: BoundError) -> Self {
        CommitError::OutOfBounds(value)
    }
}

/// The `Faulted` reason a closed handle answers commits with.
pub const REASON_HANDLE_CLOSED: &str = "handle-closed";

/// Decides a commit against the facts of its footprint. Total and
/// deterministic: every expectation is evaluated first, then the writes are
/// validated in list order; only a fully valid commit yields effects.
pub fn decide(ctx: &CommitContext, commit: &Commit) -> Result<CommitDecision, CommitError> {
    check_counts(commit)?;
    let digest = commit.id.as_ref().map(|_| commit.content_digest());
    if let (Some(id), Some(digest), Some(last)) = (&commit.id, digest, &ctx.last) {
        if *id == last.id {
            if digest != last.digest {
                return Err(CommitError::CommitIdReused { id: id.clone() });
            }
            // Its own earlier write: the stored answer, nothing applied.
            return Ok(CommitDecision {
                receipt: last.receipt.clone(),
                effects: Vec::new(),
            });
        }
    }
    let mut d = decide_fresh(ctx, commit)?;
    if let (Some(id), Some(digest)) = (&commit.id, digest) {
        d.effects.push(Effect::KeepCommit(LastCommit {
            id: id.clone(),
            digest,
            receipt: d.receipt.clone(),
        }));
    }
    Ok(d)
}

/// [`decide`] for a commit that is not a replay.
fn decide_fresh(ctx: &CommitContext, commit: &Commit) -> Result<CommitDecision, CommitError> {
    check_expectations(ctx, commit)?;
    if commit.writes.is_empty() {
        return Ok(CommitDecision {
            receipt: CommitReceipt {
                seqs: Vec::new(),
                next_seq: ctx.next_seq,
            },
            effects: Vec::new(),
        });
    }
    let mut planner = Planner {
        ctx,
        ts: commit.ts,
        inserted: BTreeMap::new(),
        stats: ctx.stats,
        d: CommitDecision::default(),
    };
    let mut seq = ctx.next_seq.max(commit.seq_floor.unwrap_or(0)).max(1);
    for (i, w) in commit.writes.iter().enumerate() {
        if i > 0 {
            seq = seq.checked_add(1).ok_or(CommitError::SeqExhausted)?;
        }
        planner.write(w, seq)?;
        planner.d.receipt.seqs.push(seq);
    }
    let next_seq = seq.checked_add(1).ok_or(CommitError::SeqExhausted)?;
    let mut d = planner.d;
    d.receipt.next_seq = next_seq;
    d.effects.push(Effect::Head {
        next_seq,
        stats: planner.stats,
    });
    Ok(d)
}

/// Refuses a commit with more writes or expectations than one commit takes.
fn check_counts(commit: &Commit) -> Result<(), CommitError> {
    if commit.writes.len() > MAX_WRITES_PER_COMMIT {
        return Err(BoundError::TooManyWrites {
            count: commit.writes.len(),
        }
        .into());
    }
    if commit.expectations.len() > MAX_EXPECTATIONS_PER_COMMIT {
        return Err(BoundError::TooManyExpectations {
            count: commit.expectations.len(),
        }
        .into());
    }
    Ok(())
}

/// Every expectation against the pre-commit registers, before any write.
fn check_expectations(ctx: &CommitContext, commit: &Commit) -> Result<(), CommitError> {
    for e in &commit.expectations {
        let found = ctx.register_seq(&e.namespace, &e.key);
        if found != e.expected {
            return Err(CommitError::StaleExpectation {
                namespace: e.namespace.clone(),
                key: e.key.clone(),
                expected: e.expected,
                found,
            });
        }
    }
    Ok(())
}

/// The decision of a commit under way: the writes validated so far, and the
/// ids they inserted (which later writes of the same commit see).
struct Planner<'c> {
    ctx: &'c CommitContext,
    ts: Millis,
    inserted: BTreeMap<&'c RecordId, RecordKind>,
    /// The usage totals with the usage rows so far.
    stats: Stats,
    d: CommitDecision,
}

impl<'c> Planner<'c> {
    /// What `id` names: a stored record, or one inserted earlier in the
    /// same commit.
    fn kind_of(&self, id: &RecordId) -> Option<RecordKind> {
        self.ctx
            .ids
            .get(id)
            .copied()
            .or_else(|| self.inserted.get(id).copied())
    }

    /// Refuses an id already in use by any entry or usage row.
    fn check_unused(&self, id: &RecordId) -> Result<(), CommitError> {
        match self.kind_of(id) {
            Some(existing) => Err(CommitError::DuplicateId {
                id: id.clone(),
                existing,
            }),
            None => Ok(()),
        }
    }

    /// Validates one write at `seq` and adds its effect.
    fn write(&mut self, w: &'c Write, seq: Seq) -> Result<(), CommitError> {
        match w {
            Write::InsertEntry {
                id,
                parent,
                kind,
                payload,
            } => {
                self.check_unused(id)?;
                if let Some(p) = parent {
                    if self.kind_of(p) != Some(RecordKind::Entry) {
                        return Err(CommitError::ParentMissing {
                            id: id.clone(),
                            parent: p.clone(),
                        });
                    }
                }
                self.inserted.insert(id, RecordKind::Entry);
                self.d.effects.push(Effect::InsertEntry(Entry {
                    id: id.clone(),
                    parent: parent.clone(),
                    kind: kind.clone(),
                    payload: payload.clone(),
                    seq,
                    ts: self.ts,
                }));
            }
            Write::InsertUsage {
                id,
                figures,
                details,
            } => {
                self.check_unused(id)?;
                self.inserted.insert(id, RecordKind::Usage);
                self.stats = self
                    .stats
                    .checked_add(figures)
                    .ok_or(CommitError::StatsOverflow)?;
                self.d.effects.push(Effect::InsertUsage(UsageRow {
                    id: id.clone(),
                    seq,
                    ts: self.ts,
                    figures: *figures,
                    details: details.clone(),
                }));
            }
            Write::SetRegister {
                namespace,
                key,
                value,
            } => {
                if value.len() > MAX_REGISTER_VALUE_LEN {
                    return Err(BoundError::RegisterValueTooLarge { len: value.len() }.into());
                }
                self.d.effects.push(Effect::SetRegister(Register {
                    namespace: namespace.clone(),
                    key: key.clone(),
                    value: value.clone(),
                    seq,
                }));
            }
            Write::DeleteRegister { namespace, key } => {
                self.d.effects.push(Effect::DeleteRegister {
                    namespace: namespace.clone(),
                    key: key.clone(),
                    seq,
                });
            }
        }
        Ok(())
    }
}
