//! `cargo bench -p custos-postgres --bench access`: `authenticate` through
//! the `Access` port of `PgCatalogue` against a raw prepared
//! `SELECT … WHERE digest = $1 AND kind = $2` (the credential's primary
//! key, one statement on its own) on the same private server, in the same
//! run: 1,000 principals with one bearer credential each, probed in a
//! shuffled order, the two loops alternating in chunks so that machine
//! noise hits both alike. Prints µs per call, round trips per call
//! (`custos_postgres::conn::round_trips`) and the ratio; asserts nothing
//! about time. `CUSTOS_BENCH_AUTH_CALLS` sets the calls per loop (default
//! 10000).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use custos_core::catalogue::access::{
    credential_digest, Access, AccessRequest, Digest, Enrollment, Role,
};
use custos_core::catalogue::{Catalogue, Creation, Request};
use custos_postgres::catalogue::PgCatalogue;
use custos_postgres::cluster::{unique_schema, Cluster};
use custos_postgres::Target;

const PRINCIPALS: usize = 1000;
const CHUNK: usize = 250;

fn load(c: &PgCatalogue) -> Vec<Digest> {
    c.apply(&Request::Reserve {
        session_id: "s1".into(),
        creation: Creation::local("k-s1", "bench", "/w"),
        now: 1,
    })
    .unwrap();
    let mut out = Vec::with_capacity(PRINCIPALS);
    let d = credential_digest(b"bench-token-0");
    c.apply_access(&AccessRequest::BootstrapOwner {
        principal: "owner".into(),
        name: Some("Owner".into()),
        digest: d,
        now_ms: 1,
    })
    .unwrap();
    out.push(d);
    for i in 1..PRINCIPALS {
        let d = credential_digest(format!("bench-token-{i}").as_bytes());
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
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n: usize = std::env::var("CUSTOS_BENCH_AUTH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let cluster = Cluster::start().unwrap();
    let schema = unique_schema("auth");
    let target = Target::new(cluster.url(), &schema).unwrap();
    let c = PgCatalogue::open(target.clone()).unwrap();
    let before = custos_postgres::conn::round_trips();
    let digests = load(&c);
    println!(
        "catalogue and access writes while loading: {:.1} round trips each ({} writes: a reservation, the owner, {} invitations)",
        (custos_postgres::conn::round_trips() - before) as f64 / (PRINCIPALS + 1) as f64,
        PRINCIPALS + 1,
        PRINCIPALS - 1
    );
    let mut order: Vec<usize> = (0..PRINCIPALS).collect();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in (1..order.len()).rev() {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let j = usize::try_from(x >> 33).unwrap() % (i + 1);
        order.swap(i, j);
    }
    let mut raw = target.connect().unwrap();
    let st = raw
        .prepare(
            "SELECT digest, kind, principal_id, state, issued_at_ms, claimed_at_ms, last_resumed_ms,
                    expires_at_ms, issued_by
             FROM access_credentials WHERE digest = $1 AND kind = $2",
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
    let mut trips = 0u64;
    for round in 0..=n / CHUNK {
        let picks: Vec<usize> = (0..CHUNK).map(|_| next()).collect();
        let t = Instant::now();
        for &i in &picks {
            let row = raw.query_opt(&st, &[&hex[i], &"bearer"]).unwrap();
            found.0 += usize::from(black_box(row).is_some());
        }
        let r = t.elapsed();
        let before = custos_postgres::conn::round_trips();
        let t = Instant::now();
        for &i in &picks {
            let who = c.authenticate(&digests[i], 5).unwrap();
            found.1 += usize::from(black_box(who).is_some());
        }
        let o = t.elapsed();
        if round == 0 {
            continue; // warm-up
        }
        trips += custos_postgres::conn::round_trips() - before;
        t_raw += r;
        t_ours += o;
        ratios.push(o.as_secs_f64() / r.as_secs_f64());
    }
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    let calls = (ratios.len() * CHUNK) as f64;
    let raw_us = t_raw.as_secs_f64() * 1e6 / calls;
    let ours_us = t_ours.as_secs_f64() * 1e6 / calls;
    println!("raw prepared SELECT … WHERE digest = $1 AND kind = $2 (primary key, 1 round trip): {raw_us:.1} µs/call");
    println!(
        "PgCatalogue::authenticate ({:.1} round trips):                                        {ours_us:.1} µs/call",
        trips as f64 / calls
    );
    println!(
        "ratio authenticate / raw: {:.2} overall, {median:.2} median of {} interleaved chunks (goal ≤ 2); {} + {} lookups found",
        ours_us / raw_us,
        ratios.len(),
        found.0,
        found.1
    );
}
