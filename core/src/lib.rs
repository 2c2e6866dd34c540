//! custos-core — the pure machines of the custos control plane.
//!
//! Every rule of custos lives here exactly once, as a state machine over plain
//! data: stored state, a request enum carrying every outside input (caller
//! identity, tokens, op ids, and `now` where time matters), one total and
//! deterministic decision function, and a closed error enum. This crate does no
//! I/O, reads no clock and draws no randomness; shells (SQLite, the local
//! filesystem, Iceberg, Wasm) load state inside their transactions, call the
//! decision and write its result back in the same transaction.
//!
//! Machines:
//! - [`lease`] — the expiring, fenced writer lease (single writer per store).
//! - [`fence`] — writer-fence epochs per world, with imported floors.
//! - [`ledger`] — the execution ledger: what ran and must never run twice.
//! - [`catalogue`] — the session catalogue: registrations, names, visibility,
//!   subtitles, recent folders, deletion marks, delegates, the `Catalogue` port;
//!   with [`catalogue::custody`] — who serves a session and how it moves
//!   between catalogues — and [`catalogue::access`] — principals,
//!   credentials, claims and memberships.
//! - [`storage`] — the session store: entries, registers, usage ledger, the
//!   commit decision, the query shapes and the `Storage` port.
//! - [`migration`] — the whole-identity migration workflow: plan
//!   and receipt as canonical digest-bound data, the ordered steps, retry
//!   convergence.
//! - [`deployment`] — the deployment catalog's rules: manifests,
//!   revision ids, route compilation and weighted selection, versioned
//!   desired state, bounded pages.
//! - [`release`] — the release catalog's rules: the COMPLETE record
//!   and the catalog bounds with their index accounting.
//! - [`root`] — which directory a catalog may adopt: the durable mode
//!   marker, fresh versus foreign roots, read / write / upgrade opens.
//! - [`identity`] — storage identity (uri, namespace, backend), its
//!   fingerprint and the control catalog's location.
//! - [`world`] — the control catalog of worlds: identity, writer mode,
//!   status, tick head, signatures, retirement, the `ControlCatalog` port.
//! - [`control_memory`] — the memory backend of the control catalog and of
//!   a migration destination's administration, over the same worlds.
//! - [`class`] — the one vocabulary of failure kinds every error answers.
//! - [`columns`] — a stored row's columns, decoded by one set of rules
//!   (bounded before copied, typed refusals naming table, row and column)
//!   for every backend over rows.
//! - [`schema`] — logical table schemas and their fingerprint.
//!
//! The machines' stream checkers, the migration's simulated environment and
//! the proptest strategies over requests are test support, not part of this
//! crate's API: they live in the `custos-testkit` crate, which the fuzz
//! targets, the models and the test suites depend on.

pub mod catalogue;
pub mod class;
pub mod columns;
pub mod control_memory;
pub mod deployment;
pub mod digest;
pub mod fence;
pub mod hex;
pub mod identity;
pub mod lease;
pub mod ledger;
pub mod migration;
pub mod pairs;
mod reason;
pub mod release;
pub mod root;
pub mod schema;
pub mod snapshot;
pub mod storage;
pub mod world;

pub use class::Class;

/// Milliseconds on the caller's clock. The machines never read a clock; every
/// request that depends on time carries the caller's reading.
pub type Millis = u64;
