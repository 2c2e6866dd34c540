//! Ledger calls per second — `admit` + `finish` + `ack` per call, each its
//! own `BEGIN IMMEDIATE` transaction with `synchronous=FULL` — against a raw
//! rusqlite loop doing the same three single-row writes (insert, update,
//! delete) in `BEGIN IMMEDIATE` with `synchronous=FULL`, WAL, in the same
//! directory, in the same run. Prints both and the ratio; asserts nothing.
//!
//! `CUSTOS_BENCH_CALLS` sets the number of calls (default 300).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::time::Instant;

use custos_core::ledger::{AttachToken, Key, Ledger, Limits, OpId, SessionId, Tool, WorkspaceId};
use custos_sqlite::ledger::SqliteLedger;
use rusqlite::{params, Connection, TransactionBehavior};

fn ledger_run(dir: &std::path::Path, calls: u32) -> f64 {
    let l = SqliteLedger::open(dir.join("ledger.db")).unwrap();
    let limits = Limits::default();
    let session = SessionId::new("bench").unwrap();
    let token = AttachToken::new("t").unwrap();
    let tool = Tool::new("program").unwrap();
    l.attach(
        &limits,
        &session,
        &WorkspaceId::new("w").unwrap(),
        1,
        &token,
    )
    .unwrap();
    let op = OpId::new("op").unwrap();
    let outcome = vec![7u8; 64];
    let started = Instant::now();
    for i in 0..calls {
        let key = Key {
            session: session.clone(),
            op: op.clone(),
            step: i,
            source_index: 0,
            incarnation: 1,
        };
        l.admit(&limits, &key, &tool, &token).unwrap();
        l.finish(&limits, &key, &outcome).unwrap();
        l.ack(&limits, &key).unwrap();
    }
    let secs = started.elapsed().as_secs_f64();
    l.close().unwrap();
    f64::from(calls) / secs
}

fn raw_run(dir: &std::path::Path, calls: u32) -> f64 {
    let mut c = Connection::open(dir.join("raw.db")).unwrap();
    let mode: String = c
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    c.execute_batch(
        "PRAGMA synchronous = FULL;
         CREATE TABLE t (k INTEGER PRIMARY KEY, state TEXT NOT NULL, outcome BLOB);",
    )
    .unwrap();
    let outcome = vec![7u8; 64];
    let started = Instant::now();
    for i in 0..calls {
        let k = i64::from(i);
        let tx = c
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .unwrap();
        tx.prepare_cached("INSERT INTO t (k, state) VALUES (?1, 'admitted')")
            .unwrap()
            .execute([k])
            .unwrap();
        tx.commit().unwrap();
        let tx = c
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .unwrap();
        tx.prepare_cached("UPDATE t SET state = 'terminal', outcome = ?2 WHERE k = ?1")
            .unwrap()
            .execute(params![k, outcome])
            .unwrap();
        tx.commit().unwrap();
        let tx = c
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .unwrap();
        tx.prepare_cached("DELETE FROM t WHERE k = ?1")
            .unwrap()
            .execute([k])
            .unwrap();
        tx.commit().unwrap();
    }
    f64::from(calls) / started.elapsed().as_secs_f64()
}

fn main() {
    let calls: u32 = std::env::var("CUSTOS_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
    // Interleave, so both loops see the same disk conditions.
    let mut ledger = Vec::new();
    let mut raw = Vec::new();
    for round in 0..3 {
        let sub = dir.path().join(format!("round-{round}"));
        std::fs::create_dir(&sub).unwrap();
        raw.push(raw_run(&sub, calls));
        ledger.push(ledger_run(&sub, calls));
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let (l, r) = (median(&mut ledger), median(&mut raw));
    println!("ledger: {l:.0} calls/s (admit + finish + ack, {calls} calls, median of 3)");
    println!(
        "raw rusqlite: {r:.0} calls/s (3 single-row BEGIN IMMEDIATE writes, synchronous=FULL, WAL)"
    );
    println!("ratio ledger/raw: {:.2}", l / r);
}
