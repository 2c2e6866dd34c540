//! Snapshot capture on a session of 1,000 versus 100,000 entries, through
//! `custos_core::snapshot::Reader` over `SqliteStorage`, with a physical
//! baseline measured in the same run on the same files: a raw rusqlite
//! connection reading the very same cells with indexed `SELECT`s in one
//! deferred transaction. Goal: capture cost independent of history
//! (100,000 / 1,000 ratio <= 1.5). No assertion: it prints.
//!
//! The session: a chain of entries (200-byte payloads) with a usage row
//! every 10 entries; registers `session/meta`, `config/*` (20 cells),
//! `strand/s0..s7` (JSON naming each strand's latest op) and `op/life/*`
//! (one lifecycle cell per 10 entries: this namespace grows with history).
//! The plan: `session/meta` exact, the `config` namespace, the eight
//! strands exact, and each strand's `latest` followed into `op/life/` —
//! 37 cells per capture. Both are the conformance crate's
//! (`custos_conformance::bench`), shared with custos-postgres's bench.
//!
//! `CUSTOS_BENCH_CAPTURES` sets the captures per size (default 3000);
//! `CUSTOS_BENCH_DIR` the directory (default: cargo's target tmp dir).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use custos_conformance::bench::{snapshot_plan as plan, write_snapshot_session};
use custos_core::lease::Owner;
use custos_core::snapshot::Reader;
use custos_core::storage::Storage;
use custos_sqlite::{Config, SqliteStorage};
use rusqlite::{params, Connection, OpenFlags, TransactionBehavior};

/// Writes a session of `entries` entries into a new file at `path`.
fn build(path: &Path, entries: usize) -> SqliteStorage {
    let s = SqliteStorage::open(Config::new(path, Owner::new("bench").unwrap())).unwrap();
    write_snapshot_session(&s, entries);
    s
}

/// The baseline: the same 37 cells read by a raw connection with indexed
/// SELECTs in one deferred transaction (keys known up front).
struct Raw {
    conn: Connection,
    keys: Vec<(String, String)>,
}

impl Raw {
    fn open(path: &Path, cells: &[(String, String)]) -> Self {
        let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        Raw {
            conn,
            keys: cells.to_vec(),
        }
    }

    fn read(&mut self) -> usize {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .unwrap();
        let _: i64 = tx
            .prepare_cached("SELECT next_seq FROM session WHERE singleton = 1")
            .unwrap()
            .query_row([], |r| r.get(0))
            .unwrap();
        let mut bytes = 0;
        {
            let mut st = tx
                .prepare_cached(
                    "SELECT value, seq FROM registers WHERE namespace = ?1 AND key = ?2",
                )
                .unwrap();
            for (n, k) in &self.keys {
                let v: Vec<u8> = st.query_row(params![n, k], |r| r.get(0)).unwrap();
                bytes += v.len();
            }
        }
        tx.commit().unwrap();
        bytes
    }
}

struct Run {
    ours: Duration,
    raw: Duration,
    cells: usize,
}

fn measure(s: &SqliteStorage, path: &Path, n: usize) -> Run {
    let plan = plan();
    let reader = Reader::new(s);
    let cut = reader.capture(&plan).unwrap();
    let cells: Vec<(String, String)> = cut
        .cells
        .iter()
        .map(|c| (c.namespace.as_str().to_owned(), c.key.as_str().to_owned()))
        .collect();
    let mut raw = Raw::open(path, &cells);
    // Warm both, then alternate blocks so disk and cache conditions hit both alike.
    for _ in 0..100 {
        reader.capture(&plan).unwrap();
        raw.read();
    }
    const BLOCK: usize = 50;
    let (mut t_ours, mut t_raw) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..n / BLOCK {
        let t = Instant::now();
        for _ in 0..BLOCK {
            std::hint::black_box(reader.capture(&plan).unwrap());
        }
        t_ours += t.elapsed();
        let t = Instant::now();
        for _ in 0..BLOCK {
            std::hint::black_box(raw.read());
        }
        t_raw += t.elapsed();
    }
    let done = (n / BLOCK * BLOCK) as u32;
    Run {
        ours: t_ours / done,
        raw: t_raw / done,
        cells: cut.cells.len(),
    }
}

fn main() {
    let n: usize = std::env::var("CUSTOS_BENCH_CAPTURES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let base = std::env::var("CUSTOS_BENCH_DIR")
        .unwrap_or_else(|_| env!("CARGO_TARGET_TMPDIR").to_owned());
    std::fs::create_dir_all(&base).unwrap();
    let dir = tempfile::tempdir_in(&base).unwrap();
    println!(
        "snapshot bench: {n} captures per session size, in {}",
        dir.path().display()
    );
    let small_path = dir.path().join("small.db");
    let large_path = dir.path().join("large.db");
    let t = Instant::now();
    let small = build(&small_path, 1_000);
    let large = build(&large_path, 100_000);
    println!("built both sessions in {:.1} s", t.elapsed().as_secs_f64());
    // Interleave the two sizes twice so drift hits both.
    let a1 = measure(&small, &small_path, n / 2);
    let b1 = measure(&large, &large_path, n / 2);
    let b2 = measure(&large, &large_path, n / 2);
    let a2 = measure(&small, &small_path, n / 2);
    let avg = |x: &Run, y: &Run| ((x.ours + y.ours) / 2, (x.raw + y.raw) / 2);
    let (small_ours, small_raw) = avg(&a1, &a2);
    let (large_ours, large_raw) = avg(&b1, &b2);
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "      1,000 entries: capture {:.1} us ({} cells); raw indexed SELECTs of the same cells {:.1} us; ratio {:.2}",
        us(small_ours),
        a1.cells,
        us(small_raw),
        us(small_ours) / us(small_raw)
    );
    println!(
        "    100,000 entries: capture {:.1} us ({} cells); raw indexed SELECTs of the same cells {:.1} us; ratio {:.2}",
        us(large_ours),
        b1.cells,
        us(large_raw),
        us(large_ours) / us(large_raw)
    );
    println!(
        "history ratio capture(100,000) / capture(1,000): {:.2} (goal <= 1.5); baseline's own: {:.2}",
        us(large_ours) / us(small_ours),
        us(large_raw) / us(small_raw)
    );
    small.close().unwrap();
    large.close().unwrap();
}
