//! Test support shared by custos's test suites: the machines' stream
//! checkers (what the fuzz targets, property tests and corpus replays run)
//! and proptest strategies over the core's requests, written once instead
//! of copied into each shell's tests.
//!
//! A dependency of tests only (the workspace's architecture test holds
//! that no library crate depends on it, and that it depends on the core
//! and proptest alone).

pub mod access;
pub mod streams;
