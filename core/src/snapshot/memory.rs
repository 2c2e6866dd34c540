//! The memory backend of the snapshot port: [`MemoryStorage`] under one
//! lock is one coherent cut. Header windows walk the existing keys of the
//! window only (a bounded retained window), and only selected values are
//! copied.

use std::ops::Bound;

use super::{CellHeader, CutView, Descriptor, Head, KeyRange, SnapshotError, SnapshotSource};
use crate::storage::{
    Entry, MemoryStorage, Namespace, RecordId, Register, RegisterKey, Seq, StorageError, StoreState,
};

fn len_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// The descriptor of a stored entry.
pub fn descriptor_of(e: &Entry) -> Descriptor {
    Descriptor {
        id: e.id.clone(),
        parent: e.parent.clone(),
        kind: e.kind.clone(),
        seq: e.seq,
        ts: e.ts,
        size: len_u64(e.payload.len()),
    }
}

fn header_of(r: &Register) -> CellHeader {
    CellHeader {
        key: r.key.clone(),
        seq: r.seq,
        size: len_u64(r.value.len()),
    }
}

/// A [`CutView`] over one borrowed [`StoreState`].
#[derive(Debug)]
pub struct StateView<'a>(pub &'a StoreState);

impl CutView for StateView<'_> {
    fn head(&self) -> Result<Head, StorageError> {
        Ok(Head {
            next_seq: self.0.next_seq(),
            stats: self.0.stats(),
        })
    }

    fn header(
        &self,
        namespace: &Namespace,
        key: &RegisterKey,
    ) -> Result<Option<CellHeader>, StorageError> {
        Ok(self
            .0
            .register_cells(namespace)
            .and_then(|m| m.get(key))
            .map(header_of))
    }

    fn headers(
        &self,
        namespace: &Namespace,
        range: &KeyRange,
        limit: usize,
    ) -> Result<Vec<CellHeader>, StorageError> {
        let Some(cells) = self.0.register_cells(namespace) else {
            return Ok(Vec::new());
        };
        if range.is_empty() {
            return Ok(Vec::new());
        }
        let start = if range.start_inclusive {
            Bound::Included(range.start.as_str())
        } else {
            Bound::Excluded(range.start.as_str())
        };
        let end = match &range.end {
            Some(e) => Bound::Excluded(e.as_str()),
            None => Bound::Unbounded,
        };
        Ok(cells
            .range::<str, _>((start, end))
            .take(limit)
            .map(|(_, r)| header_of(r))
            .collect())
    }

    fn cells(
        &self,
        namespace: &Namespace,
        keys: &[RegisterKey],
    ) -> Result<Vec<Option<Register>>, StorageError> {
        let cells = self.0.register_cells(namespace);
        Ok(keys
            .iter()
            .map(|k| cells.and_then(|m| m.get(k)).cloned())
            .collect())
    }
}

/// [`SnapshotSource::descriptors`] over a state.
pub fn state_descriptors(
    s: &StoreState,
    after: Option<Seq>,
    below: Seq,
    limit: usize,
) -> Vec<Descriptor> {
    let Some((start, below)) = super::descriptor_range(after, below) else {
        return Vec::new();
    };
    s.entry_seq_index()
        .range(start..below)
        .take(limit)
        .filter_map(|(_, id)| s.entry(id).map(descriptor_of))
        .collect()
}

/// [`SnapshotSource::entry_head`] over a state.
pub fn state_entry_head(s: &StoreState, id: &RecordId, below: Seq) -> Option<Descriptor> {
    s.entry(id).filter(|e| e.seq < below).map(descriptor_of)
}

/// [`SnapshotSource::fragment_bytes`] over a state.
pub fn state_fragment(
    s: &StoreState,
    head: &Descriptor,
    offset: u64,
    len: usize,
) -> Result<Vec<u8>, StorageError> {
    let missing = || StorageError::Corrupt {
        detail: format!("entry {} has no bytes at {offset}..+{len}", head.id),
    };
    let e = s.entry(&head.id).ok_or_else(missing)?;
    let from = usize::try_from(offset).map_err(|_| missing())?;
    let to = from.checked_add(len).ok_or_else(missing)?;
    Ok(e.payload
        .as_bytes()
        .get(from..to)
        .ok_or_else(missing)?
        .to_vec())
}

impl SnapshotSource for MemoryStorage {
    fn with_cut<T>(
        &self,
        body: impl FnOnce(&dyn CutView) -> Result<T, SnapshotError>,
    ) -> Result<T, SnapshotError> {
        self.with_state(|s| body(&StateView(s)))
    }

    fn descriptors(
        &self,
        after: Option<Seq>,
        below: Seq,
        limit: usize,
    ) -> Result<Vec<Descriptor>, StorageError> {
        self.with_state(|s| Ok(state_descriptors(s, after, below, limit)))
    }

    fn entry_head(&self, id: &RecordId, below: Seq) -> Result<Option<Descriptor>, StorageError> {
        self.with_state(|s| Ok(state_entry_head(s, id, below)))
    }

    fn fragment_bytes(
        &self,
        head: &Descriptor,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>, StorageError> {
        self.with_state(|s| state_fragment(s, head, offset, len))
    }
}
