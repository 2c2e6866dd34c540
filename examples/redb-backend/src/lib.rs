//! custos-redb-example — two of custos's ports implemented over
//! [redb](https://www.redb.org), an embedded, transactional, pure-Rust
//! key-value store. A worked example for an engineer writing a backend of
//! their own; not a supported shell.
//!
//! - [`RedbLedger`] implements [`custos_core::ledger::Ledger`], the
//!   execution ledger (which calls ran, and which must never run twice).
//! - [`RedbStorage`] implements [`custos_core::storage::Storage`], the
//!   session store (write-once entries and usage rows, registers with
//!   compare-and-set, seq-ordered scans).
//!
//! Both pass the whole conformance suite of their port
//! (`custos_conformance::ledger_suite!` and
//! `custos_conformance::storage_suite!`), including the reopen cases that
//! drop a handle and open the same file again (`tests/conformance.rs`).
//!
//! ## The shape every custos backend has: footprint → decide → effects
//!
//! A backend does not implement custos's rules. custos-core keeps each
//! port's rules in one pure, total, deterministic function, and a backend
//! only moves facts in and out of its store around it, inside **one write
//! transaction**:
//!
//! 1. **Footprint.** The request names the facts its decision can read:
//!    [`Request::footprint`](custos_core::ledger::Request::footprint) (a
//!    scope, one call key, a session's rows, every admitted row, two totals,
//!    the release log — each only when needed), or
//!    [`Commit::footprint`](custos_core::storage::Commit::footprint) (the ids
//!    a commit inserts or names as parents, the registers it expects or
//!    writes).
//! 2. **Load.** The backend opens its transaction and reads exactly those
//!    facts into plain data: a [`View`](custos_core::ledger::View), or a
//!    [`CommitContext`](custos_core::storage::CommitContext). Where the
//!    plain data promises an order, the loader must produce it (see below).
//! 3. **Decide.** [`custos_core::ledger::decide`] or
//!    [`custos_core::storage::decide`] answers either a refusal (a typed
//!    error) or a decision: the answer plus the writes — a list of
//!    [`Effect`](custos_core::ledger::Effect)s, or of storage
//!    [`Effect`](custos_core::storage::Effect)s.
//! 4. **Apply and commit.** The backend writes the effects in the same
//!    transaction and commits. On a refusal it aborts: **a refusal writes
//!    nothing** (and consumes no seq).
//!
//! Because loading and writing happen in one redb write transaction (redb
//! runs one at a time), no other writer can change a fact between the
//! decision and its effects. A ledger request that never writes
//! ([`Request::writes`](custos_core::ledger::Request::writes) is `false`)
//! runs in a redb read transaction instead: a snapshot that never waits.
//!
//! ## Orders the loader owes
//!
//! The view's call lists are "ascending by key", in
//! [`Key`](custos_core::ledger::Key)'s own order (step 2 before step 10).
//! This example stores a call under the JSON of its key, whose byte order is
//! not that order, so the loader sorts what it read. The release log is
//! keyed by a counter, so its range is insertion order. In the session
//! store, registers are keyed by `(namespace, key)` as bytes (redb compares
//! `&[u8]` bytewise: the byte order `list_registers` promises) and the two
//! seq indexes by `u64` (numeric: the ascending seq scans promise).
//!
//! ## Opening, closing, recovery
//!
//! [`RedbLedger::open`] creates or opens the file and runs restart recovery,
//! the port's provided [`Ledger::recover`](custos_core::ledger::Ledger::recover)
//! (it executes [`Request::Open`](custos_core::ledger::Request::Open): every
//! call left `admitted` becomes `unknown`) — the same as the SQLite shell's
//! open. [`RedbStorage::open`] has no recovery to run. `close` drops the
//! redb database (releasing its file lock, so the file can be opened
//! again), is idempotent, and every later call is refused:
//! `LedgerError::HandleClosed`, `StorageError::HandleClosed`, and
//! `CommitError::Faulted` with reason `handle-closed` for commits.
//!
//! ## Errors
//!
//! Nothing here panics. redb's errors become the port's `BackendFault`
//! (`CommitError::Faulted` on the commit path); corruption redb reports, and
//! stored bytes that do not decode, become `StorageError::Corrupt` or
//! `LedgerError::MalformedRow`. redb is embedded, so nothing maps to
//! `Unavailable` (there is no connection to lose).
//!
//! ## Shortcuts (honestly)
//!
//! - The ledger's two totals (`ledger_bytes`, `unclean_scopes`) are computed
//!   by scanning every call and every scope on each `attach` and `admit`,
//!   and restart recovery scans every call for `admitted` rows. A
//!   production shell would keep maintained counters and an index of
//!   admitted rows, updated by the effects in the same transaction.
//! - Rows are JSON (outcomes and payload-like bytes become JSON arrays of
//!   numbers), except entry payloads and register values, which are stored
//!   raw. There is no schema version or file identity check: a file written
//!   by something else fails on its first read as malformed, not on open.
//! - The session store has no writer lease: redb's file lock makes the
//!   handle the only writer of its file, which is all these examples need.
//! - `explain_branch_scan` keeps the port's default (`Ok(None)`): redb has
//!   no query planner; the branch walk follows parent links by key lookup.

mod handle;
mod ledger;
mod storage;

pub use ledger::RedbLedger;
pub use storage::RedbStorage;
