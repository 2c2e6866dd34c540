//! The private cluster harness: it starts, accepts a password login over
//! loopback, runs with fsync and synchronous_commit on, and a schema
//! prepared twice is created once; a newer stored version is refused.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_postgres::conn::{Component, Conn};
use custos_postgres::{OpenError, Target};
use custos_testkit::pg_cluster::{shared, unique_schema};

#[test]
fn the_private_cluster_serves_a_durable_loopback_login() {
    let c = shared().unwrap();
    let t = Target::new(c.url(), "public").unwrap();
    let mut client = t.connect().unwrap();
    for (name, want) in [
        ("fsync", "on"),
        ("synchronous_commit", "on"),
        ("listen_addresses", "127.0.0.1"),
    ] {
        let v: String = client
            .query_one(&format!("SHOW {name}"), &[])
            .unwrap()
            .get(0);
        assert_eq!(v, want, "{name}");
    }
    assert!(!format!("{t:?}").contains(c.password()));
    let bad = Target::new(c.url().replace(c.password(), "wrong-secret-x"), "public").unwrap();
    let e = bad.connect().err().unwrap().to_string();
    assert!(e.starts_with("Unavailable:"), "{e}");
    assert!(!e.contains("wrong-secret-x"), "{e}");
}

const STEPS: &[&str] = &["CREATE TABLE probe (k bigint PRIMARY KEY)"];

/// A schema of its own (named after `prefix`) holding the prepared `probe`
/// component, and a connection to it.
fn probe_schema(prefix: &str) -> (Target, Conn) {
    let t = Target::new(shared().unwrap().url(), unique_schema(prefix)).unwrap();
    let conn = Conn::open(t.clone()).unwrap();
    Component {
        name: "probe",
        steps: STEPS,
    }
    .prepare(&conn)
    .unwrap();
    (t, conn)
}

#[test]
fn a_component_is_created_once_and_a_newer_version_is_refused() {
    let c = shared().unwrap();
    let schema = unique_schema("harness");
    let t = Target::new(c.url(), schema.clone()).unwrap();
    let conn = Conn::open(t.clone()).unwrap();
    let comp = Component {
        name: "probe",
        steps: STEPS,
    };
    comp.prepare(&conn).unwrap();
    comp.prepare(&conn).unwrap();
    let mut client = t.connect().unwrap();
    client
        .execute(
            "UPDATE custos_versions SET version = 9 WHERE component = 'probe'",
            &[],
        )
        .unwrap();
    let e = comp.prepare(&conn).unwrap_err();
    assert!(
        matches!(
            e,
            OpenError::UnsupportedVersion {
                found: 9,
                supported: 1,
                ..
            }
        ),
        "{e}"
    );
    // A refused prepare of a schema that does not exist creates nothing.
    let other = unique_schema("harness");
    let n: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_namespace WHERE nspname = $1",
            &[&other],
        )
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
}

#[test]
fn an_empty_url_is_refused_and_a_refused_connection_says_why() {
    let e = Target::new("", "public").unwrap_err();
    assert!(
        matches!(e, custos_postgres::ConnectError::InvalidUrl { .. }),
        "{e}"
    );
    let t = Target::new("postgresql://u:pw-zz-secret@127.0.0.1:1/db", "public").unwrap();
    let e = t.connect().err().unwrap().to_string();
    assert!(e.contains("127.0.0.1:1/db") && e.contains("refused"), "{e}");
    assert!(!e.contains("pw-zz-secret"), "{e}");
    assert_eq!(custos_postgres::conn::scrub("a message", ""), "a message");
}

/// A decision's effects travel with its COMMIT: all apply, or — one failing
/// — none does, the first failure is returned, and the connection serves
/// the next call.
#[test]
fn effects_sent_with_the_commit_apply_all_or_none() {
    use custos_postgres::conn::{Stmt, TxError, Want};
    let (t, conn) = probe_schema("decide");
    let insert = |k: i64| Stmt::new(Want::Count, "INSERT INTO probe (k) VALUES ($1)").arg(k);
    // All apply.
    let n: u64 = conn
        .decide::<_, ()>(|tx| {
            let before = tx.query_one("SELECT count(*) FROM probe", &[]).unwrap();
            let before: i64 = before.get(0);
            Ok((u64::try_from(before).unwrap(), vec![insert(1), insert(2)]))
        })
        .unwrap();
    assert_eq!(n, 0);
    // The second effect breaks the primary key: neither the body's own
    // write nor the first effect stays.
    let e = conn
        .decide::<(), ()>(|tx| {
            tx.execute("INSERT INTO probe (k) VALUES (10)", &[])
                .unwrap();
            Ok(((), vec![insert(3), insert(1), insert(4)]))
        })
        .unwrap_err();
    match e {
        TxError::Failure(f) => assert!(f.to_string().contains("23505"), "{f}"),
        TxError::Refused(()) => panic!("refused"),
    }
    let mut client = t.connect().unwrap();
    let keys: Vec<i64> = client
        .query("SELECT k FROM probe ORDER BY k", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(keys, vec![1, 2]);
    // The connection is usable again.
    conn.decide::<_, ()>(|_tx| Ok(((), vec![insert(5)])))
        .unwrap();
    let n: i64 = client
        .query_one("SELECT count(*) FROM probe", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 3);
}

/// A parameter the client cannot encode fails the decision before anything
/// is sent: the body's own writes and every effect roll back.
#[test]
fn an_effect_that_cannot_be_encoded_sends_nothing() {
    use custos_postgres::conn::{Stmt, TxError, Want};
    let (t, conn) = probe_schema("encode");
    let e = conn
        .decide::<(), ()>(|tx| {
            tx.execute("INSERT INTO probe (k) VALUES (10)", &[])
                .unwrap();
            Ok((
                (),
                vec![
                    Stmt::new(Want::Count, "INSERT INTO probe (k) VALUES ($1)").arg(1i64),
                    // A text for a bigint column: refused by the client.
                    Stmt::new(Want::Count, "INSERT INTO probe (k) VALUES ($1)")
                        .arg("two".to_owned()),
                ],
            ))
        })
        .unwrap_err();
    match e {
        TxError::Failure(f) => assert!(f.to_string().contains("encode"), "{f}"),
        TxError::Refused(()) => panic!("refused"),
    }
    let n: i64 = t
        .connect()
        .unwrap()
        .query_one("SELECT count(*) FROM probe", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
}
