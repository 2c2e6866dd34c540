//! The one vocabulary of failure kinds: every error of custos answers a
//! [`Class`] (through a `class()` method), so a caller — a service mapping
//! errors to its protocol's status codes, or the command line choosing an
//! exit status — decides from the kind, never from a message or a reason
//! string.
//!
//! The names are the ones error messages start with (`NotFound: …`), so the
//! class a program reads and the one a person reads are the same word.

use std::fmt;

/// What kind of failure an error is, and so what a caller can do about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    /// The request is malformed or names something custos will not accept:
    /// fix the request.
    InvalidArgument,
    /// What the request names does not exist, or is not the caller's to see.
    NotFound,
    /// It exists already (a name taken, bytes that differ under one id).
    AlreadyExists,
    /// The state moved since the caller read it (a generation, an
    /// expectation, an expired page continuation): read again, decide again.
    StateConflict,
    /// Not now: locked by another process, a timeout, a server that does
    /// not answer (a refused or dropped connection, a server shutting down
    /// or restarting), a durability not yet certain. Retry later. A write
    /// in flight may or may not have applied: retry the same request; what
    /// its retry is answered, request by request, is `docs/retries.md`.
    Unavailable,
    /// A rule or the object's state forbids it (revoked, fenced out, not
    /// eligible): an unchanged retry cannot succeed.
    FailedPrecondition,
    /// The caller may not do this (another tenant's object, a credential
    /// that does not grant it).
    PermissionDenied,
    /// A configured bound or the space is exhausted.
    ResourceExhausted,
    /// A route names nothing that can serve it.
    RouteUnavailable,
    /// A contract the caller needs is not the one offered.
    IncompatibleContract,
    /// Stored state is damaged or does not verify: preserve it, restore.
    CorruptArtifact,
    /// A form or an endpoint this build does not support.
    Unsupported,
    /// An unexpected failure (an I/O error, a backend fault, a bug).
    Internal,
}

impl Class {
    /// Every class, in declaration order.
    pub const ALL: [Class; 13] = [
        Class::InvalidArgument,
        Class::NotFound,
        Class::AlreadyExists,
        Class::StateConflict,
        Class::Unavailable,
        Class::FailedPrecondition,
        Class::PermissionDenied,
        Class::ResourceExhausted,
        Class::RouteUnavailable,
        Class::IncompatibleContract,
        Class::CorruptArtifact,
        Class::Unsupported,
        Class::Internal,
    ];

    /// The class's name, as error messages start with it.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::InvalidArgument => "InvalidArgument",
            Class::NotFound => "NotFound",
            Class::AlreadyExists => "AlreadyExists",
            Class::StateConflict => "StateConflict",
            Class::Unavailable => "Unavailable",
            Class::FailedPrecondition => "FailedPrecondition",
            Class::PermissionDenied => "PermissionDenied",
            Class::ResourceExhausted => "ResourceExhausted",
            Class::RouteUnavailable => "RouteUnavailable",
            Class::IncompatibleContract => "IncompatibleContract",
            Class::CorruptArtifact => "CorruptArtifact",
            Class::Unsupported => "Unsupported",
            Class::Internal => "Internal",
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct_and_round_trip_through_display() {
        let names: std::collections::BTreeSet<_> = Class::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(names.len(), Class::ALL.len());
        for c in Class::ALL {
            assert_eq!(c.to_string(), c.as_str());
        }
    }
}
