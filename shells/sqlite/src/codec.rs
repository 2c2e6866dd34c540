//! Integer encodings and the SQLite row as core's `Columns` ([`Lite`]):
//! every stored row is read by core's readers through it, each text and
//! blob column bounded before it is validated or copied. What is left here
//! reads the few columns no reader covers ([`text_ref`], [`int`]).

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

/// A plain `u64` column.
pub(crate) fn u64c(row: &Row<'_>, col: usize, table: &str) -> Result<u64, Fault> {
    int(row, col, table).map(u64_from_sql)
}

/// The bound on a stored text column that no core grammar bounds (a
/// projected session id, a query plan line): 1 MiB.
pub(crate) const MAX_TEXT_LEN: usize = 1024 * 1024;

/// Column `col` as a text reference of at most `max` bytes: the length is
/// checked before the bytes are validated as UTF-8 or copied. `Ok(None)` is
/// SQL `NULL`; `Err` describes the breach (for the caller's typed error,
/// which names the table and row).
pub(crate) fn text_ref<'r>(
    row: &'r Row<'_>,
    col: usize,
    max: usize,
) -> Result<Option<&'r str>, String> {
    match row.get_ref(col).map_err(|e| e.to_string())? {
        ValueRef::Null => Ok(None),
        ValueRef::Text(b) if b.len() > max => Err(format!(
            "{} bytes of text exceed the bound of {max}",
            b.len()
        )),
        ValueRef::Text(b) => std::str::from_utf8(b)
            .map(Some)
            .map_err(|e| format!("text is not UTF-8: {e}")),
        other => Err(format!("expected text, found {:?}", other.data_type())),
    }
}

/// A `TEXT` column of at most `max` bytes, validated as UTF-8 (the length
/// is checked first).
pub(crate) fn text<'r>(
    row: &'r Row<'_>,
    col: usize,
    table: &str,
    max: usize,
) -> Result<&'r str, Fault> {
    text_ref(row, col, max)
        .map_err(|e| corrupt(table, col, e))?
        .ok_or_else(|| corrupt(table, col, "expected text, found Null"))
}

/// A nullable `TEXT` column of at most `max` bytes.
pub(crate) fn opt_text<'r>(
    row: &'r Row<'_>,
    col: usize,
    table: &str,
    max: usize,
) -> Result<Option<&'r str>, Fault> {
    text_ref(row, col, max).map_err(|e| corrupt(table, col, e))
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

/// A SQLite row's columns as core's
/// [`Columns`](custos_core::columns::Columns), borrowed: a text is bounded
/// ([`Cells`](custos_core::columns::Cells)) before it is checked as UTF-8
/// or copied, and a `u64` is stored bit for bit ([`u64_from_sql`]).
#[derive(Clone, Copy)]
pub(crate) struct Lite<'a, 'r>(&'a Row<'r>);

impl custos_core::columns::Columns for Lite<'_, '_> {
    fn text(&self, col: usize) -> Result<Option<&[u8]>, String> {
        match self.0.get_ref(col).map_err(|e| e.to_string())? {
            ValueRef::Null => Ok(None),
            ValueRef::Text(b) => Ok(Some(b)),
            other => Err(format!("expected text, found {:?}", other.data_type())),
        }
    }

    fn int(&self, col: usize) -> Result<Option<i64>, String> {
        match self.0.get_ref(col).map_err(|e| e.to_string())? {
            ValueRef::Null => Ok(None),
            ValueRef::Integer(i) => Ok(Some(i)),
            other => Err(format!(
                "expected an integer, found {:?}",
                other.data_type()
            )),
        }
    }

    fn unsigned(&self, col: usize) -> Result<Option<u64>, String> {
        Ok(self.int(col)?.map(u64_from_sql))
    }

    /// A seq, kept order-preserving ([`seq_from_sql`]).
    fn seq(&self, col: usize) -> Result<Option<u64>, String> {
        Ok(self.int(col)?.map(seq_from_sql))
    }

    fn blob(&self, col: usize) -> Result<Option<&[u8]>, String> {
        match self.0.get_ref(col).map_err(|e| e.to_string())? {
            ValueRef::Null => Ok(None),
            ValueRef::Blob(b) => Ok(Some(b)),
            other => Err(format!("expected a blob, found {:?}", other.data_type())),
        }
    }
}

/// The cells of `r`, a row of `table`.
pub(crate) fn cells<'a, 'r>(
    r: &'a Row<'r>,
    table: &'static str,
) -> custos_core::columns::Cells<Lite<'a, 'r>> {
    custos_core::columns::Cells::new(Lite(r), table)
}

/// The cells of `r` from position `base` on, a row of `table` (a later
/// table of a join).
pub(crate) fn cells_from<'a, 'r>(
    r: &'a Row<'r>,
    table: &'static str,
    base: usize,
) -> custos_core::columns::Cells<Lite<'a, 'r>> {
    custos_core::columns::Cells::joined(Lite(r), table, base)
}
