//! Verification support shared by custos's models, conformance suites,
//! fuzz targets and tests, written once instead of copied into each:
//!
//! - [`streams`] — one stream checker per machine: a stream of requests
//!   through the machine's decision, its invariants checked after every
//!   step (what the fuzz targets, property tests and corpus replays run);
//! - [`simulate`] — the migration's simulated environment around the real
//!   migration machine, with a monitor of the workflow's safety rules (what
//!   the migration model, its fuzz target and the conformance suite of a
//!   destination's administration run);
//! - `access` (feature `proptest`) — proptest strategies
//!   over the access plane's requests;
//! - `pg_cluster` (feature `pg-cluster`) — a private PostgreSQL cluster (`initdb` into a
//!   temporary directory, a server at a free port, SIGKILL and restart)
//!   for the PostgreSQL shell's tests and benchmarks and the command
//!   line's tests over it.
//!
//! None of it is part of `custos-core`'s API. The workspace's architecture
//! test holds that no product crate (the core, the shells, the migration's
//! composition) reaches this one through its normal dependencies — the
//! verification crates (the models, the conformance suites) and the binary
//! that runs the models may — and that its workspace dependencies are the
//! core and proptest alone.

#[cfg(feature = "proptest")]
pub mod access;
#[cfg(feature = "pg-cluster")]
pub mod pg_cluster;
pub mod simulate;
pub mod streams;
