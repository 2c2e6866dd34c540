//! [`MemoryLedger`]: the [`Ledger`] port over [`LedgerState`] behind a mutex.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{decide, Answer, Ledger, LedgerError, LedgerState, Limits, Request};

/// The `BackendFault` reason a poisoned memory ledger answers.
pub const REASON_POISONED: &str = "memory-ledger-poisoned";

/// The memory backend: a [`LedgerState`] behind a [`Mutex`]. Each request
/// loads its footprint's [`super::View`], decides and applies the effects
/// under the lock — the same three steps a SQLite transaction takes.
///
/// Nothing in it is durable. [`MemoryLedger::reopen`] stands in for a
/// process reopening a file: a second handle over the same maps, recovered
/// as an open is, with a closed flag of its own.
#[derive(Debug, Default)]
pub struct MemoryLedger {
    state: Arc<Mutex<LedgerState>>,
    closed: AtomicBool,
}

impl MemoryLedger {
    /// A fresh, empty, open ledger.
    pub fn new() -> Self {
        MemoryLedger::default()
    }

    /// Opens a ledger over an existing state: runs restart recovery
    /// ([`Request::Open`]) first, as opening a file does.
    pub fn open(state: LedgerState) -> Result<Self, LedgerError> {
        let ledger = MemoryLedger {
            state: Arc::new(Mutex::new(state)),
            closed: AtomicBool::new(false),
        };
        ledger.recover()?;
        Ok(ledger)
    }

    /// A new open handle over this ledger's maps (this one's close does not
    /// close it), after restart recovery ([`Request::Open`]), as a process
    /// reopening the same file gets. The memory backend keeps its maps
    /// across a "reopen"; it survives no process exit.
    pub fn reopen(&self) -> Result<Self, LedgerError> {
        let ledger = MemoryLedger {
            state: Arc::clone(&self.state),
            closed: AtomicBool::new(false),
        };
        ledger.recover()?;
        Ok(ledger)
    }

    /// A copy of the current state (also after close).
    pub fn snapshot(&self) -> Result<LedgerState, LedgerError> {
        Ok(self.lock()?.clone())
    }

    fn lock(&self) -> Result<MutexGuard<'_, LedgerState>, LedgerError> {
        self.state.lock().map_err(|_| LedgerError::BackendFault {
            reason: REASON_POISONED.to_owned(),
        })
    }

    fn open_state(&self) -> Result<MutexGuard<'_, LedgerState>, LedgerError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(LedgerError::HandleClosed);
        }
        self.lock()
    }
}

impl Ledger for MemoryLedger {
    fn execute(&self, limits: &Limits, req: &Request) -> Result<Answer, LedgerError> {
        let mut g = self.open_state()?;
        let view = g.view(&req.footprint());
        let d = decide(&view, limits, req)?;
        g.apply(&d.effects);
        Ok(d.answer)
    }

    fn close(&self) -> Result<(), LedgerError> {
        self.closed.store(true, Ordering::Release);
        Ok(())
    }

    fn records(&self) -> Result<u64, LedgerError> {
        Ok(self.open_state()?.records())
    }
}
