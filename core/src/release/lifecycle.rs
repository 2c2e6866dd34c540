//! Lifecycle membership:
//! the authoritative, durable record of which completed releases are members
//! of the catalog, which were revoked or retired, and a bounded log of
//! operation outcomes.
//!
//! A completed directory alone never authorizes adoption: recovery admits a
//! release only when this state names it. Republication never clears a
//! revocation or retirement ([`LifecycleState::apply`] with
//! [`LifecycleOp::Publish`] leaves an existing record as it is).
//!
//! The state is persisted as one small record per release: the canonical
//! JSON of its latest [`Outcome`] ([`Outcome::encode`]), stored as
//! `lifecycle/<hex>` and replaced atomically on every change — so a
//! publication or revocation writes one record, never the whole catalog's
//! state. [`Outcome::decode`] is total, bounded by [`MAX_RECORD_BYTES`]
//! (checked on the length before parsing) and accepts exactly the canonical
//! encoding; [`LifecycleState::from_records`] rebuilds the state at open.
//! The `lifecycle/` directory's existence marks an initialized catalog.
//!
//! **A lost record is detected, never re-admitted.** A record deleted from
//! `lifecycle/` would leave its completed release looking like the orphan
//! of a publication interrupted before its lifecycle commit — which an
//! identical republication legitimately admits — so a revoked release
//! would be served again. The [`Head`] (the file [`LIFECYCLE_HEAD`]
//! directly under the catalog root, outside `lifecycle/`) counts the
//! releases that have a record and folds their digests into one
//! order-independent hash. Only a publication adds a record, and it writes
//! the record, then the head; revocation and retirement replace a record
//! and leave the head as it is. So at open the records found are either
//! exactly the head's ([`HeadCheck::Current`]) or the head's and one more,
//! the publication a crash cut off between its two writes
//! ([`HeadCheck::OneAhead`]); anything else — a record missing, replaced
//! or added behind the protocol's back — is [`LifecycleError::Lost`], and
//! the open fails. The head outside `lifecycle/` is also the sign that
//! lifecycle state once existed: a root whose `lifecycle/` is gone while
//! its head remains is never bootstrapped again.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use sha2::{Digest as _, Sha256 as Hasher};

use super::Sha256;

/// The lifecycle head file, directly under the catalog root.
pub const LIFECYCLE_HEAD: &str = "LIFECYCLE";

/// The fixed upper bound of the head file, in bytes (it is about 110).
pub const MAX_HEAD_BYTES: u64 = 256;

/// The domain tag of a member's contribution to [`Head::members`].
pub const HEAD_DOMAIN: &[u8] = b"custos-lifecycle-member-v1\0";

/// The directory of lifecycle records directly under the catalog root;
/// its existence marks lifecycle state as initialized.
pub const LIFECYCLE_DIR: &str = "lifecycle";

/// The number of operation outcomes retained in memory; older ones are
/// forgotten (their status becomes [`OutcomeStatus::Unknown`]). Each
/// release's record also keeps its own latest outcome on disk.
pub const MAX_OUTCOMES: usize = 64;

/// The fixed upper bound of one lifecycle record, in bytes (a record is
/// about 200).
pub const MAX_RECORD_BYTES: u64 = 512;

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
    /// A persisted record is longer than its fixed bound.
    #[error("CorruptArtifact: lifecycle record is {len} bytes, over the {limit}-byte bound")]
    TooLarge {
        /// The file's length.
        len: u64,
        /// The bound.
        limit: u64,
    },
    /// A persisted record does not decode.
    #[error("CorruptArtifact: lifecycle record is malformed: {0}")]
    Malformed(String),
    /// A persisted record decodes but is not canonical.
    #[error("CorruptArtifact: lifecycle record is not canonically serialized")]
    NonCanonical,
    /// Two records for one release, or a record under another release's
    /// name.
    #[error("CorruptArtifact: lifecycle record for {0} is duplicated or misplaced")]
    Misplaced(Sha256),
    /// The records found are not the head's (nor the head's and the one
    /// record of an interrupted publication): a record was lost, replaced
    /// or added outside the protocol. Nothing is re-admitted.
    #[error("CorruptArtifact: lifecycle state lost records: the head counts {expected} release(s), {found} record(s) are present and they are not the ones it counts; restore lifecycle/ and LIFECYCLE from a backup (a catalog written before LIFECYCLE existed is adopted as found by `custos releases upgrade`, once)")]
    Lost {
        /// Releases the head counts.
        expected: u64,
        /// Records present.
        found: u64,
    },
    /// The head file does not decode.
    #[error("CorruptArtifact: the lifecycle head is malformed")]
    MalformedHead,
}

/// The lifecycle head: how many releases have a lifecycle record, and the
/// XOR of SHA-256([`HEAD_DOMAIN`] ‖ digest) over them — an order-independent
/// fold that one publication updates in O(1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Head {
    /// Releases with a record.
    pub count: u64,
    /// The fold of their digests.
    pub members: [u8; 32],
}

/// What the records found at open are, against the head.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HeadCheck {
    /// Exactly the head's.
    Current,
    /// The head's and this one more: a publication interrupted between
    /// its record and its head. A writing open brings the head up to date.
    OneAhead(Sha256),
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct HeadWire {
    count: u64,
    format: u32,
    members: String,
}

impl Head {
    /// One member's contribution.
    pub fn contribution(digest: &Sha256) -> [u8; 32] {
        let mut h = Hasher::new();
        h.update(HEAD_DOMAIN);
        h.update(digest.0);
        h.finalize().into()
    }

    /// This head with `digest` added.
    #[must_use]
    pub fn with(mut self, digest: &Sha256) -> Self {
        let c = Self::contribution(digest);
        for (m, b) in self.members.iter_mut().zip(c) {
            *m ^= b;
        }
        self.count = self.count.saturating_add(1);
        self
    }

    /// The head of exactly `digests` (each distinct).
    pub fn of<'a>(digests: impl IntoIterator<Item = &'a Sha256>) -> Self {
        digests.into_iter().fold(Head::default(), |h, d| h.with(d))
    }

    /// Compares the head with the digests of the records found.
    pub fn check(&self, found: &[Sha256]) -> Result<HeadCheck, LifecycleError> {
        let have = Head::of(found);
        if have == *self {
            return Ok(HeadCheck::Current);
        }
        let lost = LifecycleError::Lost {
            expected: self.count,
            found: have.count,
        };
        if have.count != self.count.saturating_add(1) {
            return Err(lost);
        }
        let mut extra = have.members;
        for (e, m) in extra.iter_mut().zip(self.members) {
            *e ^= m;
        }
        found
            .iter()
            .find(|d| Self::contribution(d) == extra)
            .map(|d| HeadCheck::OneAhead(*d))
            .ok_or(lost)
    }

    /// The canonical bytes of the head file.
    pub fn encode(&self) -> Vec<u8> {
        let wire = HeadWire {
            count: self.count,
            format: 1,
            members: crate::hex::encode(self.members),
        };
        serde_json::to_vec(&wire).unwrap_or_default()
    }

    /// Decodes the head file: total, bounded by [`MAX_HEAD_BYTES`]
    /// (checked before parsing), canonical bytes of format 1 only.
    pub fn decode(bytes: &[u8]) -> Result<Self, LifecycleError> {
        if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > MAX_HEAD_BYTES {
            return Err(LifecycleError::MalformedHead);
        }
        let wire: HeadWire =
            serde_json::from_slice(bytes).map_err(|_| LifecycleError::MalformedHead)?;
        let members =
            crate::hex::decode::<32>(&wire.members).ok_or(LifecycleError::MalformedHead)?;
        let head = Head {
            count: wire.count,
            members,
        };
        if wire.format != 1 || head.encode() != bytes {
            return Err(LifecycleError::MalformedHead);
        }
        Ok(head)
    }
}

/// The authoritative lifecycle state of a catalog.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct LifecycleState {
    /// Every release with a record, by digest.
    #[serde(with = "crate::pairs")]
    pub releases: BTreeMap<Sha256, Membership>,
    /// The last [`MAX_OUTCOMES`] outcomes, oldest first.
    pub outcomes: VecDeque<Outcome>,
    /// The sequence number the next operation gets.
    pub next_seq: u64,
}

/// One change a lifecycle decision asks of its store, applied in the
/// order given. The store makes each durable write durable before the
/// next; the order is the rule that keeps the head honest (records are
/// never more than one ahead of it), and it is decided here, not by the
/// store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LifecycleEffect {
    /// Durably replace the lifecycle head with this one ([`Head::encode`]
    /// under [`LIFECYCLE_HEAD`]). A head that fails to write stays the
    /// store's pending head, and the next decision that adds a record
    /// writes it first.
    Head(Head),
    /// Durably replace the release's record with the outcome
    /// ([`Outcome::encode`] under `lifecycle/<hex>`) — the commit point —
    /// and then retain it ([`LifecycleState::record`]). A write whose
    /// result is unknown only reserves its number
    /// ([`LifecycleState::reserve`]).
    Record(Outcome),
    /// Retain the outcome without writing anything (a republication the
    /// state already holds keeps its own number).
    Retain(Outcome),
}

/// What [`LifecycleState::decide_effects`] answers: the outcome the caller
/// is told and the changes that make it so, in order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LifecycleDecision {
    /// The outcome.
    pub outcome: Outcome,
    /// The changes, in order (none for a revocation or retirement that
    /// changes nothing: its number is not used).
    pub effects: Vec<LifecycleEffect>,
}

impl LifecycleState {
    /// The decision of `op` on `digest` as the changes a store applies,
    /// in order. `head` is the head that counts this state's records and
    /// `head_durable` whether the store holds it (a head whose write
    /// failed is written again before the next record it would not count).
    ///
    /// - A publication of a release without a record: the pending head if
    ///   any, the record, then the head that counts it.
    /// - A revocation or retirement that changes the membership: the record
    ///   (the count of records, and so the head, is unchanged).
    /// - A republication: the outcome is retained, nothing is written.
    /// - A revocation or retirement that changes nothing: no change.
    pub fn decide_effects(
        &self,
        op: LifecycleOp,
        digest: &Sha256,
        head: &Head,
        head_durable: bool,
    ) -> Result<LifecycleDecision, LifecycleError> {
        let outcome = self.decide(op, digest)?;
        let mut effects = Vec::new();
        match (outcome.kind, op) {
            (OutcomeKind::Applied, LifecycleOp::Publish) => {
                if !head_durable {
                    effects.push(LifecycleEffect::Head(*head));
                }
                effects.push(LifecycleEffect::Record(outcome));
                effects.push(LifecycleEffect::Head(head.with(digest)));
            }
            (OutcomeKind::Applied, _) => effects.push(LifecycleEffect::Record(outcome)),
            (OutcomeKind::Unchanged, LifecycleOp::Publish) => {
                effects.push(LifecycleEffect::Retain(outcome))
            }
            (OutcomeKind::Unchanged, _) => {}
        }
        Ok(LifecycleDecision { outcome, effects })
    }

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

    /// Records a decided outcome (after its record was made durable):
    /// the membership, the bounded outcome log, the next sequence number.
    pub fn record(&mut self, outcome: Outcome) {
        self.releases.insert(outcome.digest, outcome.after);
        self.outcomes.push_back(outcome);
        while self.outcomes.len() > MAX_OUTCOMES {
            self.outcomes.pop_front();
        }
        self.next_seq = self.next_seq.max(outcome.seq.saturating_add(1));
    }

    /// Reserves `outcome`'s sequence number without recording it: its
    /// durable write failed, so the outcome is uncertain. The number is
    /// never handed out again and [`LifecycleState::outcome`] answers
    /// unknown for it; membership is unchanged here (a reopen reads the
    /// durable truth).
    pub fn reserve(&mut self, outcome: &Outcome) {
        self.next_seq = self.next_seq.max(outcome.seq.saturating_add(1));
    }

    /// Applies `op` on `digest` ([`LifecycleState::decide`] then
    /// [`LifecycleState::record`]) and returns the outcome. On error the
    /// state is untouched.
    pub fn apply(&mut self, op: LifecycleOp, digest: &Sha256) -> Result<Outcome, LifecycleError> {
        let outcome = self.decide(op, digest)?;
        self.record(outcome);
        Ok(outcome)
    }

    /// The status of the operation numbered `seq`.
    pub fn outcome(&self, seq: u64) -> OutcomeStatus {
        self.outcomes
            .iter()
            .find(|o| o.seq == seq)
            .map_or(OutcomeStatus::Unknown, |o| OutcomeStatus::Retained(*o))
    }

    /// Rebuilds the state from each release's latest outcome record (as
    /// read at open): one record per digest, the newest [`MAX_OUTCOMES`]
    /// retained, the next sequence number after the greatest.
    pub fn from_records(
        records: impl IntoIterator<Item = Outcome>,
    ) -> Result<Self, LifecycleError> {
        let mut state = LifecycleState::default();
        let mut all: Vec<Outcome> = Vec::new();
        for r in records {
            if state.releases.insert(r.digest, r.after).is_some() {
                return Err(LifecycleError::Misplaced(r.digest));
            }
            state.next_seq = state.next_seq.max(r.seq.saturating_add(1));
            all.push(r);
        }
        all.sort_by_key(|o| o.seq);
        let skip = all.len().saturating_sub(MAX_OUTCOMES);
        state.outcomes = all.into_iter().skip(skip).collect();
        Ok(state)
    }
}

impl Outcome {
    /// The canonical record bytes stored as `lifecycle/<hex>`.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Decodes a stored record: total, bounded by [`MAX_RECORD_BYTES`]
    /// (checked before parsing), canonical bytes only.
    pub fn decode(bytes: &[u8]) -> Result<Self, LifecycleError> {
        let len = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        if len > MAX_RECORD_BYTES {
            return Err(LifecycleError::TooLarge {
                len,
                limit: MAX_RECORD_BYTES,
            });
        }
        let o: Outcome =
            serde_json::from_slice(bytes).map_err(|e| LifecycleError::Malformed(e.to_string()))?;
        if o.encode() != bytes {
            return Err(LifecycleError::NonCanonical);
        }
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Every state a stream of operations reaches has a written form
        /// (releases keyed by digest) that JSON and a binary format give
        /// back unchanged.
        #[test]
        fn every_reached_state_round_trips(
            ops in proptest::collection::vec((0u8..3, 0u8..6), 0..80),
        ) {
            let mut state = LifecycleState::default();
            for (op, release) in ops {
                let op = [LifecycleOp::Publish, LifecycleOp::Revoke, LifecycleOp::Retire][usize::from(op)];
                if let Ok(outcome) = state.decide(op, &Sha256::of(&[release])) {
                    state.record(outcome);
                }
                proptest::prop_assert_eq!(crate::pairs::round_trips(&state), Ok(()));
            }
        }

        /// Applying a decision's effects to the store a catalog loads (its
        /// records and its head) gives the state and the head the old
        /// contract produced (`apply`, and a head counting every record),
        /// whether or not the previous head write failed; and the records
        /// on disk are never more than one ahead of the durable head.
        #[test]
        fn applying_the_effects_equals_the_next_state(
            ops in proptest::collection::vec((0u8..3, 0u8..6, proptest::bool::ANY), 0..60),
        ) {
            let mut old = LifecycleState::default();
            let mut state = LifecycleState::default();
            let mut records: BTreeMap<Sha256, Outcome> = BTreeMap::new();
            let (mut durable, mut head, mut head_ok) = (Head::default(), Head::default(), true);
            for (op, release, head_fails) in ops {
                let op = [LifecycleOp::Publish, LifecycleOp::Revoke, LifecycleOp::Retire][usize::from(op)];
                let digest = Sha256::of(&[release]);
                let want = old.decide(op, &digest);
                let Ok(d) = state.decide_effects(op, &digest, &head, head_ok) else {
                    proptest::prop_assert!(want.is_err());
                    continue;
                };
                proptest::prop_assert_eq!(Ok(d.outcome), want);
                // A failed head write ends the decision's changes there, as
                // a store's error does.
                let mut recorded = false;
                for e in d.effects {
                    match e {
                        LifecycleEffect::Head(h) => {
                            head = h;
                            head_ok = !head_fails;
                            if !head_ok {
                                break;
                            }
                            durable = h;
                        }
                        LifecycleEffect::Record(o) => {
                            // A record that adds a release is written
                            // only onto a disk its durable head counts.
                            let found: Vec<Sha256> = records.keys().copied().collect();
                            proptest::prop_assert!(
                                records.contains_key(&o.digest)
                                    || durable.check(&found) == Ok(HeadCheck::Current),
                                "a record added while the disk is already ahead of its head"
                            );
                            records.insert(o.digest, o);
                            state.record(o);
                            recorded = true;
                        }
                        LifecycleEffect::Retain(o) => {
                            state.record(o);
                            recorded = true;
                        }
                    }
                }
                if recorded {
                    old.record(d.outcome);
                }
                proptest::prop_assert_eq!(&state, &old);
                let on_disk = LifecycleState::from_records(records.values().copied()).unwrap();
                proptest::prop_assert_eq!(&on_disk.releases, &old.releases);
                proptest::prop_assert_eq!(head, Head::of(records.keys()));
                let found: Vec<Sha256> = records.keys().copied().collect();
                proptest::prop_assert!(durable.check(&found).is_ok());
            }
        }
    }

    /// The head tells the records of its releases, and the head's and one
    /// interrupted publication's, from every loss: a record missing, one
    /// replaced by another release's, one added beside the interrupted one.
    #[test]
    fn the_head_detects_every_lost_or_foreign_record() {
        let d: Vec<Sha256> = (0u8..5).map(|i| Sha256::of(&[i])).collect();
        let head = Head::of(&d[..3]);
        assert_eq!(head.count, 3);
        assert_eq!(head.check(&d[..3]), Ok(HeadCheck::Current));
        let reordered = [d[2], d[0], d[1]];
        assert_eq!(head.check(&reordered), Ok(HeadCheck::Current));
        assert_eq!(head.check(&d[..4]), Ok(HeadCheck::OneAhead(d[3])));
        for found in [&d[..2], &[d[0], d[1], d[3]][..], &d[..5], &[][..]] {
            assert!(
                matches!(head.check(found), Err(LifecycleError::Lost { .. })),
                "{found:?}"
            );
        }
        // Two heads differing in one member differ.
        assert_ne!(Head::of(&d[..3]), Head::of(&[d[0], d[1], d[4]]));
        assert_eq!(Head::of(&[]), Head::default());
    }

    #[test]
    fn the_head_round_trips_and_its_decoder_is_total() {
        let head = Head::of(&[Sha256::of(b"a"), Sha256::of(b"b")]);
        let bytes = head.encode();
        assert!(bytes.len() as u64 <= MAX_HEAD_BYTES);
        assert_eq!(Head::decode(&bytes), Ok(head));
        let text = String::from_utf8(bytes.clone()).unwrap_or_default();
        for bad in [
            text.replace("\"format\":1", "\"format\":2"),
            text.replace("{\"count\"", "{ \"count\""),
            text.replace("\"count\":2", "\"count\":2,\"x\":1"),
            text[..text.len() - 1].to_owned(),
            String::new(),
            " ".repeat(300),
        ] {
            assert_eq!(
                Head::decode(bad.as_bytes()),
                Err(LifecycleError::MalformedHead),
                "{bad}"
            );
        }
    }

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
    fn only_a_member_is_eligible_and_each_membership_has_its_name() {
        assert!(Membership::Member.is_eligible());
        assert!(!Membership::Revoked.is_eligible());
        assert!(!Membership::Retired.is_eligible());
        for m in [Membership::Member, Membership::Revoked, Membership::Retired] {
            // The stable name is the serialised one.
            assert_eq!(
                serde_json::to_string(&m).unwrap_or_default(),
                format!("\"{}\"", m.as_str())
            );
        }
        assert_eq!(Membership::Member.as_str(), "member");
    }

    #[test]
    fn a_reserved_number_is_never_handed_out_again_and_changes_no_membership() {
        let (a, b) = (Sha256::of(b"a"), Sha256::of(b"b"));
        let mut s = LifecycleState::default();
        s.apply(LifecycleOp::Publish, &a)
            .unwrap_or_else(|e| panic!("{e}"));
        // The revoke's durable write failed: its number is reserved.
        let uncertain = s
            .decide(LifecycleOp::Revoke, &a)
            .unwrap_or_else(|e| panic!("{e}"));
        s.reserve(&uncertain);
        assert_eq!(s.membership(&a), Some(Membership::Member));
        assert_eq!(s.outcome(uncertain.seq), OutcomeStatus::Unknown);
        let next = s
            .apply(LifecycleOp::Publish, &b)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(next.seq, uncertain.seq + 1);
    }

    #[test]
    fn a_record_of_exactly_the_bound_is_parsed_one_byte_more_is_refused_unread() {
        let at = vec![b' '; usize::try_from(MAX_RECORD_BYTES).unwrap_or(usize::MAX)];
        assert!(matches!(
            Outcome::decode(&at),
            Err(LifecycleError::Malformed(_))
        ));
        let over = vec![b' '; at.len() + 1];
        assert!(matches!(
            Outcome::decode(&over),
            Err(LifecycleError::TooLarge { len, limit: MAX_RECORD_BYTES }) if len == MAX_RECORD_BYTES + 1
        ));
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
    fn records_round_trip_and_rebuild_the_state() {
        let mut s = LifecycleState::default();
        let mut latest = std::collections::BTreeMap::new();
        for (op, d) in [
            (LifecycleOp::Publish, b"b"),
            (LifecycleOp::Publish, b"a"),
            (LifecycleOp::Revoke, b"a"),
        ] {
            let o = s
                .apply(op, &Sha256::of(d))
                .unwrap_or_else(|e| panic!("{e}"));
            let bytes = o.encode();
            assert!(bytes.len() as u64 <= MAX_RECORD_BYTES);
            assert_eq!(Outcome::decode(&bytes), Ok(o));
            latest.insert(o.digest, o);
        }
        let rebuilt = LifecycleState::from_records(latest.values().copied())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(rebuilt.releases, s.releases);
        assert_eq!(rebuilt.next_seq, s.next_seq);
        assert_eq!(
            rebuilt.membership(&Sha256::of(b"a")),
            Some(Membership::Revoked)
        );
        let one = latest.values().next().copied().unwrap_or_else(|| panic!());
        assert_eq!(
            LifecycleState::from_records([one, one]),
            Err(LifecycleError::Misplaced(one.digest))
        );
        let bytes = one.encode();
        let spaced = String::from_utf8_lossy(&bytes).replacen(':', ": ", 1);
        assert_eq!(
            Outcome::decode(spaced.as_bytes()),
            Err(LifecycleError::NonCanonical)
        );
        assert!(matches!(
            Outcome::decode(b"{}"),
            Err(LifecycleError::Malformed(_))
        ));
        assert!(matches!(
            Outcome::decode(&[b' '; 600]),
            Err(LifecycleError::TooLarge { .. })
        ));
    }
}
