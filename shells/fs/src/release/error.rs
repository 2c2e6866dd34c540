//! The release repository's errors.

use custos_core::Class;
use std::path::PathBuf;

use custos_core::release::bounds::BoundError;
use custos_core::release::complete::CompleteError;
use custos_core::release::contract::ComponentRejected;
use custos_core::release::lifecycle::{LifecycleError, Membership};
use custos_core::release::manifest::ManifestError;
use custos_core::release::metadata::MetadataError;
use custos_core::release::page::PageError;
use custos_core::release::protocol::{ProtocolError, RecoveryError, Step};
use custos_core::release::Sha256;
use thiserror::Error;

use crate::error::FsError;

/// Why a release-repository operation failed. A refusal before staging
/// leaves the root untouched.
#[derive(Debug, Error)]
pub enum ReleaseError {
    /// The filesystem failed (including the root's `Unavailable` reasons).
    #[error("{0}")]
    Fs(#[from] FsError),
    /// A step of a publication failed after it began.
    #[error("publication step {} failed: {source}", step.as_str())]
    Step {
        /// The protocol step.
        step: Step,
        /// What failed.
        #[source]
        source: Box<ReleaseError>,
    },
    /// A lifecycle record's durable write failed: the operation's outcome
    /// is uncertain (it may or may not have landed; a failed
    /// acknowledgment does not establish rollback). `seq` was reserved and
    /// is never reused; `ReleaseRepository::outcome(seq)` answers unknown
    /// until a reopen reads the durable truth.
    #[error("lifecycle operation {seq} is uncertain: {source}")]
    LifecycleUncertain {
        /// The operation's reserved sequence number.
        seq: u64,
        /// What failed.
        #[source]
        source: Box<ReleaseError>,
    },
    /// The manifest was refused.
    #[error("{0}")]
    Manifest(#[from] ManifestError),
    /// The metadata codec refused.
    #[error("{0}")]
    Metadata(#[from] MetadataError),
    /// A bound refused (`ResourceExhausted`, contract too complex).
    #[error("{0}")]
    Bound(#[from] BoundError),
    /// The protocol refused: a pending publication (`Unavailable`), or a
    /// digest or reference conflict.
    #[error("{0}")]
    Protocol(#[from] ProtocolError),
    /// The component inspector refused the component.
    #[error("{0}")]
    Component(#[from] ComponentRejected),
    /// The component's digest is not the manifest's.
    #[error("InvalidManifest: component_digest {declared} is not the component's digest {actual}")]
    DigestMismatch {
        /// What the manifest declares.
        declared: Sha256,
        /// SHA-256 of the component bytes.
        actual: Sha256,
    },
    /// The declared contract disagrees with the component or the manifest.
    #[error("InvalidContract: {0}")]
    ContractMismatch(&'static str),
    /// A completion record was refused.
    #[error("{1} (release {0})")]
    Complete(Sha256, CompleteError),
    /// Recovery refused a directory under `releases/`: the open fails.
    #[error("{0}")]
    Recovery(#[from] RecoveryError),
    /// Stored data is damaged or inconsistent.
    #[error("CorruptArtifact: {path}: {detail}")]
    Corrupt {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// Lifecycle state refused an operation or did not decode.
    #[error("{0}")]
    Lifecycle(#[from] LifecycleError),
    /// No adopted release has this digest or reference (or it belongs to
    /// another tenant).
    #[error("NotFound: release {0}")]
    NotFound(String),
    /// The release exists but is not eligible for resolve or fetch.
    #[error("FailedPrecondition: release {digest} is {}", membership.as_str())]
    NotEligible {
        /// The release.
        digest: Sha256,
        /// Its membership.
        membership: Membership,
    },
    /// A page request was refused.
    #[error("{0}")]
    Page(#[from] PageError),
}

impl ReleaseError {
    /// The error class, one of: `Unavailable`,
    /// `ResourceExhausted`, `CorruptArtifact`, `AlreadyExists`, `NotFound`,
    /// `InvalidArgument`, `FailedPrecondition`, `StateConflict` (an expired
    /// page continuation), `Internal`.
    pub fn class(&self) -> Class {
        match self {
            // A failed fsync poisons the handle (the kernel may have dropped
            // the dirty pages): the remedy is to reopen, which re-verifies
            // everything and lets the exact pending retry reconcile — a
            // retryable condition, not an internal error ([`FsError::class`]).
            ReleaseError::Fs(e) => e.class(),
            ReleaseError::Step { source, .. } | ReleaseError::LifecycleUncertain { source, .. } => {
                source.class()
            }
            ReleaseError::Manifest(ManifestError::TooLarge { .. })
            | ReleaseError::Metadata(MetadataError::TooLarge { .. })
            | ReleaseError::Bound(BoundError::ResourceExhausted { .. }) => Class::ResourceExhausted,
            ReleaseError::Manifest(ManifestError::NonCanonical)
            | ReleaseError::Metadata(
                MetadataError::Malformed(_)
                | MetadataError::NonCanonical
                | MetadataError::UnknownFormat(_),
            )
            | ReleaseError::Lifecycle(
                LifecycleError::TooLarge { .. }
                | LifecycleError::Malformed(_)
                | LifecycleError::NonCanonical
                | LifecycleError::Misplaced(_)
                | LifecycleError::Lost { .. }
                | LifecycleError::MalformedHead,
            )
            | ReleaseError::Recovery(_)
            | ReleaseError::Corrupt { .. } => Class::CorruptArtifact,
            ReleaseError::Complete(_, e) => e.class(),
            ReleaseError::Protocol(ProtocolError::Unavailable { .. }) => Class::Unavailable,
            ReleaseError::Protocol(_) => Class::AlreadyExists,
            ReleaseError::NotFound(_) | ReleaseError::Lifecycle(LifecycleError::NotFound(_)) => {
                Class::NotFound
            }
            ReleaseError::NotEligible { .. } => Class::FailedPrecondition,
            // The catalog moved since the listing began: re-read.
            ReleaseError::Page(PageError::Expired) => Class::StateConflict,
            ReleaseError::Manifest(_)
            | ReleaseError::Metadata(_)
            | ReleaseError::Bound(_)
            | ReleaseError::Component(_)
            | ReleaseError::DigestMismatch { .. }
            | ReleaseError::ContractMismatch(_)
            | ReleaseError::Page(PageError::InvalidToken) => Class::InvalidArgument,
        }
    }

    /// The error under any [`ReleaseError::Step`] wrappers.
    pub fn root_cause(&self) -> &ReleaseError {
        match self {
            ReleaseError::Step { source, .. } | ReleaseError::LifecycleUncertain { source, .. } => {
                source.root_cause()
            }
            e => e,
        }
    }

    /// The reserved sequence number of a lifecycle operation whose outcome
    /// is uncertain, under any [`ReleaseError::Step`] wrapper.
    pub fn uncertain_seq(&self) -> Option<u64> {
        match self {
            ReleaseError::LifecycleUncertain { seq, .. } => Some(*seq),
            ReleaseError::Step { source, .. } => source.uncertain_seq(),
            _ => None,
        }
    }

    /// The step a publication failed at, if it got past admission.
    pub fn step(&self) -> Option<Step> {
        match self {
            ReleaseError::Step { step, .. } => Some(*step),
            _ => None,
        }
    }
}
