//! Integer encodings and total row decoding.

use custos_core::storage::{Kind, Payload, RecordId};
use rusqlite::types::ValueRef;
use rusqlite::Row;

use crate::fault::Fault;

const FLIP: u64 = 1 << 63;

/// A seq as stored: order-preserving (`seq XOR 2^63` as `i64`).
pub(crate) fn seq_to_sql(seq: u64) -> i64 {
    i64::from_ne_bytes((seq ^ FLIP).to_ne_bytes())
}

/// The inverse of [`seq_to_sql`]; total.
pub(crate) fn seq_from_sql(v: i64) -> u64 {
    u64::from_ne_bytes(v.to_ne_bytes()) ^ FLIP
}

/// Any other `u64` as stored: bit-for-bit.
pub(crate) fn u64_to_sql(v: u64) -> i64 {
    i64::from_ne_bytes(v.to_ne_bytes())
}

/// The inverse of [`u64_to_sql`]; total.
pub(crate) fn u64_from_sql(v: i64) -> u64 {
    u64::from_ne_bytes(v.to_ne_bytes())
}

fn corrupt(table: &str, col: usize, what: impl std::fmt::Display) -> Fault {
    Fault::Corrupt(format!("{table} column {col}: {what}"))
}

/// An `INTEGER` column (any other storage class is corruption).
pub(crate) fn int(row: &Row<'_>, col: usize, table: &str) -> Result<i64, Fault> {
    match row.get_ref(col).map_err(|e| corrupt(table, col, e))? {
        ValueRef::Integer(v) => Ok(v),
        other => Err(corrupt(
            table,
            col,
            format!("expected an integer, found {:?}", other.data_type()),
        )),
    }
}

/// A nullable `INTEGER` column.
pub(crate) fn opt_int(row: &Row<'_>, col: usize, table: &str) -> Result<Option<i64>, Fault> {
    match row.get_ref(col).map_err(|e| corrupt(table, col, e))? {
        ValueRef::Null => Ok(None),
        ValueRef::Integer(v) => Ok(Some(v)),
        other => Err(corrupt(
            table,
            col,
            format!("expected an integer or null, found {:?}", other.data_type()),
        )),
    }
}

/// A seq column.
pub(crate) fn seq(row: &Row<'_>, col: usize, table: &str) -> Result<u64, Fault> {
    int(row, col, table).map(seq_from_sql)
}

/// A plain `u64` column.
pub(crate) fn u64c(row: &Row<'_>, col: usize, table: &str) -> Result<u64, Fault> {
    int(row, col, table).map(u64_from_sql)
}

/// A `TEXT` column, validated as UTF-8.
pub(crate) fn text<'r>(row: &'r Row<'_>, col: usize, table: &str) -> Result<&'r str, Fault> {
    match row.get_ref(col).map_err(|e| corrupt(table, col, e))? {
        ValueRef::Text(b) => std::str::from_utf8(b).map_err(|e| corrupt(table, col, e)),
        other => Err(corrupt(
            table,
            col,
            format!("expected text, found {:?}", other.data_type()),
        )),
    }
}

/// A nullable `TEXT` column.
pub(crate) fn opt_text<'r>(
    row: &'r Row<'_>,
    col: usize,
    table: &str,
) -> Result<Option<&'r str>, Fault> {
    match row.get_ref(col).map_err(|e| corrupt(table, col, e))? {
        ValueRef::Null => Ok(None),
        ValueRef::Text(b) => std::str::from_utf8(b)
            .map(Some)
            .map_err(|e| corrupt(table, col, e)),
        other => Err(corrupt(
            table,
            col,
            format!("expected text or null, found {:?}", other.data_type()),
        )),
    }
}

/// A record id column.
pub(crate) fn record_id(row: &Row<'_>, col: usize, table: &str) -> Result<RecordId, Fault> {
    RecordId::try_from(text(row, col, table)?).map_err(|e| corrupt(table, col, e))
}

/// A nullable record id column.
pub(crate) fn opt_record_id(
    row: &Row<'_>,
    col: usize,
    table: &str,
) -> Result<Option<RecordId>, Fault> {
    opt_text(row, col, table)?
        .map(|s| RecordId::try_from(s).map_err(|e| corrupt(table, col, e)))
        .transpose()
}

/// A kind column.
pub(crate) fn kind(row: &Row<'_>, col: usize, table: &str) -> Result<Kind, Fault> {
    Kind::try_from(text(row, col, table)?).map_err(|e| corrupt(table, col, e))
}

/// A `BLOB` payload column: its length is checked before it is copied.
pub(crate) fn payload(row: &Row<'_>, col: usize, table: &str) -> Result<Payload, Fault> {
    match row.get_ref(col).map_err(|e| corrupt(table, col, e))? {
        ValueRef::Blob(b) => Payload::try_from(b).map_err(|e| corrupt(table, col, e)),
        other => Err(corrupt(
            table,
            col,
            format!("expected a blob, found {:?}", other.data_type()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seq_encoding_is_an_order_preserving_bijection() {
        let samples = [
            0,
            1,
            2,
            100,
            i64::MAX as u64,
            (i64::MAX as u64) + 1,
            u64::MAX - 1,
            u64::MAX,
        ];
        for w in samples.windows(2) {
            assert!(seq_to_sql(w[0]) < seq_to_sql(w[1]));
        }
        for s in samples {
            assert_eq!(seq_from_sql(seq_to_sql(s)), s);
            assert_eq!(u64_from_sql(u64_to_sql(s)), s);
        }
        for v in [i64::MIN, -1, 0, 1, i64::MAX] {
            assert_eq!(seq_to_sql(seq_from_sql(v)), v);
        }
    }
}
