use super::*;
use crate::migration::{Classification, NormalizedUri};

fn name(s: &str) -> Name {
    Name::new(s).unwrap()
}

fn occurrence(i: u8, root: &str) -> Occurrence {
    let sha = Digest::of(&[i]);
    Occurrence {
        artifact_id: name(&format!("a{i}")),
        ingested_at: 1_700_000_000_000_000 + i64::from(i),
        source_uri: format!("file:///camera/{i}"),
        logical_path: format!("p/{i}.png"),
        world: name("w"),
        run: None,
        tick: Some(u64::from(i)),
        sha256: sha,
        xxh3_64: u64::from(i),
        size: 1,
        media_type: "image/png".into(),
        object_uri: NormalizedUri::parse(&format!("{root}/sha256/{}", sha.hex())).unwrap(),
    }
}

fn plan_of(store: &MemoryTableStore, table: &Name, dest_digest: Option<Digest>) -> TablePlan {
    let source = store
        .evidence_at(
            table,
            store.inspect(table).unwrap().map_or(0, |f| f.snapshot),
        )
        .unwrap();
    TablePlan {
        name: table.clone(),
        classification: Classification::Storage,
        source,
        destination_content_digest: dest_digest.unwrap_or(source.content_digest),
    }
}

#[test]
fn a_copy_lands_once_converges_and_refuses_other_content() {
    let (src, dst) = (MemoryTableStore::new(), MemoryTableStore::new());
    let t = name("events");
    src.create(&t, Digest::of(b"schema")).unwrap();
    src.append(
        &t,
        MemoryRows::Canonical(vec![b"a".to_vec(), b"b".to_vec()]),
    )
    .unwrap();
    let plan = plan_of(&src, &t, None);
    assert_eq!(dst.snapshot_count(&t).unwrap(), 0, "no append yet");
    let CommitReply::Committed(f) = dst.copy_from(&src, &plan, None).unwrap() else {
        panic!("ambiguous")
    };
    assert!(plan.destination_matches(&f));
    assert_eq!(
        dst.copy_from(&src, &plan, None).unwrap(),
        CommitReply::Committed(f)
    );
    assert_eq!(dst.snapshot_count(&t).unwrap(), 1, "a second append landed");
    // Source drift: the plan's digest no longer matches.
    let mut drifted = plan.clone();
    drifted.source.rows += 1;
    let other = MemoryTableStore::new();
    assert_eq!(
        other.copy_from(&src, &drifted, None).unwrap_err().reason(),
        "SourceDrift"
    );
    assert_eq!(other.inspect(&t).unwrap(), None);
    // Other content at the destination.
    let populated = MemoryTableStore::new();
    populated.create(&t, Digest::of(b"schema")).unwrap();
    populated
        .append(&t, MemoryRows::Canonical(vec![b"z".to_vec()]))
        .unwrap();
    let e = populated.copy_from(&src, &plan, None).unwrap_err();
    assert_eq!(e.reason(), "DestinationConflict");
    assert_eq!(populated.snapshot_count(&t).unwrap(), 1);
}

#[test]
fn the_snapshot_count_is_the_number_of_appends() {
    let store = MemoryTableStore::new();
    let t = name("events");
    assert_eq!(store.snapshot_count(&t).unwrap(), 0);
    store.create(&t, Digest::of(b"schema")).unwrap();
    for n in 1..=3 {
        store
            .append(&t, MemoryRows::Canonical(vec![vec![n]]))
            .unwrap();
        assert_eq!(store.snapshot_count(&t).unwrap(), usize::from(n));
    }
}

#[test]
fn a_lost_reply_is_ambiguous_and_the_commit_stands() {
    let (src, dst) = (MemoryTableStore::new(), MemoryTableStore::new());
    let t = name("events");
    src.create(&t, Digest::of(b"schema")).unwrap();
    src.append(&t, MemoryRows::Canonical(vec![b"a".to_vec()]))
        .unwrap();
    let plan = plan_of(&src, &t, None);
    dst.lose_next_reply();
    assert_eq!(
        dst.copy_from(&src, &plan, None).unwrap(),
        CommitReply::Ambiguous
    );
    let found = dst.inspect(&t).unwrap().unwrap();
    assert!(plan.destination_matches(&found));
    assert!(matches!(
        dst.copy_from(&src, &plan, None).unwrap(),
        CommitReply::Committed(_)
    ));
    assert_eq!(dst.snapshot_count(&t).unwrap(), 1);
}

#[test]
fn artifact_files_are_copied_relocated_and_only_relocated() {
    let (src, dst) = (MemoryTableStore::new(), MemoryTableStore::new());
    let t = name("artifact_files");
    src.create(&t, Digest::of(b"artifact schema")).unwrap();
    let rows: Vec<_> = (0..3).map(|i| occurrence(i, "file:///src")).collect();
    let snap = src
        .append(&t, MemoryRows::Occurrences(rows.clone()))
        .unwrap();
    let moved: Vec<_> = (0..3).map(|i| occurrence(i, "file:///dst")).collect();
    let digest = src.relocated_digest(&t, snap, &moved).unwrap();
    let plan = plan_of(&src, &t, Some(digest));
    assert_ne!(digest, plan.source.content_digest);
    let mut forged = moved.clone();
    forged[1].size = 2;
    assert_eq!(
        src.relocated_digest(&t, snap, &forged)
            .unwrap_err()
            .reason(),
        "Invalid"
    );
    assert_eq!(
        dst.copy_from(&src, &plan, Some(&forged))
            .unwrap_err()
            .reason(),
        "Invalid"
    );
    assert_eq!(
        dst.inspect(&t).unwrap(),
        None,
        "a refused copy created the table"
    );
    let CommitReply::Committed(f) = dst.copy_from(&src, &plan, Some(&moved)).unwrap() else {
        panic!("ambiguous")
    };
    assert_eq!(f.content_digest, digest);
    assert_eq!(dst.occurrences(&t, f.snapshot).unwrap(), moved);
    // Without its relocated rows, the verified copy is refused.
    let other = MemoryTableStore::new();
    assert_eq!(
        other.copy_from(&src, &plan, None).unwrap_err().reason(),
        "VerifyMismatch"
    );
}

#[test]
fn an_empty_table_copies_with_no_snapshot() {
    let (src, dst) = (MemoryTableStore::new(), MemoryTableStore::new());
    let t = name("empty");
    src.create(&t, Digest::of(b"schema")).unwrap();
    let plan = plan_of(&src, &t, None);
    assert_eq!(plan.source.snapshot, 0);
    assert_eq!(plan.source.rows, 0);
    let CommitReply::Committed(f) = dst.copy_from(&src, &plan, None).unwrap() else {
        panic!("ambiguous")
    };
    assert_eq!((f.snapshot, f.rows), (0, 0));
    assert_eq!(dst.namespace().unwrap().len(), 1);
}

#[test]
fn every_occurrence_field_is_in_its_row() {
    // The helper row is the occurrence's twelve fields: two occurrences
    // differing in one field digest apart.
    let a = occurrence(1, "file:///src");
    let mut b = a.clone();
    b.media_type = "image/jpeg".into();
    let d = |o: &Occurrence| {
        digest_of(Digest::of(b"s"), &MemoryRows::Occurrences(vec![o.clone()])).unwrap()
    };
    assert_ne!(d(&a), d(&b));
}

fn partitioned_by(column: &str) -> TableMetadata {
    use crate::migration::metadata::PartitionField;
    TableMetadata::new(
        vec![PartitionField {
            source: column.into(),
            transform: "identity".into(),
            name: column.into(),
        }],
        Vec::new(),
        [("owner".to_string(), "ops".to_string())],
    )
}

#[test]
fn a_copy_carries_the_tables_metadata_into_its_evidence() {
    let (src, dst) = (MemoryTableStore::new(), MemoryTableStore::new());
    let t = name("events");
    let meta = partitioned_by("region");
    src.create_with(&t, Digest::of(b"schema"), &meta).unwrap();
    src.append(&t, MemoryRows::Canonical(vec![b"a".to_vec()]))
        .unwrap();
    let plan = plan_of(&src, &t, None);
    assert_eq!(plan.source.metadata_fingerprint, meta.fingerprint());
    let CommitReply::Committed(f) = dst.copy_from(&src, &plan, None).unwrap() else {
        panic!("ambiguous")
    };
    assert_eq!(f.metadata_fingerprint, meta.fingerprint());
    assert!(plan.destination_matches(&f));
    // An empty table keeps its metadata too.
    let e = name("empty");
    src.create_with(&e, Digest::of(b"schema"), &meta).unwrap();
    let plan = plan_of(&src, &e, None);
    let CommitReply::Committed(f) = dst.copy_from(&src, &plan, None).unwrap() else {
        panic!("ambiguous")
    };
    assert_eq!(
        (f.snapshot, f.metadata_fingerprint),
        (0, meta.fingerprint())
    );
}

#[test]
fn differing_metadata_changes_the_evidence_and_is_not_the_plans_table() {
    let (a, b) = (MemoryTableStore::new(), MemoryTableStore::new());
    let t = name("events");
    let rows = || MemoryRows::Canonical(vec![b"a".to_vec(), b"b".to_vec()]);
    a.create_with(&t, Digest::of(b"schema"), &partitioned_by("region"))
        .unwrap();
    a.append(&t, rows()).unwrap();
    // The same schema and rows, unpartitioned.
    b.create(&t, Digest::of(b"schema")).unwrap();
    b.append(&t, rows()).unwrap();
    let (fa, fb) = (
        a.inspect(&t).unwrap().unwrap(),
        b.inspect(&t).unwrap().unwrap(),
    );
    assert_eq!(
        (fa.schema_fingerprint, fa.rows, fa.content_digest),
        (fb.schema_fingerprint, fb.rows, fb.content_digest)
    );
    assert_ne!(fa.metadata_fingerprint, fb.metadata_fingerprint);
    assert_ne!(fa, fb);
    // Partitioned by another column: other evidence again.
    let c = MemoryTableStore::new();
    c.create_with(&t, Digest::of(b"schema"), &partitioned_by("day"))
        .unwrap();
    c.append(&t, rows()).unwrap();
    let fc = c.inspect(&t).unwrap().unwrap();
    assert_ne!(fc.metadata_fingerprint, fa.metadata_fingerprint);
    // The plan of the partitioned table is not met by the other two.
    let plan = plan_of(&a, &t, None);
    for other in [fb, fc] {
        assert!(!plan.destination_matches(&other));
        assert_eq!(
            other.difference(&plan).as_deref(),
            Some("metadata fingerprint (partition spec, sort order or properties)")
        );
    }
    // Nor is a copy into either: populated, or empty but of another shape.
    assert_eq!(
        b.copy_from(&a, &plan, None).unwrap_err().reason(),
        "DestinationConflict"
    );
    let empty = MemoryTableStore::new();
    empty.create(&t, Digest::of(b"schema")).unwrap();
    let e = empty.copy_from(&a, &plan, None).unwrap_err();
    assert_eq!(e.reason(), "DestinationConflict");
    assert!(e.to_string().contains("table events"), "{e}");
    assert_eq!(empty.snapshot_count(&t).unwrap(), 0);
}
