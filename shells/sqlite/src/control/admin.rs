//! The administrative control contract on SQLite
//! (`custos_core::migration::control::ControlAdmin`): the export reads the
//! live tables only (`control_worlds`, `control_signatures`,
//! `control_fences`), never `control_migrations` or `control_staged`; the
//! administration is one `BEGIN IMMEDIATE` transaction per commit that
//! loads and verifies the stored reservation, compares it with the expected
//! one, performs the effect through core's rules (`decide_stage`,
//! `decide_activation`) and writes the next reservation — its canonical
//! bytes, and once completed the canonical receipt and its digest in their
//! own columns. Every load decodes every stored piece canonically and
//! checks it (`decode_reservation`, `decode_stored_receipt`,
//! `StagedBundle::decode`): a missing, non-canonical, digest-invalid or
//! plan-mismatched piece fails closed.

use custos_core::migration::control::{
    check_departures, check_transition, decide_activation, decide_stage, decode_reservation,
    decode_stored_receipt, encode_reservation, AdminEffect, AdminError, ControlAdmin,
    ControlSnapshot, StagedBundle,
};
use custos_core::migration::departure::Departures;
use custos_core::migration::{Destination, Reservation};
use custos_core::world::{WorldError, WorldSlot};
use rusqlite::{params, OptionalExtension, Transaction, TransactionBehavior};

use super::{apply_effect, load_slot, SqliteControlCatalog};
use crate::fault::Fault;

/// The bound on a stored reservation, receipt or staged bundle (the core
/// decoders' own bound, checked before the bytes are copied).
const MAX_ADMIN_BLOB: usize = custos_core::migration::MAX_ENCODED_LEN;

fn backend(op: &'static str) -> impl FnOnce(rusqlite::Error) -> AdminError {
    move |e| AdminError::Backend {
        reason: Fault::Db(op, e).reason(),
    }
}

fn world_err(e: WorldError) -> AdminError {
    match e {
        WorldError::BackendFault { reason } => AdminError::Backend { reason },
        other => AdminError::StoredEvidence {
            what: "control records",
            detail: other.to_string(),
        },
    }
}

fn stored(what: &'static str, detail: impl Into<String>) -> AdminError {
    AdminError::StoredEvidence {
        what,
        detail: detail.into(),
    }
}

/// Whether the administration tables exist (a version-1 file read through
/// a read-only handle has none: it stores no administration).
fn has_admin(tx: &Transaction<'_>) -> Result<bool, AdminError> {
    tx.prepare_cached(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'control_migrations'",
    )
    .map_err(backend("load-admin"))?
    .query_row([], |r| r.get::<_, i64>(0))
    .map(|n| n > 0)
    .map_err(backend("load-admin"))
}

/// A blob column, its length checked before it is copied.
fn blob(
    r: &rusqlite::Row<'_>,
    col: usize,
    what: &'static str,
) -> rusqlite::Result<Result<Option<Vec<u8>>, AdminError>> {
    let v = r.get_ref(col)?;
    Ok(match v {
        rusqlite::types::ValueRef::Null => Ok(None),
        rusqlite::types::ValueRef::Blob(b) if b.len() <= MAX_ADMIN_BLOB => Ok(Some(b.to_vec())),
        rusqlite::types::ValueRef::Blob(b) => Err(stored(
            what,
            format!("{} bytes exceeds {MAX_ADMIN_BLOB}", b.len()),
        )),
        _ => Err(stored(what, "not a blob")),
    })
}

/// A short text column (an id or a hex digest), bounded.
fn short_text(
    r: &rusqlite::Row<'_>,
    col: usize,
    what: &'static str,
) -> rusqlite::Result<Result<Option<String>, AdminError>> {
    let v = r.get_ref(col)?;
    Ok(match v {
        rusqlite::types::ValueRef::Null => Ok(None),
        rusqlite::types::ValueRef::Text(t) if t.len() <= 1024 => {
            Ok(Some(String::from_utf8_lossy(t).into_owned()))
        }
        _ => Err(stored(what, "not a short text")),
    })
}

type RawReservation = (
    Option<String>,
    Option<String>,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Option<String>,
);

/// The stored destination, every piece verified.
fn load(tx: &Transaction<'_>) -> Result<Destination, AdminError> {
    if !has_admin(tx)? {
        return Ok(Destination::default());
    }
    let mut stmt = tx
        .prepare_cached(
            "SELECT migration_id, plan_digest, reservation, receipt, receipt_digest FROM control_migrations",
        )
        .map_err(backend("load-reservation"))?;
    let rows = stmt
        .query_map([], |r| {
            let (a, b) = (
                short_text(r, 0, "reservation")?,
                short_text(r, 1, "reservation")?,
            );
            let (c, d) = (blob(r, 2, "reservation")?, blob(r, 3, "receipt")?);
            let e = short_text(r, 4, "receipt")?;
            Ok((|| -> Result<RawReservation, AdminError> {
                Ok((a?, b?, c?, d?, e?))
            })())
        })
        .map_err(backend("load-reservation"))?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(backend("load-reservation"))?;
    let raw = match rows.len() {
        0 => return Ok(Destination::default()),
        1 => rows
            .into_iter()
            .next()
            .ok_or_else(|| stored("reservation", "vanished"))??,
        n => {
            return Err(stored(
                "reservation",
                format!("{n} reservations; at most one is allowed"),
            ))
        }
    };
    let (id, digest, bytes, receipt, receipt_digest) = raw;
    let r = decode_reservation(&bytes.ok_or_else(|| stored("reservation", "missing"))?)?;
    if id.as_deref() != Some(r.plan.migration_id.as_str()) {
        return Err(stored(
            "reservation",
            "the row's migration id is not the reservation's",
        ));
    }
    if digest.as_deref() != Some(r.plan_digest.hex().as_str()) {
        return Err(stored(
            "reservation",
            "the row's plan digest is not the reservation's",
        ));
    }
    check_receipt(&r, receipt, receipt_digest.as_deref())?;
    Ok(Destination {
        reservation: Some(r),
    })
}

/// Checks the stored receipt against the reservation `r`: present (with
/// its digest) exactly when the reservation is complete.
fn check_receipt(
    r: &Reservation,
    receipt: Option<Vec<u8>>,
    receipt_digest: Option<&str>,
) -> Result<(), AdminError> {
    match (&r.receipt, receipt) {
        (None, None) if receipt_digest.is_none() => {}
        (None, _) => {
            return Err(stored(
                "receipt",
                "a receipt stored for an incomplete reservation",
            ))
        }
        (Some(_), None) => return Err(stored("receipt", "missing")),
        (Some(_), Some(bytes)) => {
            let s = decode_stored_receipt(&bytes, r)?;
            if receipt_digest != Some(s.digest.hex().as_str()) {
                return Err(stored(
                    "receipt",
                    "the stored receipt digest is not the receipt's",
                ));
            }
        }
    }
    Ok(())
}

/// The staged bundle, if any (at most one: one reservation).
fn load_staged(tx: &Transaction<'_>) -> Result<Option<StagedBundle>, AdminError> {
    let mut stmt = tx
        .prepare_cached("SELECT bundle FROM control_staged")
        .map_err(backend("load-staged"))?;
    let rows = stmt
        .query_map([], |r| blob(r, 0, "staged bundle"))
        .map_err(backend("load-staged"))?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(backend("load-staged"))?;
    match rows.len() {
        0 => Ok(None),
        1 => {
            let bytes = rows
                .into_iter()
                .next()
                .ok_or_else(|| stored("staged bundle", "vanished"))??
                .ok_or_else(|| stored("staged bundle", "missing"))?;
            StagedBundle::decode(&bytes).map(Some)
        }
        n => Err(stored(
            "staged bundle",
            format!("{n} bundles; at most one is allowed"),
        )),
    }
}

/// Live control records: world, signature and fence rows.
fn live_records(tx: &Transaction<'_>) -> Result<u64, AdminError> {
    tx.prepare_cached(
        "SELECT (SELECT count(*) FROM control_worlds) + (SELECT count(*) FROM control_signatures) + (SELECT count(*) FROM control_fences)",
    )
    .map_err(backend("count-live"))?
    .query_row([], |r| r.get::<_, i64>(0))
    .map(|n| u64::try_from(n).unwrap_or(0))
    .map_err(backend("count-live"))
}

fn store(tx: &Transaction<'_>, r: &Reservation) -> Result<(), AdminError> {
    let receipt = r.receipt.as_ref();
    // An abandoned reservation a new migration replaces goes, with any
    // bundle staged for it (core's `check_transition` admitted only that);
    // an abandoned one keeps nothing staged.
    let id = r.plan.migration_id.as_str();
    for sql in [
        "DELETE FROM control_staged WHERE migration_id <> ?1",
        "DELETE FROM control_migrations WHERE migration_id <> ?1",
    ] {
        tx.prepare_cached(sql)
            .map_err(backend("store-reservation"))?
            .execute(params![id])
            .map_err(backend("store-reservation"))?;
    }
    if r.status == custos_core::migration::Status::Abandoned {
        tx.prepare_cached("DELETE FROM control_staged")
            .map_err(backend("store-reservation"))?
            .execute([])
            .map_err(backend("store-reservation"))?;
    }
    tx.prepare_cached(
        "INSERT INTO control_migrations (migration_id, plan_digest, reservation, receipt, receipt_digest)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (migration_id) DO UPDATE SET plan_digest = excluded.plan_digest,
           reservation = excluded.reservation, receipt = excluded.receipt,
           receipt_digest = excluded.receipt_digest",
    )
    .map_err(backend("store-reservation"))?
    .execute(params![
        r.plan.migration_id.as_str(),
        r.plan_digest.hex(),
        encode_reservation(r),
        receipt.map(|s| s.encode()),
        receipt.map(|s| s.digest.hex()),
    ])
    .map_err(backend("store-reservation"))?;
    Ok(())
}

fn perform(
    tx: &Transaction<'_>,
    next: &Destination,
    effect: AdminEffect<'_>,
) -> Result<(), AdminError> {
    match effect {
        AdminEffect::None => Ok(()),
        AdminEffect::Stage { snapshot, floors } => {
            let existing = load_staged(tx)?;
            if let Some(b) = decide_stage(next, existing.as_ref(), snapshot, floors)? {
                tx.prepare_cached(
                    "INSERT INTO control_staged (migration_id, bundle) VALUES (?1, ?2)",
                )
                .map_err(backend("stage"))?
                .execute(params![b.migration_id.as_str(), b.encode()])
                .map_err(backend("stage"))?;
            }
            Ok(())
        }
        AdminEffect::Activate => {
            let staged = load_staged(tx)?;
            let slots = decide_activation(next, staged.as_ref(), live_records(tx)?)?;
            for slot in &slots {
                for e in custos_core::world::effects(&WorldSlot::default(), slot) {
                    apply_effect(tx, &e).map_err(world_err)?;
                }
            }
            Ok(())
        }
    }
}

impl SqliteControlCatalog {
    fn admin<T>(
        &self,
        behavior: TransactionBehavior,
        f: impl FnMut(&Transaction<'_>) -> Result<T, AdminError>,
    ) -> Result<T, AdminError> {
        self.h
            .transact(behavior, f, |reason| AdminError::Backend { reason })
    }
}

impl ControlAdmin for SqliteControlCatalog {
    fn export_snapshot(&self) -> Result<ControlSnapshot, AdminError> {
        self.admin(TransactionBehavior::Deferred, |tx| {
            let ids: Vec<String> = tx
                .prepare_cached("SELECT world_id FROM control_worlds ORDER BY world_id")
                .map_err(backend("export"))?
                .query_map([], |r| r.get(0))
                .map_err(backend("export"))?
                .collect::<rusqlite::Result<_>>()
                .map_err(backend("export"))?;
            let slots = ids
                .iter()
                .map(|id| load_slot(tx, id))
                .collect::<Result<Vec<_>, _>>()
                .map_err(world_err)?;
            Ok(ControlSnapshot::from_slots(&slots))
        })
    }

    fn load_destination(&self) -> Result<Destination, AdminError> {
        self.admin(TransactionBehavior::Deferred, load)
    }

    fn commit_destination(
        &self,
        expected: &Destination,
        next: &Destination,
        effect: AdminEffect<'_>,
    ) -> Result<(), AdminError> {
        self.admin(TransactionBehavior::Immediate, |tx| {
            let current = load(tx)?;
            if current != *expected {
                return Err(AdminError::Moved {
                    detail: "the stored reservation is not the expected one".into(),
                });
            }
            let r = check_transition(&current, next)?;
            store(tx, r)?;
            perform(tx, next, effect)
        })
    }

    fn stored_receipt(&self) -> Result<Option<Vec<u8>>, AdminError> {
        self.admin(TransactionBehavior::Deferred, |tx| {
            if load(tx)?.reservation.is_none() {
                return Ok(None);
            }
            tx.prepare_cached("SELECT receipt FROM control_migrations")
                .map_err(backend("load-receipt"))?
                .query_row([], |r| blob(r, 0, "receipt"))
                .optional()
                .map_err(backend("load-receipt"))?
                .transpose()
                .map(Option::flatten)
        })
    }

    fn load_departures(&self) -> Result<Departures, AdminError> {
        self.admin(TransactionBehavior::Deferred, load_departures)
    }

    fn commit_departures(
        &self,
        expected: &Departures,
        next: &Departures,
    ) -> Result<(), AdminError> {
        self.admin(TransactionBehavior::Immediate, |tx| {
            if load_departures(tx)? != *expected {
                return Err(AdminError::Moved {
                    detail: "the stored departure record is not the expected one".into(),
                });
            }
            check_departures(next)?;
            tx.prepare_cached(
                "INSERT INTO control_departures (id, departures) VALUES (0, ?1)
                 ON CONFLICT (id) DO UPDATE SET departures = excluded.departures",
            )
            .map_err(backend("store-departures"))?
            .execute(params![next.encode()])
            .map_err(backend("store-departures"))?;
            Ok(())
        })
    }
}

/// The stored departure record, decoded canonically (empty when none was
/// stored, or the file predates the record: a read-only handle of an
/// older version).
fn load_departures(tx: &Transaction<'_>) -> Result<Departures, AdminError> {
    let present = tx
        .prepare_cached(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'control_departures'",
        )
        .map_err(backend("load-departures"))?
        .query_row([], |r| r.get::<_, i64>(0))
        .map_err(backend("load-departures"))?;
    if present == 0 {
        return Ok(Departures::default());
    }
    let bytes = tx
        .prepare_cached("SELECT departures FROM control_departures WHERE id = 0")
        .map_err(backend("load-departures"))?
        .query_row([], |r| blob(r, 0, "departures"))
        .optional()
        .map_err(backend("load-departures"))?
        .transpose()?
        .flatten();
    match bytes {
        None => Ok(Departures::default()),
        Some(b) => Departures::decode(&b).map_err(|e| stored("departures", e)),
    }
}
