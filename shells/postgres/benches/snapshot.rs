//! `cargo bench -p custos-postgres --bench snapshot`: snapshot capture on
//! a session of 1,000 versus 100,000 entries on a private server, with a
//! physical baseline measured in the same run: a raw client reading the
//! very same cells with indexed `SELECT`s in one `REPEATABLE READ, READ
//! ONLY` transaction. Goal: capture cost independent of history (ratio
//! <= 1.5). Prints figures; asserts nothing about time.
//!
//! The session and the plan are those of custos-sqlite's snapshot bench
//! (37 cells: an exact key, a 20-cell namespace, eight strands exact and
//! each strand's `latest` op followed into `op/life/`, a namespace that
//! grows with history). `BENCH_CAPTURES` (default 1,000) sets the captures
//! per size.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use custos_conformance::bench::{snapshot_plan as plan, write_snapshot_session};
use custos_core::lease::Owner;
use custos_core::snapshot::Reader;
use custos_core::storage::Storage;
use custos_postgres::storage::{PgStorage, StorageConfig};
use custos_postgres::Target;
use custos_testkit::pg_cluster::{unique_schema, Cluster};

fn build(target: &Target, session: &str, entries: usize) -> PgStorage {
    let s = PgStorage::open(StorageConfig::new(
        target.clone(),
        session,
        Owner::new("bench").unwrap(),
    ))
    .unwrap();
    write_snapshot_session(&s, entries);
    s
}

/// `n` raw reads of the same cells, one snapshot transaction each.
fn raw_reads(
    client: &mut postgres::Client,
    schema: &str,
    session: &str,
    cells: &[(String, String)],
    n: usize,
) -> Duration {
    let head = client
        .prepare(&format!(
            "SELECT next_seq::text FROM {schema}.storage_sessions WHERE session = $1"
        ))
        .unwrap();
    let cell = client
        .prepare(&format!(
            "SELECT value, seq::text FROM {schema}.storage_registers
             WHERE session = $1 AND namespace = $2 AND key = $3"
        ))
        .unwrap();
    let start = Instant::now();
    for _ in 0..n {
        let mut tx = client
            .build_transaction()
            .isolation_level(postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .unwrap();
        std::hint::black_box(tx.query_one(&head, &[&session]).unwrap());
        for (n, k) in cells {
            std::hint::black_box(tx.query_one(&cell, &[&session, n, k]).unwrap());
        }
        tx.commit().unwrap();
    }
    start.elapsed()
}

struct Size {
    s: PgStorage,
    session: &'static str,
    cells: Vec<(String, String)>,
}

fn measure(
    sz: &Size,
    client: &mut postgres::Client,
    schema: &str,
    n: usize,
) -> (Duration, Duration) {
    let plan = plan();
    let reader = Reader::new(&sz.s);
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(reader.capture(&plan).unwrap());
    }
    let ours = t.elapsed();
    let raw = raw_reads(client, schema, sz.session, &sz.cells, n);
    (ours, raw)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n: usize = std::env::var("BENCH_CAPTURES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    let cluster = Cluster::start().unwrap();
    let schema = unique_schema("snapshot_bench");
    let target = Target::new(cluster.url(), schema.clone()).unwrap();
    let t = Instant::now();
    let mut sizes = Vec::new();
    for (session, entries) in [("small", 1_000), ("large", 100_000)] {
        let s = build(&target, session, entries);
        let cut = Reader::new(&s).capture(&plan()).unwrap();
        let cells = cut
            .cells
            .iter()
            .map(|c| (c.namespace.as_str().to_owned(), c.key.as_str().to_owned()))
            .collect();
        sizes.push(Size { s, session, cells });
    }
    println!(
        "snapshot bench (postgres): {n} captures per session size in 10 interleaved chunks; built in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let mut client = target.connect().unwrap();
    client.batch_execute("ANALYZE").unwrap();
    for sz in &sizes {
        measure(sz, &mut client, &schema, 50); // warm statements and pages
    }
    let chunk = (n / 10).max(1);
    let mut t = [(Duration::ZERO, Duration::ZERO); 2];
    for _ in 0..10 {
        for (i, sz) in sizes.iter().enumerate() {
            let (o, r) = measure(sz, &mut client, &schema, chunk);
            t[i].0 += o;
            t[i].1 += r;
        }
    }
    let us = |d: Duration| d.as_secs_f64() * 1e6 / (chunk * 10) as f64;
    for (i, label) in ["    1,000", "  100,000"].iter().enumerate() {
        println!(
            "{label} entries: capture {:.1} us ({} cells); raw indexed SELECTs of the same cells {:.1} us; ratio {:.2}",
            us(t[i].0),
            sizes[i].cells.len(),
            us(t[i].1),
            t[i].0.as_secs_f64() / t[i].1.as_secs_f64()
        );
    }
    println!(
        "history ratio capture(100,000) / capture(1,000): {:.2} (goal <= 1.5); baseline's own: {:.2}",
        t[1].0.as_secs_f64() / t[0].0.as_secs_f64(),
        t[1].1.as_secs_f64() / t[0].1.as_secs_f64()
    );
    for sz in sizes {
        sz.s.close().unwrap();
    }
}
