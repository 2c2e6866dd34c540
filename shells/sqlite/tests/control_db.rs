//! The SQLite control catalog: the control-catalog conformance suite, the
//! file's identity pragmas, a newer version refused byte-untouched, stored
//! values that break their grammar failing the read, the catalog location
//! of a storage identity, and registration raced across processes (the test
//! binary re-executes itself as children).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use custos_core::fence::{Holder, WorldFence};
use custos_core::identity::StorageIdentity;
use custos_core::world::{
    ControlCatalog, FencePurpose, Outcome, WorldIdentity, WorldRecord, WorldStatus, WriterMode,
};
use custos_sqlite::control::{
    catalog_path, record_tick_head, SqliteControlCatalog, CONTROL_APPLICATION_ID, CONTROL_VERSION,
    SCHEMA_V1,
};
use custos_sqlite::OpenError;
use rusqlite::Connection;
use sha2::{Digest, Sha256};

mod support;

fn fresh() -> SqliteControlCatalog {
    SqliteControlCatalog::open_temp().expect("open a temp control catalog")
}

/// A control catalog file in a temporary directory, opened afresh by every
/// call.
fn place() -> impl Fn() -> SqliteControlCatalog {
    let dir = tempfile::tempdir().expect("a temp dir");
    move || SqliteControlCatalog::open(dir.path().join("control.db")).expect("open the catalog")
}

custos_conformance::control_catalog_suite!(sqlite_control, fresh, reopen: place);

fn sha(path: &Path) -> String {
    format!("{:x}", Sha256::digest(std::fs::read(path).unwrap()))
}

fn record(name: &str) -> WorldRecord {
    let mut id = WorldIdentity::new("w-race", name);
    id.run_id = Some("run-1".into());
    WorldRecord::active(id, WriterMode::CleanupOnly)
}

#[test]
fn a_fresh_catalog_carries_its_version_and_application_id() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("c.db");
    drop(SqliteControlCatalog::open(&p).unwrap());
    let conn = Connection::open(&p).unwrap();
    let v: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    let a: i64 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .unwrap();
    let j: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        (v, a, j.as_str()),
        (CONTROL_VERSION, CONTROL_APPLICATION_ID, "wal")
    );
}

#[test]
fn a_newer_version_is_refused_with_the_file_byte_untouched() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("c.db");
    drop(SqliteControlCatalog::open(&p).unwrap());
    {
        let conn = Connection::open(&p).unwrap();
        conn.execute_batch(&format!(
            "PRAGMA journal_mode = DELETE; PRAGMA user_version = {}",
            CONTROL_VERSION + 1
        ))
        .unwrap();
    }
    let before = sha(&p);
    assert!(matches!(
        SqliteControlCatalog::open(&p),
        Err(OpenError::UnsupportedVersion { .. })
    ));
    assert_eq!(sha(&p), before);
    // Another application's file is refused too.
    let q = d.path().join("other.db");
    Connection::open(&q)
        .unwrap()
        .execute_batch("CREATE TABLE t (x); PRAGMA journal_mode = DELETE;")
        .unwrap();
    let before = sha(&q);
    assert!(matches!(
        SqliteControlCatalog::open(&q),
        Err(OpenError::ForeignDatabase { .. })
    ));
    assert_eq!(sha(&q), before);
}

#[test]
fn stored_values_that_break_their_grammar_fail_the_read() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("c.db");
    let c = SqliteControlCatalog::open(&p).unwrap();
    c.register(&record("n")).unwrap();
    let raw = Connection::open(&p).unwrap();
    raw.execute("UPDATE control_worlds SET status = 'zombie'", [])
        .unwrap();
    assert_eq!(c.discover_worlds().unwrap_err().reason(), "Invalid");
    assert_eq!(
        c.register(&record("n")).unwrap_err().reason(),
        "Invalid",
        "a write never decides over a row it cannot read"
    );
    // A legacy row without a writer mode reads as resumable.
    raw.execute(
        "UPDATE control_worlds SET status = 'active', writer_mode = NULL",
        [],
    )
    .unwrap();
    assert_eq!(
        c.open_world_readonly("w-race").unwrap().record.writer_mode,
        WriterMode::Resumable
    );
    // A stored fingerprint that is not its schema's fails the read.
    raw.execute("UPDATE control_worlds SET writer_mode = 'cleanup_only'", [])
        .unwrap();
    let sig = custos_conformance::control::signature("t-1", &["Score"]);
    c.apply(&custos_core::world::Request::RegisterSignature {
        world_id: "w-race".into(),
        signature: sig,
    })
    .unwrap();
    raw.execute("UPDATE control_signatures SET fingerprint = 'ab'", [])
        .unwrap();
    assert_eq!(c.list_signatures().unwrap_err().reason(), "Invalid");
    assert_eq!(
        c.open_world_readonly("w-race").unwrap_err().reason(),
        "Invalid"
    );
}

#[test]
fn tick_head_updates_never_fail_the_caller() {
    let c = fresh();
    record_tick_head(&c, "nobody", 3); // logged, not raised
    c.register(&record("n")).unwrap();
    record_tick_head(&c, "w-race", 5);
    assert_eq!(c.open_world_readonly("w-race").unwrap().record.tick_head, 5);
    c.retire(&record("n")).unwrap();
    record_tick_head(&c, "w-race", 9);
    assert_eq!(c.open_world_readonly("w-race").unwrap().record.tick_head, 5);
}

#[test]
fn a_local_identity_keeps_its_catalog_beside_the_data() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().canonicalize().unwrap();
    let spelled = format!("file://{}/./data/", root.display());
    let id = StorageIdentity::new(&spelled, "ns", "iceberg").unwrap();
    let want = root.join("data/ns/.custos-catalog-iceberg.db");
    assert_eq!(catalog_path(&id).unwrap(), want);
    let c = SqliteControlCatalog::open_for(&id).unwrap();
    c.register(&record("n")).unwrap();
    drop(c);
    let again = StorageIdentity::new(&format!("{}/data", root.display()), "ns", "ICEBERG").unwrap();
    let c = SqliteControlCatalog::open_for(&again).unwrap();
    assert_eq!(c.path(), want);
    assert_eq!(c.discover_worlds().unwrap().len(), 1);
    let other = StorageIdentity::new(&format!("{}/data", root.display()), "ns", "lancedb").unwrap();
    assert!(SqliteControlCatalog::open_for(&other)
        .unwrap()
        .discover_worlds()
        .unwrap()
        .is_empty());
}

// ------------------------------------------------------------ registration race

const CHILD_ENV: &str = "CUSTOS_CONTROL_RACE_CHILD";

/// The child half: register (or retire) once the start file appears, and
/// print the answer. Does nothing when not run as a child.
#[test]
fn control_race_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut parts = spec.split('|');
    let path = PathBuf::from(parts.next().unwrap());
    let name: String = parts.next().unwrap().into();
    let op: String = parts.next().unwrap().into();
    let start = PathBuf::from(parts.next().unwrap());
    let c = SqliteControlCatalog::open_with(&path, Duration::from_secs(30)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !start.exists() {
        assert!(Instant::now() < deadline, "no start signal");
        std::thread::sleep(Duration::from_millis(1));
    }
    let r = record(&name);
    if op == "acquire" {
        let holder = Holder::new(format!("migration-{name}")).unwrap();
        let word = match c.acquire_fence("w-race", &holder, FencePurpose::Migration) {
            Ok((epoch, _)) => format!("ACQUIRED {epoch}"),
            Err(e) => format!("ERR {}", e.reason()),
        };
        println!("RESULT {word}");
        return;
    }
    let out = if op == "retire" {
        c.retire(&r)
    } else {
        c.register(&r)
    };
    let word = match out {
        Ok(Outcome::Registered { created: true }) => "CREATED".to_owned(),
        Ok(Outcome::Registered { created: false }) => "NOOP".to_owned(),
        Ok(Outcome::Retired(how)) => format!("RETIRED {how:?}"),
        Ok(other) => format!("OTHER {other:?}"),
        Err(e) => format!("ERR {}", e.reason()),
    };
    println!("RESULT {word}");
}

/// Runs one child per job `(name, op)` against a fresh catalog, released
/// together. Returns the catalog's directory and path and each answer.
fn race(jobs: &[(String, &str)]) -> (tempfile::TempDir, PathBuf, Vec<String>) {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("race.db");
    drop(SqliteControlCatalog::open(&path).unwrap());
    let answers = race_on(&path, d.path(), jobs);
    (d, path, answers)
}

/// Runs one child per job against the catalog at `path`, released together
/// by a start file in `dir`; answers each child's result.
fn race_on(path: &Path, dir: &Path, jobs: &[(String, &str)]) -> Vec<String> {
    let start = dir.join("start");
    let children: Vec<_> = jobs
        .iter()
        .map(|(name, op)| {
            let job = format!("{}|{name}|{op}|{}", path.display(), start.display());
            support::spawn_child("control_race_child", CHILD_ENV, job)
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(&start, b"go").unwrap();
    children
        .into_iter()
        .map(|child| {
            let out = child.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(
                out.status.success(),
                "child failed: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            stdout
                .lines()
                .find_map(|l| l.find("RESULT ").map(|i| l[i + 7..].to_owned()))
                .unwrap_or_else(|| panic!("no result: {stdout}"))
        })
        .collect()
}

const CHILDREN: usize = 8;
const ROUNDS: usize = 4;

#[test]
fn concurrent_registration_converges_on_one_row_across_processes() {
    let started = Instant::now();
    let (mut same_created, mut same_noop, mut diff_won, mut diff_conflict) = (0, 0, 0, 0);
    for round in 0..ROUNDS {
        // The same world from every process: exactly one row, one creation.
        let jobs: Vec<_> = (0..CHILDREN)
            .map(|_| ("same".to_owned(), "register"))
            .collect();
        let (_d, path, answers) = race(&jobs);
        let created = answers.iter().filter(|a| *a == "CREATED").count();
        let noop = answers.iter().filter(|a| *a == "NOOP").count();
        assert_eq!(
            (created, noop),
            (1, CHILDREN - 1),
            "round {round}: {answers:?}"
        );
        let c = SqliteControlCatalog::open(&path).unwrap();
        assert_eq!(c.discover_worlds().unwrap(), vec![record("same")]);
        same_created += created;
        same_noop += noop;

        // Differing identities for one world id: one wins, the rest conflict.
        let jobs: Vec<_> = (0..CHILDREN)
            .map(|i| (format!("name-{i}"), "register"))
            .collect();
        let (_d, path, answers) = race(&jobs);
        let winners: Vec<usize> = (0..CHILDREN).filter(|i| answers[*i] == "CREATED").collect();
        let conflicts = answers
            .iter()
            .filter(|a| *a == "ERR CatalogConflict")
            .count();
        assert_eq!(winners.len(), 1, "round {round}: {answers:?}");
        assert_eq!(conflicts, CHILDREN - 1, "round {round}: {answers:?}");
        let c = SqliteControlCatalog::open(&path).unwrap();
        assert_eq!(
            c.discover_worlds().unwrap(),
            vec![record(&format!("name-{}", winners[0]))]
        );
        diff_won += 1;
        diff_conflict += conflicts;
    }
    println!(
        "control race: {ROUNDS} rounds x {CHILDREN} processes; same world: {same_created} created, {same_noop} no-ops, one row each round; differing identities: {diff_won} winners, {diff_conflict} CatalogConflict ({:.1} s)",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn retirement_racing_delayed_registrations_always_ends_destroyed() {
    let started = Instant::now();
    let mut refused_after_tombstone = 0;
    for round in 0..ROUNDS {
        let jobs: Vec<_> = (0..CHILDREN)
            .map(|i| {
                (
                    "same".to_owned(),
                    if i % 2 == 0 { "retire" } else { "register" },
                )
            })
            .collect();
        let (_d, path, answers) = race(&jobs);
        for (i, a) in answers.iter().enumerate() {
            if i % 2 == 0 {
                assert!(a.starts_with("RETIRED"), "round {round}: {answers:?}");
            } else {
                assert!(
                    ["CREATED", "NOOP", "ERR CatalogConflict"].contains(&a.as_str()),
                    "round {round}: {answers:?}"
                );
                refused_after_tombstone += usize::from(a == "ERR CatalogConflict");
            }
        }
        let c = SqliteControlCatalog::open(&path).unwrap();
        let worlds = c.discover_worlds().unwrap();
        assert_eq!(worlds.len(), 1);
        assert_eq!(worlds[0].status, WorldStatus::Destroyed, "round {round}");
    }
    println!(
        "retire race: {ROUNDS} rounds x {CHILDREN} processes (half retire, half register): always destroyed; {refused_after_tombstone} registrations refused by a tombstone ({:.1} s)",
        started.elapsed().as_secs_f64()
    );
}

/// Processes racing to fence one world (each its own connection, released
/// together) get distinct epochs, exactly 1..=8: the acquire is decided in
/// the writing transaction, never from a stale read.
#[test]
fn concurrent_acquires_across_processes_issue_distinct_epochs() {
    let started = Instant::now();
    for round in 0..ROUNDS {
        let exe_jobs: Vec<_> = (0..CHILDREN).map(|i| (format!("{i}"), "acquire")).collect();
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("race.db");
        SqliteControlCatalog::open(&path)
            .unwrap()
            .register(&record("fenced"))
            .unwrap();
        let answers = race_on(&path, d.path(), &exe_jobs);
        let mut epochs: Vec<u64> = answers
            .iter()
            .map(|a| {
                a.strip_prefix("ACQUIRED ")
                    .and_then(|e| e.parse().ok())
                    .unwrap_or_else(|| panic!("round {round}: {answers:?}"))
            })
            .collect();
        epochs.sort_unstable();
        assert_eq!(
            epochs,
            (1..=CHILDREN as u64).collect::<Vec<_>>(),
            "round {round}"
        );
        let c = SqliteControlCatalog::open(&path).unwrap();
        assert_eq!(
            c.open_world_readonly("w-race").unwrap().fence.issued,
            CHILDREN as u64
        );
    }
    println!(
        "fence race: {ROUNDS} rounds x {CHILDREN} processes, epochs 1..={CHILDREN} each round ({:.1} s)",
        started.elapsed().as_secs_f64()
    );
}

/// A fence survives a reopen (it is a row, not a handle's state), and a
/// writer's epoch from before the reopen is still current or stale exactly
/// as stored.
#[test]
fn fences_survive_a_reopen() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("c.db");
    let mut r = record("persisted");
    r.writer_mode = WriterMode::Resumable;
    {
        let c = SqliteControlCatalog::open(&p).unwrap();
        c.register(&r).unwrap();
        let h = Holder::new("writer").unwrap();
        assert_eq!(
            c.acquire_fence("w-race", &h, FencePurpose::Resume).unwrap(),
            (1, None)
        );
        assert_eq!(
            c.acquire_fence("w-race", &h, FencePurpose::Resume).unwrap(),
            (2, Some(1))
        );
    }
    let c = SqliteControlCatalog::open(&p).unwrap();
    assert_eq!(
        c.open_world_readonly("w-race").unwrap().fence,
        WorldFence {
            issued: 2,
            floor: 0,
            holder: Some(Holder::new("writer").unwrap()),
        }
    );
    assert_eq!(
        c.commit_tick("w-race", 1, 4).unwrap_err().reason(),
        "StaleFence"
    );
    assert_eq!(c.commit_tick("w-race", 2, 4).unwrap(), 4);
    let ro = SqliteControlCatalog::open_read_only(&p).unwrap();
    assert_eq!(ro.open_world_readonly("w-race").unwrap().fence.issued, 2);
}

/// A version-1 catalog (no fence table) is read by a read-only handle with
/// every world unfenced and the file byte-untouched, and migrated to
/// version 2 by the first writing open with every row kept.
#[test]
fn a_version_1_catalog_reads_unfenced_and_migrates_keeping_its_rows() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("v1.db");
    {
        let conn = Connection::open(&p).unwrap();
        conn.execute_batch(SCHEMA_V1).unwrap();
        conn.execute_batch(&format!(
            "INSERT INTO control_worlds VALUES ('w-old', 'old', NULL, NULL, NULL, 'active', 7);
             PRAGMA application_id = {CONTROL_APPLICATION_ID}; PRAGMA user_version = 1;"
        ))
        .unwrap();
    }
    let before = sha(&p);
    let ro = SqliteControlCatalog::open_read_only(&p).unwrap();
    let info = ro.open_world_readonly("w-old").unwrap();
    assert_eq!(
        (info.record.tick_head, info.fence),
        (7, WorldFence::default())
    );
    drop(ro);
    assert_eq!(
        sha(&p),
        before,
        "a read-only open wrote to a version-1 file"
    );
    let c = SqliteControlCatalog::open(&p).unwrap();
    let v: i64 = Connection::open(&p)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, CONTROL_VERSION);
    let info = c.open_world_readonly("w-old").unwrap();
    assert_eq!(info.record.tick_head, 7);
    assert_eq!(info.record.writer_mode, WriterMode::Resumable);
    let h = Holder::new("writer").unwrap();
    assert_eq!(
        c.acquire_fence("w-old", &h, FencePurpose::Resume).unwrap(),
        (1, None)
    );
}

/// A stored fence row that breaks its grammar fails the read naming the
/// world and column: a holder with a control character, an over-long one.
#[test]
fn a_malformed_fence_row_fails_the_read() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("c.db");
    let c = SqliteControlCatalog::open(&p).unwrap();
    c.register(&record("bad")).unwrap();
    for holder in ["bad\u{7}holder".to_owned(), "h".repeat(129)] {
        Connection::open(&p)
            .unwrap()
            .execute(
                "INSERT OR REPLACE INTO control_fences VALUES ('w-race', 3, 0, ?1)",
                [&holder],
            )
            .unwrap();
        let e = c.open_world_readonly("w-race").unwrap_err();
        assert_eq!(e.reason(), "Invalid", "{e}");
        assert!(e.to_string().contains("w-race"), "{e}");
        let e = c
            .acquire_fence(
                "w-race",
                &Holder::new("m").unwrap(),
                FencePurpose::Migration,
            )
            .unwrap_err();
        assert_eq!(e.reason(), "Invalid", "{e}");
    }
}

custos_conformance::control_admin_suite!(sqlite_admin, fresh, reopen: place);

/// Stored administration that was tampered with fails closed on every
/// read and every commit: a reservation that is not canonical or whose
/// plan digest lies, a receipt whose bytes, digest column or presence
/// disagree with the reservation, a second reservation row.
#[test]
fn tampered_administration_fails_closed() {
    use custos_conformance::control_admin::{assert_evidence_refused, commit_completed};
    type Tamper = (&'static str, &'static str);
    let cases: [Tamper; 6] = [
        ("non-canonical reservation", "UPDATE control_migrations SET reservation = CAST(' ' || CAST(reservation AS TEXT) AS BLOB)"),
        ("lying plan digest", "UPDATE control_migrations SET plan_digest = '00'"),
        ("receipt bytes changed", "UPDATE control_migrations SET receipt = CAST(replace(CAST(receipt AS TEXT), 'custos-0.1.0', 'custos-0.1.1') AS BLOB)"),
        ("receipt digest column changed", "UPDATE control_migrations SET receipt_digest = 'ff'"),
        ("receipt missing", "UPDATE control_migrations SET receipt = NULL"),
        ("second reservation", "INSERT INTO control_migrations SELECT 'm9', plan_digest, reservation, receipt, receipt_digest FROM control_migrations"),
    ];
    for (what, sql) in cases {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c.db");
        let c = SqliteControlCatalog::open(&p).unwrap();
        let done = commit_completed(&c);
        Connection::open(&p).unwrap().execute_batch(sql).unwrap();
        assert_evidence_refused(&c, &done, what);
    }
}

/// A read-only handle exports and loads the administration but refuses a
/// commit with the file byte-untouched.
#[test]
fn a_read_only_handle_never_commits_administration() {
    use custos_conformance::control_admin::completed;
    use custos_core::migration::control::{AdminEffect, ControlAdmin};
    use custos_core::migration::Destination;
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("c.db");
    {
        let c = SqliteControlCatalog::open(&p).unwrap();
        custos_conformance::control_admin::populate(&c);
    }
    let before = sha(&p);
    let ro = SqliteControlCatalog::open_read_only(&p).unwrap();
    assert_eq!(ro.export_snapshot().unwrap().worlds.len(), 3);
    assert_eq!(ro.load_destination().unwrap(), Destination::default());
    let e = ro
        .commit_destination(&Destination::default(), &completed(), AdminEffect::None)
        .unwrap_err();
    assert_eq!(e.reason(), "BackendFault", "{e}");
    drop(ro);
    assert_eq!(sha(&p), before);
}
