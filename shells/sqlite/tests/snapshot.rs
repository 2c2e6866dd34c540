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
    let table = custos_conformance::snapshot::snapshot_cases::<SqliteStorage>();
    assert_eq!(
        table.len(),
        custos_conformance::snapshot::SNAPSHOT_CASES.len()
    );
    let mut failed = Vec::new();
    for (name, case) in &table {
        if std::panic::catch_unwind(|| case(&fresh)).is_err() {
            failed.push(*name);
        }
    }
    assert!(failed.is_empty(), "failed: {failed:?}");
    println!(
        "sqlite: {} of {} snapshot cases pass",
        table.len(),
        table.len()
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
