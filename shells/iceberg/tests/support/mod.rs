//! Helpers shared by this shell's integration tests: the storage identity
//! of a warehouse directory in namespace `app`, and tables created in that
//! namespace through the Iceberg catalog itself. Each test binary includes
//! this module (`mod support;`) and uses what it needs.

#![allow(dead_code, clippy::unwrap_used)]

use std::path::Path;

use custos_core::identity::StorageIdentity;
use custos_iceberg::{IcebergError, IcebergStore};
use iceberg::spec::Schema;
use iceberg::table::Table;
use iceberg::{Catalog, NamespaceIdent, TableCreation, TableIdent};

/// The namespace of every warehouse here.
pub const NAMESPACE: &str = "app";

/// The identity of the warehouse in `dir` (namespace [`NAMESPACE`]).
pub fn id(dir: &Path) -> StorageIdentity {
    StorageIdentity::new(dir.to_str().unwrap(), NAMESPACE, "iceberg").unwrap()
}

/// Table `table` of namespace [`NAMESPACE`].
pub fn ident(table: &str) -> TableIdent {
    TableIdent::new(NamespaceIdent::new(NAMESPACE.into()), table.into())
}

/// Table `table` of namespace [`NAMESPACE`] as the catalog has it now.
pub fn load(store: &IcebergStore, table: &str) -> Table {
    let catalog = store.iceberg_catalog();
    store
        .run(async { catalog.load_table(&ident(table)).await.map_err(ice("load")) })
        .unwrap()
}

/// An Iceberg error of operation `op`, as the store reports one.
pub fn ice(op: &'static str) -> impl FnOnce(iceberg::Error) -> IcebergError {
    move |e| IcebergError::Iceberg {
        op,
        source: Box::new(e),
    }
}

/// Creates the table `creation` names, with its schema (and whatever else
/// it sets), in namespace [`NAMESPACE`].
pub fn create(store: &IcebergStore, creation: TableCreation) {
    store
        .run(async {
            store
                .iceberg_catalog()
                .create_table(&NamespaceIdent::new(NAMESPACE.into()), creation)
                .await
                .map_err(ice("create"))
        })
        .unwrap();
}

/// Creates table `name` of `schema` (nothing else set).
pub fn create_with(store: &IcebergStore, name: &str, schema: Schema) {
    create(
        store,
        TableCreation::builder()
            .name(name.into())
            .schema(schema)
            .build(),
    );
}
