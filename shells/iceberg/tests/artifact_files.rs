//! `artifact_files` in Iceberg: rows round-trip through the typed decoder,
//! a typed index joined by `artifact_id` is copied as an ordinary table,
//! and the relocated `artifact_files` copy changes only `object_uri`, lands
//! in one guarded commit and has evidence distinct from the source's.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::sync::Arc;

use arrow::array::{Int32Array, RecordBatch, StringArray};
use custos_core::migration::artifacts::{content_address, Occurrence};
use custos_core::migration::{Digest, Name, NormalizedUri};
use custos_iceberg::artifacts::ARTIFACT_FILES;
use custos_iceberg::{CopyOutcome, Fault, IcebergStore, Inspection};
use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};

mod support;
use support::{create_with, id};

fn root(p: &str) -> NormalizedUri {
    NormalizedUri::parse(&format!("file:///artifacts/{p}")).unwrap()
}

/// Four occurrences over three objects (two rows share one), one without
/// run or tick.
fn occurrences() -> Vec<Occurrence> {
    (0..4u8)
        .map(|i| {
            let sha = Digest::of(&[i.min(2)]);
            Occurrence {
                artifact_id: Name::new(format!("art-{i}")).unwrap(),
                ingested_at: 1_700_000_000_000_000 + i64::from(i),
                source_uri: format!("camera://{i}?raw"),
                logical_path: format!("frames/{i}.png"),
                world: Name::new("w1").unwrap(),
                run: (i != 3).then(|| Name::new("r1").unwrap()),
                tick: (i != 3).then_some(u64::from(i) * 10),
                sha256: sha,
                xxh3_64: u64::MAX - u64::from(i),
                size: 1,
                media_type: "image/png".into(),
                object_uri: content_address(&root("src"), &sha).unwrap(),
            }
        })
        .collect()
}

fn relocated(rows: &[Occurrence]) -> Vec<Occurrence> {
    rows.iter()
        .map(|r| {
            let mut r = r.clone();
            r.object_uri = content_address(&root("dst"), &r.sha256).unwrap();
            r
        })
        .collect()
}

/// A typed index joined by `artifact_id`: image width and height.
fn index(store: &IcebergStore) {
    let schema = Schema::builder()
        .with_fields(vec![
            NestedField::required(1, "artifact_id", Type::Primitive(PrimitiveType::String)).into(),
            NestedField::required(2, "width", Type::Primitive(PrimitiveType::Int)).into(),
            NestedField::required(3, "height", Type::Primitive(PrimitiveType::Int)).into(),
        ])
        .build()
        .unwrap();
    create_with(store, "artifact_images", schema);
    let arrow = store.table_arrow_schema("artifact_images").unwrap();
    let batch = RecordBatch::try_new(
        arrow,
        vec![
            Arc::new(StringArray::from(vec!["art-0", "art-2"])),
            Arc::new(Int32Array::from(vec![640, 1920])),
            Arc::new(Int32Array::from(vec![480, 1080])),
        ],
    )
    .unwrap();
    store.append("artifact_images", &[batch]).unwrap();
}

fn source(dir: &Path) -> IcebergStore {
    let s = IcebergStore::open_writable(&id(dir)).unwrap();
    s.append_occurrences(&occurrences()).unwrap();
    index(&s);
    s
}

#[test]
fn occurrences_round_trip_through_the_typed_decoder() {
    let tmp = tempfile::tempdir().unwrap();
    let s = source(tmp.path());
    assert_eq!(s.read_occurrences(None).unwrap(), occurrences());
}

#[test]
fn relocated_artifact_files_change_only_object_uri_and_are_copied_last() {
    let tmp = tempfile::tempdir().unwrap();
    let src = source(&tmp.path().join("src"));
    let dst = IcebergStore::open_writable(&id(&tmp.path().join("dst"))).unwrap();
    let plan = src.namespace_evidence().unwrap();
    let files = plan.iter().find(|e| e.name == ARTIFACT_FILES).unwrap();
    // The typed index first, as any table.
    for e in plan.iter().filter(|e| e.name != ARTIFACT_FILES) {
        assert!(matches!(
            dst.copy_table(&src, e, Fault::None).unwrap(),
            CopyOutcome::Copied(_)
        ));
    }
    let moved = relocated(&occurrences());
    let (outcome, dest_evidence) = dst
        .copy_relocated_artifact_files(&src, files, &moved, Fault::None)
        .unwrap();
    assert!(matches!(outcome, CopyOutcome::Copied(_)));
    // Source and destination evidence are distinct: same schema and rows,
    // another digest (the URIs changed).
    assert_eq!(dest_evidence.schema_fingerprint, files.schema_fingerprint);
    assert_eq!(dest_evidence.content.rows, 4);
    assert_ne!(dest_evidence.content.digest, files.content.digest);
    let back = dst.read_occurrences(None).unwrap();
    assert_eq!(back, moved);
    for (a, b) in back.iter().zip(occurrences()) {
        assert_eq!(
            Occurrence {
                object_uri: b.object_uri.clone(),
                ..a.clone()
            },
            b
        );
    }
    // The index still joins: every indexed artifact_id has its occurrence.
    let idx = dst.table_evidence("artifact_images", None).unwrap();
    assert_eq!(idx.content.rows, 2);
    // The source is untouched.
    assert_eq!(src.read_occurrences(None).unwrap(), occurrences());
    // A retry converges.
    let (again, _) = dst
        .copy_relocated_artifact_files(&src, files, &moved, Fault::None)
        .unwrap();
    assert!(matches!(again, CopyOutcome::Converged(_)));
}

#[test]
fn a_relocated_row_changing_more_than_object_uri_is_refused_before_writing() {
    let tmp = tempfile::tempdir().unwrap();
    let src = source(&tmp.path().join("src"));
    let dst = IcebergStore::open_writable(&id(&tmp.path().join("dst"))).unwrap();
    let files = src.table_evidence(ARTIFACT_FILES, None).unwrap();
    let mut moved = relocated(&occurrences());
    moved[2].media_type = "image/jpeg".into();
    let e = dst
        .copy_relocated_artifact_files(&src, &files, &moved, Fault::None)
        .unwrap_err();
    assert_eq!(e.reason(), "SourceDrift", "{e}");
    assert!(e.to_string().contains("art-2"), "{e}");
    assert!(dst.list_tables().unwrap().is_empty(), "nothing created");
    let mut short = relocated(&occurrences());
    short.pop();
    let e = dst
        .copy_relocated_artifact_files(&src, &files, &short, Fault::None)
        .unwrap_err();
    assert_eq!(e.reason(), "SourceDrift", "{e}");
}

#[test]
fn fault_lost_reply_of_the_artifact_files_commit_converges_on_inspection() {
    let tmp = tempfile::tempdir().unwrap();
    let src = source(&tmp.path().join("src"));
    let dst = IcebergStore::open_writable(&id(&tmp.path().join("dst"))).unwrap();
    let files = src.table_evidence(ARTIFACT_FILES, None).unwrap();
    let moved = relocated(&occurrences());
    let e = dst
        .copy_relocated_artifact_files(&src, &files, &moved, Fault::LoseReply)
        .unwrap_err();
    assert_eq!(e.reason(), "CommitInDoubt", "{e}");
    let (again, dest) = dst
        .copy_relocated_artifact_files(&src, &files, &moved, Fault::None)
        .unwrap();
    assert!(matches!(again, CopyOutcome::Converged(_)));
    assert!(matches!(
        dst.inspect_destination(&dest).unwrap(),
        Inspection::Matching(_)
    ));
    assert_eq!(dst.read_occurrences(None).unwrap(), moved, "one append");
}
