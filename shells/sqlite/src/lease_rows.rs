//! Loading and storing the lease machine's state: the `writer_lease` holder
//! row and the `lease_fence` high-water mark.

use custos_core::lease::{Lease, LeaseState, Owner};
use rusqlite::{params, Connection, OptionalExtension};

use crate::codec::{int, text, u64_from_sql, u64_to_sql};
use crate::fault::Fault;

/// Reads [`LeaseState`] (both tables must exist).
pub(crate) fn load(c: &Connection) -> Result<LeaseState, Fault> {
    let holder = c
        .prepare_cached("SELECT owner, fence, expires_at FROM writer_lease WHERE slot = 1")
        .map_err(Fault::db("lease-load"))?
        .query_row([], |row| Ok(decode_holder(row)))
        .optional()
        .map_err(Fault::db("lease-load"))?
        .transpose()?;
    let high = c
        .prepare_cached("SELECT high_water FROM lease_fence WHERE slot = 1")
        .map_err(Fault::db("lease-load"))?
        .query_row([], |row| Ok(int(row, 0, "lease_fence")))
        .optional()
        .map_err(Fault::db("lease-load"))?
        .transpose()?
        .map_or(0, u64_from_sql);
    Ok(LeaseState {
        holder,
        fence_high_water: high,
    })
}

fn decode_holder(row: &rusqlite::Row<'_>) -> Result<Lease, Fault> {
    let owner = Owner::new(text(row, 0, "writer_lease")?)
        .map_err(|e| Fault::Corrupt(format!("writer_lease owner: {e}")))?;
    Ok(Lease {
        owner,
        fence: u64_from_sql(int(row, 1, "writer_lease")?),
        expires_at: u64_from_sql(int(row, 2, "writer_lease")?),
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
                c.prepare_cached("DELETE FROM writer_lease WHERE slot = 1 AND owner = ?1 AND fence = ?2")
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
