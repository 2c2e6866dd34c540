//! The private cluster harness: it starts, accepts a password login over
//! loopback, runs with fsync and synchronous_commit on, and a schema
//! prepared twice is created once; a newer stored version is refused.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_postgres::cluster::{shared, unique_schema};
use custos_postgres::conn::{Component, Conn};
use custos_postgres::{SchemaError, Target};

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
            SchemaError::UnsupportedVersion {
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
