//! A PostgreSQL row as core's [`Columns`]: every stored row is decoded
//! through [`Cells`], one set of rules for every table.

use custos_core::columns::{Cells, Columns};
use postgres::Row;

/// A PostgreSQL row's columns, borrowed (a text is not copied to be
/// bounded). A `u64` is a non-negative `bigint` (the default
/// [`Columns::unsigned`]): one above `i64::MAX` is never written.
#[derive(Clone, Copy)]
pub(crate) struct Pg<'r>(&'r Row);

impl Columns for Pg<'_> {
    fn text(&self, col: usize) -> Result<Option<&[u8]>, String> {
        let t: Option<&str> = self.0.try_get(col).map_err(|e| e.to_string())?;
        Ok(t.map(str::as_bytes))
    }

    fn int(&self, col: usize) -> Result<Option<i64>, String> {
        self.0.try_get(col).map_err(|e| e.to_string())
    }

    /// A `boolean` column (not an integer, as the default reads).
    fn flag(&self, col: usize) -> Result<Option<bool>, String> {
        self.0.try_get(col).map_err(|e| e.to_string())
    }

    fn blob(&self, col: usize) -> Result<Option<&[u8]>, String> {
        self.0.try_get(col).map_err(|e| e.to_string())
    }
}

/// The cells of `r`, a row of `table`.
pub(crate) fn cells<'r>(r: &'r Row, table: &'static str) -> Cells<Pg<'r>> {
    Cells::new(Pg(r), table)
}

/// The cells of `r` from position `base` on, a row of `table` (a later
/// table of a join).
pub(crate) fn cells_from<'r>(r: &'r Row, table: &'static str, base: usize) -> Cells<Pg<'r>> {
    Cells::joined(Pg(r), table, base)
}
