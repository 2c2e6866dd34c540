//! custos-iceberg — the Iceberg shell of custos.
//!
//! Cold reads of archetype tables that never create anything, checked
//! against the control catalog's durable descriptors:
//!
//! - [`logical`] maps Arrow (and Iceberg) types onto
//!   [`custos_core::schema::LogicalType`], the types the schema
//!   fingerprint is computed over;
//! - [`discovery`] plans a query: live signatures united with the control
//!   catalog's records, matched by full fingerprint and table identity;
//! - [`store`] is the blocking facade over Iceberg 0.10 with a SQLite SQL
//!   catalog: open-never-create reads that fail closed with
//!   [`IcebergError::CatalogSchemaMismatch`], and the writer's
//!   create/append;
//! - [`evidence`] and [`transfer`] are migration's table plane: evidence
//!   (logical schema, fingerprint, rows, content digest) of a pinned
//!   snapshot, and a copy in one commit that lands only in an empty table.
//!
//! The control catalog reaches this crate only as
//! `&dyn custos_core::world::ControlCatalog`: shells do not depend on each
//! other, so the SQLite control catalog is wired in by the caller (the
//! `custos` CLI and its end-to-end tests).

pub mod artifacts;
pub mod discovery;
pub mod error;
pub mod evidence;
pub mod logical;
pub mod store;
pub mod tables;
pub mod transfer;

pub use discovery::{query_components, table_identity, PlannedTable, QueryPlan, Source};
pub use error::IcebergError;
pub use evidence::TableEvidence;
pub use store::{ColdRead, IcebergStore};
pub use transfer::{CopyOutcome, Fault, Inspection};

/// The Arrow crate this shell's batches are made of (re-exported so
/// callers build batches with the same version).
pub use arrow;
/// The Iceberg crate behind the facade (re-exported for out-of-band tooling
/// and tests that must speak to the catalog directly).
pub use iceberg;
