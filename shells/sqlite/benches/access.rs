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
use std::time::{Duration, Instant};

use custos_core::catalogue::access::{
    credential_digest, Access, AccessRequest, Digest, Enrollment, Role,
};
use custos_core::catalogue::{Catalogue, Creation, Request};
use custos_sqlite::catalogue::SqliteCatalogue;
use rusqlite::{params, Connection};

const PRINCIPALS: usize = 1000;
const CHUNK: usize = 250;

fn token(i: usize) -> String {
    format!("bench-token-{i}")
}

fn load(c: &SqliteCatalogue) -> Vec<Digest> {
    c.apply(&Request::Reserve {
        session_id: "s1".into(),
        creation: Creation::local("k-s1", "bench", "/w"),
        now: 1,
    })
    .unwrap();
    let mut out = Vec::with_capacity(PRINCIPALS);
    let d = credential_digest(token(0).as_bytes());
    c.apply_access(&AccessRequest::BootstrapOwner {
        principal: "owner".into(),
        name: Some("Owner".into()),
        digest: d,
        now_ms: 1,
    })
    .unwrap();
    out.push(d);
    for i in 1..PRINCIPALS {
        let d = credential_digest(token(i).as_bytes());
        c.apply_access(&AccessRequest::InviteMember {
            principal: format!("member-{i:04}"),
            name: Some(format!("Member {i}")),
            session_id: "s1".into(),
            role: Role::Observer,
            enrollment: Enrollment::Digest(d),
            now_ms: 2,
        })
        .unwrap();
        out.push(d);
    }
    out
}

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
    let digests = load(&c);
    println!(
        "access bench: {PRINCIPALS} principals / credentials loaded in {:.2} s; {n} calls per loop in chunks of {CHUNK}, in {}",
        t.elapsed().as_secs_f64(),
        dir.path().display()
    );
    // A fixed shuffle (an LCG), so neither loop walks the keys in order.
    let mut order: Vec<usize> = (0..PRINCIPALS).collect();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in (1..order.len()).rev() {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let j = usize::try_from(x >> 33).unwrap() % (i + 1);
        order.swap(i, j);
    }
    let raw = Connection::open(&path).unwrap();
    let mut st = raw
        .prepare(
            "SELECT digest, kind, principal_id, state, issued_at_ms, claimed_at_ms, last_resumed_ms,
                    expires_at_ms, issued_by
             FROM access_credentials WHERE digest = ?1 AND kind = ?2",
        )
        .unwrap();
    let hex: Vec<String> = digests.iter().map(|d| d.sha().hex()).collect();
    let mut k = 0usize;
    let mut next = || {
        k += 1;
        order[k % PRINCIPALS]
    };
    let (mut t_raw, mut t_ours) = (Duration::ZERO, Duration::ZERO);
    let mut ratios = Vec::new();
    let mut found = (0usize, 0usize);
    for round in 0..=n / CHUNK {
        let picks: Vec<usize> = (0..CHUNK).map(|_| next()).collect();
        let t = Instant::now();
        for &i in &picks {
            let row: Option<String> = st.query_row(params![hex[i], "bearer"], |r| r.get(2)).ok();
            found.0 += usize::from(black_box(row).is_some());
        }
        let r = t.elapsed();
        let t = Instant::now();
        for &i in &picks {
            let who = c.authenticate(&digests[i], 5).unwrap();
            found.1 += usize::from(black_box(who).is_some());
        }
        let o = t.elapsed();
        if round == 0 {
            continue; // warm-up
        }
        t_raw += r;
        t_ours += o;
        ratios.push(o.as_secs_f64() / r.as_secs_f64());
    }
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    let calls = (ratios.len() * CHUNK) as f64;
    let raw_us = t_raw.as_secs_f64() * 1e6 / calls;
    let ours_us = t_ours.as_secs_f64() * 1e6 / calls;
    println!(
        "raw SELECT … WHERE digest = ? AND kind = ? (prepared, primary key):   {raw_us:.2} µs/call"
    );
    println!(
        "SqliteCatalogue::authenticate (credential ⋈ principal, decode, core):  {ours_us:.2} µs/call"
    );
    println!(
        "ratio authenticate / raw: {:.2} overall, {median:.2} median of {} interleaved chunks (goal ≤ 2); {} + {} lookups found",
        ours_us / raw_us,
        ratios.len(),
        found.0,
        found.1
    );
}
