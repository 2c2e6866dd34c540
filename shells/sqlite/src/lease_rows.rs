//! Loading and storing the lease machine's state: the `writer_lease` holder
//! row and the `lease_fence` high-water mark.

use custos_core::lease::{Lease, LeaseState, Owner, MAX_OWNER_LEN};
use rusqlite::{params, Connection};

use crate::codec::{int, opt_int, opt_text, u64_from_sql, u64_to_sql};
use crate::fault::Fault;

/// Reads [`LeaseState`] in one statement (both tables must exist).
pub(crate) fn load(c: &Connection) -> Result<LeaseState, Fault> {
    c.prepare_cached(
        "SELECT (SELECT high_water FROM lease_fence WHERE slot = 1), l.owner, l.fence, l.expires_at
         FROM (SELECT 1) LEFT JOIN writer_lease AS l ON l.slot = 1",
    )
    .map_err(Fault::db("lease-load"))?
    .query_row([], |row| Ok(decode(row)))
    .map_err(Fault::db("lease-load"))?
}

/// Decodes columns 0..=3 of `row` as [`load`] selects them (fence high
/// water, owner, fence, expiry).
pub(crate) fn decode(row: &rusqlite::Row<'_>) -> Result<LeaseState, Fault> {
    let t = "writer_lease";
    let high = opt_int(row, 0, "lease_fence")?.map_or(0, u64_from_sql);
    let holder = match opt_text(row, 1, t, MAX_OWNER_LEN)? {
        None => None,
        Some(owner) => Some(Lease {
            owner: Owner::new(owner)
                .map_err(|e| Fault::Corrupt(format!("writer_lease owner: {e}")))?,
            fence: u64_from_sql(int(row, 2, t)?),
            expires_at: u64_from_sql(int(row, 3, t)?),
        }),
    };
    Ok(LeaseState {
        holder,
        fence_high_water: high,
    })
}

/// Writes `next` back, touching only what differs from `prev` (the state it
/// was decided from). A cleared holder deletes only the previous pair.
pub(crate) fn store(c: &Connection, prev: &LeaseState, next: &LeaseState) -> Result<(), Fault> {
    if prev.holder != next.holder {
        match (&prev.holder, &next.holder) {
            (_, Some(l)) => {
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
            (Some(p), None) => {
                c.prepare_cached(
                    "DELETE FROM writer_lease WHERE slot = 1 AND owner = ?1 AND fence = ?2",
                )
                .map_err(Fault::db("lease-store"))?
                .execute(params![p.owner.as_str(), u64_to_sql(p.fence)])
                .map_err(Fault::db("lease-store"))?;
            }
            (None, None) => {}
        }
    }
    if prev.fence_high_water != next.fence_high_water {
        c.prepare_cached(
            "INSERT INTO lease_fence (slot, high_water) VALUES (1, ?1)
             ON CONFLICT (slot) DO UPDATE SET high_water = excluded.high_water",
        )
        .map_err(Fault::db("lease-store"))?
        .execute(params![u64_to_sql(next.fence_high_water)])
        .map_err(Fault::db("lease-store"))?;
    }
    Ok(())
}
