//! [`MemoryStorage`]: the [`Storage`] port over [`StoreState`] behind a mutex.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::query::{BranchScan, EntryScan, UsageScan};
use super::state::StoreState;
use super::types::{
    Entry, EntryHead, KeyPrefix, Namespace, RecordId, Register, RegisterKey, Stats, UsageRow,
};
use super::{Commit, CommitError, CommitReceipt, Storage, StorageError, REASON_HANDLE_CLOSED};

/// The `Faulted` / `BackendFault` reason a poisoned memory store answers.
pub const REASON_POISONED: &str = "memory-store-poisoned";

/// The memory backend: a [`StoreState`] behind a [`Mutex`]. Closing drops
/// nothing but seals the handle; a poisoned mutex is a typed fault.
///
/// Nothing in it is durable. [`MemoryStorage::reopen`] stands in for a
/// process reopening a file: a second handle over the same state, with a
/// closed flag of its own.
#[derive(Debug, Default)]
pub struct MemoryStorage {
    inner: Arc<Mutex<StoreState>>,
    closed: AtomicBool,
}

impl MemoryStorage {
    /// A fresh, empty, open store.
    pub fn new() -> Self {
        MemoryStorage::default()
    }

    /// An open store over an existing state.
    pub fn from_state(state: StoreState) -> Self {
        MemoryStorage {
            inner: Arc::new(Mutex::new(state)),
            closed: AtomicBool::new(false),
        }
    }

    /// A new open handle over this store's state (closing this one does not
    /// close it): the memory backend's stand-in for reopening a file. It
    /// keeps the state across the "reopen" and survives no process exit.
    pub fn reopen(&self) -> Self {
        MemoryStorage {
            inner: Arc::clone(&self.inner),
            closed: AtomicBool::new(false),
        }
    }

    /// A copy of the current state (also after close), for tests and
    /// differential checks.
    pub fn snapshot(&self) -> Result<StoreState, StorageError> {
        Ok(self.lock()?.clone())
    }

    fn lock(&self) -> Result<MutexGuard<'_, StoreState>, StorageError> {
        self.inner.lock().map_err(|_| StorageError::BackendFault {
            reason: REASON_POISONED.to_owned(),
        })
    }

    /// Runs `f` over the state under the lock (one coherent cut, for the
    /// snapshot reader); a closed handle answers `HandleClosed`.
    pub(crate) fn with_state<T, E: From<StorageError>>(
        &self,
        f: impl FnOnce(&StoreState) -> Result<T, E>,
    ) -> Result<T, E> {
        if self.closed.load(Ordering::Acquire) {
            return Err(StorageError::HandleClosed.into());
        }
        let g = self.lock()?;
        f(&g)
    }

    fn read<T>(
        &self,
        f: impl FnOnce(&StoreState) -> Result<T, StorageError>,
    ) -> Result<T, StorageError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(StorageError::HandleClosed);
        }
        let g = self.lock()?;
        f(&g)
    }
}

impl Storage for MemoryStorage {
    fn commit(&self, commit: &Commit) -> Result<CommitReceipt, CommitError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(CommitError::Faulted {
                reason: REASON_HANDLE_CLOSED.to_owned(),
            });
        }
        let mut g = self.inner.lock().map_err(|_| CommitError::Faulted {
            reason: REASON_POISONED.to_owned(),
        })?;
        g.commit(commit)
    }

    fn get_entries(&self, ids: &[RecordId]) -> Result<Vec<Option<Entry>>, StorageError> {
        self.read(|s| s.get_entries(ids))
    }

    fn get_register(
        &self,
        namespace: &Namespace,
        key: &RegisterKey,
    ) -> Result<Option<Register>, StorageError> {
        self.read(|s| Ok(s.get_register(namespace, key)))
    }

    fn list_registers(
        &self,
        namespace: &Namespace,
        prefix: &KeyPrefix,
    ) -> Result<Vec<Register>, StorageError> {
        self.read(|s| Ok(s.list_registers(namespace, prefix)))
    }

    fn scan_branch(&self, q: &BranchScan) -> Result<Vec<Entry>, StorageError> {
        self.read(|s| s.scan_branch(q))
    }

    fn scan_entries(&self, q: &EntryScan) -> Result<Vec<Entry>, StorageError> {
        self.read(|s| Ok(s.scan_entries(q)))
    }

    fn scan_entry_heads(&self, q: &EntryScan) -> Result<Vec<EntryHead>, StorageError> {
        self.read(|s| Ok(s.scan_entry_heads(q)))
    }

    fn scan_usage(&self, q: &UsageScan) -> Result<Vec<UsageRow>, StorageError> {
        self.read(|s| Ok(s.scan_usage(q)))
    }

    fn stats(&self) -> Result<Stats, StorageError> {
        self.read(|s| Ok(s.stats()))
    }

    fn close(&self) -> Result<(), StorageError> {
        if self.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        // A store whose state a panic left poisoned cannot promise its
        // close was clean: the fault is answered, as every call answers it.
        drop(self.lock()?);
        self.closed.store(true, Ordering::Release);
        Ok(())
    }
}

#[cfg(test)]
impl MemoryStorage {
    pub(crate) fn inner_for_test(&self) -> &Mutex<StoreState> {
        &self.inner
    }
}
