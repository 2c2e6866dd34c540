//! A table's metadata as logical identity: the partition spec, the sort
//! order and the table properties its owner chose.
//!
//! A migration copies rows, but a table is more than its rows: a partitioning
//! someone picked (by day, by region) decides how every later query is
//! planned, a sort order tells every later writer how to lay rows out, and
//! properties carry settings the table's users rely on. Those are choices,
//! not accidents of layout, so they must arrive at the destination unchanged
//! and the evidence must prove it. [`TableMetadata`] is that part of a
//! table, described so that it reads the same at either end, and
//! [`TableMetadata::fingerprint`] is what a plan binds beside the schema
//! fingerprint and the content digest ([`super::TableFacts`]).
//!
//! **What is logical, what is physical.** Columns are named by their full
//! dotted path, never by field id: an Iceberg catalog assigns fresh field
//! ids when it creates a table, so the destination's ids may differ from
//! the source's while naming the same columns. Also physical, and so outside
//! the description: the partition spec's and sort order's own ids, the
//! partition fields' ids, older partition specs and sort orders (every row
//! is rewritten under the current ones), and the properties in
//! [`PHYSICAL_PROPERTIES`]:
//!
//! - the ones Iceberg derives from the metadata itself and never stores
//!   (`format-version`, `uuid`, `snapshot-count`, `current-snapshot-id`,
//!   `current-snapshot-summary`, `current-snapshot-timestamp-ms`,
//!   `current-schema`, `default-partition-spec`, `default-sort-order`): a
//!   catalog refuses them at creation and they describe one copy of the
//!   table, not the table;
//! - the ones that name where the source's files live (`write.data.path`,
//!   `write.metadata.path`, `write.object-storage.path`,
//!   `write.folder-storage.path`): data-file and metadata paths may differ
//!   at the destination, and carrying them over would make the destination's
//!   writers write into the source's directories.
//!
//! Every other property is the owner's and is carried over byte for byte.
//!
//! **The fingerprint** (recomputable elsewhere): SHA-256 of
//! [`METADATA_DOMAIN`], then the partition fields in spec order — their
//! count, then for each its source column, transform and name — then the
//! sort fields in order — their count, then for each its source column,
//! transform, direction byte (0 ascending, 1 descending) and null-order
//! byte (0 nulls first, 1 nulls last) — then the properties sorted bytewise
//! by key — their count, then each key and value. Counts are `u64`
//! big-endian; every text is its UTF-8 length as a `u64` big-endian
//! followed by its bytes, so the encoding is self-delimiting and two
//! descriptions fingerprint alike exactly when they are equal.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use super::Digest;

/// The domain prefix of [`TableMetadata::fingerprint`].
pub const METADATA_DOMAIN: &[u8] = b"custos.migration.table-metadata.v1\0";

/// The properties that describe one physical copy of a table rather than
/// the table (see the module documentation): never carried to a
/// destination, never part of the fingerprint.
pub const PHYSICAL_PROPERTIES: [&str; 13] = [
    "format-version",
    "uuid",
    "snapshot-count",
    "current-snapshot-id",
    "current-snapshot-summary",
    "current-snapshot-timestamp-ms",
    "current-schema",
    "default-partition-spec",
    "default-sort-order",
    "write.data.path",
    "write.metadata.path",
    "write.object-storage.path",
    "write.folder-storage.path",
];

/// Whether `key` is one of the [`PHYSICAL_PROPERTIES`].
pub fn is_physical_property(key: &str) -> bool {
    PHYSICAL_PROPERTIES.contains(&key)
}

/// One field of a partition spec.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PartitionField {
    /// The source column's full dotted path (`region`, `point.x`).
    pub source: String,
    /// The transform as Iceberg writes it (`identity`, `bucket[16]`,
    /// `truncate[4]`, `day`, `void`, …).
    pub transform: String,
    /// The partition field's name.
    pub name: String,
}

/// The direction of a sort field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum SortDirection {
    /// Smallest first.
    Ascending,
    /// Largest first.
    Descending,
}

/// Where a sort field puts nulls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum NullOrder {
    /// Nulls before every value.
    First,
    /// Nulls after every value.
    Last,
}

/// One field of a sort order.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SortField {
    /// The source column's full dotted path.
    pub source: String,
    /// The transform as Iceberg writes it.
    pub transform: String,
    /// The direction.
    pub direction: SortDirection,
    /// Where nulls go.
    pub nulls: NullOrder,
}

/// A table's partition spec, sort order and owner's properties (see the
/// module documentation). An unpartitioned, unsorted table without
/// properties is [`TableMetadata::default`]. Built only by
/// [`TableMetadata::new`], so it never holds a physical property.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct TableMetadata {
    partition: Vec<PartitionField>,
    sort: Vec<SortField>,
    properties: BTreeMap<String, String>,
}

impl TableMetadata {
    /// The description of a table partitioned by `partition` and sorted
    /// by `sort` (each in order; empty: unpartitioned, unsorted), with
    /// `properties`, of which the [`PHYSICAL_PROPERTIES`] are dropped.
    pub fn new(
        partition: Vec<PartitionField>,
        sort: Vec<SortField>,
        properties: impl IntoIterator<Item = (String, String)>,
    ) -> Self {
        TableMetadata {
            partition,
            sort,
            properties: properties
                .into_iter()
                .filter(|(k, _)| !is_physical_property(k))
                .collect(),
        }
    }

    /// The partition fields, in spec order (empty: unpartitioned).
    pub fn partition(&self) -> &[PartitionField] {
        &self.partition
    }

    /// The sort fields, in order (empty: unsorted).
    pub fn sort(&self) -> &[SortField] {
        &self.sort
    }

    /// The owner's properties, by key (no physical property among them):
    /// what a destination table is created with.
    pub fn properties(&self) -> &BTreeMap<String, String> {
        &self.properties
    }

    /// The metadata fingerprint (construction in the module documentation).
    pub fn fingerprint(&self) -> Digest {
        let mut h = Sha256::new();
        h.update(METADATA_DOMAIN);
        let text = |h: &mut Sha256, s: &str| {
            h.update((s.len() as u64).to_be_bytes());
            h.update(s.as_bytes());
        };
        h.update((self.partition.len() as u64).to_be_bytes());
        for p in &self.partition {
            text(&mut h, &p.source);
            text(&mut h, &p.transform);
            text(&mut h, &p.name);
        }
        h.update((self.sort.len() as u64).to_be_bytes());
        for s in &self.sort {
            text(&mut h, &s.source);
            text(&mut h, &s.transform);
            h.update([
                match s.direction {
                    SortDirection::Ascending => 0,
                    SortDirection::Descending => 1,
                },
                match s.nulls {
                    NullOrder::First => 0,
                    NullOrder::Last => 1,
                },
            ]);
        }
        h.update((self.properties.len() as u64).to_be_bytes());
        for (k, v) in &self.properties {
            text(&mut h, k);
            text(&mut h, v);
        }
        Digest(h.finalize().into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by_region() -> Vec<PartitionField> {
        vec![PartitionField {
            source: "region".into(),
            transform: "identity".into(),
            name: "region".into(),
        }]
    }

    fn by_key(direction: SortDirection, nulls: NullOrder) -> Vec<SortField> {
        vec![SortField {
            source: "key".into(),
            transform: "identity".into(),
            direction,
            nulls,
        }]
    }

    fn props(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn every_choice_changes_the_fingerprint() {
        let base = TableMetadata::new(
            by_region(),
            by_key(SortDirection::Ascending, NullOrder::First),
            props(&[("owner", "ops")]),
        );
        let variants = [
            TableMetadata::default(),
            TableMetadata::new(
                Vec::new(),
                by_key(SortDirection::Ascending, NullOrder::First),
                props(&[("owner", "ops")]),
            ),
            TableMetadata::new(
                vec![PartitionField {
                    transform: "bucket[16]".into(),
                    ..by_region().remove(0)
                }],
                by_key(SortDirection::Ascending, NullOrder::First),
                props(&[("owner", "ops")]),
            ),
            TableMetadata::new(
                vec![PartitionField {
                    name: "region_part".into(),
                    ..by_region().remove(0)
                }],
                by_key(SortDirection::Ascending, NullOrder::First),
                props(&[("owner", "ops")]),
            ),
            TableMetadata::new(by_region(), Vec::new(), props(&[("owner", "ops")])),
            TableMetadata::new(
                by_region(),
                by_key(SortDirection::Descending, NullOrder::First),
                props(&[("owner", "ops")]),
            ),
            TableMetadata::new(
                by_region(),
                by_key(SortDirection::Ascending, NullOrder::Last),
                props(&[("owner", "ops")]),
            ),
            TableMetadata::new(
                by_region(),
                by_key(SortDirection::Ascending, NullOrder::First),
                Vec::new(),
            ),
            TableMetadata::new(
                by_region(),
                by_key(SortDirection::Ascending, NullOrder::First),
                props(&[("owner", "dev")]),
            ),
            TableMetadata::new(
                by_region(),
                by_key(SortDirection::Ascending, NullOrder::First),
                props(&[("owner", "ops"), ("commit.retry.num-retries", "9")]),
            ),
        ];
        let mut prints: Vec<Digest> = variants.iter().map(TableMetadata::fingerprint).collect();
        prints.push(base.fingerprint());
        let distinct: std::collections::BTreeSet<_> = prints.iter().collect();
        assert_eq!(distinct.len(), prints.len(), "{variants:?}");
    }

    #[test]
    fn physical_properties_and_property_order_do_not_count() {
        let a = TableMetadata::new(
            by_region(),
            Vec::new(),
            props(&[("a", "1"), ("b", "2"), ("write.data.path", "/src/data")]),
        );
        let b = TableMetadata::new(
            by_region(),
            Vec::new(),
            props(&[("b", "2"), ("format-version", "2"), ("a", "1")]),
        );
        assert_eq!(a, b);
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert_eq!(a.properties().len(), 2);
        assert!(PHYSICAL_PROPERTIES.iter().all(|k| is_physical_property(k)));
        assert!(!is_physical_property("write.parquet.compression-codec"));
    }

    #[test]
    fn texts_are_length_delimited() {
        // The same bytes split differently between key and value.
        let a = TableMetadata::new(Vec::new(), Vec::new(), props(&[("ab", "c")]));
        let b = TableMetadata::new(Vec::new(), Vec::new(), props(&[("a", "bc")]));
        assert_ne!(a.fingerprint(), b.fingerprint());
        // A partition field's texts likewise.
        let p = |source: &str, transform: &str| {
            TableMetadata::new(
                vec![PartitionField {
                    source: source.into(),
                    transform: transform.into(),
                    name: "p".into(),
                }],
                Vec::new(),
                Vec::new(),
            )
        };
        assert_ne!(
            p("dayx", "identity").fingerprint(),
            p("day", "xidentity").fingerprint()
        );
    }

    #[test]
    fn the_fingerprint_is_pinned() {
        // Recomputed by hand from the construction in the module docs.
        let mut h = Sha256::new();
        h.update(METADATA_DOMAIN);
        h.update(1u64.to_be_bytes());
        for s in ["region", "identity", "region"] {
            h.update((s.len() as u64).to_be_bytes());
            h.update(s.as_bytes());
        }
        h.update(1u64.to_be_bytes());
        for s in ["key", "identity"] {
            h.update((s.len() as u64).to_be_bytes());
            h.update(s.as_bytes());
        }
        h.update([1, 1]);
        h.update(1u64.to_be_bytes());
        for s in ["owner", "ops"] {
            h.update((s.len() as u64).to_be_bytes());
            h.update(s.as_bytes());
        }
        let want = Digest(h.finalize().into());
        let got = TableMetadata::new(
            by_region(),
            by_key(SortDirection::Descending, NullOrder::Last),
            props(&[("owner", "ops")]),
        )
        .fingerprint();
        assert_eq!(got, want);
    }
}
