//! Single-entry commits per second through `SqliteStorage`, and the ratio to
//! a physical baseline measured in the same run, in the same directory: a
//! raw rusqlite loop inserting the same row in `BEGIN IMMEDIATE` with
//! `synchronous=FULL` in WAL. Goal: ratio ≥ 0.8. No assertion: it prints.
//!
//! `CUSTOS_BENCH_COMMITS` sets the commits per loop (default 4000);
//! `CUSTOS_BENCH_DIR` the directory (default: cargo's target tmp dir).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use custos_core::lease::Owner;
use custos_core::storage::{Commit, Kind, Payload, RecordId, Storage, Write};
use custos_sqlite::{Config, SqliteStorage};
use rusqlite::{params, Connection, TransactionBehavior};

const PAYLOAD: usize = 200;

/// The baseline: a raw rusqlite connection inserting the same row.
struct Raw {
    conn: Connection,
    payload: Vec<u8>,
    next: u64,
}

impl Raw {
    fn open(path: &Path) -> Self {
        let conn = Connection::open(path).unwrap();
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        conn.execute_batch("PRAGMA synchronous = FULL").unwrap();
        conn.execute_batch(
            "CREATE TABLE entries (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, parent TEXT,
                 kind TEXT NOT NULL, payload BLOB NOT NULL, ts INTEGER NOT NULL) STRICT",
        )
        .unwrap();
        Raw {
            conn,
            payload: vec![42u8; PAYLOAD],
            next: 1,
        }
    }

    fn commit(&mut self) {
        let i = self.next;
        self.next += 1;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .unwrap();
        tx.prepare_cached(
            "INSERT INTO entries (seq, id, parent, kind, payload, ts) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .unwrap()
        .execute(params![
            i as i64,
            format!("e{i}"),
            (i > 1).then(|| format!("e{}", i - 1)),
            "m",
            &self.payload,
            i as i64
        ])
        .unwrap();
        tx.commit().unwrap();
    }
}

/// The same row through `SqliteStorage::commit`.
struct Ours {
    s: SqliteStorage,
    kind: Kind,
    payload: Payload,
    parent: Option<RecordId>,
    next: u64,
}

impl Ours {
    fn open(path: &Path) -> Self {
        Ours {
            s: SqliteStorage::open(Config::new(path, Owner::new("bench").unwrap())).unwrap(),
            kind: Kind::new("m").unwrap(),
            payload: Payload::new(vec![42u8; PAYLOAD]).unwrap(),
            parent: None,
            next: 1,
        }
    }

    fn commit(&mut self) {
        let i = self.next;
        self.next += 1;
        let id = RecordId::new(format!("e{i}")).unwrap();
        self.s
            .commit(&Commit::at(i).write(Write::InsertEntry {
                id: id.clone(),
                parent: self.parent.take(),
                kind: self.kind.clone(),
                payload: self.payload.clone(),
            }))
            .unwrap();
        self.parent = Some(id);
    }
}

fn main() {
    let n: u64 = std::env::var("CUSTOS_BENCH_COMMITS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4000);
    let base = std::env::var("CUSTOS_BENCH_DIR")
        .unwrap_or_else(|_| env!("CARGO_TARGET_TMPDIR").to_owned());
    std::fs::create_dir_all(&base).unwrap();
    let dir = tempfile::tempdir_in(&base).unwrap();
    println!(
        "storage bench: {n} single-entry commits each, in {}",
        dir.path().display()
    );
    // Both handles stay open and the loops alternate in blocks of BLOCK
    // commits, so that the (shared, noisy) disk conditions hit both alike.
    const BLOCK: u64 = 25;
    let mut raw = Raw::open(&dir.path().join("raw.db"));
    let mut ours = Ours::open(&dir.path().join("store.db"));
    for _ in 0..BLOCK {
        raw.commit();
        ours.commit();
    }
    let (mut t_raw, mut t_ours) = (Duration::ZERO, Duration::ZERO);
    let mut block_ratios = Vec::new();
    for _ in 0..n / BLOCK {
        let t = Instant::now();
        for _ in 0..BLOCK {
            raw.commit();
        }
        let r = t.elapsed();
        let t = Instant::now();
        for _ in 0..BLOCK {
            ours.commit();
        }
        let o = t.elapsed();
        t_raw += r;
        t_ours += o;
        block_ratios.push(r.as_secs_f64() / o.as_secs_f64());
    }
    ours.s.close().unwrap();
    block_ratios.sort_by(f64::total_cmp);
    let median = block_ratios[block_ratios.len() / 2];
    let done = (n / BLOCK * BLOCK) as f64;
    let raw_rate = done / t_raw.as_secs_f64();
    let ours_rate = done / t_ours.as_secs_f64();
    println!("raw rusqlite insert loop (BEGIN IMMEDIATE, WAL, synchronous=FULL): {raw_rate:.0} commits/s");
    println!("SqliteStorage::commit (one InsertEntry, lease renewed):            {ours_rate:.0} commits/s");
    println!(
        "ratio SqliteStorage / raw: {:.2} overall, {median:.2} median of {} interleaved blocks (goal >= 0.80)",
        ours_rate / raw_rate,
        block_ratios.len()
    );
}
