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

use custos_conformance::bench::{interleave, load_principals, PRINCIPALS};
use custos_core::catalogue::access::Access;
use custos_postgres::catalogue::PgCatalogue;
use custos_postgres::Target;
use custos_testkit::pg_cluster::{unique_schema, Cluster};

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
    let digests = load_principals(&c);
    println!(
        "catalogue and access writes while loading: {:.1} round trips each ({} writes: a reservation, the owner, {} invitations)",
        (custos_postgres::conn::round_trips() - before) as f64 / (PRINCIPALS + 1) as f64,
        PRINCIPALS + 1,
        PRINCIPALS - 1
    );
    let mut raw = target.connect().unwrap();
    let st = raw
        .prepare(
            "SELECT digest, kind, principal_id, state, issued_at_ms, claimed_at_ms, last_resumed_ms,
                    expires_at_ms, issued_by
             FROM access_credentials WHERE digest = $1 AND kind = $2",
        )
        .unwrap();
    let hex: Vec<String> = digests.iter().map(|d| d.sha().hex()).collect();
    let m = interleave(
        n,
        |i| {
            let row = raw.query_opt(&st, &[&hex[i], &"bearer"]).unwrap();
            black_box(row).is_some()
        },
        |i| black_box(c.authenticate(&digests[i], 5).unwrap()).is_some(),
        custos_postgres::conn::round_trips,
    );
    let (raw_us, ours_us) = (m.raw_us(), m.ours_us());
    println!("raw prepared SELECT … WHERE digest = $1 AND kind = $2 (primary key, 1 round trip): {raw_us:.1} µs/call");
    println!(
        "PgCatalogue::authenticate ({:.1} round trips):                                        {ours_us:.1} µs/call",
        m.metered as f64 / m.calls()
    );
    println!("{}", m.ratio_line());
}
