//! Storage rows as a backend reads them back, read here once over the
//! backend's [`Columns`]: an entry and its head, a usage row, a register,
//! a footprint's register row, a kept commit, a branch page's row, the
//! head's stats and the writer lease's columns (a snapshot's cell headers
//! and entry descriptors are read beside their types, in `snapshot`). A
//! backend writes each SELECT in the order its reader names and hands the
//! row here; every text and byte column is bounded before it is copied,
//! every identifier checked by its own type, and every refusal is a
//! [`ColumnError`] naming the table, the row and the column.
//!
//! Sequence numbers are read through [`Columns::seq`] (a backend may keep
//! them in an order-preserving encoding), every other `u64` through
//! [`Columns::unsigned`], lengths and positions as non-negative integers.

use super::branch::BranchHead;
use super::commit::{decode_seqs, CommitReceipt, LastCommit};
use super::types::{
    CommitId, Entry, EntryHead, Kind, Namespace, Payload, RecordId, Register, RegisterKey, Seq,
    Stats, UsageFigures, UsageRow, MAX_ID_LEN, MAX_KEY_LEN, MAX_KIND_LEN, MAX_NAMESPACE_LEN,
    MAX_PAYLOAD_LEN, MAX_WRITES_PER_COMMIT,
};
use super::StorageError;
use crate::columns::{Cells, ColumnError, Columns};
use crate::lease::{Lease, LeaseState, Owner, MAX_OWNER_LEN};

impl From<ColumnError> for StorageError {
    /// A stored row that breaks its rule is corruption, naming the table,
    /// the row and the column.
    fn from(e: ColumnError) -> Self {
        StorageError::Corrupt {
            detail: e.to_string(),
        }
    }
}

/// A `NOT NULL` record id column.
pub fn record_id<C: Columns>(
    c: &Cells<C>,
    col: usize,
    name: &'static str,
) -> Result<RecordId, ColumnError> {
    c.check(name, RecordId::try_from(c.text(col, name, MAX_ID_LEN)?))
}

/// A nullable record id column.
pub fn opt_record_id<C: Columns>(
    c: &Cells<C>,
    col: usize,
    name: &'static str,
) -> Result<Option<RecordId>, ColumnError> {
    c.opt_text(col, name, MAX_ID_LEN)?
        .map(|s| c.check(name, RecordId::try_from(s)))
        .transpose()
}

/// A `NOT NULL` kind column.
pub fn kind<C: Columns>(c: &Cells<C>, col: usize, name: &'static str) -> Result<Kind, ColumnError> {
    c.check(name, Kind::try_from(c.text(col, name, MAX_KIND_LEN)?))
}

/// A `NOT NULL` payload column, measured before it is copied.
pub fn payload<C: Columns>(
    c: &Cells<C>,
    col: usize,
    name: &'static str,
) -> Result<Payload, ColumnError> {
    c.check(name, Payload::try_from(c.blob(col, name, MAX_PAYLOAD_LEN)?))
}

impl LastCommit {
    /// The kept commit `id` from `c`, in the order `digest, seqs,
    /// next_seq` (`seqs` as [`encode_seqs`](super::commit::encode_seqs)
    /// writes them).
    pub fn read<C: Columns>(c: &mut Cells<C>, id: &CommitId) -> Result<Self, ColumnError> {
        c.at(id.as_str());
        let digest = c.blob(0, "digest", 32)?;
        let digest = <[u8; 32]>::try_from(digest.as_slice())
            .map_err(|_| c.fail("digest", format!("{} bytes, not 32", digest.len())))?;
        let raw = c.blob(1, "seqs", MAX_WRITES_PER_COMMIT * 8)?;
        let seqs = decode_seqs(&raw).ok_or_else(|| {
            c.fail(
                "seqs",
                format!("{} bytes are not a commit's seqs", raw.len()),
            )
        })?;
        Ok(LastCommit {
            id: id.clone(),
            digest,
            receipt: CommitReceipt {
                seqs,
                next_seq: c.seq(2, "next_seq")?,
            },
        })
    }
}

/// A footprint's register row from `c`, in the order `namespace, key,
/// seq`.
pub fn read_register_seq<C: Columns>(
    c: &mut Cells<C>,
) -> Result<(Namespace, RegisterKey, Seq), ColumnError> {
    let ns = c.text(0, "namespace", MAX_NAMESPACE_LEN)?;
    let ns = c.check("namespace", Namespace::try_from(ns))?;
    let key = c.text(1, "key", MAX_KEY_LEN)?;
    c.at(format!("{}/{key}", ns.as_str()));
    let key = c.check("key", RegisterKey::try_from(key))?;
    Ok((ns, key, c.seq(2, "seq")?))
}

impl Entry {
    /// An entry row from `c`, in the order `seq, id, parent, kind,
    /// payload, ts`; `c` names the row by its seq.
    pub fn read<C: Columns>(c: &mut Cells<C>) -> Result<Self, ColumnError> {
        let EntryHead { seq, id, parent } = EntryHead::read(c)?;
        Ok(Entry {
            seq,
            id,
            parent,
            kind: kind(c, 3, "kind")?,
            payload: payload(c, 4, "payload")?,
            ts: c.unsigned(5, "ts")?,
        })
    }
}

impl UsageFigures {
    /// The five figures from `c` at `base`, in the order `input_tokens,
    /// output_tokens, cache_read_tokens, cache_write_tokens, cost_micros`.
    pub fn read<C: Columns>(c: &Cells<C>, base: usize) -> Result<Self, ColumnError> {
        Ok(UsageFigures {
            input_tokens: c.unsigned(base, "input_tokens")?,
            output_tokens: c.unsigned(base + 1, "output_tokens")?,
            cache_read_tokens: c.unsigned(base + 2, "cache_read_tokens")?,
            cache_write_tokens: c.unsigned(base + 3, "cache_write_tokens")?,
            cost_micros: c.unsigned(base + 4, "cost_micros")?,
        })
    }
}

impl UsageRow {
    /// A usage row from `c`, in the order `seq, id, ts`, the five
    /// [figures](UsageFigures::read), `details`; `c` names the row by its
    /// seq.
    pub fn read<C: Columns>(c: &mut Cells<C>) -> Result<Self, ColumnError> {
        let seq = c.seq(0, "seq")?;
        c.at(format!("seq {seq}"));
        Ok(UsageRow {
            seq,
            id: record_id(c, 1, "id")?,
            ts: c.unsigned(2, "ts")?,
            figures: UsageFigures::read(c, 3)?,
            details: payload(c, 8, "details")?,
        })
    }
}

impl Stats {
    /// The head's stats from `c` at `base`, in the order `usage_rows`,
    /// then the five [figures](UsageFigures::read).
    pub fn read<C: Columns>(c: &Cells<C>, base: usize) -> Result<Self, ColumnError> {
        Ok(Stats {
            usage_rows: c.unsigned(base, "usage_rows")?,
            totals: UsageFigures::read(c, base + 1)?,
        })
    }
}

impl BranchHead {
    /// A branch page's row from `c`, in the order `pos, seq, kind`.
    pub fn read<C: Columns>(c: &Cells<C>) -> Result<(i64, Self), ColumnError> {
        Ok((
            c.int(0, "pos")?,
            BranchHead {
                seq: c.seq(1, "seq")?,
                kind: kind(c, 2, "kind")?,
            },
        ))
    }
}

impl Register {
    /// The register `key` of `namespace` from `c` at `base`, in the order
    /// `value, seq`.
    pub fn read<C: Columns>(
        c: &Cells<C>,
        namespace: &Namespace,
        key: RegisterKey,
        base: usize,
    ) -> Result<Self, ColumnError> {
        Ok(Register {
            namespace: namespace.clone(),
            key,
            value: payload(c, base, "value")?,
            seq: c.seq(base + 1, "seq")?,
        })
    }

    /// A register's key from `c`, in its column 0 (a listing's rows are
    /// `key, value, seq`); `c` names the row by it.
    pub fn read_key<C: Columns>(c: &mut Cells<C>) -> Result<RegisterKey, ColumnError> {
        let key = c.text(0, "key", MAX_KEY_LEN)?;
        c.at(key.clone());
        c.check("key", RegisterKey::try_from(key))
    }
}

impl EntryHead {
    /// An entry's head from `c`, in the order `seq, id, parent` (the first
    /// columns of an entry and of its descriptor too); `c` names the row by
    /// its seq.
    pub fn read<C: Columns>(c: &mut Cells<C>) -> Result<Self, ColumnError> {
        let seq = c.seq(0, "seq")?;
        c.at(format!("seq {seq}"));
        Ok(EntryHead {
            seq,
            id: record_id(c, 1, "id")?,
            parent: opt_record_id(c, 2, "parent")?,
        })
    }
}

impl LeaseState {
    /// The writer lease from `c` at `base`, in the order `owner, fence,
    /// expires_at, fence_high_water`, each refusal naming the column as
    /// the backend calls it (`names`, in the same order): a holder is all
    /// three of its columns or none of them (a partial holder is refused);
    /// the high-water is `NOT NULL` (a backend that keeps it in a row of its
    /// own selects 0 for a missing row).
    pub fn read<C: Columns>(
        c: &Cells<C>,
        base: usize,
        names: [&'static str; 4],
    ) -> Result<Self, ColumnError> {
        let [owner_col, fence_col, expires_col, high_col] = names;
        let owner = c.opt_text(base, owner_col, MAX_OWNER_LEN)?;
        let fence = c.opt_unsigned(base + 1, fence_col)?;
        let expires = c.opt_unsigned(base + 2, expires_col)?;
        let holder = match (owner, fence, expires) {
            (None, None, None) => None,
            (Some(owner), Some(fence), Some(expires_at)) => Some(Lease {
                owner: c.check(owner_col, Owner::new(owner))?,
                fence,
                expires_at,
            }),
            _ => return Err(c.fail(owner_col, "a partial lease holder")),
        };
        Ok(LeaseState {
            holder,
            fence_high_water: c.unsigned(base + 3, high_col)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stored value: an integer, a text (or bytes), or null.
    enum V {
        I(i64),
        T(&'static str),
        N,
    }

    /// A row whose sequence numbers are kept order-preserving
    /// (`seq XOR 2^63`), every other `u64` bit for bit.
    struct Row(Vec<V>);

    const FLIP: u64 = 1 << 63;

    impl Columns for Row {
        fn text(&self, col: usize) -> Result<Option<&[u8]>, String> {
            match self.0.get(col) {
                Some(V::T(t)) => Ok(Some(t.as_bytes())),
                Some(V::N) => Ok(None),
                _ => Err("not text".to_owned()),
            }
        }
        fn int(&self, col: usize) -> Result<Option<i64>, String> {
            match self.0.get(col) {
                Some(V::I(i)) => Ok(Some(*i)),
                Some(V::N) => Ok(None),
                _ => Err("not an integer".to_owned()),
            }
        }
        fn unsigned(&self, col: usize) -> Result<Option<u64>, String> {
            Ok(self.int(col)?.map(|v| u64::from_ne_bytes(v.to_ne_bytes())))
        }
        fn seq(&self, col: usize) -> Result<Option<u64>, String> {
            Ok(self.unsigned(col)?.map(|v| v ^ FLIP))
        }
        fn blob(&self, col: usize) -> Result<Option<&[u8]>, String> {
            self.text(col)
        }
    }

    fn stored_seq(seq: u64) -> V {
        V::I(i64::from_ne_bytes((seq ^ FLIP).to_ne_bytes()))
    }

    const NAMES: [&str; 4] = [
        "lease_owner",
        "lease_fence",
        "lease_expires_at",
        "high_water",
    ];

    fn lease(row: Vec<V>) -> Result<LeaseState, ColumnError> {
        LeaseState::read(&Cells::new(Row(row), "heads"), 0, NAMES)
    }

    #[test]
    fn a_lease_holder_is_whole_or_absent_and_its_high_water_is_never_null() {
        let none = lease(vec![V::N, V::N, V::N, V::I(3)]).unwrap();
        assert_eq!((none.holder, none.fence_high_water), (None, 3));
        let held = lease(vec![V::T("o"), V::I(2), V::I(-1), V::I(2)]).unwrap();
        let h = held.holder.unwrap();
        // A u64 above i64::MAX, kept bit for bit.
        assert_eq!(
            (h.owner.as_str(), h.fence, h.expires_at),
            ("o", 2, u64::MAX)
        );
        let partial = lease(vec![V::T("o"), V::I(2), V::N, V::I(2)]).unwrap_err();
        assert_eq!(
            partial.to_string(),
            "heads row ?: column lease_owner: a partial lease holder"
        );
        let null_high = lease(vec![V::N, V::N, V::N, V::N]).unwrap_err();
        assert_eq!(
            null_high.to_string(),
            "heads row ?: column high_water: null"
        );
        let bad_owner = lease(vec![V::T(""), V::I(1), V::I(1), V::I(1)]).unwrap_err();
        assert_eq!(bad_owner.column, "lease_owner");
    }

    #[test]
    fn an_entry_reads_its_seq_in_the_backends_order_and_bounds_every_text() {
        let row = |kind: &'static str| {
            Row(vec![
                stored_seq(7),
                V::T("e1"),
                V::N,
                V::T(kind),
                V::T("payload"),
                V::I(-1),
            ])
        };
        let e = Entry::read(&mut Cells::new(row("m"), "entries")).unwrap();
        assert_eq!(
            (e.seq, e.id.as_str(), e.parent, e.ts),
            (7, "e1", None, u64::MAX)
        );
        assert_eq!(e.payload.as_bytes(), b"payload");
        let long: &'static str = Box::leak("k".repeat(MAX_KIND_LEN + 1).into_boxed_str());
        let refused = Entry::read(&mut Cells::new(row(long), "entries")).unwrap_err();
        assert_eq!(refused.row, "seq 7");
        assert_eq!(refused.column, "kind");
        assert!(refused.detail.contains("exceed the bound"), "{refused}");
        let head = EntryHead::read(&mut Cells::new(row("m"), "entries")).unwrap();
        assert_eq!((head.seq, head.id.as_str()), (7, "e1"));
    }
}
