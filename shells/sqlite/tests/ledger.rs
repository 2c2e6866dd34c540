//! The execution ledger on SQLite: the conformance suite, migrate-on-open,
//! refuse-before-write, row integrity, and the admission race across
//! threads and processes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Barrier};

use custos_conformance::ledger::{key, sid, tok, tool, ws, LIMITS};
use custos_core::ledger::{self, Admission, Answer, CallState, Ledger, LedgerError, Lookup};
use custos_sqlite::ledger::{
    OpenError, SqliteLedger, EXEC_LEDGER_ACKS_SCHEMA, EXEC_LEDGER_RELEASES_SCHEMA,
    EXEC_LEDGER_SCHEMA, LEDGER_APPLICATION_ID, LEDGER_VERSION,
};
use rusqlite::Connection;
use sha2::{Digest, Sha256};
use tempfile::TempDir;

mod support;

/// A ledger in its own temporary directory (removed on drop).
struct Temp {
    ledger: SqliteLedger,
    _dir: Arc<TempDir>,
}

impl Ledger for Temp {
    fn execute(
        &self,
        limits: &ledger::Limits,
        req: &ledger::Request,
    ) -> Result<Answer, LedgerError> {
        self.ledger.execute(limits, req)
    }
    fn close(&self) -> Result<(), LedgerError> {
        self.ledger.close()
    }
    fn records(&self) -> Result<u64, LedgerError> {
        self.ledger.records()
    }
}

fn fresh() -> Temp {
    let dir = tempfile::tempdir().unwrap();
    let ledger = SqliteLedger::open(dir.path().join("ledger.db")).unwrap();
    Temp {
        ledger,
        _dir: Arc::new(dir),
    }
}

/// A ledger file in a temporary directory, opened afresh (restart
/// recovery included) by every call.
fn place() -> impl Fn() -> Temp {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    move || Temp {
        ledger: SqliteLedger::open(dir.path().join("ledger.db")).unwrap(),
        _dir: Arc::clone(&dir),
    }
}

custos_conformance::ledger_suite!(sqlite, fresh, reopen: place);

#[test]
fn every_ledger_case_passes_through_the_table() {
    use custos_conformance::ledger::{ledger_cases, LEDGER_CASES};
    let table = ledger_cases::<Temp>();
    custos_conformance::assert_every_case_passes(
        "sqlite",
        "ledger conformance cases",
        &table,
        LEDGER_CASES,
        &fresh,
    );
}

fn sha(path: &Path) -> Vec<u8> {
    Sha256::digest(std::fs::read(path).unwrap()).to_vec()
}

#[test]
fn a_fresh_file_gets_the_current_version_and_its_application_id() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.db");
    SqliteLedger::open(&path).unwrap().close().unwrap();
    let c = Connection::open(&path).unwrap();
    let v: i64 = c
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    let a: i64 = c
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .unwrap();
    let j: String = c
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        (v, a, j.as_str()),
        (LEDGER_VERSION, LEDGER_APPLICATION_ID, "wal")
    );
}

fn old_file(path: &Path, version: i64) {
    let c = Connection::open(path).unwrap();
    c.execute_batch(EXEC_LEDGER_SCHEMA).unwrap();
    if version >= 2 {
        c.execute_batch(EXEC_LEDGER_RELEASES_SCHEMA).unwrap();
    }
    if version >= 3 {
        c.execute_batch(EXEC_LEDGER_ACKS_SCHEMA).unwrap();
    }
    c.execute_batch(&format!(
        "PRAGMA application_id = {LEDGER_APPLICATION_ID}; PRAGMA user_version = {version};
         INSERT INTO scope VALUES ('s', 'w', 1, 'open', NULL, 't');
         INSERT INTO call VALUES ('s', 'o', 1, 0, 1, 'program', 'admitted', NULL, NULL, 16);"
    ))
    .unwrap();
}

#[test]
fn older_files_gain_what_they_lack_and_keep_their_rows() {
    for version in [1, 2, 3] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.db");
        old_file(&path, version);
        let l = SqliteLedger::open(&path).unwrap();
        // Recovery ran over the old row; the new tables work.
        let k = key("s", "o", 1);
        assert_eq!(l.query(&LIMITS, &k), Ok(Lookup::Found(CallState::Unknown)));
        assert_eq!(l.ack(&LIMITS, &k), Ok(false));
        assert_eq!(l.query(&LIMITS, &k), Ok(Lookup::Found(CallState::Acked)));
        assert_eq!(l.releases(&LIMITS), Ok(vec![]));
        l.close().unwrap();
        let c = Connection::open(&path).unwrap();
        let v: i64 = c
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, LEDGER_VERSION);
    }
}

#[test]
fn a_newer_file_is_refused_byte_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.db");
    old_file(&path, 2);
    Connection::open(&path)
        .unwrap()
        .execute_batch(&format!("PRAGMA user_version = {}", LEDGER_VERSION + 1))
        .unwrap();
    let before = sha(&path);
    let err = SqliteLedger::open(&path).unwrap_err();
    assert_eq!(
        err,
        OpenError::UnsupportedVersion {
            found: LEDGER_VERSION + 1,
            supported: LEDGER_VERSION
        }
    );
    assert_eq!(sha(&path), before);
    assert!(!PathBuf::from(format!("{}-wal", path.display())).exists());
}

/// Another application's file, and a version-0 file that claims the
/// ledger's application id without a version (custos writes both in one
/// transaction): the ledger opens through the shell's shared migrate step,
/// which adopts a version-0 file only when it is empty, as the catalogs do.
#[test]
fn a_foreign_file_is_refused_byte_untouched() {
    let dir = tempfile::tempdir().unwrap();
    for (name, setup) in [
        (
            "l.db",
            "CREATE TABLE other (x); PRAGMA application_id = 7;".to_owned(),
        ),
        (
            "v0.db",
            format!("PRAGMA application_id = {LEDGER_APPLICATION_ID};"),
        ),
    ] {
        let path = dir.path().join(name);
        Connection::open(&path)
            .unwrap()
            .execute_batch(&setup)
            .unwrap();
        let before = sha(&path);
        assert!(matches!(
            SqliteLedger::open(&path),
            Err(OpenError::ForeignDatabase { .. })
        ));
        assert_eq!(sha(&path), before);
    }
    assert!(matches!(
        SqliteLedger::open(dir.path()),
        Err(OpenError::UnopenablePath { .. })
    ));
}

#[test]
fn reopening_the_file_is_restart_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.db");
    let (l, k) = support::ledger_with_an_admitted_call(&path);
    drop(l); // a crash: no close
    let l = SqliteLedger::open(&path).unwrap();
    assert_eq!(l.query(&LIMITS, &k), Ok(Lookup::Found(CallState::Unknown)));
    assert_eq!(
        l.admit(&LIMITS, &k, &tool("program"), &tok("a")),
        Ok(Admission::Existing(CallState::Unknown))
    );
}

#[test]
fn a_tampered_outcome_is_a_digest_mismatch_and_a_bad_state_is_malformed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.db");
    let (l, k) = support::ledger_with_an_admitted_call(&path);
    l.finish(&LIMITS, &k, b"genuine").unwrap();
    let c = Connection::open(&path).unwrap();
    c.execute("UPDATE call SET outcome = X'00'", []).unwrap();
    assert_eq!(
        l.query(&LIMITS, &k),
        Err(LedgerError::DigestMismatch { key: k.clone() })
    );
    c.execute("UPDATE call SET state = 'running'", []).unwrap();
    assert!(matches!(
        l.query(&LIMITS, &k),
        Err(LedgerError::MalformedRow { .. })
    ));
    c.execute("UPDATE scope SET close_outcome = 3", []).unwrap();
    assert!(matches!(
        l.scope(&LIMITS, &sid("s")),
        Err(LedgerError::MalformedRow { .. })
    ));
}

const RACE_CHILD: &str = "CUSTOS_LEDGER_RACE_CHILD";

fn setup_race(path: &Path) {
    let l = SqliteLedger::open(path).unwrap();
    l.attach(&LIMITS, &sid("s"), &ws("w"), 1, &tok("a"))
        .unwrap();
    l.close().unwrap();
}

fn admit_once(path: &Path) -> Admission {
    let l = SqliteLedger::open(path).unwrap();
    let a = l
        .admit(&LIMITS, &key("s", "race", 1), &tool("program"), &tok("a"))
        .unwrap();
    l.close().unwrap();
    a
}

#[test]
fn race_threads_admitting_one_key_get_exactly_one_fresh() {
    const N: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let path = Arc::new(dir.path().join("race.db"));
    setup_race(&path);
    let barrier = Arc::new(Barrier::new(N));
    let handles: Vec<_> = (0..N)
        .map(|_| {
            let (path, barrier) = (path.clone(), barrier.clone());
            std::thread::spawn(move || {
                let l = SqliteLedger::open(path.as_ref()).unwrap();
                barrier.wait();
                l.admit(&LIMITS, &key("s", "race", 1), &tool("program"), &tok("a"))
                    .unwrap()
            })
        })
        .collect();
    let answers: Vec<Admission> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let fresh = answers.iter().filter(|a| **a == Admission::Fresh).count();
    println!("race: {N} threads, {fresh} Fresh, {} Existing", N - fresh);
    assert_eq!(fresh, 1, "{answers:?}");
}

#[test]
fn race_processes_admitting_one_key_get_exactly_one_fresh() {
    if let Ok(path) = std::env::var(RACE_CHILD) {
        // Child: admit and report.
        let a = admit_once(Path::new(&path));
        println!(
            "ANSWER {}",
            if a == Admission::Fresh {
                "fresh"
            } else {
                "existing"
            }
        );
        return;
    }
    const N: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("race.db");
    setup_race(&path);
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..N)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "race_processes_admitting_one_key_get_exactly_one_fresh",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(RACE_CHILD, &path)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut fresh = 0;
    let mut existing = 0;
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        if text.contains("ANSWER fresh") {
            fresh += 1;
        } else if text.contains("ANSWER existing") {
            existing += 1;
        } else {
            panic!("child answered nothing: {text}");
        }
    }
    println!("race: {N} processes, {fresh} Fresh, {existing} Existing");
    assert_eq!((fresh, existing), (1, N - 1));
}

/// The Activity records of a storage identity are counted from the ledger
/// file at its derived location, read-only: none when there is no file
/// (and none is created), every row once there is one, and a file that is
/// not a ledger fails closed.
#[test]
fn activity_records_are_read_at_the_identity_location_without_writing() {
    use custos_core::identity::StorageIdentity;
    use custos_sqlite::ledger::{activity_path, activity_records};
    let dir = tempfile::tempdir().unwrap();
    let id = StorageIdentity::new(dir.path().to_str().unwrap(), "ns", "iceberg").unwrap();
    let path = activity_path(&id).unwrap();
    assert_eq!(activity_records(&id), Ok(0));
    assert!(!path.exists(), "counting created the Activity catalog");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    {
        let l = SqliteLedger::open(&path).unwrap();
        l.attach(
            &ledger::Limits::default(),
            &sid("s"),
            &ws("w"),
            1,
            &tok("t"),
        )
        .unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    assert_eq!(activity_records(&id), Ok(1));
    assert_eq!(std::fs::read(&path).unwrap(), before);
    std::fs::write(&path, b"not a ledger").unwrap();
    let e = activity_records(&id).unwrap_err();
    assert!(e.to_string().starts_with("ActivityUnreadable"), "{e}");
}
