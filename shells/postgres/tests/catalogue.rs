//! The catalogue on PostgreSQL: the catalogue, custody and access
//! conformance suites (one fresh schema per factory call), a newer stored version
//! refused with nothing written, stored values that break a grammar failing
//! the read, the read-only open, and the delegate limit raced by 8 threads
//! with their own handles.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_core::catalogue::{Catalogue, CatalogueError, Claim, Creation, Outcome, Request};
use custos_postgres::catalogue::{OpenError, PgCatalogue, CATALOGUE_VERSION, COMPONENT};
use custos_postgres::Target;
use custos_testkit::pg_cluster::{shared, unique_schema};

// Time is data in the suites (as on memory and SQLite): the caller's
// clock judges access expiries.
mod support;
use support::{caller_clock_target as target, client, schema_count, schema_dump as dump};

fn fresh() -> PgCatalogue {
    PgCatalogue::open(target("cat")).expect("open a fresh catalogue")
}

/// A schema of its own, opened afresh by every call.
fn place() -> impl Fn() -> PgCatalogue {
    let target = target("cat_reopen");
    move || PgCatalogue::open(target.clone()).expect("reopen the catalogue")
}

custos_conformance::catalogue_suite!(postgres_catalogue, fresh, reopen: place);
custos_conformance::custody_suite!(postgres_custody, fresh, reopen: place);
custos_conformance::access_suite!(postgres_access, fresh, reopen: place);

/// A handle on `t` (a racing thread's).
fn open(t: Target) -> PgCatalogue {
    PgCatalogue::open(t).unwrap()
}

fn reserve(c: &PgCatalogue, id: &str, key: &str) {
    let local = Creation::local(key, "n", "/w");
    c.apply(&custos_conformance::catalogue::reserve_req(id, local, 1))
        .unwrap();
}

#[test]
fn reopening_keeps_the_rows_and_records_the_version() {
    let t = target("reopen");
    let c = PgCatalogue::open(t.clone()).unwrap();
    reserve(&c, "s1", "k1");
    drop(c);
    let c = PgCatalogue::open(t.clone()).unwrap();
    assert!(c.get("s1").unwrap().is_some());
    assert_eq!(c.revision().unwrap(), 1);
    let v: i64 = support::stored_version(&t, COMPONENT);
    assert_eq!(v, CATALOGUE_VERSION);
    let dbg = format!("{c:?}");
    assert!(!dbg.contains(shared().unwrap().password()), "{dbg}");
}

#[test]
fn a_newer_version_is_refused_with_nothing_written() {
    let t = target("newer");
    let c = PgCatalogue::open(t.clone()).unwrap();
    reserve(&c, "s1", "k1");
    drop(c);
    client(&t)
        .execute(
            "UPDATE custos_versions SET version = $1 WHERE component = $2",
            &[&(CATALOGUE_VERSION + 1), &COMPONENT],
        )
        .unwrap();
    let before = dump(&t);
    let e = PgCatalogue::open(t.clone()).unwrap_err();
    assert!(
        matches!(e, OpenError::UnsupportedVersion { found, supported, .. }
            if found == CATALOGUE_VERSION + 1 && supported == CATALOGUE_VERSION),
        "{e}"
    );
    assert!(!e.to_string().contains(shared().unwrap().password()));
    let e = PgCatalogue::open_read_only(t.clone()).unwrap_err();
    assert!(matches!(e, OpenError::NotReadable { .. }), "{e}");
    assert_eq!(dump(&t), before, "a refused open wrote");
}

#[test]
fn an_unreachable_server_is_unavailable_without_the_password() {
    let c = shared().unwrap();
    // A port nothing listens on (the cluster's own, plus one, is free or
    // refuses; either way the password must not show).
    let url = c.url().replace(&format!(":{}/", c.port()), ":1/");
    let t = Target::new(url, unique_schema("gone")).unwrap();
    let e = PgCatalogue::open(t.clone()).unwrap_err();
    assert!(matches!(e, OpenError::Unavailable { .. }), "{e}");
    assert!(!e.to_string().contains(c.password()), "{e}");
    assert!(!format!("{e:?}").contains(c.password()), "{e:?}");
    let e = PgCatalogue::open_read_only(t).unwrap_err();
    assert!(matches!(e, OpenError::Unavailable { .. }), "{e}");
}

fn invalid(r: Result<impl std::fmt::Debug, CatalogueError>, needle: &str) {
    match r {
        Err(CatalogueError::Invalid { what, detail }) => {
            let text = format!("{what}: {detail}");
            assert!(text.contains(needle), "{text} lacks {needle:?}");
        }
        other => panic!("expected Invalid naming {needle:?}, got {other:?}"),
    }
}

#[test]
fn stored_values_that_break_a_grammar_fail_the_read() {
    let t = target("grammar");
    let c = PgCatalogue::open(t.clone()).unwrap();
    for i in 1..=8 {
        reserve(&c, &format!("s{i}"), &format!("k{i}"));
    }
    let mut raw = client(&t);
    let mut sql = |q: &str| raw.batch_execute(q).unwrap();
    sql("UPDATE catalogue_sessions SET profile = 'Not A Name' WHERE session_id = 's1'");
    invalid(c.get("s1"), "profile");
    sql("UPDATE catalogue_sessions SET executor = 'exec-1' WHERE session_id = 's2'");
    invalid(c.get("s2"), "registered workspace name");
    sql("INSERT INTO catalogue_session_moves VALUES ('s3', 'op 1', 'cat-b', 'moving')");
    invalid(c.custody("s3"), "move");
    invalid(c.moving(), "move");
    sql("UPDATE catalogue_session_moves SET op = 'op-1', state = 'gone' WHERE session_id = 's3'");
    invalid(c.custody("s3"), "gone");
    sql("INSERT INTO catalogue_session_subtitles VALUES ('s4', '  padded  ')");
    assert_eq!(
        c.get("s4").unwrap().unwrap().subtitle,
        None,
        "a bad subtitle reads as none"
    );
    sql("INSERT INTO catalogue_delegate_sessions VALUES ('Bad Spawner', 'p', 's4', 1)");
    invalid(c.delegate_of("s4"), "stored delegate row");
    invalid(c.delegates_held("Bad Spawner"), "stored delegate row");
    // A negative bigint names its table and column.
    sql("UPDATE catalogue_sessions SET created_at_ms = -1 WHERE session_id = 's5'");
    invalid(
        c.get("s5"),
        "catalogue_sessions row s5: column created_at_ms",
    );
    // An unknown state word.
    sql("UPDATE catalogue_sessions SET state = 'half' WHERE session_id = 's6'");
    invalid(c.get("s6"), "half");
    // An over-long text names its table, row and column.
    sql(&format!(
        "UPDATE catalogue_sessions SET workspace = '/{}' WHERE session_id = 's7'",
        "w".repeat(5000)
    ));
    invalid(c.get("s7"), "catalogue_sessions row s7: column workspace");
    sql("INSERT INTO catalogue_delegate_sessions VALUES ('orch', 'p8', 's8', -3)");
    invalid(
        c.delegate_of("s8"),
        "catalogue_delegate_sessions row (orch, p8): column last_contact_ms",
    );
    // A write whose footprint holds a bad row is refused too, writing nothing.
    let rev = c.revision().unwrap();
    let before = dump(&t);
    invalid(
        c.apply(&Request::Rename {
            session_id: "s1".into(),
            name: "x".into(),
        }),
        "profile",
    );
    assert_eq!(c.revision().unwrap(), rev);
    assert_eq!(dump(&t), before);
    // A negative revision, then a missing head row: never read as 0.
    sql("UPDATE catalogue_head SET revision = -5");
    invalid(c.revision(), "catalogue_head row 1: column revision");
    invalid(
        c.apply(&Request::RememberFolder { path: "/x".into() }),
        "column revision",
    );
    sql("DELETE FROM catalogue_head");
    invalid(c.revision(), "catalogue_head");
    invalid(
        c.apply(&Request::RememberFolder { path: "/x".into() }),
        "catalogue_head",
    );
    assert!(c.recent_folders().unwrap().is_empty());
}

#[test]
fn a_timestamp_beyond_bigint_is_refused_writing_nothing() {
    let t = target("big");
    let c = PgCatalogue::open(t.clone()).unwrap();
    let before = dump(&t);
    let e = c
        .apply(&Request::Reserve {
            session_id: "s1".into(),
            creation: Creation::local("k1", "n", "/w"),
            now: u64::MAX,
        })
        .unwrap_err();
    assert_eq!(e.reason(), "Invalid", "{e}");
    assert_eq!(dump(&t), before);
}

#[test]
fn read_only_open_of_a_missing_schema_creates_nothing() {
    let t = target("ro_missing");
    let e = PgCatalogue::open_read_only(t.clone()).unwrap_err();
    assert!(matches!(e, OpenError::NotReadable { .. }), "{e}");
    assert_eq!(schema_count(&t), 0, "a read-only open created the schema");
}

#[test]
fn read_only_open_reads_and_refuses_apply_untouched() {
    let t = target("ro");
    let w = PgCatalogue::open(t.clone()).unwrap();
    reserve(&w, "s1", "k1");
    let before = dump(&t);
    let c = PgCatalogue::open_read_only(t.clone()).unwrap();
    assert!(c.is_read_only());
    assert!(c.get("s1").unwrap().is_some());
    assert_eq!(c.revision().unwrap(), 1);
    let e = c
        .apply(&Request::Reserve {
            session_id: "s2".into(),
            creation: Creation::local("k2", "n", "/w"),
            now: 2,
        })
        .unwrap_err();
    assert!(matches!(e, CatalogueError::BackendFault { .. }), "{e}");
    assert_eq!(dump(&t), before);
    // It sees the writer's later commits.
    reserve(&w, "s2", "k2");
    assert!(c.get("s2").unwrap().is_some());
    // A schema holding other components but no catalogue is not readable.
    let other = target("ro_other");
    let conn = custos_postgres::conn::Conn::open(other.clone()).unwrap();
    custos_postgres::conn::Component {
        name: "probe",
        steps: &["CREATE TABLE probe (k bigint)"],
    }
    .prepare(&conn)
    .unwrap();
    let before = dump(&other);
    let e = PgCatalogue::open_read_only(other.clone()).unwrap_err();
    assert!(matches!(e, OpenError::NotReadable { .. }), "{e}");
    assert_eq!(dump(&other), before);
}

#[test]
fn a_dropped_connection_reconnects() {
    let t = target("reconnect");
    let c = PgCatalogue::open(t.clone()).unwrap();
    reserve(&c, "s1", "k1");
    let pid = c.backend_pid().unwrap();
    client(&t)
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .unwrap();
    // The first use may see the dropped connection (Unavailable); the next
    // reconnects.
    let first = c.get("s1");
    if let Err(e) = &first {
        assert_eq!(e.reason(), "Unavailable", "{e}");
    }
    assert!(c.get("s1").unwrap().is_some());
    reserve(&c, "s2", "k2");
    assert_eq!(c.revision().unwrap(), 2);
}

// ------------------------------------------------------------ delegate race

const SPAWNER: &str = "orch-race";

#[test]
fn eight_handles_never_pass_the_delegate_limit() {
    const CLAIMANTS: usize = 8;
    for (round, limit) in [1u32, 3, 3, 5, 7, 8, 10].into_iter().enumerate() {
        let t = target("race");
        let setup = PgCatalogue::open(t.clone()).unwrap();
        for i in 0..CLAIMANTS {
            reserve(&setup, &format!("d{i}"), &format!("k{i}"));
        }
        let answers = support::race(&t, CLAIMANTS, open, move |i, c| {
            c.apply(&Request::ClaimDelegate {
                spawner: SPAWNER.into(),
                parent_session: format!("parent-{i}"),
                session_id: format!("d{i}"),
                now: 1,
                limit,
            })
            .unwrap()
        });
        let mut claimed = 0;
        let mut at_limit = 0;
        for answer in answers {
            match answer {
                Outcome::Delegate(Claim::Claimed(_)) => claimed += 1,
                Outcome::Delegate(Claim::AtLimit { held }) => {
                    assert_eq!(held, limit, "round {round}");
                    at_limit += 1;
                }
                other => panic!("round {round}: {other:?}"),
            }
        }
        let want = (limit as usize).min(CLAIMANTS);
        assert_eq!(
            claimed, want,
            "round {round}: {claimed} claimants passed a limit of {limit}"
        );
        assert_eq!(at_limit, CLAIMANTS - want, "round {round}");
        assert_eq!(setup.delegates_held(SPAWNER).unwrap() as usize, want);
    }
}
