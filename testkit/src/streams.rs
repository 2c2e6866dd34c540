//! Stream checkers: each machine's invariants, checked after every step of a
//! stream of requests.
//!
//! A checker takes a sequence of small, closed operations (derivable with
//! `arbitrary` behind the `arbitrary` feature), turns them into real
//! requests, runs them through the machine's decision function, and checks
//! invariants stated independently of how the machine decides. The fuzz
//! targets (`fuzz/`), the property tests and the checked-in corpus replay all
//! call the same checkers, so a failure found by one is reproducible by all.
//!
//! One module per machine, each with the same three entry points:
//! `check_<machine>_stream` (the real machine), `check_<machine>_stream_with`
//! (any decision function of the machine's signature — how the tests show a
//! checker catches a broken machine) and, with `arbitrary`,
//! `check_<machine>_bytes` (bytes decoded into a stream, what the fuzz
//! targets and the corpus replay run):
//!
//! - [`lease`] — the writer lease;
//! - [`fence`] — writer-fence epochs and imported floors;
//! - [`custody`] — custody transitions, through the catalogue;
//! - [`world`] — the control catalog;
//! - [`deployment`] — the deployment catalog, its compilation and pages.
//!
//! The ledger's and the migration's checkers are `custos_core::streams`'s.

pub mod custody;
pub mod deployment;
pub mod fence;
pub mod lease;
pub mod world;

#[cfg(feature = "arbitrary")]
pub(crate) use custos_core::streams::decode_ops;
pub(crate) use custos_core::streams::violation;
pub use custos_core::streams::Violation;
