//! Table evidence and transfer for migration.
//!
//! **Inventory.** [`IcebergStore::namespace_evidence`] enumerates the
//! namespace through the Iceberg catalog (never a hard-coded list, never the
//! warehouse directory) and reads each table's evidence at its current
//! snapshot; [`IcebergStore::table_evidence`] reads one table at a pinned
//! snapshot.
//!
//! **Table metadata.** A table's partition spec, sort order and owner's
//! properties are logical identity, not layout
//! ([`custos_core::migration::metadata`]): [`logical_metadata`] describes
//! them by column name, and the evidence carries that description and its
//! fingerprint. The destination table is created with the source's schema,
//! current partition spec, current sort order and every property but the
//! physical ones; Iceberg gives a new table fresh field ids and re-binds the
//! spec and the order to them by column name, so they name the same
//! columns at the destination whatever ids the source had. Rows are written
//! split by the destination's partition spec, one set of data files per
//! partition.
//!
//! **One commit, only into an empty table.** [`IcebergStore::copy_table`]
//! creates the destination table as above, streams the pinned source
//! snapshot into data files while digesting what it writes (a source that
//! no longer reads as the plan's evidence is [`IcebergError::SourceDrift`],
//! nothing committed), and commits one fast append. Iceberg's `Transaction::commit` re-bases a
//! conflicting commit onto the refreshed table and tries again, which would
//! turn a lost race into a second, blind append; so the commit goes through
//! [`EmptyOnly`], a catalog whose `update_table` refuses (not retryably)
//! unless the table has no snapshot, and then lets the SQL catalog check
//! the transaction's own requirement (main has no snapshot) against its
//! compare-and-swap of the metadata location. The commit therefore
//! succeeds only if the destination is still empty when it lands.
//!
//! An empty source table — no snapshot, or a snapshot without a row —
//! is copied as a destination table without a snapshot: nothing is
//! committed (Iceberg refuses an append of no file), and the evidence is
//! the same, the snapshot being physical.
//!
//! **Ambiguity.** A commit whose reply is lost is
//! [`IcebergError::CommitInDoubt`]; [`IcebergStore::inspect_destination`]
//! decides it from a fresh read: matching evidence converges, no snapshot
//! may retry, anything else conflicts. Nothing is ever appended to a table
//! that has a snapshot.
//!
//! **Verification.** A copy is accepted only after a fresh read of the
//! destination reproduces the logical schema (order, names, normalized
//! types, nullability), the table metadata (partition spec, sort order,
//! owner's properties), row count and content digest.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arrow::array::{make_array, ArrayData, RecordBatch};
use arrow::datatypes::{DataType, SchemaRef as ArrowSchemaRef};
use async_trait::async_trait;
use custos_core::migration::content::{RowWriter, TableDigest};
use custos_core::migration::metadata::{
    is_physical_property, NullOrder, PartitionField, SortDirection, SortField, TableMetadata,
};
use futures::TryStreamExt;
use iceberg::arrow::RecordBatchPartitionSplitter;
use iceberg::spec::{DataFile, DataFileFormat};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::writer::base_writer::data_file_writer::{DataFileWriter, DataFileWriterBuilder};
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::partitioning::fanout_writer::FanoutWriter;
use iceberg::writer::partitioning::PartitioningWriter;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use iceberg::{
    Catalog, ErrorKind, Namespace, NamespaceIdent, TableCommit, TableCreation, TableIdent,
};
use parquet::file::properties::WriterProperties;

use crate::error::{ice, IcebergError};
use crate::evidence::{add_batch, fingerprint, TableEvidence};
use crate::logical::iceberg_schema_to_logical;
use crate::store::{unique_prefix, IcebergStore};

/// The rows a transfer or evidence scan asks Iceberg for per batch.
const BATCH_ROWS: usize = 8192;

/// A fault injected into one destination commit (tests and drills).
#[derive(Debug, Default)]
pub enum Fault {
    /// No fault.
    #[default]
    None,
    /// The commit fails before it reaches the catalog: nothing lands.
    FailBeforeCommit,
    /// The commit lands, and its reply is lost.
    LoseReply,
    /// Another writer appends these rows to the destination just before
    /// the commit (a lost race): the commit must not land.
    ConcurrentAppend(Vec<RecordBatch>),
}

/// What a copy did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CopyOutcome {
    /// Written in one commit and verified by a fresh read.
    Copied(TableEvidence),
    /// The destination already held matching content (a retry): nothing
    /// was written.
    Converged(TableEvidence),
}

/// What an inspection of a destination table found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inspection {
    /// No table, or a table with no snapshot: a copy may (re)try.
    Absent,
    /// The plan's content: converged.
    Matching(TableEvidence),
    /// Other content: the migration must fail.
    Conflicting(TableEvidence),
}

/// A catalog that lets a table update through only while the table has no
/// snapshot (module docs). Faults are injected here.
#[derive(Debug)]
pub struct EmptyOnly<'a> {
    inner: &'a dyn Catalog,
    fault: Mutex<Fault>,
}

impl<'a> EmptyOnly<'a> {
    fn new(inner: &'a dyn Catalog, fault: Fault) -> Self {
        EmptyOnly {
            inner,
            fault: Mutex::new(fault),
        }
    }

    fn take_fault(&self) -> Fault {
        self.fault
            .lock()
            .map(|mut f| std::mem::take(&mut *f))
            .unwrap_or_default()
    }
}

fn refused(msg: String) -> iceberg::Error {
    iceberg::Error::new(ErrorKind::DataInvalid, msg).with_retryable(false)
}

#[async_trait]
impl Catalog for EmptyOnly<'_> {
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> iceberg::Result<Vec<NamespaceIdent>> {
        self.inner.list_namespaces(parent).await
    }
    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> iceberg::Result<Namespace> {
        self.inner.create_namespace(namespace, properties).await
    }
    async fn get_namespace(&self, namespace: &NamespaceIdent) -> iceberg::Result<Namespace> {
        self.inner.get_namespace(namespace).await
    }
    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> iceberg::Result<bool> {
        self.inner.namespace_exists(namespace).await
    }
    async fn update_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> iceberg::Result<()> {
        self.inner.update_namespace(namespace, properties).await
    }
    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> iceberg::Result<()> {
        self.inner.drop_namespace(namespace).await
    }
    async fn list_tables(&self, namespace: &NamespaceIdent) -> iceberg::Result<Vec<TableIdent>> {
        self.inner.list_tables(namespace).await
    }
    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> iceberg::Result<Table> {
        self.inner.create_table(namespace, creation).await
    }
    async fn load_table(&self, table: &TableIdent) -> iceberg::Result<Table> {
        self.inner.load_table(table).await
    }
    async fn drop_table(&self, table: &TableIdent) -> iceberg::Result<()> {
        self.inner.drop_table(table).await
    }
    async fn purge_table(&self, table: &TableIdent) -> iceberg::Result<()> {
        self.inner.purge_table(table).await
    }
    async fn table_exists(&self, table: &TableIdent) -> iceberg::Result<bool> {
        self.inner.table_exists(table).await
    }
    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> iceberg::Result<()> {
        self.inner.rename_table(src, dest).await
    }
    async fn register_table(
        &self,
        table: &TableIdent,
        metadata_location: String,
    ) -> iceberg::Result<Table> {
        self.inner.register_table(table, metadata_location).await
    }
    async fn update_table(&self, commit: TableCommit) -> iceberg::Result<Table> {
        let ident = commit.identifier().clone();
        match self.take_fault() {
            Fault::None => {}
            Fault::FailBeforeCommit => {
                return Err(refused(format!("injected: commit to {ident} failed")))
            }
            Fault::LoseReply => {
                self.inner.update_table(commit).await?;
                return Err(iceberg::Error::new(
                    ErrorKind::Unexpected,
                    format!("injected: the reply of the commit to {ident} was lost"),
                )
                .with_retryable(false));
            }
            Fault::ConcurrentAppend(batches) => {
                let current = self.inner.load_table(&ident).await?;
                append_files(self.inner, &current, &batches).await?;
            }
        }
        let current = self.inner.load_table(&ident).await?;
        if let Some(s) = current.metadata().current_snapshot_id() {
            return Err(refused(format!(
                "{ident} has snapshot {s}: a migration commit lands only in an empty table"
            )));
        }
        self.inner.update_table(commit).await
    }
}

/// Writes `batches` into new data files of `table` and commits them as one
/// fast append through `catalog` (used for injected racing writers).
async fn append_files(
    catalog: &dyn Catalog,
    table: &Table,
    batches: &[RecordBatch],
) -> iceberg::Result<Table> {
    let mut writer = data_writer(table).await?;
    for b in batches {
        writer.write(b.clone()).await?;
    }
    let files = writer.close().await?;
    let tx = Transaction::new(table);
    let tx = tx.fast_append().add_data_files(files).apply(tx)?;
    tx.commit(catalog).await
}

type FileBuilder =
    DataFileWriterBuilder<ParquetWriterBuilder, DefaultLocationGenerator, DefaultFileNameGenerator>;

/// Writes rows into new data files of one table: as they come for an
/// unpartitioned table; split by the table's default partition spec
/// otherwise, each partition into its own files, so that every data file
/// carries its partition value (a fast append refuses a file without one).
///
/// Every batch is first re-labelled with the table's own Arrow schema
/// ([`conform`]): a batch read from another table (a migration's source)
/// carries that table's field ids, and a new table's ids may differ — an
/// Iceberg catalog assigns fresh ones at creation — while the columns, in
/// order, are the same.
pub(crate) struct TableWriter {
    /// The table's Arrow schema (its field ids in the field metadata).
    arrow: ArrowSchemaRef,
    files: Files,
}

enum Files {
    /// An unpartitioned table.
    Plain(
        Box<
            DataFileWriter<
                ParquetWriterBuilder,
                DefaultLocationGenerator,
                DefaultFileNameGenerator,
            >,
        >,
    ),
    /// A partitioned table.
    Partitioned(Box<Partitions>),
}

/// The writer of a partitioned table: a splitter computing each row's
/// partition from the partition spec's transforms, and one writer per
/// partition.
struct Partitions {
    splitter: RecordBatchPartitionSplitter,
    fanout: FanoutWriter<FileBuilder>,
}

impl TableWriter {
    /// Writes `batch` (every column of the table, in schema order).
    pub(crate) async fn write(&mut self, batch: RecordBatch) -> iceberg::Result<()> {
        let batch = conform(batch, &self.arrow)?;
        match &mut self.files {
            Files::Plain(w) => w.write(batch).await,
            Files::Partitioned(p) => {
                for (key, part) in p.splitter.split(&batch)? {
                    p.fanout.write(key, part).await?;
                }
                Ok(())
            }
        }
    }

    /// Closes every file and answers them.
    pub(crate) async fn close(self) -> iceberg::Result<Vec<DataFile>> {
        match self.files {
            Files::Plain(mut w) => w.close().await,
            Files::Partitioned(p) => p.fanout.close().await,
        }
    }
}

/// A writer of new data files for `table` (see [`TableWriter`]).
pub(crate) async fn data_writer(table: &Table) -> iceberg::Result<TableWriter> {
    let schema = table.metadata().current_schema().clone();
    let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema)?);
    let parquet = ParquetWriterBuilder::new(WriterProperties::default(), schema.clone());
    let rolling = RollingFileWriterBuilder::new_with_default_file_size(
        parquet,
        table.file_io().clone(),
        DefaultLocationGenerator::new(table.metadata())?,
        DefaultFileNameGenerator::new(unique_prefix(), None, DataFileFormat::Parquet),
    );
    let builder = DataFileWriterBuilder::new(rolling);
    let spec = table.metadata().default_partition_spec();
    let files = if spec.is_unpartitioned() {
        Files::Plain(Box::new(builder.build(None).await?))
    } else {
        Files::Partitioned(Box::new(Partitions {
            splitter: RecordBatchPartitionSplitter::try_new_with_computed_values(
                schema,
                spec.clone(),
            )?,
            fanout: FanoutWriter::new(builder),
        }))
    };
    Ok(TableWriter { arrow, files })
}

/// `batch` with `schema`: the same columns, in order, re-labelled with
/// `schema`'s fields (names, nullability and field metadata, nested fields
/// included). The data is not touched; a column whose physical layout is
/// not the field's is refused by Arrow's validation.
pub(crate) fn conform(batch: RecordBatch, schema: &ArrowSchemaRef) -> iceberg::Result<RecordBatch> {
    if batch.schema().fields() == schema.fields() {
        return Ok(batch);
    }
    let invalid = |e: String| iceberg::Error::new(ErrorKind::DataInvalid, e);
    if batch.num_columns() != schema.fields().len() {
        return Err(invalid(format!(
            "a batch of {} columns for a table of {}",
            batch.num_columns(),
            schema.fields().len()
        )));
    }
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(c, f)| {
            relabel(c.to_data(), f.data_type())
                .map(make_array)
                .map_err(|e| invalid(format!("column {}: {e}", f.name())))
        })
        .collect::<iceberg::Result<Vec<_>>>()?;
    RecordBatch::try_new(schema.clone(), columns).map_err(|e| invalid(e.to_string()))
}

/// `data` typed as `to`, its children re-labelled recursively.
fn relabel(data: ArrayData, to: &DataType) -> Result<ArrayData, arrow::error::ArrowError> {
    if data.data_type() == to {
        return Ok(data);
    }
    let children = match to {
        DataType::Struct(fields) => data
            .child_data()
            .iter()
            .zip(fields.iter())
            .map(|(c, f)| relabel(c.clone(), f.data_type()))
            .collect::<Result<Vec<_>, _>>()?,
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::FixedSizeList(f, _)
        | DataType::Map(f, _) => data
            .child_data()
            .iter()
            .map(|c| relabel(c.clone(), f.data_type()))
            .collect::<Result<Vec<_>, _>>()?,
        _ => data.child_data().to_vec(),
    };
    data.into_builder()
        .data_type(to.clone())
        .child_data(children)
        .build()
}

/// The partition spec, sort order and owner's properties of `table` (its
/// current ones), each column named by its full path in the current schema
/// ([`custos_core::migration::metadata`]). A spec or order naming a column
/// the schema lacks is [`IcebergError::MalformedTableMetadata`].
pub fn logical_metadata(table: &Table, name: &str) -> Result<TableMetadata, IcebergError> {
    let m = table.metadata();
    let schema = m.current_schema();
    let column = |id: i32, what: &str| {
        schema
            .name_by_field_id(id)
            .map(str::to_owned)
            .ok_or_else(|| IcebergError::MalformedTableMetadata {
                table: name.to_owned(),
                detail: format!("the {what} names field id {id}, which the schema does not have"),
            })
    };
    let partition = m
        .default_partition_spec()
        .fields()
        .iter()
        .map(|f| {
            Ok(PartitionField {
                source: column(f.source_id, "partition spec")?,
                transform: f.transform.to_string(),
                name: f.name.clone(),
            })
        })
        .collect::<Result<Vec<_>, IcebergError>>()?;
    let sort = m
        .default_sort_order()
        .fields
        .iter()
        .map(|f| {
            Ok(SortField {
                source: column(f.source_id, "sort order")?,
                transform: f.transform.to_string(),
                direction: match f.direction {
                    iceberg::spec::SortDirection::Ascending => SortDirection::Ascending,
                    iceberg::spec::SortDirection::Descending => SortDirection::Descending,
                },
                nulls: match f.null_order {
                    iceberg::spec::NullOrder::First => NullOrder::First,
                    iceberg::spec::NullOrder::Last => NullOrder::Last,
                },
            })
        })
        .collect::<Result<Vec<_>, IcebergError>>()?;
    Ok(TableMetadata::new(
        partition,
        sort,
        m.properties().iter().map(|(k, v)| (k.clone(), v.clone())),
    ))
}

/// How the destination of `src` is created under `name`: the source's
/// current schema, partition spec and sort order, and its properties but
/// the physical ones (module docs).
fn creation_of(src: &Table, name: &str) -> TableCreation {
    let m = src.metadata();
    TableCreation::builder()
        .name(name.to_owned())
        .schema(m.current_schema().as_ref().clone())
        .partition_spec(m.default_partition_spec().as_ref().clone())
        .sort_order(m.default_sort_order().as_ref().clone())
        .properties(
            m.properties()
                .iter()
                .filter(|(k, _)| !is_physical_property(k))
                .map(|(k, v)| (k.clone(), v.clone())),
        )
        .build()
}

fn drift(table: &str, what: &str, expected: &TableEvidence, got: &TableEvidence) -> String {
    format!(
        "{what}: expected {} rows, digest {}, schema {}, metadata {}; read {} rows, digest {}, schema {}, metadata {} ({table})",
        expected.content.rows,
        expected.content.digest.hex(),
        expected.schema_fingerprint.hex(),
        expected.metadata_fingerprint.hex(),
        got.content.rows,
        got.content.digest.hex(),
        got.schema_fingerprint.hex(),
        got.metadata_fingerprint.hex(),
    )
}

impl IcebergStore {
    /// Evidence of `name` at `snapshot` (or the current snapshot), read in
    /// full, batch by batch.
    pub fn table_evidence(
        &self,
        name: &str,
        snapshot: Option<i64>,
    ) -> Result<TableEvidence, IcebergError> {
        self.run(async {
            let table = self.load_existing(name).await?;
            evidence_of(&table, name, snapshot).await
        })
    }

    /// Every table of the namespace with its current snapshot id, from
    /// metadata alone.
    pub fn namespace_snapshots(&self) -> Result<Vec<(String, Option<i64>)>, IcebergError> {
        let names = self.list_tables()?;
        names
            .into_iter()
            .map(|n| {
                let id = self.run(async {
                    let table = self.load_existing(&n).await?;
                    Ok(table.metadata().current_snapshot_id())
                })?;
                Ok((n, id))
            })
            .collect()
    }

    /// Evidence of every table of the namespace, by name, each at its
    /// current snapshot. The catalog is the inventory.
    pub fn namespace_evidence(&self) -> Result<Vec<TableEvidence>, IcebergError> {
        let names = self.list_tables()?;
        names.iter().map(|n| self.table_evidence(n, None)).collect()
    }

    /// Inspects the destination table `expected.name` against the plan's
    /// evidence: absent (no table or no snapshot), matching or conflicting.
    pub fn inspect_destination(
        &self,
        expected: &TableEvidence,
    ) -> Result<Inspection, IcebergError> {
        self.run(async {
            let ident = self.ident(&expected.name);
            if !self
                .iceberg_catalog()
                .table_exists(&ident)
                .await
                .map_err(ice("check the table"))?
            {
                return Ok(Inspection::Absent);
            }
            let table = self.load_existing(&expected.name).await?;
            let found = evidence_of(&table, &expected.name, None).await?;
            Ok(if found.same_content(expected) {
                Inspection::Matching(found)
            } else if table.metadata().current_snapshot_id().is_none()
                && found.schema == expected.schema
                && found.metadata == expected.metadata
            {
                Inspection::Absent
            } else {
                Inspection::Conflicting(found)
            })
        })
    }

    /// Copies `expected.name` from `source` at `expected.snapshot` into
    /// this (destination) store in one commit that lands only in an empty
    /// table, then verifies it by a fresh read (module docs). `fault` is
    /// injected into the commit.
    pub fn copy_table(
        &self,
        source: &IcebergStore,
        expected: &TableEvidence,
        fault: Fault,
    ) -> Result<CopyOutcome, IcebergError> {
        if !self.is_writable() {
            return Err(IcebergError::ReadOnly { op: "copy_table" });
        }
        match self.inspect_destination(expected)? {
            Inspection::Matching(e) => return Ok(CopyOutcome::Converged(e)),
            Inspection::Conflicting(e) => {
                return Err(IcebergError::DestinationConflict {
                    table: expected.name.clone(),
                    detail: drift(
                        &expected.name,
                        "destination holds other content",
                        expected,
                        &e,
                    ),
                })
            }
            Inspection::Absent => {}
        }
        let src = source.run(source.load_existing(&expected.name))?;
        let metadata = logical_metadata(&src, &expected.name)?;
        if metadata != expected.metadata {
            return Err(IcebergError::SourceDrift {
                table: expected.name.clone(),
                detail: format!(
                    "the source's partition spec, sort order or properties changed: metadata {} now, {} planned",
                    metadata.fingerprint().hex(),
                    expected.metadata_fingerprint.hex()
                ),
            });
        }
        let table = self.run(self.destination_table(&src, &expected.name))?;
        let files = self.write_snapshot(&src, &table, expected)?;
        // A pinned snapshot without a row (a table its writer emptied)
        // wrote no file: there is nothing to commit — Iceberg refuses an
        // append of no file — and the destination table without a snapshot
        // is that empty table (same schema, metadata, rows and digest; the
        // snapshot is physical).
        if let Some(files) = files.filter(|f| !f.is_empty()) {
            self.commit_files(&table, files, &expected.name, fault)?;
        }
        self.verify(expected)
    }

    /// Writes `batches` (the complete expected content) into the
    /// destination table `expected.name`, created as `src` is (module
    /// docs), in one guarded commit, and verifies it by a fresh read.
    pub(crate) fn commit_batches(
        &self,
        src: &Table,
        expected: &TableEvidence,
        batches: &[RecordBatch],
        fault: Fault,
    ) -> Result<CopyOutcome, IcebergError> {
        if !self.is_writable() {
            return Err(IcebergError::ReadOnly {
                op: "commit_batches",
            });
        }
        let table = self.run(self.destination_table(src, &expected.name))?;
        if batches.iter().any(|b| b.num_rows() > 0) {
            let files = self.run(async {
                let mut writer = data_writer(&table)
                    .await
                    .map_err(ice("start the data file writer"))?;
                for b in batches {
                    writer
                        .write(b.clone())
                        .await
                        .map_err(ice("write a destination batch"))?;
                }
                writer.close().await.map_err(ice("close the data files"))
            })?;
            self.commit_files(&table, files, &expected.name, fault)?;
        }
        self.verify(expected)
    }

    /// One fast append of `files` onto `table` through [`EmptyOnly`]; any
    /// failure leaves the table in doubt.
    fn commit_files(
        &self,
        table: &Table,
        files: Vec<iceberg::spec::DataFile>,
        name: &str,
        fault: Fault,
    ) -> Result<(), IcebergError> {
        self.run(async {
            let guard = EmptyOnly::new(self.iceberg_catalog(), fault);
            let tx = Transaction::new(table);
            let tx = tx
                .fast_append()
                .add_data_files(files)
                .apply(tx)
                .map_err(ice("stage the copy"))?;
            tx.commit(&guard)
                .await
                .map(|_| ())
                .map_err(|e| IcebergError::CommitInDoubt {
                    table: name.to_owned(),
                    detail: e.to_string(),
                })
        })
    }

    /// A fresh read of the destination must reproduce `expected`.
    fn verify(&self, expected: &TableEvidence) -> Result<CopyOutcome, IcebergError> {
        let found = self.table_evidence(&expected.name, None)?;
        if !found.same_content(expected) {
            return Err(IcebergError::VerifyMismatch {
                table: expected.name.clone(),
                detail: drift(&expected.name, "fresh read of the copy", expected, &found),
            });
        }
        Ok(CopyOutcome::Copied(found))
    }

    /// The destination table: created as `src` is (module docs), or the
    /// existing empty one when its logical schema and metadata are the
    /// source's.
    async fn destination_table(&self, src: &Table, name: &str) -> Result<Table, IcebergError> {
        let ident = self.ident(name);
        let catalog = self.iceberg_catalog();
        if catalog
            .table_exists(&ident)
            .await
            .map_err(ice("check the table"))?
        {
            let t = catalog
                .load_table(&ident)
                .await
                .map_err(ice("load the table"))?;
            let want = iceberg_schema_to_logical(src.metadata().current_schema())?;
            let have = iceberg_schema_to_logical(t.metadata().current_schema())?;
            if want != have
                || logical_metadata(src, name)? != logical_metadata(&t, name)?
                || t.metadata().current_snapshot_id().is_some()
            {
                return Err(IcebergError::DestinationConflict {
                    table: name.to_owned(),
                    detail: "an existing destination table is not an empty table of the source's \
                             schema, partition spec, sort order and properties"
                        .into(),
                });
            }
            return Ok(t);
        }
        catalog
            .create_table(self.namespace_ident(), creation_of(src, name))
            .await
            .map_err(ice("create the destination table"))
    }

    /// Streams `expected.snapshot` of `src` into new data files of `dst`,
    /// digesting every row written; `None` when there is no snapshot, no
    /// file when it holds no row (no commit needed either way). Refuses with [`IcebergError::SourceDrift`] when what
    /// was read is not the plan's evidence.
    fn write_snapshot(
        &self,
        src: &Table,
        dst: &Table,
        expected: &TableEvidence,
    ) -> Result<Option<Vec<iceberg::spec::DataFile>>, IcebergError> {
        let Some(snapshot) = expected.snapshot else {
            return Ok(None);
        };
        let mut digest = TableDigest::new(expected.schema_fingerprint);
        let mut w = RowWriter::new();
        let files = self.run(async {
            let mut writer = data_writer(dst)
                .await
                .map_err(ice("start the data file writer"))?;
            let mut stream = scan(src, snapshot).await?;
            while let Some(batch) = stream
                .try_next()
                .await
                .map_err(ice("read a source batch"))?
            {
                add_batch(&mut digest, &mut w, &batch)?;
                writer
                    .write(batch)
                    .await
                    .map_err(ice("write a destination batch"))?;
            }
            writer.close().await.map_err(ice("close the data files"))
        })?;
        let read = TableEvidence {
            content: digest.finish(),
            ..expected.clone()
        };
        if read.content != expected.content {
            return Err(IcebergError::SourceDrift {
                table: expected.name.clone(),
                detail: drift(&expected.name, "pinned source snapshot", expected, &read),
            });
        }
        Ok(Some(files))
    }
}

/// A stream of every row of `table` at `snapshot`, in batches of
/// [`BATCH_ROWS`].
pub(crate) async fn scan(
    table: &Table,
    snapshot: i64,
) -> Result<iceberg::scan::ArrowRecordBatchStream, IcebergError> {
    table
        .scan()
        .snapshot_id(snapshot)
        .select_all()
        .with_batch_size(Some(BATCH_ROWS))
        .build()
        .map_err(ice("plan the scan"))?
        .to_arrow()
        .await
        .map_err(ice("start the scan"))
}

/// Reads `table` at `snapshot` (or its current one) in full.
/// The snapshot to read (`snapshot`, or the current one), its logical
/// schema and the schema's fingerprint — table metadata only, no row read.
fn header_of(
    table: &Table,
    name: &str,
    snapshot: Option<i64>,
) -> Result<
    (
        Option<i64>,
        custos_core::schema::Schema,
        custos_core::migration::Digest,
    ),
    IcebergError,
> {
    let snapshot = snapshot.or(table.metadata().current_snapshot_id());
    let schema_ref = match snapshot {
        Some(id) => table
            .metadata()
            .snapshot_by_id(id)
            .ok_or_else(|| IcebergError::SourceDrift {
                table: name.to_owned(),
                detail: format!("snapshot {id} does not exist"),
            })?
            .schema(table.metadata())
            .map_err(ice("read the snapshot's schema"))?,
        None => table.metadata().current_schema().clone(),
    };
    let schema = iceberg_schema_to_logical(&schema_ref)?;
    let schema_fingerprint = fingerprint(&schema);
    Ok((snapshot, schema, schema_fingerprint))
}

async fn evidence_of(
    table: &Table,
    name: &str,
    snapshot: Option<i64>,
) -> Result<TableEvidence, IcebergError> {
    let (snapshot, schema, schema_fingerprint) = header_of(table, name, snapshot)?;
    let metadata = logical_metadata(table, name)?;
    let mut digest = TableDigest::new(schema_fingerprint);
    let mut w = RowWriter::new();
    if let Some(id) = snapshot {
        let mut stream = scan(table, id).await?;
        while let Some(batch) = stream.try_next().await.map_err(ice("read a batch"))? {
            add_batch(&mut digest, &mut w, &batch)?;
        }
    }
    Ok(TableEvidence {
        name: name.to_owned(),
        snapshot,
        schema,
        schema_fingerprint,
        metadata_fingerprint: metadata.fingerprint(),
        metadata,
        content: digest.finish(),
    })
}
