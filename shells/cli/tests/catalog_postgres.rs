//! `custos catalog discover|show --catalog-url` against a control catalog
//! on PostgreSQL (a private cluster), as against the SQLite one: the same
//! worlds written to both give the same listing and descriptors; the url
//! also comes from `CUSTOS_CONTROL_CATALOG_URL`; an identity with no
//! catalog on the server exits 3 and creates nothing there; an unknown
//! world exits 3; an unreachable server or a refused login exits 5; the
//! password never reaches stdout or stderr.

#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/worlds.rs"]
mod worlds;

use std::process::{Command, Output};

use custos_core::identity::StorageIdentity;
use custos_core::schema::{Field, LogicalType, Schema};
use custos_core::world::{
    ControlCatalog, Request, Signature, WorldIdentity, WorldRecord, WriterMode,
};
use custos_postgres::control::PgControlCatalog;
use custos_postgres::{control_schema, Target};
use custos_sqlite::control::SqliteControlCatalog;
use custos_testkit::pg_cluster::shared;

use worlds::{discover_args, entity, live_world, show_args};

fn custos(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_custos"));
    c.args(args).env_remove("CUSTOS_CONTROL_CATALOG_URL");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("custos runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn seed(c: &dyn ControlCatalog) {
    let live = live_world();
    c.register(&live).unwrap();
    let gone = WorldRecord::active(
        WorldIdentity {
            world_id: "w-gone".into(),
            name: "destroyed".into(),
            run_id: None,
            parent_world_id: Some("w-live".into()),
        },
        WriterMode::CleanupOnly,
    );
    c.register(&gone).unwrap();
    c.retire(&gone).unwrap();
    let schema = Schema::new(vec![
        entity(),
        Field::new("score", LogicalType::Float { bits: 64 }, true),
    ]);
    c.apply(&Request::RegisterSignature {
        world_id: "w-live".into(),
        signature: Signature::new(vec!["Score".into()], schema, "t-score"),
    })
    .unwrap();
    c.apply(&Request::AdvanceTick {
        world_id: "w-live".into(),
        tick: 9,
    })
    .unwrap();
}

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", text(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The same worlds in the identity's SQLite catalog and on the server.
fn seeded() -> (tempfile::TempDir, String, StorageIdentity) {
    let cluster = shared().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("warehouse");
    std::fs::create_dir_all(uri.join("ns")).unwrap();
    let uri = uri.to_str().unwrap().to_owned();
    let id = StorageIdentity::new(&uri, "ns", "iceberg").unwrap();
    seed(&SqliteControlCatalog::open_for(&id).unwrap());
    let target = Target::new(cluster.url(), control_schema(&id)).unwrap();
    seed(&PgControlCatalog::open(target).unwrap());
    (dir, uri, id)
}

fn no_password(o: &Output) {
    let pw = shared().unwrap().password();
    assert!(!text(&o.stdout).contains(pw));
    assert!(!text(&o.stderr).contains(pw));
}

#[test]
fn a_postgres_control_catalog_is_discovered_as_the_sqlite_one() {
    let (_dir, uri, id) = seeded();
    let uri = uri.as_str();
    let url = shared().unwrap().url();
    let local = json(&custos(
        &["catalog", "discover", uri, "--namespace", "ns", "--json"],
        &[],
    ));
    let remote_run = custos(&discover_args(uri, &["--json", "--catalog-url", &url]), &[]);
    no_password(&remote_run);
    let remote = json(&remote_run);
    assert_eq!(local["worlds"], remote["worlds"]);
    assert_eq!(remote["worlds"].as_array().unwrap().len(), 2);
    let place = remote["storage"]["catalog"].as_str().unwrap();
    assert!(place.starts_with("postgresql://127.0.0.1:"), "{place}");
    assert!(place.contains(&control_schema(&id)), "{place}");
    // The environment names the server as well; the table shows both worlds.
    let o = custos(
        &["catalog", "discover", uri, "--namespace", "ns"],
        &[("CUSTOS_CONTROL_CATALOG_URL", &url)],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    no_password(&o);
    let out = text(&o.stdout);
    assert!(
        out.contains("w-live") && out.contains("w-gone") && out.contains("2 world(s)"),
        "{out}"
    );
    assert!(out.contains("destroyed"), "{out}");
    println!("{out}");
}

#[test]
fn a_postgres_control_catalog_shows_worlds_as_the_sqlite_one() {
    let (_dir, uri, _id) = seeded();
    let uri = uri.as_str();
    let url = shared().unwrap().url();
    for world in ["w-live", "w-gone"] {
        let a = json(&custos(
            &["catalog", "show", uri, world, "--namespace", "ns", "--json"],
            &[],
        ));
        let b = json(&custos(
            &show_args(uri, world, &["--json", "--catalog-url", &url]),
            &[],
        ));
        assert_eq!(a["world"], b["world"], "{world}");
    }
    let shown = custos(&show_args(uri, "w-live", &["--catalog-url", &url]), &[]);
    no_password(&shown);
    let shown_text = text(&shown.stdout);
    assert!(shown_text.contains("tick_head       9"), "{shown_text}");
    assert!(shown_text.contains("table t-score"), "{shown_text}");
    println!("{shown_text}");
    // An unknown world: 3.
    let o = custos(&show_args(uri, "w-none", &["--catalog-url", &url]), &[]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    no_password(&o);
}

#[test]
fn no_catalog_on_the_server_exits_3_and_creates_nothing() {
    let cluster = shared().unwrap();
    let uri = "/srv/never-registered";
    let id = StorageIdentity::new(uri, "default", "iceberg").unwrap();
    let o = custos(
        &["catalog", "discover", uri, "--catalog-url", &cluster.url()],
        &[],
    );
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(
        err.contains("NotReadable") && err.contains(&control_schema(&id)),
        "{err}"
    );
    assert!(!err.contains(cluster.password()), "{err}");
    let mut client = Target::new(cluster.url(), "public")
        .unwrap()
        .connect()
        .unwrap();
    let n: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_namespace WHERE nspname = $1",
            &[&control_schema(&id)],
        )
        .unwrap()
        .get(0);
    assert_eq!(n, 0, "a read created the schema");
}

#[test]
fn an_unreachable_server_or_a_refused_login_exits_5_without_the_password() {
    let cluster = shared().unwrap();
    let wrong = cluster
        .url()
        .replace(cluster.password(), "pw-that-must-not-show");
    let dead = cluster
        .url()
        .replace(&format!(":{}/", cluster.port()), ":1/");
    for (url, secret) in [
        (wrong.as_str(), "pw-that-must-not-show"),
        (dead.as_str(), cluster.password()),
    ] {
        let o = custos(
            &["catalog", "discover", "/srv/x", "--catalog-url", url],
            &[],
        );
        assert_eq!(o.status.code(), Some(5), "{}", text(&o.stderr));
        let err = text(&o.stderr);
        assert!(err.contains("Unavailable"), "{err}");
        assert!(!err.contains(secret), "{err}");
        assert!(o.stdout.is_empty());
    }
    // A schema without a url is a usage error; with the url from the
    // environment it is honoured (here: a schema that holds no catalog).
    let no_catalog_schema = [
        "catalog",
        "discover",
        "/srv/x",
        "--catalog-schema",
        "custos_none",
    ];
    let o = custos(&no_catalog_schema, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    let o = custos(
        &no_catalog_schema,
        &[("CUSTOS_CONTROL_CATALOG_URL", &cluster.url())],
    );
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("custos_none"),
        "{}",
        text(&o.stderr)
    );
    // A url that does not parse is a usage error, not echoed.
    let o = custos(
        &[
            "catalog",
            "discover",
            "/srv/x",
            "--catalog-url",
            "postgresql://u:sek%ret@[bad",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(!text(&o.stderr).contains("sek"), "{}", text(&o.stderr));
}
