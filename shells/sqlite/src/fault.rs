//! The shell's internal failure type and its mapping onto the port's errors.

use custos_core::storage::{CommitError, StorageError};

/// A failure inside the shell: SQLite said no, or a row broke an invariant.
#[derive(Debug)]
pub(crate) enum Fault {
    /// SQLite failed during `op`.
    Db(&'static str, rusqlite::Error),
    /// A stored row does not decode or breaks an invariant.
    Corrupt(String),
}

impl Fault {
    /// A `map_err` adapter naming the failed operation.
    pub(crate) fn db(op: &'static str) -> impl FnOnce(rusqlite::Error) -> Fault {
        move |e| Fault::Db(op, e)
    }

    /// A stable, human-readable reason string.
    pub(crate) fn reason(&self) -> String {
        match self {
            Fault::Db(op, e) => format!("sqlite-{op}: {e}"),
            Fault::Corrupt(d) => format!("corrupt: {d}"),
        }
    }
}

impl From<custos_core::columns::ColumnError> for Fault {
    fn from(e: custos_core::columns::ColumnError) -> Self {
        Fault::Corrupt(e.to_string())
    }
}

impl From<Fault> for StorageError {
    fn from(f: Fault) -> Self {
        match f {
            Fault::Corrupt(detail) => StorageError::Corrupt { detail },
            db @ Fault::Db(..) => StorageError::BackendFault {
                reason: db.reason(),
            },
        }
    }
}

impl From<Fault> for CommitError {
    fn from(f: Fault) -> Self {
        CommitError::Faulted { reason: f.reason() }
    }
}
