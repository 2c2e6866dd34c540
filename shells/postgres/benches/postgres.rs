//! `cargo bench -p custos-postgres`: session-storage commits and ledger
//! calls against a raw single-row-insert transaction loop on the same
//! private server in the same run, then throughput with 1, 4 and 16
//! concurrent clients. Prints figures; asserts nothing about time.
//!
//! `BENCH_OPS` (default 2,000) sets the operations per measurement.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use custos_conformance::ledger::{key, sid, tok, tool, ws};
use custos_conformance::storage::{key as rkey, ns};
use custos_core::lease::Owner;
use custos_core::ledger::{Ledger, Limits};
use custos_core::storage::{Commit, Payload, Storage, Write};
use custos_postgres::cluster::{unique_schema, Cluster};
use custos_postgres::ledger::PgLedger;
use custos_postgres::storage::{PgStorage, StorageConfig};
use custos_postgres::Target;

const LIMITS: Limits = Limits {
    max_unclean_scopes: 64,
    max_ledger_bytes: 1 << 40,
    reservation_bytes: 16,
};

fn ops() -> usize {
    std::env::var("BENCH_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000)
}

fn target(c: &Cluster, schema: &str) -> Target {
    Target::new(c.url(), schema).unwrap()
}

/// `n` transactions of one INSERT each, on one connection.
fn raw_inserts(c: &Cluster, schema: &str, client_id: usize, n: usize) -> Duration {
    let mut client = target(c, "public").connect().unwrap();
    let stmt = client
        .prepare(&format!(
            "INSERT INTO {schema}.raw (c, k, v) VALUES ($1, $2, $3)"
        ))
        .unwrap();
    let cid = client_id as i64;
    let start = Instant::now();
    for i in 0..n {
        let mut tx = client.transaction().unwrap();
        tx.execute(&stmt, &[&cid, &(i as i64), &b"value-of-sixteen".as_slice()])
            .unwrap();
        tx.commit().unwrap();
    }
    start.elapsed()
}

/// The raw baseline's table, created before any client starts.
fn raw_table(c: &Cluster, schema: &str) -> String {
    let mut client = target(c, "public").connect().unwrap();
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {schema};
             CREATE TABLE {schema}.raw (c bigint, k bigint, v bytea, PRIMARY KEY (c, k))"
        ))
        .unwrap();
    schema.to_owned()
}

fn write(i: usize) -> Commit {
    Commit::at(i as u64).write(Write::SetRegister {
        namespace: ns("n"),
        key: rkey(&format!("k{i}")),
        value: Payload::new(b"value-of-sixteen".to_vec()).unwrap(),
    })
}

fn storage_commits(c: &Cluster, schema: &str, client_id: usize, n: usize) -> Duration {
    let s = PgStorage::open(StorageConfig::new(
        target(c, schema),
        format!("bench-{client_id}"),
        Owner::new(format!("bench-{client_id}")).unwrap(),
    ))
    .unwrap();
    let start = Instant::now();
    for i in 0..n {
        s.commit(&write(i)).unwrap();
    }
    start.elapsed()
}

/// One ledger per client schema; each call is admit then finish (two
/// transactions); `admits_only` measures the admission alone.
fn ledger_calls(
    c: &Cluster,
    schema: &str,
    client_id: usize,
    n: usize,
    admits_only: bool,
) -> Duration {
    let l = PgLedger::open(target(c, schema)).unwrap();
    let session = format!("s{client_id}");
    l.attach(&LIMITS, &sid(&session), &ws("w"), 1, &tok("t"))
        .unwrap();
    let start = Instant::now();
    for i in 0..n {
        let k = key(&session, &format!("op{i}"), 1);
        l.admit(&LIMITS, &k, &tool("program"), &tok("t")).unwrap();
        if !admits_only {
            l.finish(&LIMITS, &k, b"done").unwrap();
        }
    }
    start.elapsed()
}

fn per_sec(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

/// `clients` threads, each running `f(client)` for `n` operations after a
/// common start; the aggregate operations per second.
fn concurrent(
    clients: usize,
    n: usize,
    f: impl Fn(usize, usize) -> Duration + Send + Sync + 'static,
) -> f64 {
    let f = Arc::new(f);
    let barrier = Arc::new(Barrier::new(clients + 1));
    let handles: Vec<_> = (0..clients)
        .map(|i| {
            let f = Arc::clone(&f);
            let b = Arc::clone(&barrier);
            std::thread::spawn(move || {
                b.wait();
                f(i, n)
            })
        })
        .collect();
    let start = Instant::now();
    barrier.wait();
    for h in handles {
        h.join().unwrap();
    }
    per_sec(clients * n, start.elapsed())
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n = ops();
    let cluster = Arc::new(Cluster::start().unwrap());
    println!("custos-postgres bench: {n} operations per measurement, private cluster (fsync on, synchronous_commit on)");
    // Warm the server and the connections.
    raw_inserts(&cluster, &raw_table(&cluster, "warm"), 0, 200);
    let raw = raw_inserts(&cluster, &raw_table(&cluster, &unique_schema("raw")), 0, n);
    let storage = storage_commits(&cluster, &unique_schema("st"), 0, n);
    let admits = ledger_calls(&cluster, &unique_schema("la"), 0, n, true);
    let calls = ledger_calls(&cluster, &unique_schema("lc"), 0, n, false);
    let raw2 = raw_inserts(&cluster, &raw_table(&cluster, &unique_schema("raw")), 1, n);
    let raw_best = raw.min(raw2);
    println!(
        "raw single-row-insert transaction: {:.0}/s ({:.1} µs each; best of two runs {:.0}/s, {:.0}/s)",
        per_sec(n, raw_best),
        raw_best.as_secs_f64() * 1e6 / n as f64,
        per_sec(n, raw),
        per_sec(n, raw2)
    );
    let ratio = |d: Duration| raw_best.as_secs_f64() / d.as_secs_f64();
    println!(
        "storage commit (one register):     {:.0}/s ({:.1} µs) → ratio {:.2} (goal ≥ 0.8)",
        per_sec(n, storage),
        storage.as_secs_f64() * 1e6 / n as f64,
        ratio(storage)
    );
    println!(
        "ledger admission:                  {:.0}/s ({:.1} µs) → ratio {:.2} (goal ≥ 0.8)",
        per_sec(n, admits),
        admits.as_secs_f64() * 1e6 / n as f64,
        ratio(admits)
    );
    println!(
        "ledger call (admit + finish):      {:.0}/s ({:.1} µs) → ratio {:.2} (two transactions; per transaction {:.2})",
        per_sec(n, calls),
        calls.as_secs_f64() * 1e6 / n as f64,
        ratio(calls),
        2.0 * ratio(calls)
    );
    for clients in [1usize, 4, 16] {
        let per = (n / clients).max(50);
        let c = Arc::clone(&cluster);
        let raw_schema = raw_table(&cluster, &unique_schema("rawc"));
        let raw_tp = concurrent(clients, per, move |i, k| raw_inserts(&c, &raw_schema, i, k));
        let c = Arc::clone(&cluster);
        let st_schema = unique_schema("stc");
        let st_tp = concurrent(clients, per, move |i, k| {
            storage_commits(&c, &st_schema, i, k)
        });
        let c = Arc::clone(&cluster);
        // One shared ledger: every client's admission takes its head lock.
        let shared_ledger = unique_schema("lshared");
        let lg_tp = concurrent(clients, per, move |i, k| {
            ledger_calls(&c, &shared_ledger, i, k, true)
        });
        println!(
            "{clients:>2} clients: raw inserts {raw_tp:.0}/s, storage commits (a session each) {st_tp:.0}/s ({:.2} of raw), ledger admissions (one shared ledger) {lg_tp:.0}/s ({:.2} of raw)",
            st_tp / raw_tp,
            lg_tp / raw_tp
        );
    }
}
