//! The table-store conformance suite against `IcebergStore` (a real SQL
//! catalog and Parquet files in a temp dir): the same six cases the memory
//! store passes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};

use arrow::array::{Int64Array, RecordBatch, StringArray};
use custos_conformance::tables::TableFixture;
use custos_core::migration::artifacts::Occurrence;
use custos_iceberg::IcebergStore;
use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};

mod support;
use support::{create_with, id};

/// Fresh stores in temp dirs, kept until the fixture is dropped.
#[derive(Default)]
struct Iceberg {
    dirs: Mutex<Vec<tempfile::TempDir>>,
}

fn create(store: &IcebergStore, name: &str) {
    if store.list_tables().unwrap().iter().any(|t| t == name) {
        return;
    }
    let schema = Schema::builder()
        .with_fields(vec![
            NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::optional(2, "label", Type::Primitive(PrimitiveType::String)).into(),
        ])
        .build()
        .unwrap();
    create_with(store, name, schema);
}

impl TableFixture for Iceberg {
    type Store = IcebergStore;
    fn fresh(&self) -> IcebergStore {
        let dir = tempfile::tempdir().unwrap();
        let store = IcebergStore::open_writable(&id(dir.path())).unwrap();
        self.dirs.lock().unwrap().push(dir);
        store
    }
    fn put_events(&self, s: &IcebergStore, from: u32, n: u32) {
        create(s, "events");
        let schema = s.table_arrow_schema("events").unwrap();
        let ids: Vec<i64> = (from..from + n).map(i64::from).collect();
        let labels: Vec<Option<String>> = ids
            .iter()
            .map(|i| (i % 7 != 0).then(|| format!("event {i}")))
            .collect();
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(ids)),
                Arc::new(StringArray::from(labels)),
            ],
        )
        .unwrap();
        s.append("events", &[batch]).unwrap();
    }
    fn put_empty(&self, s: &IcebergStore) {
        create(s, "empty");
    }
    fn put_occurrences(&self, s: &IcebergStore, rows: &[Occurrence]) {
        s.append_occurrences(rows).unwrap();
    }
}

custos_conformance::table_store_suite!(iceberg_tables, Iceberg::default());
