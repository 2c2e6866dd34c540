//! The table-store conformance suite, through core's
//! [`TableStore`] port: the namespace with pinned evidence, a copy that
//! lands once in an empty table and verifies, a pinned snapshot copied
//! whatever the source did since, drift and foreign destination content
//! refused with nothing landing, and `artifact_files` copied with its
//! relocated rows only.
//!
//! A backend runs it with a fixture ([`TableFixture`]): fresh empty
//! stores and a way to write the application's tables (the port never
//! writes but by copying). Cases panic on a violation: they are test
//! bodies.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use custos_core::migration::artifacts::{content_address, Occurrence};
use custos_core::migration::tables::TableStore;
use custos_core::migration::{
    Classification, CommitReply, Digest, Name, NormalizedUri, TableFacts, TablePlan,
};

/// A backend under test.
pub trait TableFixture {
    /// The store type.
    type Store: TableStore;
    /// A fresh, empty, writable store.
    fn fresh(&self) -> Self::Store;
    /// Appends rows `from..from + n` of the application table `events`
    /// (created on first use) as one snapshot; equal arguments give equal
    /// rows in any store of this fixture.
    fn put_events(&self, s: &Self::Store, from: u32, n: u32);
    /// Creates the table `empty`, with no snapshot.
    fn put_empty(&self, s: &Self::Store);
    /// Appends `rows` to `artifact_files` (created on first use).
    fn put_occurrences(&self, s: &Self::Store, rows: &[Occurrence]);
}

fn name(s: &str) -> Name {
    Name::new(s).unwrap()
}

fn root(side: &str) -> NormalizedUri {
    NormalizedUri::parse(&format!("file:///artifacts/{side}")).unwrap()
}

/// Three occurrences over two objects (two rows share one), one with no
/// run or tick.
pub fn occurrences(side: &str) -> Vec<Occurrence> {
    (0..3u8)
        .map(|i| {
            let sha = Digest::of(&[i.min(1)]);
            Occurrence {
                artifact_id: name(&format!("art-{i}")),
                ingested_at: 1_700_000_000_000_000 + i64::from(i),
                source_uri: format!("camera://{i}?raw"),
                logical_path: format!("frames/{i}.png"),
                world: name("w1"),
                run: (i != 2).then(|| name("r1")),
                tick: (i != 2).then_some(u64::from(i) * 10),
                sha256: sha,
                xxh3_64: u64::MAX - u64::from(i),
                size: 1,
                media_type: "image/png".into(),
                object_uri: content_address(&root(side), &sha).unwrap(),
            }
        })
        .collect()
}

/// The plan line of `table` as the source stands (an application table;
/// `destination` overrides the expected destination digest).
fn plan<S: TableStore>(s: &S, table: &str, destination: Option<Digest>) -> TablePlan {
    let facts: TableFacts = s
        .namespace()
        .unwrap()
        .into_iter()
        .find(|(n, _)| n.as_str() == table)
        .map(|(_, f)| f)
        .unwrap_or_else(|| panic!("no table {table} in the namespace"));
    TablePlan {
        name: name(table),
        classification: Classification::Application,
        source: facts,
        destination_content_digest: destination.unwrap_or(facts.content_digest),
    }
}

fn committed(r: CommitReply) -> TableFacts {
    match r {
        CommitReply::Committed(f) => f,
        CommitReply::Ambiguous => panic!("an unfaulted copy answered Ambiguous"),
    }
}

// ------------------------------------------------------------------ cases

/// The namespace lists every table by name — an empty one at snapshot 0
/// with no rows — and each listed fact is the evidence of its snapshot,
/// the same on every read.
pub fn the_namespace_lists_every_table_with_pinned_evidence<X: TableFixture>(fx: X) {
    let s = fx.fresh();
    assert!(s.namespace().unwrap().is_empty());
    fx.put_events(&s, 0, 40);
    fx.put_empty(&s);
    fx.put_occurrences(&s, &occurrences("src"));
    let ns = s.namespace().unwrap();
    let names: Vec<&str> = ns.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["artifact_files", "empty", "events"]);
    for (n, f) in &ns {
        assert_eq!(s.evidence_at(n, f.snapshot).unwrap(), *f, "{n}");
    }
    let (_, empty) = &ns[1];
    assert_eq!((empty.snapshot, empty.rows), (0, 0));
    assert_eq!(ns[2].1.rows, 40);
    assert_eq!(ns[0].1.rows, 3);
    assert_eq!(s.namespace().unwrap(), ns);
    assert_eq!(s.inspect(&name("empty")).unwrap(), None);
    assert_eq!(s.inspect(&name("nothing")).unwrap(), None);
}

/// A copy lands in one commit and a fresh read reproduces the plan; a
/// retry converges without a second append (the evidence is unchanged);
/// an empty table copies empty.
pub fn a_copy_lands_once_and_verifies<X: TableFixture>(fx: X) {
    let (src, dst) = (fx.fresh(), fx.fresh());
    fx.put_events(&src, 0, 25);
    fx.put_empty(&src);
    for table in ["events", "empty"] {
        let p = plan(&src, table, None);
        let first = committed(dst.copy_from(&src, &p, None).unwrap());
        assert!(p.destination_matches(&first), "{table}");
        let again = committed(dst.copy_from(&src, &p, None).unwrap());
        assert_eq!(again, first, "{table}: a retry changed the destination");
        assert_eq!(
            dst.inspect(&p.name).unwrap(),
            (first.snapshot != 0).then_some(first)
        );
    }
    assert_eq!(dst.namespace().unwrap().len(), 2);
}

/// `snapshots` answers every table with the snapshot `namespace` reads
/// (an empty table: 0), and follows a later append.
pub fn snapshots_agree_with_the_namespace<X: TableFixture>(fx: X) {
    let src = fx.fresh();
    fx.put_empty(&src);
    fx.put_events(&src, 0, 10);
    let of = |s: &X::Store| -> Vec<(Name, u64)> {
        s.namespace()
            .unwrap()
            .into_iter()
            .map(|(n, f)| (n, f.snapshot))
            .collect()
    };
    assert_eq!(src.snapshots().unwrap(), of(&src));
    let before = src.snapshots().unwrap();
    fx.put_events(&src, 10, 1);
    assert_eq!(src.snapshots().unwrap(), of(&src));
    assert_ne!(
        src.snapshots().unwrap(),
        before,
        "an append is a new snapshot"
    );
}

/// The plan's pinned snapshot is copied whatever the source appended
/// since: the destination holds the planned rows.
pub fn the_pinned_snapshot_is_copied<X: TableFixture>(fx: X) {
    let (src, dst) = (fx.fresh(), fx.fresh());
    fx.put_events(&src, 0, 10);
    let p = plan(&src, "events", None);
    fx.put_events(&src, 10, 5);
    let f = committed(dst.copy_from(&src, &p, None).unwrap());
    assert_eq!(f.rows, 10);
    assert!(p.destination_matches(&f));
}

/// A plan whose evidence the pinned source no longer reproduces is
/// `SourceDrift`, and nothing lands at the destination.
pub fn a_drifted_source_is_refused_and_nothing_lands<X: TableFixture>(fx: X) {
    let (src, dst) = (fx.fresh(), fx.fresh());
    fx.put_events(&src, 0, 10);
    let mut p = plan(&src, "events", None);
    p.source.content_digest = Digest::of(b"another content");
    assert_eq!(
        dst.copy_from(&src, &p, None).unwrap_err().reason(),
        "SourceDrift"
    );
    assert_eq!(dst.inspect(&p.name).unwrap(), None);
    assert!(dst.namespace().unwrap().is_empty());
}

/// A destination table holding other content is `DestinationConflict`,
/// its content untouched.
pub fn other_content_at_the_destination_is_refused<X: TableFixture>(fx: X) {
    let (src, dst) = (fx.fresh(), fx.fresh());
    fx.put_events(&src, 0, 10);
    fx.put_events(&dst, 100, 3);
    let before = dst.inspect(&name("events")).unwrap();
    let p = plan(&src, "events", None);
    assert_eq!(
        dst.copy_from(&src, &p, None).unwrap_err().reason(),
        "DestinationConflict"
    );
    assert_eq!(dst.inspect(&name("events")).unwrap(), before);
}

/// `artifact_files` is copied with its relocated rows: the relocated
/// digest is not the source's, the destination reproduces it and holds the
/// relocated rows exactly; a relocated row changing more than `object_uri`
/// is `Invalid` before anything lands.
pub fn artifact_files_are_copied_relocated<X: TableFixture>(fx: X) {
    let (src, dst) = (fx.fresh(), fx.fresh());
    let rows = occurrences("src");
    fx.put_occurrences(&src, &rows);
    let table = name("artifact_files");
    let source = plan(&src, "artifact_files", None).source;
    assert_eq!(src.occurrences(&table, source.snapshot).unwrap(), rows);
    let moved = occurrences("dst");
    let digest = src
        .relocated_digest(&table, source.snapshot, &moved)
        .unwrap();
    assert_ne!(digest, source.content_digest);
    let mut p = plan(&src, "artifact_files", Some(digest));
    p.classification = Classification::ArtifactFiles;
    let mut forged = moved.clone();
    forged[1].size += 1;
    let e = src
        .relocated_digest(&table, source.snapshot, &forged)
        .unwrap_err();
    assert_eq!(e.reason(), "Invalid");
    let e = dst.copy_from(&src, &p, Some(&forged)).unwrap_err();
    assert_eq!(e.reason(), "Invalid");
    assert_eq!(dst.inspect(&table).unwrap(), None, "a refused copy landed");
    let f = committed(dst.copy_from(&src, &p, Some(&moved)).unwrap());
    assert_eq!(f.content_digest, digest);
    assert_eq!(dst.occurrences(&table, f.snapshot).unwrap(), moved);
    assert_eq!(committed(dst.copy_from(&src, &p, Some(&moved)).unwrap()), f);
}

/// Every table-store case, by name, in suite order.
pub const TABLE_STORE_CASES: &[&str] = &crate::__with_table_store_cases!(__emit_names!());

/// Emits `mod $name { #[test] fn <case>() … }`: one test per table-store
/// case, each calling the case with `$fixture` (evaluated once per test).
#[macro_export]
macro_rules! table_store_suite {
    ($name:ident, $fixture:expr $(,)?) => {
        $crate::__suite!(__with_table_store_cases, tables, $name, $fixture);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __with_table_store_cases {
    ($callback:ident ! ($($args:tt)*)) => {
        $crate::$callback! { ($($args)*)
            the_namespace_lists_every_table_with_pinned_evidence,
            a_copy_lands_once_and_verifies,
            the_pinned_snapshot_is_copied,
            a_drifted_source_is_refused_and_nothing_lands,
            other_content_at_the_destination_is_refused,
            artifact_files_are_copied_relocated,
            snapshots_agree_with_the_namespace,
        }
    };
}
