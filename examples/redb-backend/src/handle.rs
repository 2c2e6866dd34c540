//! The open-or-closed redb handle both ports share.
//!
//! A port's handle must refuse every call after `close`, never panic, and
//! answer a second `close` as the first one did. redb's [`Database`] closes
//! when it is dropped (or through [`Database::close`]), which also releases
//! the file lock, so a later open of the same file (a "process restart" in
//! the conformance reopen cases) succeeds while the closed handle is still
//! alive.

use std::sync::{RwLock, RwLockReadGuard};

use redb::{Database, TableDefinition, Value};

/// Why a handle cannot run a call.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// The handle was closed.
    Closed,
    /// The handle's lock was poisoned (a thread panicked while holding it).
    Poisoned,
}

/// The handle's state: an open database, or the answer its close gave.
#[derive(Debug)]
enum Slot {
    Open(Database),
    /// `None` when the close succeeded, else the failure's reason.
    Closed(Option<String>),
}

/// A [`Database`] behind a lock: reads and writes share it (redb serializes
/// write transactions itself), `close` takes it exclusively.
#[derive(Debug)]
pub(crate) struct Handle {
    slot: RwLock<Slot>,
}

/// The reason a poisoned handle answers.
pub(crate) const REASON_POISONED: &str = "redb-handle-poisoned";

impl Handle {
    /// Wraps an open database.
    pub(crate) fn new(db: Database) -> Self {
        Handle {
            slot: RwLock::new(Slot::Open(db)),
        }
    }

    /// Runs `f` over the open database; a closed or poisoned handle answers
    /// `refused(..)` instead.
    pub(crate) fn with_db<T, E>(
        &self,
        refused: impl FnOnce(Refusal) -> E,
        f: impl FnOnce(&Database) -> Result<T, E>,
    ) -> Result<T, E> {
        let guard: RwLockReadGuard<'_, Slot> = match self.slot.read() {
            Ok(g) => g,
            Err(_) => return Err(refused(Refusal::Poisoned)),
        };
        match &*guard {
            Slot::Open(db) => f(db),
            Slot::Closed(_) => Err(refused(Refusal::Closed)),
        }
    }

    /// Closes the database (releasing the file). Idempotent: a later close
    /// answers what the first one did. `Err` carries a reason.
    pub(crate) fn close(&self) -> Result<(), String> {
        let mut guard = self.slot.write().map_err(|_| REASON_POISONED.to_owned())?;
        let previous = std::mem::replace(&mut *guard, Slot::Closed(None));
        let outcome = match previous {
            Slot::Open(db) => db.close().err().map(|e| e.to_string()),
            Slot::Closed(outcome) => outcome,
        };
        *guard = Slot::Closed(outcome.clone());
        match outcome {
            None => Ok(()),
            Some(reason) => Err(reason),
        }
    }
}

/// Creates (or opens) the redb file at `path` and runs `create_tables` in
/// one write transaction, so that every table exists before a read
/// transaction opens it. `Err` is redb's error.
pub(crate) fn create_with_tables(
    path: &std::path::Path,
    create_tables: impl FnOnce(&redb::WriteTransaction) -> Result<(), redb::TableError>,
) -> Result<Database, redb::Error> {
    let db = Database::create(path)?;
    let txn = db.begin_write()?;
    create_tables(&txn)?;
    txn.commit()?;
    Ok(db)
}

/// Opens (creating it when absent) one table in a write transaction.
pub(crate) fn ensure<K: redb::Key + 'static, V: Value + 'static>(
    txn: &redb::WriteTransaction,
    table: TableDefinition<K, V>,
) -> Result<(), redb::TableError> {
    txn.open_table(table).map(drop)
}
