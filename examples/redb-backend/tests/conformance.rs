//! The whole ledger and storage conformance suites against the redb
//! backends: every case on a fresh file, and every reopen case on a file
//! that is opened, dropped and opened again (restart recovery included for
//! the ledger), as a process restart would.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use custos_core::ledger::{Answer, Ledger, LedgerError, Limits, Request};
use custos_core::storage::{
    BranchScan, Commit, CommitError, CommitReceipt, Entry, EntryHead, EntryScan, KeyPrefix,
    Namespace, RecordId, Register, RegisterKey, Stats, Storage, StorageError, UsageRow, UsageScan,
};
use custos_redb_example::{RedbLedger, RedbStorage};
use tempfile::TempDir;

/// A ledger whose file lives in a temporary directory, removed when the
/// last handle (and place) over it is dropped.
struct TempLedger {
    ledger: RedbLedger,
    _dir: Arc<TempDir>,
}

impl Ledger for TempLedger {
    fn execute(&self, limits: &Limits, req: &Request) -> Result<Answer, LedgerError> {
        self.ledger.execute(limits, req)
    }
    fn close(&self) -> Result<(), LedgerError> {
        self.ledger.close()
    }
    fn records(&self) -> Result<u64, LedgerError> {
        self.ledger.records()
    }
}

fn fresh_ledger() -> TempLedger {
    ledger_place()()
}

/// A ledger file in a temporary directory, opened afresh (restart recovery
/// included) by every call.
fn ledger_place() -> impl Fn() -> TempLedger {
    let dir = Arc::new(tempfile::tempdir().expect("a temp dir"));
    move || TempLedger {
        ledger: RedbLedger::open(dir.path().join("ledger.redb")).expect("open the ledger file"),
        _dir: Arc::clone(&dir),
    }
}

custos_conformance::ledger_suite!(redb_ledger, fresh_ledger, reopen: ledger_place);

/// A session store whose file lives in a temporary directory.
struct TempStorage {
    storage: RedbStorage,
    _dir: Arc<TempDir>,
}

impl Storage for TempStorage {
    fn commit(&self, commit: &Commit) -> Result<CommitReceipt, CommitError> {
        self.storage.commit(commit)
    }
    fn get_entries(&self, ids: &[RecordId]) -> Result<Vec<Option<Entry>>, StorageError> {
        self.storage.get_entries(ids)
    }
    fn get_register(
        &self,
        namespace: &Namespace,
        key: &RegisterKey,
    ) -> Result<Option<Register>, StorageError> {
        self.storage.get_register(namespace, key)
    }
    fn list_registers(
        &self,
        namespace: &Namespace,
        prefix: &KeyPrefix,
    ) -> Result<Vec<Register>, StorageError> {
        self.storage.list_registers(namespace, prefix)
    }
    fn scan_branch(&self, q: &BranchScan) -> Result<Vec<Entry>, StorageError> {
        self.storage.scan_branch(q)
    }
    fn scan_entries(&self, q: &EntryScan) -> Result<Vec<Entry>, StorageError> {
        self.storage.scan_entries(q)
    }
    fn scan_entry_heads(&self, q: &EntryScan) -> Result<Vec<EntryHead>, StorageError> {
        self.storage.scan_entry_heads(q)
    }
    fn scan_usage(&self, q: &UsageScan) -> Result<Vec<UsageRow>, StorageError> {
        self.storage.scan_usage(q)
    }
    fn stats(&self) -> Result<Stats, StorageError> {
        self.storage.stats()
    }
    fn close(&self) -> Result<(), StorageError> {
        self.storage.close()
    }
}

fn fresh_storage() -> TempStorage {
    storage_place()()
}

/// A session file in a temporary directory, opened afresh by every call.
fn storage_place() -> impl Fn() -> TempStorage {
    let dir = Arc::new(tempfile::tempdir().expect("a temp dir"));
    move || TempStorage {
        storage: RedbStorage::open(dir.path().join("session.redb")).expect("open the session file"),
        _dir: Arc::clone(&dir),
    }
}

custos_conformance::storage_suite!(redb_storage, fresh_storage, reopen: storage_place);
