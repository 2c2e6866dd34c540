//! [`MemoryLedger`]: the [`Ledger`] port over [`LedgerState`] behind a mutex.

use std::sync::{Mutex, MutexGuard};

use super::{decide, Answer, Ledger, LedgerError, LedgerState, Limits, Request};

/// The `BackendFault` reason a poisoned memory ledger answers.
pub const REASON_POISONED: &str = "memory-ledger-poisoned";

/// The memory backend: a [`LedgerState`] behind a [`Mutex`]. Each request
/// loads its footprint's [`super::View`], decides and applies the effects
/// under the lock — the same three steps a SQLite transaction takes.
#[derive(Debug, Default)]
pub struct MemoryLedger {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    state: LedgerState,
    closed: bool,
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
            inner: Mutex::new(Inner {
                state,
                closed: false,
            }),
        };
        ledger.recover()?;
        Ok(ledger)
    }

    /// A copy of the current state (also after close).
    pub fn snapshot(&self) -> Result<LedgerState, LedgerError> {
        Ok(self.lock()?.state.clone())
    }

    fn lock(&self) -> Result<MutexGuard<'_, Inner>, LedgerError> {
        self.inner.lock().map_err(|_| LedgerError::BackendFault {
            reason: REASON_POISONED.to_owned(),
        })
    }
}

impl Ledger for MemoryLedger {
    fn execute(&self, limits: &Limits, req: &Request) -> Result<Answer, LedgerError> {
        let mut g = self.lock()?;
        if g.closed {
            return Err(LedgerError::HandleClosed);
        }
        let view = g.state.view(&req.footprint());
        let d = decide(&view, limits, req)?;
        g.state.apply(&d.effects);
        Ok(d.answer)
    }

    fn close(&self) -> Result<(), LedgerError> {
        self.lock()?.closed = true;
        Ok(())
    }

    fn records(&self) -> Result<u64, LedgerError> {
        let g = self.lock()?;
        if g.closed {
            return Err(LedgerError::HandleClosed);
        }
        Ok(g.state.records())
    }
}
