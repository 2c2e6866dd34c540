//! The session store: its data, its commit rule, its queries and its port.
//!
//! A session store holds write-once **entries** (id, parent, kind, payload,
//! seq, ts) linked into a tree by parent ids, a write-once **usage ledger**
//! (id, seq, ts, token and cost figures, opaque details) whose ids share one
//! namespace with the entries, mutable **registers** (namespace, key → value
//! bytes with the seq of the write that set them), the **stats** projection
//! (the sum of the ledger) and the **next seq**.
//!
//! - [`types`] — names, payloads and records, with their bounds.
//! - [`commit`] — the commit request, [`commit::decide`] (pure: a commit's
//!   footprint facts in, a receipt with its row effects or a
//!   [`CommitError`] out) and the seq
//!   allocation rule.
//! - [`query`] — the three query shapes and the shared branch pipeline.
//! - [`state`] — [`StoreState`], the whole store as pure data.
//! - [`memory`] — [`MemoryStorage`], the memory backend of the [`Storage`] port.
//! - [`rewrite`] — what an offline precise rewrite may change (payloads only).
//!
//! ## Rules (each has a conformance case in `custos-conformance`)
//!
//! - A commit evaluates every [`SeqExpectation`] before any write applies; a
//!   mismatch is [`CommitError::StaleExpectation`] with nothing applied.
//!   CAS-only commits (no writes) are legal.
//! - Writes apply in list order; all or none; a refused commit consumes no seq.
//! - Each write consumes one seq (a delete of an absent register included);
//!   seqs strictly increase and gaps are legal (see [`commit`]).
//! - An entry's parent must exist when the entry applies; parents inserted
//!   earlier in the same commit count.
//! - An entry or usage row under an existing id is [`CommitError::DuplicateId`]
//!   (corruption), never an update.
//! - Stats equal the ledger sum after every commit.
//! - After [`Storage::close`] (idempotent) reads answer
//!   [`StorageError::HandleClosed`] and commits answer
//!   [`CommitError::Faulted`] — never a panic.
//!
//! The read path's error, [`StorageError`], is deliberately distinct from the
//! commit path's [`CommitError`]: only commits know about leases.

pub mod branch;
pub mod commit;
pub mod memory;
pub mod query;
pub mod rewrite;
pub mod state;
pub mod stored;
pub mod types;

#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub use commit::{
    decide, Commit, CommitContext, CommitDecision, CommitError, CommitReceipt, Effect, Footprint,
    LastCommit, RecordKind, SeqExpectation, Write, KEPT_COMMITS, REASON_HANDLE_CLOSED,
};
pub use memory::MemoryStorage;
pub use query::{branch_scan, entry_seq_range, usage_seq_range, BranchScan, EntryScan, UsageScan};
pub use state::{StateError, StoreRecord, StoreState};
pub use types::{
    BoundError, CommitId, Entry, EntryHead, KeyPrefix, Kind, Namespace, Payload, RecordId,
    Register, RegisterKey, Seq, Stats, UsageFigures, UsageRow,
};

/// Why a read (or a close) failed. Distinct from [`CommitError`]: the read
/// path has no lease vocabulary. Stable reason strings are the variant names.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error, Serialize, Deserialize)]
pub enum StorageError {
    /// The handle was closed.
    #[error("HandleClosed: the storage handle is closed")]
    HandleClosed,
    /// A branch scan named a leaf the store does not hold.
    #[error("UnknownEntry: no entry {id}")]
    UnknownEntry {
        /// The missing id.
        id: RecordId,
    },
    /// A request outside the representation bounds.
    #[error("OutOfBounds: {0}")]
    OutOfBounds(BoundError),
    /// Stored data breaks an invariant (a dangling or cyclic parent link, an
    /// undecodable row, …).
    #[error("Corrupt: {detail}")]
    Corrupt {
        /// What was found.
        detail: String,
    },
    /// The backend failed (I/O, a poisoned lock, a lost connection, …).
    #[error("BackendFault: {reason}")]
    BackendFault {
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

impl StorageError {
    /// The failure's [`Class`](crate::Class): what the caller does next
    /// (a bound is `ResourceExhausted`, a closed handle `FailedPrecondition`).
    pub fn class(&self) -> crate::Class {
        use crate::Class;
        match self {
            StorageError::HandleClosed => Class::FailedPrecondition,
            StorageError::UnknownEntry { .. } => Class::NotFound,
            StorageError::OutOfBounds(..) => Class::ResourceExhausted,
            StorageError::Corrupt { .. } => Class::CorruptArtifact,
            StorageError::BackendFault { .. } => Class::Internal,
            StorageError::Unavailable { .. } => Class::Unavailable,
        }
    }
}

crate::reasons! {
    /// The stable reason string (the variant name).
    StorageError {
        HandleClosed,
        UnknownEntry,
        OutOfBounds,
        Corrupt,
        BackendFault,
        Unavailable,
    }
}

impl From<BoundError> for StorageError {
    fn from(value: BoundError) -> Self {
        StorageError::OutOfBounds(value)
    }
}

/// The session-storage port. Backends (memory, SQLite, a user's own) implement
/// it; `custos-conformance::storage_suite!` defines what correct means.
///
/// Every method takes `&self`: a backend serializes access itself (one writer,
/// one queue). No method may panic, whatever the handle's state.
pub trait Storage {
    /// Applies a commit all-or-none (see the module docs for the rules).
    fn commit(&self, commit: &Commit) -> Result<CommitReceipt, CommitError>;

    /// Entries by id, aligned with `ids`: `None` for an unknown id. At most
    /// [`types::MAX_GET_ENTRIES`] ids per call.
    fn get_entries(&self, ids: &[RecordId]) -> Result<Vec<Option<Entry>>, StorageError>;

    /// One register cell, or `None` when absent.
    fn get_register(
        &self,
        namespace: &Namespace,
        key: &RegisterKey,
    ) -> Result<Option<Register>, StorageError>;

    /// The cells of `namespace` whose keys start with `prefix`, ascending by key.
    fn list_registers(
        &self,
        namespace: &Namespace,
        prefix: &KeyPrefix,
    ) -> Result<Vec<Register>, StorageError>;

    /// A branch scan: leaf to root, refined as [`BranchScan::refine`] says.
    fn scan_branch(&self, q: &BranchScan) -> Result<Vec<Entry>, StorageError>;

    /// An entry seq-range scan, ascending.
    fn scan_entries(&self, q: &EntryScan) -> Result<Vec<Entry>, StorageError>;

    /// [`Storage::scan_entries`] projected to [`EntryHead`]s, reading no payload.
    fn scan_entry_heads(&self, q: &EntryScan) -> Result<Vec<EntryHead>, StorageError>;

    /// A usage-ledger seq-range scan, ascending.
    fn scan_usage(&self, q: &UsageScan) -> Result<Vec<UsageRow>, StorageError>;

    /// The stats projection.
    fn stats(&self) -> Result<Stats, StorageError>;

    /// Closes the handle. Idempotent: a second close answers what the first
    /// did — except after [`StorageError::Unavailable`], when the release's
    /// outcome is unknown and a second close retries it. Every other call
    /// is refused from the first close on.
    fn close(&self) -> Result<(), StorageError>;

    /// The query plan a branch scan would use, one line per plan step, for
    /// backends that have one (SQLite's `EXPLAIN QUERY PLAN`). The default,
    /// `Ok(None)`, means "no plan to show"; the conformance suite then skips
    /// its plan assertions.
    fn explain_branch_scan(&self, q: &BranchScan) -> Result<Option<Vec<String>>, StorageError> {
        let _ = q;
        Ok(None)
    }
}
