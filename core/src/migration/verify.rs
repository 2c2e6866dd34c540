//! Verification of a migrated destination against its plan and receipt,
//! with every difference named.
//!
//! Two rules live here:
//!
//! - **Which receipt a destination holds** ([`held_receipt`]): a receipt
//!   verifies against a destination only when the receipt's own digest
//!   binds it, the destination's administration holds a *completed*
//!   reservation of the receipt's migration, that reservation stores this
//!   exact receipt, and the receipt's plan digest is the reserved plan's —
//!   whose stored bytes still hash to it.
//! - **What fresh evidence of the destination must show**
//!   ([`check_cold_as`]): the plan's digest, every planned World
//!   discoverable, every planned table with the plan's schema fingerprint,
//!   metadata fingerprint (partition spec, sort order, properties), row
//!   count and destination content digest, every planned object's
//!   bytes measuring to its facts, and the resume the [`VerifyMode`] asks
//!   for. Every difference is a [`Discrepancy`] naming the World, the table
//!   and the evidence, or the object and its address — all of them, not
//!   the first.
//!
//! [`VerifyMode::ReadOnly`] proves everything but the resume and writes
//! nothing; [`VerifyMode::ResumeAndTick`] also resumes the resumable World
//! above its imported floor and commits a tick — the migration's own cold
//! verification, which takes a writer fence at the destination.

use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::{
    ColdEvidence, Destination, Digest, MigrationError, Name, NormalizedUri, ObjectFacts,
    ObjectFound, Reservation, Resume, Status, StoredReceipt,
};
use crate::fence::Epoch;

/// How a verification exercises the destination's resumable World.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VerifyMode {
    /// Discovery, table evidence and object bytes only: nothing is written,
    /// no fence is taken, no tick is committed ([`Resume::NotExercised`]).
    ReadOnly,
    /// Also resumes the resumable World under a fresh writer fence above
    /// its imported floor and commits the tick after its durable head. The
    /// fence stales any writer that held the World before.
    ResumeAndTick,
}

impl VerifyMode {
    /// The mode's stable name.
    pub fn name(self) -> &'static str {
        match self {
            VerifyMode::ReadOnly => "read-only",
            VerifyMode::ResumeAndTick => "resume-and-tick",
        }
    }
}

impl fmt::Display for VerifyMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One difference between a destination and the plan it must reproduce,
/// naming what differs.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Error, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Discrepancy {
    /// The evidence answers another plan than the reserved one.
    #[error("the evidence is for plan {found_hex}, not the reserved plan {expected_hex}", expected_hex = .expected.hex(), found_hex = .found.hex())]
    OtherPlan {
        /// The reserved plan's digest.
        #[serde(with = "crate::digest::bare")]
        expected: Digest,
        /// The plan digest the evidence names.
        #[serde(with = "crate::digest::bare")]
        found: Digest,
    },
    /// A planned World the destination does not discover as active.
    #[error("World {world}: not discoverable at the destination")]
    WorldNotDiscovered {
        /// The World.
        world: Name,
    },
    /// Not every planned World discovered, and the evidence names none.
    #[error("{found} of {expected} planned Worlds discoverable at the destination")]
    WorldCount {
        /// Planned Worlds.
        expected: u64,
        /// Worlds discovered.
        found: u64,
    },
    /// A planned table the destination does not have.
    #[error("table {table}: absent at the destination")]
    TableAbsent {
        /// The table.
        table: Name,
    },
    /// A table whose logical-schema fingerprint is not the plan's.
    #[error("table {table}: schema fingerprint {found_hex}, the plan's is {expected_hex}", expected_hex = .expected.hex(), found_hex = .found.hex())]
    TableSchemaFingerprint {
        /// The table.
        table: Name,
        /// The plan's fingerprint.
        #[serde(with = "crate::digest::bare")]
        expected: Digest,
        /// The destination's.
        #[serde(with = "crate::digest::bare")]
        found: Digest,
    },
    /// A table whose partition spec, sort order or owner's properties are
    /// not the plan's ([`super::metadata`]): a destination that lost its
    /// partitioning, say.
    #[error("table {table}: metadata fingerprint {found_hex} (partition spec, sort order, properties), the plan's is {expected_hex}", expected_hex = .expected.hex(), found_hex = .found.hex())]
    TableMetadataFingerprint {
        /// The table.
        table: Name,
        /// The plan's fingerprint.
        #[serde(with = "crate::digest::bare")]
        expected: Digest,
        /// The destination's.
        #[serde(with = "crate::digest::bare")]
        found: Digest,
    },
    /// A table whose row count is not the plan's.
    #[error("table {table}: row count {found}, the plan's is {expected}")]
    TableRowCount {
        /// The table.
        table: Name,
        /// The plan's row count.
        expected: u64,
        /// The destination's.
        found: u64,
    },
    /// A table whose content digest is not the plan's destination digest.
    #[error("table {table}: content digest {found_hex}, the plan's is {expected_hex}", expected_hex = .expected.hex(), found_hex = .found.hex())]
    TableContentDigest {
        /// The table.
        table: Name,
        /// The plan's destination content digest.
        #[serde(with = "crate::digest::bare")]
        expected: Digest,
        /// The destination's.
        #[serde(with = "crate::digest::bare")]
        found: Digest,
    },
    /// A table the evidence reports that the plan does not list.
    #[error("table {table}: not in the plan")]
    TableUnplanned {
        /// The table.
        table: Name,
    },
    /// The evidence's tables are the plan's, but not once each in the
    /// plan's order.
    #[error("the evidence lists the plan's tables out of order or twice")]
    TableOrder,
    /// A planned object whose bytes at the destination do not verify.
    #[error("object {sha256_hex} at {uri}: {}", object_detail(.expected, .found), sha256_hex = .sha256.hex())]
    Object {
        /// The object's SHA-256 (its content address).
        #[serde(with = "crate::digest::bare")]
        sha256: Digest,
        /// The address read.
        uri: NormalizedUri,
        /// The plan's facts of the object.
        expected: ObjectFacts,
        /// What was found there.
        found: ObjectFound,
    },
    /// Not every planned object verified, and the evidence names none.
    #[error("{found} of {expected} planned objects verified")]
    ObjectCount {
        /// Planned objects.
        expected: u64,
        /// Objects verified.
        found: u64,
    },
    /// A resume at or below the World's imported floor.
    #[error("World {world}: resume epoch {epoch} is not above the imported floor ({})", floor_text(.floor))]
    ResumeNotAboveFloor {
        /// The World resumed.
        world: Name,
        /// The epoch the resume acquired.
        epoch: Epoch,
        /// The higher of the staged and the planned floor (`None`: no
        /// floor was staged for the World).
        floor: Option<Epoch>,
    },
    /// Resume evidence other than the mode and the plan ask for.
    #[error("resume evidence does not match the resumable World ({mode} verification; resumable World: {}; evidence: {})", world_text(.resumable), resume_text(.found))]
    ResumeMismatch {
        /// The verification's mode.
        mode: VerifyMode,
        /// The plan's resumable World, if any.
        resumable: Option<Name>,
        /// The resume evidence given.
        found: Resume,
    },
}

fn object_detail(expected: &ObjectFacts, found: &ObjectFound) -> String {
    match found {
        ObjectFound::Missing => "missing".into(),
        ObjectFound::NotRegularFile(entry) => format!("holds {entry}, not a regular file"),
        ObjectFound::Longer => format!("longer than its planned {} bytes", expected.size),
        ObjectFound::Facts(f) => {
            let mut parts = Vec::new();
            if f.size != expected.size {
                parts.push(format!("size {}, the plan's is {}", f.size, expected.size));
            }
            if f.sha256 != expected.sha256 {
                parts.push(format!("sha256 {}", f.sha256.hex()));
            }
            if f.xxh3_64 != expected.xxh3_64 {
                parts.push(format!(
                    "xxh3-64 {:016x}, the plan's is {:016x}",
                    f.xxh3_64, expected.xxh3_64
                ));
            }
            if parts.is_empty() {
                "its bytes differ from the plan's".into()
            } else {
                format!("bytes differ: {}", parts.join("; "))
            }
        }
    }
}

fn floor_text(floor: &Option<Epoch>) -> String {
    floor.map_or_else(|| "none staged".into(), |f| f.to_string())
}

fn world_text(w: &Option<Name>) -> String {
    w.as_ref()
        .map_or_else(|| "none".into(), ToString::to_string)
}

fn resume_text(r: &Resume) -> String {
    match r {
        Resume::NotApplicable => "not applicable".into(),
        Resume::NotExercised => "not exercised".into(),
        Resume::Resumed { world, epoch, tick } => {
            format!("{world} resumed at epoch {epoch}, tick {tick}")
        }
    }
}

/// Every difference a cold check found (never empty in an error).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColdFailure {
    /// The differences, in check order: plan, Worlds, tables, objects,
    /// resume.
    pub discrepancies: Vec<Discrepancy>,
}

impl fmt::Display for ColdFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.discrepancies.as_slice() {
            [] => f.write_str("no difference named"),
            [one] => write!(f, "{one}"),
            many => {
                write!(f, "{} differences: ", many.len())?;
                for (i, d) in many.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{d}")?;
                }
                Ok(())
            }
        }
    }
}

/// Why a receipt does not verify against a destination's administration.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Error, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum ReceiptMismatch {
    /// The receipt's digest does not bind its content.
    #[error("the receipt's digest {stored_hex} does not bind it (its content hashes to {computed_hex})", stored_hex = .stored.hex(), computed_hex = .computed.hex())]
    Digest {
        /// The digest the receipt carries.
        #[serde(with = "crate::digest::bare")]
        stored: Digest,
        /// The digest of its content.
        #[serde(with = "crate::digest::bare")]
        computed: Digest,
    },
    /// The destination holds no migration at all.
    #[error("the destination holds no migration; the receipt's is {receipt}")]
    NoReservation {
        /// The receipt's migration.
        receipt: Name,
    },
    /// The destination holds another migration.
    #[error("the destination holds migration {held}, not the receipt's {receipt}")]
    OtherMigration {
        /// The destination's migration.
        held: Name,
        /// The receipt's.
        receipt: Name,
    },
    /// The receipt's migration is not completed at the destination.
    #[error("migration {migration_id} is {status:?} at the destination, not completed")]
    NotCompleted {
        /// The migration.
        migration_id: Name,
        /// Its status there.
        status: Status,
    },
    /// The destination stores another receipt for the migration.
    #[error("the destination stores receipt {}, not {receipt_hex}", digest_text(.held), receipt_hex = .receipt.hex())]
    OtherReceipt {
        /// The stored receipt's digest (`None`: none stored).
        #[serde(with = "crate::digest::bare::option")]
        held: Option<Digest>,
        /// The given receipt's digest.
        #[serde(with = "crate::digest::bare")]
        receipt: Digest,
    },
    /// The receipt names another plan than the reserved one.
    #[error("the receipt names plan {receipt_hex}, the destination reserved plan {reserved_hex}", reserved_hex = .reserved.hex(), receipt_hex = .receipt.hex())]
    PlanDigest {
        /// The reserved plan's digest.
        #[serde(with = "crate::digest::bare")]
        reserved: Digest,
        /// The receipt's plan digest.
        #[serde(with = "crate::digest::bare")]
        receipt: Digest,
    },
    /// The reserved plan's stored bytes no longer hash to its digest.
    #[error("the reserved plan hashes to {computed_hex}, not its recorded digest {stored_hex}", stored_hex = .stored.hex(), computed_hex = .computed.hex())]
    PlanCorrupt {
        /// The recorded digest.
        #[serde(with = "crate::digest::bare")]
        stored: Digest,
        /// The digest of the stored plan.
        #[serde(with = "crate::digest::bare")]
        computed: Digest,
    },
}

fn digest_text(d: &Option<Digest>) -> String {
    d.map_or_else(|| "none".into(), |d| d.hex())
}

/// The completed reservation of `d` that holds `receipt` (module docs):
/// refuses with [`MigrationError::ReceiptMismatch`] naming the rule.
pub fn held_receipt<'a>(
    d: &'a Destination,
    receipt: &StoredReceipt,
) -> Result<&'a Reservation, MigrationError> {
    let refuse = |m: ReceiptMismatch| Err(MigrationError::ReceiptMismatch(m));
    let computed = receipt.receipt.digest();
    if computed != receipt.digest {
        return refuse(ReceiptMismatch::Digest {
            stored: receipt.digest,
            computed,
        });
    }
    let id = &receipt.receipt.migration_id;
    let Some(r) = &d.reservation else {
        return refuse(ReceiptMismatch::NoReservation {
            receipt: id.clone(),
        });
    };
    if r.plan.migration_id != *id {
        return refuse(ReceiptMismatch::OtherMigration {
            held: r.plan.migration_id.clone(),
            receipt: id.clone(),
        });
    }
    if r.status != Status::Completed {
        return refuse(ReceiptMismatch::NotCompleted {
            migration_id: id.clone(),
            status: r.status,
        });
    }
    if r.receipt.as_ref() != Some(receipt) {
        return refuse(ReceiptMismatch::OtherReceipt {
            held: r.receipt.as_ref().map(|s| s.digest),
            receipt: receipt.digest,
        });
    }
    if receipt.receipt.plan_digest != r.plan_digest {
        return refuse(ReceiptMismatch::PlanDigest {
            reserved: r.plan_digest,
            receipt: receipt.receipt.plan_digest,
        });
    }
    let computed = r.plan.digest();
    if computed != r.plan_digest {
        return refuse(ReceiptMismatch::PlanCorrupt {
            stored: r.plan_digest,
            computed,
        });
    }
    Ok(r)
}

/// Checks cold evidence of a migration's own cold verification:
/// [`check_cold_as`] in [`VerifyMode::ResumeAndTick`].
pub fn check_cold(r: &Reservation, e: &ColdEvidence) -> Result<(), MigrationError> {
    check_cold_as(r, e, VerifyMode::ResumeAndTick)
}

/// Checks cold evidence against a reservation in `mode` (module docs):
/// refuses with [`MigrationError::ColdVerificationFailed`] carrying every
/// [`Discrepancy`] found.
pub fn check_cold_as(
    r: &Reservation,
    e: &ColdEvidence,
    mode: VerifyMode,
) -> Result<(), MigrationError> {
    let discrepancies = discrepancies(r, e, mode);
    if discrepancies.is_empty() {
        Ok(())
    } else {
        Err(MigrationError::ColdVerificationFailed(ColdFailure {
            discrepancies,
        }))
    }
}

/// Every difference between cold evidence and a reservation's plan in
/// `mode`; empty when the evidence proves the plan. Evidence for another
/// plan is that one difference alone.
pub fn discrepancies(r: &Reservation, e: &ColdEvidence, mode: VerifyMode) -> Vec<Discrepancy> {
    if e.plan_digest != r.plan_digest {
        return vec![Discrepancy::OtherPlan {
            expected: r.plan_digest,
            found: e.plan_digest,
        }];
    }
    let mut out = Vec::new();
    worlds(r, e, &mut out);
    tables(r, e, &mut out);
    objects(r, e, &mut out);
    if let Some(d) = resume(r, e, mode) {
        out.push(d);
    }
    out
}

fn worlds(r: &Reservation, e: &ColdEvidence, out: &mut Vec<Discrepancy>) {
    let before = out.len();
    for w in &r.plan.worlds {
        if e.worlds_missing.contains(&w.world) {
            out.push(Discrepancy::WorldNotDiscovered {
                world: w.world.clone(),
            });
        }
    }
    let expected = r.plan.worlds.len() as u64;
    if out.len() == before && e.worlds_discovered != expected {
        out.push(Discrepancy::WorldCount {
            expected,
            found: e.worlds_discovered,
        });
    }
}

fn tables(r: &Reservation, e: &ColdEvidence, out: &mut Vec<Discrepancy>) {
    let before = out.len();
    for t in &r.plan.tables {
        let Some((_, f)) = e.tables.iter().find(|(n, _)| *n == t.name) else {
            out.push(Discrepancy::TableAbsent {
                table: t.name.clone(),
            });
            continue;
        };
        let table = || t.name.clone();
        if f.schema_fingerprint != t.source.schema_fingerprint {
            out.push(Discrepancy::TableSchemaFingerprint {
                table: table(),
                expected: t.source.schema_fingerprint,
                found: f.schema_fingerprint,
            });
        }
        if f.metadata_fingerprint != t.source.metadata_fingerprint {
            out.push(Discrepancy::TableMetadataFingerprint {
                table: table(),
                expected: t.source.metadata_fingerprint,
                found: f.metadata_fingerprint,
            });
        }
        if f.rows != t.source.rows {
            out.push(Discrepancy::TableRowCount {
                table: table(),
                expected: t.source.rows,
                found: f.rows,
            });
        }
        if f.content_digest != t.destination_content_digest {
            out.push(Discrepancy::TableContentDigest {
                table: table(),
                expected: t.destination_content_digest,
                found: f.content_digest,
            });
        }
    }
    for (n, _) in &e.tables {
        if !r.plan.tables.iter().any(|t| t.name == *n) {
            out.push(Discrepancy::TableUnplanned { table: n.clone() });
        }
    }
    let in_order = e
        .tables
        .iter()
        .map(|(n, _)| n)
        .eq(r.plan.tables.iter().map(|t| &t.name));
    if out.len() == before && !in_order {
        out.push(Discrepancy::TableOrder);
    }
}

fn objects(r: &Reservation, e: &ColdEvidence, out: &mut Vec<Discrepancy>) {
    let before = out.len();
    for m in &e.objects_failed {
        if let Some(o) = r
            .plan
            .artifacts
            .objects
            .iter()
            .find(|o| o.sha256 == m.sha256)
        {
            out.push(Discrepancy::Object {
                sha256: m.sha256,
                uri: m.uri.clone(),
                expected: *o,
                found: m.found.clone(),
            });
        }
    }
    let expected = r.plan.artifacts.objects.len() as u64;
    if out.len() == before && e.objects_verified != expected {
        out.push(Discrepancy::ObjectCount {
            expected,
            found: e.objects_verified,
        });
    }
}

fn resume(r: &Reservation, e: &ColdEvidence, mode: VerifyMode) -> Option<Discrepancy> {
    let resumable = r.plan.worlds.iter().find(|w| w.resumable);
    match (mode, &e.resume, resumable) {
        (_, Resume::NotApplicable, None)
        | (VerifyMode::ReadOnly, Resume::NotExercised, Some(_)) => None,
        (VerifyMode::ResumeAndTick, Resume::Resumed { world, epoch, .. }, Some(w))
            if *world == w.world =>
        {
            let staged = r
                .control
                .as_ref()
                .and_then(|c| c.floors.iter().find(|f| f.world == *world))
                .map(|f| f.floor);
            match staged {
                Some(floor) if *epoch > floor && *epoch > w.import_floor() => None,
                _ => Some(Discrepancy::ResumeNotAboveFloor {
                    world: world.clone(),
                    epoch: *epoch,
                    floor: staged.map(|s| s.max(w.import_floor())),
                }),
            }
        }
        _ => Some(Discrepancy::ResumeMismatch {
            mode,
            resumable: resumable.map(|w| w.world.clone()),
            found: e.resume.clone(),
        }),
    }
}
