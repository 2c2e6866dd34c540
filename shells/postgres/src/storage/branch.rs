//! The branch index: placing a new entry ([`link_branch`]) and the lazy,
//! rows the paged walk from a leaf to its root reads ([`walk`], core's
//! [`BranchWalk`] over [`Rows`]), whose four
//! statements are also what [`explain`] shows. See [`super::schema`],
//! "The branch index".

use std::cell::RefCell;

use crate::cols::cells;
use crate::conn::Tx;
use custos_core::storage::branch::{BranchHead, BranchRows, BranchWalk, Page, ParentLink};
use custos_core::storage::{Entry, RecordId, StorageError};
use postgres::types::ToSql;

use super::codec::{self, num, BRANCH_ENTRIES, BRANCH_META, ENTRIES};
use crate::conn::{db, Failure};

/// How many branch-index rows one page of a walk reads (core's page, as
/// a bound parameter).
const BRANCH_PAGE: i64 = 64;

/// A transaction shared by a walk and the loader of the entries it keeps
/// (they take turns; never both at once).
pub(crate) type SharedTx<'x, 't> = RefCell<&'x mut Tx<'t>>;

fn borrow<'a, 'x, 't>(
    tx: &'a SharedTx<'x, 't>,
) -> Result<std::cell::RefMut<'a, &'x mut Tx<'t>>, Failure> {
    tx.try_borrow_mut()
        .map_err(|_| Failure::Db("branch-walk", "the transaction is in use".to_owned()))
}

/// The entry columns, in [`decode_entry`] order.
pub(crate) const ENTRY_COLS: &str = "seq::text, id, parent, kind, payload, ts::text";

/// Decodes [`ENTRY_COLS`].
pub(crate) fn decode_entry(row: &postgres::Row) -> Result<Entry, Failure> {
    Ok(Entry::read(&mut cells(row, ENTRIES))?)
}

const LEAF_SQL: &str = "SELECT segment, pos FROM storage_entries WHERE session = $1 AND id = $2";
const PAGE_SQL: &str = "SELECT pos, seq::text, kind FROM storage_branch_entries
     WHERE session = $1 AND segment = $2 AND pos <= $3
     ORDER BY pos DESC LIMIT $4";
const HOP_SQL: &str = "SELECT parent_segment, parent_pos FROM storage_branch_meta
     WHERE session = $1 AND segment = $2";
const FETCH_SQL: &str = "SELECT seq::text, id, parent, kind, payload, ts::text
     FROM storage_entries WHERE session = $1 AND seq = $2::text::numeric";

/// Places a new entry in the branch index and answers its
/// `(segment, pos)`: the parent's segment when the parent is its tail,
/// else a new segment (a root's, or a fork's naming the parent's place).
pub(crate) fn link_branch(
    tx: &mut Tx<'_>,
    session: &str,
    e: &Entry,
) -> Result<(i64, i64), Failure> {
    let place = match &e.parent {
        None => None,
        Some(p) => {
            let row = tx
                .query_opt(
                    "SELECT e.segment, e.pos, EXISTS (
                         SELECT 1 FROM storage_branch_entries b
                         WHERE b.session = e.session AND b.segment = e.segment
                           AND b.pos = e.pos + 1)
                     FROM storage_entries e WHERE e.session = $1 AND e.id = $2",
                    &[&session, &p.as_str()],
                )
                .map_err(db("branch-link"))?
                .ok_or_else(|| {
                    Failure::Corrupt(format!("{ENTRIES}: parent {p} is not an entry"))
                })?;
            Some((
                codec::int(&row, 0, ENTRIES, "segment")?,
                codec::int(&row, 1, ENTRIES, "pos")?,
                codec::get::<bool>(&row, 2, BRANCH_ENTRIES, "pos")?,
            ))
        }
    };
    let (segment, pos) = match place {
        Some((seg, pos, false)) => (
            seg,
            pos.checked_add(1).ok_or_else(|| {
                Failure::Corrupt(format!(
                    "{BRANCH_ENTRIES}: segment {seg}: position overflow"
                ))
            })?,
        ),
        parent => {
            let (ps, pp) = match parent {
                Some((s, p, _)) => (Some(s), Some(p)),
                None => (None, None),
            };
            let row = tx
                .query_one(
                    "INSERT INTO storage_branch_meta (session, segment, parent_segment, parent_pos)
                     SELECT $1::text, COALESCE(MAX(segment), 0) + 1, $2::bigint, $3::bigint
                     FROM storage_branch_meta WHERE session = $1::text
                     RETURNING segment",
                    &[&session, &ps, &pp],
                )
                .map_err(db("branch-link"))?;
            (codec::int(&row, 0, BRANCH_META, "segment")?, 0)
        }
    };
    Ok((segment, pos))
}

/// The rows a [`BranchWalk`] pages through: this session's branch index,
/// read in the walk's transaction.
pub(crate) struct Rows<'w, 'x, 't> {
    tx: &'w SharedTx<'x, 't>,
    session: &'w str,
}

/// The walk from `leaf` to its root (core's walk over these rows).
pub(crate) fn walk<'w, 'x, 't>(
    tx: &'w SharedTx<'x, 't>,
    session: &'w str,
    leaf: &RecordId,
) -> BranchWalk<Rows<'w, 'x, 't>> {
    let place = leaf_place(tx, session, leaf).map_err(super::storage_error);
    BranchWalk::start(Rows { tx, session }, leaf, place)
}

impl BranchRows for Rows<'_, '_, '_> {
    fn page(&mut self, segment: i64, upper: i64, limit: usize) -> Result<Page, StorageError> {
        let page = || -> Result<_, Failure> {
            let limit = i64::try_from(limit).unwrap_or(BRANCH_PAGE);
            let rows = borrow(self.tx)?
                .query(PAGE_SQL, &[&self.session, &segment, &upper, &limit])
                .map_err(db("branch-page"))?;
            rows.iter()
                .map(|row| Ok(BranchHead::read(&cells(row, BRANCH_ENTRIES))?))
                .collect()
        };
        page().map_err(super::storage_error)
    }

    fn parent(&mut self, segment: i64) -> Result<Option<ParentLink>, StorageError> {
        let hop = || -> Result<_, Failure> {
            borrow(self.tx)?
                .query_opt(HOP_SQL, &[&self.session, &segment])
                .map_err(db("branch-hop"))?
                .map(|row| {
                    Ok((
                        codec::get(&row, 0, BRANCH_META, "parent_segment")?,
                        codec::get(&row, 1, BRANCH_META, "parent_pos")?,
                    ))
                })
                .transpose()
        };
        hop().map_err(super::storage_error)
    }
}

/// The leaf's `(segment, pos)`, or `None` when no entry has that id.
fn leaf_place(
    tx: &SharedTx<'_, '_>,
    session: &str,
    leaf: &RecordId,
) -> Result<Option<(i64, i64)>, Failure> {
    let row = borrow(tx)?
        .query_opt(LEAF_SQL, &[&session, &leaf.as_str()])
        .map_err(db("branch-leaf"))?;
    row.map(|row| {
        Ok((
            codec::int(&row, 0, ENTRIES, "segment")?,
            codec::int(&row, 1, ENTRIES, "pos")?,
        ))
    })
    .transpose()
}

/// Loads the entry a kept head names, checking it agrees with the index.
pub(crate) fn fetch_entry(
    tx: &SharedTx<'_, '_>,
    session: &str,
    h: BranchHead,
) -> Result<Entry, StorageError> {
    let fetch = || -> Result<Entry, Failure> {
        let row = borrow(tx)?
            .query_opt(FETCH_SQL, &[&session, &num(h.seq)])
            .map_err(db("branch-fetch"))?
            .ok_or_else(|| {
                Failure::Corrupt(format!(
                    "{BRANCH_ENTRIES}: names seq {} which is no entry",
                    h.seq
                ))
            })?;
        let e = decode_entry(&row)?;
        if e.kind != h.kind {
            return Err(Failure::Corrupt(format!(
                "{BRANCH_ENTRIES}: entry {} disagrees with its branch-index kind",
                e.id
            )));
        }
        Ok(e)
    };
    fetch().map_err(super::storage_error)
}

/// `EXPLAIN (COSTS OFF)` of the four statements every branch walk from
/// `leaf` runs, bound to the values the walk would bind (the leaf's own
/// place when it exists), one line per plan line.
pub(crate) fn explain(
    tx: &mut Tx<'_>,
    session: &str,
    leaf: &RecordId,
) -> Result<Vec<String>, Failure> {
    let (segment, pos) = {
        let cell = RefCell::new(&mut *tx);
        leaf_place(&cell, session, leaf)?.unwrap_or((1, 0))
    };
    let seq = num(1);
    let leaf = leaf.as_str();
    let statements: [(&str, Vec<&(dyn ToSql + Sync)>); 4] = [
        (LEAF_SQL, vec![&session, &leaf]),
        (PAGE_SQL, vec![&session, &segment, &pos, &BRANCH_PAGE]),
        (HOP_SQL, vec![&session, &segment]),
        (FETCH_SQL, vec![&session, &seq]),
    ];
    let mut out = Vec::new();
    for (sql, params) in statements {
        let rows = tx
            .query(&format!("EXPLAIN (COSTS OFF) {sql}"), &params)
            .map_err(db("explain"))?;
        for row in &rows {
            out.push(codec::text(row, 0, "explain", "QUERY PLAN", codec::MAX_TEXT_LEN)?.to_owned());
        }
    }
    Ok(out)
}
