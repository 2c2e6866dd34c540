//! Differential: random request sequences applied to the memory catalogue,
//! the SQLite catalogue and the PostgreSQL catalogue answer alike — every
//! outcome or refusal, and after every step every read (revision, both
//! pages, recent folders, moves, deletion marks, each session's
//! registration, custody, deletion and delegate, each key, workspace
//! default and spawner). `CATALOGUE_DIFF_CASES` sets the case count.

#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_core::catalogue::custody::{MoveOp, Peer};
use custos_core::catalogue::{Catalogue, Creation, MemoryCatalogue, Request, Visibility};
use custos_postgres::catalogue::PgCatalogue;
use custos_postgres::Target;
use custos_sqlite::catalogue::SqliteCatalogue;
use custos_testkit::pg_cluster::{shared, unique_schema};
use proptest::prelude::*;

const IDS: [&str; 5] = ["s0", "s1", "s2", "s3", "bad id"];
const KEYS: [&str; 3] = ["k0", "k1", "k2"];
const WORKSPACES: [&str; 3] = ["/w", "/v", "proj"];
const SPAWNERS: [&str; 3] = ["sp1", "sp2", "Bad"];
const PARENTS: [&str; 3] = ["p0", "p1", "p2"];
const OPS: [&str; 2] = ["o1", "o2"];
const PEERS: [&str; 2] = ["pa", "pb"];
const PROMPTS: [&str; 3] = [
    "  \n ",
    "fix the bug\nand more",
    "word word word word word word word word word word word word word word",
];

/// Mostly well-formed ids (the last of [`IDS`] breaks the grammar).
fn id() -> impl Strategy<Value = String> {
    prop_oneof![
        12 => prop::sample::select(&IDS[..4]).prop_map(str::to_owned),
        1 => Just(IDS[4].to_owned()),
    ]
}

fn creation() -> impl Strategy<Value = Creation> {
    (
        prop::sample::select(&KEYS[..]),
        prop::sample::select(&["n", "n", "n", "m", ""][..]),
        0..4u8,
        prop::option::of(Just("fast".to_owned())),
    )
        .prop_map(|(key, name, shape, profile)| {
            let mut c = Creation::local(key, name, "/w");
            match shape {
                1 => c.workspace = "/v".into(),
                2 => {
                    c.executor = Some("exec-1".into());
                    c.workspace = "proj".into();
                }
                3 => {
                    c.pool = Some("pool-1".into());
                    c.workspace = "proj".into();
                }
                _ => {}
            }
            c.profile = profile;
            c
        })
}

fn op() -> impl Strategy<Value = MoveOp> {
    prop::sample::select(&OPS[..]).prop_map(|o| MoveOp::new(o).unwrap())
}

fn peer() -> impl Strategy<Value = Peer> {
    prop::sample::select(&PEERS[..]).prop_map(|p| Peer::new(p).unwrap())
}

fn request() -> impl Strategy<Value = Request> {
    let now = 0..1_000_000u64;
    prop_oneof![
        8 => (id(), creation(), now.clone()).prop_map(|(session_id, creation, now)| {
            Request::Reserve { session_id, creation, now }
        }),
        1 => id().prop_map(|session_id| Request::Confirm { session_id }),
        1 => (id(), prop::sample::select(&["x", "y", " "][..]))
            .prop_map(|(session_id, n)| Request::Rename { session_id, name: n.into() }),
        2 => (id(), any::<bool>()).prop_map(|(session_id, a)| Request::SetVisibility {
            session_id,
            visibility: if a { Visibility::Archived } else { Visibility::Active },
        }),
        1 => (id(), prop::option::of(prop::sample::select(&["fast", "Bad"][..])))
            .prop_map(|(session_id, p)| Request::SetProfile {
                session_id,
                profile: p.map(str::to_owned),
            }),
        1 => (id(), prop::sample::select(&["exec-1", "exec-2"][..]))
            .prop_map(|(session_id, e)| Request::SeedExecutor { session_id, executor: e.into() }),
        1 => (id(), prop::sample::select(&PROMPTS[..]))
            .prop_map(|(session_id, p)| Request::SeedSubtitle { session_id, prompt: p.into() }),
        2 => (prop::sample::select(&WORKSPACES[..]), id()).prop_map(|(w, session_id)| {
            Request::SetWorkspaceDefault { workspace: w.into(), session_id }
        }),
        2 => (0..12u8).prop_map(|i| Request::RememberFolder {
            path: format!("/f{i}"),
        }),
        1 => (0..14u64).prop_map(|id| Request::ForgetFolder { id }),
        2 => (id(), op(), peer()).prop_map(|(session_id, op, to)| Request::BeginMove {
            session_id,
            op,
            to,
        }),
        1 => (id(), op()).prop_map(|(session_id, op)| Request::FinishMove { session_id, op }),
        1 => (id(), op()).prop_map(|(session_id, op)| Request::AbortMove { session_id, op }),
        2 => (id(), creation(), op(), peer(), now.clone()).prop_map(
            |(session_id, creation, op, from, now)| Request::ImportSession {
                session_id,
                creation,
                op,
                from,
                now,
            }
        ),
        1 => id().prop_map(|session_id| Request::MarkDeleting { session_id }),
        1 => id().prop_map(|session_id| Request::UnmarkDeleting { session_id }),
        3 => (
            prop::sample::select(&SPAWNERS[..]),
            prop::sample::select(&PARENTS[..]),
            id(),
            now,
            0..4u32
        )
            .prop_map(|(sp, pa, session_id, now, limit)| Request::ClaimDelegate {
                spawner: sp.into(),
                parent_session: pa.into(),
                session_id,
                now,
                limit,
            }),
        2 => id().prop_map(|session_id| Request::Delete { session_id }),
    ]
}

/// Every read, rendered.
fn view<C: Catalogue>(c: &C) -> Vec<String> {
    let mut out = vec![
        format!("revision {:?}", c.revision()),
        format!("active {:?}", c.page(Visibility::Active, None, 100)),
        format!("archived {:?}", c.page(Visibility::Archived, None, 100)),
        format!(
            "active after s1 {:?}",
            c.page(Visibility::Active, Some("s1"), 1)
        ),
        format!("recent {:?}", c.recent_folders()),
        format!("moving {:?}", c.moving()),
        format!("deleting {:?}", c.deleting()),
    ];
    for id in IDS {
        out.push(format!("get {id} {:?}", c.get(id)));
        out.push(format!("custody {id} {:?}", c.custody(id)));
        out.push(format!("deletion {id} {:?}", c.deletion(id)));
        out.push(format!("delegate_of {id} {:?}", c.delegate_of(id)));
    }
    for k in KEYS {
        out.push(format!("key {k} {:?}", c.by_request_key(k)));
    }
    for w in WORKSPACES {
        out.push(format!("default {w} {:?}", c.workspace_default(w)));
    }
    for sp in SPAWNERS {
        out.push(format!("held {sp} {:?}", c.delegates_held(sp)));
        for pa in PARENTS {
            out.push(format!("pair {sp} {pa} {:?}", c.delegate_for(sp, pa)));
        }
    }
    out
}

fn cases() -> u32 {
    std::env::var("CATALOGUE_DIFF_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32)
}

fn run_case(reqs: &[Request], counts: &mut (u64, u64, u64)) -> Result<(), TestCaseError> {
    let mem = MemoryCatalogue::new();
    let sql = SqliteCatalogue::open_temp().unwrap();
    let target = Target::new(shared().unwrap().url(), unique_schema("diff"))
        .unwrap()
        .access_clock(custos_postgres::AccessClock::Caller);
    let pg = PgCatalogue::open(target).unwrap();
    for req in reqs {
        let a = mem.apply(req);
        let b = sql.apply(req);
        let c = pg.apply(req);
        prop_assert_eq!(&a, &b, "sqlite differs on {:?}", req);
        prop_assert_eq!(&a, &c, "postgres differs on {:?}", req);
        counts.1 += 1;
        if a.is_err() {
            counts.2 += 1;
        }
        let want = view(&mem);
        prop_assert_eq!(&want, &view(&sql), "sqlite reads differ after {:?}", req);
        prop_assert_eq!(&want, &view(&pg), "postgres reads differ after {:?}", req);
    }
    counts.0 += 1;
    Ok(())
}

#[test]
fn postgres_and_sqlite_answer_exactly_like_memory() {
    use proptest::test_runner::{Config, TestRunner};
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    let counts = std::cell::RefCell::new((0u64, 0u64, 0u64));
    let result = runner.run(&prop::collection::vec(request(), 1..40), |reqs| {
        run_case(&reqs, &mut counts.borrow_mut())
    });
    let (cases_run, applied, refused) = *counts.borrow();
    println!(
        "catalogue differential: {cases_run} cases passed ({} configured), {applied} requests compared ({refused} refused by all three)",
        cases()
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}
