//! Total decoding of stored rows: every column is read by type, every text
//! and byte column is measured against its bound before it is validated or
//! copied, and every failure is a [`Failure::Corrupt`] naming the table and
//! the column — never a panic, never an absent row.

use custos_core::lease::{Lease, LeaseState, Owner, MAX_OWNER_LEN};
use custos_core::storage::types::{MAX_ID_LEN, MAX_KIND_LEN, MAX_PAYLOAD_LEN};
use custos_core::storage::{Kind, Payload, RecordId, Seq, Stats, UsageFigures};
use postgres::types::FromSql;
use postgres::Row;

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

/// The longest decimal text a `u64` column may hold before it is parsed.
const MAX_U64_TEXT: usize = 20;

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

/// A `u64` stored as `numeric(20,0)` and selected as `col::text`.
pub(crate) fn u64_text(row: &Row, i: usize, table: &str, col: &str) -> Result<u64, Failure> {
    let s: &str = get(row, i, table, col)?;
    parse_u64(s).ok_or_else(|| {
        if s.len() > MAX_U64_TEXT + 1 {
            corrupt(
                table,
                col,
                format!("a {}-character number is no u64", s.len()),
            )
        } else {
            corrupt(table, col, format!("{s:?} is no u64"))
        }
    })
}

/// Parses plain decimal digits (no sign, no point) into a `u64`.
fn parse_u64(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > MAX_U64_TEXT || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// A `u64` as the decimal text a `$n::text::numeric` parameter takes.
pub(crate) fn num(v: u64) -> String {
    v.to_string()
}

/// A `bigint` that must not be negative.
pub(crate) fn nonneg(row: &Row, i: usize, table: &str, col: &str) -> Result<u64, Failure> {
    let v: i64 = get(row, i, table, col)?;
    u64::try_from(v).map_err(|_| corrupt(table, col, format!("negative value {v}")))
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

/// A nullable text column of at most `max` bytes.
pub(crate) fn opt_text<'r>(
    row: &'r Row,
    i: usize,
    table: &str,
    col: &str,
    max: usize,
) -> Result<Option<&'r str>, Failure> {
    let s: Option<&str> = get(row, i, table, col)?;
    match s {
        Some(s) if s.len() > max => Err(corrupt(
            table,
            col,
            format!("{} bytes of text exceed the bound of {max}", s.len()),
        )),
        other => Ok(other),
    }
}

/// A record id column.
pub(crate) fn record_id(row: &Row, i: usize, table: &str, col: &str) -> Result<RecordId, Failure> {
    RecordId::try_from(text(row, i, table, col, MAX_ID_LEN)?).map_err(|e| corrupt(table, col, e))
}

/// A nullable record id column.
pub(crate) fn opt_record_id(
    row: &Row,
    i: usize,
    table: &str,
    col: &str,
) -> Result<Option<RecordId>, Failure> {
    opt_text(row, i, table, col, MAX_ID_LEN)?
        .map(|s| RecordId::try_from(s).map_err(|e| corrupt(table, col, e)))
        .transpose()
}

/// A kind column.
pub(crate) fn kind(row: &Row, i: usize, table: &str, col: &str) -> Result<Kind, Failure> {
    Kind::try_from(text(row, i, table, col, MAX_KIND_LEN)?).map_err(|e| corrupt(table, col, e))
}

/// A `bytea` payload column, measured before it is copied.
pub(crate) fn payload(row: &Row, i: usize, table: &str, col: &str) -> Result<Payload, Failure> {
    let b: &[u8] = get(row, i, table, col)?;
    if b.len() > MAX_PAYLOAD_LEN {
        return Err(corrupt(
            table,
            col,
            format!("{} bytes exceed the payload bound", b.len()),
        ));
    }
    Payload::try_from(b).map_err(|e| corrupt(table, col, e))
}

/// Prefixes a row decoder's corruption with the row it was decoding.
pub(crate) fn at_row(what: impl std::fmt::Display) -> impl FnOnce(Failure) -> Failure {
    move |f| match f {
        Failure::Corrupt(d) => Failure::Corrupt(format!("{what}: {d}")),
        other => other,
    }
}

/// The head columns of a session row, in [`decode_lease`] then
/// [`decode_head`] order.
pub(crate) const HEAD_COLS: &str = "lease_owner, lease_fence, lease_expires_at, fence_high_water,
     next_seq::text, usage_rows::text, input_tokens::text, output_tokens::text,
     cache_read_tokens::text, cache_write_tokens::text, cost_micros::text";

/// Columns 0..=3 of a head row as the lease machine's state.
pub(crate) fn decode_lease(row: &Row) -> Result<LeaseState, Failure> {
    let t = SESSIONS;
    let high = nonneg(row, 3, t, "fence_high_water")?;
    let owner = opt_text(row, 0, t, "lease_owner", MAX_OWNER_LEN)?;
    let fence: Option<i64> = get(row, 1, t, "lease_fence")?;
    let expires: Option<i64> = get(row, 2, t, "lease_expires_at")?;
    let holder = match (owner, fence, expires) {
        (None, None, None) => None,
        (Some(o), Some(_), Some(_)) => Some(Lease {
            owner: Owner::new(o).map_err(|e| corrupt(t, "lease_owner", e))?,
            fence: nonneg(row, 1, t, "lease_fence")?,
            expires_at: nonneg(row, 2, t, "lease_expires_at")?,
        }),
        _ => return Err(corrupt(t, "lease_owner", "a partial lease holder")),
    };
    Ok(LeaseState {
        holder,
        fence_high_water: high,
    })
}

/// Columns 4..=10 of a head row: the next seq and the stats.
pub(crate) fn decode_head(row: &Row) -> Result<(Seq, Stats), Failure> {
    let t = SESSIONS;
    Ok((
        u64_text(row, 4, t, "next_seq")?,
        Stats {
            usage_rows: u64_text(row, 5, t, "usage_rows")?,
            totals: UsageFigures {
                input_tokens: u64_text(row, 6, t, "input_tokens")?,
                output_tokens: u64_text(row, 7, t, "output_tokens")?,
                cache_read_tokens: u64_text(row, 8, t, "cache_read_tokens")?,
                cache_write_tokens: u64_text(row, 9, t, "cache_write_tokens")?,
                cost_micros: u64_text(row, 10, t, "cost_micros")?,
            },
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn u64_text_parses_exactly_the_u64_range() {
        assert_eq!(parse_u64("0"), Some(0));
        assert_eq!(parse_u64("18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64("18446744073709551616"), None);
        assert_eq!(parse_u64("-1"), None);
        assert_eq!(parse_u64("+1"), None);
        assert_eq!(parse_u64("1.0"), None);
        assert_eq!(parse_u64(""), None);
        assert_eq!(parse_u64("000000000000000000001"), None);
    }
}
