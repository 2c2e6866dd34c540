//! `cargo bench -p custos-postgres`: session-storage commits and ledger
//! calls against a raw single-row-insert transaction loop on the same
//! private server in the same run, with the client round trips each
//! operation makes (`custos_postgres::conn::round_trips`; the raw insert
//! transaction is three: `BEGIN`, `INSERT`, `COMMIT`), then throughput with
//! 1, 4, 16 and 64 concurrent clients. Prints figures; asserts nothing
//! about time.
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
use custos_postgres::ledger::PgLedger;
use custos_postgres::storage::{PgStorage, StorageConfig};
use custos_postgres::Target;
use custos_testkit::pg_cluster::{unique_schema, Cluster};

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
             CREATE TABLE {schema}.raw (c bigint, k bigint, v bytea, PRIMARY KEY (c, k));
             CREATE TABLE {schema}.head (id bigint PRIMARY KEY, n bigint NOT NULL);
             INSERT INTO {schema}.head VALUES (1, 0)"
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

/// The single-client handles, measured in interleaved chunks so that the
/// server's (and this machine's fsync's) drift falls on every figure alike.
struct Single {
    raw: postgres::Client,
    insert: postgres::Statement,
    select: postgres::Statement,
    lock: postgres::Statement,
    bump: postgres::Statement,
    storage: PgStorage,
    admits: PgLedger,
    calls: PgLedger,
    next: usize,
}

impl Single {
    fn new(c: &Cluster) -> Single {
        let schema = raw_table(c, &unique_schema("raw"));
        let mut raw = target(c, "public").connect().unwrap();
        let insert = raw
            .prepare(&format!(
                "INSERT INTO {schema}.raw (c, k, v) VALUES ($1, $2, $3)"
            ))
            .unwrap();
        let select = raw.prepare("SELECT 1").unwrap();
        let lock = raw
            .prepare(&format!(
                "SELECT n FROM {schema}.head WHERE id = 1 FOR UPDATE"
            ))
            .unwrap();
        let bump = raw
            .prepare(&format!("UPDATE {schema}.head SET n = n + 1 WHERE id = 1"))
            .unwrap();
        let storage = PgStorage::open(StorageConfig::new(
            target(c, &unique_schema("st")),
            "bench",
            Owner::new("bench").unwrap(),
        ))
        .unwrap();
        let admits = PgLedger::open(target(c, &unique_schema("la"))).unwrap();
        let calls = PgLedger::open(target(c, &unique_schema("lc"))).unwrap();
        for l in [&admits, &calls] {
            l.attach(&LIMITS, &sid("s"), &ws("w"), 1, &tok("t"))
                .unwrap();
        }
        Single {
            raw,
            insert,
            select,
            lock,
            bump,
            storage,
            admits,
            calls,
            next: 0,
        }
    }

    /// Times `n` of operation `what` (0 raw insert transaction, 1 storage
    /// commit, 2 ledger admission, 3 ledger call, 4 one round trip, 5 raw
    /// head-lock, insert and head-update transaction).
    fn run(&mut self, what: usize, n: usize) -> Duration {
        let start = Instant::now();
        for _ in 0..n {
            let i = self.next;
            self.next += 1;
            match what {
                0 => {
                    let mut tx = self.raw.transaction().unwrap();
                    tx.execute(
                        &self.insert,
                        &[&0i64, &(i as i64), &b"value-of-sixteen".as_slice()],
                    )
                    .unwrap();
                    tx.commit().unwrap();
                }
                1 => {
                    self.storage.commit(&write(i)).unwrap();
                }
                2 => {
                    let k = key("s", &format!("op{i}"), 1);
                    self.admits
                        .admit(&LIMITS, &k, &tool("program"), &tok("t"))
                        .unwrap();
                }
                3 => {
                    let k = key("s", &format!("op{i}"), 1);
                    self.calls
                        .admit(&LIMITS, &k, &tool("program"), &tok("t"))
                        .unwrap();
                    self.calls.finish(&LIMITS, &k, b"done").unwrap();
                }
                4 => {
                    self.raw.query_one(&self.select, &[]).unwrap();
                }
                _ => {
                    let mut tx = self.raw.transaction().unwrap();
                    tx.query_one(&self.lock, &[]).unwrap();
                    tx.execute(
                        &self.insert,
                        &[&1i64, &(i as i64), &b"value-of-sixteen".as_slice()],
                    )
                    .unwrap();
                    tx.execute(&self.bump, &[]).unwrap();
                    tx.commit().unwrap();
                }
            }
        }
        start.elapsed()
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n = ops();
    let cluster = Arc::new(Cluster::start().unwrap());
    println!("custos-postgres bench: {n} operations per figure, in 10 interleaved chunks; private cluster (fsync on, synchronous_commit on)");
    let mut single = Single::new(&cluster);
    for what in 0..6 {
        single.run(what, 50); // warm statements and pages
    }
    // Round trips per operation, counted on a warm connection.
    // And how long each operation's transactions held their locks.
    let mut trips = [0f64; 4];
    let mut held = [0f64; 4];
    for (what, out) in trips.iter_mut().enumerate().skip(1) {
        let before = custos_postgres::conn::round_trips();
        let (n0, h0) = custos_postgres::conn::lock_held();
        single.run(what, 100);
        *out = (custos_postgres::conn::round_trips() - before) as f64 / 100.0;
        let (n1, h1) = custos_postgres::conn::lock_held();
        held[what] = (h1 - h0).as_secs_f64() * 1e6 / (n1 - n0).max(1) as f64;
    }
    let chunk = (n / 10).max(1);
    let mut t = [Duration::ZERO; 6];
    for _ in 0..10 {
        for (what, total) in t.iter_mut().enumerate() {
            *total += single.run(what, chunk);
        }
    }
    let m = chunk * 10;
    let us = |d: Duration| d.as_secs_f64() * 1e6 / m as f64;
    let ratio = |d: Duration| t[0].as_secs_f64() / d.as_secs_f64();
    println!(
        "raw single-row-insert transaction: {:.0}/s ({:.1} µs; one round trip alone {:.1} µs)",
        per_sec(m, t[0]),
        us(t[0]),
        us(t[4])
    );
    println!(
        "raw head-lock + insert + head-update transaction (the shape of a decision, 5 round trips): {:.1} µs",
        us(t[5])
    );
    println!(
        "storage commit (one register):     {:.0}/s ({:.1} µs, {:.1} round trips) → ratio {:.2} (goal ≥ 0.7)",
        per_sec(m, t[1]),
        us(t[1]),
        trips[1],
        ratio(t[1])
    );
    println!(
        "ledger admission:                  {:.0}/s ({:.1} µs, {:.1} round trips) → ratio {:.2} (goal ≥ 0.7)",
        per_sec(m, t[2]),
        us(t[2]),
        trips[2],
        ratio(t[2])
    );
    println!(
        "head-row lock held per transaction, as the client sees it: storage commit {:.1} µs, ledger admission {:.1} µs (one shared ledger admits at most 1/hold per s: {:.0})",
        held[1],
        held[2],
        1e6 / held[2]
    );
    println!(
        "ledger call (admit + finish):      {:.0}/s ({:.1} µs, {:.1} round trips) → ratio {:.2} (two transactions; goal ≥ 0.7 of two raw: {:.2})",
        per_sec(m, t[3]),
        us(t[3]),
        trips[3],
        ratio(t[3]),
        2.0 * ratio(t[3])
    );
    for clients in [1usize, 4, 16, 64] {
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
