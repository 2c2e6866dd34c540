//! custos-fs — the filesystem shell of custos.
//!
//! Durable-directory primitives (exclusive lock, fsync chain, staged rename)
//! and the release and deployment repositories built on them.
//!
//! This crate is a placeholder until the release-catalog work lands; it holds
//! no rules of its own.
