//! Read-only opens of every database this shell opens (control catalog,
//! catalogue, ledger, session file projections) and bounded row reads.
//!
//! Read-only: a file that is not a readable database of the kind is refused
//! with a typed [`OpenError::NotReadable`] naming the file and the rule; a
//! read creates nothing and writes nothing — the file's SHA-256, its
//! `-wal`'s and the directory listing are identical after it — whether the
//! database is quiescent (its writer closed: no `-wal`), live, or held by a
//! writer in an uncommitted `BEGIN IMMEDIATE` transaction (read at once,
//! committed state only); a read-only handle refuses writes untouched and
//! follows a writer's later commits. Permission bits are exercised (file
//! 0444, directory 0555) but the tests run as root, whom they do not stop:
//! a genuinely read-only filesystem is not exercised (see the crate's
//! `readonly` module documentation).
//!
//! Bounded: a stored text or blob beyond its column's bound fails the read
//! with the module's malformed-row error naming the table and row.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use custos_conformance::ledger::{key, sid, tok, tool, LIMITS};
use custos_core::catalogue::{Catalogue, CatalogueError, Creation, Request as CatRequest};
use custos_core::ledger::{CallState, Ledger, LedgerError, Lookup};
use custos_core::world::{ControlCatalog, WorldError};
use custos_sqlite::catalogue::SqliteCatalogue;
use custos_sqlite::control::{SqliteControlCatalog, CONTROL_VERSION};
use custos_sqlite::ledger::SqliteLedger;
use custos_sqlite::{OpenError, Refusal};
use rusqlite::Connection;

mod support;
use support::{ids, sibling, world, Make};

/// The bytes of the file and its `-wal`, and the directory listing.
fn state(path: &Path) -> support::State {
    support::state(path, "-wal")
}

/// A control catalog with one world, its writer closed.
fn catalog(dir: &Path) -> PathBuf {
    let p = dir.join("control.db");
    let c = SqliteControlCatalog::open(&p).unwrap();
    c.register(&world("w-1")).unwrap();
    drop(c);
    assert!(!sibling(&p, "-wal").exists());
    p
}

#[test]
fn not_a_control_catalog_is_refused_by_rule_and_left_untouched() {
    let mut cases: Vec<(Make, Refusal)> = support::foreign_files().to_vec();
    cases.extend::<[(Make, Refusal); 3]>([
        (
            |p| {
                Connection::open(p)
                    .unwrap()
                    .execute_batch("CREATE TABLE x (a); DROP TABLE x;")
                    .unwrap()
            },
            Refusal::Empty,
        ),
        (
            |p| {
                Connection::open(p)
                    .unwrap()
                    .execute_batch("CREATE TABLE x (a);")
                    .unwrap()
            },
            Refusal::Unidentified { objects: 1 },
        ),
        (
            |p| {
                drop(SqliteControlCatalog::open(p).unwrap());
                Connection::open(p)
                    .unwrap()
                    .execute_batch(&format!("PRAGMA user_version = {};", CONTROL_VERSION + 1))
                    .unwrap();
            },
            Refusal::Version {
                found: CONTROL_VERSION + 1,
                oldest: custos_sqlite::control::CONTROL_OLDEST_READABLE,
                newest: CONTROL_VERSION,
            },
        ),
    ]);
    for (make, rule) in cases {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c.db");
        make(&p);
        let before = state(&p);
        let e = SqliteControlCatalog::open_read_only(&p).unwrap_err();
        match &e {
            OpenError::NotReadable {
                path,
                kind,
                rule: r,
            } => {
                assert_eq!(path, &p);
                assert_eq!(*kind, "a control catalog");
                assert_eq!(r, &rule, "{e}");
            }
            other => panic!("{rule:?}: {other}"),
        }
        assert!(e.to_string().contains(&p.display().to_string()), "{e}");
        assert_eq!(state(&p), before, "{rule:?}: the refusal changed something");
    }
    // A missing file is not created.
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("missing.db");
    assert!(matches!(
        SqliteControlCatalog::open_read_only(&p),
        Err(OpenError::UnopenablePath { .. })
    ));
    assert!(std::fs::read_dir(d.path()).unwrap().next().is_none());
}

#[test]
fn a_quiescent_catalog_reads_without_a_byte_or_a_file_changing() {
    let d = tempfile::tempdir().unwrap();
    let p = catalog(d.path());
    // Permission bits as a read-only medium would set them (root is not
    // stopped by them; the point is that nothing needs more).
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o444)).unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o555)).unwrap();
    let before = state(&p);
    let c = SqliteControlCatalog::open_read_only(&p).unwrap();
    assert!(c.is_read_only());
    assert_eq!(ids(&c), ["w-1"]);
    assert_eq!(c.open_world_readonly("w-1").unwrap().record.tick_head, 0);
    assert!(c.list_signatures().unwrap().is_empty());
    assert_eq!(
        state(&p),
        before,
        "a read changed the file or its directory"
    );
    // A write is refused without touching the file.
    let e = c.register(&world("w-2")).unwrap_err();
    assert!(matches!(e, WorldError::BackendFault { .. }), "{e}");
    assert!(e.to_string().contains("read-only"), "{e}");
    drop(c);
    assert_eq!(
        state(&p),
        before,
        "closing changed the file or its directory"
    );
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn an_uncommitted_writer_neither_delays_nor_shows_in_a_read() {
    let d = tempfile::tempdir().unwrap();
    let p = catalog(d.path());
    let writer = Connection::open(&p).unwrap();
    writer
        .execute_batch(
            "BEGIN IMMEDIATE;
             INSERT INTO control_worlds (world_id, name, run_id, parent_world_id, writer_mode, status, tick_head)
             VALUES ('w-pending', 'n', NULL, NULL, 'resumable', 'active', 0);",
        )
        .unwrap();
    let before = state(&p);
    let t = Instant::now();
    let c = SqliteControlCatalog::open_read_only(&p).unwrap();
    assert_eq!(ids(&c), ["w-1"]);
    assert!(matches!(
        c.open_world_readonly("w-pending"),
        Err(WorldError::NotFound { .. })
    ));
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    assert_eq!(state(&p), before);
    // Committed, the same handle reads it.
    writer.execute_batch("COMMIT;").unwrap();
    assert_eq!(ids(&c), ["w-1", "w-pending"]);
    drop(writer);
}

#[test]
fn a_read_only_handle_follows_later_commits() {
    let d = tempfile::tempdir().unwrap();
    let p = catalog(d.path());
    let c = SqliteControlCatalog::open_read_only(&p).unwrap();
    assert_eq!(ids(&c), ["w-1"]);
    // A writer opens, commits and closes between two reads (the file moves
    // while the reader holds an immutable view of it).
    let w = SqliteControlCatalog::open(&p).unwrap();
    w.register(&world("w-2")).unwrap();
    drop(w);
    assert_eq!(ids(&c), ["w-1", "w-2"]);
    // A writer that stays open: its commits are read through its WAL.
    let w = SqliteControlCatalog::open(&p).unwrap();
    w.register(&world("w-3")).unwrap();
    assert_eq!(ids(&c), ["w-1", "w-2", "w-3"]);
    w.register(&world("w-4")).unwrap();
    assert_eq!(ids(&c), ["w-1", "w-2", "w-3", "w-4"]);
    drop(w);
    drop(c);
}

#[test]
fn the_catalogue_opens_read_only() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("cat.db");
    let w = support::catalogue_with_s1(&p);
    drop(w);
    let before = state(&p);
    let c = SqliteCatalogue::open_read_only(&p).unwrap();
    assert!(c.get("s1").unwrap().is_some());
    assert_eq!(c.revision().unwrap(), 1);
    let e = c
        .apply(&CatRequest::Reserve {
            session_id: "s2".into(),
            creation: Creation::local("k2", "n", "/w"),
            now: 2,
        })
        .unwrap_err();
    assert!(matches!(e, CatalogueError::BackendFault { .. }), "{e}");
    drop(c);
    assert_eq!(
        custos_sqlite::catalogue::identity(&p).unwrap().0,
        custos_sqlite::catalogue::CATALOGUE_VERSION
    );
    assert_eq!(state(&p), before);
    // A control catalog is not a catalogue.
    let q = catalog(d.path());
    let before = state(&q);
    assert!(matches!(
        SqliteCatalogue::open_read_only(&q),
        Err(OpenError::NotReadable {
            rule: Refusal::ForeignApplication { .. },
            ..
        })
    ));
    assert_eq!(state(&q), before);
}

#[test]
fn the_ledger_opens_read_only_without_recovery() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("l.db");
    let (l, k) = support::ledger_with_an_admitted_call(&p);
    drop(l); // no close: the row stays admitted
    let before = state(&p);
    let r = SqliteLedger::open_read_only(&p).unwrap();
    // No recovery ran: the row still reads as admitted.
    assert_eq!(r.query(&LIMITS, &k), Ok(Lookup::Found(CallState::Admitted)));
    let e = r.admit(&LIMITS, &key("s", "o2", 1), &tool("program"), &tok("a"));
    assert!(matches!(e, Err(LedgerError::BackendFault { .. })), "{e:?}");
    r.close().unwrap();
    assert_eq!(state(&p), before);
    // Not a ledger.
    let q = d.path().join("empty.db");
    std::fs::write(&q, b"").unwrap();
    assert!(matches!(
        SqliteLedger::open_read_only(&q),
        Err(OpenError::NotReadable {
            rule: Refusal::ZeroLength,
            ..
        })
    ));
    assert_eq!(std::fs::metadata(&q).unwrap().len(), 0);
}

#[test]
fn session_projections_read_without_writing() {
    use custos_core::lease::Owner;
    use custos_sqlite::{generation, identity, Config, SqliteStorage};
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("session.db");
    let s = SqliteStorage::open(Config::new(&p, Owner::new("a").unwrap())).unwrap();
    use custos_core::storage::Storage;
    s.record_identity("sess-1", None).unwrap();
    s.close().unwrap();
    drop(s);
    let before = state(&p);
    assert_eq!(generation(&p).unwrap(), 0);
    assert_eq!(identity(&p).unwrap().session_id.as_deref(), Some("sess-1"));
    assert_eq!(state(&p), before);
}

// ------------------------------------------------------------ bounded rows

#[test]
fn oversized_control_rows_fail_the_read_naming_the_row() {
    let d = tempfile::tempdir().unwrap();
    let p = catalog(d.path());
    let c = Connection::open(&p).unwrap();
    c.execute(
        "UPDATE control_worlds SET name = ?1 WHERE world_id = 'w-1'",
        [&"n".repeat(custos_core::world::MAX_ID_LEN + 1)],
    )
    .unwrap();
    drop(c);
    for cat in [
        SqliteControlCatalog::open(&p).unwrap(),
        SqliteControlCatalog::open_read_only(&p).unwrap(),
    ] {
        let e = cat.discover_worlds().unwrap_err();
        assert!(matches!(e, WorldError::Invalid { .. }), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains("control_worlds row w-1") && msg.contains("name"),
            "{msg}"
        );
        assert!(msg.contains("exceed the bound"), "{msg}");
    }
    // A signature's schema JSON beyond its bound.
    let d = tempfile::tempdir().unwrap();
    let p = catalog(d.path());
    let c = Connection::open(&p).unwrap();
    c.execute(
        "INSERT INTO control_signatures (world_id, table_id, components, schema, fingerprint)
         VALUES ('w-1', 't', '[\"A\"]', ?1, 'f')",
        [&" ".repeat(custos_sqlite::control::MAX_SIGNATURE_JSON_LEN + 1)],
    )
    .unwrap();
    drop(c);
    let cat = SqliteControlCatalog::open_read_only(&p).unwrap();
    let e = cat.list_signatures().unwrap_err();
    assert!(
        e.to_string().contains("control_signatures row (w-1, t)")
            && e.to_string().contains("schema"),
        "{e}"
    );
}

#[test]
fn oversized_catalogue_rows_fail_the_read_naming_the_row() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("cat.db");
    let w = support::catalogue_with_s1(&p);
    Connection::open(&p)
        .unwrap()
        .execute(
            "UPDATE catalogue_sessions SET workspace = ?1",
            [&format!("/{}", "w".repeat(5000))],
        )
        .unwrap();
    let e = w.get("s1").unwrap_err();
    assert!(matches!(e, CatalogueError::Invalid { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("catalogue_sessions row s1: column workspace"),
        "{e}"
    );
}

#[test]
fn oversized_ledger_rows_are_malformed_naming_the_row() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("l.db");
    let (l, k) = support::ledger_with_an_admitted_call(&p);
    l.finish(&LIMITS, &k, b"done").unwrap();
    let c = Connection::open(&p).unwrap();
    c.execute("UPDATE call SET outcome_digest = zeroblob(33)", [])
        .unwrap();
    let e = l.query(&LIMITS, &k).unwrap_err();
    assert!(matches!(e, LedgerError::MalformedRow { .. }), "{e}");
    assert!(e.to_string().contains("outcome_digest"), "{e}");
    c.execute(
        "UPDATE call SET outcome_digest = zeroblob(32), tool = ?1",
        [&"t".repeat(300)],
    )
    .unwrap();
    let e = l.query(&LIMITS, &k).unwrap_err();
    assert!(
        matches!(e, LedgerError::MalformedRow { ref detail } if detail.contains("call row (s, o, 1, 0, 1)") && detail.contains("tool")),
        "{e}"
    );
    c.execute("UPDATE scope SET attach_token = ?1", [&"a".repeat(300)])
        .unwrap();
    let e = l.scope(&LIMITS, &sid("s")).unwrap_err();
    assert!(
        matches!(e, LedgerError::MalformedRow { ref detail } if detail.contains("scope row s")),
        "{e}"
    );
}

#[test]
fn oversized_session_rows_are_corrupt_naming_the_row() {
    use custos_core::lease::Owner;
    use custos_core::storage::{RecordId, Storage, StorageError};
    use custos_sqlite::{Config, SqliteStorage};
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("session.db");
    let s = SqliteStorage::open(Config::new(&p, Owner::new("a").unwrap())).unwrap();
    let commit =
        custos_core::storage::Commit::at(1).write(custos_core::storage::Write::InsertEntry {
            id: RecordId::new("e1").unwrap(),
            parent: None,
            kind: custos_core::storage::Kind::new("k").unwrap(),
            payload: custos_core::storage::Payload::new(b"x".to_vec()).unwrap(),
        });
    s.commit(&commit).unwrap();
    let c = Connection::open(&p).unwrap();
    c.execute_batch("DROP TRIGGER entries_write_once_update;")
        .unwrap();
    c.execute(
        "UPDATE entries SET kind = ?1",
        [&"k".repeat(custos_core::storage::types::MAX_KIND_LEN + 1)],
    )
    .unwrap();
    let e = s
        .scan_entries(&custos_core::storage::EntryScan::all())
        .unwrap_err();
    assert!(matches!(e, StorageError::Corrupt { .. }), "{e}");
    assert!(
        e.to_string().contains("entries row seq 1") && e.to_string().contains("exceed the bound"),
        "{e}"
    );
    s.close().unwrap();
}
