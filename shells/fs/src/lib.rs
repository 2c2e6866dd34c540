//! custos-fs — the filesystem shell of custos.
//!
//! Durable-directory primitives (exclusive lock, fsync chain, staged rename)
//! over an [`Fs`] trait with a real and a recording implementation, and the
//! release repository built on them (the deployment repository will be).
//!
//! - [`fs`] — the [`Fs`] trait, [`RealFs`], and [`RecordingFs`] (a trace of
//!   every operation, and failpoints that fail any single one).
//! - [`root`] — [`DurableRoot`]: open (anchor, create, canonicalize, fsync
//!   leaf → root, then lock) and the one durable-publication routine.
//! - [`release`] — the local release repository, following
//!   `custos_core::release::protocol`.
//! - [`deployment`] — the local deployment repository over a
//!   release catalog, following `custos_core::deployment`.
//! - [`crash`] — crash states enumerated from a recorded trace.
//! - [`error`] — [`FsError`] with its stable reasons.

pub mod artifacts;
pub mod crash;
pub mod deployment;
pub mod error;
pub mod fs;
pub mod release;
pub mod root;

pub use custos_core::root::{Access, OpenPlan};
pub use error::{FsError, LOCK_MISSING, LOCK_REPLACED, PATH_DURABILITY_UNCERTAIN, ROOT_LOCKED};
pub use fs::{Fs, Op, RealFs, Recorded, RecordingFs};
pub use release::{ReleaseError, ReleaseRepository};
pub use root::{DurableRoot, LOCK_FILE};
