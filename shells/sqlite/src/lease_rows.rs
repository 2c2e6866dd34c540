//! The writer lease in a session file: loading and storing the lease
//! machine's state (the `writer_lease` holder row and the `lease_fence`
//! high-water mark) and every lease transaction of this shell — the open's
//! admission and the offline claim ([`admit`]), renewal and its offline
//! re-verification ([`renew`]), the commit check ([`admit_commit`]), the
//! handle's release ([`release`], [`release_in`]) and the export's release
//! by owner ([`release_by_owner`]). The store ([`crate::store`]) and the
//! offline operations ([`crate::offline`]) both go through here; each step
//! loads the rows, calls [`lease::decide`] and writes the decision back in
//! the caller's transaction.

use custos_core::lease::{
    self, Decision, Fence, Lease, LeaseError, LeaseState, Outcome, Owner, Request,
};
use custos_core::Millis;
use rusqlite::{params, Connection, TransactionBehavior};

use crate::codec::{cells, u64_to_sql};
use crate::config::{Clock, OpenError};
use crate::fault::Fault;
use crate::schema;

/// The lease a handle or an offline operation holds: its pair, the
/// lifetime each renewal asks for and the clock it is judged by.
#[derive(Clone)]
pub(crate) struct Held {
    pub(crate) owner: Owner,
    pub(crate) fence: Fence,
    pub(crate) ttl: Millis,
    pub(crate) clock: Clock,
}

impl Held {
    /// A renewal of this exact pair, at the clock's reading now.
    pub(crate) fn renew_request(&self) -> Request {
        Request::Renew {
            owner: self.owner.clone(),
            fence: self.fence,
            now: (self.clock)(),
            ttl: self.ttl,
        }
    }

    /// The release of this exact pair.
    pub(crate) fn release_request(&self) -> Request {
        Request::Release {
            owner: self.owner.clone(),
            fence: self.fence,
        }
    }
}

/// Why a lease step did not complete: SQLite or a row failed, or the
/// machine refused. A refusal writes nothing.
#[derive(Debug)]
pub(crate) enum LeaseFailure {
    /// SQLite failed, or a row does not decode.
    Fault(Fault),
    /// [`lease::decide`] refused.
    Refused(LeaseError),
}

impl From<Fault> for LeaseFailure {
    fn from(f: Fault) -> Self {
        LeaseFailure::Fault(f)
    }
}

impl From<LeaseFailure> for OpenError {
    fn from(e: LeaseFailure) -> Self {
        match e {
            LeaseFailure::Fault(f) => f.into(),
            LeaseFailure::Refused(e) => OpenError::Lease(e),
        }
    }
}

/// The lease's columns as [`LeaseState::read`] names them: the holder's in
/// `writer_lease`, the high-water in `lease_fence` (0 when it has no row).
pub(crate) const COLUMNS: [&str; 4] = ["owner", "fence", "expires_at", "lease_fence.high_water"];

/// Reads [`LeaseState`] in one statement (both tables must exist).
pub(crate) fn load(c: &Connection) -> Result<LeaseState, Fault> {
    c.prepare_cached(
        "SELECT l.owner, l.fence, l.expires_at,
                COALESCE((SELECT high_water FROM lease_fence WHERE slot = 1), 0)
         FROM (SELECT 1) LEFT JOIN writer_lease AS l ON l.slot = 1",
    )
    .map_err(Fault::db("lease-load"))?
    .query_row([], |row| {
        Ok(LeaseState::read(&cells(row, "writer_lease"), 0, COLUMNS))
    })
    .map_err(Fault::db("lease-load"))?
    .map_err(Fault::from)
}

/// Applies a decision's effects, one statement each. A cleared holder
/// deletes only the pair it names.
pub(crate) fn store(c: &Connection, effects: &[lease::Effect]) -> Result<(), Fault> {
    for e in effects {
        match e {
            lease::Effect::PutHolder(l) => {
                c.prepare_cached(
                    "INSERT INTO writer_lease (slot, owner, fence, expires_at) VALUES (1, ?1, ?2, ?3)
                     ON CONFLICT (slot) DO UPDATE SET owner = excluded.owner,
                         fence = excluded.fence, expires_at = excluded.expires_at",
                )
                .map_err(Fault::db("lease-store"))?
                .execute(params![
                    l.owner.as_str(),
                    u64_to_sql(l.fence),
                    u64_to_sql(l.expires_at)
                ])
                .map_err(Fault::db("lease-store"))?;
            }
            lease::Effect::DeleteHolder { owner, fence } => {
                c.prepare_cached(
                    "DELETE FROM writer_lease WHERE slot = 1 AND owner = ?1 AND fence = ?2",
                )
                .map_err(Fault::db("lease-store"))?
                .execute(params![owner.as_str(), u64_to_sql(*fence)])
                .map_err(Fault::db("lease-store"))?;
            }
            lease::Effect::SetHighWater(high) => {
                c.prepare_cached(
                    "INSERT INTO lease_fence (slot, high_water) VALUES (1, ?1)
                     ON CONFLICT (slot) DO UPDATE SET high_water = excluded.high_water",
                )
                .map_err(Fault::db("lease-store"))?
                .execute(params![u64_to_sql(*high)])
                .map_err(Fault::db("lease-store"))?;
            }
        }
    }
    Ok(())
}

/// Decides `req` from `prev` (the state this transaction read) and writes
/// the decision back. A refusal writes nothing.
fn decide_from(c: &Connection, prev: &LeaseState, req: &Request) -> Result<Decision, LeaseFailure> {
    let d = lease::decide(prev, req).map_err(LeaseFailure::Refused)?;
    store(c, &d.effects)?;
    Ok(d)
}

/// Loads the lease state, decides `req` and writes the decision back.
fn decide_loaded(c: &Connection, req: &Request) -> Result<Decision, LeaseFailure> {
    decide_from(c, &load(c)?, req)
}

/// The holder a granting decision left, or corruption naming `what`.
fn granted(d: Decision, what: &str) -> Result<Lease, Fault> {
    d.next
        .holder
        .ok_or_else(|| Fault::Corrupt(format!("{what} lease has no holder")))
}

/// One `BEGIN IMMEDIATE` transaction that checks the file with `check` and
/// acquires the lease as `owner`: the open's admission and the offline
/// claim. `check` (the file's version and kind) and a held lease refuse by
/// rolling back, so a refused file is byte-untouched; a file that has no
/// lease tables yet (a new one) gets them only past every refusal, in the
/// same transaction. Answers what `check` found and the lease now held.
pub(crate) fn admit<T, E>(
    conn: &mut Connection,
    owner: &Owner,
    ttl: Millis,
    clock: &Clock,
    check: impl FnOnce(&Connection) -> Result<T, E>,
) -> Result<(T, Held), E>
where
    E: From<Fault> + From<LeaseFailure>,
{
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(Fault::db("admission-begin"))?;
    let checked = check(&tx)?;
    let has_lease_tables: bool = tx
        .query_row(
            "SELECT count(*) = 2 FROM sqlite_master WHERE type = 'table' AND name IN ('writer_lease', 'lease_fence')",
            [],
            |r| r.get(0),
        )
        .map_err(Fault::db("admission-schema"))?;
    let prev = if has_lease_tables {
        load(&tx)?
    } else {
        LeaseState::default()
    };
    let req = Request::Acquire {
        owner: owner.clone(),
        now: clock(),
        ttl,
    };
    let d = lease::decide(&prev, &req).map_err(LeaseFailure::Refused)?;
    // Past every refusal: the first write of this transaction.
    if !has_lease_tables {
        tx.execute_batch(schema::LEASE_DDL)
            .map_err(Fault::db("admission-ddl"))?;
    }
    store(&tx, &d.effects)?;
    tx.commit().map_err(Fault::db("admission-commit"))?;
    let lease = granted(d, "an acquired")?;
    Ok((
        checked,
        Held {
            owner: owner.clone(),
            fence: lease.fence,
            ttl,
            clock: clock.clone(),
        },
    ))
}

/// Decides the renewal `req` ([`Held::renew_request`]) in the caller's
/// transaction and answers the renewed lease. The offline rewrite decides
/// the same request twice: in the original (its re-verification) and in
/// the copy, whose rows are the original's as of the cut.
pub(crate) fn renew(c: &Connection, req: &Request) -> Result<Lease, LeaseFailure> {
    let d = decide_loaded(c, req)?;
    Ok(granted(d, "a renewed")?)
}

/// Checks and renews `held` for a commit in the caller's transaction,
/// deciding from `prev` (the lease state this transaction read).
pub(crate) fn admit_commit(
    c: &Connection,
    held: &Held,
    prev: &LeaseState,
) -> Result<(), LeaseFailure> {
    let req = Request::Commit {
        owner: held.owner.clone(),
        fence: held.fence,
        now: (held.clock)(),
        ttl: held.ttl,
    };
    decide_from(c, prev, &req).map(drop)
}

/// Releases `held`'s exact pair in the caller's transaction (the pair no
/// longer holding the slot is [`Outcome::NotHeld`], nothing deleted).
pub(crate) fn release_in(c: &Connection, held: &Held) -> Result<Outcome, Fault> {
    match decide_loaded(c, &held.release_request()) {
        Ok(d) => Ok(d.outcome),
        Err(LeaseFailure::Fault(f)) => Err(f),
        Err(LeaseFailure::Refused(e)) => Err(Fault::Corrupt(format!("release refused: {e}"))),
    }
}

/// Deletes `held`'s own `(owner, fence)` pair, if it still holds the slot,
/// in its own `BEGIN IMMEDIATE` transaction.
pub(crate) fn release(conn: &mut Connection, held: &Held) -> Result<(), Fault> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(Fault::db("release-begin"))?;
    release_in(&tx, held)?;
    tx.commit().map_err(Fault::db("release-commit"))?;
    Ok(())
}

/// Releases `owner`'s lease under whichever fence
/// ([`Request::ReleaseByOwner`]) in its own `BEGIN IMMEDIATE` transaction;
/// another owner's lease is left alone. Answers whether a lease was
/// deleted.
pub(crate) fn release_by_owner(conn: &mut Connection, owner: &Owner) -> Result<bool, LeaseFailure> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(Fault::db("release-begin"))?;
    let d = decide_loaded(
        &tx,
        &Request::ReleaseByOwner {
            owner: owner.clone(),
        },
    )?;
    tx.commit().map_err(Fault::db("release-commit"))?;
    Ok(d.outcome == Outcome::Released)
}
