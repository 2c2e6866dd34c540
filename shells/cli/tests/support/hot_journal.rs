//! A hot rollback journal beside a control catalog, made for real: the
//! catalog is switched to rollback-journal mode (`DELETE`), a child process
//! (this test binary re-executed, running only the test that calls
//! [`writer`]) begins a write transaction large enough that uncommitted
//! pages spill into the database file — SQLite syncs the journal, header
//! included, first — and is SIGKILLed there. What is left is what a crash
//! leaves: a non-empty journal whose first byte is not zero, no lock held,
//! and half-written pages in the file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use custos_torture as torture;
use rusqlite::Connection;

/// The child's database (set only in the child).
const DB_ENV: &str = "CUSTOS_CLI_HOT_JOURNAL_DB";
/// Enough uncommitted rows to spill pages into the database file.
const SPILL: usize = 2_000;

/// The prefix of the world ids the killed writer inserted.
pub const HALF: &str = "half-";

/// `path` with `suffix` appended to its file name.
pub fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// The file's journal mode as SQLite reports it.
pub fn journal_mode(path: &Path) -> String {
    Connection::open(path)
        .unwrap()
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap()
}

/// The child's side: call it from a `#[test]` (whose name is passed to
/// [`make_hot`]); a no-op unless this process is the child. Inserts
/// [`SPILL`] worlds named `half-…` in one transaction with a tiny page
/// cache, prints `READY` and waits to be killed.
pub fn writer() {
    let Ok(path) = std::env::var(DB_ENV) else {
        return;
    };
    let mut conn = Connection::open(&path).unwrap();
    conn.execute_batch("PRAGMA cache_size = 10; PRAGMA synchronous = FULL;")
        .unwrap();
    let tx = conn.transaction().unwrap();
    let filler = "x".repeat(200);
    for i in 0..SPILL {
        tx.execute(
            "INSERT INTO control_worlds (world_id, name, run_id, parent_world_id, writer_mode, \
             status, tick_head) VALUES (?1, ?2, NULL, NULL, 'resumable', 'active', 0)",
            rusqlite::params![format!("{HALF}{i}"), filler],
        )
        .unwrap();
    }
    torture::Out::stdout().line("READY");
    std::thread::sleep(Duration::from_secs(60));
    panic!("the writer was never killed");
}

/// Switches the control catalog `db` to rollback-journal mode and leaves a
/// hot journal beside it: runs the test `child` (which calls [`writer`]) as
/// a writer and SIGKILLs it mid-transaction. Asserts the journal exists, is
/// non-empty and hot by its first byte, and the file holds uncommitted
/// bytes.
pub fn make_hot(db: &Path, child: &str) {
    let mode: String = Connection::open(db)
        .unwrap()
        .query_row("PRAGMA journal_mode = DELETE", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "delete");
    let committed = std::fs::read(db).unwrap();
    let mut cmd = torture::child(child);
    cmd.env(DB_ENV, db);
    let mut run = torture::Running::spawn(cmd);
    // libtest prints `test <name> ... ` before the child's first line.
    assert!(
        run.wait_until(Duration::from_secs(60), |l| l.ends_with("READY")),
        "the writer never got its transaction under way"
    );
    let killed = run.kill_after(Duration::ZERO);
    assert!(killed.exited_early.is_none(), "the kill did not land");
    let journal = std::fs::read(sibling(db, "-journal")).expect("the killed writer's journal");
    assert!(!journal.is_empty(), "the journal is empty");
    assert_ne!(journal[0], 0, "the journal's header is zeroed: not hot");
    assert_ne!(
        std::fs::read(db).unwrap(),
        committed,
        "no uncommitted page reached the database file"
    );
}
