//! The catalogue database on real files: identity pragmas, migrate-on-open
//! from an older version, a newer version refused byte-untouched, stored
//! values that break a grammar failing the read, and the delegate limit
//! raced across processes (the test binary re-executes itself as children).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use custos_core::catalogue::{Catalogue, Claim, Creation, Outcome, Request};
use custos_sqlite::catalogue::{
    identity, SqliteCatalogue, CATALOGUE_APPLICATION_ID, CATALOGUE_VERSION, STEPS,
};
use custos_sqlite::OpenError;
use rusqlite::Connection;
use sha2::{Digest, Sha256};

mod support;

fn dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn sha(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap();
    format!("{:x}", Sha256::digest(&bytes))
}

fn reserve(c: &SqliteCatalogue, id: &str, key: &str) {
    let local = Creation::local(key, "n", "/w");
    c.apply(&custos_conformance::catalogue::reserve_req(id, local, 1))
        .unwrap();
}

#[test]
fn a_fresh_catalogue_carries_its_version_and_application_id() {
    let d = dir();
    let p = d.path().join("cat.db");
    drop(SqliteCatalogue::open(&p).unwrap());
    assert_eq!(
        identity(&p).unwrap(),
        (CATALOGUE_VERSION, CATALOGUE_APPLICATION_ID)
    );
    // Reopening a current catalogue works and keeps its rows.
    let c = SqliteCatalogue::open(&p).unwrap();
    reserve(&c, "s1", "k1");
    drop(c);
    let c = SqliteCatalogue::open(&p).unwrap();
    assert!(c.get("s1").unwrap().is_some());
    let mode: String = Connection::open(&p)
        .unwrap()
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

#[test]
fn a_newer_version_is_refused_with_the_file_byte_untouched() {
    let d = dir();
    let p = d.path().join("cat.db");
    let c = SqliteCatalogue::open(&p).unwrap();
    reserve(&c, "s1", "k1");
    drop(c);
    {
        let conn = Connection::open(&p).unwrap();
        conn.execute_batch(&format!("PRAGMA user_version = {};", CATALOGUE_VERSION + 1))
            .unwrap();
        conn.execute_batch("PRAGMA journal_mode = DELETE;").unwrap();
    }
    let before = sha(&p);
    let e = SqliteCatalogue::open(&p).unwrap_err();
    assert!(
        matches!(e, OpenError::UnsupportedVersion { found, .. } if found == CATALOGUE_VERSION + 1),
        "{e}"
    );
    assert_eq!(sha(&p), before, "a refused open wrote to the file");
    println!("refused newer version; sha256 before = after = {before}");
}

#[test]
fn a_foreign_database_is_refused_untouched() {
    let d = dir();
    let p = d.path().join("other.db");
    {
        let conn = Connection::open(&p).unwrap();
        conn.execute_batch("CREATE TABLE t (x INTEGER); PRAGMA application_id = 7;")
            .unwrap();
    }
    let before = sha(&p);
    assert!(matches!(
        SqliteCatalogue::open(&p).unwrap_err(),
        OpenError::ForeignDatabase { .. }
    ));
    assert_eq!(sha(&p), before);
}

#[test]
fn an_older_catalogue_is_migrated_on_open_in_one_step() {
    let d = dir();
    let p = d.path().join("v1.db");
    {
        let conn = Connection::open(&p).unwrap();
        conn.execute_batch(STEPS[0]).unwrap();
        conn.execute_batch(&format!(
            "PRAGMA application_id = {CATALOGUE_APPLICATION_ID}; PRAGMA user_version = 1;"
        ))
        .unwrap();
        conn.execute(
            "INSERT INTO catalogue_sessions (session_id, creation_key, name, workspace, created_at_ms, state)
             VALUES ('old', 'k-old', 'Old one', '/home/w', 42, 'saved')",
            [],
        )
        .unwrap();
    }
    let c = SqliteCatalogue::open(&p).unwrap();
    assert_eq!(identity(&p).unwrap().0, CATALOGUE_VERSION);
    let r = c.get("old").unwrap().unwrap();
    assert_eq!(r.creation, Creation::local("k-old", "Old one", "/home/w"));
    assert_eq!(r.created_at_ms, 42);
    // Every later table exists: the row can move, be marked, be a delegate.
    assert_eq!(
        c.custody("old").unwrap(),
        custos_core::catalogue::custody::Custody::Resident
    );
    c.apply(&Request::MarkDeleting {
        session_id: "old".into(),
    })
    .unwrap();
    assert!(matches!(
        c.apply(&Request::ClaimDelegate {
            spawner: "orch".into(),
            parent_session: "p".into(),
            session_id: "old".into(),
            now: 1,
            limit: 1
        })
        .unwrap(),
        Outcome::Delegate(Claim::Claimed(_))
    ));
}

fn raw(p: &Path, sql: &str) {
    let conn = Connection::open(p).unwrap();
    conn.execute_batch("PRAGMA foreign_keys = OFF;").unwrap();
    conn.execute_batch(sql).unwrap();
}

#[test]
fn stored_values_that_break_a_grammar_fail_the_read() {
    let d = dir();
    let p = d.path().join("cat.db");
    let c = SqliteCatalogue::open(&p).unwrap();
    for (id, key) in [("s1", "k1"), ("s2", "k2"), ("s3", "k3"), ("s4", "k4")] {
        reserve(&c, id, key);
    }
    raw(
        &p,
        "UPDATE catalogue_sessions SET profile = 'Not A Name' WHERE session_id = 's1';",
    );
    assert_eq!(
        c.get("s1").unwrap_err().reason(),
        "Invalid",
        "a bad profile is never read as none"
    );
    raw(
        &p,
        "UPDATE catalogue_sessions SET executor = 'exec-1' WHERE session_id = 's2';",
    );
    assert_eq!(
        c.get("s2").unwrap_err().reason(),
        "Invalid",
        "an executor session with a path workspace"
    );
    raw(
        &p,
        "INSERT INTO catalogue_session_moves VALUES ('s3', 'op 1', 'cat-b', 'moving');",
    );
    assert_eq!(
        c.custody("s3").unwrap_err().reason(),
        "Invalid",
        "never read as Resident"
    );
    assert_eq!(c.moving().unwrap_err().reason(), "Invalid");
    raw(&p, "DELETE FROM catalogue_session_moves; INSERT INTO catalogue_session_moves VALUES ('s3', 'op-1', 'cat-b', 'gone');");
    assert_eq!(c.custody("s3").unwrap_err().reason(), "Invalid");
    raw(
        &p,
        "INSERT INTO catalogue_session_subtitles VALUES ('s4', '  padded  ');",
    );
    assert_eq!(
        c.get("s4").unwrap().unwrap().subtitle,
        None,
        "a bad subtitle reads as none"
    );
    raw(
        &p,
        "INSERT INTO catalogue_delegate_sessions VALUES ('Bad Spawner', 'p', 's4', 1);",
    );
    assert_eq!(c.delegate_of("s4").unwrap_err().reason(), "Invalid");
    assert_eq!(
        c.delegates_held("Bad Spawner").unwrap_err().reason(),
        "Invalid"
    );
    // A write whose footprint holds a bad row is refused too, writing nothing.
    let rev = c.revision().unwrap();
    assert_eq!(
        c.apply(&Request::Rename {
            session_id: "s1".into(),
            name: "x".into()
        })
        .unwrap_err()
        .reason(),
        "Invalid"
    );
    assert_eq!(c.revision().unwrap(), rev);
}

// ------------------------------------------------------------ delegate race

const CHILD_ENV: &str = "CUSTOS_DELEGATE_RACE_CHILD";
const SPAWNER: &str = "orch-race";

/// The child half: claim one delegate slot once the start file appears, and
/// print the answer. Does nothing when not run as a child.
#[test]
fn delegate_race_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut parts = spec.split('|');
    let path = PathBuf::from(parts.next().unwrap());
    let session: String = parts.next().unwrap().into();
    let limit: u32 = parts.next().unwrap().parse().unwrap();
    let start = PathBuf::from(parts.next().unwrap());
    let c = SqliteCatalogue::open_with(&path, Duration::from_secs(30)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !start.exists() {
        assert!(Instant::now() < deadline, "no start signal");
        std::thread::sleep(Duration::from_millis(1));
    }
    let out = c
        .apply(&Request::ClaimDelegate {
            spawner: SPAWNER.into(),
            parent_session: format!("parent-{session}"),
            session_id: session,
            now: 1,
            limit,
        })
        .unwrap();
    let word = match out {
        Outcome::Delegate(Claim::Claimed(_)) => "CLAIMED".to_owned(),
        Outcome::Delegate(Claim::AtLimit { held }) => format!("ATLIMIT {held}"),
        other => format!("OTHER {other:?}"),
    };
    println!("RESULT {word}");
}

#[test]
fn two_callers_never_both_pass_the_delegate_limit_across_processes() {
    const ROUNDS: usize = 6;
    const CHILDREN: usize = 8;
    const LIMIT: u32 = 3;
    let mut claimed_total = 0;
    let mut refused_total = 0;
    let started = Instant::now();
    for round in 0..ROUNDS {
        let d = dir();
        let path = d.path().join("race.db");
        let start = d.path().join("start");
        let c = SqliteCatalogue::open(&path).unwrap();
        for i in 0..CHILDREN {
            reserve(&c, &format!("d{i}"), &format!("k{i}"));
        }
        let children: Vec<_> = (0..CHILDREN)
            .map(|i| {
                let job = format!("{}|d{i}|{LIMIT}|{}", path.display(), start.display());
                support::spawn_child("delegate_race_child", CHILD_ENV, job)
            })
            .collect();
        // Let the children open the catalogue, then release them together.
        std::thread::sleep(Duration::from_millis(300));
        std::fs::write(&start, b"go").unwrap();
        let mut claimed = 0;
        let mut at_limit = 0;
        for child in children {
            let out = child.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "child failed: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let line = stdout
                .lines()
                .find_map(|l| l.find("RESULT ").map(|i| &l[i..]))
                .unwrap_or_else(|| panic!("no result: {stdout}"));
            match line {
                "RESULT CLAIMED" => claimed += 1,
                l if l.starts_with("RESULT ATLIMIT") => {
                    assert_eq!(l, format!("RESULT ATLIMIT {LIMIT}"));
                    at_limit += 1;
                }
                other => panic!("unexpected {other}"),
            }
        }
        assert_eq!(
            claimed, LIMIT as usize,
            "round {round}: {claimed} callers passed a limit of {LIMIT}"
        );
        assert_eq!(at_limit, CHILDREN - LIMIT as usize);
        assert_eq!(c.delegates_held(SPAWNER).unwrap(), LIMIT);
        claimed_total += claimed;
        refused_total += at_limit;
    }
    println!(
        "delegate race: {ROUNDS} rounds x {CHILDREN} processes, limit {LIMIT}: {claimed_total} claimed, {refused_total} AtLimit, never more than {LIMIT} per round ({:.1} s)",
        started.elapsed().as_secs_f64()
    );
}
