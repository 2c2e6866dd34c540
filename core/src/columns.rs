//! A stored row's columns, read the same way by every backend over rows.
//!
//! A backend implements [`Columns`] once for its row type (a column as
//! borrowed text, an integer or a boolean, or why it is none of these).
//! Every decoder then reads through [`Cells`], which holds the rules a
//! stored value meets before it reaches a machine's `Stored*` checks:
//!
//! - a text is bounded before it is validated or copied (a value longer
//!   than any the machine writes is refused, never allocated);
//! - a `NOT NULL` column that is null and a value of the wrong type are
//!   refused; an unsigned value is read in the backend's own encoding
//!   ([`Columns::unsigned`]);
//! - every refusal is a [`ColumnError`] naming the table, the row (by its
//!   key, once the key is read) and the column, which each machine turns
//!   into its own typed error.

use std::fmt;

/// The bound on a stored word (a state, status, kind, role or mode): every
/// word the machines write is shorter.
pub const MAX_WORD_LEN: usize = 64;

/// The columns of one stored row, by position.
pub trait Columns {
    /// Column `col` as the bytes of a text, borrowed from the row (nothing
    /// copied, not yet checked as UTF-8: [`Cells`] bounds them first);
    /// `Ok(None)` is SQL `NULL`; `Err` says why it is not text.
    fn text(&self, col: usize) -> Result<Option<&[u8]>, String>;

    /// Column `col` as a 64-bit signed integer; `Ok(None)` is SQL `NULL`.
    fn int(&self, col: usize) -> Result<Option<i64>, String>;

    /// Column `col` as a `u64` in this backend's encoding. By default a
    /// negative integer is refused (a store that cannot hold a `u64` above
    /// `i64::MAX` never writes one); a store that keeps a `u64` bit for bit
    /// in a signed column answers its own decoding.
    fn unsigned(&self, col: usize) -> Result<Option<u64>, String> {
        self.int(col)?
            .map(|v| u64::try_from(v).map_err(|_| format!("negative value {v}")))
            .transpose()
    }

    /// Column `col` as a sequence number in this backend's encoding (an
    /// order-preserving one, where the backend keeps sequence numbers so);
    /// by default as [`Columns::unsigned`].
    fn seq(&self, col: usize) -> Result<Option<u64>, String> {
        self.unsigned(col)
    }

    /// Column `col` as a boolean; `Ok(None)` is SQL `NULL`. By default an
    /// integer, true when it is not 0.
    fn flag(&self, col: usize) -> Result<Option<bool>, String> {
        Ok(self.int(col)?.map(|i| i != 0))
    }

    /// Column `col` as bytes, borrowed from the row (nothing copied);
    /// `Ok(None)` is SQL `NULL`.
    fn blob(&self, col: usize) -> Result<Option<&[u8]>, String>;
}

/// A stored column that breaks its rule.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ColumnError {
    /// The table.
    pub table: &'static str,
    /// The row, by its key (`?` before the key is read).
    pub row: String,
    /// The column.
    pub column: &'static str,
    /// What is wrong with it.
    pub detail: String,
}

impl fmt::Display for ColumnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} row {}: column {}: {}",
            self.table, self.row, self.column, self.detail
        )
    }
}

impl std::error::Error for ColumnError {}

impl<T: Columns + ?Sized> Columns for &T {
    fn text(&self, col: usize) -> Result<Option<&[u8]>, String> {
        (**self).text(col)
    }

    fn int(&self, col: usize) -> Result<Option<i64>, String> {
        (**self).int(col)
    }

    fn unsigned(&self, col: usize) -> Result<Option<u64>, String> {
        (**self).unsigned(col)
    }

    fn seq(&self, col: usize) -> Result<Option<u64>, String> {
        (**self).seq(col)
    }

    fn flag(&self, col: usize) -> Result<Option<bool>, String> {
        (**self).flag(col)
    }

    fn blob(&self, col: usize) -> Result<Option<&[u8]>, String> {
        (**self).blob(col)
    }
}

/// One stored row being decoded: its columns, its table, and the row's key
/// once known (every refusal names them).
pub struct Cells<C: Columns> {
    cols: C,
    table: &'static str,
    row: String,
    base: usize,
}

impl<C: Columns> Cells<C> {
    /// A row of `table` whose columns start at position 0.
    pub fn new(cols: C, table: &'static str) -> Self {
        Self::joined(cols, table, 0)
    }

    /// A row of `table` whose columns start at position `base` (a later
    /// table of a join).
    pub fn joined(cols: C, table: &'static str, base: usize) -> Self {
        Cells {
            cols,
            table,
            row: "?".to_owned(),
            base,
        }
    }

    /// Names the row (its key, now read) in every later refusal.
    pub fn at(&mut self, row: impl Into<String>) {
        self.row = row.into();
    }

    /// The row as every refusal names it: `{table} row {row}`.
    pub fn place(&self) -> String {
        format!("{} row {}", self.table, self.row)
    }

    /// A refusal of `column` of this row.
    pub fn fail(&self, column: &'static str, detail: impl fmt::Display) -> ColumnError {
        ColumnError {
            table: self.table,
            row: self.row.clone(),
            column,
            detail: detail.to_string(),
        }
    }

    /// A nullable text column of at most `max` bytes, bounded before it is
    /// checked as UTF-8 or copied.
    pub fn opt_text(
        &self,
        col: usize,
        name: &'static str,
        max: usize,
    ) -> Result<Option<String>, ColumnError> {
        match self.cols.text(self.base + col) {
            Err(why) => Err(self.fail(name, why)),
            Ok(Some(b)) if b.len() > max => Err(self.fail(
                name,
                format!("{} bytes of text exceed the bound {max}", b.len()),
            )),
            Ok(Some(b)) => std::str::from_utf8(b)
                .map(|t| Some(t.to_owned()))
                .map_err(|e| self.fail(name, format!("text is not UTF-8: {e}"))),
            Ok(None) => Ok(None),
        }
    }

    /// A `NOT NULL` text column of at most `max` bytes.
    pub fn text(&self, col: usize, name: &'static str, max: usize) -> Result<String, ColumnError> {
        self.opt_text(col, name, max)?
            .ok_or_else(|| self.fail(name, "null"))
    }

    /// Whether text column `col` is SQL `NULL` (nothing copied).
    pub fn is_null(&self, col: usize, name: &'static str) -> Result<bool, ColumnError> {
        self.cols
            .text(self.base + col)
            .map(|t| t.is_none())
            .map_err(|why| self.fail(name, why))
    }

    /// A nullable text column read leniently: a value that is not text or
    /// is longer than `max` reads as none (for a value whose breaking of
    /// its rule means "absent", never copied when too long).
    pub fn lenient_text(&self, col: usize, max: usize) -> Option<String> {
        match self.cols.text(self.base + col) {
            Ok(Some(b)) if b.len() <= max => std::str::from_utf8(b).ok().map(str::to_owned),
            _ => None,
        }
    }

    /// A nullable integer column.
    pub fn opt_int(&self, col: usize, name: &'static str) -> Result<Option<i64>, ColumnError> {
        self.cols
            .int(self.base + col)
            .map_err(|why| self.fail(name, why))
    }

    /// A `NOT NULL` integer column.
    pub fn int(&self, col: usize, name: &'static str) -> Result<i64, ColumnError> {
        self.opt_int(col, name)?
            .ok_or_else(|| self.fail(name, "null"))
    }

    /// A nullable `u64` column, in the backend's encoding
    /// ([`Columns::unsigned`]).
    pub fn opt_unsigned(&self, col: usize, name: &'static str) -> Result<Option<u64>, ColumnError> {
        self.cols
            .unsigned(self.base + col)
            .map_err(|why| self.fail(name, why))
    }

    /// A `NOT NULL` `u64` column, in the backend's encoding.
    pub fn unsigned(&self, col: usize, name: &'static str) -> Result<u64, ColumnError> {
        self.opt_unsigned(col, name)?
            .ok_or_else(|| self.fail(name, "null"))
    }

    /// A nullable sequence-number column ([`Columns::seq`]).
    pub fn opt_seq(&self, col: usize, name: &'static str) -> Result<Option<u64>, ColumnError> {
        self.cols
            .seq(self.base + col)
            .map_err(|why| self.fail(name, why))
    }

    /// A `NOT NULL` sequence-number column.
    pub fn seq(&self, col: usize, name: &'static str) -> Result<u64, ColumnError> {
        self.opt_seq(col, name)?
            .ok_or_else(|| self.fail(name, "null"))
    }

    /// A `NOT NULL` integer column that must not be negative (a length, a
    /// position), whatever the backend's `u64` encoding.
    pub fn count(&self, col: usize, name: &'static str) -> Result<u64, ColumnError> {
        let v = self.int(col, name)?;
        u64::try_from(v).map_err(|_| self.fail(name, format!("negative value {v}")))
    }

    /// A `NOT NULL` integer column that must fit a `u32`.
    pub fn small(&self, col: usize, name: &'static str) -> Result<u32, ColumnError> {
        let v = self.int(col, name)?;
        u32::try_from(v).map_err(|_| self.fail(name, format!("{v} out of range")))
    }

    /// A nullable bytes column of at most `max` bytes, checked before it
    /// is copied.
    pub fn opt_blob(
        &self,
        col: usize,
        name: &'static str,
        max: usize,
    ) -> Result<Option<Vec<u8>>, ColumnError> {
        match self.cols.blob(self.base + col) {
            Err(why) => Err(self.fail(name, why)),
            Ok(Some(b)) if b.len() > max => {
                Err(self.fail(name, format!("{} bytes exceed the bound {max}", b.len())))
            }
            Ok(b) => Ok(b.map(<[u8]>::to_vec)),
        }
    }

    /// A `NOT NULL` bytes column of at most `max` bytes.
    pub fn blob(&self, col: usize, name: &'static str, max: usize) -> Result<Vec<u8>, ColumnError> {
        self.opt_blob(col, name, max)?
            .ok_or_else(|| self.fail(name, "null"))
    }

    /// `parsed`, the value of column `name` checked by its own type, or
    /// the type's refusal as this column's.
    pub fn check<T, E: fmt::Display>(
        &self,
        name: &'static str,
        parsed: Result<T, E>,
    ) -> Result<T, ColumnError> {
        parsed.map_err(|e| self.fail(name, e))
    }

    /// A `NOT NULL` boolean column.
    pub fn flag(&self, col: usize, name: &'static str) -> Result<bool, ColumnError> {
        self.cols
            .flag(self.base + col)
            .map_err(|why| self.fail(name, why))?
            .ok_or_else(|| self.fail(name, "null"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row of values, each text, integer, boolean or null.
    enum V {
        T(&'static str),
        I(i64),
        B(bool),
        N,
    }

    impl Columns for [V] {
        fn text(&self, col: usize) -> Result<Option<&[u8]>, String> {
            match self.get(col) {
                Some(V::T(t)) => Ok(Some(t.as_bytes())),
                Some(V::N) => Ok(None),
                _ => Err("not text".to_owned()),
            }
        }
        fn int(&self, col: usize) -> Result<Option<i64>, String> {
            match self.get(col) {
                Some(V::I(i)) => Ok(Some(*i)),
                Some(V::N) => Ok(None),
                _ => Err("not an integer".to_owned()),
            }
        }
        fn flag(&self, col: usize) -> Result<Option<bool>, String> {
            match self.get(col) {
                Some(V::B(b)) => Ok(Some(*b)),
                Some(V::N) => Ok(None),
                _ => Err("not a boolean".to_owned()),
            }
        }
        fn blob(&self, col: usize) -> Result<Option<&[u8]>, String> {
            match self.get(col) {
                Some(V::T(t)) => Ok(Some(t.as_bytes())),
                Some(V::N) => Ok(None),
                _ => Err("not bytes".to_owned()),
            }
        }
    }

    #[test]
    fn every_refusal_names_the_table_the_row_and_the_column() {
        let row = [
            V::T("k1"),
            V::T("abcdef"),
            V::N,
            V::I(-1),
            V::B(true),
            V::I(7),
        ];
        let mut c = Cells::new(&row[..], "things");
        assert_eq!(c.text(0, "key", 8).unwrap(), "k1");
        c.at("k1");
        let e = c.text(1, "name", 5).unwrap_err();
        assert_eq!(
            e.to_string(),
            "things row k1: column name: 6 bytes of text exceed the bound 5"
        );
        assert_eq!(c.text(1, "name", 6).unwrap(), "abcdef");
        assert_eq!(c.opt_text(2, "note", 5).unwrap(), None);
        assert!(c.is_null(2, "note").unwrap());
        assert!(!c.is_null(1, "name").unwrap());
        assert_eq!(c.text(2, "note", 5).unwrap_err().detail, "null");
        assert_eq!(c.int(3, "n").unwrap(), -1);
        assert_eq!(
            c.unsigned(3, "n").unwrap_err().to_string(),
            "things row k1: column n: negative value -1"
        );
        assert_eq!(c.unsigned(5, "m").unwrap(), 7);
        assert_eq!(c.opt_unsigned(2, "m").unwrap(), None);
        assert!(c.flag(4, "on").unwrap());
        assert_eq!(c.flag(2, "on").unwrap_err().detail, "null");
        assert_eq!(c.text(3, "n", 9).unwrap_err().detail, "not text");
        assert_eq!(c.lenient_text(1, 5), None);
        assert_eq!(c.lenient_text(3, 5), None);
        assert_eq!(c.lenient_text(1, 6).as_deref(), Some("abcdef"));
        assert_eq!(c.small(5, "m").unwrap(), 7);
        assert_eq!(c.small(3, "n").unwrap_err().detail, "-1 out of range");
        assert_eq!(
            c.opt_blob(1, "b", 6).unwrap().as_deref(),
            Some(&b"abcdef"[..])
        );
        assert_eq!(
            c.opt_blob(1, "b", 5).unwrap_err().detail,
            "6 bytes exceed the bound 5"
        );
        assert_eq!(c.opt_blob(2, "b", 5).unwrap(), None);
        assert_eq!(c.place(), "things row k1");
        let e = c.check("m", "x".parse::<u8>()).unwrap_err();
        assert_eq!(e.column, "m");
        assert_eq!(e.row, "k1");
        // A join's later table: positions from its base.
        let later = Cells::joined(&row[..], "others", 4);
        assert!(later.flag(0, "on").unwrap());
        assert_eq!(later.unsigned(1, "m").unwrap(), 7);
    }
}
