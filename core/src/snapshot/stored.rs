//! A snapshot's stored headers as a backend reads them back, over its
//! [`Columns`] and the session store's column readers
//! ([`crate::storage::stored`]).

use super::{CellHeader, Descriptor};
use crate::columns::{Cells, ColumnError, Columns};
use crate::storage::stored::kind;
use crate::storage::{EntryHead, Register};

impl CellHeader {
    /// A register's header from `c`, in the order `key, seq,
    /// length(value)`.
    pub fn read<C: Columns>(c: &mut Cells<C>) -> Result<Self, ColumnError> {
        Ok(CellHeader {
            key: Register::read_key(c)?,
            seq: c.seq(1, "seq")?,
            size: c.count(2, "length(value)")?,
        })
    }
}

impl Descriptor {
    /// An entry's descriptor from `c`, in the order `seq, id, parent,
    /// kind, ts, length(payload)`; `c` names the row by its seq.
    pub fn read<C: Columns>(c: &mut Cells<C>) -> Result<Self, ColumnError> {
        let EntryHead { seq, id, parent } = EntryHead::read(c)?;
        Ok(Descriptor {
            seq,
            id,
            parent,
            kind: kind(c, 3, "kind")?,
            ts: c.unsigned(4, "ts")?,
            size: c.count(5, "length(payload)")?,
        })
    }
}
