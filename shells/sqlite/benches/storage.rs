//! Single-entry commits per second through `SqliteStorage`, and the ratio to
//! a physical baseline measured in the same run, in the same directory: a
//! raw rusqlite loop inserting the same row in `BEGIN IMMEDIATE` with
//! `synchronous=FULL` in WAL. Goal: ratio ≥ 0.8. No assertion: it prints.
//!
//! `CUSTOS_BENCH_COMMITS` sets the commits per run (default 2000);
//! `CUSTOS_BENCH_DIR` the directory (default: cargo's target tmp dir).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Instant;

use custos_core::lease::Owner;
use custos_core::storage::{Commit, Kind, Payload, RecordId, Storage, Write};
use custos_sqlite::{Config, SqliteStorage};
use rusqlite::{params, Connection, TransactionBehavior};

const PAYLOAD: usize = 200;

fn raw_loop(path: &Path, n: u64) -> f64 {
    let mut c = Connection::open(path).unwrap();
    let mode: String = c.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)).unwrap();
    assert_eq!(mode, "wal");
    c.execute_batch("PRAGMA synchronous = FULL").unwrap();
    c.execute_batch(
        "CREATE TABLE entries (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, parent TEXT,
             kind TEXT NOT NULL, payload BLOB NOT NULL, ts INTEGER NOT NULL) STRICT",
    )
    .unwrap();
    let payload = vec![42u8; PAYLOAD];
    let start = Instant::now();
    for i in 1..=n {
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
        tx.prepare_cached(
            "INSERT INTO entries (seq, id, parent, kind, payload, ts) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .unwrap()
        .execute(params![
            i as i64,
            format!("e{i}"),
            (i > 1).then(|| format!("e{}", i - 1)),
            "m",
            &payload,
            i as i64
        ])
        .unwrap();
        tx.commit().unwrap();
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn storage_loop(path: &Path, n: u64) -> f64 {
    let s = SqliteStorage::open(Config::new(path, Owner::new("bench").unwrap())).unwrap();
    let kind = Kind::new("m").unwrap();
    let payload = Payload::new(vec![42u8; PAYLOAD]).unwrap();
    let mut parent: Option<RecordId> = None;
    let start = Instant::now();
    for i in 1..=n {
        let id = RecordId::new(format!("e{i}")).unwrap();
        s.commit(&Commit::at(i).write(Write::InsertEntry {
            id: id.clone(),
            parent: parent.take(),
            kind: kind.clone(),
            payload: payload.clone(),
        }))
        .unwrap();
        parent = Some(id);
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    s.close().unwrap();
    rate
}

fn main() {
    let n: u64 = std::env::var("CUSTOS_BENCH_COMMITS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let base = std::env::var("CUSTOS_BENCH_DIR").unwrap_or_else(|_| env!("CARGO_TARGET_TMPDIR").to_owned());
    std::fs::create_dir_all(&base).unwrap();
    let dir = tempfile::tempdir_in(&base).unwrap();
    println!("storage bench: {n} single-entry commits per run, in {}", dir.path().display());
    // Interleave the runs so both see the same disk conditions; keep the best of three.
    let (mut raw, mut ours) = (0f64, 0f64);
    for round in 0..3 {
        let r = raw_loop(&dir.path().join(format!("raw{round}.db")), n);
        let o = storage_loop(&dir.path().join(format!("store{round}.db")), n);
        println!("  round {round}: raw {r:>9.0} commits/s   SqliteStorage {o:>9.0} commits/s");
        raw = raw.max(r);
        ours = ours.max(o);
    }
    println!("raw rusqlite insert loop (BEGIN IMMEDIATE, WAL, synchronous=FULL): {raw:.0} commits/s");
    println!("SqliteStorage::commit (one InsertEntry):                           {ours:.0} commits/s");
    println!("ratio SqliteStorage / raw: {:.2} (goal >= 0.80)", ours / raw);
}
