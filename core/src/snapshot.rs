//! The bounded snapshot reader over the session store: bounded client reads
//! that leave the [`Storage`](crate::storage::Storage) port as it is.
//!
//! - [`Plan`] — a declarative selection of register namespaces, prefixes
//!   and exact keys ([`Selection`]), plus bounded [`Reference`]s
//!   (`OptionalPrefixedField`: a selected cell's nullable JSON string field
//!   names an exact key under a prefix).
//! - [`Reader`] — the rules: [`Reader::capture`] (one coherent [`Cut`]:
//!   high-water, stats and the selected cells), [`Reader::key_page`],
//!   [`Reader::descriptors`], [`Reader::fragment`] and [`Reader::lineage`].
//! - [`SnapshotSource`] and [`CutView`] — the port: the small steps a
//!   backend supplies (one coherent cut for a body of header and cell
//!   lookups; descriptor pages, the lineage step and fragments outside any
//!   transaction). [`MemoryStorage`](crate::storage::MemoryStorage)
//!   implements it (one lock is one cut); the SQLite shell uses one short
//!   deferred transaction, the PostgreSQL shell one `REPEATABLE READ, READ
//!   ONLY` transaction.
//! - [`rules`] — the pure functions the reader is made of (prefix
//!   successor and key windows, plan validation, budget accounting, answer
//!   checks, the lineage walk), each testable without a backend.
//!
//! ## Bounds (each has a conformance case in `custos-conformance`)
//!
//! - **Bounds precede payload reads.** A capture admits at most
//!   [`MAX_CAPTURE_CELLS`] cells and [`MAX_CAPTURE_BYTES`] bytes, a cell
//!   costing its namespace, key and value lengths (identifiers and
//!   referenced cells count). Every cell is accounted from its *header*
//!   (key, seq, value length) before any value is fetched; a capture over
//!   budget is [`SnapshotError::OverBudget`] — refused, never truncated.
//!   A header window asks for one more header than the budget admits, so
//!   an over-budget selection is seen without reading past it.
//! - **Exact selection never scans neighbours**: an exact key is one
//!   [`CutView::header`] lookup; a missing exact key is omitted (compare the
//!   requested keys with [`Cut::cells`] to report absence).
//! - **A prefix selection is an index range**: `key >= prefix AND key <
//!   successor(prefix)` ([`rules::successor`], computed here; no successor
//!   — the empty prefix or one of `char::MAX`s only — leaves the range open
//!   above). Prefixes are literal: nothing in them is a pattern.
//! - **Pages**: a [`KeyPage`] holds at most [`PAGE_LIMIT`] ascending cells
//!   after an exclusive key cursor and is a fresh coherent cut of its own
//!   (a removed cursor key still names the same boundary); a
//!   [`DescriptorPage`] holds at most [`PAGE_LIMIT`] entry descriptors below
//!   the captured high-water. A limit of 0 or above [`PAGE_LIMIT`] is
//!   [`SnapshotError::LimitOutOfRange`].
//! - **Fragments** hold at most [`MAX_FRAGMENT_BYTES`]; a record above
//!   [`MAX_RECORD_BYTES`] is [`SnapshotError::RecordTooLarge`], decided from
//!   its descriptor before any payload byte is fetched.
//! - **Lineage** ([`Reader::lineage`]): `from` and its ancestors below the
//!   exclusive `before_seq`, ascending, at most `limit` (≤ [`PAGE_LIMIT`])
//!   and at most [`LINEAGE_BYTES_LIMIT`] of payload past the first record,
//!   which is always returned. Each step is one [`SnapshotSource::entry_head`]
//!   probe asking for the parent *below the seq of the entry before*, so a
//!   corrupt parent link ends the walk instead of looping, and a parent the
//!   store lacks ends it as a root does.
//! - **The cut outlives no transaction**: [`Cut`] is plain data; descriptor
//!   pages, lineage and fragments read write-once entries below its
//!   high-water and retain nothing between calls.
//!
//! Every answer a backend gives is checked against what was asked (ascending,
//! inside the window and the cut, within the limit, values matching their
//! headers); a backend answering outside it is
//! [`SnapshotError::BackendViolation`], never a silently wrong snapshot.
//!
//! ## Wait budgets, timeouts and unavailable readers
//!
//! A reader whose reads go through a storage *actor*, the caller exchanging
//! messages with it, needs a final wait budget per reader function (at most
//! 5,000 ms) and must tell `ReadTimedOut` from `ReaderUnavailable`: a late
//! reply lands in a mailbox. Here a read is a synchronous call on
//! the caller's own thread — there is no mailbox, no late reply and no
//! actor to be dead — so neither outcome exists and no wait budget is
//! taken. What bounds a read in time is the backend's own lock wait:
//! SQLite's busy timeout (a deferred read in WAL mode does not wait for a
//! writer at all), PostgreSQL's statement settings, the memory backend's
//! mutex. A backend that cannot be reached answers
//! [`StorageError::Unavailable`](crate::storage::StorageError) inside
//! [`SnapshotError::Storage`]; that is the honest analogue of
//! `ReaderUnavailable`. A caller that needs a deadline across threads runs
//! the read on a thread of its own, as it would any blocking call.

pub mod memory;
pub mod rules;
mod stored;

mod reader;

#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::storage::{
    KeyPrefix, Kind, Namespace, RecordId, Register, RegisterKey, Seq, Stats, StorageError,
};
use crate::Millis;

pub use reader::Reader;
pub use rules::{successor, KeyRange};

/// The most cells one capture admits (identifiers and referenced cells count).
pub const MAX_CAPTURE_CELLS: usize = 1024;
/// The most bytes one capture (or key page) admits: namespace, key and value
/// lengths of every cell.
pub const MAX_CAPTURE_BYTES: u64 = 1024 * 1024;
/// The most cells of a key page, descriptors of a descriptor page and
/// records of a lineage.
pub const PAGE_LIMIT: usize = 100;
/// The most bytes one fragment holds (190 KiB).
pub const MAX_FRAGMENT_BYTES: usize = 190 * 1024;
/// The largest record a fragment is cut from (32 MiB); above it the record
/// is refused before its payload is fetched.
pub const MAX_RECORD_BYTES: u64 = 32 * 1024 * 1024;
/// The most payload bytes a lineage returns past its first record (2 MiB).
pub const LINEAGE_BYTES_LIMIT: u64 = 2 * 1024 * 1024;
/// The most selections one plan may carry.
pub const MAX_SELECTIONS: usize = 64;
/// The most references one plan may carry.
pub const MAX_REFERENCES: usize = 16;
/// The longest JSON field name a reference may follow, in bytes.
pub const MAX_FIELD_LEN: usize = 64;

/// The reader's bounds. [`Limits::STANDARD`] is the standard set, the constants
/// above; a reader may run
/// with tighter ones (a test that needs an oversized record without writing
/// 32 MiB, a caller with a smaller frame), never looser ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Limits {
    /// [`MAX_CAPTURE_CELLS`].
    pub capture_cells: usize,
    /// [`MAX_CAPTURE_BYTES`].
    pub capture_bytes: u64,
    /// [`PAGE_LIMIT`].
    pub page: usize,
    /// [`MAX_FRAGMENT_BYTES`].
    pub fragment_bytes: usize,
    /// [`MAX_RECORD_BYTES`].
    pub record_bytes: u64,
    /// [`LINEAGE_BYTES_LIMIT`].
    pub lineage_bytes: u64,
}

impl Limits {
    /// The standard bounds: every constant above at its full value.
    pub const STANDARD: Limits = Limits {
        capture_cells: MAX_CAPTURE_CELLS,
        capture_bytes: MAX_CAPTURE_BYTES,
        page: PAGE_LIMIT,
        fragment_bytes: MAX_FRAGMENT_BYTES,
        record_bytes: MAX_RECORD_BYTES,
        lineage_bytes: LINEAGE_BYTES_LIMIT,
    };

    /// Whether every bound is at most the standard one ([`Limits::STANDARD`]).
    pub fn within_standard(&self) -> bool {
        let s = Limits::STANDARD;
        self.capture_cells <= s.capture_cells
            && self.capture_bytes <= s.capture_bytes
            && self.page <= s.page
            && self.fragment_bytes <= s.fragment_bytes
            && self.record_bytes <= s.record_bytes
            && self.lineage_bytes <= s.lineage_bytes
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::STANDARD
    }
}

/// What a plan selects.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Selection {
    /// Every cell of a namespace.
    Namespace(Namespace),
    /// The cells of a namespace whose keys start with a literal prefix.
    Prefix(Namespace, KeyPrefix),
    /// One cell; omitted when absent.
    ExactKey(Namespace, RegisterKey),
}

/// A bounded reference from a selected cell to another cell.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Reference {
    /// The value of the cell selected by `source` (an index into
    /// [`Plan::selections`], which must be an [`Selection::ExactKey`]) is a
    /// JSON object whose string field `field` names the key `prefix + value`
    /// in `namespace`. A missing source, a missing or `null` field, or a
    /// missing target is omitted; a source that is not a JSON object, a
    /// field that is not a string or a string that makes no key is
    /// [`SnapshotError::MalformedReference`].
    OptionalPrefixedField {
        /// The selection whose cell holds the field.
        source: usize,
        /// The field's name.
        field: String,
        /// The target's namespace.
        namespace: Namespace,
        /// Prepended to the field's value to make the target key.
        prefix: KeyPrefix,
    },
}

/// A declarative capture plan: selections, then references followed one
/// hop from exact selections. Bounded by [`MAX_SELECTIONS`] and
/// [`MAX_REFERENCES`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Plan {
    /// What is selected, in order.
    pub selections: Vec<Selection>,
    /// References followed from selected exact keys.
    pub references: Vec<Reference>,
}

impl Plan {
    /// An empty plan (captures the high-water and stats only).
    pub fn new() -> Self {
        Plan::default()
    }

    /// Selects a whole namespace.
    pub fn namespace(mut self, namespace: Namespace) -> Self {
        self.selections.push(Selection::Namespace(namespace));
        self
    }

    /// Selects a literal prefix of a namespace.
    pub fn prefix(mut self, namespace: Namespace, prefix: KeyPrefix) -> Self {
        self.selections.push(Selection::Prefix(namespace, prefix));
        self
    }

    /// Selects one exact key.
    pub fn exact(mut self, namespace: Namespace, key: RegisterKey) -> Self {
        self.selections.push(Selection::ExactKey(namespace, key));
        self
    }

    /// Follows `field` of the exact selection at index `source` into
    /// `namespace` / `prefix + value` (see [`Reference::OptionalPrefixedField`]).
    pub fn optional_prefixed_field(
        mut self,
        source: usize,
        field: impl Into<String>,
        namespace: Namespace,
        prefix: KeyPrefix,
    ) -> Self {
        self.references.push(Reference::OptionalPrefixedField {
            source,
            field: field.into(),
            namespace,
            prefix,
        });
        self
    }
}

/// A register cell's header: everything but its value.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CellHeader {
    /// Its key.
    pub key: RegisterKey,
    /// The seq of the write that set it.
    pub seq: Seq,
    /// Its value's length in bytes.
    pub size: u64,
}

/// The head of a cut: the exclusive high-water (the store's next seq) and
/// the stats projection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Head {
    /// The next seq: every row of the cut has a lower one.
    pub next_seq: Seq,
    /// The stats projection.
    pub stats: Stats,
}

/// What a capture copies: one coherent state of the store, as plain data.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Cut {
    /// The exclusive high-water: later pages stay below it.
    pub high_water: Seq,
    /// The stats projection at the cut.
    pub stats: Stats,
    /// The selected and referenced cells, by namespace then key, each once.
    pub cells: Vec<Register>,
    /// The accounted cost: cells and bytes.
    pub cost: Budget,
}

impl Cut {
    /// The cell at `(namespace, key)`, if the cut holds it.
    pub fn cell(&self, namespace: &Namespace, key: &RegisterKey) -> Option<&Register> {
        self.cells
            .iter()
            .find(|r| &r.namespace == namespace && &r.key == key)
    }
}

/// A count of cells and bytes: a capture's cost or its limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Budget {
    /// Cells.
    pub cells: usize,
    /// Bytes (namespace, key and value lengths).
    pub bytes: u64,
}

/// One page of register cells after a key cursor: a fresh coherent cut.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KeyPage {
    /// The page's own exclusive high-water.
    pub high_water: Seq,
    /// The cells, ascending by key.
    pub cells: Vec<Register>,
    /// The cursor of the next page (the last key), `None` when the window
    /// holds nothing after this page.
    pub next: Option<RegisterKey>,
}

/// An entry without its payload, with its payload's length.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Descriptor {
    /// The entry's id.
    pub id: RecordId,
    /// Its parent.
    pub parent: Option<RecordId>,
    /// Its kind.
    pub kind: Kind,
    /// Its seq.
    pub seq: Seq,
    /// Its commit's timestamp.
    pub ts: Millis,
    /// Its payload's length in bytes.
    pub size: u64,
}

/// One page of entry descriptors below a cut's high-water.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DescriptorPage {
    /// The descriptors, ascending by seq.
    pub descriptors: Vec<Descriptor>,
    /// The cursor of the next page (the last seq), `None` when nothing
    /// below the high-water follows.
    pub next: Option<Seq>,
}

/// A slice of one entry's payload.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fragment {
    /// The entry.
    pub id: RecordId,
    /// Where the slice starts.
    pub offset: u64,
    /// The whole payload's length.
    pub size: u64,
    /// The bytes (at most the asked length, fewer at the end).
    pub bytes: Vec<u8>,
}

/// Which statement of a backend [`SnapshotSource::explain_snapshot`] shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SnapshotStep {
    /// [`CutView::head`].
    Head,
    /// [`CutView::header`]: an exact key.
    ExactHeader,
    /// [`CutView::headers`] over a window bounded above.
    BoundedHeaders,
    /// [`CutView::headers`] over a window open above.
    OpenHeaders,
    /// [`CutView::cells`].
    Cells,
    /// [`SnapshotSource::descriptors`].
    Descriptors,
    /// [`SnapshotSource::entry_head`].
    EntryHead,
    /// [`SnapshotSource::fragment_bytes`].
    Fragment,
}

impl SnapshotStep {
    /// Every step.
    pub const ALL: [SnapshotStep; 8] = [
        SnapshotStep::Head,
        SnapshotStep::ExactHeader,
        SnapshotStep::BoundedHeaders,
        SnapshotStep::OpenHeaders,
        SnapshotStep::Cells,
        SnapshotStep::Descriptors,
        SnapshotStep::EntryHead,
        SnapshotStep::Fragment,
    ];
}

/// Why a snapshot read failed. Stable reason strings are the variant names.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error, Serialize, Deserialize)]
pub enum SnapshotError {
    /// A capture or key page over its cell or byte budget (refused, not
    /// truncated): what was accounted when the limit was passed.
    #[error("OverBudget: {cells} cells of {bytes} bytes pass the limit of {} cells and {} bytes", limit.cells, limit.bytes)]
    OverBudget {
        /// Cells accounted, the one that passed the limit included.
        cells: usize,
        /// Bytes accounted, the cell that passed the limit included.
        bytes: u64,
        /// The limit.
        limit: Budget,
    },
    /// A record above the record bound, refused before its payload is read.
    #[error("RecordTooLarge: record {id} holds {size} bytes, above the limit of {limit}")]
    RecordTooLarge {
        /// The record.
        id: RecordId,
        /// Its payload's length.
        size: u64,
        /// The bound.
        limit: u64,
    },
    /// A fragment longer than the fragment bound was asked for.
    #[error("FragmentTooLarge: a fragment holds at most {limit} bytes (asked for {len})")]
    FragmentTooLarge {
        /// The asked length.
        len: usize,
        /// The bound.
        limit: usize,
    },
    /// A fragment offset past the record's end.
    #[error("OffsetOutOfRange: offset {offset} is past the end of record {id} ({size} bytes)")]
    OffsetOutOfRange {
        /// The record.
        id: RecordId,
        /// The asked offset.
        offset: u64,
        /// The record's length.
        size: u64,
    },
    /// A page or lineage limit of 0 or above the bound.
    #[error("LimitOutOfRange: a {what} limit must be 1..={max} (got {limit})")]
    LimitOutOfRange {
        /// Which limit (`key page`, `descriptor page`, `lineage`).
        what: String,
        /// The asked limit.
        limit: usize,
        /// The bound.
        max: usize,
    },
    /// Reader limits looser than the standard ones ([`Limits::STANDARD`]).
    #[error("LimitsAboveStandard: a reader's limits may only tighten the standard bounds")]
    LimitsAboveStandard,
    /// A plan outside its bounds or naming something it cannot.
    #[error("InvalidPlan: {detail}")]
    InvalidPlan {
        /// What is wrong.
        detail: String,
    },
    /// A reference whose source value or field cannot name a key.
    #[error("MalformedReference: field {field:?} of {namespace}/{key}: {detail}")]
    MalformedReference {
        /// The source cell's namespace.
        namespace: Namespace,
        /// The source cell's key.
        key: RegisterKey,
        /// The field.
        field: String,
        /// What is wrong.
        detail: String,
    },
    /// No entry with this id below the high-water.
    #[error("UnknownEntry: no entry {id} below seq {below}")]
    UnknownEntry {
        /// The id.
        id: RecordId,
        /// The exclusive high-water it was looked up below.
        below: Seq,
    },
    /// A backend answered outside what it was asked (a row at or above the
    /// cut, out of order, outside the window, over the limit, a value that
    /// differs from its header): a broken backend, never a short answer.
    #[error("BackendViolation: {detail}")]
    BackendViolation {
        /// What was answered.
        detail: String,
    },
    /// The storage read failed (closed handle, fault, corruption, unreachable).
    #[error("Storage: {0}")]
    Storage(StorageError),
}

impl SnapshotError {
    /// The failure's [`Class`](crate::Class): what the caller does next
    /// (a budget is `ResourceExhausted`; a malformed stored reference `CorruptArtifact`; a storage failure its own class).
    pub fn class(&self) -> crate::Class {
        use crate::Class;
        match self {
            SnapshotError::OverBudget { .. } => Class::ResourceExhausted,
            SnapshotError::RecordTooLarge { .. } => Class::ResourceExhausted,
            SnapshotError::FragmentTooLarge { .. } => Class::InvalidArgument,
            SnapshotError::OffsetOutOfRange { .. } => Class::InvalidArgument,
            SnapshotError::LimitOutOfRange { .. } => Class::InvalidArgument,
            SnapshotError::LimitsAboveStandard => Class::InvalidArgument,
            SnapshotError::InvalidPlan { .. } => Class::InvalidArgument,
            SnapshotError::MalformedReference { .. } => Class::CorruptArtifact,
            SnapshotError::UnknownEntry { .. } => Class::NotFound,
            SnapshotError::BackendViolation { .. } => Class::Internal,
            SnapshotError::Storage(e) => e.class(),
        }
    }
}

crate::reasons! {
    /// The stable reason string (the variant name).
    SnapshotError {
        OverBudget,
        RecordTooLarge,
        FragmentTooLarge,
        OffsetOutOfRange,
        LimitOutOfRange,
        LimitsAboveStandard,
        InvalidPlan,
        MalformedReference,
        UnknownEntry,
        BackendViolation,
        Storage,
    }
}

impl From<StorageError> for SnapshotError {
    fn from(value: StorageError) -> Self {
        SnapshotError::Storage(value)
    }
}

/// One coherent cut of a store, for the duration of one
/// [`SnapshotSource::with_cut`] body: every call sees the same state.
/// Answers are checked by the reader (see the module docs).
pub trait CutView {
    /// The cut's high-water and stats.
    fn head(&self) -> Result<Head, StorageError>;

    /// One cell's header by an index lookup of `(namespace, key)`; `None`
    /// when absent. Never scans neighbours.
    fn header(
        &self,
        namespace: &Namespace,
        key: &RegisterKey,
    ) -> Result<Option<CellHeader>, StorageError>;

    /// At most `limit` headers of `namespace` inside `range`, ascending by
    /// key: an index range (`range` applied before the limit), reading no
    /// value.
    fn headers(
        &self,
        namespace: &Namespace,
        range: &KeyRange,
        limit: usize,
    ) -> Result<Vec<CellHeader>, StorageError>;

    /// The cells of `keys` in `namespace`, aligned with `keys` (`None` for
    /// an absent key). Called only for keys already accounted.
    fn cells(
        &self,
        namespace: &Namespace,
        keys: &[RegisterKey],
    ) -> Result<Vec<Option<Register>>, StorageError>;
}

/// The seqs `after < seq < below` a descriptor page reads, as the
/// inclusive-exclusive range `lo..below` a backend's query binds; `None`
/// when it is empty (nothing to read).
pub fn descriptor_range(after: Option<Seq>, below: Seq) -> Option<(Seq, Seq)> {
    let lo = match after {
        Some(a) => a.checked_add(1)?,
        None => 0,
    };
    (lo < below).then_some((lo, below))
}

/// The snapshot port: the steps a backend supplies to [`Reader`]. No rule
/// lives in an implementation; `custos-conformance::snapshot_suite!`
/// defines what correct means. No method may write or panic.
pub trait SnapshotSource {
    /// Runs `body` against one coherent cut (memory: one lock; SQLite: one
    /// deferred transaction; PostgreSQL: one `REPEATABLE READ, READ ONLY`
    /// transaction) and ends the cut before answering. A closed handle
    /// answers [`StorageError::HandleClosed`].
    fn with_cut<T>(
        &self,
        body: impl FnOnce(&dyn CutView) -> Result<T, SnapshotError>,
    ) -> Result<T, SnapshotError>;

    /// At most `limit` entry descriptors with `after < seq < below`,
    /// ascending by seq, reading no payload.
    fn descriptors(
        &self,
        after: Option<Seq>,
        below: Seq,
        limit: usize,
    ) -> Result<Vec<Descriptor>, StorageError>;

    /// The descriptor of entry `id` if its seq is below `below`: one
    /// indexed probe (the lineage step), reading no payload.
    fn entry_head(&self, id: &RecordId, below: Seq) -> Result<Option<Descriptor>, StorageError>;

    /// `len` bytes of the payload of the entry `head` describes, from
    /// `offset` (the reader has checked both against `head.size`).
    fn fragment_bytes(
        &self,
        head: &Descriptor,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>, StorageError>;

    /// The query plan of one step, one line per plan step, for backends
    /// that have one. The default, `Ok(None)`, means "no plan to show".
    fn explain_snapshot(&self, step: SnapshotStep) -> Result<Option<Vec<String>>, StorageError> {
        let _ = step;
        Ok(None)
    }
}

#[cfg(test)]
mod range_tests {
    use super::descriptor_range;

    #[test]
    fn a_descriptor_range_is_strictly_between_and_empty_when_nothing_is() {
        assert_eq!(descriptor_range(None, 5), Some((0, 5)));
        assert_eq!(descriptor_range(Some(1), 5), Some((2, 5)));
        assert_eq!(descriptor_range(Some(4), 5), None);
        assert_eq!(descriptor_range(None, 0), None);
        assert_eq!(descriptor_range(Some(u64::MAX), u64::MAX), None);
    }
}
