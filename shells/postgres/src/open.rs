//! Why a store on PostgreSQL could not be opened: one error for every port
//! of this shell (session storage, the catalogue, the control catalog, the
//! execution ledger), so a caller handles an open's failure once, by its
//! [`Class`].
//!
//! No message carries a credential: every reason is built from the
//! redacted endpoint and the server's own words about the request.

use std::fmt;

use custos_core::lease::LeaseError;
use custos_core::ledger::LedgerError;
use custos_core::Class;
use thiserror::Error;

use crate::conn::{db, Component, Conn, ConnectError, Failure, TxError};
use crate::storage::MAX_SESSION_LEN;

/// Why a read-only open refused a schema ([`OpenError::NotReadable`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No schema of that name exists.
    MissingSchema,
    /// The schema stores no `what` (no row for it in `custos_versions`).
    NotStored {
        /// What the open looked for: `control catalog`, `catalogue`,
        /// `execution ledger`.
        what: &'static str,
    },
    /// The recorded version is not the one this build reads.
    Version {
        /// What the open looked for.
        what: &'static str,
        /// The stored version.
        found: i64,
        /// The version this build reads.
        supported: i64,
    },
    /// The recorded version is readable but a table of it is missing.
    MissingTable {
        /// What the open looked for.
        what: &'static str,
        /// The table.
        table: &'static str,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::MissingSchema => write!(f, "does not exist (nothing was created)"),
            Refusal::NotStored { what } => write!(f, "holds no {what}"),
            Refusal::Version {
                what,
                found,
                supported,
            } => write!(
                f,
                "holds a {what} of version {found}; this build reads version {supported}"
            ),
            Refusal::MissingTable { what, table } => {
                write!(f, "holds a {what} without its table {table}")
            }
        }
    }
}

/// Why an open of a PostgreSQL store failed. Nothing was created by a
/// refused read-only open.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum OpenError {
    /// The session name is empty, too long or has control characters.
    #[error("InvalidSession: a session name must be 1..={max} bytes without control characters (got {len} bytes)", max = MAX_SESSION_LEN)]
    InvalidSession {
        /// The rejected name's length in bytes.
        len: usize,
    },
    /// The schema's tables are at a version this build does not know
    /// (newer). Nothing was written.
    #[error("UnsupportedVersion: {component} in schema {schema} is at version {found}; this build supports {supported}")]
    UnsupportedVersion {
        /// The component (`storage`, `catalogue`, `control`, `ledger`).
        component: &'static str,
        /// The PostgreSQL schema.
        schema: String,
        /// The stored version.
        found: i64,
        /// This build's version.
        supported: i64,
    },
    /// A read-only open found nothing it can read in the schema.
    #[error("NotReadable: schema {schema} {rule}")]
    NotReadable {
        /// The schema.
        schema: String,
        /// The rule it breaks.
        rule: Refusal,
    },
    /// The lease machine refused the admission: another owner's unexpired
    /// lease ([`LeaseError::LeaseHeld`], shown as the machine says it), or
    /// a bad ttl / exhausted fence.
    #[error("{}", open_lease_message(.0))]
    Lease(#[from] LeaseError),
    /// The server could not be reached (refused or dropped connection,
    /// shutting down, a login refused). Retrying the open converges.
    #[error("Unavailable: {reason}")]
    Unavailable {
        /// What failed (never a credential).
        reason: String,
    },
    /// The server failed otherwise.
    #[error("Fault: {reason}")]
    Fault {
        /// What failed (never a credential).
        reason: String,
    },
    /// A stored row the open read does not decode.
    #[error("Corrupt: {detail}")]
    Corrupt {
        /// What was found.
        detail: String,
    },
    /// The ledger's restart recovery failed.
    #[error("Recovery: {0}")]
    Recovery(LedgerError),
}

fn open_lease_message(e: &LeaseError) -> String {
    match e {
        LeaseError::LeaseHeld { .. } => e.to_string(),
        other => format!("Lease: {other}"),
    }
}

impl OpenError {
    /// The failure's [`Class`]: no such store (a missing schema, or one
    /// holding none) is `NotFound`; a version this build does not read is
    /// `Unsupported`; a store missing a table, or a row that does not
    /// decode, is `CorruptArtifact`; a server that does not answer (or not
    /// in time, or refuses the login) is `Unavailable`; the lease's and the
    /// recovery's refusals keep their own class; the server's other
    /// failures are `Internal`.
    pub fn class(&self) -> Class {
        match self {
            OpenError::InvalidSession { .. } => Class::InvalidArgument,
            OpenError::NotReadable {
                rule: Refusal::MissingSchema | Refusal::NotStored { .. },
                ..
            } => Class::NotFound,
            OpenError::NotReadable {
                rule: Refusal::Version { .. },
                ..
            }
            | OpenError::UnsupportedVersion { .. } => Class::Unsupported,
            OpenError::NotReadable { .. } | OpenError::Corrupt { .. } => Class::CorruptArtifact,
            OpenError::Lease(e) => e.class(),
            OpenError::Recovery(e) => e.class(),
            OpenError::Unavailable { .. } => Class::Unavailable,
            OpenError::Fault { .. } => Class::Internal,
        }
    }
}

impl From<ConnectError> for OpenError {
    fn from(e: ConnectError) -> Self {
        match e {
            ConnectError::Unavailable { endpoint, reason } => OpenError::Unavailable {
                reason: format!("{endpoint}: {reason}"),
            },
            other => OpenError::Fault {
                reason: other.to_string(),
            },
        }
    }
}

impl Component {
    /// Creates or migrates the component's tables in one transaction,
    /// serialized against concurrent first uses by a transaction-scoped
    /// advisory lock (released at commit; it guards DDL only, never
    /// ownership). A newer stored version is refused before anything is
    /// written — the schema is not even created.
    pub fn prepare(&self, conn: &Conn) -> Result<(), OpenError> {
        let schema = conn.target().schema().to_owned();
        let supported = self.supported();
        let r = conn.write(|tx| {
            tx.execute(
                "SELECT pg_advisory_xact_lock(hashtext('custos-schema:' || $1))",
                &[&schema],
            )
            .map_err(db("schema-lock"))?;
            let exists: bool = tx
                .query_one(
                    "SELECT to_regclass(quote_ident($1) || '.custos_versions') IS NOT NULL",
                    &[&schema],
                )
                .and_then(|r| r.try_get(0))
                .map_err(db("schema-probe"))?;
            let found: i64 = if exists {
                tx.query_opt(
                    "SELECT version FROM custos_versions WHERE component = $1",
                    &[&self.name],
                )
                .map_err(db("schema-version"))?
                .map(|r| r.try_get(0))
                .transpose()
                .map_err(db("schema-version"))?
                .unwrap_or(0)
            } else {
                0
            };
            if found > supported || found < 0 {
                return Err(TxError::Refused(OpenError::UnsupportedVersion {
                    component: self.name,
                    schema: schema.clone(),
                    found,
                    supported,
                }));
            }
            if found == supported {
                return Ok(());
            }
            // Quoted: a schema named by an SQL key word (`user`, `select`)
            // is an identifier here as everywhere else.
            tx.batch_execute(&format!(
                "CREATE SCHEMA IF NOT EXISTS \"{schema}\";
                 CREATE TABLE IF NOT EXISTS \"{schema}\".custos_versions (
                     component text PRIMARY KEY,
                     version bigint NOT NULL CHECK (version >= 0)
                 );"
            ))
            .map_err(db("schema-create"))?;
            let from = usize::try_from(found).unwrap_or(0);
            for step in self.steps.get(from..).unwrap_or(&[]) {
                tx.batch_execute(step).map_err(db("schema-step"))?;
            }
            tx.execute(
                "INSERT INTO custos_versions (component, version) VALUES ($1, $2)
                 ON CONFLICT (component) DO UPDATE SET version = EXCLUDED.version",
                &[&self.name, &supported],
            )
            .map_err(db("schema-record"))?;
            Ok(())
        });
        r.map_err(|e| e.settle(Into::into))
    }
}

impl From<Failure> for OpenError {
    fn from(f: Failure) -> Self {
        match f {
            Failure::Unavailable(reason) => OpenError::Unavailable { reason },
            Failure::Corrupt(detail) => OpenError::Corrupt { detail },
            other => OpenError::Fault {
                reason: other.to_string(),
            },
        }
    }
}
