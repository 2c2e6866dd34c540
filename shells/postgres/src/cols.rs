//! A PostgreSQL row as core's [`Columns`]: every stored row is decoded
//! through [`Cells`], one set of rules for every table.

use custos_core::columns::{Cells, Columns};
use postgres::types::{FromSql, Type};
use postgres::Row;

/// A PostgreSQL row's columns, borrowed (a text is not copied to be
/// bounded). A `u64` is a non-negative `bigint` (the default
/// [`Columns::unsigned`]): one above `i64::MAX` is never written.
#[derive(Clone, Copy)]
pub(crate) struct Pg<'r>(&'r Row);

impl Columns for Pg<'_> {
    fn text(&self, col: usize) -> Result<Option<&[u8]>, String> {
        let t: Option<RawText<'_>> = self.0.try_get(col).map_err(|e| e.to_string())?;
        Ok(t.map(|t| t.0))
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

/// A text column's bytes as the server sent them: borrowed, not yet
/// checked as UTF-8 ([`Cells`] bounds them first).
struct RawText<'a>(&'a [u8]);

impl<'a> FromSql<'a> for RawText<'a> {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(RawText(raw))
    }

    /// The text types whose binary form is the text's bytes as they are
    /// (not the `ltree` family, which prefixes a version byte).
    fn accepts(ty: &Type) -> bool {
        matches!(
            *ty,
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN
        ) || ty.name() == "citext"
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
