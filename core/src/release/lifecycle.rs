//! Lifecycle membership (spec 002 "Completed Phase 2 release lifecycle"):
//! the authoritative, durable record of which completed releases are members
//! of the catalog, which were revoked or retired, and a bounded log of
//! operation outcomes.
//!
//! A completed directory alone never authorizes adoption: recovery admits a
//! release only when this state names it. Republication never clears a
//! revocation or retirement ([`LifecycleState::apply`] with
//! [`LifecycleOp::Publish`] leaves an existing record as it is).
//!
//! The state is persisted as canonical JSON ([`LifecycleState::encode`]);
//! [`LifecycleState::decode`] is total and accepts exactly the canonical
//! encoding. A reader checks the file length against
//! [`lifecycle_file_limit`] before it allocates.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::bounds::Bounds;
use super::Sha256;

/// The lifecycle file's format version.
pub const LIFECYCLE_FORMAT: u32 = 1;

/// The number of operation outcomes retained; older ones are forgotten
/// (their status becomes [`OutcomeStatus::Unknown`]).
pub const MAX_OUTCOMES: usize = 64;

/// The file name of the lifecycle state directly under the catalog root.
pub const LIFECYCLE_FILE: &str = "lifecycle.json";

/// Bytes charged per member in the lifecycle file's length bound (a digest,
/// its state, JSON punctuation, with room to spare).
pub const LIFECYCLE_BYTES_PER_ENTRY: u64 = 128;

/// Fixed bytes of the lifecycle file's length bound (format, sequence and
/// the retained outcomes).
pub const LIFECYCLE_FIXED_BYTES: u64 = 64 * 1024;

/// The largest lifecycle file a reader accepts for `bounds`: checked on the
/// file length before allocation.
pub fn lifecycle_file_limit(bounds: &Bounds) -> u64 {
    bounds
        .max_recovery_directories
        .max(bounds.max_entries)
        .saturating_mul(LIFECYCLE_BYTES_PER_ENTRY)
        .saturating_add(LIFECYCLE_FIXED_BYTES)
}

/// The lifecycle state of one release.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Membership {
    /// An admitted, eligible release.
    Member,
    /// Revoked: never eligible again; republication does not clear it.
    Revoked,
    /// Retired: no longer eligible; republication does not clear it.
    Retired,
}

impl Membership {
    /// Whether resolve and fetch may return the release.
    pub fn is_eligible(&self) -> bool {
        matches!(self, Membership::Member)
    }

    /// The stable name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Membership::Member => "member",
            Membership::Revoked => "revoked",
            Membership::Retired => "retired",
        }
    }
}

/// An operation on lifecycle membership.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LifecycleOp {
    /// Admit a published release (no change if it already has a record).
    Publish,
    /// Revoke a release.
    Revoke,
    /// Retire a release.
    Retire,
}

/// What an operation did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeKind {
    /// The state changed.
    Applied,
    /// The state already said so (an identical republication, a repeated
    /// revocation, publication of a revoked release).
    Unchanged,
}

/// One retained operation outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Outcome {
    /// The operation's sequence number (strictly increasing per catalog).
    pub seq: u64,
    /// The operation.
    pub op: LifecycleOp,
    /// The release.
    pub digest: Sha256,
    /// What it did.
    pub kind: OutcomeKind,
    /// The membership after the operation.
    pub after: Membership,
}

/// The status of an operation asked about by sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OutcomeStatus {
    /// The outcome is retained.
    Retained(Outcome),
    /// Older than the retained window, or never committed: unknown. A failed
    /// acknowledgment does not establish rollback.
    Unknown,
}

/// Why a lifecycle operation or decode was refused. The state is untouched.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error)]
pub enum LifecycleError {
    /// Revoke or retire of a release the state does not name.
    #[error("NotFound: release {0} has no lifecycle record")]
    NotFound(Sha256),
    /// The persisted file is longer than its bound.
    #[error("ResourceExhausted: lifecycle file is {len} bytes, over the {limit}-byte bound")]
    TooLarge {
        /// The file's length.
        len: u64,
        /// The bound.
        limit: u64,
    },
    /// The persisted file does not decode.
    #[error("CorruptArtifact: lifecycle state is malformed: {0}")]
    Malformed(String),
    /// The persisted file decodes but is not canonical.
    #[error("CorruptArtifact: lifecycle state is not canonically serialized")]
    NonCanonical,
    /// An unknown format version.
    #[error("CorruptArtifact: lifecycle state has unknown format {0}")]
    UnknownFormat(u32),
}

/// The authoritative lifecycle state of a catalog.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LifecycleState {
    /// Every release with a record, by digest.
    pub releases: BTreeMap<Sha256, Membership>,
    /// The last [`MAX_OUTCOMES`] outcomes, oldest first.
    pub outcomes: VecDeque<Outcome>,
    /// The sequence number the next operation gets.
    pub next_seq: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    format: u32,
    next_seq: u64,
    releases: Vec<(Sha256, Membership)>,
    outcomes: Vec<Outcome>,
}

impl LifecycleState {
    /// The membership of `digest`, if it has a record.
    pub fn membership(&self, digest: &Sha256) -> Option<Membership> {
        self.releases.get(digest).copied()
    }

    /// The decision of `op` on `digest`, without changing anything: the
    /// membership after it and whether it changes the state.
    pub fn decide(&self, op: LifecycleOp, digest: &Sha256) -> Result<Outcome, LifecycleError> {
        let current = self.membership(digest);
        let (after, kind) = match (op, current) {
            (LifecycleOp::Publish, None) => (Membership::Member, OutcomeKind::Applied),
            // Republication never clears a revocation or retirement.
            (LifecycleOp::Publish, Some(m)) => (m, OutcomeKind::Unchanged),
            (_, None) => return Err(LifecycleError::NotFound(*digest)),
            (LifecycleOp::Revoke, Some(Membership::Revoked)) => {
                (Membership::Revoked, OutcomeKind::Unchanged)
            }
            (LifecycleOp::Revoke, Some(_)) => (Membership::Revoked, OutcomeKind::Applied),
            (LifecycleOp::Retire, Some(Membership::Member)) => {
                (Membership::Retired, OutcomeKind::Applied)
            }
            // Retiring a retired or revoked release changes nothing: a
            // revocation is never weakened to a retirement.
            (LifecycleOp::Retire, Some(m)) => (m, OutcomeKind::Unchanged),
        };
        Ok(Outcome {
            seq: self.next_seq,
            op,
            digest: *digest,
            kind,
            after,
        })
    }

    /// Applies `op` on `digest` and records its outcome (bounded). Returns
    /// the outcome. On error the state is untouched.
    pub fn apply(&mut self, op: LifecycleOp, digest: &Sha256) -> Result<Outcome, LifecycleError> {
        let outcome = self.decide(op, digest)?;
        self.releases.insert(*digest, outcome.after);
        self.outcomes.push_back(outcome);
        while self.outcomes.len() > MAX_OUTCOMES {
            self.outcomes.pop_front();
        }
        self.next_seq = self.next_seq.saturating_add(1);
        Ok(outcome)
    }

    /// The status of the operation numbered `seq`.
    pub fn outcome(&self, seq: u64) -> OutcomeStatus {
        self.outcomes
            .iter()
            .find(|o| o.seq == seq)
            .map_or(OutcomeStatus::Unknown, |o| OutcomeStatus::Retained(*o))
    }

    /// The canonical encoding.
    pub fn encode(&self) -> Vec<u8> {
        let wire = Wire {
            format: LIFECYCLE_FORMAT,
            next_seq: self.next_seq,
            releases: self.releases.iter().map(|(d, m)| (*d, *m)).collect(),
            outcomes: self.outcomes.iter().copied().collect(),
        };
        serde_json::to_vec(&wire).unwrap_or_default()
    }

    /// Decodes a persisted state: total, bounded by `limit` (checked before
    /// parsing), accepts exactly the canonical encoding (sorted, unique
    /// digests; at most [`MAX_OUTCOMES`] outcomes).
    pub fn decode(bytes: &[u8], limit: u64) -> Result<Self, LifecycleError> {
        let len = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        if len > limit {
            return Err(LifecycleError::TooLarge { len, limit });
        }
        let wire: Wire =
            serde_json::from_slice(bytes).map_err(|e| LifecycleError::Malformed(e.to_string()))?;
        if wire.format != LIFECYCLE_FORMAT {
            return Err(LifecycleError::UnknownFormat(wire.format));
        }
        if wire.outcomes.len() > MAX_OUTCOMES {
            return Err(LifecycleError::NonCanonical);
        }
        let state = LifecycleState {
            releases: wire.releases.into_iter().collect(),
            outcomes: wire.outcomes.into_iter().collect(),
            next_seq: wire.next_seq,
        };
        if state.encode() != bytes {
            return Err(LifecycleError::NonCanonical);
        }
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn republication_never_clears_revoked_or_retired() {
        let d = Sha256::of(b"a");
        let mut s = LifecycleState::default();
        assert_eq!(
            s.apply(LifecycleOp::Publish, &d).map(|o| o.kind),
            Ok(OutcomeKind::Applied)
        );
        assert_eq!(
            s.apply(LifecycleOp::Publish, &d).map(|o| o.kind),
            Ok(OutcomeKind::Unchanged)
        );
        s.apply(LifecycleOp::Retire, &d)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.membership(&d), Some(Membership::Retired));
        let o = s.apply(LifecycleOp::Publish, &d);
        assert_eq!(o.map(|o| o.after), Ok(Membership::Retired));
        s.apply(LifecycleOp::Revoke, &d)
            .unwrap_or_else(|e| panic!("{e}"));
        let o = s.apply(LifecycleOp::Retire, &d);
        assert_eq!(o.map(|o| o.after), Ok(Membership::Revoked));
        let o = s.apply(LifecycleOp::Publish, &d);
        assert_eq!(o.map(|o| o.after), Ok(Membership::Revoked));
        assert_eq!(
            s.apply(LifecycleOp::Revoke, &Sha256::of(b"x")),
            Err(LifecycleError::NotFound(Sha256::of(b"x")))
        );
    }

    #[test]
    fn outcomes_are_bounded_and_unknown_once_forgotten() {
        let mut s = LifecycleState::default();
        for i in 0..(MAX_OUTCOMES as u64 + 10) {
            s.apply(LifecycleOp::Publish, &Sha256::of(&i.to_le_bytes()))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!(s.outcomes.len(), MAX_OUTCOMES);
        assert_eq!(s.outcome(0), OutcomeStatus::Unknown);
        assert!(matches!(s.outcome(70), OutcomeStatus::Retained(o) if o.seq == 70));
        assert_eq!(s.outcome(1000), OutcomeStatus::Unknown);
    }

    #[test]
    fn codec_round_trips_and_is_strict() {
        let mut s = LifecycleState::default();
        s.apply(LifecycleOp::Publish, &Sha256::of(b"b"))
            .unwrap_or_else(|e| panic!("{e}"));
        s.apply(LifecycleOp::Publish, &Sha256::of(b"a"))
            .unwrap_or_else(|e| panic!("{e}"));
        s.apply(LifecycleOp::Revoke, &Sha256::of(b"a"))
            .unwrap_or_else(|e| panic!("{e}"));
        let bytes = s.encode();
        assert_eq!(LifecycleState::decode(&bytes, 1 << 20), Ok(s.clone()));
        assert!(matches!(
            LifecycleState::decode(&bytes, 10),
            Err(LifecycleError::TooLarge { .. })
        ));
        let spaced = String::from_utf8_lossy(&bytes).replacen(':', ": ", 1);
        assert_eq!(
            LifecycleState::decode(spaced.as_bytes(), 1 << 20),
            Err(LifecycleError::NonCanonical)
        );
        assert!(matches!(
            LifecycleState::decode(b"{}", 1 << 20),
            Err(LifecycleError::Malformed(_))
        ));
        let v2 = String::from_utf8_lossy(&bytes).replacen("\"format\":1", "\"format\":2", 1);
        assert_eq!(
            LifecycleState::decode(v2.as_bytes(), 1 << 20),
            Err(LifecycleError::UnknownFormat(2))
        );
    }
}
