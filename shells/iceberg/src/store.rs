//! The blocking Iceberg facade: one storage identity, one namespace.
//!
//! # Why blocking
//!
//! Iceberg's Rust API is async; everything else in custos (the control
//! catalog, the CLI, the machines) is synchronous. [`IcebergStore`] owns a
//! small tokio runtime (two worker threads) and runs each operation to
//! completion on it with `block_on`, so callers never see a future and the
//! runtime's lifetime is the store's. The price: a store must not be used
//! from inside another async runtime (`block_on` would panic there), so
//! every operation checks first and returns [`IcebergError::AsyncContext`].
//!
//! # Layout
//!
//! For a local identity `uri + namespace + backend`:
//!
//! - the Iceberg SQL catalog is the SQLite file `<uri>/.custos-iceberg.db`
//!   (catalog name `custos`), the warehouse is `<uri>`, so a table lives
//!   under `<uri>/<namespace>/<table_id>/`;
//! - the control catalog (custos-sqlite) sits beside the data at
//!   `<uri>/<namespace>/.custos-catalog-<backend>.db`
//!   ([`custos_core::identity::catalog_location`]).
//!
//! Remote identities are refused ([`IcebergError::UnsupportedIdentity`]).
//!
//! # Open never creates
//!
//! [`IcebergStore::open_readonly`] refuses a missing catalog file without
//! creating it and connects with SQLite `mode=ro`, so nothing on the read
//! path — [`existing_table_schema`](IcebergStore::existing_table_schema),
//! [`existing_table_batches`](IcebergStore::existing_table_batches),
//! [`list_tables`](IcebergStore::list_tables) — can create a namespace, a
//! table or a file: the connection cannot write, and the read methods call
//! only Iceberg's load/list operations. [`IcebergStore::open_writable`] is
//! the writer's door (it creates the directory, the catalog and the
//! namespace).
//!
//! # Fail closed
//!
//! Before any row is read, the physical table schema (Iceberg's current
//! schema, through its Arrow conversion, mapped by [`crate::logical`]) is
//! fingerprinted and compared with the control-catalog record; a difference
//! is [`IcebergError::CatalogSchemaMismatch`] and no rows are returned.
//! Reads are bounded: at most `max_rows` rows are returned and the result
//! says whether more remained.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef as ArrowSchemaRef;
use custos_core::identity::StorageIdentity;
use custos_core::schema::Schema;
use custos_core::world::Signature;
use futures::TryStreamExt;
use iceberg::io::LocalFsStorageFactory;
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, CatalogBuilder, NamespaceIdent, TableCreation, TableIdent};
use iceberg_catalog_sql::{
    SqlBindStyle, SqlCatalog, SqlCatalogBuilder, SQL_CATALOG_PROP_BIND_STYLE, SQL_CATALOG_PROP_URI,
    SQL_CATALOG_PROP_WAREHOUSE,
};

use crate::discovery::{projection, table_identity};
use crate::error::{ice, IcebergError};
use crate::logical::{iceberg_schema_to_logical, schema_to_iceberg};

/// The Iceberg SQL catalog's file name under the storage uri.
pub const ICEBERG_CATALOG_FILE: &str = ".custos-iceberg.db";

/// The Iceberg catalog name inside that file.
pub const ICEBERG_CATALOG_NAME: &str = "custos";

/// The rows a scan asks Iceberg for per batch.
const SCAN_BATCH_ROWS: usize = 8192;

/// Rows of one cold read.
#[derive(Debug)]
pub struct ColdRead {
    /// The projected columns, in descriptor order.
    pub columns: Vec<String>,
    /// The batches read (each projected to `columns`).
    pub batches: Vec<RecordBatch>,
    /// The number of rows in `batches`.
    pub rows: usize,
    /// Whether the table holds more rows than the limit let through.
    pub truncated: bool,
}

/// An Iceberg store for one storage identity (see the module documentation).
#[derive(Debug)]
pub struct IcebergStore {
    runtime: tokio::runtime::Runtime,
    catalog: SqlCatalog,
    namespace: NamespaceIdent,
    identity: StorageIdentity,
    catalog_path: PathBuf,
    writable: bool,
}

/// Removes a discarded table's directory `dir`, if it is there, and syncs
/// its namespace directory `parent`; answers whether it was there. Anything
/// there but a directory is refused with `conflict`.
fn remove_table_dir(
    dir: &Path,
    parent: &Path,
    conflict: impl FnOnce(String) -> IcebergError,
) -> Result<bool, IcebergError> {
    let had_dir = match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => true,
        Ok(_) => return Err(conflict(format!("{} is not a directory", dir.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(source) => {
            return Err(IcebergError::Io {
                op: "inspect a table directory",
                source,
            })
        }
    };
    if had_dir {
        std::fs::remove_dir_all(dir).map_err(|source| IcebergError::Io {
            op: "remove a table directory",
            source,
        })?;
        if let Ok(parent) = std::fs::File::open(parent) {
            parent.sync_all().map_err(|source| IcebergError::Io {
                op: "sync the namespace directory",
                source,
            })?;
        }
    }
    Ok(had_dir)
}

fn root_of(id: &StorageIdentity) -> Result<PathBuf, IcebergError> {
    if !id.is_local() {
        return Err(IcebergError::UnsupportedIdentity {
            detail: format!(
                "{} is not a local uri; only local warehouses are served",
                id.location()
            ),
        });
    }
    Ok(PathBuf::from(id.location()))
}

/// Where the Iceberg catalog of `id` lives (`<uri>/.custos-iceberg.db`).
pub fn iceberg_catalog_path(id: &StorageIdentity) -> Result<PathBuf, IcebergError> {
    Ok(root_of(id)?.join(ICEBERG_CATALOG_FILE))
}

fn runtime() -> Result<tokio::runtime::Runtime, IcebergError> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(IcebergError::AsyncContext);
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|source| IcebergError::Io {
            op: "start the Iceberg runtime",
            source,
        })
}

pub(crate) fn unique_prefix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "custos-{}-{nanos}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

impl IcebergStore {
    fn open(id: &StorageIdentity, writable: bool) -> Result<Self, IcebergError> {
        let root = root_of(id)?;
        let catalog_path = root.join(ICEBERG_CATALOG_FILE);
        if !writable && !catalog_path.is_file() {
            return Err(IcebergError::CatalogNotFound { path: catalog_path });
        }
        let runtime = runtime()?;
        if writable {
            std::fs::create_dir_all(&root).map_err(|source| IcebergError::Io {
                op: "create the warehouse directory",
                source,
            })?;
        }
        let mode = if writable { "rwc" } else { "ro" };
        let props = HashMap::from([
            (
                SQL_CATALOG_PROP_URI.to_string(),
                format!("sqlite:{}?mode={mode}", catalog_path.display()),
            ),
            (
                SQL_CATALOG_PROP_WAREHOUSE.to_string(),
                format!("file://{}", root.display()),
            ),
            (
                SQL_CATALOG_PROP_BIND_STYLE.to_string(),
                SqlBindStyle::QMark.to_string(),
            ),
        ]);
        let catalog = runtime
            .block_on(
                SqlCatalogBuilder::default()
                    .with_storage_factory(Arc::new(LocalFsStorageFactory))
                    .with_runtime(iceberg::Runtime::new(&runtime))
                    .load(ICEBERG_CATALOG_NAME, props),
            )
            .map_err(ice("open the Iceberg catalog"))?;
        let namespace = NamespaceIdent::new(id.namespace().to_owned());
        let store = IcebergStore {
            runtime,
            catalog,
            namespace,
            identity: id.clone(),
            catalog_path,
            writable,
        };
        if writable {
            store.run(async {
                if !store
                    .catalog
                    .namespace_exists(&store.namespace)
                    .await
                    .map_err(ice("check the namespace"))?
                {
                    store
                        .catalog
                        .create_namespace(&store.namespace, HashMap::new())
                        .await
                        .map_err(ice("create the namespace"))?;
                }
                Ok(())
            })?;
        }
        Ok(store)
    }

    /// Opens the store of `id` for reading. Creates nothing: a missing
    /// catalog file is [`IcebergError::CatalogNotFound`], and the catalog
    /// connection is read-only.
    pub fn open_readonly(id: &StorageIdentity) -> Result<Self, IcebergError> {
        Self::open(id, false)
    }

    /// Opens the store of `id` for writing, creating the warehouse
    /// directory, the catalog file and the namespace when missing.
    pub fn open_writable(id: &StorageIdentity) -> Result<Self, IcebergError> {
        Self::open(id, true)
    }

    /// The storage identity.
    pub fn identity(&self) -> &StorageIdentity {
        &self.identity
    }

    /// Whether the store was opened for writing.
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// The namespace the store serves.
    pub(crate) fn namespace_ident(&self) -> &NamespaceIdent {
        &self.namespace
    }

    /// The Iceberg catalog file.
    pub fn catalog_path(&self) -> &Path {
        &self.catalog_path
    }

    /// The underlying Iceberg catalog (for out-of-band tooling and tests).
    pub fn iceberg_catalog(&self) -> &SqlCatalog {
        &self.catalog
    }

    /// Runs `fut` to completion on the store's runtime.
    pub fn run<T>(
        &self,
        fut: impl std::future::Future<Output = Result<T, IcebergError>>,
    ) -> Result<T, IcebergError> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(IcebergError::AsyncContext);
        }
        self.runtime.block_on(fut)
    }

    pub(crate) fn ident(&self, table_id: &str) -> TableIdent {
        TableIdent::new(self.namespace.clone(), table_id.to_owned())
    }

    /// Loads a table that must already exist; a miss creates nothing.
    pub(crate) async fn load_existing(&self, table_id: &str) -> Result<Table, IcebergError> {
        let ident = self.ident(table_id);
        let exists = self
            .catalog
            .namespace_exists(&self.namespace)
            .await
            .map_err(ice("check the namespace"))?
            && self
                .catalog
                .table_exists(&ident)
                .await
                .map_err(ice("check the table"))?;
        if !exists {
            return Err(IcebergError::TableNotFound {
                namespace: self.identity.namespace().to_owned(),
                table_id: table_id.to_owned(),
            });
        }
        self.catalog
            .load_table(&ident)
            .await
            .map_err(ice("load the table"))
    }

    /// The tables of the namespace, by name, from the catalog (never from
    /// the warehouse directory). An absent namespace has none.
    pub fn list_tables(&self) -> Result<Vec<String>, IcebergError> {
        self.run(async {
            if !self
                .catalog
                .namespace_exists(&self.namespace)
                .await
                .map_err(ice("check the namespace"))?
            {
                return Ok(vec![]);
            }
            let mut names: Vec<String> = self
                .catalog
                .list_tables(&self.namespace)
                .await
                .map_err(ice("list the tables"))?
                .into_iter()
                .map(|t| t.name().to_owned())
                .collect();
            names.sort();
            Ok(names)
        })
    }

    /// The physical logical schema of an existing table. Opens and never
    /// creates: a miss is [`IcebergError::TableNotFound`].
    pub fn existing_table_schema(&self, table_id: &str) -> Result<Schema, IcebergError> {
        self.run(async {
            let table = self.load_existing(table_id).await?;
            iceberg_schema_to_logical(table.metadata().current_schema())
        })
    }

    /// Reads at most `max_rows` rows of the table `signature` describes,
    /// projected to the key columns and the requested `components`.
    ///
    /// Opens and never creates. The signature must be self-consistent
    /// ([`Signature::validate`]); the physical schema's fingerprint must
    /// equal the signature's, else [`IcebergError::CatalogSchemaMismatch`]
    /// and no rows.
    pub fn existing_table_batches(
        &self,
        signature: &Signature,
        components: &[String],
        max_rows: usize,
    ) -> Result<ColdRead, IcebergError> {
        signature
            .validate()
            .map_err(|e| IcebergError::InvalidDescriptor {
                table_id: signature.table_id.clone(),
                detail: e.to_string(),
            })?;
        let columns = projection(signature, components)?;
        self.run(async {
            let table = self.load_existing(&signature.table_id).await?;
            let physical = iceberg_schema_to_logical(table.metadata().current_schema())?;
            let actual = physical.fingerprint();
            if actual != signature.fingerprint {
                return Err(IcebergError::CatalogSchemaMismatch {
                    table_id: signature.table_id.clone(),
                    expected: signature.fingerprint.clone(),
                    actual,
                });
            }
            let mut read = ColdRead {
                columns: columns.clone(),
                batches: vec![],
                rows: 0,
                truncated: false,
            };
            if table.metadata().current_snapshot().is_none() {
                return Ok(read);
            }
            let mut stream = table
                .scan()
                .select(columns.iter())
                .with_batch_size(Some(SCAN_BATCH_ROWS))
                .build()
                .map_err(ice("plan the scan"))?
                .to_arrow()
                .await
                .map_err(ice("start the scan"))?;
            while let Some(batch) = stream.try_next().await.map_err(ice("read a batch"))? {
                if batch.num_rows() == 0 {
                    continue;
                }
                let room = max_rows.saturating_sub(read.rows);
                if room == 0 {
                    read.truncated = true;
                    break;
                }
                let take = batch.num_rows().min(room);
                if take < batch.num_rows() {
                    read.truncated = true;
                }
                read.rows += take;
                read.batches.push(batch.slice(0, take));
                if read.truncated {
                    break;
                }
            }
            Ok(read)
        })
    }

    /// Creates the table for `components` and `schema` (a writer's step):
    /// its name is [`table_identity`] of the components and the schema's
    /// fingerprint. Refuses types Iceberg cannot store unchanged, and checks
    /// that the created table reads back with the same fingerprint. An
    /// existing table of that name is reused after the same check.
    pub fn create_table(
        &self,
        components: Vec<String>,
        schema: Schema,
    ) -> Result<Signature, IcebergError> {
        if !self.writable {
            return Err(IcebergError::ReadOnly { op: "create_table" });
        }
        let fingerprint = schema.fingerprint();
        let table_id = table_identity(&components, &fingerprint);
        let signature = Signature::new(components, schema, table_id.clone());
        let ice_schema = schema_to_iceberg(&signature.schema)?;
        self.run(async {
            let ident = self.ident(&table_id);
            let table = if self
                .catalog
                .table_exists(&ident)
                .await
                .map_err(ice("check the table"))?
            {
                self.catalog
                    .load_table(&ident)
                    .await
                    .map_err(ice("load the table"))?
            } else {
                let creation = TableCreation::builder()
                    .name(table_id.clone())
                    .schema(ice_schema)
                    .build();
                self.catalog
                    .create_table(&self.namespace, creation)
                    .await
                    .map_err(ice("create the table"))?
            };
            let actual =
                iceberg_schema_to_logical(table.metadata().current_schema())?.fingerprint();
            if actual != fingerprint {
                return Err(IcebergError::CatalogSchemaMismatch {
                    table_id: table_id.clone(),
                    expected: fingerprint.clone(),
                    actual,
                });
            }
            Ok(())
        })?;
        Ok(signature)
    }

    /// Removes the table `table_id` of the namespace — its catalog entry,
    /// then its directory `<uri>/<namespace>/<table_id>`, where this store
    /// creates every table — and answers whether anything was there.
    ///
    /// Safe to repeat after a crash at any point: a retry that finds the
    /// entry gone still removes the directory. A table whose location is
    /// anywhere else was not made by this store and is refused
    /// ([`IcebergError::DestinationConflict`]), as is a name that is not a
    /// plain directory name (the store's own files start with `.custos`).
    /// What it removes is gone for good: the caller (abandoning a
    /// migration that never reached activation) decides that nothing of
    /// it was ever discoverable.
    pub fn discard_table(&self, table_id: &str) -> Result<bool, IcebergError> {
        if !self.writable {
            return Err(IcebergError::ReadOnly {
                op: "discard_table",
            });
        }
        let conflict = |detail: String| IcebergError::DestinationConflict {
            table: table_id.to_owned(),
            detail,
        };
        if table_id.is_empty()
            || table_id.starts_with('.')
            || table_id.contains('/')
            || table_id.contains('\\')
        {
            return Err(conflict("not a plain table directory name".into()));
        }
        let root = root_of(&self.identity)?;
        let dir = root.join(self.identity.namespace()).join(table_id);
        let expected = format!("file://{}", dir.display());
        let had_entry = self.run(async {
            let ident = self.ident(table_id);
            if !self
                .catalog
                .namespace_exists(&self.namespace)
                .await
                .map_err(ice("check the namespace"))?
                || !self
                    .catalog
                    .table_exists(&ident)
                    .await
                    .map_err(ice("check the table"))?
            {
                return Ok(false);
            }
            let table = self
                .catalog
                .load_table(&ident)
                .await
                .map_err(ice("load the table"))?;
            let location = table.metadata().location().trim_end_matches('/');
            if location != expected {
                return Err(conflict(format!(
                    "its location {location} is not {expected}, where this store makes tables"
                )));
            }
            self.catalog
                .drop_table(&ident)
                .await
                .map_err(ice("drop the table"))?;
            Ok(true)
        })?;
        let had_dir = remove_table_dir(&dir, &root.join(self.identity.namespace()), conflict)?;
        Ok(had_entry || had_dir)
    }

    /// The Arrow schema batches for `table_id` must have (field ids,
    /// nullability and list items as Iceberg expects).
    pub fn table_arrow_schema(&self, table_id: &str) -> Result<ArrowSchemaRef, IcebergError> {
        self.run(async {
            let table = self.load_existing(table_id).await?;
            let arrow = iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())
                .map_err(ice("convert the table schema to Arrow"))?;
            Ok(Arc::new(arrow))
        })
    }

    /// Appends `batches` to an existing table as one snapshot; returns the
    /// number of rows written.
    pub fn append(&self, table_id: &str, batches: &[RecordBatch]) -> Result<u64, IcebergError> {
        if !self.writable {
            return Err(IcebergError::ReadOnly { op: "append" });
        }
        self.run(async {
            let table = self.load_existing(table_id).await?;
            let mut writer = crate::transfer::data_writer(&table)
                .await
                .map_err(ice("start the data file writer"))?;
            let mut rows = 0u64;
            for b in batches {
                rows += b.num_rows() as u64;
                writer
                    .write(b.clone())
                    .await
                    .map_err(ice("write a batch"))?;
            }
            let files = writer.close().await.map_err(ice("close the data files"))?;
            let tx = Transaction::new(&table);
            let tx = tx
                .fast_append()
                .add_data_files(files)
                .apply(tx)
                .map_err(ice("stage the append"))?;
            tx.commit(&self.catalog)
                .await
                .map_err(ice("commit the append"))?;
            Ok(rows)
        })
    }
}
