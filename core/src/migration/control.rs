//! The administrative control contract: a versioned,
//! canonical, digest-bound export of a control catalog's live state, the
//! destination's migration administration (reservation, staging,
//! activation, completion) and the one rule that turns a staged snapshot
//! into imported rows.
//!
//! **Export** ([`ControlSnapshot::from_slots`]): every world record (status
//! and tick head included) in `world_id` order, every signature in
//! `(world_id, table_id)` order, and every fenced world's issued epoch and
//! floor — never its holder. Reservation and staging rows are endpoint-local
//! administration, not control state: a backend exports only its live
//! tables, so they never appear.
//!
//! **Import** ([`import_slots`]): the exact records and signatures, and for
//! every world a fence with nothing issued, no holder, and a floor at least
//! the staged floor (the plan's: the source epoch and every manifest writer
//! epoch) and at least the snapshot's own issued epoch and floor. So the
//! first resume at the destination acquires strictly above every epoch the
//! source ever issued. Import is not registration: a destroyed record is
//! imported destroyed, a tick head as it stands, and nothing is replayed.
//!
//! **Administration** ([`ControlAdmin`]): the migration machine
//! ([`super::decide`]) decides; a backend stores its [`Destination`] in one
//! transaction with the decision's effect ([`AdminEffect`]) — staging a
//! bundle invisible to discovery, or activating it into the live tables —
//! after checking that the stored administration is still the one the
//! decision was made on ([`AdminError::Moved`] otherwise). A stored
//! reservation and receipt are decoded canonically and verified on every
//! load; anything missing, non-canonical, digest-invalid or plan-mismatched
//! fails closed ([`AdminError::StoredEvidence`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::data::{canonical_bytes, decode_canonical};
use super::departure::Departures;
use super::{DataError, Destination, Digest, Name, Reservation, StoredReceipt, WorldFloor};
use crate::fence::{Epoch, WorldFence};
use crate::world::{SignatureRecord, WorldRecord, WorldSlot};

/// The snapshot format this build writes and reads.
pub const SNAPSHOT_FORMAT: u32 = 1;

const SNAPSHOT_DOMAIN: &[u8] = b"custos.control.snapshot.v1\0";

/// One fenced world's exported fence: the highest epoch issued and the
/// highest floor imported. The holder is never exported.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FenceRecord {
    /// The world.
    pub world_id: String,
    /// The highest epoch issued.
    pub issued: Epoch,
    /// The highest imported floor.
    pub floor: Epoch,
}

impl FenceRecord {
    /// The highest epoch this fence has seen issued or imported.
    pub fn high_water(&self) -> Epoch {
        self.issued.max(self.floor)
    }
}

/// The typed, versioned control snapshot.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlSnapshot {
    /// [`SNAPSHOT_FORMAT`].
    pub format: u32,
    /// Every world record, by `world_id`.
    pub worlds: Vec<WorldRecord>,
    /// Every signature, by `(world_id, table_id)`.
    pub signatures: Vec<SignatureRecord>,
    /// Every fenced world's fence, by `world_id`.
    pub fences: Vec<FenceRecord>,
}

impl ControlSnapshot {
    /// The snapshot of a catalog's live slots (any order): records,
    /// signatures and fences, sorted; an unfenced world has no fence line;
    /// holders are dropped.
    pub fn from_slots<'a>(slots: impl IntoIterator<Item = &'a WorldSlot>) -> ControlSnapshot {
        let mut worlds = Vec::new();
        let mut signatures = Vec::new();
        let mut fences = Vec::new();
        for slot in slots {
            let Some(record) = &slot.record else {
                continue;
            };
            let world_id = &record.identity.world_id;
            worlds.push(record.clone());
            signatures.extend(slot.signatures.iter().map(|s| SignatureRecord {
                world_id: world_id.clone(),
                signature: s.clone(),
            }));
            if slot.fence.issued > 0 || slot.fence.floor > 0 {
                fences.push(FenceRecord {
                    world_id: world_id.clone(),
                    issued: slot.fence.issued,
                    floor: slot.fence.floor,
                });
            }
        }
        worlds.sort_by(|a, b| a.identity.world_id.cmp(&b.identity.world_id));
        signatures.sort_by(|a, b| {
            (&a.world_id, &a.signature.table_id).cmp(&(&b.world_id, &b.signature.table_id))
        });
        fences.sort();
        ControlSnapshot {
            format: SNAPSHOT_FORMAT,
            worlds,
            signatures,
            fences,
        }
    }

    /// Control records: worlds, signatures and fence lines (the plan's
    /// `ControlPlan::records`).
    pub fn records(&self) -> u64 {
        let n = self.worlds.len() + self.signatures.len() + self.fences.len();
        u64::try_from(n).unwrap_or(u64::MAX)
    }

    /// The canonical bytes.
    pub fn canonical(&self) -> Vec<u8> {
        canonical_bytes(self)
    }

    /// SHA-256 over a domain prefix and the canonical bytes.
    pub fn digest(&self) -> Digest {
        crate::migration::data::domain(SNAPSHOT_DOMAIN, &self.canonical())
    }

    /// Decodes a snapshot, refusing oversized, malformed, non-canonical or
    /// structurally invalid input ([`ControlSnapshot::check`]). Total.
    pub fn decode(bytes: &[u8]) -> Result<ControlSnapshot, DataError> {
        let s: ControlSnapshot = decode_canonical(bytes)?;
        s.check()?;
        Ok(s)
    }

    /// The structure: this format; worlds strictly by id, each identity
    /// valid; signatures strictly by `(world, table)`, each valid and of a
    /// world in the snapshot; fences strictly by world, each of a world in
    /// the snapshot and non-zero.
    pub fn check(&self) -> Result<(), DataError> {
        let inv = |what: &str| Err(DataError::Invalid(format!("control snapshot: {what}")));
        if self.format != SNAPSHOT_FORMAT {
            return inv(&format!(
                "format {} (this build reads {SNAPSHOT_FORMAT})",
                self.format
            ));
        }
        let ids: Vec<&str> = self
            .worlds
            .iter()
            .map(|w| w.identity.world_id.as_str())
            .collect();
        if ids.windows(2).any(|w| w[0] >= w[1]) {
            return inv("worlds are not strictly by world_id");
        }
        for w in &self.worlds {
            if let Err(e) = w.identity.validate() {
                return inv(&e.to_string());
            }
        }
        let known = |id: &str| ids.binary_search(&id).is_ok();
        let keys: Vec<(&str, &str)> = self
            .signatures
            .iter()
            .map(|s| (s.world_id.as_str(), s.signature.table_id.as_str()))
            .collect();
        if keys.windows(2).any(|k| k[0] >= k[1]) {
            return inv("signatures are not strictly by (world_id, table_id)");
        }
        for s in &self.signatures {
            if !known(&s.world_id) {
                return inv(&format!("signature of unknown world {}", s.world_id));
            }
            if let Err(e) = s.signature.validate() {
                return inv(&e.to_string());
            }
        }
        if self
            .fences
            .windows(2)
            .any(|f| f[0].world_id >= f[1].world_id)
        {
            return inv("fences are not strictly by world_id");
        }
        for f in &self.fences {
            if !known(&f.world_id) {
                return inv(&format!("fence of unknown world {}", f.world_id));
            }
            if f.issued == 0 && f.floor == 0 {
                return inv(&format!("empty fence line for {}", f.world_id));
            }
        }
        Ok(())
    }
}

/// The live slots a staged snapshot imports as, one per world in `world_id`
/// order (see the module documentation): exact records and signatures; a
/// fence with nothing issued, no holder, and the floor
/// `max(staged floor, snapshot issued, snapshot floor)`. Every active world
/// of the snapshot needs a staged floor (a destroyed one, never fenced by a
/// plan, may have none) and every floor a world ([`AdminError::Invalid`]
/// otherwise).
pub fn import_slots(
    snapshot: &ControlSnapshot,
    floors: &[WorldFloor],
) -> Result<Vec<WorldSlot>, AdminError> {
    snapshot.check().map_err(|e| AdminError::Invalid {
        what: "snapshot",
        detail: e.to_string(),
    })?;
    let mut staged: BTreeMap<&str, Epoch> = BTreeMap::new();
    for f in floors {
        if staged.insert(f.world.as_str(), f.floor).is_some() {
            return Err(AdminError::Invalid {
                what: "floors",
                detail: format!("two floors for world {}", f.world.as_str()),
            });
        }
    }
    let mut slots: BTreeMap<&str, WorldSlot> = BTreeMap::new();
    for w in &snapshot.worlds {
        let id = w.identity.world_id.as_str();
        // A destroyed world is never fenced (nor resumed): the plan has no
        // floor for it, and it imports its snapshot fence alone.
        let floor = match staged.remove(id) {
            Some(f) => f,
            None if w.status == crate::world::WorldStatus::Destroyed => 0,
            None => {
                return Err(AdminError::Invalid {
                    what: "floors",
                    detail: format!("no staged floor for active world {id}"),
                })
            }
        };
        slots.insert(
            id,
            WorldSlot {
                record: Some(w.clone()),
                signatures: Vec::new(),
                fence: WorldFence {
                    issued: 0,
                    floor,
                    holder: None,
                },
            },
        );
    }
    if let Some(id) = staged.keys().next() {
        return Err(AdminError::Invalid {
            what: "floors",
            detail: format!("a staged floor for world {id}, which the snapshot lacks"),
        });
    }
    for s in &snapshot.signatures {
        if let Some(slot) = slots.get_mut(s.world_id.as_str()) {
            slot.signatures.push(s.signature.clone());
        }
    }
    for f in &snapshot.fences {
        if let Some(slot) = slots.get_mut(f.world_id.as_str()) {
            slot.fence.floor = slot.fence.floor.max(f.high_water());
        }
    }
    Ok(slots.into_values().collect())
}

/// What a [`ControlAdmin::commit_destination`] does besides storing the
/// administration.
#[derive(Clone, Copy, Debug)]
pub enum AdminEffect<'a> {
    /// Nothing else.
    None,
    /// Stage the control bundle of the reservation's migration: the
    /// snapshot and its floors, invisible to discovery. A repeat of the
    /// same bundle is a no-op; another one is [`AdminError::StagingConflict`].
    Stage {
        /// The snapshot (its digest is the reservation's staged digest).
        snapshot: &'a ControlSnapshot,
        /// The import floors, one per world.
        floors: &'a [WorldFloor],
    },
    /// Import the staged bundle into the live tables ([`import_slots`]):
    /// refused unless they hold nothing ([`AdminError::DestinationPopulated`]).
    Activate,
}

/// Why an administrative operation was refused. Nothing changes on a
/// refusal.
#[derive(Clone, Debug, PartialEq, Eq, Error, Serialize, Deserialize)]
pub enum AdminError {
    /// The stored administration is not the one the decision was made on
    /// (another driver moved it).
    #[error("AdminMoved: the stored migration administration changed: {detail}")]
    Moved {
        /// What differs.
        detail: String,
    },
    /// Another control bundle is staged for this migration.
    #[error("StagingConflict: migration {migration_id} has another control bundle staged")]
    StagingConflict {
        /// The migration.
        migration_id: Name,
    },
    /// Activation found no staged bundle, or one that is not the reserved
    /// snapshot.
    #[error("NotStaged: migration {migration_id}: {detail}")]
    NotStaged {
        /// The migration.
        migration_id: Name,
        /// What is missing or differs.
        detail: String,
    },
    /// Activation found live control records at the destination.
    #[error("DestinationPopulated: the destination holds {records} live control records")]
    DestinationPopulated {
        /// How many.
        records: u64,
    },
    /// Stored evidence (reservation, receipt, staged bundle) is missing,
    /// non-canonical, digest-invalid or does not match its plan.
    #[error("StoredEvidenceInvalid: {what}: {detail}")]
    StoredEvidence {
        /// Which evidence.
        what: &'static str,
        /// Why.
        detail: String,
    },
    /// A malformed request.
    #[error("Invalid: {what}: {detail}")]
    Invalid {
        /// Which value.
        what: &'static str,
        /// Why.
        detail: String,
    },
    /// The backend failed or is read-only.
    #[error("BackendFault: {reason}")]
    Backend {
        /// What failed.
        reason: String,
    },
}

impl AdminError {
    /// The failure's [`Class`](crate::Class): what the caller does next
    /// (stored evidence that does not decode is `CorruptArtifact`, a backend's own failure `Internal`).
    pub fn class(&self) -> crate::Class {
        use crate::Class;
        match self {
            AdminError::Moved { .. } => Class::StateConflict,
            AdminError::StagingConflict { .. } => Class::StateConflict,
            AdminError::NotStaged { .. } => Class::FailedPrecondition,
            AdminError::DestinationPopulated { .. } => Class::FailedPrecondition,
            AdminError::StoredEvidence { .. } => Class::CorruptArtifact,
            AdminError::Invalid { .. } => Class::InvalidArgument,
            AdminError::Backend { .. } => Class::Internal,
        }
    }
}

crate::reasons! {
    /// The stable reason string.
    AdminError {
        Moved => "AdminMoved",
        StagingConflict,
        NotStaged,
        DestinationPopulated,
        StoredEvidence => "StoredEvidenceInvalid",
        Invalid,
        Backend => "BackendFault",
    }
}

/// Checks a loaded reservation's self-consistency: its plan digest is its
/// plan's, and a stored receipt verifies and belongs to that plan and
/// migration. What every backend runs on every load.
pub fn check_reservation(r: &Reservation) -> Result<(), AdminError> {
    let bad = |what, detail: String| Err(AdminError::StoredEvidence { what, detail });
    if r.plan.digest() != r.plan_digest {
        return bad("reservation", "the plan digest is not the plan's".into());
    }
    if r.status == super::Status::Completed && r.receipt.is_none() {
        return bad(
            "receipt",
            "a completed reservation without its receipt".into(),
        );
    }
    if let Some(stored) = &r.receipt {
        if let Err(e) = stored.verify() {
            return bad("receipt", e.to_string());
        }
        if stored.receipt.plan_digest != r.plan_digest {
            return bad("receipt", "the receipt binds another plan".into());
        }
        if stored.receipt.migration_id != r.plan.migration_id {
            return bad("receipt", "the receipt names another migration".into());
        }
    }
    Ok(())
}

/// The canonical bytes of a reservation, as a backend stores them.
pub fn encode_reservation(r: &Reservation) -> Vec<u8> {
    canonical_bytes(r)
}

/// The storable next administration, given the stored one: a reservation
/// is never removed, never replaced by another migration's, and must
/// itself check ([`check_reservation`]). Answers the reservation to store.
pub fn check_transition<'a>(
    current: &Destination,
    next: &'a Destination,
) -> Result<&'a Reservation, AdminError> {
    let invalid = |detail: &str| AdminError::Invalid {
        what: "destination",
        detail: detail.into(),
    };
    let r = next
        .reservation
        .as_ref()
        .ok_or_else(|| invalid("a stored reservation is never removed"))?;
    check_reservation(r)?;
    if let Some(old) = &current.reservation {
        let abandoned = old.status == super::Status::Abandoned;
        if old.plan.migration_id != r.plan.migration_id && !abandoned {
            return Err(invalid(
                "the destination holds another migration's reservation",
            ));
        }
        if old.plan.migration_id == r.plan.migration_id
            && abandoned
            && r.status != super::Status::Abandoned
        {
            return Err(invalid("an abandoned migration never resumes"));
        }
        if r.status == super::Status::Abandoned
            && matches!(
                old.status,
                super::Status::Activated | super::Status::Completed
            )
        {
            return Err(invalid("an activated migration is never abandoned"));
        }
    }
    Ok(r)
}

/// Decodes a stored reservation (canonically) and checks it
/// ([`check_reservation`]).
pub fn decode_reservation(bytes: &[u8]) -> Result<Reservation, AdminError> {
    let r: Reservation = decode_canonical(bytes).map_err(|e| AdminError::StoredEvidence {
        what: "reservation",
        detail: e.to_string(),
    })?;
    check_reservation(&r)?;
    Ok(r)
}

/// Decodes stored receipt bytes and checks they are exactly the
/// reservation's receipt.
pub fn decode_stored_receipt(bytes: &[u8], r: &Reservation) -> Result<StoredReceipt, AdminError> {
    let stored = StoredReceipt::decode(bytes).map_err(|e| AdminError::StoredEvidence {
        what: "receipt",
        detail: e.to_string(),
    })?;
    if r.receipt.as_ref() != Some(&stored) {
        return Err(AdminError::StoredEvidence {
            what: "receipt",
            detail: "the stored receipt is not the reservation's".into(),
        });
    }
    Ok(stored)
}

/// A staged control bundle: what [`AdminEffect::Stage`] stores, invisible
/// to discovery, until activation imports it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StagedBundle {
    /// The migration it belongs to.
    pub migration_id: Name,
    /// The snapshot.
    pub snapshot: ControlSnapshot,
    /// The import floors, one per world.
    pub floors: Vec<WorldFloor>,
}

impl StagedBundle {
    /// The canonical bytes a backend stores.
    pub fn encode(&self) -> Vec<u8> {
        canonical_bytes(self)
    }

    /// Decodes stored bundle bytes canonically, the snapshot checked.
    pub fn decode(bytes: &[u8]) -> Result<StagedBundle, AdminError> {
        let bad = |e: String| AdminError::StoredEvidence {
            what: "staged bundle",
            detail: e,
        };
        let b: StagedBundle = decode_canonical(bytes).map_err(|e| bad(e.to_string()))?;
        b.snapshot.check().map_err(|e| bad(e.to_string()))?;
        Ok(b)
    }
}

fn reservation_of<'a>(next: &'a Destination, step: &str) -> Result<&'a Reservation, AdminError> {
    next.reservation
        .as_ref()
        .ok_or_else(|| AdminError::Invalid {
            what: "destination",
            detail: format!("{step} without a reservation"),
        })
}

/// What staging stores, given what is already staged: `Some(bundle)` to
/// store, `None` when exactly this bundle is staged (a no-op). The bundle
/// must be the one `next` records as staged (digest and floors); another
/// bundle already staged, for this migration or another, is
/// [`AdminError::StagingConflict`].
pub fn decide_stage(
    next: &Destination,
    existing: Option<&StagedBundle>,
    snapshot: &ControlSnapshot,
    floors: &[WorldFloor],
) -> Result<Option<StagedBundle>, AdminError> {
    let r = reservation_of(next, "staging")?;
    match &r.control {
        Some(c) if c.snapshot_digest == snapshot.digest() && c.floors == floors => {}
        _ => {
            return Err(AdminError::Invalid {
                what: "staging",
                detail: "the bundle is not the one the reservation records as staged".into(),
            })
        }
    }
    snapshot.check().map_err(|e| AdminError::Invalid {
        what: "snapshot",
        detail: e.to_string(),
    })?;
    let bundle = StagedBundle {
        migration_id: r.plan.migration_id.clone(),
        snapshot: snapshot.clone(),
        floors: floors.to_vec(),
    };
    match existing {
        None => Ok(Some(bundle)),
        Some(e) if *e == bundle => Ok(None),
        Some(e) => Err(AdminError::StagingConflict {
            migration_id: e.migration_id.clone(),
        }),
    }
}

/// The live slots activation writes: `next` must be an activated
/// reservation whose staged digest and floors are exactly the staged
/// bundle's ([`AdminError::NotStaged`] otherwise), and the live tables must
/// hold nothing ([`AdminError::DestinationPopulated`]). Then
/// [`import_slots`].
pub fn decide_activation(
    next: &Destination,
    staged: Option<&StagedBundle>,
    live_records: u64,
) -> Result<Vec<WorldSlot>, AdminError> {
    let r = reservation_of(next, "activation")?;
    let not_staged = |detail: &str| AdminError::NotStaged {
        migration_id: r.plan.migration_id.clone(),
        detail: detail.into(),
    };
    if r.status != super::Status::Activated {
        return Err(AdminError::Invalid {
            what: "activation",
            detail: "the stored reservation would not be activated".into(),
        });
    }
    let c = r
        .control
        .as_ref()
        .ok_or_else(|| not_staged("nothing recorded as staged"))?;
    let b = staged.ok_or_else(|| not_staged("no staged bundle"))?;
    if b.migration_id != r.plan.migration_id {
        return Err(not_staged("the staged bundle belongs to another migration"));
    }
    if b.snapshot.digest() != c.snapshot_digest || b.floors != c.floors {
        return Err(not_staged("the staged bundle is not the reserved one"));
    }
    if live_records > 0 {
        return Err(AdminError::DestinationPopulated {
            records: live_records,
        });
    }
    import_slots(&b.snapshot, &b.floors)
}

/// The control catalog's administrative port: what a migration needs of
/// its source (export) and destination (administration), over one control
/// catalog.
pub trait ControlAdmin {
    /// The live control state. Never includes reservation or staging rows.
    fn export_snapshot(&self) -> Result<ControlSnapshot, AdminError>;

    /// The stored migration administration, every stored piece decoded
    /// canonically and checked ([`check_reservation`]). It reflects every
    /// [`ControlAdmin::commit_destination`] that answered `Ok` before it
    /// was called (the workflow starts each step from it: a stale read
    /// would send a run back to steps it has passed).
    fn load_destination(&self) -> Result<Destination, AdminError>;

    /// Atomically: checks that the stored administration is `expected`
    /// ([`AdminError::Moved`] otherwise), performs `effect`, and stores
    /// `next` (with its receipt, when it has one). Nothing changes on an
    /// error.
    fn commit_destination(
        &self,
        expected: &Destination,
        next: &Destination,
        effect: AdminEffect<'_>,
    ) -> Result<(), AdminError>;

    /// The exact stored receipt bytes of a completed reservation (`None`
    /// before completion), checked against the reservation.
    fn stored_receipt(&self) -> Result<Option<Vec<u8>>, AdminError>;

    /// The source-side departure record: every migration that planned to
    /// move this endpoint, decoded canonically and checked (empty when
    /// none was ever recorded). Never part of the control snapshot.
    fn load_departures(&self) -> Result<Departures, AdminError>;

    /// Atomically: checks that the stored departure record is `expected`
    /// ([`AdminError::Moved`] otherwise) and stores `next`. Two racing
    /// planners cannot both record a departure. Nothing changes on an
    /// error.
    fn commit_departures(&self, expected: &Departures, next: &Departures)
        -> Result<(), AdminError>;
}

/// A borrowed administration is one (a caller that owns its catalog can
/// lend it where a boxed port is asked for).
impl<T: ControlAdmin + ?Sized> ControlAdmin for &T {
    fn export_snapshot(&self) -> Result<ControlSnapshot, AdminError> {
        (**self).export_snapshot()
    }
    fn load_destination(&self) -> Result<Destination, AdminError> {
        (**self).load_destination()
    }
    fn commit_destination(
        &self,
        expected: &Destination,
        next: &Destination,
        effect: AdminEffect<'_>,
    ) -> Result<(), AdminError> {
        (**self).commit_destination(expected, next, effect)
    }
    fn stored_receipt(&self) -> Result<Option<Vec<u8>>, AdminError> {
        (**self).stored_receipt()
    }
    fn load_departures(&self) -> Result<Departures, AdminError> {
        (**self).load_departures()
    }
    fn commit_departures(
        &self,
        expected: &Departures,
        next: &Departures,
    ) -> Result<(), AdminError> {
        (**self).commit_departures(expected, next)
    }
}

/// Checks a departure record a backend is about to store.
pub fn check_departures(next: &Departures) -> Result<(), AdminError> {
    next.check().map_err(|detail| AdminError::Invalid {
        what: "departures",
        detail,
    })
}

/// The memory backend's administration: the stored destination and the
/// staged bundle.
#[derive(Debug, Default)]
pub(crate) struct MemoryAdmin {
    pub(crate) destination: Destination,
    pub(crate) departures: Departures,
    pub(crate) staged: Option<StagedBundle>,
}
