//! A control catalog in rollback-journal mode whose writer was killed
//! mid-transaction: the hot `-journal` it leaves is built for real (a child
//! process writes a transaction large enough to spill uncommitted pages
//! into the database file, then is SIGKILLed), and then
//!
//! - a read-only open refuses with the typed `RecoveryNeeded` naming the
//!   file and its journal, and changes no byte and no file; a read-only
//!   handle opened before the kill fails its next read naming it too;
//! - `SqliteControlCatalog::recover` rolls the journal back, and changes
//!   nothing else: the journal mode and version stay as they were, a second
//!   recovery writes nothing;
//! - a writing open rolls it back too and proceeds (switching the file to
//!   WAL, the shell's policy);
//! - recovery refuses what is not a control catalog, untouched.
//!
//! Every case checks the half-written change is absent afterwards.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use custos_core::world::{ControlCatalog, WorldError};
use custos_sqlite::control::{SqliteControlCatalog, CONTROL_VERSION};
use custos_sqlite::OpenError;
use custos_torture as torture;
use rusqlite::Connection;

mod support;
use support::{ids, sha, sibling, world};

/// The child's database (set only in the child).
const DB_ENV: &str = "CUSTOS_HOT_JOURNAL_DB";
/// The file whose existence lets the child go on (set only in the child).
const GO_ENV: &str = "CUSTOS_HOT_JOURNAL_GO";
/// Enough uncommitted rows to spill pages into the database file.
const SPILL: usize = 2_000;

/// The bytes of the file and its journal, and the directory listing.
fn state(path: &Path) -> support::State {
    support::state(path, "-journal")
}

fn journal_mode(path: &Path) -> String {
    Connection::open(path)
        .unwrap()
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap()
}

/// Child mode: a no-op unless `CUSTOS_HOT_JOURNAL_DB` names a file. Opens
/// it with plain rusqlite (rollback-journal mode, a tiny page cache), begins
/// a write transaction and inserts one row (its journal exists but is not
/// hot yet: SQLite writes the journal's header only when it syncs it,
/// before the first write to the database file), prints `STARTED`, waits
/// for the file `CUSTOS_HOT_JOURNAL_GO`, inserts [`SPILL`] more rows —
/// uncommitted pages spill into the database file, the journal synced
/// first — prints `READY` and waits to be killed.
#[test]
fn hot_journal_child() {
    let Ok(path) = std::env::var(DB_ENV) else {
        return;
    };
    let go = PathBuf::from(std::env::var(GO_ENV).unwrap());
    let mut conn = Connection::open(&path).unwrap();
    conn.execute_batch("PRAGMA cache_size = 10; PRAGMA synchronous = FULL;")
        .unwrap();
    let tx = conn.transaction().unwrap();
    let filler = "x".repeat(200);
    let insert = |i: usize| {
        tx.execute(
            "INSERT INTO control_worlds (world_id, name, run_id, parent_world_id, writer_mode, \
             status, tick_head) VALUES (?1, ?2, NULL, NULL, 'resumable', 'active', 0)",
            rusqlite::params![format!("half-{i}"), filler],
        )
        .unwrap();
    };
    insert(0);
    let mut out = torture::Out::stdout();
    out.line("STARTED");
    while !go.exists() {
        std::thread::sleep(Duration::from_millis(5));
    }
    for i in 1..=SPILL {
        insert(i);
    }
    out.line("READY");
    std::thread::sleep(Duration::from_secs(60));
    panic!("the child was never killed");
}

/// A control catalog with world `w-1`, switched to rollback-journal mode
/// (`DELETE`), whose writer was SIGKILLed in the middle of a transaction:
/// the hot journal exists, is non-empty, starts with a non-zero byte, and
/// the database file already holds uncommitted pages.
fn hot(dir: &Path) -> PathBuf {
    let p = rollback_mode_catalog(dir);
    kill_mid_transaction(&p, || {});
    p
}

/// A control catalog with world `w-1`, switched to rollback-journal mode.
fn rollback_mode_catalog(dir: &Path) -> PathBuf {
    let p = dir.join("control.db");
    let c = SqliteControlCatalog::open(&p).unwrap();
    c.register(&world("w-1")).unwrap();
    drop(c);
    let mode: String = Connection::open(&p)
        .unwrap()
        .query_row("PRAGMA journal_mode = DELETE", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "delete");
    p
}

/// SIGKILLs a writer of `p` in the middle of its transaction (see [`hot`]
/// and the child), running `meanwhile` once the writer has begun and before
/// it writes the database file.
fn kill_mid_transaction(p: &Path, meanwhile: impl FnOnce()) {
    let committed = sha(p);
    let mut cmd = torture::child("hot_journal_child");
    let signal = tempfile::tempdir().unwrap();
    let go = signal.path().join("go");
    cmd.env(DB_ENV, p).env(GO_ENV, &go);
    let mut run = torture::Running::spawn(cmd);
    assert!(
        run.wait_until(Duration::from_secs(60), |l| l.ends_with("STARTED")),
        "the child never began its transaction"
    );
    meanwhile();
    std::fs::write(&go, b"").unwrap();
    assert!(
        run.wait_until(Duration::from_secs(60), |l| l.ends_with("READY")),
        "the child never got its transaction under way"
    );
    let killed = run.kill_after(Duration::ZERO);
    assert!(killed.exited_early.is_none(), "the kill did not land");
    let journal = sibling(p, "-journal");
    let bytes = std::fs::read(&journal).expect("the killed writer's journal");
    assert!(!bytes.is_empty(), "the journal is empty");
    assert_ne!(bytes[0], 0, "the journal's header is zeroed: not hot");
    assert_ne!(
        sha(p),
        committed,
        "no uncommitted page reached the database file"
    );
}

#[test]
fn a_read_only_open_names_the_recovery_and_writes_nothing() {
    if std::env::var(DB_ENV).is_ok() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let p = hot(d.path());
    let before = state(&p);
    let e = SqliteControlCatalog::open_read_only(&p).unwrap_err();
    match &e {
        OpenError::RecoveryNeeded { path, journal } => {
            assert_eq!(path, &p);
            assert_eq!(journal, &sibling(&p, "-journal"));
        }
        other => panic!("{other:?}"),
    }
    let msg = e.to_string();
    assert!(msg.starts_with("RecoveryNeeded: "), "{msg}");
    assert!(msg.contains(&p.display().to_string()), "{msg}");
    assert!(msg.contains("-journal"), "{msg}");
    assert!(msg.contains("SqliteControlCatalog::recover"), "{msg}");
    assert_eq!(state(&p), before, "the refused read changed something");
    // Refused again, the same way: nothing was consumed.
    assert!(matches!(
        SqliteControlCatalog::open_read_only(&p),
        Err(OpenError::RecoveryNeeded { .. })
    ));
    assert_eq!(state(&p), before);
}

#[test]
fn a_read_only_handle_meeting_a_later_hot_journal_fails_its_read_by_name() {
    if std::env::var(DB_ENV).is_ok() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let p = rollback_mode_catalog(d.path());
    // Opened before the writer began (reading the file alone), and opened
    // while it was at work (reading through SQLite's locks; its first row
    // has not left its page cache, so it holds only the reserved lock):
    // the writer's journal was not hot then, and both read the committed
    // state.
    let quiescent = SqliteControlCatalog::open_read_only(&p).unwrap();
    assert_eq!(ids(&quiescent), ["w-1"]);
    let mut live = None;
    kill_mid_transaction(&p, || {
        let c = SqliteControlCatalog::open_read_only(&p).unwrap();
        assert_eq!(ids(&c), ["w-1"]);
        live = Some(c);
    });
    let live = live.unwrap();
    let before = state(&p);
    for c in [&quiescent, &live] {
        match c.discover_worlds() {
            Err(WorldError::BackendFault { reason }) => {
                assert!(reason.starts_with("RecoveryNeeded: "), "{reason}");
                assert!(reason.contains(&p.display().to_string()), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(state(&p), before);
}

#[test]
fn recover_rolls_the_journal_back_and_changes_nothing_else() {
    if std::env::var(DB_ENV).is_ok() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let p = hot(d.path());
    let r = SqliteControlCatalog::recover(&p).unwrap();
    assert!(r.rolled_back, "{r:?}");
    assert_eq!(r.journal, sibling(&p, "-journal"));
    assert!(!r.journal.exists(), "the journal outlived its rollback");
    // Only the recovery: still rollback-journal mode, still this version.
    assert_eq!(journal_mode(&p), "delete");
    let version: i64 = Connection::open(&p)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, CONTROL_VERSION);
    let ok: String = Connection::open(&p)
        .unwrap()
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
    // The last committed state, without the half-written change.
    let after = state(&p);
    let c = SqliteControlCatalog::open_read_only(&p).unwrap();
    assert_eq!(ids(&c), ["w-1"]);
    drop(c);
    assert_eq!(state(&p), after);
    // Nothing left to recover: a second recovery writes nothing.
    let again = SqliteControlCatalog::recover(&p).unwrap();
    assert!(!again.rolled_back, "{again:?}");
    assert_eq!(state(&p), after);
}

#[test]
fn the_writing_open_rolls_the_journal_back_and_proceeds() {
    if std::env::var(DB_ENV).is_ok() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let p = hot(d.path());
    let c = SqliteControlCatalog::open(&p).unwrap();
    assert!(!sibling(&p, "-journal").exists());
    assert_eq!(ids(&c), ["w-1"]);
    c.register(&world("w-2")).unwrap();
    assert_eq!(ids(&c), ["w-1", "w-2"]);
    drop(c);
    // The shell's policy applied once the journal was rolled back.
    assert_eq!(journal_mode(&p), "wal");
    let c = SqliteControlCatalog::open_read_only(&p).unwrap();
    assert_eq!(ids(&c), ["w-1", "w-2"]);
}

#[test]
fn recover_refuses_what_is_not_a_control_catalog_untouched() {
    if std::env::var(DB_ENV).is_ok() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    // Missing: nothing is created.
    let missing = d.path().join("missing.db");
    assert!(matches!(
        SqliteControlCatalog::recover(&missing),
        Err(OpenError::UnopenablePath { .. })
    ));
    assert!(!missing.exists());
    // Zero-length, not SQLite, another application's: refused by rule,
    // byte-identical, the journal beside it kept.
    let cases = support::foreign_files();
    for (i, (make, rule)) in cases.into_iter().enumerate() {
        let p = d.path().join(format!("case-{i}.db"));
        make(&p);
        std::fs::write(sibling(&p, "-journal"), b"\xd9not really a journal").unwrap();
        let before = state(&p);
        match SqliteControlCatalog::recover(&p) {
            Err(OpenError::NotReadable { rule: got, .. }) => assert_eq!(got, rule, "case {i}"),
            other => panic!("case {i}: {other:?}"),
        }
        assert_eq!(state(&p), before, "case {i}");
    }
}
