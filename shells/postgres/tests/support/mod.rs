//! Helpers several of this crate's integration tests share (each test
//! target compiles the module with `mod support;` and uses what it needs).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, OnceLock};

use custos_conformance::storage::ns;
use custos_core::lease::Owner;
use custos_core::storage::{KeyPrefix, Storage};
use custos_postgres::storage::{PgStorage, StorageConfig};
use custos_postgres::{AccessClock, Target};
use custos_testkit::pg_cluster::{shared, unique_schema};
use postgres::Client;

/// A new schema of its own (named after `prefix`) on the shared private
/// server.
pub fn target(prefix: &str) -> Target {
    Target::new(shared().unwrap().url(), unique_schema(prefix)).unwrap()
}

/// The one schema of this test binary that its suite's sessions share
/// (sessions are isolated), created on first use (named after `prefix`).
pub fn suite_target(prefix: &str) -> Target {
    static T: OnceLock<Target> = OnceLock::new();
    T.get_or_init(|| target(prefix)).clone()
}

/// A session name not used before in this process.
pub fn unique_session() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("session-{}", N.fetch_add(1, Ordering::Relaxed))
}

/// Opens the session `session` in `target`, as the writer `conformance`.
pub fn open_session(target: Target, session: impl Into<String>) -> PgStorage {
    let owner = Owner::new("conformance").unwrap();
    PgStorage::open(StorageConfig::new(target, session, owner)).expect("open the session")
}

/// A [`target`] whose access expiries are judged by the caller's clock:
/// time is data in the suites, as on memory and SQLite.
pub fn caller_clock_target(prefix: &str) -> Target {
    target(prefix).access_clock(AccessClock::Caller)
}

/// A raw client on the target's schema (`search_path` set).
pub fn client(t: &Target) -> Client {
    t.connect().unwrap()
}

/// Every row of every table in the target's schema, as text, in order:
/// what "nothing written" compares.
pub fn schema_dump(t: &Target) -> Vec<String> {
    let mut c = client(t);
    let tables: Vec<String> = c
        .query(
            "SELECT table_name::text FROM information_schema.tables
             WHERE table_schema = $1 ORDER BY table_name",
            &[&t.schema()],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut out = Vec::new();
    for table in tables {
        let rows = c
            .query(
                &format!("SELECT t::text FROM {table} t ORDER BY t::text COLLATE \"C\""),
                &[],
            )
            .unwrap();
        out.push(format!("table {table}"));
        out.extend(rows.iter().map(|r| r.get::<_, String>(0)));
    }
    out
}

/// The version the target's schema records for `component`.
pub fn stored_version(t: &Target, component: &str) -> i64 {
    client(t)
        .query_one(
            "SELECT version FROM custos_versions WHERE component = $1",
            &[&component],
        )
        .unwrap()
        .get(0)
}

/// Creates the target's schema holding only a version table that records
/// `component` at `version` (a newer build's, no table of its own).
pub fn versions_only_schema(t: &Target, component: &str, version: i64) {
    client(t)
        .batch_execute(&format!(
            "CREATE SCHEMA {s};
             CREATE TABLE {s}.custos_versions (component text PRIMARY KEY, version bigint NOT NULL);
             INSERT INTO {s}.custos_versions VALUES ('{component}', {version});",
            s = t.schema()
        ))
        .unwrap();
}

/// How many schemas carry the target's schema name (0 or 1).
pub fn schema_count(t: &Target) -> i64 {
    client(t)
        .query_one(
            "SELECT count(*) FROM pg_namespace WHERE nspname = $1",
            &[&t.schema()],
        )
        .unwrap()
        .get(0)
}

/// How many tables the target's schema holds.
pub fn table_count(t: &Target) -> i64 {
    client(t)
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = $1",
            &[&t.schema()],
        )
        .unwrap()
        .get(0)
}

/// Every register of namespace `n` in `s`, key to value.
pub fn registers<S: Storage>(s: &S) -> BTreeMap<String, Vec<u8>> {
    s.list_registers(&ns("n"), &KeyPrefix::all())
        .unwrap()
        .into_iter()
        .map(|r| (r.key.as_str().to_owned(), r.value.as_bytes().to_vec()))
        .collect()
}

/// Runs `f(i, handle)` on `n` threads at once: each opens its own handle
/// on `t` (`open`), then all are released together. What each answered,
/// in thread order.
pub fn race<H: 'static, T: Send + 'static>(
    t: &Target,
    n: usize,
    open: fn(Target) -> H,
    f: impl Fn(usize, &H) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let f = Arc::new(f);
    let barrier = Arc::new(Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (t, f, barrier) = (t.clone(), f.clone(), barrier.clone());
            std::thread::spawn(move || {
                let h = open(t);
                barrier.wait();
                f(i, &h)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// The start of a `main` of a binary that re-executes itself as its
/// children: true when it has nothing more to do — asked for a listing
/// (it lists no tests), or run as a child (`CUSTOS_PG_ROLE` set), after
/// `child` ran that role.
pub fn listed_or_child(child: impl FnOnce(&str)) -> bool {
    if std::env::args().any(|a| a == "--list") {
        return true;
    }
    if let Ok(role) = std::env::var("CUSTOS_PG_ROLE") {
        child(&role);
        return true;
    }
    false
}
