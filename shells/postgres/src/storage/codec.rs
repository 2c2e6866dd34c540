//! The storage tables' names and head columns. Every stored row is read
//! by core's `storage::stored` readers over [`crate::cols`] (each text and
//! byte column bounded before it is validated or copied, every failure a
//! [`Failure::Corrupt`] naming the table, the row and the column); what is
//! left here reads the few columns no reader covers (a branch position, a
//! query plan line).

use custos_core::lease::LeaseState;
use custos_core::storage::{Seq, Stats};
use postgres::types::FromSql;
use postgres::Row;

use crate::cols::cells;
use crate::conn::Failure;

/// The sessions table (the head rows).
pub(crate) const SESSIONS: &str = "storage_sessions";
/// The entries table.
pub(crate) const ENTRIES: &str = "storage_entries";
/// The usage ledger.
pub(crate) const USAGE: &str = "storage_usage";
/// The registers.
pub(crate) const REGISTERS: &str = "storage_registers";
/// The branch segments.
pub(crate) const BRANCH_META: &str = "storage_branch_meta";
/// The branch index rows.
pub(crate) const BRANCH_ENTRIES: &str = "storage_branch_entries";

/// The bound on a text column no core grammar bounds (a query plan line).
pub(crate) const MAX_TEXT_LEN: usize = 1024 * 1024;

/// A corrupt column.
pub(crate) fn corrupt(table: &str, col: &str, what: impl std::fmt::Display) -> Failure {
    Failure::Corrupt(format!("{table}.{col}: {what}"))
}

/// Column `i` as `T`, a type mismatch or a NULL in a NOT NULL reading being
/// corruption of `table.col`.
pub(crate) fn get<'r, T: FromSql<'r>>(
    row: &'r Row,
    i: usize,
    table: &str,
    col: &str,
) -> Result<T, Failure> {
    row.try_get::<_, T>(i).map_err(|e| corrupt(table, col, e))
}

/// A `u64` as the decimal text a `$n::text::numeric` parameter takes.
pub(crate) fn num(v: u64) -> String {
    v.to_string()
}

/// A `bigint` used as a branch number (segment or position): any value,
/// checked by the walk.
pub(crate) fn int(row: &Row, i: usize, table: &str, col: &str) -> Result<i64, Failure> {
    get(row, i, table, col)
}

/// A text column of at most `max` bytes (measured before it is copied).
pub(crate) fn text<'r>(
    row: &'r Row,
    i: usize,
    table: &str,
    col: &str,
    max: usize,
) -> Result<&'r str, Failure> {
    let s: &str = get(row, i, table, col)?;
    if s.len() > max {
        return Err(corrupt(
            table,
            col,
            format!("{} bytes of text exceed the bound of {max}", s.len()),
        ));
    }
    Ok(s)
}

/// The head columns of a session row, in [`decode_lease`] then
/// [`decode_head`] order.
pub(crate) const HEAD_COLS: &str = "lease_owner, lease_fence, lease_expires_at, fence_high_water,
     next_seq::text, usage_rows::text, input_tokens::text, output_tokens::text,
     cache_read_tokens::text, cache_write_tokens::text, cost_micros::text";

/// The lease's columns in a head row, as [`LeaseState::read`] names them.
const LEASE_COLUMNS: [&str; 4] = [
    "lease_owner",
    "lease_fence",
    "lease_expires_at",
    "fence_high_water",
];

/// Columns 0..=3 of `session`'s head row as the lease machine's state.
pub(crate) fn decode_lease(row: &Row, session: &str) -> Result<LeaseState, Failure> {
    let mut c = cells(row, SESSIONS);
    c.at(session);
    Ok(LeaseState::read(&c, 0, LEASE_COLUMNS)?)
}

/// Columns 4..=10 of `session`'s head row: the next seq and the stats.
pub(crate) fn decode_head(row: &Row, session: &str) -> Result<(Seq, Stats), Failure> {
    let mut c = cells(row, SESSIONS);
    c.at(session);
    Ok((c.seq(4, "next_seq")?, Stats::read(&c, 5)?))
}
