//! custos-postgres — the PostgreSQL shell of custos: the same ports as the
//! SQLite shell, on one server that several hosts share.
//!
//! | port | type | scope of one head row |
//! | --- | --- | --- |
//! | `custos_core::storage::Storage` (with its writer lease) | [`storage::PgStorage`] | one session (many sessions per schema) |
//! | `custos_core::ledger::Ledger` | [`ledger::PgLedger`] | the ledger (one per schema) |
//! | `custos_core::catalogue::Catalogue` (custody, deletion marks, delegates) | [`catalogue::PgCatalogue`] | the catalogue (one per schema) |
//! | `custos_core::catalogue::access::Access` (principals, credentials, claims, memberships; [`access`]) | [`catalogue::PgCatalogue`] | the catalogue (one per schema) |
//! | `custos_core::world::ControlCatalog` (writer fences) | [`control::PgControlCatalog`] | the control catalog (one per schema) |
//!
//! ## No rule of its own
//!
//! Every writing call is one transaction that loads exactly the rows a
//! `custos_core` decision needs, calls that decision, and writes its result
//! back before committing — the same functions the memory and SQLite
//! implementations call, so the models' proofs cover all three. The shell
//! adds only the mapping of rows to core's values (total decoders: a stored
//! value that breaks its grammar fails the read, typed, naming the table
//! and column; it is never read as "absent").
//!
//! ## Concurrency: explicit row locks, not SERIALIZABLE
//!
//! Each writing transaction runs at READ COMMITTED and takes, **first**, a
//! `SELECT … FOR UPDATE` lock on its scope's one head row. Writers of one
//! scope are therefore totally ordered — the same order SQLite's
//! `BEGIN IMMEDIATE` gives on one host — and, because READ COMMITTED takes
//! a fresh snapshot per statement, every statement after the lock sees
//! every earlier writer's commit: the decision is made on the state it will
//! overwrite. With one lock taken first and no other lock order, two
//! writers cannot deadlock, and no transaction is ever asked to retry.
//! SERIALIZABLE would give the same outcome only through aborts and
//! retries of whole decisions under contention (a race of eight admissions
//! of one key is all conflict); the row lock is cheaper and never fails a
//! call that would succeed. ([`conn::Conn::write`] still retries a
//! serialization failure or deadlock a bounded number of times, should a
//! server setting make one appear.) Multi-statement reads run in one
//! REPEATABLE READ, READ ONLY transaction: one snapshot, nothing written.
//!
//! Ownership is never a session-level advisory lock: a backend terminated
//! server-side loses such a lock silently while its client still believes
//! it holds it. The writer lease of session storage is a row decided by
//! `custos_core::lease` and checked **by value** (owner, fence, expiry)
//! inside every writing transaction, so a writer whose lease was stolen
//! commits nothing, whatever its connection believes; its fence follows the
//! high-water rule the lease model proves. The one advisory lock used is
//! transaction-scoped and guards schema creation only
//! ([`conn::Component::prepare`]).
//!
//! ## Time across hosts
//!
//! Every `now` given to a core decision that judges time (the writer
//! lease's expiry) is the server's `clock_timestamp()`, read inside the
//! transaction that decides, after its head-row lock — never a host's
//! clock, so hosts whose clocks disagree by minutes judge a lease alike
//! (`tests/hosts.rs` runs clients ten minutes ahead of and behind the
//! server). Timestamps that are data — a commit's `ts`, a catalogue
//! request's `now` — are the caller's, stored as given, as in every other
//! backend.
//!
//! ## Schema
//!
//! Each component's tables live in the PostgreSQL schema its [`Target`]
//! names and are created on first use; `custos_versions` records each
//! component's version. A stored version newer than this build's is
//! refused before anything is written (the schema is not even created);
//! an older one is migrated step by step in the same transaction that
//! records the new version.
//!
//! ## Failures
//!
//! A refused or dropped connection, a server shutting down or restarting,
//! a terminated backend: the port's `Unavailable` error. A write whose
//! COMMIT reply was lost is in doubt and also `Unavailable`. A ledger
//! admission carrying its own request id (`Ledger::admit_once`), a `finish`
//! of the same outcome and a storage commit carrying its own commit id
//! (`Commit::identified`) are answered as the first attempt was;
//! so are a retried catalogue `Delete` and access `InviteMember`;
//! `docs/retries.md` in the repository lists what every other request's
//! retry is answered. A handle reconnects on its next call. The connection
//! URL
//! is a secret: no error, Debug output or log line of this crate shows it
//! or its password ([`redact`] gives `host:port/database`).
//!
//! ## Threads
//!
//! Every handle is `Send + Sync`: threads sharing one (in an `Arc`) run
//! their calls side by side, each on a connection of the handle's bounded
//! pool ([`Target::pool_size`], 8 by default; opened as needed, never more).
//! Writers of one scope still serialize on its head row in the server. A
//! connection the server ended while it sat idle is noticed when next
//! taken and replaced before use; one lost under a call is discarded with
//! the idle ones beside it (they met the same restart), while a lock or
//! statement timeout keeps it; a thread finding every connection in use
//! waits at most [`conn::Waits::checkout`].
//! `tests/pool.rs` shares one handle among 32 threads through a postmaster
//! SIGKILL and restart.
//!
//! ## TLS
//!
//! The connection string's `sslmode` and `sslrootcert` are read as libpq
//! reads them and carried out by rustls ([`tls`] tabulates the modes):
//! `verify-full` checks the server's certificate against the named CA and
//! the host name, `require` refuses a server that offers no TLS, and
//! `prefer` (the default) encrypts when the server offers it.

pub mod access;
pub mod catalogue;
mod cols;
pub mod conn;
pub mod control;
mod effects;
pub mod ledger;
mod open;
pub mod storage;
pub mod tls;

pub use conn::{redact, AccessClock, ConnectError, Target};
pub use open::{OpenError, Refusal};
pub use tls::TlsMode;

use custos_core::identity::StorageIdentity;

/// The PostgreSQL schema holding the control catalog of `id` when the
/// catalog lives on a server: `custos_ctl_` and the first 32 hex digits of
/// the identity's catalog fingerprint (128 bits; 43 characters, within
/// PostgreSQL's 63). Every host that names the same storage identity finds
/// the same catalog.
pub fn control_schema(id: &StorageIdentity) -> String {
    let fp = id.catalog_fingerprint();
    format!("custos_ctl_{}", fp.get(..32).unwrap_or(&fp))
}
