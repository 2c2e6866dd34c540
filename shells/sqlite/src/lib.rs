//! custos-sqlite — the SQLite shell of custos: session storage.
//!
//! [`SqliteStorage`] implements `custos_core::storage::Storage` over one
//! SQLite file per session (schema and encodings: [`schema`]). It holds no
//! rules of its own: every write transaction is `BEGIN IMMEDIATE`, loads
//! exactly the rows the core decision needs ([`custos_core::lease::decide`]
//! for the writer lease, `Commit::footprint` → `CommitContext` →
//! [`custos_core::storage::decide`] for the commit), calls the decision and
//! writes its result back in the same transaction. Reads that span several
//! statements run in one deferred transaction.
//!
//! Connection policy: WAL, `synchronous=FULL` and a busy timeout, each read
//! back and verified (a mode SQLite declined is [`OpenError::PragmaDeclined`]).
//! `PRAGMA user_version` is [`schema::STORAGE_VERSION`] and
//! `PRAGMA application_id` is [`schema::APPLICATION_ID`].
//!
//! Offline operations over a **closed** file ([`offline`]): the precise
//! rewrite ([`rewrite_into`]), `export_closed` / `release_export`, and the
//! lease-free `generation` / `identity` projections.

pub mod access;
pub mod catalogue;
mod codec;
mod config;
pub mod control;
mod effects;
mod fault;
mod lease_rows;
pub mod ledger;
pub mod offline;
pub mod readonly;
pub mod schema;
mod store;

pub use config::{
    system_clock, Clock, Config, OpenError, Refusal, DEFAULT_BUSY_TIMEOUT, DEFAULT_LEASE_TTL_MS,
};
pub use offline::{
    export_closed, generation, identity, release_export, rewrite_into, Identity, Offline,
    RewriteError, RewriteReport, REWRITE_OWNER,
};
pub use store::{Segment, SqliteStorage, REASON_POISONED};
