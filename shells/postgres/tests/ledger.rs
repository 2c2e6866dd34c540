//! The execution ledger on PostgreSQL: the conformance suite (a fresh
//! schema per case), a newer version refused with nothing written, the
//! read-only open, restart recovery versus joining, malformed stored rows
//! failing typed, a dropped connection and the admission race across
//! handles. (Random request streams answered alike by memory, SQLite and
//! PostgreSQL: `shells/cli/tests/differential_postgres_ledger.rs`.)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Barrier};

use ::postgres::Client;
use custos_conformance::ledger::{key, sid, tok, tool, ws, LIMITS};
use custos_core::ledger::{Admission, CallState, Key, Ledger, LedgerError, Lookup};
use custos_postgres::ledger::{OpenError, PgLedger, LEDGER_VERSION};
use custos_postgres::Target;
use custos_testkit::pg_cluster::{shared, unique_schema};

mod support;
use support::target;

fn fresh() -> PgLedger {
    PgLedger::open(target("ledger")).unwrap()
}

/// A schema of its own, opened afresh (restart recovery included) by every
/// call.
fn place() -> impl Fn() -> PgLedger {
    let target = target("ledger_reopen");
    move || PgLedger::open(target.clone()).unwrap()
}

custos_conformance::ledger_suite!(postgres, fresh, reopen: place);

#[test]
fn every_ledger_case_passes_through_the_table() {
    use custos_conformance::ledger::{ledger_cases, LEDGER_CASES};
    let table = ledger_cases::<PgLedger>();
    custos_conformance::assert_every_case_passes(
        "postgres",
        "ledger conformance cases",
        &table,
        LEDGER_CASES,
        &fresh,
    );
}

/// A raw client on the target's schema (`search_path` set).
fn raw(t: &Target) -> Client {
    t.connect().unwrap()
}

/// Every row of every ledger table, as text, in a stable order.
fn dump(c: &mut Client) -> Vec<String> {
    let mut out = Vec::new();
    for table in [
        "custos_versions",
        "ledger_head",
        "ledger_scopes",
        "ledger_calls",
        "ledger_acks",
        "ledger_releases",
    ] {
        for r in c
            .query(
                &format!("SELECT t::text FROM {table} t ORDER BY t::text"),
                &[],
            )
            .unwrap()
        {
            out.push(format!("{table}: {}", r.get::<_, String>(0)));
        }
    }
    out
}

fn schema_exists(c: &mut Client, schema: &str) -> bool {
    c.query_one(
        "SELECT count(*) FROM pg_namespace WHERE nspname = $1",
        &[&schema],
    )
    .unwrap()
    .get::<_, i64>(0)
        == 1
}

/// A schema named by an SQL key word is an identifier like any other: it
/// is quoted where it is created and where it is searched.
#[test]
fn a_schema_named_by_a_reserved_word_works() {
    for word in ["user", "select"] {
        let t = Target::new(shared().unwrap().url(), word).unwrap();
        let l = PgLedger::open(t.clone()).unwrap();
        l.attach(&LIMITS, &sid("s"), &ws("w"), 1, &tok("t"))
            .unwrap();
        let k = key("s", "o", 1);
        assert_eq!(
            l.admit(&LIMITS, &k, &tool("program"), &tok("t")),
            Ok(Admission::Fresh)
        );
        drop(l);
        let l = PgLedger::join(t).unwrap();
        assert_eq!(
            l.query(&LIMITS, &k),
            Ok(Lookup::Found(CallState::Admitted)),
            "schema {word:?}"
        );
    }
}

/// An open handle notices a newer build's migration before it writes.
#[test]
fn an_open_handle_refuses_to_write_under_a_newer_schema_version() {
    let t = target("ledger_newer");
    let l = PgLedger::open(t.clone()).unwrap();
    l.attach(&LIMITS, &sid("s"), &ws("w"), 1, &tok("t"))
        .unwrap();
    let mut c = raw(&t);
    c.execute(
        "UPDATE custos_versions SET version = version + 1 WHERE component = 'ledger'",
        &[],
    )
    .unwrap();
    let before = dump(&mut c);
    let e = l
        .admit(&LIMITS, &key("s", "o", 1), &tool("program"), &tok("t"))
        .unwrap_err();
    assert!(
        matches!(&e, LedgerError::BackendFault { reason } if reason.contains("schema-version")),
        "{e}"
    );
    assert_eq!(dump(&mut c), before, "the refused admission wrote");
}

#[test]
fn a_newer_stored_version_is_refused_with_nothing_written() {
    let t = target("ledger_newer");
    let l = PgLedger::open(t.clone()).unwrap();
    l.attach(&LIMITS, &sid("s"), &ws("w"), 1, &tok("a"))
        .unwrap();
    let k = key("s", "o", 1);
    l.admit(&LIMITS, &k, &tool("program"), &tok("a")).unwrap();
    l.close().unwrap();
    let mut c = raw(&t);
    c.execute(
        "UPDATE custos_versions SET version = $1 WHERE component = 'ledger'",
        &[&(LEDGER_VERSION + 1)],
    )
    .unwrap();
    let before = dump(&mut c);
    let e = PgLedger::open(t.clone()).unwrap_err();
    assert_eq!(
        e,
        OpenError::UnsupportedVersion {
            component: "ledger",
            schema: t.schema().to_owned(),
            found: LEDGER_VERSION + 1,
            supported: LEDGER_VERSION,
        }
    );
    assert!(e.to_string().starts_with("UnsupportedVersion"), "{e}");
    assert!(matches!(
        PgLedger::join(t.clone()),
        Err(OpenError::UnsupportedVersion { .. })
    ));
    assert!(matches!(
        PgLedger::open_read_only(t.clone()),
        Err(OpenError::NotReadable { .. })
    ));
    // Recovery did not run: the admitted row is still admitted.
    assert_eq!(dump(&mut c), before);
    assert!(before.iter().any(|r| r.contains("admitted")), "{before:?}");

    // A schema holding only a newer version record gains no ledger table.
    let t2 = target("ledger_newer");
    support::versions_only_schema(&t2, "ledger", 99);
    assert!(matches!(
        PgLedger::open(t2.clone()),
        Err(OpenError::UnsupportedVersion { found: 99, .. })
    ));
    assert_eq!(support::table_count(&t2), 1, "only custos_versions");
}

#[test]
fn the_read_only_open_creates_nothing_and_writes_nothing() {
    let t = target("ledger_ro");
    let mut c = raw(&t);
    // No schema at all: refused, and still no schema.
    let e = PgLedger::open_read_only(t.clone()).unwrap_err();
    assert!(matches!(e, OpenError::NotReadable { .. }), "{e}");
    assert!(!schema_exists(&mut c, t.schema()));

    // A ledger with an admitted row a crashed host left behind.
    let l = PgLedger::open(t.clone()).unwrap();
    l.attach(&LIMITS, &sid("s"), &ws("w"), 1, &tok("a"))
        .unwrap();
    let k = key("s", "o", 1);
    l.admit(&LIMITS, &k, &tool("program"), &tok("a")).unwrap();
    drop(l);
    let before = dump(&mut c);
    let r = PgLedger::open_read_only(t.clone()).unwrap();
    assert!(r.is_read_only());
    assert_eq!(r.query(&LIMITS, &k), Ok(Lookup::Found(CallState::Admitted)));
    assert_eq!(r.records(), Ok(2));
    let e = r.admit(&LIMITS, &key("s", "o2", 1), &tool("program"), &tok("a"));
    assert!(matches!(e, Err(LedgerError::BackendFault { .. })), "{e:?}");
    assert!(matches!(r.recover(), Err(LedgerError::BackendFault { .. })));
    r.close().unwrap();
    assert_eq!(r.query(&LIMITS, &k), Err(LedgerError::HandleClosed));
    assert_eq!(dump(&mut c), before);
}

#[test]
fn open_recovers_the_whole_ledger_and_join_recovers_nothing() {
    let t = target("ledger_recover");
    let a = PgLedger::open(t.clone()).unwrap();
    a.attach(&LIMITS, &sid("s"), &ws("w"), 1, &tok("a"))
        .unwrap();
    let k = key("s", "o", 1);
    assert_eq!(
        a.admit(&LIMITS, &k, &tool("program"), &tok("a")),
        Ok(Admission::Fresh)
    );
    // Another host joins: the call stays admitted and a can finish it.
    let b = PgLedger::join(t.clone()).unwrap();
    assert_eq!(b.query(&LIMITS, &k), Ok(Lookup::Found(CallState::Admitted)));
    let k2 = key("s", "p", 1);
    a.admit(&LIMITS, &k2, &tool("program"), &tok("a")).unwrap();
    a.finish(&LIMITS, &k2, b"done").unwrap();
    // A restart of the executor (open): every admitted row, whoever
    // admitted it, becomes unknown; the terminal one is untouched.
    drop(a);
    let c = PgLedger::open(t.clone()).unwrap();
    assert_eq!(b.query(&LIMITS, &k), Ok(Lookup::Found(CallState::Unknown)));
    assert_eq!(
        c.query(&LIMITS, &k2),
        Ok(Lookup::Found(CallState::Terminal(b"done".to_vec())))
    );
    assert_eq!(
        b.admit(&LIMITS, &k, &tool("program"), &tok("a")),
        Ok(Admission::Existing(CallState::Unknown))
    );
    assert_eq!(c.recover(), Ok(0));
}

/// A ledger with one scope `s` and one terminal call `(s, o, 1)`, and a raw
/// client on its schema.
fn settled_ledger(prefix: &str) -> (PgLedger, Client, Key) {
    let t = target(prefix);
    let l = PgLedger::open(t.clone()).unwrap();
    l.attach(&LIMITS, &sid("s"), &ws("w"), 1, &tok("a"))
        .unwrap();
    let k = key("s", "o", 1);
    l.admit(&LIMITS, &k, &tool("program"), &tok("a")).unwrap();
    l.finish(&LIMITS, &k, b"genuine").unwrap();
    (l, raw(&t), k)
}

fn malformed<T: std::fmt::Debug>(r: Result<T, LedgerError>, needle: &str) {
    match r {
        Err(LedgerError::MalformedRow { detail }) => {
            assert!(detail.contains(needle), "{detail} lacks {needle}");
        }
        other => panic!("expected MalformedRow naming {needle}, got {other:?}"),
    }
}

#[test]
fn malformed_call_rows_fail_typed_and_never_read_absent() {
    let (l, mut c, k) = settled_ledger("ledger_bad_call");
    c.execute("UPDATE ledger_calls SET outcome = '\\x00'", &[])
        .unwrap();
    assert_eq!(
        l.query(&LIMITS, &k),
        Err(LedgerError::DigestMismatch { key: k.clone() })
    );
    c.execute("UPDATE ledger_calls SET state = 'running'", &[])
        .unwrap();
    malformed(l.query(&LIMITS, &k), "ledger_calls");
    malformed(l.admit(&LIMITS, &k, &tool("program"), &tok("a")), "state");
    malformed(l.unacked(&LIMITS, &sid("s")), "running");
    c.execute(
        "UPDATE ledger_calls SET state = 'admitted', outcome = NULL, outcome_digest = NULL,
                outcome_bytes = -5",
        &[],
    )
    .unwrap();
    malformed(l.query(&LIMITS, &k), "outcome_bytes");
    // Recovery reads every admitted row: it fails typed, writes nothing.
    malformed(l.recover(), "outcome_bytes");
    // The budget's sum sees the negative row too.
    malformed(
        l.admit(&LIMITS, &key("s", "q", 1), &tool("program"), &tok("a")),
        "outcome_bytes",
    );
    c.execute("UPDATE ledger_calls SET outcome_bytes = 16, step = -1", &[])
        .unwrap();
    malformed(l.admitted(&LIMITS, &sid("s"), &tool("program")), "step");
    c.execute(
        "UPDATE ledger_calls SET step = 1, tool = repeat('t', 300)",
        &[],
    )
    .unwrap();
    malformed(l.query(&LIMITS, &k), "tool");
    c.execute(
        "UPDATE ledger_calls SET tool = 'program', state = 'terminal',
                outcome = '\\x00', outcome_digest = '\\x0011'",
        &[],
    )
    .unwrap();
    malformed(l.query(&LIMITS, &k), "outcome_digest");
}

#[test]
fn malformed_scope_and_release_rows_fail_typed() {
    let (l, mut c, _) = settled_ledger("ledger_bad_scope");
    c.execute("UPDATE ledger_scopes SET state = 'paused'", &[])
        .unwrap();
    malformed(l.scope(&LIMITS, &sid("s")), "ledger_scopes row s");
    c.execute(
        "UPDATE ledger_scopes SET state = 'open', incarnation = -1",
        &[],
    )
    .unwrap();
    malformed(l.scope(&LIMITS, &sid("s")), "incarnation");
    c.execute(
        "UPDATE ledger_scopes SET incarnation = 1, close_outcome = 3",
        &[],
    )
    .unwrap();
    malformed(l.scope(&LIMITS, &sid("s")), "close_outcome");
    c.execute(
        "UPDATE ledger_scopes SET close_outcome = NULL, attach_token = repeat('a', 300)",
        &[],
    )
    .unwrap();
    malformed(l.scope(&LIMITS, &sid("s")), "attach_token");
    c.execute("UPDATE ledger_scopes SET attach_token = E'a\\nb'", &[])
        .unwrap();
    malformed(l.scope(&LIMITS, &sid("s")), "attach_token");

    c.execute(
        "INSERT INTO ledger_releases (session, workspace, incarnation, was, released_at_ms)
         VALUES ('s', 'w', 1, 'closed:x', 5)",
        &[],
    )
    .unwrap();
    malformed(l.releases(&LIMITS), "ledger_releases row");
    c.execute(
        "UPDATE ledger_releases SET was = 'closing', released_at_ms = -5",
        &[],
    )
    .unwrap();
    malformed(l.releases(&LIMITS), "released_at_ms");

    // A missing head row: every write is refused typed.
    c.execute("DELETE FROM ledger_head", &[]).unwrap();
    malformed(l.recover(), "ledger_head");
}

#[test]
fn secrets_never_show_and_a_dropped_connection_is_unavailable_then_converges() {
    let cluster = shared().unwrap();
    let t = target("ledger_conn");
    let l = PgLedger::open(t.clone()).unwrap();
    assert!(!format!("{l:?}").contains(cluster.password()));
    let bad = Target::new(
        cluster.url().replace(cluster.password(), "wrong-secret-x"),
        unique_schema("ledger_conn"),
    )
    .unwrap();
    let e = PgLedger::open(bad).unwrap_err();
    assert!(matches!(e, OpenError::Unavailable { .. }), "{e}");
    assert!(!e.to_string().contains("wrong-secret-x"), "{e}");
    assert!(!format!("{e:?}").contains("wrong-secret-x"), "{e:?}");

    l.attach(&LIMITS, &sid("s"), &ws("w"), 1, &tok("a"))
        .unwrap();
    let k = key("s", "o", 1);
    let mut c = raw(&t);
    let pid = l.backend_pid().unwrap();
    c.execute("SELECT pg_terminate_backend($1)", &[&pid])
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let first = l.admit(&LIMITS, &k, &tool("program"), &tok("a"));
    match &first {
        Ok(Admission::Fresh) => {}
        Err(LedgerError::Unavailable { reason }) => {
            assert!(!reason.contains(cluster.password()), "{reason}");
        }
        other => panic!("after a dropped connection: {other:?}"),
    }
    // The retry reconnects and converges: the key is admitted exactly once.
    let second = l.admit(&LIMITS, &k, &tool("program"), &tok("a")).unwrap();
    match first {
        Ok(_) => assert_eq!(second, Admission::Existing(CallState::Admitted)),
        Err(_) => assert!(
            second == Admission::Fresh || second == Admission::Existing(CallState::Admitted)
        ),
    }
    assert_ne!(l.backend_pid().unwrap(), pid);
}

#[test]
fn race_handles_admitting_one_key_get_exactly_one_fresh() {
    const N: usize = 8;
    const ROUNDS: usize = 5;
    let t = target("ledger_race");
    let setup = PgLedger::open(t.clone()).unwrap();
    setup
        .attach(&LIMITS, &sid("s"), &ws("w"), 1, &tok("a"))
        .unwrap();
    for round in 0..ROUNDS {
        let barrier = Arc::new(Barrier::new(N));
        let op = format!("race{round}");
        let handles: Vec<_> = (0..N)
            .map(|_| {
                let (t, barrier, op) = (t.clone(), barrier.clone(), op.clone());
                std::thread::spawn(move || {
                    let l = PgLedger::join(t).unwrap();
                    barrier.wait();
                    l.admit(&LIMITS, &key("s", &op, 1), &tool("program"), &tok("a"))
                        .unwrap()
                })
            })
            .collect();
        let answers: Vec<Admission> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let fresh = answers.iter().filter(|a| **a == Admission::Fresh).count();
        assert_eq!(fresh, 1, "round {round}: {answers:?}");
        assert!(answers
            .iter()
            .all(|a| *a == Admission::Fresh || *a == Admission::Existing(CallState::Admitted)));
        // Settle it so the budget (40 bytes, 16 per call) admits the next.
        setup.finish(&LIMITS, &key("s", &op, 1), b"").unwrap();
        setup.ack(&LIMITS, &key("s", &op, 1)).unwrap();
    }
    println!("race: {ROUNDS} rounds of {N} handles, exactly one Fresh each");
}

#[test]
fn concurrent_first_opens_of_one_schema_all_succeed_with_one_head_row() {
    const N: usize = 8;
    let t = target("ledger_first");
    let barrier = Arc::new(Barrier::new(N));
    let handles: Vec<_> = (0..N)
        .map(|_| {
            let (t, barrier) = (t.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                PgLedger::open(t).map(|l| l.records())
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), Ok(Ok(0)));
    }
    let heads: i64 = raw(&t)
        .query_one("SELECT count(*) FROM ledger_head", &[])
        .unwrap()
        .get(0);
    assert_eq!(heads, 1);
}

/// The Activity records of a schema are counted read-only: 0 (and nothing
/// created) without a ledger, every row once there is one, and another
/// version fails closed.
#[test]
fn activity_records_count_without_creating_or_writing() {
    use custos_postgres::ledger::{activity_records, ActivityError};
    let t = target("ledger_activity");
    let mut c = raw(&t);
    assert_eq!(activity_records(t.clone()), Ok(0));
    assert!(!schema_exists(&mut c, t.schema()));
    let l = PgLedger::open(t.clone()).unwrap();
    assert_eq!(activity_records(t.clone()), Ok(0));
    l.attach(&LIMITS, &sid("s"), &ws("w"), 1, &tok("a"))
        .unwrap();
    let before = dump(&mut c);
    assert_eq!(activity_records(t.clone()), Ok(1));
    assert_eq!(dump(&mut c), before);
    c.execute(
        "UPDATE custos_versions SET version = 7 WHERE component = 'ledger'",
        &[],
    )
    .unwrap();
    let e = activity_records(t).unwrap_err();
    assert!(
        matches!(e, ActivityError::Open(OpenError::NotReadable { .. })),
        "{e}"
    );
    assert!(e.to_string().starts_with("ActivityUnreadable"), "{e}");
}

/// Room for the totals tests' calls.
const ROOMY: custos_core::ledger::Limits = custos_core::ledger::Limits {
    max_unclean_scopes: 8,
    max_ledger_bytes: 1 << 20,
    reservation_bytes: 16,
};

/// The totals on the head row, and the same totals summed over the rows.
fn totals(c: &mut Client) -> ((i64, i64, i64), (i64, i64, i64)) {
    let kept = c
        .query_one(
            "SELECT held_bytes::bigint, negative_rows, unclean_scopes FROM ledger_head",
            &[],
        )
        .unwrap();
    let summed = c
        .query_one(
            "SELECT (SELECT COALESCE(SUM(outcome_bytes), 0)::bigint FROM ledger_calls
                     WHERE state IN ('admitted', 'terminal')),
                    (SELECT count(*) FROM ledger_calls
                     WHERE state IN ('admitted', 'terminal') AND outcome_bytes < 0),
                    (SELECT count(*) FROM ledger_scopes
                     WHERE NOT (state = 'closed' AND close_outcome IS NOT DISTINCT FROM 0))",
            &[],
        )
        .unwrap();
    (
        (kept.get(0), kept.get(1), kept.get(2)),
        (summed.get(0), summed.get(1), summed.get(2)),
    )
}

#[test]
fn the_head_rows_totals_follow_every_change_of_the_rows() {
    let t = target("ledger_totals");
    let l = PgLedger::open(t.clone()).unwrap();
    let mut c = raw(&t);
    for s in ["a", "b", "c"] {
        l.attach(&ROOMY, &sid(s), &ws("w"), 1, &tok("t")).unwrap();
    }
    for i in 0..6 {
        let k = key(["a", "b", "c"][i % 3], &format!("op{i}"), 1);
        l.admit(&ROOMY, &k, &tool("program"), &tok("t")).unwrap();
        if i % 2 == 0 {
            l.finish(&ROOMY, &k, b"done").unwrap();
        }
        let (kept, summed) = totals(&mut c);
        assert_eq!(kept, summed, "after call {i}");
    }
    l.begin_close(&ROOMY, &sid("c"), 1).unwrap();
    let (kept, summed) = totals(&mut c);
    assert_eq!(kept, summed, "after a close began");
    assert!(kept.0 > 0 && kept.2 > 0, "{kept:?}");
    // Another client's own change (here a corrupting one) keeps them too,
    // and the writer refuses to judge over it.
    c.execute(
        "UPDATE ledger_calls SET outcome_bytes = -1 WHERE op = 'op1'",
        &[],
    )
    .unwrap();
    let (kept, summed) = totals(&mut c);
    assert_eq!(kept, summed, "after a foreign update");
    assert_eq!(kept.1, 1);
    let e = l
        .admit(&ROOMY, &key("a", "op9", 1), &tool("program"), &tok("t"))
        .unwrap_err();
    assert!(e.to_string().contains("negative"), "{e}");
    c.execute("DELETE FROM ledger_calls WHERE op = 'op1'", &[])
        .unwrap();
    let (kept, summed) = totals(&mut c);
    assert_eq!(kept, summed, "after a foreign delete");
}

#[test]
fn a_version_2_ledger_gets_its_totals_when_migrated() {
    let t = target("ledger_v2");
    let l = PgLedger::open(t.clone()).unwrap();
    l.attach(&ROOMY, &sid("s"), &ws("w"), 1, &tok("t")).unwrap();
    for i in 0..3 {
        let k = key("s", &format!("op{i}"), 1);
        l.admit(&ROOMY, &k, &tool("program"), &tok("t")).unwrap();
    }
    l.finish(&ROOMY, &key("s", "op0", 1), b"outcome").unwrap();
    drop(l);
    let mut c = raw(&t);
    let (before, _) = totals(&mut c);
    // Back to version 2: no totals, no triggers.
    c.batch_execute(
        "DROP TRIGGER ledger_calls_totals ON ledger_calls;
         DROP TRIGGER ledger_scopes_totals ON ledger_scopes;
         DROP FUNCTION ledger_calls_totals(); DROP FUNCTION ledger_scopes_totals();
         ALTER TABLE ledger_head DROP COLUMN held_bytes, DROP COLUMN negative_rows,
             DROP COLUMN unclean_scopes;
         UPDATE custos_versions SET version = 2 WHERE component = 'ledger';",
    )
    .unwrap();
    let l = PgLedger::join(t.clone()).unwrap();
    let (kept, summed) = totals(&mut c);
    assert_eq!(kept, summed);
    assert_eq!(kept, before);
    let v: i64 = c
        .query_one(
            "SELECT version FROM custos_versions WHERE component = 'ledger'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(v, LEDGER_VERSION);
    // And the migrated ledger admits against them.
    assert_eq!(
        l.admit(&ROOMY, &key("s", "op7", 1), &tool("program"), &tok("t"))
            .unwrap(),
        Admission::Fresh
    );
}
