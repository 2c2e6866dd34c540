//! A PostgreSQL row as core's [`Columns`]: every stored row is decoded
//! through [`Cells`], one set of rules for every table.

use custos_core::columns::{Cells, Columns};
use postgres::types::{FromSql, Type};
use postgres::Row;

/// A PostgreSQL row's columns, borrowed (a text is not copied to be
/// bounded). A `u64` is a non-negative `bigint` (one above `i64::MAX` is
/// never written there), or a `numeric(20,0)` the SELECT casts to text
/// (`col::text`, storage's sequence numbers and figures), read as plain
/// decimal digits of the `u64` range.
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

    fn unsigned(&self, col: usize) -> Result<Option<u64>, String> {
        if self.0.columns().get(col).map(|c| c.type_()) == Some(&Type::TEXT) {
            return self.text(col)?.map(parse_u64).transpose();
        }
        self.int(col)?
            .map(|v| u64::try_from(v).map_err(|_| format!("negative value {v}")))
            .transpose()
    }

    /// A `boolean` column (not an integer, as the default reads).
    fn flag(&self, col: usize) -> Result<Option<bool>, String> {
        self.0.try_get(col).map_err(|e| e.to_string())
    }

    fn blob(&self, col: usize) -> Result<Option<&[u8]>, String> {
        self.0.try_get(col).map_err(|e| e.to_string())
    }
}

/// The longest decimal text a `u64` column may hold.
const MAX_U64_TEXT: usize = 20;

/// Plain decimal digits (no sign, no point, no leading `+`) of the `u64`
/// range, measured before they are parsed.
fn parse_u64(b: &[u8]) -> Result<u64, String> {
    if b.is_empty() || b.len() > MAX_U64_TEXT || !b.iter().all(u8::is_ascii_digit) {
        return Err(if b.len() > MAX_U64_TEXT {
            format!("a {}-character number is no u64", b.len())
        } else {
            format!("{:?} is no u64", String::from_utf8_lossy(b))
        });
    }
    // All ASCII digits: the bytes are UTF-8.
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{:?} is no u64", String::from_utf8_lossy(b)))
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

#[cfg(test)]
mod tests {
    use super::parse_u64;

    #[test]
    fn u64_text_parses_exactly_the_u64_range() {
        assert_eq!(parse_u64(b"0"), Ok(0));
        assert_eq!(parse_u64(b"18446744073709551615"), Ok(u64::MAX));
        for bad in [
            &b"18446744073709551616"[..],
            b"-1",
            b"+1",
            b"1.0",
            b"",
            b"000000000000000000001",
        ] {
            assert!(parse_u64(bad).is_err(), "{bad:?}");
        }
    }
}
