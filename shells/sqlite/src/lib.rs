//! custos-sqlite — the SQLite shell of custos.
//!
//! Binds the pure machines of `custos-core` to SQLite files: session storage,
//! the control catalog, the execution ledger and the catalogue. Every write
//! transaction is `BEGIN IMMEDIATE`, loads the rows into the core state, calls
//! the core decision and writes the result back in the same transaction.
//!
//! This crate is a placeholder until the session-storage work lands; it holds
//! no rules of its own.
