//! custos-postgres — the PostgreSQL shell of custos: the same ports as the
//! SQLite shell, on a server that several hosts share.
//!
//! (Crate documentation is completed with the ports; see each module.)

pub mod catalogue;
pub mod cluster;
pub mod conn;
pub mod control;
pub mod ledger;
pub mod storage;

pub use conn::{redact, ConnectError, SchemaError, Target};
