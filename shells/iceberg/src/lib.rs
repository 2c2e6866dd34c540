//! custos-iceberg — the Iceberg shell of custos.
//!
//! Cold reads that never create tables, table evidence (schema fingerprint,
//! row count, content digest) and the migration data plane.
//!
//! This crate is a placeholder until the durable-discovery work lands; the
//! heavy dependencies (iceberg, arrow) arrive with it and stay in this crate.
