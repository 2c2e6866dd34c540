//! The errors of the Iceberg shell.

use std::path::PathBuf;

use thiserror::Error;

/// Why an Iceberg operation failed. The first word of each message is a
/// stable reason (see [`IcebergError::reason`]).
#[derive(Debug, Error)]
pub enum IcebergError {
    /// The physical table schema no longer matches the control-catalog
    /// record: the read fails closed and returns no rows.
    #[error(
        "CatalogSchemaMismatch: table {table_id}: the control catalog records fingerprint \
         {expected}, the physical schema fingerprints as {actual}; refusing to read"
    )]
    CatalogSchemaMismatch {
        /// The table.
        table_id: String,
        /// The fingerprint in the control catalog.
        expected: String,
        /// The fingerprint of the physical schema.
        actual: String,
    },
    /// No table of that name exists in the namespace. Nothing was created.
    #[error("NotFound: table {namespace}.{table_id} does not exist")]
    TableNotFound {
        /// The namespace.
        namespace: String,
        /// The table.
        table_id: String,
    },
    /// The storage has no Iceberg catalog file. Nothing was created.
    #[error("NotFound: no Iceberg catalog at {}", path.display())]
    CatalogNotFound {
        /// Where the catalog file was looked for.
        path: PathBuf,
    },
    /// An Arrow type has no logical counterpart, or a logical type cannot
    /// be stored in Iceberg unchanged.
    #[error("UnsupportedType: column {path}: {ty}")]
    UnsupportedType {
        /// The column path (`a.b` for a struct field, `a[]` for a list item).
        path: String,
        /// The type.
        ty: String,
    },
    /// The storage identity cannot be served by this shell.
    #[error("UnsupportedIdentity: {detail}")]
    UnsupportedIdentity {
        /// Why.
        detail: String,
    },
    /// A control-catalog descriptor is malformed, or a request names a
    /// component the descriptor does not have.
    #[error("InvalidDescriptor: table {table_id}: {detail}")]
    InvalidDescriptor {
        /// The table.
        table_id: String,
        /// What is wrong.
        detail: String,
    },
    /// A write was attempted through a store opened read-only.
    #[error("ReadOnly: this store was opened read-only; {op} refused")]
    ReadOnly {
        /// The refused operation.
        op: &'static str,
    },
    /// The blocking facade was called from inside an async runtime.
    #[error("AsyncContext: the blocking Iceberg facade cannot run inside an async runtime")]
    AsyncContext,
    /// The Iceberg library failed.
    #[error("Iceberg: {op}: {source}")]
    Iceberg {
        /// What was being done.
        op: &'static str,
        /// The library error (boxed: it is large).
        #[source]
        source: Box<iceberg::Error>,
    },
    /// Arrow failed (building or slicing a batch).
    #[error("Arrow: {op}: {source}")]
    Arrow {
        /// What was being done.
        op: &'static str,
        /// The library error.
        #[source]
        source: arrow::error::ArrowError,
    },
    /// A migration destination table holds content other than the plan's:
    /// nothing is appended to it.
    #[error("DestinationConflict: table {table}: {detail}")]
    DestinationConflict {
        /// The table.
        table: String,
        /// What differs.
        detail: String,
    },
    /// The reply of a destination commit was lost (or the commit failed in
    /// a way that does not say whether it landed): the table is in doubt
    /// until an inspection of the destination decides.
    #[error("CommitInDoubt: table {table}: {detail}")]
    CommitInDoubt {
        /// The table.
        table: String,
        /// The failure.
        detail: String,
    },
    /// The source's pinned snapshot no longer reads as the plan's evidence.
    #[error("SourceDrift: table {table}: {detail}")]
    SourceDrift {
        /// The table.
        table: String,
        /// What differs.
        detail: String,
    },
    /// A fresh read of the committed destination does not reproduce the
    /// plan's evidence.
    #[error("VerifyMismatch: table {table}: {detail}")]
    VerifyMismatch {
        /// The table.
        table: String,
        /// What differs.
        detail: String,
    },
    /// A table's partition spec or sort order names a column its schema
    /// does not have: its metadata cannot be described, so it is neither
    /// fingerprinted nor copied.
    #[error("MalformedTableMetadata: table {table}: {detail}")]
    MalformedTableMetadata {
        /// The table.
        table: String,
        /// What is wrong.
        detail: String,
    },
    /// A filesystem or runtime operation failed.
    #[error("Io: {op}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

impl IcebergError {
    /// The failure's [`Class`](custos_core::Class): what the caller does next
    /// (a table whose schema or metadata does not match the record is `CorruptArtifact`; a commit whose outcome is unknown is `Unavailable` (read again before retrying)).
    pub fn class(&self) -> custos_core::Class {
        use custos_core::Class;
        match self {
            IcebergError::CatalogSchemaMismatch { .. } => Class::CorruptArtifact,
            IcebergError::TableNotFound { .. } => Class::NotFound,
            IcebergError::CatalogNotFound { .. } => Class::NotFound,
            IcebergError::UnsupportedType { .. } => Class::Unsupported,
            IcebergError::UnsupportedIdentity { .. } => Class::Unsupported,
            IcebergError::InvalidDescriptor { .. } => Class::InvalidArgument,
            IcebergError::ReadOnly { .. } => Class::FailedPrecondition,
            IcebergError::AsyncContext => Class::FailedPrecondition,
            IcebergError::Iceberg { .. } => Class::Internal,
            IcebergError::Arrow { .. } => Class::Internal,
            IcebergError::DestinationConflict { .. } => Class::AlreadyExists,
            IcebergError::CommitInDoubt { .. } => Class::Unavailable,
            IcebergError::SourceDrift { .. } => Class::StateConflict,
            IcebergError::VerifyMismatch { .. } => Class::CorruptArtifact,
            IcebergError::MalformedTableMetadata { .. } => Class::CorruptArtifact,
            IcebergError::Io { .. } => Class::Internal,
        }
    }
}

impl IcebergError {
    /// The stable reason word.
    pub fn reason(&self) -> &'static str {
        match self {
            IcebergError::CatalogSchemaMismatch { .. } => "CatalogSchemaMismatch",
            IcebergError::TableNotFound { .. } | IcebergError::CatalogNotFound { .. } => "NotFound",
            IcebergError::UnsupportedType { .. } => "UnsupportedType",
            IcebergError::UnsupportedIdentity { .. } => "UnsupportedIdentity",
            IcebergError::InvalidDescriptor { .. } => "InvalidDescriptor",
            IcebergError::ReadOnly { .. } => "ReadOnly",
            IcebergError::AsyncContext => "AsyncContext",
            IcebergError::Iceberg { .. } => "Iceberg",
            IcebergError::Arrow { .. } => "Arrow",
            IcebergError::DestinationConflict { .. } => "DestinationConflict",
            IcebergError::CommitInDoubt { .. } => "CommitInDoubt",
            IcebergError::SourceDrift { .. } => "SourceDrift",
            IcebergError::VerifyMismatch { .. } => "VerifyMismatch",
            IcebergError::MalformedTableMetadata { .. } => "MalformedTableMetadata",
            IcebergError::Io { .. } => "Io",
        }
    }
}

/// Wraps an Iceberg library error with what was being done.
pub(crate) fn ice(op: &'static str) -> impl FnOnce(iceberg::Error) -> IcebergError {
    move |source| IcebergError::Iceberg {
        op,
        source: Box::new(source),
    }
}
