//! Shell integration tests on real files: refuse-before-write open, the
//! writer lease, close, total decoding, and the offline rewrite and export.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

use custos_core::lease::{LeaseError, Owner};
use custos_core::storage::{
    branch_scan, Commit, CommitError, EntryScan, Kind, Namespace, Payload, RecordId, RegisterKey,
    Storage, StorageError, UsageFigures, UsageScan, Write,
};
use custos_sqlite::{
    export_closed, generation, identity, release_export, rewrite_into, Clock, Config, Offline,
    OpenError, RewriteError, SqliteStorage,
};
use sha2::{Digest, Sha256};

fn owner(s: &str) -> Owner {
    Owner::new(s).unwrap()
}

fn clock() -> (Arc<AtomicU64>, Clock) {
    let t = Arc::new(AtomicU64::new(1_000));
    let c = t.clone();
    (t, Arc::new(move || c.load(Ordering::SeqCst)))
}

fn cfg(path: &Path, who: &str, clock: &Clock) -> Config {
    Config::new(path, owner(who))
        .ttl(1_000)
        .clock(clock.clone())
}

fn hash(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap();
    format!("{:x}", Sha256::digest(bytes))
}

fn entry(i: &str, parent: Option<&str>, payload: &[u8]) -> Write {
    Write::InsertEntry {
        id: RecordId::new(i).unwrap(),
        parent: parent.map(|p| RecordId::new(p).unwrap()),
        kind: Kind::new("m").unwrap(),
        payload: Payload::new(payload.to_vec()).unwrap(),
    }
}

fn db(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("session.db")
}

/// The session file in `dir`, opened by writer `a` on a new clock, holding
/// the one entry `r`; the handle and its clock.
fn one_entry(dir: &tempfile::TempDir) -> (SqliteStorage, Clock) {
    let (_t, c) = clock();
    let s = SqliteStorage::open(cfg(&db(dir), "a", &c)).unwrap();
    s.commit(&Commit::at(1).write(entry("r", None, b"x")))
        .unwrap();
    (s, c)
}

/// The offline tools' settings on `clock`, leases of 1 s.
fn offline(clock: &Clock) -> Offline {
    Offline {
        lease_ttl_ms: 1_000,
        now: clock.clone(),
        ..Offline::default()
    }
}

#[test]
fn open_uses_wal_and_sets_identity_pragmas() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _c) = one_entry(&dir);
    s.close().unwrap();
    let raw = rusqlite::Connection::open(db(&dir)).unwrap();
    let mode: String = raw
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let v: i64 = raw
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, custos_sqlite::schema::STORAGE_VERSION);
    let app: i64 = raw
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .unwrap();
    assert_eq!(app, custos_sqlite::schema::APPLICATION_ID);
    // Close deleted its pair but kept the fence high-water mark.
    let leases: i64 = raw
        .query_row("SELECT count(*) FROM writer_lease", [], |r| r.get(0))
        .unwrap();
    assert_eq!(leases, 0);
    let high: i64 = raw
        .query_row("SELECT high_water FROM lease_fence", [], |r| r.get(0))
        .unwrap();
    assert_eq!(high, 1);
}

#[test]
fn newer_version_is_refused_with_the_file_byte_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let (s, c) = one_entry(&dir);
    s.close().unwrap();
    drop(s);
    {
        let raw = rusqlite::Connection::open(db(&dir)).unwrap();
        raw.execute_batch("PRAGMA journal_mode = DELETE; PRAGMA user_version = 7;")
            .unwrap();
    }
    let before = hash(&db(&dir));
    let err = SqliteStorage::open(cfg(&db(&dir), "b", &c)).unwrap_err();
    assert_eq!(
        err,
        OpenError::UnsupportedVersion {
            found: 7,
            supported: custos_sqlite::schema::STORAGE_VERSION
        }
    );
    assert_eq!(hash(&db(&dir)), before, "a refused open wrote to the file");
    assert!(!dir.path().join("session.db-wal").exists());
}

#[test]
fn foreign_database_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    {
        let raw = rusqlite::Connection::open(db(&dir)).unwrap();
        raw.execute_batch("CREATE TABLE other (x); INSERT INTO other VALUES (1);")
            .unwrap();
    }
    let before = hash(&db(&dir));
    let (_t, c) = clock();
    let err = SqliteStorage::open(cfg(&db(&dir), "a", &c)).unwrap_err();
    assert!(matches!(err, OpenError::ForeignDatabase { .. }), "{err}");
    assert_eq!(hash(&db(&dir)), before);
}

#[test]
fn held_lease_is_refused_with_the_file_byte_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let (t, c) = clock();
    let a = SqliteStorage::open(cfg(&db(&dir), "a", &c)).unwrap();
    a.commit(&Commit::at(1).write(entry("r", None, b"x")))
        .unwrap();
    let before = hash(&db(&dir));
    let wal_before = std::fs::read(dir.path().join("session.db-wal")).unwrap();
    t.fetch_add(999, Ordering::SeqCst); // still inside a's lease
    let refused = SqliteStorage::open(cfg(&db(&dir), "b", &c)).unwrap_err();
    assert!(
        refused
            .to_string()
            .starts_with("LeaseHeld: the writer lease is held by a (fence 1) until "),
        "{refused}"
    );
    match refused {
        OpenError::Lease(LeaseError::LeaseHeld { holder, fence, .. }) => {
            assert_eq!(holder, owner("a"));
            assert_eq!(fence, 1);
        }
        other => panic!("{other}"),
    }
    assert_eq!(hash(&db(&dir)), before, "a refused open wrote to the file");
    assert_eq!(
        std::fs::read(dir.path().join("session.db-wal")).unwrap(),
        wal_before
    );
    // a's lease was not disturbed.
    a.commit(&Commit::at(2).write(entry("s", Some("r"), b"y")))
        .unwrap();
}

#[test]
fn expired_lease_is_stolen_and_the_old_writer_gets_lease_lost() {
    let dir = tempfile::tempdir().unwrap();
    let (t, c) = clock();
    let a = SqliteStorage::open(cfg(&db(&dir), "a", &c)).unwrap();
    a.commit(&Commit::at(1).write(entry("r", None, b"x")))
        .unwrap();
    t.fetch_add(1_000, Ordering::SeqCst); // a's lease expires
    let b = SqliteStorage::open(cfg(&db(&dir), "b", &c)).unwrap();
    assert_eq!(b.lease_pair().unwrap(), (owner("b"), 2));
    let err = a
        .commit(&Commit::at(2).write(entry("lost", Some("r"), b"z")))
        .unwrap_err();
    assert_eq!(
        err,
        CommitError::Lease(LeaseError::LeaseLost {
            held_by: Some(owner("b"))
        })
    );
    assert_eq!(err.reason(), "LeaseLost");
    assert_eq!(err.to_string(), "LeaseLost: the writer lease is lost to b");
    // Nothing applied.
    assert_eq!(
        b.get_entries(&[RecordId::new("lost").unwrap()]).unwrap(),
        vec![None]
    );
    // a's close deletes only its own pair: b keeps committing.
    a.close().unwrap();
    b.commit(&Commit::at(3).write(entry("s", Some("r"), b"y")))
        .unwrap();
    assert_eq!(a.stats(), Err(StorageError::HandleClosed));
    assert_eq!(a.commit(&Commit::at(4)).unwrap_err().reason(), "Faulted");
    b.close().unwrap();
    b.close().unwrap();
}

#[test]
fn a_lease_left_to_expire_refuses_commits_until_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (t, c) = clock();
    let a = SqliteStorage::open(cfg(&db(&dir), "a", &c)).unwrap();
    t.fetch_add(500, Ordering::SeqCst);
    a.renew_lease().unwrap();
    t.fetch_add(900, Ordering::SeqCst); // renewed at +500: still live
    a.commit(&Commit::at(1)).unwrap();
    t.fetch_add(5_000, Ordering::SeqCst);
    assert_eq!(
        a.commit(&Commit::at(1).write(entry("r", None, b"x")))
            .unwrap_err(),
        CommitError::Lease(LeaseError::LeaseLost {
            held_by: Some(owner("a"))
        })
    );
}

#[test]
fn concurrent_opens_of_a_fresh_path_write_one_session_row() {
    for round in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let path = db(&dir);
        let n = 6;
        let barrier = Arc::new(Barrier::new(n));
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let path = path.clone();
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    SqliteStorage::open(Config::new(path, owner(&format!("w{i}"))))
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let winners = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(winners, 1, "round {round}: {results:?}");
        for r in &results {
            if let Err(e) = r {
                assert!(
                    matches!(e, OpenError::Lease(LeaseError::LeaseHeld { .. })),
                    "round {round}: {e}"
                );
            }
        }
        drop(results);
        let raw = rusqlite::Connection::open(&path).unwrap();
        let rows: i64 = raw
            .query_row("SELECT count(*) FROM session", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 1);
    }
}

#[test]
fn an_undecodable_row_is_a_typed_error_never_a_default() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _c) = one_entry(&dir);
    {
        let raw = rusqlite::Connection::open(db(&dir)).unwrap();
        raw.execute_batch(
            "DROP TRIGGER entries_write_once_update;
             UPDATE entries SET kind = char(7);
             UPDATE registers SET value = x'00';",
        )
        .unwrap();
    }
    let err = s.scan_entries(&EntryScan::all()).unwrap_err();
    assert_eq!(err.reason(), "Corrupt", "{err}");
    let err = s
        .scan_branch(&branch_scan(RecordId::new("r").unwrap()))
        .unwrap_err();
    assert_eq!(err.reason(), "Corrupt", "{err}");
}

#[test]
fn write_once_tables_refuse_updates_at_the_sql_level() {
    let dir = tempfile::tempdir().unwrap();
    let (_s, _c) = one_entry(&dir);
    let raw = rusqlite::Connection::open(db(&dir)).unwrap();
    assert!(raw
        .execute("UPDATE entries SET payload = x'01'", [])
        .is_err());
    assert!(raw.execute("DELETE FROM entries", []).is_err());
}

// ------------------------------------------------------------- offline

const SECRET: &str = "hunter2-SECRET-needle";

fn redact(bytes: &[u8]) -> Vec<u8> {
    String::from_utf8_lossy(bytes)
        .replace(SECRET, "[redacted]")
        .into_bytes()
}

fn files_with_prefix(dir: &Path, name: &str) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(name))
        .collect()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn secret_store(path: &Path, c: &Clock) {
    let s = SqliteStorage::open(cfg(path, "a", c)).unwrap();
    let big = format!("{}{SECRET}{}", "x".repeat(9000), "y".repeat(9000)); // overflow pages
    s.commit(
        &Commit::at(1)
            .write(entry("r", None, format!("hello {SECRET}").as_bytes()))
            .write(entry("b", Some("r"), big.as_bytes()))
            .write(Write::SetRegister {
                namespace: Namespace::new("n").unwrap(),
                key: RegisterKey::new("k").unwrap(),
                value: Payload::new(format!("reg {SECRET}").into_bytes()).unwrap(),
            })
            .write(Write::InsertUsage {
                id: RecordId::new("u").unwrap(),
                figures: UsageFigures {
                    input_tokens: 5,
                    ..UsageFigures::default()
                },
                details: Payload::new(format!("details {SECRET}").into_bytes()).unwrap(),
            }),
    )
    .unwrap();
    for i in 0..50 {
        s.commit(&Commit::at(2).write(entry(&format!("e{i}"), Some("b"), b"filler")))
            .unwrap();
    }
    s.close().unwrap();
}

#[test]
fn rewrite_erases_a_secret_from_every_byte_of_the_file_and_its_siblings() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let (t, c) = clock();
    secret_store(&path, &c);
    let offline = offline(&c);
    assert_eq!(generation(&path).unwrap(), 0);
    let any_secret = |dir: &Path| {
        files_with_prefix(dir, "session.db")
            .into_iter()
            .any(|p| contains(&std::fs::read(p).unwrap(), SECRET.as_bytes()))
    };
    assert!(
        any_secret(dir.path()),
        "the fixture must contain the secret"
    );

    let report = rewrite_into(
        &path,
        &offline,
        |mut e| {
            e.payload = Payload::new(redact(e.payload.as_bytes())).unwrap();
            Ok(e)
        },
        |v| Ok(Payload::new(redact(v.as_bytes())).unwrap()),
    )
    .unwrap();
    assert_eq!(report.generation, 1);
    assert_eq!(report.entries_rewritten, 2);
    assert_eq!(report.values_rewritten, 2);
    assert_eq!(generation(&path).unwrap(), 1);

    let files = files_with_prefix(dir.path(), "session.db");
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        assert!(
            !contains(&bytes, SECRET.as_bytes()),
            "{} still holds the secret",
            f.display()
        );
    }
    println!(
        "raw-bytes check: secret absent from {} file(s): {files:?}",
        files.len()
    );

    // The store reopens (new owner, fence above every earlier one) and reads the rewrite.
    t.fetch_add(10, Ordering::SeqCst);
    let s = SqliteStorage::open(cfg(&path, "b", &c)).unwrap();
    assert!(s.lease_pair().unwrap().1 >= 3);
    let e = s.get_entries(&[RecordId::new("r").unwrap()]).unwrap()[0]
        .clone()
        .unwrap();
    assert_eq!(e.payload.as_bytes(), b"hello [redacted]");
    assert_eq!(s.stats().unwrap().totals.input_tokens, 5);
    let path_ids: Vec<_> = s
        .scan_branch(&branch_scan(RecordId::new("e49").unwrap()))
        .unwrap()
        .into_iter()
        .map(|e| e.id.to_string())
        .collect();
    assert_eq!(path_ids, ["e49", "b", "r"]);
    assert_eq!(
        s.scan_usage(&UsageScan::all()).unwrap()[0]
            .details
            .as_bytes(),
        b"details [redacted]"
    );
    // After reopening, the file still holds no secret (no WAL replay resurrected it).
    s.close().unwrap();
    assert!(!any_secret(dir.path()));
}

#[test]
fn rewrite_is_refused_under_a_live_lease_and_aborts_on_a_moved_entry() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let (t, c) = clock();
    secret_store(&path, &c);
    let offline = offline(&c);
    let s = SqliteStorage::open(cfg(&path, "a", &c)).unwrap();
    let err = rewrite_into(&path, &offline, Ok, Ok).unwrap_err();
    assert!(
        matches!(
            err,
            RewriteError::RewriteLeaseHeld(LeaseError::LeaseHeld { .. })
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .starts_with("RewriteLeaseHeld: the writer lease is held by a (fence 2) until "),
        "{err}"
    );
    s.close().unwrap();
    drop(s);

    let err = rewrite_into(
        &path,
        &offline,
        |mut e| {
            e.kind = Kind::new("other").unwrap();
            Ok(e)
        },
        Ok,
    )
    .unwrap_err();
    assert!(matches!(err, RewriteError::Violation(_)), "{err}");
    let err = rewrite_into(&path, &offline, |_| Err("corrupt".to_owned()), Ok).unwrap_err();
    assert!(matches!(err, RewriteError::TransformFailed { .. }), "{err}");
    // Nothing swapped: same generation, same content, and the claim was released.
    assert_eq!(generation(&path).unwrap(), 0);
    assert!(files_with_prefix(dir.path(), "session.db.rewrite-tmp").is_empty());
    let s = SqliteStorage::open(cfg(&path, "b", &c)).unwrap();
    s.close().unwrap();
    drop(s);
    t.fetch_add(1, Ordering::SeqCst);
    assert!(matches!(
        generation(&dir.path().join("nope.db")),
        Err(RewriteError::Missing(_))
    ));
    assert!(!dir.path().join("nope.db").exists());
}

#[test]
fn export_returns_the_copy_digest_and_keeps_the_claim_until_released() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let (_t, c) = clock();
    secret_store(&path, &c);
    let offline = offline(&c);
    let to = dir.path().join("export.db");
    let mover = owner("move:op1");
    let digest = export_closed(&path, &to, &mover, &offline).unwrap();
    assert_eq!(digest, hash(&to));
    assert_eq!(digest.len(), 64);
    // The copy has no writer lease and opens; the original is claimed.
    let copy = SqliteStorage::open(cfg(&to, "x", &c)).unwrap();
    assert_eq!(copy.stats().unwrap().usage_rows, 1);
    copy.close().unwrap();
    let err = SqliteStorage::open(cfg(&path, "b", &c)).unwrap_err();
    assert!(
        matches!(err, OpenError::Lease(LeaseError::LeaseHeld { ref holder, .. }) if *holder == mover),
        "{err}"
    );
    // The same owner may re-cut; another owner may not; release frees the file.
    let to2 = dir.path().join("export2.db");
    export_closed(&path, &to2, &mover, &offline).unwrap();
    let err = export_closed(
        &path,
        &dir.path().join("e3.db"),
        &owner("move:op2"),
        &offline,
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            RewriteError::RewriteLeaseHeld(LeaseError::LeaseHeld { .. })
        ),
        "{err}"
    );
    assert!(!release_export(&path, &owner("move:op2"), &offline).unwrap());
    assert!(release_export(&path, &mover, &offline).unwrap());
    let s = SqliteStorage::open(cfg(&path, "b", &c)).unwrap();
    s.record_identity("sess-1", Some("sess-0")).unwrap();
    s.close().unwrap();
    let id = identity(&path).unwrap();
    assert_eq!(id.session_id.as_deref(), Some("sess-1"));
    assert_eq!(id.parent_session_id.as_deref(), Some("sess-0"));
}

/// The export's lease edges are lease decisions: the copy's release keeps
/// its fence high-water mark (a writer of the copy gets a fence above the
/// claim's), and the release by owner frees whichever incarnation of the
/// operation holds the original, expired or not, and then answers false.
#[test]
fn export_copy_keeps_its_fences_and_release_by_owner_frees_any_incarnation() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let (t, c) = clock();
    secret_store(&path, &c); // "a" held fence 1 and released it
    let offline = offline(&c);
    let mover = owner("move:op1");
    export_closed(&path, &dir.path().join("e1.db"), &mover, &offline).unwrap(); // fence 2
                                                                                // The operation restarts and cuts again: its new incarnation claims fence 3.
    let to = dir.path().join("e2.db");
    export_closed(&path, &to, &mover, &offline).unwrap();
    let copy = SqliteStorage::open(cfg(&to, "x", &c)).unwrap();
    assert_eq!(copy.lease_pair().unwrap().1, 4);
    copy.close().unwrap();
    // The claim has expired; the release by owner still frees it, once.
    t.fetch_add(5_000, Ordering::SeqCst);
    assert!(release_export(&path, &mover, &offline).unwrap());
    assert!(!release_export(&path, &mover, &offline).unwrap());
    let s = SqliteStorage::open(cfg(&path, "b", &c)).unwrap();
    assert_eq!(s.lease_pair().unwrap().1, 4);
    s.close().unwrap();
}

fn raw_floor(path: &Path) -> i64 {
    let raw = rusqlite::Connection::open(path).unwrap();
    raw.query_row("SELECT next_seq FROM session", [], |r| r.get(0))
        .unwrap()
}

/// The durable head is derived (`session.next_seq` is a floor under the
/// largest entry and usage seq): after every commit shape — entry, usage,
/// register set, delete of an absent register (consumes a seq), CAS-only,
/// a gap from a seq floor, an empty commit — a reopened store assigns
/// exactly the next seq the last receipt named. A single-entry commit
/// leaves the `session` row untouched (the page the derivation saves).
#[test]
fn the_derived_head_survives_reopen_after_every_commit_shape() {
    use custos_conformance::storage::{del, set, usage};
    let dir = tempfile::tempdir().unwrap();
    let (_t, c) = clock();
    let path = db(&dir);
    let shapes: Vec<(&str, Commit)> = vec![
        ("entry", Commit::at(1).write(entry("e1", None, b"x"))),
        ("usage", Commit::at(1).write(usage("u1", 5, 7))),
        ("register", Commit::at(1).write(set("n", "k", b"v"))),
        ("delete-absent", Commit::at(1).write(del("n", "nope"))),
        (
            "cas-only",
            Commit::at(1).expect(
                Namespace::new("n").unwrap(),
                RegisterKey::new("k").unwrap(),
                Some(3),
            ),
        ),
        (
            "gap",
            Commit::at(1).floor(40).write(entry("e2", Some("e1"), b"y")),
        ),
        (
            "entry-and-usage",
            Commit::at(1)
                .write(entry("e3", Some("e2"), b"z"))
                .write(usage("u2", 1, 1)),
        ),
        ("empty", Commit::at(1)),
    ];
    let mut expected_next = 1;
    for (name, commit) in shapes {
        let s = SqliteStorage::open(cfg(&path, "a", &c)).unwrap();
        let floor_before = raw_floor(&path);
        let receipt = s.commit(&commit).unwrap();
        assert!(
            receipt.seqs.iter().all(|&q| q >= expected_next),
            "{name}: reused a seq below {expected_next}: {:?}",
            receipt.seqs
        );
        assert!(receipt.next_seq >= expected_next, "{name}: head went back");
        if name == "gap" {
            assert_eq!(receipt.seqs, vec![40], "the floor opens a gap");
        }
        expected_next = receipt.next_seq;
        s.close().unwrap();
        drop(s);
        if name == "entry" || name == "gap" {
            assert_eq!(
                raw_floor(&path),
                floor_before,
                "{name}: a single-entry commit wrote the session row"
            );
        }
        // Reopen: an empty commit answers the durable head unchanged.
        let s = SqliteStorage::open(cfg(&path, "a", &c)).unwrap();
        let probe = s.commit(&Commit::at(1)).unwrap();
        assert_eq!(
            probe.next_seq, expected_next,
            "{name}: reopened head differs"
        );
        custos_conformance::storage::assert_stats_equal_ledger(&s);
        s.close().unwrap();
    }
    assert!(
        expected_next > 41,
        "the commits after the gap moved the head past it"
    );
}

/// A version-1 file (whose `session.next_seq` was kept exact) opens, steps
/// to the current version, and continues at the seq it recorded.
#[test]
fn a_version_1_file_migrates_and_keeps_its_head() {
    use custos_conformance::storage::set;
    let dir = tempfile::tempdir().unwrap();
    let (_t, c) = clock();
    let path = db(&dir);
    let s = SqliteStorage::open(cfg(&path, "a", &c)).unwrap();
    s.commit(&Commit::at(1).write(entry("e1", None, b"x")))
        .unwrap();
    s.commit(&Commit::at(1).write(set("n", "k", b"v"))).unwrap();
    s.close().unwrap();
    drop(s);
    {
        // What version 1 wrote: the exact head in the session row, and no
        // table of a later version.
        let raw = rusqlite::Connection::open(&path).unwrap();
        raw.execute_batch(
            "UPDATE session SET next_seq = -9223372036854775805, storage_version = 1;
             DROP TABLE kept_commits;
             PRAGMA user_version = 1;",
        )
        .unwrap();
    }
    let s = SqliteStorage::open(cfg(&path, "b", &c)).unwrap();
    let r = s
        .commit(&Commit::at(1).write(entry("e2", Some("e1"), b"y")))
        .unwrap();
    assert_eq!(r.seqs, vec![3]);
    s.close().unwrap();
    drop(s);
    let raw = rusqlite::Connection::open(&path).unwrap();
    let v: i64 = raw
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    let sv: i64 = raw
        .query_row("SELECT storage_version FROM session", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        (v, sv),
        (
            custos_sqlite::schema::STORAGE_VERSION,
            custos_sqlite::schema::STORAGE_VERSION
        )
    );
}

/// The branch-index diagnostics: a chain of first children stays one
/// segment; a fork opens a segment naming its parent's place; a second
/// root opens its own; `limit` bounds the answer.
#[test]
fn segments_report_chains_forks_and_roots() {
    use custos_sqlite::Segment;
    let dir = tempfile::tempdir().unwrap();
    let (_t, c) = clock();
    let s = SqliteStorage::open(cfg(&db(&dir), "a", &c)).unwrap();
    assert_eq!(s.segments(10).unwrap(), vec![]);
    // r0 <- r1 <- r2 (one chain), then a fork f1 from r1, then a root q0.
    s.commit(&Commit::at(1).write(entry("r0", None, b"a")))
        .unwrap();
    s.commit(&Commit::at(1).write(entry("r1", Some("r0"), b"b")))
        .unwrap();
    s.commit(&Commit::at(1).write(entry("r2", Some("r1"), b"c")))
        .unwrap();
    let chain = s.segments(10).unwrap();
    assert_eq!(
        chain,
        vec![Segment {
            segment: 1,
            parent: None,
            len: 3
        }]
    );
    s.commit(&Commit::at(1).write(entry("f1", Some("r1"), b"d")))
        .unwrap();
    s.commit(&Commit::at(1).write(entry("f2", Some("f1"), b"e")))
        .unwrap();
    s.commit(&Commit::at(1).write(entry("q0", None, b"f")))
        .unwrap();
    let all = s.segments(10).unwrap();
    assert_eq!(
        all,
        vec![
            Segment {
                segment: 1,
                parent: None,
                len: 3
            },
            Segment {
                segment: 2,
                parent: Some((1, 1)),
                len: 2
            },
            Segment {
                segment: 3,
                parent: None,
                len: 1
            },
        ]
    );
    assert_eq!(s.segments(2).unwrap().len(), 2, "limit bounds the answer");
    s.close().unwrap();
    assert_eq!(s.segments(1), Err(StorageError::HandleClosed));
}
