//! The errors of the filesystem shell.

use std::io;
use std::path::PathBuf;

use thiserror::Error;

/// The stable reason of a failed ancestor synchronization at open.
pub const PATH_DURABILITY_UNCERTAIN: &str = "catalog-path-durability-uncertain";

/// The stable reason of a root whose `.catalog.lock` another owner holds.
pub const ROOT_LOCKED: &str = "catalog-root-locked";

/// Why a filesystem operation of the shell failed.
#[derive(Debug, Error)]
pub enum FsError {
    /// Retryable: the root is owned by another live handle, or its path could
    /// not be made durable. Nothing was initialized.
    #[error("Unavailable: {reason}: {path}: {detail}")]
    Unavailable {
        /// The stable reason ([`PATH_DURABILITY_UNCERTAIN`], [`ROOT_LOCKED`]).
        reason: &'static str,
        /// The path concerned.
        path: PathBuf,
        /// What the filesystem said.
        detail: String,
    },
    /// An fsync failed: what was written may or may not be durable, and the
    /// kernel may have dropped the dirty pages (fsyncgate). The handle is
    /// poisoned; every later operation through it fails with
    /// [`FsError::Poisoned`]. Reopen to recover.
    #[error("SyncFailed: fsync of {path} failed; the handle is poisoned: {source}")]
    SyncFailed {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// An earlier fsync failed on this handle.
    #[error("Poisoned: an earlier fsync failed on this catalog handle; reopen it")]
    Poisoned,
    /// Another filesystem operation failed.
    #[error("Io: {op} {path}: {source}")]
    Io {
        /// The operation.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// A name that is not a single normal path component.
    #[error("InvalidName: {0:?} is not a single plain file or directory name")]
    InvalidName(String),
}

impl FsError {
    /// The stable reason of an [`FsError::Unavailable`].
    pub fn unavailable_reason(&self) -> Option<&'static str> {
        match self {
            FsError::Unavailable { reason, .. } => Some(reason),
            _ => None,
        }
    }
}

pub(crate) fn io_err(
    op: &'static str,
    path: impl Into<PathBuf>,
) -> impl FnOnce(io::Error) -> FsError {
    let path = path.into();
    move |source| FsError::Io { op, path, source }
}
