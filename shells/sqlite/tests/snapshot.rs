//! The snapshot suite against SQLite (one fresh file per case), and the
//! query plans of the snapshot statements by name.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_core::snapshot::{SnapshotSource, SnapshotStep};
use custos_sqlite::SqliteStorage;

fn fresh() -> SqliteStorage {
    SqliteStorage::open_temp().expect("open a temp session file")
}

custos_conformance::snapshot_suite!(sqlite, fresh);

/// The runtime table names the same cases, and every one passes through it.
#[test]
fn every_snapshot_case_passes_through_the_table() {
    use custos_conformance::snapshot::{snapshot_cases, SNAPSHOT_CASES};
    let table = snapshot_cases::<SqliteStorage>();
    custos_conformance::assert_every_case_passes(
        "sqlite",
        "snapshot cases",
        &table,
        SNAPSHOT_CASES,
        &fresh,
    );
}

fn plan(s: &SqliteStorage, step: SnapshotStep) -> Vec<String> {
    let p = s
        .explain_snapshot(step)
        .unwrap()
        .expect("sqlite exposes plans");
    println!("{step:?}:\n  {}", p.join("\n  "));
    custos_conformance::snapshot::check_snapshot_plan(&p).unwrap();
    p
}

/// An exact selection is one probe of the `(namespace, key)` primary key —
/// both columns bound by equality, nothing scanned; a prefix window is
/// that index's range bounded on both sides; the lineage step probes the
/// unique `id` index; descriptor pages and fragments use the seq rowid.
#[test]
fn snapshot_plans_are_index_probes_and_ranges() {
    let s = fresh();
    let exact = plan(&s, SnapshotStep::ExactHeader);
    assert_eq!(exact.len(), 1, "{exact:?}");
    assert!(
        exact[0].starts_with("SEARCH registers USING ")
            && exact[0].ends_with("(namespace=? AND key=?)"),
        "{exact:?}"
    );
    let cells = plan(&s, SnapshotStep::Cells);
    assert!(cells[0].ends_with("(namespace=? AND key=?)"), "{cells:?}");
    let bounded = plan(&s, SnapshotStep::BoundedHeaders);
    assert_eq!(bounded.len(), 2, "no sort step: {bounded:?}");
    for l in &bounded {
        assert!(
            l.starts_with("SEARCH registers USING ")
                && l.ends_with("(namespace=? AND key>? AND key<?)"),
            "{l}"
        );
    }
    let open = plan(&s, SnapshotStep::OpenHeaders);
    for l in &open {
        assert!(l.ends_with("(namespace=? AND key>?)"), "{l}");
    }
    let step = plan(&s, SnapshotStep::EntryHead);
    assert!(
        step.len() == 1
            && step[0].contains("SEARCH entries USING INDEX")
            && step[0].contains("(id=?)"),
        "{step:?}"
    );
    let desc = plan(&s, SnapshotStep::Descriptors);
    assert!(
        desc.len() == 1
            && desc[0].contains("SEARCH entries USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)"),
        "{desc:?}"
    );
    let frag = plan(&s, SnapshotStep::Fragment);
    assert!(
        frag[0].contains("USING INTEGER PRIMARY KEY (rowid=?)"),
        "{frag:?}"
    );
}

/// A parent link corrupted in the file itself (the write-once trigger
/// dropped by hand, as an outside tool might) ends the lineage walk: a
/// link to a descendant would loop, a link to a missing id dangles.
#[test]
fn lineage_ends_on_parent_links_corrupted_in_the_file() {
    use custos_conformance::snapshot::chain;
    use custos_core::snapshot::Reader;
    use custos_core::storage::RecordId;
    let s = fresh();
    let hw = chain(&s);
    let raw = rusqlite::Connection::open(s.path()).unwrap();
    raw.execute_batch(
        "DROP TRIGGER entries_write_once_update;
         UPDATE entries SET parent = 'd' WHERE id = 'a';
         UPDATE entries SET parent = 'ghost' WHERE id = 'x';",
    )
    .unwrap();
    drop(raw);
    let ids = |from: &str| -> Vec<String> {
        Reader::new(&s)
            .lineage(&RecordId::new(from).unwrap(), hw, 100)
            .unwrap()
            .into_iter()
            .map(|d| d.id.as_str().to_owned())
            .collect()
    };
    assert_eq!(
        ids("d"),
        ["a", "b", "c", "d"],
        "the loop back to d ends at a"
    );
    assert_eq!(
        ids("y"),
        ["x", "y"],
        "the dangling parent of x ends the walk"
    );
}
