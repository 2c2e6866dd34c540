//! The errors of the filesystem shell.

use custos_core::Class;
use std::io;
use std::path::PathBuf;

use custos_core::root::RootRefusal;
use thiserror::Error;

/// The stable reason of a failed ancestor synchronization at open.
pub const PATH_DURABILITY_UNCERTAIN: &str = "catalog-path-durability-uncertain";

/// The stable reason of a root whose `.catalog.lock` another owner holds.
pub const ROOT_LOCKED: &str = "catalog-root-locked";

/// The stable reason of a lock file whose path no longer names the file
/// the handle locked.
pub const LOCK_REPLACED: &str = "catalog-lock-replaced";

/// The stable reason of a reading open that finds no lock file to share.
pub const LOCK_MISSING: &str = "catalog-lock-missing";

/// Why a filesystem operation of the shell failed.
#[derive(Debug, Error)]
pub enum FsError {
    /// Retryable: the root is owned by another live handle, its path could
    /// not be made durable, or its lock file was deleted or replaced.
    /// Nothing was initialized or committed.
    #[error("Unavailable: {reason}: {path}: {detail}")]
    Unavailable {
        /// The stable reason ([`PATH_DURABILITY_UNCERTAIN`], [`ROOT_LOCKED`],
        /// [`LOCK_REPLACED`], [`LOCK_MISSING`]).
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
    /// The directory is not one this catalog may open (see
    /// [`custos_core::root`]); it was left as it was.
    #[error("{refusal} ({path})")]
    Refused {
        /// The root.
        path: PathBuf,
        /// Why.
        refusal: RootRefusal,
    },
    /// A mutation through a handle opened for reading.
    #[error(
        "ReadOnly: this catalog was opened for reading only; open it for writing to change it"
    )]
    ReadOnly,
    /// A name that is not a single normal path component.
    #[error("InvalidName: {0:?} is not a single plain file or directory name")]
    InvalidName(String),
}

impl FsError {
    /// The error class: `Unavailable` (retry after the cause is gone: a
    /// live owner, a replaced lock, a failed fsync), `ResourceExhausted`
    /// (the disk or a quota is full), the refusal's class, `FailedPrecondition`
    /// (a read handle), `InvalidArgument`, or `Internal`.
    pub fn class(&self) -> Class {
        match self {
            FsError::Unavailable { .. } | FsError::SyncFailed { .. } | FsError::Poisoned => {
                Class::Unavailable
            }
            FsError::Io { source, .. } if is_full(source) => Class::ResourceExhausted,
            FsError::Io { .. } => Class::Internal,
            FsError::Refused { refusal, .. } => refusal.class(),
            FsError::ReadOnly => Class::FailedPrecondition,
            FsError::InvalidName(_) => Class::InvalidArgument,
        }
    }

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

/// Whether an I/O error says the disk or a quota is full.
pub(crate) fn is_full(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    )
}
