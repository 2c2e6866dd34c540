//! The administrative control contract on PostgreSQL
//! (`custos_core::migration::control::ControlAdmin`), mirroring the SQLite
//! shell's: the export reads the live tables only (`control_worlds`,
//! `control_signatures`, `control_fences`) in one snapshot, never
//! `control_migrations` or `control_staged`; a commit is one
//! [`Conn::write`](crate::conn::Conn::write) transaction that first takes
//! the catalog's head-row lock (the same lock every `apply` takes, so an
//! activation's imported worlds and a racing registration are ordered),
//! then loads and verifies the stored reservation, compares it with the
//! expected one, performs the effect through core's rules
//! (`decide_stage`, `decide_activation`) and writes the next reservation —
//! its canonical bytes, and once completed the canonical receipt and its
//! digest in their own columns. Every load decodes every stored piece
//! canonically and checks it (`decode_reservation`,
//! `decode_stored_receipt`, `StagedBundle::decode`), each bytea bounded by
//! core's `MAX_ENCODED_LEN` before it is copied: a missing, non-canonical,
//! digest-invalid or plan-mismatched piece fails closed. A read-only handle
//! refuses `commit_destination` before any statement is sent.

use custos_core::migration::control::{
    check_departures, check_transition, decide_activation, decide_stage, decode_reservation,
    decode_stored_receipt, encode_reservation, AdminEffect, AdminError, ControlAdmin,
    ControlSnapshot, StagedBundle,
};
use custos_core::migration::departure::Departures;
use custos_core::migration::{Destination, Reservation};
use custos_core::world::{WorldError, WorldSlot};
use postgres::Row;

use crate::conn::Tx;

use super::{apply_effect, load_slot, lock_head, PgControlCatalog};
use crate::conn::{db, Failure, TxError};

/// The bound on a stored reservation, receipt or staged bundle (the core
/// decoders' own bound, checked before the bytes are copied).
const MAX_ADMIN_BLOB: usize = custos_core::migration::MAX_ENCODED_LEN;

/// The bound on a stored migration id, plan digest or receipt digest.
const MAX_SHORT_TEXT: usize = 1024;

type AdminTx<T> = Result<T, TxError<AdminError>>;

impl From<AdminError> for TxError<AdminError> {
    fn from(e: AdminError) -> Self {
        TxError::Refused(e)
    }
}

fn stored(what: &'static str, detail: impl Into<String>) -> AdminError {
    AdminError::StoredEvidence {
        what,
        detail: detail.into(),
    }
}

/// A control-record error met by an administrative operation: a backend
/// failure stays one, anything else is invalid stored evidence.
fn world_err(e: WorldError) -> AdminError {
    match e {
        WorldError::BackendFault { reason } => AdminError::Backend { reason },
        WorldError::Unavailable { reason } => AdminError::Backend {
            reason: format!("unavailable: {reason}"),
        },
        other => stored("control records", other.to_string()),
    }
}

/// A world-level transaction error as an administrative one; server
/// failures pass through (a serialization retry stays retryable).
fn lift(e: TxError<WorldError>) -> TxError<AdminError> {
    match e {
        TxError::Failure(f) => TxError::Failure(f),
        TxError::Refused(w) => TxError::Refused(world_err(w)),
    }
}

/// A server failure as the port's error (`AdminError` has no unavailable
/// variant: an unreachable server is a backend fault saying so).
fn admin_failure(f: Failure) -> AdminError {
    AdminError::Backend {
        reason: f.to_string(),
    }
}

fn settle<T>(r: AdminTx<T>) -> Result<T, AdminError> {
    r.map_err(|e| e.settle(admin_failure))
}

/// A bytea column, its length checked before it is copied.
fn blob(r: &Row, col: usize, what: &'static str) -> Result<Option<Vec<u8>>, AdminError> {
    let v: Option<&[u8]> = r
        .try_get(col)
        .map_err(|e| stored(what, format!("not a bytea: {e}")))?;
    match v {
        Some(b) if b.len() > MAX_ADMIN_BLOB => Err(stored(
            what,
            format!("{} bytes exceeds {MAX_ADMIN_BLOB}", b.len()),
        )),
        other => Ok(other.map(<[u8]>::to_vec)),
    }
}

/// A short text column (an id or a hex digest), bounded.
fn short_text(r: &Row, col: usize, what: &'static str) -> Result<Option<String>, AdminError> {
    let v: Option<&str> = r
        .try_get(col)
        .map_err(|e| stored(what, format!("not a text: {e}")))?;
    match v {
        Some(t) if t.len() > MAX_SHORT_TEXT => Err(stored(what, "not a short text")),
        other => Ok(other.map(str::to_owned)),
    }
}

/// The stored destination, every piece verified.
fn load(tx: &mut Tx<'_>) -> AdminTx<Destination> {
    let rows = tx
        .query(
            "SELECT migration_id, plan_digest, reservation, receipt, receipt_digest FROM control_migrations",
            &[],
        )
        .map_err(db("load-reservation"))?;
    let row = match rows.as_slice() {
        [] => return Ok(Destination::default()),
        [row] => row,
        many => {
            return Err(stored(
                "reservation",
                format!("{} reservations; at most one is allowed", many.len()),
            )
            .into())
        }
    };
    let id = short_text(row, 0, "reservation")?;
    let digest = short_text(row, 1, "reservation")?;
    let bytes = blob(row, 2, "reservation")?;
    let receipt = blob(row, 3, "receipt")?;
    let receipt_digest = short_text(row, 4, "receipt")?;
    let r = decode_reservation(&bytes.ok_or_else(|| stored("reservation", "missing"))?)?;
    if id.as_deref() != Some(r.plan.migration_id.as_str()) {
        return Err(stored(
            "reservation",
            "the row's migration id is not the reservation's",
        )
        .into());
    }
    if digest.as_deref() != Some(r.plan_digest.hex().as_str()) {
        return Err(stored(
            "reservation",
            "the row's plan digest is not the reservation's",
        )
        .into());
    }
    match (&r.receipt, receipt) {
        (None, None) if receipt_digest.is_none() => {}
        (None, _) => {
            return Err(stored("receipt", "a receipt stored for an incomplete reservation").into())
        }
        (Some(_), None) => return Err(stored("receipt", "missing").into()),
        (Some(_), Some(bytes)) => {
            let s = decode_stored_receipt(&bytes, &r)?;
            if receipt_digest.as_deref() != Some(s.digest.hex().as_str()) {
                return Err(
                    stored("receipt", "the stored receipt digest is not the receipt's").into(),
                );
            }
        }
    }
    Ok(Destination {
        reservation: Some(r),
    })
}

/// The staged bundle, if any (at most one: one reservation).
fn load_staged(tx: &mut Tx<'_>) -> AdminTx<Option<StagedBundle>> {
    let rows = tx
        .query("SELECT bundle FROM control_staged", &[])
        .map_err(db("load-staged"))?;
    match rows.as_slice() {
        [] => Ok(None),
        [row] => {
            let bytes =
                blob(row, 0, "staged bundle")?.ok_or_else(|| stored("staged bundle", "missing"))?;
            Ok(Some(StagedBundle::decode(&bytes)?))
        }
        many => Err(stored(
            "staged bundle",
            format!("{} bundles; at most one is allowed", many.len()),
        )
        .into()),
    }
}

/// Live control records: world, signature and fence rows.
fn live_records(tx: &mut Tx<'_>) -> AdminTx<u64> {
    let n: i64 = tx
        .query_one(
            "SELECT (SELECT count(*) FROM control_worlds) + (SELECT count(*) FROM control_signatures) + (SELECT count(*) FROM control_fences)",
            &[],
        )
        .and_then(|r| r.try_get(0))
        .map_err(db("count-live"))?;
    Ok(u64::try_from(n).unwrap_or(0))
}

fn store(tx: &mut Tx<'_>, r: &Reservation) -> AdminTx<()> {
    let receipt = r.receipt.as_ref();
    // An abandoned reservation a new migration replaces goes, with any
    // bundle staged for it (core's `check_transition` admitted only that);
    // an abandoned one keeps nothing staged.
    let id = r.plan.migration_id.as_str();
    for sql in [
        "DELETE FROM control_staged WHERE migration_id <> $1",
        "DELETE FROM control_migrations WHERE migration_id <> $1",
    ] {
        tx.execute(sql, &[&id]).map_err(db("store-reservation"))?;
    }
    if r.status == custos_core::migration::Status::Abandoned {
        tx.execute("DELETE FROM control_staged", &[])
            .map_err(db("store-reservation"))?;
    }
    let bytes = encode_reservation(r);
    let receipt_bytes = receipt.map(|s| s.encode());
    let receipt_digest = receipt.map(|s| s.digest.hex());
    tx.execute(
        "INSERT INTO control_migrations (migration_id, plan_digest, reservation, receipt, receipt_digest)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (migration_id) DO UPDATE SET plan_digest = EXCLUDED.plan_digest,
           reservation = EXCLUDED.reservation, receipt = EXCLUDED.receipt,
           receipt_digest = EXCLUDED.receipt_digest",
        &[
            &r.plan.migration_id.as_str(),
            &r.plan_digest.hex(),
            &bytes,
            &receipt_bytes,
            &receipt_digest,
        ],
    )
    .map_err(db("store-reservation"))?;
    Ok(())
}

fn perform(tx: &mut Tx<'_>, next: &Destination, effect: &AdminEffect<'_>) -> AdminTx<()> {
    match effect {
        AdminEffect::None => Ok(()),
        AdminEffect::Stage { snapshot, floors } => {
            let existing = load_staged(tx)?;
            if let Some(b) = decide_stage(next, existing.as_ref(), snapshot, floors)? {
                tx.execute(
                    "INSERT INTO control_staged (migration_id, bundle) VALUES ($1, $2)",
                    &[&b.migration_id.as_str(), &b.encode()],
                )
                .map_err(db("stage"))?;
            }
            Ok(())
        }
        AdminEffect::Activate => {
            let staged = load_staged(tx)?;
            let live = live_records(tx)?;
            let slots = decide_activation(next, staged.as_ref(), live)?;
            for slot in &slots {
                for e in custos_core::world::effects(&WorldSlot::default(), slot) {
                    apply_effect(tx, &e).map_err(lift)?;
                }
            }
            Ok(())
        }
    }
}

impl ControlAdmin for PgControlCatalog {
    fn export_snapshot(&self) -> Result<ControlSnapshot, AdminError> {
        settle(self.conn.read(|tx| {
            let ids = tx
                .query(
                    "SELECT world_id FROM control_worlds ORDER BY world_id COLLATE \"C\"",
                    &[],
                )
                .map_err(db("export"))?
                .iter()
                .map(|r| r.try_get::<_, String>(0))
                .collect::<Result<Vec<_>, _>>()
                .map_err(db("export"))?;
            let slots = ids
                .iter()
                .map(|id| load_slot(tx, id))
                .collect::<Result<Vec<_>, _>>()
                .map_err(lift)?;
            Ok(ControlSnapshot::from_slots(&slots))
        }))
    }

    fn load_destination(&self) -> Result<Destination, AdminError> {
        settle(self.conn.read(load))
    }

    fn commit_destination(
        &self,
        expected: &Destination,
        next: &Destination,
        effect: AdminEffect<'_>,
    ) -> Result<(), AdminError> {
        self.refuse_read_only().map_err(world_err)?;
        settle(self.conn.write(|tx| {
            lock_head(tx).map_err(lift)?;
            let current = load(tx)?;
            if current != *expected {
                return Err(AdminError::Moved {
                    detail: "the stored reservation is not the expected one".into(),
                }
                .into());
            }
            let r = check_transition(&current, next)?;
            store(tx, r)?;
            perform(tx, next, &effect)
        }))
    }

    fn stored_receipt(&self) -> Result<Option<Vec<u8>>, AdminError> {
        settle(self.conn.read(|tx| {
            if load(tx)?.reservation.is_none() {
                return Ok(None);
            }
            let row = tx
                .query_opt("SELECT receipt FROM control_migrations", &[])
                .map_err(db("load-receipt"))?;
            Ok(match row {
                Some(r) => blob(&r, 0, "receipt")?,
                None => None,
            })
        }))
    }

    fn load_departures(&self) -> Result<Departures, AdminError> {
        settle(self.conn.read(load_departures))
    }

    fn commit_departures(
        &self,
        expected: &Departures,
        next: &Departures,
    ) -> Result<(), AdminError> {
        self.refuse_read_only().map_err(world_err)?;
        settle(self.conn.write(|tx| {
            lock_head(tx).map_err(lift)?;
            if load_departures(tx)? != *expected {
                return Err(AdminError::Moved {
                    detail: "the stored departure record is not the expected one".into(),
                }
                .into());
            }
            check_departures(next)?;
            tx.execute(
                "INSERT INTO control_departures (id, departures) VALUES (0, $1)
                 ON CONFLICT (id) DO UPDATE SET departures = EXCLUDED.departures",
                &[&next.encode()],
            )
            .map_err(db("store-departures"))?;
            Ok(())
        }))
    }
}

/// The stored departure record, decoded canonically (empty when none was
/// stored).
fn load_departures(tx: &mut Tx<'_>) -> AdminTx<Departures> {
    let row = tx
        .query_opt(
            "SELECT departures FROM control_departures WHERE id = 0",
            &[],
        )
        .map_err(db("load-departures"))?;
    let bytes = match row {
        Some(r) => blob(&r, 0, "departures")?,
        None => None,
    };
    match bytes {
        None => Ok(Departures::default()),
        Some(b) => Ok(Departures::decode(&b).map_err(|e| stored("departures", e))?),
    }
}
