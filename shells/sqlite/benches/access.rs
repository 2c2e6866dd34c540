//! `authenticate` through the `Access` port of `SqliteCatalogue` against a
//! raw indexed `SELECT … WHERE digest = ? AND kind = ?` on the same file, in
//! the same run: 1,000 principals with one bearer credential each, probed in
//! a shuffled order, the two loops alternating in chunks so that machine
//! noise hits both alike. No assertion: it prints µs per call and the ratio.
//!
//! The port does more than the raw probe: its one statement also joins the
//! principal row, and it adds the handle's lock, total decoding and the
//! core's pure read; both are one prepared statement with no transaction of
//! its own. `CUSTOS_BENCH_AUTH_CALLS` sets the calls per loop (default 20000);
//! `CUSTOS_BENCH_DIR` the directory (default: cargo's target tmp dir).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Instant;

use custos_conformance::bench::{interleave, load_principals, CHUNK, PRINCIPALS};
use custos_core::catalogue::access::Access;
use custos_sqlite::catalogue::SqliteCatalogue;
use rusqlite::{params, Connection};

fn main() {
    let n: usize = std::env::var("CUSTOS_BENCH_AUTH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let base = std::env::var("CUSTOS_BENCH_DIR")
        .unwrap_or_else(|_| env!("CARGO_TARGET_TMPDIR").to_owned());
    std::fs::create_dir_all(&base).unwrap();
    let dir = tempfile::tempdir_in(&base).unwrap();
    let path = dir.path().join("catalogue.db");
    let c = SqliteCatalogue::open(&path).unwrap();
    let t = Instant::now();
    let digests = load_principals(&c);
    println!(
        "access bench: {PRINCIPALS} principals / credentials loaded in {:.2} s; {n} calls per loop in chunks of {CHUNK}, in {}",
        t.elapsed().as_secs_f64(),
        dir.path().display()
    );
    let raw = Connection::open(&path).unwrap();
    let mut st = raw
        .prepare(
            "SELECT digest, kind, principal_id, state, issued_at_ms, claimed_at_ms, last_resumed_ms,
                    expires_at_ms, issued_by
             FROM access_credentials WHERE digest = ?1 AND kind = ?2",
        )
        .unwrap();
    let hex: Vec<String> = digests.iter().map(|d| d.sha().hex()).collect();
    // The probe order is a fixed shuffle, so neither loop walks the keys in order.
    let m = interleave(
        n,
        |i| {
            let row: Option<String> = st.query_row(params![hex[i], "bearer"], |r| r.get(2)).ok();
            black_box(row).is_some()
        },
        |i| black_box(c.authenticate(&digests[i], 5).unwrap()).is_some(),
        || 0,
    );
    let (raw_us, ours_us) = (m.raw_us(), m.ours_us());
    println!(
        "raw SELECT … WHERE digest = ? AND kind = ? (prepared, primary key):   {raw_us:.2} µs/call"
    );
    println!(
        "SqliteCatalogue::authenticate (credential ⋈ principal, decode, core):  {ours_us:.2} µs/call"
    );
    println!("{}", m.ratio_line());
}
